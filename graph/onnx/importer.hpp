#pragma once
// ONNX frontend: reads an .onnx model (opset 10 to 17) into the qfuse IR.
//
// The import is exact: the imported graph, compiled unfused, computes what
// ONNX specifies, with one documented exception (Q -> DQ pairs, below).
//
// Tensors. Every ONNX tensor becomes one IR value. Tensors whose values are
// known at import (initializers, Constant, and everything computed from them
// and from bound shapes: Shape, Size, Gather, Slice, Concat, Unsqueeze,
// Squeeze, Reshape, Cast, ConstantOfShape, Range and integer arithmetic) are
// folded and materialized as constants only where an IR node needs them.
// Integer tensors (u8, s8, s32) that feed arithmetic are carried as f32 values
// holding the same integers: the importer tracks each integer tensor's range
// and rejects arithmetic that could wrap around in ONNX (UnsupportedError);
// a range beyond 2^24, where f32 stops being exact, is logged at warn level.
// A carried tensor gets its ONNX type back (Convert) at graph outputs and
// where an integer type is needed.
//
// Quantization (qmin, qmax = 0, 255 for u8 and -128, 127 for s8; L = qmax - qmin + 1):
// - QuantizeLinear(x, s, zp): y = saturate(round_half_even(x / s) + zp), the
//   division in f32, exactly as ONNX:
//     Convert<u8|s8>(Add(Round(Divide(x, s)), zp))
//   Divide is left out when every s is 1, Round and Add when every zp is 0
//   (Convert itself rounds half to even and saturates). The pre-quantized
//   layers' final QuantizeLinear(scale 1, zp 0) is therefore one Convert.
// - DequantizeLinear(q, s, zp): y = (q - zp) * s in f32, exactly as ONNX:
//     Multiply(Subtract(Convert<f32>(q), zp), s)     (Subtract only if zp != 0)
//   On a constant q (weights) the constant stays u8/s8, so a pass can take it
//   as int8 weights with per-channel scales s.
// - QuantizeLinear is one Quantize and DequantizeLinear of a run-time tensor
//   one Dequantize, each with ONNX's arithmetic (the division in f32, rounding
//   half to even before the zero point is added; (q - zp) * s in f32), per
//   tensor or along one axis. A Q -> DQ pair is the two ops, as written.
// - ConvInteger / MatMulInteger: Conv / MatMul (FullyConnected when the right
//   operand is a 2-D constant) in f32 on Convert<f32>(q) - zp, giving the int32
//   result as carried f32. Exact while every partial sum stays below 2^24: the
//   importer bounds |sum| by sum_k |w - w_zp| * max|x - x_zp| (weights known)
//   or K * max|w - w_zp| * max|x - x_zp| and warns when the bound reaches 2^24.
//   The int8 primitives of the fused path accumulate in s32 and are exact.
// - QLinearConv / QLinearMatMul: the integer product as above, plus the int32
//   bias, times fl32(fl32(x_s * w_s) / y_s) per output channel, then rounded,
//   shifted by y_zp and saturated like QuantizeLinear.
// - ONNX Runtime's QOperator format (com.microsoft; import_qoperator.cpp):
//   QLinearAdd, QLinearMul, QLinearSigmoid, QLinearLeakyRelu, QLinearConcat,
//   QLinearAveragePool, QLinearGlobalAveragePool (channels_last 0 or 1) and
//   QLinearSoftmax are Dequantize of each input -> the f32 op -> Quantize,
//   the ops a QDQ model imports to (QLinearSoftmax's Quantize has scale
//   1 / floor(1 / y_scale), as its kernel multiplies by floor(1 / y_scale)).
//   QGemm is a layer like QLinearMatMul (int32 bias C; alpha; transB; an f32
//   output without y_scale / y_zero_point). Their scales and zero points are
//   constants, one per tensor (QGemm's B: one per output column too).
//   MaxPool, Flatten, Reshape, Transpose and Concat on u8 / s8 codes run on
//   the codes. Unfused, each computes ONNX's DequantizeLinear / QuantizeLinear
//   arithmetic, which is ONNX Runtime's kernel exactly for QLinearAdd (AVX2),
//   QLinearLeakyRelu, QLinearConcat and QGemm, and within one code of it for
//   the others (graph/onnx/README.md says where and why).
//
// Symbolic dimensions are bound before import: from ImportOptions::input_shapes
// (a whole shape per input) and, by name, for every other input that uses the
// same dim_param. An input whose shape stays unresolved is a GraphError naming
// it. Rank-0 graph inputs are not supported.
//
// Errors: UnsupportedError for an operator, attribute, attribute value or type
// qfuse does not import ("import <Op> node '<name>': unsupported attribute
// 'x' ..."); GraphError for a malformed model; IoError for unreadable files.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "graph/graph.hpp"

namespace qfuse::onnx {

struct ImportOptions {
  // Concrete shapes of graph inputs, by input name.
  std::map<std::string, Shape> input_shapes;
  // Graph inputs fixed at import, as if they were initializers: serialized
  // TensorProto bytes (any element type), by input name. qfuse needs scales,
  // zero points, shapes, axes and clip bounds to be constants; a model that
  // feeds them as inputs imports once they are fixed here.
  std::map<std::string, std::string> constant_inputs;
  // Where initializers stored as external data are read from (their
  // locations are relative to it and may not leave it). import_file: the
  // model file's directory when empty.
  std::filesystem::path external_data_dir;
  // Called as each phase ends: "read" (the file parsed), "decode" (its nodes
  // and initializers imported into the graph). For a caller's timings.
  std::function<void(const char* phase)> on_phase;
  // Called with each external data file an initializer is read from (once
  // per initializer): the compiled-model cache checks their bytes.
  std::function<void(const std::filesystem::path& file)> on_external_file;
};

graph::Graph import_file(const std::filesystem::path& path, const ImportOptions& options = {});
// `origin` names the model in error messages.
graph::Graph import_bytes(std::string_view bytes, const ImportOptions& options = {},
                          std::string_view origin = "model");

// A graph input as the model declares it (initializers excluded).
struct InputInfo {
  std::string name;
  std::vector<std::int64_t> dims;        // -1 where symbolic or unknown
  std::vector<std::string> dim_params;   // symbolic names ("" where static)
  int onnx_type = 0;                     // TensorProto element type
};
std::vector<InputInfo> list_inputs(const std::filesystem::path& path);

// A serialized TensorProto (the test data's input_N.pb / output_N.pb).
// Throws UnsupportedError for element types other than f32, u8, s8, s32.
struct NamedTensor {
  std::string name;
  Tensor tensor;
};
NamedTensor read_tensor_file(const std::filesystem::path& path);

// The ONNX name of a TensorProto element type ("FLOAT", "INT64", ...).
std::string onnx_type_name(int onnx_type);

}  // namespace qfuse::onnx
