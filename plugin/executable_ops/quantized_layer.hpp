#pragma once
// Internal: quantized layers (QuantizedConvolution / Deconvolution /
// FullyConnected / MatMul) as one oneDNN int8 primitive each.

#include <functional>
#include <optional>
#include <string>

#include "composer/compose_memo.hpp"
#include "plugin/execution.hpp"
#include "plugin/layout.hpp"

namespace qfuse::plugin {

dnnl::memory::desc layout_desc(const Shape& shape, ElementType type, Layout layout);

// nullopt when the backend can run `node` (not yet in the graph) as one
// primitive; otherwise why not. Used by the fusion passes. Both functions
// compose the layer's chain through `memo` when one is given (one per
// compilation), so that a chain checked by the passes is not composed again.
std::optional<std::string> check_quantized_layer(const graph::Graph& graph,
                                                 const graph::Node& node,
                                                 const Shape& output_shape,
                                                 const dnnl::engine& engine,
                                                 const CompileOptions& options,
                                                 composer::ComposeMemo* memo = nullptr);

// `layout_of(value)` gives the layout of the node's input and output buffers.
// `sum_in_place`: the output shares the buffer of the residual the sum
// post-op reads, so the residual needs no copy.
std::unique_ptr<ExecutableOp> make_quantized_layer(
    const graph::Graph& graph, const graph::Node& node, const dnnl::engine& engine,
    const CompileOptions& options, const std::function<Layout(graph::ValueId)>& layout_of,
    bool sum_in_place, composer::ComposeMemo* memo = nullptr);

// Milliseconds this thread has spent composing post-op chains so far
// (compile() reads it before and after, for CompileTimes::composer_ms).
double composer_ms_on_this_thread();

}  // namespace qfuse::plugin
