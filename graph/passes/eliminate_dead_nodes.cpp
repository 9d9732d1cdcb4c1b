// eliminate_dead_nodes: a node none of whose outputs is read (by a live node
// or as a graph output) is erased. Rewrites leave such nodes behind.

#include <spdlog/spdlog.h>

#include "graph/passes/passes.hpp"

namespace qfuse::graph {

bool eliminate_dead_nodes(Graph& g, PassContext&) {
  bool changed = false;
  // Reverse topological order erases whole dead chains in one sweep.
  const auto order = g.topological_order();
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const Node& n = g.node(*it);
    bool used = false;
    for (ValueId out : n.outputs) used = used || g.is_graph_output(out) || !g.consumers(out).empty();
    if (used) continue;
    spdlog::debug("eliminate_dead_nodes: erased '{}'", n.name);
    g.erase_node(*it);
    changed = true;
  }
  return changed;
}

}  // namespace qfuse::graph
