// recognize_dequantize
//
//   Convert(q -> f32)                          ==>  Dequantize(q; scale 1, zero point 0)
//   Subtract(Dequantize(q; 1, 0), z)           ==>  Dequantize(q; 1, z)
//   Multiply(Dequantize(q; 1, z), s)           ==>  Dequantize(q; s, z)
//
// A dequantize written with elementwise ops (a graph built in C++, a
// pre-quantized model's Cast -> Mul, the zero points of ConvInteger,
// MatMulInteger and the QLinear operators) becomes the one Dequantize op that
// the later passes match (pattern::dequantized). One step per application, so
// Convert -> Subtract -> Multiply takes three.
//
// Exact: a Dequantize computes (f32(q) - z) * s with one f32 rounding in each
// operation, and with s = 1 or z = 0 the missing operation is an identity, so
// every step computes what the nodes it replaces computed.
// Preconditions: q is u8, s8 or s32; z and s are f32 constants of one value,
// or varying along one dimension of the tensor (z's and s's the same one);
// the Subtract / Multiply keeps the shape of its dequantized operand. A step
// whose Dequantize has other readers computes its own; the first one stays
// for them.

#include "graph/passes/passes.hpp"
#include "graph/passes/pattern.hpp"

namespace qfuse::graph {
namespace {

constexpr std::string_view kPass = "recognize_dequantize";
using namespace pattern;

bool reads_codes(ElementType t) {
  return t == ElementType::u8 || t == ElementType::s8 || t == ElementType::s32;
}

// A constant that broadcast against `shape` varies along at most one of its
// dimensions: its values, and that dimension (nullopt when it is one value).
struct Parameter {
  std::vector<float> values;
  std::optional<std::size_t> axis;
};
std::optional<Parameter> parameter(const Graph& g, ValueId c, const Shape& shape) {
  const Value& v = g.value(c);
  if (!v.is_constant() || v.type != ElementType::f32 || v.shape.size() > shape.size()) {
    return std::nullopt;
  }
  if (element_count(v.shape) == 1) return Parameter{*constant_f32(g, c), std::nullopt};
  const std::size_t offset = shape.size() - v.shape.size();
  std::optional<std::size_t> axis;
  for (std::size_t d = 0; d < v.shape.size(); ++d) {
    if (v.shape[d] == 1) continue;
    if (axis || v.shape[d] != shape[offset + d]) return std::nullopt;
    axis = offset + d;
  }
  auto values = channel_vector(g, c, shape, *axis);
  if (!values) return std::nullopt;
  return Parameter{std::move(*values), axis};
}

// The Dequantize that produces `v` with scale 1 (and zero point 0 when
// `zero_too`), the only forms a Subtract / Multiply step extends.
const Node* unit_dequantize(const Graph& g, ValueId v, bool zero_too) {
  const Node* dq = producer_of(g, v, OpKind::Dequantize);
  if (dq == nullptr) return nullptr;
  const auto& a = dq->attr<DequantizeAttrs>();
  const bool unit = a.scale == std::vector<float>{1.0f};
  const bool no_zero = a.zero_point == std::vector<float>{0.0f};
  return unit && (no_zero || !zero_too) ? dq : nullptr;
}

// Replaces node `id`'s output by Dequantize(codes, attrs) named after it;
// `inner`, the Dequantize it extended, goes when nothing else reads it.
void rewrite(Graph& g, PassContext& ctx, NodeId id, ValueId codes, DequantizeAttrs attrs,
             std::optional<NodeId> inner) {
  const std::string name = g.node(id).name;
  const std::string kind(to_string(g.node(id).kind));
  const ValueId old = g.node(id).outputs[0];
  const ValueId y = emit(g, OpKind::Dequantize, name, {codes}, std::move(attrs));
  replace_value(g, old, y);
  g.erase_node(id);
  if (inner) {
    const ValueId inner_out = g.node(*inner).outputs[0];
    if (g.consumers(inner_out).empty() && !g.is_graph_output(inner_out)) g.erase_node(*inner);
  }
  ctx.log(kPass, name + " (" + kind + ") -> Dequantize");
}

// Subtract(Dequantize(q; 1, 0), z) or Multiply(Dequantize(q; 1, z), s), in
// either operand order for the Multiply.
bool extend(Graph& g, PassContext& ctx, NodeId id) {
  const Node& n = g.node(id);
  const bool subtract = n.kind == OpKind::Subtract;
  const Shape& shape = g.value(n.outputs[0]).shape;
  for (std::size_t side = 0; side < (subtract ? 1u : 2u); ++side) {
    const Node* dq = unit_dequantize(g, n.inputs[side], subtract);
    if (dq == nullptr || g.value(n.inputs[side]).shape != shape) continue;
    const auto p = parameter(g, n.inputs[1 - side], shape);
    if (!p) continue;
    DequantizeAttrs a = dq->attr<DequantizeAttrs>();
    if (p->axis) {
      if (!a.per_tensor() && static_cast<std::size_t>(a.axis) != *p->axis) continue;
      a.axis = static_cast<std::int64_t>(*p->axis);
    }
    (subtract ? a.zero_point : a.scale) = p->values;
    rewrite(g, ctx, id, dq->inputs[0], std::move(a), g.value(n.inputs[side]).producer);
    return true;
  }
  return false;
}

}  // namespace

bool recognize_dequantize(Graph& g, PassContext& ctx) {
  for (NodeId id : g.topological_order()) {
    const Node& n = g.node(id);
    if (n.kind == OpKind::Convert && n.attr<ConvertAttrs>().to == ElementType::f32 &&
        reads_codes(g.value(n.inputs[0]).type)) {
      rewrite(g, ctx, id, n.inputs[0], DequantizeAttrs{}, std::nullopt);
      return true;
    }
    if ((n.kind == OpKind::Subtract || n.kind == OpKind::Multiply) && extend(g, ctx, id)) {
      return true;
    }
  }
  return false;
}

}  // namespace qfuse::graph
