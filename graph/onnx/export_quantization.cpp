// ONNX export of quantization and of the ops on codes: Convert, Quantize,
// Dequantize, FakeQuantize, DynamicQuantize, Lookup, GateMultiply, CodeAdd,
// MeanInnerProduct and the int8 average pool, each written as ONNX's
// QuantizeLinear / DequantizeLinear where that is the same arithmetic, else
// spelled out in f32 as qfuse computes it.

#include <algorithm>
#include <cmath>
#include <variant>

#include "composer/fake_quantize_formula.hpp"
#include "graph/onnx/export_internal.hpp"

namespace qfuse::onnx::export_impl {

namespace {

// The axis along which the constant `v` varies over `out`, -1 for one value;
// nullopt when it is no f32 constant, varies along more than one axis or does
// not broadcast onto `out`.
std::optional<std::int64_t> constant_axis(const graph::Graph& g, graph::ValueId v,
                                          const Shape& out) {
  const graph::Value& c = g.value(v);
  if (!c.is_constant() || c.type != ElementType::f32) return std::nullopt;
  if (element_count(c.shape) == 1) return -1;
  if (c.shape.size() != out.size()) return std::nullopt;
  std::optional<std::int64_t> axis;
  for (std::size_t d = 0; d < out.size(); ++d) {
    if (c.shape[d] == 1) continue;
    if (axis || c.shape[d] != out[d]) return std::nullopt;
    axis = static_cast<std::int64_t>(d);
  }
  return axis;
}

// A zero point of codes of type `codes`: integers within that type.
bool integral_zero_point(const Tensor& zp, ElementType codes) {
  const double lo = codes == ElementType::s8 ? -128.0 : 0.0;
  for (std::int64_t i = 0; i < zp.size(); ++i) {
    const double z = zp.as_float(i);
    if (z != std::nearbyint(z) || z < lo || z > lo + 255.0) return false;
  }
  return true;
}

}  // namespace

// f32 -> 8-bit: clamp(round((x - lo) * 255 / (hi - lo)), 0, 255) + type min,
// a QuantizeLinear when lo sits on the grid (it does for Q/DQ models).
void Exporter::convert(const Node& n) {
  const auto& a = n.attr<graph::ConvertAttrs>();
  const graph::Value& x = g_.value(n.inputs[0]);
  const graph::Value& y = g_.value(n.outputs[0]);
  if (!a.quantizes()) {
    if (y.type == ElementType::f32 && is_int8(x.type)) {
      // Codes as numbers: a DequantizeLinear with scale 1 and zero point 0
      // (exact), which readers take for the int8 operand it is.
      const std::string q = in(n.inputs[0]);
      const std::string sc = w_.constant(n.name + "/scale", kFloat, std::vector<float>{1.0f}, {});
      const std::string zc =
          w_.constant(n.name + "/zero_point", onnx_type(x.type), std::vector<double>{0.0}, {});
      w_.node("DequantizeLinear", n.name, {q, sc, zc}, name(n.outputs[0]));
      return;
    }
    if (y.type == ElementType::f32 || (y.type == ElementType::s32 && x.type != ElementType::f32)) {
      // Exact: integers to f32 (below 2^24, as the IR's Convert) or to s32.
      auto& c = w_.node("Cast", n.name, {in(n.inputs[0])}, name(n.outputs[0]));
      Writer::int_attr(c, "to", onnx_type(y.type));
      return;
    }
    if (is_int8(y.type)) {
      // Rounds half to even and saturates, as Convert does (a Cast to an
      // 8-bit type would wrap around).
      quantize(n.name, in_f32(n.inputs[0], n.name), onnx_type(y.type), name(n.outputs[0]));
      return;
    }
    // f32 -> s32: round half to even, then a Cast (which truncates).
    const std::string r = w_.op("Round", n.name + "/round", {in(n.inputs[0])});
    auto& c = w_.node("Cast", n.name, {r}, name(n.outputs[0]));
    Writer::int_attr(c, "to", kInt32);
    return;
  }
  if (x.type != ElementType::f32) refuse(n, "quantizes a non-f32 tensor");
  quantize_as(a, y.type, in(n.inputs[0]), n.name, name(n.outputs[0]));
}

// A Quantize of constant weights (PyTorch's export: QuantizeLinear on an f32
// initializer): its codes, computed as ONNX's QuantizeLinear computes them
// (composer::quantize_linear), written as an initializer, so that the
// DequantizeLinear after it reads constant codes.
void Exporter::quantized_constant(const Node& n) {
  const auto& a = n.attr<graph::QuantizeAttrs>();
  const graph::Value& x = g_.value(n.inputs[0]);
  const Tensor& t = *x.constant;
  std::int64_t inner = 1;
  if (!a.per_tensor()) {
    for (std::size_t d = static_cast<std::size_t>(a.axis) + 1; d < x.shape.size(); ++d) inner *= x.shape[d];
  }
  std::vector<std::int32_t> codes(static_cast<std::size_t>(t.size()));
  for (std::int64_t i = 0; i < t.size(); ++i) {
    const auto c = a.per_tensor() ? std::size_t{0}
                                  : static_cast<std::size_t>((i / inner) % x.shape[static_cast<std::size_t>(a.axis)]);
    codes[static_cast<std::size_t>(i)] = composer::quantize_linear(
        t.as_float(i), a.scale_at(c), a.zero_point_at(c), a.code_min(), a.code_max());
  }
  w_.named_constant(name(n.outputs[0]), onnx_type(a.to), codes, x.shape);
}

// Constant weights as the importers write their dequantize (DequantizeLinear
// on constant codes; OpenVINO's compressed weights): Multiply(Convert<f32>(q)
// [- zp], s) with q constant u8 / s8 of the product's shape, zp constant
// integers on q's type and s constant f32, each per tensor or along one
// axis. The nodes the form spans (the Convert, the Subtract), which the
// driver then leaves out; empty when `mul` is not one.
//
// Also the integers relative to a zero point that the QOperator and integer
// operators' imports compute on: Subtract(Convert<f32>(q), zp), q u8 / s8
// (constant or computed at run time), is a DequantizeLinear with scale 1
// (exact), so that a reader finds the layer's int8 operands as it does in a
// QDQ model.
std::vector<graph::NodeId> Exporter::weight_dequantize_nodes(const Node& mul) const {
  if (mul.kind == OpKind::Subtract) return zero_point_dequantize_nodes(mul);
  if (mul.kind != OpKind::Multiply) return {};
  const Shape& out = g_.value(mul.outputs[0]).shape;
  const auto axis_of = [&](graph::ValueId v) { return constant_axis(g_, v, out); };
  for (std::size_t side = 0; side < 2; ++side) {
    const auto scale_axis = axis_of(mul.inputs[1 - side]);
    if (!scale_axis) continue;
    std::vector<graph::NodeId> spanned;
    graph::ValueId t = mul.inputs[side];
    const auto sole_reader = [&](graph::ValueId v, graph::NodeId reader) {
      const auto readers = g_.consumers(v);
      return readers.size() == 1 && readers[0] == reader && !g_.is_graph_output(v);
    };
    graph::NodeId reader = g_.value(mul.outputs[0]).producer;
    const graph::NodeId p = g_.value(t).producer;
    if (!p.valid() || !sole_reader(t, reader)) continue;
    const Node* cv = &g_.node(p);
    if (cv->kind == OpKind::Subtract) {
      const auto zp_axis = axis_of(cv->inputs[1]);
      if (!zp_axis || (*zp_axis != -1 && *scale_axis != -1 && *zp_axis != *scale_axis)) continue;
      spanned.push_back(p);
      reader = p;
      t = cv->inputs[0];
      const graph::NodeId q = g_.value(t).producer;
      if (!q.valid() || !sole_reader(t, reader)) continue;
      cv = &g_.node(q);
    }
    if (cv->kind != OpKind::Convert || cv->attr<graph::ConvertAttrs>().quantizes() ||
        g_.value(cv->outputs[0]).type != ElementType::f32) {
      continue;
    }
    const graph::Value& codes = g_.value(cv->inputs[0]);
    if (!codes.is_constant() || !is_int8(codes.type) || codes.shape != out) continue;
    if (!spanned.empty() &&
        !integral_zero_point(*g_.value(g_.node(spanned[0]).inputs[1]).constant, codes.type)) {
      continue;
    }
    spanned.push_back(g_.value(cv->outputs[0]).producer);
    return spanned;
  }
  return {};
}

// Subtract(Convert<f32>(q), zp) as weight_dequantize_nodes describes it: the
// Convert it spans, or empty.
std::vector<graph::NodeId> Exporter::zero_point_dequantize_nodes(const Node& sub) const {
  const Shape& out = g_.value(sub.outputs[0]).shape;
  if (!constant_axis(g_, sub.inputs[1], out)) return {};  // per tensor or along one axis
  const graph::ValueId t = sub.inputs[0];
  const graph::NodeId p = g_.value(t).producer;
  if (!p.valid() || g_.is_graph_output(t)) return {};
  const auto readers = g_.consumers(t);
  if (readers.size() != 1 || readers[0] != g_.value(sub.outputs[0]).producer) return {};
  const Node& cv = g_.node(p);
  if (cv.kind != OpKind::Convert || cv.attr<graph::ConvertAttrs>().quantizes() ||
      g_.value(cv.outputs[0]).type != ElementType::f32) {
    return {};
  }
  const graph::Value& codes = g_.value(cv.inputs[0]);
  if (!is_int8(codes.type) || codes.shape != out) return {};
  if (!integral_zero_point(*g_.value(sub.inputs[1]).constant, codes.type)) return {};
  return {p};
}

// The form weight_dequantize_nodes found, as one DequantizeLinear.
void Exporter::weight_dequantize(const Node& mul, const std::vector<graph::NodeId>& spanned) {
  const Node& cv = g_.node(spanned.back());
  // The zero point's Subtract: `mul` itself when it is one (scale 1).
  const Node* sub = mul.kind == OpKind::Subtract ? &mul
                    : spanned.size() == 2        ? &g_.node(spanned[0])
                                                 : nullptr;
  const graph::ValueId codes = cv.inputs[0];
  const Tensor one = Tensor::from_vector<float>({}, {1.0f});
  const bool scale_first = mul.kind == OpKind::Multiply && g_.value(mul.inputs[0]).is_constant() &&
                           g_.value(mul.inputs[1]).producer.valid() &&
                           g_.value(mul.inputs[1]).producer == (sub ? spanned[0] : spanned.back());
  const Tensor& s =
      mul.kind == OpKind::Multiply ? *g_.value(mul.inputs[scale_first ? 0 : 1]).constant : one;
  const Shape& out = g_.value(mul.outputs[0]).shape;
  std::int64_t axis = -1;
  const auto note_axis = [&](const Shape& shape) {
    if (element_count(shape) == 1) return;
    for (std::size_t d = 0; d < shape.size(); ++d) {
      if (shape[d] != 1) axis = static_cast<std::int64_t>(d);
    }
  };
  note_axis(s.shape());
  if (sub) note_axis(g_.value(sub->inputs[1]).shape);
  const std::size_t n = axis < 0 ? 1 : static_cast<std::size_t>(out[static_cast<std::size_t>(axis)]);
  const auto along = [&](const Tensor& t, std::size_t c) {
    return t.as_float(element_count(t.shape()) == 1 ? 0 : static_cast<std::int64_t>(c));
  };
  std::vector<float> scale(n);
  std::vector<double> zero(n, 0.0);
  for (std::size_t c = 0; c < n; ++c) {
    scale[c] = along(s, c);
    if (sub) zero[c] = along(*g_.value(sub->inputs[1]).constant, c);
  }
  const Shape dims = axis < 0 ? Shape{} : Shape{static_cast<std::int64_t>(n)};
  const std::string& b = mul.name;
  const std::string sc = w_.constant(b + "/scale", kFloat, scale, dims);
  const int type = onnx_type(g_.value(codes).type);
  const std::string zc = w_.constant(b + "/zero_point", type, zero, dims);
  const std::string q = in(codes);
  const std::string y = name(mul.outputs[0]);
  auto& dq = w_.node("DequantizeLinear", b, {q, sc, zc}, y);
  if (axis >= 0) Writer::int_attr(dq, "axis", axis);
}

// The Quantize `a` of the f32 tensor `xin`, into `out`: ONNX's own
// QuantizeLinear, the same arithmetic. Onto fewer codes than the type holds,
// a Clip follows (as torch writes its reduce_range).
void Exporter::quantize_linear(const graph::QuantizeAttrs& a, const std::string& xin,
                               const std::string& base, const std::string& out) {
  const int zt = onnx_type(a.to);
  const bool narrow = a.levels != 256;
  const std::string q = narrow ? out + "/codes" : out;
  const Shape dims = a.per_tensor() ? Shape{} : Shape{static_cast<std::int64_t>(
                                                    std::max(a.scale.size(), a.zero_point.size()))};
  std::vector<float> scale;
  std::vector<double> zero;
  for (std::size_t c = 0; c < (dims.empty() ? 1 : static_cast<std::size_t>(dims[0])); ++c) {
    scale.push_back(a.scale_at(c));
    zero.push_back(static_cast<double>(a.zero_point_at(c)));
  }
  auto& node = w_.node("QuantizeLinear", base,
                       {xin, w_.constant(base + "/scale", kFloat, scale, dims),
                        w_.constant(base + "/zero_point", zt, zero, dims)},
                       q);
  if (!dims.empty()) Writer::int_attr(node, "axis", a.axis);
  if (narrow) {
    w_.node("Clip", base + "/levels",
            {q, w_.constant(base + "/code_min", zt, std::vector<double>{double(a.code_min())}, {}),
             w_.constant(base + "/code_max", zt, std::vector<double>{double(a.code_max())}, {})},
            out);
  }
}

// The quantizing Convert `a` (by ranges) onto `to` of the f32 tensor `xin`, into `out`.
void Exporter::quantize_as(const graph::ConvertAttrs& a, ElementType to, const std::string& xin,
                           const std::string& base, const std::string& out) {
  const int zt = onnx_type(to);
  const composer::FakeQuantizeScales fs =
      composer::fake_quantize_scales(a.input_low, a.input_high, 0.0, 255.0, 256);
  const double scale = fs.input_scale;
  const double type_min = to == ElementType::s8 ? -128.0 : 0.0;
  const double zp = fs.input_zero + type_min;
  if (std::abs(zp - std::nearbyint(zp)) < 1e-4) {
    w_.node("QuantizeLinear", base,
            {xin, w_.constant(base + "/scale", kFloat, std::vector<double>{scale}, {}),
             w_.constant(base + "/zero_point", zt, std::vector<double>{std::nearbyint(zp)}, {})},
            out);
    return;
  }
  // The grid does not hold zero: (x - lo) / scale + type min, rounded.
  std::string t =
      w_.op("Sub", base + "/shift",
            {xin, w_.constant(base + "/lo", kFloat, std::vector<float>{a.input_low}, {})});
  t = w_.op("Mul", base + "/scale",
            {t, w_.constant(base + "/inv_scale", kFloat, std::vector<double>{1.0 / scale}, {})});
  if (type_min != 0) {
    t = w_.op("Add", base + "/type_min",
              {t, w_.constant(base + "/min", kFloat, std::vector<double>{type_min}, {})});
  }
  quantize(base, t, zt, out);
}

// QuantizeLinear(x, 1, 0 of type zt) into `out`.
void Exporter::quantize(const std::string& base, const std::string& x, int zt,
                        const std::string& out) {
  w_.node("QuantizeLinear", base + "/round",
          {x, w_.constant(base + "/one", kFloat, std::vector<float>{1.0f}, {}),
           w_.constant(base + "/zero", zt, std::vector<std::int32_t>{0}, {})},
          out);
}

// Dequantize: ONNX's DequantizeLinear (the same two f32 operations) where
// every zero point is an integer of the codes' type (0 for s32); else the
// Cast, Sub and Mul it computes.
void Exporter::dequantize(const Node& n, const std::string& y) {
  const auto& a = n.attr<graph::DequantizeAttrs>();
  const graph::Value& x = g_.value(n.inputs[0]);
  const std::size_t count = std::max(a.scale.size(), a.zero_point.size());
  const double lo = x.type == ElementType::u8 ? 0.0 : x.type == ElementType::s8 ? -128.0 : 0.0;
  const double hi = x.type == ElementType::u8 ? 255.0 : x.type == ElementType::s8 ? 127.0 : 0.0;
  std::vector<float> scale(count), zero(count);
  bool integral = true;
  for (std::size_t c = 0; c < count; ++c) {
    scale[c] = a.scale_at(c);
    zero[c] = a.zero_point_at(c);
    integral = integral && zero[c] == std::nearbyint(zero[c]) && zero[c] >= lo && zero[c] <= hi;
  }
  if (integral) {
    const Shape dims = count == 1 ? Shape{} : Shape{static_cast<std::int64_t>(count)};
    auto& dq = w_.node("DequantizeLinear", n.name,
                       {in(n.inputs[0]), w_.constant(n.name + "/scale", kFloat, scale, dims),
                        w_.constant(n.name + "/zero_point", onnx_type(x.type), zero, dims)},
                       y);
    if (count > 1) Writer::int_attr(dq, "axis", a.axis);
    return;
  }
  Shape dims(x.shape.size(), 1);
  if (count > 1) dims[static_cast<std::size_t>(a.axis)] = static_cast<std::int64_t>(count);
  std::string t = cast(in(n.inputs[0]), kFloat, n.name + "/to_f32");
  t = w_.op("Sub", n.name + "/zero_point",
            {t, w_.constant(n.name + "/zero_point", kFloat, zero, dims)});
  w_.node("Mul", n.name, {t, w_.constant(n.name + "/scale", kFloat, scale, dims)}, y);
}

// A FakeQuantize of constant weights whose ranges, per tensor or per
// channel along one axis, put zero on a level and every level on s8 (NNCF's
// and OpenVINO's weights: 255 levels over [-s_c, s_c]): the codes, each
// level by the range definition less the zero level, and
// DequantizeLinear(codes, S_c, 0) along that axis, S_c = (ih - il) / (L - 1).
// Output ranges equal to the input ranges only. False when it does not fit.
bool Exporter::constant_on_s8_grid(const Node& n, const std::string& y) {
  const graph::Value& x = g_.value(n.inputs[0]);
  if (!x.is_constant() || x.type != ElementType::f32 || x.shape.empty()) return false;
  const auto values = [&](std::size_t i) { return graph::constant_f32(g_, n.inputs[i]); };
  const auto il = values(1), ih = values(2), ol = values(3), oh = values(4);
  if (!il || !ih || !ol || !oh || *il != *ol || *ih != *oh || il->size() != ih->size()) {
    return false;
  }
  // The channel axis: the one dimension of the limits above 1.
  const graph::Value& lim = g_.value(n.inputs[1]);
  std::size_t axis = 0;
  const std::size_t channels = il->size();
  if (channels > 1) {
    const Shape& ls = lim.shape;
    if (ls.size() != x.shape.size()) return false;
    std::size_t found = ls.size();
    for (std::size_t d = 0; d < ls.size(); ++d) {
      if (ls[d] == 1) continue;
      if (found != ls.size() || ls[d] != x.shape[d] || static_cast<std::size_t>(ls[d]) != channels) {
        return false;
      }
      found = d;
    }
    if (found == ls.size()) return false;
    axis = found;
  }
  const double steps = static_cast<double>(n.attr<graph::FakeQuantizeAttrs>().levels - 1);
  std::vector<double> zero(channels);
  std::vector<float> scale(channels);
  for (std::size_t c = 0; c < channels; ++c) {
    const double lo = (*il)[c], hi = (*ih)[c];
    if (!(lo < hi)) return false;
    const double z = -lo * steps / (hi - lo);
    if (!graph::is_near_integer(z)) return false;
    zero[c] = std::nearbyint(z);
    if (-zero[c] < -128.0 || steps - zero[c] > 127.0) return false;
    scale[c] = static_cast<float>((hi - lo) / steps);
  }
  std::int64_t inner = 1;
  for (std::size_t d = axis + 1; d < x.shape.size(); ++d) inner *= x.shape[d];
  const Tensor& w = *x.constant;
  std::vector<std::int32_t> codes(static_cast<std::size_t>(w.size()));
  for (std::int64_t i = 0; i < w.size(); ++i) {
    const auto c = channels == 1 ? 0 : static_cast<std::size_t>((i / inner) % x.shape[axis]);
    const double level =
        composer::fake_quantize_level(w.as_float(i), (*il)[c], (*ih)[c], steps);
    codes[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(level - zero[c]);
  }
  const std::string& b = n.name;
  const std::string q = w_.constant(b + "/codes", kInt8, codes, x.shape);
  const Shape per = channels == 1 ? Shape{} : Shape{static_cast<std::int64_t>(channels)};
  const std::string sc = w_.constant(b + "/scale", kFloat, scale, per);
  const std::string zc =
      w_.constant(b + "/zero_point", kInt8, std::vector<std::int32_t>(channels, 0), per);
  auto& dq = w_.node("DequantizeLinear", b, {q, sc, zc}, y);
  if (channels > 1) Writer::int_attr(dq, "axis", static_cast<std::int64_t>(axis));
  return true;
}

void Exporter::fake_quantize(const Node& n, const std::string& y) {
  const auto& a = n.attr<graph::FakeQuantizeAttrs>();
  const std::string& b = n.name;
  const std::string x = in(n.inputs[0]);
  const double steps = static_cast<double>(a.levels - 1);
  // By its ranges. A constant inverted range (il > ih) sends x <= ih to ol
  // and x > il to oh, between them a decreasing level: no clamp does that.
  const auto values = [&](std::size_t i) { return graph::constant_f32(g_, n.inputs[i]); };
  const auto il = values(1), ih = values(2), ol = values(3), oh = values(4);
  if (il && ih) {
    const std::size_t m = std::max(il->size(), ih->size());
    const auto l = graph::expand(*il, m), h = graph::expand(*ih, m);
    for (std::size_t c = 0; c < m; ++c) {
      if (!(l[c] < h[c])) {
        refuse(n, "an empty or inverted input range [" + std::to_string(l[c]) + ", " +
                      std::to_string(h[c]) + "] (a step function no ONNX operator qfuse reads "
                      "back expresses)");
      }
    }
  }
  if (constant_on_s8_grid(n, y)) return;
  // One range on a u8 grid (256 levels, zero a code, output = input
  // ranges): QuantizeLinear -> DequantizeLinear with S = (ih - il) / 255.
  if (a.levels == 256 && il && ih && ol && oh && il->size() == 1 && ih->size() == 1 &&
      *il == *ol && *ih == *oh) {
    const composer::FakeQuantizeScales fs =
        composer::fake_quantize_scales((*il)[0], (*ih)[0], (*ol)[0], (*oh)[0], 256);
    const double s = fs.input_scale, z = fs.input_zero;
    if (graph::is_near_integer(z) && std::nearbyint(z) >= 0 && std::nearbyint(z) <= 255) {
      const std::string sc = w_.scalar(b + "/scale", s);
      const std::string zc =
          w_.constant(b + "/zero_point", kUint8, std::vector<double>{std::nearbyint(z)}, {});
      const std::string q = w_.op("QuantizeLinear", b + "/quantize", {x, sc, zc});
      w_.node("DequantizeLinear", b, {q, sc, zc}, y);
      return;
    }
  }
  // round(clamp((x - il) * (L - 1) / (ih - il), 0, L - 1)) * (oh - ol) / (L - 1) + ol
  const std::string lo = in(n.inputs[1]);
  std::string t = w_.op("Sub", b + "/shift", {x, lo});
  t = w_.op("Mul", b + "/steps", {t, w_.scalar(b + "/levels", steps)});
  t = w_.op("Div", b + "/range", {t, w_.op("Sub", b + "/in_range", {in(n.inputs[2]), lo})});
  t = w_.op("Max", b + "/lo", {t, w_.scalar(b + "/zero", 0.0)});
  t = w_.op("Min", b + "/hi", {t, w_.scalar(b + "/top", steps)});
  t = w_.op("Round", b + "/round", {t});
  t = w_.op("Mul", b + "/out",
            {t, w_.op("Sub", b + "/out_range", {in(n.inputs[4]), in(n.inputs[3])})});
  t = w_.op("Div", b + "/out_steps", {t, w_.scalar(b + "/levels_out", steps)});
  w_.node("Add", b, {t, in(n.inputs[3])}, y);
}

// DynamicQuantizeLinear writes its scale and zero point as scalars (rank 0)
// where qfuse's are [1]: each is reshaped to [1] under qfuse's name where
// anything but a dynamic layer's zero point reads it (MatMulInteger takes a
// scalar a_zero_point, or one per row of A), and a dynamic layer reads the
// scalar (zero_point_scalar).
void Exporter::dynamic_quantize(const Node& n, const std::string& y) {
  spell_dynamic_quantize(n, in(n.inputs[0]), 0, y);
}

// DynamicQuantizeLinear of x writing n's outputs from `codes` on (codes,
// scale, zero point); the codes named y.
void Exporter::spell_dynamic_quantize(const Node& n, const std::string& x, std::size_t codes,
                                      const std::string& y) {
  const std::string& b = n.name;
  auto& node = w_.node("DynamicQuantizeLinear", codes == 0 ? b : b + "/dynamic_quantize", {x}, y);
  const std::size_t scale = codes + 1, zero_point = codes + 2;
  for (const std::size_t i : {scale, zero_point}) {
    const std::string scalar = w_.fresh(b + (i == scale ? "/scale" : "/zero_point"));
    node.add_output(scalar);
    scalars_[n.outputs[i].index] = scalar;
  }
  for (const std::size_t i : {scale, zero_point}) {
    const graph::ValueId v = n.outputs[i];
    const std::vector<graph::NodeId> consumers = g_.consumers(v);
    const bool only_dynamic_zero_points =
        std::all_of(consumers.begin(), consumers.end(), [&](graph::NodeId c) {
          const Node& cn = g_.node(c);
          return cn.kind == OpKind::QuantizedFullyConnected &&
                 cn.attr<graph::QuantizedLayerAttrs>().dynamic &&
                 std::count(cn.inputs.begin(), cn.inputs.end(), v) == 1 && cn.inputs[2] == v;
        });
    if (!only_dynamic_zero_points || g_.is_graph_output(v)) {
      w_.node("Reshape", b + (i == scale ? "/scale_shape" : "/zero_point_shape"),
              {scalars_.at(v.index), w_.ints64(b + "/one_element", {1})}, name(v));
    }
  }
}

// A one-element run-time tensor as a scalar: DynamicQuantizeLinear's own
// output, else a Reshape to rank 0.
std::string Exporter::zero_point_scalar(graph::ValueId v, const std::string& base) {
  if (const auto it = scalars_.find(v.index); it != scalars_.end()) return it->second;
  return w_.op("Reshape", base, {in(v), w_.ints64(base + "/rank0", {})});
}

// y = table[x - min(x's type)]: Gather on the table by the codes as int32.
void Exporter::lookup(const Node& n, const std::string& y) {
  const auto& a = n.attr<graph::LookupAttrs>();
  const graph::Value& xv = g_.value(n.inputs[0]);
  if (!is_int8(xv.type) || !is_int8(a.to) || a.table.size() != 256) {
    refuse(n, "a Lookup reads and writes u8 or s8 through 256 entries");
  }
  std::vector<std::int32_t> table(256);
  for (std::size_t i = 0; i < 256; ++i) {
    table[i] = a.to == ElementType::s8
                   ? static_cast<std::int32_t>(static_cast<std::int8_t>(a.table[i]))
                   : static_cast<std::int32_t>(a.table[i]);
  }
  const std::string t = w_.constant(n.name + "/table", onnx_type(a.to), table, Shape{256});
  std::string idx = cast(in(n.inputs[0]), kInt32, n.name + "/index");
  if (xv.type == ElementType::s8) {
    idx = w_.op(
        "Add", n.name + "/offset",
        {idx, w_.constant(n.name + "/code_offset", kInt32, std::vector<std::int32_t>{128}, {})});
  }
  auto& gather = w_.node("Gather", n.name, {t, idx}, y);
  Writer::int_attr(gather, "axis", 0);
}

// Codes times a per-channel gate, quantized: Cast, Sub(z), Mul(s), Mul(g)
// in f32, then the quantization, each as GateMultiply computes it.
void Exporter::gate_multiply(const Node& n, const std::string& y) {
  const auto& a = n.attr<graph::GateMultiplyAttrs>();
  if (!is_int8(g_.value(n.inputs[0]).type)) refuse(n, "a GateMultiply reads u8 or s8 codes");
  std::string t = cast(in(n.inputs[0]), kFloat, n.name + "/to_f32");
  if (a.zero_point != 0.0f) {
    t = w_.op("Sub", n.name + "/zero_point",
              {t, w_.constant(n.name + "/z", kFloat, std::vector<float>{a.zero_point}, {})});
  }
  t = w_.op("Mul", n.name + "/dequantize",
            {t, w_.constant(n.name + "/s", kFloat, std::vector<float>{a.scale}, {})});
  t = w_.op("Mul", n.name + "/gate", {t, in(n.inputs[1])});
  if (const auto* q = std::get_if<graph::QuantizeAttrs>(&a.quantize)) {
    quantize_linear(*q, t, n.name, y);
  } else {
    const auto& r = std::get<graph::ConvertAttrs>(a.quantize);
    quantize_as(r, r.to, t, n.name, y);
  }
}

// Two code tensors added, quantized: for each, Cast, Sub(z), Mul(s) in f32;
// their Add; then the quantization, each as CodeAdd computes it.
void Exporter::code_add(const Node& n, const std::string& y) {
  const auto& a = n.attr<graph::CodeAddAttrs>();
  const auto dequantized = [&](std::size_t i, float z, float s) {
    if (!is_int8(g_.value(n.inputs[i]).type)) refuse(n, "a CodeAdd reads u8 or s8 codes");
    const std::string side = n.name + (i == 0 ? "/a" : "/b");
    std::string t = cast(in(n.inputs[i]), kFloat, side + "/to_f32");
    if (z != 0.0f) {
      t = w_.op("Sub", side + "/zero_point",
                {t, w_.constant(side + "/z", kFloat, std::vector<float>{z}, {})});
    }
    return w_.op("Mul", side + "/dequantize",
                 {t, w_.constant(side + "/s", kFloat, std::vector<float>{s}, {})});
  };
  const std::string sum = w_.op("Add", n.name + "/add",
                                {dequantized(0, a.a_zero_point, a.a_scale),
                                 dequantized(1, a.b_zero_point, a.b_scale)});
  if (const auto* q = std::get_if<graph::QuantizeAttrs>(&a.quantize)) {
    quantize_linear(*q, sum, n.name, y);
  } else {
    const auto& r = std::get<graph::ConvertAttrs>(a.quantize);
    quantize_as(r, r.to, sum, n.name, y);
  }
}

// The layer over the mean of codes, as a QDQ model writes it:
// DequantizeLinear(x, 1, z), GlobalAveragePool, Flatten, MatMul with the
// weights DequantizeLinear(codes [K, O], scale * P per column), Add(shift),
// Clip, then the output's rank (which the import fuses back into this op).
void Exporter::mean_inner_product(const Node& n, const std::string& y) {
  const auto& a = n.attr<graph::MeanInnerProductAttrs>();
  const graph::Value& x = g_.value(n.inputs[0]);
  const graph::Value& w = g_.value(n.inputs[1]);
  if (!is_int8(x.type)) refuse(n, "a MeanInnerProduct reads u8 or s8 codes");
  if (!w.is_constant()) refuse(n, "the weights are not constant");
  const std::int64_t outs = w.shape[0], ins = w.shape[1];
  std::int64_t pixels = 1;
  for (std::size_t d = 2; d < x.shape.size(); ++d) pixels *= x.shape[d];
  std::string t = w_.op("DequantizeLinear", n.name + "/dequantize",
                        {in(n.inputs[0]), w_.scalar(n.name + "/one", 1.0),
                         w_.constant(n.name + "/z", onnx_type(x.type),
                                     std::vector<std::int32_t>{a.zero_point}, {})});
  if (x.shape.size() > 2) t = w_.op("GlobalAveragePool", n.name + "/mean", {t});
  t = w_.op("Flatten", n.name + "/flatten", {t});
  const auto codes = w.constant->data<std::int8_t>();
  std::vector<std::int32_t> wt(static_cast<std::size_t>(ins * outs));
  for (std::int64_t o = 0; o < outs; ++o) {
    for (std::int64_t k = 0; k < ins; ++k) {
      wt[static_cast<std::size_t>(k * outs + o)] = codes[static_cast<std::size_t>(o * ins + k)];
    }
  }
  std::vector<float> scale(a.scale);
  for (float& v : scale) v = static_cast<float>(static_cast<double>(v) * pixels);
  const std::string wd = w_.op(
      "DequantizeLinear", n.name + "/weights",
      {w_.constant(n.name + "/weights", kInt8, wt, {ins, outs}),
       w_.constant(n.name + "/weight_scale", kFloat, scale, {outs}),
       w_.constant(n.name + "/weight_zero", kInt8, std::vector<std::int32_t>(
                                                       static_cast<std::size_t>(outs), 0),
                   {outs})});
  Writer::int_attr(*w_.producer(wd), "axis", 1);
  t = w_.op("MatMul", n.name, {t, wd});
  t = w_.op("Add", n.name + "/shift",
            {t, w_.constant(n.name + "/shift", kFloat, a.shift, {outs})});
  if (std::isfinite(a.lo) || std::isfinite(a.hi)) {
    std::vector<std::string> bounds{t};
    bounds.push_back(std::isfinite(a.lo) ? w_.scalar(n.name + "/lo", a.lo) : "");
    if (std::isfinite(a.hi)) bounds.push_back(w_.scalar(n.name + "/hi", a.hi));
    t = w_.op("Clip", n.name + "/clip", bounds);
  }
  if (a.out_rank > 2) {
    std::vector<std::int64_t> shape(static_cast<std::size_t>(a.out_rank), 1);
    shape[0] = 0;  // the batch, as it comes
    shape[1] = outs;
    t = w_.op("Reshape", n.name + "/rank", {t, w_.ints64(n.name + "/shape", shape)});
  }
  w_.finish(t, y, n.name);
}

// An int8 average pool (an f32 one is an ordinary AveragePool: avg_pool).
void Exporter::int8_avg_pool(const Node& n) {
  const auto& a = n.attr<graph::PoolAttrs>();
  const graph::Value& x = g_.value(n.inputs[0]);
  const graph::Value& y = g_.value(n.outputs[0]);
  if (a.to_f32) {
    // The dequantized mean: DequantizeLinear then the f32 pool, as the
    // model wrote it (out_shift = -z * out_scale for the zero point z).
    const double z = -static_cast<double>(a.out_shift) / a.out_scale;
    const double lo = x.type == ElementType::u8 ? 0.0 : -128.0;
    std::string t;
    if (std::abs(z - std::nearbyint(z)) < 1e-3 && std::nearbyint(z) >= lo &&
        std::nearbyint(z) <= lo + 255.0) {
      t = w_.op("DequantizeLinear", n.name + "/dequantize",
                {in(n.inputs[0]),
                 w_.constant(n.name + "/scale", kFloat, std::vector<float>{a.out_scale}, {}),
                 w_.constant(
                     n.name + "/zero_point", onnx_type(x.type),
                     std::vector<std::int32_t>{static_cast<std::int32_t>(std::nearbyint(z))}, {})});
      auto& p = w_.node("AveragePool", n.name, {t}, name(n.outputs[0]));
      pool_attrs(p, a);
      return;
    }
    t = cast(in(n.inputs[0]), kFloat, n.name + "/cast");
    t = w_.op("Mul", n.name + "/out_scale",
              {t, w_.constant(n.name + "/out_scale", kFloat, std::vector<float>{a.out_scale}, {})});
    t = w_.op("Add", n.name + "/out_shift",
              {t, w_.constant(n.name + "/out_shift", kFloat, std::vector<float>{a.out_shift}, {})});
    auto& p = w_.node("AveragePool", n.name, {t}, name(n.outputs[0]));
    pool_attrs(p, a);
    return;
  }
  if (a.out_shift == std::nearbyint(a.out_shift) && std::abs(a.out_shift) <= 255.0f) {
    // round(out_scale * mean + shift) for an integer shift: Q/DQ around the
    // pool, the form int8 runtimes run as one int8 pool.
    const int zt = onnx_type(x.type);
    const std::string dq =
        w_.op("DequantizeLinear", n.name + "/dequantize",
              {in(n.inputs[0]),
               w_.constant(n.name + "/in_scale", kFloat, std::vector<float>{a.out_scale}, {}),
               w_.constant(n.name + "/in_zero_point", zt, std::vector<std::int32_t>{0}, {})});
    const std::string pooled = w_.fresh(n.name + "/mean");
    auto& p = w_.node("AveragePool", n.name, {dq}, pooled);
    pool_attrs(p, a);
    Writer::int_attr(p, "count_include_pad", a.exclude_pad ? 0 : 1);
    w_.node("QuantizeLinear", n.name + "/quantize",
            {pooled, w_.constant(n.name + "/out_scale", kFloat, std::vector<float>{1.0f}, {}),
             w_.constant(n.name + "/out_zero_point", onnx_type(y.type),
                         std::vector<std::int32_t>{static_cast<std::int32_t>(a.out_shift)}, {})},
            name(n.outputs[0]));
    return;
  }
  std::string t = cast(in(n.inputs[0]), kFloat, n.name + "/cast");
  const std::string pooled = w_.fresh(n.name + "/mean");
  auto& p = w_.node("AveragePool", n.name, {t}, pooled);
  pool_attrs(p, a);
  Writer::int_attr(p, "count_include_pad", a.exclude_pad ? 0 : 1);
  t = pooled;
  if (a.out_scale != 1.0f) {
    t = w_.op("Mul", n.name + "/out_scale",
              {t, w_.constant(n.name + "/out_scale", kFloat, std::vector<float>{a.out_scale}, {})});
  }
  if (a.out_shift != 0.0f) {
    t = w_.op("Add", n.name + "/out_shift",
              {t, w_.constant(n.name + "/out_shift", kFloat, std::vector<float>{a.out_shift}, {})});
  }
  quantize(n.name, t, onnx_type(y.type), name(n.outputs[0]));
}

}  // namespace qfuse::onnx::export_impl
