// The Writer's names, nodes and attributes (export_writer.hpp).

#include "graph/onnx/export_writer.hpp"

namespace qfuse::onnx::export_impl {

std::string Writer::fresh(const std::string& base) {
  std::string n = base;
  while (!used_.insert(n).second) n = base + "_" + std::to_string(++counter_);
  return n;
}

std::string Writer::scalar(const std::string& base, double v) {
  return constant(base, kFloat, std::vector<double>{v}, {});
}

std::string Writer::ints64(const std::string& base, const std::vector<std::int64_t>& v) {
  return constant(base, kInt64, v, Shape{static_cast<std::int64_t>(v.size())});
}

::onnx::NodeProto& Writer::node(const std::string& op, const std::string& name,
                                const std::vector<std::string>& inputs,
                                const std::string& output) {
  ::onnx::NodeProto* n = g_.add_node();
  n->set_op_type(op);
  n->set_name(fresh(name));
  for (const std::string& i : inputs) n->add_input(i);
  n->add_output(output);
  producer_[output] = g_.node_size() - 1;
  return *n;
}

std::string Writer::op(const std::string& op, const std::string& base,
                       const std::vector<std::string>& inputs) {
  const std::string out = fresh(base);
  node(op, base, inputs, out);
  return out;
}

::onnx::NodeProto* Writer::producer(const std::string& output) {
  const auto it = producer_.find(output);
  return it == producer_.end() ? nullptr : g_.mutable_node(it->second);
}

void Writer::finish(const std::string& t, const std::string& out, const std::string& base) {
  if (const auto it = producer_.find(t); it != producer_.end() && t != out) {
    const int index = it->second;
    g_.mutable_node(index)->set_output(0, out);
    producer_.erase(it);
    producer_[out] = index;
    return;
  }
  if (t != out) node("Identity", base, {t}, out);
}

void Writer::ints(::onnx::NodeProto& n, const std::string& name, const graph::Ints& v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::INTS);
  for (const std::int64_t x : v) a->add_ints(x);
}

void Writer::int_attr(::onnx::NodeProto& n, const std::string& name, std::int64_t v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::INT);
  a->set_i(v);
}

void Writer::float_attr(::onnx::NodeProto& n, const std::string& name, float v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::FLOAT);
  a->set_f(v);
}

void Writer::string_attr(::onnx::NodeProto& n, const std::string& name, const std::string& v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::STRING);
  a->set_s(v);
}

}  // namespace qfuse::onnx::export_impl
