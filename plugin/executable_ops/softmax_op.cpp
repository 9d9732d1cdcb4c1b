// qfuse's own softmax kernels, each the maximum over the axis, exp(x - max)
// and its sum, then the quotient, as ONNX's Softmax (opset 13) defines it
// (along the last axis as the product with 1 / sum, within an ulp of it);
// exp is exp_avx512 (Cephes' expf polynomial, avx512_math.hpp).
//
// Along the last axis (attention's probabilities: BERT-base's 12 x 128 rows
// of 128 per layer): eight rows at a time on the request's threads, the
// exponentials kept in L1; with attention's mask (fold_mask_into_softmax.cpp)
// each row adds its row of the mask first, the Add's own f32 sums. A
// quantizing Softmax (fold_quantize_into_softmax.cpp) then quantizes blocks
// of rows with the unfused quantizer's own loop (a Quantize's y / s, or a
// quantizing Convert's ranges formula: CodesQuantizer), so its codes are the
// unfused graph's bits. oneDNN 2.6's jit softmax took about twice as long on
// those rows and writes codes as y * (1 / s), within one code.
//
// Along an axis that is not innermost in memory: YOLOv8's box distribution,
// [N, 16, 4, anchors] along the 16 bins. oneDNN 2.6 has only its reference
// kernel there (some 40x slower than the whole detector's convolutions), and
// its jit kernel on a copy with the axis innermost still pays one short row
// per position. This op runs sixteen positions at once along the contiguous
// inner dimension.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "graph/broadcast.hpp"
#include "plugin/executable_ops/avx512_math.hpp"
#include "plugin/executable_ops/ops.hpp"
#include "plugin/executable_ops/quantize_spans.hpp"
#include "plugin/executable_ops/softmax_kernel.hpp"
#include "plugin/parallel.hpp"
#include "qfuse/error.hpp"

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
#pragma GCC diagnostic ignored "-Wuninitialized"
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

// Softmax of `rows` consecutive rows of n values, eight at a time (then
// four, then one); `m`, when not null, the mask row each adds. Eight rows side
// by side hide more of each row's serial steps than four (one thread, 196K
// masked values in rows of 16 / 128 / 384 keys: 262 -> 186, 94 -> 92, 85 ->
// 82 us; 16K values in rows of 64: 9.4 -> 7.8 us); each row's arithmetic is
// the same either way.
template <bool Masked>
__attribute__((target("avx512f"))) void softmax_row_block(const float* x, const float* const* m,
                                                          float* y, std::int64_t rows,
                                                          std::int64_t n) {
  std::int64_t r = 0;
  for (; r + 8 <= rows; r += 8) softmax_rows<8, Masked>(x + r * n, m + (Masked ? r : 0), y + r * n, n);
  for (; r + 4 <= rows; r += 4) softmax_rows<4, Masked>(x + r * n, m + (Masked ? r : 0), y + r * n, n);
  for (; r < rows; ++r) softmax_rows<1, Masked>(x + r * n, m + (Masked ? r : 0), y + r * n, n);
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

// Softmax along the last axis, f32 -> f32, or -> u8 / s8 codes when the
// Softmax quantizes (by SoftmaxAttrs::quantize_scale with zero point 0, or
// by its ranges); of x + m when it has a mask m (fold_mask_into_softmax).
class RowSoftmaxOp final : public ExecutableOp {
 public:
  RowSoftmaxOp(const graph::Graph& g, const Node& node)
      : ExecutableOp(node),
        leading_(g.value(node.outputs[0]).shape.begin(), g.value(node.outputs[0]).shape.end() - 1),
        len_(g.value(node.outputs[0]).shape.back()),
        rows_(element_count(leading_)) {
    const auto& a = node.attr<graph::SoftmaxAttrs>();
    if (a.by_ranges()) {
      quantize_.emplace(graph::ConvertAttrs{a.to, a.input_low, a.input_high});
    } else if (a.quantizes()) {
      graph::QuantizeAttrs q;
      q.to = a.to;
      q.scale = {a.quantize_scale};
      q.zero_point = {0};
      quantize_.emplace(q);
    }
    if (node.inputs.size() == 2) {
      const std::size_t rank = leading_.size() + 1;
      mask_strides_ = graph::broadcast_strides(g.value(node.inputs[1]).shape, rank);
      // x + m broadcasts both ways: the scores are x, except at a binding of
      // symbolic dims where x repeats along a dimension the mask has whole.
      if (g.value(node.inputs[0]).shape != g.value(node.outputs[0]).shape) {
        x_strides_ = graph::broadcast_strides(g.value(node.inputs[0]).shape, rank);
      }
    }
  }

  void execute(ExecContext& ctx) const override {
#if defined(QFUSE_AVX512_KERNELS)
    const float* x = ctx.in(node().inputs[0]).data<float>().data();
    const float* m = mask_strides_.empty() ? nullptr : ctx.in(node().inputs[1]).data<float>().data();
    Tensor& out = ctx.out(node().outputs[0]);
    const bool parallel = rows_ * len_ >= kParallelFrom;
    // Softmax of rows [first, first + count) into y, eight at a time.
    const auto rows = [&](std::int64_t first, std::int64_t count, float* y) {
      if (m == nullptr) {
        softmax_row_block<false>(x + first * len_, nullptr, y, count, len_);
        return;
      }
      RowCursor mask(*this, mask_strides_, first);
      if (!x_strides_.empty()) {
        RowCursor scores(*this, x_strides_, first);
        for (std::int64_t r = 0; r < count; ++r) {
          const float* mask_row = m + mask.next();
          softmax_row_block<true>(x + scores.next(), &mask_row, y + r * len_, 1, len_);
        }
        return;
      }
      for (std::int64_t r = 0; r < count; r += 8) {
        const std::int64_t eight = std::min<std::int64_t>(8, count - r);
        const float* mask_rows[8];
        for (std::int64_t k = 0; k < eight; ++k) mask_rows[k] = m + mask.next();
        softmax_row_block<true>(x + (first + r) * len_, mask_rows, y + r * len_, eight, len_);
      }
    };
    if (!quantize_) {
      float* y = out.data<float>().data();
      parallel_for(parallel, (rows_ + 7) / 8, [&](std::int64_t g) {
        const std::int64_t first = 8 * g;
        rows(first, std::min<std::int64_t>(8, rows_ - first), y + first * len_);
      });
      return;
    }
    // Blocks of whole rows, up to kLongestRow values, quantized in one call.
    const std::int64_t per_block = std::max<std::int64_t>(1, kLongestRow / len_);
    const std::int64_t blocks = (rows_ + per_block - 1) / per_block;
    auto* longer = static_cast<float*>(ctx.scratchpad());  // rows longer than a block
    const auto codes = [&](auto* y) {
      parallel_for(parallel, blocks, [&](std::int64_t b) {
        float block[kLongestRow];
        float* p = len_ > kLongestRow ? longer + b * len_ : block;
        const std::int64_t first = b * per_block, count = std::min(per_block, rows_ - first);
        rows(first, count, p);
        (*quantize_)(p, y + first * len_, count * len_);
      });
    };
    if (quantize_->out_signed()) {
      codes(out.data<std::int8_t>().data());
    } else {
      codes(out.data<std::uint8_t>().data());
    }
#else
    (void)ctx;
#endif
  }
  std::string implementation() const override {
    return mask_strides_.empty() ? "qfuse:softmax" : "qfuse:softmax_masked";
  }
  // A quantizing softmax's rows longer than its stack block, each in its own
  // part of the request's scratchpad.
  std::size_t scratchpad_size() const override {
    return quantize_ && len_ > kLongestRow ? static_cast<std::size_t>(rows_ * len_) * sizeof(float) : 0;
  }

  // The values a quantizing softmax keeps on the stack: a block of rows (a
  // longer row goes alone through the scratchpad).
  static constexpr std::int64_t kLongestRow = 4096;
  // The most dims a Softmax with a mask has.
  static constexpr std::size_t kMaxMaskRank = 8;

 private:
  // The elements of an operand (its broadcast `strides`) that rows first,
  // first + 1, ... of the output start at: the row's index in the leading
  // dims, stepped as a counter (a division per dim and row took longer than
  // the row's softmax).
  class RowCursor {
   public:
    RowCursor(const RowSoftmaxOp& op, const std::vector<std::int64_t>& strides, std::int64_t first)
        : op_(op), strides_(strides) {
      for (std::size_t d = op.leading_.size(); d-- > 0;) {
        index_[d] = first % op.leading_[d];
        offset_ += index_[d] * strides_[d];
        first /= op.leading_[d];
      }
    }
    std::int64_t next() {
      const std::int64_t at = offset_;
      for (std::size_t d = op_.leading_.size(); d-- > 0;) {
        offset_ += strides_[d];
        if (++index_[d] < op_.leading_[d]) break;
        offset_ -= strides_[d] * op_.leading_[d];
        index_[d] = 0;
      }
      return at;
    }

   private:
    const RowSoftmaxOp& op_;
    const std::vector<std::int64_t>& strides_;
    std::array<std::int64_t, kMaxMaskRank> index_{};
    std::int64_t offset_ = 0;
  };

  static constexpr std::int64_t kParallelFrom = 16384;
  Shape leading_;  // x's dims before the last
  std::int64_t len_, rows_;
  // A quantizing softmax's: the Quantize's or quantizing Convert's own loop.
  std::optional<CodesQuantizer> quantize_;
  // By the output's dim: the mask's (empty: no mask); x's where x + m
  // repeats x (empty: x has the output's shape).
  std::vector<std::int64_t> mask_strides_, x_strides_;  // by x's dim; empty: no mask
};

}  // namespace

namespace {

// A Softmax with a mask or quantizing by ranges: no other kernel runs it.
bool row_kernel_only(const Node& node) {
  return node.inputs.size() == 2 || node.attr<graph::SoftmaxAttrs>().by_ranges();
}

// Why the row kernel cannot run `node` (nullopt: it can), its buffers aside.
std::optional<std::string> row_softmax_refusal(const graph::Graph& g, const Node& node) {
  const auto& a = node.attr<graph::SoftmaxAttrs>();
  const graph::Value& x = g.value(node.inputs[0]);
  const Shape& out = g.value(node.outputs[0]).shape;
  const auto rank = static_cast<std::int64_t>(out.size());
  if (!has_avx512()) return "qfuse's softmax kernel needs AVX-512";
  if (rank == 0 || (a.axis != -1 && a.axis != rank - 1)) return "not along the last axis";
  if (node.inputs.size() == 2 && out.size() > RowSoftmaxOp::kMaxMaskRank) {
    return "more than " + std::to_string(RowSoftmaxOp::kMaxMaskRank) + " dims";
  }
  if (x.type != ElementType::f32) return "its input is not f32";
  return std::nullopt;
}

}  // namespace

std::optional<std::string> check_row_softmax(const graph::Graph& graph, const graph::Node& node) {
  return row_softmax_refusal(graph, node);
}

// Plain buffers, or channels-last ones whose spatial dims are all 1 (the
// same bytes: the layout plan stores such a value either way).
std::unique_ptr<ExecutableOp> make_row_softmax(const OpBuild& b) {
  const auto in_order = [&](graph::ValueId v) {
    const Shape& s = b.graph.value(v).shape;
    return b.layout(v) == Layout::plain ||
           (s.size() >= 2 && std::all_of(s.begin() + 2, s.end(), [](std::int64_t d) { return d == 1; }));
  };
  const bool masked = b.node.inputs.size() == 2;
  if (row_softmax_refusal(b.graph, b.node) || !in_order(b.node.inputs[0]) ||
      !in_order(b.node.outputs[0]) || (masked && !in_order(b.node.inputs[1]))) {
    if (row_kernel_only(b.node)) {
      throw CompileError("compile Softmax node '" + b.node.name +
                         "': only qfuse's row kernel adds a mask or quantizes by ranges, and it "
                         "cannot run here (" +
                         row_softmax_refusal(b.graph, b.node).value_or("its buffers' layout") + ")");
    }
    return nullptr;
  }
  return std::make_unique<RowSoftmaxOp>(b.graph, b.node);
}

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
