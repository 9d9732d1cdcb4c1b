// A layer's output through ONNX's QuantizeLinear -> DequantizeLinear (scale S,
// zero point Z) and on into an activation, as QAT exports write MobileNetV3's
// blocks: the chain rounds x / S and adds Z after the rounding, as ONNX does,
// so the zero point cancels against the dequantize's -Z and the layer's
// post-ops are a round, a clip and the activation (a leaky relu: a hardswish
// over enough values becomes a table, QuantizeLinearTable below); the
// quantize after
// the activation takes its zero point as given, the destination's. Fused matches
// unfused within 1 LSB, with zero points odd and even; a FakeQuantize given
// by its ranges alone keeps the ranges' form (a named negative).

#include <gtest/gtest.h>

#include <random>

#include "fusion_test_util.hpp"

namespace qfuse::test::fusion {
namespace {

// QuantizeLinear -> DequantizeLinear on a u8 grid (scale, zero point), or
// the same grid given by its ranges only.
ValueId qdq(Builder& b, ValueId x, float scale, int zero_point, bool linear,
            const std::string& name) {
  const float lo = static_cast<float>(-zero_point) * scale;
  const float hi = static_cast<float>(255 - zero_point) * scale;
  if (!linear) return b.fake_quantize(x, lo, hi, lo, hi, 256, name);
  return linear_q(b, x, scale, zero_point, name);
}

struct Case {
  std::string name;
  int zero_point;
  bool linear;  // scale and zero point given (ONNX's form), else ranges only
};

std::ostream& operator<<(std::ostream& os, const Case& c) { return os << c.name; }

// x -> Q/DQ -> conv1 -> Q/DQ(S, Z) "mid.q" -> LeakyRelu(1/4) (or HardSwish)
// -> Q/DQ -> conv2 -> s8 out
SmallNet build(const Case& c, bool hard_swish = false, std::int64_t side = 8) {
  SmallNet net;
  Builder b(net.graph);
  ValueId y = qdq(b, b.input("x", {1, 4, side, side}), 0.02f, 0, c.linear, "x.q");
  y = quantized_conv(b, y, 16, 1, "conv1");
  y = qdq(b, y, 0.031f, c.zero_point, c.linear, "mid.q");
  y = hard_swish ? b.unary(OpKind::HSwish, y)
                 : b.op(OpKind::LeakyRelu, {y}, graph::AlphaAttrs{0.25f});
  y = qdq(b, y, 0.0123f, 108, c.linear, "act.q");
  close_with_s8_output(b, quantized_conv(b, y, 8, 2, "conv2"), net);
  return net;
}

// The post-ops between the output scales and the destination type.
std::vector<std::string> post_op_list(const std::string& text) {
  const std::size_t a = text.find(" | "), b = text.rfind(" | ");
  std::vector<std::string> ops;
  if (a == std::string::npos || b == a) return ops;
  std::string middle = text.substr(a + 3, b - a - 3);
  if (middle.rfind("dst_zero_point", 0) == 0) middle = middle.substr(middle.find(" | ") + 3);
  for (std::size_t p = 0; p < middle.size();) {
    const std::size_t q = middle.find("; ", p);
    ops.push_back(middle.substr(p, q == std::string::npos ? std::string::npos : q - p));
    p = q == std::string::npos ? middle.size() : q + 2;
  }
  return ops;
}

class QuantizeLinearChain : public ::testing::TestWithParam<Case> {};

TEST_P(QuantizeLinearChain, ZeroPointCancelsAndMatchesUnfused) {
  const Case& c = GetParam();
  const SmallNet net = build(c);
  const CompiledModel fused = compile(net.graph, {.fuse = true});
  bool found = false;
  for (const LayerInfo& l : fused.layers()) {
    if (l.node != "conv1") continue;
    found = true;
    const std::vector<std::string> ops = post_op_list(l.post_ops);
    ASSERT_FALSE(ops.empty()) << l.post_ops;
    if (c.linear) {
      // round * S; clip(-Z * S, (255 - Z) * S); relu(1/4) * (1 / S2)
      ASSERT_EQ(ops.size(), 3U) << l.post_ops;
      EXPECT_EQ(ops[0].rfind("eltwise_round", 0), 0U) << l.post_ops;
      EXPECT_EQ(ops[1].rfind("eltwise_clip", 0), 0U) << l.post_ops;
      // The next grid's zero point as given (108), not -il / S in floats (107.99999).
      EXPECT_NE(l.post_ops.find("| dst_zero_point 108 |"), std::string::npos) << l.post_ops;
    } else {
      // The ranges' form adds Z before the rounding and takes it off after.
      EXPECT_GT(ops.size(), 3U) << l.post_ops;
      EXPECT_EQ(ops[0], "eltwise_linear(1, " + std::to_string(c.zero_point) + ")") << l.post_ops;
    }
  }
  EXPECT_TRUE(found) << describe_layers(fused);
  expect_within_one_lsb(net, fused, 21, 0.99);
}

// Exact ties: codes k on a 1/16 grid times a weight of 0.5 (code 64 on a
// 1/128 grid) is k / 32, so the next grid's x / S = k / 2 sits on a tie for
// every odd k. ONNX rounds it half to even and then adds Z = 37; rounding
// k / 2 + 37 instead (the ranges' form) gives the other code at all 128 odd k.
// Every scale is a power of two, so the fused output scale is exact too.
TEST(QuantizeLinearTies, RoundBeforeTheZeroPointAsOnnxDoes) {
  SmallNet net;
  Builder b(net.graph);
  ValueId y = qdq(b, b.input("x", {1, 1, 16, 16}), 1.0f / 16, 0, true, "x.q");
  const float s = 1.0f / 128;
  const ValueId w = b.fake_quantize(b.constant("conv.w", {1, 1, 1, 1}, {0.5f}), -128 * s,
                                    127 * s, -128 * s, 127 * s, 256, "conv.wq");
  graph::ConvAttrs a;
  a.pads_begin = {0, 0};
  a.pads_end = {0, 0};
  y = qdq(b, b.convolution(y, w, std::nullopt, a, "conv"), 1.0f / 16, 37, true, "mid.q");
  b.output(y);
  const std::string out = net.graph.value(y).name;
  const CompiledModel fused = compile(net.graph, {.fuse = true});
  const CompiledModel unfused = compile(net.graph, {.fuse = false});
  ASSERT_EQ(quantized_layers(fused).size(), 1U) << describe_layers(fused);
  std::vector<float> xv(256);
  for (int k = 0; k < 256; ++k) xv[static_cast<std::size_t>(k)] = static_cast<float>(k) / 16;
  const Tensor x = Tensor::from_vector<float>({1, 1, 16, 16}, xv);
  const Tensor ft = run(fused, "x", x, out), ut = run(unfused, "x", x, out);
  const auto f = ft.data<float>();
  const auto u = ut.data<float>();
  int differ = 0;
  for (std::size_t i = 0; i < xv.size(); ++i) differ += f[i] != u[i];
  EXPECT_EQ(differ, 0) << "k = 1: fused " << f[1] << ", unfused " << u[1];
  // The ties are there: k = 1 (0.5) and k = 3 (1.5) round to 0 and 2 steps.
  EXPECT_EQ(u[1], 0.0f);
  EXPECT_EQ(u[3], 2.0f / 16);
}

// MobileNetV3's form itself: a hardswish over 16 x 24 x 24 values after
// ONNX's grid becomes one table of conv1's codes; conv1 writes them with the
// zero point as its destination's and nothing else (128: s8 codes, zero
// point 0), and the codes of the grid after it match unfused.
class QuantizeLinearTable : public ::testing::TestWithParam<Case> {};

TEST_P(QuantizeLinearTable, TheLayerWritesTheCodesAndOneTableFollows) {
  const Case& c = GetParam();
  const SmallNet net = build(c, true, 24);
  const CompiledModel fused = compile(net.graph, {.fuse = true});
  std::vector<std::string> ops;
  for (const LayerInfo& l : fused.layers()) {
    ops.push_back(l.op);
    if (l.node != "conv1") continue;
    const bool symmetric = c.linear && c.zero_point == 128;
    if (!symmetric) {
      EXPECT_NE(l.post_ops.find("| dst_zero_point " + std::to_string(c.zero_point) + " |"),
                std::string::npos)
          << l.post_ops;
    }
    EXPECT_EQ(post_op_list(l.post_ops), std::vector<std::string>{"(none)"}) << l.post_ops;
    EXPECT_TRUE(l.post_ops.ends_with(symmetric ? "| s8" : "| u8")) << l.post_ops;
  }
  // The input's quantization: ONNX's (a Quantize) or by its ranges (a quantizing Convert).
  EXPECT_EQ(ops, (std::vector<std::string>{c.linear ? "Quantize" : "Convert",
                                           "QuantizedConvolution", "Lookup",
                                           "QuantizedConvolution"}))
      << describe_layers(fused);
  expect_within_one_lsb(net, fused, 22, 0.99, 24);
}

INSTANTIATE_TEST_SUITE_P(Grids, QuantizeLinearTable,
                         ::testing::Values(Case{"odd_zero_point", 37, true},
                                           Case{"even_zero_point", 128, true},
                                           Case{"ranges_only", 37, false}),
                         [](const auto& p) { return p.param.name; });

INSTANTIATE_TEST_SUITE_P(Forms, QuantizeLinearChain,
                         ::testing::Values(Case{"odd_zero_point", 37, true},
                                           Case{"even_zero_point", 128, true},
                                           Case{"zero_point_zero", 0, true},
                                           Case{"ranges_only", 37, false}),
                         [](const auto& p) { return p.param.name; });

}  // namespace
}  // namespace qfuse::test::fusion
