// Activations that exporters write out with elementwise ops join the post-op
// chain of the int8 layer before them: Paddle's hardswish
// x * clip(x + 3, 0, 6) / 6, HardSigmoid(1/6, 1/2) gates, SiLU x * sigmoid(x)
// and Paddle's swish x * sigmoid(b * x). The layer writes u8 and nothing runs
// in f32 between the two convolutions; fused matches unfused within 1 LSB.
// Named negatives (another constant, another tensor, an intermediate read
// elsewhere) stay as they are, still within 1 LSB.

#include <gtest/gtest.h>

#include <functional>
#include <random>

#include "fusion_test_util.hpp"

namespace qfuse::test::fusion {
namespace {

using graph::OpKind;

// A u8 grid with an integer zero point (28) that holds hardswish's minimum.
constexpr float kLo = -28 * 0.02f, kHi = 227 * 0.02f;

// x * clip(x + 3, 0, 6), the relu6 branch named "relu6".
ValueId x_times_relu6(Builder& b, ValueId x, float three = 3.0f, float six = 6.0f) {
  const ValueId r = b.clamp(b.binary(OpKind::Add, x, b.scalar(three), "plus3"), 0.0f, six, "relu6");
  return b.binary(OpKind::Multiply, x, r, "times_x");
}

using Activation = std::function<ValueId(Builder&, ValueId)>;

struct Case {
  std::string name;
  Activation act;  // the last node is named "act"
  float lo, hi;    // range of the FakeQuantize after it
  bool expect_joined;
};

std::ostream& operator<<(std::ostream& os, const Case& c) { return os << c.name; }

const std::vector<Case>& cases() {
  static const std::vector<Case> k = {
      {"paddle_hardswish",
       [](Builder& b, ValueId x) {
         return b.binary(OpKind::Divide, x_times_relu6(b, x), b.scalar(6.0f), "act");
       },
       kLo, kHi, true},
      {"hardswish_times_sixth",
       [](Builder& b, ValueId x) {
         return b.binary(OpKind::Multiply, b.scalar(1.0f / 6.0f), x_times_relu6(b, x), "act");
       },
       kLo, kHi, true},
      {"hardsigmoid_gate",
       [](Builder& b, ValueId x) {
         return b.binary(OpKind::Multiply, b.unary(OpKind::HSigmoid, x, "gate"), x, "act");
       },
       kLo, kHi, true},
      {"hsigmoid_spelled",
       [](Builder& b, ValueId x) {
         const ValueId r = b.clamp(b.binary(OpKind::Add, b.scalar(3.0f), x, "plus3"), 0.0f, 6.0f);
         return b.binary(OpKind::Divide, r, b.scalar(6.0f), "act");
       },
       0.0f, 1.0f, true},
      {"silu",
       [](Builder& b, ValueId x) {
         return b.binary(OpKind::Multiply, x, b.unary(OpKind::Sigmoid, x, "gate"), "act");
       },
       kLo, kHi, true},
      {"paddle_swish_beta",
       [](Builder& b, ValueId x) {
         const ValueId bx = b.binary(OpKind::Multiply, x, b.scalar(1.702f), "beta_x");
         return b.binary(OpKind::Multiply, x, b.unary(OpKind::Sigmoid, bx, "gate"), "act");
       },
       kLo, kHi, true},
      // Not the activation: x * clip(x + 2.5, 0, 6) / 6.
      {"neg_plus_2_5",
       [](Builder& b, ValueId x) {
         return b.binary(OpKind::Divide, x_times_relu6(b, x, 2.5f), b.scalar(6.0f), "act");
       },
       kLo, kHi, false},
      // Not the activation: clip to 5, not 6.
      {"neg_clip_5",
       [](Builder& b, ValueId x) {
         return b.binary(OpKind::Divide, x_times_relu6(b, x, 3.0f, 5.0f), b.scalar(6.0f), "act");
       },
       kLo, kHi, false},
      // The gate reads another tensor: relu(x) * sigmoid(x).
      {"neg_gate_of_other_tensor",
       [](Builder& b, ValueId x) {
         return b.binary(OpKind::Multiply, b.relu(x), b.unary(OpKind::Sigmoid, x, "gate"), "act");
       },
       0.0f, 4.0f, false},
  };
  return k;
}

// x -> FQ -> conv1 -> activation -> FQ -> conv2 -> FQ(s8) -> y
SmallNet build(const Case& c) {
  SmallNet net;
  Builder b(net.graph);
  const ValueId x = b.fake_quantize(b.input("x", {1, 4, 8, 8}), 0.0f, 5.1f, 0.0f, 5.1f, 256, "x.q");
  ValueId y = c.act(b, quantized_conv(b, x, 8, 1, "conv1"));
  y = b.fake_quantize(y, c.lo, c.hi, c.lo, c.hi, 256, "act.q");
  y = quantized_conv(b, y, 8, 2, "conv2");
  close_with_s8_output(b, y, net);
  return net;
}

class SpelledActivation : public ::testing::TestWithParam<Case> {};

TEST_P(SpelledActivation, JoinsTheLayerChainWithinOneLsb) {
  const Case& c = GetParam();
  const SmallNet net = build(c);
  const CompiledModel fused = compile(net.graph, {.fuse = true});
  EXPECT_EQ(quantized_layers(fused).size(), 2u) << describe_layers(fused);
  // Between the two convolutions: nothing but the layers themselves when the
  // activation joined conv1's chain.
  std::size_t f32_between = 0;
  for (const LayerInfo& l : fused.layers()) {
    if (l.node.rfind("x.q", 0) == 0 || is_quantized_op(l.op)) continue;
    ++f32_between;
  }
  if (c.expect_joined) {
    EXPECT_EQ(f32_between, 0u) << describe_layers(fused);
  } else {
    EXPECT_GT(f32_between, 0u) << describe_layers(fused);
  }
  expect_within_one_lsb(net, fused, 5, 0.98);
}

INSTANTIATE_TEST_SUITE_P(Forms, SpelledActivation, ::testing::ValuesIn(cases()),
                         [](const auto& p) { return p.param.name; });

// An intermediate read elsewhere (here a graph output) keeps the ops apart.
TEST(SpelledActivation, ClampReadElsewhereIsNotRewritten) {
  graph::Graph g;
  Builder b(g);
  const ValueId x = b.input("x", {1, 4, 8, 8});
  const ValueId r = b.clamp(b.binary(OpKind::Add, x, b.scalar(3.0f)), 0.0f, 6.0f, "relu6");
  const ValueId y = b.binary(OpKind::Divide, b.binary(OpKind::Multiply, x, r), b.scalar(6.0f), "act");
  b.output(y);
  b.output(r);
  const CompiledModel fused = compile(g, {.fuse = true});
  bool has_clamp = false;
  for (const LayerInfo& l : fused.layers()) has_clamp |= l.op == "Clamp";
  EXPECT_TRUE(has_clamp) << describe_layers(fused);
}

}  // namespace
}  // namespace qfuse::test::fusion
