// LayerNorm over the last axis, with qfuse's own row kernel, and the two
// nodes that quantize its output in the same pass over the rows
// (graph/passes/fold_quantize_into_layer_norm.cpp), each a block of whole
// rows (about 4096 values, in L1) at a time:
//
//   LayerNorm                 y
//   LayerNormQuantize         y, then the block's codes (CodesQuantizer: the
//                             unfused Quantize's loop)
//   LayerNormDynamicQuantize  y and the block's minimum and maximum, then
//                             composer::dynamic_grid and the codes of y (read
//                             back from cache; DynamicQuantize reads its
//                             input twice)
//
// Per row: mean = sum(x) / C; var = sum((x - mean)^2) / C (two passes, so
// no cancellation; sums in f32 with AVX-512, in double without); y = (x -
// mean) * (1 / sqrt(var + eps)) * scale + bias (one rounding in the fused
// multiply-add). All three nodes normalize with this one kernel, so the
// codes a fused node writes are the quantizer's own function of the very y
// the unfused LayerNorm writes. oneDNN 2.6's layer normalization has no int8
// destination or output scale, so it could write neither the codes nor the
// range.

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <utility>

#include "composer/fake_quantize_formula.hpp"
#include "plugin/executable_ops/avx512_math.hpp"
#include "plugin/executable_ops/layer_norm_kernel.hpp"
#include "plugin/executable_ops/ops.hpp"
#include "plugin/executable_ops/quantize_spans.hpp"
#include "plugin/parallel.hpp"

#if defined(QFUSE_AVX512_KERNELS)
#include <immintrin.h>
#endif

namespace qfuse::plugin {

void normalize_row_scalar(const float* x, float* y, std::int64_t n, const float* scale,
                          const float* bias, float eps) {
  double sum = 0.0;
  for (std::int64_t i = 0; i < n; ++i) sum += x[i];
  const auto mean = static_cast<float>(sum / static_cast<double>(n));
  double squares = 0.0;
  for (std::int64_t i = 0; i < n; ++i) {
    const double d = x[i] - mean;
    squares += d * d;
  }
  const auto var = static_cast<float>(squares / static_cast<double>(n));
  const float inv = 1.0f / std::sqrt(var + eps);
  for (std::int64_t i = 0; i < n; ++i) y[i] = std::fma((x[i] - mean) * inv, scale[i], bias[i]);
}

namespace {

#if defined(QFUSE_AVX512_KERNELS)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
// The sum of 16 lanes each of four accumulators.
__attribute__((target("avx512f"))) inline float lanes_sum(__m512 a, __m512 b, __m512 c, __m512 d) {
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a, b), _mm512_add_ps(c, d)));
}

// One row, sixteen values per step: the mean, the variance about it, then y.
// Each sum has four accumulators (a BERT row is 48 steps; one accumulator
// would wait on every add).
__attribute__((target("avx512f"))) void normalize_row_avx512(const float* x, float* y,
                                                             std::int64_t n, const float* scale,
                                                             const float* bias, float eps) {
  const float count = static_cast<float>(n);
  __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  std::int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    s0 = _mm512_add_ps(s0, _mm512_loadu_ps(x + i));
    s1 = _mm512_add_ps(s1, _mm512_loadu_ps(x + i + 16));
    s2 = _mm512_add_ps(s2, _mm512_loadu_ps(x + i + 32));
    s3 = _mm512_add_ps(s3, _mm512_loadu_ps(x + i + 48));
  }
  for (; i < n; i += 16) s0 = _mm512_add_ps(s0, _mm512_maskz_loadu_ps(first_lanes(n - i), x + i));
  const float mean = lanes_sum(s0, s1, s2, s3) / count;
  const __m512 vmean = _mm512_set1_ps(mean);
  s0 = s1 = s2 = s3 = _mm512_setzero_ps();
  for (i = 0; i + 64 <= n; i += 64) {
    const __m512 d0 = _mm512_sub_ps(_mm512_loadu_ps(x + i), vmean);
    const __m512 d1 = _mm512_sub_ps(_mm512_loadu_ps(x + i + 16), vmean);
    const __m512 d2 = _mm512_sub_ps(_mm512_loadu_ps(x + i + 32), vmean);
    const __m512 d3 = _mm512_sub_ps(_mm512_loadu_ps(x + i + 48), vmean);
    s0 = _mm512_fmadd_ps(d0, d0, s0);
    s1 = _mm512_fmadd_ps(d1, d1, s1);
    s2 = _mm512_fmadd_ps(d2, d2, s2);
    s3 = _mm512_fmadd_ps(d3, d3, s3);
  }
  for (; i < n; i += 16) {
    const __mmask16 m = first_lanes(n - i);
    const __m512 d = _mm512_maskz_sub_ps(m, _mm512_maskz_loadu_ps(m, x + i), vmean);
    s0 = _mm512_fmadd_ps(d, d, s0);
  }
  const float var = lanes_sum(s0, s1, s2, s3) / count;
  const __m512 vinv = _mm512_set1_ps(1.0f / std::sqrt(var + eps));
  for (i = 0; i < n; i += 16) {
    const __mmask16 m = first_lanes(n - i);
    const __m512 d = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), vmean), vinv);
    const __m512 v = _mm512_fmadd_ps(d, _mm512_maskz_loadu_ps(m, scale + i),
                                     _mm512_maskz_loadu_ps(m, bias + i));
    _mm512_mask_storeu_ps(y + i, m, v);
  }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

}  // namespace

void normalize_row(const float* x, float* y, std::int64_t n, const float* scale,
                   const float* bias, float eps) {
#if defined(QFUSE_AVX512_KERNELS)
  if (has_avx512()) {
    normalize_row_avx512(x, y, n, scale, bias, eps);
    return;
  }
#endif
  normalize_row_scalar(x, y, n, scale, bias, eps);
}

namespace {

using graph::Node;
using graph::OpKind;

class LayerNormOp final : public ExecutableOp {
 public:
  LayerNormOp(const graph::Graph& g, const Node& node) : ExecutableOp(node) {
    const Shape& x = g.value(node.inputs[0]).shape;
    cols_ = x.back();
    rows_ = element_count(x) / cols_;
    if (node.kind == OpKind::LayerNormQuantize) {
      const auto& a = node.attr<graph::LayerNormQuantizeAttrs>();
      eps_ = a.epsilon;
      quantize_.emplace(a.quantize);
    } else {
      eps_ = node.attr<graph::LayerNormAttrs>().epsilon;
    }
  }

  void execute(ExecContext& ctx) const override {
    const float* x = ctx.in(node().inputs[0]).data<float>().data();
    const float* scale = ctx.in(node().inputs[1]).data<float>().data();
    const float* bias = ctx.in(node().inputs[2]).data<float>().data();
    float* y = ctx.out(node().outputs[0]).data<float>().data();
    const bool parallel = rows_ * cols_ >= kParallelFrom;
    // Blocks of whole rows, about kBlock values each (the rows of a small
    // encoder together, so that a block's range and codes are one call).
    const std::int64_t per_block = std::max<std::int64_t>(1, kBlock / cols_);
    const std::int64_t blocks = (rows_ + per_block - 1) / per_block;
    // Normalizes block b's rows; returns its first value and value count.
    const auto normalize = [&](std::int64_t b) {
      const std::int64_t first = b * per_block, count = std::min(per_block, rows_ - first);
      for (std::int64_t r = first; r < first + count; ++r) {
        normalize_row(x + r * cols_, y + r * cols_, cols_, scale, bias, eps_);
      }
      return std::pair{first * cols_, count * cols_};
    };
    switch (node().kind) {
      case OpKind::LayerNormQuantize: {
        Tensor& codes = ctx.out(node().outputs[1]);
        const auto each_block = [&](auto* c) {
          parallel_for(parallel, blocks, [&](std::int64_t b) {
            const auto [at, n] = normalize(b);
            (*quantize_)(y + at, c + at, n);
          });
        };
        if (quantize_->out_signed()) {
          each_block(codes.data<std::int8_t>().data());
        } else {
          each_block(codes.data<std::uint8_t>().data());
        }
        return;
      }
      case OpKind::LayerNormDynamicQuantize: {
        float lo = std::numeric_limits<float>::infinity(), hi = -lo;
        const auto block_range = [&](std::int64_t b, float& a, float& c) {
          const auto [at, n] = normalize(b);
          const auto [ba, bc] = min_max_span(y + at, n);
          a = std::min(a, ba);
          c = std::max(c, bc);
        };
        if (parallel) {
#pragma omp parallel for schedule(static) reduction(min : lo) reduction(max : hi)
          for (std::int64_t b = 0; b < blocks; ++b) block_range(b, lo, hi);
        } else {
          for (std::int64_t b = 0; b < blocks; ++b) block_range(b, lo, hi);
        }
        const composer::DynamicGrid grid = composer::dynamic_grid(lo, hi);
        auto* codes = ctx.out(node().outputs[1]).data<std::uint8_t>().data();
        parallel_for(parallel, blocks, [&](std::int64_t b) {
          const std::int64_t at = b * per_block * cols_;
          const std::int64_t n = std::min(per_block, rows_ - b * per_block) * cols_;
          quantize_linear_span(y + at, codes + at, n, grid.scale, grid.zero_point);
        });
        ctx.out(node().outputs[2]).data<float>()[0] = grid.scale;
        ctx.out(node().outputs[3]).data<std::uint8_t>()[0] =
            static_cast<std::uint8_t>(grid.zero_point);
        return;
      }
      default: parallel_for(parallel, blocks, normalize); return;
    }
  }

  std::string implementation() const override {
    switch (node().kind) {
      case OpKind::LayerNormQuantize: return "qfuse:layer_norm_quantize";
      case OpKind::LayerNormDynamicQuantize: return "qfuse:layer_norm_dynamic_quantize";
      default: return "qfuse:layer_norm";
    }
  }

 private:
  // Elements from which the blocks are shared among the request's threads.
  static constexpr std::int64_t kParallelFrom = 16384;
  // Values per block of rows (16 KB of f32: in L1 while quantized).
  static constexpr std::int64_t kBlock = 4096;

  std::int64_t rows_ = 1, cols_ = 1;
  float eps_ = 1e-5f;
  std::optional<CodesQuantizer> quantize_;  // LayerNormQuantize's
};

}  // namespace

// Plain buffers, or channels-last ones whose spatial dims are all 1 (the
// same bytes: the layout plan stores such a value either way).
std::unique_ptr<ExecutableOp> make_layer_norm(const OpBuild& b) {
  const auto rows_in_order = [&](graph::ValueId v) {
    const Shape& s = b.graph.value(v).shape;
    return b.layout(v) == Layout::plain ||
           (s.size() >= 2 && std::all_of(s.begin() + 2, s.end(), [](std::int64_t d) { return d == 1; }));
  };
  if (!std::all_of(b.node.inputs.begin(), b.node.inputs.end(), rows_in_order) ||
      !std::all_of(b.node.outputs.begin(), b.node.outputs.end(), rows_in_order)) {
    return nullptr;
  }
  return std::make_unique<LayerNormOp>(b.graph, b.node);
}

}  // namespace qfuse::plugin
