// fold_scale_into_layer
//
//   layer(x, w[, b]) -> Multiply(c)   ==>   layer(x, w * c, b * c)
//
// An f32 layer that stays f32 (its weights are constant by now) and is
// followed by a Multiply by a per-tensor or per-output-channel constant takes
// the factor into its weights and bias: PP-LCNet's learnable affine blocks
// (x * a + b after each convolution) or a BatchNormalization left as
// Multiply + Add. fuse_bias then takes the Add. It runs in the fold phase:
// a weight dequantize has been folded by then, and a quantized layer (whose
// chain takes the Multiply) is no longer a Convolution / FullyConnected.
// Preconditions: constant f32 weights (and bias); the layer's output feeds
// only the Multiply; the factor varies at most along the output channels.

#include "graph/passes/passes.hpp"
#include "graph/op_info.hpp"
#include "graph/passes/pattern.hpp"

namespace qfuse::graph {
namespace {

constexpr std::string_view kPass = "fold_scale_into_layer";
using namespace pattern;

// `w` with its slice k along axis 0 multiplied by c[k].
Tensor scale_rows(const Tensor& w, const std::vector<float>& c) {
  Tensor out = w;
  auto data = out.data<float>();
  const auto rows = static_cast<std::size_t>(w.shape()[0]);
  const std::size_t per_row = data.size() / rows;
  for (std::size_t k = 0; k < rows; ++k) {
    for (std::size_t i = 0; i < per_row; ++i) data[k * per_row + i] *= c[k];
  }
  return out;
}

}  // namespace

bool fold_scale_into_layer(Graph& g, PassContext& ctx) {
  for (NodeId id : g.topological_order()) {
    const Node& layer = g.node(id);
    if (layer.kind != OpKind::Convolution && layer.kind != OpKind::FullyConnected) continue;
    const Value& w = g.value(layer.inputs[1]);
    if (!w.is_constant() || w.type != ElementType::f32) continue;
    if (layer.inputs.size() == 3 && !constant_f32(g, layer.inputs[2])) continue;
    const auto next = sole_consumer(g, layer.outputs[0]);
    if (!next || g.node(*next).kind != OpKind::Multiply) continue;
    const Node& mul = g.node(*next);
    const ValueId other = mul.inputs[0] == layer.outputs[0] ? mul.inputs[1] : mul.inputs[0];
    const Shape shape = g.value(layer.outputs[0]).shape;
    if (g.value(mul.outputs[0]).shape != shape) continue;
    const auto layer_axis = output_channel_axis(layer.kind, shape.size());
    if (!layer_axis) continue;
    const std::size_t axis = *layer_axis;
    const auto c = channel_vector(g, other, shape, axis);
    if (!c) continue;
    const auto channels = static_cast<std::size_t>(shape[axis]);
    if (static_cast<std::size_t>(w.shape[0]) != channels) continue;
    const std::vector<float> factor = expand(*c, channels);
    const std::string name = layer.name, mul_name = mul.name;
    const ValueId mul_out = mul.outputs[0];
    const NodeId mul_id = *next;
    const ValueId scaled = g.add_constant(name + ".w.scaled", scale_rows(*w.constant, factor));
    std::optional<ValueId> bias;
    if (layer.inputs.size() == 3) {
      std::vector<float> b = *constant_f32(g, layer.inputs[2]);
      for (std::size_t k = 0; k < channels; ++k) b[k] *= factor[k];
      bias = g.add_constant(name + ".bias.scaled",
                            Tensor::from_vector<float>({static_cast<std::int64_t>(channels)}, b));
    }
    g.set_input(id, 1, scaled);
    if (bias) g.set_input(id, 2, *bias);
    replace_value(g, mul_out, g.node(id).outputs[0]);
    g.erase_node(mul_id);
    ctx.log(kPass, mul_name + " -> the weights of " + name);
    return true;
  }
  return false;
}

}  // namespace qfuse::graph
