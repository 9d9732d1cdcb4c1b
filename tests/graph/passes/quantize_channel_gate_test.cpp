// quantize_channel_gate: codes -> Dequantize(s, z) -> Multiply(gate[N, C, 1,
// 1]) -> quantizing Convert become one GateMultiply
// on the codes. Checked against the graph before the pass, code for code
// (the same f32 steps), with the gate on either side of the product.
// Named negatives: a constant gate, a gate with a value per element, a
// product read elsewhere, a per-channel dequantize (refused with its reason).

#include "pass_test_util.hpp"

namespace qfuse::graph {
namespace {

using namespace pass_test;

const Shape kCodes{2, 6, 4, 5};

struct GateOptions {
  Shape gate_shape{2, 6, 1, 1};
  bool gate_first = false;      // gate * x instead of x * gate
  bool constant_gate = false;
  bool product_is_output = false;
  bool per_channel_scale = false;
  bool zero_point = true;       // the dequantize has a zero point
};

QuantizeAttrs quantize_linear(float scale, std::int32_t zero_point) {
  QuantizeAttrs a;
  a.to = ElementType::u8;
  a.scale = {scale};
  a.zero_point = {zero_point};
  return a;
}

// codes (u8) -> dequantize (zero point 9, scale 0.05) -> * gate -> quantize
// (scale 0.03, zero point 3).
Graph gated(const GateOptions& o) {
  Graph g;
  Builder b(g);
  const ValueId q = b.input("codes", kCodes, ElementType::u8);
  const ValueId x =
      b.dequantize(q,
                   o.per_channel_scale ? std::vector<float>{0.05f, 0.04f, 0.03f, 0.05f, 0.02f, 0.01f}
                                       : std::vector<float>{0.05f},
                   {o.zero_point ? 9.0f : 0.0f}, 1, "dequantize");
  const std::int64_t gate_size = element_count(o.gate_shape);
  const ValueId gate =
      o.constant_gate
          ? b.constant("gate", o.gate_shape,
                       random_values(static_cast<std::size_t>(gate_size), 0.0f, 1.0f, 4))
          : b.input("gate", o.gate_shape);
  const ValueId p = o.gate_first ? b.binary(OpKind::Multiply, gate, x, "gate_mul")
                                 : b.binary(OpKind::Multiply, x, gate, "gate_mul");
  b.output(b.op(OpKind::Quantize, {p}, quantize_linear(0.03f, 3), "quantize"));
  if (o.product_is_output) b.output(p);
  return g;
}

// Every output's values, the codes first.
std::vector<float> run_gated(const Graph& g, const GateOptions& o, unsigned seed) {
  const CompiledModel m = compile(g, {.fuse = false});
  InferRequest r = m.create_infer_request();
  std::mt19937 rng(seed);
  std::vector<std::uint8_t> codes(static_cast<std::size_t>(element_count(kCodes)));
  for (auto& c : codes) c = static_cast<std::uint8_t>(rng());
  r.set_input("codes", Tensor::from_vector<std::uint8_t>(kCodes, codes));
  if (!o.constant_gate) {
    const std::int64_t n = element_count(o.gate_shape);
    r.set_input("gate", Tensor::from_vector<float>(
                            o.gate_shape, random_values(static_cast<std::size_t>(n), 0.0f, 1.0f,
                                                        seed + 1)));
  }
  r.infer();
  std::vector<float> out;
  for (const std::string& name : m.output_names()) {
    const Tensor& y = r.output(name);
    for (std::int64_t i = 0; i < y.size(); ++i) out.push_back(y.as_float(i));
  }
  return out;
}

TEST(QuantizeChannelGate, DequantizeGateAndQuantizeBecomeOneGateMultiply) {
  for (const bool gate_first : {false, true}) {
    for (const bool zero_point : {true, false}) {
      for (const Shape& gate_shape : {Shape{2, 6, 1, 1}, Shape{1, 6, 1, 1}}) {
        GateOptions o;
        o.gate_first = gate_first;
        o.zero_point = zero_point;
        o.gate_shape = gate_shape;
        Graph g = gated(o);
        const Graph before = g;
        PassContext ctx = context();
        ASSERT_TRUE(quantize_channel_gate(g, ctx));
        EXPECT_FALSE(quantize_channel_gate(g, ctx));
        eliminate_dead_nodes(g, ctx);
        EXPECT_EQ(count(g, OpKind::GateMultiply), 1u);
        EXPECT_EQ(count(g, OpKind::Multiply), 0u);
        EXPECT_EQ(count(g, OpKind::Convert) + count(g, OpKind::Quantize), 0u);
        for (unsigned seed : {1u, 2u, 3u}) {
          EXPECT_EQ(run_gated(g, o, seed), run_gated(before, o, seed))
              << "gate first " << gate_first << " zero point " << zero_point << " gate "
              << to_string(gate_shape);
        }
      }
    }
  }
}

void expect_no_gate_multiply(const GateOptions& o, const char* what) {
  Graph g = gated(o);
  PassContext ctx = context();
  EXPECT_FALSE(quantize_channel_gate(g, ctx)) << what;
  EXPECT_EQ(count(g, OpKind::GateMultiply), 0u) << what;
}

TEST(QuantizeChannelGateNegative, AConstantGateStays) {
  GateOptions o;
  o.constant_gate = true;
  expect_no_gate_multiply(o, "constant gate");
}

TEST(QuantizeChannelGateNegative, AGatePerElementStays) {
  GateOptions o;
  o.gate_shape = kCodes;
  expect_no_gate_multiply(o, "full-tensor gate");
  o.gate_shape = {2, 6, 4, 1};
  expect_no_gate_multiply(o, "gate per row");
}

TEST(QuantizeChannelGateNegative, AProductReadElsewhereStays) {
  GateOptions o;
  o.product_is_output = true;
  expect_no_gate_multiply(o, "product is a graph output");
}

TEST(QuantizeChannelGateNegative, APerChannelDequantizeIsRefusedWithItsReason) {
  GateOptions o;
  o.per_channel_scale = true;
  Graph g = gated(o);
  PassContext ctx = context();
  EXPECT_FALSE(quantize_channel_gate(g, ctx));
  ctx.end_phase();
  ASSERT_EQ(ctx.refusals().size(), 1u);
  EXPECT_EQ(ctx.refusals()[0].node, "gate_mul");
  EXPECT_THAT(ctx.refusals()[0].reason, ::testing::HasSubstr("not a per-tensor dequantize"));
}

}  // namespace
}  // namespace qfuse::graph
