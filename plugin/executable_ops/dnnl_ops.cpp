// Nodes that run as one oneDNN primitive each (not the fused int8 layers,
// quantized_layer.cpp): f32 layers with their absorbed post-ops, eltwise and
// binary ops, pools, normalizations, reorders (Convert, Transpose, Slice),
// on f32 or u8/s8, plain or channels last as the layout plan says. Each
// builder only describes the primitive and which graph value feeds which
// oneDNN argument; DnnlOp does the rest.

#include <algorithm>
#include <cstring>
#include <functional>
#include <unordered_map>
#include <utility>

#include <omp.h>

#include "graph/op_info.hpp"
#include "graph/node_queries.hpp"
#include "plugin/dnnl_utils.hpp"
#include "plugin/executable_ops/byte_kernels.hpp"
#include "plugin/executable_ops/ops.hpp"
#include "plugin/f32_post_ops.hpp"
#include "plugin/post_ops_attr.hpp"
#include "plugin/memory_plan.hpp"

namespace qfuse::plugin {
namespace {

using dnnl::algorithm;
using dnnl::memory;
using dnnl::prop_kind;
using graph::Node;
using graph::OpKind;
using graph::ValueId;

struct Binding {
  Binding(int a, ValueId v, const memory::desc& d) : arg(a), value(v), md(shared_desc(d)) {}
  int arg;
  ValueId value;
  std::shared_ptr<const memory::desc> md;  // shared with equal ones (shared_desc)
};

class DnnlOp final : public ExecutableOp {
 public:
  DnnlOp(const Node& node, const dnnl::engine& engine,
         std::shared_ptr<const SharedPrimitive> primitive, std::vector<Binding> bindings,
         std::vector<std::pair<int, memory>> constant_args = {}, std::string post_ops = {})
      : ExecutableOp(node),
        engine_(engine),
        primitive_(std::move(primitive)),
        bindings_(std::move(bindings)),
        constant_args_(std::move(constant_args)),
        post_ops_(std::move(post_ops)) {}

  void execute(ExecContext& ctx) const override {
    // The argument map is made on the first run of each request, of handles
    // to the request's memory objects, which every op of equal descriptors
    // shares (ExecContext::shared_memory); each run points them at this op's
    // (possibly replaced) buffers first.
    std::any& state = ctx.op_state();
    if (!state.has_value()) {
      std::unordered_map<int, memory> args;
      for (const Binding& b : bindings_) {
        args.emplace(b.arg, ctx.shared_memory(b.md, b.arg, engine_));
      }
      for (const auto& [arg, mem] : constant_args_) args.emplace(arg, mem);
      if (scratchpad_size() > 0) {
        args.emplace(DNNL_ARG_SCRATCHPAD,
                     ctx.shared_memory(primitive_->scratchpad, DNNL_ARG_SCRATCHPAD, engine_));
      }
      state = std::move(args);
    }
    auto& args = std::any_cast<std::unordered_map<int, memory>&>(state);
    for (const Binding& b : bindings_) {
      // oneDNN takes non-const handles; inputs are only read.
      args.at(b.arg).set_data_handle(const_cast<void*>(ctx.in(b.value).raw_data()));
    }
    if (scratchpad_size() > 0) args.at(DNNL_ARG_SCRATCHPAD).set_data_handle(ctx.scratchpad());
    primitive_->primitive.execute(ctx.stream(), args);
    ctx.stream().wait();
  }

  std::string implementation() const override { return primitive_->implementation; }
  std::string post_ops() const override { return post_ops_; }
  std::size_t scratchpad_size() const override { return primitive_->scratchpad->get_size(); }

 private:
  dnnl::engine engine_;
  std::shared_ptr<const SharedPrimitive> primitive_;  // shared by equal eltwise ops
  std::vector<Binding> bindings_;
  std::vector<std::pair<int, memory>> constant_args_;  // constant post-op operands
  std::string post_ops_;
};

std::shared_ptr<const SharedPrimitive> make_primitive(const dnnl::primitive_desc_base& pd) {
  return std::make_shared<const SharedPrimitive>(
      SharedPrimitive{dnnl::primitive(pd.get()), shared_desc(pd.scratchpad_desc()),
                      pd.impl_info_str()});
}

std::unique_ptr<ExecutableOp> make_op(const Node& node, const dnnl::engine& engine,
                                      const dnnl::primitive_desc_base& pd,
                                      std::vector<Binding> bindings) {
  return std::make_unique<DnnlOp>(node, engine, make_primitive(pd),
                                  std::move(bindings));
}

memory::dims to_dims(const graph::Ints& v) { return memory::dims(v.begin(), v.end()); }

// The node and its buffers' layouts (ops.hpp).
using Operands = OpBuild;

// An f32 layer (convolution, deconvolution, fully connected, matmul) with
// constant weights: the weights are reordered once into the layout the
// implementation picks (format any), the source and destination are the
// buffers' layouts (for convolutions channels last between layers, where
// oneDNN runs brgconv rather than gemm). When only oneDNN's reference
// implementation takes that pair, the destination is written in the layout
// the primitive picks and reordered into the buffer after it.
class ConstantWeightsOp final : public ExecutableOp {
 public:
  ConstantWeightsOp(const Node& node, const dnnl::engine& engine, dnnl::primitive_desc pd,
                    const memory::desc& w_plain, const Tensor& weights, const Tensor* bias,
                    const memory::desc& user_dst,
                    std::vector<std::pair<int, memory>> post_op_args = {},
                    std::string post_ops = {}, const memory::desc& user_src = {})
      : ExecutableOp(node),
        engine_(engine),
        pd_(std::move(pd)),
        user_src_md_(user_src),
        user_dst_md_(user_dst),
        post_op_args_(std::move(post_op_args)),
        post_ops_(std::move(post_ops)) {
    primitive_ = dnnl::primitive(pd_.get());
    weights_ = memory(pd_.weights_desc(), engine_);
    weights_plain_md_ = w_plain;
    memory plain(w_plain, engine_, const_cast<void*>(weights.raw_data()));
    reorder_at_compile(engine_, plain, weights_);
    if (bias != nullptr) {
      bias_ = memory(pd_.weights_desc(1), engine_);
      std::memcpy(bias_.get_data_handle(), bias->raw_data(), bias->byte_size());
    }
    scratch_ = pd_.scratchpad_desc().get_size();
    implementation_ = pd_.impl_info_str();
    if (pd_.dst_desc() != user_dst_md_) {
      stage_offset_ = (scratch_ + 63) / 64 * 64;
      scratch_ = stage_offset_ + pd_.dst_desc().get_size();
      dst_reorder_ = dnnl::reorder(
          dnnl::reorder::primitive_desc(engine_, pd_.dst_desc(), engine_, user_dst_md_));
      implementation_ += " + reorder";
    }
    if (user_src_md_ && pd_.src_desc() != user_src_md_) {
      src_offset_ = (scratch_ + 63) / 64 * 64;
      scratch_ = src_offset_ + pd_.src_desc().get_size();
      src_reorder_ = dnnl::reorder(
          dnnl::reorder::primitive_desc(engine_, user_src_md_, engine_, pd_.src_desc()));
      implementation_ = "reorder + " + implementation_;
    }
  }

  void execute(ExecContext& ctx) const override {
    // This request's memory objects, made on its first run; later runs only
    // point them at the buffers.
    struct State {
      std::unordered_map<int, memory> args;
      memory user_dst;     // the staged destination's target
      memory user_src;     // the staged source's origin
      memory staged_view;  // the staged destination as the shuffle reads it
    };
    std::any& slot = ctx.op_state();
    if (!slot.has_value()) {
      State st;
      st.args.emplace(DNNL_ARG_SRC, memory(pd_.src_desc(), engine_, nullptr));
      st.args.emplace(DNNL_ARG_WEIGHTS, weights_);
      if (bias_) st.args.emplace(DNNL_ARG_BIAS, bias_);
      for (const auto& [arg, mem] : post_op_args_) st.args.emplace(arg, mem);
      st.args.emplace(DNNL_ARG_DST, memory(pd_.dst_desc(), engine_, nullptr));
      st.args.emplace(DNNL_ARG_SCRATCHPAD, memory(pd_.scratchpad_desc(), engine_, nullptr));
      st.user_dst = memory(user_dst_md_, engine_, nullptr);
      if (src_reorder_) st.user_src = memory(user_src_md_, engine_, nullptr);
      if (staged_view_md_) st.staged_view = memory(staged_view_md_, engine_, nullptr);
      slot = std::move(st);
    }
    State& st = std::any_cast<State&>(slot);
    auto* scratch = static_cast<std::uint8_t*>(ctx.scratchpad());
    void* user_dst = ctx.out(node().outputs[0]).raw_data();
    void* user_src = const_cast<void*>(ctx.in(node().inputs[0]).raw_data());
    if (src_reorder_) {
      st.user_src.set_data_handle(user_src);
      st.args.at(DNNL_ARG_SRC).set_data_handle(scratch + src_offset_);
      ctx.staged([&] { src_reorder_.execute(ctx.stream(), st.user_src, st.args.at(DNNL_ARG_SRC)); });
    } else {
      st.args.at(DNNL_ARG_SRC).set_data_handle(user_src);
    }
    st.args.at(DNNL_ARG_SCRATCHPAD).set_data_handle(scratch);
    st.args.at(DNNL_ARG_DST).set_data_handle(dst_reorder_ ? scratch + stage_offset_ : user_dst);
    primitive_.execute(ctx.stream(), st.args);
    if (dst_reorder_) {
      st.user_dst.set_data_handle(user_dst);
      memory& staged = st.staged_view ? st.staged_view : st.args.at(DNNL_ARG_DST);
      if (st.staged_view) st.staged_view.set_data_handle(scratch + stage_offset_);
      ctx.staged([&] { dst_reorder_.execute(ctx.stream(), staged, st.user_dst); });
    }
    ctx.stream().wait();
  }

  std::string implementation() const override { return implementation_; }
  std::string post_ops() const override { return post_ops_; }
  std::size_t scratchpad_size() const override { return scratch_; }
  int staged_reorders() const override { return (dst_reorder_ ? 1 : 0) + (src_reorder_ ? 1 : 0); }
  // `weights` were the node's input 1 as stored (w_plain describes its
  // bytes), except for the pixel-shuffle form, which rearranged them.
  // The bias too, copied as given.
  bool keeps_input(std::size_t index) const override {
    return !staged_view_md_ && (index == 1 || (index == 2 && bias_));
  }
  Tensor plain_input(std::size_t index, const graph::Value& value) const override {
    if (!keeps_input(index)) return ExecutableOp::plain_input(index, value);
    return index == 2 ? held_constant(engine_, bias_, bias_.get_desc(), value)
                      : held_constant(engine_, weights_, weights_plain_md_, value);
  }

  // The primitive's destination is staged and then copied into the output
  // through two views of the same dims: `staged` over the staged buffer,
  // `user` over the output's (a pixel shuffle).
  void shuffle_destination(const memory::desc& staged, const memory::desc& user) {
    if (!dst_reorder_) {
      stage_offset_ = (scratch_ + 63) / 64 * 64;
      scratch_ = stage_offset_ + pd_.dst_desc().get_size();
    }
    staged_view_md_ = staged;
    user_dst_md_ = user;
    dst_reorder_ = dnnl::reorder(dnnl::reorder::primitive_desc(engine_, staged, engine_, user));
    implementation_ = std::string(pd_.impl_info_str()) + " + pixel shuffle";
  }

 private:
  dnnl::engine engine_;
  dnnl::primitive_desc pd_;
  dnnl::primitive primitive_;
  memory::desc user_src_md_, user_dst_md_, staged_view_md_, weights_plain_md_;
  memory weights_, bias_;
  dnnl::reorder dst_reorder_, src_reorder_;
  std::size_t scratch_ = 0, stage_offset_ = 0, src_offset_ = 0;
  std::string implementation_;
  std::vector<std::pair<int, memory>> post_op_args_;  // constant binary operands
  std::string post_ops_;
};

// The primitive attributes of an f32 layer: user scratchpad, and the post-ops
// of the chain it absorbed (their constant operands go to `args`, the
// run-time ones, a MatMul's only, to `runtime`).
// `rank` is the rank of the primitive's destination (a fully-connected layer
// runs on a 2D view); the op table says where the channels lie in it.
dnnl::primitive_attr layer_attr(const Operands& o, const dnnl::engine& engine, std::size_t rank,
                                std::vector<std::pair<int, memory>>& args,
                                std::vector<RuntimeOperand>* runtime = nullptr) {
  dnnl::primitive_attr attr = user_scratchpad_attr();
  if (o.chain != nullptr) {
    const Shape& out = o.out().shape;
    const std::int64_t channels = out[*graph::output_channel_axis(o.node.kind, out.size())];
    const auto axis = static_cast<int>(*graph::output_channel_axis(o.node.kind, rank));
    args = apply_chain(*o.chain, attr, engine, channels, axis, static_cast<int>(rank), runtime);
  }
  return attr;
}

std::string chain_text(const Operands& o) { return o.chain != nullptr ? describe(*o.chain) : ""; }

std::unique_ptr<ExecutableOp> make_convolution(const Operands& o, const dnnl::engine& engine) {
  const auto lock = convolution_descriptor_lock();  // see dnnl_utils.hpp
  const auto& a = o.node.attr<graph::ConvAttrs>();
  const Shape& w = o.in(1).shape;
  memory::desc w_plain = o.in_md(1);
  if (a.groups > 1) {
    // [OC, IC/g, k...] is [g, OC/g, IC/g, k...] in the same memory.
    Shape grouped{a.groups, w[0] / a.groups};
    grouped.insert(grouped.end(), w.begin() + 1, w.end());
    w_plain = plain_desc(grouped, ElementType::f32);
  }
  if (o.in(1).is_constant() && (!o.has(2) || o.in(2).is_constant()) &&
      o.in(0).type == ElementType::f32) {
    const memory::desc w_any(w_plain.dims(), memory::data_type::f32, memory::format_tag::any);
    const memory::desc b_md = o.has(2) ? o.in_md(2) : memory::desc();
    std::vector<std::pair<int, memory>> post_args;
    const dnnl::primitive_attr attr = layer_attr(o, engine, o.out().shape.size(), post_args);
    const auto make_pd = [&](const memory::desc& src, const memory::desc& dst) {
      dnnl::convolution_forward::desc desc(
          prop_kind::forward_inference, algorithm::convolution_direct, src, w_any, b_md, dst,
          to_dims(a.strides), to_dnnl_dilations(a.dilations), to_dims(a.pads_begin),
          to_dims(a.pads_end));
      return dnnl::convolution_forward::primitive_desc(desc, attr, engine);
    };
    const auto slow = [](const dnnl::primitive_desc& p) {
      const std::string impl = p.impl_info_str();
      return impl.find("ref") != std::string::npos || impl.find("gemm") != std::string::npos;
    };
    const memory::desc dst_any(o.out_md().dims(), memory::data_type::f32, memory::format_tag::any);
    auto pd = make_pd(o.in_md(0), o.out_md());
    memory::desc staged_src;
    if (std::string(pd.impl_info_str()).find("ref") != std::string::npos) {
      auto any = make_pd(o.in_md(0), dst_any);
      if (std::string(any.impl_info_str()).find("ref") == std::string::npos) pd = any;
    }
    if (slow(pd) && o.layout(o.node.inputs[0]) == Layout::plain && o.in(0).shape.size() >= 3) {
      // A plain source (after a Transpose) gets im2col gemm; channels last,
      // staged by one reorder, gets the blocked / brgconv kernel.
      const memory::desc cl = layout_desc(o.in(0).shape, ElementType::f32, Layout::channels_last);
      auto blocked = make_pd(cl, dst_any);
      if (!slow(blocked)) {
        pd = blocked;
        staged_src = o.in_md(0);
      }
    }
    return std::make_unique<ConstantWeightsOp>(o.node, engine, std::move(pd), w_plain,
                                               *o.in(1).constant,
                                               o.has(2) ? o.in(2).constant.get() : nullptr,
                                               o.out_md(), std::move(post_args), chain_text(o),
                                               staged_src);
  }
  const memory::desc& w_md = w_plain;
  const memory::desc b_md = o.has(2) ? o.in_md(2) : memory::desc();
  dnnl::convolution_forward::desc desc(
      prop_kind::forward_inference, algorithm::convolution_direct, o.in_md(0), w_md, b_md,
      o.out_md(), to_dims(a.strides), to_dnnl_dilations(a.dilations), to_dims(a.pads_begin),
      to_dims(a.pads_end));
  dnnl::convolution_forward::primitive_desc pd(desc, user_scratchpad_attr(), engine);
  std::vector<Binding> bindings{{DNNL_ARG_SRC, o.node.inputs[0], o.in_md(0)},
                                {DNNL_ARG_WEIGHTS, o.node.inputs[1], w_md},
                                {DNNL_ARG_DST, o.node.outputs[0], o.out_md()}};
  if (o.has(2)) bindings.push_back({DNNL_ARG_BIAS, o.node.inputs[2], b_md});
  return make_op(o.node, engine, pd, std::move(bindings));
}

// y[n, oc, h * kh + i, w * kw + j] = b[oc] + sum_ic x[n, ic, h, w] W[ic, oc, i, j]
// (is_shuffled_1x1_deconvolution): a 1x1 convolution to channels
// c = (i * kw + j) * OC + oc, stored channels last, then each pixel's
// channels copied to its kh x kw block: as 6D views [n, h, w, i, j, oc] of
// both buffers, one oneDNN reorder.
std::unique_ptr<ExecutableOp> make_shuffled_1x1_deconvolution(const Operands& o,
                                                              const dnnl::engine& engine) {
  const auto lock = convolution_descriptor_lock();  // see dnnl_utils.hpp
  const Shape& x = o.in(0).shape;
  const Shape& w = o.in(1).shape;  // [IC, OC, kh, kw]
  const Shape& y = o.out().shape;
  const std::int64_t n = x[0], ic = x[1], h = x[2], wd = x[3];
  const std::int64_t oc = w[1], kh = w[2], kw = w[3];
  const std::int64_t c = kh * kw * oc, ho = y[2], wo = y[3];
  std::vector<float> weights(static_cast<std::size_t>(c * ic));
  const auto src = o.in(1).constant->data<float>();
  for (std::int64_t i = 0; i < kh; ++i) {
    for (std::int64_t j = 0; j < kw; ++j) {
      for (std::int64_t k = 0; k < oc; ++k) {
        for (std::int64_t m = 0; m < ic; ++m) {
          weights[static_cast<std::size_t>(((i * kw + j) * oc + k) * ic + m)] =
              src[static_cast<std::size_t>(((m * oc + k) * kh + i) * kw + j)];
        }
      }
    }
  }
  const Tensor conv_weights = Tensor::from_vector<float>({c, ic, 1, 1}, std::move(weights));
  std::optional<Tensor> conv_bias;
  if (o.has(2)) {
    const auto b = o.in(2).constant->data<float>();
    std::vector<float> repeated(static_cast<std::size_t>(c));
    for (std::int64_t k = 0; k < c; ++k) {
      repeated[static_cast<std::size_t>(k)] = b[static_cast<std::size_t>(k % oc)];
    }
    conv_bias = Tensor::from_vector<float>({c}, std::move(repeated));
  }
  const memory::desc staged({n, c, h, wd}, memory::data_type::f32, memory::format_tag::nhwc);
  const memory::desc w_plain({c, ic, 1, 1}, memory::data_type::f32, memory::format_tag::oihw);
  const memory::desc w_any({c, ic, 1, 1}, memory::data_type::f32, memory::format_tag::any);
  const memory::desc b_md = conv_bias ? plain_desc(Shape{c}, ElementType::f32) : memory::desc();
  dnnl::convolution_forward::desc desc(prop_kind::forward_inference,
                                       algorithm::convolution_direct, o.in_md(0), w_any, b_md,
                                       staged, {1, 1}, {0, 0}, {0, 0});
  dnnl::convolution_forward::primitive_desc pd(desc, user_scratchpad_attr(), engine);
  auto op = std::make_unique<ConstantWeightsOp>(o.node, engine, pd, w_plain, conv_weights,
                                                conv_bias ? &*conv_bias : nullptr,
                                                pd.dst_desc());
  // Both views [n, h, w, i, j, oc]; the output in its buffer's layout.
  const memory::dims dims{n, h, wd, kh, kw, oc};
  const memory::desc staged_view(dims, memory::data_type::f32,
                                 memory::dims{h * wd * c, wd * c, c, kw * oc, oc, 1});
  const bool channels_last = o.layout(o.node.outputs[0]) == Layout::channels_last;
  const memory::desc user_view(
      dims, memory::data_type::f32,
      channels_last ? memory::dims{ho * wo * oc, kh * wo * oc, kw * oc, wo * oc, oc, 1}
                    : memory::dims{oc * ho * wo, kh * wo, kw, wo, 1, ho * wo});
  op->shuffle_destination(staged_view, user_view);
  return op;
}

std::unique_ptr<ExecutableOp> make_deconvolution(const Operands& o, const dnnl::engine& engine) {
  const auto lock = convolution_descriptor_lock();  // see dnnl_utils.hpp
  if (is_shuffled_1x1_deconvolution(o.graph, o.node)) {
    return make_shuffled_1x1_deconvolution(o, engine);
  }
  const auto& a = o.node.attr<graph::DeconvAttrs>();
  const Shape& w = o.in(1).shape;
  // Stored weights are [IC, OC/g, k...] = [g, IC/g, OC/g, k...]; oneDNN wants
  // [(g,) OC/g, IC/g, k...]: the same memory with the two channel axes swapped.
  memory::desc w_md;
  std::vector<int> perm;
  if (a.groups > 1) {
    Shape stored{a.groups, w[0] / a.groups, w[1]};
    stored.insert(stored.end(), w.begin() + 2, w.end());
    perm = {0, 2, 1};
    for (std::size_t i = 3; i < stored.size(); ++i) perm.push_back(static_cast<int>(i));
    w_md = permuted_desc(stored, perm, ElementType::f32);
  } else {
    perm = {1, 0};
    for (std::size_t i = 2; i < w.size(); ++i) perm.push_back(static_cast<int>(i));
    w_md = permuted_desc(w, perm, ElementType::f32);
  }
  // oneDNN derives the output size from the destination; output padding is
  // extra rows at the end, i.e. a smaller right padding.
  memory::dims pads_end;
  for (std::size_t i = 0; i < a.pads_end.size(); ++i) {
    pads_end.push_back(a.pads_end[i] - a.output_padding[i]);
  }
  const memory::desc b_md = o.has(2) ? o.in_md(2) : memory::desc();
  if (o.in(1).is_constant() && (!o.has(2) || o.in(2).is_constant())) {
    // Constant weights: reordered once into the kernel's layout.
    const memory::desc w_any(w_md.dims(), memory::data_type::f32, memory::format_tag::any);
    dnnl::deconvolution_forward::desc desc(
        prop_kind::forward_inference, algorithm::deconvolution_direct, o.in_md(0), w_any, b_md,
        o.out_md(), to_dims(a.strides), to_dnnl_dilations(a.dilations), to_dims(a.pads_begin),
        pads_end);
    dnnl::deconvolution_forward::primitive_desc pd(desc, user_scratchpad_attr(), engine);
    return std::make_unique<ConstantWeightsOp>(o.node, engine, std::move(pd), w_md,
                                               *o.in(1).constant,
                                               o.has(2) ? o.in(2).constant.get() : nullptr,
                                               o.out_md());
  }
  dnnl::deconvolution_forward::desc desc(
      prop_kind::forward_inference, algorithm::deconvolution_direct, o.in_md(0), w_md, b_md,
      o.out_md(), to_dims(a.strides), to_dnnl_dilations(a.dilations), to_dims(a.pads_begin),
      pads_end);
  dnnl::deconvolution_forward::primitive_desc pd(desc, user_scratchpad_attr(), engine);
  std::vector<Binding> bindings{{DNNL_ARG_SRC, o.node.inputs[0], o.in_md(0)},
                                {DNNL_ARG_WEIGHTS, o.node.inputs[1], w_md},
                                {DNNL_ARG_DST, o.node.outputs[0], o.out_md()}};
  if (o.has(2)) bindings.push_back({DNNL_ARG_BIAS, o.node.inputs[2], b_md});
  return make_op(o.node, engine, pd, std::move(bindings));
}

std::unique_ptr<ExecutableOp> make_fully_connected(const Operands& o,
                                                   const dnnl::engine& engine) {
  // Leading dims of x flatten into the batch.
  const Shape& x = o.in(0).shape;
  const std::int64_t k = x.back();
  const std::int64_t n = element_count(x) / k;
  const std::int64_t oc = o.in(1).shape[0];
  const memory::desc x_md = plain_desc(memory::dims{n, k}, ElementType::f32);
  const memory::desc y_md = plain_desc(memory::dims{n, oc}, ElementType::f32);
  const memory::desc b_md = o.has(2) ? o.in_md(2) : memory::desc();
  if (o.in(1).is_constant() && (!o.has(2) || o.in(2).is_constant())) {
    // Constant weights: reordered once into the layout the kernel picks.
    const memory::desc w_any(o.in_md(1).dims(), memory::data_type::f32, memory::format_tag::any);
    std::vector<std::pair<int, memory>> post_args;
    const dnnl::primitive_attr attr = layer_attr(o, engine, 2, post_args);
    dnnl::inner_product_forward::desc desc(prop_kind::forward_inference, x_md, w_any, b_md, y_md);
    dnnl::inner_product_forward::primitive_desc pd(desc, attr, engine);
    return std::make_unique<ConstantWeightsOp>(o.node, engine, std::move(pd), o.in_md(1),
                                               *o.in(1).constant,
                                               o.has(2) ? o.in(2).constant.get() : nullptr, y_md,
                                               std::move(post_args), chain_text(o));
  }
  dnnl::inner_product_forward::desc desc(prop_kind::forward_inference, x_md, o.in_md(1), b_md,
                                         y_md);
  dnnl::inner_product_forward::primitive_desc pd(desc, user_scratchpad_attr(), engine);
  std::vector<Binding> bindings{{DNNL_ARG_SRC, o.node.inputs[0], x_md},
                                {DNNL_ARG_WEIGHTS, o.node.inputs[1], o.in_md(1)},
                                {DNNL_ARG_DST, o.node.outputs[0], y_md}};
  if (o.has(2)) bindings.push_back({DNNL_ARG_BIAS, o.node.inputs[2], b_md});
  return make_op(o.node, engine, pd, std::move(bindings));
}

// A [..., R, C] operand of rank `rank`, optionally read transposed.
// An operand as the product reads it: Transpose(x, read_perm) (MatMulAttrs'
// perm_a / perm_b, of x's own rank), then its last two dims swapped when
// `transpose`; by strides over x's memory.
memory::desc matmul_operand(const Shape& shape, std::size_t rank, bool transpose,
                            const graph::Ints& read_perm = {}) {
  const Shape padded = pad_rank(shape, rank);
  std::vector<int> perm(rank);
  for (std::size_t i = 0; i < rank; ++i) {
    perm[i] = read_perm.size() == rank ? static_cast<int>(read_perm[i]) : static_cast<int>(i);
  }
  if (transpose) std::swap(perm[rank - 1], perm[rank - 2]);
  return permuted_desc(padded, perm, ElementType::f32);
}

std::unique_ptr<ExecutableOp> make_matmul(const Operands& o, const dnnl::engine& engine) {
  const auto& a = o.node.attr<graph::MatMulAttrs>();
  const std::size_t rank = o.out().shape.size();
  const memory::desc a_md = matmul_operand(o.in(0).shape, rank, a.transpose_a, a.perm_a);
  const memory::desc b_md = matmul_operand(o.in(1).shape, rank, a.transpose_b, a.perm_b);
  // With perm_y the product's dim j is the output's dim inverse[j].
  memory::desc y_md = o.out_md();
  if (a.perm_y.size() == rank) {
    std::vector<int> inverse(rank);
    for (std::size_t i = 0; i < rank; ++i) inverse[static_cast<std::size_t>(a.perm_y[i])] = static_cast<int>(i);
    y_md = permuted_desc(o.out().shape, inverse, ElementType::f32);
  }
  // Post-ops it absorbed: channels are the last dim.
  std::vector<std::pair<int, memory>> post_args;
  std::vector<RuntimeOperand> runtime;
  if (o.in(1).is_constant()) {
    // Constant right operand: reordered once into the kernel's layout.
    const dnnl::primitive_attr attr = layer_attr(o, engine, rank, post_args);
    const memory::desc b_any(b_md.dims(), memory::data_type::f32, memory::format_tag::any);
    dnnl::matmul::desc desc(a_md, b_any, y_md);
    dnnl::matmul::primitive_desc pd(desc, attr, engine);
    return std::make_unique<ConstantWeightsOp>(o.node, engine, std::move(pd), b_md,
                                               *o.in(1).constant, nullptr, y_md,
                                               std::move(post_args), chain_text(o));
  }
  const dnnl::primitive_attr attr = layer_attr(o, engine, rank, post_args, &runtime);
  dnnl::matmul::desc desc(a_md, b_md, y_md);
  dnnl::matmul::primitive_desc pd(desc, attr, engine);
  std::vector<Binding> bindings{{DNNL_ARG_SRC, o.node.inputs[0], a_md},
                                {DNNL_ARG_WEIGHTS, o.node.inputs[1], b_md},
                                {DNNL_ARG_DST, o.node.outputs[0], y_md}};
  for (const RuntimeOperand& op : runtime) bindings.push_back({op.arg, op.value, op.md});
  return std::make_unique<DnnlOp>(o.node, engine, make_primitive(pd), std::move(bindings),
                                  std::move(post_args), chain_text(o));
}

std::unique_ptr<ExecutableOp> make_eltwise(const Operands& o, const dnnl::engine& engine,
                                           algorithm alg, float alpha, float beta) {
  std::vector<Binding> bindings{{DNNL_ARG_SRC, o.node.inputs[0], o.in_md(0)},
                                {DNNL_ARG_DST, o.node.outputs[0], o.out_md()}};
  // The primitive reads its data's descriptor and the thread count make_op
  // set for it, besides the algorithm and its constants; equal ones share it.
  const EltwisePrimitives::Key key{alg, alpha, beta, omp_get_max_threads(), bindings[0].md};
  std::shared_ptr<const SharedPrimitive> primitive =
      o.eltwise_primitives != nullptr ? o.eltwise_primitives->find(key) : nullptr;
  if (primitive == nullptr) {
    dnnl::eltwise_forward::desc desc(prop_kind::forward_inference, alg, *key.data, alpha, beta);
    primitive = make_primitive(
        dnnl::eltwise_forward::primitive_desc(desc, user_scratchpad_attr(), engine));
    if (o.eltwise_primitives != nullptr) {
      primitive = o.eltwise_primitives->keep(key, std::move(primitive));
    }
  }
  return std::make_unique<DnnlOp>(o.node, engine, std::move(primitive), std::move(bindings));
}

// Eltwise primitives applied one after another: the first reads the input,
// the rest update the output in place. oneDNN 2.6's eltwise with eltwise
// post-ops has only a reference implementation, two jit passes are faster.
class EltwiseSequenceOp final : public ExecutableOp {
 public:
  EltwiseSequenceOp(const Node& node, const dnnl::engine& engine, memory::desc src_md,
                    memory::desc dst_md, const std::vector<dnnl::eltwise_forward::desc>& steps)
      : ExecutableOp(node), engine_(engine), src_md_(std::move(src_md)), dst_md_(std::move(dst_md)) {
    for (const auto& desc : steps) {
      dnnl::eltwise_forward::primitive_desc pd(desc, engine);
      if (!implementation_.empty()) implementation_ += " + ";
      implementation_ += pd.impl_info_str();
      primitives_.emplace_back(pd);
    }
  }

  void execute(ExecContext& ctx) const override {
    // This request's memory objects, made on its first run.
    std::any& slot = ctx.op_state();
    if (!slot.has_value()) {
      slot = std::pair<memory, memory>{memory(src_md_, engine_, nullptr),
                                       memory(dst_md_, engine_, nullptr)};
    }
    auto& [src, dst] = std::any_cast<std::pair<memory, memory>&>(slot);
    src.set_data_handle(const_cast<void*>(ctx.in(node().inputs[0]).raw_data()));
    dst.set_data_handle(ctx.out(node().outputs[0]).raw_data());
    for (std::size_t i = 0; i < primitives_.size(); ++i) {
      primitives_[i].execute(ctx.stream(), {{DNNL_ARG_SRC, i == 0 ? src : dst}, {DNNL_ARG_DST, dst}});
    }
    ctx.stream().wait();
  }

  std::string implementation() const override { return implementation_; }

 private:
  dnnl::engine engine_;
  memory::desc src_md_, dst_md_;
  std::vector<dnnl::primitive> primitives_;
  std::string implementation_;
};

// Several eltwise steps (HSigmoid: linear, then clip) as one op.
std::unique_ptr<ExecutableOp> make_eltwise_sequence(const Operands& o, const dnnl::engine& engine,
                                                    const std::vector<F32PostOp>& steps) {
  std::vector<dnnl::eltwise_forward::desc> descs;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    descs.emplace_back(prop_kind::forward_inference, steps[i].alg, i == 0 ? o.in_md(0) : o.out_md(),
                       steps[i].alpha, steps[i].beta);
  }
  return std::make_unique<EltwiseSequenceOp>(o.node, engine, o.in_md(0), o.out_md(), descs);
}

std::unique_ptr<ExecutableOp> make_binary(const Operands& o, const dnnl::engine& engine) {
  // oneDNN broadcasts only its second source; without a first source of the
  // destination's shape a loop broadcasts both.
  const std::optional<std::size_t> first_source = dnnl_binary_first_source(o.graph, o.node);
  if (!first_source) return make_broadcast_binary(o);
  const Shape& out = o.out().shape;
  const std::size_t rank = out.size();
  const std::size_t first = *first_source;
  const std::size_t second = 1 - first;
  // A full-shape operand in its buffer's layout; a broadcast one is plain
  // (with size-1 spatial dims both layouts are the same bytes).
  const auto operand = [&](std::size_t i) {
    return o.in(i).shape == out ? o.in_md(i)
                                : plain_desc(pad_rank(o.in(i).shape, rank), ElementType::f32);
  };
  const memory::desc src0 = operand(first);
  const memory::desc src1 = operand(second);
  dnnl::binary::desc desc(binary_algorithm(o.node.kind), src0, src1, o.out_md());
  dnnl::binary::primitive_desc pd(desc, user_scratchpad_attr(), engine);
  return make_op(o.node, engine, pd,
                 {{DNNL_ARG_SRC_0, o.node.inputs[first], src0},
                  {DNNL_ARG_SRC_1, o.node.inputs[second], src1},
                  {DNNL_ARG_DST, o.node.outputs[0], o.out_md()}});
}

std::unique_ptr<ExecutableOp> make_prelu(const Operands& o, const dnnl::engine& engine) {
  const memory::desc slope =
      plain_desc(pad_rank(o.in(1).shape, o.in(0).shape.size()), ElementType::f32);
  dnnl::prelu_forward::desc desc(prop_kind::forward_inference, o.in_md(0), slope);
  dnnl::prelu_forward::primitive_desc pd(desc, user_scratchpad_attr(), engine);
  return make_op(o.node, engine, pd,
                 {{DNNL_ARG_SRC, o.node.inputs[0], o.in_md(0)},
                  {DNNL_ARG_WEIGHTS, o.node.inputs[1], slope},
                  {DNNL_ARG_DST, o.node.outputs[0], o.out_md()}});
}

std::unique_ptr<ExecutableOp> make_batch_norm(const Operands& o, const dnnl::engine& engine) {
  const auto& a = o.node.attr<graph::BatchNormAttrs>();
  const auto flags = dnnl::normalization_flags::use_global_stats |
                     dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
  dnnl::batch_normalization_forward::desc desc(prop_kind::forward_inference, o.in_md(0),
                                               a.epsilon, flags);
  dnnl::batch_normalization_forward::primitive_desc pd(desc, user_scratchpad_attr(), engine);
  return make_op(o.node, engine, pd,
                 {{DNNL_ARG_SRC, o.node.inputs[0], o.in_md(0)},
                  {DNNL_ARG_SCALE, o.node.inputs[1], o.in_md(1)},
                  {DNNL_ARG_SHIFT, o.node.inputs[2], o.in_md(2)},
                  {DNNL_ARG_MEAN, o.node.inputs[3], o.in_md(3)},
                  {DNNL_ARG_VARIANCE, o.node.inputs[4], o.in_md(4)},
                  {DNNL_ARG_DST, o.node.outputs[0], o.out_md()}});
}

std::unique_ptr<ExecutableOp> make_pool(const Operands& o, const dnnl::engine& engine) {
  const auto& a = o.node.attr<graph::PoolAttrs>();
  const memory::desc src = o.in_md(0), dst = o.out_md();
  const bool channels_last = o.layout(o.node.inputs[0]) == Layout::channels_last;
  const dnnl::primitive_attr attr = affine_attr(a.out_scale, a.out_shift);
  const bool int8 = o.in(0).type != ElementType::f32;
  if (o.node.kind == OpKind::AvgPool && int8 && !channels_last && graph::pools_globally(o.graph, o.node)) {
    // oneDNN 2.6 pools u8/s8 with jit only channels last; its reduction is
    // jit on plain layouts.
    dnnl::reduction::desc desc(algorithm::reduction_mean, src, dst, 0.0f, 0.0f);
    dnnl::reduction::primitive_desc pd(desc, attr, engine);
    return make_op(o.node, engine, pd,
                   {{DNNL_ARG_SRC, o.node.inputs[0], src}, {DNNL_ARG_DST, o.node.outputs[0], dst}});
  }
  algorithm alg = algorithm::pooling_max;
  if (o.node.kind == OpKind::AvgPool) {
    alg = a.exclude_pad ? algorithm::pooling_avg_exclude_padding
                        : algorithm::pooling_avg_include_padding;
  }
  const auto make_pd = [&](const memory::desc& d) {
    dnnl::pooling_v2_forward::desc desc(prop_kind::forward_inference, alg, src, d,
                                        to_dims(a.strides), to_dims(a.kernel),
                                        to_dnnl_dilations(a.dilations), to_dims(a.pads_begin),
                                        to_dims(a.pads_end));
    return dnnl::pooling_v2_forward::primitive_desc(desc, attr, engine);
  };
  memory::desc d = dst;
  auto pd = make_pd(d);
  // A global pool's [N, C, 1, 1] output is the same memory plain or channels
  // last; oneDNN 2.6's jit pools want the source's layout on both sides and
  // otherwise run ref:any (57 us for a [1, 64, 8, 8] f32 pool).
  const Shape& out = o.out().shape;
  const bool one_pixel = out.size() >= 3 && std::all_of(out.begin() + 2, out.end(),
                                                        [](std::int64_t v) { return v == 1; });
  if (one_pixel && std::string(pd.impl_info_str()).find("ref") != std::string::npos &&
      o.layout(o.node.inputs[0]) != o.layout(o.node.outputs[0])) {
    d = layout_desc(out, o.out().type, o.layout(o.node.inputs[0]));
    pd = make_pd(d);
  }
  return make_op(o.node, engine, pd,
                 {{DNNL_ARG_SRC, o.node.inputs[0], src}, {DNNL_ARG_DST, o.node.outputs[0], d}});
}

std::unique_ptr<ExecutableOp> make_reorder(const Operands& o, const dnnl::engine& engine,
                                           const memory::desc& src_md) {
  dnnl::reorder::primitive_desc pd(engine, src_md, engine, o.out_md(), user_scratchpad_attr());
  return make_op(o.node, engine, pd,
                 {{DNNL_ARG_FROM, o.node.inputs[0], src_md},
                  {DNNL_ARG_TO, o.node.outputs[0], o.out_md()}});
}

std::unique_ptr<ExecutableOp> make_transpose(const Operands& o, const dnnl::engine& engine) {
  const auto& perm = o.node.attr<graph::TransposeAttrs>().perm;
  return make_reorder(o, engine,
                      permuted_desc(o.in(0).shape, std::vector<int>(perm.begin(), perm.end()),
                                    o.in(0).type));
}

// A unit-step slice is a view of the input: one reorder copies it out.
std::unique_ptr<ExecutableOp> make_slice(const Operands& o, const dnnl::engine& engine) {
  const auto& a = o.node.attr<graph::SliceAttrs>();
  const memory::desc view = o.in_md(0).submemory_desc(to_dims(a.size), to_dims(a.begin));
  return make_reorder(o, engine, view);
}

std::unique_ptr<ExecutableOp> make_reduce_mean(const Operands& o, const dnnl::engine& engine) {
  dnnl::reduction::desc desc(algorithm::reduction_mean, o.in_md(0), o.out_md(), 0.0f, 0.0f);
  dnnl::reduction::primitive_desc pd(desc, user_scratchpad_attr(), engine);
  return make_op(o.node, engine, pd,
                 {{DNNL_ARG_SRC, o.node.inputs[0], o.in_md(0)},
                  {DNNL_ARG_DST, o.node.outputs[0], o.out_md()}});
}

std::unique_ptr<ExecutableOp> make_power(const Operands& o, const dnnl::engine& engine) {
  const float p = o.node.attr<graph::PowerAttrs>().exponent;
  // x * x and sqrt are exact where powf need not be.
  if (p == 2.0f) return make_eltwise(o, engine, algorithm::eltwise_square, 0.0f, 0.0f);
  if (p == 0.5f) return make_eltwise(o, engine, algorithm::eltwise_sqrt, 0.0f, 0.0f);
  if (p == 1.0f) return make_reorder(o, engine, o.in_md(0));
  return make_eltwise(o, engine, algorithm::eltwise_pow, 1.0f, p);
}

// A quantizing Softmax writes its u8 / s8 codes itself: oneDNN 2.6's
// softmax_v2 takes a destination type of its own and a per-tensor output
// scale (1 / quantize_scale), no zero point and no post-op; its jit kernel
// multiplies the f32 result by the scale, saturates and converts rounding
// half to even.
dnnl::softmax_v2_forward::primitive_desc quantizing_softmax_pd(const Operands& o,
                                                               const dnnl::engine& engine) {
  const auto& a = o.node.attr<graph::SoftmaxAttrs>();
  dnnl::softmax_v2_forward::desc desc(prop_kind::forward_inference, algorithm::softmax_accurate,
                                      o.in_md(0), o.out_md(), static_cast<int>(a.axis));
  return {desc, output_scale_attr(1.0f / a.quantize_scale), engine};
}

// The same dims with `axis` innermost in memory (the others in order).
memory::desc axis_innermost_desc(const memory::desc& md, int axis) {
  const memory::dims dims = md.dims();
  memory::dims strides(dims.size());
  memory::dim stride = 1;
  strides[static_cast<std::size_t>(axis)] = stride;
  stride *= dims[static_cast<std::size_t>(axis)];
  for (std::size_t d = dims.size(); d-- > 0;) {
    if (static_cast<int>(d) == axis) continue;
    strides[d] = stride;
    stride *= dims[d];
  }
  return memory::desc(dims, md.data_type(), strides);
}

// A softmax along an axis that is not innermost in memory (YOLOv8's box
// distribution: [N, 16, 4, anchors] along 16), where oneDNN 2.6 has only its
// reference kernel: the input is reordered into a staging buffer with the
// axis innermost, the jit softmax runs there in place, and the result is
// reordered into the output. Two copies of the tensor cost far less than the
// reference kernel's strided loop (some 100x on a detector head).
class StagedSoftmaxOp final : public ExecutableOp {
 public:
  StagedSoftmaxOp(const Node& node, const dnnl::engine& engine,
                  const dnnl::softmax_forward::primitive_desc& pd, const memory::desc& user_src,
                  const memory::desc& user_dst)
      : ExecutableOp(node),
        engine_(engine),
        softmax_(pd),
        to_staged_(dnnl::reorder::primitive_desc(engine, user_src, engine, pd.src_desc())),
        from_staged_(dnnl::reorder::primitive_desc(engine, pd.dst_desc(), engine, user_dst)),
        user_src_md_(user_src),
        user_dst_md_(user_dst),
        staged_md_(pd.src_desc()),
        scratchpad_md_(pd.scratchpad_desc()),
        implementation_(pd.impl_info_str()) {
    stage_offset_ = (scratchpad_md_.get_size() + 63) / 64 * 64;
  }

  void execute(ExecContext& ctx) const override {
    struct State {
      memory src, dst, staged, scratchpad;
    };
    std::any& slot = ctx.op_state();
    if (!slot.has_value()) {
      slot = State{memory(user_src_md_, engine_, nullptr), memory(user_dst_md_, engine_, nullptr),
                   memory(staged_md_, engine_, nullptr),
                   memory(scratchpad_md_, engine_, nullptr)};
    }
    State& st = std::any_cast<State&>(slot);
    auto* scratch = static_cast<std::uint8_t*>(ctx.scratchpad());
    st.src.set_data_handle(const_cast<void*>(ctx.in(node().inputs[0]).raw_data()));
    st.dst.set_data_handle(ctx.out(node().outputs[0]).raw_data());
    st.staged.set_data_handle(scratch + stage_offset_);
    st.scratchpad.set_data_handle(scratch);
    ctx.staged([&] { to_staged_.execute(ctx.stream(), st.src, st.staged); });
    softmax_.execute(ctx.stream(), {{DNNL_ARG_SRC, st.staged},
                                    {DNNL_ARG_DST, st.staged},
                                    {DNNL_ARG_SCRATCHPAD, st.scratchpad}});
    ctx.staged([&] { from_staged_.execute(ctx.stream(), st.staged, st.dst); });
    ctx.stream().wait();
  }

  std::string implementation() const override { return implementation_; }
  std::size_t scratchpad_size() const override { return stage_offset_ + staged_md_.get_size(); }
  int staged_reorders() const override { return 2; }

 private:
  dnnl::engine engine_;
  dnnl::softmax_forward softmax_;
  dnnl::reorder to_staged_, from_staged_;
  memory::desc user_src_md_, user_dst_md_, staged_md_, scratchpad_md_;
  std::string implementation_;
  std::size_t stage_offset_ = 0;
};

std::unique_ptr<ExecutableOp> make_softmax(const Operands& o, const dnnl::engine& engine) {
  const auto axis = static_cast<int>(o.node.attr<graph::SoftmaxAttrs>().axis);
  if (o.node.attr<graph::SoftmaxAttrs>().quantizes()) {
    return make_op(o.node, engine, quantizing_softmax_pd(o, engine),
                   {{DNNL_ARG_SRC, o.node.inputs[0], o.in_md(0)},
                    {DNNL_ARG_DST, o.node.outputs[0], o.out_md()}});
  }
  dnnl::softmax_forward::desc desc(prop_kind::forward_inference, o.in_md(0), axis);
  dnnl::softmax_forward::primitive_desc pd(desc, user_scratchpad_attr(), engine);
  if (std::string_view(pd.impl_info_str()).starts_with("ref")) {
    const memory::desc staged = axis_innermost_desc(o.in_md(0), axis);
    dnnl::softmax_forward::desc staged_desc(prop_kind::forward_inference, staged, axis);
    dnnl::softmax_forward::primitive_desc staged_pd(staged_desc, user_scratchpad_attr(), engine);
    if (!std::string_view(staged_pd.impl_info_str()).starts_with("ref")) {
      return std::make_unique<StagedSoftmaxOp>(o.node, engine, staged_pd, o.in_md(0), o.out_md());
    }
  }
  return make_op(o.node, engine, pd,
                 {{DNNL_ARG_SRC, o.node.inputs[0], o.in_md(0)},
                  {DNNL_ARG_DST, o.node.outputs[0], o.out_md()}});
}

// MeanInnerProduct (graph/ops.hpp): the codes' channel sums S, exact in
// int64, split into byte planes S = sum_p 256^p * B_p (s8 codes shifted to u8
// first: S + 128 * P), so that the layer is one u8 x s8 -> s32 oneDNN inner
// product over the planes' rows; the rows recombine in int64, less the zero point's
// z * P * sum_k w[o, k], and are scaled once in double. Each row's products
// stay below 255 * 128 * K, in int32 for K < 65536 (the op's limit). Without
// VNNI oneDNN 2.6 multiplies u8 by s8 in pairs saturated to 16 bits
// (vpmaddubsw), which full bytes overflow: there the rows are summed by a
// plain integer loop instead.
class MeanInnerProductOp final : public ExecutableOp {
 public:
  MeanInnerProductOp(const graph::Graph& g, const Node& node, const dnnl::engine& engine,
                     bool channels_last)
      : ExecutableOp(node), engine_(engine), channels_last_(channels_last) {
    const auto& a = node.attr<graph::MeanInnerProductAttrs>();
    const graph::Value& x = g.value(node.inputs[0]);
    const graph::Value& w = g.value(node.inputs[1]);
    if (!w.is_constant()) {
      throw CompileError("compile MeanInnerProduct node '" + node.name +
                         "': the weights must be constant");
    }
    signed_ = x.type == ElementType::s8;
    batch_ = x.shape[0];
    inputs_ = x.shape[1];
    outputs_ = w.shape[0];
    for (std::size_t d = 2; d < x.shape.size(); ++d) pixels_ *= x.shape[d];
    // Bytes of the largest sum, 255 * pixels.
    for (std::int64_t top = 255 * pixels_; top > 0; top >>= 8) ++planes_;
    const std::int64_t rows = batch_ * planes_;
    src_md_ = memory::desc({rows, inputs_}, memory::data_type::u8, memory::format_tag::nc);
    dst_md_ = memory::desc({rows, outputs_}, memory::data_type::s32, memory::format_tag::nc);
    const memory::desc any({outputs_, inputs_}, memory::data_type::s8, memory::format_tag::any);
    // An inner product rather than a matmul: 20-35% faster on these shapes
    // (M = 2: 960 -> 240 and 480 -> 640, oneDNN 2.6 brgemm).
    const dnnl::inner_product_forward::primitive_desc pd(
        dnnl::inner_product_forward::desc(prop_kind::forward_inference, src_md_, any, dst_md_),
        user_scratchpad_attr(), engine_);
    const std::string impl = pd.impl_info_str();
    exact_ = impl.find("vnni") != std::string::npos || impl.find("amx") != std::string::npos;
    if (exact_) {
      primitive_ = dnnl::inner_product_forward(pd);
      scratchpad_md_ = pd.scratchpad_desc();
    }
    implementation_ = exact_ ? "qfuse:mean+" + impl : "qfuse:mean";
    weights_plain_ =
        memory::desc({outputs_, inputs_}, memory::data_type::s8, memory::format_tag::oi);
    if (exact_) {
      weights_ = memory(pd.weights_desc(), engine_);
      reorder_at_compile(
          engine_, memory(weights_plain_, engine_, const_cast<void*>(w.constant->raw_data())),
          weights_);
    }
    const auto codes = w.constant->data<std::int8_t>();
    if (!exact_) codes_.assign(codes.begin(), codes.end());
    const std::int64_t z = a.zero_point + (signed_ ? 128 : 0);
    correction_.resize(static_cast<std::size_t>(outputs_));
    for (std::int64_t o = 0; o < outputs_; ++o) {
      std::int64_t sum = 0;
      for (std::int64_t k = 0; k < inputs_; ++k) {
        sum += codes[static_cast<std::size_t>(o * inputs_ + k)];
      }
      correction_[static_cast<std::size_t>(o)] = z * pixels_ * sum;
    }
    scale_ = a.scale;
    shift_ = a.shift;
    lo_ = a.lo;
    hi_ = a.hi;
    const auto align = [](std::size_t b) { return (b + 63) / 64 * 64; };
    sums_offset_ = align(scratchpad_md_.get_size());
    planes_offset_ = sums_offset_ + align(static_cast<std::size_t>(batch_ * inputs_) * 8);
    acc_offset_ = planes_offset_ + align(static_cast<std::size_t>(rows * inputs_));
    scratch_ = acc_offset_ + static_cast<std::size_t>(rows * outputs_) * 4;
  }

  void execute(ExecContext& ctx) const override {
    auto* scratch = static_cast<std::uint8_t*>(ctx.scratchpad());
    const auto* x = static_cast<const std::uint8_t*>(ctx.in(node().inputs[0]).raw_data());
    auto* sums = reinterpret_cast<std::int64_t*>(scratch + sums_offset_);
    std::uint8_t* planes = scratch + planes_offset_;
    const std::int64_t offset = signed_ ? 128 * pixels_ : 0;
    for (std::int64_t n = 0; n < batch_; ++n) {
      const std::uint8_t* image = x + n * inputs_ * pixels_;
      std::int64_t* s = sums + n * inputs_;
      image_channel_sums(image, pixels_, inputs_, signed_, channels_last_, s);
      for (std::int64_t p = 0; p < planes_; ++p) {
        std::uint8_t* row = planes + (n * planes_ + p) * inputs_;
        for (std::int64_t k = 0; k < inputs_; ++k) {
          row[k] = static_cast<std::uint8_t>(((s[k] + offset) >> (8 * p)) & 0xff);
        }
      }
    }
    auto* rows_out = reinterpret_cast<std::int32_t*>(scratch + acc_offset_);
    if (exact_) {
      run_primitive(ctx, planes, rows_out);
    } else {
      for (std::int64_t r = 0; r < batch_ * planes_; ++r) {
        for (std::int64_t o = 0; o < outputs_; ++o) {
          const std::int8_t* w = codes_.data() + o * inputs_;
          const std::uint8_t* b = planes + r * inputs_;
          std::int32_t sum = 0;
          for (std::int64_t k = 0; k < inputs_; ++k) sum += b[k] * w[k];
          rows_out[r * outputs_ + o] = sum;
        }
      }
    }
    const std::int32_t* acc = rows_out;
    float* y = ctx.out(node().outputs[0]).data<float>().data();
    for (std::int64_t n = 0; n < batch_; ++n) {
      for (std::int64_t o = 0; o < outputs_; ++o) {
        std::int64_t total = 0;
        for (std::int64_t p = 0; p < planes_; ++p) {
          total += static_cast<std::int64_t>(acc[(n * planes_ + p) * outputs_ + o]) << (8 * p);
        }
        const auto c = static_cast<std::size_t>(o);
        const double v = static_cast<double>(scale_[c]) *
                             static_cast<double>(total - correction_[c]) +
                         static_cast<double>(shift_[c]);
        y[n * outputs_ + o] = std::clamp(static_cast<float>(v), lo_, hi_);
      }
    }
  }

  std::string implementation() const override { return implementation_; }
  std::size_t scratchpad_size() const override { return scratch_; }
  bool keeps_input(std::size_t index) const override { return exact_ && index == 1; }
  Tensor plain_input(std::size_t index, const graph::Value& value) const override {
    if (index != 1 || !exact_) return ExecutableOp::plain_input(index, value);
    return held_constant(engine_, weights_, weights_plain_, value);
  }

 private:
  // The planes' rows times the weights, into `rows`.
  void run_primitive(ExecContext& ctx, std::uint8_t* planes, std::int32_t* rows) const {
    auto* scratch = static_cast<std::uint8_t*>(ctx.scratchpad());
    std::any& state = ctx.op_state();
    if (!state.has_value()) {
      std::unordered_map<int, memory> args;
      args.emplace(DNNL_ARG_SRC, memory(src_md_, engine_, nullptr));
      args.emplace(DNNL_ARG_WEIGHTS, weights_);
      args.emplace(DNNL_ARG_DST, memory(dst_md_, engine_, nullptr));
      args.emplace(DNNL_ARG_SCRATCHPAD, memory(scratchpad_md_, engine_, nullptr));
      state = std::move(args);
    }
    auto& args = std::any_cast<std::unordered_map<int, memory>&>(state);
    args.at(DNNL_ARG_SRC).set_data_handle(planes);
    args.at(DNNL_ARG_DST).set_data_handle(rows);
    args.at(DNNL_ARG_SCRATCHPAD).set_data_handle(scratch);
    primitive_.execute(ctx.stream(), args);
    ctx.stream().wait();
  }

  dnnl::engine engine_;
  dnnl::primitive primitive_;
  memory weights_;
  memory::desc weights_plain_, src_md_, dst_md_, scratchpad_md_;
  std::string implementation_;
  bool exact_ = false;  // oneDNN sums full bytes without saturating (VNNI, AMX)
  std::vector<std::int8_t> codes_;  // [O, K], for the loop without VNNI
  bool signed_ = false, channels_last_ = false;
  std::int64_t batch_ = 1, inputs_ = 1, outputs_ = 1, pixels_ = 1, planes_ = 0;
  std::vector<std::int64_t> correction_;
  std::vector<float> scale_, shift_;
  float lo_ = 0.0f, hi_ = 0.0f;
  std::size_t sums_offset_ = 0, planes_offset_ = 0, acc_offset_ = 0, scratch_ = 0;
};

}  // namespace

std::optional<std::string> check_quantizing_softmax(const graph::Graph& graph,
                                                    const graph::Node& node,
                                                    const dnnl::engine& engine) {
  try {
    const std::string impl =
        quantizing_softmax_pd(OpBuild{graph, node, engine, LayoutOf{}}, engine).impl_info_str();
    if (impl.find("ref") != std::string::npos) {
      return "oneDNN offers only its reference implementation (" + impl + ")";
    }
    return std::nullopt;
  } catch (const dnnl::error& e) {
    return std::string("oneDNN refused it: ") + e.what();
  }
}

// The makers of the executable table (ops.hpp).
std::unique_ptr<ExecutableOp> make_dnnl_convolution(const OpBuild& b) {
  return make_convolution(b, b.engine);
}

std::unique_ptr<ExecutableOp> make_dnnl_deconvolution(const OpBuild& b) {
  return make_deconvolution(b, b.engine);
}

std::unique_ptr<ExecutableOp> make_dnnl_fully_connected(const OpBuild& b) {
  return make_fully_connected(b, b.engine);
}

std::unique_ptr<ExecutableOp> make_dnnl_matmul(const OpBuild& b) { return make_matmul(b, b.engine); }

// Unary activations: the same algorithms an f32 layer's absorbed post-ops use.
std::unique_ptr<ExecutableOp> make_dnnl_eltwise(const OpBuild& b) {
  const std::vector<F32PostOp> steps = eltwise_steps(b.node);
  if (steps.empty()) return nullptr;
  if (steps.size() > 1) return make_eltwise_sequence(b, b.engine, steps);
  return make_eltwise(b, b.engine, steps[0].alg, steps[0].alpha, steps[0].beta);
}

std::unique_ptr<ExecutableOp> make_dnnl_binary(const OpBuild& b) { return make_binary(b, b.engine); }
std::unique_ptr<ExecutableOp> make_dnnl_prelu(const OpBuild& b) { return make_prelu(b, b.engine); }

std::unique_ptr<ExecutableOp> make_dnnl_batch_norm(const OpBuild& b) {
  return make_batch_norm(b, b.engine);
}

std::unique_ptr<ExecutableOp> make_dnnl_pool(const OpBuild& b) { return make_pool(b, b.engine); }

std::unique_ptr<ExecutableOp> make_dnnl_transpose(const OpBuild& b) {
  return make_transpose(b, b.engine);
}

std::unique_ptr<ExecutableOp> make_dnnl_reorder(const OpBuild& b) {
  return make_reorder(b, b.engine, b.in_md(0));
}

std::unique_ptr<ExecutableOp> make_dnnl_slice(const OpBuild& b) { return make_slice(b, b.engine); }

std::unique_ptr<ExecutableOp> make_dnnl_reduce_mean(const OpBuild& b) {
  return make_reduce_mean(b, b.engine);
}

std::unique_ptr<ExecutableOp> make_dnnl_power(const OpBuild& b) { return make_power(b, b.engine); }

std::unique_ptr<ExecutableOp> make_dnnl_softmax(const OpBuild& b) {
  return make_softmax(b, b.engine);
}

std::unique_ptr<ExecutableOp> make_dnnl_mean_inner_product(const OpBuild& b) {
  return std::make_unique<MeanInnerProductOp>(b.graph, b.node, b.engine,
                                              b.channels_last(b.node.inputs[0]));
}

bool is_shuffled_1x1_deconvolution(const graph::Graph& graph, const graph::Node& node) {
  if (node.kind != OpKind::Deconvolution || node.inputs.size() < 2) return false;
  const graph::Value& x = graph.value(node.inputs[0]);
  const graph::Value& w = graph.value(node.inputs[1]);
  if (x.type != ElementType::f32 || x.shape.size() != 4 || !w.is_constant() ||
      w.type != ElementType::f32 || w.shape.size() != 4) {
    return false;
  }
  if (node.inputs.size() > 2 && !graph.value(node.inputs[2]).is_constant()) return false;
  return kernel_is_stride(node.attr<graph::DeconvAttrs>(), w.shape);
}

std::size_t EltwisePrimitives::Hash::operator()(const Key& k) const {
  std::size_t h = std::hash<const void*>{}(k.data.get());
  h = h * 31u + static_cast<std::size_t>(k.alg);
  h = h * 31u + std::hash<float>{}(k.alpha);
  h = h * 31u + std::hash<float>{}(k.beta);
  return h * 31u + static_cast<std::size_t>(k.threads);
}

std::shared_ptr<const SharedPrimitive> EltwisePrimitives::find(const Key& key) const {
  const std::lock_guard<std::mutex> lock(mutex_);
  const auto it = made_.find(key);
  return it != made_.end() ? it->second : nullptr;
}

std::shared_ptr<const SharedPrimitive> EltwisePrimitives::keep(
    const Key& key, std::shared_ptr<const SharedPrimitive> made) {
  const std::lock_guard<std::mutex> lock(mutex_);
  return made_.try_emplace(key, std::move(made)).first->second;
}

}  // namespace qfuse::plugin
