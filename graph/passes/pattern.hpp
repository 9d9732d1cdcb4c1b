#pragma once
// Small matching and rewriting helpers shared by the passes.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "graph/graph.hpp"

namespace qfuse::graph::pattern {

// The single live consumer of `v`, unless `v` is a graph output.
std::optional<NodeId> sole_consumer(const Graph& g, ValueId v);

// The live node producing `v` if it has kind `kind`, else null.
const Node* producer_of(const Graph& g, ValueId v, OpKind kind);

// Values of an f32 constant.
std::optional<std::vector<float>> constant_f32(const Graph& g, ValueId v);
// The value of a one-element f32 constant.
std::optional<float> scalar_constant(const Graph& g, ValueId v);

// A constant that, broadcast against `shape`, varies at most along `axis`:
// its values as one number (size 1) or one per index of that axis.
std::optional<std::vector<float>> channel_vector(const Graph& g, ValueId v, const Shape& shape,
                                                 std::size_t axis);

// `values` (size 1 or n) expanded to n.
std::vector<float> expand(const std::vector<float>& values, std::size_t n);
bool all_equal(const std::vector<float>& values);
// Within `tolerance` of an integer.
bool is_near_integer(double x, double tolerance = 1e-3);

// A new f32 constant shaped to broadcast along `axis` of a rank-`rank`
// tensor ([1] when `values` has one element).
ValueId add_channel_constant(Graph& g, const std::string& name, const std::vector<float>& values,
                             std::size_t rank, std::size_t axis);

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

// A MaxPool / AvgPool whose window is the whole image, unpadded.
bool pools_globally(const Graph& g, const Node& pool);

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

// The quantum (oh - ol) / (L - 1) of a FakeQuantize's output, along `axis`
// of `shape`: one value or one per index of that axis; nullopt when its
// output ranges are not such constants. `output_low` receives ol alike.
std::optional<std::vector<float>> output_quantum(const Graph& g, const Node& fq,
                                                 const Shape& shape, std::size_t axis,
                                                 std::vector<float>* output_low = nullptr);

// ONNX's grid of a FakeQuantize that has one (scale and zero point, see
// FakeQuantizeAttrs), as constants along `axis` of `shape`: each of size 1 or
// one per index. nullopt when the node quantizes by its ranges, or when the
// grid varies along another axis.
struct LinearGrid {
  std::vector<float> scale;
  std::vector<std::int32_t> zero_point;
  std::int32_t code_low = 0;
  std::int32_t code_high = 255;
  // The output ranges are the input ranges: y = (q - zero_point) * scale.
  bool dequantizes_to_grid = false;
};
bool has_linear_grid(const Node& fq);
// The FakeQuantize's four ranges are one value each (per tensor).
bool has_per_tensor_ranges(const Graph& g, const Node& fq);
std::optional<LinearGrid> linear_grid(const Graph& g, const Node& fq, const Shape& shape,
                                      std::size_t axis);
// The FakeQuantize's output ranges are its input ranges (the same values).
bool output_ranges_are_input_ranges(const Graph& g, const Node& fq);
// Makes `fq` quantize by its ranges (a pass changed them).
void drop_linear_grid(Graph& g, NodeId fq);

}  // namespace qfuse::graph::pattern
