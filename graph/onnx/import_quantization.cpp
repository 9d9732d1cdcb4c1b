// ONNX import: QuantizeLinear / DequantizeLinear and the integer operators (ConvInteger, MatMulInteger, QLinearConv, QLinearMatMul).

#include "graph/onnx/import_internal.hpp"

#include <cmath>
#include <sstream>

namespace qfuse::onnx::impl {

QuantParams Importer::quant_params(std::size_t scale_i, std::size_t zp_i,
                                   std::int64_t axis_attr, const Shape& x_shape,
                                   int default_type) {
  const Literal& s = lit_in(scale_i, "the scale");
  if (s.type != kFloat) unsupported("the scale has element type " + onnx_type_name(s.type));
  QuantParams p;
  p.scale = s.values();
  if (has_in(zp_i)) {
    const Literal& z = lit_in(zp_i, "the zero point");
    p.type = z.type;
    p.zero_point = z.values();
  } else {
    p.type = default_type;
    p.zero_point.assign(p.scale.size(), 0.0);
  }
  if (p.type != kUint8 && p.type != kInt8 && p.type != kInt32) {
    unsupported("quantized type " + onnx_type_name(p.type) + " (expected UINT8 or INT8)");
  }
  const Interval t = type_range(p.type);
  p.qmin = t.lo;
  p.qmax = t.hi;
  expect(p.zero_point.size() == p.scale.size(), "scale and zero point differ in size");
  if (s.shape.size() == 1 && p.scale.size() > 1) {
    p.axis = normalize_axis(axis_attr, rank_of(x_shape), "axis");
    expect(x_shape[sz(p.axis)] == i64(p.scale.size()),
           "per-axis scale has " + std::to_string(p.scale.size()) + " values (expected " +
               std::to_string(x_shape[sz(p.axis)]) + " along axis " + std::to_string(p.axis) + ")");
  } else {
    expect(p.scale.size() == 1, "the scale must be a scalar or 1-D");
    p.scale.resize(1);
    p.zero_point.resize(1);
  }
  check_scales(p.scale, "scale");
  return p;
}

// A quantization scale is a positive, finite f32: zero, negative, NaN and
// infinite scales make no grid. (Denormal ones stay: exporters write them for
// weight channels that are all but zero, e.g. PP-OCRv4 rec's 2.5e-41.)
void Importer::check_scales(const Values& scales, const std::string& what) const {
  for (std::size_t k = 0; k < scales.size(); ++k) {
    const double v = scales[k];
    if (std::isfinite(v) && v > 0.0 && std::isfinite(static_cast<float>(v))) continue;
    std::ostringstream os;
    os << what << (scales.size() > 1 ? " [" + std::to_string(k) + "]" : std::string()) << " is " << v
       << " (expected a positive, finite f32)";
    malformed(os.str());
  }
}

// ONNX's QuantizeLinear: one Quantize, per tensor or per index of p.axis.
ValueId Importer::emit_quantize(ValueId x, const QuantParams& p) {
  graph::QuantizeAttrs a;
  a.to = *to_element_type(p.type);
  a.scale.assign(p.scale.begin(), p.scale.end());
  a.zero_point.clear();
  for (double z : p.zero_point) a.zero_point.push_back(static_cast<std::int32_t>(z));
  if (p.scale.size() > 1) a.axis = p.axis;
  // The codes [qmin, qmax]: the whole type, or narrower (a Clip after it).
  a.levels = static_cast<std::int32_t>(p.qmax - p.qmin + 1);
  a.code_offset = static_cast<std::int32_t>(p.qmin) - a.type_min();
  return emit(OpKind::Quantize, {x}, std::move(a));
}

// ONNX's DequantizeLinear of run-time codes: one Dequantize.
ValueId Importer::emit_dequantize(ValueId codes, const QuantParams& p) {
  graph::DequantizeAttrs a;
  a.scale.assign(p.scale.begin(), p.scale.end());
  a.zero_point.assign(p.zero_point.begin(), p.zero_point.end());
  if (p.scale.size() > 1) a.axis = p.axis;
  return emit(OpKind::Dequantize, {codes}, std::move(a));
}

ValueId Importer::subtract_zero_point(ValueId x, const Values& zp, std::int64_t rank,
                                      std::int64_t axis) {
  if (std::all_of(zp.begin(), zp.end(), [](double z) { return z == 0.0; })) return x;
  return emit(OpKind::Subtract, {x, param_constant(zp, rank, axis, "zero_point")}, NoAttrs{},
              "sub_zero_point");
}

ValueId Importer::emit_dequantize_weight(const Literal& q, const QuantParams& p) {
  return emit_dequantize_codes(to_shared_tensor(q, label(), ir_shape(q.shape)), p);
}

ValueId Importer::emit_dequantize_codes(Tensor codes, const QuantParams& p) {
  return emit_dequantize_codes(std::make_shared<const Tensor>(std::move(codes)), p);
}

ValueId Importer::emit_dequantize_codes(std::shared_ptr<const Tensor> codes, const QuantParams& p) {
  const std::int64_t rank = rank_of(codes->shape());
  ValueId t = constant(std::move(codes), "quantized");
  t = emit(OpKind::Convert, {t}, graph::ConvertAttrs{ElementType::f32}, "to_f32");
  t = subtract_zero_point(t, p.zero_point, rank, p.axis);
  return emit(OpKind::Multiply, {t, param_constant(p.scale, rank, p.axis, "scale")});
}

// Opset 19's saturate matters only for float8 outputs, which quant_params
// refuses; opset 21's block quantization is refused by name.
void Importer::refuse_blocked(AttrReader& a) const {
  a.ignore("saturate");
  if (const std::int64_t b = a.i("block_size", 0); b != 0) {
    a.unsupported_value("block_size", "= " + std::to_string(b) + " (blocked quantization)");
  }
}

void Importer::op_quantize(AttrReader& a) {
  Operand& x = in(0);
  if (!is_float(x.type) && x.type != kInt32) unsupported("input type " + onnx_type_name(x.type));
  refuse_blocked(a);
  // Opset 21's output_dtype names the codes' type when no zero point does.
  const auto output_dtype = static_cast<int>(a.i("output_dtype", 0));
  const QuantParams p =
      quant_params(1, 2, a.i("axis", 1), x.shape, output_dtype != 0 ? output_dtype : kUint8);
  if (output_dtype != 0 && output_dtype != p.type) {
    malformed("output_dtype " + onnx_type_name(output_dtype) + " differs from the zero point's " +
              onnx_type_name(p.type));
  }
  if (p.type == kInt32) unsupported("quantized type INT32 (expected UINT8 or INT8)");
  const ValueId src = f32(x);
  Operand y;
  y.type = p.type;
  y.shape = x.shape;
  y.value = emit_quantize(src, p);
  y.range = Interval{p.qmin, p.qmax};
  y.quantized = std::make_shared<const Operand::Quantized>(Operand::Quantized{src, p});
  set_out(0, y);
}

// NNCF's ONNX export writes each quantizer as FakeQuantize(X, input_low,
// input_high, output_low, output_high) in domain org.openvinotoolkit, with
// attribute `levels`: the seed's ranges formula, imported as qfuse's own
// FakeQuantize. The limits are any f32 tensors that broadcast to X, constant
// or computed; shape inference checks them, levels and the ranges' values.
void Importer::op_fake_quantize(AttrReader& a) {
  if (!a.has("levels")) malformed("attribute 'levels' is missing");
  if (num_inputs() != 5) {
    malformed("takes 5 inputs (X and four limits), got " + std::to_string(num_inputs()));
  }
  // OpenVINO's broadcast rule; numpy's is the only one qfuse reads.
  const std::string broadcast = a.s("auto_broadcast", "numpy");
  if (broadcast != "numpy") a.unsupported_value("auto_broadcast", "= '" + broadcast + "'");
  const std::int64_t levels = a.i("levels", 0);
  if (auto problem = graph::fake_quantize_levels_problem(levels)) malformed(*problem);
  static const char* kNames[] = {"input X", "input_low", "input_high", "output_low",
                                 "output_high"};
  std::vector<ValueId> inputs;
  for (std::size_t k = 0; k < 5; ++k) {
    Operand& o = in(k);
    require_float(o, kNames[k]);
    inputs.push_back(f32(o));
  }
  check_fake_quantize_limits();
  max_outputs(1);
  const Shape shape = in(0).shape;
  set_out(0, make_float(emit(OpKind::FakeQuantize, std::move(inputs),
                             graph::FakeQuantizeAttrs{levels}),
                        shape));
}

// Constant input limits in order (graph::inverted_limits_problem says why).
void Importer::check_fake_quantize_limits() {
  const Operand& lo = in(1);
  const Operand& hi = in(2);
  if (!lo.literal || !hi.literal) return;
  if (auto problem = graph::inverted_limits_problem(lo.literal->values(), hi.literal->values())) {
    malformed(*problem);
  }
}

void Importer::op_dequantize(AttrReader& a) {
  Operand& x = in(0);
  refuse_blocked(a);
  const QuantParams p = quant_params(1, 2, a.i("axis", 1), x.shape, x.type);
  if (x.type != p.type) malformed("input type differs from the zero point type");
  if (x.literal) {
    Operand y = make_float(emit_dequantize_weight(*x.literal, p), x.shape);
    y.dq_weight = std::make_shared<const Operand::Weight>(Operand::Weight{x.literal, p});
    set_out(0, y);
    return;
  }
  set_out(0, make_float(dequantized(x, p), x.shape));
}

ValueId Importer::dequantized(Operand& x, const QuantParams& p) {
  if (x.literal) return emit_dequantize_weight(*x.literal, p);
  if (x.value.valid() && value_type(x.value) != ElementType::f32) return emit_dequantize(x.value, p);
  // Integers computed in f32 (a Clip or an integer Add of codes).
  const std::int64_t rank = std::max<std::int64_t>(1, rank_of(x.shape));
  const ValueId t = subtract_zero_point(f32(x), p.zero_point, rank, p.axis);
  return emit(OpKind::Multiply, {t, param_constant(p.scale, rank, p.axis, "scale")});
}

// Integer weights as f32 (w - zp): a constant stays u8/s8 behind a Convert.
ValueId Importer::integer_weight(Operand& w, const Values& zp, std::int64_t zp_axis,
                                 bool transpose, std::int64_t rank) {
  ValueId t;
  if (w.literal) {
    // The codes as their type, transposed as codes (an eighth of the doubles' bytes).
    std::shared_ptr<const Tensor> codes = to_shared_tensor(*w.literal, label(), w.literal->shape);
    if (transpose) codes = std::make_shared<const Tensor>(graph::transposed_matrix(*codes));
    t = emit(OpKind::Convert, {constant(std::move(codes), "quantized")},
             graph::ConvertAttrs{ElementType::f32}, "weights_f32");
  } else {
    t = f32(w);
    if (transpose) t = emit(OpKind::Transpose, {t}, graph::TransposeAttrs{{1, 0}}, "transpose_b");
  }
  return subtract_zero_point(t, zp, rank, zp_axis);
}

// Bound of |sum_k (x - x_zp)(w - w_zp)| over the output; `reduce_from` is the
// first weight dimension summed over (1 for conv weights [OC, IC, k...], 0 for
// the [K, N] matrix whose columns are the outputs).
namespace {

// The largest sum of |w - zp| over what one output reduces: each row of `s`
// from `reduce_from` 1 (convolution weights [O, ...]), else each column of a
// [K, N] matrix, accumulated row by row in memory order. `Acc` holds the sums
// exactly: int32 for 8-bit codes with integer zero points while a sum stays
// below 2^31 (vectorized, where int64 is not without AVX-512), else double.
template <class T, class Acc>
double weight_sum_bound(std::span<const T> v, const Shape& s, const Values& w_zp,
                        std::int64_t reduce_from) {
  const auto zero_point = [&w_zp](std::int64_t i) {
    return static_cast<Acc>(w_zp.size() == 1 ? w_zp[0] : w_zp[sz(i)]);
  };
  const auto distance = [](Acc a, Acc b) { return a > b ? a - b : b - a; };
  Acc worst = 0;
  if (reduce_from == 1) {
    const std::int64_t per = element_count(s) / s[0];
    for (std::int64_t o = 0; o < s[0]; ++o) {
      const Acc z = zero_point(o);
      const T* row = v.data() + o * per;
      Acc sum = 0;
      for (std::int64_t k = 0; k < per; ++k) sum += distance(static_cast<Acc>(row[k]), z);
      worst = std::max(worst, sum);
    }
    return static_cast<double>(worst);
  }
  const std::int64_t kdim = s[0], n = s[1];
  std::vector<Acc> zps(sz(n)), sums(sz(n), 0);
  for (std::int64_t c = 0; c < n; ++c) zps[sz(c)] = zero_point(c);
  for (std::int64_t k = 0; k < kdim; ++k) {
    const T* row = v.data() + k * n;
    for (std::int64_t c = 0; c < n; ++c) {
      sums[sz(c)] += distance(static_cast<Acc>(row[c]), zps[sz(c)]);
    }
  }
  for (Acc sum : sums) worst = std::max(worst, sum);
  return static_cast<double>(worst);
}

}  // namespace

double Importer::integer_conv_bound(Operand& x, const Values& x_zp, Operand& w,
                                    const Values& w_zp, std::int64_t reduce_from) {
  expect(!x_zp.empty() && !w_zp.empty(), "a zero point is an empty tensor");
  if (w.shape.size() >= 2) {
    const std::int64_t channels = reduce_from == 1 ? w.shape[0] : w.shape[1];
    expect(w_zp.size() == 1 || i64(w_zp.size()) == channels,
           "the weights' zero point has " + std::to_string(w_zp.size()) +
               " values (expected 1 or " + std::to_string(channels) + ")");
  }
  const Interval xr = int_range(x);
  double xmax = 0;
  for (double z : x_zp) xmax = std::max({xmax, std::abs(xr.lo - z), std::abs(xr.hi - z)});
  const Interval wr = int_range(w);
  if (!w.literal) {
    double wmax = 0;
    for (double z : w_zp) wmax = std::max({wmax, std::abs(wr.lo - z), std::abs(wr.hi - z)});
    std::int64_t k = 1;
    if (reduce_from == 1) {
      for (std::size_t d = 1; d < w.shape.size(); ++d) k *= w.shape[d];
    } else {
      k = w.shape[0];
    }
    return static_cast<double>(k) * wmax * xmax;
  }
  const Literal& lit = *w.literal;
  double worst = 0;
  const bool integral_zero_points =
      std::all_of(w_zp.begin(), w_zp.end(), [](double z) { return z == std::nearbyint(z); });
  // |w - zp| <= 510 for 8-bit codes and zero points.
  const bool fits_int32 =
      integral_zero_points &&
      std::all_of(w_zp.begin(), w_zp.end(), [](double z) { return std::abs(z) <= 255; }) &&
      static_cast<double>(element_count(w.shape)) * 510.0 < 2147483647.0;
  const ElementType codes = lit.elements() ? lit.elements()->type() : ElementType::f32;
  if (fits_int32 && codes == ElementType::s8) {
    worst = weight_sum_bound<std::int8_t, std::int32_t>(lit.elements()->data<std::int8_t>(),
                                                        w.shape, w_zp, reduce_from);
  } else if (fits_int32 && codes == ElementType::u8) {
    worst = weight_sum_bound<std::uint8_t, std::int32_t>(lit.elements()->data<std::uint8_t>(),
                                                         w.shape, w_zp, reduce_from);
  } else {
    worst = weight_sum_bound<double, double>(lit.values(), w.shape, w_zp, reduce_from);
  }
  return worst * xmax;
}

void Importer::require_int8(const Operand& o, const std::string& what) const {
  if (o.type != kUint8 && o.type != kInt8) unsupported(what + " type " + onnx_type_name(o.type));
}

Values Importer::optional_zero_points(std::size_t i, const char* what) {
  return has_in(i) ? lit_in(i, what).values() : Values{0.0};
}

void Importer::warn_if_inexact(double accumulator_bound) const {
  if (accumulator_bound > kF32ExactLimit) {
    spdlog::warn("import {}: accumulators up to {} exceed 2^24; the unfused f32 reference may "
                 "round them",
                 label(), accumulator_bound);
  }
}

ValueId Importer::integer_matmul(ValueId a, Operand& B, const Values& b_zp,
                                 const std::string& name) {
  if (B.shape.size() == 2 && B.literal) {
    return emit(OpKind::FullyConnected, {a, integer_weight(B, b_zp, 0, true, 2)}, NoAttrs{}, name);
  }
  ValueId b = integer_weight(B, {0.0}, -1, false, rank_of(B.shape));
  if (b_zp.size() > 1 || b_zp[0] != 0.0) {
    b = emit(OpKind::Subtract, {b, f32_constant(b_zp, {i64(b_zp.size())}, "b_zero_point")},
             NoAttrs{}, "sub_b_zero_point");
  }
  return emit(OpKind::MatMul, {a, b}, graph::MatMulAttrs{}, name);
}

Importer::QLinearParams Importer::qlinear_params(const char* x_name, const char* w_name) {
  const std::string x(x_name), w(w_name);
  const Literal& xs = lit_in(1, (x + "_scale").c_str());
  const Literal& xzp = lit_in(2, (x + "_zero_point").c_str());
  const Literal& ws = lit_in(4, (w + "_scale").c_str());
  const Literal& wzp = lit_in(5, (w + "_zero_point").c_str());
  const Literal& ys = lit_in(6, "y_scale");
  const Literal& yzp = lit_in(7, "y_zero_point");
  expect(xs.values().size() == 1 && xzp.values().size() == 1 && ys.values().size() == 1 &&
             yzp.values().size() == 1,
         x + " and y quantization must be per tensor");
  check_scales(xs.values(), x + "_scale");
  check_scales(ws.values(), w + "_scale");
  check_scales(ys.values(), "y_scale");
  return {xs.values()[0], xzp.values(), ws.values(), wzp.values(), ys.values()[0], &yzp};
}

void Importer::set_requantized_output(ValueId acc, const QLinearParams& q, std::int64_t axis) {
  const std::int64_t rank = rank_of(value_shape(acc));
  Values m(q.w_scale.size());
  for (std::size_t k = 0; k < m.size(); ++k) {
    const float xw = static_cast<float>(q.x_scale) * static_cast<float>(q.w_scale[k]);
    m[k] = static_cast<double>(xw / static_cast<float>(q.y_scale));
  }
  const int y_type = q.y_zp->type;
  const ValueId y = requantize(acc, m, rank, m.size() > 1 ? axis : -1, q.y_zp->values(), y_type);
  Operand o;
  o.type = y_type;
  o.value = y;
  o.shape = value_shape(y);
  o.range = type_range(y_type);
  set_out(0, o);
}

void Importer::op_conv_integer(AttrReader& a) {
  Operand& x = in(0);
  Operand& w = in(1);
  require_int8(x, "input");
  require_int8(w, "weight");
  const Values xzp = optional_zero_points(2, "x_zero_point");
  const Values wzp = optional_zero_points(3, "w_zero_point");
  expect(xzp.size() == 1, "x_zero_point must be a scalar");
  const graph::ConvAttrs attrs = conv_attrs(a, x.shape, w.shape);
  const std::int64_t rank = rank_of(x.shape);
  const ValueId xs = subtract_zero_point(f32(x), xzp, rank, -1);
  const ValueId ws = integer_weight(w, wzp, 0, false, rank);
  const double bound = integer_conv_bound(x, xzp, w, wzp, 1);
  const ValueId y = emit(OpKind::Convolution, {xs, ws}, attrs);
  set_out(0, make_integer(y, kInt32, value_shape(y), {-bound, bound}));
}

void Importer::op_matmul_integer(AttrReader&) {
  Operand& A = in(0);
  Operand& B = in(1);
  require_int8(A, "A");
  require_int8(B, "B");
  expect(A.shape.size() >= 2 && B.shape.size() >= 2, "operands must have rank >= 2");
  const std::int64_t ra = rank_of(A.shape);
  // A zero point known only at run time (DynamicQuantizeLinear's, on either
  // side): one per tensor, of its operand's type. Bounds then take the
  // type's whole range.
  const auto runtime_zero_point = [this](std::size_t i, const Operand& o, const char* what) {
    if (!has_in(i) || in(i).literal) return false;
    Operand& zp = in(i);
    expect(element_count(zp.shape) == 1, std::string("a run-time ") + what +
                                             " must be a scalar (it has shape " +
                                             dims_text(zp.shape) + ")");
    if (zp.type != o.type) malformed(std::string(what) + "'s type differs from its operand's");
    return true;
  };
  const bool a_runtime = runtime_zero_point(2, A, "a_zero_point");
  const bool b_runtime = runtime_zero_point(3, B, "b_zero_point");
  const Interval ta = type_range(A.type), tb = type_range(B.type);
  ValueId a = f32(A);
  // With a run-time zero point, the type's minimum gives the bound: |q - z|
  // <= max - min for every z of the type.
  Values azp{ta.lo};
  if (a_runtime) {
    a = emit(OpKind::Subtract, {a, f32(in(2))}, NoAttrs{}, "sub_a_zero_point");
  } else {
    // a_zero_point: scalar or one per row of A.
    azp = optional_zero_points(2, "a_zero_point");
    if (azp.size() > 1) {
      Shape s(sz(ra), 1);
      s[sz(ra - 2)] = i64(azp.size());
      a = emit(OpKind::Subtract, {a, f32_constant(azp, s, "a_zero_point")}, NoAttrs{},
               "sub_a_zero_point");
    } else {
      a = subtract_zero_point(a, azp, ra, -1);
    }
  }
  // b_zero_point: scalar or one per column.
  const Values bzp = b_runtime ? Values{tb.lo} : optional_zero_points(3, "b_zero_point");
  const double bound = integer_conv_bound(A, azp, B, bzp, 0);
  ValueId y;
  if (b_runtime) {
    const ValueId b = emit(OpKind::Subtract, {f32(B), f32(in(3))}, NoAttrs{}, "sub_b_zero_point");
    y = emit(OpKind::MatMul, {a, b}, graph::MatMulAttrs{});
  } else {
    y = integer_matmul(a, B, bzp, "");
  }
  set_out(0, make_integer(y, kInt32, value_shape(y), {-bound, bound}));
}

// DynamicQuantizeLinear: one DynamicQuantize node (composer::dynamic_grid's
// grid, then the codes) with its three outputs.
void Importer::op_dynamic_quantize_linear(AttrReader&) {
  Operand& x = in(0);
  if (!is_float(x.type)) unsupported("input type " + onnx_type_name(x.type) + " (expected FLOAT)");
  const graph::NodeId id = graph_.add_node(OpKind::DynamicQuantize, node_name(""), {f32(x)},
                                           NoAttrs{}, 3);
  graph::infer_node(graph_, id);
  const graph::Node& n = graph_.node(id);
  Operand codes;
  codes.type = kUint8;
  codes.shape = x.shape;
  codes.value = n.outputs[0];
  codes.range = type_range(kUint8);
  set_out(0, codes);
  set_out(1, make_float(n.outputs[1], {}));
  Operand zp;
  zp.type = kUint8;
  zp.value = n.outputs[2];
  zp.range = type_range(kUint8);
  set_out(2, zp);
}

// round(acc * M) + y_zp, saturated to y_type (M per output channel along axis).
ValueId Importer::requantize(ValueId acc, const Values& multiplier, std::int64_t rank,
                             std::int64_t axis, const Values& y_zp, int y_type) {
  QuantParams p;
  p.type = y_type;
  p.scale = {1.0};
  p.zero_point = y_zp;
  const Interval codes = type_range(y_type);
  p.qmin = codes.lo;
  p.qmax = codes.hi;
  ValueId t = emit(OpKind::Multiply, {acc, param_constant(multiplier, rank, axis, "multiplier")},
                   NoAttrs{}, "rescale");
  return emit_quantize(t, p);
}

void Importer::op_qlinear_conv(AttrReader& a) {
  Operand& x = in(0);
  Operand& w = in(3);
  require_int8(x, "input");
  require_int8(w, "weight");
  const QLinearParams q = qlinear_params("x", "w");
  const graph::ConvAttrs attrs = conv_attrs(a, x.shape, w.shape);
  const std::int64_t rank = rank_of(x.shape);
  std::vector<ValueId> inputs{subtract_zero_point(f32(x), q.x_zp, rank, -1),
                              integer_weight(w, q.w_zp, 0, false, rank)};
  double bias_max = 0;
  if (has_in(8)) {
    Operand& bias = in(8);
    inputs.push_back(f32(bias));
    bias_max = max_abs(int_range(bias));
  }
  warn_if_inexact(integer_conv_bound(x, q.x_zp, w, q.w_zp, 1) + bias_max);
  set_requantized_output(emit(OpKind::Convolution, std::move(inputs), attrs, "conv"), q, 1);
}

void Importer::op_qlinear_matmul(AttrReader&) {
  Operand& A = in(0);
  Operand& B = in(3);
  require_int8(A, "A");
  require_int8(B, "B");
  expect(A.shape.size() >= 2 && B.shape.size() >= 2, "operands must have rank >= 2");
  const QLinearParams q = qlinear_params("a", "b");
  const ValueId a = subtract_zero_point(f32(A), q.x_zp, rank_of(A.shape), -1);
  warn_if_inexact(integer_conv_bound(A, q.x_zp, B, q.w_zp, 0));
  const ValueId acc = integer_matmul(a, B, q.w_zp, "matmul");
  set_requantized_output(acc, q, rank_of(value_shape(acc)) - 1);
}

}  // namespace qfuse::onnx::impl
