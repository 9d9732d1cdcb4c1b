// compile_onnx and compile_openvino (qfuse/onnx.hpp, qfuse/openvino.hpp):
// import and compile a model file, through the compiled-model cache.

#include "plugin/model_files.hpp"

#include <sstream>

#include <xxhash.h>

#include "qfuse/onnx.hpp"
#include "qfuse/openvino.hpp"

namespace qfuse {

namespace plugin {

ModelFiles onnx_model_files(const std::string& path, const onnx::ImportOptions& options) {
  // The import options as text, for the entry's key (on_phase only reports).
  std::ostringstream key;
  key << "onnx";
  for (const auto& [name, shape] : options.input_shapes) {
    key << ", shape " << name << "=" << to_string(shape);
  }
  for (const auto& [name, bytes] : options.constant_inputs) {
    key << ", constant " << name << " (" << bytes.size() << " bytes, XXH3 "
        << XXH3_64bits(bytes.data(), bytes.size()) << ")";
  }
  key << ", external data dir '" << options.external_data_dir.string() << "'";
  ModelFiles files;
  files.files = {path};
  files.import_key = key.str();
  files.import = [path, options](const std::function<void(const std::filesystem::path&)>& read_file) {
    onnx::ImportOptions with_files = options;
    with_files.on_external_file = read_file;
    return onnx::import_file(path, with_files);
  };
  return files;
}

ModelFiles openvino_model_files(const std::string& xml_path, const openvino::ImportOptions& options) {
  std::filesystem::path bin = options.bin_path;
  if (bin.empty()) bin = std::filesystem::path(xml_path).replace_extension(".bin");
  std::string key = "openvino";
  for (const auto& [name, shape] : options.input_shapes) key += ", shape " + name + "=" + to_string(shape);
  ModelFiles files;
  files.files = {xml_path};
  std::error_code ec;
  if (std::filesystem::exists(bin, ec)) files.files.push_back(bin);
  files.import_key = key;
  files.import = [xml_path, options](const std::function<void(const std::filesystem::path&)>&) {
    return openvino::import_file(xml_path, options);
  };
  return files;
}

}  // namespace plugin

CompiledModel compile_onnx(const std::string& path, const OnnxOptions& options,
                           const CompileOptions& compile_options) {
  onnx::ImportOptions i;
  i.input_shapes = options.input_shapes;
  i.constant_inputs = options.constant_inputs;
  i.external_data_dir = options.external_data_dir;
  return plugin::compile_files(plugin::onnx_model_files(path, i), compile_options);
}

CompiledModel compile_openvino(const std::string& xml_path, const OpenVinoOptions& options,
                               const CompileOptions& compile_options) {
  return plugin::compile_files(
      plugin::openvino_model_files(
          xml_path, {.input_shapes = options.input_shapes, .bin_path = options.bin_path}),
      compile_options);
}

}  // namespace qfuse
