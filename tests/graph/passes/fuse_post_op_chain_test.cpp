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

}  // namespace
}  // namespace qfuse::graph
