// recognize_dequantize: Convert(q -> f32) [-> Subtract(z)] [-> Multiply(s)]
// becomes one Dequantize op. Checked by structure and against the graph
// before the pass, bit for bit (the unfused graph runs the Convert as a
// reorder and the Subtract and Multiply as binary primitives; the Dequantize
// is qfuse's own loop). Named negatives: each operand that is not such a
// constant keeps its node.

#include "pass_test_util.hpp"

namespace qfuse::graph {
namespace {

using namespace pass_test;

const Shape kShape{2, 3, 4, 5};

template <typename T>
Tensor codes(const Shape& shape, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<T> v(static_cast<std::size_t>(element_count(shape)));
  for (T& c : v) c = static_cast<T>(rng());
  return Tensor::from_vector<T>(shape, std::move(v));
}

// Runs the pass to its end; the outputs before and after must be the same bits.
Graph recognized(const Graph& before, const Tensor& q) {
  Graph g = before;
  PassContext ctx = context();
  while (recognize_dequantize(g, ctx)) {
  }
  while (eliminate_dead_nodes(g, ctx)) {
  }
  const std::vector<float> a = run(before, q), b = run(g, q);
  EXPECT_EQ(a, b);
  return g;
}

const DequantizeAttrs& only_dequantize(const Graph& g) {
  EXPECT_EQ(count(g, OpKind::Dequantize), 1u);
  for (NodeId id : g.topological_order()) {
    if (g.node(id).kind == OpKind::Dequantize) return g.node(id).attr<DequantizeAttrs>();
  }
  static const DequantizeAttrs none;
  return none;
}

TEST(RecognizeDequantize, ConvertSubtractMultiplyPerTensor) {
  Graph g0;
  Builder b(g0);
  const ValueId q = b.input("q", kShape, ElementType::u8);
  ValueId x = b.convert(q, ElementType::f32, "cast");
  x = b.binary(OpKind::Subtract, x, b.scalar(13.0f), "sub");
  b.output(b.binary(OpKind::Multiply, x, b.scalar(0.05f), "mul"));
  const Graph g = recognized(g0, codes<std::uint8_t>(kShape, 1));
  const DequantizeAttrs& a = only_dequantize(g);
  EXPECT_EQ(a.scale, std::vector<float>{0.05f});
  EXPECT_EQ(a.zero_point, std::vector<float>{13.0f});
  EXPECT_EQ(count(g, OpKind::Convert) + count(g, OpKind::Subtract) + count(g, OpKind::Multiply),
            0u);
}

TEST(RecognizeDequantize, PerChannelScaleFirstOperandAndZeroPoint) {
  Graph g0;
  Builder b(g0);
  const ValueId q = b.input("q", kShape, ElementType::s8);
  ValueId x = b.convert(q, ElementType::f32, "cast");
  x = b.binary(OpKind::Subtract, x, b.constant("z", {3, 1, 1}, {-3.0f, 0.0f, 5.0f}), "sub");
  // The scale as the first operand: the same product.
  b.output(b.binary(OpKind::Multiply, b.constant("s", {1, 3, 1, 1}, {0.1f, 0.02f, 0.3f}), x,
                    "mul"));
  const Graph g = recognized(g0, codes<std::int8_t>(kShape, 2));
  const DequantizeAttrs& a = only_dequantize(g);
  EXPECT_EQ(a.axis, 1);
  EXPECT_EQ(a.scale, (std::vector<float>{0.1f, 0.02f, 0.3f}));
  EXPECT_EQ(a.zero_point, (std::vector<float>{-3.0f, 0.0f, 5.0f}));
}

TEST(RecognizeDequantize, ConvertAloneAndInt32Bias) {
  Graph g0;
  Builder b(g0);
  const ValueId q = b.input("q", {7, 5}, ElementType::s32);
  b.output(b.binary(OpKind::Multiply, b.convert(q, ElementType::f32, "cast"),
                    b.constant("s", {5}, {1e-3f, 2e-3f, 3e-3f, 4e-3f, 5e-3f}), "mul"));
  const Graph g = recognized(g0, codes<std::int32_t>({7, 5}, 3));
  EXPECT_EQ(only_dequantize(g).axis, 1);

  Graph c0;
  Builder cb(c0);
  cb.output(cb.convert(cb.input("q", kShape, ElementType::u8), ElementType::f32, "cast"));
  const Graph c = recognized(c0, codes<std::uint8_t>(kShape, 4));
  EXPECT_EQ(only_dequantize(c), DequantizeAttrs{});
}

// Each graph keeps the node named `kept`, of kind `kind`.
void expect_kept(const Graph& g0, const Tensor& q, OpKind kind, const std::string& kept) {
  const Graph g = recognized(g0, q);
  bool found = false;
  for (NodeId id : g.topological_order()) {
    found = found || (g.node(id).kind == kind && g.node(id).name == kept);
  }
  EXPECT_TRUE(found) << kept << " is gone";
}

TEST(RecognizeDequantizeNegative, OperandsThatAreNotSuchConstantsStay) {
  const Tensor q = codes<std::uint8_t>(kShape, 5);
  {  // A run-time zero point (DynamicQuantizeLinear's): the Subtract stays.
    Graph g;
    Builder b(g);
    const ValueId x = b.convert(b.input("q", kShape, ElementType::u8), ElementType::f32, "cast");
    b.output(b.binary(OpKind::Subtract, x, b.unary(OpKind::Relu, b.scalar(2.0f)), "sub"));
    expect_kept(g, q, OpKind::Subtract, "sub");
  }
  {  // Scale before the zero point: (q * s) - z is not (q - z) * s.
    Graph g;
    Builder b(g);
    ValueId x = b.convert(b.input("q", kShape, ElementType::u8), ElementType::f32, "cast");
    x = b.binary(OpKind::Multiply, x, b.scalar(0.5f), "mul");
    b.output(b.binary(OpKind::Subtract, x, b.scalar(3.0f), "sub"));
    expect_kept(g, q, OpKind::Subtract, "sub");
  }
  {  // Zero point along the channels, scale along the rows: no one axis.
    Graph g;
    Builder b(g);
    ValueId x = b.convert(b.input("q", kShape, ElementType::u8), ElementType::f32, "cast");
    x = b.binary(OpKind::Subtract, x, b.constant("z", {3, 1, 1}, {1.0f, 2.0f, 3.0f}), "sub");
    b.output(b.binary(OpKind::Multiply, x, b.constant("s", {4, 1}, {1.0f, 0.5f, 0.25f, 2.0f}),
                      "mul"));
    expect_kept(g, q, OpKind::Multiply, "mul");
  }
  {  // z - q is not a dequantize.
    Graph g;
    Builder b(g);
    const ValueId x = b.convert(b.input("q", kShape, ElementType::u8), ElementType::f32, "cast");
    b.output(b.binary(OpKind::Subtract, b.scalar(3.0f), x, "sub"));
    expect_kept(g, q, OpKind::Subtract, "sub");
  }
}

TEST(RecognizeDequantizeNegative, IndicesStayAConvert) {
  Graph g;
  Builder b(g);
  b.output(b.convert(b.input("i", {4}, ElementType::s64), ElementType::f32, "cast"));
  PassContext ctx = context();
  EXPECT_FALSE(recognize_dequantize(g, ctx));
}

TEST(RecognizeDequantize, AConvertWithTwoReadersGivesEachItsOwn) {
  Graph g0;
  Builder b(g0);
  const ValueId x = b.convert(b.input("q", kShape, ElementType::u8), ElementType::f32, "cast");
  const ValueId a = b.binary(OpKind::Multiply, b.binary(OpKind::Subtract, x, b.scalar(7.0f), "sub"),
                             b.scalar(0.25f), "mul");
  b.output(b.binary(OpKind::Add, a, b.unary(OpKind::Relu, x, "relu"), "sum"));
  const Graph g = recognized(g0, codes<std::uint8_t>(kShape, 6));
  EXPECT_EQ(count(g, OpKind::Dequantize), 2u);
  EXPECT_EQ(count(g, OpKind::Convert) + count(g, OpKind::Subtract) + count(g, OpKind::Multiply),
            0u);
}

}  // namespace
}  // namespace qfuse::graph
