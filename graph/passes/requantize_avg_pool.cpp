// requantize_avg_pool
//
//   q -> Dequantize(s, z) -> AvgPool
//     -> FQ(il, ih, lo, lo + L - 1, L) -> Convert(t)
//     ==>  q -> AvgPool[out_scale a, out_shift b] -> t
//
// The dequantize is affine with scalars, so the mean of the dequantized
// window is the dequantized mean of the int8 window: m' = (mean(q) - z) * s.
// The quantize-only FakeQuantize then computes round((m' - il) / Si) + lo,
// Si = (ih - il) / (L - 1), which is round(a * mean(q) + b) with
//   a = s / Si,   b = lo - (z * s + il) / Si,
// clamped to [lo, lo + L - 1]: the saturation to t when that is t's range.
// The pool runs on the int8 tensor and writes the next grid directly (the
// identity a = 1, b = 0 when both grids are one, as ONNX Runtime writes
// AveragePool). Rounding the mean once instead of the dequantized mean keeps
// the result within one step of the unfused graph.
// Preconditions: the FakeQuantize is per tensor and its levels fill t; with
// padding counted in the window (count_include_pad), z = 0 (a padded int8 0
// is the real value -z * s, not 0); s > 0.
//
// A global pool that no FakeQuantize reads (a squeeze-excitation's squeeze
// feeding an f32 fc1, a classifier's pool) keeps its f32 output but reads the
// codes: q -> AvgPool[to_f32, out_scale s, out_shift -z * s], the mean of the
// codes dequantized once instead of every element dequantized and then
// averaged (the same real value; the two f32 roundings differ by an ulp).

#include <cmath>

#include "graph/passes/passes.hpp"
#include "graph/passes/pattern.hpp"

namespace qfuse::graph {
namespace {

constexpr std::string_view kPass = "requantize_avg_pool";
using namespace pattern;

bool has_padding(const PoolAttrs& a) {
  for (std::size_t i = 0; i < a.pads_begin.size(); ++i) {
    if (a.pads_begin[i] != 0 || a.pads_end[i] != 0) return true;
  }
  return false;
}

// The global-pool form above the pass: true when it rewrote.
bool pool_dequantized_mean(Graph& g, PassContext& ctx, NodeId id, const Dequantized& dq) {
  const Node& pool = g.node(id);
  if (!pools_globally(g, pool)) return false;
  for (NodeId c : g.consumers(pool.outputs[0])) {
    if (g.node(c).kind == OpKind::FakeQuantize) return false;  // a requantizing pool's case
  }
  if (!(dq.scale[0] > 0.0f)) {
    ctx.reject(kPass, pool.name, "the dequantize scale is not positive; the pool stays f32");
    return false;
  }
  PoolAttrs attrs = pool.attr<PoolAttrs>();
  attrs.to_f32 = true;
  attrs.out_scale = dq.scale[0];
  attrs.out_shift = static_cast<float>(-static_cast<double>(dq.zero_point[0]) * dq.scale[0]);
  const std::string name = pool.name;
  const ValueId result = pool.outputs[0];
  const ValueId pooled = emit(g, OpKind::AvgPool, name, {dq.codes}, attrs);
  replace_value(g, result, pooled);
  g.erase_node(id);
  ctx.log(kPass, name + " averages the " + std::string(to_string(g.value(dq.codes).type)) +
                     " codes and dequantizes the mean (" + std::to_string(attrs.out_scale) +
                     " * mean + " + std::to_string(attrs.out_shift) + ", f32)");
  return true;
}

}  // namespace

bool requantize_avg_pool(Graph& g, PassContext& ctx) {
  for (NodeId id : g.topological_order()) {
    const Node& pool = g.node(id);
    if (pool.kind != OpKind::AvgPool || g.value(pool.inputs[0]).type != ElementType::f32) continue;
    const auto dq = dequantized(g, pool.inputs[0]);
    if (!dq || g.value(dq->codes).type == ElementType::s32) continue;
    const auto fq_id = sole_consumer(g, pool.outputs[0]);
    if (!fq_id || g.node(*fq_id).kind != OpKind::FakeQuantize) {
      if (pool_dequantized_mean(g, ctx, id, *dq)) return true;
      continue;
    }
    const Node& fq = g.node(*fq_id);
    const auto cv_id = sole_consumer(g, fq.outputs[0]);
    if (!cv_id || g.node(*cv_id).kind != OpKind::Convert) continue;
    const ElementType t = g.node(*cv_id).attr<ConvertAttrs>().to;
    if (t != ElementType::u8 && t != ElementType::s8) continue;

    const auto il = scalar_constant(g, fq.inputs[1]), ih = scalar_constant(g, fq.inputs[2]);
    const auto lo = scalar_constant(g, fq.inputs[3]), hi = scalar_constant(g, fq.inputs[4]);
    if (!il || !ih || !lo || !hi) {
      ctx.reject(kPass, pool.name, "the FakeQuantize after it ('" + fq.name +
                                       "') is not per tensor; the pool stays f32");
      continue;
    }
    const double type_lo = t == ElementType::u8 ? 0.0 : -128.0;
    if (*lo != type_lo || *hi != type_lo + 255.0) {
      ctx.reject(kPass, pool.name, "the FakeQuantize after it ('" + fq.name + "') has levels [" +
                                       std::to_string(*lo) + ", " + std::to_string(*hi) +
                                       "], not the whole " + std::string(to_string(t)) +
                                       " range; the pool stays f32");
      continue;
    }
    if (dq->scale[0] <= 0.0f) {
      ctx.reject(kPass, pool.name, "the dequantize scale is not positive; the pool stays f32");
      continue;
    }
    const auto& pa = pool.attr<PoolAttrs>();
    if (!pa.exclude_pad && has_padding(pa) && dq->zero_point[0] != 0.0f) {
      ctx.reject(kPass, pool.name,
                 "it counts padding in the window and the input's zero point is " +
                     std::to_string(dq->zero_point[0]) +
                     ", so a padded int8 0 is not a real 0; the pool stays f32");
      continue;
    }
    const double si = (static_cast<double>(*ih) - *il) / 255.0;
    if (!(si > 0.0)) continue;
    const double a = dq->scale[0] / si;
    const double b = *lo - (static_cast<double>(dq->zero_point[0]) * dq->scale[0] + *il) / si;
    PoolAttrs attrs = pa;
    // Same grid: exactly the identity, so no post-op is needed.
    attrs.out_scale = std::abs(a - 1.0) < 1e-6 ? 1.0f : static_cast<float>(a);
    attrs.out_shift = std::abs(b) < 1e-4 ? 0.0f : static_cast<float>(b);

    const ElementType stored = g.value(dq->codes).type;
    if (stored != t) {
      // s8 pooled onto a u8 grid (or the reverse) needs a converting pool,
      // which oneDNN 2.6 does not offer.
      ctx.reject(kPass, pool.name, "its input is " + std::string(to_string(stored)) +
                                       " and the next grid " + std::string(to_string(t)) +
                                       "; the pool stays f32");
      continue;
    }
    const std::string name = pool.name, fq_name = fq.name;
    const ValueId result = g.node(*cv_id).outputs[0];
    const ValueId pooled = emit(g, OpKind::AvgPool, name, {dq->codes}, attrs);
    replace_value(g, result, pooled);
    g.erase_node(*cv_id);
    g.erase_node(*fq_id);
    g.erase_node(id);
    ctx.log(kPass, name + " pools " + std::string(to_string(t)) + " and writes the grid of " +
                       fq_name +
                       (attrs.out_scale == 1.0f && attrs.out_shift == 0.0f
                            ? " (the same grid)"
                            : " (requantized: " + std::to_string(attrs.out_scale) + " * mean + " +
                                  std::to_string(attrs.out_shift) + ")"));
    return true;
  }
  return false;
}

}  // namespace qfuse::graph
