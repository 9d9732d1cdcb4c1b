#pragma once
// One row per OpKind: what the passes, the verifier and the plugin need to
// know about an operator beyond its attributes. Adding an op means one row
// here (in OpKind's order; a static_assert checks it) plus its executable.

#include <cstdint>
#include <optional>
#include <string_view>

#include "composer/post_op_chain.hpp"
#include "graph/ops.hpp"

namespace qfuse::graph {

struct Node;

enum class OpCategory : std::uint8_t {
  layer,            // f32 convolution / deconvolution / fully-connected / matmul
  quantized_layer,  // the fused int8 forms of the layers
  unary,            // elementwise, one input (an eltwise function of x)
  binary,           // elementwise, two broadcast inputs
  quantization,     // FakeQuantize, Quantize, Dequantize, Convert, DynamicQuantize, Lookup, GateMultiply, CodeAdd
  data_movement,    // Reshape, Flatten, Transpose, Concat, Slice, Resize, Gather, ShuffleChannels
  pooling,          // MaxPool, AvgPool
  normalization,    // BatchNormalization, LayerNorm, Softmax
  other,            // PRelu, ReduceMean, Power
};

// Where a layer's output channels lie: dimension 1 (convolutions), the last
// dimension (matrix products), or nowhere (not a layer).
enum class ChannelAxis : std::uint8_t { none, second, last };

// How a unary op's eltwise algorithm takes its parameters.
enum class EltwiseArgs : std::uint8_t {
  none,   // alpha = beta = 0
  alpha,  // AlphaAttrs::alpha
  clamp,  // ClampAttrs: alpha = lo, beta = hi
  gelu,   // GeluAttrs picks gelu_erf or gelu_tanh
};

inline constexpr std::uint8_t kVariadic = 255;  // max_inputs: any number

// Where a layer's weights hold its output channels.
enum class WeightsAxis : std::uint8_t {
  first,          // [O, I / groups, k...]: convolutions, fully connected
  deconvolution,  // [I, O / groups, k...]: dimension 1 when ungrouped, none with groups
  matmul,         // B [K, N]: dimension 1; [N, K] when transposed: 0
};

// How a layer's multiply-adds per inference are counted.
enum class MacCount : std::uint8_t {
  per_output_pixel,  // every weight once per output pixel (convolutions, fully connected)
  per_input_pixel,   // every weight once per input pixel (deconvolutions)
  contracted,        // each output element over the contracted dimension (matmuls)
};

// What the post-op composer knows about a layer (its f32 and int8 forms).
struct LayerInfo {
  OpKind f32;
  OpKind int8;
  composer::AnchorKind anchor;  // the primitive that anchors a chain
  WeightsAxis weights;
  MacCount macs;
};

struct OpInfo {
  OpKind kind;
  std::string_view name;
  OpCategory category;
  std::uint8_t min_inputs;
  std::uint8_t max_inputs;  // kVariadic: no upper bound
  bool commutative;         // binary ops: a op b == b op a
  // Unary ops: oneDNN's eltwise algorithm (as composer names it), when one
  // algorithm computes the op.
  std::optional<composer::EltwiseAlg> eltwise;
  EltwiseArgs eltwise_args;
  ChannelAxis channels;
  // Each output element is an element of the one data input (Resize: in
  // nearest mode only), so a per-tensor grid passes through unchanged.
  bool moves_values;
  // The ONNX operator that is exactly this op, input for input, with no
  // attributes ("Mul" for Multiply): what the importer reads as it and the
  // exporter writes. Empty for the others.
  std::string_view onnx;
  std::uint8_t outputs;  // how many outputs a node has
};

const OpInfo& op_info(OpKind kind);
// The op whose name (to_string) is `name`.
std::optional<OpKind> op_kind_named(std::string_view name);
// The op that ONNX operator `onnx_op` is exactly (OpInfo::onnx), if one is.
std::optional<OpKind> op_kind_of_onnx(std::string_view onnx_op);

// The eltwise (algorithm, alpha, beta) that computes unary node `n`, if one does.
std::optional<composer::Eltwise> eltwise_of(const Node& n);

// The layer facts of an f32 or quantized layer; null for any other op.
const LayerInfo* layer_info(OpKind kind);

// The int8 form of an f32 layer (is_layer), and back: float_form of a
// quantized layer is its f32 layer; of any other op, the op itself.
OpKind quantized_form(OpKind layer);
OpKind float_form(OpKind kind);

// The output channel axis of a layer (f32 or quantized) whose output has
// `rank` dimensions; nullopt for other ops.
std::optional<std::size_t> output_channel_axis(OpKind kind, std::size_t rank);

}  // namespace qfuse::graph
