// quantize_weights
//
//   w (f32 constant) -> FQ(il, ih, ol, oh, L) -> layer.weights
//     ==>  wq (s8 constant) -> Dequantize(So[oc]) -> layer.weights
//
// with, per output channel, the code q of each weight as the FakeQuantize
// defines it: q = round_half_to_even((w - il) * (L-1) / (ih - il)) clamped by
// the FakeQuantize definition, So = (oh - ol) / (L-1), Zo = -ol / So and
// wq = q - Zo.
//
//   w (f32 constant) -> Quantize(s, zp) -> Dequantize(s, zp) -> layer.weights
//     ==>  wq (s8 constant) -> Dequantize(s[oc]) -> layer.weights
//
// a Q/DQ pair on f32 weights, as PyTorch exports them: composer::quantize_linear,
// q = saturate(round_half_even(w / s) + zp) with the division in f32, and
// wq = q - zp. These are the codes ONNX computes, ties included: PyTorch's
// symmetric quantizer puts each channel's largest weight on w / s = +-127.5
// exactly.
//   q (s8 / u8 constant) -> Dequantize(s, zp) -> layer.weights
//     ==>  q - zp (s8 constant) -> Dequantize(s, 0) -> layer.weights
//
// 8-bit weights with a zero point (OpenVINO's compressed weights, i8 / u8
// Const -> Convert -> Subtract(zp) -> Multiply(s); ONNX's DequantizeLinear of
// u8 weights): exact, f32(q) - zp is the integer q - zp in f32 when zp is one.
// Exact when Zo is an integer and every wq fits s8, which holds for the
// usual symmetric weight ranges (L = 255, il = -ih; or L = 256,
// il = -ih * 128/127). The weights are stored 4x smaller.
// Preconditions: the FakeQuantize output is read only as the weights of
// layers that agree on the output channel axis; ranges per tensor or per
// output channel.

#include <algorithm>
#include <cmath>

#include "composer/fake_quantize_formula.hpp"
#include "graph/passes/passes.hpp"
#include "graph/passes/pattern.hpp"

namespace qfuse::graph {
namespace {

constexpr std::string_view kPass = "quantize_weights";
using namespace pattern;

// The output channel axis all consumers read the weights with, or -1.
int common_channel_axis(const Graph& g, ValueId w) {
  int axis = -1;
  const auto users = g.consumers(w);
  if (users.empty()) return -1;
  for (NodeId u : users) {
    const Node& n = g.node(u);
    if (!is_layer(n.kind) || n.inputs.size() < 2 || n.inputs[1] != w || n.inputs[0] == w) {
      return -1;
    }
    const int a = weights_channel_axis(n);
    if (a < 0 || (axis >= 0 && a != axis)) return -1;
    axis = a;
  }
  return axis;
}

// Dequantize `id` of Quantize(f32 constant) read as layer weights: s8
// weights q - zp and a Dequantize by the scales alone. True when it rewrote.
bool quantize_pair_on_weights(Graph& g, NodeId id, PassContext& ctx) {
  const Node& dq = g.node(id);
  const Node* q = producer_of(g, dq.inputs[0], OpKind::Quantize);
  if (q == nullptr || dequantize_of_quantize(g, *q) != &dq) return false;
  const Value& raw = g.value(q->inputs[0]);
  if (!raw.is_constant() || raw.type != ElementType::f32 || raw.shape.size() < 2) return false;
  if (g.is_graph_output(dq.outputs[0])) return false;
  const int axis_i = common_channel_axis(g, dq.outputs[0]);
  const QuantizeAttrs qa = q->attr<QuantizeAttrs>();
  if (axis_i < 0 || (!qa.per_tensor() && qa.axis != axis_i)) {
    ctx.reject(kPass, q->name, "not read as layer weights along its axis");
    return false;
  }
  const auto axis = static_cast<std::size_t>(axis_i);
  const Shape shape = raw.shape;
  const auto w = raw.constant->data<float>();
  std::int64_t inner = 1;
  for (std::size_t i = axis + 1; i < shape.size(); ++i) inner *= shape[i];
  const auto channels = static_cast<std::size_t>(shape[axis]);
  const auto run = static_cast<std::size_t>(inner);
  std::vector<std::int8_t> wq(w.size());
  for (std::size_t start = 0; start < w.size(); start += run) {
    const std::size_t c = (start / run) % channels;
    const float s = qa.scale_at(c);
    const std::int32_t zp = qa.zero_point_at(c);
    for (std::size_t i = start; i < start + run; ++i) {
      const std::int32_t v = composer::quantize_linear(w[i], s, zp, qa.code_min(), qa.code_max()) - zp;
      if (v < -128 || v > 127) {
        ctx.reject(kPass, q->name, "quantized weights minus the zero point do not fit s8");
        return false;
      }
      wq[i] = static_cast<std::int8_t>(v);
    }
  }
  const std::string name = q->name, raw_name = raw.name;
  const NodeId q_id = g.value(dq.inputs[0]).producer;
  const ValueId dq_out = dq.outputs[0];
  const ValueId codes = g.add_constant(raw_name + ".s8", Tensor::from_vector(shape, std::move(wq)));
  DequantizeAttrs da;
  da.scale = qa.scale;
  da.zero_point = std::vector<float>(1, 0.0f);
  da.axis = static_cast<std::int64_t>(axis);
  const ValueId deq = emit(g, OpKind::Dequantize, name + "/dequantize", {codes}, std::move(da));
  replace_value(g, dq_out, deq);
  g.erase_node(id);
  g.erase_node(q_id);
  ctx.log(kPass, name + " -> s8 " + to_string(shape) + " weights, " +
                     (qa.per_tensor() ? "per-tensor" : "per-channel") + " scale");
  return true;
}

// Dequantize `id` of an 8-bit constant with a zero point, read as layer
// weights: the s8 codes q - zp and the Dequantize by the scales alone. True
// when it rewrote.
bool shift_weight_zero_point(Graph& g, NodeId id, PassContext& ctx) {
  const Node& dq = g.node(id);
  const Value& raw = g.value(dq.inputs[0]);
  if (!raw.is_constant() || raw.shape.size() < 2 ||
      (raw.type != ElementType::s8 && raw.type != ElementType::u8)) {
    return false;
  }
  const DequantizeAttrs& da = dq.attr<DequantizeAttrs>();
  const bool no_zero_point = std::all_of(da.zero_point.begin(), da.zero_point.end(),
                                         [](float z) { return z == 0.0f; });
  if ((raw.type == ElementType::s8 && no_zero_point) || g.is_graph_output(dq.outputs[0])) {
    return false;
  }
  const int axis_i = common_channel_axis(g, dq.outputs[0]);
  const bool per_channel = da.scale.size() > 1 || da.zero_point.size() > 1;
  if (axis_i < 0 || (per_channel && da.axis != axis_i)) {
    ctx.reject(kPass, dq.name, "8-bit weights with a zero point not read as layer weights along its axis");
    return false;
  }
  // An integer an 8-bit code can lie one byte's range away from (larger
  // ones leave no code in s8 anyway).
  for (float z : da.zero_point) {
    if (z != std::nearbyint(z) || std::abs(z) > 255.0f) {
      ctx.reject(kPass, dq.name, "the weights' zero point is not an integer in [-255, 255]");
      return false;
    }
  }
  const auto axis = static_cast<std::size_t>(axis_i);
  const Shape shape = raw.shape;
  std::int64_t inner = 1;
  for (std::size_t i = axis + 1; i < shape.size(); ++i) inner *= shape[i];
  const auto channels = static_cast<std::size_t>(shape[axis]);
  const auto run = static_cast<std::size_t>(inner);
  const Tensor& codes_in = *raw.constant;
  std::vector<std::int8_t> wq(static_cast<std::size_t>(codes_in.size()));
  for (std::size_t i = 0; i < wq.size(); ++i) {
    const auto c = (i / run) % channels;
    const auto q = static_cast<std::int32_t>(codes_in.as_float(static_cast<std::int64_t>(i)));
    const std::int32_t v = q - static_cast<std::int32_t>(da.zero_point_at(c));
    if (v < -128 || v > 127) {
      ctx.reject(kPass, dq.name, "the weights minus their zero point do not fit s8");
      return false;
    }
    wq[i] = static_cast<std::int8_t>(v);
  }
  const std::string name = dq.name;
  const ValueId dq_out = dq.outputs[0];
  const ValueId codes =
      g.add_constant(raw.name + ".s8", Tensor::from_vector(shape, std::move(wq)));
  DequantizeAttrs na = da;
  na.zero_point = std::vector<float>(1, 0.0f);
  na.axis = per_channel ? da.axis : static_cast<std::int64_t>(axis);
  const ValueId deq = emit(g, OpKind::Dequantize, name + "/s8", {codes}, std::move(na));
  replace_value(g, dq_out, deq);
  g.erase_node(id);
  ctx.log(kPass, name + " -> s8 " + to_string(shape) + " weights less their zero point");
  return true;
}

}  // namespace

bool quantize_weights(Graph& g, PassContext& ctx) {
  for (NodeId id : g.topological_order()) {
    if (g.node(id).kind == OpKind::Dequantize) {
      if (quantize_pair_on_weights(g, id, ctx) || shift_weight_zero_point(g, id, ctx)) return true;
      continue;
    }
    const Node& fq = g.node(id);
    if (fq.kind != OpKind::FakeQuantize) continue;
    const Value& raw = g.value(fq.inputs[0]);
    if (!raw.is_constant() || raw.type != ElementType::f32) continue;
    if (g.is_graph_output(fq.outputs[0])) continue;
    const int axis_i = common_channel_axis(g, fq.outputs[0]);
    if (axis_i < 0) {
      ctx.reject(kPass, fq.name, "not read as layer weights with a known channel axis");
      continue;
    }
    const auto axis = static_cast<std::size_t>(axis_i);
    // Copies: adding constants below may move the graph's value storage.
    const Shape shape = raw.shape;
    const std::string raw_name = raw.name;
    const std::shared_ptr<const Tensor> raw_data = raw.constant;
    if (shape.size() < 2) continue;
    const auto channels = static_cast<std::size_t>(shape[axis]);
    std::vector<std::vector<float>> r;
    for (std::size_t i = 1; i < 5; ++i) {
      auto v = channel_vector(g, fq.inputs[i], shape, axis);
      if (!v) break;
      r.push_back(expand(*v, channels));
    }
    if (r.size() != 4) {
      ctx.reject(kPass, fq.name, "ranges are not per tensor or per output channel");
      continue;
    }
    const double steps = static_cast<double>(fq.attr<FakeQuantizeAttrs>().levels - 1);
    std::vector<float> scale(channels);
    std::vector<double> zero(channels);
    bool ok = true;
    for (std::size_t c = 0; c < channels && ok; ++c) {
      const composer::FakeQuantizeScales fs = composer::fake_quantize_scales(
          r[0][c], r[1][c], r[2][c], r[3][c], static_cast<int>(fq.attr<FakeQuantizeAttrs>().levels));
      const double so = fs.output_scale;
      scale[c] = static_cast<float>(so);
      ok = so != 0.0 && is_near_integer(fs.output_zero);
      if (ok) zero[c] = std::round(fs.output_zero);
    }
    if (!ok) {
      ctx.reject(kPass, fq.name, "output zero point is not an integer");
      continue;
    }
    const auto w = raw_data->data<float>();
    std::int64_t inner = 1;
    for (std::size_t i = axis + 1; i < shape.size(); ++i) inner *= shape[i];
    std::vector<std::int8_t> wq(w.size());
    // [outer, channels, inner] blocks: each channel's grid is read once per run.
    const std::size_t run = static_cast<std::size_t>(inner);
    for (std::size_t start = 0; start < w.size() && ok; start += run) {
      const std::size_t c = (start / run) % channels;
      for (std::size_t i = start; i < start + run; ++i) {
        const double q = composer::fake_quantize_level(w[i], r[0][c], r[1][c], steps);
        const double v = q - zero[c];
        ok = ok && v >= -128.0 && v <= 127.0;
        wq[i] = static_cast<std::int8_t>(v);
      }
    }
    if (!ok) {
      ctx.reject(kPass, fq.name, "quantized weights do not fit s8");
      continue;
    }
    const std::string name = fq.name;
    const ValueId fq_out = fq.outputs[0];
    const ValueId q = g.add_constant(raw_name + ".s8", Tensor::from_vector(shape, std::move(wq)));
    DequantizeAttrs dq;
    dq.scale = all_equal(scale) ? std::vector<float>{scale[0]} : scale;
    dq.axis = static_cast<std::int64_t>(axis);
    const bool per_tensor = dq.scale.size() == 1;
    const ValueId deq = emit(g, OpKind::Dequantize, name + "/dequantize", {q}, std::move(dq));
    replace_value(g, fq_out, deq);
    g.erase_node(id);
    ctx.log(kPass, name + " -> s8 " + to_string(shape) + " weights, " +
                       (per_tensor ? "per-tensor" : "per-channel") + " scale");
    return true;
  }
  return false;
}

}  // namespace qfuse::graph
