// The public ONNX entry points (qfuse/onnx.hpp) over the importer.
#include "qfuse/onnx.hpp"

#include "graph/onnx/importer.hpp"
#include "graph/model_impl.hpp"

namespace qfuse {

namespace {

onnx::ImportOptions import_options(const OnnxOptions& o) {
  onnx::ImportOptions i;
  i.input_shapes = o.input_shapes;
  i.constant_inputs = o.constant_inputs;
  i.external_data_dir = o.external_data_dir;
  return i;
}

}  // namespace

Model import_onnx(const std::string& path, const OnnxOptions& options) {
  return make_model(onnx::import_file(path, import_options(options)));
}

Model import_onnx_bytes(std::string_view bytes, const OnnxOptions& options,
                        std::string_view origin) {
  return make_model(onnx::import_bytes(bytes, import_options(options), origin));
}

std::vector<OnnxInput> list_onnx_inputs(const std::string& path) {
  std::vector<OnnxInput> out;
  for (onnx::InputInfo& i : onnx::list_inputs(path)) {
    out.push_back({std::move(i.name), std::move(i.dims), std::move(i.dim_params),
                   onnx::onnx_type_name(i.onnx_type)});
  }
  return out;
}

}  // namespace qfuse
