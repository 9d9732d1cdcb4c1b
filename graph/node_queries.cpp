#include "graph/node_queries.hpp"

#include <algorithm>
#include <cmath>

namespace qfuse::graph {

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

bool is_near_integer(double x, double tolerance) { return std::abs(x - std::round(x)) <= tolerance; }

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

bool pools_globally(const Graph& g, const Node& pool) {
  const auto& a = pool.attr<PoolAttrs>();
  const Shape& x = g.value(pool.inputs[0]).shape;
  if (a.kernel.size() + 2 != x.size()) return false;
  for (std::size_t i = 0; i < a.kernel.size(); ++i) {
    if (a.kernel[i] != x[i + 2] || a.pads_begin[i] != 0 || a.pads_end[i] != 0) return false;
  }
  return true;
}

}  // namespace qfuse::graph
