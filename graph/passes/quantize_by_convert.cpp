// quantize_by_convert
//
//   x -> FQ(il, ih, lo, lo + L - 1, L) -> Convert(t)
//     ==>  x -> Quantize(t, ONNX's scale and zero point) when FQ has them,
//          else x -> Convert(t, its input range [il, ih])
//
// A quantize-only FakeQuantize that no layer took (the network input, a
// tensor made by an f32 op) and its Convert to u8/s8 become one Quantize or
// quantizing Convert, one pass over the data that writes the stored codes. It computes
// what the FakeQuantize did, so every tie rounds as in the unfused graph:
// - with ONNX's scale and zero point: composer::quantize_linear,
//   saturate(round_half_even(x / s) + zp - code_low + lo) onto
//   [lo, lo + L - 1], the type's first L codes (L < 256: a narrower grid,
//   torch's reduce_range 0..127);
// - by its ranges: the level round_half_even((x - il) * 255 / (ih - il)),
//   clamped to [0, 255], plus lo (f64); only with L = 256.
// The FakeQuantize clamps to its levels, and the Convert's saturation is that
// clamp when lo is t's minimum.
// Preconditions: per-tensor ranges (and grid); lo the type's minimum.

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
    const auto grid = linear_grid(g, fq, g.value(fq.inputs[0]).shape, 0);
    const bool per_tensor_grid = grid && grid->scale.size() == 1 && grid->zero_point.size() == 1;
    // A grid of fewer levels saturates onto the type's first codes; by the
    // range formula only the whole type.
    if (levels < 2 || levels > 256 || (levels != 256 && !per_tensor_grid) || *lo != type_lo ||
        *hi != type_lo + static_cast<float>(levels - 1)) {
      ctx.reject(kPass, fq.name, "its levels do not start at " + std::string(to_string(to.to)) +
                                     "'s lowest code (or, by ranges, do not fill it); it runs "
                                     "as qfuse's loop");
      continue;
    }
    if (!(*il < *ih)) continue;
    Attributes attrs;
    if (per_tensor_grid) {
      QuantizeAttrs q;
      q.to = to.to;
      q.scale = {grid->scale[0]};
      q.zero_point = {grid->zero_point[0] - grid->code_low + static_cast<std::int32_t>(type_lo)};
      q.levels = static_cast<std::int32_t>(levels);
      attrs = q;
    } else {
      ConvertAttrs r = to;
      r.input_low = *il;
      r.input_high = *ih;
      attrs = r;
    }
    const OpKind kind = per_tensor_grid ? OpKind::Quantize : OpKind::Convert;
    const std::string name = fq.name, cv_name = g.node(*cv_id).name;
    const ValueId old = g.node(*cv_id).outputs[0];
    const ValueId y = emit(g, kind, cv_name, {fq.inputs[0]}, attrs);
    replace_value(g, old, y);
    g.erase_node(*cv_id);
    g.erase_node(id);
    ctx.log(kPass, name + " + " + cv_name + " -> one " +
                       (per_tensor_grid ? "Quantize" : "quantizing Convert") + " to " +
                       std::string(to_string(to.to)));
    return true;
  }
  return false;
}

}  // namespace qfuse::graph
