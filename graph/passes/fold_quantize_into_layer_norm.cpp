// fold_quantize_into_layer_norm
//
//   x -> LayerNorm -> y -> Quantize(t) | Convert(t, quantizing)
//     ==>  x -> LayerNormQuantize(quantize) -> y, t
//   x -> LayerNorm -> y -> DynamicQuantize -> codes, scale, zero point
//     ==>  x -> LayerNormDynamicQuantize -> y, codes, scale, zero point
//
// A transformer's LayerNorm feeds the next int8 layers through a quantizer
// (static QDQ: QuantizeLinear; ONNX Runtime's dynamic format:
// DynamicQuantizeLinear; OpenVINO and NNCF: a FakeQuantize, by now a
// quantizing Convert) and, in a post-norm block, the residual sum in f32
// too. One node normalizes each row and quantizes it while the row is in
// cache: the static codes in the same pass, the dynamic range gathered as
// the rows are written (the codes then wait for the whole tensor's range,
// one read of y from cache instead of DynamicQuantize's two). y stays an
// output, read by whoever read it before.
// The arithmetic: each code is the quantizer's own function of the same f32
// y (the backend's one LayerNorm kernel writes y alike for both nodes), so
// the codes are the unfused graph's bits; the dynamic grid is
// composer::dynamic_grid of the same minimum and maximum.
// Preconditions: a per-tensor quantization (one scale and zero point, or
// per-tensor ranges); when several quantizers read y, the first among y's
// readers is taken and the others keep reading y. The backend runs every
// such node (its kernel has no form it refuses), so none is checked.

#include "graph/passes/passes.hpp"
#include "graph/passes/pattern.hpp"

namespace qfuse::graph {
namespace {

constexpr std::string_view kPass = "fold_quantize_into_layer_norm";
using namespace pattern;

}  // namespace

bool fold_quantize_into_layer_norm(Graph& g, PassContext& ctx) {
  for (NodeId id : g.topological_order()) {
    const Node& norm = g.node(id);
    if (norm.kind != OpKind::LayerNorm) continue;
    const auto q_id = per_tensor_quantizer_of(g, norm.outputs[0], ctx, kPass, true);
    if (!q_id) continue;
    const Node& q = g.node(*q_id);
    const bool dynamic = q.kind == OpKind::DynamicQuantize;
    Attributes attrs = norm.attrs;
    if (!dynamic) {
      LayerNormQuantizeAttrs a;
      a.epsilon = norm.attr<LayerNormAttrs>().epsilon;
      if (q.kind == OpKind::Quantize) {
        a.quantize = q.attr<QuantizeAttrs>();
      } else {
        a.quantize = q.attr<ConvertAttrs>();
      }
      attrs = a;
    }
    const std::string name = norm.name, q_name = q.name;
    const OpKind kind = dynamic ? OpKind::LayerNormDynamicQuantize : OpKind::LayerNormQuantize;
    merge_with_quantizer(g, id, *q_id, kind, std::move(attrs));
    ctx.log(kPass, name + " + " + q_name + " -> one " + std::string(to_string(kind)) +
                       (dynamic ? " (the range gathered as the rows are normalized)"
                                : " (each row's codes written as it is normalized)"));
    return true;
  }
  return false;
}

}  // namespace qfuse::graph
