// fuse_bias: a per-channel constant Add after a layer becomes its bias; named negatives.
// Structure, and numbers before and after where the pass keeps them.

#include "pass_test_util.hpp"

namespace qfuse::graph {
namespace {

using namespace pass_test;
using ::testing::HasSubstr;

TEST(FuseBias, PerChannelAddAfterDeconvolutionBecomesItsBias) {
  Fixture f;
  const ValueId x = f.b.input("x", {1, 4, 5, 5});
  const ValueId w = f.b.constant("w", {4, 6, 3, 3}, random_values(4 * 6 * 9, -0.5f, 0.5f, 21));
  const ValueId y = f.b.deconvolution(x, w, std::nullopt, {.strides = {2, 2}}, "deconv");
  f.b.output(f.b.add(y, f.b.constant("c", {1, 6, 1, 1}, random_values(6, -1, 1, 22))));
  const Graph before = f.g;
  PassContext ctx = context();
  EXPECT_TRUE(fuse_bias(f.g, ctx));
  EXPECT_EQ(count(f.g, OpKind::Add), 0u);
  ASSERT_EQ(f.g.live_node_count(), 1u);
  EXPECT_EQ(f.g.node(f.g.topological_order()[0]).inputs.size(), 3u);
  const Tensor x_in = input_tensor({1, 4, 5, 5}, -1, 1, 23);
  expect_close(run(f.g, x_in), run(before, x_in), 1e-5f);
}

TEST(FuseBias, NotFusedWhenTheAddendIsNotConstant) {
  Fixture f;
  const ValueId x = f.b.input("x", {1, 4, 6, 6});
  const ValueId y = f.b.convolution(x, conv_weights(f.b, "w", 4, 4, false), std::nullopt,
                                    {.pads_begin = {1, 1}, .pads_end = {1, 1}}, "conv");
  f.b.output(f.b.add(y, x));
  PassContext ctx = context();
  EXPECT_FALSE(fuse_bias(f.g, ctx));
}

}  // namespace
}  // namespace qfuse::graph
