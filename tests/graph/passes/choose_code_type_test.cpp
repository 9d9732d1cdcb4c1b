// choose_code_type: a Q/DQ pair on a symmetric grid (u8, zero point 128)
// stores s8 codes with zero point 0, one on an s8 grid with a non-zero zero
// point u8 codes with the zero point + 128. Checked by structure and against
// the graph before the pass, bit for bit, on inputs with many .5 ties. Named
// negatives: codes another op reads, codes that are a graph output, and grids
// already stored so.

#include "pass_test_util.hpp"

namespace qfuse::graph {
namespace {

using namespace pass_test;

const Shape kShape{1, 3, 8, 8};

// x / 0.25 on every half step across the codes and beyond, and random values.
Tensor ties_and_noise() {
  std::vector<float> v(static_cast<std::size_t>(element_count(kShape)));
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> d(-40.0f, 40.0f);
  for (std::size_t i = 0; i < v.size(); ++i) {
    v[i] = i % 2 == 0 ? (static_cast<float>(i / 2) - 48.0f) * 0.125f * 9.0f : d(rng);
  }
  return Tensor::from_vector<float>(kShape, std::move(v));
}

struct Pair {
  Graph g;
  ValueId codes;
};

Pair pair(ElementType to, std::int32_t zero_point, bool codes_out = false, bool other_reader = false) {
  Pair p;
  Builder b(p.g);
  const ValueId x = b.input("x", kShape);
  p.codes = b.quantize(x, to, {0.25f}, {zero_point}, 1, 256, "q");
  ValueId y = b.dequantize(p.codes, {0.25f}, {static_cast<float>(zero_point)}, 1, "dq");
  if (other_reader) y = b.add(y, b.convert(p.codes, ElementType::f32, "raw"));
  b.output(y);
  if (codes_out) b.output(p.codes);
  return p;
}

// Runs the pass to its end; the output before and after must be the same bits.
Graph chosen(const Graph& before, bool expect_change) {
  Graph g = before;
  PassContext ctx = context();
  bool changed = false;
  while (choose_code_type(g, ctx)) changed = true;
  while (eliminate_dead_nodes(g, ctx)) {
  }
  EXPECT_EQ(changed, expect_change);
  EXPECT_EQ(run(before, ties_and_noise()), run(g, ties_and_noise()));
  return g;
}

const QuantizeAttrs& only_quantize(const Graph& g) {
  EXPECT_EQ(count(g, OpKind::Quantize), 1u);
  for (NodeId id : g.topological_order()) {
    if (g.node(id).kind == OpKind::Quantize) return g.node(id).attr<QuantizeAttrs>();
  }
  static const QuantizeAttrs none;
  return none;
}

float dequantize_zero_point(const Graph& g) {
  for (NodeId id : g.topological_order()) {
    if (g.node(id).kind == OpKind::Dequantize) return g.node(id).attr<DequantizeAttrs>().zero_point[0];
  }
  return -1.0f;
}

TEST(ChooseCodeType, SymmetricU8PairStoresS8WithZeroPointZero) {
  const Graph g = chosen(pair(ElementType::u8, 128).g, true);
  EXPECT_EQ(only_quantize(g).to, ElementType::s8);
  EXPECT_EQ(only_quantize(g).zero_point, std::vector<std::int32_t>{0});
  EXPECT_EQ(dequantize_zero_point(g), 0.0f);
}

TEST(ChooseCodeType, S8PairWithAZeroPointStoresU8) {
  const Graph g = chosen(pair(ElementType::s8, -5).g, true);
  EXPECT_EQ(only_quantize(g).to, ElementType::u8);
  EXPECT_EQ(only_quantize(g).zero_point, std::vector<std::int32_t>{123});
  EXPECT_EQ(dequantize_zero_point(g), 123.0f);
}

TEST(ChooseCodeType, NegativesKeepTheirCodes) {
  // Already the storage: s8 with zero point 0, u8 asymmetric.
  chosen(pair(ElementType::s8, 0).g, false);
  chosen(pair(ElementType::u8, 37).g, false);
  // The codes are a graph output, or another op reads them.
  chosen(pair(ElementType::u8, 128, true).g, false);
  chosen(pair(ElementType::u8, 128, false, true).g, false);
}

}  // namespace
}  // namespace qfuse::graph
