#pragma once
// Internal to the ONNX frontend: the Importer class and the helpers its
// operator families share. importer.cpp holds the driver, constant folding
// and the public functions; import_elementwise.cpp, import_layers.cpp,
// import_shape.cpp, import_quantization.cpp and import_qoperator.cpp the
// operator handlers.

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>
#include <unordered_map>

#include "graph/broadcast.hpp"
#include "graph/builder.hpp"
#include "graph/frontend_common.hpp"
#include "graph/onnx/importer.hpp"
#include "graph/onnx/proto_utils.hpp"
#include "qfuse/error.hpp"

namespace qfuse::onnx::impl {

using namespace detail;
using graph::Attributes;
using graph::Ints;
using graph::NoAttrs;
using graph::OpKind;
using graph::ValueId;
using Values = std::vector<double>;

// f32 holds every integer of magnitude up to 2^24 exactly.
inline constexpr double kF32ExactLimit = 16777216.0;
inline constexpr int kMinOpset = 10;
inline constexpr int kMaxOpset = 21;

inline std::size_t sz(std::int64_t v) { return static_cast<std::size_t>(v); }
inline std::int64_t i64(std::size_t v) { return static_cast<std::int64_t>(v); }
inline std::int64_t rank_of(const Shape& s) { return i64(s.size()); }
// The product of dims [from, to) of s, checked like element_count (a
// GraphError past 2^47): a zero dim elsewhere must not hide an overflow here.
inline std::int64_t dims_product(const Shape& s, std::int64_t from, std::int64_t to) {
  return element_count(Shape(s.begin() + from, s.begin() + to));
}

// The IR has no rank-0 tensors: a scalar is carried as [1].
inline Shape ir_shape(const Shape& s) { return s.empty() ? Shape{1} : s; }

struct Interval {
  double lo = 0.0;
  double hi = 0.0;
};

inline Interval type_range(int type) {
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

inline Interval range_of(const Values& v) {
  if (v.empty()) return {0, 0};
  auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  return {*lo, *hi};
}

inline double max_abs(Interval r) { return std::max(std::abs(r.lo), std::abs(r.hi)); }

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
    std::shared_ptr<const Literal> q;  // the constant's own literal, shared
    QuantParams params;
  };
  std::shared_ptr<const Weight> dq_weight;
  // A literal computed from a tensor's shape (Shape, Size, and folds that
  // read them): it holds the sizes the inputs were bound to at import, and
  // another binding would change it.
  bool from_shape = false;
  // In a graph with symbolic input dimensions (import_symbols.cpp), what
  // each dimension follows when the inputs are bound otherwise, and for a
  // literal computed from shapes, what each element follows: "" nothing (it
  // is fixed), the name of an input's symbolic dimension, or an unknown
  // function of some (Syms's encoding). Null: not traced (a runtime tensor
  // may follow any symbolic dimension; a literal not from shapes is fixed).
  std::shared_ptr<const std::vector<std::string>> dim_syms;
  std::shared_ptr<const std::vector<std::string>> value_syms;
  // A literal that is Range(0, n, 1) (possibly reshaped): 0, 1, .., n-1.
  bool arange = false;
};

inline bool is_float(int type) { return type == kFloat; }

inline std::string dims_text(const Shape& s) { return to_string(s); }

class Importer {
 public:
  // The importer releases each initializer's bytes once it has decoded them.
  Importer(::onnx::ModelProto& model, const ImportOptions& options, std::string origin)
      : model_(model), options_(options), origin_(std::move(origin)), b_(graph_) {}

  graph::Graph run();

 private:
  using Handler = void (Importer::*)(AttrReader&);
  Handler handler_of(const ::onnx::NodeProto& node) const;

  // --- context -------------------------------------------------------------
  std::string label() const { return node_->op_type() + " node '" + base_ + "'"; }
  void check_scales(const Values& scales, const std::string& what) const;
  [[noreturn]] void unsupported(const std::string& problem) const {
    throw UnsupportedError("import " + label() + ": " + problem);
  }
  [[noreturn]] void malformed(const std::string& problem) const {
    throw GraphError("import " + label() + ": " + problem);
  }
  void expect(bool ok, const std::string& problem) const {
    if (!ok) malformed(problem);
  }
  // GraphError unless `perm` is a permutation of 0 .. rank - 1.
  void check_permutation(const Ints& perm, std::size_t rank) const;
  // An integer-valued attribute or tensor element (held as a double) as
  // int64: finite and within +-2^62, else a GraphError naming `what`.
  std::int64_t to_int64(double v, const std::string& what) const {
    expect(std::isfinite(v) && std::abs(v) <= 0x1p62, what + " " + std::to_string(v) + " is out of range");
    return static_cast<std::int64_t>(v);
  }

  std::size_t num_inputs() const { return static_cast<std::size_t>(node_->input_size()); }
  bool has_in(std::size_t i) const {
    return i < num_inputs() && !node_->input(static_cast<int>(i)).empty();
  }
  Operand& in(std::size_t i) {
    if (!has_in(i)) malformed("input " + std::to_string(i) + " is missing");
    ignore_input(i);
    const std::string& name = node_->input(static_cast<int>(i));
    Operand* o = find_tensor(name);
    if (o == nullptr) malformed("input '" + name + "' is not defined before its use");
    return *o;
  }
  // Marks input i read without interpreting it (it does not matter here). A
  // present input that no handler reads is refused after the handler runs,
  // as an unread attribute is: later opsets add inputs (ReduceMean's axes at
  // 18) that an older reading would silently drop.
  void ignore_input(std::size_t i) {
    if (i < 64) inputs_read_ |= std::uint64_t{1} << i;
  }
  // UnsupportedError for the first present input nobody read.
  void check_all_inputs_used() const;
  // The tensor named so, an initializer decoded now if not yet; null if none.
  Operand* find_tensor(const std::string& name) const;
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
  ValueId constant(std::shared_ptr<const Tensor> t, const std::string& suffix) {
    return b_.constant(node_name(suffix), std::move(t));
  }
  // A literal as a constant of its own type, shaped `shape`: its elements
  // shared when it holds them.
  ValueId constant(const Literal& lit, Shape shape, const std::string& suffix) {
    return constant(to_shared_tensor(lit, label(), std::move(shape)), suffix);
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
      if (is_integer_type(o.type) &&
          max_abs(o.range ? *o.range : range_of(o.literal->values())) > kF32ExactLimit) {
        spdlog::warn("import {}: integer constant beyond 2^24 is rounded to f32", label());
      }
      o.f32_value = o.type == kFloat && o.literal->elements()
                        ? constant(*o.literal, ir_shape(o.shape), "const")
                        : f32_constant(o.literal->values(), ir_shape(o.shape), "const");
      return o.f32_value;
    }
    if (value_type(o.value) == ElementType::f32) return o.value;
    o.f32_value = emit(OpKind::Convert, {o.value}, graph::ConvertAttrs{ElementType::f32}, "to_f32");
    return o.f32_value;
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
    o.literal = std::make_shared<const Literal>(type, std::move(shape), std::move(values));
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
  // Its steps: the constants given for inputs, the names of the shapes given,
  // the dim_params the given shapes fix, then each input not otherwise bound.
  void bind_constant_inputs(const std::set<std::string>& known);
  void check_given_shape_names(const std::set<std::string>& known) const;
  std::map<std::string, std::int64_t> given_dim_params() const;
  void bind_input(const ::onnx::ValueInfoProto& vi,
                  const std::map<std::string, std::int64_t>& params);
  // The input's given shape, else its declared one, dim_params from `params`.
  Shape input_shape(const ::onnx::ValueInfoProto& vi,
                    const std::map<std::string, std::int64_t>& params) const;
  // GraphError / UnsupportedError for a rank-0, empty or oversized input.
  void check_input_shape(const std::string& name, const Shape& shape) const;
  void import_node(const ::onnx::NodeProto& node, std::size_t index);
  void mark_outputs();
  bool try_fold(AttrReader& a);
  // The folds try_fold's table dispatches to (importer.cpp).
  bool fold_shape(AttrReader& a);
  bool fold_size(AttrReader& a);
  bool fold_constant_of_shape(AttrReader& a);
  bool fold_identity(AttrReader& a);
  bool fold_cast(AttrReader& a);
  bool fold_transpose(AttrReader& a);
  bool fold_concat(AttrReader& a);
  bool fold_gather(AttrReader& a);
  bool fold_slice(AttrReader& a);
  bool fold_range(AttrReader& a);
  bool fold_unary(AttrReader& a);
  bool fold_binary(AttrReader& a);

  // --- symbolic dimensions (import_symbols.cpp) ----------------------------
  // Each dimension's and shape literal element's symbol, for `node`'s
  // outputs from its inputs'.
  void propagate_symbols(const ::onnx::NodeProto& node);
  std::vector<std::string> dim_syms(const Operand& o) const;
  std::vector<std::string> value_syms(const Operand& o) const;
  // The target of a Reshape as a ReshapeAttrs::spec that follows the input's
  // symbolic dimensions, when every element is a constant, a copy of one of
  // them, or at most one is left to -1; nullopt otherwise.
  std::optional<Ints> traced_reshape_spec(const Operand& x, const Operand& target, bool allow_zero) const;
  // An arange 0 .. n-1 whose length follows the symbolic dimension it names:
  // that name and the axis it runs along; nullopt otherwise.
  std::optional<std::pair<std::string, std::size_t>> symbolic_arange(const Operand& idx) const;
  // Input k of the node being imported was read as a function of the
  // symbolic dimensions (a traced Reshape target, an arange's length), not
  // as the constant it was at import.
  void read_symbolically(std::size_t k) { symbolic_inputs_ |= std::uint64_t{1} << k; }
  // A literal computed from symbolic dimensions that a runtime node reads as
  // a constant fixes them (Graph::fix_dim, when the import ends).
  void fix_symbols_read_as_constants(const ::onnx::NodeProto& node);
  void fix_symbols(const std::vector<std::string>& syms, const std::string& reason);

  // --- operators -----------------------------------------------------------
  void op_constant(AttrReader& a);
  void op_identity(AttrReader& a);
  OpKind onnx_kind() const;
  void op_unary(AttrReader& a);
  void op_elu_like(AttrReader& a);
  void op_hard_sigmoid(AttrReader& a);
  void op_neg(AttrReader& a);
  void op_reciprocal(AttrReader& a);
  void op_binary(AttrReader& a);
  void op_variadic(AttrReader& a);
  void op_prelu(AttrReader& a);
  void op_clip(AttrReader& a);
  std::shared_ptr<const Operand::Quantized> narrowed_grid(const Operand& x,
                                                          const Interval& codes) const;
  void op_cast(AttrReader& a);
  void op_conv(AttrReader& a);
  void op_conv_transpose(AttrReader& a);
  void op_gemm(AttrReader& a);
  void op_matmul(AttrReader& a);
  void op_batch_norm(AttrReader& a);
  void op_pool(AttrReader& a);
  // MaxPool / AveragePool attributes (auto_pad, ceil_mode and the padding
  // count resolved) for an input of shape x, rank 3 to 5.
  graph::PoolAttrs pool_attrs(AttrReader& a, const Shape& x, bool is_max);
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
  void op_split(AttrReader& a);
  std::vector<std::int64_t> split_sizes(AttrReader& a, std::int64_t dim);
  // Gather on a constant 256-entry u8 / s8 table by a runtime index in
  // [0, 255] or [-128, 127] (codes cast to an integer type): a Lookup.
  void op_gather(AttrReader& a);
  void op_layer_norm(AttrReader& a);
  void gather_rows(AttrReader& a, Operand& data, Operand& idx);
  // Patterns of several nodes imported as one op (import_patterns.cpp).
  // Erf inside GELU as PyTorch writes it, x * 0.5 * (1 + erf(x / sqrt(2)))
  // (also 0.5 x * (1 + erf(..)) and x * ((1 + erf(..)) * 0.5)): one Gelu;
  // qfuse has no Erf of its own.
  void op_erf(AttrReader& a);
  void op_gelu(AttrReader& a);
  // At a Tanh: GELU's tanh form imported as one Gelu(tanh), the nodes after
  // the Tanh taken; otherwise a debug line says why not.
  void try_tanh_gelu();
  // At a ReduceMean: LayerNorm spelled out (opset 13) imported as one
  // LayerNorm, the nodes after it taken; otherwise a debug line says why not.
  void try_spelled_out_layer_norm(AttrReader& a);
  // The node reading `t` alone, when it is a plain `op` (no attribute
  // outside `attrs`); nullopt otherwise, or when `t` is a graph output.
  std::optional<int> sole_plain_reader(const std::string& t, const char* op,
                                       std::initializer_list<const char*> attrs = {}) const;
  // LayerNorm's core after mean = ReduceMean(x) (the current node): d = x -
  // mean, then d / Sqrt(ReduceMean(Pow(d, 2)) + eps), each value read inside
  // the pattern alone; `why` says why not when it does not match.
  struct LayerNormCore {
    std::vector<int> taken;  // the nodes after the mean
    std::string out;         // the normalized tensor (after gamma and beta once taken)
    double epsilon;
  };
  std::optional<LayerNormCore> layer_norm_core(const std::string& x, std::int64_t rank,
                                               std::string& why) const;
  // `op` (Mul: gamma, Add: beta) on the core's output by a FLOAT constant of
  // the normalized dimension's `channels` values that does not broadcast the
  // output, taken into `core`; else nullopt, and a debug line says why the
  // LayerNorm ends before it.
  std::optional<Values> layer_norm_affine(const char* op, std::int64_t channels,
                                          std::int64_t rank, LayerNormCore& core) const;
  // GELU's end after f = erf(..) or tanh(..): 1 + f, then the product with x
  // and 0.5 in any of the three placements.
  struct GeluTail {
    std::string out;            // the GELU's output
    std::vector<int> taken;     // the nodes after f
    std::string half_x;         // 0.5 x when computed before f, else empty
  };
  std::optional<GeluTail> gelu_tail(const std::string& x, const std::string& f,
                                    std::string& why) const;
  // A constant tensor: an initializer, a folded tensor, or a Constant node
  // (which may come later in the file than its reader).
  std::optional<Literal> constant_tensor(const std::string& name) const;
  // A reduction's axes: the attribute (opset < 18) or the constant input 1
  // (18 on); nullopt when the input is computed at run time.
  void refuse_blocked(AttrReader& a) const;
  std::optional<Ints> reduce_axes(const ::onnx::NodeProto& n, AttrReader& a) const;
  // The one value of a constant tensor.
  std::optional<double> scalar_tensor(const std::string& name) const;
  // The only node reading `name`, unless `name` is a graph output.
  std::optional<int> sole_onnx_consumer(const std::string& name) const;
  void op_reduce_mean(AttrReader& a);
  void op_pow(AttrReader& a);
  void op_softmax(AttrReader& a);
  // Softmax of f32 x along axis_attr (by_axis: opset 13's meaning), or, before
  // opset 13, of x read as a matrix [d0 * .. * d(axis-1), rest].
  Operand softmax(ValueId x, const Shape& shape, std::int64_t axis_attr, bool by_axis);
  void op_quantize(AttrReader& a);
  void op_dequantize(AttrReader& a);
  // org.openvinotoolkit FakeQuantize (NNCF's ONNX export).
  void op_fake_quantize(AttrReader& a);
  void check_fake_quantize_limits();
  void op_conv_integer(AttrReader& a);
  void op_matmul_integer(AttrReader& a);
  void op_qlinear_conv(AttrReader& a);
  void op_qlinear_matmul(AttrReader& a);
  void op_dynamic_quantize_linear(AttrReader& a);
  // ONNX Runtime's QOperator format, com.microsoft (import_qoperator.cpp).
  void op_qlinear_binary(AttrReader& a);
  void op_qlinear_global_average_pool(AttrReader& a);
  void op_qlinear_concat(AttrReader& a);
  void op_qlinear_activation(AttrReader& a);
  void op_qlinear_average_pool(AttrReader& a);
  void op_qlinear_softmax(AttrReader& a);
  void op_qgemm(AttrReader& a);
  // GraphError unless the node has lo to hi inputs (empty names count).
  void expect_input_count(std::size_t lo, std::size_t hi) const;
  // One scale and zero point (inputs scale_i, zp_i; an absent zero point is 0
  // of default_type) of a com.microsoft operator, which reads them per
  // tensor; `what` names them ("A" for A_scale, A_zero_point).
  QuantParams qop_params(std::size_t scale_i, std::size_t zp_i, int default_type,
                         const std::string& what);
  // The input's 8-bit codes dequantized with p (its type must be p's).
  ValueId qop_dequantize(std::size_t x_i, const QuantParams& p, const std::string& what);
  // Output 0: Quantize(p) of the f32 value y.
  void set_quantized_out(ValueId y, const Shape& shape, const QuantParams& p);
  void op_dropout(AttrReader& a);

  // helpers of the operators
  Operand binary(OpKind kind, Operand& x, Operand& y, const std::string& suffix);
  // `spec`: the model's own target with 0 / -1 (graph::ReshapeAttrs::spec),
  // when it follows the input's shape; empty: `target` is fixed.
  void reshape_to(Operand& x, const Shape& target, const Ints& spec = {});
  graph::ConvAttrs conv_attrs(AttrReader& a, const Shape& x, const Shape& w);
  QuantParams quant_params(std::size_t scale_i, std::size_t zp_i, std::int64_t axis_attr,
                           const Shape& x_shape, int default_type);
  ValueId emit_quantize(ValueId x, const QuantParams& p);
  ValueId emit_dequantize(ValueId codes, const QuantParams& p);
  ValueId emit_dequantize_weight(const Literal& q, const QuantParams& p);
  // The same of codes already a tensor (of rank >= 1).
  ValueId emit_dequantize_codes(Tensor codes, const QuantParams& p);
  ValueId emit_dequantize_codes(std::shared_ptr<const Tensor> codes, const QuantParams& p);
  // DequantizeLinear's value of x: a Dequantize of run-time codes, the f32
  // constant (q - zp) * s of constant ones, Subtract / Multiply of integers
  // carried in f32.
  ValueId dequantized(Operand& x, const QuantParams& p);
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
  // The integer operators' shared steps.
  void require_int8(const Operand& o, const std::string& what) const;
  // ConvInteger / MatMulInteger zero points (input i, 0 when absent).
  Values optional_zero_points(std::size_t i, const char* what);
  // QLinearConv / QLinearMatMul: x(0), x_scale(1), x_zero_point(2), w(3),
  // w_scale(4), w_zero_point(5), y_scale(6), y_zero_point(7); x and y per tensor.
  struct QLinearParams {
    double x_scale;
    Values x_zp, w_scale, w_zp;
    double y_scale;
    const Literal* y_zp;
  };
  QLinearParams qlinear_params(const char* x_name, const char* w_name);
  // round(acc * x_scale * w_scale[c] / y_scale) + y_zp as the node's output.
  void set_requantized_output(ValueId acc, const QLinearParams& q, std::int64_t axis);
  void warn_if_inexact(double accumulator_bound) const;
  // A (zero point already subtracted) times B - b_zp: a fully-connected layer
  // when B is a constant matrix, else a MatMul.
  ValueId integer_matmul(ValueId a, Operand& B, const Values& b_zp, const std::string& name);

  ::onnx::ModelProto& model_;
  const ImportOptions& options_;
  std::string origin_;
  graph::Graph graph_;
  graph::Builder b_;
  int opset_ = 0;
  // Every named tensor imported so far. Initializers join on first read
  // (find_tensor decodes them then), so that a model's weights are not all
  // held in double at once; lookups are const in meaning, hence mutable.
  mutable std::unordered_map<std::string, Operand> tensors_;
  mutable std::unordered_map<std::string, ::onnx::TensorProto*> undecoded_;
  std::set<std::string> used_names_;
  const ::onnx::NodeProto* node_ = nullptr;
  std::uint64_t inputs_read_ = 0;  // bit k: input k was read (ignore_input)
  std::string base_;
  // The file's nodes by the tensors they write and read (indices).
  std::unordered_map<std::string, int> onnx_producer_;
  std::unordered_map<std::string, std::vector<int>> onnx_consumers_;
  // Nodes a pattern imported with an earlier node: skipped.
  std::set<int> taken_nodes_;
  // Whether some input has symbolic dimensions (their symbols are traced).
  bool symbolic_ = false;
  std::uint64_t symbolic_inputs_ = 0;  // bit k: see read_symbolically
  // Symbols a constant fixes, and the first reason, applied at the end.
  std::map<std::string, std::string> fixed_symbols_;
};

using graph::broadcast_offsets;
using graph::transpose_values;
using graph::broadcast_shapes;

// Casts one value the way ONNX (numpy astype) does, for folding.
double cast_value(double v, int to);

}  // namespace qfuse::onnx::impl
