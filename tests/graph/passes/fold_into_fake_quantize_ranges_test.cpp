// fold_into_fake_quantize_ranges: a Clamp the range covers is dropped, a positive Multiply divides the ranges; named negatives.
// Structure, and numbers before and after where the pass keeps them.

#include "pass_test_util.hpp"

namespace qfuse::graph {
namespace {

using namespace pass_test;
using ::testing::HasSubstr;

TEST(FoldIntoFakeQuantizeRanges, ClampCoveringTheRangeIsDropped) {
  Fixture f;
  const ValueId x = f.b.input("x", {1, 2, 4, 4});
  f.b.output(f.b.fake_quantize(f.b.clamp(x, -1.0f, 7.0f), 0.0f, 6.0f, 0.0f, 6.0f, 256));
  const Graph before = f.g;
  PassContext ctx = context();
  EXPECT_TRUE(fold_into_fake_quantize_ranges(f.g, ctx));
  EXPECT_TRUE(eliminate_dead_nodes(f.g, ctx));
  EXPECT_EQ(count(f.g, OpKind::Clamp), 0u);
  const Tensor x_in = input_tensor({1, 2, 4, 4}, -3, 9, 4);
  expect_close(run(f.g, x_in), run(before, x_in), 0.0f);
}

TEST(FoldIntoFakeQuantizeRanges, NotFoldedWhenClampIsNarrowerThanRange) {
  Fixture f;
  const ValueId x = f.b.input("x", {1, 2, 4, 4});
  f.b.output(f.b.fake_quantize(f.b.clamp(x, 0.0f, 3.0f), 0.0f, 6.0f, 0.0f, 6.0f, 256));
  PassContext ctx = context();
  EXPECT_FALSE(fold_into_fake_quantize_ranges(f.g, ctx));
}

TEST(FoldIntoFakeQuantizeRanges, PositiveMultiplyDividesTheRanges) {
  Fixture f;
  const ValueId x = f.b.input("x", {1, 2, 4, 4});
  // A power of two keeps both forms bit-identical.
  f.b.output(f.b.fake_quantize(f.b.multiply(x, f.b.scalar(4.0f)), -2.0f, 6.0f, -2.0f, 6.0f, 256));
  const Graph before = f.g;
  PassContext ctx = context();
  EXPECT_TRUE(fold_into_fake_quantize_ranges(f.g, ctx));
  eliminate_dead_nodes(f.g, ctx);
  EXPECT_EQ(count(f.g, OpKind::Multiply), 0u);
  const Tensor x_in = input_tensor({1, 2, 4, 4}, -1, 2, 5);
  expect_close(run(f.g, x_in), run(before, x_in), 0.0f);
}

TEST(FoldIntoFakeQuantizeRanges, NegativeMultiplyIsNotFolded) {
  Fixture f;
  const ValueId x = f.b.input("x", {1, 2, 4, 4});
  f.b.output(f.b.fake_quantize(f.b.multiply(x, f.b.scalar(-1.0f)), 0.0f, 6.0f, 0.0f, 6.0f, 256));
  PassContext ctx = context();
  EXPECT_FALSE(fold_into_fake_quantize_ranges(f.g, ctx));
}

}  // namespace
}  // namespace qfuse::graph
