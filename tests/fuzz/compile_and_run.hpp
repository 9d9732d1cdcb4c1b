#pragma once
// What the import fuzz targets do with a graph that imported: compile it
// fused and unfused and run one inference each (its outputs read), unless
// it holds more elements than the fuzzer should allocate.

#include <cstdint>
#include <string>

#include "graph/graph.hpp"
#include "plugin/api_internal.hpp"

namespace qfuse::fuzz {

// Graphs holding more than this many elements are imported but not
// compiled: the fuzzer looks for wrong handling, not for large allocations.
inline constexpr std::int64_t kMaxElements = std::int64_t{1} << 22;

inline bool small_enough(const graph::Graph& g) {
  std::int64_t total = 0;
  for (std::uint32_t i = 0; i < g.value_count(); ++i) {
    total += element_count(g.value(graph::ValueId{i}).shape);
    if (total > kMaxElements) return false;
  }
  return true;
}

inline void compile_and_run(const graph::Graph& g) {
  if (!small_enough(g)) return;
  for (bool fuse : {true, false}) {
    const CompiledModel model = compile(g, {.fuse = fuse, .threads = 1});
    InferRequest request = model.create_infer_request();
    request.infer();
    for (const std::string& name : model.output_names()) (void)request.output(name).byte_size();
  }
}

}  // namespace qfuse::fuzz
