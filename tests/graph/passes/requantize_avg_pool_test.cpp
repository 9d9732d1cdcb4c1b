// requantize_avg_pool: an AvgPool between a dequantize and a quantize pools
// the codes and writes the next grid (a * mean + b before the rounding); a
// global one that nothing quantizes again writes the dequantized mean in f32.
// Checked by structure and against the graph before the pass (within one code,
// the mean rounded once instead of the dequantized mean). Named negative:
// padding counted in the window with a non-zero zero point.

#include "pass_test_util.hpp"

namespace qfuse::graph {
namespace {

using namespace pass_test;

PoolAttrs window(std::int64_t k, std::int64_t pad, bool exclude_pad) {
  PoolAttrs p;
  p.kernel = {k, k};
  p.strides = {1, 1};
  p.pads_begin = {pad, pad};
  p.pads_end = {pad, pad};
  p.exclude_pad = exclude_pad;
  return p;
}

// u8 codes -> Dequantize(s, z) -> AvgPool, then (requantize) FQ onto
// [lo, hi] with 256 levels -> Convert(u8), or nothing.
Graph pooled_codes(const PoolAttrs& pool, float z, bool requantize) {
  Graph g;
  Builder b(g);
  const ValueId q = b.input("q", {1, 3, 4, 4}, ElementType::u8);
  ValueId x = b.dequantize(q, {0.05f}, {z}, 1, "dequantize");
  x = b.op(OpKind::AvgPool, {x}, pool, "pool");
  if (requantize) {
    const float lo = -1.0f, hi = 0.02f * 255.0f - 1.0f;
    x = b.convert(b.fake_quantize(x, lo, hi, 0.0f, 255.0f, 256, "pool.q"), ElementType::u8, "codes");
  }
  b.output(x);
  return g;
}

Tensor codes(unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<std::uint8_t> v(48);
  for (auto& c : v) c = static_cast<std::uint8_t>(rng());
  return Tensor::from_vector<std::uint8_t>({1, 3, 4, 4}, v);
}

TEST(RequantizeAvgPool, PoolsTheCodesOntoTheNextGrid) {
  Graph g = pooled_codes(window(3, 1, true), 100.0f, true);
  const Graph before = g;
  PassContext ctx = context();
  EXPECT_TRUE(requantize_avg_pool(g, ctx));
  while (eliminate_dead_nodes(g, ctx)) {
  }
  EXPECT_EQ(g.live_node_count(), 1u);
  const Node& pool = g.node(g.topological_order()[0]);
  EXPECT_EQ(pool.kind, OpKind::AvgPool);
  EXPECT_EQ(g.value(pool.inputs[0]).type, ElementType::u8);
  EXPECT_EQ(g.value(pool.outputs[0]).type, ElementType::u8);
  const Tensor q = codes(51);
  const std::vector<float> fused = run(g, q), unfused = run(before, q);
  ASSERT_EQ(fused.size(), unfused.size());
  std::size_t equal = 0;
  for (std::size_t i = 0; i < fused.size(); ++i) {
    ASSERT_LE(std::abs(fused[i] - unfused[i]), 1.0f) << "element " << i;  // within one code
    equal += fused[i] == unfused[i];
  }
  // a = 0.05 / 0.02 = 2.5 puts every odd multiple of 1/2 of a mean on a tie,
  // which the two roundings may take either way: most, not all, are equal.
  EXPECT_GE(equal * 100, fused.size() * 80) << equal << " of " << fused.size() << " equal";
}

TEST(RequantizeAvgPool, AGlobalPoolNothingQuantizesWritesTheDequantizedMean) {
  Graph g = pooled_codes(window(4, 0, true), 37.0f, false);
  const Graph before = g;
  PassContext ctx = context();
  EXPECT_TRUE(requantize_avg_pool(g, ctx));
  while (eliminate_dead_nodes(g, ctx)) {
  }
  ASSERT_EQ(g.live_node_count(), 1u);
  const Node& pool = g.node(g.topological_order()[0]);
  EXPECT_TRUE(pool.attr<PoolAttrs>().to_f32);
  EXPECT_EQ(g.value(pool.outputs[0]).type, ElementType::f32);
  const Tensor q = codes(52);
  expect_close(run(g, q), run(before, q), 1e-6f);
}

TEST(RequantizeAvgPoolNegative, IncludedPaddingWithAZeroPointStaysF32) {
  Graph g = pooled_codes(window(3, 1, false), 100.0f, true);
  PassContext ctx = context();
  EXPECT_FALSE(requantize_avg_pool(g, ctx));
  bool explained = false;
  ctx.end_phase();
  for (const Refusal& r : ctx.refusals()) explained |= r.reason.find("counts padding") != std::string::npos;
  EXPECT_TRUE(explained);
}

}  // namespace
}  // namespace qfuse::graph
