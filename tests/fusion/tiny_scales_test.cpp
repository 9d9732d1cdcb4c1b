// Layers with a channel whose weights are (nearly) all zero: exporters give it
// a tiny weight scale, and the fused layer a tiny, even denormal, output scale
// for that channel. oneDNN runs denormal scales through microcode assists
// (PP-OCRv4 rec: one 1x1 convolution 5x slower), so qfuse raises output
// scales below 2^-100 and lowers that channel's bias to match; where the
// bias would overflow f32 in accumulator units, it stays a real-valued shift.
// Either way fused matches unfused within 1 LSB, the bias of the near-zero
// channel included.

#include <gtest/gtest.h>

#include "fusion_test_util.hpp"

namespace qfuse::test::fusion {
namespace {

// x[1, 4, 8, 8] u8 FQ -> conv3x3 (4 -> 8, per-channel weight FQ; channel 0's
// weights and range scaled by `tiny`) + bias (channel 0: 1.5) -> FQ(s8).
SmallNet conv_with_a_near_zero_channel(float tiny) {
  SmallNet net;
  Builder b(net.graph);
  const ValueId x = b.fake_quantize(b.input("x", {1, 4, 8, 8}), 0.0f, 5.1f, 0.0f, 5.1f, 256, "x.q");
  constexpr std::int64_t oc = 8, ic = 4;
  std::mt19937 rng(3);
  std::normal_distribution<float> d(0.0f, 0.3f);
  std::vector<float> w(static_cast<std::size_t>(oc * ic * 9));
  for (std::size_t i = 0; i < w.size(); ++i) {
    w[i] = std::clamp(d(rng), -1.0f, 1.0f) * (i < static_cast<std::size_t>(ic * 9) ? tiny : 1.0f);
  }
  std::vector<float> hi(oc, 1.0f), lo(oc, -1.0f), bias(oc);
  hi[0] = tiny;
  lo[0] = -tiny;
  for (std::size_t c = 0; c < bias.size(); ++c) bias[c] = 0.25f * static_cast<float>(c) - 1.0f;
  bias[0] = 1.5f;
  const ValueId l = b.constant("w.lo", {oc, 1, 1, 1}, lo);
  const ValueId h = b.constant("w.hi", {oc, 1, 1, 1}, hi);
  const ValueId wq = b.fake_quantize(b.constant("w", {oc, ic, 3, 3}, w), l, h, l, h, 255, "w.q");
  graph::ConvAttrs a;
  a.pads_begin = {1, 1};
  a.pads_end = {1, 1};
  const ValueId y = b.convolution(x, wq, b.constant("b", {oc}, bias), a, "conv");
  close_with_s8_output(b, y, net);
  return net;
}

// Channel 0's output scale is s_x * s_w / s_out = 0.02 * (tiny / 127) / 0.063:
// 2.5e-33 for tiny = 1e-30 (normal, below 2^-100), and a denormal 5.6e-39
// for tiny = 2.2e-36, where the bias, 1.5 / (0.02 * tiny / 127), overflows.
class TinyScales : public ::testing::TestWithParam<float> {};

TEST_P(TinyScales, FusedMatchesUnfusedWithTheScaleRaised) {
  const SmallNet net = conv_with_a_near_zero_channel(GetParam());
  const CompiledModel fused = compile(net.graph, {.fuse = true});
  const auto layers = quantized_layers(fused);
  ASSERT_EQ(layers.size(), 1u) << describe_layers(fused);
  // The smallest output scale is 2^-100 (7.888609e-31), no smaller.
  EXPECT_NE(layers[0].post_ops.find("7.888609e-31"), std::string::npos)
      << layers[0].post_ops;
  // Channel 0 is 1.5 after quantization wherever the layer ran it: every
  // element of it equal, as the unfused graph computes it.
  expect_within_one_lsb(net, fused, 9, 0.99);
}

INSTANTIATE_TEST_SUITE_P(Fusion, TinyScales, ::testing::Values(1e-30f, 2.2e-36f));

}  // namespace
}  // namespace qfuse::test::fusion
