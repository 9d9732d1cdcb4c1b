// OpenVINO IR import: elementwise operators, activations, FakeQuantize, and
// the shape and data-movement operators (folded when their input is known).

#include <algorithm>
#include <cmath>
#include <numeric>

#include "graph/broadcast.hpp"
#include "graph/openvino/import_internal.hpp"

namespace qfuse::openvino::impl {

namespace {

OpKind binary_kind(const std::string& type) {
  if (type == "Add") return OpKind::Add;
  if (type == "Subtract") return OpKind::Subtract;
  if (type == "Multiply") return OpKind::Multiply;
  return OpKind::Divide;
}

std::shared_ptr<const ConstData> f32_data(Shape shape, Values v) {
  auto c = std::make_shared<ConstData>();
  c->type = OvType::f32;
  c->shape = std::move(shape);
  c->computed = std::move(v);
  return c;
}

}  // namespace

// --- elementwise ----------------------------------------------------------------

// Compressed weights continue: Subtract of a known zero point from
// Convert(codes), Multiply of Convert(codes) [- zero point] by a known scale,
// where the constant does not widen the weights' shape.
bool Importer::try_compressed_weights(OpKind kind, Operand& x, Operand& y) {
  const auto fits = [](const Operand& w, const Operand& p) {
    return p.known() && graph::broadcasts_to(p.shape, w.shape) && p.shape.size() <= w.shape.size();
  };
  if (kind == OpKind::Subtract && x.dq && !x.dq->zero_point && !x.dq->scale && fits(x, y)) {
    Operand o = x;
    o.dq = std::make_shared<DqWeight>(DqWeight{x.dq->codes, f32_data(y.shape, values_of(y)), nullptr});
    set_out(0, o);
    return true;
  }
  if (kind != OpKind::Multiply) return false;
  for (auto [w, s] : {std::pair{&x, &y}, std::pair{&y, &x}}) {
    if (w->dq && !w->dq->scale && !s->dq && fits(*w, *s)) {
      Operand o = *w;
      o.dq = std::make_shared<DqWeight>(
          DqWeight{w->dq->codes, w->dq->zero_point, f32_data(s->shape, values_of(*s))});
      set_out(0, o);
      return true;
    }
  }
  return false;
}

// Known operands: f32 arithmetic as the runtime's (each result rounded to
// f32), integers exactly (Divide truncates, or floors with m_pythondiv).
Values Importer::fold_binary(OpKind kind, const Operand& x, const Operand& y, const Shape& out,
                             bool python_div) const {
  const Values a = values_of(x), b = values_of(y);
  const auto ia = graph::broadcast_offsets(x.shape, out), ib = graph::broadcast_offsets(y.shape, out);
  const bool floating = is_float(x.type) || is_float(y.type);
  Values r(ia.size());
  for (std::size_t i = 0; i < r.size(); ++i) {
    const double p = a[ia[i]], q = b[ib[i]];
    double v = 0.0;
    switch (kind) {
      case OpKind::Add: v = p + q; break;
      case OpKind::Subtract: v = p - q; break;
      case OpKind::Multiply: v = p * q; break;
      default:
        if (!floating) {
          expect(q != 0.0, "divides by zero");
          v = python_div ? std::floor(p / q) : std::trunc(p / q);
        } else {
          v = static_cast<double>(static_cast<float>(p) / static_cast<float>(q));
        }
    }
    r[i] = floating ? static_cast<double>(static_cast<float>(v)) : v;
  }
  return r;
}

void Importer::op_binary(AttrReader& a) {
  expect_ports(2, 2, 1);
  const std::string broadcast = a.s("auto_broadcast", "numpy");
  const OpKind kind = binary_kind(layer_->type);
  const bool python_div = kind == OpKind::Divide && a.b("m_pythondiv", true);
  Operand& x = in(0);
  Operand& y = in(1);
  if (broadcast == "none") {
    expect(x.shape == y.shape, "operands " + to_string(x.shape) + " and " + to_string(y.shape) +
                                   " differ with auto_broadcast none");
  } else if (broadcast != "numpy") {
    a.unsupported_value("auto_broadcast", "'" + broadcast + "' (expected numpy or none)");
  }
  const auto out = graph::broadcast_shapes(x.shape, y.shape);
  expect(out.has_value(), "operands " + to_string(x.shape) + " and " + to_string(y.shape) +
                              " do not broadcast");
  if (is_float(x.type) != is_float(y.type)) {
    malformed("operands have element types " + std::string(ov_type_name(x.type)) + " and " +
              std::string(ov_type_name(y.type)));
  }
  if (try_compressed_weights(kind, x, y)) return;
  if (x.known() && y.known()) {
    const OvType t = is_float(x.type) ? OvType::f32 : x.type;
    set_out(0, make_known(t, *out, fold_binary(kind, x, y, *out, python_div)));
    return;
  }
  require_float(x, "input 0");
  const ValueId vx = f32(x);
  const ValueId vy = f32(y);
  set_out(0, make_float(emit(kind, {vx, vy}), *out));
}

void Importer::op_unary(AttrReader&) {
  expect_ports(1, 1, 1);
  static const std::map<std::string, OpKind, std::less<>> kKinds = {
      {"ReLU", OpKind::Relu}, {"Sigmoid", OpKind::Sigmoid},
      {"HSwish", OpKind::HSwish}, {"HSigmoid", OpKind::HSigmoid}};
  Operand& x = in(0);
  require_float(x, "the input");
  set_out(0, make_float(emit(kKinds.at(layer_->type), {f32(x)}), x.shape));
}

void Importer::op_clamp(AttrReader& a) {
  expect_ports(1, 1, 1);
  const double lo = a.f("min", 0.0), hi = a.f("max", 0.0);
  if (!a.has("min") || !a.has("max")) malformed("attributes 'min' and 'max' are required");
  expect(lo <= hi, "min " + std::to_string(lo) + " is above max " + std::to_string(hi));
  Operand& x = in(0);
  require_float(x, "the input");
  const graph::ClampAttrs c{static_cast<float>(lo), static_cast<float>(hi)};
  set_out(0, make_float(emit(OpKind::Clamp, {f32(x)}, c), x.shape));
}

// Swish(x, beta) = x * sigmoid(beta * x); beta 1 when absent.
void Importer::op_swish(AttrReader&) {
  expect_ports(1, 2, 1);
  Operand& x = in(0);
  require_float(x, "the input");
  double beta = 1.0;
  if (num_inputs() == 2) {
    const Values b = values_in(1, "beta");
    expect(b.size() == 1, "beta must hold one value");
    beta = b[0];
  }
  set_out(0, make_float(emit(OpKind::Swish, {f32(x)}, graph::AlphaAttrs{static_cast<float>(beta)}),
                        x.shape));
}

void Importer::op_gelu(AttrReader& a) {
  expect_ports(1, 1, 1);
  graph::GeluAttrs g;
  if (layer_->version == "opset7") {
    std::string mode = a.s("approximation_mode", "ERF");
    std::transform(mode.begin(), mode.end(), mode.begin(),
                   [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
    if (mode == "TANH") {
      g.approximation = graph::GeluApproximation::tanh;
    } else if (mode != "ERF") {
      a.unsupported_value("approximation_mode", "'" + mode + "' (expected ERF or TANH)");
    }
  }
  Operand& x = in(0);
  require_float(x, "the input");
  set_out(0, make_float(emit(OpKind::Gelu, {f32(x)}, g), x.shape));
}

// FakeQuantize(X, input_low, input_high, output_low, output_high), opset1:
// qfuse's FakeQuantize, with the checks the ONNX frontend's
// org.openvinotoolkit FakeQuantize gets (levels, inverted limits).
void Importer::op_fake_quantize(AttrReader& a) {
  expect_ports(5, 5, 1);
  const std::int64_t levels = a.i("levels", 0);
  if (!a.has("levels")) malformed("attribute 'levels' is missing");
  if (auto problem = graph::fake_quantize_levels_problem(levels)) malformed(*problem);
  const std::string broadcast = a.s("auto_broadcast", "numpy");
  if (broadcast != "numpy") a.unsupported_value("auto_broadcast", "= '" + broadcast + "'");
  static const char* kNames[] = {"input X", "input_low", "input_high", "output_low",
                                 "output_high"};
  for (std::size_t k = 0; k < 5; ++k) require_float(in(k), kNames[k]);
  if (in(1).known() && in(2).known()) {
    if (auto problem = graph::inverted_limits_problem(values_of(in(1)), values_of(in(2)))) {
      malformed(*problem);
    }
  }
  std::vector<ValueId> inputs;
  for (std::size_t k = 0; k < 5; ++k) inputs.push_back(f32(in(k)));
  const Shape shape = in(0).shape;
  set_out(0, make_float(emit(OpKind::FakeQuantize, std::move(inputs),
                             graph::FakeQuantizeAttrs{levels}),
                        shape));
}

// --- shapes ---------------------------------------------------------------------

void Importer::op_shape_of(AttrReader& a) {
  expect_ports(1, 1, 1);
  OvType t = OvType::i64;
  if (layer_->version == "opset3") {
    const std::string name = a.s("output_type", "i64");
    const auto type = ov_type_named(name);
    if (!type || (*type != OvType::i64 && *type != OvType::i32)) {
      a.unsupported_value("output_type", "'" + name + "' (expected i64 or i32)");
    }
    t = *type;
  }
  const Shape& s = in(0).shape;
  set_out(0, make_known(t, {i64(s.size())}, Values(s.begin(), s.end())));
}

// Reshape(x, shape): 0 copies x's dimension when special_zero, -1 takes the rest.
void Importer::op_reshape(AttrReader& a) {
  expect_ports(2, 2, 1);
  const bool special_zero = a.b("special_zero", false);
  if (!a.has("special_zero")) malformed("attribute 'special_zero' is missing");
  Operand& x = in(0);
  Ints target = ints_in(1, "the target shape");
  std::int64_t known = 1;
  int infer_at = -1;
  for (std::size_t d = 0; d < target.size(); ++d) {
    if (target[d] == 0 && special_zero) {
      expect(d < x.shape.size(), "special zero at " + std::to_string(d) + " past the input's rank");
      target[d] = x.shape[d];
    }
    if (target[d] == -1) {
      expect(infer_at < 0, "more than one -1 in the target shape");
      infer_at = static_cast<int>(d);
      continue;
    }
    expect(target[d] >= 0, "target dimension " + std::to_string(target[d]));
    known *= std::max<std::int64_t>(target[d], 1);
  }
  const std::int64_t count = element_count(x.shape);
  if (infer_at >= 0) {
    expect(known > 0 && count % known == 0,
           "cannot infer the -1 of " + to_string(target) + " for " + to_string(x.shape));
    target[sz(infer_at)] = count / known;
  }
  set_out(0, reshape(x, target));
}

void Importer::op_squeeze(AttrReader&) {
  expect_ports(1, 2, 1);
  Operand& x = in(0);
  const std::int64_t r = i64(x.shape.size());
  std::vector<bool> drop(x.shape.size(), false);
  if (num_inputs() == 2) {
    for (std::int64_t axis : ints_in(1, "axes")) {
      const std::int64_t d = normalize_axis(axis, r, "axis");
      expect(x.shape[sz(d)] == 1, "squeezes dimension " + std::to_string(d) + " of size " +
                                      std::to_string(x.shape[sz(d)]));
      drop[sz(d)] = true;
    }
  } else {
    for (std::size_t d = 0; d < x.shape.size(); ++d) drop[d] = x.shape[d] == 1;
  }
  Shape s;
  for (std::size_t d = 0; d < x.shape.size(); ++d) {
    if (!drop[d]) s.push_back(x.shape[d]);
  }
  set_out(0, reshape(x, s));
}

void Importer::op_unsqueeze(AttrReader&) {
  expect_ports(2, 2, 1);
  Operand& x = in(0);
  const Ints axes = ints_in(1, "axes");
  const std::int64_t r = i64(x.shape.size() + axes.size());
  std::vector<bool> added(sz(r), false);
  for (std::int64_t axis : axes) {
    const std::int64_t d = normalize_axis(axis, r, "axis");
    expect(!added[sz(d)], "axis " + std::to_string(axis) + " repeats");
    added[sz(d)] = true;
  }
  Shape s;
  std::size_t k = 0;
  for (std::size_t d = 0; d < sz(r); ++d) s.push_back(added[d] ? 1 : x.shape[k++]);
  set_out(0, reshape(x, s));
}

// Transpose(x, order); an empty order reverses the dimensions.
void Importer::op_transpose(AttrReader&) {
  expect_ports(2, 2, 1);
  Operand& x = in(0);
  Ints perm = ints_in(1, "the order");
  const std::size_t r = x.shape.size();
  if (perm.empty()) {
    for (std::size_t d = r; d-- > 0;) perm.push_back(i64(d));
  }
  std::vector<bool> seen(r, false);
  expect(perm.size() == r, "order has " + std::to_string(perm.size()) + " entries for rank " +
                               std::to_string(r));
  for (std::int64_t p : perm) {
    expect(p >= 0 && p < i64(r) && !seen[sz(p)], "order " + to_string(perm) + " is not a permutation");
    seen[sz(p)] = true;
  }
  if (x.known()) {
    set_out(0, transposed_known(x, perm));
    return;
  }
  Shape s;
  for (std::int64_t p : perm) s.push_back(x.shape[sz(p)]);
  set_out(0, make_float(emit(OpKind::Transpose, {native(x)}, graph::TransposeAttrs{perm}), s));
  outputs_[layer_index_][0].type = x.type;
}

void Importer::op_concat(AttrReader& a) {
  expect_ports(1, SIZE_MAX, 1);
  const Shape& first = in(0).shape;
  const std::int64_t axis = normalize_axis(a.i("axis", 0), i64(first.size()), "axis");
  Shape out = first;
  out[sz(axis)] = 0;
  bool all_known = true;
  for (std::size_t k = 0; k < num_inputs(); ++k) {
    const Operand& o = in(k);
    expect(o.shape.size() == first.size(), "inputs differ in rank");
    for (std::size_t d = 0; d < first.size(); ++d) {
      expect(d == sz(axis) || o.shape[d] == first[d],
             "input " + std::to_string(k) + " " + to_string(o.shape) + " does not match " +
                 to_string(first) + " off the axis");
    }
    expect(is_float(o.type) == is_float(in(0).type), "inputs differ in element type");
    out[sz(axis)] += o.shape[sz(axis)];
    all_known = all_known && o.known();
  }
  if (all_known) {
    // Blocks of `inner` values along the axis, input after input.
    const std::int64_t outer = element_count(Shape(first.begin(), first.begin() + axis));
    Values v;
    v.reserve(sz(element_count(out)));
    std::vector<Values> parts;
    for (std::size_t k = 0; k < num_inputs(); ++k) parts.push_back(values_of(in(k)));
    for (std::int64_t o = 0; o < outer; ++o) {
      for (std::size_t k = 0; k < num_inputs(); ++k) {
        const Shape& s = in(k).shape;
        const std::int64_t block = element_count(Shape(s.begin() + axis, s.end()));
        v.insert(v.end(), parts[k].begin() + o * block, parts[k].begin() + (o + 1) * block);
      }
    }
    set_out(0, make_known(is_float(in(0).type) ? OvType::f32 : in(0).type, out, std::move(v)));
    return;
  }
  std::vector<ValueId> inputs;
  for (std::size_t k = 0; k < num_inputs(); ++k) {
    Operand& o = in(k);
    if (o.shape[sz(axis)] == 0) continue;
    inputs.push_back(f32(o));
  }
  set_out(0, make_float(emit(OpKind::Concat, std::move(inputs), graph::ConcatAttrs{axis}), out));
}

// One Slice per output read (YOLOv8's C2f splits its channels so).
void Importer::split_into(const std::vector<std::int64_t>& sizes, std::int64_t axis) {
  Operand& x = in(0);
  std::int64_t begin = 0;
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    graph::SliceAttrs sa;
    sa.begin.assign(x.shape.size(), 0);
    sa.begin[sz(axis)] = begin;
    sa.size = x.shape;
    sa.size[sz(axis)] = sizes[k];
    begin += sizes[k];
    if (!output_read(k)) continue;
    if (x.known()) {
      const Values v = values_of(x);
      const std::int64_t outer = element_count(Shape(x.shape.begin(), x.shape.begin() + axis));
      const std::int64_t inner = element_count(Shape(x.shape.begin() + axis + 1, x.shape.end()));
      Values part;
      for (std::int64_t o = 0; o < outer; ++o) {
        const std::int64_t from = (o * x.shape[sz(axis)] + sa.begin[sz(axis)]) * inner;
        part.insert(part.end(), v.begin() + from, v.begin() + from + sizes[k] * inner);
      }
      set_out(k, make_known(is_float(x.type) ? OvType::f32 : x.type, sa.size, std::move(part)));
      continue;
    }
    Operand y = x;
    y.shape = sa.size;
    y.value = emit(OpKind::Slice, {x.value}, sa, std::to_string(k));
    set_out(k, y);
  }
}

void Importer::op_split(AttrReader& a) {
  const std::int64_t n = a.i("num_splits", 0);
  expect(n >= 1, "num_splits must be at least 1 (got " + std::to_string(n) + ")");
  expect_ports(2, 2, sz(n));
  const Ints axis_v = ints_in(1, "the axis");
  expect(axis_v.size() == 1, "the axis must be one value");
  const Shape& s = in(0).shape;
  const std::int64_t axis = normalize_axis(axis_v[0], i64(s.size()), "axis");
  expect(s[sz(axis)] % n == 0, "dimension " + std::to_string(s[sz(axis)]) +
                                   " does not split into " + std::to_string(n) + " equal parts");
  split_into(std::vector<std::int64_t>(sz(n), s[sz(axis)] / n), axis);
}

void Importer::op_variadic_split(AttrReader&) {
  expect(num_inputs() == 3, "has " + std::to_string(num_inputs()) + " inputs (expected 3)");
  const Ints axis_v = ints_in(1, "the axis");
  expect(axis_v.size() == 1, "the axis must be one value");
  const Shape& s = in(0).shape;
  const std::int64_t axis = normalize_axis(axis_v[0], i64(s.size()), "axis");
  Ints lengths = ints_in(2, "split_lengths");
  expect_ports(3, 3, lengths.size());
  std::int64_t total = 0;
  int infer_at = -1;
  for (std::size_t k = 0; k < lengths.size(); ++k) {
    if (lengths[k] == -1) {
      expect(infer_at < 0, "split_lengths has more than one -1");
      infer_at = static_cast<int>(k);
      continue;
    }
    expect(lengths[k] >= 0, "split length " + std::to_string(lengths[k]));
    total += lengths[k];
  }
  if (infer_at >= 0) lengths[sz(infer_at)] = s[sz(axis)] - total;
  const std::int64_t sum = std::accumulate(lengths.begin(), lengths.end(), std::int64_t{0});
  expect(sum == s[sz(axis)] && (infer_at < 0 || lengths[sz(infer_at)] >= 0),
         "split_lengths " + to_string(lengths) + " do not sum to the dimension " +
             std::to_string(s[sz(axis)]));
  for (std::int64_t l : lengths) {
    if (l == 0) unsupported("an empty part (split length 0)");
  }
  split_into(lengths, axis);
}

// Gather(data, indices, axis): folded when both are known; else qfuse's
// Gather (the table or the indices a constant).
void Importer::op_gather(AttrReader& a) {
  expect_ports(3, 3, 1);
  if (layer_->version != "opset1" && a.i("batch_dims", 0) != 0) {
    a.unsupported_value("batch_dims", "other than 0");
  }
  Operand& data = in(0);
  Operand& idx = in(1);
  const Ints axis_v = ints_in(2, "the axis");
  expect(axis_v.size() == 1, "the axis must be one value");
  const std::int64_t axis = normalize_axis(axis_v[0], i64(data.shape.size()), "axis");
  expect(!is_float(idx.type), "indices have element type " + std::string(ov_type_name(idx.type)));
  Shape out(data.shape.begin(), data.shape.begin() + axis);
  out.insert(out.end(), idx.shape.begin(), idx.shape.end());
  out.insert(out.end(), data.shape.begin() + axis + 1, data.shape.end());
  const std::int64_t dim = data.shape[sz(axis)];
  if (data.known() && idx.known()) {
    const Values v = values_of(data);
    const Ints ix = ints_in(1, "indices");
    const std::int64_t outer = element_count(Shape(data.shape.begin(), data.shape.begin() + axis));
    const std::int64_t inner = element_count(Shape(data.shape.begin() + axis + 1, data.shape.end()));
    Values r;
    for (std::int64_t o = 0; o < outer; ++o) {
      for (std::int64_t i : ix) {
        expect(i >= -dim && i < dim, "index " + std::to_string(i) + " is out of range for " +
                                         std::to_string(dim));
        const std::int64_t at = (o * dim + (i < 0 ? i + dim : i)) * inner;
        r.insert(r.end(), v.begin() + at, v.begin() + at + inner);
      }
    }
    set_out(0, make_known(is_float(data.type) ? OvType::f32 : data.type, out, std::move(r)));
    return;
  }
  const ValueId table = is_float(data.type) ? f32(data) : native(data);
  const ValueId y = emit(OpKind::Gather, {table, native(idx)}, graph::GatherAttrs{axis});
  Operand o = make_float(y, out);
  o.type = is_float(data.type) ? OvType::f32 : data.type;
  set_out(0, o);
}

}  // namespace qfuse::openvino::impl
