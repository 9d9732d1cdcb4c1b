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

// s8 codes -> Convert -> Subtract(zero point) -> Multiply(scale): each fold
// makes an f32 constant; the one the next fold consumed gives up its data
// (a model's weights are not held once per step), the codes stay.
TEST(FoldConstants, AFoldedChainKeepsNoIntermediateF32Tensor) {
  Fixture f;
  std::vector<float> codes(24);
  for (std::size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<float>(i % 7) - 3.0f;
  Tensor q = Tensor::from_vector<std::int8_t>(
      {24}, std::vector<std::int8_t>(codes.begin(), codes.end()));
  const ValueId w = f.g.add_constant("w.s8", q);
  const ValueId widened = f.b.convert(w, ElementType::f32, "to_f32");
  const ValueId centred = f.b.binary(OpKind::Subtract, widened, f.b.scalar(1.0f), "minus_zp");
  const ValueId y = f.b.multiply(centred, f.b.scalar(0.5f));
  f.b.output(y);
  PassContext ctx = context();
  while (fold_constants(f.g, ctx)) {
  }
  EXPECT_EQ(f.g.live_node_count(), 0u);
  const Value& out = f.g.value(f.g.outputs()[0]);
  ASSERT_TRUE(out.is_constant());
  for (std::size_t i = 0; i < codes.size(); ++i) {
    EXPECT_EQ(out.constant->data<float>()[i], (codes[i] - 1.0f) * 0.5f) << i;
  }
  EXPECT_TRUE(f.g.value(w).is_constant());  // the codes
  std::size_t f32_constants = 0;
  for (std::uint32_t v = 0; v < f.g.value_count(); ++v) {
    const Value& value = f.g.value(ValueId{v});
    if (value.is_constant() && value.type == ElementType::f32 && value.shape == Shape{24}) {
      ++f32_constants;
    }
  }
  EXPECT_EQ(f32_constants, 1u);  // the result alone
}

}  // namespace
}  // namespace qfuse::graph
