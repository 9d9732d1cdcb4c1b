// lookup_elementwise: an elementwise function that reads one quantized tensor twice and ends
// quantized becomes one Lookup of its codes: quantized SiLU as ONNX Runtime's
// quantizer writes it (x * Q(sigmoid(x))), and x + tanh(x). The layer before
// writes its codes, the layer after reads the Lookup's; fused matches
// unfused within 1 LSB. So does a unary activation that costs a layer's
// post-ops more than a table pass (hardswish, sigmoid) after a 256-level grid,
// over 4096 values or more, where nothing else reads the layer's output or the
// activation's; a piecewise-linear one (leaky relu, hsigmoid) stays a post-op.

#include <gtest/gtest.h>

#include "tests/fusion/fusion_test_util.hpp"

namespace qfuse::test::fusion {
namespace {

ValueId fq(Builder& b, ValueId x, float lo, float hi, const std::string& name) {
  return b.fake_quantize(x, lo, hi, lo, hi, 256, name);
}

using Function = std::function<ValueId(Builder&, ValueId)>;

struct Case {
  std::string name;
  Function f;           // of the first layer's quantized output
  float out_lo, out_hi;  // the grid that closes f
  float in_lo = -2.0f, in_hi = 191.0f / 32.0f;  // conv1's output grid
  std::int64_t side = 8;  // the input's height and width
};

// x -> FQ -> conv1 -> FQ [-2, 6) -> f -> FQ(out) -> conv2 -> FQ(s8). Grids have
// integer zero points, as quantizers write them.
SmallNet build(const Case& c) {
  SmallNet net;
  Builder b(net.graph);
  const ValueId x = fq(b, b.input("x", {1, 4, c.side, c.side}), 0.0f, 5.1f, "x.q");
  const ValueId h = fq(b, quantized_conv(b, x, 8, 1, "conv1"), c.in_lo, c.in_hi, "conv1.q");
  const ValueId y = fq(b, c.f(b, h), c.out_lo, c.out_hi, "f.q");
  close_with_s8_output(b, quantized_conv(b, y, 8, 2, "conv2"), net);
  return net;
}

ValueId silu_qdq(Builder& b, ValueId x) {
  const ValueId s = fq(b, b.unary(OpKind::Sigmoid, x), 0.0f, 1.0f, "sigmoid.q");
  return b.multiply(x, s);
}

ValueId x_plus_tanh(Builder& b, ValueId x) { return b.add(x, b.unary(OpKind::Tanh, x)); }

ValueId hard_swish(Builder& b, ValueId x) { return b.unary(OpKind::HSwish, x); }

ValueId sigmoid(Builder& b, ValueId x) { return b.unary(OpKind::Sigmoid, x); }

class Lookup : public ::testing::TestWithParam<Case> {};

TEST_P(Lookup, OneTableBetweenTwoInt8Layers) {
  const SmallNet net = build(GetParam());
  const CompiledModel fused = compile(net.graph, {.fuse = true});
  std::vector<std::string> ops;
  for (const LayerInfo& l : fused.layers()) ops.push_back(l.op);
  EXPECT_EQ(ops, (std::vector<std::string>{"Convert", "QuantizedConvolution", "Lookup",
                                           "QuantizedConvolution"}))
      << describe_layers(fused);
  for (const LayerInfo& l : fused.layers()) {
    if (l.node == "conv1") {
      EXPECT_TRUE(l.post_ops.ends_with("| u8") || l.post_ops.ends_with("| s8")) << l.post_ops;
    }
    if (l.op == "Lookup") {
      EXPECT_EQ(l.precision, "int8");
      EXPECT_EQ(l.implementation, "qfuse:lookup");
    }
  }
  expect_within_one_lsb(net, fused, 11, 0.99, GetParam().side);
}

INSTANTIATE_TEST_SUITE_P(
    Functions, Lookup,
    ::testing::Values(Case{"QuantizedSilu", silu_qdq, -0.5f, 5.875f},
                      // A symmetric closing grid: the table holds s8 codes.
                      Case{"QuantizedSiluS8", silu_qdq, -6.0f, 6.0f * 127.0f / 128.0f},
                      Case{"XPlusTanh", x_plus_tanh, -3.0f, 7.2f},
                      // One unary activation (MobileNetV3's hardswish
                      // blocks), over 8 x 24 x 24 = 4608 values.
                      Case{"HardSwish", hard_swish, -17 * 0.0237f, 238 * 0.0237f, -2.0f,
                           191.0f / 32.0f, 24},
                      Case{"Sigmoid", sigmoid, 0.0f, 1.0f, -2.0f, 191.0f / 32.0f, 24},
                      // A symmetric input grid: the table reads s8 codes.
                      Case{"XPlusTanhS8Codes", x_plus_tanh, -3.0f, 7.2f, -4.0f, 4.0f * 127.0f / 128.0f}),
    [](const auto& p) { return p.param.name; });

// Named negatives: no Lookup, conv1 keeps the activation (and, where
// `two_int8_layers`, both layers are int8), fused within 1 LSB of unfused.
void expect_no_table(const SmallNet& net, unsigned seed, std::int64_t side,
                     bool two_int8_layers = true) {
  const CompiledModel fused = compile(net.graph, {.fuse = true});
  for (const LayerInfo& l : fused.layers()) EXPECT_NE(l.op, "Lookup") << describe_layers(fused);
  if (two_int8_layers) {
    EXPECT_EQ(quantized_layers(fused).size(), 2u) << describe_layers(fused);
  }
  expect_within_one_lsb(net, fused, seed, 0.99, side);
}

// A leaky relu is two instructions in a post-op chain: conv1 takes it.
TEST(LookupNegative, APiecewiseLinearStepStaysInTheLayer) {
  expect_no_table(build(Case{"LeakyRelu",
                             [](Builder& b, ValueId x) {
                               return b.op(OpKind::LeakyRelu, {x}, graph::AlphaAttrs{0.25f});
                             },
                             -0.5f, 5.875f, -2.0f, 191.0f / 32.0f, 24}),
                  12, 24);
}

// conv1 -> FQ -> HSwish -> FQ -> conv2 over 24 x 24, with conv1's f32 output
// or the activation's also a graph output.
SmallNet hard_swish_read_elsewhere(bool layer_output, bool activation_output) {
  SmallNet net;
  Builder b(net.graph);
  const ValueId x = fq(b, b.input("x", {1, 4, 24, 24}), 0.0f, 5.1f, "x.q");
  const ValueId c = quantized_conv(b, x, 8, 1, "conv1");
  if (layer_output) b.output(c);
  const ValueId a = b.unary(OpKind::HSwish, fq(b, c, -2.0f, 191.0f / 32.0f, "conv1.q"));
  if (activation_output) b.output(a);
  const ValueId y = fq(b, a, -17 * 0.0237f, 238 * 0.0237f, "f.q");
  close_with_s8_output(b, quantized_conv(b, y, 8, 2, "conv2"), net);
  return net;
}

// The activation's f32 output is also the graph's: a table would leave
// conv1 an f32 reader besides the codes, and the f32 steps besides the table.
TEST(LookupNegative, AnActivationReadElsewhereStaysInTheLayer) {
  expect_no_table(hard_swish_read_elsewhere(false, true), 14, 24, false);
}

// conv1's f32 output is also the graph's: conv1 could not write the codes.
TEST(LookupNegative, ALayerReadElsewhereKeepsItsActivation) {
  expect_no_table(hard_swish_read_elsewhere(true, false), 15, 24, false);
}

// hsigmoid is a clip of an affine step: conv1 takes it, over 4608 values too.
TEST(LookupNegative, HardSigmoidStaysInTheLayer) {
  expect_no_table(build(Case{"HardSigmoid",
                             [](Builder& b, ValueId x) { return b.unary(OpKind::HSigmoid, x); },
                             0.0f, 1.0f, -2.0f, 191.0f / 32.0f, 24}),
                  16, 24);
}

// A hardswish over 8 x 8 x 8 = 512 values: a table pass would cost more than
// the post-ops it saves; conv1 takes it.
TEST(LookupNegative, ASmallTensorKeepsItsActivationInTheLayer) {
  expect_no_table(build(Case{"SmallHardSwish", hard_swish, -17 * 0.0237f, 238 * 0.0237f}), 13, 8);
}

}  // namespace
}  // namespace qfuse::test::fusion
