#pragma once
// Internal to the ONNX exporter: the Writer that assembles a GraphProto,
// with names made unique, initializers, nodes and their attributes.

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "graph/onnx/proto_utils.hpp"
#include "graph/ops.hpp"

namespace qfuse::onnx::export_impl {

using detail::kFloat;
using detail::kInt64;

class Writer {
 public:
  explicit Writer(::onnx::GraphProto& g) : g_(g) {}

  std::string fresh(const std::string& base);

  // An initializer named `base` (made unique); `shape` empty: a scalar.
  template <typename T>
  std::string constant(const std::string& base, int type, const std::vector<T>& values,
                       const Shape& shape) {
    return named_constant(fresh(base), type, values, shape);
  }
  // An initializer with exactly this name (one fresh() gave).
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
  std::string scalar(const std::string& base, double v);
  std::string ints64(const std::string& base, const std::vector<std::int64_t>& v);

  ::onnx::NodeProto& node(const std::string& op, const std::string& name,
                          const std::vector<std::string>& inputs, const std::string& output);
  // A node whose output gets a fresh name; returns it.
  std::string op(const std::string& op, const std::string& base,
                 const std::vector<std::string>& inputs);
  // The node that writes `output` (written by this writer), else null.
  ::onnx::NodeProto* producer(const std::string& output);
  // Makes the node writing `t` (a fresh name of this writer) write `out`
  // instead; an Identity where nothing here wrote `t`.
  void finish(const std::string& t, const std::string& out, const std::string& base);

  static void ints(::onnx::NodeProto& n, const std::string& name, const graph::Ints& v);
  static void int_attr(::onnx::NodeProto& n, const std::string& name, std::int64_t v);
  static void float_attr(::onnx::NodeProto& n, const std::string& name, float v);
  static void string_attr(::onnx::NodeProto& n, const std::string& name, const std::string& v);

 private:
  ::onnx::GraphProto& g_;
  std::set<std::string> used_;
  std::map<std::string, int> producer_;
  int counter_ = 0;
};

}  // namespace qfuse::onnx::export_impl
