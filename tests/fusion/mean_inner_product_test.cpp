// A squeeze-excitation's fc1 or a classifier: a layer with quantized weights
// reading the global mean of int8 codes, which the export quantizes nowhere
// (the mean lies on no grid). It runs in integers as a MeanInnerProduct (the
// codes' channel sums in byte planes through one u8 x s8 inner product), as a 1x1
// convolution or through a Flatten as a MatMul, on u8 codes with and without
// a zero point and on s8, with sums of two and of three bytes, per image of a
// batch. Fused matches unfused within 1 LSB. Named negatives stay f32, each
// with its reason.

#include <gtest/gtest.h>

#include <random>

#include "fusion_test_util.hpp"

namespace qfuse::test::fusion {
namespace {

struct Grid {
  float scale;
  int zero_point = 0;
  bool is_signed = false;
  float lo() const {
    return is_signed ? -128.0f * scale : -static_cast<float>(zero_point) * scale;
  }
  float hi() const {
    return is_signed ? 127.0f * scale : static_cast<float>(255 - zero_point) * scale;
  }
};

enum class Form { conv, flatten_matmul };

struct Case {
  std::string name;
  Form form = Form::conv;
  Grid in;                 // the codes the pool averages
  std::int64_t size = 8;   // spatial size: 8x8 sums fit two bytes, 20x20 three
  std::int64_t batch = 1;
  bool relu = false;
  bool bias = true;
  bool quantized_weights = true;
  std::int64_t groups = 1;
  bool expect_int8 = true;
  std::string refusal;     // part of the reason a negative is refused with
  std::int64_t pad = 0;    // fc1's padding
};

std::ostream& operator<<(std::ostream& os, const Case& c) { return os << c.name; }

constexpr std::int64_t kChannels = 24, kOutputs = 12;

// x -> FQ -> conv1 -> FQ(in) -> GlobalAveragePool "pool" [-> Flatten]
//   -> fc1 (s8-quantized weights, bias) [-> Relu] -> FQ(s8 [-8, 8]) -> y
SmallNet build(const Case& c) {
  SmallNet net;
  Builder b(net.graph);
  ValueId x = b.input("x", {c.batch, 4, c.size, c.size});
  x = b.fake_quantize(x, 0.0f, 5.1f, 0.0f, 5.1f, 256, "x.q");
  ValueId y = quantized_conv(b, x, kChannels, 1, "conv1");
  y = b.fake_quantize(y, c.in.lo(), c.in.hi(), c.in.lo(), c.in.hi(), 256, "conv1.q");
  graph::PoolAttrs p;
  p.kernel = {c.size, c.size};
  p.strides = {1, 1};
  p.pads_begin = {0, 0};
  p.pads_end = {0, 0};
  y = b.op(OpKind::AvgPool, {y}, p, "pool");
  std::mt19937 rng(7);
  std::normal_distribution<float> d(0.0f, 0.4f);
  const std::int64_t per_group = kChannels / c.groups;
  std::vector<float> w(static_cast<std::size_t>(kOutputs * per_group)), bias(kOutputs);
  for (float& v : w) v = d(rng);
  for (float& v : bias) v = d(rng);
  const bool conv = c.form == Form::conv;
  ValueId wv = conv ? b.constant("fc1.w", {kOutputs, per_group, 1, 1}, w)
                    : b.constant("fc1.w", {kChannels, kOutputs}, w);
  if (c.quantized_weights) {
    const float s = 0.6f / 127.0f;
    wv = b.fake_quantize(wv, -128 * s, 127 * s, -128 * s, 127 * s, 256, "fc1.wq");
  }
  if (conv) {
    graph::ConvAttrs a;
    a.groups = c.groups;
    a.pads_begin = {c.pad, c.pad};
    a.pads_end = {c.pad, c.pad};
    const std::optional<ValueId> bv =
        c.bias ? std::optional<ValueId>(b.constant("fc1.b", {kOutputs}, bias)) : std::nullopt;
    y = b.convolution(y, wv, bv, a, "fc1");
  } else {
    y = b.op(OpKind::Flatten, {y}, graph::FlattenAttrs{1}, "flatten");
    y = b.matmul(y, wv, false, false, "fc1");
  }
  if (c.relu) y = b.relu(y);
  close_with_s8_output(b, y, net);
  return net;
}

class MeanInnerProduct : public ::testing::TestWithParam<Case> {};

TEST_P(MeanInnerProduct, FusesWhereExactAndMatchesUnfused) {
  const Case& c = GetParam();
  const SmallNet net = build(c);
  const CompiledModel fused = compile(net.graph, {.fuse = true});
  bool found = false;
  for (const LayerInfo& l : fused.layers()) {
    if (l.node != "fc1") continue;
    found = true;
    if (c.expect_int8) {
      EXPECT_EQ(l.op, "MeanInnerProduct") << describe_layers(fused);
      EXPECT_EQ(l.precision, "int8");
      EXPECT_EQ(l.implementation.rfind("qfuse:mean", 0), 0U) << l.implementation;
      EXPECT_TRUE(l.implementation.find("ref") == std::string::npos) << l.implementation;
    } else {
      EXPECT_EQ(l.precision, "f32") << describe_layers(fused);
    }
  }
  EXPECT_TRUE(found) << describe_layers(fused);
  if (!c.expect_int8) {
    bool named = false;
    for (const FusionRefusal& r : fused.refusals()) {
      named = named || (r.node == "fc1" && r.reason.find(c.refusal) != std::string::npos);
    }
    EXPECT_TRUE(named) << "no refusal of fc1 containing '" << c.refusal << "'";
  }
  // Fused against the unfused graph (the model's f32 arithmetic) on random
  // inputs, every image of the batch.
  const CompiledModel unfused = compile(net.graph, {.fuse = false});
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> d(0.0f, 5.0f);
  const Shape shape{c.batch, 4, c.size, c.size};
  std::vector<float> xv(static_cast<std::size_t>(element_count(shape)));
  Comparison total;
  for (int trial = 0; trial < 4; ++trial) {
    for (float& v : xv) v = d(rng);
    const Tensor x = Tensor::from_vector<float>(shape, xv);
    const Comparison cmp = compare_quantized(run(fused, "x", x, net.output),
                                             run(unfused, "x", x, net.output), net.out);
    EXPECT_LE(cmp.max_diff, 1) << cmp.first_diffs;
    total.elements += cmp.elements;
    total.equal += cmp.equal;
  }
  EXPECT_GE(total.equal_fraction(), 0.97);
}

INSTANTIATE_TEST_SUITE_P(
    Forms, MeanInnerProduct,
    ::testing::Values(
        Case{"conv_u8", Form::conv, Grid{0.02f}},
        Case{"conv_u8_zero_point_relu", Form::conv, Grid{0.025f, 37}, 8, 1, true},
        Case{"conv_s8", Form::conv, Grid{0.03f, 0, true}},
        Case{"conv_no_bias_batch_3", Form::conv, Grid{0.02f, 9}, 8, 3, false, false},
        // 400 pixels: sums past 65535 take a third byte.
        Case{"conv_three_byte_sums", Form::conv, Grid{0.02f, 200}, 20},
        Case{"conv_s8_three_byte_sums_batch_2", Form::conv, Grid{0.03f, 0, true}, 20, 2, true},
        Case{"flatten_matmul_u8", Form::flatten_matmul, Grid{0.02f, 5}, 8, 2},
        // Named negatives.
        Case{"f32_weights", Form::conv, Grid{0.02f}, 8, 1, false, true, false, 1, false,
             "the weights are not dequantized s8 constants"},
        Case{"grouped", Form::conv, Grid{0.02f}, 8, 1, false, true, true, 2, false,
             "only a 1x1 convolution without groups"},
        // Padding 1 around the one pixel: fc1 writes 3x3, the bias on the border.
        Case{"padded", Form::conv, Grid{0.02f}, 8, 1, false, true, true, 1, false,
             "not one value per image and output channel", 1}),
    [](const auto& p) { return p.param.name; });

}  // namespace
}  // namespace qfuse::test::fusion
