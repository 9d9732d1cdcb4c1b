// fold_into_fake_quantize_ranges
//
//   x -> Clamp(lo, hi) -> FQ(il, ih, ol, oh)   ==>  x -> FQ(il, ih, ol, oh)
//        iff lo <= min(il, ih) and hi >= max(il, ih)      (Relu: lo = 0, hi = inf)
//   x -> Multiply(c) -> FQ(il, ih, ...)        ==>  x -> FQ(il / c, ih / c, ...)   iff c > 0
//   x -> Add(c) -> FQ(il, ih, ...)             ==>  x -> FQ(il - c, ih - c, ...)
//
// The clamp is exact: every clamped value is already saturated by the FQ. The
// affine cases are exact in real arithmetic; in floating point the two forms
// may disagree only for inputs within an f32 rounding of a range bound or a
// rounding tie. c is a constant per tensor or per channel (axis 1).
//
//   x -> Clamp(lo, hi) -> Quantize(s, zp)       ==>  x -> Quantize(s, zp)
//        iff Quantize(lo) is the lowest code and Quantize(hi) the highest
//
// Quantize is non-decreasing in x (s > 0), so a clamp whose bounds already
// land on the extreme codes changes no code: exact, ties included (ONNX Runtime's
// QDQ form quantizes a Relu's output with zero point 0). The affine folds
// would change ONNX's f32 arithmetic and are not made on a Quantize.
// Preconditions: the folded node feeds only the FakeQuantize; ranges constant.

#include <algorithm>
#include <limits>

#include "composer/fake_quantize_formula.hpp"

#include "graph/passes/passes.hpp"
#include "graph/passes/pattern.hpp"

namespace qfuse::graph {
namespace {

constexpr std::string_view kPass = "fold_into_fake_quantize_ranges";
using namespace pattern;

struct Ranges {
  std::vector<float> il, ih;
};

bool clamp_is_redundant(const Ranges& r, float lo, float hi) {
  for (std::size_t c = 0; c < std::max(r.il.size(), r.ih.size()); ++c) {
    const float a = r.il[std::min(c, r.il.size() - 1)];
    const float b = r.ih[std::min(c, r.ih.size() - 1)];
    if (lo > std::min(a, b) || hi < std::max(a, b)) return false;
  }
  return true;
}

// The clamp (or relu) before Quantize `id`, when every value it clamps is
// saturated by the Quantize anyway: dropped.
bool drop_clamp_before_quantize(Graph& g, NodeId id, PassContext& ctx) {
  const Node& q = g.node(id);
  const NodeId pid = g.value(q.inputs[0]).producer;
  if (!pid.valid()) return false;
  const Node& p = g.node(pid);
  if (p.kind != OpKind::Clamp && p.kind != OpKind::Relu) return false;
  if (sole_consumer(g, q.inputs[0]) != id) return false;
  float lo = 0.0f, hi = std::numeric_limits<float>::infinity();
  if (p.kind == OpKind::Clamp) {
    lo = p.attr<ClampAttrs>().lo;
    hi = p.attr<ClampAttrs>().hi;
  }
  const auto& a = q.attr<QuantizeAttrs>();
  for (std::size_t c = 0; c < std::max(a.scale.size(), a.zero_point.size()); ++c) {
    const float s = a.scale_at(c);
    const std::int32_t z = a.zero_point_at(c);
    const bool low_saturates =
        lo == -std::numeric_limits<float>::infinity() ||
        composer::quantize_linear(lo, s, z, a.code_min(), a.code_max()) == a.code_min();
    const bool high_saturates =
        hi == std::numeric_limits<float>::infinity() ||
        composer::quantize_linear(hi, s, z, a.code_min(), a.code_max()) == a.code_max();
    if (!low_saturates || !high_saturates) {
      ctx.reject(kPass, p.name, "clips inside the codes of '" + q.name + "'");
      return false;
    }
  }
  const std::string p_name = p.name, q_name = q.name;
  g.set_input(id, 0, p.inputs[0]);
  ctx.log(kPass, p_name + " dropped before " + q_name + " (it saturates where the clamp does)");
  return true;
}

}  // namespace

bool fold_into_fake_quantize_ranges(Graph& g, PassContext& ctx) {
  for (NodeId id : g.topological_order()) {
    if (g.node(id).kind == OpKind::Quantize) {
      if (drop_clamp_before_quantize(g, id, ctx)) return true;
      continue;
    }
    const Node& fq = g.node(id);
    if (fq.kind != OpKind::FakeQuantize) continue;
    const NodeId pid = g.value(fq.inputs[0]).producer;
    if (!pid.valid()) continue;
    const Node& p = g.node(pid);
    const bool candidate = p.kind == OpKind::Clamp || p.kind == OpKind::Relu ||
                           p.kind == OpKind::Multiply || p.kind == OpKind::Add;
    if (!candidate) continue;
    if (sole_consumer(g, fq.inputs[0]) != id) {
      ctx.reject(kPass, p.name, "has other consumers than '" + fq.name + "'");
      continue;
    }
    const Shape shape = g.value(fq.inputs[0]).shape;
    if (shape.size() < 2) continue;
    auto il = channel_vector(g, fq.inputs[1], shape, 1);
    auto ih = channel_vector(g, fq.inputs[2], shape, 1);
    if (!il || !ih || !constant_f32(g, fq.inputs[3]) || !constant_f32(g, fq.inputs[4])) {
      ctx.reject(kPass, fq.name, "input ranges are not per-tensor/per-channel constants");
      continue;
    }
    const std::string fq_name = fq.name, p_name = p.name;
    if (p.kind == OpKind::Clamp || p.kind == OpKind::Relu) {
      float lo = 0.0f, hi = std::numeric_limits<float>::infinity();
      if (p.kind == OpKind::Clamp) {
        lo = p.attr<ClampAttrs>().lo;
        hi = p.attr<ClampAttrs>().hi;
      }
      if (!clamp_is_redundant({*il, *ih}, lo, hi)) {
        ctx.reject(kPass, p_name, "clips inside the range of '" + fq_name + "'");
        continue;
      }
      g.set_input(id, 0, p.inputs[0]);
      ctx.log(kPass, p_name + " dropped before " + fq_name + " (its range covers the clamp)");
      return true;
    }
    // Multiply / Add with one constant operand.
    const bool first_const = g.value(p.inputs[0]).is_constant();
    const ValueId x = p.inputs[first_const ? 1 : 0];
    const ValueId c = p.inputs[first_const ? 0 : 1];
    auto cv = channel_vector(g, c, shape, 1);
    if (!cv || g.value(x).is_constant() || g.value(x).shape != shape) continue;
    const std::size_t n = std::max({il->size(), ih->size(), cv->size()});
    std::vector<float> new_il = expand(*il, n), new_ih = expand(*ih, n);
    const std::vector<float> k = expand(*cv, n);
    if (p.kind == OpKind::Multiply) {
      if (!std::all_of(k.begin(), k.end(), [](float v) { return v > 0.0f; })) {
        ctx.reject(kPass, p_name, "multiplies by a value <= 0");
        continue;
      }
      for (std::size_t i = 0; i < n; ++i) {
        new_il[i] /= k[i];
        new_ih[i] /= k[i];
      }
    } else {
      for (std::size_t i = 0; i < n; ++i) {
        new_il[i] -= k[i];
        new_ih[i] -= k[i];
      }
    }
    const ValueId l = add_channel_constant(g, fq_name + ".il", new_il, shape.size(), 1);
    const ValueId h = add_channel_constant(g, fq_name + ".ih", new_ih, shape.size(), 1);
    g.set_input(id, 0, x);
    g.set_input(id, 1, l);
    g.set_input(id, 2, h);
    ctx.log(kPass, p_name + " folded into the input range of " + fq_name);
    return true;
  }
  return false;
}

}  // namespace qfuse::graph
