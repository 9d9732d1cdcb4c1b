// ONNX import: elementwise operators (activations, arithmetic, Clip, Cast).

#include "graph/onnx/import_internal.hpp"

namespace qfuse::onnx::impl {

void Importer::op_unary(AttrReader&) {
  static const std::unordered_map<std::string, OpKind> kKinds = {
      {"Relu", OpKind::Relu},    {"Sigmoid", OpKind::Sigmoid}, {"Tanh", OpKind::Tanh},
      {"Exp", OpKind::Exp},      {"Abs", OpKind::Abs},         {"Sqrt", OpKind::Sqrt},
      {"Round", OpKind::Round},  {"HardSwish", OpKind::HSwish}};
  const OpKind kind = kKinds.at(node_->op_type());
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

void Importer::op_binary(AttrReader&) {
  static const std::unordered_map<std::string, OpKind> kKinds = {{"Add", OpKind::Add},
                                                                 {"Sub", OpKind::Subtract},
                                                                 {"Mul", OpKind::Multiply},
                                                                 {"Div", OpKind::Divide}};
  set_out(0, binary(kKinds.at(node_->op_type()), in(0), in(1), ""));
}

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
    if (has_in(1)) lo = lit_in(1, "min").values.at(0);
    if (has_in(2)) hi = lit_in(2, "max").values.at(0);
  }
  // numpy.clip with lo > hi yields hi everywhere.
  if (lo > hi) lo = hi;
  const graph::ClampAttrs attrs{static_cast<float>(lo), static_cast<float>(hi)};
  if (is_integer_type(x.type)) {
    const Interval r = int_range(x);
    const Interval out{std::clamp(r.lo, lo, hi), std::clamp(r.hi, lo, hi)};
    set_out(0, make_integer(emit(OpKind::Clamp, {f32(x)}, attrs), x.type, x.shape, out));
    return;
  }
  require_float(x, "the input");
  set_out(0, make_float(emit(OpKind::Clamp, {f32(x)}, attrs), x.shape));
}

void Importer::op_cast(AttrReader& a) {
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

namespace qfuse::onnx::impl {

std::optional<double> Importer::scalar_tensor(const std::string& name) const {
  if (const auto it = tensors_.find(name); it != tensors_.end()) {
    if (it->second.literal && it->second.literal->values.size() == 1) return it->second.literal->values[0];
    return std::nullopt;
  }
  const auto p = onnx_producer_.find(name);
  if (p == onnx_producer_.end()) return std::nullopt;
  const ::onnx::NodeProto& c = model_.graph().node(p->second);
  if (c.op_type() != "Constant") return std::nullopt;
  for (const auto& attr : c.attribute()) {
    if (attr.name() == "value_float") return static_cast<double>(attr.f());
    if (attr.name() == "value" && attr.has_t()) {
      const Literal l = decode_tensor(attr.t(), "Constant '" + name + "'");
      if (l.values.size() == 1) return l.values[0];
    }
  }
  return std::nullopt;
}

std::optional<int> Importer::sole_onnx_consumer(const std::string& name) const {
  for (const auto& o : model_.graph().output()) {
    if (o.name() == name) return std::nullopt;
  }
  const auto it = onnx_consumers_.find(name);
  if (it == onnx_consumers_.end() || it->second.size() != 1) return std::nullopt;
  return it->second[0];
}

void Importer::op_erf(AttrReader&) {
  const auto& g = model_.graph();
  const auto node_at = [&](int i) -> const ::onnx::NodeProto& { return g.node(i); };
  const auto near = [](std::optional<double> v, double want) {
    return v && std::abs(*v - want) <= 1e-6 * want;
  };
  // The other input of a binary node `n` that reads `t`, when `t` is one of its two inputs.
  const auto other_input = [](const ::onnx::NodeProto& n, const std::string& t) -> std::optional<std::string> {
    if (n.input_size() != 2) return std::nullopt;
    if (n.input(0) == t) return n.input(1);
    if (n.input(1) == t) return n.input(0);
    return std::nullopt;
  };
  const auto fail = [&] {
    unsupported("Erf outside GELU's x * 0.5 * (1 + erf(x / sqrt(2))): qfuse has no Erf operator");
  };
  // x / sqrt(2), or x * (1 / sqrt(2)).
  const auto p = onnx_producer_.find(node_->input(0));
  if (p == onnx_producer_.end()) fail();
  const ::onnx::NodeProto& scaled = node_at(p->second);
  std::string x;
  if (scaled.op_type() == "Div" && scaled.input_size() == 2 &&
      near(scalar_tensor(scaled.input(1)), 1.4142135623730951)) {
    x = scaled.input(0);
  } else if (scaled.op_type() == "Mul" && scaled.input_size() == 2) {
    for (int k = 0; k < 2; ++k) {
      if (near(scalar_tensor(scaled.input(k)), 0.7071067811865476)) x = scaled.input(1 - k);
    }
  }
  if (x.empty()) fail();
  // 1 + erf(..)
  const auto add_i = sole_onnx_consumer(node_->output(0));
  if (!add_i || node_at(*add_i).op_type() != "Add") fail();
  const ::onnx::NodeProto& add = node_at(*add_i);
  const auto one = other_input(add, node_->output(0));
  if (!one || !near(scalar_tensor(*one), 1.0)) fail();
  // Then x * 0.5 in either order, or (0.5 x) from another node.
  const auto m1_i = sole_onnx_consumer(add.output(0));
  if (!m1_i || node_at(*m1_i).op_type() != "Mul") fail();
  const ::onnx::NodeProto& m1 = node_at(*m1_i);
  const auto f1 = other_input(m1, add.output(0));
  if (!f1) fail();
  std::vector<int> taken{*add_i, *m1_i};
  std::string out;
  const auto half_of_x = [&](const std::string& t) {
    const auto h = onnx_producer_.find(t);
    if (h == onnx_producer_.end() || node_at(h->second).op_type() != "Mul") return false;
    const auto other = other_input(node_at(h->second), x);
    return other && near(scalar_tensor(*other), 0.5);
  };
  if (*f1 == x || near(scalar_tensor(*f1), 0.5)) {
    // x * (1 + erf) then * 0.5, or (1 + erf) * 0.5 then * x.
    const auto m2_i = sole_onnx_consumer(m1.output(0));
    if (!m2_i || node_at(*m2_i).op_type() != "Mul") fail();
    const ::onnx::NodeProto& m2 = node_at(*m2_i);
    const auto f2 = other_input(m2, m1.output(0));
    if (!f2) fail();
    const bool ok = *f1 == x ? near(scalar_tensor(*f2), 0.5) : *f2 == x;
    if (!ok) fail();
    taken.push_back(*m2_i);
    out = m2.output(0);
  } else if (half_of_x(*f1)) {
    out = m1.output(0);
  } else {
    fail();
  }
  const auto xo = tensors_.find(x);
  if (xo == tensors_.end()) fail();
  Operand& xv = xo->second;
  require_float(xv, "GELU's input");
  for (int i : taken) taken_nodes_.insert(i);
  const ValueId y = emit(OpKind::Gelu, {f32(xv)}, graph::GeluAttrs{graph::GeluApproximation::erf}, "gelu");
  tensors_[out] = make_float(y, xv.shape);
  // Erf's own output names the GELU too: its only reader is the Add just
  // taken, so nothing reads it as the error function.
  set_out(0, make_float(y, xv.shape));
}

}  // namespace qfuse::onnx::impl
