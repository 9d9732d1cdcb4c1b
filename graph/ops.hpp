#pragma once
// The operators of the qfuse IR and their typed attributes.
//
// Layout conventions (those of ONNX):
//   activations   N, C, spatial...            (1D, 2D or 3D spatial)
//   conv weights  OC, IC/groups, k...
//   deconv weights IC, OC/groups, k...
//   fully-connected weights  OC, IC           y = x * W^T + b
// Dilations count like ONNX: 1 means dense.

#include <concepts>
#include <cstdint>
#include <limits>
#include <memory>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include "composer/post_op_chain.hpp"
#include "qfuse/tensor.hpp"

namespace qfuse::graph {

enum class OpKind : std::uint8_t {
  Convolution,
  Deconvolution,
  FullyConnected,
  MatMul,
  FakeQuantize,
  Multiply,
  Add,
  Subtract,
  Divide,
  Minimum,
  Maximum,
  Round,
  Clamp,
  Relu,
  LeakyRelu,
  PRelu,
  Sigmoid,
  Tanh,
  Elu,
  Gelu,
  HSwish,
  HSigmoid,
  Swish,  // x * sigmoid(alpha * x)  (AlphaAttrs)
  Exp,
  Abs,
  Sqrt,
  Convert,
  BatchNormalization,
  MaxPool,
  AvgPool,
  Reshape,
  Flatten,
  Transpose,
  Concat,
  Resize,
  Slice,
  ReduceMean,
  Power,
  Softmax,
  // u8/s8 -> u8/s8 through a 256-entry table (LookupAttrs), made by the passes.
  Lookup,
  // Codes times a per-channel f32 gate, quantized (GateMultiplyAttrs), made
  // by the passes from a squeeze-excitation's x * gate.
  GateMultiply,
  // The sum of two code tensors of one shape, quantized (CodeAddAttrs), made
  // by the passes from a residual add of two dequantized tensors.
  CodeAdd,
  // Fused int8 layers, made by the fusion passes (see QuantizedLayerAttrs).
  QuantizedConvolution,
  QuantizedDeconvolution,
  QuantizedFullyConnected,
  QuantizedMatMul,
  // Rows of a table (embeddings) by runtime indices (GatherAttrs).
  Gather,
  // Layer normalization over the last dimension (LayerNormAttrs).
  LayerNorm,
  // A LayerNorm whose output is also quantized per tensor in the same pass
  // (LayerNormQuantizeAttrs), made by the passes. Two outputs: the f32
  // normalized tensor and its u8 / s8 codes.
  LayerNormQuantize,
  // A LayerNorm whose output DynamicQuantize reads, as one node
  // (LayerNormAttrs), made by the passes: the range is gathered while the
  // rows are normalized. Four outputs: the f32 normalized tensor, then
  // DynamicQuantize's three (u8 codes, scale, zero point).
  LayerNormDynamicQuantize,
  // ONNX's DynamicQuantizeLinear: f32 -> u8 codes on a grid chosen from the
  // tensor's own range at run time. Three outputs: codes (u8, x's shape),
  // scale (f32 [1]) and zero point (u8 [1]); see composer::dynamic_grid.
  DynamicQuantize,
  // A channel shuffle (ShuffleChannelsAttrs): what Reshape [N, g, C/g, ...] ->
  // Transpose(0, 2, 1, ...) -> Reshape [N, C, ...] computes, made by the
  // passes so that it runs on either layout.
  ShuffleChannels,
  // A layer over the global mean of u8/s8 codes, in integers
  // (MeanInnerProductAttrs), made by the passes from a squeeze-excitation's
  // or a classifier's mean -> fc.
  MeanInnerProduct,
  // Codes to f32 by a scale and zero point (DequantizeAttrs): ONNX's
  // DequantizeLinear, and the dequantize half of a split FakeQuantize.
  Dequantize,
  // f32 to u8 / s8 codes by a scale and zero point (QuantizeAttrs): ONNX's
  // QuantizeLinear.
  Quantize,
  // An erf Gelu whose output DynamicQuantize reads, as one node (GeluAttrs),
  // made by the passes: the range is gathered while GELU is computed. Four
  // outputs: the f32 y, then DynamicQuantize's three (u8 codes, scale, zero
  // point).
  GeluDynamicQuantize,
  // An erf Gelu whose output a per-tensor Quantize reads, as one node
  // (QuantizeAttrs: the Quantize's), made by the passes. Two outputs: the f32
  // y and its u8 / s8 codes, written in the same pass.
  GeluQuantize,
  // softmax(Q K^T * scale + mask) V per batch and head in one pass per block
  // of query rows (AttentionAttrs), made by the plugin's planning from
  // attention's two matmuls and the Softmax between them.
  Attention,
};

// Each from the op table (graph/op_info.hpp).
using qfuse::to_string;
std::string_view to_string(OpKind kind);
bool is_elementwise_binary(OpKind kind);
bool is_elementwise_unary(OpKind kind);  // one input, an eltwise function of it
bool is_quantized_layer(OpKind kind);
bool is_layer(OpKind kind);  // the f32 layers: Convolution, Deconvolution, FullyConnected, MatMul
bool is_commutative(OpKind kind);

using Ints = std::vector<std::int64_t>;

struct NoAttrs {
  bool operator==(const NoAttrs&) const = default;
};

// Convolution: inputs x, w[, b].
struct ConvAttrs {
  Ints strides;     // per spatial dim
  Ints dilations;   // per spatial dim, 1 = dense
  Ints pads_begin;  // per spatial dim
  Ints pads_end;    // per spatial dim
  std::int64_t groups = 1;
  bool operator==(const ConvAttrs&) const = default;
};

// Deconvolution (transposed convolution): inputs x, w[, b].
// out = (in - 1) * stride + (k - 1) * dilation + 1 - pad_begin - pad_end + output_padding
struct DeconvAttrs {
  Ints strides;
  Ints dilations;
  Ints pads_begin;
  Ints pads_end;
  Ints output_padding;
  std::int64_t groups = 1;
  bool operator==(const DeconvAttrs&) const = default;
};

// MatMul: inputs a, b; ranks >= 2, batch dims broadcast like numpy. A compiled
// graph may list after them the run-time operands of post-ops it absorbed,
// and may give perm_a / perm_b (it multiplies Transpose(a, perm_a), ...) and
// perm_y (it writes Transpose(product, perm_y)): the Transposes around
// attention's products, which oneDNN's matmul reads and writes by strides.
// Empty: none.
struct MatMulAttrs {
  bool transpose_a = false;
  bool transpose_b = false;
  Ints perm_a, perm_b, perm_y;
  bool operator==(const MatMulAttrs&) const = default;
};

// FakeQuantize: inputs x, input_low, input_high, output_low, output_high,
// every range broadcast to x; the seed's formula, in double:
//   level = round_half_to_even((x - il) * (L - 1) / (ih - il)), 0 below il
//   and L - 1 above ih; y = ol + level * (oh - ol) / (L - 1).
// (ONNX's QuantizeLinear -> DequantizeLinear is Quantize -> Dequantize: one
// op, one numerics.)
struct FakeQuantizeAttrs {
  std::int64_t levels = 256;
  bool operator==(const FakeQuantizeAttrs&) const = default;
};
inline constexpr std::size_t kFakeQuantizeRangeInputs = 5;

// Clamp: min(max(x, lo), hi).
struct ClampAttrs {
  float lo = 0.0f;
  float hi = 0.0f;
  bool operator==(const ClampAttrs&) const = default;
};

// LeakyRelu (x >= 0 ? x : alpha * x) and Elu (x >= 0 ? x : alpha * (exp(x) - 1)).
struct AlphaAttrs {
  float alpha = 0.0f;
  bool operator==(const AlphaAttrs&) const = default;
};

enum class GeluApproximation : std::uint8_t { erf, tanh };
struct GeluAttrs {
  GeluApproximation approximation = GeluApproximation::erf;
  bool operator==(const GeluAttrs&) const = default;
};

// Convert: to an integer type rounds half to even and saturates.
struct ConvertAttrs {
  ElementType to = ElementType::f32;
  // f32 -> u8/s8 only: a per-tensor quantization, the FakeQuantize with input
  // range [input_low, input_high] and 256 levels onto the whole type:
  //   clamp(round_half_even((x - input_low) * 255 / (input_high - input_low)), 0, 255)
  //   + the type's minimum.
  // A plain conversion when both are 0. (ONNX's QuantizeLinear is the
  // Quantize op.)
  float input_low = 0.0f;
  float input_high = 0.0f;
  bool quantizes() const { return input_low != 0.0f || input_high != 0.0f; }
  std::int32_t code_min() const { return to == ElementType::s8 ? -128 : 0; }
  bool operator==(const ConvertAttrs&) const = default;
};

// Quantize: input x (f32), output `to` (u8 or s8) codes of x's shape:
//   y = saturate(round_half_to_even(x / scale) + zero_point) onto [code_min(), code_max()],
// the division in f32 (composer::quantize_linear): ONNX's QuantizeLinear.
// scale and zero_point hold one value, or one per index of dimension `axis`
// of x. The codes it saturates onto are `levels` consecutive codes from the
// type's lowest + code_offset (a narrower grid: torch's reduce_range
// activations 0..127, a Clip between QuantizeLinear and DequantizeLinear);
// 256 from 0: the whole type.
struct QuantizeAttrs {
  ElementType to = ElementType::u8;
  std::vector<float> scale{1.0f};
  std::vector<std::int32_t> zero_point{0};
  std::int64_t axis = 1;
  std::int32_t levels = 256;
  std::int32_t code_offset = 0;
  bool per_tensor() const { return scale.size() == 1 && zero_point.size() == 1; }
  float scale_at(std::size_t c) const { return scale[scale.size() == 1 ? 0 : c]; }
  std::int32_t zero_point_at(std::size_t c) const {
    return zero_point[zero_point.size() == 1 ? 0 : c];
  }
  std::int32_t type_min() const { return to == ElementType::s8 ? -128 : 0; }
  std::int32_t code_min() const { return type_min() + code_offset; }
  std::int32_t code_max() const { return code_min() + levels - 1; }
  bool operator==(const QuantizeAttrs&) const = default;
};

// BatchNormalization (inference): inputs x, gamma, beta, mean, variance (each [C]).
struct BatchNormAttrs {
  float epsilon = 1e-5f;
  bool operator==(const BatchNormAttrs&) const = default;
};

// MaxPool / AvgPool. Padded cells never win a max; AvgPool divides by the
// number of real cells when exclude_pad, by the kernel size otherwise.
struct PoolAttrs {
  Ints kernel;
  Ints strides;
  Ints pads_begin;
  Ints pads_end;
  Ints dilations;  // MaxPool only; 1 = dense
  bool exclude_pad = true;
  // AvgPool on u8/s8 only: out_scale * mean + out_shift is what is rounded to
  // the output type, a requantization onto another grid (identity: 1, 0).
  float out_scale = 1.0f;
  float out_shift = 0.0f;
  // AvgPool on u8/s8, global (the window is the whole image) only: the output
  // is f32, out_scale * mean + out_shift unrounded (a dequantized mean).
  bool to_f32 = false;
  bool operator==(const PoolAttrs&) const = default;
};

// Reshape to a fully specified shape (the frontend resolves 0 and -1).
// `spec`, when not empty, is the target as a function of the input's shape,
// ONNX's way extended: d >= 1 is that size, 0 copies the input's dimension at
// the same index, -1 takes what is left, and d <= -2 copies the input's
// dimension -2 - d (an Unsqueeze, or a target the importer traced to the
// input's own symbolic dimensions). Shape inference makes `shape` from it
// for the input's shape of the moment, so that the node follows the input's
// symbolic dimensions. Empty: `shape` is fixed (what import computed for the
// shapes it was given).
struct ReshapeAttrs {
  Shape shape;
  Ints spec;
  bool operator==(const ReshapeAttrs&) const = default;
};

// Flatten: [d0..d(axis-1)] x [d(axis)..] -> 2D.
struct FlattenAttrs {
  std::int64_t axis = 1;
  bool operator==(const FlattenAttrs&) const = default;
};

struct TransposeAttrs {
  Ints perm;
  bool operator==(const TransposeAttrs&) const = default;
};

// Output channel j * groups + i is input channel i * (C / groups) + j.
struct ShuffleChannelsAttrs {
  std::int64_t groups = 1;
  bool operator==(const ShuffleChannelsAttrs&) const = default;
};

struct ConcatAttrs {
  std::int64_t axis = 1;
  bool operator==(const ConcatAttrs&) const = default;
};

enum class ResizeMode : std::uint8_t { nearest, linear };
// How an output coordinate maps back to an input coordinate (ONNX names).
enum class CoordinateTransform : std::uint8_t {
  half_pixel,
  pytorch_half_pixel,
  align_corners,
  asymmetric,
  tf_half_pixel_for_nn,
};
enum class NearestMode : std::uint8_t { round_prefer_floor, round_prefer_ceil, floor, ceil };

// Resize to `sizes`; `scales` drive the coordinate transform per dimension
// when given (as ONNX's scales input); without them coordinates use the exact
// ratio in / out (x * in / out, not x / float(out / in)).
struct ResizeAttrs {
  ResizeMode mode = ResizeMode::nearest;
  CoordinateTransform transform = CoordinateTransform::half_pixel;
  NearestMode nearest_mode = NearestMode::round_prefer_floor;
  Shape sizes;
  std::vector<float> scales;  // empty: out / in per dim
  bool operator==(const ResizeAttrs&) const = default;
};

// A convolution / deconvolution / fully-connected / matmul running on int8
// data as one primitive. Inputs: x (u8 or s8), w (s8 constant, same layout as
// the f32 op), [bias (f32 constant, in accumulator units)], then the external
// tensors the chain's Sum and Binary steps read (chain input k is node input
// (has_bias ? 3 : 2) + k). Output, per element of output channel c:
//   acc = sum(w * (x - src_zero_point)) + bias[c]        (exact int32 + f32)
//   y   = chain(acc), stored as dst_type (s8/u8 saturate, rounding half to even)
// A dynamic layer (ONNX Runtime's dynamic format; fully-connected only) has
// no bias; inputs 2 and 3 are a zero point z (x's type, [1]) and a scale r
// (f32, [1] or one per output channel), both known only at run time, and
//   acc = sum(w * (x - z)) * r[c]      (the integer in f32, times r in f32)
// before the chain, whose external inputs then start at input 4. With
// dynamic_weight_scales (one, or one per output channel), input 3 is x's
// scale s ([1]) and r[c] = s * dynamic_weight_scales[c] in f32, the Mul that
// ONNX Runtime's format writes before the scale reaches the accumulator.
// A QuantizedMatMul may read run-time weights (activation by activation,
// attention's Q x K^T and P x V): w is then a u8/s8 tensor of any rank >= 2
// (batch dims broadcast like numpy), read as (w - weights_zero_point), and the
// chain's channels are the last dimension.
struct QuantizedLayerAttrs {
  std::variant<ConvAttrs, DeconvAttrs, MatMulAttrs, NoAttrs> geometry;
  std::int32_t src_zero_point = 0;
  std::int32_t weights_zero_point = 0;  // run-time weights only
  bool has_bias = false;
  bool dynamic = false;
  std::vector<float> dynamic_weight_scales;  // empty: input 3 is the whole scale
  // A dynamic layer's sum of each output channel's weights (the zero point's
  // correction -z * sum), set by the pass that makes it, so that building
  // the layer reads no weight.
  std::vector<std::int64_t> weight_sums;
  composer::PostOpChain chain;  // chain.dst_type is the layer's destination type

  std::size_t first_external_input() const { return dynamic ? 4 : has_bias ? 3 : 2; }
  // The output's element type: the chain's destination (its only record).
  ElementType dst_type() const {
    switch (chain.dst_type) {
      case composer::DataType::s8: return ElementType::s8;
      case composer::DataType::u8: return ElementType::u8;
      case composer::DataType::f32: break;
    }
    return ElementType::f32;
  }
};

// Slice: the box [begin, begin + size) of the input, unit steps (the frontend
// folds strided slices of constants; activations are sliced by a view).
// `size_dims`, when not empty, names per dim a graph input's symbolic
// dimension that the size along it follows ("" keeps `size`): shape
// inference sets those sizes from the inputs' shapes of the moment (the
// first `sequence` rows of a position table).
struct SliceAttrs {
  Ints begin;  // per dim
  Shape size;  // per dim
  std::vector<std::string> size_dims{};
  bool operator==(const SliceAttrs&) const = default;
};

// ReduceMean over `axes`; the output keeps them as dimensions of size 1.
struct ReduceAttrs {
  Ints axes;  // normalized, ascending
  bool operator==(const ReduceAttrs&) const = default;
};

// Power: x ^ exponent, a constant exponent.
struct PowerAttrs {
  float exponent = 1.0f;
  bool operator==(const PowerAttrs&) const = default;
};

// Softmax along one axis; with a second input m (f32, broadcast to x's
// shape, one value per position of the last axis), softmax(x + m) along the
// last axis. With quantize_scale > 0 it writes `to` (u8 / s8) codes with zero
// point 0: ONNX's QuantizeLinear(y, quantize_scale, 0) (y / scale) in
// qfuse's row kernel, oneDNN's output scale y * (1 / scale) without AVX-512
// (within one code; equal where 1 / scale is exact). With input_low /
// input_high set instead, the codes of a quantizing Convert of y by those
// ranges (ConvertAttrs' formula: a FakeQuantize's), in the row kernel only.
struct SoftmaxAttrs {
  std::int64_t axis = -1;
  ElementType to = ElementType::f32;
  float quantize_scale = 0.0f;
  float input_low = 0.0f, input_high = 0.0f;
  bool by_ranges() const { return input_low != 0.0f || input_high != 0.0f; }
  bool quantizes() const { return quantize_scale > 0.0f || by_ranges(); }
  bool operator==(const SoftmaxAttrs&) const = default;
};

// Lookup: y = table[x - min(x's type)], stored as `to`. The passes make it
// from an elementwise function of one int8 tensor that ends quantized.
struct LookupAttrs {
  std::vector<std::uint8_t> table;  // 256 stored values (s8 as their bytes)
  ElementType to = ElementType::u8;
  bool operator==(const LookupAttrs&) const = default;
};

// GateMultiply: inputs x (u8/s8 codes [N, C, spatial...]) and g (f32
// [N or 1, C, 1, ...]). y = quantize((x - zero_point) * scale * g[n, c]):
// the dequantize, the product and the quantization each in f32 as the
// unfused graph computes them (Dequantize; Multiply; the Quantize or
// quantizing Convert `quantize`), so the codes are the same bits.
struct GateMultiplyAttrs {
  float zero_point = 0.0f;
  float scale = 1.0f;
  // The quantizing Convert (by ranges) or the per-tensor Quantize it ends with.
  std::variant<ConvertAttrs, QuantizeAttrs> quantize;
  bool operator==(const GateMultiplyAttrs&) const = default;
};

// CodeAdd: inputs a and b (u8/s8 codes of one shape). y = quantize((a - za)
// * sa + (b - zb) * sb): each dequantize, the sum and the quantization in
// f32 as the unfused graph computes them (Dequantize, Dequantize, Add, then
// the Quantize or quantizing Convert `quantize`), so the codes are the same
// bits.
struct CodeAddAttrs {
  float a_zero_point = 0.0f;
  float a_scale = 1.0f;
  float b_zero_point = 0.0f;
  float b_scale = 1.0f;
  std::variant<ConvertAttrs, QuantizeAttrs> quantize;
  bool operator==(const CodeAddAttrs&) const = default;
};

// MeanInnerProduct: inputs x (u8/s8 codes [N, K, spatial...]) and w (s8
// constant [O, K]). With S[n, k] the sum of x[n, k] over the P pixels,
//   y[n, o] = clamp(scale[o] * sum_k w[o, k] * (S[n, k] - zero_point * P) + shift[o], lo, hi)
// (f32, [N, O] or [N, O, 1, ...] as `out_rank` says): a layer with s8
// weights over the dequantized mean (S / P - z) * s, its scale s * Sw[o] / P
// and its bias `shift`, the integer sum exact in int64 and scaled once.
struct MeanInnerProductAttrs {
  std::vector<float> scale, shift;  // one per output channel
  std::int32_t zero_point = 0;
  float lo = -std::numeric_limits<float>::infinity();
  float hi = std::numeric_limits<float>::infinity();
  std::int64_t out_rank = 2;
  bool operator==(const MeanInnerProductAttrs&) const = default;
};

// Dequantize: input x (u8, s8 or s32 codes), output f32 of x's shape:
//   y = (f32(x) - zero_point) * scale, the subtraction and the product each in
// f32 (composer::dequantize), ONNX's DequantizeLinear. scale and zero_point
// hold one value, or one per index of dimension `axis` of x. The zero point
// is an integer for ONNX's grids; the split of a FakeQuantize whose output
// range lies off its grid gives a fractional one (Zo = -ol / So).
struct DequantizeAttrs {
  std::vector<float> scale{1.0f};
  std::vector<float> zero_point{0.0f};
  std::int64_t axis = 1;
  bool per_tensor() const { return scale.size() == 1 && zero_point.size() == 1; }
  float scale_at(std::size_t c) const { return scale[scale.size() == 1 ? 0 : c]; }
  float zero_point_at(std::size_t c) const { return zero_point[zero_point.size() == 1 ? 0 : c]; }
  bool operator==(const DequantizeAttrs&) const = default;
};

// Gather: inputs data, indices (s32, s64, or integral f32; negative ones
// count from the end of `axis`, as ONNX's). Output: data's shape with `axis`
// replaced by the indices' shape; an index outside [-d, d) is an inference
// error naming the node.
struct GatherAttrs {
  std::int64_t axis = 0;
  bool operator==(const GatherAttrs&) const = default;
};

// LayerNorm: inputs x, scale, bias (each [C], C = x's last dimension):
// y = (x - mean) / sqrt(var + epsilon) * scale + bias, mean and (biased)
// variance over the last dimension, as ONNX's LayerNormalization(axis -1).
struct LayerNormAttrs {
  float epsilon = 1e-5f;
  bool operator==(const LayerNormAttrs&) const = default;
};

// LayerNormQuantize: LayerNorm's inputs and f32 output y, and as its second
// output quantize(y): the per-tensor Quantize or quantizing Convert that read
// y, computed on the same f32 y, so the codes are the unfused graph's bits.
struct LayerNormQuantizeAttrs {
  float epsilon = 1e-5f;
  std::variant<ConvertAttrs, QuantizeAttrs> quantize;
  bool operator==(const LayerNormQuantizeAttrs&) const = default;
};

// Attention: inputs q, k, v[, mask]; the scores matmul, the Softmax and the
// probabilities-times-values matmul it stands for, as one node:
//   y = mix(softmax(scores(q, k) [+ mask]), v)
// int8 (`quantized`): `scores` and `mix` are the two QuantizedMatMuls'
// attributes (geometry MatMulAttrs: the operands read through perm_a /
// perm_b, the product written through mix's perm_y), the scores f32 by
// scores' chain (a per-tensor scale), the Softmax quantizing (`softmax`) into
// the probabilities' codes that mix reads with its src zero point. f32: the
// two MatMuls' geometry in scores.geometry / mix.geometry (chains empty), the
// scores divided by `divisor` or times `factor` (the scores MatMul's scalar
// binary_div / binary_mul post-op; both 0: none).
// The mask is the Softmax's (SoftmaxAttrs: one row of keys per row, numpy
// broadcast over the leading dims).
struct AttentionAttrs {
  bool quantized = false;
  QuantizedLayerAttrs scores, mix;
  SoftmaxAttrs softmax;
  float divisor = 0.0f, factor = 0.0f;
};

// An attribute set held on the heap, so that the variant every node carries
// is the size of the common small sets, not of the largest: a graph of many
// small nodes pays for a fused layer's attributes only where one is. Copies
// are deep; Node::attr<T>() reads through it.
template <class T>
class Boxed {
 public:
  Boxed() : held_(std::make_unique<T>()) {}
  Boxed(T value) : held_(std::make_unique<T>(std::move(value))) {}  // NOLINT: implicit
  Boxed(const Boxed& other) : held_(std::make_unique<T>(*other.held_)) {}
  Boxed(Boxed&&) noexcept = default;
  Boxed& operator=(const Boxed& other) {
    if (this != &other) held_ = std::make_unique<T>(*other.held_);
    return *this;
  }
  Boxed& operator=(Boxed&&) noexcept = default;
  ~Boxed() = default;

  const T& operator*() const { return *held_; }
  T& operator*() { return *held_; }
  const T* operator->() const { return held_.get(); }
  T* operator->() { return held_.get(); }
  bool operator==(const Boxed& other) const
    requires std::equality_comparable<T>
  {
    return *held_ == *other.held_;
  }

 private:
  std::unique_ptr<T> held_;
};

// Whether T is a Boxed attribute set.
template <class T>
struct IsBoxed : std::false_type {};
template <class T>
struct IsBoxed<Boxed<T>> : std::true_type {};

// The sets larger than 96 bytes are boxed.
using Attributes =
    std::variant<NoAttrs, Boxed<ConvAttrs>, Boxed<DeconvAttrs>, MatMulAttrs, FakeQuantizeAttrs,
                 ClampAttrs, AlphaAttrs, GeluAttrs, ConvertAttrs, BatchNormAttrs, Boxed<PoolAttrs>,
                 ReshapeAttrs, FlattenAttrs, TransposeAttrs, ConcatAttrs, ResizeAttrs, SliceAttrs,
                 ReduceAttrs, PowerAttrs, SoftmaxAttrs, LookupAttrs, Boxed<QuantizedLayerAttrs>,
                 GatherAttrs,
                 LayerNormAttrs, GateMultiplyAttrs, CodeAddAttrs, ShuffleChannelsAttrs,
                 MeanInnerProductAttrs, DequantizeAttrs, QuantizeAttrs, LayerNormQuantizeAttrs,
                 Boxed<AttentionAttrs>>;

template <class A, class Variant>
struct IsAlternative;
template <class A, class... Alternatives>
struct IsAlternative<A, std::variant<Alternatives...>>
    : std::bool_constant<(std::is_same_v<A, Alternatives> || ...)> {};
// Whether Attributes holds the set A boxed.
template <class A>
inline constexpr bool kBoxedAttrs = IsAlternative<Boxed<A>, Attributes>::value;

}  // namespace qfuse::graph
