// fold_batch_norm
//
//   x   w        (w = constant, or FakeQuantize(constant, ranges))
//    \ /
//   layer(+b)            ==>      layer(x, w * a, b * a + beta - mean * a)
//     |
//   BatchNorm(gamma, beta, mean, var, eps),   a = gamma / sqrt(var + eps)
//
// With FakeQuantize'd weights the ranges scale too, which is exact only when
// every a > 0: FQ(w * a; il * a, ih * a, ol * a, oh * a) = a * FQ(w; ...).
// (A Q/DQ pair quantizes the weights as the file gives them, and w * a /
// (s * a) is not w / s in f32: such weights are not constant here.)
// Otherwise (or when the weights are not constant) the BatchNorm becomes
// Multiply(a) + Add(beta - mean * a), which the post-op chain absorbs.
// Preconditions: the layer's output feeds only the BatchNorm; the channel
// axis of the BatchNorm is the layer's output channel axis.
//
// PyTorch's QAT conv-bn exports as layer -> Div(c) [-> Add(bias)] ->
// BatchNorm. There the BatchNorm becomes Multiply(a) + Add(beta - mean * a)
// as well, when every node between it and the layer is a single-consumer
// Multiply / Divide / Add / Subtract by a per-channel constant: the post-op
// chain then absorbs the whole run into the int8 layer.

#include <cmath>

#include "graph/passes/passes.hpp"
#include "graph/passes/pattern.hpp"

namespace qfuse::graph {
namespace {

constexpr std::string_view kPass = "fold_batch_norm";
using namespace pattern;

// Weights scaled by a[oc] along `axis`.
Tensor scale_along(const Tensor& w, const std::vector<float>& a, std::size_t axis) {
  Tensor out = w;
  auto data = out.data<float>();
  const Shape& s = w.shape();
  std::int64_t inner = 1;
  for (std::size_t i = axis + 1; i < s.size(); ++i) inner *= s[i];
  const std::int64_t channels = s[axis];
  for (std::size_t i = 0; i < data.size(); ++i) {
    const auto c = static_cast<std::size_t>((static_cast<std::int64_t>(i) / inner) % channels);
    data[i] *= a[c];
  }
  return out;
}

struct BatchNormParams {
  std::vector<float> scale;  // a
  std::vector<float> shift;  // beta - mean * a
};

std::optional<BatchNormParams> batch_norm_params(const Graph& g, const Node& bn) {
  auto gamma = constant_f32(g, bn.inputs[1]);
  auto beta = constant_f32(g, bn.inputs[2]);
  auto mean = constant_f32(g, bn.inputs[3]);
  auto var = constant_f32(g, bn.inputs[4]);
  if (!gamma || !beta || !mean || !var) return std::nullopt;
  const double eps = bn.attr<BatchNormAttrs>().epsilon;
  BatchNormParams p;
  for (std::size_t c = 0; c < gamma->size(); ++c) {
    const double a = (*gamma)[c] / std::sqrt(static_cast<double>((*var)[c]) + eps);
    p.scale.push_back(static_cast<float>(a));
    p.shift.push_back(static_cast<float>((*beta)[c] - (*mean)[c] * a));
  }
  return p;
}

// New weights value, or nullopt when the weights cannot absorb the scale.
std::optional<ValueId> fold_into_weights(Graph& g, const Node& layer, const BatchNormParams& p) {
  const int axis_i = weights_channel_axis(layer);
  if (axis_i < 0 || layer.kind == OpKind::MatMul) return std::nullopt;
  const auto axis = static_cast<std::size_t>(axis_i);
  const ValueId w = layer.inputs[1];
  const Value& wv = g.value(w);
  if (wv.is_constant() && wv.type == ElementType::f32) {
    return g.add_constant(wv.name + ".bn", scale_along(*wv.constant, p.scale, axis));
  }
  const Node* fq = producer_of(g, w, OpKind::FakeQuantize);
  if (fq == nullptr || g.consumers(w).size() != 1) return std::nullopt;
  const Value& raw_value = g.value(fq->inputs[0]);
  if (!raw_value.is_constant() || raw_value.type != ElementType::f32) return std::nullopt;
  const Value raw = raw_value;  // a copy: adding constants may move the value storage
  for (float a : p.scale) {
    if (!(a > 0.0f)) return std::nullopt;
  }
  std::vector<ValueId> inputs{
      g.add_constant(raw.name + ".bn", scale_along(*raw.constant, p.scale, axis))};
  for (std::size_t i = 1; i < 5; ++i) {
    auto range = channel_vector(g, fq->inputs[i], raw.shape, axis);
    if (!range) return std::nullopt;
    std::vector<float> scaled = expand(*range, p.scale.size());
    for (std::size_t c = 0; c < scaled.size(); ++c) scaled[c] *= p.scale[c];
    inputs.push_back(add_channel_constant(g, g.value(fq->inputs[i]).name + ".bn", scaled,
                                          raw.shape.size(), axis));
  }
  return emit(g, OpKind::FakeQuantize, fq->name + ".bn", inputs, fq->attrs);
}

// The layer `v` comes from through single-consumer elementwise steps by
// per-channel constants (axis 1 of `shape`), if any.
std::optional<NodeId> layer_through_channel_affine(const Graph& g, ValueId v, const Shape& shape) {
  while (true) {
    const NodeId p = g.value(v).producer;
    if (!p.valid()) return std::nullopt;
    const Node& n = g.node(p);
    if (is_layer(n.kind)) return p;
    const bool affine = n.kind == OpKind::Multiply || n.kind == OpKind::Divide ||
                        n.kind == OpKind::Add || n.kind == OpKind::Subtract;
    if (!affine || !sole_consumer(g, v) || !channel_vector(g, n.inputs[1], shape, 1)) {
      return std::nullopt;
    }
    v = n.inputs[0];
    if (g.value(v).shape != shape) return std::nullopt;
  }
}

// BatchNorm -> Multiply(a) + Add(beta - mean * a), for the post-op chain.
void emit_scale_shift(Graph& g, NodeId id, const BatchNormParams& params) {
  const Node& bn = g.node(id);
  const std::string name = bn.name;
  const ValueId x = bn.inputs[0];
  const ValueId out = bn.outputs[0];
  const std::size_t rank = g.value(out).shape.size();
  const ValueId a = add_channel_constant(g, name + ".scale", params.scale, rank, 1);
  const ValueId s = add_channel_constant(g, name + ".shift", params.shift, rank, 1);
  const ValueId mul = emit(g, OpKind::Multiply, name + "/scale", {x, a});
  const ValueId add = emit(g, OpKind::Add, name + "/shift", {mul, s});
  replace_value(g, out, add);
  g.erase_node(id);
}

}  // namespace

bool fold_batch_norm(Graph& g, PassContext& ctx) {
  for (NodeId id : g.topological_order()) {
    const Node& bn = g.node(id);
    if (bn.kind != OpKind::BatchNormalization) continue;
    const NodeId lid = g.value(bn.inputs[0]).producer;
    if (!lid.valid()) continue;
    if (!is_layer(g.node(lid).kind)) {
      const Shape shape = g.value(bn.inputs[0]).shape;
      const auto layer = layer_through_channel_affine(g, bn.inputs[0], shape);
      if (!layer || shape.size() < 2 || !sole_consumer(g, bn.inputs[0])) continue;
      auto params = batch_norm_params(g, bn);
      if (!params) {
        ctx.reject(kPass, bn.name, "parameters are not constant");
        continue;
      }
      const std::string bn_name = bn.name, layer_name = g.node(*layer).name;
      emit_scale_shift(g, id, *params);
      ctx.log(kPass, bn_name + " -> Multiply + Add (after per-channel steps of " + layer_name + ")");
      return true;
    }
    if (sole_consumer(g, bn.inputs[0]) != id) {
      ctx.reject(kPass, bn.name, "the layer output has other consumers");
      continue;
    }
    auto params = batch_norm_params(g, bn);
    if (!params) {
      ctx.reject(kPass, bn.name, "parameters are not constant");
      continue;
    }
    const Node layer = g.node(lid);
    const Shape out_shape = g.value(layer.outputs[0]).shape;
    const bool matrix = layer.kind == OpKind::FullyConnected || layer.kind == OpKind::MatMul;
    if (matrix && out_shape.size() != 2) {
      ctx.reject(kPass, bn.name, "its channel axis is not the layer's output channel");
      continue;
    }
    const std::string bn_name = bn.name;
    const ValueId bn_out = bn.outputs[0];

    // A bias that is not constant cannot absorb the shift: decided before
    // any new weights are built, so a rejected candidate leaves no trace.
    std::optional<std::vector<float>> old_bias;
    if (layer.inputs.size() == 3) {
      old_bias = constant_f32(g, layer.inputs[2]);
      if (!old_bias) {
        ctx.reject(kPass, bn.name, "the layer's bias is not constant");
        continue;
      }
    }
    if (auto new_w = fold_into_weights(g, layer, *params)) {
      std::vector<float> bias = params->shift;
      if (old_bias) {
        for (std::size_t c = 0; c < bias.size(); ++c) bias[c] += (*old_bias)[c] * params->scale[c];
      }
      const ValueId b = g.add_constant(layer.name + ".bias.bn",
                                       Tensor::from_vector<float>({static_cast<std::int64_t>(bias.size())}, bias));
      g.set_input(lid, 1, *new_w);
      if (g.node(lid).inputs.size() == 3) {
        g.set_input(lid, 2, b);
      } else {
        g.append_input(lid, b);
      }
      replace_value(g, bn_out, g.node(lid).outputs[0]);
      g.erase_node(id);
      ctx.log(kPass, bn_name + " -> " + layer.name + ".weights and .bias");
      return true;
    }
    // Scale and shift as nodes the post-op chain can absorb.
    emit_scale_shift(g, id, *params);
    ctx.log(kPass, bn_name + " -> Multiply + Add after " + layer.name);
    return true;
  }
  return false;
}

}  // namespace qfuse::graph
