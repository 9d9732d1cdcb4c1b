#include "plugin/f32_post_ops.hpp"

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <variant>

#include <oneapi/dnnl/dnnl_debug.h>

#include "graph/op_info.hpp"
#include "plugin/api_internal.hpp"
#include "plugin/dnnl_utils.hpp"
#include "plugin/post_ops_attr.hpp"

namespace qfuse::plugin {

using dnnl::algorithm;
using graph::NodeId;
using graph::OpKind;
using graph::ValueId;

namespace {

F32PostOp eltwise(algorithm alg, float alpha = 0.0f, float beta = 0.0f) {
  return {false, alg, alpha, beta, {}};
}

// `c` as a binary post-op on `cur`: the other operand a constant with one
// value, or one per channel along `axis` of `shape`; with `runtime_operands`
// also a run-time f32 tensor of that form.
std::optional<F32PostOp> binary_step(const graph::Graph& g, const graph::Node& c, ValueId cur,
                                     const Shape& shape, std::size_t axis, bool runtime_operands) {
  if (!graph::is_elementwise_binary(c.kind) || c.inputs.size() != 2) return std::nullopt;
  if (c.inputs[0] == c.inputs[1]) return std::nullopt;
  const int which = c.inputs[0] == cur ? 0 : (c.inputs[1] == cur ? 1 : -1);
  if (which < 0) return std::nullopt;
  const ValueId other_id = c.inputs[static_cast<std::size_t>(1 - which)];
  const graph::Value& other = g.value(other_id);
  if (other.type != ElementType::f32 || (!other.is_constant() && !runtime_operands)) {
    return std::nullopt;
  }
  // oneDNN's binary post-op computes (running value) op (operand): the running
  // value may be either input of a commutative op, only the first of the others.
  const algorithm alg =
      which == 0 || graph::is_commutative(c.kind) ? binary_algorithm(c.kind) : algorithm::undef;
  if (alg == algorithm::undef || other.shape.size() > shape.size()) return std::nullopt;
  // Right-aligned, every dim 1 but the channel axis.
  const std::size_t lead = shape.size() - other.shape.size();
  for (std::size_t i = 0; i < other.shape.size(); ++i) {
    const std::int64_t d = other.shape[i];
    if (d != 1 && !(lead + i == axis && d == shape[axis])) return std::nullopt;
  }
  if (!other.is_constant()) {
    F32PostOp step{true, alg, 0.0f, 0.0f, {}};
    step.operand = other_id;
    step.per_channel = element_count(other.shape) != 1;
    return step;
  }
  const auto values = other.constant->data<float>();
  return F32PostOp{true, alg, 0.0f, 0.0f, std::vector<float>(values.begin(), values.end())};
}

}  // namespace

std::vector<F32PostOp> eltwise_steps(const graph::Node& n) {
  switch (n.kind) {
    // HSigmoid(x) = min(max(x + 3, 0), 6) / 6 = clip(x / 6 + 1/2, 0, 1):
    // oneDNN 2.6 has no hsigmoid eltwise.
    case OpKind::HSigmoid:
      return {eltwise(algorithm::eltwise_linear, 1.0f / 6.0f, 0.5f),
              eltwise(algorithm::eltwise_clip_v2, 0.0f, 1.0f)};
    // clip_v2 keeps x at the bounds (clip's backward differs, not its values).
    case OpKind::Clamp: {
      const auto& a = n.attr<graph::ClampAttrs>();
      return {eltwise(algorithm::eltwise_clip_v2, a.lo, a.hi)};
    }
    default: break;
  }
  const std::optional<composer::Eltwise> e = graph::eltwise_of(n);
  if (!e) return {};
  return {eltwise(to_dnnl(e->alg), e->alpha, e->beta)};
}

std::unordered_map<std::uint32_t, F32Chain> absorb_f32_post_ops(graph::Graph& g,
                                                                std::vector<std::string>& log) {
  std::unordered_map<std::uint32_t, F32Chain> chains;
  for (NodeId id : g.topological_order()) {
    const graph::Node& layer = g.node(id);
    const bool matmul = layer.kind == OpKind::MatMul;
    if (layer.erased ||
        (layer.kind != OpKind::Convolution && layer.kind != OpKind::FullyConnected && !matmul)) {
      continue;
    }
    const bool constant_weights = layer.inputs.size() >= 2 &&
                                  g.value(layer.inputs[1]).is_constant() &&
                                  (layer.inputs.size() < 3 || g.value(layer.inputs[2]).is_constant());
    const graph::Value& out = g.value(layer.outputs[0]);
    if ((!constant_weights && !matmul) || out.type != ElementType::f32 ||
        g.value(layer.inputs[0]).type != ElementType::f32 ||
        g.value(layer.inputs[1]).type != ElementType::f32 || out.shape.size() < 2) {
      continue;
    }
    // Run-time operands bind per run: only the op of a MatMul of two
    // run-time tensors does (the constant-weights ops hold theirs).
    const bool runtime_operands = matmul && !constant_weights;
    const Shape shape = out.shape;
    const std::size_t axis = *graph::output_channel_axis(layer.kind, shape.size());
    F32Chain chain;
    std::vector<NodeId> absorbed;
    ValueId cur = layer.outputs[0];
    while (!g.is_graph_output(cur)) {
      const std::vector<NodeId> readers = g.consumers(cur);
      if (readers.size() != 1) break;
      const graph::Node& c = g.node(readers[0]);
      if (c.outputs.size() != 1 || g.value(c.outputs[0]).shape != shape ||
          g.value(c.outputs[0]).type != ElementType::f32) {
        break;
      }
      std::vector<F32PostOp> steps = eltwise_steps(c);
      if (steps.empty()) {
        if (c.inputs.size() != 2) break;
        const std::optional<F32PostOp> b = binary_step(g, c, cur, shape, axis, runtime_operands);
        if (!b) break;
        steps.push_back(*b);
      }
      chain.steps.insert(chain.steps.end(), steps.begin(), steps.end());
      chain.absorbed.push_back(c.name);
      absorbed.push_back(readers[0]);
      cur = c.outputs[0];
    }
    if (absorbed.empty()) continue;
    for (NodeId a : absorbed) g.erase_node(a);
    chain.absorbed_nodes = absorbed;
    // The layer reads the run-time operands now: they are made before it
    // runs and live until it has.
    for (const F32PostOp& step : chain.steps) {
      if (step.operand.valid()) g.append_input(id, step.operand);
    }
    g.node(id).outputs[0] = cur;
    g.value(cur).producer = id;
    std::string names;
    for (const std::string& n : chain.absorbed) names += (names.empty() ? "" : ", ") + n;
    log.push_back("absorb_f32_post_ops: " + g.node(id).name + " absorbed " + names + " (" +
                  describe(chain) + ")");
    chains.emplace(id.index, std::move(chain));
  }
  return chains;
}

namespace {

// An int8 matmul of two run-time tensors (attention's): its chain writes
// nothing from another tensor, so the product may be written by strides.
bool writes_by_strides_alone(const graph::QuantizedLayerAttrs& a) {
  return std::none_of(a.chain.steps.begin(), a.chain.steps.end(), [](const composer::Step& s) {
    return std::holds_alternative<composer::Binary>(s) || std::holds_alternative<composer::Sum>(s);
  });
}

}  // namespace

std::vector<AbsorbedTranspose> absorb_matmul_transposes(
    graph::Graph& g, const std::unordered_map<std::uint32_t, F32Chain>& chains,
    const QuantizedCheck& accepts, std::vector<std::string>& log) {
  std::vector<AbsorbedTranspose> absorbed;
  const graph::Ints swap_middle{0, 2, 1, 3}, keys_last{0, 2, 3, 1};
  // The Transpose producing `v` when nothing else reads v, else null.
  const auto sole_transpose = [&g](ValueId v) -> std::optional<NodeId> {
    const graph::Value& val = g.value(v);
    if (!val.producer.valid() || g.is_graph_output(v) || g.consumers(v).size() != 1) {
      return std::nullopt;
    }
    if (g.node(val.producer).kind != OpKind::Transpose) return std::nullopt;
    return val.producer;
  };
  for (NodeId id : g.topological_order()) {
    const graph::Node& node = g.node(id);
    if (node.inputs.size() < 2) continue;
    // f32: MatMul; int8: QuantizedMatMul of two run-time tensors.
    const bool quantized = node.kind == OpKind::QuantizedMatMul;
    if (node.kind != OpKind::MatMul && !quantized) continue;
    if (quantized && g.value(node.inputs[1]).is_constant()) continue;
    graph::MatMulAttrs attrs =
        quantized ? std::get<graph::MatMulAttrs>(node.attr<graph::QuantizedLayerAttrs>().geometry)
                  : node.attr<graph::MatMulAttrs>();
    const ValueId out = node.outputs[0];
    if (attrs.transpose_a || attrs.transpose_b || !attrs.perm_a.empty() || !attrs.perm_b.empty() ||
        !attrs.perm_y.empty() || g.value(out).shape.size() != 4 ||
        (!quantized && g.value(out).type != ElementType::f32)) {
      continue;
    }
    const auto operand_type = [quantized](ElementType t) {
      return quantized ? t == ElementType::u8 || t == ElementType::s8 : t == ElementType::f32;
    };
    // What to take: the operands' Transposes (not where one value is read
    // as both), then the one after the product.
    std::optional<NodeId> before[2];
    for (std::size_t side = 0; side < 2 && node.inputs[0] != node.inputs[1]; ++side) {
      const ValueId v = node.inputs[side];
      const graph::Value& in = g.value(v);
      if (in.is_constant() || !operand_type(in.type) || in.shape.size() != 4) continue;
      const std::optional<NodeId> t = sole_transpose(v);
      if (!t) continue;
      const graph::Ints& perm = g.node(*t).attr<graph::TransposeAttrs>().perm;
      if (perm != swap_middle && !(side == 1 && perm == keys_last)) continue;
      before[side] = t;
      (side == 0 ? attrs.perm_a : attrs.perm_b) = perm;
    }
    // The Transpose after it, unless post-ops from other tensors follow the
    // product (f32: a chain in `chains`; int8: a binary or sum step).
    const bool strided_output = quantized
                                    ? writes_by_strides_alone(node.attr<graph::QuantizedLayerAttrs>())
                                    : chains.count(id.index) == 0;
    const std::vector<NodeId> readers = g.consumers(out);
    std::optional<NodeId> after;
    if (strided_output && !g.is_graph_output(out) && readers.size() == 1 &&
        g.node(readers[0]).kind == OpKind::Transpose &&
        g.node(readers[0]).attr<graph::TransposeAttrs>().perm == swap_middle) {
      after = readers[0];
      attrs.perm_y = swap_middle;
    }
    if (!before[0] && !before[1] && !after) continue;
    graph::Node taken = node;
    for (std::size_t side = 0; side < 2; ++side) {
      if (before[side]) taken.inputs[side] = g.node(*before[side]).inputs[0];
    }
    if (after) taken.outputs[0] = g.node(*after).outputs[0];
    if (quantized) {
      graph::QuantizedLayerAttrs qa = node.attr<graph::QuantizedLayerAttrs>();
      qa.geometry = attrs;
      taken.attrs = std::move(qa);
      // oneDNN must run the layer by strides with a kernel of its own.
      if (const auto why = accepts(g, taken)) {
        log.push_back("absorb_matmul_transposes: " + node.name + " keeps its Transposes: " + *why);
        continue;
      }
    } else {
      taken.attrs = attrs;
    }
    std::string names;
    for (std::size_t side = 0; side < 2; ++side) {
      if (!before[side]) continue;
      const graph::Node& t = g.node(*before[side]);
      names += std::string(names.empty() ? "" : ", ") + t.name + (side == 0 ? " (a)" : " (b)");
      absorbed.push_back({g.value(t.inputs[0]).name, g.value(t.outputs[0]).name,
                          t.attr<graph::TransposeAttrs>().perm});
      g.set_input(id, side, t.inputs[0]);
      g.erase_node(*before[side]);
    }
    if (after) {
      names += std::string(names.empty() ? "" : ", ") + g.node(*after).name + " (y)";
      const ValueId y = g.node(*after).outputs[0];
      g.erase_node(*after);
      g.node(id).outputs[0] = y;
      g.value(y).producer = id;
    }
    g.node(id).attrs = std::move(taken.attrs);
    log.push_back("absorb_matmul_transposes: " + g.node(id).name + " reads and writes by strides " +
                  names);
  }
  return absorbed;
}

std::string describe(const F32Chain& chain) {
  std::string s;
  for (const F32PostOp& step : chain.steps) {
    if (!s.empty()) s += "; ";
    std::string name = dnnl_alg_kind2str(static_cast<dnnl_alg_kind_t>(step.alg));
    s += name;
    if (step.binary) {
      const bool per_channel = step.operand.valid() ? step.per_channel : step.values.size() != 1;
      s += std::string(step.operand.valid() ? "(run time, " : "(") +
           (per_channel ? "per_channel)" : "scalar)");
    }
  }
  return s;
}

}  // namespace qfuse::plugin
