#pragma once
// Export of a fused graph in the pre-quantized ONNX form (seeds'
// prequantized_onnx_models.md): each fused layer as
//
//   ConvInteger / MatMulInteger -> Add(int32 bias) -> Cast(float)
//     -> Mul(M0, an integer stored as float) [-> Add(K)] -> Mul(2^-N)
//     [-> Max / Min (a clamp narrower than the type)] -> QuantizeLinear(scale 1, zp 0)
//
// the integer form the integer-only mode runs (composer/integer_plan.hpp),
// with 8-bit codes between layers. K, the offsets' remainder below one
// accumulator unit in 2^-N units, is written only where it is not 0. A
// residual add is a second stage on the codes: Cast -> Mul(M0) and
// Cast(residual) -> Mul(R), Add, Add(K), Mul(2^-N), QuantizeLinear(1, 0). An
// f32 layer output dequantizes its last codes: Cast -> Mul(scale) -> Add(shift).
// The graph input's quantization is a QuantizeLinear; int8 average pools are
// Cast -> AveragePool -> Mul(out_scale) -> Add(out_shift) -> QuantizeLinear(1, 0);
// Reshape, MaxPool, Transpose and Concat run on the codes.
//
// Everything else the fused graph holds is written as the ordinary ONNX
// operator it is, so that every model qfuse compiles exports:
// - an int8 layer that kept float scales in the integer-only mode: its
//   integer accumulator (ConvInteger / MatMulInteger), then the composed plan
//   the float-scale path runs (composer/post_ops_plan.hpp) in f32: Add(bias),
//   Mul(output scales), each post-op (an activation, Mul / Add / Min / Max
//   by a constant or by a tensor, a residual sum), Add(dst zero point),
//   QuantizeLinear(1, 0);
// - a dynamic int8 layer (ONNX Runtime's dynamic format, whose scale is
//   known only at run time, so that it keeps float scales in the
//   integer-only mode too): MatMulInteger(codes, W^T, run-time zero point)
//   -> Cast(float) -> Mul(run-time scale), then its plan's post-ops as above;
//   the DynamicQuantize that feeds it: DynamicQuantizeLinear, whose scalar
//   scale and zero point are reshaped to qfuse's [1] where anything but a
//   dynamic layer's zero point reads them;
// - an int8 deconvolution: ONNX has no integer ConvTranspose, so the codes
//   minus the zero point go through an f32 ConvTranspose with the s8 weights
//   as floats. Every product and partial sum is an integer below 2^24 there
//   (the bound the accumulator check below reports otherwise), so the f32
//   sums are exact in any order: that is ConvInteger's accumulator, and the
//   layer's integer (or float-scale) requantization follows as above;
// - f32 operators (elementwise, Softmax, ReduceMean, BatchNormalization,
//   Resize, Slice, pools, f32 Conv / Gemm / MatMul / ConvTranspose, ...), and
//   the elementwise ops an f32 layer absorbed as oneDNN post-ops (which the
//   compiled graph no longer lists: ExportSource::absorbed_post_ops);
// - FakeQuantize: QuantizeLinear -> DequantizeLinear on ONNX's grid, else
//   spelled out (Div / Sub / Mul, Max / Min, Round);
// - Lookup: Gather on its 256-entry table, indexed by the codes cast to int32
//   (s8 codes offset by 128).
// The model is written at opset 14 (HardSwish).
//
// Integers stored as float are exact below 2^24 (larger ones only with
// enough trailing zero bits). An M0, residual multiplier R or offset K that a
// float does not hold exactly is written rounded to the nearest float
// (relative error 2^-24, as the products past 2^24 below) with a warning,
// counted in ExportReport::inexact_constants (with
// CompileOptions::integer_eta = 2^-20, M0 has at most 21 bits; R = C * 2^N
// of an f32 residual scale C is exact for any N; K can pass 2^24). The
// accumulators ConvInteger's Cast converts are exact while |acc + bias| <
// 2^24: the exporter bounds that from the weights (255 * sum |w| + |bias|)
// and warns per layer when the bound passes 2^24. The product (acc + bias) *
// M0 may pass 2^24 and round in float (relative 2^-24): where the exact value
// lies that close to a rounding tie, a float runtime can round to the
// neighbouring code; the integer-only mode cannot.
//
// What stays refused, with an UnsupportedError naming the node and the
// reason, is what no ONNX operator that qfuse reads back expresses: a
// FakeQuantize with an empty or inverted constant input range (a step
// function), or whose scale and zero point vary along two axes; a post-op
// qfuse has no operator for (log, mish: no qfuse graph makes them); and, when
// the caller does not pass them, a float-scale layer's composed plan or an f32
// layer's absorbed post-ops.

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "composer/integer_plan.hpp"
#include "composer/post_ops_plan.hpp"
#include "graph/graph.hpp"

namespace qfuse::onnx {

struct ExportReport {
  int layers = 0;                // fused layers written as integer patterns
  int inexact_accumulators = 0;  // layers whose accumulator bound passes 2^24
  int float_scale_layers = 0;    // int8 layers with an f32 requantization (float scales)
  int deconvolutions = 0;        // int8 deconvolutions, as f32 ConvTranspose on codes
  int operators = 0;             // other nodes written as ordinary ONNX operators
  int absorbed_post_ops = 0;     // of those, ops an f32 layer had absorbed
  int inexact_constants = 0;     // M0, R or K values rounded to float
};

// What the compiled model knows of its fused graph besides the graph.
struct ExportSource {
  // The integer plan a fused layer runs; null when it kept float scales.
  std::function<const composer::IntegerPlan*(const graph::Node&)> integer_plan;
  // A fused layer's composed float-scale plan (qfuse::composed_plan). Unset:
  // a layer without an integer plan is refused.
  std::function<std::optional<composer::PostOpsPlan>(const graph::Node&)> composed_plan;
  // The nodes an f32 layer absorbed as post-ops (qfuse::absorbed_post_ops),
  // in order. Unset: an f32 layer that shows signs of having absorbed some
  // (its former output still names it as producer) is refused.
  std::function<std::vector<const graph::Node*>(const graph::Node&)> absorbed_post_ops;
  // The pre-quantized form only (what the export wrote before it wrote
  // ordinary operators): any other node, an int8 deconvolution, a layer
  // without an integer plan and an integer constant a float does not hold
  // are refused.
  bool prequantized_only = false;
};

// The model is checked with onnx::checker before it is written.
ExportReport export_prequantized(const graph::Graph& fused, const ExportSource& source,
                                 const std::string& path);

// The pre-quantized form only (ExportSource::prequantized_only), `plan_of`
// the integer plan a fused layer runs (null when it kept float scales).
ExportReport export_prequantized(
    const graph::Graph& fused,
    const std::function<const composer::IntegerPlan*(const graph::Node&)>& plan_of,
    const std::string& path);

}  // namespace qfuse::onnx
