#pragma once
// Small ONNX models built in memory with the protobuf API, for the frontend's
// tests: a ModelProto under construction, attribute setters, seeded inputs,
// and running an imported graph fused or unfused.

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "graph/graph.hpp"
#include "graph/onnx/importer.hpp"
#include "plugin/api_internal.hpp"

namespace qfuse::onnx::test {

using Dims = std::vector<std::int64_t>;
constexpr int kFloat = 1, kUint8 = 2, kInt8 = 3, kInt32 = 6, kInt64 = 7;

// A ModelProto under construction.
class Model {
 public:
  explicit Model(int opset = 13) {
    m_.set_ir_version(8);
    m_.add_opset_import()->set_version(opset);
    g_ = m_.mutable_graph();
    g_->set_name("test");
  }
  // Negative dims become symbolic: -1 -> "N", -2 -> "H", -3 -> "W".
  // An operator set of another domain (org.openvinotoolkit, com.microsoft).
  void opset_import(const std::string& domain, int version) {
    auto* o = m_.add_opset_import();
    o->set_domain(domain);
    o->set_version(version);
  }
  void input(const std::string& name, int type, const Dims& dims) {
    add_value(g_->add_input(), name, type, dims);
  }
  void output(const std::string& name, int type) {
    auto* v = g_->add_output();
    v->set_name(name);
    v->mutable_type()->mutable_tensor_type()->set_elem_type(type);
  }
  template <class T>
  void initializer(const std::string& name, int type, const Dims& dims, const std::vector<T>& v) {
    auto* t = g_->add_initializer();
    t->set_name(name);
    t->set_data_type(type);
    for (auto d : dims) t->add_dims(d);
    t->set_raw_data(std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T)));
  }
  ::onnx::NodeProto& node(const std::string& op, const std::vector<std::string>& in,
                          const std::vector<std::string>& out, const std::string& name = "") {
    auto* n = g_->add_node();
    n->set_op_type(op);
    n->set_name(name.empty() ? op + "_" + std::to_string(g_->node_size()) : name);
    for (const auto& s : in) n->add_input(s);
    for (const auto& s : out) n->add_output(s);
    return *n;
  }
  std::string bytes() const { return m_.SerializeAsString(); }
  ::onnx::GraphProto& graph() { return *g_; }

 private:
  static void add_value(::onnx::ValueInfoProto* v, const std::string& name, int type,
                        const Dims& dims) {
    v->set_name(name);
    auto* tt = v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(type);
    auto* shape = tt->mutable_shape();
    for (auto d : dims) {
      auto* dim = shape->add_dim();
      if (d > 0) {
        dim->set_dim_value(d);
      } else {
        dim->set_dim_param(d == -1 ? "N" : d == -2 ? "H" : "W");
      }
    }
  }

  ::onnx::ModelProto m_;
  ::onnx::GraphProto* g_;
};

inline void attr(::onnx::NodeProto& n, const std::string& name, std::int64_t v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto_AttributeType_INT);
  a->set_i(v);
}
inline void attr(::onnx::NodeProto& n, const std::string& name, const std::string& v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::STRING);
  a->set_s(v);
}
inline void attr(::onnx::NodeProto& n, const std::string& name, float v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto_AttributeType_FLOAT);
  a->set_f(v);
}
inline void attr(::onnx::NodeProto& n, const std::string& name, const Dims& v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto_AttributeType_INTS);
  for (auto x : v) a->add_ints(x);
}

inline std::vector<float> random_floats(std::size_t n, float lo, float hi, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// The graph compiled fused or unfused, run once on one input; one output.
inline Tensor run(const graph::Graph& g, bool fuse, const std::string& in_name, const Tensor& x,
                  const std::string& out_name, std::vector<LayerInfo>* layers = nullptr) {
  const CompiledModel model = compile(g, {.fuse = fuse});
  if (layers) *layers = model.layers();
  InferRequest r = model.create_infer_request();
  r.set_input(in_name, x);
  r.infer();
  return r.output(out_name);
}

inline std::size_t count_nodes(const graph::Graph& g, graph::OpKind kind) {
  std::size_t n = 0;
  for (graph::NodeId id : g.topological_order()) n += g.node(id).kind == kind;
  return n;
}

// The message of the error of type E that importing `m` throws, or `none`
// when it imports (or throws another type, which propagates).
template <class E = Error>
std::string import_error(const Model& m, const std::string& none = "(imported)") {
  try {
    (void)import_bytes(m.bytes());
  } catch (const E& e) {
    return e.what();
  }
  return none;
}

}  // namespace qfuse::onnx::test
