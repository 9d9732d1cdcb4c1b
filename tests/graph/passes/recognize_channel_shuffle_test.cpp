// recognize_channel_shuffle: Reshape [N, g, C/g, H, W] -> Transpose(0, 2, 1,
// 3, 4) -> Reshape [N, C, H, W], as exporters write ShuffleNet's channel
// shuffle, becomes one ShuffleChannels that runs channels last between int8
// convolutions (no reorder at either side) and plain on f32. Checked against
// the unfused graph (the Reshape / Transpose as written) and against the
// permutation written out here. Named negatives: another permutation, a
// reshape that splits a spatial dim, an intermediate read elsewhere.

#include <gtest/gtest.h>

#include <optional>
#include <random>
#include <string>
#include <vector>

#include "tests/fusion/fusion_test_util.hpp"

namespace qfuse::test::fusion {
namespace {

// x -> R [N, g, C/g, d...] (or `split`) -> Transpose(perm) -> R [N, C, d...]
ValueId shuffle(Builder& b, ValueId x, const Shape& split, const graph::Ints& perm,
                const std::string& name, bool split_is_output = false) {
  const Shape xs = b.graph().value(x).shape;
  const ValueId parts = b.op(OpKind::Reshape, {x}, graph::ReshapeAttrs{split}, name + "/split");
  if (split_is_output) b.output(parts);
  const ValueId t = b.op(OpKind::Transpose, {parts}, graph::TransposeAttrs{perm}, name + "/transpose");
  return b.op(OpKind::Reshape, {t}, graph::ReshapeAttrs{xs}, name);
}

const graph::Ints kSwap{0, 2, 1, 3, 4};

// x -> FQ -> conv1 (8) -> FQ (u8) -> shuffle (groups 2) -> conv2 -> FQ(s8)
SmallNet int8_net(const Shape& split, const graph::Ints& perm, bool split_is_output = false) {
  SmallNet net;
  Builder b(net.graph);
  const ValueId x = b.fake_quantize(b.input("x", {1, 4, 8, 8}), 0.0f, 5.1f, 0.0f, 5.1f, 256, "x.q");
  ValueId y = quantized_conv(b, x, 8, 1, "conv1");
  y = b.fake_quantize(y, -2.0f, 191.0f / 32.0f, -2.0f, 191.0f / 32.0f, 256, "conv1.q");
  y = shuffle(b, y, split, perm, "shuffle", split_is_output);
  close_with_s8_output(b, quantized_conv(b, y, 8, 2, "conv2"), net);
  return net;
}

std::optional<LayerInfo> find_layer(const CompiledModel& m, const std::string& node) {
  for (const LayerInfo& l : m.layers()) {
    if (l.node == node) return l;
  }
  return std::nullopt;
}

TEST(RecognizeChannelShuffle, BetweenInt8ConvolutionsRunsOnCodesChannelsLast) {
  const SmallNet net = int8_net({1, 2, 4, 8, 8}, kSwap);
  const CompiledModel fused = compile(net.graph, {.fuse = true});
  const auto s = find_layer(fused, "shuffle");
  ASSERT_TRUE(s) << describe_layers(fused);
  EXPECT_EQ(s->op, "ShuffleChannels");
  EXPECT_EQ(s->precision, "int8");
  EXPECT_EQ(s->implementation, "qfuse:shuffle_channels");
  for (const LayerInfo& l : fused.layers()) {
    EXPECT_NE(l.op, "Transpose") << describe_layers(fused);
    // conv1 writes channels last for the shuffle, conv2 reads it so; conv2
    // stages only its f32 graph output, which is plain.
    if (l.op == "QuantizedConvolution") {
      EXPECT_EQ(l.reorders, l.node == "conv2" ? 1 : 0)
          << l.node << " stages a layout change\n" << describe_layers(fused);
    }
  }
  expect_within_one_lsb(net, fused, 21, 0.99);
}

// Plain f32 from the graph input to the graph output, groups 3 over 6
// channels: every output channel is the input channel the definition names.
TEST(RecognizeChannelShuffle, F32PlainEqualsThePermutation) {
  graph::Graph g;
  Builder b(g);
  const Shape xs{2, 6, 3, 5};
  b.output(shuffle(b, b.input("x", xs), {2, 3, 2, 3, 5}, kSwap, "shuffle"));
  std::vector<float> xv(2 * 6 * 3 * 5);
  for (std::size_t i = 0; i < xv.size(); ++i) xv[i] = static_cast<float>(i);
  const Tensor x = Tensor::from_vector<float>(xs, xv);
  const CompiledModel fused = compile(g, {.fuse = true});
  ASSERT_TRUE(find_layer(fused, "shuffle")) << describe_layers(fused);
  EXPECT_EQ(find_layer(fused, "shuffle")->op, "ShuffleChannels");
  const Tensor y = run(fused, "x", x, "shuffle");
  const Tensor want = run(compile(g, {.fuse = false}), "x", x, "shuffle");
  const auto got = y.data<float>(), unfused = want.data<float>();
  for (std::int64_t n = 0; n < 2; ++n) {
    for (std::int64_t c = 0; c < 6; ++c) {
      const std::int64_t from = (c % 3) * 2 + c / 3;  // channel j * 3 + i <- i * 2 + j
      for (std::int64_t p = 0; p < 15; ++p) {
        const auto at = static_cast<std::size_t>((n * 6 + c) * 15 + p);
        ASSERT_EQ(got[at], xv[static_cast<std::size_t>((n * 6 + from) * 15 + p)]) << "c " << c;
        ASSERT_EQ(got[at], unfused[at]);
      }
    }
  }
}

// Named negatives: the Transpose stays, and fused still matches unfused.
TEST(RecognizeChannelShuffleNegative, AnotherPermutationIsNotAShuffle) {
  const SmallNet net = int8_net({1, 2, 4, 8, 8}, {0, 2, 1, 4, 3});
  const CompiledModel fused = compile(net.graph, {.fuse = true});
  for (const LayerInfo& l : fused.layers()) EXPECT_NE(l.op, "ShuffleChannels");
  ASSERT_TRUE(find_layer(fused, "shuffle/transpose")) << describe_layers(fused);
  expect_within_one_lsb(net, fused, 22, 0.99);
}

TEST(RecognizeChannelShuffleNegative, ASpatialSplitIsNotAShuffle) {
  const SmallNet net = int8_net({1, 8, 8, 2, 4}, kSwap);
  const CompiledModel fused = compile(net.graph, {.fuse = true});
  for (const LayerInfo& l : fused.layers()) EXPECT_NE(l.op, "ShuffleChannels");
  expect_within_one_lsb(net, fused, 23, 0.99);
}

TEST(RecognizeChannelShuffleNegative, AnIntermediateReadElsewhereKeepsTheNodes) {
  const SmallNet net = int8_net({1, 2, 4, 8, 8}, kSwap, /*split_is_output=*/true);
  const CompiledModel fused = compile(net.graph, {.fuse = true});
  for (const LayerInfo& l : fused.layers()) EXPECT_NE(l.op, "ShuffleChannels");
  bool explained = false;
  for (const FusionRefusal& r : fused.refusals()) {
    explained |= r.pass == "recognize_channel_shuffle" && r.node == "shuffle" &&
                 r.reason.find("has other readers") != std::string::npos;
  }
  EXPECT_TRUE(explained) << describe_layers(fused);
  expect_within_one_lsb(net, fused, 24, 0.99);
}

}  // namespace
}  // namespace qfuse::test::fusion
