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
// Integers stored as float are exact below 2^24 (larger ones only with
// enough trailing zero bits): the exporter refuses any M0, residual
// multiplier R or offset K that a float does not hold exactly (with
// CompileOptions::integer_eta = 2^-20, M0 has at most 21 bits; R = C * 2^N
// of an f32 residual scale C is exact for any N). The accumulators
// ConvInteger's Cast converts are exact while |acc + bias| < 2^24: the
// exporter bounds that from the weights (255 * sum |w| + |bias|) and warns
// per layer when the bound passes 2^24. The product
// (acc + bias) * M0 may pass 2^24 and round in float (relative 2^-24): where
// the exact value lies that close to a rounding tie, a float runtime can round
// to the neighbouring code; the integer-only mode cannot.
//
// Deconvolutions (ONNX has no integer ConvTranspose), layers that kept float
// scales in the integer-only mode, and other f32 or int8 operators are
// refused with an UnsupportedError naming the node.

#include <functional>
#include <string>

#include "composer/integer_plan.hpp"
#include "graph/graph.hpp"

namespace qfuse::onnx {

struct ExportReport {
  int layers = 0;                // fused layers written as integer patterns
  int inexact_accumulators = 0;  // layers whose accumulator bound passes 2^24
};

// `plan_of(node)`: the integer plan a fused layer runs (null when it kept
// float scales). The model is checked with onnx::checker before it is written.
ExportReport export_prequantized(
    const graph::Graph& fused,
    const std::function<const composer::IntegerPlan*(const graph::Node&)>& plan_of,
    const std::string& path);

}  // namespace qfuse::onnx
