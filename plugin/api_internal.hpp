#pragma once
// Internal: the public API's objects seen from inside qfuse. The tests, the
// CLI and the benchmarks work on the IR directly (graph::Graph); hosts go
// through qfuse::Model (qfuse/model.hpp) and never include this header.

#include "composer/integer_plan.hpp"
#include "graph/graph.hpp"
#include "graph/model_impl.hpp"
#include "qfuse/compare.hpp"
#include "qfuse/qfuse.hpp"

namespace qfuse {

// compile(make_model(graph), options) without the copy.
CompiledModel compile(const graph::Graph& graph, const CompileOptions& options = {});
// The compiled (fused) graph.
const graph::Graph& compiled_graph(const CompiledModel& model);
// Integer-only mode: the integer plan node `node` of the compiled graph runs,
// else null (another op, or a layer that kept float scales).
const composer::IntegerPlan* integer_plan(const CompiledModel& model, const graph::Node& node);

}  // namespace qfuse
