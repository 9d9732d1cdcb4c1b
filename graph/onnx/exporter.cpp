// Export of a fused graph as ONNX (exporter.hpp): the driver, which names the
// tensors and writes the graph's inputs and outputs and each node in
// topological order (the operators themselves: export_ops.cpp,
// export_quantization.cpp, export_layers.cpp), and the public functions,
// which wrap the graph in a checked model.

#include "graph/onnx/exporter.hpp"

#include <onnx/checker.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <numeric>
#include <set>
#include <utility>

#include "graph/onnx/export_internal.hpp"
#include "qfuse/error.hpp"

namespace qfuse::onnx {
namespace {

// 14: HardSwish. Between 13 and 14 no operator written here changed meaning
// (Add / Sub / Mul / Div, Relu, Reshape and BatchNormalization only gained
// types or training-mode attributes). Every file gets this one opset: LayerNorm
// (LayerNormalization is opset 17) and Gelu (opset 20) are written spelled out
// as opset-13 exporters write them, and qfuse reads each back as one op.
constexpr int kOpset = 14;

}  // namespace

namespace export_impl {

ExportReport Exporter::run() {
  // ONNX names each tensor once; the IR may give two values one name
  // (a node named like a constant): the second gets a fresh one. Graph
  // inputs and outputs keep theirs.
  names_.resize(g_.value_count());
  std::vector<graph::ValueId> order(g_.inputs().begin(), g_.inputs().end());
  order.insert(order.end(), g_.outputs().begin(), g_.outputs().end());
  for (std::uint32_t i = 0; i < g_.value_count(); ++i) order.push_back(graph::ValueId{i});
  for (graph::ValueId v : order) {
    if (!names_[v.index].empty()) continue;
    names_[v.index] = w_.fresh(g_.value(v).name);
  }
  for (graph::ValueId v : g_.inputs()) add_value_info(*proto_.add_input(), v);
  // Values that still name a node as their producer without being its
  // output: what absorb_f32_post_ops leaves of a layer's former output.
  std::set<std::uint32_t> former_producers;
  for (std::uint32_t i = 0; i < g_.value_count(); ++i) {
    const graph::Value& v = g_.value(graph::ValueId{i});
    if (!v.producer.valid()) continue;
    const Node& p = g_.node(v.producer);
    if (std::find(p.outputs.begin(), p.outputs.end(), graph::ValueId{i}) == p.outputs.end()) {
      former_producers.insert(v.producer.index);
    }
  }
  // Constant weights' dequantizes, each one DequantizeLinear: the Multiply
  // writes it, the Convert and Subtract it spans are left out.
  std::map<std::uint32_t, std::vector<graph::NodeId>> weight_dequantizes;
  std::set<std::uint32_t> spanned;
  for (graph::NodeId id : g_.topological_order()) {
    if (source_.prequantized_only) break;
    auto nodes = weight_dequantize_nodes(g_.node(id));
    if (nodes.empty()) continue;
    for (graph::NodeId s : nodes) spanned.insert(s.index);
    weight_dequantizes[id.index] = std::move(nodes);
  }
  for (graph::NodeId id : g_.topological_order()) {
    const Node& n = g_.node(id);
    if (spanned.count(id.index) != 0) continue;
    if (const auto w = weight_dequantizes.find(id.index); w != weight_dequantizes.end()) {
      weight_dequantize(n, w->second);
      continue;
    }
    std::vector<const Node*> absorbed;
    if (source_.absorbed_post_ops) {
      absorbed = source_.absorbed_post_ops(n);
    } else if (former_producers.count(id.index) != 0 &&
               (n.kind == OpKind::Convolution || n.kind == OpKind::FullyConnected)) {
      refuse(n, "the layer absorbed elementwise ops as post-ops, and the caller did not say "
                "which (ExportSource::absorbed_post_ops)");
    }
    if (absorbed.empty()) {
      emit(n);
      continue;
    }
    // The layer writes its former output (which the first absorbed node
    // reads), then each absorbed node runs as the operator it was.
    const Node& first = *absorbed.front();
    std::optional<graph::ValueId> former;
    for (graph::ValueId v : first.inputs) {
      if (g_.value(v).producer == id && v != n.outputs[0]) former = v;
    }
    if (!former) {
      for (graph::ValueId v : first.inputs) {
        if (!g_.value(v).is_constant()) former = v;
      }
    }
    if (!former) {
      refuse(n, "cannot find the output of the layer its post-op '" + first.name + "' read");
    }
    ordinary(n, name(*former));
    for (const Node* a : absorbed) {
      ordinary(*a, name(a->outputs[0]));
      ++report_.absorbed_post_ops;
    }
  }
  for (graph::ValueId v : g_.outputs()) add_value_info(*proto_.add_output(), v);
  return report_;
}

void Exporter::refuse(const Node& n, const std::string& why) const {
  throw UnsupportedError("export-prequantized: " + std::string(graph::to_string(n.kind)) +
                         " node '" + n.name + "': " + why);
}

void Exporter::add_value_info(::onnx::ValueInfoProto& info, graph::ValueId id) {
  const graph::Value& v = g_.value(id);
  info.set_name(name(id));
  auto* t = info.mutable_type()->mutable_tensor_type();
  t->set_elem_type(onnx_type(v.type));
  for (const std::int64_t d : v.shape) t->mutable_shape()->add_dim()->set_dim_value(d);
}

// A node input: a constant becomes an initializer of its own name the
// first time it is read.
std::string Exporter::in(graph::ValueId id) {
  const graph::Value& v = g_.value(id);
  if (v.is_constant() && written_constants_.insert(id.index).second) {
    const Tensor& t = *v.constant;
    std::vector<double> values(static_cast<std::size_t>(t.size()));
    for (std::int64_t i = 0; i < t.size(); ++i) values[static_cast<std::size_t>(i)] = t.as_float(i);
    if (t.type() == ElementType::s32) {
      const auto d = t.data<std::int32_t>();  // as_float rounds past 2^24
      values.assign(d.begin(), d.end());
    }
    w_.named_constant(name(id), onnx_type(t.type()), values, v.shape);
  }
  return name(id);
}

// The input as f32: a Cast of an integer tensor.
std::string Exporter::in_f32(graph::ValueId id, const std::string& base) {
  const std::string x = in(id);
  if (g_.value(id).type == ElementType::f32) return x;
  return cast(x, kFloat, base + "/to_f32");
}

std::string Exporter::cast(const std::string& x, int to, const std::string& base) {
  const std::string t = w_.op("Cast", base, {x});
  Writer::int_attr(*w_.producer(t), "to", to);
  return t;
}

void Exporter::emit(const Node& n) {
  switch (n.kind) {
    case OpKind::Convert: return convert(n);
    case OpKind::Quantize:
      if (g_.value(n.inputs[0]).type != ElementType::f32) refuse(n, "quantizes a non-f32 tensor");
      if (g_.value(n.inputs[0]).is_constant()) return quantized_constant(n);
      return quantize_linear(n.attr<graph::QuantizeAttrs>(), in(n.inputs[0]), n.name,
                             name(n.outputs[0]));
    case OpKind::QuantizedConvolution:
    case OpKind::QuantizedDeconvolution:
    case OpKind::QuantizedFullyConnected:
    case OpKind::QuantizedMatMul: return layer(n);
    case OpKind::AvgPool:
      if (is_int8(g_.value(n.inputs[0]).type)) return int8_avg_pool(n);
      break;
    case OpKind::MaxPool: return max_pool(n, name(n.outputs[0]));
    case OpKind::Reshape:
    case OpKind::Flatten: {
      const Shape& s = g_.value(n.outputs[0]).shape;
      const std::string shape =
          w_.ints64(n.name + "/shape", std::vector<std::int64_t>(s.begin(), s.end()));
      w_.node("Reshape", n.name, {in(n.inputs[0]), shape}, name(n.outputs[0]));
      return;
    }
    case OpKind::Transpose: {
      // Transposed constant weights (MatMul's transpose_b as the readers write
      // it): the dequantize of the transposed codes.
      if (n.attr<graph::TransposeAttrs>().perm == graph::Ints{1, 0} &&
          !transposed_weight_dequantize(in(n.inputs[0]), n.name, name(n.outputs[0])).empty()) {
        return;
      }
      auto& t = w_.node("Transpose", n.name, {in(n.inputs[0])}, name(n.outputs[0]));
      Writer::ints(t, "perm", n.attr<graph::TransposeAttrs>().perm);
      return;
    }
    case OpKind::ShuffleChannels: {
      // As exporters write it: Reshape [N, g, C/g, ...], Transpose(0, 2, 1, ...),
      // Reshape back.
      const Shape& s = g_.value(n.inputs[0]).shape;
      const std::int64_t groups = n.attr<graph::ShuffleChannelsAttrs>().groups;
      std::vector<std::int64_t> split{s[0], groups, s[1] / groups};
      split.insert(split.end(), s.begin() + 2, s.end());
      std::vector<std::int64_t> perm(split.size());
      std::iota(perm.begin(), perm.end(), std::int64_t{0});
      std::swap(perm[1], perm[2]);
      const std::string parts = w_.fresh(n.name + "/split");
      w_.node("Reshape", n.name + "/split",
              {in(n.inputs[0]), w_.ints64(n.name + "/split_shape", split)}, parts);
      const std::string swapped = w_.fresh(n.name + "/transpose");
      auto& t = w_.node("Transpose", n.name + "/transpose", {parts}, swapped);
      Writer::ints(t, "perm", perm);
      w_.node(
          "Reshape", n.name,
          {swapped, w_.ints64(n.name + "/shape", std::vector<std::int64_t>(s.begin(), s.end()))},
          name(n.outputs[0]));
      return;
    }
    case OpKind::Concat: {
      std::vector<std::string> inputs;
      for (graph::ValueId v : n.inputs) inputs.push_back(in(v));
      auto& c = w_.node("Concat", n.name, inputs, name(n.outputs[0]));
      Writer::int_attr(c, "axis", n.attr<graph::ConcatAttrs>().axis);
      return;
    }
    default: break;
  }
  ordinary(n, name(n.outputs[0]));
}

}  // namespace export_impl

ExportReport export_prequantized(const graph::Graph& fused, const ExportSource& source,
                                 const std::string& path) {
  ::onnx::ModelProto model;
  model.set_ir_version(7);
  model.set_producer_name("qfuse export-prequantized");
  auto* opset = model.add_opset_import();
  opset->set_domain("");
  opset->set_version(kOpset);
  ::onnx::GraphProto* g = model.mutable_graph();
  g->set_name("prequantized");
  const ExportReport report = export_impl::Exporter(fused, source, *g).run();
  try {
    ::onnx::checker::check_model(model);
  } catch (const std::exception& e) {
    throw GraphError(std::string("export-prequantized: the written model fails onnx::checker: ") +
                     e.what());
  }
  std::ofstream out(path, std::ios::binary);
  if (!out || !model.SerializeToOstream(&out)) {
    throw IoError("export-prequantized: cannot write " + path);
  }
  return report;
}

ExportReport export_prequantized(
    const graph::Graph& fused,
    const std::function<const composer::IntegerPlan*(const graph::Node&)>& plan_of,
    const std::string& path) {
  ExportSource source;
  source.integer_plan = plan_of;
  source.prequantized_only = true;
  return export_prequantized(fused, source, path);
}

}  // namespace qfuse::onnx
