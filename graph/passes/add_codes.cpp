// add_codes
//
//   Add(Dequantize(a; sa, za), Dequantize(b; sb, zb)) -> Quantize(t) | Convert(t, quantizing)
//     ==>  a, b -> CodeAdd(za, sa, zb, sb, quantize) -> t
//
// A residual add whose two sides are both quantized tensors, and whose sum
// is quantized again: a YOLOv8 bottleneck's x + cv2(cv1(x)) under FX QAT
// (SiLU between grids leaves no layer output to sum into), ONNX Runtime's
// QLinearAdd as Dequantize -> Add -> Quantize, NNCF's residual FakeQuantize.
// No layer takes it (fuse_post_op_chain sums into a layer's output only), so
// the two dequantizes, the add and the quantization become one pass over the
// codes instead of four over f32 data. Each step keeps its f32 arithmetic,
// so the codes are those of the unfused graph.
// Preconditions: per-tensor dequantizes of u8/s8 codes of the sum's very
// shape (no broadcast); the sum's only reader is the per-tensor
// quantization. The dequantizes may have other readers; they keep them.

#include "graph/passes/passes.hpp"
#include "graph/passes/pattern.hpp"

namespace qfuse::graph {
namespace {

constexpr std::string_view kPass = "add_codes";
using namespace pattern;

// The per-tensor dequantize of u8 / s8 codes that makes `v`, or nullopt.
std::optional<Dequantized> dequantized_codes(const Graph& g, ValueId v) {
  auto d = dequantized(g, v);
  if (!d || !d->per_tensor()) return std::nullopt;
  const ElementType t = g.value(d->codes).type;
  if (t != ElementType::u8 && t != ElementType::s8) return std::nullopt;
  return d;
}

}  // namespace

bool add_codes(Graph& g, PassContext& ctx) {
  for (NodeId id : g.topological_order()) {
    const Node& q = g.node(id);
    const bool by_ranges = q.kind == OpKind::Convert && q.attr<ConvertAttrs>().quantizes();
    const bool linear = q.kind == OpKind::Quantize && q.attr<QuantizeAttrs>().per_tensor();
    if (!by_ranges && !linear) continue;
    const Node* add = producer_of(g, q.inputs[0], OpKind::Add);
    if (add == nullptr || sole_consumer(g, add->outputs[0]) != id ||
        g.is_graph_output(add->outputs[0])) {
      continue;
    }
    const auto a = dequantized_codes(g, add->inputs[0]);
    const auto b = dequantized_codes(g, add->inputs[1]);
    if (!a || !b) continue;
    const Shape& out = g.value(add->outputs[0]).shape;
    if (g.value(a->codes).shape != out || g.value(b->codes).shape != out) {
      ctx.reject(kPass, add->name, "its operands broadcast; CodeAdd adds codes of one shape");
      continue;
    }
    CodeAddAttrs attrs;
    attrs.a_zero_point = a->zero_point[0];
    attrs.a_scale = a->scale[0];
    attrs.b_zero_point = b->zero_point[0];
    attrs.b_scale = b->scale[0];
    if (linear) {
      attrs.quantize = q.attr<QuantizeAttrs>();
    } else {
      attrs.quantize = q.attr<ConvertAttrs>();
    }
    // Copied before emit(): adding a node may move the nodes `q` and `add` refer to.
    const std::string name = add->name, q_name = q.name;
    const NodeId add_id = g.value(q.inputs[0]).producer;
    const ValueId quantized = q.outputs[0];
    const ValueId y = emit(g, OpKind::CodeAdd, name, {a->codes, b->codes}, attrs);
    replace_value(g, quantized, y);
    g.erase_node(id);
    g.erase_node(add_id);
    ctx.log(kPass, name + " + " + q_name + " -> one CodeAdd on the codes of '" +
                       g.value(a->codes).name + "' and '" + g.value(b->codes).name + "'");
    return true;
  }
  return false;
}

}  // namespace qfuse::graph
