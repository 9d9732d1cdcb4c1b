// AvgPool / GlobalAveragePool between two int8 convolutions, with Q/DQ on both
// sides, pools the u8 tensor: on one grid (ONNX Runtime's AveragePool form)
// or requantized onto the next one by a linear post-op (a GlobalAveragePool
// calibrated on its own), with or without a zero point. Fused matches
// unfused within 1 LSB. Named negatives keep it f32, each with its reason.

#include <gtest/gtest.h>

#include <random>

#include "fusion_test_util.hpp"

namespace qfuse::test::fusion {
namespace {

// A u8 grid: [-zero_point * scale, (255 - zero_point) * scale].
struct Grid {
  float scale;
  int zero_point = 0;
  int levels = 256;
  float lo() const { return -static_cast<float>(zero_point) * scale; }
  float hi() const { return static_cast<float>(levels - 1 - zero_point) * scale; }
};

ValueId quantize(Builder& b, ValueId x, const Grid& g, const std::string& name) {
  return b.fake_quantize(x, g.lo(), g.hi(), g.lo(), g.hi(), g.levels, name);
}

graph::PoolAttrs window(std::int64_t k, std::int64_t stride, std::int64_t pad, bool exclude_pad) {
  graph::PoolAttrs p;
  p.kernel = {k, k};
  p.strides = {stride, stride};
  p.pads_begin = {pad, pad};
  p.pads_end = {pad, pad};
  p.exclude_pad = exclude_pad;
  return p;
}

struct Case {
  std::string name;
  graph::PoolAttrs pool;
  Grid in;              // grid of the conv1 output the pool reads
  Grid out;             // grid of the FakeQuantize after the pool
  bool expect_int8;
  std::string refusal;  // part of the reason a negative is refused with
};

std::ostream& operator<<(std::ostream& os, const Case& c) { return os << c.name; }

// x -> FQ -> conv1 -> FQ(in) -> AvgPool "pool" -> FQ(out) -> conv2 -> FQ(s8) -> y
SmallNet build(const Case& c) {
  SmallNet net;
  Builder b(net.graph);
  const ValueId x = quantize(b, b.input("x", {1, 4, 8, 8}), Grid{0.02f}, "x.q");
  ValueId y = quantize(b, quantized_conv(b, x, 8, 1, "conv1"), c.in, "conv1.q");
  y = quantize(b, b.op(OpKind::AvgPool, {y}, c.pool, "pool"), c.out, "pool.q");
  y = quantized_conv(b, y, 8, 2, "conv2");
  close_with_s8_output(b, y, net);
  return net;
}

class Int8AvgPool : public ::testing::TestWithParam<Case> {};

TEST_P(Int8AvgPool, PoolsU8WithinOneLsb) {
  const Case& c = GetParam();
  const SmallNet net = build(c);
  const CompiledModel fused = compile(net.graph, {.fuse = true});
  EXPECT_EQ(quantized_layers(fused).size(), 2u) << describe_layers(fused);
  bool found = false;
  for (const LayerInfo& l : fused.layers()) {
    if (l.node != "pool") continue;
    found = true;
    EXPECT_EQ(l.precision, c.expect_int8 ? "int8" : "f32") << describe_layers(fused);
    if (c.expect_int8) {
      EXPECT_EQ(l.implementation.find("ref"), std::string::npos) << l.implementation;
    }
  }
  EXPECT_TRUE(found) << describe_layers(fused);
  if (!c.refusal.empty()) {
    bool explained = false;
    for (const FusionRefusal& r : fused.refusals()) {
      explained |= r.node == "pool" && r.reason.find(c.refusal) != std::string::npos;
    }
    EXPECT_TRUE(explained) << describe_layers(fused);
  }
  expect_within_one_lsb(net, fused, 6, 0.98);
}

// conv1's output spans about [-6, 6]. Scales are powers of two, so the
// unfused graph computes every mean exactly and a mean on a rounding tie
// stays on it (both paths round half to even). Zero point 128 with 256
// levels is stored as s8, any other as u8.
const Grid kS8{0.0625f, 128};
const Grid kU8{0.0625f, 100};

INSTANTIATE_TEST_SUITE_P(
    Forms, Int8AvgPool,
    ::testing::Values(
        Case{"SameGridS8_2x2", window(2, 2, 0, true), kS8, kS8, true, ""},
        Case{"SameGridU8_2x2", window(2, 2, 0, true), kU8, kU8, true, ""},
        Case{"GlobalSameGrid", window(8, 1, 0, true), kS8, kS8, true, ""},
        Case{"GlobalRequantized", window(8, 1, 0, true), kU8, Grid{0.015625f, 60}, true, ""},
        Case{"Padded3x3ExcludePadRequantized", window(3, 1, 1, true), kU8, Grid{0.03125f, 90},
             true, ""},
        Case{"Padded3x3IncludePadZeroPointZero", window(3, 1, 1, false), Grid{0.03125f},
             Grid{0.0625f}, true, ""},
        // Named negatives.
        Case{"IncludePadWithZeroPoint", window(3, 1, 1, false), kU8, kU8, false,
             "counts padding"},
        Case{"NextGridHas255Levels", window(2, 2, 0, true), kU8, Grid{0.0625f, 100, 255}, false,
             "not the whole u8 range"},
        Case{"S8PooledOntoU8Grid", window(8, 1, 0, true), kS8, kU8, false, "its input is s8"}),
    [](const auto& p) { return p.param.name; });

// x -> FQ -> conv1 -> FQ(in) -> AvgPool "pool" -> f32 1x1 conv "fc1" (plain
// f32 weights) -> FQ -> conv2 -> FQ(s8) -> y: a squeeze-excitation's squeeze,
// whose mean lies on no grid, so fc1 stays f32.
SmallNet build_f32_reader(const graph::PoolAttrs& pool, const Grid& in) {
  SmallNet net;
  Builder b(net.graph);
  const ValueId x = quantize(b, b.input("x", {1, 4, 8, 8}), Grid{0.02f}, "x.q");
  ValueId y = quantize(b, quantized_conv(b, x, 8, 1, "conv1"), in, "conv1.q");
  y = b.op(OpKind::AvgPool, {y}, pool, "pool");
  std::mt19937 rng(3);
  std::normal_distribution<float> d(0.0f, 0.4f);
  std::vector<float> w(4 * 8);
  for (float& v : w) v = d(rng);
  y = b.convolution(y, b.constant("fc1.w", {4, 8, 1, 1}, w), std::nullopt, graph::ConvAttrs{}, "fc1");
  y = quantize(b, y, Grid{0.03125f, 128}, "fc1.q");
  close_with_s8_output(b, quantized_conv(b, y, 8, 2, "conv2"), net);
  return net;
}

// The global pool reads the codes and writes their dequantized mean; the
// Convert / Subtract / Multiply that dequantized every element are gone.
TEST(Int8AvgPoolToF32, GlobalPoolAveragesTheCodesAndDequantizesTheMean) {
  for (const Grid& in : {kU8, kS8, Grid{0.05f, 37}}) {
    const SmallNet net = build_f32_reader(window(8, 1, 0, true), in);
    const CompiledModel fused = compile(net.graph, {.fuse = true});
    bool found = false;
    for (const LayerInfo& l : fused.layers()) {
      EXPECT_FALSE(l.op == "Subtract" || l.op == "Multiply") << describe_layers(fused);
      if (l.node != "pool") continue;
      found = true;
      EXPECT_EQ(l.implementation, "qfuse:dequantized_mean") << describe_layers(fused);
    }
    EXPECT_TRUE(found) << describe_layers(fused);
    expect_within_one_lsb(net, fused, 12, 0.98);
  }
}

// Named negative: a 2x2 window is not a global pool; it pools f32 as the
// model wrote it.
TEST(Int8AvgPoolToF32, AWindowedPoolStaysF32) {
  const SmallNet net = build_f32_reader(window(2, 2, 0, true), kU8);
  const CompiledModel fused = compile(net.graph, {.fuse = true});
  bool found = false;
  for (const LayerInfo& l : fused.layers()) {
    if (l.node != "pool") continue;
    found = true;
    EXPECT_EQ(l.precision, "f32") << describe_layers(fused);
    EXPECT_NE(l.implementation, "qfuse:dequantized_mean");
  }
  EXPECT_TRUE(found) << describe_layers(fused);
  expect_within_one_lsb(net, fused, 13, 0.98);
}

}  // namespace
}  // namespace qfuse::test::fusion
