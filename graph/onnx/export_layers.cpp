// ONNX export of the fused int8 layers: the accumulator (ConvInteger /
// MatMulInteger, or an f32 ConvTranspose on the codes), then the integer plan
// the integer-only mode runs (exporter.hpp), or, for a layer that kept float
// scales, its composed plan in f32.

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <variant>

#include "composer/eltwise_math.hpp"
#include "graph/onnx/export_internal.hpp"

namespace qfuse::onnx::export_impl {
namespace {

template <typename T>
bool uniform(const std::vector<T>& v) {
  return std::all_of(v.begin(), v.end(), [&](const T& x) { return x == v[0]; });
}

}  // namespace

// A per-channel constant for the output of the layer `n`, whose channels lie
// on axis 1 (convolutions) or last (matrix products); a scalar when uniform.
template <typename T>
std::string Exporter::channel_constant(const Node& n, const std::string& base, int type,
                                       const std::vector<T>& v) {
  const std::size_t rank = g_.value(n.outputs[0]).shape.size();
  const bool spatial =
      n.kind == OpKind::QuantizedConvolution || n.kind == OpKind::QuantizedDeconvolution;
  if (uniform(v)) return w_.constant(base, type, std::vector<T>{v[0]}, {});
  Shape s{static_cast<std::int64_t>(v.size())};
  if (spatial) s.resize(rank - 1, 1);
  return w_.constant(base, type, v, s);
}

// The layer's accumulator sum(w * (x - zero point)), without bias: int32
// from ConvInteger / MatMulInteger, or f32 (exact below 2^24) from a
// ConvTranspose on the codes. `abs_sum`: sum |w| per output channel.
std::string Exporter::accumulator(const Node& n, int channels, bool& is_float,
                                  std::vector<double>& abs_sum) {
  const auto& a = n.attr<graph::QuantizedLayerAttrs>();
  const graph::Value& x = g_.value(n.inputs[0]);
  const graph::Value& wv = g_.value(n.inputs[1]);
  if (!wv.is_constant()) {
    is_float = false;
    return run_time_weights_accumulator(n, channels, abs_sum);
  }
  const Tensor& wq = *wv.constant;
  const auto wvals = wq.data<std::int8_t>();
  abs_sum.assign(static_cast<std::size_t>(channels), 0.0);
  std::string acc = w_.fresh(n.name + "/acc");
  is_float = false;
  if (n.kind == OpKind::QuantizedDeconvolution) {
    // ONNX has no integer ConvTranspose: the codes minus the zero point and
    // the s8 weights as floats, every product and partial sum an integer
    // (exact in f32 below 2^24, whatever the order of the sums).
    const auto& c = std::get<graph::DeconvAttrs>(a.geometry);
    std::string xf = cast(in(n.inputs[0]), kFloat, n.name + "/codes");
    if (a.src_zero_point != 0) {
      xf = w_.op("Sub", n.name + "/zero_point",
                 {xf, w_.scalar(n.name + "/x_zero_point", a.src_zero_point)});
    }
    const std::string w = w_.constant(n.name + "/weight", kFloat,
                                      std::vector<float>(wvals.begin(), wvals.end()), wv.shape);
    auto& node = w_.node("ConvTranspose", n.name, {xf, w}, acc);
    conv_attrs(node, c.strides, c.dilations, c.pads_begin, c.pads_end, c.groups, wv.shape);
    Writer::ints(node, "output_padding", c.output_padding);
    // Weights [IC, OC / groups, k...]: output channel g * OC/groups + j.
    const std::int64_t ocg = wv.shape[1], icg = wv.shape[0] / c.groups;
    const std::int64_t per = element_count(Shape(wv.shape.begin() + 2, wv.shape.end()));
    for (std::size_t i = 0; i < wvals.size(); ++i) {
      const std::int64_t k = static_cast<std::int64_t>(i) / per;
      const std::int64_t ic = k / ocg, j = k % ocg;
      abs_sum[static_cast<std::size_t>((ic / icg) * ocg + j)] += std::abs(wvals[i]);
    }
    is_float = true;
    return acc;
  }
  // A dynamic layer's zero point comes with its input (DynamicQuantizeLinear's).
  const std::string xzp =
      a.dynamic ? zero_point_scalar(n.inputs[2], n.name + "/x_zero_point")
                : w_.constant(n.name + "/x_zero_point", onnx_type(x.type),
                              std::vector<std::int32_t>{a.src_zero_point}, {});
  if (n.kind == OpKind::QuantizedConvolution) {
    const auto& c = std::get<graph::ConvAttrs>(a.geometry);
    const std::string w = w_.constant(n.name + "/weight", kInt8,
                                      std::vector<std::int8_t>(wvals.begin(), wvals.end()),
                                      wv.shape);
    auto& node = w_.node("ConvInteger", n.name, {in(n.inputs[0]), w, xzp}, acc);
    Writer::ints(node, "strides", c.strides);
    Writer::ints(node, "dilations", c.dilations);
    graph::Ints pads = c.pads_begin;
    pads.insert(pads.end(), c.pads_end.begin(), c.pads_end.end());
    Writer::ints(node, "pads", pads);
    Writer::int_attr(node, "group", c.groups);
    const std::size_t per = wvals.size() / abs_sum.size();
    for (std::size_t i = 0; i < wvals.size(); ++i) abs_sum[i / per] += std::abs(wvals[i]);
    return acc;
  }
  // B is [K, N]: a fully-connected layer's [N, K] weights transposed.
  bool transposed = n.kind == OpKind::QuantizedFullyConnected;
  std::string xa = in(n.inputs[0]);
  if (n.kind == OpKind::QuantizedMatMul) {
    const auto& m = std::get<graph::MatMulAttrs>(a.geometry);
    if (m.transpose_a && source_.prequantized_only) refuse(n, "transposed activations");
    if (m.transpose_a) xa = transpose_last_two(xa, x.shape.size(), n.name + "/a_t");
    transposed = m.transpose_b;
  }
  const std::int64_t rows = wv.shape[0], cols = wv.shape[1];
  std::vector<std::int8_t> bm(wvals.size());
  Shape bshape{rows, cols};
  if (transposed) {
    bshape = {cols, rows};
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t c = 0; c < cols; ++c) {
        bm[static_cast<std::size_t>(c * rows + r)] = wvals[static_cast<std::size_t>(r * cols + c)];
      }
    }
  } else {
    std::copy(wvals.begin(), wvals.end(), bm.begin());
  }
  for (std::int64_t k = 0; k < bshape[0]; ++k) {
    for (std::int64_t c = 0; c < bshape[1]; ++c) {
      abs_sum[static_cast<std::size_t>(c)] +=
          std::abs(bm[static_cast<std::size_t>(k * bshape[1] + c)]);
    }
  }
  const std::string w = w_.constant(n.name + "/weight", kInt8, bm, bshape);
  w_.node("MatMulInteger", n.name, {xa, w, xzp}, acc);
  return acc;
}

// A QuantizedMatMul of two run-time tensors (attention's Q x K^T and P x
// V): MatMulInteger on both codes with both zero points, ONNX's own integer
// product (batch dims broadcast as numpy's). Each |w - zero point| is at
// most 255, which is all the accumulator bound can assume.
std::string Exporter::run_time_weights_accumulator(const Node& n, int channels,
                                                   std::vector<double>& abs_sum) {
  const auto& a = n.attr<graph::QuantizedLayerAttrs>();
  if (n.kind != OpKind::QuantizedMatMul) refuse(n, "run-time weights outside a matrix product");
  const auto& m = std::get<graph::MatMulAttrs>(a.geometry);
  if ((m.transpose_a || m.transpose_b) && source_.prequantized_only) {
    refuse(n, "transposed activations");
  }
  const graph::Value& x = g_.value(n.inputs[0]);
  const graph::Value& wv = g_.value(n.inputs[1]);
  std::string xa = in(n.inputs[0]), wb = in(n.inputs[1]);
  // Operands the backend reads by strides (MatMulAttrs' perm_a / perm_b) as
  // Transposes before the product, perm_y as one after it.
  if (!m.perm_a.empty()) xa = transpose(xa, m.perm_a, n.name + "/a_perm");
  if (!m.perm_b.empty()) wb = transpose(wb, m.perm_b, n.name + "/b_perm");
  if (m.transpose_a) xa = transpose_last_two(xa, x.shape.size(), n.name + "/a_t");
  if (m.transpose_b) wb = transpose_last_two(wb, wv.shape.size(), n.name + "/b_t");
  const std::string xzp = w_.constant(n.name + "/x_zero_point", onnx_type(x.type),
                                      std::vector<std::int32_t>{a.src_zero_point}, {});
  const std::string wzp = w_.constant(n.name + "/w_zero_point", onnx_type(wv.type),
                                      std::vector<std::int32_t>{a.weights_zero_point}, {});
  Shape read = wv.shape;
  for (std::size_t i = 0; i < m.perm_b.size(); ++i) {
    read[i] = wv.shape[static_cast<std::size_t>(m.perm_b[i])];
  }
  const std::int64_t depth = read[read.size() - (m.transpose_b ? 1 : 2)];
  abs_sum.assign(static_cast<std::size_t>(channels), 255.0 * static_cast<double>(depth));
  const std::string acc = w_.fresh(n.name + "/acc");
  if (m.perm_y.empty()) {
    w_.node("MatMulInteger", n.name, {xa, wb, xzp, wzp}, acc);
    return acc;
  }
  // The chain after it is per tensor or per channel (the last dim, which
  // the backend's perm_y keeps), so it may follow the Transpose.
  w_.node("Transpose", n.name + "/y_perm", {w_.op("MatMulInteger", n.name, {xa, wb, xzp, wzp})},
          acc);
  Writer::ints(*w_.producer(acc), "perm", m.perm_y);
  return acc;
}

// |acc + bias| <= 255 sum|w| + |bias| (u8 codes minus a zero point span
// at most 255): what Cast converts (and an f32 ConvTranspose sums)
// exactly below 2^24.
template <typename T>
void Exporter::check_accumulator_bound(const Node& n, const std::vector<double>& abs_sum,
                                       const std::vector<T>& bias) {
  double bound = 0.0;
  for (std::size_t c = 0; c < abs_sum.size(); ++c) {
    const double bc =
        bias.empty() ? 0.0 : std::abs(static_cast<double>(bias[bias.size() == 1 ? 0 : c]));
    bound = std::max(bound, 255.0 * abs_sum[c] + bc);
  }
  if (bound >= 0x1p24) {
    ++report_.inexact_accumulators;
    spdlog::warn("export-prequantized: {}: accumulators may reach {:.0f}, past 2^24: Cast to "
                 "float rounds them there",
                 n.name, bound);
  }
}

// A layer with an integer plan: its accumulator, + bias, then each stage
// (M0, the residual, K, 2^-N, the clamp) and the store or the dequantize.
void Exporter::layer(const Node& n) {
  if (source_.prequantized_only && n.kind == OpKind::QuantizedDeconvolution) {
    refuse(n, "ONNX has no integer transposed convolution (ConvInteger covers Conv only)");
  }
  const auto& a = n.attr<graph::QuantizedLayerAttrs>();
  // A dynamic layer's scale is known only at run time: it keeps float
  // scales in the integer-only mode too.
  const composer::IntegerPlan* plan =
      source_.integer_plan && !a.dynamic ? source_.integer_plan(n) : nullptr;
  if (plan == nullptr) return float_scale_layer(n);
  const graph::Value& y = g_.value(n.outputs[0]);

  bool acc_is_float = false;
  std::vector<double> abs_sum;
  std::string acc = accumulator(n, plan->channels, acc_is_float, abs_sum);
  check_accumulator_bound(n, abs_sum, plan->bias);
  if (std::any_of(plan->bias.begin(), plan->bias.end(), [](std::int32_t b) { return b != 0; })) {
    acc = w_.op("Add", n.name + "/bias",
                {acc, acc_is_float ? channel_constant(n, n.name + "/bias", kFloat, plan->bias)
                                   : channel_constant(n, n.name + "/bias", kInt32, plan->bias)});
  }
  // The stage's integer input: int32 accumulators, or (after a rounding
  // point inside the layer) a float holding an integer: an intermediate
  // rounding is Round + Max / Min, so that the chain stays one layer's
  // post-ops when read back (a QuantizeLinear would end the layer there).
  std::string xi = acc;
  bool x_is_float = acc_is_float;
  std::string residual;
  if (plan->residual_input) {
    residual =
        in(n.inputs[a.first_external_input() + static_cast<std::size_t>(*plan->residual_input)]);
  }
  for (std::size_t s = 0; s < plan->stages.size(); ++s) {
    const composer::IntegerStage& st = plan->stages[s];
    const bool writes_output = s + 1 == plan->stages.size() && y.type != ElementType::f32;
    const std::string base = n.name + "/stage" + std::to_string(s);
    check_exact(n, st.multiplier, "a multiplier M0 of");
    check_exact(n, st.residual_multiplier, "a residual multiplier of");
    check_exact(n, st.offset, "an offset K of");
    std::string t = x_is_float ? xi : cast(xi, kFloat, base + "/cast");
    t = stage_scale(n, st, base, t, residual, writes_output);
    t = stage_clamp(n, st, base, t, writes_output);
    if (writes_output) {
      quantize(base, t, onnx_type(y.type), name(n.outputs[0]));
    } else {
      xi = t;
      x_is_float = true;
    }
  }
  if (y.type == ElementType::f32) {
    integer_dequantize(n, *plan, x_is_float ? xi : cast(xi, kFloat, n.name + "/dequantize"),
                       residual);
  }
  if (n.kind == OpKind::QuantizedDeconvolution) {
    ++report_.deconvolutions;
  } else {
    ++report_.layers;
  }
}

// Integers written as float are exact below 2^24 (larger ones only with
// trailing zero bits); others round to the nearest float: refused in the
// pre-quantized form only, else counted, with a warning for the first of `v`.
void Exporter::check_exact(const Node& n, const std::vector<std::int64_t>& v, const char* what) {
  for (const std::int64_t value : v) {
    if (static_cast<std::int64_t>(static_cast<float>(value)) != value) {
      if (source_.prequantized_only) {
        refuse(n, std::string(what) + " " + std::to_string(value) +
                      " is not exact as a float (integers are below 2^24; lower "
                      "CompileOptions::integer_eta)");
      }
      ++report_.inexact_constants;
      spdlog::warn("export-prequantized: {}: {} {} is not exact as a float: written as {:.0f} "
                   "(relative error below 2^-24; a value that close to a rounding tie can "
                   "land on the neighbouring code)",
                   n.name, what, value, static_cast<double>(static_cast<float>(value)));
      return;
    }
  }
}

// One stage's arithmetic on the float integer `t`: * M0 [+ residual * R]
// [+ K] * 2^-N, then Round unless the stage writes the output (whose
// QuantizeLinear rounds).
std::string Exporter::stage_scale(const Node& n, const composer::IntegerStage& st,
                                  const std::string& base, std::string t,
                                  const std::string& residual, bool writes_output) {
  t = w_.op("Mul", base + "/M0", {t, channel_constant(n, base + "/M0", kFloat, st.multiplier)});
  if (!st.residual_multiplier.empty()) {
    std::string r = cast(residual, kFloat, base + "/residual_cast");
    r = w_.op("Mul", base + "/R",
              {r, channel_constant(n, base + "/R", kFloat, st.residual_multiplier)});
    t = w_.op("Add", base + "/residual_add", {t, r});
  }
  if (std::any_of(st.offset.begin(), st.offset.end(), [](std::int64_t k) { return k != 0; })) {
    t = w_.op("Add", base + "/K", {t, channel_constant(n, base + "/K", kFloat, st.offset)});
  }
  std::vector<double> shift;
  for (const int sh : st.shift) shift.push_back(std::ldexp(1.0, -sh));
  t = w_.op("Mul", base + "/shift", {t, channel_constant(n, base + "/shift", kFloat, shift)});
  if (!writes_output) t = w_.op("Round", base + "/round", {t});
  return t;
}

// The stage's clamp, where narrower than what QuantizeLinear saturates to
// (int32's range inside the layer): one Clip when every channel has the
// same bounds, else Max / Min by channel.
std::string Exporter::stage_clamp(const Node& n, const composer::IntegerStage& st,
                                  const std::string& base, std::string t, bool writes_output) {
  const graph::Value& y = g_.value(n.outputs[0]);
  double type_lo = -0x1p31, type_hi = 0x1p31 - 1;
  if (writes_output) {
    type_lo = y.type == ElementType::s8 ? -128 : 0;
    type_hi = y.type == ElementType::s8 ? 127 : 255;
  }
  const bool clamp_lo =
      std::any_of(st.lo.begin(), st.lo.end(), [&](std::int32_t v) { return v > type_lo; });
  const bool clamp_hi =
      std::any_of(st.hi.begin(), st.hi.end(), [&](std::int32_t v) { return v < type_hi; });
  if ((clamp_lo || clamp_hi) && uniform(st.lo) && uniform(st.hi)) {
    // One clamp for every channel: Clip.
    const auto bound = [&](const char* which, std::int32_t v) {
      return w_.constant(base + which, kFloat, std::vector<double>{static_cast<double>(v)}, {});
    };
    return w_.op("Clip", base + "/clip", {t, bound("/lo", st.lo[0]), bound("/hi", st.hi[0])});
  }
  if (clamp_lo) {
    t = w_.op("Max", base + "/lo", {t, channel_constant(n, base + "/lo", kFloat, st.lo)});
  }
  if (clamp_hi) {
    t = w_.op("Min", base + "/hi", {t, channel_constant(n, base + "/hi", kFloat, st.hi)});
  }
  return t;
}

// An f32 output of an integer plan from the float integer `t` (the last
// stage's, or the accumulator + bias): * scale [+ residual * its scale]
// + shift [then the clamp, where no stage clamped].
void Exporter::integer_dequantize(const Node& n, const composer::IntegerPlan& plan, std::string t,
                                  const std::string& residual) {
  const composer::IntegerDequantize& d = *plan.dequantize;
  t = w_.op("Mul", n.name + "/scale", {t, channel_constant(n, n.name + "/scale", kFloat, d.scale)});
  if (d.residual_scale != 0.0f) {
    std::string r = cast(residual, kFloat, n.name + "/residual_cast");
    r = w_.op("Mul", n.name + "/residual_scale",
              {r, w_.constant(n.name + "/residual_scale", kFloat,
                              std::vector<float>{d.residual_scale}, {})});
    t = w_.op("Add", n.name + "/residual_add", {t, r});
  }
  const bool clamps =
      std::any_of(d.lo.begin(), d.lo.end(), [](float v) { return std::isfinite(v); }) ||
      std::any_of(d.hi.begin(), d.hi.end(), [](float v) { return std::isfinite(v); });
  if (!clamps || !plan.stages.empty()) {
    // After a stage the codes are clamped already.
    w_.node("Add", n.name + "/shift", {t, channel_constant(n, n.name + "/shift", kFloat, d.shift)},
            name(n.outputs[0]));
    return;
  }
  if (source_.prequantized_only) refuse(n, "a clamp on a dequantized accumulator");
  // A clamp on the dequantized accumulator.
  t = w_.op("Add", n.name + "/shift", {t, channel_constant(n, n.name + "/shift", kFloat, d.shift)});
  t = w_.op("Max", n.name + "/clamp_lo",
            {t, channel_constant(n, n.name + "/clamp_lo", kFloat, d.lo)});
  w_.node("Min", n.name + "/clamp_hi", {t, channel_constant(n, n.name + "/clamp_hi", kFloat, d.hi)},
          name(n.outputs[0]));
}

// A layer that kept float scales: its accumulator, then the composed plan
// in f32 as the float-scale path evaluates it (post_ops_plan.hpp):
//   y = (acc + bias) * output_scales; post_ops in order; + dst_zero_point;
//   dst = y (f32) or saturate(round_half_to_even(y)) (QuantizeLinear(1, 0)).
// A dynamic layer (QuantizedLayerAttrs::dynamic) is ONNX Runtime's form:
//   MatMulInteger(codes, W^T, z) -> Cast(float) -> Mul(r), r = s or Mul(s, ws), then post_ops,
// its plan without output scales, bias or a dst zero point.
void Exporter::float_scale_layer(const Node& n) {
  const auto& a = n.attr<graph::QuantizedLayerAttrs>();
  if (a.dynamic && source_.prequantized_only) {
    refuse(n, "the scale is known only at run time (a dynamic layer): no integer form");
  }
  if (!source_.composed_plan || source_.prequantized_only) {
    refuse(n, "the layer kept float scales in the integer-only mode (qfuse dump --integer-only "
              "says why)");
  }
  const std::optional<composer::PostOpsPlan> composed = source_.composed_plan(n);
  if (!composed) refuse(n, "the compiled model has no composed plan for this layer");
  const composer::PostOpsPlan& plan = *composed;
  const graph::Value& y = g_.value(n.outputs[0]);
  const std::string& b = n.name;

  bool acc_is_float = false;
  std::vector<double> abs_sum;
  std::string t = accumulator(n, plan.channels, acc_is_float, abs_sum);
  std::vector<float> bias;
  if (a.has_bias) {
    const auto v = g_.value(n.inputs[2]).constant->data<float>();
    bias.assign(v.begin(), v.end());
  }
  check_accumulator_bound(n, abs_sum, bias);
  if (!acc_is_float) t = cast(t, kFloat, b + "/cast");
  if (a.dynamic) t = dynamic_scale(n, plan, t);
  if (std::any_of(bias.begin(), bias.end(), [](float v) { return v != 0.0f; })) {
    t = w_.op("Add", b + "/bias", {t, channel_constant(n, b + "/bias", kFloat, bias)});
  }
  t = output_scales(n, plan, t);
  for (std::size_t k = 0; k < plan.post_ops.size(); ++k) t = post_op(n, plan, k, t);
  if (plan.dst_zero_point && *plan.dst_zero_point != 0) {
    t = w_.op("Add", b + "/dst_zero_point",
              {t, w_.scalar(b + "/dst_zero_point", *plan.dst_zero_point)});
  }
  if (y.type == ElementType::f32) {
    w_.finish(t, name(n.outputs[0]), b + "/output");
  } else {
    quantize(b, t, onnx_type(y.type), name(n.outputs[0]));
  }
  if (n.kind == OpKind::QuantizedDeconvolution) {
    ++report_.deconvolutions;
  } else {
    ++report_.float_scale_layers;
  }
}

// A dynamic layer's accumulator as float times its run-time scale.
std::string Exporter::dynamic_scale(const Node& n, const composer::PostOpsPlan& plan,
                                    const std::string& t) {
  const auto& a = n.attr<graph::QuantizedLayerAttrs>();
  const std::string& b = n.name;
  // The run-time scale is the whole output scale (as the executable
  // requires): nothing constant joins it.
  const bool unit = std::all_of(plan.output_scales.begin(), plan.output_scales.end(),
                                [](float s) { return s == 1.0f; });
  if (!unit || plan.dst_zero_point || a.has_bias) {
    refuse(n, "a dynamic layer with a constant output scale, bias or zero point besides its "
              "run-time scale");
  }
  std::string r = in(n.inputs[3]);
  if (!a.dynamic_weight_scales.empty()) {
    // ONNX Runtime's form: r = Mul(s, the weights' scales).
    r = w_.op("Mul", b + "/scales_mul",
              {r, channel_constant(n, b + "/weight_scale", kFloat, a.dynamic_weight_scales)});
  }
  return w_.op("Mul", b + "/scale", {t, r});
}

// (acc + bias) * the plan's output scales, unless every one is 1.
std::string Exporter::output_scales(const Node& n, const composer::PostOpsPlan& plan,
                                    std::string t) {
  const std::string& b = n.name;
  if (plan.output_scales.empty() ||
      std::all_of(plan.output_scales.begin(), plan.output_scales.end(),
                  [](float s) { return s == 1.0f; })) {
    return t;
  }
  // A denormal scale (a channel of zero weights) in two steps: its
  // product with 2^100 is exact, and so is the final 2^-100 on a
  // result in the normal range, without relying on a runtime that
  // multiplies denormals (rather than flushing them to zero).
  const bool tiny = std::any_of(plan.output_scales.begin(), plan.output_scales.end(),
                                [](float s) { return s != 0.0f && std::fabs(s) < 0x1p-100f; });
  std::vector<float> scales = plan.output_scales;
  if (tiny) {
    for (float& s : scales) s = std::ldexp(s, 100);
  }
  t = w_.op("Mul", b + "/output_scale",
            {t, channel_constant(n, b + "/output_scale", kFloat, scales)});
  if (tiny) {
    t = w_.op("Mul", b + "/output_scale_2^-100",
              {t, w_.scalar(b + "/two_pow_minus_100", 0x1p-100)});
  }
  return t;
}

// The plan's post-op `k` on `t`: an activation, a binary op with a constant
// or a tensor the layer reads, or the residual sum.
std::string Exporter::post_op(const Node& n, const composer::PostOpsPlan& plan, std::size_t k,
                              std::string t) {
  const std::string base = n.name + "/post_op" + std::to_string(k);
  const composer::PostOp& op = plan.post_ops[k];
  if (const auto* e = std::get_if<composer::EltwisePostOp>(&op)) {
    t = eltwise(n, base, t, e->alg, e->alpha, e->beta);
    if (e->scale != 1.0f) {
      t = w_.op("Mul", base + "/scale", {t, w_.scalar(base + "/scale", e->scale)});
    }
    return t;
  }
  if (const auto* bin = std::get_if<composer::BinaryPostOp>(&op)) {
    std::string other;
    if (const auto* c = std::get_if<composer::ConstantTensor>(&bin->tensor)) {
      if (c->values.size() == 1 || static_cast<int>(c->values.size()) == plan.channels) {
        other = channel_constant(n, base + "/operand", kFloat, c->values);
      } else {
        other = w_.constant(base + "/operand", kFloat, c->values, g_.value(n.outputs[0]).shape);
      }
    } else {
      other = external_input(n, std::get<composer::ExternalTensor>(bin->tensor).input,
                             base + "/operand");
    }
    static const std::map<composer::BinaryAlg, const char*> kOps = {
        {composer::BinaryAlg::add, "Add"}, {composer::BinaryAlg::sub, "Sub"},
        {composer::BinaryAlg::mul, "Mul"}, {composer::BinaryAlg::min, "Min"},
        {composer::BinaryAlg::max, "Max"}};
    return w_.op(kOps.at(bin->alg), base, {t, other});
  }
  // The residual's raw values (codes) read from the destination.
  const auto& sum = std::get<composer::SumPostOp>(op);
  std::string r = external_input(n, sum.input, base + "/residual");
  if (sum.scale != 1.0f) {
    r = w_.op("Mul", base + "/residual_scale", {r, w_.scalar(base + "/scale", sum.scale)});
  }
  return w_.op("Add", base, {t, r});
}

// The layer's external input `input` (a post-op's operand) as f32.
std::string Exporter::external_input(const Node& n, int input, const std::string& base) {
  const auto& a = n.attr<graph::QuantizedLayerAttrs>();
  return in_f32(n.inputs[a.first_external_input() + static_cast<std::size_t>(input)], base);
}

// alg(x, alpha, beta) of the composer's vocabulary.
std::string Exporter::eltwise(const Node& n, const std::string& b, const std::string& x,
                              composer::EltwiseAlg alg, float alpha, float beta) {
  using composer::EltwiseAlg;
  const auto unary = [&](const char* op) { return w_.op(op, b, {x}); };
  // One ONNX operator with its defaults (composer/eltwise_math.hpp's table).
  if (const std::string_view op = composer::eltwise_info(alg).onnx_op; !op.empty()) {
    return w_.op(std::string(op), b, {x});
  }
  switch (alg) {
    case EltwiseAlg::relu: {
      if (alpha == 0.0f) return unary("Relu");
      const std::string t = unary("LeakyRelu");
      Writer::float_attr(*w_.producer(t), "alpha", alpha);
      return t;
    }
    case EltwiseAlg::elu: {
      const std::string t = unary("Elu");
      Writer::float_attr(*w_.producer(t), "alpha", alpha);
      return t;
    }
    case EltwiseAlg::square: return w_.op("Mul", b, {x, x});
    case EltwiseAlg::linear: {
      const std::string t = w_.op("Mul", b + "/alpha", {x, w_.scalar(b + "/alpha", alpha)});
      return beta == 0.0f ? t : w_.op("Add", b + "/beta", {t, w_.scalar(b + "/beta", beta)});
    }
    case EltwiseAlg::clip:
      return w_.op("Clip", b, {x, w_.scalar(b + "/lo", alpha), w_.scalar(b + "/hi", beta)});
    case EltwiseAlg::gelu_tanh:
    case EltwiseAlg::gelu_erf: {
      const std::string t = w_.fresh(b);
      spell_gelu(b, x, alg == EltwiseAlg::gelu_tanh, t);
      return t;
    }
    case EltwiseAlg::swish: {
      const std::string t = w_.fresh(b);
      spell_swish(b, x, alpha, t);
      return t;
    }
    case EltwiseAlg::hsigmoid: {
      const std::string t = unary("HardSigmoid");
      Writer::float_attr(*w_.producer(t), "alpha", 1.0f / 6.0f);
      Writer::float_attr(*w_.producer(t), "beta", 0.5f);
      return t;
    }
    default: break;  // log, mish
  }
  refuse(n, "post-op eltwise " + composer::to_string(alg) +
                ": qfuse has no operator to read its ONNX form back as");
}

}  // namespace qfuse::onnx::export_impl
