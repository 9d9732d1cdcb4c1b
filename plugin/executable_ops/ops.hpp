#pragma once
// Internal: builders of executable nodes.

#include <functional>
#include <optional>
#include <string>

#include "plugin/executable_ops/quantized_layer.hpp"
#include "plugin/execution.hpp"

namespace qfuse::plugin {

// The layout of each value's buffer (plain when not given).
using LayoutOf = std::function<Layout(graph::ValueId)>;

// A single oneDNN primitive for the node, or null when oneDNN has no
// primitive for this operator. Elementwise ops, binary ops, pools and
// reorders read and write the layouts `layout_of` gives; the rest are plain.
// `chain`: the post-ops an f32 Convolution / FullyConnected absorbed.
struct F32Chain;
std::unique_ptr<ExecutableOp> make_dnnl_op(const graph::Graph& graph, const graph::Node& node,
                                           const dnnl::engine& engine,
                                           const LayoutOf& layout_of = {},
                                           const F32Chain* chain = nullptr);

// The ops qfuse runs itself rather than as a oneDNN primitive (native_ops.cpp):
// FakeQuantize and the quantizing Convert, Dequantize (in one layout), Lookup, GateMultiply, Resize,
// Reshape / Flatten, Concat, Gather, DynamicQuantize, ShuffleChannels, the
// Slices and MaxPools of codes it has a kernel for, the dequantized mean;
// null for anything else (oneDNN's, make_dnnl_op).
std::unique_ptr<ExecutableOp> make_native_op(const graph::Graph& graph, const graph::Node& node,
                                             const LayoutOf& layout_of = {});

// An f32 2D deconvolution whose kernel equals its stride (no padding,
// dilation or groups, constant weights): each input pixel writes its own
// kh x kw output block, so it is a 1x1 convolution to kh * kw * OC channels
// followed by a pixel shuffle, which oneDNN runs with its 1x1 kernels instead
// of its im2col gemm (and without the gemm's kernels generated at the first
// inference). It reads and writes channels last.
bool is_shuffled_1x1_deconvolution(const graph::Graph& graph, const graph::Node& node);

// Whether oneDNN runs a quantizing Softmax (u8 / s8 destination, output
// scale) with an implementation of its own: nullopt, else why not.
std::optional<std::string> check_quantizing_softmax(const graph::Graph& graph,
                                                    const graph::Node& node,
                                                    const dnnl::engine& engine);

// Convert as a oneDNN reorder between the given layouts.
std::unique_ptr<ExecutableOp> make_convert(const graph::Node& node, const dnnl::engine& engine,
                                           const dnnl::memory::desc& src,
                                           const dnnl::memory::desc& dst);

// Dequantize in the output's layout (`channels_last`): a reorder from the
// input's layout (make_convert to f32) runs first when one is given, and the
// op dequantizes its f32 integers in place.
std::unique_ptr<ExecutableOp> make_dequantize(const graph::Graph& graph, const graph::Node& node,
                                              bool channels_last,
                                              std::unique_ptr<ExecutableOp> reorder);

// Elementwise binary with numpy broadcasting on both sides.
std::unique_ptr<ExecutableOp> make_broadcast_binary(const graph::Graph& graph,
                                                    const graph::Node& node);

}  // namespace qfuse::plugin

namespace qfuse::plugin {

// Integer-only mode: an int8 AvgPool as integer sums and a fixed-point
// 1/(K1*K2) (integer_kernels.hpp). Null, with `why` set, when the node has no
// such form (not 2D, not channels last, a 3D window, dilation).
std::unique_ptr<ExecutableOp> make_integer_avg_pool(const graph::Graph& graph,
                                                    const graph::Node& node,
                                                    const LayoutOf& layout_of, double eta,
                                                    std::string& why);

}  // namespace qfuse::plugin
