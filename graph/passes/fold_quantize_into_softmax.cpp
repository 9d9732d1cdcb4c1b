// fold_quantize_into_softmax
//
//   x -> Softmax -> Quantize(t, scale s, zero point 0)
//     ==>  x -> Softmax(t, quantize_scale s)
//   x -> Softmax -> Convert(t, ranges [lo, hi])      (a FakeQuantize's quantize)
//     ==>  x -> Softmax(t, input_low lo, input_high hi)
//
// A Quantize (what quantize_by_convert makes of a Q/DQ pair that no layer
// took) that alone reads a Softmax runs inside it, one pass over the data
// instead of two. The arithmetic: the Quantize computes ONNX's
// saturate(round_half_even(y / s)). With AVX-512, qfuse's softmax kernel
// quantizes each row of the same f32 y with the Quantize's own loop: the
// same codes. Without, oneDNN 2.6's softmax_v2 writes them with an output
// scale, saturate(round_half_even(y * fl(1 / s))) on the same f32 y (its
// kernel computes y alike for both destinations), so a code moves by at
// most one where y / s sits within an ulp of a tie, and never where 1 / s is
// exact. A quantizing Convert (OpenVINO IR's and NNCF's FakeQuantize after
// the softmax, split) runs in qfuse's kernel only, which quantizes the rows
// with the Convert's own loop: the same codes.
// Preconditions: a per-tensor Quantize with zero point 0 (softmax_v2 has no
// destination zero point in 2.6) onto the whole u8 / s8, or a quantizing
// Convert;
// the Softmax's f32 output has no other reader and is no graph output; the
// backend runs the result with a kernel of its own (not oneDNN's reference).

#include <optional>
#include <string>

#include "graph/passes/passes.hpp"
#include "graph/passes/pattern.hpp"

namespace qfuse::graph {
namespace {

constexpr std::string_view kPass = "fold_quantize_into_softmax";
using namespace pattern;

// Why a Softmax cannot write the Quantize's codes (nullopt: it can).
std::optional<std::string> refusal(const QuantizeAttrs& q) {
  if (!q.per_tensor()) return "it quantizes per channel";
  if (q.levels != 256) return "it quantizes onto " + std::to_string(q.levels) + " codes, not the whole type";
  if (q.zero_point[0] != 0) {
    return "zero point " + std::to_string(q.zero_point[0]) +
           " (oneDNN 2.6's softmax has no destination zero point)";
  }
  return std::nullopt;
}

}  // namespace

bool fold_quantize_into_softmax(Graph& g, PassContext& ctx) {
  for (NodeId id : g.topological_order()) {
    const Node& softmax = g.node(id);
    if (softmax.kind != OpKind::Softmax || softmax.attr<SoftmaxAttrs>().quantizes()) continue;
    const auto cv_id = sole_consumer(g, softmax.outputs[0]);
    if (!cv_id) continue;
    const Node& cv = g.node(*cv_id);
    SoftmaxAttrs attrs = softmax.attr<SoftmaxAttrs>();
    std::string grid;
    if (cv.kind == OpKind::Convert && cv.attr<ConvertAttrs>().quantizes()) {
      // A FakeQuantize's quantize (OpenVINO IR, NNCF): its ranges formula.
      const ConvertAttrs& r = cv.attr<ConvertAttrs>();
      attrs.to = r.to;
      attrs.input_low = r.input_low;
      attrs.input_high = r.input_high;
      grid = "ranges [" + std::to_string(r.input_low) + ", " + std::to_string(r.input_high) + "]";
    } else if (cv.kind == OpKind::Quantize) {
      const QuantizeAttrs& q = cv.attr<QuantizeAttrs>();
      if (auto why = refusal(q)) {
        ctx.reject(kPass, cv.name, *why);
        continue;
      }
      attrs.to = q.to;
      attrs.quantize_scale = q.scale[0];
      grid = "output scale 1 / " + std::to_string(attrs.quantize_scale);
    } else {
      continue;
    }
    Node candidate = softmax;
    candidate.attrs = attrs;
    candidate.outputs = {cv.outputs[0]};
    if (auto why = ctx.check_layer(g, candidate, g.value(cv.outputs[0]).shape)) {
      ctx.reject(kPass, softmax.name, "the Softmax cannot write " + std::string(to_string(attrs.to)) +
                                          ": " + *why);
      continue;
    }
    const std::string name = softmax.name, cv_name = cv.name;
    const ValueId old = cv.outputs[0];
    const ValueId y = emit(g, OpKind::Softmax, name, softmax.inputs, attrs);
    replace_value(g, old, y);
    g.erase_node(*cv_id);
    g.erase_node(id);
    ctx.log(kPass, name + " + " + cv_name + " -> one Softmax writing " +
                       std::string(to_string(attrs.to)) + " (" + grid + ")");
    return true;
  }
  return false;
}

}  // namespace qfuse::graph
