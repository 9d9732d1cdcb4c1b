// ONNX import: what exporters spell out with several nodes and qfuse runs as
// one op, matched on the file's nodes while importing, so that the fused and
// the unfused path both see the one op:
//
//   LayerNorm below opset 17 (PyTorch's nn.LayerNorm at opset 13):
//     d = x - ReduceMean(x); y = d / Sqrt(ReduceMean(Pow(d, 2)) + eps) [* gamma] [+ beta]
//       ==> LayerNorm(x, gamma or 1, beta or 0, eps)
//   GELU, erf form:  x * 0.5 * (1 + Erf(x / sqrt(2)))                    ==> Gelu(x, erf)
//   GELU, tanh form: x * 0.5 * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 x^3))) ==> Gelu(x, tanh)
//     (x^3 as Pow(x, 3) or x * x * x; the 0.5 on x, on (1 + ..), or on the product)
//
// A pattern is matched from one node of it: the nodes after that node are
// taken (skipped when the loop reaches them), so their outputs must have no
// reader outside the pattern; that node itself and the nodes before it are
// imported as they are and die once nothing reads them. Constants match to a relative 1e-6. A
// candidate that does not match stays the operators it is, and a debug line
// says why (Erf, which qfuse has no operator for, is an error instead).

#include "graph/onnx/import_internal.hpp"

namespace qfuse::onnx::impl {
namespace {

constexpr double kSqrt2 = 1.4142135623730951;
constexpr double kSqrt2OverPi = 0.7978845608028654;  // sqrt(2 / pi)
constexpr double kGeluCubic = 0.044715;

bool near(std::optional<double> v, double want) {
  return v && std::abs(*v - want) <= 1e-6 * std::abs(want);
}

// The other input of a binary node `n` that reads `t`, when `t` is one of its two inputs.
std::optional<std::string> other_input(const ::onnx::NodeProto& n, const std::string& t) {
  if (n.input_size() != 2) return std::nullopt;
  if (n.input(0) == t) return n.input(1);
  if (n.input(1) == t) return n.input(0);
  return std::nullopt;
}

bool default_domain(const ::onnx::NodeProto& n) {
  return n.domain().empty() || n.domain() == "ai.onnx";
}

// An operator of the default domain with one output and no attribute outside `allowed`.
bool plain_node(const ::onnx::NodeProto& n, const std::string& op,
                std::initializer_list<const char*> allowed = {}) {
  if (n.op_type() != op || !default_domain(n) || n.output_size() != 1) return false;
  for (const auto& attr : n.attribute()) {
    if (std::none_of(allowed.begin(), allowed.end(),
                     [&](const char* a) { return attr.name() == a; })) {
      return false;
    }
  }
  return true;
}

// axes [-1] or [rank - 1], keepdims 1.
bool last_axis_only(const Ints& axes, std::int64_t keepdims, std::int64_t rank) {
  return keepdims == 1 && axes.size() == 1 && (axes[0] == -1 || axes[0] == rank - 1);
}

// A node as messages name it: its name, else its first output's.
std::string called(const ::onnx::NodeProto& n) {
  return n.op_type() + " node '" + (n.name().empty() && n.output_size() > 0 ? n.output(0) : n.name()) + "'";
}

}  // namespace

std::optional<Literal> Importer::constant_tensor(const std::string& name) const {
  if (const Operand* o = find_tensor(name)) {
    if (o->literal) return *o->literal;
    return std::nullopt;
  }
  const auto p = onnx_producer_.find(name);
  if (p == onnx_producer_.end()) return std::nullopt;
  const ::onnx::NodeProto& c = model_.graph().node(p->second);
  if (c.op_type() != "Constant" || !default_domain(c)) return std::nullopt;
  for (const auto& attr : c.attribute()) {
    if (attr.name() == "value_float") {
      return Literal(kFloat, {}, Values{static_cast<double>(attr.f())});
    }
    if (attr.name() == "value_floats") {
      Values v(attr.floats().begin(), attr.floats().end());
      return Literal(kFloat, {i64(v.size())}, std::move(v));
    }
    if (attr.name() == "value" && attr.has_t()) {
      return decode_tensor(attr.t(), "Constant '" + name + "'");
    }
  }
  return std::nullopt;
}

std::optional<Ints> Importer::reduce_axes(const ::onnx::NodeProto& n, AttrReader& a) const {
  if (n.input_size() < 2 || n.input(1).empty()) return a.ints("axes");
  const std::optional<Literal> l = constant_tensor(n.input(1));
  if (!l) return std::nullopt;
  Ints axes;
  for (double v : l->values()) axes.push_back(static_cast<std::int64_t>(v));
  return axes;
}

std::optional<double> Importer::scalar_tensor(const std::string& name) const {
  const std::optional<Literal> l = constant_tensor(name);
  if (!l || l->values().size() != 1) return std::nullopt;
  return l->values()[0];
}

std::optional<int> Importer::sole_onnx_consumer(const std::string& name) const {
  for (const auto& o : model_.graph().output()) {
    if (o.name() == name) return std::nullopt;
  }
  const auto it = onnx_consumers_.find(name);
  if (it == onnx_consumers_.end() || it->second.size() != 1) return std::nullopt;
  return it->second[0];
}

std::optional<Importer::GeluTail> Importer::gelu_tail(const std::string& x, const std::string& f,
                                                      std::string& why) const {
  const auto& g = model_.graph();
  // 1 + f
  const auto add_i = sole_onnx_consumer(f);
  if (!add_i || !plain_node(g.node(*add_i), "Add")) {
    why = "'" + f + "' is not read by one Add alone";
    return std::nullopt;
  }
  const ::onnx::NodeProto& add = g.node(*add_i);
  const auto one = other_input(add, f);
  if (!one || !near(scalar_tensor(*one), 1.0)) {
    why = called(add) + " does not add the constant 1";
    return std::nullopt;
  }
  // Then x * 0.5 in either order, or (0.5 x) from another node.
  const auto m1_i = sole_onnx_consumer(add.output(0));
  if (!m1_i || !plain_node(g.node(*m1_i), "Mul")) {
    why = "1 + .. ('" + add.output(0) + "') is not read by one Mul alone";
    return std::nullopt;
  }
  const ::onnx::NodeProto& m1 = g.node(*m1_i);
  const auto f1 = other_input(m1, add.output(0));
  if (!f1) {
    why = called(m1) + " squares 1 + ..";
    return std::nullopt;
  }
  GeluTail tail;
  tail.taken = {*add_i, *m1_i};
  if (*f1 == x || near(scalar_tensor(*f1), 0.5)) {
    // x * (1 + f) then * 0.5, or (1 + f) * 0.5 then * x.
    const auto m2_i = sole_onnx_consumer(m1.output(0));
    const auto f2 = m2_i && plain_node(g.node(*m2_i), "Mul")
                        ? other_input(g.node(*m2_i), m1.output(0))
                        : std::nullopt;
    if (!f2 || (*f1 == x ? !near(scalar_tensor(*f2), 0.5) : *f2 != x)) {
      why = "the product '" + m1.output(0) + "' is not multiplied by " +
            (*f1 == x ? "0.5" : "x") + " by one Mul alone";
      return std::nullopt;
    }
    tail.taken.push_back(*m2_i);
    tail.out = g.node(*m2_i).output(0);
    return tail;
  }
  // (0.5 * x) * (1 + f)
  const auto h = onnx_producer_.find(*f1);
  const auto half = h != onnx_producer_.end() && plain_node(g.node(h->second), "Mul")
                        ? other_input(g.node(h->second), x)
                        : std::nullopt;
  if (!half || !near(scalar_tensor(*half), 0.5)) {
    why = called(m1) + " multiplies 1 + .. by '" + *f1 + "', neither x, 0.5 nor 0.5 x";
    return std::nullopt;
  }
  tail.half_x = *f1;
  tail.out = m1.output(0);
  return tail;
}

// Gelu (opset 20): one Gelu node, exact (erf) or tanh-approximated.
void Importer::op_gelu(AttrReader& a) {
  Operand& x = in(0);
  require_float(x, "the input");
  const std::string approximate = a.s("approximate", "none");
  graph::GeluAttrs g;
  if (approximate == "tanh") {
    g.approximation = graph::GeluApproximation::tanh;
  } else if (approximate != "none") {
    a.unsupported_value("approximate", "value '" + approximate + "' (expected none or tanh)");
  }
  set_out(0, make_float(emit(OpKind::Gelu, {f32(x)}, g), x.shape));
}

void Importer::op_erf(AttrReader&) {
  const auto fail = [&](const std::string& why) {
    unsupported("Erf outside GELU's x * 0.5 * (1 + erf(x / sqrt(2))): qfuse has no Erf operator (" +
                why + ")");
  };
  // x / sqrt(2), or x * (1 / sqrt(2)); the input is read through its producer.
  ignore_input(0);
  const auto p = onnx_producer_.find(node_->input(0));
  if (p == onnx_producer_.end()) fail("its input is not computed by a node");
  const ::onnx::NodeProto& scaled = model_.graph().node(p->second);
  std::string x;
  if (scaled.op_type() == "Div" && scaled.input_size() == 2 &&
      near(scalar_tensor(scaled.input(1)), kSqrt2)) {
    x = scaled.input(0);
  } else if (scaled.op_type() == "Mul" && scaled.input_size() == 2) {
    for (int k = 0; k < 2; ++k) {
      if (near(scalar_tensor(scaled.input(k)), 1.0 / kSqrt2)) x = scaled.input(1 - k);
    }
  }
  if (x.empty()) fail("its input is not x / sqrt(2)");
  std::string why;
  const std::optional<GeluTail> tail = gelu_tail(x, node_->output(0), why);
  if (!tail) fail(why);
  Operand* xo = find_tensor(x);
  if (xo == nullptr) fail("x is not defined before");
  Operand& xv = *xo;
  require_float(xv, "GELU's input");
  for (int i : tail->taken) taken_nodes_.insert(i);
  const ValueId y = emit(OpKind::Gelu, {f32(xv)}, graph::GeluAttrs{graph::GeluApproximation::erf}, "gelu");
  tensors_[tail->out] = make_float(y, xv.shape);
  tensors_[tail->out].dim_syms = xv.dim_syms;
  // Erf's own output names the GELU too: its only reader is the Add just
  // taken, so nothing reads it as the error function.
  set_out(0, make_float(y, xv.shape));
}

void Importer::try_tanh_gelu() {
  const auto& g = model_.graph();
  const std::string& u = node_->input(0);
  const auto refuse = [&](const std::string& why) {
    spdlog::debug("import {}: not GELU's tanh form: {}", label(), why);
  };
  // The single reader of each value before Tanh is the next node of the
  // pattern (x itself may have other readers).
  const auto inner = [&](const std::string& t, const char* op) -> const ::onnx::NodeProto* {
    const auto it = onnx_producer_.find(t);
    if (it == onnx_producer_.end() || !plain_node(g.node(it->second), op)) return nullptr;
    if (!sole_onnx_consumer(t)) return nullptr;
    return &g.node(it->second);
  };
  // sqrt(2/pi) * s
  const ::onnx::NodeProto* scale = inner(u, "Mul");
  if (scale == nullptr) return refuse("its input is not a Mul read by Tanh alone");
  std::string s;
  for (int k = 0; k < 2; ++k) {
    if (near(scalar_tensor(scale->input(k)), kSqrt2OverPi)) s = scale->input(1 - k);
  }
  if (s.empty()) return refuse(called(*scale) + " does not multiply by sqrt(2/pi)");
  // s = x + 0.044715 * x^3
  const ::onnx::NodeProto* sum = inner(s, "Add");
  if (sum == nullptr) return refuse("sqrt(2/pi) multiplies '" + s + "', not an Add read there alone");
  const auto cube_of = [&](const std::string& c) -> std::optional<std::string> {
    if (const ::onnx::NodeProto* pow = inner(c, "Pow"); pow != nullptr) {
      if (pow->input_size() == 2 && scalar_tensor(pow->input(1)) == 3.0) return pow->input(0);
      return std::nullopt;
    }
    // x * x * x in either association.
    const ::onnx::NodeProto* outer = inner(c, "Mul");
    if (outer == nullptr || outer->input_size() != 2) return std::nullopt;
    for (int k = 0; k < 2; ++k) {
      const ::onnx::NodeProto* sq = inner(outer->input(k), "Mul");
      const std::string& x = outer->input(1 - k);
      if (sq != nullptr && sq->input_size() == 2 && sq->input(0) == x && sq->input(1) == x) return x;
    }
    return std::nullopt;
  };
  std::string x;
  for (int k = 0; k < 2 && x.empty(); ++k) {
    const ::onnx::NodeProto* cubic = inner(sum->input(k), "Mul");
    if (cubic == nullptr) continue;
    for (int j = 0; j < 2; ++j) {
      if (!near(scalar_tensor(cubic->input(j)), kGeluCubic)) continue;
      const auto cube = cube_of(cubic->input(1 - j));
      if (cube && *cube == sum->input(1 - k)) x = *cube;
    }
  }
  if (x.empty()) {
    return refuse(called(*sum) + " is not x + 0.044715 * x^3 (x^3 as Pow(x, 3) or " +
                  "x * x * x, each value read inside the pattern alone)");
  }
  std::string why;
  const std::optional<GeluTail> tail = gelu_tail(x, node_->output(0), why);
  if (!tail) return refuse(why);
  if (!tail->half_x.empty() && !sole_onnx_consumer(tail->half_x)) {
    return refuse("0.5 x ('" + tail->half_x + "') has readers outside the pattern");
  }
  Operand* xo = find_tensor(x);
  if (xo == nullptr || !is_float(xo->type)) return refuse("x is not a FLOAT tensor");
  Operand& xv = *xo;
  for (int i : tail->taken) taken_nodes_.insert(i);
  const ValueId y =
      emit(OpKind::Gelu, {f32(xv)}, graph::GeluAttrs{graph::GeluApproximation::tanh}, "gelu");
  tensors_[tail->out] = make_float(y, xv.shape);
  tensors_[tail->out].dim_syms = xv.dim_syms;
}

void Importer::try_spelled_out_layer_norm(AttrReader& a) {
  const auto refuse = [&](const std::string& why) {
    spdlog::debug("import {}: not a spelled-out LayerNorm: {}", label(), why);
  };
  const std::string& x = node_->input(0);
  Operand* xo = find_tensor(x);
  if (xo == nullptr || !is_float(xo->type) || xo->literal) {
    return refuse("the input is not a FLOAT tensor computed at run time");
  }
  const Shape x_shape = xo->shape;
  const std::int64_t r = rank_of(x_shape);
  if (r < 2) return refuse("the input has rank " + std::to_string(r) + " (LayerNorm needs >= 2)");
  const std::optional<Ints> axes = reduce_axes(*node_, a);
  if (!axes || a.i("noop_with_empty_axes", 0) != 0 || !last_axis_only(*axes, a.i("keepdims", 1), r)) {
    return refuse("the mean is not over the last axis alone with keepdims = 1");
  }
  std::string why;
  std::optional<LayerNormCore> core = layer_norm_core(x, r, why);
  if (!core) return refuse(why);
  // Then [* gamma] [+ beta], constants of the normalized dimension's size
  // that do not broadcast the output.
  const std::int64_t c = x_shape.back();
  const std::optional<Values> gamma = layer_norm_affine("Mul", c, r, *core);
  const std::optional<Values> beta = layer_norm_affine("Add", c, r, *core);
  for (int i : core->taken) taken_nodes_.insert(i);
  Operand& xv = *xo;
  const ValueId scale = f32_constant(gamma ? *gamma : Values(sz(c), 1.0), {c}, "scale");
  const ValueId bias = f32_constant(beta ? *beta : Values(sz(c), 0.0), {c}, "bias");
  const ValueId y = emit(OpKind::LayerNorm, {f32(xv), scale, bias},
                         graph::LayerNormAttrs{static_cast<float>(core->epsilon)}, "layer_norm");
  tensors_[core->out] = make_float(y, x_shape);
  tensors_[core->out].dim_syms = xv.dim_syms;
}

std::optional<int> Importer::sole_plain_reader(const std::string& t, const char* op,
                                               std::initializer_list<const char*> attrs) const {
  const auto i = sole_onnx_consumer(t);
  if (!i || !plain_node(model_.graph().node(*i), op, attrs)) return std::nullopt;
  return i;
}

std::optional<Importer::LayerNormCore> Importer::layer_norm_core(const std::string& x,
                                                                 std::int64_t rank,
                                                                 std::string& why) const {
  const auto& g = model_.graph();
  const auto fail = [&why](const std::string& reason) -> std::optional<LayerNormCore> {
    why = reason;
    return std::nullopt;
  };
  // d = x - mean
  const std::string& mean = node_->output(0);
  const auto sub_i = sole_plain_reader(mean, "Sub");
  if (!sub_i || g.node(*sub_i).input(0) != x || g.node(*sub_i).input(1) != mean) {
    return fail("the mean is not read by one Sub(x, mean) alone");
  }
  const std::string& d = g.node(*sub_i).output(0);
  // d is read by Pow(d, 2) and Div(d, ..), nothing else (indices; -1: none).
  int pow_i = -1, div_i = -1;
  const auto d_readers = onnx_consumers_.find(d);
  if (d_readers != onnx_consumers_.end() && d_readers->second.size() == 2 &&
      std::none_of(g.output().begin(), g.output().end(),
                   [&](const auto& o) { return o.name() == d; })) {
    for (int i : d_readers->second) {
      const ::onnx::NodeProto& n = g.node(i);
      if (plain_node(n, "Pow") && n.input_size() == 2 && n.input(0) == d) pow_i = i;
      if (plain_node(n, "Div") && n.input_size() == 2 && n.input(0) == d) div_i = i;
    }
  }
  if (pow_i < 0 || div_i < 0) {
    return fail("x - mean ('" + d + "') is not read by one Pow and one Div alone");
  }
  if (scalar_tensor(g.node(pow_i).input(1)) != 2.0) {
    return fail(called(g.node(pow_i)) + " does not square (the exponent is not the constant 2)");
  }
  // var = ReduceMean(d^2), same axes
  const auto var_i = sole_plain_reader(g.node(pow_i).output(0), "ReduceMean",
                                         {"axes", "keepdims", "noop_with_empty_axes"});
  if (!var_i) return fail("d^2 is not read by one ReduceMean alone");
  {
    AttrReader va(g.node(*var_i), called(g.node(*var_i)));
    const std::optional<Ints> var_axes = reduce_axes(g.node(*var_i), va);
    if (!var_axes || va.i("noop_with_empty_axes", 0) != 0 ||
        !last_axis_only(*var_axes, va.i("keepdims", 1), rank)) {
      return fail("the variance is not a mean over the last axis alone with keepdims = 1");
    }
  }
  // var + eps
  const auto add_eps_i = sole_plain_reader(g.node(*var_i).output(0), "Add");
  const auto eps_name = add_eps_i ? other_input(g.node(*add_eps_i), g.node(*var_i).output(0))
                                  : std::nullopt;
  if (!eps_name) return fail("the variance is not read by one Add alone");
  const std::optional<double> eps = scalar_tensor(*eps_name);
  if (!eps || !std::isfinite(*eps) || *eps < 0.0) {
    return fail("epsilon ('" + *eps_name + "') is not a constant >= 0");
  }
  // sqrt(var + eps), then d / sqrt(..)
  const auto sqrt_i = sole_plain_reader(g.node(*add_eps_i).output(0), "Sqrt");
  if (!sqrt_i) return fail("var + eps is not read by one Sqrt alone");
  const std::string& sd = g.node(*sqrt_i).output(0);
  if (sole_plain_reader(sd, "Div") != div_i || g.node(div_i).input(1) != sd) {
    return fail("the standard deviation is not read by Div(x - mean, ..) alone");
  }
  return LayerNormCore{{*sub_i, pow_i, *var_i, *add_eps_i, *sqrt_i, div_i},
                       g.node(div_i).output(0), *eps};
}

std::optional<Values> Importer::layer_norm_affine(const char* op, std::int64_t channels,
                                                  std::int64_t rank, LayerNormCore& core) const {
  const auto& g = model_.graph();
  const auto i = sole_plain_reader(core.out, op);
  if (!i) return std::nullopt;
  const auto t = other_input(g.node(*i), core.out);
  std::optional<Literal> l;
  if (t) l = constant_tensor(*t);
  if (!l || l->type != kFloat || l->shape.empty() || l->shape.back() != channels ||
      i64(l->values().size()) != channels || rank_of(l->shape) > rank) {
    spdlog::debug("import {}: LayerNorm ends before {}: its other operand is not a FLOAT "
                  "constant of {} values",
                  label(), called(g.node(*i)), channels);
    return std::nullopt;
  }
  core.taken.push_back(*i);
  core.out = g.node(*i).output(0);
  return l->values();
}

}  // namespace qfuse::onnx::impl
