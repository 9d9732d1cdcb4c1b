// ONNX export of the ordinary operators: f32 elementwise ops, normalization,
// shapes, pools and f32 layers, each as the ONNX operator(s) it is; what
// opset 14 lacks (Gelu, LayerNorm) spelled out as exporters write it, which
// qfuse reads back as the one op.

#include <map>
#include <string>
#include <utility>

#include "graph/onnx/export_internal.hpp"
#include "graph/op_info.hpp"

namespace qfuse::onnx::export_impl {

// Every op ordinary() writes, with its writer and whether it reads f32 only.
const std::map<OpKind, Exporter::OrdinaryForm>& Exporter::ordinary_forms() {
  static const std::map<OpKind, OrdinaryForm> kForms = {
      {OpKind::Add, {&Exporter::binary_op, true}},
      {OpKind::Subtract, {&Exporter::binary_op, true}},
      {OpKind::Multiply, {&Exporter::binary_op, true}},
      {OpKind::Divide, {&Exporter::binary_op, true}},
      {OpKind::Minimum, {&Exporter::binary_op, true}},
      {OpKind::Maximum, {&Exporter::binary_op, true}},
      {OpKind::Relu, {&Exporter::unary_op, true}},
      {OpKind::Sigmoid, {&Exporter::unary_op, true}},
      {OpKind::Tanh, {&Exporter::unary_op, true}},
      {OpKind::Exp, {&Exporter::unary_op, true}},
      {OpKind::Abs, {&Exporter::unary_op, true}},
      {OpKind::Sqrt, {&Exporter::unary_op, true}},
      {OpKind::Round, {&Exporter::unary_op, true}},
      {OpKind::HSwish, {&Exporter::unary_op, true}},
      {OpKind::LeakyRelu, {&Exporter::alpha_activation, true}},
      {OpKind::Elu, {&Exporter::alpha_activation, true}},
      {OpKind::PRelu, {&Exporter::prelu, true}},
      {OpKind::Clamp, {&Exporter::clamp, true}},
      {OpKind::HSigmoid, {&Exporter::hsigmoid, true}},
      {OpKind::Swish, {&Exporter::swish, true}},
      {OpKind::Gelu, {&Exporter::gelu, true}},
      {OpKind::GeluDynamicQuantize, {&Exporter::gelu_dynamic_quantize, true}},
      {OpKind::GeluQuantize, {&Exporter::gelu_quantize, true}},
      {OpKind::Power, {&Exporter::power, true}},
      {OpKind::Softmax, {&Exporter::softmax, true}},
      {OpKind::LayerNorm, {&Exporter::layer_norm, true}},
      {OpKind::LayerNormQuantize, {&Exporter::layer_norm_quantize, true}},
      {OpKind::LayerNormDynamicQuantize, {&Exporter::layer_norm_dynamic_quantize, true}},
      {OpKind::Gather, {&Exporter::gather, false}},
      {OpKind::ReduceMean, {&Exporter::reduce_mean, true}},
      {OpKind::BatchNormalization, {&Exporter::batch_norm, true}},
      {OpKind::Resize, {&Exporter::resize, false}},
      {OpKind::Slice, {&Exporter::slice, false}},
      {OpKind::MaxPool, {&Exporter::max_pool, false}},
      {OpKind::AvgPool, {&Exporter::avg_pool, true}},
      {OpKind::Convolution, {&Exporter::convolution, true}},
      {OpKind::Deconvolution, {&Exporter::deconvolution, true}},
      {OpKind::FullyConnected, {&Exporter::fully_connected, true}},
      {OpKind::MatMul, {&Exporter::matmul, true}},
      {OpKind::FakeQuantize, {&Exporter::fake_quantize, true}},
      {OpKind::Dequantize, {&Exporter::dequantize, false}},
      {OpKind::Lookup, {&Exporter::lookup, false}},
      {OpKind::GateMultiply, {&Exporter::gate_multiply, false}},
      {OpKind::CodeAdd, {&Exporter::code_add, false}},
      {OpKind::MeanInnerProduct, {&Exporter::mean_inner_product, false}},
      {OpKind::DynamicQuantize, {&Exporter::dynamic_quantize, true}},
      {OpKind::Convert, {&Exporter::prequantized_op, false}},
      {OpKind::Quantize, {&Exporter::prequantized_op, false}},
      {OpKind::Reshape, {&Exporter::prequantized_op, false}},
      {OpKind::Flatten, {&Exporter::prequantized_op, false}},
      {OpKind::Transpose, {&Exporter::prequantized_op, false}},
      {OpKind::Concat, {&Exporter::prequantized_op, false}}};
  return kForms;
}

// `n` as the ONNX operator(s) it is, writing `y`.
void Exporter::ordinary(const Node& n, const std::string& y) {
  if (source_.prequantized_only) refuse(n, "no pre-quantized form for this operator");
  ++report_.operators;
  const auto& forms = ordinary_forms();
  const auto form = forms.find(n.kind);
  if (form == forms.end()) refuse(n, "no ONNX form for this operator");
  if (form->second.f32_inputs) require_f32_inputs(n);
  (this->*form->second.write)(n, y);
}

void Exporter::require_f32_inputs(const Node& n) const {
  for (graph::ValueId v : n.inputs) {
    if (g_.value(v).type != ElementType::f32) {
      refuse(n, "reads a " + std::string(to_string(g_.value(v).type)) + " tensor ('" + name(v) +
                    "') where the operator takes f32");
    }
  }
}

// The pre-quantized form's own ops (Convert, Quantize, the shape ops): emit
// writes them, into the node's own output, and they do not count as ordinary
// operators.
void Exporter::prequantized_op(const Node& n, const std::string&) {
  --report_.operators;
  emit(n);
}

// ---- elementwise -------------------------------------------------------------

// The ONNX operator of op_info's onnx column, input for input.
void Exporter::binary_op(const Node& n, const std::string& y) {
  w_.node(std::string(graph::op_info(n.kind).onnx), n.name, {in(n.inputs[0]), in(n.inputs[1])},
          y);
}

// The same, on the one input.
void Exporter::unary_op(const Node& n, const std::string& y) {
  w_.node(std::string(graph::op_info(n.kind).onnx), n.name, {in(n.inputs[0])}, y);
}

// LeakyRelu or Elu.
void Exporter::alpha_activation(const Node& n, const std::string& y) {
  auto& node = w_.node(n.kind == OpKind::Elu ? "Elu" : "LeakyRelu", n.name, {in(n.inputs[0])}, y);
  Writer::float_attr(node, "alpha", n.attr<graph::AlphaAttrs>().alpha);
}

void Exporter::prelu(const Node& n, const std::string& y) {
  w_.node("PRelu", n.name, {in(n.inputs[0]), in(n.inputs[1])}, y);
}

void Exporter::clamp(const Node& n, const std::string& y) {
  const std::string& b = n.name;
  const auto& a = n.attr<graph::ClampAttrs>();
  w_.node("Clip", b, {in(n.inputs[0]), w_.scalar(b + "/lo", a.lo), w_.scalar(b + "/hi", a.hi)},
          y);
}

// min(max(x + 3, 0), 6) / 6 = clip(x / 6 + 1/2, 0, 1); qfuse reads
// HardSigmoid(1/6, 1/2) back as HSigmoid.
void Exporter::hsigmoid(const Node& n, const std::string& y) {
  auto& node = w_.node("HardSigmoid", n.name, {in(n.inputs[0])}, y);
  Writer::float_attr(node, "alpha", 1.0f / 6.0f);
  Writer::float_attr(node, "beta", 0.5f);
}

void Exporter::power(const Node& n, const std::string& y) {
  const std::string& b = n.name;
  w_.node("Pow", b,
          {in(n.inputs[0]), w_.scalar(b + "/exponent", n.attr<graph::PowerAttrs>().exponent)}, y);
}

void Exporter::swish(const Node& n, const std::string& y) {
  spell_swish(n.name, in(n.inputs[0]), n.attr<graph::AlphaAttrs>().alpha, y);
}

void Exporter::gelu(const Node& n, const std::string& y) {
  const bool tanh_form =
      n.attr<graph::GeluAttrs>().approximation == graph::GeluApproximation::tanh;
  spell_gelu(n.name, in(n.inputs[0]), tanh_form, y);
}

// The erf GELU, then its quantizer.
void Exporter::gelu_dynamic_quantize(const Node& n, const std::string& y) {
  spell_gelu(n.name, in(n.inputs[0]), false, y);
  spell_dynamic_quantize(n, y, 1, name(n.outputs[1]));
}

void Exporter::gelu_quantize(const Node& n, const std::string& y) {
  spell_gelu(n.name, in(n.inputs[0]), false, y);
  quantize_linear(n.attr<graph::QuantizeAttrs>(), y, n.name + "/quantize", name(n.outputs[1]));
}

// x * sigmoid(alpha * x)
void Exporter::spell_swish(const std::string& b, const std::string& x, float alpha,
                           const std::string& y) {
  std::string t = x;
  if (alpha != 1.0f) t = w_.op("Mul", b + "/alpha", {x, w_.scalar(b + "/alpha", alpha)});
  t = w_.op("Sigmoid", b + "/sigmoid", {t});
  w_.node("Mul", b, {x, t}, y);
}

// Opset 14 has no Gelu: x * 0.5 * (1 + erf(x / sqrt(2))) as PyTorch writes
// it (which qfuse reads back as one Gelu), or the tanh form
// x * 0.5 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3))).
void Exporter::spell_gelu(const std::string& b, const std::string& x, bool tanh_form,
                          const std::string& y) {
  std::string t;
  if (tanh_form) {
    const std::string x3 = w_.op("Mul", b + "/cube", {w_.op("Mul", b + "/square", {x, x}), x});
    t = w_.op("Mul", b + "/cubic", {x3, w_.scalar(b + "/coefficient", 0.044715)});
    t = w_.op("Add", b + "/inner", {x, t});
    t = w_.op("Mul", b + "/scale", {t, w_.scalar(b + "/sqrt_2_over_pi", 0.7978845608028654)});
    t = w_.op("Tanh", b + "/tanh", {t});
  } else {
    t = w_.op("Div", b + "/div", {x, w_.scalar(b + "/sqrt2", 1.4142135623730951)});
    t = w_.op("Erf", b + "/erf", {t});
  }
  t = w_.op("Add", b + "/one_plus", {t, w_.scalar(b + "/one", 1.0)});
  t = w_.op("Mul", b + "/times_x", {x, t});
  w_.node("Mul", b, {t, w_.scalar(b + "/half", 0.5)}, y);
}

// ---- normalization -----------------------------------------------------------

// A Softmax that writes codes: Softmax, then QuantizeLinear(s, 0) (y / s where
// the Softmax multiplied by 1 / s: within one code), or a quantizing
// Convert's form when it quantizes by ranges. One with a mask: Add, then
// Softmax.
void Exporter::softmax(const Node& n, const std::string& y) {
  const std::string& b = n.name;
  const auto& a = n.attr<graph::SoftmaxAttrs>();
  const std::string out = a.quantizes() ? w_.fresh(b + "/probabilities") : y;
  const std::string x =
      n.inputs.size() == 2 ? w_.op("Add", b + "/masked", {in(n.inputs[0]), in(n.inputs[1])})
                           : in(n.inputs[0]);
  auto& node = w_.node("Softmax", b, {x}, out);
  Writer::int_attr(node, "axis", a.axis);
  if (a.by_ranges()) {
    quantize_as(graph::ConvertAttrs{a.to, a.input_low, a.input_high}, a.to, out, b + "/quantize", y);
  } else if (a.quantizes()) {
    w_.node("QuantizeLinear", b + "/quantize",
            {out, w_.constant(b + "/scale", kFloat, std::vector<float>{a.quantize_scale}, {}),
             w_.constant(b + "/zero_point", onnx_type(a.to), std::vector<double>{0.0}, {})},
            y);
  }
}

void Exporter::layer_norm(const Node& n, const std::string& y) {
  spell_layer_norm(n, n.attr<graph::LayerNormAttrs>().epsilon, y);
}

// Opset 14 has no LayerNormalization (17): written as PyTorch spells
// nn.LayerNorm at opset 13, d = x - mean(x); d / sqrt(mean(d^2) + eps)
// * scale + bias over the last axis, which qfuse reads back as one LayerNorm.
void Exporter::spell_layer_norm(const Node& n, float epsilon, const std::string& y) {
  const std::string& b = n.name;
  const auto mean_of_last_axis = [&](const std::string& base, const std::string& t) {
    const std::string m = w_.op("ReduceMean", base, {t});
    Writer::ints(*w_.producer(m), "axes", {-1});
    Writer::int_attr(*w_.producer(m), "keepdims", 1);
    return m;
  };
  const std::string x = in(n.inputs[0]);
  const std::string d = w_.op("Sub", b + "/centered", {x, mean_of_last_axis(b + "/mean", x)});
  const std::string square = w_.op("Pow", b + "/square", {d, w_.scalar(b + "/two", 2.0)});
  std::string t = w_.op("Add", b + "/plus_epsilon",
                        {mean_of_last_axis(b + "/variance", square),
                         w_.scalar(b + "/epsilon", epsilon)});
  t = w_.op("Sqrt", b + "/deviation", {t});
  t = w_.op("Div", b + "/normalized", {d, t});
  t = w_.op("Mul", b + "/scaled", {t, in(n.inputs[1])});
  w_.node("Add", b, {t, in(n.inputs[2])}, y);
}

// y, then its codes as the quantizer the node took (QuantizeLinear, or a
// quantizing Convert's form).
void Exporter::layer_norm_quantize(const Node& n, const std::string& y) {
  const auto& a = n.attr<graph::LayerNormQuantizeAttrs>();
  spell_layer_norm(n, a.epsilon, y);
  const std::string base = n.name + "/quantize";
  if (const auto* q = std::get_if<graph::QuantizeAttrs>(&a.quantize)) {
    quantize_linear(*q, y, base, name(n.outputs[1]));
  } else {
    const auto& r = std::get<graph::ConvertAttrs>(a.quantize);
    quantize_as(r, r.to, y, base, name(n.outputs[1]));
  }
}

// y, then DynamicQuantizeLinear of it for the other three outputs.
void Exporter::layer_norm_dynamic_quantize(const Node& n, const std::string& y) {
  spell_layer_norm(n, n.attr<graph::LayerNormAttrs>().epsilon, y);
  spell_dynamic_quantize(n, y, 1, name(n.outputs[1]));
}

void Exporter::reduce_mean(const Node& n, const std::string& y) {
  auto& node = w_.node("ReduceMean", n.name, {in(n.inputs[0])}, y);
  Writer::ints(node, "axes", n.attr<graph::ReduceAttrs>().axes);
  Writer::int_attr(node, "keepdims", 1);
}

void Exporter::batch_norm(const Node& n, const std::string& y) {
  const auto x = [&](std::size_t i) { return in(n.inputs[i]); };
  auto& node = w_.node("BatchNormalization", n.name, {x(0), x(1), x(2), x(3), x(4)}, y);
  Writer::float_attr(node, "epsilon", n.attr<graph::BatchNormAttrs>().epsilon);
}

// ---- gathers, resizes and slices ---------------------------------------------

// Rows of f32 data, or of u8 / s8 codes (quantized embeddings), by s32 / s64
// indices (integral f32 ones cast to int64, exactly: the IR holds them below
// 2^24).
void Exporter::gather(const Node& n, const std::string& y) {
  const ElementType data = g_.value(n.inputs[0]).type;
  if (data != ElementType::f32 && !is_int8(data)) {
    refuse(n, "gathers from a " + std::string(to_string(data)) +
                  " tensor (qfuse gathers f32 rows or u8 / s8 codes)");
  }
  std::string indices = in(n.inputs[1]);
  if (g_.value(n.inputs[1]).type == ElementType::f32) {
    indices = cast(indices, kInt64, n.name + "/indices");
  }
  auto& node = w_.node("Gather", n.name, {in(n.inputs[0]), indices}, y);
  Writer::int_attr(node, "axis", n.attr<graph::GatherAttrs>().axis);
}

void Exporter::resize(const Node& n, const std::string& y) {
  const auto& a = n.attr<graph::ResizeAttrs>();
  const graph::Value& xv = g_.value(n.inputs[0]);
  static const std::map<graph::CoordinateTransform, const char*> kTransforms = {
      {graph::CoordinateTransform::half_pixel, "half_pixel"},
      {graph::CoordinateTransform::pytorch_half_pixel, "pytorch_half_pixel"},
      {graph::CoordinateTransform::align_corners, "align_corners"},
      {graph::CoordinateTransform::asymmetric, "asymmetric"},
      {graph::CoordinateTransform::tf_half_pixel_for_nn, "tf_half_pixel_for_nn"}};
  static const std::map<graph::NearestMode, const char*> kNearest = {
      {graph::NearestMode::round_prefer_floor, "round_prefer_floor"},
      {graph::NearestMode::round_prefer_ceil, "round_prefer_ceil"},
      {graph::NearestMode::floor, "floor"},
      {graph::NearestMode::ceil, "ceil"}};
  // qfuse reads Resize on f32 only: codes go through as floats (exact),
  // and back by QuantizeLinear(1, 0) (round half to even, saturate, as
  // the int8 resize does).
  const std::string x = in_f32(n.inputs[0], n.name);
  std::vector<std::string> inputs{x, ""};
  if (!a.scales.empty()) {
    inputs.push_back(w_.constant(n.name + "/scales", kFloat, a.scales,
                                 Shape{static_cast<std::int64_t>(a.scales.size())}));
  } else {
    inputs.push_back("");
    inputs.push_back(
        w_.ints64(n.name + "/sizes", std::vector<std::int64_t>(a.sizes.begin(), a.sizes.end())));
  }
  const std::string out = xv.type == ElementType::f32 ? y : w_.fresh(n.name + "/resized");
  auto& r = w_.node("Resize", n.name, inputs, out);
  Writer::string_attr(r, "mode", a.mode == graph::ResizeMode::nearest ? "nearest" : "linear");
  Writer::string_attr(r, "coordinate_transformation_mode", kTransforms.at(a.transform));
  if (a.mode == graph::ResizeMode::nearest) {
    Writer::string_attr(r, "nearest_mode", kNearest.at(a.nearest_mode));
  }
  if (xv.type != ElementType::f32) quantize(n.name, out, onnx_type(g_.value(n.outputs[0]).type), y);
}

void Exporter::slice(const Node& n, const std::string& y) {
  const std::string& b = n.name;
  const auto& a = n.attr<graph::SliceAttrs>();
  std::vector<std::int64_t> ends, axes;
  for (std::size_t d = 0; d < a.begin.size(); ++d) {
    ends.push_back(a.begin[d] + a.size[d]);
    axes.push_back(static_cast<std::int64_t>(d));
  }
  w_.node("Slice", b,
          {in(n.inputs[0]), w_.ints64(b + "/starts", a.begin), w_.ints64(b + "/ends", ends),
           w_.ints64(b + "/axes", axes)},
          y);
}

// ---- pools -------------------------------------------------------------------

void Exporter::pool_attrs(::onnx::NodeProto& p, const graph::PoolAttrs& a) {
  Writer::ints(p, "kernel_shape", a.kernel);
  Writer::ints(p, "strides", a.strides);
  graph::Ints pads = a.pads_begin;
  pads.insert(pads.end(), a.pads_end.begin(), a.pads_end.end());
  Writer::ints(p, "pads", pads);
}

void Exporter::max_pool(const Node& n, const std::string& y) {
  const auto& a = n.attr<graph::PoolAttrs>();
  auto& p = w_.node("MaxPool", n.name, {in(n.inputs[0])}, y);
  pool_attrs(p, a);
  Writer::ints(p, "dilations", a.dilations.empty() ? graph::Ints(a.kernel.size(), 1) : a.dilations);
}

// An f32 average pool (an int8 one: int8_avg_pool).
void Exporter::avg_pool(const Node& n, const std::string& y) {
  const auto& a = n.attr<graph::PoolAttrs>();
  auto& p = w_.node("AveragePool", n.name, {in(n.inputs[0])}, y);
  pool_attrs(p, a);
  Writer::int_attr(p, "count_include_pad", a.exclude_pad ? 0 : 1);
}

// ---- f32 layers --------------------------------------------------------------

void Exporter::convolution(const Node& n, const std::string& y) {
  const auto& c = n.attr<graph::ConvAttrs>();
  std::vector<std::string> inputs{in(n.inputs[0]), in(n.inputs[1])};
  if (n.inputs.size() > 2) inputs.push_back(in(n.inputs[2]));
  auto& node = w_.node("Conv", n.name, inputs, y);
  conv_attrs(node, c.strides, c.dilations, c.pads_begin, c.pads_end, c.groups,
             g_.value(n.inputs[1]).shape);
}

void Exporter::deconvolution(const Node& n, const std::string& y) {
  const auto& c = n.attr<graph::DeconvAttrs>();
  std::vector<std::string> inputs{in(n.inputs[0]), in(n.inputs[1])};
  if (n.inputs.size() > 2) inputs.push_back(in(n.inputs[2]));
  auto& node = w_.node("ConvTranspose", n.name, inputs, y);
  conv_attrs(node, c.strides, c.dilations, c.pads_begin, c.pads_end, c.groups,
             g_.value(n.inputs[1]).shape);
  Writer::ints(node, "output_padding", c.output_padding);
}

// y = x W^T + b with W [N, K].
void Exporter::fully_connected(const Node& n, const std::string& y) {
  const std::string& b = n.name;
  const auto x = [&](std::size_t i) { return in(n.inputs[i]); };
  if (g_.value(n.inputs[0]).shape.size() == 2) {
    std::vector<std::string> inputs{x(0), x(1)};
    if (n.inputs.size() > 2) inputs.push_back(x(2));
    auto& node = w_.node("Gemm", b, inputs, y);
    Writer::int_attr(node, "transB", 1);
    return;
  }
  std::string wt = transposed_weight_dequantize(x(1), b + "/weights_t");
  if (wt.empty()) wt = transpose_last_two(x(1), 2, b + "/weights_t");
  if (n.inputs.size() < 3) {
    w_.node("MatMul", b, {x(0), wt}, y);
    return;
  }
  const std::string t = w_.op("MatMul", b, {x(0), wt});
  w_.node("Add", b + "/bias", {t, x(2)}, y);
}

// The operands' permutations and transposes as Transposes around a MatMul.
void Exporter::matmul(const Node& n, const std::string& y) {
  const std::string& b = n.name;
  const auto& m = n.attr<graph::MatMulAttrs>();
  std::string a0 = in(n.inputs[0]), a1 = in(n.inputs[1]);
  if (!m.perm_a.empty()) a0 = transpose(a0, m.perm_a, b + "/a_perm");
  if (!m.perm_b.empty()) a1 = transpose(a1, m.perm_b, b + "/b_perm");
  if (m.transpose_a) {
    a0 = transpose_last_two(a0, g_.value(n.inputs[0]).shape.size(), b + "/a_t");
  }
  if (m.transpose_b) {
    const std::string dq = transposed_weight_dequantize(a1, b + "/b_t");
    a1 = !dq.empty() ? dq : transpose_last_two(a1, g_.value(n.inputs[1]).shape.size(), b + "/b_t");
  }
  if (m.perm_y.empty()) {
    w_.node("MatMul", b, {a0, a1}, y);
  } else {
    w_.node("Transpose", b + "/y_perm", {w_.op("MatMul", b, {a0, a1})}, y);
    Writer::ints(*w_.producer(y), "perm", m.perm_y);
  }
}

// Where `x` is a DequantizeLinear of constant 2-D codes (weights, as written
// above), the same weights transposed as a DequantizeLinear of the
// transposed codes (into `out`, or a fresh name), its axis moved with them, so that a reader sees
// dequantized constant codes (qfuse takes those as int8 weights; a Transpose
// after the dequantize it does not); empty otherwise.
std::string Exporter::transposed_weight_dequantize(const std::string& x, const std::string& base,
                                                   const std::string& out) {
  const ::onnx::NodeProto* dq = w_.producer(x);
  if (dq == nullptr || dq->op_type() != "DequantizeLinear") return {};
  const ::onnx::TensorProto* codes = nullptr;
  for (const auto& t : proto_.initializer()) {
    if (t.name() == dq->input(0)) codes = &t;
  }
  if (codes == nullptr || codes->dims_size() != 2 || codes->int32_data_size() == 0) return {};
  const std::int64_t rows = codes->dims(0), cols = codes->dims(1);
  std::vector<std::int32_t> moved(static_cast<std::size_t>(rows * cols));
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) {
      moved[static_cast<std::size_t>(c * rows + r)] = codes->int32_data(static_cast<int>(r * cols + c));
    }
  }
  const std::string t = w_.constant(base + "/codes", codes->data_type(), moved, Shape{cols, rows});
  std::int64_t axis = 1;
  for (const auto& a : dq->attribute()) {
    if (a.name() == "axis") axis = a.i() < 0 ? a.i() + 2 : a.i();
  }
  const std::vector<std::string> rest(dq->input().begin() + 1, dq->input().end());
  std::vector<std::string> inputs{t};
  inputs.insert(inputs.end(), rest.begin(), rest.end());
  const std::string y = out.empty() ? w_.fresh(base) : out;
  auto& node = w_.node("DequantizeLinear", base, inputs, y);
  Writer::int_attr(node, "axis", 1 - axis);
  return y;
}

std::string Exporter::transpose(const std::string& x, const graph::Ints& perm,
                                const std::string& base) {
  const std::string t = w_.op("Transpose", base, {x});
  Writer::ints(*w_.producer(t), "perm", perm);
  return t;
}

std::string Exporter::transpose_last_two(const std::string& x, std::size_t rank,
                                         const std::string& base) {
  graph::Ints perm;
  for (std::size_t d = 0; d < rank; ++d) perm.push_back(static_cast<std::int64_t>(d));
  std::swap(perm[rank - 1], perm[rank - 2]);
  return transpose(x, perm, base);
}

void Exporter::conv_attrs(::onnx::NodeProto& node, const graph::Ints& strides,
                          const graph::Ints& dilations, const graph::Ints& pads_begin,
                          const graph::Ints& pads_end, std::int64_t groups, const Shape& w) {
  Writer::ints(node, "kernel_shape", graph::Ints(w.begin() + 2, w.end()));
  Writer::ints(node, "strides", strides);
  Writer::ints(node, "dilations", dilations);
  graph::Ints pads = pads_begin;
  pads.insert(pads.end(), pads_end.begin(), pads_end.end());
  Writer::ints(node, "pads", pads);
  Writer::int_attr(node, "group", groups);
}

}  // namespace qfuse::onnx::export_impl
