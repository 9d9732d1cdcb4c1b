// hoist_data_movement_above_dequantize
//
//   q -> Dequantize(s, z) -> M -> layer  ==>  q -> M -> Dequantize(s, z) -> layer
//   Concat(DQ(q1), DQ(q2), ...)  ==>  DQ(Concat(q1, q2, ...))   (one z, one s)
//
// M moves data (pattern::moves_data: Reshape, Transpose, Slice, Resize in
// nearest mode, ...; the op table's moves_values), MaxPool among them, which
// also commutes with an increasing affine map (s > 0). A per-tensor
// dequantize is elementwise with scalars, so it commutes with all of them;
// moving M onto the int8 tensor makes it run on u8/s8 and lets the
// dequantize meet the layer (pool -> flatten -> fully-connected, or
// conv -> maxpool -> conv). One step per application: M swaps with the node
// right above it; when that node has other readers too (a channel split's two
// Slices), M moves above a copy of it and the others keep the original, which
// dies once every reader has moved. Concat moves in one step when every input is the same
// dequantize (same storage type, zero point and scale) of its own int8 tensor.
// Preconditions: that node is a per-tensor Dequantize, or a Multiply /
// Subtract / Add by a one-element constant; M leads to a layer
// (its activation, or either side of a MatMul of two run-time tensors).

#include "graph/passes/passes.hpp"
#include "graph/passes/pattern.hpp"

namespace qfuse::graph {
namespace {

constexpr std::string_view kPass = "hoist_data_movement_above_dequantize";
using namespace pattern;

// The value reaches a layer's activation input, or a quantize, through data
// movement and dequantize steps only.
bool leads_to_layer(const Graph& g, ValueId v, int depth = 0) {
  if (depth > 12) return false;
  for (NodeId u : g.consumers(v)) {
    const Node& n = g.node(u);
    // An activation input, or the right-hand side of a MatMul of two
    // run-time tensors (attention's K^T and V).
    if (is_layer(n.kind) && (n.inputs[0] == v || (n.kind == OpKind::MatMul && n.inputs[1] == v))) {
      return true;
    }
    // A quantize: the data is on codes again after it (a Concat input
    // requantized onto the Concat's grid).
    if ((n.kind == OpKind::Convert && n.attr<ConvertAttrs>().to != ElementType::f32) ||
        n.kind == OpKind::Quantize) {
      return true;
    }
    const bool passes_through = moves_data(n) || n.kind == OpKind::Concat ||
                                n.kind == OpKind::FakeQuantize || n.kind == OpKind::Dequantize ||
                                n.kind == OpKind::Convert || is_scalar_affine(g, n);
    if (passes_through && leads_to_layer(g, n.outputs[0], depth + 1)) return true;
  }
  return false;
}

bool hoist_concat(Graph& g, NodeId id, PassContext& ctx) {
  const Node cat = g.node(id);
  std::vector<Dequantized> inputs;
  for (ValueId in : cat.inputs) {
    auto d = dequantized(g, in);
    if (!d || sole_consumer(g, in) != id) return false;
    inputs.push_back(std::move(*d));
  }
  const Node& first = g.node(inputs[0].node);
  const ElementType type = g.value(inputs[0].codes).type;
  for (const Dequantized& d : inputs) {
    if (d.scale != inputs[0].scale || d.zero_point != inputs[0].zero_point ||
        g.value(d.codes).type != type) {
      ctx.reject(kPass, cat.name, "its inputs are dequantized with different parameters; "
                                  "it stays f32");
      return false;
    }
  }
  std::vector<ValueId> codes;
  for (const Dequantized& d : inputs) codes.push_back(d.codes);
  const std::string dq_name = first.name;
  const Attributes dq_attrs = first.attrs;
  const ValueId joined = emit(g, OpKind::Concat, cat.name, codes, cat.attrs);
  const ValueId y = emit(g, OpKind::Dequantize, dq_name, {joined}, dq_attrs);
  replace_value(g, cat.outputs[0], y);
  g.erase_node(id);
  for (const Dequantized& d : inputs) g.erase_node(d.node);
  ctx.log(kPass, cat.name + " runs on the int8 inputs");
  return true;
}

}  // namespace

bool hoist_data_movement_above_dequantize(Graph& g, PassContext& ctx) {
  for (NodeId id : g.topological_order()) {
    const Node& r = g.node(id);
    if (r.kind == OpKind::Concat) {
      if (leads_to_layer(g, r.outputs[0]) && hoist_concat(g, id, ctx)) return true;
      continue;
    }
    if (!moves_data(r)) continue;
    const NodeId pid = g.value(r.inputs[0]).producer;
    if (!pid.valid()) continue;
    const Node& p = g.node(pid);
    const bool per_tensor_dequantize = dequantized(g, r.inputs[0]).has_value();
    if (!per_tensor_dequantize && !is_scalar_affine(g, p)) continue;
    if (!leads_to_layer(g, r.outputs[0])) continue;
    // Other readers of the dequantized tensor (the two Slices of a channel
    // split) keep the original step; M gets its own copy of it.
    const bool shared = sole_consumer(g, r.inputs[0]) != id;
    const bool negative_scale =
        per_tensor_dequantize ? !(p.attr<DequantizeAttrs>().scale[0] > 0.0f)
                              : p.kind == OpKind::Multiply && (*constant_f32(g, p.inputs[1]))[0] <= 0.0f;
    if (r.kind == OpKind::MaxPool && negative_scale) {
      ctx.reject(kPass, r.name, "the dequantize scale is not positive, so the max of the "
                                "int8 values is not the max of the real ones");
      continue;
    }
    const Node mover = r, above = p;
    const ValueId moved = emit(g, mover.kind, mover.name, {above.inputs[0]}, mover.attrs);
    std::vector<ValueId> inputs = above.inputs;
    inputs[0] = moved;
    const ValueId result =
        emit(g, above.kind, shared ? above.name + "/for_" + mover.name : above.name, inputs,
             above.attrs);
    replace_value(g, mover.outputs[0], result);
    g.erase_node(id);
    if (!shared) g.erase_node(pid);
    ctx.log(kPass, mover.name + " moved above " + above.name +
                       (shared ? " (a copy of it: it has other readers)" : ""));
    return true;
  }
  return false;
}

}  // namespace qfuse::graph
