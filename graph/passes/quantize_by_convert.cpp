// quantize_by_convert
//
//   x -> FQ(il, ih, lo, lo + 255, 256) -> Convert(t)
//     ==>  x -> Convert(t, scale 1 / Si, zero point lo - il / Si)
//
// A quantize-only FakeQuantize that no layer took (a tensor made by an f32
// op) followed by its Convert to u8/s8 is one quantizing reorder in oneDNN: round(x / Si + Z) saturated to t, with
// Si = (ih - il) / 255 and Z = lo - il / Si. The FakeQuantize clamps x to
// [il, ih] first, which the saturation to t does too when lo .. lo + 255 is
// t's range. The two differ only in how a value within an ulp of a rounding
// tie is rounded (one step at most). The quantization of a graph input keeps
// the FakeQuantize formula (f64): inputs are where data can sit exactly on
// the grid's ties (pixels, values written by another quantizer), and it runs
// once per inference.
// Preconditions: per-tensor ranges; 256 levels filling t; an integer Z; the
// input is made by a node.

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
    if (fq.attr<FakeQuantizeAttrs>().levels != 256 || *lo != type_lo || *hi != type_lo + 255.0f) {
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
