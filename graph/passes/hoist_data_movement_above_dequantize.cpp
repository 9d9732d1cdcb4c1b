// hoist_data_movement_above_dequantize
//
//   q -> Convert(f32) -> [Subtract(z)] -> Multiply(s) -> M -> layer
//     ==>  q -> M -> Convert(f32) -> [Subtract(z)] -> Multiply(s) -> layer
//   Concat(DQ(q1), DQ(q2), ...)  ==>  DQ(Concat(q1, q2, ...))   (one z, one s)
//
// M moves data: Reshape, Flatten, Transpose, Slice, Resize (nearest), and
// MaxPool, which also commutes with an increasing affine map (s > 0). A
// per-tensor dequantize is elementwise with scalars, so it commutes with all
// of them; moving M onto the int8 tensor makes it run on u8/s8 and lets the
// dequantize meet the layer (pool -> flatten -> fully-connected, or
// conv -> maxpool -> conv). One step per application: M swaps with the node
// right above it. Concat moves in one step when every input is the same
// dequantize (same storage type, zero point and scale) of its own int8 tensor.
// Preconditions: that node is a Convert from u8/s8, or a Multiply / Subtract /
// Add by a one-element constant; its output feeds only M; M leads to a layer.

#include "graph/passes/passes.hpp"
#include "graph/passes/pattern.hpp"

namespace qfuse::graph {
namespace {

constexpr std::string_view kPass = "hoist_data_movement_above_dequantize";
using namespace pattern;

bool is_scalar_affine(const Graph& g, const Node& n) {
  if (n.kind != OpKind::Multiply && n.kind != OpKind::Subtract && n.kind != OpKind::Add) {
    return false;
  }
  const Value& c = g.value(n.inputs[1]);
  return c.is_constant() && element_count(c.shape) == 1 && c.shape.size() <= 1 &&
         !g.value(n.inputs[0]).is_constant();
}

bool is_int8_to_f32(const Graph& g, const Node& n) {
  return n.kind == OpKind::Convert && n.attr<ConvertAttrs>().to == ElementType::f32 &&
         g.value(n.inputs[0]).type != ElementType::f32;
}


// The value reaches a layer's activation input through data movement and
// dequantize steps only.
bool leads_to_layer(const Graph& g, ValueId v, int depth = 0) {
  if (depth > 12) return false;
  for (NodeId u : g.consumers(v)) {
    const Node& n = g.node(u);
    if (is_layer(n.kind) && n.inputs[0] == v) return true;
    const bool passes_through = moves_data(n) || n.kind == OpKind::Concat ||
                                n.kind == OpKind::Convert || is_scalar_affine(g, n);
    if (passes_through && leads_to_layer(g, n.outputs[0], depth + 1)) return true;
  }
  return false;
}

// The dequantize chain above `v`: Convert, [Subtract], Multiply, each read
// only by the next; empty when `v` is not such a chain's end.
std::vector<NodeId> dequantize_chain(const Graph& g, ValueId v) {
  const Node* mul = producer_of(g, v, OpKind::Multiply);
  if (mul == nullptr || !is_scalar_affine(g, *mul)) return {};
  std::vector<NodeId> chain{g.value(v).producer};
  ValueId cur = mul->inputs[0];
  if (const Node* sub = producer_of(g, cur, OpKind::Subtract)) {
    if (!is_scalar_affine(g, *sub) || sole_consumer(g, cur) != chain.back()) return {};
    chain.push_back(g.value(cur).producer);
    cur = sub->inputs[0];
  }
  const Node* cv = producer_of(g, cur, OpKind::Convert);
  if (cv == nullptr || !is_int8_to_f32(g, *cv) || sole_consumer(g, cur) != chain.back()) return {};
  chain.push_back(g.value(cur).producer);
  return chain;  // Multiply, [Subtract,] Convert
}

// The constants of a chain, compared across Concat inputs.
std::vector<float> chain_key(const Graph& g, const std::vector<NodeId>& chain) {
  std::vector<float> key;
  const Node& cv = g.node(chain.back());
  key.push_back(static_cast<float>(g.value(cv.inputs[0]).type));
  key.push_back(chain.size() == 3 ? (*constant_f32(g, g.node(chain[1]).inputs[1]))[0] : 0.0f);
  key.push_back((*constant_f32(g, g.node(chain[0]).inputs[1]))[0]);
  return key;
}

bool hoist_concat(Graph& g, NodeId id, PassContext& ctx) {
  const Node cat = g.node(id);
  std::vector<std::vector<NodeId>> chains;
  for (ValueId in : cat.inputs) {
    auto chain = dequantize_chain(g, in);
    if (chain.empty() || sole_consumer(g, in) != id) return false;
    chains.push_back(std::move(chain));
  }
  const std::vector<float> key = chain_key(g, chains[0]);
  for (const auto& chain : chains) {
    if (chain_key(g, chain) != key) {
      ctx.reject(kPass, cat.name, "its inputs are dequantized with different parameters; "
                                  "it stays f32");
      return false;
    }
  }
  std::vector<ValueId> stored;
  for (const auto& chain : chains) stored.push_back(g.node(chain.back()).inputs[0]);
  ValueId y = emit(g, OpKind::Concat, cat.name, stored, cat.attrs);
  const std::vector<NodeId>& first = chains[0];
  for (auto it = first.rbegin(); it != first.rend(); ++it) {
    std::vector<ValueId> inputs = g.node(*it).inputs;
    inputs[0] = y;
    y = emit(g, g.node(*it).kind, g.node(*it).name, inputs, g.node(*it).attrs);
  }
  replace_value(g, cat.outputs[0], y);
  g.erase_node(id);
  for (const auto& chain : chains) {
    for (NodeId n : chain) g.erase_node(n);
  }
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
    if (!is_int8_to_f32(g, p) && !is_scalar_affine(g, p)) continue;
    if (sole_consumer(g, r.inputs[0]) != id || !leads_to_layer(g, r.outputs[0])) continue;
    if (r.kind == OpKind::MaxPool && p.kind == OpKind::Multiply &&
        (*constant_f32(g, p.inputs[1]))[0] <= 0.0f) {
      ctx.reject(kPass, r.name, "the dequantize scale is not positive, so the max of the "
                                "int8 values is not the max of the real ones");
      continue;
    }
    const Node mover = r, above = p;
    const ValueId moved = emit(g, mover.kind, mover.name, {above.inputs[0]}, mover.attrs);
    std::vector<ValueId> inputs = above.inputs;
    inputs[0] = moved;
    const ValueId result = emit(g, above.kind, above.name, inputs, above.attrs);
    replace_value(g, mover.outputs[0], result);
    g.erase_node(id);
    g.erase_node(pid);
    ctx.log(kPass, mover.name + " moved above " + above.name);
    return true;
  }
  return false;
}

}  // namespace qfuse::graph
