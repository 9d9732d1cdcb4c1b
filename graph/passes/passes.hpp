#pragma once
// The fusion passes, in pipeline order. Each returns true iff it changed the
// graph and logs one line per rewrite through the PassContext.

#include "graph/pass_manager.hpp"

namespace qfuse::graph {

// A dequantize spelled with elementwise ops (Convert(f32) [-> Subtract(z)]
// [-> Multiply(s)]) becomes one Dequantize op.
bool recognize_dequantize(Graph& g, PassContext& ctx);

// Activations spelled out with elementwise ops (x * relu6(x + 3) / 6,
// x * sigmoid(x), ...) become HSwish / HSigmoid / Swish.
bool recognize_activations(Graph& g, PassContext& ctx);

// BatchNormalization after a layer with constant (or FakeQuantize'd constant)
// weights folds into them; otherwise it becomes Multiply + Add.
bool fold_batch_norm(Graph& g, PassContext& ctx);

// Add of a per-channel constant after a layer becomes (part of) its bias.
bool fuse_bias(Graph& g, PassContext& ctx);

// A Q/DQ pair stores its codes as s8 with zero point 0 when its grid is
// symmetric, else as u8 (the codes and zero point shift by 128).
bool choose_code_type(Graph& g, PassContext& ctx);

// Clamp / Relu / Multiply / Add by constants right before a FakeQuantize fold
// into its input ranges.
bool fold_into_fake_quantize_ranges(Graph& g, PassContext& ctx);

// A per-tensor FakeQuantize after an op that moves values (pattern::moves_data)
// or a Concat moves above it; one that repeats its input's grid is dropped.
bool hoist_fake_quantize(Graph& g, PassContext& ctx);

// FakeQuantize on constant weights -> s8 constant, Convert, per-channel Multiply.
bool quantize_weights(Graph& g, PassContext& ctx);

// FakeQuantize on an activation -> quantize-only FakeQuantize, Convert to
// u8/s8, and a dequantize (Convert to f32, Subtract zero point, Multiply scale).
bool split_fake_quantize(Graph& g, PassContext& ctx);

// An elementwise function of one tensor with at most 256 values (int8, or a
// 256-level FakeQuantize) whose result is quantized -> one Lookup table from
// codes to codes (quantized SiLU: x * Q(sigmoid(x)) -> Q).
bool lookup_elementwise(Graph& g, PassContext& ctx);

// Data movement (pattern::moves_data, and a Concat of equal grids) below a
// per-tensor dequantize moves onto the int8 tensor, so it runs on int8 and
// the dequantize reaches the layer after it.
bool hoist_data_movement_above_dequantize(Graph& g, PassContext& ctx);

// AvgPool between a dequantize and a quantize-only FakeQuantize pools the
// int8 tensor and writes the next grid (requantizing with a linear post-op).
bool requantize_avg_pool(Graph& g, PassContext& ctx);

// Dequantized input and weights of a layer -> one quantized layer whose output
// scales carry the product of the scales; bias folded in.
bool fuse_dequantize_into_layer(Graph& g, PassContext& ctx);

// ONNX Runtime's dynamic format (DynamicQuantize -> MatMulInteger with a
// run-time zero point -> Multiply by a run-time scale) -> one quantized layer
// whose first post-ops apply the zero point and the scale.
bool fuse_dynamic_quantized_layer(Graph& g, PassContext& ctx);

// The elementwise chain after a quantized layer -> its post-op chain,
// ending in an u8/s8 destination when a quantize-only FakeQuantize closes it.
bool fuse_post_op_chain(Graph& g, PassContext& ctx);

// A quantize-only FakeQuantize per tensor + its Convert to u8/s8 that no
// layer took -> one quantizing Convert (qfuse's loop, the FakeQuantize's own
// arithmetic onto the stored codes).
bool quantize_by_convert(Graph& g, PassContext& ctx);
// Multiply(dequantized codes, f32 gate [N, C, 1, ...]) -> quantizing Convert
// as one GateMultiply (squeeze-excitation); is_channel_gate says whether
// `gate` broadcasts per image and channel over `x`.
bool quantize_channel_gate(Graph& g, PassContext& ctx);
// A sum of two dequantized code tensors of one shape, quantized, as one
// CodeAdd on the codes (add_codes.cpp).
bool add_codes(Graph& g, PassContext& ctx);

// Reshape [N, g, C/g, ...] -> Transpose(0, 2, 1, ...) -> Reshape [N, C, ...]
// -> one ShuffleChannels, which runs channels last as well as plain.
bool recognize_channel_shuffle(Graph& g, PassContext& ctx);
bool is_channel_gate(const Graph& g, ValueId gate, ValueId x);

// Add(x, mask) -> Softmax along the last axis -> Softmax(x, mask), the mask
// one value per key (attention's padding), added in the softmax's pass.
bool fold_mask_into_softmax(Graph& g, PassContext& ctx);
// An erf Gelu whose output a DynamicQuantize or per-tensor Quantize reads
// -> GeluDynamicQuantize / GeluQuantize: qfuse's GELU kernel quantizes y as
// it writes it (before fuse_post_op_chain, which would take the Gelu as
// oneDNN's post-op).
bool fold_quantize_into_gelu(Graph& g, PassContext& ctx);
// A per-tensor Quantize (zero point 0) or a quantizing Convert by ranges
// that alone reads a Softmax -> the Softmax writes the u8/s8 codes itself
// (qfuse's kernel with the quantizer's own loop; a Quantize without AVX-512:
// oneDNN's output scale).
bool fold_quantize_into_softmax(Graph& g, PassContext& ctx);
// A per-tensor quantizer or DynamicQuantize reading a LayerNorm, run in the
// LayerNorm's pass over the rows (LayerNormQuantize, LayerNormDynamicQuantize).
bool fold_quantize_into_layer_norm(Graph& g, PassContext& ctx);

// An f32 layer with constant weights followed by a Multiply by a per-tensor
// or per-channel constant takes it into its weights and bias.
bool fold_scale_into_layer(Graph& g, PassContext& ctx);

// Constant expressions feeding a layer's bias (an int32 DequantizeLinear) are
// evaluated, leaving the weights' dequantize for the layer.
bool lower_bias(Graph& g, PassContext& ctx);

// Convert / Multiply / Add / Subtract of constants are evaluated once.
bool fold_constants(Graph& g, PassContext& ctx);
// The node producing `v` when fold_constants can evaluate it (all inputs
// constant), and the evaluation itself (returns the new constant).
std::optional<NodeId> foldable_constant_node(const Graph& g, ValueId v);
ValueId fold_constant_node(Graph& g, NodeId id);

// Nodes whose outputs nobody reads are erased.
bool eliminate_dead_nodes(Graph& g, PassContext& ctx);

}  // namespace qfuse::graph
