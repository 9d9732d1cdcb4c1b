// fuse_bias
//
//   layer(x, w[, b]) -> Add(c)     ==>   layer(x, w, b + c)
//
// c is a constant per tensor or per output channel (axis 1 of a convolution
// or deconvolution output, the last axis of a fully-connected one). The
// layer's bias is added to the accumulator by the primitive itself, which is
// where oneDNN wants it (deconvolution included).
// Preconditions: the layer output feeds only the Add; an existing bias is a
// constant. MatMul has no bias input and is left to the post-op chain.
//
//   MeanInnerProduct[shift] -> Add(c)  ==>  MeanInnerProduct[shift + c]
//
// (a classifier's Gemm bias after the pooled layer), unless the layer clamps
// its output (a Relu it took), which the Add would have to follow.

#include <cmath>

#include "graph/passes/passes.hpp"
#include "graph/op_info.hpp"
#include "graph/passes/pattern.hpp"

namespace qfuse::graph {
namespace {

constexpr std::string_view kPass = "fuse_bias";
using namespace pattern;

bool fuse_into_mean_inner_product(Graph& g, NodeId id, PassContext& ctx) {
  const Node& layer = g.node(id);
  auto attrs = layer.attr<MeanInnerProductAttrs>();
  if (std::isfinite(attrs.lo) || std::isfinite(attrs.hi)) return false;
  const auto next = sole_consumer(g, layer.outputs[0]);
  if (!next || g.node(*next).kind != OpKind::Add) return false;
  const Node& add = g.node(*next);
  const ValueId other = add.inputs[0] == layer.outputs[0] ? add.inputs[1] : add.inputs[0];
  const Shape shape = g.value(layer.outputs[0]).shape;
  if (g.value(add.outputs[0]).shape != shape || shape.size() < 2) return false;
  const auto c = channel_vector(g, other, shape, 1);
  if (!c) return false;
  const std::vector<float> shift = expand(*c, attrs.shift.size());
  for (std::size_t i = 0; i < attrs.shift.size(); ++i) attrs.shift[i] += shift[i];
  const std::string layer_name = layer.name, add_name = add.name;
  const NodeId add_id = *next;
  const ValueId add_out = add.outputs[0];
  const ValueId y = emit(g, OpKind::MeanInnerProduct, layer_name, layer.inputs, std::move(attrs));
  replace_value(g, add_out, y);
  g.erase_node(add_id);
  g.erase_node(id);
  ctx.log(kPass, add_name + " -> " + layer_name + "'s shift");
  return true;
}

}  // namespace

bool fuse_bias(Graph& g, PassContext& ctx) {
  for (NodeId id : g.topological_order()) {
    if (g.node(id).kind == OpKind::MeanInnerProduct) {
      if (fuse_into_mean_inner_product(g, id, ctx)) return true;
      continue;
    }
    const Node& layer = g.node(id);
    if (layer.kind != OpKind::Convolution && layer.kind != OpKind::Deconvolution &&
        layer.kind != OpKind::FullyConnected) {
      continue;
    }
    const auto next = sole_consumer(g, layer.outputs[0]);
    if (!next) continue;
    const Node& add = g.node(*next);
    if (add.kind != OpKind::Add) continue;
    const ValueId other = add.inputs[0] == layer.outputs[0] ? add.inputs[1] : add.inputs[0];
    const Shape shape = g.value(layer.outputs[0]).shape;
    if (g.value(add.outputs[0]).shape != shape) continue;
    const auto layer_axis = output_channel_axis(layer.kind, shape.size());
    if (!layer_axis) continue;
    const std::size_t axis = *layer_axis;
    auto c = channel_vector(g, other, shape, axis);
    if (!c) continue;
    const auto channels = static_cast<std::size_t>(shape[axis]);
    std::vector<float> bias = expand(*c, channels);
    if (layer.inputs.size() == 3) {
      auto old = constant_f32(g, layer.inputs[2]);
      if (!old) {
        ctx.reject(kPass, layer.name, "existing bias is not constant");
        continue;
      }
      for (std::size_t i = 0; i < channels; ++i) bias[i] += (*old)[i];
    }
    const std::string layer_name = layer.name, add_name = add.name;
    const NodeId add_id = *next;
    const ValueId add_out = add.outputs[0];
    const ValueId b = g.add_constant(layer_name + ".bias.fused",
                                     Tensor::from_vector<float>({static_cast<std::int64_t>(channels)}, bias));
    if (g.node(id).inputs.size() == 3) {
      g.set_input(id, 2, b);
    } else {
      g.append_input(id, b);
    }
    replace_value(g, add_out, g.node(id).outputs[0]);
    g.erase_node(add_id);
    ctx.log(kPass, add_name + " -> " + layer_name + ".bias");
    return true;
  }
  return false;
}

}  // namespace qfuse::graph
