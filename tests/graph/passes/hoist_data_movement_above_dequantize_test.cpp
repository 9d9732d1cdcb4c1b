// hoist_data_movement_above_dequantize: data movement before a layer moves onto the stored u8 / s8 tensor.
// Structure, and numbers before and after where the pass keeps them.

#include "pass_test_util.hpp"

namespace qfuse::graph {
namespace {

using namespace pass_test;
using ::testing::HasSubstr;

TEST(HoistReshapeAboveDequantize, FlattenBeforeFullyConnectedMovesOntoTheU8Tensor) {
  Fixture f;
  const ValueId x = f.b.input("x", {2, 8, 1, 1});
  const ValueId q = f.b.fake_quantize(x, 0.0f, 2.55f, 0.0f, 2.55f, 256);
  const ValueId flat = f.b.op(OpKind::Flatten, {q}, FlattenAttrs{1});
  const ValueId w = f.b.constant("w", {4, 8}, random_values(32, -0.5f, 0.5f, 12));
  const ValueId wq = f.b.fake_quantize(w, -0.5f, 0.5f, -0.5f, 0.5f, 255);
  f.b.output(f.b.fully_connected(flat, wq, std::nullopt, "fc"));
  const Graph before = f.g;
  PassContext ctx = context();
  run_fusion_passes(f.g, ctx);
  EXPECT_EQ(count(f.g, OpKind::QuantizedFullyConnected), 1u);
  EXPECT_THAT(ctx.lines(), ::testing::Contains(HasSubstr("hoist_data_movement_above_dequantize")));
  const Tensor x_in = input_tensor({2, 8, 1, 1}, 0, 3, 13);
  expect_close(run(f.g, x_in), run(before, x_in), 1e-4f);
}

}  // namespace
}  // namespace qfuse::graph
