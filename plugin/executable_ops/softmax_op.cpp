// Softmax along an axis that is not innermost in memory: YOLOv8's box
// distribution, [N, 16, 4, anchors] along the 16 bins. oneDNN 2.6 has only
// its reference kernel there (some 40x slower than the whole detector's
// convolutions), and its jit kernel on a copy with the axis innermost still
// pays one short row per position. This op runs sixteen positions at once
// along the contiguous inner dimension: the maximum over the axis, exp(x -
// max) and its sum, then the quotient, as ONNX's Softmax (opset 13) defines
// it.
//
// exp is exp_avx512 (Cephes' expf polynomial, exp_avx512.hpp).

#include <algorithm>
#include <cmath>

#include "plugin/executable_ops/exp_avx512.hpp"
#include "plugin/executable_ops/ops.hpp"
#include "plugin/executable_ops/quantize_spans.hpp"
#include "plugin/parallel.hpp"

#if defined(QFUSE_AVX512_KERNELS)
#include <immintrin.h>
#endif

namespace qfuse::plugin {
namespace {

using graph::Node;

#if defined(QFUSE_AVX512_KERNELS)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// Softmax over `len` rows `stride` apart, for the positions `mask` selects of
// sixteen consecutive ones.
__attribute__((target("avx512f"))) void softmax_sixteen(const float* x, float* y,
                                                        std::int64_t len, std::int64_t stride,
                                                        __mmask16 mask) {
  __m512 m = _mm512_set1_ps(-INFINITY);
  for (std::int64_t k = 0; k < len; ++k) {
    m = _mm512_max_ps(m, _mm512_maskz_loadu_ps(mask, x + k * stride));
  }
  __m512 sum = _mm512_setzero_ps();
  for (std::int64_t k = 0; k < len; ++k) {
    const __m512 e = exp_avx512(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, x + k * stride), m));
    sum = _mm512_add_ps(sum, e);
    _mm512_mask_storeu_ps(y + k * stride, mask, e);
  }
  for (std::int64_t k = 0; k < len; ++k) {
    const __m512 e = _mm512_maskz_loadu_ps(mask, y + k * stride);
    _mm512_mask_storeu_ps(y + k * stride, mask, _mm512_div_ps(e, sum));
  }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

class StridedSoftmaxOp final : public ExecutableOp {
 public:
  StridedSoftmaxOp(const Node& node, const Shape& shape, std::size_t axis)
      : ExecutableOp(node),
        outer_(element_count(Shape(shape.begin(), shape.begin() + static_cast<long>(axis)))),
        len_(shape[axis]),
        inner_(element_count(Shape(shape.begin() + static_cast<long>(axis) + 1, shape.end()))) {}

  void execute(ExecContext& ctx) const override {
#if defined(QFUSE_AVX512_KERNELS)
    const float* x = ctx.in(node().inputs[0]).data<float>().data();
    float* y = ctx.out(node().outputs[0]).data<float>().data();
    const std::int64_t blocks = (inner_ + 15) / 16;
    parallel_for(outer_ * len_ * inner_ >= (1 << 15), outer_ * blocks, [&](std::int64_t t) {
      const std::int64_t o = t / blocks, i = (t % blocks) * 16;
      const std::int64_t left = std::min<std::int64_t>(16, inner_ - i);
      const auto mask = static_cast<__mmask16>((1u << left) - 1u);
      const std::int64_t at = o * len_ * inner_ + i;
      softmax_sixteen(x + at, y + at, len_, inner_, mask);
    });
#else
    (void)ctx;
#endif
  }
  std::string implementation() const override { return "qfuse:softmax_strided"; }

 private:
  std::int64_t outer_, len_, inner_;
};

}  // namespace

std::unique_ptr<ExecutableOp> make_strided_softmax(const OpBuild& b) {
  const auto& a = b.node.attr<graph::SoftmaxAttrs>();
  const Shape& shape = b.in(0).shape;
  const auto rank = static_cast<std::int64_t>(shape.size());
  const auto axis = static_cast<std::size_t>(a.axis < 0 ? a.axis + rank : a.axis);
  if (a.quantizes() || b.in(0).type != ElementType::f32 || b.out().type != ElementType::f32 ||
      axis + 1 >= shape.size() || b.layout(b.node.inputs[0]) != Layout::plain ||
      b.layout(b.node.outputs[0]) != Layout::plain || !has_avx512()) {
    return nullptr;
  }
  return std::make_unique<StridedSoftmaxOp>(b.node, shape, axis);
}

}  // namespace qfuse::plugin
