// The data movement and conversions qfuse runs itself, any element type:
// Reshape / Flatten, Concat, Resize, the Slices and ShuffleChannels of
// channels, Gather, the s64 and s32 Converts, and broadcast binary ops.
#include "plugin/executable_ops/ops.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "graph/broadcast.hpp"
#include "graph/node_queries.hpp"
#include "plugin/dnnl_utils.hpp"
#include "plugin/executable_ops/byte_kernels.hpp"
#include "plugin/parallel.hpp"
#include "qfuse/error.hpp"

namespace qfuse::plugin {
namespace {

using graph::broadcast_strides;
using graph::for_each_broadcast;
using graph::Node;
using graph::OpKind;

class BroadcastBinaryOp final : public ExecutableOp {
 public:
  BroadcastBinaryOp(const graph::Graph& g, const Node& node) : ExecutableOp(node) {
    out_shape_ = g.value(node.outputs[0]).shape;
    strides_ = {broadcast_strides(g.value(node.inputs[0]).shape, out_shape_.size()),
                broadcast_strides(g.value(node.inputs[1]).shape, out_shape_.size())};
  }

  void execute(ExecContext& ctx) const override {
    const float* a = ctx.in(node().inputs[0]).data<float>().data();
    const float* b = ctx.in(node().inputs[1]).data<float>().data();
    float* y = ctx.out(node().outputs[0]).data<float>().data();
    const OpKind kind = node().kind;
    for_each_broadcast(out_shape_, strides_, [&](std::int64_t i, const auto& off) {
      const float x0 = a[off[0]], x1 = b[off[1]];
      float r = 0.0f;
      switch (kind) {
        case OpKind::Add: r = x0 + x1; break;
        case OpKind::Subtract: r = x0 - x1; break;
        case OpKind::Multiply: r = x0 * x1; break;
        case OpKind::Divide: r = x0 / x1; break;
        case OpKind::Minimum: r = std::min(x0, x1); break;
        case OpKind::Maximum: r = std::max(x0, x1); break;
        default: break;
      }
      y[i] = r;
    });
  }

 private:
  Shape out_shape_;
  std::vector<std::vector<std::int64_t>> strides_;
};

// Convert to s32 by a loop: oneDNN 2.6's reorders disagree on values at or
// beyond 2^31 (some wrap to INT32_MIN). Rounds half to even, saturates.
class ConvertToS32Op final : public ExecutableOp {
 public:
  using ExecutableOp::ExecutableOp;
  void execute(ExecContext& ctx) const override {
    const Tensor& x = ctx.in(node().inputs[0]);
    auto y = ctx.out(node().outputs[0]).data<std::int32_t>();
    for (std::int64_t i = 0; i < x.size(); ++i) {
      const double v = x.as_float(i);
      std::int32_t r;
      if (v >= 2147483647.0) {
        r = std::numeric_limits<std::int32_t>::max();
      } else if (v <= -2147483648.0) {
        r = std::numeric_limits<std::int32_t>::min();
      } else {
        r = static_cast<std::int32_t>(std::nearbyint(v));
      }
      y[static_cast<std::size_t>(i)] = r;
    }
  }
};


// Reshape and Flatten keep the bytes; only the shape changes. The memory plan
// usually makes the output a view of the input, leaving nothing to copy.
class CopyOp final : public ExecutableOp {
 public:
  using ExecutableOp::ExecutableOp;
  void execute(ExecContext& ctx) const override {
    const Tensor& x = ctx.in(node().inputs[0]);
    void* y = ctx.out(node().outputs[0]).raw_data();
    if (y != x.raw_data()) std::memcpy(y, x.raw_data(), x.byte_size());
  }
  std::string implementation() const override { return "qfuse:copy"; }
};

// Concat: each input's block (its dims from the axis on, in memory order)
// copied beside the others' for each index of the dims before it. Inputs and
// output share one layout (the compiler groups them): plain, or channels last
// (N, spatial..., C in memory), where a channel concat copies C_i bytes per
// pixel. Any element type. oneDNN 2.6's concat runs such a channels-last u8
// concat as simple:any at ~0.5 GB/s (ShuffleNet's 48-channel 16x16 concat:
// 21 us); these copies are memcpy-bound.
class ConcatOp final : public ExecutableOp {
 public:
  ConcatOp(const graph::Graph& g, const Node& node, bool channels_last) : ExecutableOp(node) {
    const Shape& out = g.value(node.outputs[0]).shape;
    const auto rank = static_cast<std::int64_t>(out.size());
    std::int64_t axis = node.attr<graph::ConcatAttrs>().axis;
    if (axis < 0) axis += rank;
    // Dims in memory order.
    std::vector<std::int64_t> order;
    for (std::int64_t d = 0; d < rank; ++d) order.push_back(d);
    if (channels_last && rank >= 3) {
      order.erase(order.begin() + 1);
      order.push_back(1);
    }
    const auto pos = static_cast<std::size_t>(
        std::find(order.begin(), order.end(), axis) - order.begin());
    outer_ = 1;
    for (std::size_t k = 0; k < pos; ++k) outer_ *= out[static_cast<std::size_t>(order[k])];
    const std::size_t bytes = element_size(g.value(node.outputs[0]).type);
    for (graph::ValueId in : node.inputs) {
      const Shape& s = g.value(in).shape;
      std::int64_t block = 1;
      for (std::size_t k = pos; k < order.size(); ++k) block *= s[static_cast<std::size_t>(order[k])];
      blocks_.push_back(static_cast<std::size_t>(block) * bytes);
      row_ += blocks_.back();
    }
  }

  void execute(ExecContext& ctx) const override {
    auto* out = static_cast<std::uint8_t*>(ctx.out(node().outputs[0]).raw_data());
    const std::size_t row = row_;
    const bool parallel = static_cast<std::int64_t>(row) * outer_ >= (1 << 20) && outer_ > 1;
    // One input at a time, each copied to its column of every row: no
    // per-run table of input pointers.
    std::size_t column = 0;
    for (std::size_t i = 0; i < blocks_.size(); ++i) {
      const auto* in = static_cast<const std::uint8_t*>(ctx.in(node().inputs[i]).raw_data());
      const std::size_t block = blocks_[i];
      if (!parallel) {
        copy_rows(in, static_cast<std::int64_t>(block), out + column, static_cast<std::int64_t>(row),
                  static_cast<std::int64_t>(block), outer_);
      } else {
        parallel_for(parallel, outer_, [&](std::int64_t o) {
          const auto k = static_cast<std::size_t>(o);
          std::memcpy(out + k * row + column, in + k * block, block);
        });
      }
      column += block;
    }
  }

  std::string implementation() const override { return "qfuse:concat"; }

 private:
  std::int64_t outer_ = 1;
  std::size_t row_ = 0;
  std::vector<std::size_t> blocks_;  // bytes of each input per outer index
};

// Resize with ONNX's coordinate transforms. Nearest copies blocks through a
// table made once (any element type: f32, u8, s8; plain or channels last, the
// same for input and output): one entry per output block, a block being the
// trailing dims the resize leaves alone, so a channels-last upsample copies
// whole pixels. Linear interpolates f32 one axis at a time (multilinear is
// separable) on plain tensors.
class ResizeOp final : public ExecutableOp {
 public:
  ResizeOp(const graph::Graph& g, const Node& node, bool channels_last) : ExecutableOp(node) {
    in_shape_ = g.value(node.inputs[0]).shape;
    attrs_ = node.attr<graph::ResizeAttrs>();
    element_bytes_ = element_size(g.value(node.inputs[0]).type);
    if (attrs_.mode == graph::ResizeMode::nearest) make_block_table(channels_last);
  }

  std::string implementation() const override {
    return attrs_.mode == graph::ResizeMode::nearest ? "qfuse:resize_nearest" : "reference";
  }

  void execute(ExecContext& ctx) const override {
    const Tensor& x = ctx.in(node().inputs[0]);
    Tensor& out = ctx.out(node().outputs[0]);
    if (attrs_.mode == graph::ResizeMode::nearest) {
      const auto* in = static_cast<const std::uint8_t*>(x.raw_data());
      auto* y = static_cast<std::uint8_t*>(out.raw_data());
      const auto blocks = static_cast<std::int64_t>(source_.size());
      const std::size_t bytes = block_ * element_bytes_;
      parallel_for(blocks * static_cast<std::int64_t>(bytes) >= 65536, blocks, [&](std::int64_t i) {
        std::memcpy(y + static_cast<std::size_t>(i) * bytes,
                    in + static_cast<std::size_t>(source_[static_cast<std::size_t>(i)]) * element_bytes_,
                    bytes);
      });
      return;
    }
    std::vector<float> cur(x.data<float>().begin(), x.data<float>().end());
    Shape shape = in_shape_;
    for (std::size_t d = 0; d < shape.size(); ++d) {
      if (shape[d] == attrs_.sizes[d] && scale(d) == 1.0f) continue;
      cur = resize_linear_axis(cur, shape, d);
      shape[d] = attrs_.sizes[d];
    }
    auto y = out.data<float>();
    std::copy(cur.begin(), cur.end(), y.begin());
  }

 private:
  float scale(std::size_t d) const {
    return attrs_.scales.empty()
               ? static_cast<float>(attrs_.sizes[d]) / static_cast<float>(in_shape_[d])
               : attrs_.scales[d];
  }

  // Input coordinate of output coordinate `x` along axis d (ONNX Resize).
  double source_coordinate(std::size_t d, std::int64_t x) const {
    const double s = scale(d);
    const double in = static_cast<double>(in_shape_[d]);
    // ONNX's resized length: in * scale when scales are given (not the
    // floored output size), which matters for align_corners.
    const double out = attrs_.scales.empty() ? static_cast<double>(attrs_.sizes[d]) : in * s;
    const double xd = static_cast<double>(x);
    // v / scale; without explicit scales as v * in / out, so that exact
    // ratios like 3/5 give exact coordinates (1/s would round first).
    const auto unscale = [&](double v) {
      return attrs_.scales.empty() ? v * in / static_cast<double>(attrs_.sizes[d]) : v / s;
    };
    switch (attrs_.transform) {
      case graph::CoordinateTransform::half_pixel: return unscale(xd + 0.5) - 0.5;
      case graph::CoordinateTransform::pytorch_half_pixel:
        return out > 1 ? unscale(xd + 0.5) - 0.5 : 0.0;
      case graph::CoordinateTransform::align_corners:
        return out == 1 ? 0.0 : xd * (in - 1) / (out - 1);
      case graph::CoordinateTransform::asymmetric: return unscale(xd);
      case graph::CoordinateTransform::tf_half_pixel_for_nn: return unscale(xd + 0.5);
    }
    return 0.0;
  }

  std::int64_t nearest_index(std::size_t d, std::int64_t x) const {
    const double c = source_coordinate(d, x);
    double i = 0.0;
    switch (attrs_.nearest_mode) {
      case graph::NearestMode::round_prefer_floor:
        i = (c - std::floor(c) == 0.5) ? std::floor(c) : std::round(c);
        break;
      case graph::NearestMode::round_prefer_ceil:
        i = (c - std::floor(c) == 0.5) ? std::ceil(c) : std::round(c);
        break;
      case graph::NearestMode::floor: i = std::floor(c); break;
      case graph::NearestMode::ceil: i = std::ceil(c); break;
    }
    return std::clamp(static_cast<std::int64_t>(i), std::int64_t{0}, in_shape_[d] - 1);
  }

  // Fills source_ (the input element offset of each output block) and
  // block_ (elements per block). Dims run in memory order, outermost first.
  void make_block_table(bool channels_last) {
    const std::size_t rank = in_shape_.size();
    std::vector<std::size_t> order(rank);
    for (std::size_t i = 0; i < rank; ++i) order[i] = i;
    if (channels_last && rank >= 3) std::rotate(order.begin() + 1, order.begin() + 2, order.end());
    std::vector<std::int64_t> stride(rank);
    std::int64_t st = 1;
    for (std::size_t i = rank; i-- > 0;) {
      stride[order[i]] = st;
      st *= in_shape_[order[i]];
    }
    // Trailing dims copied as they are form the block.
    std::size_t copied = rank;
    block_ = 1;
    while (copied > 0) {
      const std::size_t d = order[copied - 1];
      bool identity = attrs_.sizes[d] == in_shape_[d];
      for (std::int64_t o = 0; identity && o < attrs_.sizes[d]; ++o) identity = nearest_index(d, o) == o;
      if (!identity) break;
      block_ *= static_cast<std::size_t>(in_shape_[d]);
      --copied;
    }
    std::vector<std::vector<std::int64_t>> offset(copied);
    std::int64_t blocks = 1;
    for (std::size_t i = 0; i < copied; ++i) {
      const std::size_t d = order[i];
      for (std::int64_t o = 0; o < attrs_.sizes[d]; ++o) offset[i].push_back(nearest_index(d, o) * stride[d]);
      blocks *= attrs_.sizes[d];
    }
    source_.assign(static_cast<std::size_t>(blocks), 0);
    std::vector<std::int64_t> index(copied, 0);
    for (std::int64_t& src : source_) {
      src = 0;
      for (std::size_t i = 0; i < copied; ++i) src += offset[i][static_cast<std::size_t>(index[i])];
      for (std::size_t i = copied; i-- > 0;) {
        if (++index[i] < attrs_.sizes[order[i]]) break;
        index[i] = 0;
      }
    }
  }

  std::vector<float> resize_linear_axis(const std::vector<float>& x, const Shape& shape,
                                        std::size_t d) const {
    const std::int64_t in = shape[d];
    const std::int64_t out = attrs_.sizes[d];
    std::int64_t outer = 1, inner = 1;
    for (std::size_t i = 0; i < d; ++i) outer *= shape[i];
    for (std::size_t i = d + 1; i < shape.size(); ++i) inner *= shape[i];
    std::vector<float> y(static_cast<std::size_t>(outer * out * inner));
    for (std::int64_t o = 0; o < out; ++o) {
      const double c = std::clamp(source_coordinate(d, o), 0.0, static_cast<double>(in - 1));
      const auto i0 = static_cast<std::int64_t>(std::floor(c));
      const std::int64_t i1 = std::min(i0 + 1, in - 1);
      const double w1 = c - static_cast<double>(i0);
      for (std::int64_t a = 0; a < outer; ++a) {
        const float* p0 = &x[static_cast<std::size_t>((a * in + i0) * inner)];
        const float* p1 = &x[static_cast<std::size_t>((a * in + i1) * inner)];
        float* q = &y[static_cast<std::size_t>((a * out + o) * inner)];
        for (std::int64_t b = 0; b < inner; ++b) {
          q[b] = static_cast<float>((1.0 - w1) * p0[b] + w1 * p1[b]);
        }
      }
    }
    return y;
  }

  Shape in_shape_;
  graph::ResizeAttrs attrs_;
  std::size_t element_bytes_ = 0;
  std::size_t block_ = 1;
  std::vector<std::int64_t> source_;
};


// A Slice that cuts only the innermost dimension in memory (channels of a
// channels-last tensor, the last dim of a plain one): the same block of
// every row, copied by copy_rows. Other slices are oneDNN reorders.
class SliceRowsOp final : public ExecutableOp {
 public:
  static std::unique_ptr<ExecutableOp> make(const graph::Graph& g, const Node& node,
                                            bool in_channels_last, bool out_channels_last) {
    const auto& a = node.attr<graph::SliceAttrs>();
    const graph::Value& x = g.value(node.inputs[0]);
    const Shape& s = x.shape;
    if (s.empty() || in_channels_last != out_channels_last) return nullptr;
    const bool cl = in_channels_last && s.size() >= 3;
    const std::size_t inner = cl ? 1 : s.size() - 1;
    std::int64_t rows = 1;
    for (std::size_t d = 0; d < s.size(); ++d) {
      if (d == inner) continue;
      if (a.begin[d] != 0 || a.size[d] != s[d]) return nullptr;
      rows *= s[d];
    }
    const auto e = static_cast<std::int64_t>(element_size(x.type));
    return std::unique_ptr<ExecutableOp>(
        new SliceRowsOp(node, rows, s[inner] * e, a.size[inner] * e, a.begin[inner] * e));
  }

  void execute(ExecContext& ctx) const override {
    const auto* x = static_cast<const std::uint8_t*>(ctx.in(node().inputs[0]).raw_data());
    auto* y = static_cast<std::uint8_t*>(ctx.out(node().outputs[0]).raw_data());
    copy_rows(x + offset_, src_row_, y, width_, width_, rows_);
  }

  std::string implementation() const override { return "qfuse:slice"; }

 private:
  SliceRowsOp(const Node& node, std::int64_t rows, std::int64_t src_row, std::int64_t width,
              std::int64_t offset)
      : ExecutableOp(node), rows_(rows), src_row_(src_row), width_(width), offset_(offset) {}

  std::int64_t rows_, src_row_, width_, offset_;
};

// ShuffleChannels, any element type: plain, whole channel planes copied in
// the new order; channels last, each pixel's channels permuted (bytes by
// ChannelPermutation). Input and output share the layout.
class ShuffleChannelsOp final : public ExecutableOp {
 public:
  ShuffleChannelsOp(const graph::Graph& g, const Node& node, bool channels_last)
      : ExecutableOp(node), perm_(source_channels(g, node)) {
    const graph::Value& x = g.value(node.inputs[0]);
    element_ = static_cast<std::int64_t>(element_size(x.type));
    batch_ = x.shape[0];
    channels_ = x.shape[1];
    for (std::size_t d = 2; d < x.shape.size(); ++d) inner_ *= x.shape[d];
    channels_last_ = channels_last && x.shape.size() >= 3;
    if (channels_last_ && element_ == 1) bytes_.emplace(perm_);
  }

  void execute(ExecContext& ctx) const override {
    const auto* x = static_cast<const std::uint8_t*>(ctx.in(node().inputs[0]).raw_data());
    auto* y = static_cast<std::uint8_t*>(ctx.out(node().outputs[0]).raw_data());
    if (bytes_) {
      bytes_->run(x, y, batch_ * inner_);
    } else if (channels_last_) {
      const std::int64_t row = channels_ * element_;
      for (std::int64_t p = 0; p < batch_ * inner_; ++p) {
        for (std::int64_t c = 0; c < channels_; ++c) {
          std::memcpy(y + p * row + c * element_,
                      x + p * row + perm_[static_cast<std::size_t>(c)] * element_,
                      static_cast<std::size_t>(element_));
        }
      }
    } else {
      const std::int64_t plane = inner_ * element_;
      for (std::int64_t n = 0; n < batch_; ++n) {
        for (std::int64_t c = 0; c < channels_; ++c) {
          std::memcpy(y + (n * channels_ + c) * plane,
                      x + (n * channels_ + perm_[static_cast<std::size_t>(c)]) * plane,
                      static_cast<std::size_t>(plane));
        }
      }
    }
  }

  std::string implementation() const override { return "qfuse:shuffle_channels"; }

 private:
  // Output channel j * g + i reads input channel i * (C / g) + j.
  static std::vector<std::int64_t> source_channels(const graph::Graph& g, const Node& node) {
    const std::int64_t channels = g.value(node.inputs[0]).shape[1];
    const std::int64_t groups = node.attr<graph::ShuffleChannelsAttrs>().groups;
    const std::int64_t per_group = channels / groups;
    std::vector<std::int64_t> perm(static_cast<std::size_t>(channels));
    for (std::int64_t c = 0; c < channels; ++c) {
      perm[static_cast<std::size_t>(c)] = (c % groups) * per_group + c / groups;
    }
    return perm;
  }

  std::vector<std::int64_t> perm_;
  std::optional<ChannelPermutation> bytes_;
  std::int64_t element_ = 1, batch_ = 1, channels_ = 1, inner_ = 1;
  bool channels_last_ = false;
};


// Gather: blocks of data (everything after `axis`) copied by index, any
// element type, plain layouts. Indices are checked against the axis's length
// on every inference: a token id past the vocabulary is an error naming the
// node, not a read out of bounds.
class GatherOp final : public ExecutableOp {
 public:
  GatherOp(const graph::Graph& g, const Node& node) : ExecutableOp(node) {
    const Shape& data = g.value(node.inputs[0]).shape;
    const auto axis = static_cast<std::size_t>(node.attr<graph::GatherAttrs>().axis);
    for (std::size_t d = 0; d < axis; ++d) outer_ *= data[d];
    length_ = data[axis];
    for (std::size_t d = axis + 1; d < data.size(); ++d) inner_ *= data[d];
    block_bytes_ = static_cast<std::size_t>(inner_) * element_size(g.value(node.inputs[0]).type);
  }

  void execute(ExecContext& ctx) const override {
    const Tensor& data = ctx.in(node().inputs[0]);
    const Tensor& idx = ctx.in(node().inputs[1]);
    const auto* src = static_cast<const std::byte*>(data.raw_data());
    auto* dst = static_cast<std::byte*>(ctx.out(node().outputs[0]).raw_data());
    const std::int64_t count = idx.size();
    std::vector<std::int64_t> rows(static_cast<std::size_t>(count));
    for (std::int64_t k = 0; k < count; ++k) {
      const std::int64_t i = index(idx, k);
      if (i < -length_ || i >= length_) {
        throw InferenceError("infer Gather node '" + node().name + "': index " + std::to_string(i) +
                             " is out of range (expected [" + std::to_string(-length_) + ", " +
                             std::to_string(length_) + "))");
      }
      rows[static_cast<std::size_t>(k)] = i < 0 ? i + length_ : i;
    }
    for (std::int64_t o = 0; o < outer_; ++o) {
      for (std::int64_t k = 0; k < count; ++k) {
        std::memcpy(dst + static_cast<std::size_t>(o * count + k) * block_bytes_,
                    src + static_cast<std::size_t>(o * length_ + rows[static_cast<std::size_t>(k)]) *
                              block_bytes_,
                    block_bytes_);
      }
    }
  }

  std::string implementation() const override { return "qfuse:gather"; }

 private:
  static std::int64_t index(const Tensor& idx, std::int64_t k) {
    const auto i = static_cast<std::size_t>(k);
    switch (idx.type()) {
      case ElementType::s64: return idx.data<std::int64_t>()[i];
      case ElementType::s32: return idx.data<std::int32_t>()[i];
      default: {
        // An integral f32 (an importer's integer carrier); others are no index.
        const float v = idx.data<float>()[i];
        return std::nearbyint(v) == v && std::abs(v) < 9.0e18f ? static_cast<std::int64_t>(v)
                                                              : std::numeric_limits<std::int64_t>::min();
      }
    }
  }

  std::int64_t outer_ = 1, length_ = 1, inner_ = 1;
  std::size_t block_bytes_ = 0;
};

// Convert from s64 (indices, masks) by a loop: oneDNN 2.6 has no 64-bit
// integers. To f32 rounds to nearest (exact below 2^24); to s32 saturates.
class ConvertFromS64Op final : public ExecutableOp {
 public:
  using ExecutableOp::ExecutableOp;
  void execute(ExecContext& ctx) const override {
    const auto x = ctx.in(node().inputs[0]).data<std::int64_t>();
    Tensor& y = ctx.out(node().outputs[0]);
    if (y.type() == ElementType::f32) {
      auto out = y.data<float>();
      for (std::size_t i = 0; i < x.size(); ++i) out[i] = static_cast<float>(x[i]);
      return;
    }
    auto out = y.data<std::int32_t>();
    for (std::size_t i = 0; i < x.size(); ++i) {
      out[i] = static_cast<std::int32_t>(std::clamp<std::int64_t>(
          x[i], std::numeric_limits<std::int32_t>::min(), std::numeric_limits<std::int32_t>::max()));
    }
  }
  std::string implementation() const override { return "qfuse:convert_s64"; }
};


}  // namespace

std::unique_ptr<ExecutableOp> make_broadcast_binary(const OpBuild& b) {
  return std::make_unique<BroadcastBinaryOp>(b.graph, b.node);
}

std::unique_ptr<ExecutableOp> make_copy(const OpBuild& b) { return std::make_unique<CopyOp>(b.node); }

std::unique_ptr<ExecutableOp> make_concat(const OpBuild& b) {
  return std::make_unique<ConcatOp>(b.graph, b.node, b.channels_last(b.node.outputs[0]));
}

std::unique_ptr<ExecutableOp> make_resize(const OpBuild& b) {
  return std::make_unique<ResizeOp>(b.graph, b.node, b.channels_last(b.node.inputs[0]));
}

std::unique_ptr<ExecutableOp> make_slice_of_rows(const OpBuild& b) {
  return SliceRowsOp::make(b.graph, b.node, b.channels_last(b.node.inputs[0]),
                           b.channels_last(b.node.outputs[0]));
}

std::unique_ptr<ExecutableOp> make_shuffle_channels(const OpBuild& b) {
  return std::make_unique<ShuffleChannelsOp>(b.graph, b.node, b.channels_last(b.node.inputs[0]));
}

std::unique_ptr<ExecutableOp> make_gather(const OpBuild& b) {
  return std::make_unique<GatherOp>(b.graph, b.node);
}

// The Converts oneDNN 2.6 gets wrong or has no type for (from s64, to s32),
// between plain buffers; the others are reorders.
std::unique_ptr<ExecutableOp> make_integer_convert(const OpBuild& b) {
  const Node& n = b.node;
  if (b.layout(n.inputs[0]) != Layout::plain || b.layout(n.outputs[0]) != Layout::plain) {
    return nullptr;
  }
  if (b.in(0).type == ElementType::s64) return std::make_unique<ConvertFromS64Op>(n);
  if (n.attr<graph::ConvertAttrs>().to == ElementType::s32) {
    return std::make_unique<ConvertToS32Op>(n);
  }
  return nullptr;
}

}  // namespace qfuse::plugin
