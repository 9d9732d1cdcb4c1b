// The public OpenVINO IR entry points (qfuse/openvino.hpp) over the reader.
#include "qfuse/openvino.hpp"

#include "graph/model_impl.hpp"
#include "graph/openvino/importer.hpp"

namespace qfuse {

Model import_openvino(const std::string& xml_path, const OpenVinoOptions& options) {
  return make_model(openvino::import_file(
      xml_path, {.input_shapes = options.input_shapes, .bin_path = options.bin_path}));
}

std::vector<OpenVinoInput> list_openvino_inputs(const std::string& xml_path) {
  std::vector<OpenVinoInput> out;
  for (openvino::InputInfo& i : openvino::list_inputs(xml_path)) {
    out.push_back({std::move(i.name), std::move(i.dims), std::move(i.element_type)});
  }
  return out;
}

}  // namespace qfuse
