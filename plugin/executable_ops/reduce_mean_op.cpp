// ReduceMean over consecutive axes of a plain f32 tensor, qfuse's own loop:
// x viewed as [outer, K, inner] (K the reduced dims' product), y[o, i] =
// (sum over k of x[o, k, i]) / K, the sum in f32 (in k's order when inner >
// 1; in vector lanes when a row is contiguous). oneDNN 2.6
// has only its reference reduction for an axis with data after it (a ViT's
// mean over its tokens), where this loop adds whole rows of `inner` values.

#include <algorithm>

#include "plugin/executable_ops/ops.hpp"
#include "plugin/parallel.hpp"

namespace qfuse::plugin {
namespace {

using graph::Node;

class ReduceMeanOp final : public ExecutableOp {
 public:
  ReduceMeanOp(const Node& node, std::int64_t outer, std::int64_t count, std::int64_t inner)
      : ExecutableOp(node), outer_(outer), count_(count), inner_(inner) {}

  void execute(ExecContext& ctx) const override {
    const float* x = ctx.in(node().inputs[0]).data<float>().data();
    float* y = ctx.out(node().outputs[0]).data<float>().data();
    const auto k = static_cast<float>(count_);
    const bool parallel = outer_ * count_ * inner_ >= kParallelFrom;
    if (inner_ == 1) {
      // Contiguous rows: one sum each.
      parallel_for(parallel, outer_, [&](std::int64_t o) {
        const float* row = x + o * count_;
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (std::int64_t j = 0; j < count_; ++j) sum += row[j];
        y[o] = sum / k;
      });
      return;
    }
    parallel_for(parallel, outer_, [&](std::int64_t o) {
      float* out = y + o * inner_;
      const float* in = x + o * count_ * inner_;
      std::copy_n(in, inner_, out);
      for (std::int64_t j = 1; j < count_; ++j) {
        const float* row = in + j * inner_;
        // Distinct buffers: the vector loop needs no overlap check.
#pragma omp simd
        for (std::int64_t i = 0; i < inner_; ++i) out[i] += row[i];
      }
#pragma omp simd
      for (std::int64_t i = 0; i < inner_; ++i) out[i] /= k;
    });
  }

  std::string implementation() const override { return "qfuse:reduce_mean"; }

 private:
  static constexpr std::int64_t kParallelFrom = 32768;
  std::int64_t outer_, count_, inner_;
};

}  // namespace

std::unique_ptr<ExecutableOp> make_consecutive_reduce_mean(const OpBuild& b) {
  const graph::Ints& axes = b.node.attr<graph::ReduceAttrs>().axes;
  const Shape& x = b.in(0).shape;
  if (axes.empty() || b.layout(b.node.inputs[0]) != Layout::plain ||
      b.layout(b.node.outputs[0]) != Layout::plain) {
    return nullptr;
  }
  for (std::size_t i = 1; i < axes.size(); ++i) {
    if (axes[i] != axes[i - 1] + 1) return nullptr;  // not consecutive
  }
  const auto first = static_cast<std::size_t>(axes.front());
  const auto last = static_cast<std::size_t>(axes.back());
  std::int64_t outer = 1, count = 1, inner = 1;
  for (std::size_t d = 0; d < x.size(); ++d) {
    (d < first ? outer : d <= last ? count : inner) *= x[d];
  }
  return std::make_unique<ReduceMeanOp>(b.node, outer, count, inner);
}

}  // namespace qfuse::plugin
