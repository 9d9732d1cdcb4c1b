// split_fake_quantize
//
//   x -> FQ(il, ih, ol, oh, L) -> layer
//     ==>  x -> FQ(il, ih, lo, lo + L - 1, L) -> Convert(u8|s8)        quantize only
//            -> Dequantize(So, Zd) -> layer                             dequantize
//
// So = (oh - ol) / (L - 1), Zo = -ol / So. Storage (DESIGN.md):
//   s8 with lo = -128 when L = 256 and Zi = -il / Si = 128 (symmetric ranges;
//   the stored zero point Zd = Zo - 128 is then 0 when ol = il);
//   u8 with lo = 0 otherwise (Zd = Zo; a non-zero Zd becomes a source zero
//   point of the consuming layer).
// The rewrite keeps the value: (q + lo - Zd) * So = (q - Zo) * So = q * So + ol.
// (ONNX's Q/DQ pairs are already the two parts: choose_code_type picks their
// storage.) Only FakeQuantize nodes that feed a layer's activation input (directly, through
// data movement, or through an AvgPool quantized again), either side of a MatMul
// of two quantized run-time tensors, a residual Add, or a quantized product by a
// per-channel gate (squeeze-excitation), are split; the others
// stay whole and become post-op steps.
// Preconditions: constant ranges per tensor or per channel (axis 1); L <= 256;
// So != 0.

#include <algorithm>
#include <cmath>

#include "graph/passes/passes.hpp"
#include "graph/passes/pattern.hpp"

namespace qfuse::graph {
namespace {

constexpr std::string_view kPass = "split_fake_quantize";
using namespace pattern;

// `v` is an int8 tensor's dequantize.
bool is_dequantized(const Graph& g, ValueId v) {
  const Node* dq = producer_of(g, v, OpKind::Dequantize);
  return dq != nullptr && g.value(dq->inputs[0]).type != ElementType::s32;
}


// A FakeQuantize this pass already split: its output is stored as u8/s8.
bool is_quantize_only(const Graph& g, const Node& fq) {
  const auto next = sole_consumer(g, fq.outputs[0]);
  return next && g.node(*next).kind == OpKind::Convert &&
         g.node(*next).attr<ConvertAttrs>().to != ElementType::f32;
}

// `v` is, through data movement, a FakeQuantize's output or a dequantized
// int8 tensor: one side of an activation-by-activation MatMul that can run
// int8 once both sides are split.
bool quantized_operand(const Graph& g, ValueId v) {
  const NodeId p = g.value(v).producer;
  if (!p.valid()) return false;
  const Node& n = g.node(p);
  // Per tensor: an int8 matmul takes one scale and zero point per side.
  if (n.kind == OpKind::FakeQuantize) return has_per_tensor_ranges(g, n);
  if (n.kind == OpKind::Quantize) return n.attr<QuantizeAttrs>().per_tensor();
  if (moves_data(n)) return quantized_operand(g, n.inputs[0]);
  return is_dequantized(g, v);
}

bool read_by(const Graph& g, ValueId v, OpKind kind) {
  for (NodeId c : g.consumers(v)) {
    if (g.node(c).kind == kind) return true;
  }
  return false;
}

// Some layer reads `v` (directly or through data movement) as its activation and
// has dequantized (s8) weights, so it can become an int8 layer; or `v` is one
// side of a residual Add whose other side is not int8 yet: stored as int8, it
// is what the sum post-op of the other side's layer reads (the other side's
// FakeQuantize stays whole and joins that layer's chain).
bool feeds_layer_activation(const Graph& g, ValueId v) {
  for (NodeId u : g.consumers(v)) {
    const Node& n = g.node(u);
    if (n.kind == OpKind::Add && n.inputs[0] != n.inputs[1]) {
      const ValueId other = n.inputs[0] == v ? n.inputs[1] : n.inputs[0];
      if (!g.value(other).is_constant() && !is_dequantized(g, other) &&
          g.value(other).shape == g.value(v).shape &&
          g.value(n.outputs[0]).shape == g.value(v).shape) {
        return true;
      }
    }
    if (is_layer(n.kind) && n.inputs[0] == v && n.inputs[1] != v &&
        is_dequantized(g, n.inputs[1])) {
      return true;
    }
    // Either side of a MatMul of two run-time int8 tensors (attention's
    // Q x K^T and P x V).
    if (n.kind == OpKind::MatMul && n.inputs[0] != n.inputs[1] &&
        !g.value(n.inputs[1]).is_constant() && quantized_operand(g, n.inputs[0]) &&
        quantized_operand(g, n.inputs[1])) {
      return true;
    }
    if ((moves_data(n) || n.kind == OpKind::Concat) && feeds_layer_activation(g, n.outputs[0])) return true;
    // A squeeze-excitation's x * gate[n, c], quantized: it runs on the codes
    // (quantize_channel_gate).
    if (n.kind == OpKind::Multiply && n.inputs[0] != n.inputs[1]) {
      const ValueId gate = n.inputs[0] == v ? n.inputs[1] : n.inputs[0];
      const auto next = sole_consumer(g, n.outputs[0]);
      if (is_channel_gate(g, gate, v) && g.value(n.outputs[0]).shape == g.value(v).shape && next &&
          (g.node(*next).kind == OpKind::FakeQuantize || g.node(*next).kind == OpKind::Quantize)) {
        return true;
      }
    }
    // AvgPool quantized again before a layer: it can pool the int8 values
    // (requantize_avg_pool). A global AvgPool that nothing quantizes again
    // (a squeeze-excitation's squeeze, a classifier's pool) averages the
    // codes and dequantizes the mean.
    if (n.kind == OpKind::AvgPool) {
      const auto next = sole_consumer(g, n.outputs[0]);
      if (next && g.node(*next).kind == OpKind::FakeQuantize &&
          (feeds_layer_activation(g, g.node(*next).outputs[0]) ||
           is_quantize_only(g, g.node(*next)))) {
        return true;
      }
      if (next && g.node(*next).kind == OpKind::Quantize) return true;
      if (pools_globally(g, n) && !read_by(g, n.outputs[0], OpKind::FakeQuantize) &&
          !read_by(g, n.outputs[0], OpKind::Quantize)) {
        return true;
      }
    }
  }
  return false;
}

}  // namespace

bool split_fake_quantize(Graph& g, PassContext& ctx) {
  for (NodeId id : g.topological_order()) {
    const Node& fq = g.node(id);
    if (fq.kind != OpKind::FakeQuantize) continue;
    if (g.value(fq.inputs[0]).is_constant()) continue;
    if (!feeds_layer_activation(g, fq.outputs[0])) continue;
    const std::int64_t levels = fq.attr<FakeQuantizeAttrs>().levels;
    if (levels > 256) {
      ctx.reject(kPass, fq.name, "" + std::to_string(levels) + " levels do not fit 8 bits");
      continue;
    }
    const Shape shape = g.value(fq.inputs[0]).shape;
    const std::size_t axis = 1;
    if (shape.size() < 2) continue;
    std::vector<std::vector<float>> r;
    for (std::size_t i = 1; i < 5; ++i) {
      auto v = channel_vector(g, fq.inputs[i], shape, axis);
      if (!v) break;
      r.push_back(*v);
    }
    if (r.size() != 4) {
      ctx.reject(kPass, fq.name, "ranges are not per tensor or per channel constants");
      continue;
    }
    std::size_t n = 1;
    for (const auto& v : r) n = std::max(n, v.size());
    for (auto& v : r) v = expand(v, n);
    const double steps = static_cast<double>(levels - 1);
    bool symmetric = levels == 256;
    bool ok = true;
    std::vector<double> so(n), zo(n);
    for (std::size_t c = 0; c < n; ++c) {
      const double si = (static_cast<double>(r[1][c]) - r[0][c]) / steps;
      so[c] = (static_cast<double>(r[3][c]) - r[2][c]) / steps;
      ok = ok && si != 0.0 && so[c] != 0.0;
      if (!ok) break;
      zo[c] = -r[2][c] / so[c];
      symmetric = symmetric && std::abs(-r[0][c] / si - 128.0) < 1e-3;
    }
    if (!ok) {
      ctx.reject(kPass, fq.name, "a range is empty");
      continue;
    }
    const ElementType storage = symmetric ? ElementType::s8 : ElementType::u8;
    const float lo = symmetric ? -128.0f : 0.0f;
    std::vector<float> scale(n), zero(n);
    for (std::size_t c = 0; c < n; ++c) {
      scale[c] = static_cast<float>(so[c]);
      zero[c] = static_cast<float>(zo[c] + lo);
      if (is_near_integer(zero[c], 1e-4)) zero[c] = std::round(zero[c]);
    }

    const std::string name = fq.name;
    const Node old = fq;
    const ValueId qlo = g.add_constant(name + ".qlo", Tensor::from_vector<float>({1}, {lo}));
    const ValueId qhi = g.add_constant(
        name + ".qhi", Tensor::from_vector<float>({1}, {lo + static_cast<float>(steps)}));
    const std::vector<ValueId> q_inputs{old.inputs[0], old.inputs[1], old.inputs[2], qlo, qhi};
    const ValueId q = emit(g, OpKind::FakeQuantize, name + "/quantize", q_inputs, old.attrs);
    const ValueId stored = emit(g, OpKind::Convert, name + "/to_" + std::string(to_string(storage)),
                                {q}, ConvertAttrs{storage});
    DequantizeAttrs dq;
    dq.scale = all_equal(scale) ? std::vector<float>{scale[0]} : scale;
    dq.zero_point = all_equal(zero) ? std::vector<float>{zero[0]} : zero;
    dq.axis = static_cast<std::int64_t>(axis);
    const bool per_tensor = dq.scale.size() == 1;
    const ValueId deq = emit(g, OpKind::Dequantize, name + "/dequantize", {stored}, std::move(dq));
    replace_value(g, old.outputs[0], deq);
    g.erase_node(id);
    ctx.log(kPass, name + " -> quantize to " + std::string(to_string(storage)) + " + dequantize (" +
                       (per_tensor ? "per-tensor" : "per-channel") + ")");
    return true;
  }
  return false;
}

}  // namespace qfuse::graph
