#pragma once
// Internal: the public API's objects seen from inside qfuse. The tests, the
// CLI and the benchmarks work on the IR directly (graph::Graph); hosts go
// through qfuse::Model (qfuse/model.hpp) and never include this header.

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "composer/integer_plan.hpp"
#include "composer/post_ops_plan.hpp"
#include "graph/graph.hpp"
#include "graph/model_impl.hpp"
#include "qfuse/compare.hpp"
#include "qfuse/qfuse.hpp"

namespace qfuse {

// compile(make_model(graph), options) without the copy.
CompiledModel compile(const graph::Graph& graph, const CompileOptions& options = {});
// The same, compiled to serve other input shapes too: the model keeps the
// graph the passes left (without the weights its layers hold in their own
// layouts), from which compile_for_shapes makes it at other shapes.
CompiledModel compile_for_any_shapes(const graph::Graph& graph, const CompileOptions& options = {});
// `base` (from compile_for_any_shapes) at other input shapes: its fused graph
// with each named input's shape replaced and every other shape inferred
// again, its primitives, layouts and memory plan made for them. The layers
// read `base`'s weights wherever their primitives take the layout `base`'s
// did, which keeps `base`'s weights alive as long as the new model is.
// Throws GraphError naming the input or the node a shape does not fit, and
// Error when `base` was not compiled for other shapes.
CompiledModel compile_for_shapes(const CompiledModel& base,
                                 const std::map<std::string, Shape>& inputs);
// The compiled (fused) graph, every constant readable: the ones a layer holds
// in its own layout alone (int8 weights) are restored from it on the first
// call, into a copy of the graph that lives as long as the model.
const graph::Graph& compiled_graph(const CompiledModel& model);
// The graph the ops run: the same nodes and values, but a constant a layer
// holds alone is a placeholder of its type and shape with no memory behind
// it (Tensor::raw_data() is null). For what reads no constant data.
const graph::Graph& executed_graph(const CompiledModel& model);
// Integer-only mode: the integer plan node `node` of the compiled graph runs,
// else null (another op, or a layer that kept float scales).
const composer::IntegerPlan* integer_plan(const CompiledModel& model, const graph::Node& node);
// A fused int8 layer of the compiled graph: its chain composed as the
// float-scale path runs it (output scales, post-ops, destination zero point;
// before lift_tiny_output_scales, so that it goes with the node's bias), else
// nullopt.
std::optional<composer::PostOpsPlan> composed_plan(const CompiledModel& model,
                                                   const graph::Node& node);
// An f32 Convolution / FullyConnected of the compiled graph that took the
// elementwise ops after it as oneDNN post-ops: those nodes, in order (erased
// from the graph, which still holds them; the layer writes the last one's
// output and the first reads the layer's own). Empty for any other node.
std::vector<const graph::Node*> absorbed_post_ops(const CompiledModel& model,
                                                  const graph::Node& node);

// A Transpose a MatMul of the compiled graph took in (it reads or writes the
// layout by strides): `output`, no longer computed, is Transpose(`input`,
// perm), a value the graph still holds. Compare measures and overrides
// `output` through it.
struct AbsorbedTranspose {
  std::string input, output;
  std::vector<std::int64_t> perm;
};
const std::vector<AbsorbedTranspose>& absorbed_transposes(const CompiledModel& model);

// Called after each executed node, once per value it wrote, after the value
// observer (which sees the value as the node computed it): `value` holds the
// value's elements in plain C order (a copy when the request stores it
// channels last, else a view of its buffer). Returning true makes the request
// keep `value`'s elements as that value (copied back into its buffer, in its
// layout), so every later node reads them; the type and shape must stay. An
// empty function switches it off. qfuse::Comparison's isolated run feeds each
// fused layer the reference's values through it.
using ValueOverride = std::function<bool(const std::string& name, Tensor& value)>;
void set_value_override(InferRequest& request, ValueOverride override);

struct InferRequestAccess {
  static void set_value_override(InferRequest& request, ValueOverride override);
};

}  // namespace qfuse
