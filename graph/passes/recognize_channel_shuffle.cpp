// recognize_channel_shuffle
//
//   x [N, C, d...] -> Reshape [N, g, C/g, d...] -> Transpose(0, 2, 1, 3, ...)
//     -> Reshape [N, C, d...]
//     ==>  x -> ShuffleChannels[groups g]
//
// How exporters write ShuffleNet's channel shuffle. As one op it is a
// permutation of channels, which runs on channels-last tensors as well as plain
// ones: the int8 convolutions around it then read and write channels last
// instead of reordering at the rank-5 Transpose. Any element type.
// Preconditions: the two intermediate tensors have no other readers and are
// not graph outputs.

#include "graph/passes/passes.hpp"
#include "graph/passes/pattern.hpp"

namespace qfuse::graph {
namespace {

constexpr std::string_view kPass = "recognize_channel_shuffle";
using namespace pattern;

struct ShuffleMatch {
  NodeId split, transpose, merge;
  ValueId x;
  std::int64_t groups = 1;
};

// The match ending at Reshape `merge`, or why not (empty reason: not this form).
std::optional<ShuffleMatch> match_shuffle(const Graph& g, NodeId merge_id, std::string& why) {
  const Node& merge = g.node(merge_id);
  if (merge.kind != OpKind::Reshape) return std::nullopt;
  const Node* transpose = producer_of(g, merge.inputs[0], OpKind::Transpose);
  if (!transpose) return std::nullopt;
  const Node* split = producer_of(g, transpose->inputs[0], OpKind::Reshape);
  if (!split) return std::nullopt;
  const ValueId x = split->inputs[0];
  const Shape& xs = g.value(x).shape;
  const Shape& parts = g.value(split->outputs[0]).shape;
  if (xs.size() < 2 || parts.size() != xs.size() + 1 || g.value(merge.outputs[0]).shape != xs) {
    return std::nullopt;
  }
  // [N, C, d...] -> [N, g, C/g, d...]
  if (parts[0] != xs[0] || parts[1] * parts[2] != xs[1] ||
      !std::equal(xs.begin() + 2, xs.end(), parts.begin() + 3)) {
    return std::nullopt;
  }
  Ints swap_12(parts.size());
  for (std::size_t i = 0; i < swap_12.size(); ++i) swap_12[i] = static_cast<std::int64_t>(i);
  std::swap(swap_12[1], swap_12[2]);
  if (transpose->attr<TransposeAttrs>().perm != swap_12) return std::nullopt;
  for (ValueId v : {split->outputs[0], transpose->outputs[0]}) {
    if (g.consumers(v).size() != 1 || g.is_graph_output(v)) {
      why = "the shuffle's intermediate '" + g.value(v).name + "' has other readers";
      return std::nullopt;
    }
  }
  return ShuffleMatch{g.value(split->outputs[0]).producer, g.value(transpose->outputs[0]).producer,
                      merge_id, x, parts[1]};
}

}  // namespace

bool recognize_channel_shuffle(Graph& g, PassContext& ctx) {
  for (NodeId id : g.topological_order()) {
    std::string why;
    const auto m = match_shuffle(g, id, why);
    if (!m) {
      if (!why.empty()) ctx.reject(kPass, g.node(id).name, why);
      continue;
    }
    const std::string name = g.node(m->merge).name;
    const ValueId result = g.node(m->merge).outputs[0];
    const ValueId shuffled =
        emit(g, OpKind::ShuffleChannels, name, {m->x}, ShuffleChannelsAttrs{m->groups});
    replace_value(g, result, shuffled);
    g.erase_node(m->merge);
    g.erase_node(m->transpose);
    g.erase_node(m->split);
    ctx.log(kPass, name + " -> ShuffleChannels(groups " + std::to_string(m->groups) + ")");
    return true;
  }
  return false;
}

}  // namespace qfuse::graph
