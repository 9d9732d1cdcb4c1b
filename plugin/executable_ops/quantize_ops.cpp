// The quantizers qfuse runs itself, each with its definition's exact
// arithmetic (composer/fake_quantize_formula.hpp): FakeQuantize by its
// ranges, Quantize (ONNX's QuantizeLinear) per tensor or per channel and the
// quantizing Convert, Dequantize, and DynamicQuantize.
#include "plugin/executable_ops/ops.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "composer/fake_quantize_formula.hpp"
#include "graph/broadcast.hpp"
#include "graph/node_queries.hpp"
#include "plugin/dnnl_utils.hpp"
#include "plugin/executable_ops/byte_kernels.hpp"
#include "plugin/executable_ops/quantize_spans.hpp"
#include "plugin/parallel.hpp"

namespace qfuse::plugin {
namespace {

using graph::broadcast_strides;
using graph::for_each_broadcast;
using graph::Node;
using graph::OpKind;

class FakeQuantizeOp final : public ExecutableOp {
 public:
  FakeQuantizeOp(const graph::Graph& g, const Node& node) : ExecutableOp(node) {
    out_shape_ = g.value(node.outputs[0]).shape;
    for (std::size_t i = 0; i < node.inputs.size(); ++i) {
      strides_.push_back(broadcast_strides(g.value(node.inputs[i]).shape, out_shape_.size()));
    }
    const auto& attrs = node.attr<graph::FakeQuantizeAttrs>();
    levels_ = static_cast<double>(attrs.levels);
    // Constant per-tensor ranges with il < ih: the straight loop.
    per_tensor_ = true;
    for (std::size_t i = 1; i < 5; ++i) {
      const graph::Value& r = g.value(node.inputs[i]);
      per_tensor_ = per_tensor_ && r.is_constant() && element_count(r.shape) == 1;
    }
    if (per_tensor_) {
      for (std::size_t i = 0; i < 4; ++i) {
        ranges_[i] = static_cast<double>(g.value(node.inputs[i + 1]).constant->as_float(0));
      }
      per_tensor_ = ranges_[0] < ranges_[1];
    } else {
      per_channel_ = per_channel_ranges(g, node);
    }
  }

  std::string implementation() const override {
    return per_tensor_ || per_channel_ ? "qfuse:fake_quantize" : "reference";
  }

  void execute(ExecContext& ctx) const override {
    std::vector<const float*> in(node().inputs.size());
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = ctx.in(node().inputs[i]).data<float>().data();
    float* y = ctx.out(node().outputs[0]).data<float>().data();
    const double steps = levels_ - 1.0;
    if (per_tensor_) {
      const std::int64_t total = element_count(out_shape_);
      constexpr std::int64_t kChunk = 4096;
      const std::int64_t chunks = (total + kChunk - 1) / kChunk;
      parallel_for(total >= 32768, chunks, [&](std::int64_t k) {
        const std::int64_t begin = k * kChunk;
        fake_quantize_span(in[0] + begin, y + begin, std::min(kChunk, total - begin), ranges_[0],
                           ranges_[1], ranges_[2], ranges_[3], steps);
      });
      return;
    }
    if (per_channel_) {
      // One span per (n, c) plane with that channel's ranges; planes of one
      // value (a classifier's [1, C]) one span of channels per image.
      const std::int64_t channels = out_shape_[1];
      const std::int64_t inner = element_count(out_shape_) / (out_shape_[0] * channels);
      const std::int64_t planes = out_shape_[0] * channels;
      if (inner == 1) {
        for (std::int64_t b = 0; b < out_shape_[0]; ++b) {
          fake_quantize_channels(in[0] + b * channels, y + b * channels, channels,
                                 channel_ranges_, steps);
        }
        return;
      }
      parallel_for(planes * inner >= 32768, planes, [&](std::int64_t p) {
        const auto c = static_cast<std::size_t>(p % channels);
        fake_quantize_span(in[0] + p * inner, y + p * inner, inner, channel_ranges_[0][c],
                           channel_ranges_[1][c], channel_ranges_[2][c], channel_ranges_[3][c],
                           steps);
      });
      return;
    }
    for_each_broadcast(out_shape_, strides_, [&](std::int64_t i, const auto& off) {
      const double x = in[0][off[0]];
      const double il = in[1][off[1]], ih = in[2][off[2]];
      const double ol = in[3][off[3]], oh = in[4][off[4]];
      y[i] = static_cast<float>(composer::fake_quantize_value(x, il, ih, ol, oh, steps));
    });
  }

 private:
  // Constant ranges varying at most along axis 1 of a full input, il < ih in
  // every channel: fills channel_ranges_.
  bool per_channel_ranges(const graph::Graph& g, const Node& node) {
    const std::size_t rank = out_shape_.size();
    if (rank < 2 || g.value(node.inputs[0]).shape != out_shape_) return false;
    const auto channels = static_cast<std::size_t>(out_shape_[1]);
    for (std::size_t i = 0; i < 4; ++i) {
      const graph::Value& r = g.value(node.inputs[i + 1]);
      if (!r.is_constant() || r.shape.size() > rank) return false;
      const std::size_t lead = rank - r.shape.size();
      for (std::size_t d = 0; d < r.shape.size(); ++d) {
        if (r.shape[d] != 1 && lead + d != 1) return false;
      }
      const std::int64_t n = element_count(r.shape);
      if (n != 1 && n != out_shape_[1]) return false;
      for (std::size_t c = 0; c < channels; ++c) {
        channel_ranges_[i].push_back(r.constant->as_float(n == 1 ? 0 : static_cast<std::int64_t>(c)));
      }
    }
    for (std::size_t c = 0; c < channels; ++c) {
      if (!(channel_ranges_[0][c] < channel_ranges_[1][c])) return false;
    }
    return true;
  }

  Shape out_shape_;
  std::vector<std::vector<std::int64_t>> strides_;
  double levels_ = 256.0;
  bool per_tensor_ = false;
  bool per_channel_ = false;
  double ranges_[4] = {0, 0, 0, 0};             // il, ih, ol, oh
  std::vector<double> channel_ranges_[4];       // the same, per channel
};

// A per-tensor quantization to the stored u8/s8: a quantizing Convert
// (FakeQuantize's range formula) or a Quantize (ONNX's QuantizeLinear),
// computed as FakeQuantizeOp does (the same operations in the same order, so
// every tie rounds the same way). Input and output each plain or channels
// last: one straight loop when they agree, else one per channel plane.
class QuantizeOp final : public ExecutableOp {
 public:
  QuantizeOp(const graph::Graph& g, const Node& node, bool in_channels_last,
             bool out_channels_last)
      : ExecutableOp(node) {
    if (node.kind == OpKind::Quantize) {
      const auto& a = node.attr<graph::QuantizeAttrs>();
      linear_ = true;
      scale_ = a.scale[0];
      zero_point_ = a.zero_point[0];
      lo_ = a.code_min();
      hi_ = a.code_max();
      signed_ = a.to == ElementType::s8;
      raise_to_lo_ = a.code_min() != a.type_min();
    } else {
      const auto& a = node.attr<graph::ConvertAttrs>();
      il_ = a.input_low;
      range_ = static_cast<double>(a.input_high) - static_cast<double>(a.input_low);
      lo_ = a.code_min();
      hi_ = lo_ + 255;
      signed_ = lo_ < 0;
    }
    const Shape& s = g.value(node.inputs[0]).shape;
    in_cl_ = in_channels_last && s.size() >= 3;
    out_cl_ = out_channels_last && s.size() >= 3;
    outer_ = s.empty() ? 1 : s[0];
    channels_ = s.size() >= 2 ? s[1] : 1;
    inner_ = 1;
    for (std::size_t i = 2; i < s.size(); ++i) inner_ *= s[i];
    if (s.size() < 2) outer_ = element_count(s), channels_ = 1;
  }

  void execute(ExecContext& ctx) const override {
    const float* x = ctx.in(node().inputs[0]).data<float>().data();
    Tensor& out = ctx.out(node().outputs[0]);
    if (signed_) {
      run(x, out.data<std::int8_t>().data());
    } else {
      run(x, out.data<std::uint8_t>().data());
    }
  }

  std::string implementation() const override { return "qfuse:quantize"; }

 private:
  // The quantization of a contiguous span, and of one value.
  template <typename T>
  void span(const float* x, T* y, std::int64_t n) const {
    if (linear_) {
      quantize_linear_span(x, y, n, scale_, zero_point_, hi_);
      // Codes from above the type's lowest: the loop saturated to that.
      if (raise_to_lo_) raise_codes(y, n, lo_);
    } else {
      quantize_span(x, y, n, il_, range_, lo_);
    }
  }
  template <typename T>
  T one(float x) const {
    if (linear_) {
      return static_cast<T>(composer::quantize_linear(x, scale_, zero_point_, lo_, hi_));
    }
    return quantize_level<T>(x, il_, range_, lo_);
  }

  template <typename T>
  void run(const float* x, T* y) const {
    const auto plane = [&](const float* src, T* dst, std::int64_t src_stride, std::int64_t n,
                           std::int64_t dst_stride) {
      if (src_stride == 1 && dst_stride == 1) {
        span(src, dst, n);
        return;
      }
      for (std::int64_t i = 0; i < n; ++i) dst[i * dst_stride] = one<T>(src[i * src_stride]);
    };
    // On all of the request's threads once there is enough work to share.
    const std::int64_t total = outer_ * channels_ * inner_;
    const bool parallel = total >= kParallelFrom;
    if (in_cl_ == out_cl_) {
      constexpr std::int64_t kChunk = 4096;
      const std::int64_t chunks = (total + kChunk - 1) / kChunk;
      parallel_for(parallel, chunks, [&](std::int64_t k) {
        const std::int64_t begin = k * kChunk;
        plane(x + begin, y + begin, 1, std::min(kChunk, total - begin), 1);
      });
      return;
    }
    if (!in_cl_ && out_cl_) {
      // Plain to channels last (a graph input): each channel plane quantized
      // a block of pixels at a time with the vector loop, then interleaved.
      constexpr std::int64_t kPixelBlock = 512;
      const std::int64_t blocks = (inner_ + kPixelBlock - 1) / kPixelBlock;
      parallel_for(parallel, outer_ * blocks, [&](std::int64_t k) {
        const std::int64_t n = k / blocks, begin = (k % blocks) * kPixelBlock;
        const std::int64_t len = std::min(kPixelBlock, inner_ - begin);
        T* dst = y + (n * inner_ + begin) * channels_;
        if (channels_ <= kInterleaved) {
          T level[kInterleaved * kPixelBlock];
          for (std::int64_t c = 0; c < channels_; ++c) {
            span(x + (n * channels_ + c) * inner_ + begin, level + c * kPixelBlock, len);
          }
          interleave_planes(reinterpret_cast<const std::uint8_t*>(level), kPixelBlock,
                            static_cast<int>(channels_), len, reinterpret_cast<std::uint8_t*>(dst));
          return;
        }
        T level[kPixelBlock];
        for (std::int64_t c = 0; c < channels_; ++c) {
          span(x + (n * channels_ + c) * inner_ + begin, level, len);
          for (std::int64_t i = 0; i < len; ++i) dst[i * channels_ + c] = level[i];
        }
      });
      return;
    }
    // Offsets of element (n, c, 0) and the step along the spatial dims.
    const std::int64_t plain_step = 1, cl_step = channels_;
    const std::int64_t planes = outer_ * channels_;
    parallel_for(parallel, planes, [&](std::int64_t p) {
      const std::int64_t n = p / channels_, c = p % channels_;
      const std::int64_t plain = (n * channels_ + c) * inner_;
      const std::int64_t cl = n * channels_ * inner_ + c;
      if (in_cl_) {
        plane(x + cl, y + plain, cl_step, inner_, plain_step);
      } else {
        plane(x + plain, y + cl, plain_step, inner_, cl_step);
      }
    });
  }

  static constexpr std::int64_t kParallelFrom = 32768;
  // Up to this many channels (an image's), a block's planes are quantized
  // whole and then interleaved by interleave_planes.
  static constexpr std::int64_t kInterleaved = 4;

  double il_ = 0.0, range_ = 1.0;
  int lo_ = 0;
  int hi_ = 255;  // the highest code (linear): lo_ + levels - 1
  // ONNX's QuantizeLinear instead of the range formula.
  bool linear_ = false;
  bool signed_ = false;      // s8 codes
  bool raise_to_lo_ = false;  // lo_ is above the type's lowest code
  float scale_ = 1.0f;
  std::int32_t zero_point_ = 0;
  bool in_cl_ = false, out_cl_ = false;
  std::int64_t outer_ = 1, channels_ = 1, inner_ = 1;
};


// DynamicQuantize: the tensor's range (one pass), its grid
// (composer::dynamic_grid), then the codes (a second pass, quantize_linear_span),
// all on the request's threads once there is enough work to share. Plain
// layouts (the op takes no other).
class DynamicQuantizeOp final : public ExecutableOp {
 public:
  using ExecutableOp::ExecutableOp;

  void execute(ExecContext& ctx) const override {
    const Tensor& in = ctx.in(node().inputs[0]);
    const float* x = in.data<float>().data();
    const std::int64_t n = in.size();
    constexpr std::int64_t kChunk = 8192;
    const std::int64_t chunks = (n + kChunk - 1) / kChunk;
    const bool parallel = n >= kParallelFrom;
    float lo = std::numeric_limits<float>::infinity(), hi = -lo;
    if (parallel) {
#pragma omp parallel for schedule(static) reduction(min : lo) reduction(max : hi)
      for (std::int64_t k = 0; k < chunks; ++k) {
        const auto [a, b] = min_max_span(x + k * kChunk, std::min(kChunk, n - k * kChunk));
        lo = std::min(lo, a);
        hi = std::max(hi, b);
      }
    } else {
      std::tie(lo, hi) = min_max_span(x, n);
    }
    const composer::DynamicGrid grid = composer::dynamic_grid(lo, hi);
    auto* y = ctx.out(node().outputs[0]).data<std::uint8_t>().data();
    parallel_for(parallel, chunks, [&](std::int64_t k) {
      quantize_linear_span(x + k * kChunk, y + k * kChunk, std::min(kChunk, n - k * kChunk),
                           grid.scale, grid.zero_point);
    });
    ctx.out(node().outputs[1]).data<float>()[0] = grid.scale;
    ctx.out(node().outputs[2]).data<std::uint8_t>()[0] = static_cast<std::uint8_t>(grid.zero_point);
  }

  std::string implementation() const override { return "qfuse:dynamic_quantize"; }

 private:
  static constexpr std::int64_t kParallelFrom = 65536;
};


// Quantize with a scale and zero point per index of one axis, plain: runs of
// the values that share them, each quantized as QuantizeOp's span does.
class QuantizeChannelsOp final : public ExecutableOp {
 public:
  QuantizeChannelsOp(const graph::Graph& g, const Node& node) : ExecutableOp(node) {
    const auto& a = node.attr<graph::QuantizeAttrs>();
    const Shape& x = g.value(node.inputs[0]).shape;
    const auto axis = static_cast<std::size_t>(a.axis);
    count_ = element_count(x);
    channels_ = x[axis];
    for (std::size_t d = axis + 1; d < x.size(); ++d) inner_ *= x[d];
    for (std::int64_t c = 0; c < channels_; ++c) {
      scale_.push_back(a.scale_at(static_cast<std::size_t>(c)));
      zero_.push_back(a.zero_point_at(static_cast<std::size_t>(c)));
    }
    lo_ = a.code_min();
    hi_ = a.code_max();
    signed_ = a.to == ElementType::s8;
    raise_to_lo_ = a.code_min() != a.type_min();
  }

  void execute(ExecContext& ctx) const override {
    const float* x = ctx.in(node().inputs[0]).data<float>().data();
    void* y = ctx.out(node().outputs[0]).raw_data();
    if (signed_) {
      run(x, static_cast<std::int8_t*>(y));
    } else {
      run(x, static_cast<std::uint8_t*>(y));
    }
  }
  std::string implementation() const override { return "qfuse:quantize"; }

 private:
  template <typename T>
  void run(const float* x, T* y) const {
    const std::int64_t runs = count_ / inner_;
    parallel_for(count_ >= (1 << 16), runs, [&](std::int64_t r) {
      const auto c = static_cast<std::size_t>(r % channels_);
      quantize_linear_span(x + r * inner_, y + r * inner_, inner_, scale_[c], zero_[c], hi_);
      if (raise_to_lo_) raise_codes(y + r * inner_, inner_, lo_);
    });
  }

  std::int64_t count_ = 0, channels_ = 1, inner_ = 1;
  std::vector<float> scale_;
  std::vector<std::int32_t> zero_;
  std::int32_t lo_ = 0, hi_ = 255;
  bool signed_ = false;
  bool raise_to_lo_ = false;
};


// Dequantize: y = (f32(x) - z) * s per element (composer::dequantize), in
// the layout of its output. The input shares it, or a reorder given at
// construction first writes the codes as f32 there and the op then
// dequantizes them in place (the integers are exact in f32). Per-channel
// parameters are indexed in memory order: `inner` values share one, and
// whole rows of `channels` values when the axis is innermost (channels last).
class DequantizeOp final : public ExecutableOp {
 public:
  DequantizeOp(const graph::Graph& g, const Node& node, bool channels_last,
               std::unique_ptr<ExecutableOp> reorder)
      : ExecutableOp(node), reorder_(std::move(reorder)) {
    const auto& a = node.attr<graph::DequantizeAttrs>();
    const Shape& x = g.value(node.inputs[0]).shape;
    type_ = reorder_ ? ElementType::f32 : g.value(node.inputs[0]).type;
    count_ = element_count(x);
    if (a.per_tensor()) {
      scale_ = {a.scale[0]};
      zero_ = {a.zero_point[0]};
      inner_ = count_;
      return;
    }
    const auto axis = static_cast<std::size_t>(a.axis);
    channels_ = x[axis];
    for (std::int64_t c = 0; c < channels_; ++c) {
      scale_.push_back(a.scale_at(static_cast<std::size_t>(c)));
      zero_.push_back(a.zero_point_at(static_cast<std::size_t>(c)));
    }
    // Dims in memory order; `inner` multiplies those after the axis.
    std::vector<std::size_t> order;
    for (std::size_t d = 0; d < x.size(); ++d) order.push_back(d);
    if (channels_last && x.size() >= 3) {
      order.erase(order.begin() + 1);
      order.push_back(1);
    }
    inner_ = 1;
    const auto at = std::find(order.begin(), order.end(), axis);
    for (auto d = at + 1; d != order.end(); ++d) inner_ *= x[*d];
  }

  void execute(ExecContext& ctx) const override {
    if (reorder_) reorder_->execute(ctx);
    float* y = ctx.out(node().outputs[0]).data<float>().data();
    const void* x = reorder_ ? static_cast<const void*>(y) : ctx.in(node().inputs[0]).raw_data();
    switch (type_) {
      case ElementType::u8: run(static_cast<const std::uint8_t*>(x), y); break;
      case ElementType::s8: run(static_cast<const std::int8_t*>(x), y); break;
      case ElementType::s32: run(static_cast<const std::int32_t*>(x), y); break;
      default: run(static_cast<const float*>(x), y); break;
    }
  }

  std::string implementation() const override {
    return reorder_ ? reorder_->implementation() + "+qfuse:dequantize" : "qfuse:dequantize";
  }
  int staged_reorders() const override { return reorder_ ? 1 : 0; }

 private:
  static constexpr std::int64_t kTask = 1 << 14;  // values per task

  template <typename T>
  static void affine(const T* x, float* y, std::int64_t n, float z, float s) {
#pragma omp simd
    for (std::int64_t i = 0; i < n; ++i) y[i] = composer::dequantize(static_cast<float>(x[i]), z, s);
  }

  template <typename T>
  void run(const T* x, float* y) const {
    const bool parallel = count_ >= 4 * kTask;
    if (inner_ == 1 && channels_ > 1) {
      // Channels innermost: rows of `channels` values, a parameter each.
      const std::int64_t rows = count_ / channels_;
      const std::int64_t per_task = std::max<std::int64_t>(1, kTask / channels_);
      const float* s = scale_.data();
      const float* z = zero_.data();
      parallel_for(parallel, (rows + per_task - 1) / per_task, [&](std::int64_t t) {
        const std::int64_t end = std::min(rows, (t + 1) * per_task);
        for (std::int64_t r = t * per_task; r < end; ++r) {
          const T* xr = x + r * channels_;
          float* yr = y + r * channels_;
#pragma omp simd
          for (std::int64_t c = 0; c < channels_; ++c) {
            yr[c] = composer::dequantize(static_cast<float>(xr[c]), z[c], s[c]);
          }
        }
      });
      return;
    }
    // Runs of `inner` values that share a parameter (one run per tensor),
    // cut into tasks of about kTask values.
    const std::int64_t runs = count_ / inner_;
    const std::int64_t pieces = (inner_ + kTask - 1) / kTask;
    parallel_for(parallel, runs * pieces, [&](std::int64_t t) {
      const std::int64_t r = t / pieces, begin = (t % pieces) * kTask;
      const std::int64_t n = std::min(kTask, inner_ - begin);
      const auto c = static_cast<std::size_t>(r % channels_);
      const std::int64_t offset = r * inner_ + begin;
      affine(x + offset, y + offset, n, zero_[c], scale_[c]);
    });
  }

  std::unique_ptr<ExecutableOp> reorder_;
  ElementType type_ = ElementType::u8;
  std::int64_t count_ = 0, channels_ = 1, inner_ = 1;
  std::vector<float> scale_, zero_;
};


}  // namespace

std::unique_ptr<ExecutableOp> make_fake_quantize(const OpBuild& b) {
  return std::make_unique<FakeQuantizeOp>(b.graph, b.node);
}

// Per tensor, either layout on each side; per channel, plain.
std::unique_ptr<ExecutableOp> make_quantize(const OpBuild& b) {
  const Node& n = b.node;
  if (!n.attr<graph::QuantizeAttrs>().per_tensor()) {
    return std::make_unique<QuantizeChannelsOp>(b.graph, n);
  }
  return std::make_unique<QuantizeOp>(b.graph, n, b.channels_last(n.inputs[0]),
                                      b.channels_last(n.outputs[0]));
}

std::unique_ptr<ExecutableOp> make_quantizing_convert(const OpBuild& b) {
  const Node& n = b.node;
  if (!n.attr<graph::ConvertAttrs>().quantizes()) return nullptr;
  return std::make_unique<QuantizeOp>(b.graph, n, b.channels_last(n.inputs[0]),
                                      b.channels_last(n.outputs[0]));
}

// In the output's layout. When the input's differs, a reorder first writes
// the codes there as f32 (exact) and the op dequantizes them in place.
std::unique_ptr<ExecutableOp> make_dequantize(const OpBuild& b) {
  const Node& n = b.node;
  std::unique_ptr<ExecutableOp> reorder;
  if (b.layout(n.inputs[0]) != b.layout(n.outputs[0])) reorder = make_dnnl_reorder(b);
  return std::make_unique<DequantizeOp>(b.graph, n, b.channels_last(n.outputs[0]),
                                        std::move(reorder));
}

std::unique_ptr<ExecutableOp> make_dynamic_quantize(const OpBuild& b) {
  return std::make_unique<DynamicQuantizeOp>(b.node);
}

}  // namespace qfuse::plugin
