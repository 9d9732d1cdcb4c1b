// ONNX -> qfuse IR: the driver (inputs, node dispatch, outputs), constant
// folding and the public functions. The semantics (integer carriers, Q/DQ,
// ConvInteger limits, symbolic dimensions) are documented in importer.hpp;
// the operator handlers live in import_<family>.cpp.

#include "graph/onnx/importer.hpp"

#include <fcntl.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <limits>
#include <map>
#include <utility>

#include "graph/onnx/import_internal.hpp"
#include "graph/release_memory.hpp"
#include "qfuse/qfuse.hpp"

namespace qfuse::onnx {
namespace impl {

// ---------------------------------------------------------------------------
// Shape helpers shared by folding and IR emission.

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
  std::set<std::string> known;
  for (const auto& vi : g.input()) {
    if (initializers.count(vi.name())) continue;
    known.insert(vi.name());
  }
  bind_constant_inputs(known);
  check_given_shape_names(known);
  const std::map<std::string, std::int64_t> params = given_dim_params();
  for (const auto& vi : g.input()) {
    if (initializers.count(vi.name()) || options_.constant_inputs.count(vi.name())) continue;
    bind_input(vi, params);
  }
}

void Importer::bind_constant_inputs(const std::set<std::string>& known) {
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
    tensors_[name] = make_literal(lit.type, lit.shape, std::move(lit.values()));
  }
}

void Importer::check_given_shape_names(const std::set<std::string>& known) const {
  for (const auto& [name, shape] : options_.input_shapes) {
    if (!known.count(name)) {
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      throw GraphError("import " + origin_ + ": a shape is given for '" + name +
                       "', which is not a graph input (inputs: " + list + ")");
    }
  }
}

std::map<std::string, std::int64_t> Importer::given_dim_params() const {
  std::map<std::string, std::int64_t> params;
  for (const auto& vi : model_.graph().input()) {
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
  return params;
}

void Importer::bind_input(const ::onnx::ValueInfoProto& vi,
                          const std::map<std::string, std::int64_t>& params) {
  const auto& tt = vi.type().tensor_type();
  if (!vi.type().has_tensor_type()) {
    throw UnsupportedError("import " + origin_ + ": input '" + vi.name() +
                           "' is not a tensor (sequences, maps and optionals are not supported)");
  }
  auto type = to_element_type(tt.elem_type());
  if (!type) {
    throw UnsupportedError("import " + origin_ + ": input '" + vi.name() +
                           "' has element type " + onnx_type_name(tt.elem_type()) +
                           " (qfuse tensors are FLOAT, UINT8, INT8, INT32, INT64)");
  }
  const Shape shape = input_shape(vi, params);
  check_input_shape(vi.name(), shape);
  Operand o;
  o.type = tt.elem_type();
  o.shape = shape;
  o.value = b_.input(vi.name(), shape, *type);
  // What the file leaves open stays open: another binding may change it.
  if (tt.has_shape()) {
    std::vector<std::string> names;
    for (int d = 0; d < tt.shape().dim_size(); ++d) {
      const auto& dim = tt.shape().dim(d);
      names.push_back(dim.has_dim_value()   ? std::string()
                      : dim.has_dim_param() ? dim.dim_param()
                                            : vi.name() + "[" + std::to_string(d) + "]");
    }
    for (const std::string& n : names) {
      symbolic_ = symbolic_ || !n.empty();
      // Names the tracing spells its unknowns with (import_symbols.cpp).
      if (!n.empty() && (n[0] == '?' || n.find('\x1f') != std::string::npos)) {
        fixed_symbols_.emplace(n, "its name begins with '?' or holds a control character");
      }
    }
    o.dim_syms = std::make_shared<const std::vector<std::string>>(names);
    b_.graph().set_dim_names(o.value, std::move(names));
  }
  used_names_.insert(vi.name());
  if (is_integer_type(o.type)) o.range = type_range(o.type);
  tensors_[vi.name()] = o;
}

Shape Importer::input_shape(const ::onnx::ValueInfoProto& vi,
                            const std::map<std::string, std::int64_t>& params) const {
  auto it = options_.input_shapes.find(vi.name());
  if (it != options_.input_shapes.end()) return it->second;
  const auto& tt = vi.type().tensor_type();
  if (!tt.has_shape()) {
    throw GraphError("import " + origin_ + ": input '" + vi.name() +
                     "' has no declared shape; bind it (e.g. --shape " + vi.name() +
                     "=1x3x224x224, or give the input tensor)");
  }
  // The declared dims, and a binding of the input's own rank to suggest (its
  // fixed dims as declared, 1 for each other).
  std::string declared, example;
  for (const auto& dim : tt.shape().dim()) {
    declared += (declared.empty() ? "" : ",") +
                (dim.has_dim_value() ? std::to_string(dim.dim_value())
                                     : dim.has_dim_param() ? dim.dim_param() : "?");
    example += (example.empty() ? "" : "x") +
               (dim.has_dim_value() ? std::to_string(dim.dim_value()) : std::string("1"));
  }
  Shape shape;
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
          " in [" + declared + "]; bind it (e.g. --shape " + vi.name() + "=" + example +
          " with the sizes you run at, or give the input tensor)");
    }
  }
  return shape;
}

void Importer::check_input_shape(const std::string& name, const Shape& shape) const {
  if (shape.empty()) {
    throw UnsupportedError("import " + origin_ + ": input '" + name +
                           "' is a rank-0 tensor (not supported)");
  }
  for (auto d : shape) {
    if (d < 0) {
      throw GraphError("import " + origin_ + ": input '" + name + "' has shape " +
                       to_string(shape) + " (a negative dimension)");
    }
    if (d == 0) {
      throw UnsupportedError("import " + origin_ + ": input '" + name + "' has shape " +
                             to_string(shape) + " (empty tensors are not supported)");
    }
  }
  try {
    (void)element_count(shape);
  } catch (const GraphError& e) {
    throw GraphError("import " + origin_ + ": input '" + name + "': " + e.what());
  }
}

namespace {

constexpr std::int64_t kReleasedElements = 65536;

}  // namespace

Operand* Importer::find_tensor(const std::string& name) const {
  if (const auto it = tensors_.find(name); it != tensors_.end()) return &it->second;
  const auto u = undecoded_.find(name);
  if (u == undecoded_.end()) return nullptr;
  ::onnx::TensorProto& t = *u->second;
  undecoded_.erase(u);
  Literal lit = take_tensor(t, origin_ + " initializer '" + t.name() + "'",
                            options_.external_data_dir);
  if (options_.on_external_file &&
      t.data_location() == ::onnx::TensorProto_DataLocation_EXTERNAL) {
    for (const auto& kv : t.external_data()) {
      if (kv.key() == "location") {
        options_.on_external_file(options_.external_data_dir /
                                  std::filesystem::path(kv.value()).lexically_normal());
      }
    }
  }
  // Decoded once: the parsed bytes are not read again.
  if (t.has_raw_data()) delete t.release_raw_data();
  Operand o;
  o.type = lit.type;
  o.shape = lit.shape;
  if (is_integer_type(lit.type)) {
    o.range = lit.extent ? Interval{lit.extent->first, lit.extent->second} : range_of(lit.values());
  }
  o.literal = std::make_shared<const Literal>(std::move(lit));
  return &(tensors_[name] = std::move(o));
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
  for (auto& t : *model_.mutable_graph()->mutable_initializer()) {
    undecoded_[t.name()] = &t;
    initializers.insert(t.name());
  }
  if (g.sparse_initializer_size() > 0) {
    throw UnsupportedError("import " + origin_ + ": sparse initializers are not supported");
  }
  // A node and a value per ONNX node, and a value per input and
  // initializer: exact for most graphs; operators the importer spells out
  // in several nodes grow the tables as before.
  const auto onnx_nodes = static_cast<std::size_t>(g.node_size());
  graph_.reserve(onnx_nodes + 16, onnx_nodes + 16 + initializers.size() +
                                      static_cast<std::size_t>(g.input_size()));
  onnx_producer_.reserve(onnx_nodes);
  onnx_consumers_.reserve(onnx_nodes + initializers.size());
  bind_inputs(initializers);
  for (int i = 0; i < g.node_size(); ++i) {
    for (const std::string& out : g.node(i).output()) onnx_producer_[out] = i;
    for (const std::string& x : g.node(i).input()) onnx_consumers_[x].push_back(i);
  }
  // Readers left per tensor: a large constant's values (kept in double while
  // importing) are released once its last reader is imported, so the import
  // holds what is still to be read, not every weight of the model twice.
  // Small ones stay: pattern matchers look back at scalars and vectors (GELU's
  // sqrt(2), a LayerNorm's gamma) after their readers were imported.
  std::unordered_map<std::string, int> readers_left;
  for (const auto& [name, readers] : onnx_consumers_) {
    readers_left[name] = static_cast<int>(readers.size());
  }
  for (const auto& out : g.output()) readers_left[out.name()] += 1;  // never released
  for (int i = 0; i < g.node_size(); ++i) {
    // A node of a pattern imported as one op is taken, not imported.
    if (taken_nodes_.count(i) == 0) import_node(g.node(i), static_cast<std::size_t>(i));
    for (const std::string& x : g.node(i).input()) {
      if (x.empty() || --readers_left[x] > 0) continue;
      undecoded_.erase(x);  // an initializer nothing read (a pattern's constant)
      const auto it = tensors_.find(x);
      if (it == tensors_.end() || element_count(it->second.shape) < kReleasedElements) continue;
      if (it->second.literal) {
        tensors_.erase(it);
      } else if (it->second.dq_weight) {
        // The integers a dequantize of constant codes kept for its readers;
        // its own chain too, when they all took the codes in another form
        // (a MatMul's transposed weights).
        if (it->second.value.valid()) graph::erase_unread_chain(graph_, it->second.value);
        it->second.dq_weight = nullptr;
      }
    }
  }
  // An output that is a literal from shapes is a constant of the model.
  for (const auto& out : g.output()) {
    const auto it = tensors_.find(out.name());
    if (!symbolic_ || it == tensors_.end() || !it->second.literal || !it->second.from_shape) continue;
    std::vector<std::string> syms = dim_syms(it->second);
    const std::vector<std::string> values = value_syms(it->second);
    syms.insert(syms.end(), values.begin(), values.end());
    fix_symbols(syms, "graph output '" + out.name() + "' is computed from the input shapes at import");
  }
  for (const auto& [symbol, reason] : fixed_symbols_) {
    spdlog::info("import {}: dimension '{}' stays as given: {}", origin_, symbol, reason);
    graph_.fix_dim(symbol, reason);
  }
  mark_outputs();
  graph::remove_dead_nodes(graph_);
  // Tensors a live node computes under another name than the file's.
  for (const auto& [name, o] : tensors_) {
    if (o.literal || !o.value.valid() || o.value.index >= graph_.value_count()) continue;
    const graph::Value& v = graph_.value(o.value);
    if (v.name == name || !v.producer.valid() || graph_.node(v.producer).erased) continue;
    graph_.add_tensor_alias(name, v.name);
  }
  return std::move(graph_);
}

// The handler of the node's operator: ONNX's own by type (null when none, a
// fold may still take it), another domain's by (domain, type), refused when
// qfuse reads no operator of that name there.
Importer::Handler Importer::handler_of(const ::onnx::NodeProto& node) const {
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
      {"Erf", &Importer::op_erf},
      {"Gelu", &Importer::op_gelu},
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
      {"Split", &Importer::op_split},
      {"Gather", &Importer::op_gather},
      {"ReduceMean", &Importer::op_reduce_mean},
      {"Pow", &Importer::op_pow},
      {"Softmax", &Importer::op_softmax},
      {"LayerNormalization", &Importer::op_layer_norm},
      {"QuantizeLinear", &Importer::op_quantize},
      {"DequantizeLinear", &Importer::op_dequantize},
      {"ConvInteger", &Importer::op_conv_integer},
      {"MatMulInteger", &Importer::op_matmul_integer},
      {"QLinearConv", &Importer::op_qlinear_conv},
      {"QLinearMatMul", &Importer::op_qlinear_matmul},
      {"DynamicQuantizeLinear", &Importer::op_dynamic_quantize_linear},
  };
  // Operators of other domains, by domain and type.
  static const std::map<std::pair<std::string, std::string>, Handler> kDomainHandlers = {
      {{"org.openvinotoolkit", "FakeQuantize"}, &Importer::op_fake_quantize},
      // ONNX Runtime's QOperator format (import_qoperator.cpp); its
      // quantizer may also write the two standard quantizers there.
      {{"com.microsoft", "QLinearAdd"}, &Importer::op_qlinear_binary},
      {{"com.microsoft", "QLinearMul"}, &Importer::op_qlinear_binary},
      {{"com.microsoft", "QLinearGlobalAveragePool"}, &Importer::op_qlinear_global_average_pool},
      {{"com.microsoft", "QLinearConcat"}, &Importer::op_qlinear_concat},
      {{"com.microsoft", "QLinearSigmoid"}, &Importer::op_qlinear_activation},
      {{"com.microsoft", "QLinearLeakyRelu"}, &Importer::op_qlinear_activation},
      {{"com.microsoft", "QLinearAveragePool"}, &Importer::op_qlinear_average_pool},
      {{"com.microsoft", "QLinearSoftmax"}, &Importer::op_qlinear_softmax},
      {{"com.microsoft", "QGemm"}, &Importer::op_qgemm},
      {{"com.microsoft", "QuantizeLinear"}, &Importer::op_quantize},
      {{"com.microsoft", "DequantizeLinear"}, &Importer::op_dequantize},
  };
  if (node.domain().empty() || node.domain() == "ai.onnx") {
    const auto it = kHandlers.find(node.op_type());
    return it != kHandlers.end() ? it->second : nullptr;
  }
  const auto it = kDomainHandlers.find({node.domain(), node.op_type()});
  if (it == kDomainHandlers.end()) {
    std::string known;
    for (const auto& entry : kDomainHandlers) {
      known += (known.empty() ? "" : ", ") + entry.first.first + " " + entry.first.second;
    }
    unsupported("operator " + node.op_type() + " of domain '" + node.domain() +
                "' is not supported (other domains: " + known + ")");
  }
  return it->second;
}

void Importer::import_node(const ::onnx::NodeProto& node, std::size_t index) {
  node_ = &node;
  base_ = !node.name().empty()                           ? node.name()
          : node.output_size() > 0 && !node.output(0).empty() ? node.output(0)
                                                           : node.op_type() + "_" + std::to_string(index);
  const bool onnx_domain = node.domain().empty() || node.domain() == "ai.onnx";
  const Handler handler = handler_of(node);
  AttrReader a(node, label());
  // A literal computed from a shape, or from such a literal, is marked so
  // (Operand::from_shape), whichever fold or handler made it.
  bool from_shape = onnx_domain && (node.op_type() == "Shape" || node.op_type() == "Size");
  for (int k = 0; k < node.input_size(); ++k) {
    const auto o = tensors_.find(node.input(k));  // an initializer not read yet is no shape
    from_shape = from_shape || (o != tensors_.end() && o->second.literal && o->second.from_shape);
  }
  symbolic_inputs_ = 0;
  try {
    if (!onnx_domain || !try_fold(a)) {
      if (handler == nullptr) unsupported("unsupported operator " + node.op_type());
      inputs_read_ = 0;
      (this->*handler)(a);
      check_all_inputs_used();
    }
  } catch (const Error& e) {
    // Errors from shared code (shapes, tensors) get the node's name.
    const std::string what = e.what();
    if (what.rfind("import ", 0) == 0 || what.rfind("validate ", 0) == 0) throw;
    if (dynamic_cast<const UnsupportedError*>(&e) != nullptr) {
      throw UnsupportedError("import " + label() + ": " + what);
    }
    throw GraphError("import " + label() + ": " + what);
  } catch (const std::length_error& e) {
    throw GraphError("import " + label() + ": a tensor too large to hold (" + e.what() + ")");
  } catch (const std::bad_alloc&) {
    throw GraphError("import " + label() + ": out of memory folding a constant");
  }
  a.check_all_used();
  for (int k = 0; from_shape && k < node.output_size(); ++k) {
    const auto out = tensors_.find(node.output(k));
    if (out != tensors_.end() && out->second.literal) out->second.from_shape = true;
  }
  if (symbolic_) {
    propagate_symbols(node);
    fix_symbols_read_as_constants(node);
  }
  for (int k = 0; k < node.output_size(); ++k) {
    if (!node.output(k).empty() && !tensors_.count(node.output(k))) {
      unsupported("output " + std::to_string(k) + " ('" + node.output(k) + "') is not supported");
    }
  }
}

void Importer::check_all_inputs_used() const {
  for (int k = 0; k < node_->input_size(); ++k) {
    if (node_->input(k).empty()) continue;
    if (k < 64 && (inputs_read_ >> k & 1) != 0) continue;
    unsupported("input " + std::to_string(k) + " ('" + node_->input(k) + "') of " +
                node_->op_type() + " is not supported at opset " + std::to_string(opset_));
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
    // INT64 tensors come in (token ids, masks) and are carried as f32 inside:
    // an INT64 result would not round-trip values past 2^24.
    if (type == ElementType::s64) type.reset();
    if (!type) {
      throw UnsupportedError("import " + origin_ + ": output '" + vi.name() +
                             "' has element type " + onnx_type_name(o.type) +
                             " (qfuse outputs are FLOAT, UINT8, INT8, INT32)");
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

// ---------------------------------------------------------------------------
// Folding: nodes whose inputs are all known at import.

// Tensors the importer computes itself (ConstantOfShape, Range) are held as
// doubles: 2^26 elements (512 MiB) is far beyond any real model's.
constexpr std::int64_t kMaxFoldedElements = std::int64_t{1} << 26;

// A table like the operator handlers: each fold sets the node's outputs and
// returns true, or returns false to leave the node to its handler. Folds
// marked `literals` run only when every input is known.
bool Importer::try_fold(AttrReader& a) {
  struct Fold {
    bool (Importer::*fold)(AttrReader&);
    bool literals;
  };
  static const std::unordered_map<std::string, Fold> kFolds = {
      {"Shape", {&Importer::fold_shape, false}},
      {"Size", {&Importer::fold_size, false}},
      {"ConstantOfShape", {&Importer::fold_constant_of_shape, false}},
      {"Identity", {&Importer::fold_identity, true}},
      {"Cast", {&Importer::fold_cast, true}},
      {"Transpose", {&Importer::fold_transpose, true}},
      {"Concat", {&Importer::fold_concat, true}},
      {"Gather", {&Importer::fold_gather, true}},
      {"Slice", {&Importer::fold_slice, true}},
      {"Range", {&Importer::fold_range, true}},
      {"Neg", {&Importer::fold_unary, true}},
      {"Floor", {&Importer::fold_unary, true}},
      {"Ceil", {&Importer::fold_unary, true}},
      {"Add", {&Importer::fold_binary, true}},
      {"Sub", {&Importer::fold_binary, true}},
      {"Mul", {&Importer::fold_binary, true}},
      {"Div", {&Importer::fold_binary, true}},
      {"Min", {&Importer::fold_binary, true}},
      {"Max", {&Importer::fold_binary, true}},
      {"Equal", {&Importer::fold_binary, true}},
  };
  const auto it = kFolds.find(node_->op_type());
  if (it == kFolds.end()) return false;
  if (it->second.literals) {
    if (num_inputs() == 0) return false;
    for (std::size_t k = 0; k < num_inputs(); ++k) {
      if (has_in(k) && !in(k).literal) return false;
    }
  }
  return (this->*(it->second.fold))(a);
}

bool Importer::fold_shape(AttrReader& a) {
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

bool Importer::fold_size(AttrReader& /*a*/) {
  set_out(0, make_literal(kInt64, {}, {static_cast<double>(element_count(in(0).shape))}));
  return true;
}

bool Importer::fold_constant_of_shape(AttrReader& a) {
  const Literal& s = lit_in(0, "the shape");
  Shape shape;
  for (double d : s.values()) shape.push_back(to_int64(d, "shape value"));
  Values fill{0.0};
  int type = kFloat;
  if (const auto* t = a.tensor("value")) {
    Literal v = decode_tensor(*t, label());
    expect(v.values().size() == 1, "value must hold one element");
    fill = v.values();
    type = v.type;
  }
  for (auto d : shape) {
    if (d < 1) unsupported("empty tensors are not supported (shape " + to_string(shape) + ")");
  }
  expect(element_count(shape) <= kMaxFoldedElements,
         "shape " + to_string(shape) + " is too large to fold at import");
  set_out(0, make_literal(type, shape, Values(sz(element_count(shape)), fill[0])));
  return true;
}

bool Importer::fold_identity(AttrReader& /*a*/) {
  set_out(0, in(0));
  return true;
}

bool Importer::fold_cast(AttrReader& a) {
  const int to = static_cast<int>(a.i("to", kFloat));
  // Folded: FLOAT, DOUBLE, BOOL and the integers. Half and 8-bit floats go to
  // op_cast, which names them unsupported; so does opset 19's saturate.
  if (to != kFloat && to != kDouble && !is_integer_type(to) && to != kBool) return false;
  a.ignore("saturate");
  const Literal& x = *in(0).literal;
  Values v(x.values().size());
  for (std::size_t k = 0; k < v.size(); ++k) v[k] = cast_value(x.values()[k], to);
  set_out(0, make_literal(to, x.shape, std::move(v)));
  return true;
}

bool Importer::fold_transpose(AttrReader& a) {
  const Literal& x = *in(0).literal;
  Ints perm = a.ints("perm");
  if (perm.empty()) {
    for (std::size_t d = x.shape.size(); d-- > 0;) perm.push_back(i64(d));
  }
  check_permutation(perm, x.shape.size());
  Shape out;
  Values v = transpose_values(x.values(), x.shape, perm, out);
  set_out(0, make_literal(x.type, out, std::move(v)));
  return true;
}

bool Importer::fold_concat(AttrReader& a) {
  const Literal& x = *in(0).literal;
  expect(!x.shape.empty(), "inputs must have rank >= 1");
  const std::int64_t axis = normalize_axis(a.i("axis", 0), rank_of(x.shape), "axis");
  Shape out = x.shape;
  out[sz(axis)] = 0;
  for (std::size_t k = 0; k < num_inputs(); ++k) {
    const Shape& s = in(k).shape;
    bool same = s.size() == x.shape.size();
    for (std::size_t d = 0; same && d < s.size(); ++d) same = i64(d) == axis || s[d] == x.shape[d];
    expect(same, "input " + std::to_string(k) + " " + to_string(s) + " differs from input 0 " +
                     to_string(x.shape) + " outside the concat axis");
    out[sz(axis)] += s[sz(axis)];
  }
  (void)element_count(out);
  const std::int64_t outer = dims_product(x.shape, 0, axis);
  Values v;
  for (std::int64_t o = 0; o < outer; ++o) {
    for (std::size_t k = 0; k < num_inputs(); ++k) {
      const Literal& l = *in(k).literal;
      const std::int64_t chunk = element_count(l.shape) / std::max<std::int64_t>(outer, 1);
      v.insert(v.end(), l.values().begin() + o * chunk, l.values().begin() + (o + 1) * chunk);
    }
  }
  set_out(0, make_literal(x.type, out, std::move(v)));
  return true;
}

bool Importer::fold_gather(AttrReader& a) {
  // Rows of a table by an arange of a symbolic length: a Slice that follows it.
  const Operand& table = in(0);
  const bool rows = table.type == kFloat || table.type == kUint8 || table.type == kInt8;
  if (rows && !table.from_shape && symbolic_arange(in(1))) return false;
  const Literal& x = *in(0).literal;
  const Literal& idx = *in(1).literal;
  const std::int64_t axis = normalize_axis(a.i("axis", 0), rank_of(x.shape), "axis");
  Shape out(x.shape.begin(), x.shape.begin() + axis);
  out.insert(out.end(), idx.shape.begin(), idx.shape.end());
  out.insert(out.end(), x.shape.begin() + axis + 1, x.shape.end());
  const std::int64_t outer = dims_product(x.shape, 0, axis);
  const std::int64_t inner = dims_product(x.shape, axis + 1, rank_of(x.shape));
  const std::int64_t n = x.shape[sz(axis)];
  Values v;
  for (std::int64_t o = 0; o < outer; ++o) {
    for (double id : idx.values()) {
      auto j = to_int64(id, "index");
      if (j < 0) j += n;
      expect(j >= 0 && j < n, "index " + std::to_string(j) + " out of range");
      const auto from = x.values().begin() + (o * n + j) * inner;
      v.insert(v.end(), from, from + inner);
    }
  }
  set_out(0, make_literal(x.type, out, std::move(v)));
  return true;
}

bool Importer::fold_slice(AttrReader& /*a*/) {
  const Literal& x = *in(0).literal;
  const Literal& starts = *in(1).literal;
  const Literal& ends = *in(2).literal;
  const std::int64_t r = rank_of(x.shape);
  Values axes, steps;
  if (has_in(3)) axes = in(3).literal->values();
  if (has_in(4)) steps = in(4).literal->values();
  if (axes.empty()) {
    for (std::size_t d = 0; d < starts.values().size(); ++d) axes.push_back(static_cast<double>(d));
  }
  if (steps.empty()) steps.assign(starts.values().size(), 1.0);
  expect(ends.values().size() == starts.values().size() && axes.size() == starts.values().size() &&
             steps.size() == starts.values().size(),
         "starts, ends, axes and steps differ in length");
  std::vector<std::int64_t> lo(sz(r), 0), step(sz(r), 1), count(x.shape.begin(), x.shape.end());
  for (std::size_t k = 0; k < axes.size(); ++k) {
    const std::int64_t ax = normalize_axis(to_int64(axes[k], "axis"), r, "axis");
    const std::int64_t dim = x.shape[sz(ax)];
    const auto st = to_int64(steps[k], "step");
    expect(st != 0, "step 0");
    auto clampd = [&](double v, std::int64_t lo_b, std::int64_t hi_b) {
      expect(!std::isnan(v), "a start or end is NaN");
      double c = v < 0 ? v + static_cast<double>(dim) : v;
      return static_cast<std::int64_t>(std::clamp(c, static_cast<double>(lo_b),
                                                  static_cast<double>(hi_b)));
    };
    std::int64_t s = 0, e = 0;
    if (st > 0) {
      s = clampd(starts.values()[k], 0, dim);
      e = clampd(ends.values()[k], 0, dim);
      count[sz(ax)] = std::max<std::int64_t>(0, (e - s + st - 1) / st);
    } else {
      s = clampd(starts.values()[k], 0, dim - 1);
      e = clampd(ends.values()[k], -1, dim - 1);
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
    v[k] = x.values()[sz(off)];
    for (std::size_t d = sz(r); d-- > 0;) {
      if (++idx[d] < out[d]) break;
      idx[d] = 0;
    }
  }
  set_out(0, make_literal(x.type, out, std::move(v)));
  return true;
}

bool Importer::fold_range(AttrReader& /*a*/) {
  const Literal& x = *in(0).literal;
  const double start = x.values().at(0), limit = in(1).literal->values().at(0),
               delta = in(2).literal->values().at(0);
  expect(delta != 0.0, "delta is 0");
  const auto n = to_int64(std::max(std::ceil((limit - start) / delta), 0.0), "element count");
  expect(n <= kMaxFoldedElements, "Range of " + std::to_string(n) + " elements is too large to fold");
  Values v;
  for (std::int64_t k = 0; k < n; ++k) {
    v.push_back(cast_value(start + static_cast<double>(k) * delta, x.type));
  }
  set_out(0, make_literal(x.type, {n}, std::move(v)));
  return true;
}

bool Importer::fold_unary(AttrReader& /*a*/) {
  const Literal& x = *in(0).literal;
  const std::string& op = node_->op_type();
  Values v = x.values();
  for (double& e : v) e = op == "Neg" ? -e : op == "Floor" ? std::floor(e) : std::ceil(e);
  set_out(0, make_literal(x.type, x.shape, std::move(v)));
  return true;
}

// Elementwise binary with numpy broadcasting; Min/Max/Add/Mul may be variadic
// (more than two inputs are left to the handler).
bool Importer::fold_binary(AttrReader& /*a*/) {
  const Literal& x = *in(0).literal;
  const std::string& op = node_->op_type();
  if (num_inputs() != 2) return false;
  const Literal& y = *in(1).literal;
  const auto shape = graph::broadcast_shapes(x.shape, y.shape);
  expect(shape.has_value(), "shapes " + to_string(x.shape) + " and " + to_string(y.shape) +
                                " do not broadcast");
  const Shape out = *shape;
  const auto ox = broadcast_offsets(x.shape, out);
  const auto oy = broadcast_offsets(y.shape, out);
  const bool f = x.type == kFloat;
  Values v(ox.size());
  for (std::size_t k = 0; k < v.size(); ++k) {
    const double p = x.values()[ox[k]], q = y.values()[oy[k]];
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
  return true;
}

// ---------------------------------------------------------------------------
// Operators.

void Importer::op_constant(AttrReader& a) {
  Literal lit;
  if (const auto* t = a.tensor("value")) {
    lit = decode_tensor(*t, label());
  } else if (a.has("value_float")) {
    lit = Literal(kFloat, {}, Values{static_cast<double>(a.f("value_float", 0))});
  } else if (a.has("value_floats")) {
    auto v = a.floats("value_floats");
    lit = Literal(kFloat, {i64(v.size())}, Values(v.begin(), v.end()));
  } else if (a.has("value_int")) {
    lit = Literal(kInt64, {}, Values{static_cast<double>(a.i("value_int", 0))});
  } else if (a.has("value_ints")) {
    auto v = a.ints("value_ints");
    lit = Literal(kInt64, {i64(v.size())}, Values(v.begin(), v.end()));
  } else {
    unsupported("only the value, value_float(s) and value_int(s) forms are supported");
  }
  set_out(0, make_literal(lit.type, lit.shape, std::move(lit.mutable_values())));
}

void Importer::op_identity(AttrReader&) { set_out(0, in(0)); }

void Importer::op_dropout(AttrReader& a) {
  // Inference: Dropout is the identity. Training mode and the mask are not imported.
  a.ignore("seed");
  a.ignore("ratio");  // opset 10's attribute form
  ignore_input(1);     // ratio, opset 12's input form
  if (has_in(2)) {
    const Literal& t = lit_in(2, "training_mode");
    if (!t.values().empty() && t.values()[0] != 0.0) {
      unsupported("training_mode = true is not supported");
    }
  }
  max_outputs(1);
  set_out(0, in(0));
}

}  // namespace impl

namespace {

using namespace impl;

::onnx::ModelProto parse_model(std::string_view bytes, std::string_view origin) {
  ::onnx::ModelProto model;
  if (bytes.size() > static_cast<std::size_t>(std::numeric_limits<int>::max()) ||
      !model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    throw GraphError("import " + std::string(origin) + ": not a valid ONNX model (protobuf parse failed)");
  }
  if (!model.has_graph()) {
    throw GraphError("import " + std::string(origin) +
                     ": not an ONNX model (no graph; an empty or unrelated file?)");
  }
  return model;
}

// The file parsed as it is read, 64 KiB at a time: no buffer holds the whole
// file beside the parsed model (a BERT-base's 173 MB twice at the peak).
::onnx::ModelProto parse_file(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw IoError("import " + path.string() + ": cannot open the file");
  ::onnx::ModelProto model;
  bool parsed = false;
  {
    google::protobuf::io::FileInputStream stream(fd);
    stream.SetCloseOnDelete(true);
    parsed = model.ParseFromZeroCopyStream(&stream);
    if (stream.GetErrno() != 0) throw IoError("import " + path.string() + ": cannot read the file");
  }
  if (!parsed) {
    throw GraphError("import " + path.string() + ": not a valid ONNX model (protobuf parse failed)");
  }
  if (!model.has_graph()) {
    throw GraphError("import " + path.string() +
                     ": not an ONNX model (no graph; an empty or unrelated file?)");
  }
  return model;
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw IoError("import " + path.string() + ": cannot open the file");
  // One read into a buffer of the file's size (a stream copy grows and
  // copies its buffer).
  const std::streamoff size = in.tellg();
  if (size < 0) throw IoError("import " + path.string() + ": cannot read the file's size");
  std::string bytes(static_cast<std::size_t>(size), '\0');
  in.seekg(0);
  if (!in.read(bytes.data(), size)) throw IoError("import " + path.string() + ": cannot read the file");
  return bytes;
}

// Both entry points: the parsed model and what the import decoded from it go
// before the graph is returned, and the heap they held goes back to the
// system.
graph::Graph import_model(::onnx::ModelProto model, const ImportOptions& options,
                          std::string_view origin) {
  graph::Graph g;
  {
    Importer importer(model, options, std::string(origin));
    g = importer.run();
    model = ::onnx::ModelProto();
  }
  release_free_memory();
  if (options.on_phase) options.on_phase("decode");
  return g;
}

}  // namespace

graph::Graph import_bytes(std::string_view bytes, const ImportOptions& options,
                          std::string_view origin) {
  // QFUSE_LOG_LEVEL applies from the import on (why a pattern was not taken).
  init_logging();
  return import_model(parse_model(bytes, origin), options, origin);
}

graph::Graph import_file(const std::filesystem::path& path, const ImportOptions& options) {
  init_logging();
  ImportOptions with_dir = options;
  if (with_dir.external_data_dir.empty()) {
    with_dir.external_data_dir = path.has_parent_path() ? path.parent_path() : ".";
  }
  // The import holds the parsed model and what it has decoded, never the
  // file's bytes as well.
  ::onnx::ModelProto model = parse_file(path);
  if (options.on_phase) options.on_phase("read");
  return import_model(std::move(model), with_dir, path.string());
}

namespace {

using google::protobuf::io::CodedInputStream;

// Skips the field whose tag was just read; false on a malformed one (or a
// group, which ONNX does not use).
bool skip_field(CodedInputStream& in, std::uint32_t tag) {
  switch (tag & 7) {
    case 0: {
      std::uint64_t v = 0;
      return in.ReadVarint64(&v);
    }
    case 1: return in.Skip(8);
    case 2: {
      std::uint32_t n = 0;
      return in.ReadVarint32(&n) && in.Skip(static_cast<int>(n));
    }
    case 5: return in.Skip(4);
    default: return false;
  }
}

// What list_inputs reads of a model: its graph's inputs and the names of
// its initializers.
struct GraphInputs {
  std::vector<::onnx::ValueInfoProto> inputs;
  std::set<std::string> initializers;
};

// The graph's inputs and initializer names, read from the protobuf wire
// format without parsing the rest: an initializer's data is skipped, not
// read, so a 180 MB model's inputs cost its field headers. False when the
// bytes are not a model this reader understands.
bool scan_graph_inputs(const std::uint8_t* data, std::size_t size, GraphInputs& out) {
  if (size > static_cast<std::size_t>(std::numeric_limits<int>::max())) return false;
  CodedInputStream in(data, static_cast<int>(size));
  bool saw_graph = false;
  for (std::uint32_t tag; (tag = in.ReadTag()) != 0;) {
    if (tag != ((7u << 3) | 2u)) {  // ModelProto.graph
      if (!skip_field(in, tag)) return false;
      continue;
    }
    saw_graph = true;
    std::uint32_t graph_size = 0;
    if (!in.ReadVarint32(&graph_size)) return false;
    const CodedInputStream::Limit graph = in.PushLimit(static_cast<int>(graph_size));
    for (std::uint32_t g; (g = in.ReadTag()) != 0;) {
      if (g == ((11u << 3) | 2u)) {  // GraphProto.input
        std::string bytes;
        std::uint32_t n = 0;
        if (!in.ReadVarint32(&n) || !in.ReadString(&bytes, static_cast<int>(n)) ||
            !out.inputs.emplace_back().ParseFromString(bytes)) {
          return false;
        }
      } else if (g == ((5u << 3) | 2u)) {  // GraphProto.initializer: its name only
        std::uint32_t n = 0;
        if (!in.ReadVarint32(&n)) return false;
        const CodedInputStream::Limit tensor = in.PushLimit(static_cast<int>(n));
        for (std::uint32_t t; (t = in.ReadTag()) != 0;) {
          if (t == ((8u << 3) | 2u)) {  // TensorProto.name
            std::uint32_t len = 0;
            std::string name;
            if (!in.ReadVarint32(&len) || !in.ReadString(&name, static_cast<int>(len))) return false;
            out.initializers.insert(std::move(name));
          } else if (!skip_field(in, t)) {
            return false;
          }
        }
        if (!in.ConsumedEntireMessage()) return false;
        in.PopLimit(tensor);
      } else if (!skip_field(in, g)) {
        return false;
      }
    }
    if (!in.ConsumedEntireMessage()) return false;
    in.PopLimit(graph);
  }
  return saw_graph && in.ConsumedEntireMessage();
}

// The inputs of the model file at `path`, from the mapped file; the whole
// model parsed when the scan cannot read it (its error then says why).
GraphInputs graph_inputs(const std::filesystem::path& path) {
  GraphInputs found;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw IoError("import " + path.string() + ": cannot open the file");
  struct stat st {};
  void* map = MAP_FAILED;
  if (::fstat(fd, &st) == 0 && st.st_size > 0) {
    map = ::mmap(nullptr, static_cast<std::size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
  }
  ::close(fd);
  bool scanned = false;
  if (map != MAP_FAILED) {
    scanned = scan_graph_inputs(static_cast<const std::uint8_t*>(map),
                                static_cast<std::size_t>(st.st_size), found);
    ::munmap(map, static_cast<std::size_t>(st.st_size));
  }
  if (scanned) return found;
  const ::onnx::ModelProto model = parse_file(path);
  found = GraphInputs{};
  found.inputs.assign(model.graph().input().begin(), model.graph().input().end());
  for (const auto& t : model.graph().initializer()) found.initializers.insert(t.name());
  return found;
}

}  // namespace

std::vector<InputInfo> list_inputs(const std::filesystem::path& path) {
  const GraphInputs model = graph_inputs(path);
  const std::set<std::string>& initializers = model.initializers;
  std::vector<InputInfo> inputs;
  for (const auto& vi : model.inputs) {
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
