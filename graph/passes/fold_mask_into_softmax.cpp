// fold_mask_into_softmax
//
//   x -> Add(x, m) -> Softmax(last axis)   ==>   Softmax(x, m)
//
// Attention's scores take an additive mask before the softmax (0 for a key
// to attend to, a large negative number for a padded one), one row of keys
// per batch: [N, 1, 1, keys]. Left in the graph, the Add becomes a binary
// post-op of the scores' matmul, which reads the mask with every tile of the
// product (oneDNN 2.6's brgemm matmul: 23 of BERT-base's 62 us per layer);
// inside the softmax it is one add per value of a pass that reads the scores
// anyway. The arithmetic: the Softmax adds x + m in f32, as the Add did, and
// takes the softmax of those values: the same bits.
// Preconditions: an f32 Softmax along the last axis, not yet quantizing;
// the Add alone reads into it and is no graph output; one operand has the
// Softmax's shape and the other (the mask, f32) broadcasts to it with its
// last dimension whole (a mask per row, [..., 1], is left: adding a
// constant per row changes no probability, but not bit for bit; so is a
// last dimension of 1 in a graph with symbolic dims); the backend runs a
// Softmax with a mask (its own row kernel). The Softmax adds x + m as the
// Add did, broadcasting both ways: at another binding of symbolic dims the
// operand taken for the scores may be the one that repeats.

#include "graph/broadcast.hpp"
#include "graph/passes/passes.hpp"
#include "graph/passes/pattern.hpp"

namespace qfuse::graph {
namespace {

constexpr std::string_view kPass = "fold_mask_into_softmax";
using namespace pattern;

}  // namespace

bool fold_mask_into_softmax(Graph& g, PassContext& ctx) {
  for (NodeId id : g.topological_order()) {
    const Node& softmax = g.node(id);
    if (softmax.kind != OpKind::Softmax || softmax.inputs.size() != 1) continue;
    const auto& attrs = softmax.attr<SoftmaxAttrs>();
    const Shape& shape = g.value(softmax.inputs[0]).shape;
    const auto rank = static_cast<std::int64_t>(shape.size());
    if (attrs.quantizes() || rank == 0 || (attrs.axis != -1 && attrs.axis != rank - 1)) continue;
    const Node* add_node = producer_of(g, softmax.inputs[0], OpKind::Add);
    if (add_node == nullptr || !sole_consumer(g, softmax.inputs[0])) continue;
    const Node& add = *add_node;
    const NodeId add_id = g.value(softmax.inputs[0]).producer;
    const graph::Value& a = g.value(add.inputs[0]);
    const graph::Value& b = g.value(add.inputs[1]);
    const bool a_full = a.shape == shape, b_full = b.shape == shape;
    if (!a_full && !b_full) continue;
    const ValueId x = a_full ? add.inputs[0] : add.inputs[1];
    const ValueId m = a_full ? add.inputs[1] : add.inputs[0];
    const graph::Value& mask = g.value(m);
    if (g.value(x).type != ElementType::f32 || mask.type != ElementType::f32 ||
        !broadcasts_to(mask.shape, shape)) {
      continue;
    }
    if (mask.shape.empty() || mask.shape.back() != shape.back()) {
      ctx.reject(kPass, add.name, "its mask " + to_string(mask.shape) +
                                      " is not one value per key (the last axis, " +
                                      std::to_string(shape.back()) + ")");
      continue;
    }
    // A symbolic dim at 1 now may be the keys (or a row of the mask) at
    // another binding: one key is left to the Add.
    if (shape.back() == 1 && g.has_symbolic_dims()) {
      ctx.reject(kPass, add.name, "one key, which a symbolic dimension may make more at another binding");
      continue;
    }
    Node candidate = softmax;
    candidate.inputs = {x, m};
    if (auto why = ctx.check_layer(g, candidate, shape)) {
      ctx.reject(kPass, softmax.name, "the Softmax cannot add the mask: " + *why);
      continue;
    }
    const std::string name = softmax.name, add_name = add.name;
    const ValueId old = softmax.outputs[0];
    const SoftmaxAttrs kept = attrs;
    const ValueId y = emit(g, OpKind::Softmax, name, {x, m}, kept);
    replace_value(g, old, y);
    g.erase_node(id);
    g.erase_node(add_id);
    ctx.log(kPass, add_name + " + " + name + " -> one Softmax adding the mask " +
                       to_string(g.value(m).shape));
    return true;
  }
  return false;
}

}  // namespace qfuse::graph
