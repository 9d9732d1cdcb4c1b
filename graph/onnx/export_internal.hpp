#pragma once
// Internal to the ONNX exporter (exporter.hpp says what it writes): the
// Writer that assembles the GraphProto and the Exporter that walks the fused
// graph. Its members live by concern:
//   exporter.cpp             the driver: tensor names, the graph's inputs and
//                            outputs, each node in order (and the post-ops an
//                            f32 layer absorbed), the pre-quantized form's
//                            shape ops; the public functions;
//   export_ops.cpp           the ordinary operators;
//   export_quantization.cpp  quantization and the ops on codes;
//   export_layers.cpp        the fused int8 layers.

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "graph/graph.hpp"
#include "graph/node_queries.hpp"
#include "graph/onnx/exporter.hpp"
#include "graph/onnx/proto_utils.hpp"
#include "graph/ops.hpp"

namespace qfuse::onnx::export_impl {

using detail::kFloat;
using detail::kInt32;
using detail::kInt64;
using detail::kInt8;
using detail::kUint8;
using graph::is_int8;
using graph::Node;
using graph::OpKind;

inline int onnx_type(ElementType t) { return detail::to_onnx_type(t); }

class Writer {
 public:
  explicit Writer(::onnx::GraphProto& g) : g_(g) {}

  std::string fresh(const std::string& base) {
    std::string n = base;
    while (!used_.insert(n).second) n = base + "_" + std::to_string(++counter_);
    return n;
  }
  void reserve(const std::string& n) { used_.insert(n); }

  // An initializer named `base` (made unique); `shape` empty: a scalar.
  template <typename T>
  std::string constant(const std::string& base, int type, const std::vector<T>& values,
                       const Shape& shape) {
    return named_constant(fresh(base), type, values, shape);
  }
  // An initializer with exactly this (reserved) name.
  template <typename T>
  std::string named_constant(const std::string& n, int type, const std::vector<T>& values,
                             const Shape& shape) {
    ::onnx::TensorProto* t = g_.add_initializer();
    t->set_name(n);
    t->set_data_type(type);
    for (const std::int64_t d : shape) t->add_dims(d);
    for (const T& v : values) {
      switch (type) {
        case kFloat: t->add_float_data(static_cast<float>(v)); break;
        case kInt64: t->add_int64_data(static_cast<std::int64_t>(v)); break;
        default: t->add_int32_data(static_cast<std::int32_t>(v)); break;  // int32, int8, uint8
      }
    }
    return n;
  }
  std::string scalar(const std::string& base, double v) {
    return constant(base, kFloat, std::vector<double>{v}, {});
  }
  std::string ints64(const std::string& base, const std::vector<std::int64_t>& v) {
    return constant(base, kInt64, v, Shape{static_cast<std::int64_t>(v.size())});
  }

  ::onnx::NodeProto& node(const std::string& op, const std::string& name,
                          const std::vector<std::string>& inputs, const std::string& output) {
    ::onnx::NodeProto* n = g_.add_node();
    n->set_op_type(op);
    n->set_name(fresh(name));
    for (const std::string& i : inputs) n->add_input(i);
    n->add_output(output);
    producer_[output] = g_.node_size() - 1;
    return *n;
  }
  // A node whose output gets a fresh name; returns it.
  std::string op(const std::string& op, const std::string& base,
                 const std::vector<std::string>& inputs) {
    const std::string out = fresh(base);
    node(op, base, inputs, out);
    return out;
  }
  // The node that writes `output` (written by this writer), else null.
  ::onnx::NodeProto* producer(const std::string& output) {
    const auto it = producer_.find(output);
    return it == producer_.end() ? nullptr : g_.mutable_node(it->second);
  }
  // Makes the node writing `t` (a fresh name of this writer) write `out`
  // instead; an Identity where nothing here wrote `t`.
  void finish(const std::string& t, const std::string& out, const std::string& base) {
    if (const auto it = producer_.find(t); it != producer_.end() && t != out) {
      const int index = it->second;
      g_.mutable_node(index)->set_output(0, out);
      producer_.erase(it);
      producer_[out] = index;
      return;
    }
    if (t != out) node("Identity", base, {t}, out);
  }

  static void ints(::onnx::NodeProto& n, const std::string& name, const graph::Ints& v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(::onnx::AttributeProto::INTS);
    for (const std::int64_t x : v) a->add_ints(x);
  }
  static void int_attr(::onnx::NodeProto& n, const std::string& name, std::int64_t v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(::onnx::AttributeProto::INT);
    a->set_i(v);
  }
  static void float_attr(::onnx::NodeProto& n, const std::string& name, float v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(::onnx::AttributeProto::FLOAT);
    a->set_f(v);
  }
  static void string_attr(::onnx::NodeProto& n, const std::string& name, const std::string& v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(::onnx::AttributeProto::STRING);
    a->set_s(v);
  }

 private:
  ::onnx::GraphProto& g_;
  std::set<std::string> used_;
  std::map<std::string, int> producer_;
  int counter_ = 0;
};

class Exporter {
 public:
  Exporter(const graph::Graph& g, const ExportSource& source, ::onnx::GraphProto& proto)
      : g_(g), source_(source), w_(proto), proto_(proto) {}

  ExportReport run();

 private:
  // ---- the driver ----------------------------------------------------------
  [[noreturn]] void refuse(const Node& n, const std::string& why) const;
  void add_value_info(::onnx::ValueInfoProto& info, graph::ValueId id);
  const std::string& name(graph::ValueId id) const { return names_[id.index]; }
  std::string in(graph::ValueId id);
  std::string in_f32(graph::ValueId id, const std::string& base);
  std::string cast(const std::string& x, int to, const std::string& base);
  void emit(const Node& n);

  // ---- ordinary ONNX operators (export_ops.cpp) -----------------------------
  void ordinary(const Node& n, const std::string& y);
  std::string transpose_last_two(const std::string& x, std::size_t rank, const std::string& base);
  static void conv_attrs(::onnx::NodeProto& node, const graph::Ints& strides,
                         const graph::Ints& dilations, const graph::Ints& pads_begin,
                         const graph::Ints& pads_end, std::int64_t groups, const Shape& w);
  void swish(const std::string& b, const std::string& x, float alpha, const std::string& y);
  void gelu(const std::string& b, const std::string& x, bool tanh_form, const std::string& y);
  void layer_norm(const Node& n, const std::string& y);
  void gather(const Node& n, const std::string& y);
  void resize(const Node& n, const std::string& y);
  static void pool_attrs(::onnx::NodeProto& p, const graph::PoolAttrs& a);
  void max_pool(const Node& n, const std::string& y);

  // ---- quantization and the ops on codes (export_quantization.cpp) ----------
  void fake_quantize(const Node& n, const std::string& y);
  void dynamic_quantize(const Node& n, const std::string& y);
  std::string zero_point_scalar(graph::ValueId v, const std::string& base);
  void lookup(const Node& n, const std::string& y);
  void convert(const Node& n);
  void quantize_linear(const graph::QuantizeAttrs& a, const std::string& xin,
                       const std::string& base, const std::string& out);
  void quantize_as(const graph::ConvertAttrs& a, ElementType to, const std::string& xin,
                   const std::string& base, const std::string& out);
  void gate_multiply(const Node& n, const std::string& y);
  void dequantize(const Node& n, const std::string& y);
  void mean_inner_product(const Node& n, const std::string& y);
  void quantize(const std::string& base, const std::string& x, int zt, const std::string& out);
  void avg_pool(const Node& n);

  // ---- fused int8 layers (export_layers.cpp) --------------------------------
  template <typename T>
  std::string channel_constant(const std::string& base, int type, const std::vector<T>& v,
                               std::size_t rank, bool spatial);
  std::string accumulator(const Node& n, int channels, bool& is_float,
                          std::vector<double>& abs_sum);
  std::string run_time_weights_accumulator(const Node& n, int channels,
                                           std::vector<double>& abs_sum);
  template <typename T>
  void check_accumulator_bound(const Node& n, const std::vector<double>& abs_sum,
                               const std::vector<T>& bias);
  void layer(const Node& n);
  void float_scale_layer(const Node& n);
  std::string eltwise(const Node& n, const std::string& b, const std::string& x,
                      composer::EltwiseAlg alg, float alpha, float beta);

  const graph::Graph& g_;
  const ExportSource& source_;
  Writer w_;
  ::onnx::GraphProto& proto_;
  ExportReport report_;
  std::set<std::uint32_t> written_constants_;
  // By ValueId: the rank-0 ONNX tensor DynamicQuantizeLinear wrote for a
  // qfuse scale or zero point of shape [1].
  std::map<std::uint32_t, std::string> scalars_;
  std::vector<std::string> names_;  // by ValueId: the ONNX tensor name
};

}  // namespace qfuse::onnx::export_impl
