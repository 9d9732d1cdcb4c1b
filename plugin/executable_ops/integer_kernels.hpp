#pragma once
// Internal: the integer-only mode's arithmetic after oneDNN's s32
// accumulators (composer/integer_plan.hpp), and its average pooling.
// Vectorized over channels (OpenMP simd, with AVX-512 clones the CPU picks at
// load time), rows shared between the inference's OpenMP threads.

#include <cstdint>
#include <vector>

#include "composer/integer_plan.hpp"

namespace qfuse::plugin {

// dst[r, c] = plan(acc[r, c], residual[r, c]) over rows of plan.channels
// channels, channel innermost. `residual`: the residual's raw codes in the
// same layout (u8 or s8 per plan.residual_type), or null when the plan has
// none. `dst`: u8 / s8 codes, or f32 when the plan dequantizes.
class IntegerRequantizer {
 public:
  explicit IntegerRequantizer(const composer::IntegerPlan& plan);
  void run(const std::int32_t* acc, std::int64_t rows, const void* residual, void* dst) const;

  struct Stage {
    // Per channel, as int64 lanes: M0, offset K, residual multiplier R,
    // 2^(n-1) - 1, n (>= 1), clamp bounds.
    std::vector<std::int64_t> m, k, r, half, n, lo, hi;
    bool residual = false;
  };
  // The parameters repeated over the rows of one block (block / channels rows).
  struct Tiled {
    std::int64_t block = 1;
    std::vector<std::int64_t> bias;
    std::vector<Stage> stages;
    std::vector<float> dq_scale, dq_shift, dq_lo, dq_hi;
    float dq_residual = 0.0f;
  };

 private:
  std::int64_t channels_;
  composer::DataType dst_type_;
  composer::DataType residual_type_;
  bool has_residual_;
  std::vector<std::int64_t> bias_;
  std::vector<Stage> stages_;
  std::vector<float> dq_scale_, dq_shift_, dq_lo_, dq_hi_;
  float dq_residual_ = 0.0f;
  bool dequantize_ = false;
  Tiled tiled_;
};

// Average pooling of 8-bit codes in integer arithmetic (2D, channels last):
// the window's int32 sum times a fixed-point out_scale / count (one per count
// a window can have), plus out_shift in fixed point, rounded half to even and
// saturated to the output type.
class IntegerAvgPool {
 public:
  struct Geometry {
    std::int64_t n = 1, c = 1, ih = 1, iw = 1, oh = 1, ow = 1;
    std::int64_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0;
    bool exclude_pad = true;
    bool src_signed = false, dst_signed = false;
  };
  IntegerAvgPool(const Geometry& g, float out_scale, float out_shift, double eta);
  void run(const void* src, void* dst) const;
  double relative_error() const { return relative_error_; }
  int max_multiplier_bits() const { return bits_; }

 private:
  Geometry g_;
  // By count of cells summed (index count - 1).
  std::vector<std::int64_t> m_, k_, half_, n_;
  double relative_error_ = 0.0;
  int bits_ = 0;
};

}  // namespace qfuse::plugin
