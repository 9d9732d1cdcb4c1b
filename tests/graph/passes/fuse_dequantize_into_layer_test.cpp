// fuse_dequantize_into_layer: dequantized input and weights around a layer become one quantized layer; named negatives.
// Structure, and numbers before and after where the pass keeps them.

#include "pass_test_util.hpp"

namespace qfuse::graph {
namespace {

using namespace pass_test;
using ::testing::HasSubstr;

TEST(FuseDequantizeIntoLayer, DequantizedInputAndWeightsBecomeOneQuantizedLayer) {
  Graph g = quantized_block(true);
  PassContext ctx = context();
  quantize_weights(g, ctx);
  quantize_weights(g, ctx);
  split_fake_quantize(g, ctx);
  split_fake_quantize(g, ctx);
  eliminate_dead_nodes(g, ctx);
  EXPECT_TRUE(fuse_dequantize_into_layer(g, ctx));
  EXPECT_EQ(count(g, OpKind::QuantizedConvolution), 1u);
  const Node* q = nullptr;
  for (NodeId id : g.topological_order()) {
    if (g.node(id).kind == OpKind::QuantizedConvolution) q = &g.node(id);
  }
  ASSERT_NE(q, nullptr);
  const auto& a = q->attr<QuantizedLayerAttrs>();
  EXPECT_TRUE(a.has_bias);
  EXPECT_EQ(a.src_zero_point, 0);
  ASSERT_EQ(a.chain.steps.size(), 1u);
  const auto* scale = std::get_if<composer::Scale>(&a.chain.steps[0]);
  ASSERT_NE(scale, nullptr);
  EXPECT_EQ(scale->values.size(), 8u);
}

// An asymmetric u8 input (zero point 100): an unpadded convolution takes the
// zero point into its bias (-100 * sum of its weights, exact in the
// accumulator), so oneDNN runs it without a source zero point; a padded one
// keeps it (a padded 0 is not the real 0), and so matches unfused only by
// oneDNN's own zero-point handling. Both match the unfused graph within 1e-5.
TEST(FuseDequantizeIntoLayer, SourceZeroPointGoesIntoTheBiasOfAnUnpaddedConvolution) {
  for (const bool padded : {false, true}) {
    Graph g;
    Builder b(g);
    const ValueId x = b.input("x", {1, 4, 6, 6});
    const float s = 0.02f;
    const ValueId q = b.fake_quantize(x, -100 * s, 155 * s, -100 * s, 155 * s, 256, "fq_in");
    graph::ConvAttrs attrs;
    if (padded) attrs = {.pads_begin = {1, 1}, .pads_end = {1, 1}};
    b.output(b.convolution(q, conv_weights(b, "w", 8, 4, true), std::nullopt, attrs, "conv"));
    const Graph before = g;
    PassContext ctx = context();
    run_fusion_passes(g, ctx);
    const Node* conv = nullptr;
    for (NodeId id : g.topological_order()) {
      if (g.node(id).kind == OpKind::QuantizedConvolution) conv = &g.node(id);
    }
    ASSERT_NE(conv, nullptr);
    const auto& a = conv->attr<QuantizedLayerAttrs>();
    EXPECT_EQ(a.src_zero_point, padded ? 100 : 0);
    EXPECT_EQ(a.has_bias, !padded);
    const Tensor x_in = input_tensor({1, 4, 6, 6}, -2.5f, 3.5f, 41);
    expect_close(run(g, x_in), run(before, x_in), 1e-5f);
  }
}

TEST(FuseDequantizeIntoLayer, NotFusedWhenWeightsAreNotQuantized) {
  Fixture f;
  const ValueId x = f.b.input("x", {1, 4, 6, 6});
  const ValueId q = f.b.fake_quantize(x, 0.0f, 2.55f, 0.0f, 2.55f, 256);
  f.b.output(f.b.convolution(q, conv_weights(f.b, "w", 8, 4, false), std::nullopt, {}, "conv"));
  PassContext ctx = context();
  run_fusion_passes(f.g, ctx);
  EXPECT_EQ(count(f.g, OpKind::QuantizedConvolution), 0u);
  EXPECT_EQ(count(f.g, OpKind::Convolution), 1u);
}

TEST(FuseDequantizeIntoLayer, NotFusedWhenTheBackendRefuses) {
  Graph g = quantized_block(false);
  PassContext ctx(PassOptions{}, [](const Graph&, const Node&, const Shape&) {
    return std::optional<std::string>("refused for the test");
  });
  run_fusion_passes(g, ctx);
  EXPECT_EQ(count(g, OpKind::QuantizedConvolution), 0u);
  EXPECT_EQ(count(g, OpKind::Convolution), 2u);
}

// A refused candidate leaves the graph as it was: the bias in accumulator
// units made for it is taken back, and the pass reports no change.
TEST(FuseDequantizeIntoLayer, ARefusalLeavesTheGraphAsItWas) {
  Graph g = quantized_block(false);
  PassContext ctx = context();
  while (quantize_weights(g, ctx)) {
  }
  while (split_fake_quantize(g, ctx)) {
  }
  eliminate_dead_nodes(g, ctx);
  PassContext refusing(PassOptions{}, [](const Graph&, const Node&, const Shape&) {
    return std::optional<std::string>("refused for the test");
  });
  const std::size_t values = g.value_count();
  EXPECT_FALSE(fuse_dequantize_into_layer(g, refusing));
  EXPECT_EQ(g.value_count(), values);
  refusing.end_phase();
  ASSERT_FALSE(refusing.refusals().empty());
  EXPECT_THAT(refusing.refusals()[0].reason, HasSubstr("refused for the test"));
}

TEST(GraphDiscardLastValue, OnlyAnUnreadValueAddedLast) {
  Graph g;
  Builder b(g);
  const ValueId x = b.input("x", {2});
  const ValueId c = b.constant("c", {2}, {1.0f, 2.0f});
  b.output(b.binary(OpKind::Add, x, c, "sum"));
  EXPECT_THROW(g.discard_last_value(c), GraphError);  // read, and not the last
  const ValueId d = g.add_constant("d", Tensor::from_vector<float>({1}, {3.0f}));
  EXPECT_THROW(g.discard_last_value(x), GraphError);
  g.discard_last_value(d);
  EXPECT_EQ(g.value_count(), 3u);  // x, c and the sum
  EXPECT_FALSE(g.find_value("d").has_value());
}

}  // namespace
}  // namespace qfuse::graph
