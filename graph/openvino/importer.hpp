#pragma once
// OpenVINO IR frontend: reads an IR v10 / v11 model (model.xml + model.bin,
// as OpenVINO's serializer writes them) into the qfuse IR.
//
// The .xml is read with pugixml; the .bin is mapped read-only and each Const
// is read in place, copied once into the IR constant that keeps it (the
// graph outlives the mapping). Constants computed at import (ShapeOf chains,
// Convert of an f16 Const, shape arithmetic) are folded; the compressed
// weights' form, i8 / u8 Const -> Convert(f32) [-> Subtract(zero point)] ->
// Multiply(scale), stays that chain on the 8-bit constant, as the ONNX
// frontend writes DequantizeLinear of an initializer, so the passes take it
// as int8 weights. FakeQuantize is qfuse's FakeQuantize (the seed's formula;
// OpenVINO's opset1 FakeQuantize defines the same).
//
// Dynamic dimensions (-1) of a Parameter are bound from
// ImportOptions::input_shapes (the whole shape, by input name); an input
// left dynamic is a GraphError naming it.
//
// Names: a Parameter's input name is its output port's first tensor name
// (v11), else the layer's name. A Result's output name is the first tensor
// name of the port it reads, else the producing layer's name (with
// ".<port index>" when that layer has several outputs), as OpenVINO names
// v10 outputs.
//
// Errors: GraphError for a malformed model (the message names the layer:
// type, name and id), UnsupportedError for an operator, version, attribute
// or element type qfuse does not read, IoError for files that cannot be
// read. README.md lists the operators and how each maps.

#include <cstddef>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "graph/graph.hpp"

namespace qfuse::openvino {

struct ImportOptions {
  // Concrete shapes of inputs with dynamic dimensions, by input name.
  std::map<std::string, Shape> input_shapes;
  // The weights file; empty: the .xml's path with the extension .bin.
  std::filesystem::path bin_path;
};

graph::Graph import_file(const std::filesystem::path& xml_path, const ImportOptions& options = {});
// The .xml text and the .bin bytes (which need to live only during the
// call); `origin` names the model in error messages.
graph::Graph import_buffers(std::string_view xml, std::span<const std::byte> bin,
                            const ImportOptions& options = {}, std::string_view origin = "model");

// A Parameter as the file declares it (-1 where dynamic).
struct InputInfo {
  std::string name;
  std::vector<std::int64_t> dims;
  std::string element_type;  // OpenVINO's name: "f32", "u8", ...
};
std::vector<InputInfo> list_inputs(const std::filesystem::path& xml_path);

}  // namespace qfuse::openvino
