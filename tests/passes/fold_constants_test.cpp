// fold_constants: constant expressions (an unfused weight dequantize) are evaluated once.
// Structure, and numbers before and after where the pass keeps them.

#include "pass_test_util.hpp"

namespace qfuse::graph {
namespace {

using namespace pass_test;
using ::testing::HasSubstr;

TEST(FoldConstants, UnfusedWeightDequantizeIsEvaluatedOnce) {
  Fixture f;
  const ValueId x = f.b.input("x", {1, 4, 6, 6});
  // f32 input (no activation FakeQuantize): the layer stays f32.
  f.b.output(f.b.convolution(x, conv_weights(f.b, "w", 8, 4, true), std::nullopt, {}, "conv"));
  const Graph before = f.g;
  PassContext ctx = context();
  run_fusion_passes(f.g, ctx);
  EXPECT_EQ(f.g.live_node_count(), 1u);
  EXPECT_TRUE(f.g.value(f.g.node(f.g.topological_order()[0]).inputs[1]).is_constant());
  const Tensor x_in = input_tensor({1, 4, 6, 6}, -1, 1, 14);
  expect_close(run(f.g, x_in), run(before, x_in), 1e-5f);
}

}  // namespace
}  // namespace qfuse::graph
