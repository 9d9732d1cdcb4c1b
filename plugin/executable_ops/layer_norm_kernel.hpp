#pragma once
// Internal: LayerNorm's row kernel (layer_norm_op.cpp), for the ops and
// their tests.

#include <cstdint>

namespace qfuse::plugin {

// y = (x - mean) / sqrt(var + eps) * scale + bias over one row of n values:
// the AVX-512 loop where the CPU has it (sums in f32), else the scalar one.
void normalize_row(const float* x, float* y, std::int64_t n, const float* scale,
                   const float* bias, float eps);
// The scalar loop alone (sums in double).
void normalize_row_scalar(const float* x, float* y, std::int64_t n, const float* scale,
                          const float* bias, float eps);

}  // namespace qfuse::plugin
