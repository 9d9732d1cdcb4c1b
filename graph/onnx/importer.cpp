// ONNX -> qfuse IR. The semantics (integer carriers, Q/DQ, ConvInteger
// limits, symbolic dimensions) are documented in importer.hpp.

#include "graph/onnx/importer.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>
#include <unordered_map>

#include "graph/builder.hpp"
#include "graph/onnx/proto_utils.hpp"
#include "qfuse/error.hpp"

namespace qfuse::onnx {
namespace {

using namespace detail;
using graph::Attributes;
using graph::Ints;
using graph::NoAttrs;
using graph::OpKind;
using graph::ValueId;
using Values = std::vector<double>;

// f32 holds every integer of magnitude up to 2^24 exactly.
constexpr double kF32ExactLimit = 16777216.0;
constexpr int kMinOpset = 10;
constexpr int kMaxOpset = 17;

std::size_t sz(std::int64_t v) { return static_cast<std::size_t>(v); }
std::int64_t i64(std::size_t v) { return static_cast<std::int64_t>(v); }
std::int64_t rank_of(const Shape& s) { return i64(s.size()); }

// The IR has no rank-0 tensors: a scalar is carried as [1].
Shape ir_shape(const Shape& s) { return s.empty() ? Shape{1} : s; }

struct Interval {
  double lo = 0.0;
  double hi = 0.0;
};

Interval type_range(int type) {
  switch (type) {
    case kUint8: return {0, 255};
    case kInt8: return {-128, 127};
    case kUint16: return {0, 65535};
    case kInt16: return {-32768, 32767};
    case kInt32: return {-2147483648.0, 2147483647.0};
    case kUint32: return {0, 4294967295.0};
    case kInt64: return {-9223372036854775808.0, 9223372036854775807.0};
    case kUint64: return {0, 18446744073709551615.0};
    case kBool: return {0, 1};
    default: return {-std::numeric_limits<double>::infinity(),
                     std::numeric_limits<double>::infinity()};
  }
}

Interval range_of(const Values& v) {
  if (v.empty()) return {0, 0};
  auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  return {*lo, *hi};
}

double max_abs(Interval r) { return std::max(std::abs(r.lo), std::abs(r.hi)); }

// Quantization parameters of one QuantizeLinear / DequantizeLinear.
struct QuantParams {
  Values scale;  // 1 value (per tensor) or one per channel along `axis`
  Values zero_point;
  std::int64_t axis = -1;  // normalized; -1 when per tensor
  int type = kUint8;       // of the quantized tensor
  double qmin = 0, qmax = 255;

  bool operator==(const QuantParams& o) const {
    return scale == o.scale && zero_point == o.zero_point && axis == o.axis && type == o.type;
  }
  bool unit_scale() const {
    return std::all_of(scale.begin(), scale.end(), [](double s) { return s == 1.0; });
  }
  bool zero_zp() const {
    return std::all_of(zero_point.begin(), zero_point.end(), [](double z) { return z == 0.0; });
  }
};

// One ONNX tensor during import.
struct Operand {
  int type = kUndefined;
  Shape shape;                             // ONNX shape (rank 0 allowed)
  std::shared_ptr<const Literal> literal;  // values known at import
  ValueId value;                           // IR value; invalid for literals until needed
  ValueId f32_value;                       // cached f32 carrier of an integer tensor
  std::optional<Interval> range;           // integer tensors (and integral floats)
  // Set on QuantizeLinear outputs: the f32 source and the parameters.
  struct Quantized {
    ValueId source;
    QuantParams params;
  };
  std::shared_ptr<const Quantized> quantized;
  // Set on DequantizeLinear outputs whose input is a constant: the integers.
  struct Weight {
    Literal q;
    QuantParams params;
  };
  std::shared_ptr<const Weight> dq_weight;
};

bool is_float(int type) { return type == kFloat; }

std::string dims_text(const Shape& s) { return to_string(s); }

class Importer {
 public:
  Importer(const ::onnx::ModelProto& model, const ImportOptions& options, std::string origin)
      : model_(model), options_(options), origin_(std::move(origin)), b_(graph_) {}

  graph::Graph run();

 private:
  using Handler = void (Importer::*)(AttrReader&);

  // --- context -------------------------------------------------------------
  // Q/DQ pairs whose zero point - qmin is odd (reported once, in run()).
  std::vector<std::string> odd_zero_points_;
  std::string label() const { return node_->op_type() + " node '" + base_ + "'"; }
  [[noreturn]] void unsupported(const std::string& problem) const {
    throw UnsupportedError("import " + label() + ": " + problem);
  }
  [[noreturn]] void malformed(const std::string& problem) const {
    throw GraphError("import " + label() + ": " + problem);
  }
  void expect(bool ok, const std::string& problem) const {
    if (!ok) malformed(problem);
  }

  std::size_t num_inputs() const { return static_cast<std::size_t>(node_->input_size()); }
  bool has_in(std::size_t i) const {
    return i < num_inputs() && !node_->input(static_cast<int>(i)).empty();
  }
  Operand& in(std::size_t i) {
    if (!has_in(i)) malformed("input " + std::to_string(i) + " is missing");
    const std::string& name = node_->input(static_cast<int>(i));
    auto it = tensors_.find(name);
    if (it == tensors_.end()) malformed("input '" + name + "' is not defined before its use");
    return it->second;
  }
  const Literal& lit_in(std::size_t i, const char* what) {
    Operand& o = in(i);
    if (!o.literal) unsupported(std::string(what) + " (input " + std::to_string(i) +
                                " '" + node_->input(static_cast<int>(i)) +
                                "') must be a constant");
    return *o.literal;
  }
  void set_out(std::size_t i, Operand o) {
    if (i >= static_cast<std::size_t>(node_->output_size())) return;
    const std::string& name = node_->output(static_cast<int>(i));
    if (name.empty()) return;
    tensors_[name] = std::move(o);
  }
  // Outputs beyond `n` must be unused.
  void max_outputs(std::size_t n) const {
    for (int k = static_cast<int>(n); k < node_->output_size(); ++k) {
      if (!node_->output(k).empty()) {
        unsupported("output " + std::to_string(k) + " ('" + node_->output(k) +
                    "') is not supported");
      }
    }
  }
  void require_float(const Operand& o, const char* what) const {
    if (!is_float(o.type)) {
      unsupported(std::string(what) + " has element type " + onnx_type_name(o.type) +
                  " (expected FLOAT)");
    }
  }
  std::int64_t normalize_axis(std::int64_t axis, std::int64_t rank, const char* what) const {
    const std::int64_t a = axis < 0 ? axis + rank : axis;
    if (a < 0 || a >= rank) {
      malformed(std::string(what) + " " + std::to_string(axis) + " is out of range for rank " +
                std::to_string(rank));
    }
    return a;
  }

  // --- IR emission ---------------------------------------------------------
  std::string unique_name(const std::string& wanted) {
    std::string name = wanted;
    for (int k = 1; !used_names_.insert(name).second; ++k) name = wanted + "#" + std::to_string(k);
    return name;
  }
  std::string node_name(const std::string& suffix) {
    return unique_name(suffix.empty() ? base_ : base_ + "/" + suffix);
  }
  ValueId emit(OpKind kind, std::vector<ValueId> inputs, Attributes attrs = NoAttrs{},
               const std::string& suffix = {}) {
    return b_.op(kind, std::move(inputs), std::move(attrs), node_name(suffix));
  }
  ValueId constant(Tensor t, const std::string& suffix) {
    return b_.constant(node_name(suffix), std::move(t));
  }
  ValueId f32_constant(const Values& v, Shape shape, const std::string& suffix) {
    std::vector<float> f(v.size());
    for (std::size_t k = 0; k < v.size(); ++k) f[k] = static_cast<float>(v[k]);
    return constant(Tensor::from_vector<float>(std::move(shape), std::move(f)), suffix);
  }
  // Per-tensor ([1]) or per-channel ([1.., C at axis, ..1] of `rank`) parameters.
  ValueId param_constant(const Values& v, std::int64_t rank, std::int64_t axis,
                         const std::string& suffix) {
    if (v.size() == 1) return f32_constant(v, {1}, suffix);
    Shape s(sz(rank), 1);
    s[sz(axis)] = i64(v.size());
    return f32_constant(v, s, suffix);
  }
  Shape value_shape(ValueId v) const { return graph_.value(v).shape; }
  ElementType value_type(ValueId v) const { return graph_.value(v).type; }

  // The tensor as f32 IR value (integers carried exactly up to 2^24).
  ValueId f32(Operand& o) {
    if (o.f32_value.valid()) return o.f32_value;
    if (o.literal) {
      if (o.type != kFloat && !is_integer_type(o.type)) {
        unsupported("constant of element type " + onnx_type_name(o.type) + " is not supported");
      }
      if (is_integer_type(o.type) && max_abs(range_of(o.literal->values)) > kF32ExactLimit) {
        spdlog::warn("import {}: integer constant beyond 2^24 is rounded to f32", label());
      }
      o.f32_value = f32_constant(o.literal->values, ir_shape(o.shape), "const");
      return o.f32_value;
    }
    if (value_type(o.value) == ElementType::f32) return o.value;
    o.f32_value = emit(OpKind::Convert, {o.value}, graph::ConvertAttrs{ElementType::f32}, "to_f32");
    return o.f32_value;
  }

  // The tensor in its own ONNX element type.
  ValueId native(Operand& o, const std::string& what) {
    auto type = to_element_type(o.type);
    if (!type) {
      unsupported(what + " has element type " + onnx_type_name(o.type) +
                  " (qfuse tensors are FLOAT, UINT8, INT8, INT32)");
    }
    if (o.literal) return constant(to_tensor(*o.literal, label()), "const");
    if (value_type(o.value) == *type) return o.value;
    return emit(OpKind::Convert, {o.value}, graph::ConvertAttrs{*type}, "to_" +
                                                                           onnx_type_name(o.type));
  }

  Operand make_float(ValueId v, Shape logical) {
    Operand o;
    o.type = kFloat;
    o.value = v;
    o.shape = std::move(logical);
    return o;
  }
  Operand make_literal(int type, Shape shape, Values values) {
    Operand o;
    o.type = type;
    o.shape = shape;
    if (is_integer_type(type)) o.range = range_of(values);
    o.literal = std::make_shared<const Literal>(Literal{type, std::move(shape), std::move(values)});
    return o;
  }
  // Integer result carried in f32: checks that ONNX would not wrap around.
  Operand make_integer(ValueId v, int type, Shape logical, Interval r) {
    const Interval t = type_range(type);
    if (r.lo < t.lo || r.hi > t.hi) {
      unsupported("the " + onnx_type_name(type) + " result may wrap around (values in [" +
                  std::to_string(r.lo) + ", " + std::to_string(r.hi) +
                  "]); qfuse computes integers exactly only without overflow");
    }
    if (max_abs(r) > kF32ExactLimit) {
      spdlog::warn("import {}: integer values up to {} exceed 2^24; the unfused f32 reference "
                   "may round them",
                   label(), max_abs(r));
    }
    Operand o;
    o.type = type;
    o.value = v;
    o.shape = std::move(logical);
    o.range = r;
    return o;
  }
  Interval int_range(const Operand& o) const { return o.range ? *o.range : type_range(o.type); }

  // --- the model -----------------------------------------------------------
  void bind_inputs(const std::set<std::string>& initializers);
  void import_node(const ::onnx::NodeProto& node, std::size_t index);
  void mark_outputs();
  void remove_dead_nodes();
  bool try_fold(AttrReader& a);

  // --- operators -----------------------------------------------------------
  void op_constant(AttrReader& a);
  void op_identity(AttrReader& a);
  void op_unary(AttrReader& a);
  void op_elu_like(AttrReader& a);
  void op_hard_sigmoid(AttrReader& a);
  void op_neg(AttrReader& a);
  void op_reciprocal(AttrReader& a);
  void op_binary(AttrReader& a);
  void op_variadic(AttrReader& a);
  void op_prelu(AttrReader& a);
  void op_clip(AttrReader& a);
  void op_cast(AttrReader& a);
  void op_conv(AttrReader& a);
  void op_conv_transpose(AttrReader& a);
  void op_gemm(AttrReader& a);
  void op_matmul(AttrReader& a);
  void op_batch_norm(AttrReader& a);
  void op_pool(AttrReader& a);
  void op_global_pool(AttrReader& a);
  void op_flatten(AttrReader& a);
  void op_reshape(AttrReader& a);
  void op_squeeze(AttrReader& a);
  void op_unsqueeze(AttrReader& a);
  // Squeeze / Unsqueeze axes: the attribute before opset 13, input 1 from
  // it (optional for Squeeze, required for Unsqueeze).
  Ints axes_attribute_or_input(AttrReader& a, bool input_required);
  void op_transpose(AttrReader& a);
  void op_concat(AttrReader& a);
  void op_resize(AttrReader& a);
  void op_slice(AttrReader& a);
  void op_reduce_mean(AttrReader& a);
  void op_pow(AttrReader& a);
  void op_softmax(AttrReader& a);
  void op_quantize(AttrReader& a);
  void op_dequantize(AttrReader& a);
  void op_conv_integer(AttrReader& a);
  void op_matmul_integer(AttrReader& a);
  void op_qlinear_conv(AttrReader& a);
  void op_qlinear_matmul(AttrReader& a);
  void op_dropout(AttrReader& a);

  // helpers of the operators
  Operand binary(OpKind kind, Operand& x, Operand& y, const std::string& suffix);
  void reshape_to(Operand& x, const Shape& target);
  graph::ConvAttrs conv_attrs(AttrReader& a, const Shape& x, const Shape& w);
  QuantParams quant_params(std::size_t scale_i, std::size_t zp_i, std::int64_t axis_attr,
                           const Shape& x_shape, int default_type);
  ValueId emit_quantize(ValueId x, const QuantParams& p, std::int64_t rank);
  ValueId emit_dequantize_weight(const Literal& q, const QuantParams& p);
  ValueId integer_weight(Operand& w, const Values& zp, std::int64_t zp_axis, bool transpose,
                         std::int64_t rank);
  ValueId subtract_zero_point(ValueId x, const Values& zp, std::int64_t rank, std::int64_t axis);
  double integer_conv_bound(Operand& x, const Values& x_zp, Operand& w, const Values& w_zp,
                            std::int64_t reduce_from);
  ValueId weight_matrix(Operand& b, bool transpose);
  // The values of a constant, or of the dequantize of a constant computed as
  // the unfused runtime does ((q - zp) * s in f32); nullopt otherwise.
  std::optional<Values> constant_values(const Operand& o) const;
  ValueId requantize(ValueId acc, const Values& multiplier, std::int64_t rank,
                     std::int64_t axis, const Values& y_zp, int y_type);

  const ::onnx::ModelProto& model_;
  const ImportOptions& options_;
  std::string origin_;
  graph::Graph graph_;
  graph::Builder b_;
  int opset_ = 0;
  std::unordered_map<std::string, Operand> tensors_;
  std::set<std::string> used_names_;
  const ::onnx::NodeProto* node_ = nullptr;
  std::string base_;
};

// ---------------------------------------------------------------------------
// Shape helpers shared by folding and IR emission.

Shape broadcast(const Shape& a, const Shape& b, bool& ok) {
  const std::size_t r = std::max(a.size(), b.size());
  Shape out(r);
  ok = true;
  for (std::size_t i = 0; i < r; ++i) {
    const std::int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    const std::int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da != db && da != 1 && db != 1) ok = false;
    out[i] = std::max(da, db);
  }
  return out;
}

// Offsets into `shape` (right-aligned, broadcast) for every element of `out`.
std::vector<std::size_t> broadcast_offsets(const Shape& shape, const Shape& out) {
  const std::size_t r = out.size();
  Shape padded(r - shape.size(), 1);
  padded.insert(padded.end(), shape.begin(), shape.end());
  std::vector<std::int64_t> strides(r, 0);
  std::int64_t s = 1;
  for (std::size_t i = r; i-- > 0;) {
    strides[i] = padded[i] == 1 ? 0 : s;
    s *= padded[i];
  }
  std::vector<std::size_t> offsets(sz(element_count(out)));
  std::vector<std::int64_t> idx(r, 0);
  for (std::size_t k = 0; k < offsets.size(); ++k) {
    std::int64_t off = 0;
    for (std::size_t d = 0; d < r; ++d) off += idx[d] * strides[d];
    offsets[k] = sz(off);
    for (std::size_t d = r; d-- > 0;) {
      if (++idx[d] < out[d]) break;
      idx[d] = 0;
    }
  }
  return offsets;
}

Values transpose_values(const Values& v, const Shape& shape, const Ints& perm, Shape& out_shape) {
  const std::size_t r = shape.size();
  out_shape.assign(r, 0);
  for (std::size_t i = 0; i < r; ++i) out_shape[i] = shape[sz(perm[i])];
  std::vector<std::int64_t> in_strides(r, 1);
  for (std::size_t i = r; i-- > 1;) in_strides[i - 1] = in_strides[i] * shape[i];
  Values out(v.size());
  std::vector<std::int64_t> idx(r, 0);
  for (std::size_t k = 0; k < out.size(); ++k) {
    std::int64_t off = 0;
    for (std::size_t d = 0; d < r; ++d) off += idx[d] * in_strides[sz(perm[d])];
    out[k] = v[sz(off)];
    for (std::size_t d = r; d-- > 0;) {
      if (++idx[d] < out_shape[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

// Casts one value the way ONNX (numpy astype) does, for folding.
double cast_value(double v, int to) {
  if (to == kFloat) return static_cast<double>(static_cast<float>(v));
  if (to == kDouble) return v;
  if (to == kBool) return v != 0.0 ? 1.0 : 0.0;
  if (!std::isfinite(v)) return 0.0;
  const double t = std::trunc(v);
  const Interval r = type_range(to);
  if (t >= r.lo && t <= r.hi) return t;
  const double span = r.hi - r.lo + 1.0;
  double w = std::fmod(t - r.lo, span);
  if (w < 0) w += span;
  return w + r.lo;
}

// ---------------------------------------------------------------------------

void Importer::bind_inputs(const std::set<std::string>& initializers) {
  const auto& g = model_.graph();
  // Explicit bindings first; they also fix dim_params by name.
  std::map<std::string, std::int64_t> params;
  std::set<std::string> known;
  for (const auto& vi : g.input()) {
    if (initializers.count(vi.name())) continue;
    known.insert(vi.name());
  }
  for (const auto& [name, bytes] : options_.constant_inputs) {
    if (!known.count(name)) {
      throw GraphError("import " + origin_ + ": a constant is given for '" + name +
                       "', which is not a graph input");
    }
    ::onnx::TensorProto t;
    if (!t.ParseFromString(bytes)) {
      throw IoError("import " + origin_ + ": the constant for input '" + name +
                    "' is not a serialized TensorProto");
    }
    Literal lit = decode_tensor(t, origin_ + " constant input '" + name + "'");
    tensors_[name] = make_literal(lit.type, lit.shape, std::move(lit.values));
  }
  for (const auto& [name, shape] : options_.input_shapes) {
    if (!known.count(name)) {
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      throw GraphError("import " + origin_ + ": a shape is given for '" + name +
                       "', which is not a graph input (inputs: " + list + ")");
    }
  }
  for (const auto& vi : g.input()) {
    auto it = options_.input_shapes.find(vi.name());
    if (it == options_.input_shapes.end() || !vi.type().tensor_type().has_shape()) continue;
    const auto& dims = vi.type().tensor_type().shape().dim();
    const Shape& given = it->second;
    if (static_cast<int>(given.size()) != dims.size()) {
      throw GraphError("import " + origin_ + ": input '" + vi.name() + "' is given shape " +
                       to_string(given) + " but the model declares rank " +
                       std::to_string(dims.size()));
    }
    for (int d = 0; d < dims.size(); ++d) {
      const auto& dim = dims[d];
      if (dim.has_dim_value() && dim.dim_value() != given[sz(d)]) {
        throw GraphError("import " + origin_ + ": input '" + vi.name() + "' is given shape " +
                         to_string(given) + " but dimension " + std::to_string(d) + " is " +
                         std::to_string(dim.dim_value()) + " in the model");
      }
      if (dim.has_dim_param()) {
        auto [p, inserted] = params.emplace(dim.dim_param(), given[sz(d)]);
        if (!inserted && p->second != given[sz(d)]) {
          throw GraphError("import " + origin_ + ": dimension '" + dim.dim_param() +
                           "' is bound to both " + std::to_string(p->second) + " and " +
                           std::to_string(given[sz(d)]));
        }
      }
    }
  }
  for (const auto& vi : g.input()) {
    if (initializers.count(vi.name()) || options_.constant_inputs.count(vi.name())) continue;
    const auto& tt = vi.type().tensor_type();
    if (!vi.type().has_tensor_type()) {
      throw UnsupportedError("import " + origin_ + ": input '" + vi.name() +
                             "' is not a tensor (sequences, maps and optionals are not supported)");
    }
    auto type = to_element_type(tt.elem_type());
    if (!type) {
      throw UnsupportedError("import " + origin_ + ": input '" + vi.name() +
                             "' has element type " + onnx_type_name(tt.elem_type()) +
                             " (qfuse tensors are FLOAT, UINT8, INT8, INT32)");
    }
    Shape shape;
    auto it = options_.input_shapes.find(vi.name());
    if (it != options_.input_shapes.end()) {
      shape = it->second;
    } else {
      if (!tt.has_shape()) {
        throw GraphError("import " + origin_ + ": input '" + vi.name() +
                         "' has no declared shape; bind it (e.g. --shape " + vi.name() +
                         "=1x3x224x224, or give the input tensor)");
      }
      std::string declared;
      for (const auto& dim : tt.shape().dim()) {
        declared += (declared.empty() ? "" : ",") +
                    (dim.has_dim_value() ? std::to_string(dim.dim_value())
                                         : dim.has_dim_param() ? dim.dim_param() : "?");
      }
      for (int d = 0; d < tt.shape().dim_size(); ++d) {
        const auto& dim = tt.shape().dim(d);
        if (dim.has_dim_value()) {
          shape.push_back(dim.dim_value());
        } else if (dim.has_dim_param() && params.count(dim.dim_param())) {
          shape.push_back(params.at(dim.dim_param()));
        } else {
          throw GraphError(
              "import " + origin_ + ": input '" + vi.name() + "' has unresolved dimension " +
              std::to_string(d) + (dim.has_dim_param() ? " ('" + dim.dim_param() + "')" : "") +
              " in [" + declared + "]; bind it (e.g. --shape " + vi.name() +
              "=1x3x224x224, or give the input tensor)");
        }
      }
    }
    if (shape.empty()) {
      throw UnsupportedError("import " + origin_ + ": input '" + vi.name() +
                             "' is a rank-0 tensor (not supported)");
    }
    for (auto d : shape) {
      if (d < 1) {
        throw UnsupportedError("import " + origin_ + ": input '" + vi.name() + "' has shape " +
                               to_string(shape) + " (empty tensors are not supported)");
      }
    }
    Operand o;
    o.type = tt.elem_type();
    o.shape = shape;
    o.value = b_.input(vi.name(), shape, *type);
    used_names_.insert(vi.name());
    if (is_integer_type(o.type)) o.range = type_range(o.type);
    tensors_[vi.name()] = o;
  }
}

graph::Graph Importer::run() {
  for (const auto& op : model_.opset_import()) {
    if (op.domain().empty() || op.domain() == "ai.onnx") opset_ = static_cast<int>(op.version());
  }
  if (opset_ < kMinOpset || opset_ > kMaxOpset) {
    throw UnsupportedError("import " + origin_ + ": opset " + std::to_string(opset_) +
                           " is not supported (expected " + std::to_string(kMinOpset) + " to " +
                           std::to_string(kMaxOpset) + ")");
  }
  const auto& g = model_.graph();
  std::set<std::string> initializers;
  for (const auto& t : g.initializer()) {
    Literal lit = decode_tensor(t, origin_ + " initializer '" + t.name() + "'");
    tensors_[t.name()] = make_literal(lit.type, lit.shape, std::move(lit.values));
    initializers.insert(t.name());
  }
  if (g.sparse_initializer_size() > 0) {
    throw UnsupportedError("import " + origin_ + ": sparse initializers are not supported");
  }
  bind_inputs(initializers);
  for (int i = 0; i < g.node_size(); ++i) import_node(g.node(i), static_cast<std::size_t>(i));
  mark_outputs();
  remove_dead_nodes();
  if (!odd_zero_points_.empty()) {
    // One line for the model: exporters write this for most of its tensors.
    std::string names;
    for (std::size_t i = 0; i < std::min<std::size_t>(3, odd_zero_points_.size()); ++i) {
      names += (i ? ", '" : "'") + odd_zero_points_[i] + "'";
    }
    if (odd_zero_points_.size() > 3) names += ", ...";
    spdlog::warn("import {}: {} Q/DQ pair(s) have an odd zero point - qmin ({}); as FakeQuantize "
                 "nodes, inputs exactly on a rounding tie may differ from ONNX by one "
                 "quantization step",
                 origin_, odd_zero_points_.size(), names);
  }
  return std::move(graph_);
}

void Importer::import_node(const ::onnx::NodeProto& node, std::size_t index) {
  static const std::unordered_map<std::string, Handler> kHandlers = {
      {"Constant", &Importer::op_constant},
      {"Identity", &Importer::op_identity},
      {"Dropout", &Importer::op_dropout},
      {"Relu", &Importer::op_unary},
      {"Sigmoid", &Importer::op_unary},
      {"Tanh", &Importer::op_unary},
      {"Exp", &Importer::op_unary},
      {"Abs", &Importer::op_unary},
      {"Sqrt", &Importer::op_unary},
      {"Round", &Importer::op_unary},
      {"HardSwish", &Importer::op_unary},
      {"Elu", &Importer::op_elu_like},
      {"LeakyRelu", &Importer::op_elu_like},
      {"HardSigmoid", &Importer::op_hard_sigmoid},
      {"Neg", &Importer::op_neg},
      {"Reciprocal", &Importer::op_reciprocal},
      {"Add", &Importer::op_binary},
      {"Sub", &Importer::op_binary},
      {"Mul", &Importer::op_binary},
      {"Div", &Importer::op_binary},
      {"Min", &Importer::op_variadic},
      {"Max", &Importer::op_variadic},
      {"Sum", &Importer::op_variadic},
      {"Mean", &Importer::op_variadic},
      {"PRelu", &Importer::op_prelu},
      {"Clip", &Importer::op_clip},
      {"Cast", &Importer::op_cast},
      {"Conv", &Importer::op_conv},
      {"ConvTranspose", &Importer::op_conv_transpose},
      {"Gemm", &Importer::op_gemm},
      {"MatMul", &Importer::op_matmul},
      {"BatchNormalization", &Importer::op_batch_norm},
      {"MaxPool", &Importer::op_pool},
      {"AveragePool", &Importer::op_pool},
      {"GlobalAveragePool", &Importer::op_global_pool},
      {"GlobalMaxPool", &Importer::op_global_pool},
      {"Flatten", &Importer::op_flatten},
      {"Reshape", &Importer::op_reshape},
      {"Squeeze", &Importer::op_squeeze},
      {"Unsqueeze", &Importer::op_unsqueeze},
      {"Transpose", &Importer::op_transpose},
      {"Concat", &Importer::op_concat},
      {"Resize", &Importer::op_resize},
      {"Slice", &Importer::op_slice},
      {"ReduceMean", &Importer::op_reduce_mean},
      {"Pow", &Importer::op_pow},
      {"Softmax", &Importer::op_softmax},
      {"QuantizeLinear", &Importer::op_quantize},
      {"DequantizeLinear", &Importer::op_dequantize},
      {"ConvInteger", &Importer::op_conv_integer},
      {"MatMulInteger", &Importer::op_matmul_integer},
      {"QLinearConv", &Importer::op_qlinear_conv},
      {"QLinearMatMul", &Importer::op_qlinear_matmul},
  };
  node_ = &node;
  base_ = !node.name().empty()                           ? node.name()
          : node.output_size() > 0 && !node.output(0).empty() ? node.output(0)
                                                           : node.op_type() + "_" + std::to_string(index);
  if (!node.domain().empty() && node.domain() != "ai.onnx") {
    unsupported("operator domain '" + node.domain() + "' is not supported (only the default " +
                "ONNX domain)");
  }
  AttrReader a(node, label());
  if (!try_fold(a)) {
    auto it = kHandlers.find(node.op_type());
    if (it == kHandlers.end()) unsupported("unsupported operator " + node.op_type());
    (this->*(it->second))(a);
  }
  a.check_all_used();
  for (int k = 0; k < node.output_size(); ++k) {
    if (!node.output(k).empty() && !tensors_.count(node.output(k))) {
      unsupported("output " + std::to_string(k) + " ('" + node.output(k) + "') is not supported");
    }
  }
}

void Importer::mark_outputs() {
  std::set<std::uint32_t> marked;
  for (const auto& vi : model_.graph().output()) {
    auto it = tensors_.find(vi.name());
    if (it == tensors_.end()) {
      throw GraphError("import " + origin_ + ": graph output '" + vi.name() +
                       "' is not produced by any node");
    }
    Operand& o = it->second;
    node_ = nullptr;
    base_ = vi.name();
    auto type = to_element_type(o.type);
    if (!type) {
      throw UnsupportedError("import " + origin_ + ": output '" + vi.name() +
                             "' has element type " + onnx_type_name(o.type) +
                             " (qfuse tensors are FLOAT, UINT8, INT8, INT32)");
    }
    ValueId v;
    if (o.literal) {
      used_names_.insert(vi.name());
      v = b_.constant(vi.name(), to_tensor(*o.literal, "output '" + vi.name() + "'"));
    } else {
      if (value_type(o.value) != *type) {
        v = b_.op(OpKind::Convert, {o.value}, graph::ConvertAttrs{*type}, unique_name(vi.name()));
      } else {
        v = o.value;
      }
      const bool is_input = std::find(graph_.inputs().begin(), graph_.inputs().end(), v) !=
                            graph_.inputs().end();
      if (value_shape(v) != o.shape || is_input || marked.count(v.index) ||
          graph_.value(v).is_constant()) {
        v = b_.op(OpKind::Reshape, {v}, graph::ReshapeAttrs{o.shape}, unique_name(vi.name()));
      }
    }
    graph_.value(v).name = vi.name();
    marked.insert(v.index);
    graph_.mark_output(v);
  }
}

void Importer::remove_dead_nodes() {
  std::vector<int> uses(graph_.value_count(), 0);
  for (std::size_t i = 0; i < graph_.node_capacity(); ++i) {
    const auto& n = graph_.node(graph::NodeId{static_cast<std::uint32_t>(i)});
    if (n.erased) continue;
    for (ValueId in : n.inputs) ++uses[in.index];
  }
  for (ValueId out : graph_.outputs()) ++uses[out.index];
  // Producers come before consumers, so one backward sweep finds every dead node.
  for (std::size_t i = graph_.node_capacity(); i-- > 0;) {
    const graph::NodeId id{static_cast<std::uint32_t>(i)};
    const auto& n = graph_.node(id);
    if (n.erased) continue;
    const bool dead = std::all_of(n.outputs.begin(), n.outputs.end(),
                                  [&](ValueId v) { return uses[v.index] == 0; });
    if (!dead) continue;
    for (ValueId in : n.inputs) --uses[in.index];
    graph_.erase_node(id);
  }
}

// ---------------------------------------------------------------------------
// Folding: nodes whose inputs are all known at import.

bool Importer::try_fold(AttrReader& a) {
  const std::string& op = node_->op_type();
  if (op == "Shape") {
    Operand& x = in(0);
    const std::int64_t r = rank_of(x.shape);
    auto clampi = [&](std::int64_t v) { return std::clamp(v < 0 ? v + r : v, std::int64_t{0}, r); };
    const std::int64_t start = clampi(a.i("start", 0));
    const std::int64_t end = clampi(a.i("end", r));
    Values v;
    for (std::int64_t d = start; d < end; ++d) v.push_back(static_cast<double>(x.shape[sz(d)]));
    set_out(0, make_literal(kInt64, {i64(v.size())}, v));
    return true;
  }
  if (op == "Size") {
    set_out(0, make_literal(kInt64, {}, {static_cast<double>(element_count(in(0).shape))}));
    return true;
  }
  if (op == "ConstantOfShape") {
    const Literal& s = lit_in(0, "the shape");
    Shape shape(s.values.begin(), s.values.end());
    Values fill{0.0};
    int type = kFloat;
    if (const auto* t = a.tensor("value")) {
      Literal v = decode_tensor(*t, label());
      expect(v.values.size() == 1, "value must hold one element");
      fill = v.values;
      type = v.type;
    }
    for (auto d : shape) {
      if (d < 1) unsupported("empty tensors are not supported (shape " + to_string(shape) + ")");
    }
    set_out(0, make_literal(type, shape, Values(sz(element_count(shape)), fill[0])));
    return true;
  }
  static const std::set<std::string> kFoldable = {
      "Identity", "Cast", "Concat", "Gather", "Slice", "Range", "Add", "Sub", "Mul",
      "Div",      "Neg",  "Min",    "Max",    "Transpose", "Equal", "Floor", "Ceil"};
  if (!kFoldable.count(op)) return false;
  if (num_inputs() == 0) return false;
  for (std::size_t k = 0; k < num_inputs(); ++k) {
    if (has_in(k) && !in(k).literal) return false;
  }
  const Literal& x = *in(0).literal;
  if (op == "Identity") {
    set_out(0, in(0));
  } else if (op == "Cast") {
    const int to = static_cast<int>(a.i("to", kFloat));
    Values v(x.values.size());
    for (std::size_t k = 0; k < v.size(); ++k) v[k] = cast_value(x.values[k], to);
    set_out(0, make_literal(to, x.shape, std::move(v)));
  } else if (op == "Transpose") {
    Ints perm = a.ints("perm");
    if (perm.empty()) {
      for (std::size_t d = x.shape.size(); d-- > 0;) perm.push_back(i64(d));
    }
    Shape out;
    Values v = transpose_values(x.values, x.shape, perm, out);
    set_out(0, make_literal(x.type, out, std::move(v)));
  } else if (op == "Concat") {
    const std::int64_t axis = normalize_axis(a.i("axis", 0), rank_of(x.shape), "axis");
    Shape out = x.shape;
    out[sz(axis)] = 0;
    for (std::size_t k = 0; k < num_inputs(); ++k) out[sz(axis)] += in(k).shape[sz(axis)];
    const std::int64_t outer = std::accumulate(x.shape.begin(), x.shape.begin() + axis,
                                               std::int64_t{1}, std::multiplies<>());
    Values v;
    for (std::int64_t o = 0; o < outer; ++o) {
      for (std::size_t k = 0; k < num_inputs(); ++k) {
        const Literal& l = *in(k).literal;
        const std::int64_t chunk = element_count(l.shape) / std::max<std::int64_t>(outer, 1);
        v.insert(v.end(), l.values.begin() + o * chunk, l.values.begin() + (o + 1) * chunk);
      }
    }
    set_out(0, make_literal(x.type, out, std::move(v)));
  } else if (op == "Gather") {
    const Literal& idx = *in(1).literal;
    const std::int64_t axis = normalize_axis(a.i("axis", 0), rank_of(x.shape), "axis");
    Shape out(x.shape.begin(), x.shape.begin() + axis);
    out.insert(out.end(), idx.shape.begin(), idx.shape.end());
    out.insert(out.end(), x.shape.begin() + axis + 1, x.shape.end());
    const std::int64_t outer = std::accumulate(x.shape.begin(), x.shape.begin() + axis,
                                               std::int64_t{1}, std::multiplies<>());
    const std::int64_t inner = std::accumulate(x.shape.begin() + axis + 1, x.shape.end(),
                                               std::int64_t{1}, std::multiplies<>());
    const std::int64_t n = x.shape[sz(axis)];
    Values v;
    for (std::int64_t o = 0; o < outer; ++o) {
      for (double id : idx.values) {
        auto j = static_cast<std::int64_t>(id);
        if (j < 0) j += n;
        expect(j >= 0 && j < n, "index " + std::to_string(j) + " out of range");
        const auto from = x.values.begin() + (o * n + j) * inner;
        v.insert(v.end(), from, from + inner);
      }
    }
    set_out(0, make_literal(x.type, out, std::move(v)));
  } else if (op == "Slice") {
    const Literal& starts = *in(1).literal;
    const Literal& ends = *in(2).literal;
    const std::int64_t r = rank_of(x.shape);
    Values axes, steps;
    if (has_in(3)) axes = in(3).literal->values;
    if (has_in(4)) steps = in(4).literal->values;
    if (axes.empty()) {
      for (std::size_t d = 0; d < starts.values.size(); ++d) axes.push_back(static_cast<double>(d));
    }
    if (steps.empty()) steps.assign(starts.values.size(), 1.0);
    std::vector<std::int64_t> lo(sz(r), 0), step(sz(r), 1), count(x.shape.begin(), x.shape.end());
    for (std::size_t k = 0; k < axes.size(); ++k) {
      const std::int64_t ax = normalize_axis(static_cast<std::int64_t>(axes[k]), r, "axis");
      const std::int64_t dim = x.shape[sz(ax)];
      const auto st = static_cast<std::int64_t>(steps[k]);
      expect(st != 0, "step 0");
      auto clampd = [&](double v, std::int64_t lo_b, std::int64_t hi_b) {
        double c = v < 0 ? v + static_cast<double>(dim) : v;
        return static_cast<std::int64_t>(std::clamp(c, static_cast<double>(lo_b),
                                                    static_cast<double>(hi_b)));
      };
      std::int64_t s = 0, e = 0;
      if (st > 0) {
        s = clampd(starts.values[k], 0, dim);
        e = clampd(ends.values[k], 0, dim);
        count[sz(ax)] = std::max<std::int64_t>(0, (e - s + st - 1) / st);
      } else {
        s = clampd(starts.values[k], 0, dim - 1);
        e = clampd(ends.values[k], -1, dim - 1);
        count[sz(ax)] = std::max<std::int64_t>(0, (s - e + (-st) - 1) / (-st));
      }
      lo[sz(ax)] = s;
      step[sz(ax)] = st;
    }
    Shape out(count.begin(), count.end());
    std::vector<std::int64_t> strides(sz(r), 1);
    for (std::size_t d = sz(r); d-- > 1;) strides[d - 1] = strides[d] * x.shape[d];
    Values v(sz(element_count(out)));
    std::vector<std::int64_t> idx(sz(r), 0);
    for (std::size_t k = 0; k < v.size(); ++k) {
      std::int64_t off = 0;
      for (std::size_t d = 0; d < sz(r); ++d) off += (lo[d] + idx[d] * step[d]) * strides[d];
      v[k] = x.values[sz(off)];
      for (std::size_t d = sz(r); d-- > 0;) {
        if (++idx[d] < out[d]) break;
        idx[d] = 0;
      }
    }
    set_out(0, make_literal(x.type, out, std::move(v)));
  } else if (op == "Range") {
    const double start = x.values.at(0), limit = in(1).literal->values.at(0),
                 delta = in(2).literal->values.at(0);
    const auto n = static_cast<std::int64_t>(
        std::max(std::ceil((limit - start) / delta), 0.0));
    Values v;
    for (std::int64_t k = 0; k < n; ++k) {
      v.push_back(cast_value(start + static_cast<double>(k) * delta, x.type));
    }
    set_out(0, make_literal(x.type, {n}, std::move(v)));
  } else if (op == "Neg" || op == "Floor" || op == "Ceil") {
    Values v = x.values;
    for (double& e : v) e = op == "Neg" ? -e : op == "Floor" ? std::floor(e) : std::ceil(e);
    set_out(0, make_literal(x.type, x.shape, std::move(v)));
  } else {
    // Elementwise binary with numpy broadcasting; Min/Max/Add/Mul may be variadic.
    if (num_inputs() != 2) return false;
    const Literal& y = *in(1).literal;
    bool ok = false;
    Shape out = broadcast(x.shape, y.shape, ok);
    expect(ok, "shapes " + to_string(x.shape) + " and " + to_string(y.shape) +
                   " do not broadcast");
    const auto ox = broadcast_offsets(x.shape, out);
    const auto oy = broadcast_offsets(y.shape, out);
    const bool f = x.type == kFloat;
    Values v(ox.size());
    for (std::size_t k = 0; k < v.size(); ++k) {
      const double p = x.values[ox[k]], q = y.values[oy[k]];
      double r = 0;
      if (op == "Add") r = p + q;
      else if (op == "Sub") r = p - q;
      else if (op == "Mul") r = p * q;
      else if (op == "Div") r = f ? p / q : (q == 0 ? 0 : std::trunc(p / q));
      else if (op == "Min") r = std::min(p, q);
      else if (op == "Max") r = std::max(p, q);
      else if (op == "Equal") r = p == q ? 1 : 0;
      v[k] = op == "Equal" ? r : cast_value(r, x.type);
    }
    set_out(0, make_literal(op == "Equal" ? kBool : x.type, out, std::move(v)));
  }
  return true;
}

// ---------------------------------------------------------------------------
// Operators.

void Importer::op_constant(AttrReader& a) {
  Literal lit;
  if (const auto* t = a.tensor("value")) {
    lit = decode_tensor(*t, label());
  } else if (a.has("value_float")) {
    lit = {kFloat, {}, {static_cast<double>(a.f("value_float", 0))}};
  } else if (a.has("value_floats")) {
    auto v = a.floats("value_floats");
    lit = {kFloat, {i64(v.size())}, Values(v.begin(), v.end())};
  } else if (a.has("value_int")) {
    lit = {kInt64, {}, {static_cast<double>(a.i("value_int", 0))}};
  } else if (a.has("value_ints")) {
    auto v = a.ints("value_ints");
    lit = {kInt64, {i64(v.size())}, {}};
    for (auto e : v) lit.values.push_back(static_cast<double>(e));
  } else {
    unsupported("only the value, value_float(s) and value_int(s) forms are supported");
  }
  set_out(0, make_literal(lit.type, lit.shape, std::move(lit.values)));
}

void Importer::op_identity(AttrReader&) { set_out(0, in(0)); }

void Importer::op_dropout(AttrReader& a) {
  // Inference: Dropout is the identity. Training mode and the mask are not imported.
  a.ignore("seed");
  a.ignore("ratio");  // opset 10's attribute form
  if (has_in(2)) {
    const Literal& t = lit_in(2, "training_mode");
    if (!t.values.empty() && t.values[0] != 0.0) unsupported("training_mode = true is not supported");
  }
  max_outputs(1);
  set_out(0, in(0));
}

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
  bool ok = false;
  Shape out_shape = broadcast(x.shape, y.shape, ok);
  if (!ok) {
    malformed("shapes " + to_string(x.shape) + " and " + to_string(y.shape) + " do not broadcast");
  }
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
  bool ok = false;
  Shape out = broadcast(x.shape, slope.shape, ok);
  if (!ok || out != x.shape) {
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
                " (qfuse tensors are FLOAT, UINT8, INT8, INT32)");
  }
  if (!to_element_type(x.type)) {
    unsupported("Cast from " + onnx_type_name(x.type) +
                " (qfuse tensors are FLOAT, UINT8, INT8, INT32)");
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
  const std::string auto_pad = a.s("auto_pad", "NOTSET");
  c.pads_begin.assign(pads.begin(), pads.begin() + i64(spatial));
  c.pads_end.assign(pads.begin() + i64(spatial), pads.end());
  if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    for (std::size_t i = 0; i < spatial; ++i) {
      const std::int64_t in_size = x[i + 2];
      const std::int64_t out = (in_size + c.strides[i] - 1) / c.strides[i];
      const std::int64_t extent = (w[i + 2] - 1) * c.dilations[i] + 1;
      const std::int64_t total =
          std::max<std::int64_t>(0, (out - 1) * c.strides[i] + extent - in_size);
      const std::int64_t small = total / 2;
      c.pads_begin[i] = auto_pad == "SAME_UPPER" ? small : total - small;
      c.pads_end[i] = total - c.pads_begin[i];
    }
  } else if (auto_pad == "VALID") {
    std::fill(c.pads_begin.begin(), c.pads_begin.end(), 0);
    std::fill(c.pads_end.begin(), c.pads_end.end(), 0);
  } else if (auto_pad != "NOTSET") {
    a.unsupported_value("auto_pad", "value '" + auto_pad + "'");
  }
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
  if (b.literal) {
    if (!transpose) return f32(b);
    Shape s;
    Values v = transpose_values(b.literal->values, b.shape, {1, 0}, s);
    return f32_constant(v, s, "weights");
  }
  if (b.dq_weight) {
    if (!transpose) return b.value;
    Literal q = b.dq_weight->q;
    Shape s;
    q.values = transpose_values(q.values, q.shape, {1, 0}, s);
    q.shape = s;
    QuantParams p = b.dq_weight->params;
    if (p.axis >= 0) p.axis = 1 - p.axis;
    return emit_dequantize_weight(q, p);
  }
  if (!transpose) return b.value;
  return emit(OpKind::Transpose, {f32(b)}, graph::TransposeAttrs{{1, 0}}, "transpose_b");
}

std::optional<Values> Importer::constant_values(const Operand& o) const {
  if (o.literal) return o.literal->values;
  if (!o.dq_weight) return std::nullopt;
  const Literal& q = o.dq_weight->q;
  const QuantParams& p = o.dq_weight->params;
  // Only a vector or a scalar: its index is its channel when per axis.
  if (q.shape.size() > 1) return std::nullopt;
  Values v(q.values.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::size_t c = p.scale.size() == 1 ? 0 : i;
    const float diff = static_cast<float>(q.values[i]) - static_cast<float>(p.zero_point[c]);
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
      Values v = C.literal->values;
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

void Importer::reshape_to(Operand& x, const Shape& target) {
  x.shape = target;
  x.quantized = nullptr;
  x.dq_weight = nullptr;
  if (x.literal) {
    x = make_literal(x.type, target, x.literal->values);
    return;
  }
  const ValueId v = x.value;
  if (value_shape(v) == ir_shape(target)) return;
  x.value = emit(OpKind::Reshape, {v}, graph::ReshapeAttrs{ir_shape(target)});
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
  const std::size_t spatial = x.shape.size() - 2;
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
  const std::string auto_pad = a.s("auto_pad", "NOTSET");
  for (std::size_t i = 0; i < spatial; ++i) {
    const std::int64_t in_size = x.shape[i + 2];
    const std::int64_t extent = (p.kernel[i] - 1) * p.dilations[i] + 1;
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      const std::int64_t out = (in_size + p.strides[i] - 1) / p.strides[i];
      const std::int64_t total =
          std::max<std::int64_t>(0, (out - 1) * p.strides[i] + extent - in_size);
      const std::int64_t small = total / 2;
      p.pads_begin[i] = auto_pad == "SAME_UPPER" ? small : total - small;
      p.pads_end[i] = total - p.pads_begin[i];
    } else if (auto_pad == "VALID") {
      p.pads_begin[i] = p.pads_end[i] = 0;
    } else if (auto_pad != "NOTSET") {
      a.unsupported_value("auto_pad", "value '" + auto_pad + "'");
    }
    if (ceil_mode) {
      // Extra cells at the end turn the floor of the output size into its ceiling.
      const std::int64_t padded = in_size + p.pads_begin[i] + p.pads_end[i];
      const std::int64_t out = (padded - extent + p.strides[i] - 1) / p.strides[i] + 1;
      if ((out - 1) * p.strides[i] >= in_size + p.pads_begin[i]) {
        a.unsupported_value("ceil_mode", "where the last window starts in the padding");
      }
      const std::int64_t extra = (out - 1) * p.strides[i] + extent - padded;
      if (extra > 0 && !is_max && !p.exclude_pad) {
        a.unsupported_value("ceil_mode", "with count_include_pad = 1");
      }
      p.pads_end[i] += extra;
    }
  }
  const ValueId y = emit(is_max ? OpKind::MaxPool : OpKind::AvgPool, {f32(x)}, p);
  if (is_integer_type(x.type)) {
    set_out(0, make_integer(y, x.type, value_shape(y), int_range(x)));
  } else {
    set_out(0, make_float(y, value_shape(y)));
  }
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

void Importer::op_flatten(AttrReader& a) {
  Operand x = in(0);
  const std::int64_t r = rank_of(x.shape);
  std::int64_t axis = a.i("axis", 1);
  if (axis < 0) axis += r;
  expect(axis >= 0 && axis <= r, "axis out of range");
  const auto split = x.shape.begin() + axis;
  const Shape out{std::accumulate(x.shape.begin(), split, std::int64_t{1}, std::multiplies<>()),
                  std::accumulate(split, x.shape.end(), std::int64_t{1}, std::multiplies<>())};
  reshape_to(x, out);
  set_out(0, x);
}

void Importer::op_reshape(AttrReader& a) {
  Operand x = in(0);
  const Literal& spec = lit_in(1, "the target shape");
  const bool allow_zero = a.i("allowzero", 0) != 0;
  Shape out;
  std::int64_t infer_at = -1, known = 1;
  for (std::size_t k = 0; k < spec.values.size(); ++k) {
    auto d = static_cast<std::int64_t>(spec.values[k]);
    if (d == 0 && !allow_zero) {
      expect(k < x.shape.size(), "0 in the target shape has no input dimension to copy");
      d = x.shape[k];
    }
    if (d == -1) {
      expect(infer_at < 0, "more than one -1 in the target shape");
      infer_at = i64(k);
      d = 1;
    } else {
      known *= d;
    }
    out.push_back(d);
  }
  const std::int64_t total = element_count(x.shape);
  if (infer_at >= 0) {
    expect(known > 0 && total % known == 0, "cannot infer -1 in the target shape");
    out[sz(infer_at)] = total / known;
  }
  expect(element_count(out) == total, "target shape " + to_string(out) + " has " +
                                          std::to_string(element_count(out)) +
                                          " elements (expected " + std::to_string(total) + ")");
  for (auto d : out) {
    if (d < 1) unsupported("empty tensors are not supported (shape " + to_string(out) + ")");
  }
  reshape_to(x, out);
  set_out(0, x);
}

Ints Importer::axes_attribute_or_input(AttrReader& a, bool input_required) {
  Ints axes;
  if (opset_ < 13) {
    axes = a.ints("axes");
  } else if (input_required || has_in(1)) {
    for (double v : lit_in(1, "axes").values) axes.push_back(static_cast<std::int64_t>(v));
  }
  return axes;
}

void Importer::op_squeeze(AttrReader& a) {
  Operand x = in(0);
  const Ints axes = axes_attribute_or_input(a, false);
  const std::int64_t r = rank_of(x.shape);
  std::set<std::int64_t> drop;
  for (auto ax : axes) {
    const std::int64_t n = normalize_axis(ax, r, "axis");
    expect(x.shape[sz(n)] == 1, "axis " + std::to_string(ax) + " has size " +
                                    std::to_string(x.shape[sz(n)]) + " (expected 1)");
    drop.insert(n);
  }
  Shape out;
  for (std::int64_t d = 0; d < r; ++d) {
    const bool squeeze = axes.empty() ? x.shape[sz(d)] == 1 : drop.count(d) > 0;
    if (!squeeze) out.push_back(x.shape[sz(d)]);
  }
  reshape_to(x, out);
  set_out(0, x);
}

void Importer::op_unsqueeze(AttrReader& a) {
  Operand x = in(0);
  const Ints axes = axes_attribute_or_input(a, true);
  const std::int64_t r = rank_of(x.shape) + i64(axes.size());
  std::set<std::int64_t> add;
  for (auto ax : axes) add.insert(normalize_axis(ax, r, "axis"));
  expect(add.size() == axes.size(), "repeated axes");
  Shape out;
  std::size_t k = 0;
  for (std::int64_t d = 0; d < r; ++d) out.push_back(add.count(d) ? 1 : x.shape[k++]);
  reshape_to(x, out);
  set_out(0, x);
}

void Importer::op_transpose(AttrReader& a) {
  Operand& x = in(0);
  Ints perm = a.ints("perm");
  if (perm.empty()) {
    for (std::size_t d = x.shape.size(); d-- > 0;) perm.push_back(i64(d));
  }
  expect(perm.size() == x.shape.size(), "perm has the wrong length");
  Shape out;
  for (auto p : perm) out.push_back(x.shape.at(sz(p)));
  if (x.shape.size() <= 1) {
    set_out(0, x);
    return;
  }
  Operand y = x;
  y.f32_value = ValueId{};
  y.quantized = nullptr;
  y.dq_weight = nullptr;
  y.value = emit(OpKind::Transpose, {x.value}, graph::TransposeAttrs{perm});
  if (value_type(y.value) == ElementType::f32) y.f32_value = y.value;
  y.shape = out;
  set_out(0, y);
}

void Importer::op_concat(AttrReader& a) {
  Operand& first = in(0);
  const std::int64_t axis = normalize_axis(a.i("axis", 0), rank_of(first.shape), "axis");
  std::vector<ValueId> inputs;
  Shape out = first.shape;
  out[sz(axis)] = 0;
  bool all_native = true;
  std::optional<Interval> r;
  for (std::size_t k = 0; k < num_inputs(); ++k) {
    Operand& o = in(k);
    if (o.type != first.type) malformed("inputs have different element types");
    out[sz(axis)] += o.shape.at(sz(axis));
    if (o.literal || value_type(o.value) == ElementType::f32) all_native = false;
    if (is_integer_type(o.type)) {
      const Interval q = int_range(o);
      r = r ? Interval{std::min(r->lo, q.lo), std::max(r->hi, q.hi)} : q;
    }
  }
  for (std::size_t k = 0; k < num_inputs(); ++k) {
    inputs.push_back(all_native && !is_float(first.type) ? in(k).value : f32(in(k)));
  }
  const ValueId y = emit(OpKind::Concat, std::move(inputs), graph::ConcatAttrs{axis});
  Operand o;
  o.type = first.type;
  o.value = y;
  o.shape = out;
  o.range = r;
  if (value_type(y) == ElementType::f32) o.f32_value = y;
  set_out(0, o);
}

// A slice of a runtime tensor (slices of constants fold in try_fold).
void Importer::op_slice(AttrReader&) {
  Operand& x = in(0);
  const Values& starts = lit_in(1, "starts").values;
  const Values& ends = lit_in(2, "ends").values;
  const std::int64_t r = rank_of(x.shape);
  Values axes;
  if (has_in(3)) axes = lit_in(3, "axes").values;
  if (axes.empty()) {
    for (std::size_t d = 0; d < starts.size(); ++d) axes.push_back(static_cast<double>(d));
  }
  expect(starts.size() == axes.size() && ends.size() == axes.size(),
         "starts, ends and axes differ in length");
  if (has_in(4)) {
    for (double st : lit_in(4, "steps").values) {
      if (st != 1.0) unsupported("steps other than 1 on a runtime tensor are not supported");
    }
  }
  graph::SliceAttrs sa;
  sa.begin.assign(sz(r), 0);
  sa.size = x.shape;
  for (std::size_t k = 0; k < axes.size(); ++k) {
    const std::int64_t ax = normalize_axis(static_cast<std::int64_t>(axes[k]), r, "axis");
    const double dim = static_cast<double>(x.shape[sz(ax)]);
    const auto clampd = [dim](double v) { return std::clamp(v < 0 ? v + dim : v, 0.0, dim); };
    const auto b = static_cast<std::int64_t>(clampd(starts[k]));
    const auto e = static_cast<std::int64_t>(clampd(ends[k]));
    if (e <= b) unsupported("the slice of axis " + std::to_string(ax) + " is empty");
    sa.begin[sz(ax)] = b;
    sa.size[sz(ax)] = e - b;
  }
  if (sa.size == x.shape) {
    set_out(0, x);
    return;
  }
  Operand y = x;
  y.f32_value = ValueId{};
  y.quantized = nullptr;
  y.dq_weight = nullptr;
  y.value = emit(OpKind::Slice, {x.value}, sa);
  if (value_type(y.value) == ElementType::f32) y.f32_value = y.value;
  y.shape = sa.size;
  set_out(0, y);
}

void Importer::op_reduce_mean(AttrReader& a) {
  Operand& x = in(0);
  require_float(x, "the input");
  const std::int64_t r = rank_of(x.shape);
  Ints axes = a.ints("axes");
  if (axes.empty()) {
    for (std::int64_t d = 0; d < r; ++d) axes.push_back(d);
  }
  const bool keepdims = a.i("keepdims", 1) != 0;
  Shape kept = x.shape;
  std::set<std::int64_t> reduced;
  for (auto ax : axes) reduced.insert(normalize_axis(ax, r, "axis"));
  expect(reduced.size() == axes.size(), "repeated axes");
  Shape dropped;
  for (std::int64_t d = 0; d < r; ++d) {
    if (reduced.count(d)) {
      kept[sz(d)] = 1;
    } else {
      dropped.push_back(x.shape[sz(d)]);
    }
  }
  Operand y = make_float(emit(OpKind::ReduceMean, {f32(x)},
                              graph::ReduceAttrs{Ints(reduced.begin(), reduced.end())}),
                         kept);
  if (!keepdims) reshape_to(y, dropped);
  set_out(0, y);
}

void Importer::op_pow(AttrReader&) {
  Operand& x = in(0);
  require_float(x, "the base");
  const Literal& e = lit_in(1, "the exponent");
  if (e.values.size() != 1) unsupported("only a single-valued exponent is supported");
  const auto p = static_cast<float>(e.values[0]);
  set_out(0, make_float(emit(OpKind::Power, {f32(x)}, graph::PowerAttrs{p}), x.shape));
}

void Importer::op_softmax(AttrReader& a) {
  Operand& x = in(0);
  require_float(x, "the input");
  const std::int64_t r = rank_of(x.shape);
  expect(r >= 1, "the input must have rank >= 1");
  if (opset_ >= 13) {
    const std::int64_t axis = normalize_axis(a.i("axis", -1), r, "axis");
    set_out(0, make_float(emit(OpKind::Softmax, {f32(x)}, graph::SoftmaxAttrs{axis}), x.shape));
    return;
  }
  // Before opset 13 the input is read as a matrix [d0 * .. * d(axis-1), rest].
  const std::int64_t axis = normalize_axis(a.i("axis", 1), r, "axis");
  Operand y = x;
  const std::int64_t outer = std::accumulate(x.shape.begin(), x.shape.begin() + axis,
                                             std::int64_t{1}, std::multiplies<>());
  reshape_to(y, {outer, element_count(x.shape) / outer});
  Operand z = make_float(emit(OpKind::Softmax, {f32(y)}, graph::SoftmaxAttrs{1}), y.shape);
  reshape_to(z, x.shape);
  set_out(0, z);
}

void Importer::op_resize(AttrReader& a) {
  Operand& x = in(0);
  require_float(x, "the input");
  graph::ResizeAttrs r;
  const std::string mode = a.s("mode", "nearest");
  if (mode == "nearest") {
    r.mode = graph::ResizeMode::nearest;
  } else if (mode == "linear") {
    r.mode = graph::ResizeMode::linear;
  } else {
    a.unsupported_value("mode", "value '" + mode + "' (expected nearest or linear)");
  }
  std::size_t scales_i = 1, sizes_i = 3;
  if (opset_ < 11) {
    // Resize-10: (X, scales), asymmetric coordinates, nearest rounds down.
    r.transform = graph::CoordinateTransform::asymmetric;
    r.nearest_mode = graph::NearestMode::floor;
    sizes_i = 99;
  } else {
    scales_i = 2;
    static const std::map<std::string, graph::CoordinateTransform> kTransforms = {
        {"half_pixel", graph::CoordinateTransform::half_pixel},
        {"pytorch_half_pixel", graph::CoordinateTransform::pytorch_half_pixel},
        {"align_corners", graph::CoordinateTransform::align_corners},
        {"asymmetric", graph::CoordinateTransform::asymmetric},
        {"tf_half_pixel_for_nn", graph::CoordinateTransform::tf_half_pixel_for_nn}};
    const std::string t = a.s("coordinate_transformation_mode", "half_pixel");
    auto it = kTransforms.find(t);
    if (it == kTransforms.end()) {
      a.unsupported_value("coordinate_transformation_mode", "value '" + t + "'");
    }
    r.transform = it->second;
    static const std::map<std::string, graph::NearestMode> kNearest = {
        {"round_prefer_floor", graph::NearestMode::round_prefer_floor},
        {"round_prefer_ceil", graph::NearestMode::round_prefer_ceil},
        {"floor", graph::NearestMode::floor},
        {"ceil", graph::NearestMode::ceil}};
    const std::string nm = a.s("nearest_mode", "round_prefer_floor");
    auto jt = kNearest.find(nm);
    if (jt == kNearest.end()) a.unsupported_value("nearest_mode", "value '" + nm + "'");
    r.nearest_mode = jt->second;
    a.ignore("cubic_coeff_a");        // cubic mode only
    a.ignore("extrapolation_value");  // tf_crop_and_resize only
    if (a.i("exclude_outside", 0) != 0) a.unsupported_value("exclude_outside", "= 1");
  }
  const std::size_t rank = x.shape.size();
  if (has_in(sizes_i)) {
    const Literal& s = lit_in(sizes_i, "sizes");
    expect(s.values.size() == rank, "sizes has the wrong length");
    for (double v : s.values) r.sizes.push_back(static_cast<std::int64_t>(v));
  } else {
    const Literal& s = lit_in(scales_i, "scales");
    expect(s.values.size() == rank, "scales has the wrong length");
    for (std::size_t d = 0; d < rank; ++d) {
      const auto scale = static_cast<float>(s.values[d]);
      r.scales.push_back(scale);
      r.sizes.push_back(static_cast<std::int64_t>(
          std::floor(static_cast<double>(x.shape[d]) * static_cast<double>(scale))));
    }
  }
  const ValueId y = emit(OpKind::Resize, {f32(x)}, r);
  set_out(0, make_float(y, value_shape(y)));
}

// --- quantization ----------------------------------------------------------

QuantParams Importer::quant_params(std::size_t scale_i, std::size_t zp_i,
                                   std::int64_t axis_attr, const Shape& x_shape,
                                   int default_type) {
  const Literal& s = lit_in(scale_i, "the scale");
  if (s.type != kFloat) unsupported("the scale has element type " + onnx_type_name(s.type));
  QuantParams p;
  p.scale = s.values;
  if (has_in(zp_i)) {
    const Literal& z = lit_in(zp_i, "the zero point");
    p.type = z.type;
    p.zero_point = z.values;
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
  for (double v : p.scale) {
    if (!(v > 0.0)) unsupported("scale " + std::to_string(v) + " (expected > 0)");
  }
  return p;
}

// Convert<T>(Add(Round(Divide(x, s)), zp)), the parts that are not identities.
ValueId Importer::emit_quantize(ValueId x, const QuantParams& p, std::int64_t rank) {
  ValueId t = x;
  if (!p.unit_scale()) {
    t = emit(OpKind::Divide, {t, param_constant(p.scale, rank, p.axis, "scale")}, NoAttrs{},
             "div_scale");
  }
  if (!p.zero_zp()) {
    t = emit(OpKind::Round, {t}, NoAttrs{}, "round");
    t = emit(OpKind::Add, {t, param_constant(p.zero_point, rank, p.axis, "zero_point")},
             NoAttrs{}, "add_zero_point");
  }
  // Convert rounds half to even and saturates to the type's range.
  return emit(OpKind::Convert, {t}, graph::ConvertAttrs{*to_element_type(p.type)});
}

ValueId Importer::subtract_zero_point(ValueId x, const Values& zp, std::int64_t rank,
                                      std::int64_t axis) {
  if (std::all_of(zp.begin(), zp.end(), [](double z) { return z == 0.0; })) return x;
  return emit(OpKind::Subtract, {x, param_constant(zp, rank, axis, "zero_point")}, NoAttrs{},
              "sub_zero_point");
}

ValueId Importer::emit_dequantize_weight(const Literal& q, const QuantParams& p) {
  const std::int64_t rank = std::max<std::int64_t>(1, rank_of(q.shape));
  Literal stored = q;
  stored.shape = ir_shape(q.shape);
  ValueId t = constant(to_tensor(stored, label()), "quantized");
  t = emit(OpKind::Convert, {t}, graph::ConvertAttrs{ElementType::f32}, "to_f32");
  t = subtract_zero_point(t, p.zero_point, rank, p.axis);
  return emit(OpKind::Multiply, {t, param_constant(p.scale, rank, p.axis, "scale")});
}

void Importer::op_quantize(AttrReader& a) {
  Operand& x = in(0);
  if (!is_float(x.type) && x.type != kInt32) unsupported("input type " + onnx_type_name(x.type));
  const QuantParams p = quant_params(1, 2, a.i("axis", 1), x.shape, kUint8);
  if (p.type == kInt32) unsupported("quantized type INT32 (expected UINT8 or INT8)");
  const ValueId src = f32(x);
  Operand y;
  y.type = p.type;
  y.shape = x.shape;
  y.value = emit_quantize(src, p, std::max<std::int64_t>(1, rank_of(x.shape)));
  y.range = Interval{p.qmin, p.qmax};
  y.quantized = std::make_shared<const Operand::Quantized>(Operand::Quantized{src, p});
  set_out(0, y);
}

void Importer::op_dequantize(AttrReader& a) {
  Operand& x = in(0);
  const std::int64_t rank = std::max<std::int64_t>(1, rank_of(x.shape));
  const QuantParams p = quant_params(1, 2, a.i("axis", 1), x.shape, x.type);
  if (x.type != p.type) malformed("input type differs from the zero point type");
  if (x.quantized && options_.qdq_to_fake_quantize && x.quantized->params == p) {
    // Q -> DQ: one FakeQuantize with il = ol = (qmin - zp) s, ih = oh = (qmax - zp) s.
    Values lo(p.scale.size()), hi(p.scale.size());
    bool odd_shift = false;
    for (std::size_t k = 0; k < p.scale.size(); ++k) {
      lo[k] = static_cast<double>(static_cast<float>((p.qmin - p.zero_point[k]) * p.scale[k]));
      hi[k] = static_cast<double>(static_cast<float>((p.qmax - p.zero_point[k]) * p.scale[k]));
      odd_shift |= std::fmod(std::abs(p.zero_point[k] - p.qmin), 2.0) == 1.0;
    }
    if (odd_shift) {
      spdlog::debug("import {}: zero point - qmin is odd", label());
      odd_zero_points_.push_back(base_);
    }
    const ValueId il = param_constant(lo, rank, p.axis, "input_low");
    const ValueId ih = param_constant(hi, rank, p.axis, "input_high");
    const ValueId y = emit(OpKind::FakeQuantize, {x.quantized->source, il, ih, il, ih},
                           graph::FakeQuantizeAttrs{static_cast<std::int64_t>(p.qmax - p.qmin + 1)});
    set_out(0, make_float(y, x.shape));
    return;
  }
  if (x.literal) {
    Operand y = make_float(emit_dequantize_weight(*x.literal, p), x.shape);
    y.dq_weight = std::make_shared<const Operand::Weight>(Operand::Weight{*x.literal, p});
    set_out(0, y);
    return;
  }
  ValueId t = subtract_zero_point(f32(x), p.zero_point, rank, p.axis);
  t = emit(OpKind::Multiply, {t, param_constant(p.scale, rank, p.axis, "scale")});
  set_out(0, make_float(t, x.shape));
}

// Integer weights as f32 (w - zp): a constant stays u8/s8 behind a Convert.
ValueId Importer::integer_weight(Operand& w, const Values& zp, std::int64_t zp_axis,
                                 bool transpose, std::int64_t rank) {
  ValueId t;
  if (w.literal) {
    Literal q = *w.literal;
    if (transpose) {
      Shape s;
      q.values = transpose_values(q.values, q.shape, {1, 0}, s);
      q.shape = s;
    }
    t = emit(OpKind::Convert, {constant(to_tensor(q, label()), "quantized")},
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
double Importer::integer_conv_bound(Operand& x, const Values& x_zp, Operand& w,
                                    const Values& w_zp, std::int64_t reduce_from) {
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
  const Values& v = w.literal->values;
  const Shape& s = w.shape;
  double worst = 0;
  if (reduce_from == 1) {
    const std::int64_t per = element_count(s) / s[0];
    for (std::int64_t o = 0; o < s[0]; ++o) {
      const double z = w_zp.size() == 1 ? w_zp[0] : w_zp[sz(o)];
      double sum = 0;
      for (std::int64_t k = 0; k < per; ++k) sum += std::abs(v[sz(o * per + k)] - z);
      worst = std::max(worst, sum);
    }
  } else {
    const std::int64_t kdim = s[0], n = s[1];
    for (std::int64_t c = 0; c < n; ++c) {
      const double z = w_zp.size() == 1 ? w_zp[0] : w_zp[sz(c)];
      double sum = 0;
      for (std::int64_t k = 0; k < kdim; ++k) sum += std::abs(v[sz(k * n + c)] - z);
      worst = std::max(worst, sum);
    }
  }
  return worst * xmax;
}

namespace {
Values zero_points(const Literal* z) { return z ? z->values : Values{0.0}; }
}  // namespace

void Importer::op_conv_integer(AttrReader& a) {
  Operand& x = in(0);
  Operand& w = in(1);
  if (x.type != kUint8 && x.type != kInt8) unsupported("input type " + onnx_type_name(x.type));
  if (w.type != kUint8 && w.type != kInt8) unsupported("weight type " + onnx_type_name(w.type));
  const Values xzp = zero_points(has_in(2) ? &lit_in(2, "x_zero_point") : nullptr);
  const Values wzp = zero_points(has_in(3) ? &lit_in(3, "w_zero_point") : nullptr);
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
  if (A.type != kUint8 && A.type != kInt8) unsupported("A type " + onnx_type_name(A.type));
  if (B.type != kUint8 && B.type != kInt8) unsupported("B type " + onnx_type_name(B.type));
  expect(A.shape.size() >= 2 && B.shape.size() >= 2, "operands must have rank >= 2");
  const Values azp = zero_points(has_in(2) ? &lit_in(2, "a_zero_point") : nullptr);
  const Values bzp = zero_points(has_in(3) ? &lit_in(3, "b_zero_point") : nullptr);
  const std::int64_t ra = rank_of(A.shape);
  // a_zero_point: scalar or one per row of A; b_zero_point: scalar or one per column.
  ValueId a = f32(A);
  if (azp.size() > 1) {
    Shape s(sz(ra), 1);
    s[sz(ra - 2)] = i64(azp.size());
    a = emit(OpKind::Subtract, {a, f32_constant(azp, s, "a_zero_point")}, NoAttrs{},
             "sub_a_zero_point");
  } else {
    a = subtract_zero_point(a, azp, ra, -1);
  }
  const double bound = integer_conv_bound(A, azp, B, bzp, 0);
  ValueId y;
  if (B.shape.size() == 2 && B.literal) {
    y = emit(OpKind::FullyConnected, {a, integer_weight(B, bzp, 0, true, 2)});
  } else {
    ValueId b = integer_weight(B, {0.0}, -1, false, rank_of(B.shape));
    if (bzp.size() > 1 || bzp[0] != 0.0) {
      b = emit(OpKind::Subtract, {b, f32_constant(bzp, {i64(bzp.size())}, "b_zero_point")},
               NoAttrs{}, "sub_b_zero_point");
    }
    y = emit(OpKind::MatMul, {a, b}, graph::MatMulAttrs{});
  }
  set_out(0, make_integer(y, kInt32, value_shape(y), {-bound, bound}));
}

// round(acc * M) + y_zp, saturated to y_type (M per output channel along axis).
ValueId Importer::requantize(ValueId acc, const Values& multiplier, std::int64_t rank,
                             std::int64_t axis, const Values& y_zp, int y_type) {
  QuantParams p;
  p.type = y_type;
  p.scale = {1.0};
  p.zero_point = y_zp;
  ValueId t = emit(OpKind::Multiply, {acc, param_constant(multiplier, rank, axis, "multiplier")},
                   NoAttrs{}, "rescale");
  return emit_quantize(t, p, rank);
}

void Importer::op_qlinear_conv(AttrReader& a) {
  Operand& x = in(0);
  Operand& w = in(3);
  if (x.type != kUint8 && x.type != kInt8) unsupported("input type " + onnx_type_name(x.type));
  if (w.type != kUint8 && w.type != kInt8) unsupported("weight type " + onnx_type_name(w.type));
  const Literal& xs = lit_in(1, "x_scale");
  const Values xzp = lit_in(2, "x_zero_point").values;
  const Literal& wsc = lit_in(4, "w_scale");
  const Values wzp = lit_in(5, "w_zero_point").values;
  const Literal& ys = lit_in(6, "y_scale");
  const Literal& yzp = lit_in(7, "y_zero_point");
  expect(xs.values.size() == 1 && xzp.size() == 1 && ys.values.size() == 1 &&
             yzp.values.size() == 1,
         "x and y quantization must be per tensor");
  const graph::ConvAttrs attrs = conv_attrs(a, x.shape, w.shape);
  const std::int64_t rank = rank_of(x.shape);
  const ValueId xv = subtract_zero_point(f32(x), xzp, rank, -1);
  const ValueId wv = integer_weight(w, wzp, 0, false, rank);
  std::vector<ValueId> inputs{xv, wv};
  double bias_max = 0;
  if (has_in(8)) {
    Operand& bias = in(8);
    inputs.push_back(f32(bias));
    bias_max = max_abs(int_range(bias));
  }
  const double bound = integer_conv_bound(x, xzp, w, wzp, 1) + bias_max;
  if (bound > kF32ExactLimit) {
    spdlog::warn("import {}: accumulators up to {} exceed 2^24; the unfused f32 reference may "
                 "round them",
                 label(), bound);
  }
  const ValueId acc = emit(OpKind::Convolution, std::move(inputs), attrs, "conv");
  Values m(wsc.values.size());
  for (std::size_t k = 0; k < m.size(); ++k) {
    const float xw = static_cast<float>(xs.values[0]) * static_cast<float>(wsc.values[k]);
    m[k] = static_cast<double>(xw / static_cast<float>(ys.values[0]));
  }
  const ValueId y = requantize(acc, m, rank, m.size() > 1 ? 1 : -1, yzp.values, yzp.type);
  Operand o;
  o.type = yzp.type;
  o.value = y;
  o.shape = value_shape(y);
  o.range = type_range(yzp.type);
  set_out(0, o);
}

void Importer::op_qlinear_matmul(AttrReader&) {
  Operand& A = in(0);
  Operand& B = in(3);
  if (A.type != kUint8 && A.type != kInt8) unsupported("A type " + onnx_type_name(A.type));
  if (B.type != kUint8 && B.type != kInt8) unsupported("B type " + onnx_type_name(B.type));
  expect(A.shape.size() >= 2 && B.shape.size() >= 2, "operands must have rank >= 2");
  const Literal& as = lit_in(1, "a_scale");
  const Values azp = lit_in(2, "a_zero_point").values;
  const Literal& bs = lit_in(4, "b_scale");
  const Values bzp = lit_in(5, "b_zero_point").values;
  const Literal& ys = lit_in(6, "y_scale");
  const Literal& yzp = lit_in(7, "y_zero_point");
  expect(as.values.size() == 1 && azp.size() == 1 && ys.values.size() == 1 &&
             yzp.values.size() == 1,
         "a and y quantization must be per tensor");
  const std::int64_t ra = rank_of(A.shape);
  const ValueId a = subtract_zero_point(f32(A), azp, ra, -1);
  const double bound = integer_conv_bound(A, azp, B, bzp, 0);
  if (bound > kF32ExactLimit) {
    spdlog::warn("import {}: accumulators up to {} exceed 2^24; the unfused f32 reference may "
                 "round them",
                 label(), bound);
  }
  ValueId acc;
  if (B.shape.size() == 2 && B.literal) {
    acc = emit(OpKind::FullyConnected, {a, integer_weight(B, bzp, 0, true, 2)}, NoAttrs{},
               "matmul");
  } else {
    ValueId b = integer_weight(B, {0.0}, -1, false, rank_of(B.shape));
    if (bzp.size() > 1 || bzp[0] != 0.0) {
      b = emit(OpKind::Subtract, {b, f32_constant(bzp, {i64(bzp.size())}, "b_zero_point")},
               NoAttrs{}, "sub_b_zero_point");
    }
    acc = emit(OpKind::MatMul, {a, b}, graph::MatMulAttrs{}, "matmul");
  }
  const std::int64_t rank = rank_of(value_shape(acc));
  Values m(bs.values.size());
  for (std::size_t k = 0; k < m.size(); ++k) {
    const float ab = static_cast<float>(as.values[0]) * static_cast<float>(bs.values[k]);
    m[k] = static_cast<double>(ab / static_cast<float>(ys.values[0]));
  }
  const ValueId y = requantize(acc, m, rank, m.size() > 1 ? rank - 1 : -1, yzp.values, yzp.type);
  Operand o;
  o.type = yzp.type;
  o.value = y;
  o.shape = value_shape(y);
  o.range = type_range(yzp.type);
  set_out(0, o);
}

::onnx::ModelProto parse_model(std::string_view bytes, std::string_view origin) {
  ::onnx::ModelProto model;
  if (bytes.size() > static_cast<std::size_t>(std::numeric_limits<int>::max()) ||
      !model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    throw IoError("import " + std::string(origin) + ": not a valid ONNX model (protobuf parse failed)");
  }
  return model;
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError("import " + path.string() + ": cannot open the file");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

graph::Graph import_bytes(std::string_view bytes, const ImportOptions& options,
                          std::string_view origin) {
  const ::onnx::ModelProto model = parse_model(bytes, origin);
  Importer importer(model, options, std::string(origin));
  return importer.run();
}

graph::Graph import_file(const std::filesystem::path& path, const ImportOptions& options) {
  return import_bytes(read_file(path), options, path.string());
}

std::vector<InputInfo> list_inputs(const std::filesystem::path& path) {
  const ::onnx::ModelProto model = parse_model(read_file(path), path.string());
  std::set<std::string> initializers;
  for (const auto& t : model.graph().initializer()) initializers.insert(t.name());
  std::vector<InputInfo> inputs;
  for (const auto& vi : model.graph().input()) {
    if (initializers.count(vi.name())) continue;
    InputInfo info;
    info.name = vi.name();
    const auto& tt = vi.type().tensor_type();
    info.onnx_type = tt.elem_type();
    for (const auto& d : tt.shape().dim()) {
      info.dims.push_back(d.has_dim_value() ? d.dim_value() : -1);
      info.dim_params.push_back(d.has_dim_param() ? d.dim_param() : "");
    }
    inputs.push_back(std::move(info));
  }
  return inputs;
}

NamedTensor read_tensor_file(const std::filesystem::path& path) {
  const std::string bytes = read_file(path);
  ::onnx::TensorProto t;
  if (!t.ParseFromString(bytes)) {
    throw IoError("read " + path.string() + ": not a serialized TensorProto");
  }
  const Literal lit = decode_tensor(t, path.string());
  return {t.name(), to_tensor(lit, path.string())};
}

}  // namespace qfuse::onnx
