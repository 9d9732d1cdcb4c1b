// ONNX import: elementwise operators (activations, arithmetic, Clip, Cast).

#include "graph/onnx/import_internal.hpp"

#include <stdexcept>

#include "graph/op_info.hpp"

namespace qfuse::onnx::impl {

// The IR op that ONNX operator exactly is (graph/op_info.cpp's onnx column).
OpKind Importer::onnx_kind() const {
  const auto kind = graph::op_kind_of_onnx(node_->op_type());
  if (!kind) throw std::logic_error("import: no IR op is " + node_->op_type());
  return *kind;
}

void Importer::op_unary(AttrReader&) {
  const OpKind kind = onnx_kind();
  // Tanh inside GELU's tanh form imports the GELU too; the Tanh itself is
  // imported below all the same, and dies unread.
  if (kind == OpKind::Tanh) try_tanh_gelu();
  Operand& x = in(0);
  if (!is_float(x.type) && (kind == OpKind::Relu || kind == OpKind::Abs) &&
      is_integer_type(x.type)) {
    const Interval r = int_range(x);
    const Interval out = kind == OpKind::Relu
                             ? Interval{std::max(r.lo, 0.0), std::max(r.hi, 0.0)}
                             : Interval{r.lo >= 0 ? r.lo : r.hi <= 0 ? -r.hi : 0.0, max_abs(r)};
    set_out(0, make_integer(emit(kind, {f32(x)}), x.type, x.shape, out));
    return;
  }
  require_float(x, "the input");
  set_out(0, make_float(emit(kind, {f32(x)}), x.shape));
}

void Importer::op_elu_like(AttrReader& a) {
  const bool elu = node_->op_type() == "Elu";
  const float alpha = a.f("alpha", elu ? 1.0f : 0.01f);
  Operand& x = in(0);
  require_float(x, "the input");
  set_out(0, make_float(emit(elu ? OpKind::Elu : OpKind::LeakyRelu, {f32(x)},
                             graph::AlphaAttrs{alpha}),
                        x.shape));
}

void Importer::op_hard_sigmoid(AttrReader& a) {
  // max(0, min(1, alpha * x + beta)); HSigmoid is (x + 3) / 6 clipped, the same
  // function for alpha = 1/6, beta = 0.5 (to within an ulp of the rounding).
  const float alpha = a.f("alpha", 0.2f);
  const float beta = a.f("beta", 0.5f);
  Operand& x = in(0);
  require_float(x, "the input");
  if (alpha == 1.0f / 6.0f && beta == 0.5f) {
    set_out(0, make_float(emit(OpKind::HSigmoid, {f32(x)}), x.shape));
    return;
  }
  ValueId t = emit(OpKind::Multiply, {f32(x), f32_constant({alpha}, {1}, "alpha")}, NoAttrs{},
                   "mul_alpha");
  t = emit(OpKind::Add, {t, f32_constant({beta}, {1}, "beta")}, NoAttrs{}, "add_beta");
  set_out(0, make_float(emit(OpKind::Clamp, {t}, graph::ClampAttrs{0.0f, 1.0f}), x.shape));
}

void Importer::op_neg(AttrReader&) {
  Operand& x = in(0);
  Operand minus_one = make_literal(x.type == kFloat ? kFloat : x.type, {}, {-1.0});
  set_out(0, binary(OpKind::Multiply, x, minus_one, ""));
}

void Importer::op_reciprocal(AttrReader&) {
  Operand& x = in(0);
  require_float(x, "the input");
  Operand one = make_literal(kFloat, {}, {1.0});
  set_out(0, binary(OpKind::Divide, one, x, ""));
}

Operand Importer::binary(OpKind kind, Operand& x, Operand& y, const std::string& suffix) {
  const auto broadcast = broadcast_shapes(x.shape, y.shape);
  if (!broadcast) {
    malformed("shapes " + to_string(x.shape) + " and " + to_string(y.shape) + " do not broadcast");
  }
  Shape out_shape = *broadcast;
  if (x.type != y.type) {
    malformed("operand types differ (" + onnx_type_name(x.type) + " and " +
              onnx_type_name(y.type) + ")");
  }
  if (is_float(x.type)) {
    return make_float(emit(kind, {f32(x), f32(y)}, NoAttrs{}, suffix), out_shape);
  }
  if (!to_element_type(x.type) && !(x.literal && y.literal)) {
    unsupported("element type " + onnx_type_name(x.type) + " is not supported");
  }
  if (!is_integer_type(x.type)) unsupported("element type " + onnx_type_name(x.type) +
                                            " is not supported");
  const Interval p = int_range(x), q = int_range(y);
  Interval r;
  switch (kind) {
    case OpKind::Add: r = {p.lo + q.lo, p.hi + q.hi}; break;
    case OpKind::Subtract: r = {p.lo - q.hi, p.hi - q.lo}; break;
    case OpKind::Multiply: {
      const double c[] = {p.lo * q.lo, p.lo * q.hi, p.hi * q.lo, p.hi * q.hi};
      r = {*std::min_element(c, c + 4), *std::max_element(c, c + 4)};
      break;
    }
    case OpKind::Minimum: r = {std::min(p.lo, q.lo), std::min(p.hi, q.hi)}; break;
    case OpKind::Maximum: r = {std::max(p.lo, q.lo), std::max(p.hi, q.hi)}; break;
    default:
      unsupported("integer " + node_->op_type() +
                  " truncates; qfuse has no exact integer division");
  }
  return make_integer(emit(kind, {f32(x), f32(y)}, NoAttrs{}, suffix), x.type, out_shape, r);
}

void Importer::op_binary(AttrReader&) { set_out(0, binary(onnx_kind(), in(0), in(1), "")); }

void Importer::op_variadic(AttrReader&) {
  const std::string& op = node_->op_type();
  const OpKind kind = op == "Min" ? OpKind::Minimum : op == "Max" ? OpKind::Maximum : OpKind::Add;
  Operand acc = in(0);
  for (std::size_t k = 1; k < num_inputs(); ++k) {
    acc = binary(kind, acc, in(k), k + 1 == num_inputs() && op != "Mean" ? "" : "step" + std::to_string(k));
  }
  if (op == "Mean") {
    require_float(acc, "the input");
    Operand n = make_literal(kFloat, {}, {static_cast<double>(num_inputs())});
    acc = binary(OpKind::Divide, acc, n, "");
  }
  set_out(0, acc);
}

void Importer::op_prelu(AttrReader&) {
  Operand& x = in(0);
  Operand& slope = in(1);
  require_float(x, "the input");
  require_float(slope, "the slope");
  if (!graph::broadcasts_to(slope.shape, x.shape)) {
    unsupported("slope shape " + to_string(slope.shape) + " must broadcast to the input " +
                to_string(x.shape));
  }
  set_out(0, make_float(emit(OpKind::PRelu, {f32(x), f32(slope)}), x.shape));
}

void Importer::op_clip(AttrReader& a) {
  Operand& x = in(0);
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  if (opset_ < 11) {
    lo = a.f("min", std::numeric_limits<float>::lowest());
    hi = a.f("max", std::numeric_limits<float>::max());
  } else {
    if (has_in(1)) lo = lit_in(1, "min").values().at(0);
    if (has_in(2)) hi = lit_in(2, "max").values().at(0);
  }
  // numpy.clip with lo > hi yields hi everywhere.
  if (lo > hi) lo = hi;
  const graph::ClampAttrs attrs{static_cast<float>(lo), static_cast<float>(hi)};
  if (is_integer_type(x.type)) {
    const Interval r = int_range(x);
    const Interval out{std::clamp(r.lo, lo, hi), std::clamp(r.hi, lo, hi)};
    if (auto narrowed = narrowed_grid(x, out)) {
      // QuantizeLinear -> Clip: a Quantize onto the narrower codes.
      Operand y;
      y.type = x.type;
      y.shape = x.shape;
      y.value = emit_quantize(narrowed->source, narrowed->params);
      y.range = Interval{narrowed->params.qmin, narrowed->params.qmax};
      y.quantized = std::move(narrowed);
      set_out(0, y);
      return;
    }
    set_out(0, make_integer(emit(OpKind::Clamp, {f32(x)}, attrs), x.type, x.shape, out));
    return;
  }
  require_float(x, "the input");
  set_out(0, make_float(emit(OpKind::Clamp, {f32(x)}, attrs), x.shape));
}

// Clip between QuantizeLinear and DequantizeLinear narrows the grid's codes:
// saturate(round(x / s) + zp) onto [qmin, qmax] and then clamped to [lo, hi]
// is saturate(...) onto the intersection, for integer bounds. torch exports its
// reduce_range activations (quint8 0..127) this way. The Clip then imports as
// a Quantize onto the narrower codes; a Clip that leaves fewer than two codes
// keeps its own nodes.
std::shared_ptr<const Operand::Quantized> Importer::narrowed_grid(const Operand& x,
                                                                  const Interval& codes) const {
  if (!x.quantized) return nullptr;
  const QuantParams& p = x.quantized->params;
  const double lo = std::max(p.qmin, std::ceil(codes.lo));
  const double hi = std::min(p.qmax, std::floor(codes.hi));
  if (!(hi > lo)) return nullptr;
  Operand::Quantized q = *x.quantized;
  q.params.qmin = lo;
  q.params.qmax = hi;
  return std::make_shared<const Operand::Quantized>(std::move(q));
}

void Importer::op_cast(AttrReader& a) {
  a.ignore("saturate");  // opset 19: float8 targets only, refused below
  const int to = static_cast<int>(a.i("to", kFloat));
  Operand x = in(0);
  if (!to_element_type(to)) {
    unsupported("Cast to " + onnx_type_name(to) +
                " (qfuse tensors are FLOAT, UINT8, INT8, INT32, INT64)");
  }
  if (!to_element_type(x.type)) {
    unsupported("Cast from " + onnx_type_name(x.type) +
                " (qfuse tensors are FLOAT, UINT8, INT8, INT32, INT64)");
  }
  if (x.type == to) {
    set_out(0, x);
    return;
  }
  if (to == kFloat) {
    // Integers convert exactly below 2^24 and round to nearest above, as
    // Convert does; the carrier already is that f32 value.
    Operand y = make_float(f32(x), x.shape);
    y.range = x.range;
    set_out(0, y);
    return;
  }
  // To an integer type: exact only for integral values that fit.
  if (!x.range) {
    unsupported("Cast from " + onnx_type_name(x.type) + " to " + onnx_type_name(to) +
                " truncates toward zero; qfuse has no exact truncation (only integral values "
                "known at import may be cast)");
  }
  const Interval t = type_range(to);
  if (x.range->lo < t.lo || x.range->hi > t.hi) {
    unsupported("Cast from " + onnx_type_name(x.type) + " to " + onnx_type_name(to) +
                " may wrap around (values in [" + std::to_string(x.range->lo) + ", " +
                std::to_string(x.range->hi) + "])");
  }
  set_out(0, make_integer(f32(x), to, x.shape, *x.range));
}

}  // namespace qfuse::onnx::impl
