// ONNX import: layers (Conv, ConvTranspose, Gemm, MatMul), BatchNormalization and pooling.

#include "graph/onnx/import_internal.hpp"

namespace qfuse::onnx::impl {

namespace {

// ONNX's auto_pad attribute (NOTSET: the pads as written).
graph::AutoPad onnx_auto_pad(AttrReader& a) {
  const std::string auto_pad = a.s("auto_pad", "NOTSET");
  if (auto_pad == "SAME_UPPER") return graph::AutoPad::same_upper;
  if (auto_pad == "SAME_LOWER") return graph::AutoPad::same_lower;
  if (auto_pad == "VALID") return graph::AutoPad::valid;
  if (auto_pad != "NOTSET") a.unsupported_value("auto_pad", "value '" + auto_pad + "'");
  return graph::AutoPad::explicit_pads;
}

}  // namespace

graph::ConvAttrs Importer::conv_attrs(AttrReader& a, const Shape& x, const Shape& w) {
  expect(x.size() >= 3 && x.size() <= 5, "input rank " + std::to_string(x.size()) +
                                             " (expected 3 to 5)");
  expect(w.size() == x.size(), "weights rank differs from the input rank");
  const std::size_t spatial = x.size() - 2;
  graph::ConvAttrs c;
  const Ints kernel = a.ints("kernel_shape", Ints(w.begin() + 2, w.end()));
  expect(kernel == Ints(w.begin() + 2, w.end()), "kernel_shape " + dims_text(kernel) +
                                                      " differs from the weights " + dims_text(w));
  c.strides = a.ints("strides", Ints(spatial, 1));
  c.dilations = a.ints("dilations", Ints(spatial, 1));
  c.groups = a.i("group", 1);
  Ints pads = a.ints("pads", Ints(2 * spatial, 0));
  expect(pads.size() == 2 * spatial && c.strides.size() == spatial && c.dilations.size() == spatial,
         "pads, strides or dilations have the wrong length");
  c.pads_begin.assign(pads.begin(), pads.begin() + i64(spatial));
  c.pads_end.assign(pads.begin() + i64(spatial), pads.end());
  graph::apply_auto_pad(onnx_auto_pad(a), x, Ints(w.begin() + 2, w.end()), c.strides, c.dilations,
                 c.pads_begin, c.pads_end);
  return c;
}

void Importer::op_conv(AttrReader& a) {
  Operand& x = in(0);
  Operand& w = in(1);
  require_float(x, "the input");
  require_float(w, "the weights");
  const graph::ConvAttrs attrs = conv_attrs(a, x.shape, w.shape);
  std::vector<ValueId> inputs{f32(x), f32(w)};
  if (has_in(2)) inputs.push_back(f32(in(2)));
  const ValueId y = emit(OpKind::Convolution, std::move(inputs), attrs);
  set_out(0, make_float(y, value_shape(y)));
}

void Importer::op_conv_transpose(AttrReader& a) {
  Operand& x = in(0);
  Operand& w = in(1);
  require_float(x, "the input");
  require_float(w, "the weights");
  const Shape& xs = x.shape;
  const Shape& ws = w.shape;
  expect(xs.size() >= 3 && xs.size() <= 5 && ws.size() == xs.size(),
         "input and weights must have rank 3 to 5");
  const std::size_t spatial = xs.size() - 2;
  graph::DeconvAttrs d;
  const Ints kernel = a.ints("kernel_shape", Ints(ws.begin() + 2, ws.end()));
  expect(kernel == Ints(ws.begin() + 2, ws.end()), "kernel_shape differs from the weights");
  d.strides = a.ints("strides", Ints(spatial, 1));
  d.dilations = a.ints("dilations", Ints(spatial, 1));
  d.groups = a.i("group", 1);
  d.output_padding = a.ints("output_padding", Ints(spatial, 0));
  Ints pads = a.ints("pads", Ints(2 * spatial, 0));
  expect(pads.size() == 2 * spatial && d.strides.size() == spatial &&
             d.dilations.size() == spatial && d.output_padding.size() == spatial,
         "pads, strides, dilations or output_padding have the wrong length");
  d.pads_begin.assign(pads.begin(), pads.begin() + i64(spatial));
  d.pads_end.assign(pads.begin() + i64(spatial), pads.end());
  const std::string auto_pad = a.s("auto_pad", "NOTSET");
  Ints output_shape = a.ints("output_shape");
  if (output_shape.size() == xs.size()) output_shape.erase(output_shape.begin(), output_shape.begin() + 2);
  if (auto_pad != "NOTSET" && auto_pad != "SAME_UPPER" && auto_pad != "SAME_LOWER" &&
      auto_pad != "VALID") {
    a.unsupported_value("auto_pad", "value '" + auto_pad + "'");
  }
  if (auto_pad == "VALID") {
    std::fill(d.pads_begin.begin(), d.pads_begin.end(), 0);
    std::fill(d.pads_end.begin(), d.pads_end.end(), 0);
  }
  if (output_shape.empty() && (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER")) {
    for (std::size_t i = 0; i < spatial; ++i) output_shape.push_back(xs[i + 2] * d.strides[i]);
  }
  if (!output_shape.empty()) {
    expect(output_shape.size() == spatial, "output_shape has the wrong length");
    // total = natural size - wanted size; split like ONNX: SAME_UPPER puts the
    // smaller half first. A wanted size beyond the natural one is extra
    // output padding at the end.
    for (std::size_t i = 0; i < spatial; ++i) {
      const std::int64_t extent = (ws[i + 2] - 1) * d.dilations[i] + 1;
      const std::int64_t total =
          d.strides[i] * (xs[i + 2] - 1) + d.output_padding[i] + extent - output_shape[i];
      if (total >= 0) {
        const std::int64_t small = total / 2;
        d.pads_begin[i] = auto_pad == "SAME_UPPER" ? small : total - small;
        d.pads_end[i] = total - d.pads_begin[i];
      } else {
        d.pads_begin[i] = 0;
        d.pads_end[i] = 0;
        d.output_padding[i] += -total;
      }
    }
  }
  std::vector<ValueId> inputs{f32(x), f32(w)};
  if (has_in(2)) inputs.push_back(f32(in(2)));
  const ValueId y = emit(OpKind::Deconvolution, std::move(inputs), d);
  set_out(0, make_float(y, value_shape(y)));
}

// B as [N, K] weights of FullyConnected (transposed from [K, N] unless
// `transpose` is false), keeping a dequantized constant in its integer form.
ValueId Importer::weight_matrix(Operand& b, bool transpose) {
  // Transposed as the f32 values or the codes they are (not as doubles).
  if (b.literal) {
    if (!transpose) return f32(b);
    if (b.literal->type != kFloat) {
      Shape s;
      Values v = transpose_values(b.literal->values(), b.shape, {1, 0}, s);
      return f32_constant(v, s, "weights");
    }
    const Literal& w = *b.literal;
    return constant(graph::transposed_matrix(*to_shared_tensor(w, label(), w.shape)), "weights");
  }
  if (b.dq_weight) {
    if (!transpose) return b.value;
    QuantParams p = b.dq_weight->params;
    if (p.axis >= 0) p.axis = 1 - p.axis;
    const Literal& q = *b.dq_weight->q;
    return emit_dequantize_codes(graph::transposed_matrix(*to_shared_tensor(q, label(), q.shape)),
                                 p);
  }
  if (!transpose) return b.value;
  return emit(OpKind::Transpose, {f32(b)}, graph::TransposeAttrs{{1, 0}}, "transpose_b");
}

std::optional<Values> Importer::constant_values(const Operand& o) const {
  if (o.literal) return o.literal->values();
  if (!o.dq_weight) return std::nullopt;
  const Literal& q = *o.dq_weight->q;
  const QuantParams& p = o.dq_weight->params;
  // Only a vector or a scalar: its index is its channel when per axis.
  if (q.shape.size() > 1) return std::nullopt;
  Values v(q.values().size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::size_t c = p.scale.size() == 1 ? 0 : i;
    const float diff = static_cast<float>(q.values()[i]) - static_cast<float>(p.zero_point[c]);
    v[i] = static_cast<double>(diff * static_cast<float>(p.scale[c]));
  }
  return v;
}

void Importer::op_gemm(AttrReader& a) {
  // Y = alpha * A' B' + beta * C, evaluated as ONNX does: fl(alpha * AB) + fl(beta * C).
  const float alpha = a.f("alpha", 1.0f);
  const float beta = a.f("beta", 1.0f);
  const bool trans_a = a.i("transA", 0) != 0;
  const bool trans_b = a.i("transB", 0) != 0;
  Operand& A = in(0);
  Operand& B = in(1);
  require_float(A, "A");
  require_float(B, "B");
  expect(A.shape.size() == 2 && B.shape.size() == 2, "A and B must be 2-D");
  const std::int64_t n = trans_b ? B.shape[0] : B.shape[1];
  const bool weights = B.literal || B.dq_weight;
  ValueId y;
  bool bias_done = false;
  const bool has_c = has_in(2) && beta != 0.0f;
  if (!trans_a && weights) {
    std::vector<ValueId> inputs{f32(A), weight_matrix(B, !trans_b)};
    // C joins the inner product as its bias when nothing scales in between:
    // a constant, or the dequantize of one (ONNX Runtime's int32 bias).
    const Shape& cs = has_c ? in(2).shape : Shape{};
    const bool row_bias = cs.empty() || cs == Shape{1} || cs == Shape{n} || cs == Shape{1, 1} ||
                          cs == Shape{1, n};
    const std::optional<Values> c_values = has_c ? constant_values(in(2)) : std::nullopt;
    if (has_c && alpha == 1.0f && c_values && row_bias) {
      Values c = *c_values;
      if (c.size() == 1) c.assign(sz(n), c[0]);
      for (double& e : c) e = static_cast<double>(static_cast<float>(e) * beta);
      inputs.push_back(f32_constant(c, {n}, "bias"));
      bias_done = true;
    }
    y = emit(OpKind::FullyConnected, std::move(inputs), NoAttrs{}, bias_done || !has_c ? "" : "fc");
  } else {
    y = emit(OpKind::MatMul, {f32(A), f32(B)}, graph::MatMulAttrs{trans_a, trans_b},
             has_c || alpha != 1.0f ? "matmul" : "");
  }
  if (alpha != 1.0f) {
    y = emit(OpKind::Multiply, {y, f32_constant({alpha}, {1}, "alpha")}, NoAttrs{},
             has_c && !bias_done ? "mul_alpha" : "");
  }
  if (has_c && !bias_done) {
    Operand& C = in(2);
    require_float(C, "C");
    ValueId c;
    if (C.literal) {
      Values v = C.literal->values();
      for (double& e : v) e = static_cast<double>(static_cast<float>(e) * beta);
      c = f32_constant(v, ir_shape(C.shape), "beta_c");
    } else {
      c = f32(C);
      if (beta != 1.0f) {
        c = emit(OpKind::Multiply, {c, f32_constant({beta}, {1}, "beta")}, NoAttrs{}, "mul_beta");
      }
    }
    y = emit(OpKind::Add, {y, c});
  }
  set_out(0, make_float(y, value_shape(y)));
}

void Importer::op_matmul(AttrReader&) {
  Operand& A = in(0);
  Operand& B = in(1);
  require_float(A, "A");
  require_float(B, "B");
  expect(!A.shape.empty() && !B.shape.empty(), "operands must have rank >= 1");
  ValueId a = f32(A);
  Shape as = A.shape;
  if (as.size() == 1) {
    as = {1, as[0]};
    a = emit(OpKind::Reshape, {a}, graph::ReshapeAttrs{as}, "a_2d");
  }
  ValueId y;
  if (B.shape.size() == 2 && (B.literal || B.dq_weight)) {
    y = emit(OpKind::FullyConnected, {a, weight_matrix(B, true)}, NoAttrs{}, "matmul");
  } else {
    ValueId b = f32(B);
    if (B.shape.size() == 1) {
      b = emit(OpKind::Reshape, {b}, graph::ReshapeAttrs{{B.shape[0], 1}}, "b_2d");
    }
    y = emit(OpKind::MatMul, {a, b}, graph::MatMulAttrs{}, "matmul");
  }
  // numpy drops the dimensions a 1-D operand gained.
  Shape out = value_shape(y);
  if (A.shape.size() == 1) out.erase(out.end() - 2);
  if (B.shape.size() == 1) out.erase(out.end() - 1);
  Operand r = make_float(y, out);
  reshape_to(r, out);
  set_out(0, r);
}

void Importer::reshape_to(Operand& x, const Shape& target, const Ints& spec) {
  x.shape = target;
  x.quantized = nullptr;
  x.dq_weight = nullptr;
  if (x.literal) {
    x = make_literal(x.type, target, x.literal->values());
    return;
  }
  const ValueId v = x.value;
  // Unchanged here; a spec that copies every dimension but one (0, at most
  // one -1) leaves any input of this rank unchanged too. Another keeps its
  // node, which may change the shape at other input sizes.
  bool identity_spec = spec.size() == value_shape(v).size() && std::count(spec.begin(), spec.end(), -1) <= 1;
  for (std::size_t k = 0; k < spec.size(); ++k) {
    identity_spec = identity_spec && (spec[k] == 0 || spec[k] == -1 || spec[k] == -2 - i64(k));
  }
  if (value_shape(v) == ir_shape(target) && (spec.empty() || identity_spec)) return;
  // The spec is ONNX's shape; the IR's may have more dimensions (a scalar is [1]).
  const bool same_rank = ir_shape(target).size() == target.size();
  x.value = emit(OpKind::Reshape, {v}, graph::ReshapeAttrs{ir_shape(target), same_rank ? spec : Ints{}});
  x.f32_value = ValueId{};
  if (value_type(x.value) == ElementType::f32) x.f32_value = x.value;
}

void Importer::op_batch_norm(AttrReader& a) {
  const float eps = a.f("epsilon", 1e-5f);
  a.ignore("momentum");
  if (a.i("training_mode", 0) != 0) a.unsupported_value("training_mode", "= 1");
  max_outputs(1);
  Operand& x = in(0);
  require_float(x, "the input");
  std::vector<ValueId> inputs{f32(x)};
  for (std::size_t k = 1; k < 5; ++k) {
    require_float(in(k), "a parameter");
    inputs.push_back(f32(in(k)));
  }
  set_out(0, make_float(emit(OpKind::BatchNormalization, std::move(inputs),
                             graph::BatchNormAttrs{eps}),
                        x.shape));
}

void Importer::op_pool(AttrReader& a) {
  const bool is_max = node_->op_type() == "MaxPool";
  Operand& x = in(0);
  // The maximum of integers carried in f32 is exact.
  if (!(is_max && (x.type == kUint8 || x.type == kInt8 || x.type == kInt32))) {
    require_float(x, "the input");
  }
  max_outputs(1);
  expect(x.shape.size() >= 3 && x.shape.size() <= 5, "input rank must be 3 to 5");
  const graph::PoolAttrs p = pool_attrs(a, x.shape, is_max);
  // A MaxPool on 8-bit codes (ONNX Runtime's QOperator format) runs on them.
  if (is_max && (x.type == kUint8 || x.type == kInt8) && !x.literal &&
      value_type(x.value) != ElementType::f32) {
    Operand y = x;
    y.value = emit(OpKind::MaxPool, {x.value}, p);
    y.f32_value = ValueId{};
    y.quantized = nullptr;
    y.shape = value_shape(y.value);
    set_out(0, y);
    return;
  }
  const ValueId y = emit(is_max ? OpKind::MaxPool : OpKind::AvgPool, {f32(x)}, p);
  if (is_integer_type(x.type)) {
    set_out(0, make_integer(y, x.type, value_shape(y), int_range(x)));
  } else {
    set_out(0, make_float(y, value_shape(y)));
  }
}

graph::PoolAttrs Importer::pool_attrs(AttrReader& a, const Shape& x, bool is_max) {
  const std::size_t spatial = x.size() - 2;
  graph::PoolAttrs p;
  if (!a.has("kernel_shape")) malformed("kernel_shape is required");
  p.kernel = a.ints("kernel_shape");
  p.strides = a.ints("strides", Ints(spatial, 1));
  p.dilations = a.ints("dilations", Ints(spatial, 1));
  Ints pads = a.ints("pads", Ints(2 * spatial, 0));
  expect(p.kernel.size() == spatial && p.strides.size() == spatial &&
             p.dilations.size() == spatial && pads.size() == 2 * spatial,
         "kernel_shape, strides, dilations or pads have the wrong length");
  p.pads_begin.assign(pads.begin(), pads.begin() + i64(spatial));
  p.pads_end.assign(pads.begin() + i64(spatial), pads.end());
  const bool ceil_mode = a.i("ceil_mode", 0) != 0;
  if (is_max) {
    if (a.i("storage_order", 0) != 0) a.unsupported_value("storage_order", "= 1");
  } else {
    p.exclude_pad = a.i("count_include_pad", 0) == 0;
  }
  graph::apply_auto_pad(onnx_auto_pad(a), x, p.kernel, p.strides, p.dilations, p.pads_begin,
                        p.pads_end);
  if (ceil_mode) {
    if (auto problem = graph::add_ceil_mode_padding(p, x, is_max)) {
      a.unsupported_value("ceil_mode", *problem);
    }
  }
  return p;
}

void Importer::op_global_pool(AttrReader&) {
  const bool is_max = node_->op_type() == "GlobalMaxPool";
  Operand& x = in(0);
  require_float(x, "the input");
  expect(x.shape.size() >= 3 && x.shape.size() <= 5, "input rank must be 3 to 5");
  graph::PoolAttrs p;
  p.kernel.assign(x.shape.begin() + 2, x.shape.end());
  const ValueId y = emit(is_max ? OpKind::MaxPool : OpKind::AvgPool, {f32(x)}, p);
  set_out(0, make_float(y, value_shape(y)));
}

}  // namespace qfuse::onnx::impl
