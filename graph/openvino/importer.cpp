// OpenVINO IR import: the driver (layers in topological order, outputs),
// Parameter, Const, Convert and Result, constants and IR emission, and the
// public functions.

#include "graph/openvino/importer.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "graph/broadcast.hpp"
#include "graph/openvino/import_internal.hpp"

namespace qfuse::openvino {
namespace impl {

namespace {

// IEEE half to float (exact: every f16 value is an f32 value).
float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  const std::uint32_t man = h & 0x3ffu;
  float f;
  if (exp == 0) {
    f = std::ldexp(static_cast<float>(man), -24);  // zero and subnormals
  } else if (exp == 31) {
    f = man == 0 ? INFINITY : NAN;
  } else {
    f = std::ldexp(static_cast<float>(man | 0x400u), static_cast<int>(exp) - 25);
  }
  std::uint32_t bits;
  std::memcpy(&bits, &f, 4);
  bits |= sign;
  std::memcpy(&f, &bits, 4);
  return f;
}

template <class T>
T load(const std::byte* p, std::int64_t i) {
  T v;
  std::memcpy(&v, p + static_cast<std::size_t>(i) * sizeof(T), sizeof(T));
  return v;
}

}  // namespace

// --- constants ----------------------------------------------------------------

double ConstData::at(std::int64_t i) const {
  if (!bytes) return computed[sz(i)];
  switch (type) {
    case OvType::f32: return load<float>(bytes, i);
    case OvType::f16: return half_to_float(load<std::uint16_t>(bytes, i));
    case OvType::i8: return load<std::int8_t>(bytes, i);
    case OvType::u8: return load<std::uint8_t>(bytes, i);
    case OvType::i32: return load<std::int32_t>(bytes, i);
    case OvType::i64: return static_cast<double>(load<std::int64_t>(bytes, i));
  }
  return 0.0;
}

Values ConstData::values() const {
  if (!bytes) return computed;
  Values v(sz(count()));
  for (std::int64_t i = 0; i < count(); ++i) v[sz(i)] = at(i);
  return v;
}

Operand Importer::make_known(OvType type, Shape shape, Values values) const {
  Operand o;
  o.type = type;
  o.shape = shape;
  auto c = std::make_shared<ConstData>();
  c->type = type;
  c->shape = std::move(shape);
  c->computed = std::move(values);
  o.constant = std::move(c);
  return o;
}

// (f32(q) - zp) * s in f32, the runtime's arithmetic.
Values Importer::values_of(const Operand& o) const {
  if (o.constant) return o.constant->values();
  const DqWeight& w = *o.dq;
  const Shape& shape = w.codes->shape;
  std::vector<std::vector<std::int64_t>> strides{graph::broadcast_strides(shape, shape.size())};
  for (const auto& p : {w.zero_point, w.scale}) {
    strides.push_back(p ? graph::broadcast_strides(p->shape, shape.size())
                        : std::vector<std::int64_t>(shape.size(), 0));
  }
  Values out(sz(element_count(shape)));
  graph::for_each_broadcast(shape, strides, [&](std::int64_t i, const std::vector<std::int64_t>& off) {
    float v = static_cast<float>(w.codes->at(off[0]));
    if (w.zero_point) v -= static_cast<float>(w.zero_point->at(off[1]));
    if (w.scale) v *= static_cast<float>(w.scale->at(off[2]));
    out[sz(i)] = v;
  });
  return out;
}

Tensor Importer::to_tensor(const ConstData& c, const Shape& shape) const {
  const std::int64_t n = c.count();
  const auto copy = [&](ElementType t) {
    Tensor out(t, shape);
    if (c.bytes) {
      std::memcpy(out.raw_data(), c.bytes, out.byte_size());
      return out;
    }
    for (std::int64_t i = 0; i < n; ++i) {
      const double v = c.computed[sz(i)];
      switch (t) {
        case ElementType::f32: out.data<float>()[sz(i)] = static_cast<float>(v); break;
        case ElementType::s8: out.data<std::int8_t>()[sz(i)] = static_cast<std::int8_t>(v); break;
        case ElementType::u8: out.data<std::uint8_t>()[sz(i)] = static_cast<std::uint8_t>(v); break;
        case ElementType::s32: out.data<std::int32_t>()[sz(i)] = static_cast<std::int32_t>(v); break;
        case ElementType::s64: out.data<std::int64_t>()[sz(i)] = static_cast<std::int64_t>(v); break;
      }
    }
    return out;
  };
  switch (c.type) {
    case OvType::f32: return copy(ElementType::f32);
    case OvType::i8: return copy(ElementType::s8);
    case OvType::u8: return copy(ElementType::u8);
    case OvType::i32: return copy(ElementType::s32);
    case OvType::i64: return copy(ElementType::s64);
    case OvType::f16: break;
  }
  Tensor out(ElementType::f32, shape);
  for (std::int64_t i = 0; i < n; ++i) out.data<float>()[sz(i)] = static_cast<float>(c.at(i));
  return out;
}

ValueId Importer::f32_constant(const Values& v, Shape shape, const std::string& suffix) {
  std::vector<float> f(v.size());
  for (std::size_t k = 0; k < v.size(); ++k) f[k] = static_cast<float>(v[k]);
  return constant(Tensor::from_vector<float>(std::move(shape), std::move(f)), suffix);
}

// Convert(q) [-> Subtract(zp)] [-> Multiply(s)] on the 8-bit constant: the
// form recognize_dequantize and quantize_weights take as int8 weights.
ValueId Importer::emit_dq(const DqWeight& w) {
  const Shape shape = ir_shape(w.codes->shape);
  ValueId t = constant(to_tensor(*w.codes, shape), "codes");
  t = emit(OpKind::Convert, {t}, graph::ConvertAttrs{ElementType::f32}, "to_f32");
  if (w.zero_point) {
    t = emit(OpKind::Subtract, {t, constant(to_tensor(*w.zero_point, ir_shape(w.zero_point->shape)),
                                             "zero_point")},
             NoAttrs{}, "sub_zero_point");
  }
  if (w.scale) {
    t = emit(OpKind::Multiply,
             {t, constant(to_tensor(*w.scale, ir_shape(w.scale->shape)), "scale")}, NoAttrs{},
             "scale_weights");
  }
  return t;
}

ValueId Importer::f32(Operand& o) {
  if (o.dq) return emit_dq(*o.dq);
  if (o.constant) {
    if (o.constant->type == OvType::f32 || o.constant->type == OvType::f16) {
      return constant(to_tensor(*o.constant, ir_shape(o.shape)), "const");
    }
    return f32_constant(o.constant->values(), ir_shape(o.shape), "const");
  }
  if (!is_float(o.type)) {
    unsupported("a run-time " + std::string(ov_type_name(o.type)) +
                " tensor where f32 is computed (insert a Convert)");
  }
  return o.value;
}

ValueId Importer::native(Operand& o) {
  if (o.dq || (o.constant && is_float(o.constant->type))) return f32(o);
  if (o.constant) return constant(to_tensor(*o.constant, ir_shape(o.shape)), "const");
  return o.value;
}

Operand Importer::make_float(ValueId v, const Shape& shape) {
  if (graph_.value(v).shape != ir_shape(shape)) {
    v = emit(OpKind::Reshape, {v}, graph::ReshapeAttrs{ir_shape(shape)}, "reshape");
  }
  Operand o;
  o.type = OvType::f32;
  o.shape = shape;
  o.value = v;
  return o;
}

// The zero point / scale of compressed weights reshaped with them: one
// value stays one; values that vary only along the dimensions that merge
// into the new first dimension (GroupConvolution's [G, O/G, ...] ->
// [O, ...], or a first dimension kept as is) become [n, 1, ...].
namespace {
std::shared_ptr<const ConstData> reshaped_param(const ConstData& p, const Shape& from,
                                                const Shape& to) {
  if (p.count() == 1) return std::make_shared<ConstData>(p);
  if (to.empty()) return nullptr;
  std::size_t j = 0;
  std::int64_t prefix = 1;
  while (j < from.size() && prefix < to[0]) prefix *= from[j++];
  if (prefix != to[0]) return nullptr;
  // Right-aligned to `from`; varying only within the first j dims.
  const std::size_t offset = from.size() - p.shape.size();
  for (std::size_t d = 0; d < p.shape.size(); ++d) {
    if (d + offset >= j && p.shape[d] != 1) return nullptr;
  }
  const Shape lead(from.begin(), from.begin() + static_cast<std::ptrdiff_t>(j));
  Shape ps(j, 1);
  for (std::size_t d = 0; d < p.shape.size(); ++d) {
    if (d + offset < j) ps[d + offset] = p.shape[d];
  }
  auto out = std::make_shared<ConstData>();
  out->type = OvType::f32;
  out->shape = Shape(to.size(), 1);
  out->shape[0] = to[0];
  out->computed.resize(sz(to[0]));
  const Values v = p.values();
  const auto offsets = graph::broadcast_offsets(ps, lead);
  for (std::size_t i = 0; i < offsets.size(); ++i) out->computed[i] = v[offsets[i]];
  return out;
}
}  // namespace

Operand Importer::reshaped_known(const Operand& o, const Shape& shape) const {
  Operand r = o;
  r.shape = shape;
  if (o.constant) {
    auto c = std::make_shared<ConstData>(*o.constant);
    c->shape = shape;
    r.constant = std::move(c);
    return r;
  }
  const DqWeight& w = *o.dq;
  auto codes = std::make_shared<ConstData>(*w.codes);
  codes->shape = shape;
  auto out = std::make_shared<DqWeight>(DqWeight{codes, nullptr, nullptr});
  bool kept = true;
  if (w.zero_point) {
    out->zero_point = reshaped_param(*w.zero_point, w.codes->shape, shape);
    kept = kept && out->zero_point;
  }
  if (w.scale) {
    out->scale = reshaped_param(*w.scale, w.codes->shape, shape);
    kept = kept && out->scale;
  }
  if (kept) {
    r.dq = std::move(out);
    return r;
  }
  spdlog::debug("import {}: compressed weights folded to f32 (their scale does not follow the "
                "reshape to {})",
                label(), to_string(shape));
  return make_known(OvType::f32, shape, values_of(o));
}

Operand Importer::transposed_known(const Operand& o, const Ints& perm) const {
  Shape out_shape;
  if (o.constant) {
    const Values v = graph::transpose_values(o.constant->values(), o.shape, perm, out_shape);
    return make_known(o.constant->type == OvType::f16 ? OvType::f32 : o.constant->type, out_shape, v);
  }
  const DqWeight& w = *o.dq;
  auto codes = std::make_shared<ConstData>();
  codes->type = w.codes->type;
  codes->computed = graph::transpose_values(w.codes->values(), w.codes->shape, perm, codes->shape);
  auto out = std::make_shared<DqWeight>(DqWeight{codes, nullptr, nullptr});
  const auto param = [&](const std::shared_ptr<const ConstData>& p) -> std::shared_ptr<const ConstData> {
    if (!p) return nullptr;
    Shape full(o.shape.size() - p->shape.size(), 1);
    full.insert(full.end(), p->shape.begin(), p->shape.end());
    auto t = std::make_shared<ConstData>();
    t->type = OvType::f32;
    t->computed = graph::transpose_values(p->values(), full, perm, t->shape);
    return t;
  };
  out->zero_point = param(w.zero_point);
  out->scale = param(w.scale);
  Operand r = o;
  r.shape = codes->shape;
  r.dq = std::move(out);
  return r;
}

Operand Importer::reshape(Operand& o, const Shape& shape, const std::string& suffix) {
  expect(element_count(shape) == element_count(o.shape),
         "cannot reshape " + to_string(o.shape) + " to " + to_string(shape));
  if (o.known()) return reshaped_known(o, shape);
  Operand r = o;
  r.shape = shape;
  if (graph_.value(o.value).shape != ir_shape(shape)) {
    r.value = emit(OpKind::Reshape, {o.value}, graph::ReshapeAttrs{ir_shape(shape)}, suffix);
  }
  return r;
}

// --- context ------------------------------------------------------------------

void Importer::expect_ports(std::size_t lo, std::size_t hi, std::size_t outputs) const {
  const std::size_t n = num_inputs();
  if (n < lo || n > hi) {
    malformed("has " + std::to_string(n) + " inputs (expected " + std::to_string(lo) +
              (hi != lo ? " to " + std::to_string(hi) : std::string()) + ")");
  }
  if (layer_->outputs.size() != outputs) {
    malformed("has " + std::to_string(layer_->outputs.size()) + " output ports (expected " +
              std::to_string(outputs) + ")");
  }
}

Operand& Importer::in(std::size_t i) {
  if (i >= num_inputs()) {
    malformed("input " + std::to_string(i) + " is missing (the layer has " +
              std::to_string(num_inputs()) + ")");
  }
  const Layer::Source& s = layer_->sources[i];
  Operand& o = outputs_[s.layer][s.output];
  if (!o.known() && !o.value.valid()) {
    malformed("input port " + std::to_string(layer_->inputs[i].id) + " reads output port " +
              std::to_string(doc_.layers[s.layer].outputs[s.output].id) + " of " +
              doc_.layers[s.layer].label() + ", which holds no tensor");
  }
  return o;
}

void Importer::set_out(std::size_t k, Operand o) { outputs_[layer_index_].at(k) = std::move(o); }

bool Importer::output_read(std::size_t k) const {
  return !doc_.consumers[layer_index_][k].empty();
}

std::int64_t Importer::normalize_axis(std::int64_t axis, std::int64_t rank,
                                      const char* what) const {
  const std::int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank) {
    malformed(std::string(what) + " " + std::to_string(axis) + " is out of range for rank " +
              std::to_string(rank));
  }
  return a;
}

Values Importer::values_in(std::size_t i, const char* what) {
  const Operand& o = in(i);
  if (!o.known()) {
    unsupported(std::string(what) + " (input " + std::to_string(i) +
                ") must be known at import (a Const or computed from constants and shapes)");
  }
  return values_of(o);
}

std::int64_t Importer::to_int(double v, const char* what) const {
  expect(std::isfinite(v) && std::abs(v) <= 0x1p62 && v == std::trunc(v),
         std::string(what) + " " + std::to_string(v) + " is not an integer in range");
  return static_cast<std::int64_t>(v);
}

Ints Importer::ints_in(std::size_t i, const char* what) {
  const Operand& o = in(i);
  if (o.known() && is_float(o.type)) {
    malformed(std::string(what) + " (input " + std::to_string(i) + ") has element type " +
              std::string(ov_type_name(o.type)) + " (expected an integer type)");
  }
  Ints out;
  for (double v : values_in(i, what)) out.push_back(to_int(v, what));
  return out;
}

void Importer::require_float(const Operand& o, const char* what) const {
  if (!is_float(o.type)) {
    unsupported(std::string(what) + " has element type " + std::string(ov_type_name(o.type)) +
                " (expected f32)");
  }
}

std::string Importer::unique_name(const std::string& wanted) {
  std::string name = wanted.empty() ? "layer" : wanted;
  for (int k = 1; !used_names_.insert(name).second; ++k) {
    name = wanted + "#" + std::to_string(k);
  }
  return name;
}

// --- the model ----------------------------------------------------------------

const std::map<std::string, Importer::OpEntry, std::less<>>& Importer::op_table() {
  static const std::map<std::string, OpEntry, std::less<>> kTable = {
      {"Parameter", {&Importer::op_parameter, {"opset1"}}},
      {"Const", {&Importer::op_const, {"opset1"}}},
      {"Result", {&Importer::op_result, {"opset1"}}},
      {"Convert", {&Importer::op_convert, {"opset1"}}},
      {"FakeQuantize", {&Importer::op_fake_quantize, {"opset1"}}},
      {"Convolution", {&Importer::op_convolution, {"opset1"}}},
      {"GroupConvolution", {&Importer::op_group_convolution, {"opset1"}}},
      {"ConvolutionBackpropData", {&Importer::op_convolution_backprop_data, {"opset1"}}},
      {"MatMul", {&Importer::op_matmul, {"opset1"}}},
      {"Add", {&Importer::op_binary, {"opset1"}}},
      {"Subtract", {&Importer::op_binary, {"opset1"}}},
      {"Multiply", {&Importer::op_binary, {"opset1"}}},
      {"Divide", {&Importer::op_binary, {"opset1"}}},
      {"ReLU", {&Importer::op_unary, {"opset1"}}},
      {"Sigmoid", {&Importer::op_unary, {"opset1"}}},
      {"HSwish", {&Importer::op_unary, {"opset4"}}},
      {"HSigmoid", {&Importer::op_unary, {"opset5"}}},
      {"Clamp", {&Importer::op_clamp, {"opset1"}}},
      {"Swish", {&Importer::op_swish, {"opset4"}}},
      {"Gelu", {&Importer::op_gelu, {"opset2", "opset7"}}},
      {"SoftMax", {&Importer::op_softmax, {"opset1", "opset8"}}},
      {"MVN", {&Importer::op_mvn, {"opset6"}}},
      {"MaxPool", {&Importer::op_pool, {"opset1", "opset8"}}},
      {"AvgPool", {&Importer::op_pool, {"opset1"}}},
      {"ReduceMean", {&Importer::op_reduce_mean, {"opset1"}}},
      {"Concat", {&Importer::op_concat, {"opset1"}}},
      {"Split", {&Importer::op_split, {"opset1"}}},
      {"VariadicSplit", {&Importer::op_variadic_split, {"opset1"}}},
      {"Reshape", {&Importer::op_reshape, {"opset1"}}},
      {"Squeeze", {&Importer::op_squeeze, {"opset1"}}},
      {"Unsqueeze", {&Importer::op_unsqueeze, {"opset1"}}},
      {"Transpose", {&Importer::op_transpose, {"opset1"}}},
      {"Interpolate", {&Importer::op_interpolate, {"opset4", "opset11"}}},
      {"Gather", {&Importer::op_gather, {"opset1", "opset7", "opset8"}}},
      {"ShapeOf", {&Importer::op_shape_of, {"opset1", "opset3"}}},
  };
  return kTable;
}

// Input and output names are the model's: node names made later must not
// take them.
void Importer::reserve_names() {
  for (std::size_t i = 0; i < doc_.layers.size(); ++i) {
    const Layer& l = doc_.layers[i];
    if (l.type == "Result" && l.sources.size() == 1) used_names_.insert(output_name(l.sources[0]));
    if (l.type == "Parameter" && l.outputs.size() == 1) {
      used_names_.insert(l.outputs[0].names.empty() ? l.name : l.outputs[0].names[0]);
    }
  }
}

graph::Graph Importer::run() {
  outputs_.resize(doc_.layers.size());
  for (std::size_t i = 0; i < doc_.layers.size(); ++i) {
    outputs_[i].resize(doc_.layers[i].outputs.size());
  }
  reserve_names();
  for (std::size_t index : doc_.order) import_layer(index);
  for (const auto& [name, shape] : options_.input_shapes) {
    if (!bound_inputs_.count(name)) {
      throw GraphError("import " + origin_ + ": a shape is given for '" + name +
                       "', which is not an input of the model");
    }
  }
  if (results_.empty()) throw GraphError("import " + origin_ + ": the model has no Result layer");
  mark_outputs();
  graph::remove_dead_nodes(graph_);
  return std::move(graph_);
}

void Importer::import_layer(std::size_t index) {
  layer_index_ = index;
  layer_ = &doc_.layers[index];
  const auto& table = op_table();
  const auto it = table.find(layer_->type);
  if (it == table.end()) unsupported("operator type '" + layer_->type + "' is not supported");
  const auto& versions = it->second.versions;
  if (std::find(versions.begin(), versions.end(), layer_->version) == versions.end()) {
    std::string known;
    for (std::string_view v : versions) {
      if (!known.empty()) known += ", ";
      known += v;
    }
    unsupported("version '" + layer_->version + "' is not supported (expected " + known + ")");
  }
  AttrReader a(*layer_);
  (this->*(it->second.handler))(a);
  a.check_all_used();
  check_declared_shapes();
}

// Each output's shape as computed against the one its port declares (-1:
// any): a mismatch is a malformed file (or a misread one).
void Importer::check_declared_shapes() const {
  for (std::size_t k = 0; k < layer_->outputs.size(); ++k) {
    const Operand& o = outputs_[layer_index_][k];
    if (!o.known() && !o.value.valid()) continue;  // an output nothing reads (MaxPool's indices)
    const Port& p = layer_->outputs[k];
    bool same = p.dims.size() == o.shape.size();
    for (std::size_t d = 0; same && d < p.dims.size(); ++d) {
      same = p.dims[d] == -1 || p.dims[d] == o.shape[d];
    }
    if (!same) {
      // Appended piece by piece: "," + std::to_string(..) trips GCC 12's
      // -Wrestrict false positive at -O3.
      std::string declared = "[";
      for (std::size_t d = 0; d < p.dims.size(); ++d) {
        if (d > 0) declared += ',';
        declared += std::to_string(p.dims[d]);
      }
      malformed("output port " + std::to_string(p.id) + " declares shape " + declared +
                "] but the inputs give " + to_string(o.shape));
    }
  }
}

std::string Importer::output_name(const Layer::Source& s) const {
  const Layer& producer = doc_.layers[s.layer];
  const Port& port = producer.outputs[s.output];
  if (!port.names.empty() && !port.names[0].empty()) return port.names[0];
  if (producer.outputs.size() > 1) return producer.name + "." + std::to_string(s.output);
  return producer.name;
}

void Importer::mark_outputs() {
  std::set<std::uint32_t> marked;
  std::set<std::string> names;
  for (std::size_t r : results_) {
    layer_ = &doc_.layers[r];
    layer_index_ = r;
    std::string name = output_name(layer_->sources[0]);
    // Two Results of one tensor: the second is named after its Result too.
    if (!names.insert(name).second) name = unique_name(name + "." + layer_->name);
    Operand& o = in(0);
    ValueId v;
    if (o.known()) {
      v = native(o);
    } else {
      v = o.value;
      const bool is_input = std::find(graph_.inputs().begin(), graph_.inputs().end(), v) !=
                            graph_.inputs().end();
      if (is_input || marked.count(v.index) || graph_.value(v).is_constant()) {
        v = emit(OpKind::Reshape, {v}, graph::ReshapeAttrs{graph_.value(v).shape}, "output");
      }
    }
    graph_.value(v).name = name;
    marked.insert(v.index);
    graph_.mark_output(v);
  }
}

// --- Parameter, Const, Result, Convert ------------------------------------------

void Importer::op_parameter(AttrReader& a) {
  expect_ports(0, 0, 1);
  const Port& port = layer_->outputs[0];
  const std::string name = port.names.empty() || port.names[0].empty() ? layer_->name
                                                                       : port.names[0];
  const std::string type_name = a.s("element_type", port.precision);
  const auto type = ov_type_named(type_name);
  if (!type || *type == OvType::f16) {
    unsupported("input element type '" + type_name + "' (expected f32, u8, i8, i32 or i64)");
  }
  Shape shape = a.has("shape") ? a.dims("shape") : port.dims;
  if (shape.size() != port.dims.size()) shape = port.dims;
  const auto given = options_.input_shapes.find(name);
  if (given != options_.input_shapes.end()) {
    bound_inputs_.insert(name);
    bool fits = given->second.size() == shape.size();
    for (std::size_t d = 0; fits && d < shape.size(); ++d) {
      fits = shape[d] == -1 || shape[d] == given->second[d];
    }
    if (!fits) {
      malformed("the shape given for input '" + name + "', " + to_string(given->second) +
                ", does not fit the declared one");
    }
    shape = given->second;
  }
  for (std::int64_t d : shape) {
    if (d < 0) {
      throw GraphError("import " + origin_ + ": input '" + name +
                       "' has a dynamic dimension; give its shape (input_shapes / --shape " +
                       name + "=...)");
    }
    if (d == 0) malformed("input '" + name + "' has an empty dimension");
  }
  if (shape.empty()) unsupported("rank-0 input '" + name + "' (qfuse inputs have rank >= 1)");
  static constexpr ElementType kIr[] = {ElementType::f32, ElementType::f32, ElementType::s8,
                                        ElementType::u8,  ElementType::s32, ElementType::s64};
  Operand o;
  o.type = *type;
  o.shape = shape;
  o.value = b_.input(name, shape, kIr[static_cast<int>(*type)]);
  set_out(0, o);
}

void Importer::op_const(AttrReader& a) {
  expect_ports(0, 0, 1);
  const std::string type_name = a.required("element_type");
  const auto type = ov_type_named(type_name);
  if (!type) unsupported("element type '" + type_name + "' (expected f32, f16, i8, u8, i32 or i64)");
  const Shape shape = a.dims("shape");
  for (std::int64_t d : shape) expect(d >= 0, "shape has a dynamic dimension");
  const std::int64_t offset = a.i("offset", -1);
  const std::int64_t size = a.i("size", -1);
  expect(offset >= 0 && size >= 0, "offset and size must be given and not negative");
  const std::int64_t count = element_count(shape);
  expect(size == count * i64(ov_type_size(*type)),
         "size " + std::to_string(size) + " bytes does not hold " + std::to_string(count) + " " +
             std::string(ov_type_name(*type)) + " values of shape " + to_string(shape));
  if (!bin_.present()) malformed("the model's .bin is missing");
  if (static_cast<std::uint64_t>(offset) > bin_.size() ||
      static_cast<std::uint64_t>(size) > bin_.size() - static_cast<std::uint64_t>(offset)) {
    malformed("offset " + std::to_string(offset) + " + size " + std::to_string(size) +
              " is past the end of the .bin (" + std::to_string(bin_.size()) + " bytes)");
  }
  auto c = std::make_shared<ConstData>();
  c->type = *type;
  c->shape = shape;
  c->bytes = bin_.data() + offset;
  if (count == 0) c->bytes = nullptr;  // nothing to read; computed stays empty
  Operand o;
  o.type = *type;
  o.shape = shape;
  o.constant = std::move(c);
  set_out(0, o);
}

void Importer::op_result(AttrReader&) {
  expect_ports(1, 1, 0);
  results_.push_back(layer_index_);
}

// Convert(f32) of an i8 / u8 Const starts compressed weights (kept as such);
// other known tensors are converted at import; at run time an integer
// tensor converts to f32 (exact) and f32 stays f32.
void Importer::op_convert(AttrReader& a) {
  expect_ports(1, 1, 1);
  const std::string to_name = a.required("destination_type");
  const auto to = ov_type_named(to_name);
  if (!to) unsupported("destination_type '" + to_name + "' (expected f32, f16, i8, u8, i32 or i64)");
  Operand& x = in(0);
  if (x.constant && (x.type == OvType::i8 || x.type == OvType::u8) && is_float(*to)) {
    Operand o;
    o.type = OvType::f32;
    o.shape = x.shape;
    o.dq = std::make_shared<DqWeight>(DqWeight{x.constant, nullptr, nullptr});
    set_out(0, o);
    return;
  }
  if (x.known()) {
    Values v = values_of(x);
    for (double& e : v) {
      if (is_float(*to)) {
        e = static_cast<float>(e);
        continue;
      }
      // OpenVINO versions differ in how a fraction converts to an integer;
      // shape arithmetic never has one.
      if (e != std::trunc(e)) {
        unsupported("converts the non-integer " + std::to_string(e) + " to " + to_name);
      }
    }
    set_out(0, make_known(*to == OvType::f16 ? OvType::f32 : *to, x.shape, std::move(v)));
    return;
  }
  if (is_float(*to) && *to != OvType::f32) {
    unsupported("a run-time conversion to f16 (qfuse computes in f32)");
  }
  if (*to == x.type) {
    set_out(0, x);
    return;
  }
  if (*to != OvType::f32) {
    unsupported("a run-time conversion from " + std::string(ov_type_name(x.type)) + " to " +
                to_name + " (only integer to f32 is read)");
  }
  set_out(0, make_float(emit(OpKind::Convert, {x.value}, graph::ConvertAttrs{ElementType::f32}),
                        x.shape));
}

}  // namespace impl

// --- public functions ---------------------------------------------------------

namespace {

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError("open " + path.string() + ": cannot read the file");
  std::ostringstream s;
  s << in.rdbuf();
  if (in.bad()) throw IoError("read " + path.string() + ": read error");
  return s.str();
}

graph::Graph import_document(const detail::IrDocument& doc, const detail::BinData& bin,
                             const ImportOptions& options, const std::string& origin) {
  impl::Importer importer(doc, bin, options, origin);
  return importer.run();
}

}  // namespace

graph::Graph import_file(const std::filesystem::path& xml_path, const ImportOptions& options) {
  const std::string origin = xml_path.string();
  const auto doc = detail::parse_ir(read_text(xml_path), origin);
  std::filesystem::path bin_path = options.bin_path;
  if (bin_path.empty()) bin_path = std::filesystem::path(xml_path).replace_extension(".bin");
  // A model whose layers read no weights needs no .bin.
  const bool needs_bin = std::any_of(doc->layers.begin(), doc->layers.end(),
                                     [](const detail::Layer& l) { return l.type == "Const"; });
  detail::BinData bin;
  if (needs_bin || std::filesystem::exists(bin_path)) bin = detail::BinData::map_file(bin_path);
  return import_document(*doc, bin, options, origin);
}

graph::Graph import_buffers(std::string_view xml, std::span<const std::byte> bin,
                            const ImportOptions& options, std::string_view origin) {
  const std::string name(origin);
  const auto doc = detail::parse_ir(xml, name);
  return import_document(*doc, detail::BinData::view(bin), options, name);
}

std::vector<InputInfo> list_inputs(const std::filesystem::path& xml_path) {
  const auto doc = detail::parse_ir(read_text(xml_path), xml_path.string());
  std::vector<InputInfo> out;
  for (const detail::Layer& l : doc->layers) {
    if (l.type != "Parameter" || l.outputs.size() != 1) continue;
    const detail::Port& p = l.outputs[0];
    const pugi::xml_attribute t = l.data.attribute("element_type");
    out.push_back({p.names.empty() || p.names[0].empty() ? l.name : p.names[0], p.dims,
                   t ? t.value() : p.precision});
  }
  return out;
}

}  // namespace qfuse::openvino
