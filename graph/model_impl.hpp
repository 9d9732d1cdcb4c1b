#pragma once
// Internal: what a qfuse::Model (qfuse/model.hpp) holds, the IR graph, and
// how qfuse's own code wraps and unwraps one.

#include <memory>
#include <utility>
#include <vector>

#include "graph/graph.hpp"
#include "qfuse/model.hpp"
#include "qfuse/qfuse.hpp"

namespace qfuse {

struct Model::Impl {
  graph::Graph graph;
};

inline Model make_model(graph::Graph graph) {
  return Model(std::make_shared<const Model::Impl>(Model::Impl{std::move(graph)}));
}

namespace detail {
// The one way in to a handle's internals (Model::impl and CompiledModel::impl
// are private to the public API).
struct ImplAccess {
  static const Model::Impl& of(const Model& model) { return model.impl(); }
  static const CompiledModel::Impl& of(const CompiledModel& model) { return model.impl(); }
  static std::shared_ptr<const CompiledModel::Impl> shared(const CompiledModel& model) {
    return model.impl_;
  }
  // Symbolic dimensions: the shapes compiled from the model's first one, and
  // that first model (null when the shapes are fixed).
  static std::shared_ptr<CompiledModel::ShapeCache> shape_cache(const CompiledModel& model) {
    return model.shapes_;
  }
  static std::shared_ptr<const CompiledModel::Impl> root(const CompiledModel& model);
};
}  // namespace detail

inline const graph::Graph& model_graph(const Model& model) {
  return detail::ImplAccess::of(model).graph;
}

// Name, type and shape of the values `ids` of `g` (a model's inputs or outputs).
inline std::vector<TensorInfo> tensor_infos(const graph::Graph& g,
                                            const std::vector<graph::ValueId>& ids) {
  std::vector<TensorInfo> out;
  for (graph::ValueId id : ids) {
    const graph::Value& v = g.value(id);
    out.push_back({v.name, v.type, v.shape, g.dim_names(id), g.fixed_reasons(id)});
  }
  return out;
}

}  // namespace qfuse
