// hoist_reshape_above_dequantize
//
//   q -> Convert(f32) -> [Subtract(z)] -> Multiply(s) -> Flatten|Reshape -> layer
//     ==>  q -> Flatten|Reshape -> Convert(f32) -> [Subtract(z)] -> Multiply(s) -> layer
//
// A per-tensor dequantize is elementwise with a scalar, so it commutes with
// any reshape; moving the reshape onto the int8 tensor lets the dequantize
// meet the layer (the usual pool -> flatten -> fully-connected tail).
// One step per application: the reshape swaps with the node right above it.
// Preconditions: that node is a Convert, or a Multiply / Subtract / Add by a
// one-element constant, and its output feeds only the reshape.

#include "graph/passes/passes.hpp"
#include "graph/passes/pattern.hpp"

namespace qfuse::graph {
namespace {

constexpr std::string_view kPass = "hoist_reshape_above_dequantize";
using namespace pattern;

bool is_scalar_affine(const Graph& g, const Node& n) {
  if (n.kind != OpKind::Multiply && n.kind != OpKind::Subtract && n.kind != OpKind::Add) {
    return false;
  }
  const Value& c = g.value(n.inputs[1]);
  return c.is_constant() && element_count(c.shape) == 1 && c.shape.size() <= 1 &&
         !g.value(n.inputs[0]).is_constant();
}

// The value reaches a layer's activation input through reshapes and
// dequantize steps only.
bool leads_to_layer(const Graph& g, ValueId v, int depth = 0) {
  if (depth > 8) return false;
  for (NodeId u : g.consumers(v)) {
    const Node& n = g.node(u);
    if (is_layer(n.kind) && n.inputs[0] == v) return true;
    const bool passes_through = n.kind == OpKind::Reshape || n.kind == OpKind::Flatten ||
                                n.kind == OpKind::Convert || is_scalar_affine(g, n);
    if (passes_through && n.inputs[0] == v && leads_to_layer(g, n.outputs[0], depth + 1)) {
      return true;
    }
  }
  return false;
}

}  // namespace

bool hoist_reshape_above_dequantize(Graph& g, PassContext& ctx) {
  for (NodeId id : g.topological_order()) {
    const Node& r = g.node(id);
    if (r.kind != OpKind::Reshape && r.kind != OpKind::Flatten) continue;
    const NodeId pid = g.value(r.inputs[0]).producer;
    if (!pid.valid()) continue;
    const Node& p = g.node(pid);
    const bool convert = p.kind == OpKind::Convert && p.attr<ConvertAttrs>().to == ElementType::f32 &&
                         g.value(p.inputs[0]).type != ElementType::f32;
    if (!convert && !is_scalar_affine(g, p)) continue;
    if (sole_consumer(g, r.inputs[0]) != id || !leads_to_layer(g, r.outputs[0])) continue;
    const Node reshape = r, above = p;
    const ValueId moved = emit(g, reshape.kind, reshape.name, {above.inputs[0]}, reshape.attrs);
    std::vector<ValueId> inputs = above.inputs;
    inputs[0] = moved;
    const ValueId result = emit(g, above.kind, above.name, inputs, above.attrs);
    replace_value(g, reshape.outputs[0], result);
    g.erase_node(id);
    g.erase_node(pid);
    ctx.log(kPass, reshape.name + " moved above " + above.name);
    return true;
  }
  return false;
}

}  // namespace qfuse::graph
