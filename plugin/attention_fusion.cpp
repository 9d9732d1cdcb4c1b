#include "plugin/attention_fusion.hpp"

#include <optional>
#include <string>
#include <utility>

#include "composer/composer.hpp"
#include "plugin/executable_ops/ops.hpp"

namespace qfuse::plugin {
namespace {

using graph::NodeId;
using graph::OpKind;
using graph::ValueId;

// The only reader of `v` (not a graph output), reading it as input 0.
std::optional<NodeId> sole_reader(const graph::Graph& g, ValueId v) {
  if (g.is_graph_output(v)) return std::nullopt;
  const std::vector<NodeId> readers = g.consumers(v);
  if (readers.size() != 1 || g.node(readers[0]).inputs.empty() ||
      g.node(readers[0]).inputs[0] != v) {
    return std::nullopt;
  }
  return readers[0];
}

const graph::MatMulAttrs* matmul_geometry(const graph::Node& n) {
  if (n.kind == OpKind::MatMul) return &n.attr<graph::MatMulAttrs>();
  return std::get_if<graph::MatMulAttrs>(&n.attr<graph::QuantizedLayerAttrs>().geometry);
}

bool plain_geometry(const graph::MatMulAttrs& m, bool reads_by_perm_a, bool writes_by_perm_y) {
  return !m.transpose_a && !m.transpose_b && (reads_by_perm_a || m.perm_a.empty()) &&
         (writes_by_perm_y || m.perm_y.empty());
}

// An int8 matmul of two run-time operands whose composed plan is a
// per-tensor scale, then at most a linear post-op (`linear_ok`) and a zero
// point; nullopt, or why not.
std::optional<std::string> int8_matmul_refusal(const graph::Graph& g, const graph::Node& n,
                                               bool linear_ok) {
  const auto& a = n.attr<graph::QuantizedLayerAttrs>();
  if (n.inputs.size() != 2 || a.dynamic || a.has_bias || g.value(n.inputs[1]).is_constant()) {
    return n.name + " is not a product of two run-time tensors alone";
  }
  const composer::ComposeResult c = composer::compose(a.chain);
  if (!c.fused()) return n.name + "'s post-ops do not compose";
  const composer::PostOpsPlan& p = *c.plan;
  if (p.output_scales.size() > 1) return n.name + " scales per channel";
  if (!linear_ok && (!p.post_ops.empty() || p.dst_zero_point)) return n.name + " has post-ops";
  if (p.post_ops.size() > 1) return n.name + " has more than one post-op";
  for (const composer::PostOp& op : p.post_ops) {
    const auto* e = std::get_if<composer::EltwisePostOp>(&op);
    if (e == nullptr || e->alg != composer::EltwiseAlg::linear || e->scale != 1.0f) {
      return n.name + "'s post-op is not linear";
    }
  }
  return std::nullopt;
}

// The f32 scores' scalar step: x / divisor or x * factor (both 0: none);
// nullopt for any other chain.
struct ScoreStep {
  float divisor = 0.0f, factor = 0.0f;
};
std::optional<ScoreStep> score_step(const std::unordered_map<std::uint32_t, F32Chain>& chains,
                                    NodeId id) {
  const auto it = chains.find(id.index);
  if (it == chains.end()) return ScoreStep{};
  const std::vector<F32PostOp>& steps = it->second.steps;
  if (steps.size() != 1 || !steps[0].binary || steps[0].operand.valid() ||
      steps[0].values.size() != 1) {
    return std::nullopt;
  }
  if (steps[0].alg == dnnl::algorithm::binary_div && steps[0].values[0] != 0.0f) {
    return ScoreStep{steps[0].values[0], 0.0f};
  }
  if (steps[0].alg == dnnl::algorithm::binary_mul) return ScoreStep{0.0f, steps[0].values[0]};
  return std::nullopt;
}

}  // namespace

void fuse_attention(graph::Graph& g, std::unordered_map<std::uint32_t, F32Chain>& chains,
                    std::vector<std::string>& log) {
  for (NodeId id : g.topological_order()) {
    const graph::Node& scores = g.node(id);
    if (scores.erased ||
        (scores.kind != OpKind::MatMul && scores.kind != OpKind::QuantizedMatMul)) {
      continue;
    }
    const bool quantized = scores.kind == OpKind::QuantizedMatMul;
    const graph::MatMulAttrs* sg = matmul_geometry(scores);
    if (sg == nullptr || scores.inputs.size() != 2 || g.value(scores.inputs[1]).is_constant() ||
        g.value(scores.outputs[0]).type != ElementType::f32 ||
        g.value(scores.outputs[0]).shape.size() != 4 || !plain_geometry(*sg, true, false)) {
      continue;
    }
    const std::optional<NodeId> sm = sole_reader(g, scores.outputs[0]);
    if (!sm || g.node(*sm).kind != OpKind::Softmax) continue;
    const graph::Node& softmax = g.node(*sm);
    const auto& sa = softmax.attr<graph::SoftmaxAttrs>();
    if (sa.quantizes() != quantized || (sa.axis != -1 && sa.axis != 3)) continue;
    const std::optional<NodeId> mx = sole_reader(g, softmax.outputs[0]);
    if (!mx || g.node(*mx).kind != scores.kind) continue;
    const graph::Node& mix = g.node(*mx);
    const graph::MatMulAttrs* mg = matmul_geometry(mix);
    if (mg == nullptr || mix.inputs.size() != 2 || g.value(mix.inputs[1]).is_constant() ||
        !plain_geometry(*mg, false, true)) {
      continue;
    }
    graph::AttentionAttrs attrs;
    attrs.quantized = quantized;
    attrs.softmax = sa;
    std::optional<std::string> why;
    if (quantized) {
      why = int8_matmul_refusal(g, scores, false);
      if (!why) why = int8_matmul_refusal(g, mix, true);
      attrs.scores = scores.attr<graph::QuantizedLayerAttrs>();
      attrs.mix = mix.attr<graph::QuantizedLayerAttrs>();
    } else {
      const std::optional<ScoreStep> step = score_step(chains, id);
      if (!step) {
        why = scores.name + "'s post-ops are not one scalar divisor or factor";
      } else if (chains.count(mx->index) != 0) {
        why = mix.name + " has post-ops";
      }
      if (step) {
        attrs.divisor = step->divisor;
        attrs.factor = step->factor;
      }
      attrs.scores.geometry = *sg;
      attrs.mix.geometry = *mg;
    }
    const std::string names = scores.name + ", " + softmax.name + ", " + mix.name;
    if (why) {
      log.push_back("fuse_attention: " + names + " stay three ops: " + *why);
      continue;
    }
    // The candidate as the node it becomes, checked before the graph changes.
    graph::Node candidate = mix;
    candidate.kind = OpKind::Attention;
    candidate.inputs = {scores.inputs[0], scores.inputs[1], mix.inputs[1]};
    if (softmax.inputs.size() == 2) candidate.inputs.push_back(softmax.inputs[1]);
    candidate.attrs = graph::Boxed<graph::AttentionAttrs>(attrs);
    if (const auto refused = check_attention(g, candidate)) {
      log.push_back("fuse_attention: " + names + " stay three ops: " + *refused);
      continue;
    }
    const NodeId scores_id = id, softmax_id = *sm, mix_id = *mx;
    const std::vector<ValueId> inputs = candidate.inputs;
    chains.erase(scores_id.index);
    g.erase_node(softmax_id);
    g.erase_node(scores_id);
    graph::Node& node = g.node(mix_id);
    node.kind = OpKind::Attention;
    node.attrs = std::move(candidate.attrs);
    g.truncate_inputs(mix_id, 0);
    for (ValueId v : inputs) g.append_input(mix_id, v);
    graph::infer_node(g, mix_id);
    log.push_back("fuse_attention: " + names + " -> one Attention (" +
                  (quantized ? "int8" : "f32") + ")");
  }
}

}  // namespace qfuse::plugin
