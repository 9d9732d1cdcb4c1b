#include "graph/passes/pattern.hpp"

#include <algorithm>
#include <cmath>

#include "graph/op_info.hpp"

namespace qfuse::graph::pattern {

std::optional<NodeId> sole_consumer(const Graph& g, ValueId v) {
  if (g.is_graph_output(v)) return std::nullopt;
  const auto users = g.consumers(v);
  if (users.size() != 1) return std::nullopt;
  // A node reading the value twice is not a chain.
  const Node& n = g.node(users[0]);
  if (std::count(n.inputs.begin(), n.inputs.end(), v) != 1) return std::nullopt;
  return users[0];
}

std::optional<float> scalar_constant(const Graph& g, ValueId v) {
  const auto values = constant_f32(g, v);
  if (!values || values->size() != 1) return std::nullopt;
  return (*values)[0];
}

bool all_equal(const std::vector<float>& values) {
  return std::all_of(values.begin(), values.end(), [&](float v) { return v == values[0]; });
}


ValueId add_channel_constant(Graph& g, const std::string& name, const std::vector<float>& values,
                             std::size_t rank, std::size_t axis) {
  Shape shape{1};
  if (values.size() > 1) {
    shape.assign(rank, 1);
    shape[axis] = static_cast<std::int64_t>(values.size());
  }
  return g.add_constant(name, Tensor::from_vector<float>(shape, values));
}

std::optional<NodeId> per_tensor_quantizer_of(const Graph& g, ValueId v, PassContext& ctx,
                                              std::string_view pass, bool by_ranges) {
  for (NodeId id : g.consumers(v)) {
    const Node& q = g.node(id);
    if (q.kind == OpKind::DynamicQuantize) return id;
    if (by_ranges && q.kind == OpKind::Convert && q.attr<ConvertAttrs>().quantizes()) return id;
    if (q.kind != OpKind::Quantize) continue;
    if (!q.attr<QuantizeAttrs>().per_tensor()) {
      ctx.reject(pass, q.name, "it quantizes per channel");
      continue;
    }
    return id;
  }
  return std::nullopt;
}

void merge_with_quantizer(Graph& g, NodeId producer, NodeId q, OpKind kind, Attributes attrs) {
  // Copied before add_node(): adding a node may move the nodes read here.
  const std::string name = g.node(producer).name;
  const std::vector<ValueId> inputs = g.node(producer).inputs;
  std::vector<ValueId> old = {g.node(producer).outputs[0]};
  const std::vector<ValueId>& q_outputs = g.node(q).outputs;
  old.insert(old.end(), q_outputs.begin(), q_outputs.end());
  const NodeId fused = g.add_node(kind, name, inputs, std::move(attrs), old.size());
  infer_node(g, fused);
  const std::vector<ValueId> outputs = g.node(fused).outputs;
  for (std::size_t i = 0; i < old.size(); ++i) replace_value(g, old[i], outputs[i]);
  g.erase_node(q);
  g.erase_node(producer);
}

ValueId emit(Graph& g, OpKind kind, const std::string& name, std::vector<ValueId> inputs,
             Attributes attrs) {
  const NodeId id = g.add_node(kind, name, std::move(inputs), std::move(attrs));
  infer_node(g, id);
  return g.node(id).outputs[0];
}

void replace_value(Graph& g, ValueId from, ValueId to) {
  g.replace_all_uses(from, to);
  std::string name = g.value(from).name;
  g.value(from).name = name + "~replaced";
  g.value(to).name = std::move(name);
}

int weights_channel_axis(const Node& layer) {
  if (!is_layer(layer.kind)) return -1;
  switch (layer_info(layer.kind)->weights) {
    case WeightsAxis::first: return 0;
    case WeightsAxis::deconvolution: return layer.attr<DeconvAttrs>().groups == 1 ? 1 : -1;
    case WeightsAxis::matmul: return layer.attr<MatMulAttrs>().transpose_b ? 0 : 1;
  }
  return -1;
}

bool moves_data(const Node& n) {
  if (!op_info(n.kind).moves_values) return false;
  return n.kind != OpKind::Resize || n.attr<ResizeAttrs>().mode == ResizeMode::nearest;
}

bool is_scalar_affine(const Graph& g, const Node& n) {
  if (n.kind != OpKind::Multiply && n.kind != OpKind::Subtract && n.kind != OpKind::Add) {
    return false;
  }
  const Value& c = g.value(n.inputs[1]);
  return c.is_constant() && c.type == ElementType::f32 && element_count(c.shape) == 1 &&
         c.shape.size() <= 1 && !g.value(n.inputs[0]).is_constant();
}

std::optional<Dequantized> dequantized(const Graph& g, ValueId v, std::size_t axis) {
  const Node* dq = producer_of(g, v, OpKind::Dequantize);
  if (dq == nullptr) return std::nullopt;
  const auto& a = dq->attr<DequantizeAttrs>();
  if (!a.per_tensor() && static_cast<std::size_t>(a.axis) != axis) return std::nullopt;
  return Dequantized{g.value(v).producer, dq->inputs[0], a.scale, a.zero_point};
}

std::optional<Dequantized> dequantized(const Graph& g, ValueId v) {
  auto d = dequantized(g, v, 0);
  if (d && !d->per_tensor()) return std::nullopt;
  return d;
}

bool undoes(const DequantizeAttrs& d, const QuantizeAttrs& q) {
  if (d.scale != q.scale || d.zero_point.size() != q.zero_point.size()) return false;
  if (!q.per_tensor() && d.axis != q.axis) return false;
  for (std::size_t k = 0; k < q.zero_point.size(); ++k) {
    if (d.zero_point[k] != static_cast<float>(q.zero_point[k])) return false;
  }
  return true;
}

const Node* dequantize_of_quantize(const Graph& g, const Node& q) {
  if (q.kind != OpKind::Quantize) return nullptr;
  const auto reader = sole_consumer(g, q.outputs[0]);
  if (!reader || g.is_graph_output(q.outputs[0])) return nullptr;
  const Node& dq = g.node(*reader);
  if (dq.kind != OpKind::Dequantize ||
      !undoes(dq.attr<DequantizeAttrs>(), q.attr<QuantizeAttrs>())) {
    return nullptr;
  }
  return &dq;
}

std::vector<double> weight_sums(const Graph& g, ValueId wq, const Node& layer, std::size_t n) {
  const Tensor& w = *g.value(wq).constant;
  const auto data = w.data<std::int8_t>();
  const Shape& s = w.shape();
  const bool rows_are_channels = layer.kind == OpKind::Convolution ||
                                 layer.kind == OpKind::FullyConnected ||
                                 layer.attr<MatMulAttrs>().transpose_b;
  const std::int64_t rows = s[0];
  const std::int64_t cols = element_count(s) / rows;
  // Exact in integers, in memory order (the compiler vectorizes both forms).
  std::vector<std::int64_t> sums(n, 0);
  for (std::int64_t i = 0; i < rows; ++i) {
    const std::int8_t* row = data.data() + i * cols;
    if (rows_are_channels) {
      std::int64_t sum = 0;
      for (std::int64_t j = 0; j < cols; ++j) sum += row[j];
      sums[static_cast<std::size_t>(i)] += sum;
    } else {
      for (std::int64_t j = 0; j < cols; ++j) sums[static_cast<std::size_t>(j)] += row[j];
    }
  }
  return std::vector<double>(sums.begin(), sums.end());
}

}  // namespace qfuse::graph::pattern
