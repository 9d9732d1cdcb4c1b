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

const Node* producer_of(const Graph& g, ValueId v, OpKind kind) {
  const NodeId p = g.value(v).producer;
  if (!p.valid()) return nullptr;
  const Node& n = g.node(p);
  return (!n.erased && n.kind == kind) ? &n : nullptr;
}

std::optional<std::vector<float>> constant_f32(const Graph& g, ValueId v) {
  const Value& value = g.value(v);
  if (!value.is_constant() || value.type != ElementType::f32) return std::nullopt;
  const auto data = value.constant->data<float>();
  return std::vector<float>(data.begin(), data.end());
}

std::optional<float> scalar_constant(const Graph& g, ValueId v) {
  const auto values = constant_f32(g, v);
  if (!values || values->size() != 1) return std::nullopt;
  return (*values)[0];
}

std::optional<std::vector<float>> channel_vector(const Graph& g, ValueId v, const Shape& shape,
                                                 std::size_t axis) {
  auto values = constant_f32(g, v);
  if (!values) return std::nullopt;
  const Shape& cs = g.value(v).shape;
  if (cs.size() > shape.size() || axis >= shape.size()) return std::nullopt;
  const std::size_t offset = shape.size() - cs.size();
  std::int64_t along = 1;
  for (std::size_t i = 0; i < cs.size(); ++i) {
    const std::size_t d = i + offset;
    if (d == axis) {
      if (cs[i] != 1 && cs[i] != shape[d]) return std::nullopt;
      along = cs[i];
    } else if (cs[i] != 1) {
      return std::nullopt;
    }
  }
  if (along == 1) values->resize(1);
  return values;
}

std::vector<float> expand(const std::vector<float>& values, std::size_t n) {
  if (values.size() == n) return values;
  return std::vector<float>(n, values.at(0));
}

bool all_equal(const std::vector<float>& values) {
  return std::all_of(values.begin(), values.end(), [&](float v) { return v == values[0]; });
}

bool is_near_integer(double x, double tolerance) { return std::abs(x - std::round(x)) <= tolerance; }

ValueId add_channel_constant(Graph& g, const std::string& name, const std::vector<float>& values,
                             std::size_t rank, std::size_t axis) {
  Shape shape{1};
  if (values.size() > 1) {
    shape.assign(rank, 1);
    shape[axis] = static_cast<std::int64_t>(values.size());
  }
  return g.add_constant(name, Tensor::from_vector<float>(shape, values));
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
  switch (layer.kind) {
    case OpKind::Convolution:
    case OpKind::FullyConnected: return 0;
    case OpKind::Deconvolution: return layer.attr<DeconvAttrs>().groups == 1 ? 1 : -1;
    case OpKind::MatMul: return layer.attr<MatMulAttrs>().transpose_b ? 0 : 1;
    default: return -1;
  }
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

std::optional<std::vector<float>> output_quantum(const Graph& g, const Node& fq,
                                                 const Shape& shape, std::size_t axis,
                                                 std::vector<float>* output_low) {
  auto ol = channel_vector(g, fq.inputs[3], shape, axis);
  auto oh = channel_vector(g, fq.inputs[4], shape, axis);
  if (!ol || !oh) return std::nullopt;
  const std::size_t n = std::max(ol->size(), oh->size());
  const auto lo = expand(*ol, n), hi = expand(*oh, n);
  const double steps = static_cast<double>(fq.attr<FakeQuantizeAttrs>().levels - 1);
  std::vector<float> q(n);
  for (std::size_t c = 0; c < n; ++c) q[c] = static_cast<float>((static_cast<double>(hi[c]) - lo[c]) / steps);
  if (output_low != nullptr) *output_low = lo;
  return q;
}

bool has_linear_grid(const Node& fq) {
  return fq.kind == OpKind::FakeQuantize && fq.inputs.size() == kFakeQuantizeLinearInputs;
}

std::optional<LinearGrid> linear_grid(const Graph& g, const Node& fq, const Shape& shape,
                                      std::size_t axis) {
  if (!has_linear_grid(fq)) return std::nullopt;
  auto scale = channel_vector(g, fq.inputs[5], shape, axis);
  auto zero = channel_vector(g, fq.inputs[6], shape, axis);
  if (!scale || !zero) return std::nullopt;
  LinearGrid grid;
  grid.scale = std::move(*scale);
  for (float z : *zero) grid.zero_point.push_back(static_cast<std::int32_t>(z));
  const auto& a = fq.attr<FakeQuantizeAttrs>();
  grid.code_low = a.code_low;
  grid.code_high = a.code_low + static_cast<std::int32_t>(a.levels) - 1;
  grid.dequantizes_to_grid = output_ranges_are_input_ranges(g, fq);
  return grid;
}

bool output_ranges_are_input_ranges(const Graph& g, const Node& fq) {
  const auto same = [&](ValueId a, ValueId b) {
    if (a == b) return true;
    const Value& va = g.value(a);
    const Value& vb = g.value(b);
    if (!va.is_constant() || !vb.is_constant() || va.shape != vb.shape || va.type != vb.type) {
      return false;
    }
    const auto da = va.constant->data<float>(), db = vb.constant->data<float>();
    return std::equal(da.begin(), da.end(), db.begin(), db.end());
  };
  return same(fq.inputs[3], fq.inputs[1]) && same(fq.inputs[4], fq.inputs[2]);
}

bool has_per_tensor_ranges(const Graph& g, const Node& fq) {
  for (std::size_t i = 1; i < kFakeQuantizeRangeInputs; ++i) {
    if (element_count(g.value(fq.inputs[i]).shape) != 1) return false;
  }
  return true;
}

void drop_linear_grid(Graph& g, NodeId fq) {
  if (has_linear_grid(g.node(fq))) g.truncate_inputs(fq, kFakeQuantizeRangeInputs);
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
  std::vector<double> sums(n, 0.0);
  for (std::int64_t i = 0; i < rows; ++i) {
    for (std::int64_t j = 0; j < cols; ++j) {
      const auto c = static_cast<std::size_t>(rows_are_channels ? i : j);
      sums[c] += data[static_cast<std::size_t>(i * cols + j)];
    }
  }
  return sums;
}

bool pools_globally(const Graph& g, const Node& pool) {
  const auto& a = pool.attr<PoolAttrs>();
  const Shape& x = g.value(pool.inputs[0]).shape;
  if (a.kernel.size() + 2 != x.size()) return false;
  for (std::size_t i = 0; i < a.kernel.size(); ++i) {
    if (a.kernel[i] != x[i + 2] || a.pads_begin[i] != 0 || a.pads_end[i] != 0) return false;
  }
  return true;
}

}  // namespace qfuse::graph::pattern
