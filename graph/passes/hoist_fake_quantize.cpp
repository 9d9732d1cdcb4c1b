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
//
// A per-tensor Quantize (s > 0) is non-decreasing too, and moves the same way;
// M then runs on its codes. Requantizing onto the grid the codes came from
// changes nothing:
//   y -> M -> Quantize                     ==>  y -> Quantize -> M
//   q -> Dequantize(s, z) -> Quantize(s, z) ==>  q       (same type, q's
//                                                  codes within its levels)
//   Concat(a, b) -> Quantize               ==>  Concat(Quantize(a), Quantize(b))
// so that ONNX Runtime's QDQ form, DQ -> MaxPool -> Q -> DQ with one set of
// parameters, becomes Q -> MaxPool -> DQ, and each Concat input is quantized
// by the layer that makes it. Where M's input has other readers, the Quantize
// still moves when M keeps at least as many values as it reads (an upsampling
// Resize then runs on codes), or when every reader is a Quantize of the same
// grid or a mover read only by one (torch.chunk's Slices, each quantized):
//   y -> Slice -> Quantize, y -> Slice' -> Quantize  ==>  y -> Quantize -> Slice, Slice'
// since two Quantizes of one value onto one grid are merged into one.

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

// The codes Quantize `q` reads back unchanged: q reads Dequantize(codes) of
// its own grid and type, codes within its own (so that it clamps nothing). Each code c gives round((c - z) * s / s) + z = c: the f32
// product and quotient of integers below 2^8 stay within 2^-15 of c - z.
std::optional<ValueId> requantized_codes(const Graph& g, const Node& q) {
  const Node* dq = producer_of(g, q.inputs[0], OpKind::Dequantize);
  if (dq == nullptr) return std::nullopt;
  const auto& qa = q.attr<QuantizeAttrs>();
  const ValueId codes = dq->inputs[0];
  if (g.value(codes).type != qa.to || !undoes(dq->attr<DequantizeAttrs>(), qa)) {
    return std::nullopt;
  }
  const Node* source = producer_of(g, codes, OpKind::Quantize);
  const QuantizeAttrs whole{qa.to};
  const QuantizeAttrs& from = source != nullptr ? source->attr<QuantizeAttrs>() : whole;
  if (from.code_min() < qa.code_min() || from.code_max() > qa.code_max()) return std::nullopt;
  return codes;
}

// Each input gets its own Quantize. An input with other readers keeps its
// value for them, and its Quantize reads it there: a layer making it cannot end
// its chain with the quantization then, but the Concat still runs on codes, and
// Quantize(Dequantize(codes)) on another grid becomes one table
// (lookup_elementwise).
bool hoist_quantize_through_concat(Graph& g, NodeId q_id, const Node& concat, PassContext& ctx) {
  const Node q = g.node(q_id);
  for (ValueId in : concat.inputs) {
    if (g.value(in).is_constant()) {
      ctx.reject(kPass, q.name, "Concat input '" + g.value(in).name + "' is a constant");
      return false;
    }
  }
  const Node cat = concat;
  std::vector<ValueId> inputs;
  for (std::size_t k = 0; k < cat.inputs.size(); ++k) {
    inputs.push_back(emit(g, OpKind::Quantize, q.name + "/" + std::to_string(k), {cat.inputs[k]},
                          q.attrs));
  }
  const ValueId y = emit(g, OpKind::Concat, cat.name, inputs, cat.attrs);
  replace_value(g, q.outputs[0], y);
  g.erase_node(q_id);
  g.erase_node(g.value(q.inputs[0]).producer);
  ctx.log(kPass, q.name + " moved onto the inputs of " + cat.name);
  return true;
}

// Whether `a` and `b` quantize onto one grid: equal Quantizes, or
// FakeQuantizes of equal levels and per-tensor ranges.
bool same_quantization(const Graph& g, const Node& a, const Node& b) {
  if (a.kind != b.kind) return false;
  if (a.kind == OpKind::Quantize) return a.attr<QuantizeAttrs>() == b.attr<QuantizeAttrs>();
  if (a.kind != OpKind::FakeQuantize ||
      a.attr<FakeQuantizeAttrs>().levels != b.attr<FakeQuantizeAttrs>().levels) {
    return false;
  }
  const auto ra = per_tensor_ranges(g, a), rb = per_tensor_ranges(g, b);
  return ra && rb && *ra == *rb;
}

// Whether quantization `q` (a Quantize or FakeQuantize) may move above mover
// `m` when m's input y has other readers (which keep reading y's value):
// when m keeps at least as many values as it reads (Reshape, Transpose, an
// upsampling Resize), the moved quantization reads no more than it did; when
// every reader of y quantizes onto q's grid, or is a mover read only by such
// a quantization, they all end up reading one quantization of y
// (merge_same_quantize), which the layer making y can write.
bool may_quantize_shared(const Graph& g, const Node& m, const Node& q) {
  const ValueId y = m.inputs[0];
  if (element_count(g.value(m.outputs[0]).shape) >= element_count(g.value(y).shape)) return true;
  if (g.is_graph_output(y)) return false;
  const auto quantizes_onto_grid = [&](NodeId r) { return same_quantization(g, g.node(r), q); };
  for (NodeId r : g.consumers(y)) {
    if (quantizes_onto_grid(r)) continue;
    const Node& mover = g.node(r);
    if (!moves_data(mover) || mover.inputs[0] != y || g.is_graph_output(mover.outputs[0])) {
      return false;
    }
    const auto only = sole_consumer(g, mover.outputs[0]);
    if (!only || !quantizes_onto_grid(*only)) return false;
  }
  return true;
}

// Two quantizations of one value onto one grid are one: the later readers
// read the first's output.
bool merge_same_quantize(Graph& g, NodeId id, PassContext& ctx) {
  const Node& q = g.node(id);
  if (g.is_graph_output(q.outputs[0])) return false;
  for (NodeId r : g.consumers(q.inputs[0])) {
    const Node& other = g.node(r);
    if (r == id || other.inputs[0] != q.inputs[0] || g.is_graph_output(other.outputs[0]) ||
        !same_quantization(g, other, q)) {
      continue;
    }
    const std::string name = other.name, kept = q.name;
    g.replace_all_uses(other.outputs[0], q.outputs[0]);
    g.erase_node(r);
    ctx.log(kPass, name + " merged into " + kept + ": the same quantization of the same value");
    return true;
  }
  return false;
}

bool hoist_quantize(Graph& g, NodeId id, PassContext& ctx) {
  const Node& q = g.node(id);
  if (!q.attr<QuantizeAttrs>().per_tensor()) return false;
  if (merge_same_quantize(g, id, ctx)) return true;
  if (const auto codes = requantized_codes(g, q); codes && !g.is_graph_output(q.outputs[0])) {
    // The codes keep their own name (the model's tensor they are).
    const std::string name = q.name, source = g.value(*codes).name;
    g.replace_all_uses(q.outputs[0], *codes);
    g.erase_node(id);
    ctx.log(kPass, name + " dropped: it requantizes the codes of " + source + " onto their grid");
    return true;
  }
  const ValueId x = q.inputs[0];
  const NodeId mid = g.value(x).producer;
  if (!mid.valid()) return false;
  const Node& m = g.node(mid);
  if (!moves_data(m) && m.kind != OpKind::Concat) return false;
  if (sole_consumer(g, x) != id || g.is_graph_output(x)) {
    ctx.reject(kPass, q.name, "'" + g.value(x).name + "' has other readers");
    return false;
  }
  if (m.kind == OpKind::Concat) return hoist_quantize_through_concat(g, id, m, ctx);
  const ValueId y = m.inputs[0];
  if (g.value(y).is_constant()) return false;
  if ((sole_consumer(g, y) != mid || g.is_graph_output(y)) && !may_quantize_shared(g, m, q)) {
    ctx.reject(kPass, q.name, "the input of " + m.name + " has other readers, and " + m.name +
                                  " keeps fewer values than it reads");
    return false;
  }
  const Node old_q = q, mover = m;
  const ValueId codes = emit(g, OpKind::Quantize, old_q.name + "/above_" + mover.name, {y},
                             old_q.attrs);
  std::vector<ValueId> inputs = mover.inputs;
  inputs[0] = codes;
  const ValueId moved = emit(g, mover.kind, mover.name, inputs, mover.attrs);
  replace_value(g, old_q.outputs[0], moved);
  g.erase_node(id);
  g.erase_node(mid);
  ctx.log(kPass, old_q.name + " moved above " + mover.name);
  return true;
}

void drop(Graph& g, NodeId fq_id, PassContext& ctx, const std::string& why) {
  const Node fq = g.node(fq_id);
  replace_value(g, fq.outputs[0], fq.inputs[0]);
  g.erase_node(fq_id);
  ctx.log(kPass, fq.name + " dropped: " + why);
}

// Each input not on the FakeQuantize's grid gets its own copy of it; one
// with other readers keeps its value for them (as for a Quantize, above), so
// that the Concat and what it reads (SPPF's chained max pools) run on codes.
bool hoist_through_concat(Graph& g, NodeId fq_id, const Node& concat, PassContext& ctx) {
  const Node fq = g.node(fq_id);
  for (ValueId in : concat.inputs) {
    const Node* p = fake_quantize_producer(g, in);
    if (p != nullptr && same_grid(g, *p, fq)) continue;
    if (g.value(in).is_constant()) {
      ctx.reject(kPass, fq.name, "Concat input '" + g.value(in).name + "' is a constant");
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
    if (g.node(id).kind == OpKind::Quantize) {
      if (hoist_quantize(g, id, ctx)) return true;
      continue;
    }
    const Node& fq = g.node(id);
    if (fq.kind != OpKind::FakeQuantize) continue;
    if (per_tensor_ranges(g, fq) && merge_same_quantize(g, id, ctx)) return true;
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
    if (g.value(y).is_constant()) continue;
    if ((sole_consumer(g, y) != mid || g.is_graph_output(y)) && !may_quantize_shared(g, m, fq)) {
      ctx.reject(kPass, fq.name, "the input of " + m.name + " has other readers, and " + m.name +
                                     " keeps fewer values than it reads");
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
