#pragma once
// OpenVINO IR import (IR v10 and v11: model.xml + model.bin, as OpenVINO's
// serializer, the model converter and NNCF / POT write them) into a
// qfuse::Model, from libqfuse_onnx (link qfuse::onnx), qfuse's library of
// file frontends. Quantization is FakeQuantize (levels 256 on activations,
// levels 255 on f32 weights) or compressed weights (i8 / u8 Const -> Convert
// -> [Subtract] -> Multiply); both become int8 layers when compiled.
//
//   qfuse::Model model = qfuse::import_openvino("model.xml");  // reads model.bin
//   qfuse::CompiledModel compiled = qfuse::compile(model);
//
// Errors: IoError (a file unreadable, the .bin missing), GraphError
// (malformed model: the message names the layer by type, name and id),
// UnsupportedError (an operator, version, attribute or element type qfuse
// does not import).

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "qfuse/export.hpp"
#include "qfuse/model.hpp"
#include "qfuse/qfuse.hpp"
#include "qfuse/tensor.hpp"

namespace qfuse {

struct OpenVinoOptions {
  // Concrete shapes for inputs with dynamic dimensions (-1), by input name.
  std::map<std::string, Shape> input_shapes;
  // The weights file; empty: the .xml's path with the extension .bin.
  std::string bin_path;
};

QFUSE_API Model import_openvino(const std::string& xml_path, const OpenVinoOptions& options = {});
// import_openvino, then compile, through the compiled-model cache when
// compile_options.cache_dir (or QFUSE_CACHE_DIR) names one (the entry is
// keyed by the .xml's and the .bin's bytes; CompileOptions::cache_dir).
QFUSE_API CompiledModel compile_openvino(const std::string& xml_path,
                                         const OpenVinoOptions& options = {},
                                         const CompileOptions& compile_options = {});

// A Parameter as the file declares it: -1 where a dimension is dynamic.
struct OpenVinoInput {
  std::string name;
  std::vector<std::int64_t> dims;
  std::string element_type;  // OpenVINO's name ("f32", "u8", ...)
};
QFUSE_API std::vector<OpenVinoInput> list_openvino_inputs(const std::string& xml_path);

}  // namespace qfuse
