// hoist_fake_quantize
//
//   y -> M -> FQ            ==>  y -> FQ -> M
//   FQa -> M -> FQb         ==>  FQa -> M              (FQb has FQa's grid)
//   FQa -> FQb              ==>  FQa                   (same grid)
//   Concat(a, FQa(b)) -> FQ ==>  Concat(FQ(a), FQa(b)) (FQa has FQ's grid)
//
// M moves data without computing new values (pattern::moves_data: Reshape,
// Transpose, Slice, MaxPool, ...; the op table's moves_values). A per-tensor FakeQuantize with
// increasing ranges is a non-decreasing function applied to each element, so
// it commutes with all of them (a max of quantized values is the quantized
// max). Moving it up lets the layer that makes y end its chain with the
// quantization (an int8 output); the data movement then runs on int8 (see
// hoist_data_movement_above_dequantize). ONNX Runtime's QDQ form quantizes both
// sides of such ops with one set of parameters; the second FakeQuantize then
// changes nothing and is dropped.
// Preconditions: constant per-tensor ranges, il < ih and ol < oh; M is the
// only reader of y (else y would be needed both ways), FQ the only reader of M.

#include <cmath>

#include "graph/passes/passes.hpp"
#include "graph/passes/pattern.hpp"

namespace qfuse::graph {
namespace {

constexpr std::string_view kPass = "hoist_fake_quantize";
using namespace pattern;


// The four ranges of a per-tensor FakeQuantize, or nullopt.
std::optional<std::vector<float>> per_tensor_ranges(const Graph& g, const Node& fq) {
  std::vector<float> r;
  for (std::size_t i = 1; i < 5; ++i) {
    auto v = constant_f32(g, fq.inputs[i]);
    if (!v || v->size() != 1) return std::nullopt;
    r.push_back((*v)[0]);
  }
  return r;
}

bool increasing(const std::vector<float>& r) { return r[0] < r[1] && r[2] < r[3]; }

// b applied to a's output changes nothing: same levels, a's output range is
// b's input range and lies on b's grid.
bool same_grid(const Graph& g, const Node& a, const Node& b) {
  if (a.kind != OpKind::FakeQuantize || b.kind != OpKind::FakeQuantize) return false;
  if (a.attr<FakeQuantizeAttrs>().levels != b.attr<FakeQuantizeAttrs>().levels) return false;
  const auto ra = per_tensor_ranges(g, a), rb = per_tensor_ranges(g, b);
  if (!ra || !rb) return false;
  return (*ra)[2] == (*rb)[0] && (*ra)[3] == (*rb)[1] && *ra == *rb;
}

const Node* fake_quantize_producer(const Graph& g, ValueId v) {
  return producer_of(g, v, OpKind::FakeQuantize);
}

void drop(Graph& g, NodeId fq_id, PassContext& ctx, const std::string& why) {
  const Node fq = g.node(fq_id);
  replace_value(g, fq.outputs[0], fq.inputs[0]);
  g.erase_node(fq_id);
  ctx.log(kPass, fq.name + " dropped: " + why);
}

bool hoist_through_concat(Graph& g, NodeId fq_id, const Node& concat, PassContext& ctx) {
  const Node fq = g.node(fq_id);
  for (ValueId in : concat.inputs) {
    const Node* p = fake_quantize_producer(g, in);
    if (p != nullptr && same_grid(g, *p, fq)) continue;
    if (g.value(in).is_constant() || sole_consumer(g, in) != g.value(fq.inputs[0]).producer) {
      ctx.reject(kPass, fq.name, "Concat input '" + g.value(in).name +
                                      "' has other readers and is not on this grid");
      return false;
    }
  }
  const Node cat = concat;
  std::vector<ValueId> inputs;
  for (std::size_t k = 0; k < cat.inputs.size(); ++k) {
    const ValueId in = cat.inputs[k];
    const Node* p = fake_quantize_producer(g, in);
    if (p != nullptr && same_grid(g, *p, fq)) {
      inputs.push_back(in);
      continue;
    }
    std::vector<ValueId> fq_inputs = fq.inputs;
    fq_inputs[0] = in;
    inputs.push_back(emit(g, OpKind::FakeQuantize, fq.name + "/" + std::to_string(k), fq_inputs,
                          fq.attrs));
  }
  const ValueId y = emit(g, OpKind::Concat, cat.name, inputs, cat.attrs);
  replace_value(g, fq.outputs[0], y);
  g.erase_node(fq_id);
  g.erase_node(g.value(fq.inputs[0]).producer);
  ctx.log(kPass, fq.name + " moved onto the inputs of " + cat.name);
  return true;
}

}  // namespace

bool hoist_fake_quantize(Graph& g, PassContext& ctx) {
  for (NodeId id : g.topological_order()) {
    const Node& fq = g.node(id);
    if (fq.kind != OpKind::FakeQuantize) continue;
    const ValueId x = fq.inputs[0];
    const NodeId mid = g.value(x).producer;
    if (!mid.valid()) continue;
    const Node& m = g.node(mid);
    if (m.kind == OpKind::FakeQuantize && same_grid(g, m, fq)) {
      drop(g, id, ctx, "its input " + m.name + " is already on its grid");
      return true;
    }
    if (!moves_data(m) && m.kind != OpKind::Concat) continue;
    const auto r = per_tensor_ranges(g, fq);
    if (!r || !increasing(*r)) {
      ctx.reject(kPass, fq.name, "ranges are not increasing per-tensor constants, so it does "
                                 "not commute with " + m.name);
      continue;
    }
    if (sole_consumer(g, x) != id) {
      ctx.reject(kPass, fq.name, "'" + g.value(x).name + "' has other readers");
      continue;
    }
    if (m.kind == OpKind::Concat) {
      if (hoist_through_concat(g, id, m, ctx)) return true;
      continue;
    }
    const ValueId y = m.inputs[0];
    if (const Node* above = fake_quantize_producer(g, y); above && same_grid(g, *above, fq)) {
      drop(g, id, ctx, m.name + " keeps the grid of " + above->name);
      return true;
    }
    if (g.value(y).is_constant() || sole_consumer(g, y) != mid) {
      ctx.reject(kPass, fq.name, "the input of " + m.name + " has other readers");
      continue;
    }
    const Node old_fq = fq, mover = m;
    std::vector<ValueId> fq_inputs = old_fq.inputs;
    fq_inputs[0] = y;
    // Its own name: the model's name stays on the moved node's output, the
    // tensor the FakeQuantize wrote (two values of one name would let a
    // lookup by name, qfuse compare's, find the one before the move).
    const ValueId q = emit(g, OpKind::FakeQuantize, old_fq.name + "/above_" + mover.name,
                           fq_inputs, old_fq.attrs);
    const ValueId moved = emit(g, mover.kind, mover.name, {q}, mover.attrs);
    replace_value(g, old_fq.outputs[0], moved);
    g.erase_node(id);
    g.erase_node(mid);
    ctx.log(kPass, old_fq.name + " moved above " + mover.name);
    return true;
  }
  return false;
}

}  // namespace qfuse::graph
