// quantize_by_convert
//
//   x -> FQ(il, ih, lo, lo + L - 1, L) -> Convert(t)
//     ==>  x -> Convert(t, its input range [il, ih])
//
// A quantize-only FakeQuantize that no layer took (the network input, a
// tensor made by an f32 op) and its Convert to u8/s8 become one quantizing
// Convert, one pass over the data that writes the stored codes. It computes
// what the FakeQuantize did, so every tie rounds as in the unfused graph: the
// level round_half_even((x - il) * 255 / (ih - il)), clamped to [0, 255],
// plus lo (f64); only with L = 256.
// The FakeQuantize clamps to its levels, and the Convert's saturation is that
// clamp when lo is t's minimum.
// Preconditions: per-tensor ranges; lo the type's minimum.

#include "graph/passes/passes.hpp"
#include "graph/passes/pattern.hpp"

namespace qfuse::graph {
namespace {

constexpr std::string_view kPass = "quantize_by_convert";
using namespace pattern;

}  // namespace

bool quantize_by_convert(Graph& g, PassContext& ctx) {
  for (NodeId id : g.topological_order()) {
    const Node& fq = g.node(id);
    if (fq.kind != OpKind::FakeQuantize || g.value(fq.inputs[0]).is_constant()) continue;
    const auto cv_id = sole_consumer(g, fq.outputs[0]);
    if (!cv_id || g.node(*cv_id).kind != OpKind::Convert) continue;
    const ConvertAttrs to = g.node(*cv_id).attr<ConvertAttrs>();
    if ((to.to != ElementType::u8 && to.to != ElementType::s8) || to.quantizes()) continue;
    const auto il = scalar_constant(g, fq.inputs[1]), ih = scalar_constant(g, fq.inputs[2]);
    const auto lo = scalar_constant(g, fq.inputs[3]), hi = scalar_constant(g, fq.inputs[4]);
    if (!il || !ih || !lo || !hi) {
      ctx.reject(kPass, fq.name, "its ranges are not per tensor; it runs as qfuse's loop");
      continue;
    }
    const float type_lo = to.to == ElementType::u8 ? 0.0f : -128.0f;
    const std::int64_t levels = fq.attr<FakeQuantizeAttrs>().levels;
    // By the range formula: the whole type only.
    if (levels != 256 || *lo != type_lo || *hi != type_lo + 255.0f) {
      ctx.reject(kPass, fq.name, "its levels do not fill " + std::string(to_string(to.to)) +
                                     "; it runs as qfuse's loop");
      continue;
    }
    if (!(*il < *ih)) continue;
    ConvertAttrs attrs = to;
    attrs.input_low = *il;
    attrs.input_high = *ih;
    const std::string name = fq.name, cv_name = g.node(*cv_id).name;
    const ValueId old = g.node(*cv_id).outputs[0];
    const ValueId y = emit(g, OpKind::Convert, cv_name, {fq.inputs[0]}, attrs);
    replace_value(g, old, y);
    g.erase_node(*cv_id);
    g.erase_node(id);
    ctx.log(kPass, name + " + " + cv_name + " -> one quantizing Convert to " +
                       std::string(to_string(to.to)));
    return true;
  }
  return false;
}

}  // namespace qfuse::graph
