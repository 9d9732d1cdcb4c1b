// Named cases where a layer must not become an int8 primitive, each for one
// reason. The layer stays an f32 node, and the fused compilation still
// computes what the reference does (in LSB of the output FakeQuantize).

#include <gtest/gtest.h>

#include <functional>

#include "fusion_test_util.hpp"

namespace qfuse::test::fusion {
namespace {

// Builds `x -> body -> FQ_out(s8) -> y`, the output range calibrated on the
// reference run of `x -> body`. `body` must build the same graph every call.
struct Net {
  graph::Graph graph;
  std::string output;
  FqRange out;
  Tensor x;
};

using Body = std::function<ValueId(Builder&, ValueId)>;

Net make_net(const Shape& input, const Body& body, unsigned seed) {
  Net net;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-0.2f, 3.7f);
  std::vector<float> xv(at(element_count(input)));
  for (float& e : xv) e = d(rng);
  net.x = Tensor::from_vector<float>(input, xv);
  float m = 0.0f;
  {
    graph::Graph g;
    Builder b(g);
    const ValueId y = body(b, b.input("x", input));
    b.output(y);
    const Tensor out = run(compile(g, {.fuse = false}), "x", net.x, g.value(y).name);
    for (float v : out.data<float>()) m = std::max(m, std::fabs(v));
  }
  net.out = make_range(Quant::s8, std::max(m, 1e-3f) / 127.0);
  Builder b(net.graph);
  const ValueId y = b.fake_quantize(body(b, b.input("x", input)), net.out.il, net.out.ih,
                                    net.out.il, net.out.ih, 256, "out.q");
  b.output(y);
  net.output = net.graph.value(y).name;
  return net;
}

// The layer named "layer" ran as a plain f32 operator, and fused equals unfused.
void expect_f32_layer_and_same_result(const Net& net, const std::string& op) {
  const CompiledModel fused = compile(net.graph, {.fuse = true});
  const CompiledModel unfused = compile(net.graph, {.fuse = false});
  EXPECT_TRUE(quantized_layers(fused).empty()) << describe_layers(fused);
  bool found = false;
  for (const LayerInfo& l : fused.layers()) {
    if (l.node != "layer") continue;
    found = true;
    EXPECT_EQ(l.op, op) << describe_layers(fused);
    EXPECT_TRUE(l.post_ops.empty()) << l.post_ops;
  }
  EXPECT_TRUE(found) << describe_layers(fused);
  const Comparison cmp = compare_quantized(run(fused, "x", net.x, net.output),
                                           run(unfused, "x", net.x, net.output), net.out);
  EXPECT_LE(cmp.max_diff, 1) << cmp.first_diffs;
  EXPECT_GE(cmp.equal_fraction(), 0.999) << cmp.first_diffs;
}

std::vector<float> random_values(std::size_t n, unsigned seed, float lo = -0.5f, float hi = 0.5f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& e : v) e = d(rng);
  return v;
}

// Symmetric 255-level per-output-channel FQ on constant weights [oc, ...].
ValueId fq_weights(Builder& b, const Shape& shape, unsigned seed, std::size_t axis = 0) {
  const std::vector<float> w = random_values(at(element_count(shape)), seed);
  Shape rs(shape.size(), 1);
  rs[axis] = shape[axis];
  std::vector<float> hi(at(shape[axis]), 0.0f);
  std::int64_t inner = 1;
  for (std::size_t i = axis + 1; i < shape.size(); ++i) inner *= shape[i];
  for (std::size_t i = 0; i < w.size(); ++i) {
    const auto c = at((static_cast<std::int64_t>(i) / inner) % shape[axis]);
    hi[c] = std::max(hi[c], std::fabs(w[i]));
  }
  std::vector<float> lo(hi.size());
  for (std::size_t i = 0; i < hi.size(); ++i) lo[i] = -hi[i];
  const ValueId l = b.constant("wlo", rs, lo);
  const ValueId h = b.constant("whi", rs, hi);
  return b.fake_quantize(b.constant("w", shape, w), l, h, l, h, 255, "w.q");
}

ValueId u8_input(Builder& b, ValueId x) { return b.fake_quantize(x, 0.0f, 3.5f, 0.0f, 3.5f, 256, "x.q"); }

graph::ConvAttrs conv3x3_pad1() {
  return {.strides = {1, 1}, .dilations = {1, 1}, .pads_begin = {1, 1}, .pads_end = {1, 1}, .groups = 1};
}

const Shape kImage{1, 8, 8, 8};

TEST(NotFused, NotFusedWhenWeightsAreNotQuantized) {
  const Net net = make_net(kImage, [](Builder& b, ValueId x) {
    const ValueId w = b.constant("w", {8, 8, 3, 3}, random_values(8 * 8 * 9, 1));
    return b.convolution(u8_input(b, x), w, std::nullopt, conv3x3_pad1(), "layer");
  }, 11);
  expect_f32_layer_and_same_result(net, "Convolution");
}

TEST(NotFused, NotFusedWhenInputIsNotQuantized) {
  const Net net = make_net(kImage, [](Builder& b, ValueId x) {
    return b.convolution(x, fq_weights(b, {8, 8, 3, 3}, 2), std::nullopt, conv3x3_pad1(), "layer");
  }, 12);
  expect_f32_layer_and_same_result(net, "Convolution");
}

// Per-channel input scales cannot move behind the accumulator as output scales.
TEST(NotFused, NotFusedWhenInputScaleIsPerChannel) {
  const Net net = make_net(kImage, [](Builder& b, ValueId x) {
    std::vector<float> hi(8);
    for (std::size_t c = 0; c < hi.size(); ++c) hi[c] = 2.0f + 0.25f * static_cast<float>(c);
    const ValueId lo = b.constant("xlo", {1, 8, 1, 1}, std::vector<float>(8, 0.0f));
    const ValueId h = b.constant("xhi", {1, 8, 1, 1}, hi);
    const ValueId xq = b.fake_quantize(x, lo, h, lo, h, 256, "x.q");
    return b.convolution(xq, fq_weights(b, {8, 8, 3, 3}, 3), std::nullopt, conv3x3_pad1(), "layer");
  }, 13);
  expect_f32_layer_and_same_result(net, "Convolution");
}

TEST(NotFused, NotFusedWhenLevelsExceed256) {
  const Net net = make_net(kImage, [](Builder& b, ValueId x) {
    const ValueId xq = b.fake_quantize(x, 0.0f, 3.5f, 0.0f, 3.5f, 1024, "x.q");
    return b.convolution(xq, fq_weights(b, {8, 8, 3, 3}, 4), std::nullopt, conv3x3_pad1(), "layer");
  }, 14);
  expect_f32_layer_and_same_result(net, "Convolution");
}

// Weights FQ with a fractional zero point (-ol / So = 0.5) have no s8 form.
TEST(NotFused, NotFusedWhenWeightZeroPointIsNotAnInteger) {
  const Net net = make_net(kImage, [](Builder& b, ValueId x) {
    const float so = 1.0f / 256.0f;
    const ValueId w = b.constant("w", {8, 8, 3, 3}, random_values(8 * 8 * 9, 5));
    const ValueId wq = b.fake_quantize(w, -127.5f * so, 127.5f * so, -0.5f * so, 254.5f * so, 256, "w.q");
    return b.convolution(u8_input(b, x), wq, std::nullopt, conv3x3_pad1(), "layer");
  }, 15);
  expect_f32_layer_and_same_result(net, "Convolution");
}

// A grouped deconvolution's output channel is not one weights axis.
TEST(NotFused, NotFusedWhenDeconvolutionIsGrouped) {
  const Net net = make_net({1, 8, 5, 5}, [](Builder& b, ValueId x) {
    graph::DeconvAttrs a{.strides = {2, 2}, .dilations = {1, 1}, .pads_begin = {1, 1},
                         .pads_end = {1, 1}, .output_padding = {1, 1}, .groups = 2};
    // IC 8, OC/groups 4: weights [8, 4, 3, 3]; FQ per IC row (axis 0).
    return b.deconvolution(u8_input(b, x), fq_weights(b, {8, 4, 3, 3}, 6), std::nullopt, a, "layer");
  }, 16);
  expect_f32_layer_and_same_result(net, "Deconvolution");
}

TEST(NotFused, NotFusedWhenMatMulWeightsAreNotConstant) {
  const Net net = make_net({2, 6, 16}, [](Builder& b, ValueId x) {
    const ValueId xq = u8_input(b, x);
    // x * x^T: both operands are activations.
    return b.matmul(xq, xq, false, true, "layer");
  }, 17);
  expect_f32_layer_and_same_result(net, "MatMul");
}

// The chain stops where the layer output has a second reader: the layer is
// int8 with an f32 destination, the FakeQuantize after it runs alone.
TEST(NotFused, ChainNotFusedWhenLayerOutputHasTwoConsumers) {
  graph::Graph g;
  Builder b(g);
  const ValueId x = b.input("x", kImage);
  const ValueId y = b.convolution(u8_input(b, x), fq_weights(b, {8, 8, 3, 3}, 8), std::nullopt,
                                  conv3x3_pad1(), "layer");
  const ValueId q = b.fake_quantize(y, -4.0f, 4.0f * 127.0f / 128.0f, -4.0f,
                                    4.0f * 127.0f / 128.0f, 256, "out.q");
  const ValueId r = b.relu(y);
  b.output(q);
  b.output(r);
  const CompiledModel fused = compile(g, {.fuse = true});
  const auto layers = quantized_layers(fused);
  ASSERT_EQ(layers.size(), 1u) << describe_layers(fused);
  EXPECT_TRUE(layers[0].post_ops.ends_with(" | f32")) << layers[0].post_ops;
  EXPECT_EQ(layers[0].post_ops.find("eltwise_round"), std::string::npos) << layers[0].post_ops;
  int fqs = 0;
  for (const LayerInfo& l : fused.layers()) fqs += l.node == "out.q" ? 1 : 0;
  EXPECT_EQ(fqs, 1) << describe_layers(fused);
  const CompiledModel unfused = compile(g, {.fuse = false});
  std::mt19937 rng(18);
  std::uniform_real_distribution<float> d(-0.2f, 3.7f);
  std::vector<float> xv(at(element_count(kImage)));
  for (float& e : xv) e = d(rng);
  const Tensor xt = Tensor::from_vector<float>(kImage, xv);
  const FqRange out{-4.0f, 4.0f * 127.0f / 128.0f, 4.0 / 128.0};
  const Comparison cmp = compare_quantized(run(fused, "x", xt, g.value(q).name),
                                           run(unfused, "x", xt, g.value(q).name), out);
  EXPECT_LE(cmp.max_diff, 1) << cmp.first_diffs;
  EXPECT_GE(cmp.equal_fraction(), 0.999) << cmp.first_diffs;
}

}  // namespace
}  // namespace qfuse::test::fusion
