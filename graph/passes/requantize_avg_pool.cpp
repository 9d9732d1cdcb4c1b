// requantize_avg_pool
//
//   q -> Dequantize(s, z) -> AvgPool
//     -> FQ(il, ih, lo, lo + L - 1, L) -> Convert(t)  (or -> Quantize(t, S, Z))
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
// the result within one step of the unfused graph. A Quantize is the grid
// il = -Z * S, Si = S, lo = 0 in these terms (a = s / S, b = Z - z * s / S).
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
    const OpKind k = g.node(c).kind;
    if (k == OpKind::FakeQuantize || k == OpKind::Quantize) return false;  // a requantizing pool's case
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

// The grid the pool's mean is quantized onto: code = round((m - x0) / step)
// + code0, saturated to `type` (the whole type), written by node `last`.
struct Target {
  double step, x0, code0;
  ElementType type;
  NodeId last;
};

// A quantize-only FakeQuantize and its Convert: round((m - il) / Si) + lo.
std::optional<Target> fake_quantize_target(const Graph& g, NodeId fq_id, PassContext& ctx,
                                           const std::string& pool) {
  const Node& fq = g.node(fq_id);
  const auto cv_id = sole_consumer(g, fq.outputs[0]);
  if (!cv_id || g.node(*cv_id).kind != OpKind::Convert) return std::nullopt;
  const ElementType t = g.node(*cv_id).attr<ConvertAttrs>().to;
  if (t != ElementType::u8 && t != ElementType::s8) return std::nullopt;
  const auto il = scalar_constant(g, fq.inputs[1]), ih = scalar_constant(g, fq.inputs[2]);
  const auto lo = scalar_constant(g, fq.inputs[3]), hi = scalar_constant(g, fq.inputs[4]);
  if (!il || !ih || !lo || !hi) {
    ctx.reject(kPass, pool, "the FakeQuantize after it ('" + fq.name +
                                "') is not per tensor; the pool stays f32");
    return std::nullopt;
  }
  const double type_lo = t == ElementType::u8 ? 0.0 : -128.0;
  if (*lo != type_lo || *hi != type_lo + 255.0) {
    ctx.reject(kPass, pool, "the FakeQuantize after it ('" + fq.name + "') has levels [" +
                                std::to_string(*lo) + ", " + std::to_string(*hi) +
                                "], not the whole " + std::string(to_string(t)) +
                                " range; the pool stays f32");
    return std::nullopt;
  }
  return Target{(static_cast<double>(*ih) - *il) / 255.0, *il, *lo, t, *cv_id};
}

// `v` (codes, or their dequantize) reaches a layer's activation input through
// data movement and dequantizes only.
bool reaches_layer(const Graph& g, ValueId v, int depth = 0) {
  if (depth > 8) return false;
  for (NodeId u : g.consumers(v)) {
    const Node& n = g.node(u);
    if ((is_layer(n.kind) || is_quantized_layer(n.kind)) && n.inputs[0] == v) return true;
    if ((moves_data(n) || n.kind == OpKind::Dequantize) && reaches_layer(g, n.outputs[0], depth + 1)) {
      return true;
    }
  }
  return false;
}

// ONNX's QuantizeLinear onto the whole type: round(m / s) + z (z an integer,
// so adding it after the rounding is adding it before). Only where a layer
// reads the codes: the pool's rounding then replaces the quantize's, at the
// cost of ties the int8 mean meets exactly (one step); a quantize that some
// other op reads keeps the f32 mean.
std::optional<Target> quantize_target(const Graph& g, NodeId q_id) {
  const auto& q = g.node(q_id).attr<QuantizeAttrs>();
  if (!q.per_tensor() || q.levels != 256) return std::nullopt;
  if (!reaches_layer(g, g.node(q_id).outputs[0])) return std::nullopt;
  return Target{q.scale[0], 0.0, static_cast<double>(q.zero_point[0]), q.to, q_id};
}

}  // namespace

bool requantize_avg_pool(Graph& g, PassContext& ctx) {
  for (NodeId id : g.topological_order()) {
    const Node& pool = g.node(id);
    if (pool.kind != OpKind::AvgPool || g.value(pool.inputs[0]).type != ElementType::f32) continue;
    const auto dq = dequantized(g, pool.inputs[0]);
    if (!dq || g.value(dq->codes).type == ElementType::s32) continue;
    const auto next = sole_consumer(g, pool.outputs[0]);
    const OpKind next_kind = next ? g.node(*next).kind : OpKind::Relu;
    if (next_kind != OpKind::FakeQuantize && next_kind != OpKind::Quantize) {
      if (pool_dequantized_mean(g, ctx, id, *dq)) return true;
      continue;
    }
    const auto target = next_kind == OpKind::Quantize ? quantize_target(g, *next)
                                                      : fake_quantize_target(g, *next, ctx, pool.name);
    if (!target) continue;
    const ElementType t = target->type;
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
    // round((m' - x0) / step) + c0 with m' = (mean(q) - z) * s.
    if (!(target->step > 0.0)) continue;
    const double a = dq->scale[0] / target->step;
    const double b =
        target->code0 - (static_cast<double>(dq->zero_point[0]) * dq->scale[0] + target->x0) /
                            target->step;
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
    const std::string name = pool.name, fq_name = g.node(*next).name;
    const ValueId result = g.node(target->last).outputs[0];
    const ValueId pooled = emit(g, OpKind::AvgPool, name, {dq->codes}, attrs);
    replace_value(g, result, pooled);
    if (target->last != *next) g.erase_node(target->last);
    g.erase_node(*next);
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
