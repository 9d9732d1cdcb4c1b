// fuse_dynamic_quantized_layer: ONNX Runtime's dynamic form as the importer
// writes it (DynamicQuantize -> codes - z; s8 weights -> FullyConnected ->
// Multiply(s * weight scales)) becomes one dynamic QuantizedFullyConnected.
// Checked against the graph before the pass: the integer sums are exact in
// both, and the scale is the same f32 product, so the outputs are equal.
// Named negatives: weights that are not s8, an accumulator read by anything
// but a Multiply, a constant scale; each refused with its reason.

#include "pass_test_util.hpp"

namespace qfuse::graph {
namespace {

using namespace pass_test;

constexpr std::int64_t kRows = 3, kIn = 16, kOut = 8;

struct DynamicOptions {
  bool per_channel_weight_scales = true;
  bool s8_weights = true;          // else f32 weights
  bool add_after = false;          // the accumulator read by an Add instead
  bool constant_scale = false;     // r a constant instead of s * weight scales
};

Graph dynamic_layer(const DynamicOptions& o) {
  Graph g;
  Builder b(g);
  const ValueId x = b.input("x", {kRows, kIn});
  const NodeId dq = g.add_node(OpKind::DynamicQuantize, "x.dq", {x}, NoAttrs{}, 3);
  infer_node(g, dq);
  const ValueId codes = g.node(dq).outputs[0], s = g.node(dq).outputs[1],
                z = g.node(dq).outputs[2];
  const ValueId xd = b.binary(OpKind::Subtract, b.convert(codes, ElementType::f32, "codes.f32"),
                              b.convert(z, ElementType::f32, "z.f32"), "x.centered");
  std::mt19937 rng(5);
  std::vector<std::int8_t> wq(static_cast<std::size_t>(kOut * kIn));
  for (auto& w : wq) w = static_cast<std::int8_t>(static_cast<int>(rng() % 255) - 127);
  ValueId w;
  if (o.s8_weights) {
    w = b.convert(b.constant("wq", Tensor::from_vector<std::int8_t>({kOut, kIn}, wq)),
                  ElementType::f32, "wq.f32");
  } else {
    std::vector<float> wf(wq.begin(), wq.end());
    w = b.constant("wf", {kOut, kIn}, wf);
  }
  const ValueId acc = b.fully_connected(xd, w, std::nullopt, "fc");
  if (o.add_after) {
    b.output(b.binary(OpKind::Add, acc, b.input("r", {1}), "after"));
    return g;
  }
  ValueId r;
  if (o.constant_scale) {
    r = b.scalar(0.004f);
  } else {
    const ValueId ws = o.per_channel_weight_scales
                           ? b.constant("ws", {kOut}, random_values(kOut, 0.001f, 0.01f, 6))
                           : b.scalar(0.007f);
    r = b.binary(OpKind::Multiply, s, ws, "r");
  }
  b.output(b.binary(OpKind::Multiply, acc, r, "rescale"));
  return g;
}

// The graph as the passes before this one leave it (each integer tensor
// read through a Dequantize).
Graph canonical(const Graph& importer_form) {
  Graph g = importer_form;
  recognize_dequantizes(g);
  return g;
}

std::vector<float> run_layer(const Graph& g, unsigned seed, float lo, float hi) {
  return run(g, input_tensor({kRows, kIn}, lo, hi, seed));
}

TEST(FuseDynamicQuantizedLayer, OneDynamicQuantizedFullyConnected) {
  for (const bool per_channel : {true, false}) {
    DynamicOptions o;
    o.per_channel_weight_scales = per_channel;
    const Graph before = dynamic_layer(o);
    Graph g = canonical(before);
    PassContext ctx = context();
    ASSERT_TRUE(fuse_dynamic_quantized_layer(g, ctx));
    EXPECT_FALSE(fuse_dynamic_quantized_layer(g, ctx));
    eliminate_dead_nodes(g, ctx);
    EXPECT_EQ(count(g, OpKind::QuantizedFullyConnected), 1u);
    EXPECT_EQ(count(g, OpKind::FullyConnected), 0u);
    EXPECT_EQ(count(g, OpKind::Multiply), 0u);  // s * ws is formed by the layer
    for (const NodeId id : g.topological_order()) {
      const Node& n = g.node(id);
      if (n.kind != OpKind::QuantizedFullyConnected) continue;
      const auto& a = n.attr<QuantizedLayerAttrs>();
      EXPECT_TRUE(a.dynamic);
      EXPECT_EQ(a.dynamic_weight_scales.size(), per_channel ? std::size_t{kOut} : 1u);
    }
    // Inputs on both sides of zero and all positive (zero point 0).
    for (unsigned seed : {1u, 2u}) {
      EXPECT_EQ(run_layer(g, seed, -3.0f, 2.0f), run_layer(before, seed, -3.0f, 2.0f));
      EXPECT_EQ(run_layer(g, seed, 0.5f, 4.0f), run_layer(before, seed, 0.5f, 4.0f));
    }
  }
}

void expect_refused(const DynamicOptions& o, const std::string& reason) {
  Graph g = canonical(dynamic_layer(o));
  PassContext ctx = context();
  EXPECT_FALSE(fuse_dynamic_quantized_layer(g, ctx)) << reason;
  EXPECT_EQ(count(g, OpKind::QuantizedFullyConnected), 0u) << reason;
  ctx.end_phase();
  ASSERT_EQ(ctx.refusals().size(), 1u) << reason;
  EXPECT_EQ(ctx.refusals()[0].node, "fc");
  EXPECT_THAT(ctx.refusals()[0].reason, ::testing::HasSubstr(reason));
}

TEST(FuseDynamicQuantizedLayerNegative, WeightsThatAreNotS8Stay) {
  DynamicOptions o;
  o.s8_weights = false;
  expect_refused(o, "the weights are not s8 constants");
}

TEST(FuseDynamicQuantizedLayerNegative, AnAccumulatorNotMultipliedByAScaleStays) {
  DynamicOptions o;
  o.add_after = true;
  expect_refused(o, "not multiplied by a run-time scale");
}

TEST(FuseDynamicQuantizedLayerNegative, AConstantScaleStays) {
  DynamicOptions o;
  o.constant_scale = true;
  expect_refused(o, "not a run-time f32 value");
}

}  // namespace
}  // namespace qfuse::graph
