// the pass manager: the backend check it requires, refusals kept once per candidate, no change on a graph with nothing to fuse.
// Structure, and numbers before and after where the pass keeps them.

#include "pass_test_util.hpp"

namespace qfuse::graph {
namespace {

using namespace pass_test;
using ::testing::HasSubstr;

TEST(PassContext, RequiresTheBackendsCheck) {
  EXPECT_THROW((void)PassContext(PassOptions{}, nullptr), std::invalid_argument);
}

TEST(PassManager, RefusalsOfTheLastRoundAreKeptOncePerCandidate) {
  Fixture f;
  const ValueId x = f.b.input("x", {1, 4, 6, 6});
  f.b.output(f.b.convolution(x, conv_weights(f.b, "w", 8, 4, false), std::nullopt, {}, "conv"));
  PassContext ctx = context();
  run_fusion_passes(f.g, ctx);
  // The plain f32 conv is refused once, with the reason naming its input.
  std::size_t n = 0;
  for (const Refusal& r : ctx.refusals()) {
    if (r.node == "conv" && r.pass == "fuse_dequantize_into_layer") {
      ++n;
      EXPECT_THAT(r.reason, HasSubstr("graph input"));
    }
  }
  EXPECT_EQ(n, 1u);
}

TEST(PassManager, ReportsNoChangeOnAGraphWithNothingToFuse) {
  Fixture f;
  const ValueId x = f.b.input("x", {1, 4, 6, 6});
  f.b.output(f.b.relu(x));
  PassContext ctx = context();
  EXPECT_FALSE(run_fusion_passes(f.g, ctx));
  EXPECT_TRUE(ctx.lines().empty());
}

}  // namespace
}  // namespace qfuse::graph
