// ONNX import: ONNX Runtime's QOperator format, the com.microsoft operators on
// 8-bit codes (QLinearAdd, QLinearMul, QLinearGlobalAveragePool,
// QLinearConcat, QLinearSigmoid, QLinearLeakyRelu, QLinearAveragePool,
// QLinearSoftmax, QGemm). QLinearConv / QLinearMatMul are ONNX's own
// (import_quantization.cpp).
//
// Each QLinear operator is the float operator between dequantizes and a
// quantize, the ops a QDQ model of the same network imports to:
//
//   QLinearAdd(a, sa, za, b, sb, zb, sc, zc)
//     ==>  Quantize(sc, zc)(Add(Dequantize(sa, za)(a), Dequantize(sb, zb)(b)))
//
// so the passes fuse them exactly as they fuse QDQ. QGemm is a layer like
// QLinearMatMul: the integer product (+ int32 bias) times one multiplier per
// output column, then rounded. Where ONNX Runtime's kernel computes otherwise
// than ONNX's DequantizeLinear / QuantizeLinear (a float ratio, a zero point
// added before rounding, a table), graph/onnx/README.md says what that costs.

#include <cmath>

#include "graph/onnx/import_internal.hpp"

namespace qfuse::onnx::impl {

void Importer::expect_input_count(std::size_t lo, std::size_t hi) const {
  const std::size_t n = num_inputs();
  if (n >= lo && n <= hi) return;
  malformed("takes " + std::to_string(lo) + (hi > lo ? " to " + std::to_string(hi) : "") +
            " inputs, got " + std::to_string(n));
}

QuantParams Importer::qop_params(std::size_t scale_i, std::size_t zp_i, int default_type,
                                 const std::string& what) {
  const std::string scale_name = what + "_scale";
  const std::string zp_name = what + "_zero_point";
  const Literal& s = lit_in(scale_i, scale_name.c_str());
  if (s.values().size() != 1) {
    unsupported(scale_name + " has " + std::to_string(s.values().size()) +
                " values (expected one: ONNX Runtime's kernels quantize it per tensor)");
  }
  if (has_in(zp_i) && lit_in(zp_i, zp_name.c_str()).values().size() != 1) {
    unsupported(zp_name + " has " + std::to_string(lit_in(zp_i, zp_name.c_str()).values().size()) +
                " values (expected one: ONNX Runtime's kernels quantize it per tensor)");
  }
  QuantParams p = quant_params(scale_i, zp_i, 1, Shape{1}, default_type);
  if (p.type != kUint8 && p.type != kInt8) {
    unsupported(zp_name + " has type " + onnx_type_name(p.type) + " (expected UINT8 or INT8)");
  }
  return p;
}

ValueId Importer::qop_dequantize(std::size_t x_i, const QuantParams& p, const std::string& what) {
  Operand& x = in(x_i);
  require_int8(x, what);
  if (x.type != p.type) {
    malformed(what + " has type " + onnx_type_name(x.type) + " but its zero point " +
              onnx_type_name(p.type));
  }
  return dequantized(x, p);
}

void Importer::set_quantized_out(ValueId y, const Shape& shape, const QuantParams& p) {
  Operand o;
  o.type = p.type;
  o.shape = shape;
  o.value = emit_quantize(y, p);
  o.range = Interval{p.qmin, p.qmax};
  o.quantized = std::make_shared<const Operand::Quantized>(Operand::Quantized{y, p});
  set_out(0, o);
}

// QLinearAdd / QLinearMul (A, A_scale, A_zero_point, B, B_scale, B_zero_point,
// C_scale[, C_zero_point]), numpy broadcasting: (A - za) * sa op (B - zb) * sb
// in f32, then quantized to C's grid.
void Importer::op_qlinear_binary(AttrReader&) {
  expect_input_count(7, 8);
  max_outputs(1);
  const bool add = node_->op_type() == "QLinearAdd";
  const int type = in(0).type;
  if (in(3).type != type) {
    malformed("A and B differ in type (" + onnx_type_name(type) + " and " +
              onnx_type_name(in(3).type) + ")");
  }
  const QuantParams pa = qop_params(1, 2, type, "A");
  const QuantParams pb = qop_params(4, 5, type, "B");
  const QuantParams pc = qop_params(6, 7, type, "C");
  if (pc.type != type) malformed("C_zero_point's type differs from A's");
  Operand a = make_float(qop_dequantize(0, pa, "A"), in(0).shape);
  Operand b = make_float(qop_dequantize(3, pb, "B"), in(3).shape);
  const Operand y = binary(add ? OpKind::Add : OpKind::Multiply, a, b, add ? "add" : "mul");
  set_quantized_out(y.value, y.shape, pc);
}

// QLinearGlobalAveragePool (X, x_scale, x_zero_point, y_scale, y_zero_point):
// the mean over the spatial dimensions, which are 2.. (NCHW) or, with
// channels_last = 1, 1 .. rank-2 (NHWC).
void Importer::op_qlinear_global_average_pool(AttrReader& a) {
  expect_input_count(5, 5);
  max_outputs(1);
  const std::int64_t channels_last = a.i("channels_last", 0);
  if (channels_last != 0 && channels_last != 1) {
    a.unsupported_value("channels_last", "= " + std::to_string(channels_last) + " (expected 0 or 1)");
  }
  const Shape shape = in(0).shape;
  const std::int64_t r = rank_of(shape);
  expect(r >= 3 && r <= 5, "input rank must be 3 to 5 (got " + std::to_string(r) + ")");
  const int type = in(0).type;
  const QuantParams px = qop_params(1, 2, type, "x");
  const QuantParams py = qop_params(3, 4, type, "y");
  if (py.type != type) malformed("y_zero_point's type differs from X's");
  ValueId x = qop_dequantize(0, px, "X");
  // NHWC: the channels move next to the batch and back, around the pool.
  Ints to_first{0, r - 1}, to_last{0};
  for (std::int64_t d = 1; d < r - 1; ++d) to_first.push_back(d);
  for (std::int64_t d = 2; d < r; ++d) to_last.push_back(d);
  to_last.push_back(1);
  if (channels_last) {
    x = emit(OpKind::Transpose, {x}, graph::TransposeAttrs{to_first}, "to_channels_first");
  }
  const Shape nchw = value_shape(x);
  graph::PoolAttrs p;
  p.kernel.assign(nchw.begin() + 2, nchw.end());
  ValueId y = emit(OpKind::AvgPool, {x}, p, "pool");
  if (channels_last) {
    y = emit(OpKind::Transpose, {y}, graph::TransposeAttrs{to_last}, "to_channels_last");
  }
  set_quantized_out(y, value_shape(y), py);
}

// QLinearConcat (Y_scale, Y_zero_point, then X, X_scale, X_zero_point per
// input; attribute axis): each input requantized onto Y's grid, then joined.
void Importer::op_qlinear_concat(AttrReader& a) {
  const std::size_t n = num_inputs();
  if (n < 5 || (n - 2) % 3 != 0) {
    malformed("takes Y_scale, Y_zero_point, then X, X_scale and X_zero_point per input (got " +
              std::to_string(n) + " inputs)");
  }
  max_outputs(1);
  if (!a.has("axis")) malformed("attribute 'axis' is missing");
  if (!has_in(1)) malformed("Y_zero_point is missing (ONNX Runtime's kernel requires it)");
  const QuantParams py = qop_params(0, 1, kUint8, "Y");
  const Shape first = in(2).shape;
  const std::int64_t axis = normalize_axis(a.i("axis", 0), rank_of(first), "axis");
  std::vector<ValueId> inputs;
  for (std::size_t k = 0; k < (n - 2) / 3; ++k) {
    const std::size_t x_i = 2 + 3 * k;
    // Appended, not "X" + to_string(k): GCC 12's -Wrestrict misfires on that at -O3.
    std::string name = "X";
    name += std::to_string(k);
    const Shape& s = in(x_i).shape;
    bool same = s.size() == first.size();
    for (std::size_t d = 0; same && d < s.size(); ++d) same = i64(d) == axis || s[d] == first[d];
    expect(same, "input " + name + " " + to_string(s) + " differs from X0 " + to_string(first) +
                     " outside the concat axis");
    const QuantParams px = qop_params(x_i + 1, x_i + 2, in(x_i).type, name);
    if (px.type != py.type) {
      malformed(name + " has type " + onnx_type_name(px.type) + " but Y " +
                onnx_type_name(py.type));
    }
    inputs.push_back(qop_dequantize(x_i, px, name));
  }
  const ValueId y = emit(OpKind::Concat, std::move(inputs), graph::ConcatAttrs{axis}, "concat");
  set_quantized_out(y, value_shape(y), py);
}

// QLinearSigmoid / QLinearLeakyRelu (X, X_scale, X_zero_point, Y_scale,
// Y_zero_point; LeakyRelu's alpha, 0.01 by default): ONNX Runtime applies the
// float function to the 256 dequantized codes and quantizes the results into
// a table; here the function runs between Dequantize and Quantize, and the
// passes make the table (lookup_elementwise).
void Importer::op_qlinear_activation(AttrReader& a) {
  expect_input_count(4, 5);
  max_outputs(1);
  const bool sigmoid = node_->op_type() == "QLinearSigmoid";
  const int type = in(0).type;
  const QuantParams px = qop_params(1, 2, type, "X");
  const QuantParams py = qop_params(3, 4, type, "Y");
  if (py.type != type) malformed("Y_zero_point's type differs from X's");
  const Shape shape = in(0).shape;
  const ValueId x = qop_dequantize(0, px, "X");
  const ValueId y = sigmoid ? emit(OpKind::Sigmoid, {x}, NoAttrs{}, "sigmoid")
                            : emit(OpKind::LeakyRelu, {x}, graph::AlphaAttrs{a.f("alpha", 0.01f)},
                                   "leaky_relu");
  set_quantized_out(y, shape, py);
}

// QLinearAveragePool (X, x_scale, x_zero_point, y_scale, y_zero_point; the
// AveragePool attributes and channels_last): dequantized, pooled in f32,
// quantized. NCHW only.
void Importer::op_qlinear_average_pool(AttrReader& a) {
  expect_input_count(4, 5);
  max_outputs(1);
  if (a.i("channels_last", 0) != 0) {
    a.unsupported_value("channels_last", "= 1 (qfuse reads QLinearAveragePool in NCHW only)");
  }
  const Shape shape = in(0).shape;
  expect(shape.size() >= 3 && shape.size() <= 5, "input rank must be 3 to 5");
  const int type = in(0).type;
  const QuantParams px = qop_params(1, 2, type, "x");
  const QuantParams py = qop_params(3, 4, type, "y");
  if (py.type != type) malformed("y_zero_point's type differs from X's");
  const graph::PoolAttrs p = pool_attrs(a, shape, false);
  const ValueId y = emit(OpKind::AvgPool, {qop_dequantize(0, px, "X")}, p, "pool");
  set_quantized_out(y, value_shape(y), py);
}

// QLinearSoftmax (X, X_scale, x_zero_point, y_scale, y_zero_point; axis and
// the opset whose Softmax it is): the softmax of the dequantized input,
// quantized as ONNX Runtime's kernel does, by multiplying with floor(1 /
// y_scale) (256 for the 1/256 its quantizer writes): the Quantize's scale is
// 1 / floor(1 / y_scale).
void Importer::op_qlinear_softmax(AttrReader& a) {
  expect_input_count(4, 5);
  max_outputs(1);
  if (!a.has("opset")) malformed("attribute 'opset' is missing");
  const bool by_axis = a.i("opset", 13) >= 13;
  const int type = in(0).type;
  const QuantParams px = qop_params(1, 2, type, "X");
  QuantParams py = qop_params(3, 4, type, "y");
  if (py.type != type) malformed("y_zero_point's type differs from X's");
  const Shape shape = in(0).shape;
  expect(!shape.empty(), "the input must have rank >= 1");
  const float inverse = std::floor(1.0f / static_cast<float>(py.scale[0]));
  if (!(inverse >= 1.0f) || !std::isfinite(inverse)) {
    unsupported("y_scale " + std::to_string(py.scale[0]) +
                " (expected at most 1: ONNX Runtime's kernel multiplies by floor(1 / y_scale))");
  }
  py.scale = {static_cast<double>(1.0f / inverse)};
  const Operand y =
      softmax(qop_dequantize(0, px, "X"), shape, a.i("axis", by_axis ? -1 : 1), by_axis);
  set_quantized_out(y.value, shape, py);
}

// QGemm (A, a_scale, a_zero_point, B, b_scale, b_zero_point[, C[, y_scale,
// y_zero_point]]; alpha, transA, transB): A per tensor, B per tensor or per
// output column, C an int32 bias. The integer product plus C times
// fl(fl(fl(alpha * a_scale) * b_scale[n]) / y_scale), rounded and shifted by
// y_zero_point; without y_scale and y_zero_point the f32 product times
// fl(fl(alpha * a_scale) * b_scale[n]), as ONNX Runtime's kernel computes them.
void Importer::op_qgemm(AttrReader& a) {
  expect_input_count(6, 9);
  max_outputs(1);
  const float alpha = a.f("alpha", 1.0f);
  if (!(alpha > 0.0f) || !std::isfinite(alpha)) {
    a.unsupported_value("alpha", "= " + std::to_string(alpha) + " (expected positive)");
  }
  if (a.i("transA", 0) != 0) a.unsupported_value("transA", "= 1");
  const bool trans_b = a.i("transB", 0) != 0;
  Operand& A = in(0);
  Operand& B = in(3);
  require_int8(A, "A");
  require_int8(B, "B");
  expect(A.shape.size() == 2 && B.shape.size() == 2, "A and B must be 2-D");
  const std::int64_t k = trans_b ? B.shape[1] : B.shape[0];
  const std::int64_t n = trans_b ? B.shape[0] : B.shape[1];
  expect(A.shape[1] == k, "A " + to_string(A.shape) + " and B " + to_string(B.shape) +
                              " do not multiply" + (trans_b ? " (B transposed)" : ""));
  if (!B.literal) unsupported("B must be a constant (QGemm's weights)");
  const QuantParams pa = qop_params(1, 2, A.type, "a");
  const Literal& bs = lit_in(4, "b_scale");
  const Values bzp = optional_zero_points(5, "b_zero_point");
  expect(bs.values().size() == 1 || i64(bs.values().size()) == n,
         "b_scale has " + std::to_string(bs.values().size()) + " values (expected 1 or " +
             std::to_string(n) + ")");
  expect(bzp.size() == 1 || bzp.size() == bs.values().size(),
         "b_zero_point has " + std::to_string(bzp.size()) + " values (expected " +
             std::to_string(bs.values().size()) + ")");
  if (has_in(5) && in(5).type != B.type) malformed("b_zero_point's type differs from B's");
  check_scales(bs.values(), "b_scale");
  const bool requantized = has_in(7) || has_in(8);
  if (requantized && !(has_in(7) && has_in(8))) {
    unsupported("y_scale and y_zero_point must be given together (a quantized output) or not at "
                "all (an f32 output)");
  }
  const ValueId x = subtract_zero_point(f32(A), pa.zero_point, 2, -1);
  std::vector<ValueId> inputs{x, integer_weight(B, bzp, 0, !trans_b, 2)};
  double bias_max = 0;
  if (has_in(6)) {
    Operand& C = in(6);
    if (C.type != kInt32) unsupported("C has type " + onnx_type_name(C.type) + " (expected INT32)");
    if (!C.literal) unsupported("C (input 6) must be a constant");
    Values c = C.literal->values();
    const Shape& cs = C.shape;
    const bool row = cs.empty() || cs == Shape{1} || cs == Shape{n} || cs == Shape{1, 1} ||
                     cs == Shape{1, n};
    if (!row) unsupported("C of shape " + to_string(cs) + " (expected one value or one per column)");
    if (c.size() == 1) c.assign(sz(n), c[0]);
    bias_max = max_abs(range_of(c));
    inputs.push_back(f32_constant(c, {n}, "bias"));
  }
  warn_if_inexact(integer_conv_bound(A, pa.zero_point, B, bzp, trans_b ? 1 : 0) + bias_max);
  const ValueId acc = emit(OpKind::FullyConnected, std::move(inputs), NoAttrs{}, "gemm");
  Values m(bs.values().size());
  const float alpha_a = alpha * static_cast<float>(pa.scale[0]);
  for (std::size_t c = 0; c < m.size(); ++c) m[c] = alpha_a * static_cast<float>(bs.values()[c]);
  if (!requantized) {
    const ValueId y = emit(OpKind::Multiply, {acc, param_constant(m, 2, 1, "scale")});
    set_out(0, make_float(y, value_shape(y)));
    return;
  }
  const QuantParams py = qop_params(7, 8, kUint8, "y");
  if (py.type != A.type) malformed("y_zero_point's type differs from A's");
  for (double& e : m) e = static_cast<double>(static_cast<float>(e) / static_cast<float>(py.scale[0]));
  const ValueId y = requantize(acc, m, 2, 1, py.zero_point, py.type);
  Operand o;
  o.type = py.type;
  o.value = y;
  o.shape = value_shape(y);
  o.range = Interval{py.qmin, py.qmax};
  set_out(0, o);
}

}  // namespace qfuse::onnx::impl
