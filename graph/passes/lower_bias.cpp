// lower_bias
//
//   bq (s32) -> Dequantize(s, z) ------------------------------+
//   x, w ------------------------------------------------------ layer(x, w, b)
//     ==>  layer(x, w, b')     b' the f32 constant the expression evaluates to
//
// Exporters write a layer's bias as the DequantizeLinear of an int32 tensor
// (ONNX Runtime: scale sx * sw[c], zero point 0). fuse_dequantize_into_layer
// needs the bias as a constant while the weights' dequantize is still in the
// graph, so this pass evaluates only the constant expressions that feed a
// layer's bias input. Folding every constant at this point would fold the
// weights' dequantize too, and the layer would lose its int8 weights; that
// general folding runs in the last phase. The arithmetic is the f32 operation
// the unfused runtime performs, so numerics do not change.

#include "graph/passes/passes.hpp"
#include "graph/passes/pattern.hpp"

namespace qfuse::graph {
namespace {
constexpr std::string_view kPass = "lower_bias";
}  // namespace

bool lower_bias(Graph& g, PassContext& ctx) {
  for (NodeId id : g.topological_order()) {
    const Node& layer = g.node(id);
    if (!is_layer(layer.kind) || layer.inputs.size() < 3) continue;
    const ValueId bias = layer.inputs[2];
    if (g.value(bias).is_constant()) continue;
    // The first foldable node of the expression, walking from the bias up.
    ValueId v = bias;
    std::optional<NodeId> foldable;
    while (!(foldable = foldable_constant_node(g, v))) {
      const NodeId p = g.value(v).producer;
      if (!p.valid()) break;
      const Node& n = g.node(p);
      const bool arithmetic = n.kind == OpKind::Multiply || n.kind == OpKind::Add ||
                              n.kind == OpKind::Subtract || n.kind == OpKind::Convert ||
                              n.kind == OpKind::Dequantize;
      if (!arithmetic) break;
      // Follow the operand that is not constant yet; two of them: not a
      // constant expression of one chain.
      std::optional<ValueId> next;
      for (ValueId in : n.inputs) {
        if (!g.value(in).is_constant()) {
          if (next) {
            next.reset();
            break;
          }
          next = in;
        }
      }
      if (!next) break;
      v = *next;
    }
    if (!foldable) {
      ctx.reject(kPass, layer.name, "bias is not a constant expression");
      continue;
    }
    const std::string folded = g.node(*foldable).name;
    const std::string name = layer.name;
    fold_constant_node(g, *foldable);
    ctx.log(kPass, folded + " -> constant (bias of " + name + ")");
    return true;
  }
  return false;
}

}  // namespace qfuse::graph
