#pragma once
// Internal: what a qfuse::Model (qfuse/model.hpp) holds, the IR graph, and
// how qfuse's own code wraps and unwraps one.

#include <memory>
#include <utility>

#include "graph/graph.hpp"
#include "qfuse/model.hpp"

namespace qfuse {

struct Model::Impl {
  graph::Graph graph;
};

inline Model make_model(graph::Graph graph) {
  return Model(std::make_shared<const Model::Impl>(Model::Impl{std::move(graph)}));
}

inline const graph::Graph& model_graph(const Model& model) { return model.impl().graph; }

}  // namespace qfuse
