// The OpenVINO IR reader: models written here as OpenVINO's serializer
// writes them (ports numbered inputs first, edges by layer and port id,
// Const data at offsets in the .bin), imported from memory, checked for
// structure, run unfused and fused; and the malformed forms, each an error
// naming the layer.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "graph/openvino/importer.hpp"
#include "plugin/api_internal.hpp"
#include "qfuse/error.hpp"
#include "qfuse/openvino.hpp"

namespace qfuse::openvino {
namespace {

// A network written out as IR XML text and .bin bytes.
class Ir {
 public:
  struct Out {
    int layer;
    int port;
    Shape shape;
    std::string precision = "FP32";
  };

  explicit Ir(int version = 11) : version_(version) {}

  Out parameter(const std::string& name, const Shape& shape, const std::string& dims = {}) {
    std::string d = dims;
    if (d.empty()) {
      for (std::size_t i = 0; i < shape.size(); ++i) {
        if (i > 0) d += ',';
        d += std::to_string(shape[i]);
      }
    }
    return layer("Parameter", "opset1", name, "shape=\"" + d + "\" element_type=\"f32\"", {},
                 {shape}, {"FP32"}, version_ >= 11 ? name : "")[0];
  }
  template <class T>
  Out constant(const std::vector<T>& v, const Shape& shape, const std::string& type) {
    const std::size_t offset = bin.size();
    bin.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
    std::string s;
    for (std::size_t i = 0; i < shape.size(); ++i) {
      if (i > 0) s += ", ";
      s += std::to_string(shape[i]);
    }
    static const std::map<std::string, std::string> kPrecision = {
        {"f32", "FP32"}, {"i8", "I8"}, {"u8", "U8"}, {"i64", "I64"}, {"f16", "FP16"}, {"i32", "I32"}};
    return layer("Const", "opset1", "", "element_type=\"" + type + "\" shape=\"" + s +
                     "\" offset=\"" + std::to_string(offset) + "\" size=\"" +
                     std::to_string(v.size() * sizeof(T)) + "\"",
                 {}, {shape}, {kPrecision.at(type)})[0];
  }
  Out f32(const std::vector<float>& v, const Shape& shape) { return constant(v, shape, "f32"); }
  Out i64(const std::vector<std::int64_t>& v) {
    return constant(v, {static_cast<std::int64_t>(v.size())}, "i64");
  }

  std::vector<Out> layer(const std::string& type, const std::string& version,
                         const std::string& name, const std::string& data,
                         const std::vector<Out>& inputs, const std::vector<Shape>& outputs,
                         std::vector<std::string> precisions = {}, const std::string& names = {}) {
    const int id = next_++;
    std::string x = "<layer id=\"" + std::to_string(id) + "\" name=\"" +
                    (name.empty() ? type + std::to_string(id) : name) + "\" type=\"" + type +
                    "\" version=\"" + version + "\">\n";
    if (!data.empty()) x += "<data " + data + " />\n";
    int port = 0;
    if (!inputs.empty()) {
      x += "<input>\n";
      for (const Out& in : inputs) {
        x += "<port id=\"" + std::to_string(port) + "\" precision=\"" + in.precision + "\">" +
             dims(in.shape) + "</port>\n";
        edges += "<edge from-layer=\"" + std::to_string(in.layer) + "\" from-port=\"" +
                 std::to_string(in.port) + "\" to-layer=\"" + std::to_string(id) +
                 "\" to-port=\"" + std::to_string(port) + "\" />\n";
        ++port;
      }
      x += "</input>\n";
    }
    std::vector<Out> outs;
    if (!outputs.empty()) {
      x += "<output>\n";
      for (std::size_t k = 0; k < outputs.size(); ++k) {
        const std::string p = k < precisions.size() ? precisions[k] : "FP32";
        x += "<port id=\"" + std::to_string(port) + "\" precision=\"" + p + "\"" +
             (names.empty() ? "" : " names=\"" + names + "\"") + ">" + dims(outputs[k]) +
             "</port>\n";
        outs.push_back({id, port, outputs[k], p});
        ++port;
      }
      x += "</output>\n";
    }
    layers += x + "</layer>\n";
    return outs;
  }
  Out op(const std::string& type, const std::vector<Out>& inputs, const Shape& out,
         const std::string& data = {}, const std::string& version = "opset1") {
    return layer(type, version, "", data, inputs, {out})[0];
  }
  Out fq(const Out& x, float lo, float hi, int levels = 256) {
    const Out l = f32({lo}, {}), h = f32({hi}, {});
    return op("FakeQuantize", {x, l, h, l, h}, x.shape,
              "levels=\"" + std::to_string(levels) + "\" auto_broadcast=\"numpy\"");
  }
  void result(const Out& x) { layer("Result", "opset1", "", "", {x}, {}); }

  std::string xml() const {
    return "<?xml version=\"1.0\"?>\n<net name=\"test\" version=\"" + std::to_string(version_) +
           "\">\n<layers>\n" + layers + "</layers>\n<edges>\n" + edges +
           "</edges>\n<rt_info><Runtime_version value=\"2023.3.0\" /></rt_info>\n</net>\n";
  }
  graph::Graph import(const ImportOptions& options = {}) const {
    const std::string x = xml();
    return import_buffers(x, std::as_bytes(std::span(bin.data(), bin.size())), options, "test");
  }

  std::string bin;
  std::string layers, edges;

 private:
  static std::string dims(const Shape& s) {
    std::string d;
    for (std::int64_t v : s) d += "<dim>" + std::to_string(v) + "</dim>";
    return d;
  }
  int version_;
  int next_ = 0;
};

const std::string kConvAttrs =
    "strides=\"1, 1\" dilations=\"1, 1\" pads_begin=\"1, 1\" pads_end=\"1, 1\" auto_pad=\"explicit\"";

std::size_t count(const graph::Graph& g, graph::OpKind kind) {
  std::size_t n = 0;
  for (graph::NodeId id : g.topological_order()) n += g.node(id).kind == kind;
  return n;
}

Tensor run(const graph::Graph& g, bool fuse, const Tensor& x) {
  const CompiledModel m = compile(g, {.fuse = fuse});
  InferRequest r = m.create_infer_request();
  r.set_input(m.input_names().at(0), x);
  r.infer();
  return r.output(m.output_names().at(0));
}

Tensor ramp(const Shape& s) {
  Tensor t(ElementType::f32, s);
  auto d = t.data<float>();
  for (std::size_t i = 0; i < d.size(); ++i) d[i] = std::sin(0.37f * static_cast<float>(i));
  return t;
}

// FakeQuantize(256) -> Convolution(i8 Const -> Convert -> Multiply(scale[oc]))
// -> Add(bias) -> ReLU -> FakeQuantize(256): one int8 convolution, equal to
// the unfused graph within one step of the output grid.
Ir conv_block(int version = 11) {
  Ir ir(version);
  // NNCF's signed activation range: zero on a level.
  const auto x = ir.fq(ir.parameter("input", {1, 4, 6, 6}), -128.0f / 127.0f, 1.0f);
  std::vector<std::int8_t> q(8 * 4 * 9);
  for (std::size_t i = 0; i < q.size(); ++i) q[i] = static_cast<std::int8_t>(int(i * 37 % 255) - 127);
  const auto codes = ir.constant(q, {8, 4, 3, 3}, "i8");
  const auto wf = ir.op("Convert", {codes}, {8, 4, 3, 3}, "destination_type=\"f32\"");
  std::vector<float> scale(8);
  for (int c = 0; c < 8; ++c) scale[static_cast<std::size_t>(c)] = 0.002f * static_cast<float>(c + 1);
  const auto w = ir.op("Multiply", {wf, ir.f32(scale, {8, 1, 1, 1})}, {8, 4, 3, 3},
                       "auto_broadcast=\"numpy\"");
  auto y = ir.op("Convolution", {x, w}, {1, 8, 6, 6}, kConvAttrs);
  y = ir.op("Add", {y, ir.f32(std::vector<float>(8, 0.05f), {1, 8, 1, 1})}, {1, 8, 6, 6},
            "auto_broadcast=\"numpy\"");
  y = ir.op("ReLU", {y}, {1, 8, 6, 6});
  ir.result(ir.fq(y, 0.0f, 2.0f));
  return ir;
}

TEST(OpenVinoImport, CompressedWeightsConvolutionRunsAsOneInt8Layer) {
  const graph::Graph g = conv_block().import();
  EXPECT_EQ(count(g, graph::OpKind::Convolution), 1u);
  const CompiledModel fused = compile(g, {.fuse = true});
  int int8 = 0;
  for (const LayerInfo& l : fused.layers()) {
    int8 += l.op.find("Convolution") != std::string::npos && l.precision == "int8";
  }
  EXPECT_EQ(int8, 1);
  const Tensor x = ramp({1, 4, 6, 6});
  const Tensor a = run(g, true, x), b = run(g, false, x);
  for (std::int64_t i = 0; i < a.size(); ++i) {
    EXPECT_LE(std::abs(a.as_float(i) - b.as_float(i)), 2.0f / 255.0f + 1e-6f) << i;
  }
}

TEST(OpenVinoImport, V10NamesInputsAndOutputsAfterLayers) {
  const graph::Graph v10 = conv_block(10).import();
  EXPECT_EQ(v10.value(v10.inputs().at(0)).name, "input");
  // The Result reads the last FakeQuantize (layer 14): its name names the output.
  EXPECT_EQ(v10.value(v10.outputs().at(0)).name, "FakeQuantize14");
}

TEST(OpenVinoImport, ShapeOfChainFoldsIntoOneReshape) {
  Ir ir;
  const auto x = ir.parameter("x", {2, 3, 4});
  const auto shape = ir.op("ShapeOf", {x}, {3}, "output_type=\"i64\"", "opset3");
  const auto first = ir.op("Gather", {shape, ir.i64({0}), ir.constant(std::vector<std::int64_t>{0}, {}, "i64")},
                           {1}, "batch_dims=\"0\"", "opset8");
  const auto target = ir.op("Concat", {first, ir.i64({-1})}, {2}, "axis=\"0\"");
  ir.result(ir.op("Reshape", {x, target}, {2, 12}, "special_zero=\"false\""));
  const graph::Graph g = ir.import();
  EXPECT_EQ(count(g, graph::OpKind::Reshape), 1u);
  EXPECT_EQ(count(g, graph::OpKind::Gather), 0u);
  EXPECT_EQ(g.value(g.outputs()[0]).shape, (Shape{2, 12}));
}

TEST(OpenVinoImport, DynamicInputIsBoundByItsGivenShape) {
  Ir ir;
  const auto x = ir.parameter("x", {-1, 3}, "?,3");
  ir.result(ir.op("ReLU", {x}, {-1, 3}));
  EXPECT_THROW(ir.import(), GraphError);
  const graph::Graph g = ir.import({.input_shapes = {{"x", {5, 3}}}});
  EXPECT_EQ(g.value(g.outputs()[0]).shape, (Shape{5, 3}));
  EXPECT_THROW(ir.import({.input_shapes = {{"x", {5, 4}}}}), GraphError);
  EXPECT_THROW(ir.import({.input_shapes = {{"y", {5, 3}}}}), GraphError);
}

TEST(OpenVinoImport, MvnOverTheLastAxisIsLayerNorm) {
  Ir ir;
  const auto x = ir.parameter("x", {1, 4, 8});
  ir.result(ir.op("MVN", {x, ir.i64({-1})}, {1, 4, 8},
                  "eps=\"9.9999997473787516e-06\" normalize_variance=\"true\" eps_mode=\"inside_sqrt\"",
                  "opset6"));
  const graph::Graph g = ir.import();
  EXPECT_EQ(count(g, graph::OpKind::LayerNorm), 1u);
  const Tensor x_in = ramp({1, 4, 8});
  const Tensor y = run(g, false, x_in);
  for (int row = 0; row < 4; ++row) {
    double mean = 0, var = 0;
    for (int i = 0; i < 8; ++i) mean += x_in.as_float(row * 8 + i) / 8.0;
    for (int i = 0; i < 8; ++i) var += std::pow(x_in.as_float(row * 8 + i) - mean, 2) / 8.0;
    for (int i = 0; i < 8; ++i) {
      EXPECT_NEAR(y.as_float(row * 8 + i), (x_in.as_float(row * 8 + i) - mean) / std::sqrt(var + 1e-5), 1e-5);
    }
  }
}

TEST(OpenVinoImport, NotImportedWhenMvnNormalizesOtherAxes) {
  Ir ir;
  const auto x = ir.parameter("x", {1, 4, 8});
  ir.result(ir.op("MVN", {x, ir.i64({1, 2})}, {1, 4, 8},
                  "eps=\"1e-05\" normalize_variance=\"true\" eps_mode=\"inside_sqrt\"", "opset6"));
  EXPECT_THROW(ir.import(), UnsupportedError);
}

// Activations and pools onto qfuse's ops with their attributes.
TEST(OpenVinoImport, ActivationsAndPoolsKeepTheirAttributes) {
  Ir ir;
  const auto x = ir.parameter("x", {1, 2, 4, 4});
  auto y = ir.op("Gelu", {x}, {1, 2, 4, 4}, "approximation_mode=\"TANH\"", "opset7");
  y = ir.op("Swish", {y, ir.f32({0.5f}, {})}, {1, 2, 4, 4}, "", "opset4");
  y = ir.op("Clamp", {y}, {1, 2, 4, 4}, "min=\"-1\" max=\"6\"");
  y = ir.op("AvgPool", {y}, {1, 2, 2, 2},
            "strides=\"2, 2\" pads_begin=\"0, 0\" pads_end=\"1, 1\" kernel=\"3, 3\" "
            "exclude-pad=\"true\" rounding_type=\"floor\" auto_pad=\"explicit\"");
  ir.result(ir.op("SoftMax", {y}, {1, 2, 2, 2}, "axis=\"1\""));
  const graph::Graph g = ir.import();
  for (graph::NodeId id : g.topological_order()) {
    const graph::Node& n = g.node(id);
    if (n.kind == graph::OpKind::Gelu) {
      EXPECT_EQ(n.attr<graph::GeluAttrs>().approximation, graph::GeluApproximation::tanh);
    } else if (n.kind == graph::OpKind::Swish) {
      EXPECT_EQ(n.attr<graph::AlphaAttrs>().alpha, 0.5f);
    } else if (n.kind == graph::OpKind::Clamp) {
      EXPECT_EQ(n.attr<graph::ClampAttrs>().lo, -1.0f);
      EXPECT_EQ(n.attr<graph::ClampAttrs>().hi, 6.0f);
    } else if (n.kind == graph::OpKind::AvgPool) {
      EXPECT_TRUE(n.attr<graph::PoolAttrs>().exclude_pad);
      EXPECT_EQ(n.attr<graph::PoolAttrs>().pads_end, (graph::Ints{1, 1}));
    } else if (n.kind == graph::OpKind::Softmax) {
      EXPECT_EQ(n.attr<graph::SoftmaxAttrs>().axis, 1);
    }
  }
  EXPECT_EQ(count(g, graph::OpKind::Gelu) + count(g, graph::OpKind::Swish) +
                count(g, graph::OpKind::Clamp) + count(g, graph::OpKind::AvgPool) +
                count(g, graph::OpKind::Softmax),
            5u);
}

// Interpolate opset4, nearest by sizes (asymmetric, floor): each output
// pixel repeats the input pixel it falls in.
TEST(OpenVinoImport, NearestInterpolateRepeatsPixels) {
  Ir ir;
  const auto x = ir.parameter("x", {1, 1, 2, 2});
  ir.result(ir.op("Interpolate", {x, ir.i64({4, 4}), ir.f32({2.0f, 2.0f}, {2}), ir.i64({2, 3})},
                  {1, 1, 4, 4},
                  "mode=\"nearest\" shape_calculation_mode=\"sizes\" "
                  "coordinate_transformation_mode=\"asymmetric\" nearest_mode=\"floor\" "
                  "antialias=\"false\" pads_begin=\"0, 0, 0, 0\" pads_end=\"0, 0, 0, 0\" "
                  "cube_coeff=\"-0.75\"",
                  "opset4"));
  const Tensor y = run(ir.import(), false, Tensor::from_vector<float>({1, 1, 2, 2}, {1, 2, 3, 4}));
  const float expected[] = {1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4};
  for (int i = 0; i < 16; ++i) EXPECT_EQ(y.as_float(i), expected[i]) << i;
}

TEST(OpenVinoImport, F16ConstantsAreConvertedExactly) {
  Ir ir;
  const auto x = ir.parameter("x", {1, 3});
  // 1.5, -2.0, 0.099976 (0x2E66) in f16
  const auto c = ir.constant(std::vector<std::uint16_t>{0x3E00, 0xC000, 0x2E66}, {1, 3}, "f16");
  const auto cf = ir.op("Convert", {c}, {1, 3}, "destination_type=\"f32\"");
  ir.result(ir.op("Multiply", {x, cf}, {1, 3}, "auto_broadcast=\"numpy\""));
  const Tensor y = run(ir.import(), false, Tensor::from_vector<float>({1, 3}, {1.0f, 1.0f, 1.0f}));
  EXPECT_EQ(y.as_float(0), 1.5f);
  EXPECT_EQ(y.as_float(1), -2.0f);
  EXPECT_EQ(y.as_float(2), 0.0999755859375f);
}

TEST(OpenVinoImport, MaxPoolWhoseIndicesAreReadIsRefused) {
  Ir ir;
  const auto x = ir.parameter("x", {1, 2, 4, 4});
  const auto p = ir.layer("MaxPool", "opset8", "pool",
                          "strides=\"2, 2\" dilations=\"1, 1\" pads_begin=\"0, 0\" pads_end=\"0, 0\" "
                          "kernel=\"2, 2\" rounding_type=\"floor\" auto_pad=\"explicit\" "
                          "index_element_type=\"i64\" axis=\"0\"",
                          {x}, {{1, 2, 2, 2}, {1, 2, 2, 2}}, {"FP32", "I64"});
  ir.result(p[0]);
  EXPECT_NO_THROW(ir.import());
  ir.result(p[1]);
  try {
    ir.import();
    FAIL() << "imported";
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("MaxPool layer 'pool'"), std::string::npos) << e.what();
  }
}

// --- malformed and unsupported files, each named --------------------------------

template <class E>
std::string error_of(const Ir& ir) {
  try {
    ir.import();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong exception: ") + e.what();
  }
  return "no error";
}

void expect_has(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << text;
}

TEST(OpenVinoImportErrors, ConstPastTheEndOfTheBinNamesTheLayer) {
  Ir ir = conv_block();
  ir.bin.resize(ir.bin.size() / 2);
  const std::string e = error_of<GraphError>(ir);
  expect_has(e, "Const layer");
  expect_has(e, "past the end of the .bin");
}

TEST(OpenVinoImportErrors, UnknownOpTypeAndVersionAreNamed) {
  Ir ir;
  const auto x = ir.parameter("x", {1, 3});
  ir.result(ir.layer("Erf", "opset1", "e", "", {x}, {{1, 3}})[0]);
  expect_has(error_of<UnsupportedError>(ir), "import Erf layer 'e' (id 1): operator type 'Erf'");
  Ir v;
  const auto y = v.parameter("x", {1, 3});
  v.result(v.layer("SoftMax", "opset42", "s", "axis=\"1\"", {y}, {{1, 3}})[0]);
  expect_has(error_of<UnsupportedError>(v), "version 'opset42' is not supported (expected opset1, opset8)");
}

TEST(OpenVinoImportErrors, EdgesToMissingLayersAndPortsAreNamed) {
  Ir ir = conv_block();
  ir.edges += "<edge from-layer=\"99\" from-port=\"0\" to-layer=\"1\" to-port=\"0\" />\n";
  expect_has(error_of<GraphError>(ir), "no layer has id 99");
  Ir p = conv_block();
  p.edges += "<edge from-layer=\"0\" from-port=\"7\" to-layer=\"1\" to-port=\"0\" />\n";
  expect_has(error_of<GraphError>(p), "has no output port 7");
  Ir twice = conv_block();
  twice.edges += "<edge from-layer=\"0\" from-port=\"0\" to-layer=\"5\" to-port=\"0\" />\n";
  expect_has(error_of<GraphError>(twice), "is fed by two edges");
}

TEST(OpenVinoImportErrors, CycleIsNamed) {
  Ir ir;
  const auto x = ir.parameter("x", {1, 3});
  const auto a = ir.op("Add", {x, Ir::Out{2, 1, {1, 3}}}, {1, 3}, "auto_broadcast=\"numpy\"");
  ir.op("ReLU", {a}, {1, 3});
  ir.result(a);
  expect_has(error_of<GraphError>(ir), "is on a cycle");
}

TEST(OpenVinoImportErrors, MalformedAndTruncatedXml) {
  Ir ir = conv_block();
  const std::string x = ir.xml();
  EXPECT_THROW(import_buffers(x.substr(0, x.size() / 2), {}, {}, "t"), GraphError);
  EXPECT_THROW(import_buffers("<net version=\"11\"><layers>", {}, {}, "t"), GraphError);
  EXPECT_THROW(import_buffers("<model/>", {}, {}, "t"), GraphError);
  EXPECT_THROW(import_buffers("<net version=\"7\"><layers/><edges/></net>", {}, {}, "t"),
               UnsupportedError);
}

TEST(OpenVinoImportErrors, FakeQuantizeLevelsAndInvertedLimits) {
  Ir ir;
  ir.result(ir.fq(ir.parameter("x", {1, 3}), -1.0f, 1.0f, 1));
  expect_has(error_of<GraphError>(ir), "levels must be in [2, 65536] (got 1)");
  Ir inv;
  inv.result(inv.fq(inv.parameter("x", {1, 3}), 1.0f, -1.0f));
  expect_has(error_of<GraphError>(inv), "(inverted limits)");
}

TEST(OpenVinoImportErrors, AttributeNothingReadsIsRefused) {
  Ir ir;
  const auto x = ir.parameter("x", {1, 3});
  ir.result(ir.op("Clamp", {x}, {1, 3}, "min=\"0\" max=\"6\" mode=\"fancy\""));
  expect_has(error_of<UnsupportedError>(ir), "unsupported attribute 'mode'");
}

TEST(OpenVinoImportErrors, DeclaredShapeThatDisagreesIsNamed) {
  Ir ir;
  const auto x = ir.parameter("x", {1, 3});
  ir.result(ir.op("ReLU", {x}, {1, 4}));
  expect_has(error_of<GraphError>(ir), "declares shape [1,4]");
}

// The public API reads model.xml and the model.bin beside it.
TEST(OpenVinoPublicApi, ImportsFromFilesAndListsInputs) {
  const Ir ir = conv_block();
  const auto dir = std::filesystem::path(::testing::TempDir()) / "openvino_api";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "model.xml") << ir.xml();
  std::ofstream(dir / "model.bin", std::ios::binary) << ir.bin;
  const Model m = import_openvino((dir / "model.xml").string());
  EXPECT_EQ(m.inputs().at(0).name, "input");
  const auto inputs = list_openvino_inputs((dir / "model.xml").string());
  ASSERT_EQ(inputs.size(), 1u);
  EXPECT_EQ(inputs[0].dims, (std::vector<std::int64_t>{1, 4, 6, 6}));
  EXPECT_EQ(inputs[0].element_type, "f32");
  std::filesystem::remove(dir / "model.bin");
  EXPECT_THROW(import_openvino((dir / "model.xml").string()), IoError);
}

}  // namespace
}  // namespace qfuse::openvino
