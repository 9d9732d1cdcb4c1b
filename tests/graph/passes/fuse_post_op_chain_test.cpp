// fuse_post_op_chain: the steps after a quantized layer up to its next quantization join its post-op chain; named negatives.
// Structure, and numbers before and after where the pass keeps them.

#include "pass_test_util.hpp"

namespace qfuse::graph {
namespace {

using namespace pass_test;
using ::testing::HasSubstr;

TEST(FusePostOpChain, ConvFqReluFqBecomesOneInt8ConvWithU8Destination) {
  Graph g = quantized_block(true);
  PassContext ctx = context();
  run_fusion_passes(g, ctx);
  EXPECT_EQ(count(g, OpKind::QuantizedConvolution), 2u);
  // The input quantization (a FakeQuantize and its Convert) is one quantizing Convert.
  EXPECT_EQ(count(g, OpKind::FakeQuantize), 0u);
  EXPECT_EQ(count(g, OpKind::Relu), 0u);
  std::size_t quantizing = 0;
  for (NodeId id : g.topological_order()) {
    const Node& n = g.node(id);
    quantizing += n.kind == OpKind::Convert && n.attr<ConvertAttrs>().quantizes();
    if (n.name == "conv") {
      EXPECT_EQ(n.attr<QuantizedLayerAttrs>().dst_type(), ElementType::u8);
    }
  }
  EXPECT_EQ(quantizing, 1u);
  EXPECT_THAT(ctx.lines(), ::testing::Contains(HasSubstr("fuse_post_op_chain: conv absorbed")));
}

TEST(FusePostOpChain, ChainStopsAtAValueWithTwoConsumers) {
  Graph g = quantized_block(true);
  // Expose the mid FakeQuantize: the chain must end before it.
  for (NodeId id : g.topological_order()) {
    if (g.node(id).name == "fq_mid") g.mark_output(g.node(id).outputs[0]);
  }
  PassContext ctx = context();
  run_fusion_passes(g, ctx);
  for (NodeId id : g.topological_order()) {
    const Node& n = g.node(id);
    if (n.name == "conv") {
      EXPECT_EQ(n.kind, OpKind::QuantizedConvolution);
      EXPECT_EQ(n.attr<QuantizedLayerAttrs>().dst_type(), ElementType::f32);
    }
  }
}

// ONNX Runtime's QOperator layers requantize onto codes with scale 1
// (Multiply by the layer's multiplier, Quantize(1, z)); the QLinearAdd after
// reads them with the output's scale and the same z. That Quantize and its
// Dequantize join the chain as Quantize(1, z), Shift(-z), Scale(s), and the
// residual add with them: one int8 convolution, within one output code.
TEST(FusePostOpChain, QuantizeWithScaleOneAndItsDequantizeJoinTheChain) {
  Graph g;
  Builder b(g);
  const ValueId x = b.input("x", {1, 4, 6, 6});
  const ValueId q = b.quantize(x, ElementType::u8, {0.01f}, {128});
  ValueId y = b.convolution(b.dequantize(q, {0.01f}, {128.0f}), conv_weights(b, "w", 4, 4, true),
                            b.constant("bias", {4}, random_values(4, -0.2f, 0.2f, 5)),
                            {.pads_begin = {1, 1}, .pads_end = {1, 1}}, "conv");
  y = b.multiply(y, b.scalar(1.0f / 0.02f));
  y = b.quantize(y, ElementType::u8, {1.0f}, {120}, 1, 256, "requantize");
  y = b.dequantize(y, {0.02f}, {120.0f}, 1, "add/dequantize_a");
  y = b.add(y, b.dequantize(q, {0.01f}, {128.0f}, 1, "add/dequantize_b"));
  b.output(b.quantize(y, ElementType::u8, {0.03f}, {100}, 1, 256, "add"));
  const Tensor in = input_tensor({1, 4, 6, 6}, -1.0f, 1.0f, 9);
  const std::vector<float> before = run(g, in);
  PassContext ctx = context();
  run_fusion_passes(g, ctx);
  EXPECT_EQ(count(g, OpKind::QuantizedConvolution), 1u);
  EXPECT_EQ(count(g, OpKind::Add), 0u);
  EXPECT_EQ(count(g, OpKind::Dequantize), 0u);
  EXPECT_THAT(ctx.lines(), ::testing::Contains(HasSubstr("add/dequantize_a")));
  const std::vector<float> after = run(g, in);
  ASSERT_EQ(after.size(), before.size());
  for (std::size_t i = 0; i < after.size(); ++i) {
    EXPECT_LE(std::abs(after[i] - before[i]), 1.0f) << "code " << i;
  }
}

}  // namespace
}  // namespace qfuse::graph
