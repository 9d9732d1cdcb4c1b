// Graph validation: inputs, outputs and every node's inputs are produced,
// uses are consistent, and the stored shapes and types agree with shape
// inference (infer.cpp) run again on a copy.

#include <algorithm>
#include <string>

#include "graph/graph.hpp"
#include "qfuse/error.hpp"

namespace qfuse::graph {

void verify(const Graph& graph) {
  auto fail = [](const std::string& msg) { throw GraphError("validate graph: " + msg); };
  if (graph.outputs().empty()) fail("the graph has no outputs");
  for (ValueId in : graph.inputs()) {
    const Value& v = graph.value(in);
    if (v.producer.valid()) fail("input '" + v.name + "' is produced by a node");
    for (auto d : v.shape) {
      if (d < 1) fail("input '" + v.name + "' has unbound shape " + to_string(v.shape));
    }
  }
  graph.check_uses();
  for (std::size_t i = 0; i < graph.node_capacity(); ++i) {
    const Node& n = graph.node(NodeId{static_cast<std::uint32_t>(i)});
    if (n.erased) continue;
    for (ValueId in : n.inputs) {
      const Value& v = graph.value(in);
      const bool is_input =
          std::find(graph.inputs().begin(), graph.inputs().end(), in) != graph.inputs().end();
      if (!v.is_constant() && !is_input && !v.producer.valid()) {
        throw GraphError("validate " + std::string(to_string(n.kind)) + " node '" + n.name +
                         "': input '" + v.name + "' is not produced by any node");
      }
    }
  }
  for (ValueId out : graph.outputs()) {
    const Value& v = graph.value(out);
    const bool is_input =
        std::find(graph.inputs().begin(), graph.inputs().end(), out) != graph.inputs().end();
    if (!v.producer.valid() && !v.is_constant() && !is_input) {
      fail("output '" + v.name + "' is not produced by any node");
    }
  }
  // Re-run inference on a copy and compare with what is stored.
  Graph copy = graph;
  for (NodeId id : copy.topological_order()) {
    infer_node(copy, id);
    const Node& n = graph.node(id);
    for (ValueId out : n.outputs) {
      const Value& stored = graph.value(out);
      const Value& inferred = copy.value(out);
      if (stored.shape != inferred.shape || stored.type != inferred.type) {
        throw GraphError("validate " + std::string(to_string(n.kind)) + " node '" + n.name +
                         "': stored output " + std::string(to_string(stored.type)) +
                         to_string(stored.shape) + " disagrees with inference (expected " +
                         std::string(to_string(inferred.type)) + to_string(inferred.shape) + ")");
      }
    }
  }
}

}  // namespace qfuse::graph
