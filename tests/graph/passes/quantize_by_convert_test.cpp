// quantize_by_convert: a quantize-only FakeQuantize (output levels lo .. lo +
// L - 1) and the Convert to u8 / s8 after it become one quantizing Convert.
// The codes are checked against the graph before the pass (the FakeQuantize,
// then the Convert's rounding and saturation), including inputs on rounding
// ties. Named negatives: per-channel ranges, output levels that do not start
// at the type's minimum, a FakeQuantize read elsewhere too.

#include "pass_test_util.hpp"

namespace qfuse::graph {
namespace {

using namespace pass_test;

// x -> FQ(il, ih, lo, lo + 255, 256) -> Convert(t) -> output; optionally the
// FakeQuantize's output is a graph output too.
Graph quantize_only(float il, float ih, float lo, ElementType t, bool fq_is_output = false) {
  Graph g;
  Builder b(g);
  const ValueId x = b.input("x", {1, 3, 4, 5});
  const ValueId q = b.fake_quantize(x, il, ih, lo, lo + 255.0f, 256, "fq");
  b.output(b.convert(q, t, "to_codes"));
  if (fq_is_output) b.output(q);
  return g;
}

// Inputs across the range and beyond it, a quarter of them on a tie of the
// grid (il + (k + 1/2) * step).
Tensor tie_inputs(float il, float ih) {
  const float step = (ih - il) / 255.0f;
  std::vector<float> v(60);
  for (std::size_t i = 0; i < v.size(); ++i) {
    const float k = static_cast<float>(i) * 4.5f - 10.0f;
    v[i] = i % 4 == 0 ? il + (std::floor(k) + 0.5f) * step : il + k * step;
  }
  return Tensor::from_vector<float>({1, 3, 4, 5}, v);
}

TEST(QuantizeByConvert, FakeQuantizeAndConvertBecomeOneQuantizingConvert) {
  for (const ElementType t : {ElementType::u8, ElementType::s8}) {
    const float lo = t == ElementType::u8 ? 0.0f : -128.0f;
    Graph g = quantize_only(-1.0f, 1.55f, lo, t);
    const Graph before = g;
    PassContext ctx = context();
    EXPECT_TRUE(quantize_by_convert(g, ctx));
    EXPECT_EQ(count(g, OpKind::FakeQuantize), 0u);
    ASSERT_EQ(count(g, OpKind::Convert), 1u);
    EXPECT_TRUE(g.node(g.topological_order()[0]).attr<ConvertAttrs>().quantizes());
    const Tensor x = tie_inputs(-1.0f, 1.55f);
    EXPECT_EQ(run(g, x), run(before, x)) << "type " << to_string(t);
  }
}

TEST(QuantizeByConvertNegative, OutputLevelsThatDoNotStartAtTheTypesMinimumStay) {
  Graph g = quantize_only(-1.0f, 1.55f, -100.0f, ElementType::s8);
  PassContext ctx = context();
  EXPECT_FALSE(quantize_by_convert(g, ctx));
  EXPECT_EQ(count(g, OpKind::FakeQuantize), 1u);
}

TEST(QuantizeByConvertNegative, AFakeQuantizeReadElsewhereStays) {
  Graph g = quantize_only(-1.0f, 1.55f, 0.0f, ElementType::u8, /*fq_is_output=*/true);
  PassContext ctx = context();
  EXPECT_FALSE(quantize_by_convert(g, ctx));
  EXPECT_EQ(count(g, OpKind::FakeQuantize), 1u);
}

TEST(QuantizeByConvertNegative, PerChannelRangesStay) {
  Graph g;
  Builder b(g);
  const ValueId x = b.input("x", {1, 3, 4, 5});
  const ValueId il = b.constant("il", {1, 3, 1, 1}, {-1.0f, -2.0f, -0.5f});
  const ValueId ih = b.constant("ih", {1, 3, 1, 1}, {1.0f, 2.0f, 0.5f});
  const ValueId ol = b.constant("ol", {1}, {0.0f}), oh = b.constant("oh", {1}, {255.0f});
  b.output(b.convert(b.fake_quantize(x, il, ih, ol, oh, 256, "fq"), ElementType::u8, "to_codes"));
  PassContext ctx = context();
  EXPECT_FALSE(quantize_by_convert(g, ctx));
  EXPECT_EQ(count(g, OpKind::FakeQuantize), 1u);
}

}  // namespace
}  // namespace qfuse::graph
