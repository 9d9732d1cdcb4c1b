// quantize_channel_gate
//
//   q -> Dequantize(s, z) -> Multiply(g) -> Quantize(t) | Convert(t, quantizing)
//     ==>  q, g -> GateMultiply(z, s, quantize) -> t
//
// A squeeze-excitation block multiplies its input x by a gate with one value
// per image and channel, g[N, C, 1, 1], and quantizes the product; PyTorch's
// quantized MobileNetV3 and EfficientNet write it so. Once the layer before
// writes x's codes (split_fake_quantize splits x's FakeQuantize for such a
// reader), the dequantize, the product and the quantization are one pass over
// the codes (GateMultiply) instead of three over f32 data. Each step keeps
// its f32 arithmetic, so the codes are those of the unfused graph.
// Preconditions: a per-tensor dequantize of u8/s8 codes; g is f32 of shape
// [N or 1, C, 1, ...] and not constant; the product's only reader is the
// per-tensor quantization. The dequantize may have other readers (the block's
// average pool); they keep it.

#include "graph/passes/passes.hpp"
#include "graph/passes/pattern.hpp"

namespace qfuse::graph {
namespace {

constexpr std::string_view kPass = "quantize_channel_gate";
using namespace pattern;

}  // namespace

bool is_channel_gate(const Graph& g, ValueId gate, ValueId x) {
  const Value& gv = g.value(gate);
  const Shape& xs = g.value(x).shape;
  if (gv.is_constant() || gv.type != ElementType::f32 || xs.size() < 3 ||
      gv.shape.size() != xs.size()) {
    return false;
  }
  if ((gv.shape[0] != xs[0] && gv.shape[0] != 1) || gv.shape[1] != xs[1]) return false;
  for (std::size_t d = 2; d < xs.size(); ++d) {
    if (gv.shape[d] != 1) return false;
  }
  return true;
}

bool quantize_channel_gate(Graph& g, PassContext& ctx) {
  for (NodeId id : g.topological_order()) {
    const Node& cv = g.node(id);
    const bool by_ranges = cv.kind == OpKind::Convert && cv.attr<ConvertAttrs>().quantizes();
    // (GateMultiply stores codes from the type's lowest.)
    const bool linear = cv.kind == OpKind::Quantize && cv.attr<QuantizeAttrs>().per_tensor() &&
                        cv.attr<QuantizeAttrs>().code_offset == 0;
    if (!by_ranges && !linear) continue;
    const Node* mul = producer_of(g, cv.inputs[0], OpKind::Multiply);
    if (mul == nullptr || sole_consumer(g, mul->outputs[0]) != id) continue;
    for (std::size_t side = 0; side < 2; ++side) {
      const ValueId x = mul->inputs[side], gate = mul->inputs[1 - side];
      if (!is_channel_gate(g, gate, x) || g.value(mul->outputs[0]).shape != g.value(x).shape) {
        continue;
      }
      const auto d = dequantized(g, x);
      if (!d || g.value(d->codes).type == ElementType::s32) {
        ctx.reject(kPass, mul->name, "the gated tensor is not a per-tensor dequantize of codes");
        continue;
      }
      GateMultiplyAttrs attrs;
      attrs.zero_point = d->zero_point[0];
      attrs.scale = d->scale[0];
      if (linear) {
        attrs.quantize = cv.attr<QuantizeAttrs>();
      } else {
        attrs.quantize = cv.attr<ConvertAttrs>();
      }
      // Copied before emit(): adding a node may move the nodes `cv` and `mul` refer to.
      const std::string name = mul->name, cv_name = cv.name;
      const NodeId mul_id = g.value(cv.inputs[0]).producer;
      const ValueId quantized = cv.outputs[0];
      const ValueId y = emit(g, OpKind::GateMultiply, name, {d->codes, gate}, attrs);
      replace_value(g, quantized, y);
      g.erase_node(id);
      g.erase_node(mul_id);
      ctx.log(kPass, name + " + " + cv_name + " -> one GateMultiply on the codes of '" +
                         g.value(d->codes).name + "'");
      return true;
    }
  }
  return false;
}

}  // namespace qfuse::graph
