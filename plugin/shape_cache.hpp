#pragma once
// Symbolic input dimensions: one compiled model serving several input shapes.
// The model compiled first keeps the graph its passes left; each other shape
// is compiled from that graph on first use (compile_for_shapes), reading the
// first model's weights wherever its layers take the same layout, and kept in
// a bounded cache, least recently used going first.

#include <cstddef>
#include <future>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "graph/graph.hpp"
#include "qfuse/qfuse.hpp"

namespace qfuse {

using InputShapes = std::map<std::string, Shape>;

// Every input's shape in `graph` once `given` binds some of them: an input
// not named keeps its shape, except dimensions sharing a name with a given
// one, which take its size. Returns the first thing that does not fit,
// naming the input and the dimension (an unknown input, a rank, a dimension
// the model fixes, two sizes for one name), else an empty string.
std::string resolve_input_shapes(const graph::Graph& graph, const InputShapes& given,
                                 InputShapes* all);

// The input shapes a compiled graph runs at.
InputShapes input_shapes_of(const graph::Graph& graph);
// "a=1x3, b=2" for logs and errors.
std::string shapes_text(const InputShapes& shapes);

struct CompiledModel::ShapeCache {
  ShapeCache(std::shared_ptr<const Impl> root, std::size_t capacity);

  // The model at `shapes` (every input's, as resolve_input_shapes gives
  // them): the root when they are its own, else one kept or compiled now.
  // Several threads asking for one new shape compile it once; shapes of
  // their own compile concurrently. A failed compile is not kept.
  std::shared_ptr<const Impl> get(const InputShapes& shapes);
  // The root's shape first, then the kept ones, the one asked for last first.
  std::vector<ShapeInfo> shapes() const;

  const std::shared_ptr<const Impl> root;

 private:
  struct Entry {
    InputShapes shapes;
    std::shared_future<std::shared_ptr<const Impl>> model;
    const void* maker = nullptr;  // the call compiling it, while it does
  };
  const std::size_t capacity_;
  mutable std::mutex mutex_;
  std::list<Entry> entries_;  // the one asked for last first
};

}  // namespace qfuse
