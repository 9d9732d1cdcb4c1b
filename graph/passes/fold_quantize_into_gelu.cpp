// fold_quantize_into_gelu
//
//   x -> Gelu(erf) -> y -> DynamicQuantize -> codes, scale, zero point
//     ==>  x -> GeluDynamicQuantize -> y, codes, scale, zero point
//   x -> Gelu(erf) -> y -> Quantize(per tensor) -> codes
//     ==>  x -> GeluQuantize(the Quantize's attributes) -> y, codes
//
// A transformer quantizes the GELU of each feed-forward block's first matmul
// for the second: ONNX Runtime's dynamic format with DynamicQuantizeLinear,
// its static QDQ format with QuantizeLinear. The layer before would take
// GELU as oneDNN's gelu_erf post-op, which costs as much as the matmul itself
// at small hidden sizes (0.75 ns a value on an AVX-512 EPYC). One node
// computes GELU with qfuse's kernel (0.3 ns a value) and quantizes y while
// it is in cache: the static codes block by block, the dynamic range as y is
// written (the codes then from cache: one read where DynamicQuantize made
// two). It runs in the fuse phase before the layers take their chains, after
// lookup_elementwise (a Gelu between codes is a table, exact). The layer
// before keeps its own chain (scale, bias) and writes f32; y stays an output
// for any other reader.
// The arithmetic: y is qfuse's GELU (plugin/executable_ops/gelu_kernel.hpp:
// within 3e-7 * max(1, |x|) of GELU in double; oneDNN's GELU, which the
// unfused Gelu runs, is within about 4e-7 * max(1, |x|)); the codes are the
// quantizer's own function of that y (DynamicQuantize's grid of its range).
// Against the unfused graph a code can move by one where y sits that close
// to a rounding boundary. Preconditions: the erf form (the tanh form stays a
// post-op); a per-tensor Quantize over at most kStaticInCache values (a
// larger static one stays the layer's post-ops); the first quantizer among
// y's readers is taken, the others keep reading y.

#include "graph/passes/passes.hpp"
#include "graph/passes/pattern.hpp"

namespace qfuse::graph {
namespace {

constexpr std::string_view kPass = "fold_quantize_into_gelu";
using namespace pattern;

// Values up to which a static GeluQuantize pays (512 KB of f32: within a
// core's L2 on the AVX-512 CPUs qfuse runs on). The layer before then writes
// f32 for the GELU pass to read where its post-ops wrote the codes; beyond
// the cache that round trip costs more than the post-op (BERT-base's
// 128 x 3072 feed-forward, 1 thread on a 2-core AVX-512 EPYC: 1.85 ms with
// the post-op, 1.72 + 0.26 ms without). A dynamic grid needs y in f32 anyway.
constexpr std::int64_t kStaticInCache = 131072;

}  // namespace

bool fold_quantize_into_gelu(Graph& g, PassContext& ctx) {
  for (NodeId id : g.topological_order()) {
    const Node& gelu = g.node(id);
    if (gelu.kind != OpKind::Gelu) continue;
    const auto q_id = per_tensor_quantizer_of(g, gelu.outputs[0], ctx, kPass, false);
    if (!q_id) continue;
    if (gelu.attr<GeluAttrs>().approximation != GeluApproximation::erf) {
      ctx.reject(kPass, gelu.name, "the tanh form (qfuse's kernel computes the erf form)");
      continue;
    }
    const Node& q = g.node(*q_id);
    const bool dynamic = q.kind == OpKind::DynamicQuantize;
    const std::int64_t values = element_count(g.value(gelu.outputs[0]).shape);
    if (!dynamic && values > kStaticInCache) {
      ctx.reject(kPass, gelu.name,
                 std::to_string(values) + " values: the layer's f32 output would leave the "
                 "cache (the layer's post-ops write the codes)");
      continue;
    }
    const std::string name = gelu.name, q_name = q.name;
    const OpKind kind = dynamic ? OpKind::GeluDynamicQuantize : OpKind::GeluQuantize;
    merge_with_quantizer(g, id, *q_id, kind, dynamic ? gelu.attrs : q.attrs);
    ctx.log(kPass, name + " + " + q_name + " -> one " + std::string(to_string(kind)) +
                       (dynamic ? " (the range gathered as GELU is computed)"
                                : " (each block's codes written as GELU is computed)"));
    return true;
  }
  return false;
}

}  // namespace qfuse::graph
