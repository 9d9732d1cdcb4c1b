#pragma once
// Model files as the compiled-model cache sees them (plugin/model_cache.hpp):
// the files an ONNX model or an OpenVINO IR is read from, the import options
// as text, and the import itself. Part of the file frontends' library
// (libqfuse_onnx); compile_onnx and compile_openvino, and the CLI, compile
// through them, so that they share cache entries.

#include <functional>
#include <string>

#include "graph/onnx/importer.hpp"
#include "graph/openvino/importer.hpp"
#include "plugin/model_cache.hpp"

namespace qfuse::plugin {

ModelFiles onnx_model_files(const std::string& path, const onnx::ImportOptions& options);
ModelFiles openvino_model_files(const std::string& xml_path, const openvino::ImportOptions& options);

}  // namespace qfuse::plugin
