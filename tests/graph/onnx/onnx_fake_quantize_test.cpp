// FakeQuantize from ONNX files: NNCF's export writes each quantizer as
// FakeQuantize(X, input_low, input_high, output_low, output_high) in domain
// org.openvinotoolkit with attribute `levels`. Checked against the seed's
// formula written out here in double, fused against unfused, and the
// malformed forms named.

#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "graph/onnx/importer.hpp"
#include "graph/op_info.hpp"
#include "qfuse/error.hpp"
#include "tests/graph/onnx/onnx_model_builder.hpp"

namespace qfuse::onnx {
namespace {

using namespace test;  // Model, attr, random_floats, run, count_nodes

constexpr const char* kDomain = "org.openvinotoolkit";

::onnx::NodeProto& fake_quantize(Model& m, const std::string& x, const std::string& prefix,
                                 const std::string& y, std::int64_t levels) {
  auto& n = m.node("FakeQuantize",
                   {x, prefix + "_il", prefix + "_ih", prefix + "_ol", prefix + "_oh"}, {y},
                   prefix + "/FakeQuantize");
  n.set_domain(kDomain);
  attr(n, "levels", levels);
  return n;
}

void limits(Model& m, const std::string& prefix, const Dims& dims, const std::vector<float>& il,
            const std::vector<float>& ih, const std::vector<float>& ol,
            const std::vector<float>& oh) {
  m.initializer(prefix + "_il", kFloat, dims, il);
  m.initializer(prefix + "_ih", kFloat, dims, ih);
  m.initializer(prefix + "_ol", kFloat, dims, ol);
  m.initializer(prefix + "_oh", kFloat, dims, oh);
}

// The seed's FakeQuantize, in double: below min(il, ih) output_low, above
// max(il, ih) output_high, else the level round((x - il) / (ih - il) * (L - 1))
// (half to even) mapped onto [ol, oh].
double seed_fake_quantize(double x, double il, double ih, double ol, double oh, double levels) {
  if (x <= std::min(il, ih)) return ol;
  if (x > std::max(il, ih)) return oh;
  const double q = std::nearbyint((x - il) / (ih - il) * (levels - 1));
  return q / (levels - 1) * (oh - ol) + ol;
}

// Per-channel limits of shape [1, 3, 1, 1], output limits other than the
// input's (one channel's inverted), 16 levels, values on and beyond the
// limits: the unfused and fused outputs are the formula's, each to within an
// f32 rounding of its output range.
TEST(NncfFakeQuantize, PerChannelLimitsFollowTheSeedFormula) {
  Model m;
  m.opset_import(kDomain, 1);
  m.input("x", kFloat, {2, 3, 4, 5});
  const std::vector<float> il{-1.0f, 0.0f, -0.5f}, ih{1.0f, 2.5f, 0.25f};
  const std::vector<float> ol{-2.0f, 0.0f, 1.0f}, oh{2.0f, 5.0f, -1.0f};
  limits(m, "a", {1, 3, 1, 1}, il, ih, ol, oh);
  fake_quantize(m, "x", "a", "y", 16);
  m.output("y", kFloat);
  const graph::Graph g = import_bytes(m.bytes());
  EXPECT_EQ(count_nodes(g, graph::OpKind::FakeQuantize), 1u);
  std::vector<float> xv = random_floats(2 * 3 * 4 * 5, -3.0f, 3.0f, 7);
  const float edges[] = {-1.0f, 1.0f, 0.0f, 2.5f, -0.5f, 0.25f, 1e-7f, -1e-7f};
  std::copy(std::begin(edges), std::end(edges), xv.begin());
  for (bool fuse : {false, true}) {
    const Tensor y = run(g, fuse, "x", Tensor::from_vector<float>({2, 3, 4, 5}, xv), "y");
    for (std::size_t i = 0; i < xv.size(); ++i) {
      const std::size_t c = (i / 20) % 3;
      const double expected = seed_fake_quantize(xv[i], il[c], ih[c], ol[c], oh[c], 16);
      EXPECT_NEAR(y.data<float>()[i], expected, 1e-6 * std::fabs(oh[c] - ol[c]))
          << "x = " << xv[i] << ", channel " << c << (fuse ? " fused" : " unfused");
    }
  }
}

// NNCF's convolution: activations on 256 levels per tensor, symmetric
// signed (input_low = -128 s, input_high = 127 s, so that zero is a level),
// weights on 255 levels per output channel with limits [C, 1, 1, 1] (+-max|w|),
// the output quantized after Relu. `x_low` / `x_high` override the activation
// limits.
Model nncf_convolution(float x_low = -2.56f, float x_high = 2.54f) {
  const int ic = 8, oc = 16;
  Model m;
  m.opset_import(kDomain, 1);
  m.input("x", kFloat, {1, ic, 10, 10});
  limits(m, "x_fq", {}, {x_low}, {x_high}, {x_low}, {x_high});
  fake_quantize(m, "x", "x_fq", "xq", 256);
  const std::vector<float> w = random_floats(oc * ic * 9, -0.5f, 0.5f, 11);
  m.initializer("w", kFloat, {oc, ic, 3, 3}, w);
  std::vector<float> wmax(oc), wmin(oc);
  for (int o = 0; o < oc; ++o) {
    float a = 0.0f;
    for (int k = 0; k < ic * 9; ++k) {
      a = std::max(a, std::fabs(w[static_cast<std::size_t>(o * ic * 9 + k)]));
    }
    wmax[static_cast<std::size_t>(o)] = a;
  }
  std::transform(wmax.begin(), wmax.end(), wmin.begin(), [](float v) { return -v; });
  limits(m, "w_fq", {oc, 1, 1, 1}, wmin, wmax, wmin, wmax);
  fake_quantize(m, "w", "w_fq", "wq", 255);
  m.initializer("b", kFloat, {oc}, random_floats(oc, -0.2f, 0.2f, 12));
  auto& conv = m.node("Conv", {"xq", "wq", "b"}, {"c"}, "conv");
  attr(conv, "pads", Dims{1, 1, 1, 1});
  m.node("Relu", {"c"}, {"r"}, "relu");
  limits(m, "y_fq", {}, {0.0f}, {6.0f}, {0.0f}, {6.0f});
  fake_quantize(m, "r", "y_fq", "y", 256);
  m.output("y", kFloat);
  return m;
}

// Fused, NNCF's convolution is one int8 primitive; its output is within one
// output step of unfused, and equal for nearly every value.
TEST(NncfFakeQuantize, ConvolutionBetweenQuantizersRunsAsOneInt8Layer) {
  const graph::Graph g = import_bytes(nncf_convolution().bytes());
  const Tensor x =
      Tensor::from_vector<float>({1, 8, 10, 10}, random_floats(800, -2.5f, 3.0f, 13));
  std::vector<LayerInfo> layers;
  const Tensor fused = run(g, true, "x", x, "y", &layers);
  const Tensor unfused = run(g, false, "x", x, "y");
  const auto conv_layer = std::find_if(layers.begin(), layers.end(),
                                       [](const LayerInfo& l) { return l.macs > 0; });
  ASSERT_NE(conv_layer, layers.end());
  EXPECT_EQ(conv_layer->precision, "int8")
      << conv_layer->node << ": " << conv_layer->implementation;
  const double step = 6.0 / 255;
  std::size_t equal = 0;
  for (std::size_t i = 0; i < static_cast<std::size_t>(fused.size()); ++i) {
    const double d = std::fabs(double{fused.data<float>()[i]} - unfused.data<float>()[i]);
    EXPECT_LE(d, step * 1.0001) << i;
    equal += d < step / 2;
  }
  EXPECT_GE(equal, static_cast<std::size_t>(fused.size()) * 99 / 100);
}

// Named negative: activation limits whose grid has no integer zero point
// ([-2, 2.5] over 255 steps puts zero at level 113.33) give no int8 source
// zero point; the convolution stays f32 and the refusal says why.
TEST(NncfFakeQuantize, NotFusedDueToAFractionalZeroPoint) {
  const graph::Graph g = import_bytes(nncf_convolution(-2.0f, 2.5f).bytes());
  const CompiledModel model = compile(g, {.fuse = true});
  bool refused = false;
  for (const FusionRefusal& r : model.refusals()) {
    refused = refused || (r.node == "conv" && r.reason.find("zero points") != std::string::npos);
  }
  EXPECT_TRUE(refused);
  for (const LayerInfo& l : model.layers()) {
    if (l.macs > 0) {
      EXPECT_EQ(l.precision, "f32") << l.node;
    }
  }
}


Model one_fake_quantize(std::int64_t levels, float il, float ih, bool with_levels = true) {
  Model m;
  m.opset_import(kDomain, 1);
  m.input("x", kFloat, {1, 4});
  limits(m, "q", {}, {il}, {ih}, {il}, {ih});
  auto& n = fake_quantize(m, "x", "q", "y", levels);
  if (!with_levels) n.clear_attribute();
  m.output("y", kFloat);
  return m;
}

TEST(NncfFakeQuantize, MalformedQuantizersAreNamedErrors) {
  EXPECT_NE(import_error(one_fake_quantize(1, -1.0f, 1.0f))
                .find("FakeQuantize node 'q/FakeQuantize': levels must be in [2, 65536] (got 1)"),
            std::string::npos);
  EXPECT_NE(import_error(one_fake_quantize(256, -1.0f, 1.0f, false))
                .find("'q/FakeQuantize': attribute 'levels' is missing"),
            std::string::npos);
  EXPECT_NE(import_error(one_fake_quantize(256, 1.0f, -1.0f))
                .find("'q/FakeQuantize': input_low 1.000000 is above input_high -1.000000"),
            std::string::npos);
  EXPECT_NE(import_error(one_fake_quantize(256, 0.5f, 0.5f)).find("is empty"), std::string::npos);
  Model six = one_fake_quantize(256, -1.0f, 1.0f);
  six.node("Relu", {"x"}, {"r"}, "relu");
  auto& fq = *six.graph().mutable_node(0);
  fq.add_input("r");
  EXPECT_NE(import_error(six).find("takes 5 inputs (X and four limits), got 6"),
            std::string::npos);
  Model pdpd = one_fake_quantize(256, -1.0f, 1.0f);
  attr(*pdpd.graph().mutable_node(0), "auto_broadcast", std::string("pdpd"));
  EXPECT_NE(import_error(pdpd).find("auto_broadcast"), std::string::npos);
  // An empty input_low beside a one-value input_high: named by shape
  // inference, never read past its end.
  Model empty;
  empty.opset_import(kDomain, 1);
  empty.input("x", kFloat, {1, 4});
  empty.initializer("q_il", kFloat, {0}, std::vector<float>{});
  empty.initializer("q_ih", kFloat, {}, std::vector<float>{1.0f});
  empty.initializer("q_ol", kFloat, {}, std::vector<float>{-1.0f});
  empty.initializer("q_oh", kFloat, {}, std::vector<float>{1.0f});
  fake_quantize(empty, "x", "q", "y", 256);
  empty.output("y", kFloat);
  EXPECT_NE(import_error(empty), "(imported)");
  Model other;
  other.input("x", kFloat, {1, 4});
  auto& n = other.node("QLinearSigmoid", {"x"}, {"y"}, "sig");
  n.set_domain("com.example");
  other.output("y", kFloat);
  EXPECT_NE(import_error(other).find(
                "operator QLinearSigmoid of domain 'com.example' is not supported"),
            std::string::npos);
}

}  // namespace
}  // namespace qfuse::onnx
