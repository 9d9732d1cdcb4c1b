// The C API's file imports, ONNX and OpenVINO IR (qfuse/qfuse_c.h). Compiled
// into libqfuse_onnx (plugin/CMakeLists.txt), beside the readers they call.
#include <map>
#include <string>

#include "plugin/c_api_internal.hpp"
#include "qfuse/onnx.hpp"
#include "qfuse/openvino.hpp"

using qfuse::c_api::fail;
using qfuse::c_api::guarded;
using qfuse::c_api::null_argument;

namespace {

std::map<std::string, qfuse::Shape> input_shapes(const char* function,
                                                 const qfuse_input_shape* shapes, size_t count) {
  if (shapes == nullptr && count > 0) {
    throw std::invalid_argument(std::string(function) + ": shapes is NULL with shape_count " +
                                std::to_string(count));
  }
  std::map<std::string, qfuse::Shape> out;
  for (size_t i = 0; i < count; ++i) {
    const qfuse_input_shape& s = shapes[i];
    if (s.name == nullptr || (s.rank > 0 && s.dims == nullptr)) {
      throw std::invalid_argument(std::string(function) + ": shapes[" + std::to_string(i) +
                                  "] has a NULL name or dims");
    }
    out[s.name] = qfuse::Shape(s.dims, s.dims + s.rank);
  }
  return out;
}

qfuse::OnnxOptions onnx_options(const char* function, const qfuse_input_shape* shapes,
                                size_t count) {
  qfuse::OnnxOptions options;
  options.input_shapes = input_shapes(function, shapes, count);
  return options;
}

}  // namespace

extern "C" qfuse_status qfuse_import_onnx_file(const char* path, const qfuse_input_shape* shapes,
                                    size_t shape_count, qfuse_model** model) {
  if (path == nullptr) return null_argument("qfuse_import_onnx_file", "path");
  if (model == nullptr) return null_argument("qfuse_import_onnx_file", "model");
  return guarded([&] {
    const qfuse::OnnxOptions options = onnx_options("qfuse_import_onnx_file", shapes, shape_count);
    *model = new qfuse_model{qfuse::import_onnx(path, options)};
  });
}

extern "C" qfuse_status qfuse_import_onnx_memory(const void* data, size_t size, const qfuse_input_shape* shapes,
                                      size_t shape_count, qfuse_model** model) {
  if (data == nullptr && size > 0) return null_argument("qfuse_import_onnx_memory", "data");
  if (model == nullptr) return null_argument("qfuse_import_onnx_memory", "model");
  return guarded([&] {
    const qfuse::OnnxOptions options =
        onnx_options("qfuse_import_onnx_memory", shapes, shape_count);
    const std::string_view bytes(static_cast<const char*>(data), size);
    *model = new qfuse_model{qfuse::import_onnx_bytes(bytes, options, "model in memory")};
  });
}


extern "C" qfuse_status qfuse_import_openvino_file(const char* xml_path,
                                                  const qfuse_input_shape* shapes,
                                                  size_t shape_count, qfuse_model** model) {
  if (xml_path == nullptr) return null_argument("qfuse_import_openvino_file", "xml_path");
  if (model == nullptr) return null_argument("qfuse_import_openvino_file", "model");
  return guarded([&] {
    qfuse::OpenVinoOptions options;
    options.input_shapes = input_shapes("qfuse_import_openvino_file", shapes, shape_count);
    *model = new qfuse_model{qfuse::import_openvino(xml_path, options)};
  });
}

extern "C" qfuse_status qfuse_compile_onnx_file(const char* path, const qfuse_input_shape* shapes,
                                               size_t shape_count,
                                               const qfuse_compile_options* options,
                                               qfuse_compiled_model** compiled) {
  if (path == nullptr) return null_argument("qfuse_compile_onnx_file", "path");
  if (compiled == nullptr) return null_argument("qfuse_compile_onnx_file", "compiled");
  qfuse::CompileOptions o;
  const qfuse_status read = qfuse::c_api::read_compile_options("qfuse_compile_onnx_file", options, o);
  if (read != QFUSE_OK) return read;
  return guarded([&] {
    const qfuse::OnnxOptions i = onnx_options("qfuse_compile_onnx_file", shapes, shape_count);
    *compiled = qfuse::c_api::new_compiled_model(qfuse::compile_onnx(path, i, o));
  });
}

extern "C" qfuse_status qfuse_compile_openvino_file(const char* xml_path,
                                                   const qfuse_input_shape* shapes,
                                                   size_t shape_count,
                                                   const qfuse_compile_options* options,
                                                   qfuse_compiled_model** compiled) {
  if (xml_path == nullptr) return null_argument("qfuse_compile_openvino_file", "xml_path");
  if (compiled == nullptr) return null_argument("qfuse_compile_openvino_file", "compiled");
  qfuse::CompileOptions o;
  const qfuse_status read =
      qfuse::c_api::read_compile_options("qfuse_compile_openvino_file", options, o);
  if (read != QFUSE_OK) return read;
  return guarded([&] {
    qfuse::OpenVinoOptions i;
    i.input_shapes = input_shapes("qfuse_compile_openvino_file", shapes, shape_count);
    *compiled = qfuse::c_api::new_compiled_model(qfuse::compile_openvino(xml_path, i, o));
  });
}
