// fold_batch_norm: a BatchNormalization after a layer folds into its constant weights and bias, or into its FakeQuantize ranges; named negatives.
// Structure, and numbers before and after where the pass keeps them.

#include "pass_test_util.hpp"

namespace qfuse::graph {
namespace {

using namespace pass_test;
using ::testing::HasSubstr;

// BatchNorm "bn" over 8 channels of `y`, gamma of sign `gamma_sign`.
ValueId batch_norm(Builder& b, ValueId y, float gamma_sign = 1.0f) {
  std::vector<float> gamma = random_values(8, 0.5f, 1.5f, 6);
  for (float& v : gamma) v *= gamma_sign;
  return b.op(OpKind::BatchNormalization,
              {y, b.constant("gamma", {8}, gamma), b.constant("beta", {8}, random_values(8, -1, 1, 7)),
               b.constant("mean", {8}, random_values(8, -1, 1, 8)),
               b.constant("var", {8}, random_values(8, 0.1f, 2, 9))},
              BatchNormAttrs{1e-5f}, "bn");
}

Graph conv_bn(bool quantized_weights, float gamma_sign) {
  Graph g;
  Builder b(g);
  const ValueId x = b.input("x", {1, 4, 6, 6});
  const ValueId w = conv_weights(b, "w", 8, 4, quantized_weights);
  const ValueId y = b.convolution(x, w, b.constant("bias", {8}, random_values(8, -1, 1, 5)),
                                  {.pads_begin = {1, 1}, .pads_end = {1, 1}}, "conv");
  b.output(batch_norm(b, y, gamma_sign));
  return g;
}

TEST(FoldBatchNorm, FoldsIntoConstantWeightsAndBias) {
  Graph g = conv_bn(false, 1.0f);
  const Graph before = g;
  PassContext ctx = context();
  EXPECT_TRUE(fold_batch_norm(g, ctx));
  EXPECT_EQ(count(g, OpKind::BatchNormalization), 0u);
  EXPECT_EQ(count(g, OpKind::Convolution), 1u);
  EXPECT_EQ(g.live_node_count(), 1u);
  const Tensor x = input_tensor({1, 4, 6, 6}, -1, 1, 1);
  expect_close(run(g, x), run(before, x), 1e-5f);
}

TEST(FoldBatchNorm, ScalesFakeQuantizeRangesWhenEveryScaleIsPositive) {
  Graph g = conv_bn(true, 1.0f);
  const Graph before = g;
  PassContext ctx = context();
  EXPECT_TRUE(fold_batch_norm(g, ctx));
  EXPECT_EQ(count(g, OpKind::BatchNormalization), 0u);
  EXPECT_EQ(count(g, OpKind::Multiply), 0u);
  const Tensor x = input_tensor({1, 4, 6, 6}, -1, 1, 2);
  expect_close(run(g, x), run(before, x), 1e-4f);
}

TEST(FoldBatchNorm, NegativeScaleWithQuantizedWeightsBecomesMultiplyAdd) {
  Graph g = conv_bn(true, -1.0f);
  const Graph before = g;
  PassContext ctx = context();
  EXPECT_TRUE(fold_batch_norm(g, ctx));
  EXPECT_EQ(count(g, OpKind::BatchNormalization), 0u);
  EXPECT_EQ(count(g, OpKind::Multiply), 1u);
  EXPECT_EQ(count(g, OpKind::Add), 1u);
  const Tensor x = input_tensor({1, 4, 6, 6}, -1, 1, 3);
  expect_close(run(g, x), run(before, x), 1e-5f);
}

TEST(FoldBatchNorm, NotFoldedWhenLayerOutputHasTwoConsumers) {
  Graph g = conv_bn(false, 1.0f);
  g.mark_output(g.node(g.topological_order()[0]).outputs[0]);
  PassContext ctx = context();
  EXPECT_FALSE(fold_batch_norm(g, ctx));
  EXPECT_EQ(count(g, OpKind::BatchNormalization), 1u);
}

// PyTorch QAT conv-bn: conv -> Div(per channel) -> Add(bias) -> BatchNorm.
TEST(FoldBatchNorm, BatchNormAfterPerChannelDivAndAddBecomesMultiplyAdd) {
  Fixture f;
  const ValueId x = f.b.input("x", {1, 4, 6, 6});
  ValueId y = f.b.convolution(x, conv_weights(f.b, "w", 8, 4, false), std::nullopt,
                              {.pads_begin = {1, 1}, .pads_end = {1, 1}}, "conv");
  y = f.b.binary(OpKind::Divide, y, f.b.constant("sf", {1, 8, 1, 1}, random_values(8, 0.5f, 2, 12)));
  y = f.b.add(y, f.b.constant("cb", {1, 8, 1, 1}, random_values(8, -1, 1, 13)));
  f.b.output(batch_norm(f.b, y));
  const Graph before = f.g;
  PassContext ctx = context();
  EXPECT_TRUE(fold_batch_norm(f.g, ctx));
  EXPECT_EQ(count(f.g, OpKind::BatchNormalization), 0u);
  EXPECT_EQ(count(f.g, OpKind::Multiply), 1u);
  const Tensor in = input_tensor({1, 4, 6, 6}, -1, 1, 4);
  expect_close(run(f.g, in), run(before, in), 1e-5f);
}

TEST(FoldBatchNorm, NotFoldedWhenANonConstantStepSeparatesItFromTheLayer) {
  Fixture f;
  const ValueId x = f.b.input("x", {1, 4, 6, 6});
  ValueId y = f.b.convolution(x, conv_weights(f.b, "w", 8, 4, false), std::nullopt,
                              {.pads_begin = {1, 1}, .pads_end = {1, 1}}, "conv");
  y = f.b.relu(y);
  f.b.output(batch_norm(f.b, y));
  PassContext ctx = context();
  EXPECT_FALSE(fold_batch_norm(f.g, ctx));
  EXPECT_EQ(count(f.g, OpKind::BatchNormalization), 1u);
}

}  // namespace
}  // namespace qfuse::graph
