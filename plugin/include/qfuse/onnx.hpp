#pragma once
// ONNX import (opset 10 to 17) into a qfuse::Model, from libqfuse_onnx (link
// qfuse::onnx). Quantization may be written as QuantizeLinear /
// DequantizeLinear pairs (QDQ), as QLinearConv / QLinearMatMul, or in the
// pre-quantized integer form (ConvInteger / MatMulInteger + rescaling).
//
//   qfuse::Model model = qfuse::import_onnx("resnet50_qdq.onnx");
//   qfuse::CompiledModel compiled = qfuse::compile(model);
//
// Errors: IoError (file unreadable), GraphError (malformed model: the message
// names the node and the problem), UnsupportedError (an operator, attribute or
// type qfuse does not import).

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "qfuse/export.hpp"
#include "qfuse/model.hpp"
#include "qfuse/qfuse.hpp"
#include "qfuse/tensor.hpp"

namespace qfuse {

struct OnnxOptions {
  // Concrete shapes for inputs with symbolic dimensions, by input name (a
  // dimension name bound here binds it in every other input too).
  std::map<std::string, Shape> input_shapes;
  // Inputs fixed at import, as if they were initializers: serialized
  // TensorProto bytes, by input name.
  std::map<std::string, std::string> constant_inputs;
  // Where initializers stored as external data are read from (locations are
  // relative to it and may not leave it). import_onnx: the model file's
  // directory when empty; import_onnx_bytes: required for such models.
  std::string external_data_dir;
};

// `path`: an .onnx file (external data is read relative to its directory).
QFUSE_API Model import_onnx(const std::string& path, const OnnxOptions& options = {});
// import_onnx, then compile, through the compiled-model cache when
// compile_options.cache_dir (or QFUSE_CACHE_DIR) names one: a file compiled
// before with the same bytes (external data included) and options is mapped
// from its entry, without importing it again (CompileOptions::cache_dir).
QFUSE_API CompiledModel compile_onnx(const std::string& path, const OnnxOptions& options = {},
                                     const CompileOptions& compile_options = {});
// `bytes`: a serialized ModelProto; `origin` names it in error messages.
QFUSE_API Model import_onnx_bytes(std::string_view bytes, const OnnxOptions& options = {},
                                  std::string_view origin = "model");

// A graph input as the file declares it (before shapes are bound): -1 where
// a dimension is symbolic, with its name in dim_params.
struct OnnxInput {
  std::string name;
  std::vector<std::int64_t> dims;
  std::vector<std::string> dim_params;
  std::string type;  // ONNX element type name ("FLOAT", "UINT8", ...)
};
QFUSE_API std::vector<OnnxInput> list_onnx_inputs(const std::string& path);

}  // namespace qfuse
