#pragma once
// Internal to the OpenVINO IR frontend: the Importer and the operands it
// passes between layers. importer.cpp holds the driver (Parameter, Const,
// Convert, Result, constants and IR emission, the public functions);
// import_ops.cpp the elementwise operators, FakeQuantize and the shape and
// data-movement operators; import_layers.cpp convolutions, MatMul, pools,
// normalization, Softmax and Interpolate.

#include <spdlog/spdlog.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "graph/builder.hpp"
#include "graph/frontend_common.hpp"
#include "graph/openvino/importer.hpp"
#include "graph/openvino/ir_document.hpp"
#include "qfuse/error.hpp"

namespace qfuse::openvino::impl {

using namespace detail;
using graph::Attributes;
using graph::NoAttrs;
using graph::OpKind;
using graph::ValueId;
using Values = std::vector<double>;

inline std::size_t sz(std::int64_t v) { return static_cast<std::size_t>(v); }
inline std::int64_t i64(std::size_t v) { return static_cast<std::int64_t>(v); }
// The IR has no rank-0 tensors: a scalar is carried as [1].
inline Shape ir_shape(const Shape& s) { return s.empty() ? Shape{1} : s; }

// Values known at import: a Const's bytes in the .bin (read in place), or
// values computed by folding (held as doubles: f32 values and integers up
// to 2^53 exactly).
struct ConstData {
  OvType type = OvType::f32;
  Shape shape;  // rank 0 allowed
  const std::byte* bytes = nullptr;
  Values computed;  // when bytes is null

  std::int64_t count() const { return element_count(shape); }
  double at(std::int64_t i) const;
  Values values() const;
};

// OpenVINO's compressed weights: Convert(f32) of an 8-bit Const, then
// optionally Subtract(zero point) and Multiply(scale) by constants. Kept as
// such so that the IR gets the same chain on the 8-bit constant (the ONNX
// frontend's DequantizeLinear of an initializer), which the passes take as
// int8 weights.
struct DqWeight {
  std::shared_ptr<const ConstData> codes;       // i8 / u8
  std::shared_ptr<const ConstData> zero_point;  // f32, broadcasts to codes; may be null
  std::shared_ptr<const ConstData> scale;       // f32, broadcasts to codes; may be null
};

// One output port's tensor during import.
struct Operand {
  OvType type = OvType::f32;
  Shape shape;                                // OpenVINO's shape (rank 0 allowed)
  std::shared_ptr<const ConstData> constant;  // values known at import
  std::shared_ptr<const DqWeight> dq;         // compressed weights (also known)
  ValueId value;                              // the IR value, once emitted

  bool known() const { return constant || dq; }
};

class Importer {
 public:
  Importer(const IrDocument& doc, const BinData& bin, const ImportOptions& options,
           std::string origin)
      : doc_(doc), bin_(bin), options_(options), origin_(std::move(origin)), b_(graph_) {}

  graph::Graph run();

 private:
  using Handler = void (Importer::*)(AttrReader&);
  struct OpEntry {
    Handler handler;
    std::vector<std::string_view> versions;
  };
  static const std::map<std::string, OpEntry, std::less<>>& op_table();

  // --- context ---------------------------------------------------------------
  const Layer& layer() const { return *layer_; }
  std::string label() const { return layer_->label(); }
  [[noreturn]] void unsupported(const std::string& problem) const {
    throw UnsupportedError("import " + label() + ": " + problem);
  }
  [[noreturn]] void malformed(const std::string& problem) const {
    throw GraphError("import " + label() + ": " + problem);
  }
  void expect(bool ok, const std::string& problem) const {
    if (!ok) malformed(problem);
  }
  // GraphError unless the layer has between lo and hi inputs and `outputs`
  // output ports.
  void expect_ports(std::size_t lo, std::size_t hi, std::size_t outputs) const;
  std::size_t num_inputs() const { return layer_->inputs.size(); }
  Operand& in(std::size_t i);
  void set_out(std::size_t k, Operand o);
  bool output_read(std::size_t k) const;
  std::int64_t normalize_axis(std::int64_t axis, std::int64_t rank, const char* what) const;
  // A known input's values (UnsupportedError when computed at run time).
  Values values_in(std::size_t i, const char* what);
  Ints ints_in(std::size_t i, const char* what);
  std::int64_t to_int(double v, const char* what) const;
  void require_float(const Operand& o, const char* what) const;

  // --- IR emission -----------------------------------------------------------
  std::string unique_name(const std::string& wanted);
  std::string node_name(const std::string& suffix) {
    return unique_name(suffix.empty() ? layer_->name : layer_->name + "/" + suffix);
  }
  ValueId emit(OpKind kind, std::vector<ValueId> inputs, Attributes attrs = NoAttrs{},
               const std::string& suffix = {}) {
    return b_.op(kind, std::move(inputs), std::move(attrs), node_name(suffix));
  }
  ValueId constant(Tensor t, const std::string& suffix) {
    return b_.constant(node_name(suffix), std::move(t));
  }
  ValueId f32_constant(const Values& v, Shape shape, const std::string& suffix);
  // The tensor as an f32 IR value: run-time f32 as is, known values as an
  // f32 constant, compressed weights as their chain on the 8-bit constant.
  ValueId f32(Operand& o);
  // The IR value in the tensor's own element type (f16 constants as f32).
  ValueId native(Operand& o);
  ValueId emit_dq(const DqWeight& w);
  Tensor to_tensor(const ConstData& c, const Shape& shape) const;
  // An f32 run-time result of OpenVINO shape `shape` (reshaped from [1] for rank 0).
  Operand make_float(ValueId v, const Shape& shape);
  Operand make_known(OvType type, Shape shape, Values values) const;
  Values values_of(const Operand& o) const;
  // A known tensor under a new shape / permutation, compressed weights kept
  // as such where their zero point and scale follow (else folded to f32).
  Operand reshaped_known(const Operand& o, const Shape& shape) const;
  Operand transposed_known(const Operand& o, const Ints& perm) const;
  // The operand reshaped: folded when known, else an IR Reshape.
  Operand reshape(Operand& o, const Shape& shape, const std::string& suffix = {});

  // --- the model -------------------------------------------------------------
  void reserve_names();
  void import_layer(std::size_t index);
  void check_declared_shapes() const;
  void mark_outputs();
  std::string output_name(const Layer::Source& s) const;

  // --- operators (importer.cpp) ----------------------------------------------
  void op_parameter(AttrReader& a);
  void op_const(AttrReader& a);
  void op_result(AttrReader& a);
  void op_convert(AttrReader& a);
  // --- import_ops.cpp --------------------------------------------------------
  void op_binary(AttrReader& a);
  bool try_compressed_weights(OpKind kind, Operand& x, Operand& y);
  Values fold_binary(OpKind kind, const Operand& x, const Operand& y, const Shape& out,
                     bool python_div) const;
  void op_unary(AttrReader& a);
  void op_clamp(AttrReader& a);
  void op_swish(AttrReader& a);
  void op_gelu(AttrReader& a);
  void op_fake_quantize(AttrReader& a);
  void op_shape_of(AttrReader& a);
  void op_reshape(AttrReader& a);
  void op_squeeze(AttrReader& a);
  void op_unsqueeze(AttrReader& a);
  void op_transpose(AttrReader& a);
  void op_concat(AttrReader& a);
  void op_split(AttrReader& a);
  void op_variadic_split(AttrReader& a);
  void split_into(const std::vector<std::int64_t>& sizes, std::int64_t axis);
  void op_gather(AttrReader& a);
  // --- import_layers.cpp -----------------------------------------------------
  graph::AutoPad auto_pad(AttrReader& a);
  // f32 input [N, C, spatial...] of rank 3 to 5 and f32 weights of its rank
  // + extra_rank (1: GroupConvolution's [G, O/G, C/G, k...]).
  void expect_layer_operands(const Operand& x, const Operand& w, std::size_t extra_rank) const;
  void window_attrs(AttrReader& a, std::size_t spatial, graph::Ints& strides,
                    graph::Ints& dilations, graph::Ints& pads_begin, graph::Ints& pads_end);
  void op_convolution(AttrReader& a);
  void op_group_convolution(AttrReader& a);
  void op_convolution_backprop_data(AttrReader& a);
  void op_matmul(AttrReader& a);
  void op_pool(AttrReader& a);
  void op_reduce_mean(AttrReader& a);
  void op_softmax(AttrReader& a);
  void op_mvn(AttrReader& a);
  void op_interpolate(AttrReader& a);

  const IrDocument& doc_;
  const BinData& bin_;
  const ImportOptions& options_;
  std::string origin_;
  graph::Graph graph_;
  graph::Builder b_;
  std::vector<std::vector<Operand>> outputs_;  // per layer, per output port
  std::vector<bool> imported_;                 // per layer
  std::set<std::string> used_names_;
  std::set<std::string> bound_inputs_;  // input_shapes entries used
  const Layer* layer_ = nullptr;
  std::size_t layer_index_ = 0;
  std::vector<std::size_t> results_;  // Result layers, file order
};

}  // namespace qfuse::openvino::impl
