// fold_constants
//
//   Convert(constant), Dequantize(constant)    ==>  constant
//   Multiply|Add|Subtract(constant, constant)  ==>  constant (numpy broadcasting)
//
// Runs in the last phase, after the int8 fusions: a weight dequantize
// (s8 -> Dequantize) that no layer absorbed is evaluated once here
// instead of at every inference. Convert to f32 is exact; the arithmetic is the same f32
// operation the unfused runtime would do.

#include <cmath>
#include <span>

#include "composer/fake_quantize_formula.hpp"
#include "graph/broadcast.hpp"
#include "graph/passes/passes.hpp"
#include "graph/passes/pattern.hpp"

namespace qfuse::graph {
namespace {

constexpr std::string_view kPass = "fold_constants";

std::vector<float> as_floats(const Tensor& t) {
  const auto widen = [](auto values) { return std::vector<float>(values.begin(), values.end()); };
  switch (t.type()) {
    case ElementType::f32: return widen(t.data<float>());
    case ElementType::s8: return widen(t.data<std::int8_t>());
    case ElementType::u8: return widen(t.data<std::uint8_t>());
    case ElementType::s32: return widen(t.data<std::int32_t>());
    case ElementType::s64: return widen(t.data<std::int64_t>());
  }
  return {};
}

// A constant operand's elements as floats: an f32 tensor's own data, any
// other type widened into `copy` (a weight tensor is not copied to be read).
std::span<const float> floats_of(const Tensor& t, std::vector<float>& copy) {
  if (t.type() == ElementType::f32) return t.data<float>();
  copy = as_floats(t);
  return copy;
}

// Dequantize's arithmetic (composer::dequantize) over a constant's codes,
// its parameters indexed along `axis` (codes beyond 2^24 round as they do
// when converted to f32).
std::vector<float> dequantized_values(const Tensor& codes, const DequantizeAttrs& a) {
  std::vector<float> v = as_floats(codes);
  const Shape& s = codes.shape();
  std::size_t channels = 1, inner = 1;
  if (!a.per_tensor()) {
    const auto axis = static_cast<std::size_t>(a.axis);
    channels = static_cast<std::size_t>(s[axis]);
    for (std::size_t d = axis + 1; d < s.size(); ++d) inner *= static_cast<std::size_t>(s[d]);
  }
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::size_t c = (i / inner) % channels;
    v[i] = composer::dequantize(v[i], a.zero_point_at(c), a.scale_at(c));
  }
  return v;
}

// An f32 constant that no node reads any more (and that is no graph output)
// gives its data up, as an erased node's outputs do; a folded weight chain
// would otherwise keep every intermediate tensor (a dequantized f32 copy of
// each int8 weight) until the compiled model goes. Integer constants stay:
// the codes quantize_weights made are the record of a weight's quantization
// even when its layer ends up f32 (four times smaller, too).
void release_if_unread(Graph& g, ValueId v) {
  Value& value = g.value(v);
  if (value.is_constant() && value.type == ElementType::f32 && !g.is_graph_output(v) &&
      g.consumers(v).empty()) {
    value.constant.reset();
  }
}

}  // namespace

std::optional<NodeId> foldable_constant_node(const Graph& g, ValueId v) {
  const NodeId id = g.value(v).producer;
  if (!id.valid()) return std::nullopt;
  const Node& n = g.node(id);
  if (n.erased) return std::nullopt;
  const bool binary = n.kind == OpKind::Multiply || n.kind == OpKind::Add || n.kind == OpKind::Subtract;
  const bool convert = (n.kind == OpKind::Convert && n.attr<ConvertAttrs>().to == ElementType::f32) ||
                       n.kind == OpKind::Dequantize;
  if (!binary && !convert) return std::nullopt;
  for (ValueId in : n.inputs) {
    if (!g.value(in).is_constant()) return std::nullopt;
  }
  return id;
}

ValueId fold_constant_node(Graph& g, NodeId id) {
  const Node& n = g.node(id);
  const Shape shape = g.value(n.outputs[0]).shape;
  std::vector<float> result(static_cast<std::size_t>(element_count(shape)));
  if (n.kind == OpKind::Convert) {
    result = as_floats(*g.value(n.inputs[0]).constant);
  } else if (n.kind == OpKind::Dequantize) {
    result = dequantized_values(*g.value(n.inputs[0]).constant, n.attr<DequantizeAttrs>());
  } else {
    const Shape sa = g.value(n.inputs[0]).shape, sb = g.value(n.inputs[1]).shape;
    std::vector<float> copy_a, copy_b;
    const std::span<const float> a = floats_of(*g.value(n.inputs[0]).constant, copy_a);
    const std::span<const float> b = floats_of(*g.value(n.inputs[1]).constant, copy_b);
    // An operand with every element, or one, is read by index; others
    // through their broadcast offsets.
    const auto offsets = [&result, &shape](std::span<const float> v, const Shape& s) {
      return v.size() == result.size() || v.size() == 1 ? std::vector<std::size_t>{}
                                                         : broadcast_offsets(s, shape);
    };
    const std::vector<std::size_t> ia = offsets(a, sa), ib = offsets(b, sb);
    const auto at = [](std::span<const float> v, const std::vector<std::size_t>& o,
                       std::size_t i) { return !o.empty() ? v[o[i]] : v.size() == 1 ? v[0] : v[i]; };
    for (std::size_t i = 0; i < result.size(); ++i) {
      const float x = at(a, ia, i);
      const float y = at(b, ib, i);
      result[i] = n.kind == OpKind::Multiply ? x * y : n.kind == OpKind::Add ? x + y : x - y;
    }
  }
  const std::string name = n.name;
  const ValueId old_out = n.outputs[0];
  const std::vector<ValueId> inputs = n.inputs;
  const ValueId c = g.add_constant(name + ".folded", Tensor::from_vector<float>(shape, std::move(result)));
  pattern::replace_value(g, old_out, c);
  g.erase_node(id);
  for (ValueId in : inputs) release_if_unread(g, in);
  return c;
}

bool fold_constants(Graph& g, PassContext& ctx) {
  for (NodeId id : g.topological_order()) {
    const Node& n = g.node(id);
    if (n.outputs.size() != 1 || foldable_constant_node(g, n.outputs[0]) != id) continue;
    const std::string name = n.name;
    fold_constant_node(g, id);
    ctx.log(kPass, name + " evaluated at compile time");
    return true;
  }
  return false;
}

}  // namespace qfuse::graph
