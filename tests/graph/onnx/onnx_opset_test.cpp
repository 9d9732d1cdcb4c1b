// Opsets 18 to 21: what changed in the operators qfuse imports (Split's
// num_outputs, ReduceMean's axes input, Resize's new attributes, Gelu,
// QuantizeLinear's output_dtype and block_size), each against a naive
// computation here; and the guard that refuses an input no handler reads.

#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "graph/onnx/importer.hpp"
#include "plugin/api_internal.hpp"
#include "tests/graph/onnx/onnx_model_builder.hpp"

namespace qfuse::onnx {
namespace {

using namespace test;  // Model, attr, random_floats, run, count_nodes

// Opset 18: num_outputs parts of ceil(7 / 3) = 3 channels, the last what is left.
TEST(OnnxOpset18, SplitNumOutputsCutsCeilSizedParts) {
  const std::vector<float> xv = random_floats(2 * 7 * 3, -1.0f, 1.0f, 11);
  Model m(18);
  m.input("x", kFloat, {2, 7, 3});
  auto& n = m.node("Split", {"x"}, {"y0", "y1", "y2"}, "chunk");
  attr(n, "axis", std::int64_t{1});
  attr(n, "num_outputs", std::int64_t{3});
  for (const char* o : {"y0", "y1", "y2"}) m.output(o, kFloat);
  const graph::Graph g = import_bytes(m.bytes());
  const CompiledModel model = compile(g, {.fuse = false});
  InferRequest r = model.create_infer_request();
  r.set_input("x", Tensor::from_vector<float>({2, 7, 3}, xv));
  r.infer();
  const std::int64_t sizes[] = {3, 3, 1};
  const char* const names[] = {"y0", "y1", "y2"};
  std::int64_t begin = 0;
  for (int k = 0; k < 3; ++k) {
    const Tensor y = r.output(names[k]);
    ASSERT_EQ(y.shape(), (Shape{2, sizes[k], 3})) << "part " << k;
    for (std::int64_t b = 0; b < 2; ++b) {
      for (std::int64_t c = 0; c < sizes[k]; ++c) {
        for (std::int64_t w = 0; w < 3; ++w) {
          EXPECT_EQ(y.data<float>()[static_cast<std::size_t>((b * sizes[k] + c) * 3 + w)],
                    xv[static_cast<std::size_t>((b * 7 + begin + c) * 3 + w)]);
        }
      }
    }
    begin += sizes[k];
  }
  // num_outputs must agree with the outputs written.
  Model bad(18);
  bad.input("x", kFloat, {2, 6});
  auto& b = bad.node("Split", {"x"}, {"a", "b"}, "mismatch");
  attr(b, "axis", std::int64_t{1});
  attr(b, "num_outputs", std::int64_t{3});
  bad.output("a", kFloat);
  bad.output("b", kFloat);
  EXPECT_NE(import_error<GraphError>(bad).find("Split node 'mismatch': num_outputs is 3 for 2 "
                                               "outputs"),
            std::string::npos);
}

// Opset 18: ReduceMean reads its axes from input 1; empty axes with
// noop_with_empty_axes = 1 is the identity.
TEST(OnnxOpset18, ReduceMeanTakesItsAxesAsAnInput) {
  const std::vector<float> xv = random_floats(2 * 3 * 4, -2.0f, 2.0f, 12);
  Model m(18);
  m.input("x", kFloat, {2, 3, 4});
  m.initializer("axes", kInt64, {1}, std::vector<std::int64_t>{1});
  attr(m.node("ReduceMean", {"x", "axes"}, {"y"}), "keepdims", std::int64_t{0});
  m.output("y", kFloat);
  for (const bool fuse : {false, true}) {
    const Tensor y =
        run(import_bytes(m.bytes()), fuse, "x", Tensor::from_vector<float>({2, 3, 4}, xv), "y");
    ASSERT_EQ(y.shape(), (Shape{2, 4}));
    for (int b = 0; b < 2; ++b) {
      for (int w = 0; w < 4; ++w) {
        double mean = 0.0;
        for (int c = 0; c < 3; ++c) mean += xv[static_cast<std::size_t>((b * 3 + c) * 4 + w)] / 3.0;
        EXPECT_NEAR(y.data<float>()[b * 4 + w], mean, 1e-6) << "fuse " << fuse;
      }
    }
  }
  Model noop(18);
  noop.input("x", kFloat, {2, 3});
  attr(noop.node("ReduceMean", {"x"}, {"y"}), "noop_with_empty_axes", std::int64_t{1});
  noop.output("y", kFloat);
  const std::vector<float> nv = random_floats(6, -1.0f, 1.0f, 13);
  const Tensor y =
      run(import_bytes(noop.bytes()), false, "x", Tensor::from_vector<float>({2, 3}, nv), "y");
  ASSERT_EQ(y.shape(), (Shape{2, 3}));
  for (std::size_t k = 0; k < nv.size(); ++k) EXPECT_EQ(y.data<float>()[k], nv[k]);
  // Axes computed at run time are refused by name.
  Model runtime(18);
  runtime.input("x", kFloat, {2, 3});
  runtime.input("axes", kInt64, {1});
  runtime.node("ReduceMean", {"x", "axes"}, {"y"}, "mean");
  runtime.output("y", kFloat);
  EXPECT_NE(import_error<UnsupportedError>(runtime).find("axes (input 1 'axes') must be a constant"),
            std::string::npos);
}

// A LayerNorm spelled out at opset 18 (axes as inputs) is still one LayerNorm.
TEST(OnnxOpset18, SpelledOutLayerNormWithAxesInputsIsOneNode) {
  Model m(18);
  m.input("x", kFloat, {2, 3, 8});
  m.initializer("axes", kInt64, {1}, std::vector<std::int64_t>{-1});
  m.initializer("two", kFloat, {}, std::vector<float>{2.0f});
  m.initializer("eps", kFloat, {}, std::vector<float>{1e-5f});
  m.node("ReduceMean", {"x", "axes"}, {"mu"});
  m.node("Sub", {"x", "mu"}, {"d"});
  m.node("Pow", {"d", "two"}, {"d2"});
  m.node("ReduceMean", {"d2", "axes"}, {"var"});
  m.node("Add", {"var", "eps"}, {"ve"});
  m.node("Sqrt", {"ve"}, {"sd"});
  m.node("Div", {"d", "sd"}, {"y"});
  m.output("y", kFloat);
  const graph::Graph g = import_bytes(m.bytes());
  EXPECT_EQ(count_nodes(g, graph::OpKind::LayerNorm), 1u);
  EXPECT_EQ(count_nodes(g, graph::OpKind::ReduceMean), 0u);
  const std::vector<float> xv = random_floats(48, -2.0f, 2.0f, 14);
  const Tensor y = run(g, true, "x", Tensor::from_vector<float>({2, 3, 8}, xv), "y");
  for (int row = 0; row < 6; ++row) {
    const float* x = &xv[static_cast<std::size_t>(row * 8)];
    double mu = 0.0, var = 0.0;
    for (int i = 0; i < 8; ++i) mu += x[i] / 8.0;
    for (int i = 0; i < 8; ++i) var += (x[i] - mu) * (x[i] - mu) / 8.0;
    for (int i = 0; i < 8; ++i) {
      EXPECT_NEAR(y.data<float>()[row * 8 + i], (x[i] - mu) / std::sqrt(var + 1e-5), 1e-5);
    }
  }
}

// Opset 20's Gelu, exact and tanh-approximated, against the formulas.
TEST(OnnxOpset20, GeluMatchesItsFormula) {
  const std::vector<float> xv = random_floats(64, -5.0f, 5.0f, 15);
  for (const std::string approximate : {"none", "tanh"}) {
    Model m(20);
    m.input("x", kFloat, {4, 16});
    attr(m.node("Gelu", {"x"}, {"y"}), "approximate", approximate);
    m.output("y", kFloat);
    const graph::Graph g = import_bytes(m.bytes());
    EXPECT_EQ(count_nodes(g, graph::OpKind::Gelu), 1u);
    for (const bool fuse : {false, true}) {
      const Tensor y = run(g, fuse, "x", Tensor::from_vector<float>({4, 16}, xv), "y");
      for (std::size_t k = 0; k < xv.size(); ++k) {
        const double x = xv[k];
        const double want =
            approximate == "none"
                ? 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)))
                : 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
        EXPECT_NEAR(y.data<float>()[k], want, 1e-5 + 1e-5 * std::abs(want))
            << approximate << " x=" << x << " fuse " << fuse;
      }
    }
  }
  Model bad(20);
  bad.input("x", kFloat, {4});
  attr(bad.node("Gelu", {"x"}, {"y"}, "g"), "approximate", std::string("sigmoid"));
  bad.output("y", kFloat);
  EXPECT_NE(import_error<UnsupportedError>(bad).find("approximate"), std::string::npos);
}

// Opset 21: QuantizeLinear with output_dtype and no zero point writes INT8
// codes (round half to even, saturate); block_size is refused by name.
TEST(OnnxOpset21, QuantizeLinearOutputDtypeWithoutZeroPoint) {
  Model m(21);
  m.input("x", kFloat, {2, 8});
  m.initializer("s", kFloat, {}, std::vector<float>{0.05f});
  attr(m.node("QuantizeLinear", {"x", "s"}, {"q"}), "output_dtype", std::int64_t{kInt8});
  m.node("DequantizeLinear", {"q", "s"}, {"y"});
  m.output("q", kInt8);
  m.output("y", kFloat);
  const std::vector<float> xv = random_floats(16, -8.0f, 8.0f, 16);
  const graph::Graph g = import_bytes(m.bytes());
  const CompiledModel model = compile(g, {.fuse = false});
  InferRequest r = model.create_infer_request();
  r.set_input("x", Tensor::from_vector<float>({2, 8}, xv));
  r.infer();
  const Tensor q = r.output("q");
  const Tensor y = r.output("y");
  ASSERT_EQ(q.type(), ElementType::s8);
  for (std::size_t k = 0; k < xv.size(); ++k) {
    const double code = std::clamp(static_cast<double>(std::nearbyint(xv[k] / 0.05f)), -128.0, 127.0);
    EXPECT_EQ(q.data<std::int8_t>()[k], code) << "x=" << xv[k];
    EXPECT_FLOAT_EQ(y.data<float>()[k], static_cast<float>(code) * 0.05f);
  }
  Model blocked(21);
  blocked.input("x", kFloat, {2, 8});
  blocked.initializer("s", kFloat, {2, 4}, std::vector<float>(8, 0.1f));
  blocked.initializer("z", kInt8, {2, 4}, std::vector<std::int8_t>(8, 0));
  auto& q2 = blocked.node("QuantizeLinear", {"x", "s", "z"}, {"q"}, "blocked_q");
  attr(q2, "axis", std::int64_t{1});
  attr(q2, "block_size", std::int64_t{2});
  blocked.output("q", kInt8);
  EXPECT_NE(import_error<UnsupportedError>(blocked).find("block_size"), std::string::npos);
}

// Opset 18's Resize attributes: explicit defaults import, a downscaling
// antialias and a partial axes list are refused by name.
TEST(OnnxOpset18, ResizeNewAttributes) {
  const auto resize = [](const std::string& mode, std::int64_t antialias, const Dims& axes) {
    Model m(18);
    m.input("x", kFloat, {1, 2, 4, 4});
    m.initializer("scales", kFloat, {4}, std::vector<float>{1.0f, 1.0f, 2.0f, 2.0f});
    auto& n = m.node("Resize", {"x", "", "scales"}, {"y"}, "up");
    attr(n, "mode", mode);
    attr(n, "antialias", antialias);
    attr(n, "keep_aspect_ratio_policy", std::string("stretch"));
    if (!axes.empty()) attr(n, "axes", axes);
    m.output("y", kFloat);
    return m;
  };
  const std::vector<float> xv = random_floats(32, -1.0f, 1.0f, 17);
  const Tensor y = run(import_bytes(resize("nearest", 0, {0, 1, 2, 3}).bytes()), false, "x",
                       Tensor::from_vector<float>({1, 2, 4, 4}, xv), "y");
  ASSERT_EQ(y.shape(), (Shape{1, 2, 8, 8}));
  // half_pixel, round_prefer_floor: output i reads input floor(i / 2) at scale 2.
  for (int c = 0; c < 2; ++c) {
    for (int i = 0; i < 8; ++i) {
      for (int j = 0; j < 8; ++j) {
        EXPECT_EQ(y.data<float>()[(c * 8 + i) * 8 + j], xv[static_cast<std::size_t>((c * 4 + i / 2) * 4 + j / 2)]);
      }
    }
  }
  EXPECT_NE(import_error<UnsupportedError>(resize("linear", 1, {})).find("antialias"),
            std::string::npos);
  EXPECT_NE(import_error<UnsupportedError>(resize("nearest", 0, {2, 3})).find("axes"),
            std::string::npos);
}

// An input that a handler does not read is refused, naming it: ReduceMean's
// axes input at opset 13, where axes are an attribute, would otherwise be
// dropped and the mean taken over every axis.
TEST(OnnxOpset, AnInputNoHandlerReadsIsRefused) {
  Model m(13);
  m.input("x", kFloat, {2, 3});
  m.initializer("axes", kInt64, {1}, std::vector<std::int64_t>{1});
  m.node("Relu", {"x", "axes"}, {"y"}, "relu_with_extra");
  m.output("y", kFloat);
  EXPECT_NE(import_error<UnsupportedError>(m).find(
                "Relu node 'relu_with_extra': input 1 ('axes') of Relu is not supported at opset 13"),
            std::string::npos)
      << import_error<UnsupportedError>(m);
  Model later(22);
  later.input("x", kFloat, {2});
  later.node("Relu", {"x"}, {"y"});
  later.output("y", kFloat);
  EXPECT_NE(import_error<UnsupportedError>(later).find("opset 22 is not supported (expected 10 to 21)"),
            std::string::npos);
}

}  // namespace
}  // namespace qfuse::onnx
