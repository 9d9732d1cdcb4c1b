#pragma once
// Internal: builders of executable nodes.

#include "plugin/execution.hpp"

namespace qfuse::plugin {

// A single f32 oneDNN primitive for the node, or null when oneDNN has no
// primitive for this operator.
std::unique_ptr<ExecutableOp> make_dnnl_op(const graph::Graph& graph, const graph::Node& node,
                                           const dnnl::engine& engine);

// qfuse's own loops: FakeQuantize, Resize, Reshape, Flatten; null
// for anything else.
std::unique_ptr<ExecutableOp> make_reference_op(const graph::Graph& graph,
                                                const graph::Node& node);

// A quantizing Convert (ConvertAttrs::quantizes), writing plain or channels last.
std::unique_ptr<ExecutableOp> make_quantize(const graph::Graph& graph, const graph::Node& node,
                                            bool channels_last);

// Convert as a oneDNN reorder between the given layouts.
std::unique_ptr<ExecutableOp> make_convert(const graph::Node& node, const dnnl::engine& engine,
                                           const dnnl::memory::desc& src,
                                           const dnnl::memory::desc& dst);

// MaxPool / AvgPool between the given layouts (u8/s8 channels last runs
// oneDNN's jit int8 pooling).
std::unique_ptr<ExecutableOp> make_pool(const graph::Graph& graph, const graph::Node& node,
                                        const dnnl::engine& engine,
                                        const dnnl::memory::desc& src,
                                        const dnnl::memory::desc& dst, bool channels_last);

// Elementwise binary with numpy broadcasting on both sides.
std::unique_ptr<ExecutableOp> make_broadcast_binary(const graph::Graph& graph,
                                                    const graph::Node& node);

}  // namespace qfuse::plugin
