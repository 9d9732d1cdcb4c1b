// lower_bias: an int32 bias dequantize becomes a constant and the layer stays int8; named negatives.
// Structure, and numbers before and after where the pass keeps them.

#include "pass_test_util.hpp"

namespace qfuse::graph {
namespace {

using namespace pass_test;
using ::testing::HasSubstr;

// An ONNX Runtime-style layer: u8 input dequantize, s8 weights dequantized per
// channel, and the bias as the dequantize of int32 values with scale
// sx * sw[c] (`bias_expr`), or a plain f32 constant.
Graph int32_bias_conv(bool bias_expr) {
  Graph g;
  Builder b(g);
  const ValueId x = b.input("x", {1, 4, 6, 6});
  const float sx = 0.01f;
  const ValueId xq = b.convert(b.fake_quantize(x, 0.0f, 2.55f, 0.0f, 2.55f, 256), ElementType::u8);
  const ValueId xd = b.multiply(b.convert(xq, ElementType::f32), b.scalar(sx));
  std::vector<std::int8_t> wq(8 * 4 * 9);
  for (std::size_t i = 0; i < wq.size(); ++i) wq[i] = static_cast<std::int8_t>(int(i * 37 % 255) - 127);
  std::vector<float> sw(8);
  for (std::size_t c = 0; c < sw.size(); ++c) sw[c] = 0.002f + 0.0005f * float(c);
  const ValueId w = b.multiply(
      b.convert(b.constant("wq", Tensor::from_vector<std::int8_t>({8, 4, 3, 3}, wq)), ElementType::f32),
      b.constant("sw", {8, 1, 1, 1}, sw));
  std::vector<std::int32_t> bq{-300, -20, 0, 5, 77, 150, 900, -4000};
  std::vector<float> bs(8);
  for (std::size_t c = 0; c < bs.size(); ++c) bs[c] = sx * sw[c];
  ValueId bias;
  if (bias_expr) {
    bias = b.multiply(b.convert(b.constant("bq", Tensor::from_vector<std::int32_t>({8}, bq)), ElementType::f32),
                      b.constant("bs", {8}, bs));
  } else {
    std::vector<float> bf(8);
    for (std::size_t c = 0; c < bf.size(); ++c) bf[c] = float(bq[c]) * bs[c];
    bias = b.constant("bias", {8}, bf);
  }
  b.output(b.convolution(xd, w, bias, {.pads_begin = {1, 1}, .pads_end = {1, 1}}, "conv"));
  return g;
}

TEST(LowerBias, Int32BiasDequantizeBecomesAConstantAndTheLayerStaysInt8) {
  Graph g = int32_bias_conv(true);
  const Graph before = g;
  PassContext ctx = context();
  EXPECT_TRUE(lower_bias(g, ctx));  // Convert(int32) folded
  EXPECT_TRUE(lower_bias(g, ctx));  // Multiply(scale) folded
  EXPECT_FALSE(lower_bias(g, ctx));
  const Node* conv = nullptr;
  for (NodeId id : g.topological_order()) {
    if (g.node(id).name == "conv") conv = &g.node(id);
  }
  ASSERT_NE(conv, nullptr);
  EXPECT_TRUE(g.value(conv->inputs[2]).is_constant());
  // The weights' dequantize is still there for fuse_dequantize_into_layer.
  EXPECT_FALSE(g.value(conv->inputs[1]).is_constant());
  const Tensor x = input_tensor({1, 4, 6, 6}, 0, 2.55f, 21);
  expect_close(run(g, x), run(before, x), 0.0f);

  Graph fused = int32_bias_conv(true);
  PassContext fctx = context();
  run_fusion_passes(fused, fctx);
  EXPECT_EQ(count(fused, OpKind::QuantizedConvolution), 1u);
  EXPECT_EQ(count(fused, OpKind::Convolution), 0u);
}

TEST(LowerBias, NotLoweredWhenTheBiasIsAlreadyConstant) {
  Graph g = int32_bias_conv(false);
  PassContext ctx = context();
  EXPECT_FALSE(lower_bias(g, ctx));
  EXPECT_TRUE(ctx.refusals().empty());
}

TEST(LowerBias, NotLoweredWhenTheBiasDependsOnAnInput) {
  Fixture f;
  const ValueId x = f.b.input("x", {1, 4, 6, 6});
  const ValueId bias_in = f.b.input("b", {8});
  const ValueId y = f.b.convolution(x, conv_weights(f.b, "w", 8, 4, false),
                                    f.b.multiply(bias_in, f.b.scalar(2.0f)), {}, "conv");
  f.b.output(y);
  PassContext ctx = context();
  ctx.begin_round();
  EXPECT_FALSE(lower_bias(f.g, ctx));
  ctx.end_phase();
  ASSERT_EQ(ctx.refusals().size(), 1u);
  EXPECT_EQ(ctx.refusals()[0].pass, "lower_bias");
  EXPECT_EQ(ctx.refusals()[0].node, "conv");
  EXPECT_THAT(ctx.refusals()[0].reason, HasSubstr("not a constant expression"));
}

}  // namespace
}  // namespace qfuse::graph
