// split_fake_quantize: a FakeQuantize a layer reads splits into quantize (u8 / s8) and dequantize; named negatives.
// Structure, and numbers before and after where the pass keeps them.

#include "pass_test_util.hpp"

namespace qfuse::graph {
namespace {

using namespace pass_test;
using ::testing::HasSubstr;

Graph fq_conv(float il, float ih, std::int64_t levels) {
  Graph g;
  Builder b(g);
  const ValueId x = b.input("x", {1, 4, 6, 6});
  const ValueId q = b.fake_quantize(x, il, ih, il, ih, levels, "fq");
  b.output(b.convolution(q, conv_weights(b, "w", 8, 4, true), std::nullopt, {}, "conv"));
  PassContext ctx = context();
  quantize_weights(g, ctx);
  return g;
}

ElementType stored_type(const Graph& g) {
  for (NodeId id : g.topological_order()) {
    const Node& n = g.node(id);
    if (n.kind == OpKind::Convert && n.attr<ConvertAttrs>().to != ElementType::f32) {
      return n.attr<ConvertAttrs>().to;
    }
  }
  return ElementType::f32;
}

// The zero point of the activation's Dequantize (the one that reads codes
// made at run time, not the weights').
std::vector<float> activation_zero_point(const Graph& g) {
  for (NodeId id : g.topological_order()) {
    const Node& n = g.node(id);
    if (n.kind == OpKind::Dequantize && !g.value(n.inputs[0]).is_constant()) {
      return n.attr<DequantizeAttrs>().zero_point;
    }
  }
  return {};
}

TEST(SplitFakeQuantize, ZeroLowRangeIsStoredAsU8) {
  Graph g = fq_conv(0.0f, 2.55f, 256);
  const Graph before = g;
  PassContext ctx = context();
  EXPECT_TRUE(split_fake_quantize(g, ctx));
  EXPECT_EQ(stored_type(g), ElementType::u8);
  EXPECT_EQ(activation_zero_point(g), std::vector<float>{0.0f});
  const Tensor x_in = input_tensor({1, 4, 6, 6}, -1, 3, 7);
  expect_close(run(g, x_in), run(before, x_in), 1e-5f);
}

TEST(SplitFakeQuantize, SymmetricRangeIsStoredAsS8WithoutZeroPoint) {
  Graph g = fq_conv(-1.28f, 1.27f, 256);
  const Graph before = g;
  PassContext ctx = context();
  EXPECT_TRUE(split_fake_quantize(g, ctx));
  EXPECT_EQ(stored_type(g), ElementType::s8);
  EXPECT_EQ(activation_zero_point(g), std::vector<float>{0.0f});
  const Tensor x_in = input_tensor({1, 4, 6, 6}, -2, 2, 8);
  expect_close(run(g, x_in), run(before, x_in), 1e-5f);
}

TEST(SplitFakeQuantize, AsymmetricRangeKeepsAZeroPoint) {
  Graph g = fq_conv(-0.5f, 2.05f, 256);
  const Graph before = g;
  PassContext ctx = context();
  EXPECT_TRUE(split_fake_quantize(g, ctx));
  EXPECT_EQ(stored_type(g), ElementType::u8);
  // il = -0.5 on a step of 2.55 / 255 = 0.01: zero point 50.
  EXPECT_EQ(activation_zero_point(g), std::vector<float>{50.0f});
  const Tensor x_in = input_tensor({1, 4, 6, 6}, -1, 3, 9);
  expect_close(run(g, x_in), run(before, x_in), 1e-5f);
}

TEST(SplitFakeQuantize, NotSplitWhenLevelsExceed256) {
  Graph g = fq_conv(0.0f, 4.0f, 1024);
  PassContext ctx = context();
  EXPECT_FALSE(split_fake_quantize(g, ctx));
}

TEST(SplitFakeQuantize, NotSplitWhenNoLayerReadsIt) {
  Fixture f;
  const ValueId x = f.b.input("x", {1, 4, 6, 6});
  f.b.output(f.b.relu(f.b.fake_quantize(x, 0.0f, 1.0f, 0.0f, 1.0f, 256)));
  PassContext ctx = context();
  EXPECT_FALSE(split_fake_quantize(f.g, ctx));
}

}  // namespace
}  // namespace qfuse::graph
