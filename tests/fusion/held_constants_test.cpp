// Layer weights are held once: a layer that reordered its constant weights
// into its primitive's layout keeps the only copy, the graph the ops run holds
// a placeholder, and compiled_graph() gives the values back for the tools
// (export, dump, compare) exactly as they were.

#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <random>

#include "tests/fusion/fusion_test_util.hpp"

namespace qfuse::test::fusion {
namespace {

const graph::Value& value_named(const graph::Graph& g, const std::string& name) {
  for (std::uint32_t i = 0; i < g.value_count(); ++i) {
    if (g.value(graph::ValueId{i}).name == name) return g.value(graph::ValueId{i});
  }
  throw std::runtime_error("no value '" + name + "'");
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.type() == b.type() && a.shape() == b.shape() && a.byte_size() == b.byte_size() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.byte_size()) == 0;
}

// conv + per-channel bias (int8 once fused) -> FakeQuantize -> f32 1x1
// convolution whose weights and bias are plain constants.
graph::Graph two_layers(const Tensor& f32_weights, const Tensor& f32_bias) {
  graph::Graph g;
  Builder b(g);
  ValueId y = b.fake_quantize(b.input("x", {1, 8, 6, 6}), 0.0f, 2.55f, 0.0f, 2.55f, 256, "x.q");
  y = quantized_conv(b, y, 16, 3, "conv");
  std::vector<float> shift(16);
  for (std::size_t c = 0; c < shift.size(); ++c) shift[c] = 0.05f * static_cast<float>(c) - 0.4f;
  y = b.binary(OpKind::Add, y, b.constant("conv.shift", {1, 16, 1, 1}, shift), "conv.add");
  y = b.fake_quantize(y, -1.28f, 1.27f, -1.28f, 1.27f, 256, "conv.out");
  graph::ConvAttrs one;
  y = b.convolution(y, b.constant("head.w", f32_weights), b.constant("head.b", f32_bias), one,
                    "head");
  b.output(y);
  return g;
}

TEST(HeldConstants, LayerWeightsLiveOnlyInTheLayerAndComeBackExactly) {
  std::mt19937 rng(17);
  std::normal_distribution<float> d(0.0f, 0.5f);
  std::vector<float> wv(4 * 16);
  for (float& v : wv) v = d(rng);
  const Tensor head = Tensor::from_vector<float>({4, 16, 1, 1}, wv);
  const Tensor head_bias = Tensor::from_vector<float>({4}, {0.25f, -1.5f, 3.0f, 0.125f});
  const graph::Graph g = two_layers(head, head_bias);
  const CompiledModel fused = compile(g, {.fuse = true});
  ASSERT_EQ(quantized_layers(fused).size(), 1u) << describe_layers(fused);

  // The int8 layer's s8 codes: what quantize_weights made, computed here
  // from the f32 weights by the FakeQuantize's own grid (step 1/127, zero 0).
  const graph::Graph& ran = executed_graph(fused);
  const graph::Graph& restored = compiled_graph(fused);
  const Tensor& w = *value_named(g, "conv.w").constant;
  const graph::Node* conv = nullptr;
  for (graph::NodeId id : restored.topological_order()) {
    if (restored.node(id).name == "conv") conv = &restored.node(id);
  }
  ASSERT_NE(conv, nullptr);
  ASSERT_EQ(conv->kind, OpKind::QuantizedConvolution);
  const graph::Value& codes = restored.value(conv->inputs[1]);
  ASSERT_TRUE(codes.is_constant());
  ASSERT_EQ(codes.type, ElementType::s8);
  const auto got = codes.constant->data<std::int8_t>();
  const auto f = w.data<float>();
  ASSERT_EQ(got.size(), f.size());
  for (std::size_t i = 0; i < f.size(); ++i) {
    const double q = std::nearbyint(static_cast<double>(f[i]) * 127.0);
    const auto expected = static_cast<std::int8_t>(std::clamp(q, -128.0, 127.0));
    ASSERT_EQ(got[i], expected) << "weight " << i << " = " << f[i];
  }
  // The graph the ops run holds neither copy: placeholders of no memory.
  EXPECT_EQ(ran.value(conv->inputs[1]).constant->raw_data(), nullptr);
  const graph::Value& head_ran = value_named(ran, "head.w");
  EXPECT_EQ(head_ran.constant->raw_data(), nullptr);
  EXPECT_EQ(head_ran.constant->shape(), head.shape());
  // The f32 weights and bias come back bit for bit.
  EXPECT_TRUE(same_bytes(*value_named(restored, "head.w").constant, head));
  EXPECT_EQ(value_named(ran, "head.b").constant->raw_data(), nullptr);
  EXPECT_TRUE(same_bytes(*value_named(restored, "head.b").constant, head_bias));
  // The int8 layer's bias (the Add folded in, in accumulator units) too.
  ASSERT_GE(conv->inputs.size(), 3u);
  EXPECT_EQ(ran.value(conv->inputs[2]).constant->raw_data(), nullptr);
  const Tensor& acc_bias = *restored.value(conv->inputs[2]).constant;
  ASSERT_EQ(acc_bias.shape(), (Shape{16}));
  const auto ab = acc_bias.data<float>();
  for (std::size_t c = 0; c < ab.size(); ++c) {
    // shift / (input step 0.01 * weight step 1/127), as fuse_bias computes it.
    EXPECT_NEAR(ab[c], (0.05 * static_cast<double>(c) - 0.4) / (0.01 / 127.0), 0.05) << c;
  }

  // And the model still runs them: fused against unfused.
  const CompiledModel unfused = compile(g, {.fuse = false});
  std::uniform_real_distribution<float> dx(0.0f, 2.6f);
  std::vector<float> xv(8 * 36);
  for (float& v : xv) v = dx(rng);
  const Tensor x = Tensor::from_vector<float>({1, 8, 6, 6}, xv);
  const std::string out = g.value(g.outputs()[0]).name;
  const Tensor yf = run(fused, "x", x, out);
  const Tensor yu = run(unfused, "x", x, out);
  const auto a = yf.data<float>(), u = yu.data<float>();
  ASSERT_EQ(a.size(), u.size());
  // One code of conv.out (0.01) through |w| summed over 16 inputs.
  double bound = 0.0;
  for (float v : wv) bound = std::max(bound, std::abs(static_cast<double>(v)));
  bound *= 16 * 0.01 + 1e-4;
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], u[i], bound) << i;
}

// A constant another op also reads stays in the graph.
TEST(HeldConstants, AConstantAnotherOpReadsStays) {
  std::mt19937 rng(5);
  std::normal_distribution<float> d(0.0f, 0.5f);
  std::vector<float> wv(8 * 8);
  for (float& v : wv) v = d(rng);
  graph::Graph g;
  Builder b(g);
  const ValueId x = b.input("x", {1, 8, 4, 4});
  const ValueId w = b.constant("w", Tensor::from_vector<float>({8, 8, 1, 1}, wv));
  graph::ConvAttrs one;
  const ValueId c = b.convolution(x, w, std::nullopt, one, "conv");
  const ValueId s = b.binary(OpKind::Add, c, w, "add_w");  // [1,8,4,4] + [8,8,1,1]
  b.output(s);
  const CompiledModel model = compile(g, {.fuse = false});
  EXPECT_NE(value_named(executed_graph(model), "w").constant->raw_data(), nullptr);
}

}  // namespace
}  // namespace qfuse::test::fusion
