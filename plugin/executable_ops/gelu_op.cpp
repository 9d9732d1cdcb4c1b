// qfuse's erf GELU (gelu_kernel.hpp) and the two nodes that quantize its
// output as it is written (graph/passes/fold_quantize_into_gelu.cpp), in
// blocks of 8192 values (32 KB of f32, in cache while quantized):
//
//   GeluQuantize         y, then the block's codes (CodesQuantizer: the
//                        unfused Quantize's loop)
//   GeluDynamicQuantize  y and its minimum and maximum, then
//                        composer::dynamic_grid and y's codes (read back from
//                        cache; DynamicQuantize reads its input twice)
//
// A transformer's feed-forward block quantizes GELU of its first matmul for
// the second; with oneDNN's gelu_erf post-op in that matmul, GELU took two
// thirds of the layer's time at a hidden size of 64.

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numbers>
#include <optional>
#include <tuple>

#include "composer/fake_quantize_formula.hpp"
#include "plugin/executable_ops/avx512_math.hpp"
#include "plugin/executable_ops/gelu_kernel.hpp"
#include "plugin/executable_ops/ops.hpp"
#include "plugin/executable_ops/quantize_spans.hpp"
#include "plugin/parallel.hpp"

#if defined(QFUSE_AVX512_KERNELS)
#include <immintrin.h>
#endif

namespace qfuse::plugin {
namespace {

constexpr int kTailIntervals = 16;
constexpr int kTailDegree = 5;
constexpr float kTailEnd = 6.0f;                   // Q's domain [0, kTailEnd)
constexpr float kTailPerUnit = kTailIntervals / kTailEnd;  // intervals per unit of t

// coefficient[k][i]: u^k's on interval i, for Q(t) at t = (i + u) * kTailEnd / kTailIntervals.
struct TailTable {
  alignas(64) float coefficient[kTailDegree + 1][kTailIntervals];

  TailTable() {
    constexpr int kNodes = kTailDegree + 1;
    const double width = static_cast<double>(kTailEnd) / kTailIntervals;
    for (int i = 0; i < kTailIntervals; ++i) {
      // The Vandermonde system of the interval's Chebyshev nodes in u, solved
      // by Gauss-Jordan elimination with partial pivoting: row r is
      // [1, u_r, ..., u_r^5 | Q(t_r)].
      std::array<std::array<double, kNodes + 1>, kNodes> a{};
      for (int r = 0; r < kNodes; ++r) {
        const double u = 0.5 - 0.5 * std::cos(std::numbers::pi * (2 * r + 1) / (2.0 * kNodes));
        double power = 1.0;
        for (int k = 0; k < kNodes; ++k, power *= u) a[r][k] = power;
        a[r][kNodes] = 0.5 * std::erfc((i + u) * width / std::numbers::sqrt2);
      }
      for (int col = 0; col < kNodes; ++col) {
        int pivot = col;
        for (int r = col + 1; r < kNodes; ++r) {
          if (std::fabs(a[r][col]) > std::fabs(a[pivot][col])) pivot = r;
        }
        std::swap(a[col], a[pivot]);
        for (int r = 0; r < kNodes; ++r) {
          if (r == col) continue;
          const double f = a[r][col] / a[col][col];
          for (int k = col; k <= kNodes; ++k) a[r][k] -= f * a[col][k];
        }
      }
      for (int k = 0; k < kNodes; ++k) {
        coefficient[k][i] = static_cast<float>(a[k][kNodes] / a[k][k]);
      }
    }
  }
};

const TailTable& tail_table() {
  static const TailTable table;
  return table;
}

// The vector min / max's rule, lane by lane: the second operand unless the
// first compares below (above) it, so a NaN in x gives what the AVX-512 loop
// gives.
float min_like_vector(float a, float b) { return a < b ? a : b; }
float max_like_vector(float a, float b) { return a > b ? a : b; }

float gelu_scalar(float x, const TailTable& t) {
  const float a = std::fabs(x);
  const float s = min_like_vector(a * kTailPerUnit, static_cast<float>(kTailIntervals));
  const float f = min_like_vector(std::floor(s), static_cast<float>(kTailIntervals - 1));
  const float u = s - f;
  const auto i = static_cast<int>(f);
  float q = t.coefficient[kTailDegree][i];
  for (int k = kTailDegree - 1; k >= 0; --k) q = std::fma(q, u, t.coefficient[k][i]);
  return std::fma(-a, q, max_like_vector(x, 0.0f));
}

#if defined(QFUSE_AVX512_KERNELS)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
__attribute__((target("avx512f"), always_inline)) inline __m512 gelu_avx512(
    __m512 x, const __m512 (&c)[kTailDegree + 1]) {
  const __m512 a = _mm512_abs_ps(x);
  const __m512 s = _mm512_min_ps(_mm512_mul_ps(a, _mm512_set1_ps(kTailPerUnit)),
                                 _mm512_set1_ps(static_cast<float>(kTailIntervals)));
  const __m512 f =
      _mm512_min_ps(_mm512_roundscale_ps(s, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC),
                    _mm512_set1_ps(static_cast<float>(kTailIntervals - 1)));
  const __m512 u = _mm512_sub_ps(s, f);
  const __m512i i = _mm512_cvttps_epi32(f);
  __m512 q = _mm512_permutexvar_ps(i, c[kTailDegree]);
  for (int k = kTailDegree - 1; k >= 0; --k) {
    q = _mm512_fmadd_ps(q, u, _mm512_permutexvar_ps(i, c[k]));
  }
  return _mm512_fnmadd_ps(a, q, _mm512_max_ps(x, _mm512_setzero_ps()));
}

// Sixteen values a step; a NaN y is left out of the range (the vector min /
// max return their second operand then), as min_max_span leaves it out.
__attribute__((target("avx512f"))) std::pair<float, float> gelu_erf_avx512(const float* x,
                                                                          float* y,
                                                                          std::int64_t n) {
  const TailTable& t = tail_table();
  __m512 c[kTailDegree + 1];
  for (int k = 0; k <= kTailDegree; ++k) c[k] = _mm512_load_ps(t.coefficient[k]);
  __m512 lo = _mm512_set1_ps(std::numeric_limits<float>::infinity());
  __m512 hi = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (std::int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = first_lanes(n - i);
    const __m512 v = gelu_avx512(_mm512_maskz_loadu_ps(m, x + i), c);
    lo = _mm512_mask_min_ps(lo, m, v, lo);
    hi = _mm512_mask_max_ps(hi, m, v, hi);
    _mm512_mask_storeu_ps(y + i, m, v);
  }
  return {_mm512_reduce_min_ps(lo), _mm512_reduce_max_ps(hi)};
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

}  // namespace

std::pair<float, float> gelu_erf_span_scalar(const float* x, float* y, std::int64_t n) {
  const TailTable& t = tail_table();
  float lo = std::numeric_limits<float>::infinity(), hi = -lo;
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = gelu_scalar(x[i], t);
    y[i] = v;
    lo = min_like_vector(v, lo);
    hi = max_like_vector(v, hi);
  }
  return {lo, hi};
}

std::pair<float, float> gelu_erf_span(const float* x, float* y, std::int64_t n) {
#if defined(QFUSE_AVX512_KERNELS)
  if (has_avx512()) return gelu_erf_avx512(x, y, n);
#endif
  return gelu_erf_span_scalar(x, y, n);
}

namespace {

using graph::OpKind;

class GeluQuantizeOp final : public ExecutableOp {
 public:
  GeluQuantizeOp(const graph::Graph& g, const graph::Node& node)
      : ExecutableOp(node),
        y_read_(!g.consumers(node.outputs[0]).empty() || g.is_graph_output(node.outputs[0])) {
    if (node.kind == OpKind::GeluQuantize) quantize_.emplace(node.attr<graph::QuantizeAttrs>());
  }

  void execute(ExecContext& ctx) const override {
    const Tensor& in = ctx.in(node().inputs[0]);
    const float* x = in.data<float>().data();
    float* y = ctx.out(node().outputs[0]).data<float>().data();
    const std::int64_t n = in.size();
    const std::int64_t chunks = (n + kChunk - 1) / kChunk;
    const bool parallel = n >= kParallelFrom;
    const auto count = [n](std::int64_t k) { return std::min(kChunk, n - k * kChunk); };
    if (quantize_) {
      const auto each_block = [&](auto* codes) {
        parallel_for(parallel, chunks, [&](std::int64_t k) {
          // y in a block on the stack when nothing reads it: one pass less
          // through memory for a tensor larger than the cache.
          alignas(64) float block[kChunk];
          float* out = y_read_ ? y + k * kChunk : block;
          gelu_erf_span(x + k * kChunk, out, count(k));
          (*quantize_)(out, codes + k * kChunk, count(k));
        });
      };
      Tensor& codes = ctx.out(node().outputs[1]);
      if (quantize_->out_signed()) {
        each_block(codes.data<std::int8_t>().data());
      } else {
        each_block(codes.data<std::uint8_t>().data());
      }
      return;
    }
    float lo = std::numeric_limits<float>::infinity(), hi = -lo;
    if (parallel) {
#pragma omp parallel for schedule(static) reduction(min : lo) reduction(max : hi)
      for (std::int64_t k = 0; k < chunks; ++k) {
        const auto [a, b] = gelu_erf_span(x + k * kChunk, y + k * kChunk, count(k));
        lo = std::min(lo, a);
        hi = std::max(hi, b);
      }
    } else {
      std::tie(lo, hi) = gelu_erf_span(x, y, n);
    }
    const composer::DynamicGrid grid = composer::dynamic_grid(lo, hi);
    auto* codes = ctx.out(node().outputs[1]).data<std::uint8_t>().data();
    parallel_for(parallel, chunks, [&](std::int64_t k) {
      quantize_linear_span(y + k * kChunk, codes + k * kChunk, count(k), grid.scale,
                           grid.zero_point);
    });
    ctx.out(node().outputs[2]).data<float>()[0] = grid.scale;
    ctx.out(node().outputs[3]).data<std::uint8_t>()[0] =
        static_cast<std::uint8_t>(grid.zero_point);
  }

  std::string implementation() const override {
    return quantize_ ? "qfuse:gelu_quantize" : "qfuse:gelu_dynamic_quantize";
  }

 private:
  static constexpr std::int64_t kChunk = 4096;
  // Values from which the blocks are shared among the request's threads.
  static constexpr std::int64_t kParallelFrom = 8192;

  bool y_read_ = true;  // y has a reader or is a graph output
  std::optional<CodesQuantizer> quantize_;  // GeluQuantize's
};

}  // namespace

// Elementwise: x, y and the codes in one layout, whichever it is.
std::unique_ptr<ExecutableOp> make_gelu_quantize(const OpBuild& b) {
  const Layout layout = b.layout(b.node.inputs[0]);
  if (b.layout(b.node.outputs[0]) != layout || b.layout(b.node.outputs[1]) != layout) {
    return nullptr;
  }
  return std::make_unique<GeluQuantizeOp>(b.graph, b.node);
}

}  // namespace qfuse::plugin
