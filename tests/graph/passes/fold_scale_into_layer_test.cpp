// fold_scale_into_layer: scalar and per-channel factors after an f32 layer fold into its weights and bias; named negatives.
// Structure, and numbers before and after where the pass keeps them.

#include "pass_test_util.hpp"

namespace qfuse::graph {
namespace {

using namespace pass_test;
using ::testing::HasSubstr;

// x * a + b after a convolution (PP-LCNet's learnable affine block): the
// factor goes into the weights and bias, the shift into the bias.
TEST(FoldScaleIntoLayer, ScalarAndPerChannelFactorsFoldIntoWeightsAndBias) {
  for (const Shape& factor_shape : {Shape{1}, Shape{1, 6, 1, 1}}) {
    Fixture f;
    const ValueId x = f.b.input("x", {1, 4, 5, 5});
    const ValueId w = f.b.constant("w", {6, 4, 3, 3}, random_values(6 * 4 * 9, -0.5f, 0.5f, 31));
    const ValueId bias = f.b.constant("b", {6}, random_values(6, -1, 1, 32));
    const ValueId y = f.b.convolution(x, w, bias, {.pads_begin = {1, 1}, .pads_end = {1, 1}}, "conv");
    const auto n = static_cast<std::size_t>(element_count(factor_shape));
    const ValueId scaled = f.b.multiply(f.b.constant("a", factor_shape, random_values(n, -2, 2, 33)), y);
    f.b.output(f.b.add(scaled, f.b.constant("s", {1}, {0.25f})));
    const Graph before = f.g;
    PassContext ctx = context();
    EXPECT_TRUE(fold_scale_into_layer(f.g, ctx));
    EXPECT_TRUE(fuse_bias(f.g, ctx));
    EXPECT_EQ(count(f.g, OpKind::Multiply), 0u);
    EXPECT_EQ(count(f.g, OpKind::Add), 0u);
    const Tensor x_in = input_tensor({1, 4, 5, 5}, -1, 1, 34);
    expect_close(run(f.g, x_in), run(before, x_in), 1e-5f);
  }
}

// Named negatives: weights that are not constant yet (a FakeQuantize, left
// for the int8 layer), and a factor that varies along a spatial axis.
TEST(FoldScaleIntoLayer, NotFoldedIntoFakeQuantizedWeightsOrBySpatialFactors) {
  {
    Fixture f;
    const ValueId x = f.b.input("x", {1, 4, 6, 6});
    const ValueId y = f.b.convolution(x, conv_weights(f.b, "w", 4, 4, true), std::nullopt,
                                      {.pads_begin = {1, 1}, .pads_end = {1, 1}}, "conv");
    f.b.output(f.b.multiply(y, f.b.constant("a", {1}, {0.5f})));
    PassContext ctx = context();
    EXPECT_FALSE(fold_scale_into_layer(f.g, ctx));
  }
  {
    Fixture f;
    const ValueId x = f.b.input("x", {1, 4, 6, 6});
    const ValueId y = f.b.convolution(x, conv_weights(f.b, "w", 4, 4, false), std::nullopt,
                                      {.pads_begin = {1, 1}, .pads_end = {1, 1}}, "conv");
    f.b.output(f.b.multiply(y, f.b.constant("a", {1, 1, 1, 6}, random_values(6, -1, 1, 35))));
    PassContext ctx = context();
    EXPECT_FALSE(fold_scale_into_layer(f.g, ctx));
  }
}

}  // namespace
}  // namespace qfuse::graph
