#pragma once
// Small matching and rewriting helpers shared by the passes.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "graph/graph.hpp"
#include "graph/pass_manager.hpp"
#include "graph/node_queries.hpp"

namespace qfuse::graph::pattern {

// What one node computes, asked by the plugin and the exporter as well
// (graph/node_queries.hpp); named here too for the passes' pattern:: calls.
using graph::channel_vector;
using graph::constant_f32;
using graph::expand;
using graph::has_per_tensor_ranges;
using graph::is_near_integer;
using graph::output_quantum;
using graph::output_ranges_are_input_ranges;
using graph::pools_globally;
using graph::producer_of;

// The single live consumer of `v`, unless `v` is a graph output.
std::optional<NodeId> sole_consumer(const Graph& g, ValueId v);

// The value of a one-element f32 constant.
std::optional<float> scalar_constant(const Graph& g, ValueId v);

bool all_equal(const std::vector<float>& values);

// A new f32 constant shaped to broadcast along `axis` of a rank-`rank`
// tensor ([1] when `values` has one element).
ValueId add_channel_constant(Graph& g, const std::string& name, const std::vector<float>& values,
                             std::size_t rank, std::size_t axis);

// The first reader of `v` that quantizes it per tensor, the one a pass folds
// into the node writing `v`: a DynamicQuantize, a per-tensor Quantize, or
// (with `by_ranges`) a quantizing Convert. A per-channel Quantize is passed
// over, refused in `pass`'s name. nullopt when there is none.
std::optional<NodeId> per_tensor_quantizer_of(const Graph& g, ValueId v, PassContext& ctx,
                                              std::string_view pass, bool by_ranges);

// Replaces the one-output node `producer` and the quantizer `q` reading it
// by one node of `kind` (with `attrs` and the producer's name and inputs)
// whose outputs are the producer's, then q's, each keeping its readers and
// name.
void merge_with_quantizer(Graph& g, NodeId producer, NodeId q, OpKind kind, Attributes attrs);

// Adds a node, infers its output and returns it.
ValueId emit(Graph& g, OpKind kind, const std::string& name, std::vector<ValueId> inputs,
             Attributes attrs = NoAttrs{});

// Points every use of `from` at `to` and gives `to` the name of `from`, so
// graph outputs and dumps keep their names.
void replace_value(Graph& g, ValueId from, ValueId to);

// Output channel axis of a layer's weights (-1 if not known): Convolution
// and FullyConnected 0, Deconvolution 1 (ungrouped only), MatMul's constant
// rank-2 right operand: 1, or 0 when transposed.
int weights_channel_axis(const Node& layer);


// Per output channel (n of them), the sum of a layer's s8 weights `wq`
// (`layer` tells their layout: Convolution and FullyConnected [N, K...],
// MatMul [K, N], or [N, K] when it transposes them).
std::vector<double> weight_sums(const Graph& g, ValueId wq, const Node& layer, std::size_t n);

// Moves values of its one data input without computing new ones, and so
// keeps a per-tensor grid (OpInfo::moves_values: Reshape, Flatten, Transpose,
// Slice, Resize in nearest mode, MaxPool, ShuffleChannels).
bool moves_data(const Node& n);

// Multiply / Subtract / Add of a one-element constant to a runtime tensor.
bool is_scalar_affine(const Graph& g, const Node& n);

// The dequantize ending at `v`: the Dequantize node that produces it (the one
// form the graph has after canonicalization; recognize_dequantize makes it of
// a spelled-out Convert [-> Subtract] [-> Multiply]), its codes and its
// parameters, each one value or one per index of the axis asked for.
struct Dequantized {
  NodeId node;
  ValueId codes;  // u8 / s8 (or s32)
  std::vector<float> scale, zero_point;
  bool per_tensor() const { return scale.size() == 1 && zero_point.size() == 1; }
};
// Per tensor: one scale and one zero point.
std::optional<Dequantized> dequantized(const Graph& g, ValueId v);
// Per tensor, or varying along dimension `axis` of `v` only.
std::optional<Dequantized> dequantized(const Graph& g, ValueId v, std::size_t axis);

// `d` maps `q`'s codes back to reals: the same scale and zero point, per
// tensor or along the same axis (ONNX's QuantizeLinear -> DequantizeLinear).
bool undoes(const DequantizeAttrs& d, const QuantizeAttrs& q);
// The Dequantize that alone reads Quantize `q` and undoes it (a Q/DQ pair),
// or nullptr.
const Node* dequantize_of_quantize(const Graph& g, const Node& q);

}  // namespace qfuse::graph::pattern
