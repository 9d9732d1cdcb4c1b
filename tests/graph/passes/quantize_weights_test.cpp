// quantize_weights: constant FakeQuantized weights become s8 codes with their scales; named negatives.
// Structure, and numbers before and after where the pass keeps them.

#include "pass_test_util.hpp"

namespace qfuse::graph {
namespace {

using namespace pass_test;
using ::testing::HasSubstr;

TEST(QuantizeWeights, SymmetricPerChannelWeightsBecomeS8) {
  Fixture f;
  const ValueId x = f.b.input("x", {1, 4, 6, 6});
  f.b.output(f.b.convolution(x, conv_weights(f.b, "w", 8, 4, true), std::nullopt, {}, "conv"));
  const Graph before = f.g;
  PassContext ctx = context();
  EXPECT_TRUE(quantize_weights(f.g, ctx));
  EXPECT_EQ(count(f.g, OpKind::FakeQuantize), 0u);
  const Node& conv = f.g.node(f.g.topological_order().back());
  const Node* dq = pattern::producer_of(f.g, conv.inputs[1], OpKind::Dequantize);
  ASSERT_NE(dq, nullptr);
  EXPECT_EQ(dq->attr<DequantizeAttrs>().scale.size(), 8u);
  EXPECT_EQ(dq->attr<DequantizeAttrs>().axis, 0);
  EXPECT_EQ(dq->attr<DequantizeAttrs>().zero_point, std::vector<float>{0.0f});
  EXPECT_EQ(f.g.value(dq->inputs[0]).type, ElementType::s8);
  const Tensor x_in = input_tensor({1, 4, 6, 6}, -1, 1, 6);
  expect_close(run(f.g, x_in), run(before, x_in), 1e-5f);
}

TEST(QuantizeWeights, NotQuantizedWhenZeroPointIsFractional) {
  Fixture f;
  const ValueId x = f.b.input("x", {1, 4, 6, 6});
  const ValueId w = f.b.constant("w", {8, 4, 3, 3}, random_values(8 * 4 * 9, -0.5f, 0.5f, 3));
  // ol = -0.3, oh = 0.5 with 255 levels: Zo = 0.3 / (0.8 / 254) is not an integer.
  const ValueId fq = f.b.fake_quantize(w, -0.3f, 0.5f, -0.3f, 0.5f, 255);
  f.b.output(f.b.convolution(x, fq, std::nullopt, {}, "conv"));
  PassContext ctx = context();
  EXPECT_FALSE(quantize_weights(f.g, ctx));
}

// s8 codes with a per-channel zero point (OpenVINO's compressed weights):
// the codes less their zero point, bit-exact before and after.
TEST(QuantizeWeights, ZeroPointOfS8WeightsIsSubtractedFromTheCodes) {
  Fixture f;
  const ValueId x = f.b.input("x", {1, 4, 6, 6});
  std::vector<std::int8_t> q(8 * 4 * 9);
  for (std::size_t i = 0; i < q.size(); ++i) q[i] = static_cast<std::int8_t>(int(i * 29 % 241) - 120);
  const ValueId codes = f.b.constant("w", Tensor::from_vector<std::int8_t>({8, 4, 3, 3}, q));
  std::vector<float> scale(8, 0.01f), zp{-3, -2, -1, 0, 1, 2, 3, 4};
  const ValueId w = f.b.dequantize(codes, scale, zp, 0);
  f.b.output(f.b.convolution(x, w, std::nullopt, {}, "conv"));
  const Graph before = f.g;
  PassContext ctx = context();
  EXPECT_TRUE(quantize_weights(f.g, ctx));
  const Node& conv = f.g.node(f.g.topological_order().back());
  const Node* dq = pattern::producer_of(f.g, conv.inputs[1], OpKind::Dequantize);
  ASSERT_NE(dq, nullptr);
  EXPECT_EQ(dq->attr<DequantizeAttrs>().zero_point, std::vector<float>{0.0f});
  const Value& s8 = f.g.value(dq->inputs[0]);
  ASSERT_EQ(s8.type, ElementType::s8);
  EXPECT_EQ(s8.constant->as_float(0), static_cast<float>(q[0] + 3));
  const Tensor x_in = input_tensor({1, 4, 6, 6}, -1, 1, 6);
  expect_close(run(f.g, x_in), run(before, x_in), 0.0f);
}

TEST(QuantizeWeights, NotShiftedWhenCodesLessZeroPointLeaveS8) {
  Fixture f;
  const ValueId x = f.b.input("x", {1, 4, 6, 6});
  std::vector<std::int8_t> q(8 * 4 * 9, 127);
  const ValueId codes = f.b.constant("w", Tensor::from_vector<std::int8_t>({8, 4, 3, 3}, q));
  const ValueId w = f.b.dequantize(codes, {0.01f}, {-5.0f}, 0);
  f.b.output(f.b.convolution(x, w, std::nullopt, {}, "conv"));
  PassContext ctx = context();
  EXPECT_FALSE(quantize_weights(f.g, ctx));
  ctx.end_phase();
  ASSERT_EQ(ctx.refusals().size(), 1u);
  EXPECT_THAT(ctx.refusals()[0].reason, HasSubstr("do not fit s8"));
}

TEST(QuantizeWeights, NotShiftedWhenZeroPointIsBeyondAByte) {
  Fixture f;
  const ValueId x = f.b.input("x", {1, 4, 6, 6});
  const ValueId codes = f.b.constant(
      "w", Tensor::from_vector<std::int8_t>({8, 4, 3, 3}, std::vector<std::int8_t>(8 * 4 * 9, 1)));
  const ValueId w = f.b.dequantize(codes, {0.01f}, {3e29f}, 0);
  f.b.output(f.b.convolution(x, w, std::nullopt, {}, "conv"));
  PassContext ctx = context();
  EXPECT_FALSE(quantize_weights(f.g, ctx));
  ctx.end_phase();
  ASSERT_EQ(ctx.refusals().size(), 1u);
  EXPECT_THAT(ctx.refusals()[0].reason, HasSubstr("not an integer in [-255, 255]"));
}

}  // namespace
}  // namespace qfuse::graph
