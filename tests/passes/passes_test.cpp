// One test per fusion pass (structure, and numbers before/after where the
// pass keeps them) plus named negatives that say why nothing changed.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "graph/builder.hpp"
#include "graph/passes/passes.hpp"
#include "graph/passes/pattern.hpp"
#include "plugin/api_internal.hpp"
#include "plugin/executable_ops/quantized_layer.hpp"

namespace qfuse::graph {
namespace {

using ::testing::HasSubstr;

std::vector<float> random_values(std::size_t n, float lo, float hi, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

std::size_t count(const Graph& g, OpKind kind) {
  std::size_t n = 0;
  for (NodeId id : g.topological_order()) n += g.node(id).kind == kind ? 1 : 0;
  return n;
}

// Runs `g` node by node (quantized nodes, if any, as int8 primitives).
std::vector<float> run(const Graph& g, const Tensor& x) {
  const CompiledModel m = compile(g, {.fuse = false});
  InferRequest r = m.create_infer_request();
  r.set_input(m.input_names()[0], x);
  r.infer();
  const Tensor& y = r.output(m.output_names()[0]);
  std::vector<float> out(static_cast<std::size_t>(y.size()));
  for (std::int64_t i = 0; i < y.size(); ++i) out[static_cast<std::size_t>(i)] = y.as_float(i);
  return out;
}

Tensor input_tensor(const Shape& shape, float lo, float hi, unsigned seed) {
  return Tensor::from_vector<float>(shape, random_values(static_cast<std::size_t>(element_count(shape)), lo, hi, seed));
}

void expect_close(const std::vector<float>& a, const std::vector<float>& b, float tol) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    ASSERT_NEAR(a[i], b[i], tol * (1.0f + std::abs(b[i]))) << "element " << i;
  }
}

struct Fixture {
  Graph g;
  Builder b{g};
};

ValueId conv_weights(Builder& b, const std::string& name, std::int64_t oc, std::int64_t ic,
                     bool quantize, bool per_channel = true) {
  const auto w = random_values(static_cast<std::size_t>(oc * ic * 9), -0.5f, 0.5f, 3);
  ValueId wv = b.constant(name, {oc, ic, 3, 3}, w);
  if (!quantize) return wv;
  std::vector<float> hi(static_cast<std::size_t>(per_channel ? oc : 1));
  for (std::size_t c = 0; c < hi.size(); ++c) hi[c] = 0.5f - 0.01f * static_cast<float>(c);
  std::vector<float> lo = hi;
  for (float& v : lo) v = -v;
  const Shape rs = per_channel ? Shape{oc, 1, 1, 1} : Shape{1};
  const ValueId l = b.constant(name + ".lo", rs, lo), h = b.constant(name + ".hi", rs, hi);
  return b.fake_quantize(wv, l, h, l, h, 255, name + ".fq");
}

// The plugin's own check, as compile() passes it.
PassContext context() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return PassContext(PassOptions{}, [](const Graph& g, const Node& n, const Shape& shape) {
    return plugin::check_quantized_layer(g, n, shape, engine, CompileOptions{});
  });
}

TEST(PassContext, RequiresTheBackendsCheck) {
  EXPECT_THROW((void)PassContext(PassOptions{}, nullptr), std::invalid_argument);
}

// --- fold_batch_norm -------------------------------------------------------

// BatchNorm "bn" over 8 channels of `y`, gamma of sign `gamma_sign`.
ValueId batch_norm(Builder& b, ValueId y, float gamma_sign = 1.0f) {
  std::vector<float> gamma = random_values(8, 0.5f, 1.5f, 6);
  for (float& v : gamma) v *= gamma_sign;
  return b.op(OpKind::BatchNormalization,
              {y, b.constant("gamma", {8}, gamma), b.constant("beta", {8}, random_values(8, -1, 1, 7)),
               b.constant("mean", {8}, random_values(8, -1, 1, 8)),
               b.constant("var", {8}, random_values(8, 0.1f, 2, 9))},
              BatchNormAttrs{1e-5f}, "bn");
}

Graph conv_bn(bool quantized_weights, float gamma_sign) {
  Graph g;
  Builder b(g);
  const ValueId x = b.input("x", {1, 4, 6, 6});
  const ValueId w = conv_weights(b, "w", 8, 4, quantized_weights);
  const ValueId y = b.convolution(x, w, b.constant("bias", {8}, random_values(8, -1, 1, 5)),
                                  {.pads_begin = {1, 1}, .pads_end = {1, 1}}, "conv");
  b.output(batch_norm(b, y, gamma_sign));
  return g;
}

TEST(FoldBatchNorm, FoldsIntoConstantWeightsAndBias) {
  Graph g = conv_bn(false, 1.0f);
  const Graph before = g;
  PassContext ctx = context();
  EXPECT_TRUE(fold_batch_norm(g, ctx));
  EXPECT_EQ(count(g, OpKind::BatchNormalization), 0u);
  EXPECT_EQ(count(g, OpKind::Convolution), 1u);
  EXPECT_EQ(g.live_node_count(), 1u);
  const Tensor x = input_tensor({1, 4, 6, 6}, -1, 1, 1);
  expect_close(run(g, x), run(before, x), 1e-5f);
}

TEST(FoldBatchNorm, ScalesFakeQuantizeRangesWhenEveryScaleIsPositive) {
  Graph g = conv_bn(true, 1.0f);
  const Graph before = g;
  PassContext ctx = context();
  EXPECT_TRUE(fold_batch_norm(g, ctx));
  EXPECT_EQ(count(g, OpKind::BatchNormalization), 0u);
  EXPECT_EQ(count(g, OpKind::Multiply), 0u);
  const Tensor x = input_tensor({1, 4, 6, 6}, -1, 1, 2);
  expect_close(run(g, x), run(before, x), 1e-4f);
}

TEST(FoldBatchNorm, NegativeScaleWithQuantizedWeightsBecomesMultiplyAdd) {
  Graph g = conv_bn(true, -1.0f);
  const Graph before = g;
  PassContext ctx = context();
  EXPECT_TRUE(fold_batch_norm(g, ctx));
  EXPECT_EQ(count(g, OpKind::BatchNormalization), 0u);
  EXPECT_EQ(count(g, OpKind::Multiply), 1u);
  EXPECT_EQ(count(g, OpKind::Add), 1u);
  const Tensor x = input_tensor({1, 4, 6, 6}, -1, 1, 3);
  expect_close(run(g, x), run(before, x), 1e-5f);
}

TEST(FoldBatchNorm, NotFoldedWhenLayerOutputHasTwoConsumers) {
  Graph g = conv_bn(false, 1.0f);
  g.mark_output(g.node(g.topological_order()[0]).outputs[0]);
  PassContext ctx = context();
  EXPECT_FALSE(fold_batch_norm(g, ctx));
  EXPECT_EQ(count(g, OpKind::BatchNormalization), 1u);
}

// --- fuse_bias ------------------------------------------------------------

TEST(FuseBias, PerChannelAddAfterDeconvolutionBecomesItsBias) {
  Fixture f;
  const ValueId x = f.b.input("x", {1, 4, 5, 5});
  const ValueId w = f.b.constant("w", {4, 6, 3, 3}, random_values(4 * 6 * 9, -0.5f, 0.5f, 21));
  const ValueId y = f.b.deconvolution(x, w, std::nullopt, {.strides = {2, 2}}, "deconv");
  f.b.output(f.b.add(y, f.b.constant("c", {1, 6, 1, 1}, random_values(6, -1, 1, 22))));
  const Graph before = f.g;
  PassContext ctx = context();
  EXPECT_TRUE(fuse_bias(f.g, ctx));
  EXPECT_EQ(count(f.g, OpKind::Add), 0u);
  ASSERT_EQ(f.g.live_node_count(), 1u);
  EXPECT_EQ(f.g.node(f.g.topological_order()[0]).inputs.size(), 3u);
  const Tensor x_in = input_tensor({1, 4, 5, 5}, -1, 1, 23);
  expect_close(run(f.g, x_in), run(before, x_in), 1e-5f);
}

TEST(FuseBias, NotFusedWhenTheAddendIsNotConstant) {
  Fixture f;
  const ValueId x = f.b.input("x", {1, 4, 6, 6});
  const ValueId y = f.b.convolution(x, conv_weights(f.b, "w", 4, 4, false), std::nullopt,
                                    {.pads_begin = {1, 1}, .pads_end = {1, 1}}, "conv");
  f.b.output(f.b.add(y, x));
  PassContext ctx = context();
  EXPECT_FALSE(fuse_bias(f.g, ctx));
}

// --- fold_scale_into_layer ------------------------------------------------

// x * a + b after a convolution (PP-LCNet's learnable affine block): the
// factor goes into the weights and bias, the shift into the bias.
TEST(FoldScaleIntoLayer, ScalarAndPerChannelFactorsFoldIntoWeightsAndBias) {
  for (const Shape& factor_shape : {Shape{1}, Shape{1, 6, 1, 1}}) {
    Fixture f;
    const ValueId x = f.b.input("x", {1, 4, 5, 5});
    const ValueId w = f.b.constant("w", {6, 4, 3, 3}, random_values(6 * 4 * 9, -0.5f, 0.5f, 31));
    const ValueId bias = f.b.constant("b", {6}, random_values(6, -1, 1, 32));
    const ValueId y = f.b.convolution(x, w, bias, {.pads_begin = {1, 1}, .pads_end = {1, 1}}, "conv");
    const auto n = static_cast<std::size_t>(element_count(factor_shape));
    const ValueId scaled = f.b.multiply(f.b.constant("a", factor_shape, random_values(n, -2, 2, 33)), y);
    f.b.output(f.b.add(scaled, f.b.constant("s", {1}, {0.25f})));
    const Graph before = f.g;
    PassContext ctx = context();
    EXPECT_TRUE(fold_scale_into_layer(f.g, ctx));
    EXPECT_TRUE(fuse_bias(f.g, ctx));
    EXPECT_EQ(count(f.g, OpKind::Multiply), 0u);
    EXPECT_EQ(count(f.g, OpKind::Add), 0u);
    const Tensor x_in = input_tensor({1, 4, 5, 5}, -1, 1, 34);
    expect_close(run(f.g, x_in), run(before, x_in), 1e-5f);
  }
}

// Named negatives: weights that are not constant yet (a FakeQuantize, left
// for the int8 layer), and a factor that varies along a spatial axis.
TEST(FoldScaleIntoLayer, NotFoldedIntoFakeQuantizedWeightsOrBySpatialFactors) {
  {
    Fixture f;
    const ValueId x = f.b.input("x", {1, 4, 6, 6});
    const ValueId y = f.b.convolution(x, conv_weights(f.b, "w", 4, 4, true), std::nullopt,
                                      {.pads_begin = {1, 1}, .pads_end = {1, 1}}, "conv");
    f.b.output(f.b.multiply(y, f.b.constant("a", {1}, {0.5f})));
    PassContext ctx = context();
    EXPECT_FALSE(fold_scale_into_layer(f.g, ctx));
  }
  {
    Fixture f;
    const ValueId x = f.b.input("x", {1, 4, 6, 6});
    const ValueId y = f.b.convolution(x, conv_weights(f.b, "w", 4, 4, false), std::nullopt,
                                      {.pads_begin = {1, 1}, .pads_end = {1, 1}}, "conv");
    f.b.output(f.b.multiply(y, f.b.constant("a", {1, 1, 1, 6}, random_values(6, -1, 1, 35))));
    PassContext ctx = context();
    EXPECT_FALSE(fold_scale_into_layer(f.g, ctx));
  }
}

// --- fold_into_fake_quantize_ranges ---------------------------------------

TEST(FoldIntoFakeQuantizeRanges, ClampCoveringTheRangeIsDropped) {
  Fixture f;
  const ValueId x = f.b.input("x", {1, 2, 4, 4});
  f.b.output(f.b.fake_quantize(f.b.clamp(x, -1.0f, 7.0f), 0.0f, 6.0f, 0.0f, 6.0f, 256));
  const Graph before = f.g;
  PassContext ctx = context();
  EXPECT_TRUE(fold_into_fake_quantize_ranges(f.g, ctx));
  EXPECT_TRUE(eliminate_dead_nodes(f.g, ctx));
  EXPECT_EQ(count(f.g, OpKind::Clamp), 0u);
  const Tensor x_in = input_tensor({1, 2, 4, 4}, -3, 9, 4);
  expect_close(run(f.g, x_in), run(before, x_in), 0.0f);
}

TEST(FoldIntoFakeQuantizeRanges, NotFoldedWhenClampIsNarrowerThanRange) {
  Fixture f;
  const ValueId x = f.b.input("x", {1, 2, 4, 4});
  f.b.output(f.b.fake_quantize(f.b.clamp(x, 0.0f, 3.0f), 0.0f, 6.0f, 0.0f, 6.0f, 256));
  PassContext ctx = context();
  EXPECT_FALSE(fold_into_fake_quantize_ranges(f.g, ctx));
}

TEST(FoldIntoFakeQuantizeRanges, PositiveMultiplyDividesTheRanges) {
  Fixture f;
  const ValueId x = f.b.input("x", {1, 2, 4, 4});
  // A power of two keeps both forms bit-identical.
  f.b.output(f.b.fake_quantize(f.b.multiply(x, f.b.scalar(4.0f)), -2.0f, 6.0f, -2.0f, 6.0f, 256));
  const Graph before = f.g;
  PassContext ctx = context();
  EXPECT_TRUE(fold_into_fake_quantize_ranges(f.g, ctx));
  eliminate_dead_nodes(f.g, ctx);
  EXPECT_EQ(count(f.g, OpKind::Multiply), 0u);
  const Tensor x_in = input_tensor({1, 2, 4, 4}, -1, 2, 5);
  expect_close(run(f.g, x_in), run(before, x_in), 0.0f);
}

TEST(FoldIntoFakeQuantizeRanges, NegativeMultiplyIsNotFolded) {
  Fixture f;
  const ValueId x = f.b.input("x", {1, 2, 4, 4});
  f.b.output(f.b.fake_quantize(f.b.multiply(x, f.b.scalar(-1.0f)), 0.0f, 6.0f, 0.0f, 6.0f, 256));
  PassContext ctx = context();
  EXPECT_FALSE(fold_into_fake_quantize_ranges(f.g, ctx));
}

// --- quantize_weights -----------------------------------------------------

TEST(QuantizeWeights, SymmetricPerChannelWeightsBecomeS8) {
  Fixture f;
  const ValueId x = f.b.input("x", {1, 4, 6, 6});
  f.b.output(f.b.convolution(x, conv_weights(f.b, "w", 8, 4, true), std::nullopt, {}, "conv"));
  const Graph before = f.g;
  PassContext ctx = context();
  EXPECT_TRUE(quantize_weights(f.g, ctx));
  EXPECT_EQ(count(f.g, OpKind::FakeQuantize), 0u);
  const Node& conv = f.g.node(f.g.topological_order().back());
  const Node* mul = pattern::producer_of(f.g, conv.inputs[1], OpKind::Multiply);
  ASSERT_NE(mul, nullptr);
  EXPECT_EQ(f.g.value(mul->inputs[1]).shape, (Shape{8, 1, 1, 1}));
  const Node* cv = pattern::producer_of(f.g, mul->inputs[0], OpKind::Convert);
  ASSERT_NE(cv, nullptr);
  EXPECT_EQ(f.g.value(cv->inputs[0]).type, ElementType::s8);
  const Tensor x_in = input_tensor({1, 4, 6, 6}, -1, 1, 6);
  expect_close(run(f.g, x_in), run(before, x_in), 1e-5f);
}

TEST(QuantizeWeights, NotQuantizedWhenZeroPointIsFractional) {
  Fixture f;
  const ValueId x = f.b.input("x", {1, 4, 6, 6});
  const ValueId w = f.b.constant("w", {8, 4, 3, 3}, random_values(8 * 4 * 9, -0.5f, 0.5f, 3));
  // ol = -0.3, oh = 0.5 with 255 levels: Zo = 0.3 / (0.8 / 254) is not an integer.
  const ValueId fq = f.b.fake_quantize(w, -0.3f, 0.5f, -0.3f, 0.5f, 255);
  f.b.output(f.b.convolution(x, fq, std::nullopt, {}, "conv"));
  PassContext ctx = context();
  EXPECT_FALSE(quantize_weights(f.g, ctx));
}

// --- split_fake_quantize --------------------------------------------------

Graph fq_conv(float il, float ih, std::int64_t levels) {
  Graph g;
  Builder b(g);
  const ValueId x = b.input("x", {1, 4, 6, 6});
  const ValueId q = b.fake_quantize(x, il, ih, il, ih, levels, "fq");
  b.output(b.convolution(q, conv_weights(b, "w", 8, 4, true), std::nullopt, {}, "conv"));
  PassContext ctx = context();
  quantize_weights(g, ctx);
  return g;
}

ElementType stored_type(const Graph& g) {
  for (NodeId id : g.topological_order()) {
    const Node& n = g.node(id);
    if (n.kind == OpKind::Convert && n.attr<ConvertAttrs>().to != ElementType::f32) {
      return n.attr<ConvertAttrs>().to;
    }
  }
  return ElementType::f32;
}

TEST(SplitFakeQuantize, ZeroLowRangeIsStoredAsU8) {
  Graph g = fq_conv(0.0f, 2.55f, 256);
  const Graph before = g;
  PassContext ctx = context();
  EXPECT_TRUE(split_fake_quantize(g, ctx));
  EXPECT_EQ(stored_type(g), ElementType::u8);
  EXPECT_EQ(count(g, OpKind::Subtract), 0u);  // zero point 0
  const Tensor x_in = input_tensor({1, 4, 6, 6}, -1, 3, 7);
  expect_close(run(g, x_in), run(before, x_in), 1e-5f);
}

TEST(SplitFakeQuantize, SymmetricRangeIsStoredAsS8WithoutZeroPoint) {
  Graph g = fq_conv(-1.28f, 1.27f, 256);
  const Graph before = g;
  PassContext ctx = context();
  EXPECT_TRUE(split_fake_quantize(g, ctx));
  EXPECT_EQ(stored_type(g), ElementType::s8);
  EXPECT_EQ(count(g, OpKind::Subtract), 0u);
  const Tensor x_in = input_tensor({1, 4, 6, 6}, -2, 2, 8);
  expect_close(run(g, x_in), run(before, x_in), 1e-5f);
}

TEST(SplitFakeQuantize, AsymmetricRangeKeepsAZeroPoint) {
  Graph g = fq_conv(-0.5f, 2.05f, 256);
  const Graph before = g;
  PassContext ctx = context();
  EXPECT_TRUE(split_fake_quantize(g, ctx));
  EXPECT_EQ(stored_type(g), ElementType::u8);
  EXPECT_EQ(count(g, OpKind::Subtract), 1u);
  const Tensor x_in = input_tensor({1, 4, 6, 6}, -1, 3, 9);
  expect_close(run(g, x_in), run(before, x_in), 1e-5f);
}

TEST(SplitFakeQuantize, NotSplitWhenLevelsExceed256) {
  Graph g = fq_conv(0.0f, 4.0f, 1024);
  PassContext ctx = context();
  EXPECT_FALSE(split_fake_quantize(g, ctx));
}

TEST(SplitFakeQuantize, NotSplitWhenNoLayerReadsIt) {
  Fixture f;
  const ValueId x = f.b.input("x", {1, 4, 6, 6});
  f.b.output(f.b.relu(f.b.fake_quantize(x, 0.0f, 1.0f, 0.0f, 1.0f, 256)));
  PassContext ctx = context();
  EXPECT_FALSE(split_fake_quantize(f.g, ctx));
}

// --- fuse_dequantize_into_layer + fuse_post_op_chain ----------------------

Graph quantized_block(bool relu_between) {
  Graph g;
  Builder b(g);
  const ValueId x = b.input("x", {1, 4, 6, 6});
  const ValueId q = b.fake_quantize(x, 0.0f, 2.55f, 0.0f, 2.55f, 256, "fq_in");
  ValueId y = b.convolution(q, conv_weights(b, "w", 8, 4, true),
                            b.constant("bias", {8}, random_values(8, -0.2f, 0.2f, 11)),
                            {.pads_begin = {1, 1}, .pads_end = {1, 1}}, "conv");
  y = b.fake_quantize(y, -4.0f, 4.0f, -4.0f, 4.0f, 256, "fq_mid");
  if (relu_between) y = b.relu(y);
  y = b.fake_quantize(y, 0.0f, 4.0f, 0.0f, 4.0f, 256, "fq_out");
  const ValueId w2 = conv_weights(b, "w2", 8, 8, true);
  b.output(b.convolution(y, w2, std::nullopt, {.pads_begin = {1, 1}, .pads_end = {1, 1}}, "conv2"));
  return g;
}

TEST(FuseDequantizeIntoLayer, DequantizedInputAndWeightsBecomeOneQuantizedLayer) {
  Graph g = quantized_block(true);
  PassContext ctx = context();
  quantize_weights(g, ctx);
  quantize_weights(g, ctx);
  split_fake_quantize(g, ctx);
  split_fake_quantize(g, ctx);
  eliminate_dead_nodes(g, ctx);
  EXPECT_TRUE(fuse_dequantize_into_layer(g, ctx));
  EXPECT_EQ(count(g, OpKind::QuantizedConvolution), 1u);
  const Node* q = nullptr;
  for (NodeId id : g.topological_order()) {
    if (g.node(id).kind == OpKind::QuantizedConvolution) q = &g.node(id);
  }
  ASSERT_NE(q, nullptr);
  const auto& a = q->attr<QuantizedLayerAttrs>();
  EXPECT_TRUE(a.has_bias);
  EXPECT_EQ(a.src_zero_point, 0);
  ASSERT_EQ(a.chain.steps.size(), 1u);
  const auto* scale = std::get_if<composer::Scale>(&a.chain.steps[0]);
  ASSERT_NE(scale, nullptr);
  EXPECT_EQ(scale->values.size(), 8u);
}

// An asymmetric u8 input (zero point 100): an unpadded convolution takes the
// zero point into its bias (-100 * sum of its weights, exact in the
// accumulator), so oneDNN runs it without a source zero point; a padded one
// keeps it (a padded 0 is not the real 0), and so matches unfused only by
// oneDNN's own zero-point handling. Both match the unfused graph within 1e-5.
TEST(FuseDequantizeIntoLayer, SourceZeroPointGoesIntoTheBiasOfAnUnpaddedConvolution) {
  for (const bool padded : {false, true}) {
    Graph g;
    Builder b(g);
    const ValueId x = b.input("x", {1, 4, 6, 6});
    const float s = 0.02f;
    const ValueId q = b.fake_quantize(x, -100 * s, 155 * s, -100 * s, 155 * s, 256, "fq_in");
    graph::ConvAttrs attrs;
    if (padded) attrs = {.pads_begin = {1, 1}, .pads_end = {1, 1}};
    b.output(b.convolution(q, conv_weights(b, "w", 8, 4, true), std::nullopt, attrs, "conv"));
    const Graph before = g;
    PassContext ctx = context();
    run_fusion_passes(g, ctx);
    const Node* conv = nullptr;
    for (NodeId id : g.topological_order()) {
      if (g.node(id).kind == OpKind::QuantizedConvolution) conv = &g.node(id);
    }
    ASSERT_NE(conv, nullptr);
    const auto& a = conv->attr<QuantizedLayerAttrs>();
    EXPECT_EQ(a.src_zero_point, padded ? 100 : 0);
    EXPECT_EQ(a.has_bias, !padded);
    const Tensor x_in = input_tensor({1, 4, 6, 6}, -2.5f, 3.5f, 41);
    expect_close(run(g, x_in), run(before, x_in), 1e-5f);
  }
}

TEST(FusePostOpChain, ConvFqReluFqBecomesOneInt8ConvWithU8Destination) {
  Graph g = quantized_block(true);
  PassContext ctx = context();
  run_fusion_passes(g, ctx);
  EXPECT_EQ(count(g, OpKind::QuantizedConvolution), 2u);
  // The input quantization (a FakeQuantize and its Convert) is one quantizing Convert.
  EXPECT_EQ(count(g, OpKind::FakeQuantize), 0u);
  EXPECT_EQ(count(g, OpKind::Relu), 0u);
  std::size_t quantizing = 0;
  for (NodeId id : g.topological_order()) {
    const Node& n = g.node(id);
    quantizing += n.kind == OpKind::Convert && n.attr<ConvertAttrs>().quantizes();
    if (n.name == "conv") {
      EXPECT_EQ(n.attr<QuantizedLayerAttrs>().dst_type(), ElementType::u8);
    }
  }
  EXPECT_EQ(quantizing, 1u);
  EXPECT_THAT(ctx.lines(), ::testing::Contains(HasSubstr("fuse_post_op_chain: conv absorbed")));
}

TEST(FusePostOpChain, ChainStopsAtAValueWithTwoConsumers) {
  Graph g = quantized_block(true);
  // Expose the mid FakeQuantize: the chain must end before it.
  for (NodeId id : g.topological_order()) {
    if (g.node(id).name == "fq_mid") g.mark_output(g.node(id).outputs[0]);
  }
  PassContext ctx = context();
  run_fusion_passes(g, ctx);
  for (NodeId id : g.topological_order()) {
    const Node& n = g.node(id);
    if (n.name == "conv") {
      EXPECT_EQ(n.kind, OpKind::QuantizedConvolution);
      EXPECT_EQ(n.attr<QuantizedLayerAttrs>().dst_type(), ElementType::f32);
    }
  }
}

TEST(FuseDequantizeIntoLayer, NotFusedWhenWeightsAreNotQuantized) {
  Fixture f;
  const ValueId x = f.b.input("x", {1, 4, 6, 6});
  const ValueId q = f.b.fake_quantize(x, 0.0f, 2.55f, 0.0f, 2.55f, 256);
  f.b.output(f.b.convolution(q, conv_weights(f.b, "w", 8, 4, false), std::nullopt, {}, "conv"));
  PassContext ctx = context();
  run_fusion_passes(f.g, ctx);
  EXPECT_EQ(count(f.g, OpKind::QuantizedConvolution), 0u);
  EXPECT_EQ(count(f.g, OpKind::Convolution), 1u);
}

TEST(FuseDequantizeIntoLayer, NotFusedWhenTheBackendRefuses) {
  Graph g = quantized_block(false);
  PassContext ctx(PassOptions{}, [](const Graph&, const Node&, const Shape&) {
    return std::optional<std::string>("refused for the test");
  });
  run_fusion_passes(g, ctx);
  EXPECT_EQ(count(g, OpKind::QuantizedConvolution), 0u);
  EXPECT_EQ(count(g, OpKind::Convolution), 2u);
}

// --- lower_bias + the phased pipeline --------------------------------------

// An ONNX Runtime-style layer: u8 input dequantize, s8 weights dequantized per
// channel, and the bias as the dequantize of int32 values with scale
// sx * sw[c] (`bias_expr`), or a plain f32 constant.
Graph int32_bias_conv(bool bias_expr) {
  Graph g;
  Builder b(g);
  const ValueId x = b.input("x", {1, 4, 6, 6});
  const float sx = 0.01f;
  const ValueId xq = b.convert(b.fake_quantize(x, 0.0f, 2.55f, 0.0f, 2.55f, 256), ElementType::u8);
  const ValueId xd = b.multiply(b.convert(xq, ElementType::f32), b.scalar(sx));
  std::vector<std::int8_t> wq(8 * 4 * 9);
  for (std::size_t i = 0; i < wq.size(); ++i) wq[i] = static_cast<std::int8_t>(int(i * 37 % 255) - 127);
  std::vector<float> sw(8);
  for (std::size_t c = 0; c < sw.size(); ++c) sw[c] = 0.002f + 0.0005f * float(c);
  const ValueId w = b.multiply(
      b.convert(b.constant("wq", Tensor::from_vector<std::int8_t>({8, 4, 3, 3}, wq)), ElementType::f32),
      b.constant("sw", {8, 1, 1, 1}, sw));
  std::vector<std::int32_t> bq{-300, -20, 0, 5, 77, 150, 900, -4000};
  std::vector<float> bs(8);
  for (std::size_t c = 0; c < bs.size(); ++c) bs[c] = sx * sw[c];
  ValueId bias;
  if (bias_expr) {
    bias = b.multiply(b.convert(b.constant("bq", Tensor::from_vector<std::int32_t>({8}, bq)), ElementType::f32),
                      b.constant("bs", {8}, bs));
  } else {
    std::vector<float> bf(8);
    for (std::size_t c = 0; c < bf.size(); ++c) bf[c] = float(bq[c]) * bs[c];
    bias = b.constant("bias", {8}, bf);
  }
  b.output(b.convolution(xd, w, bias, {.pads_begin = {1, 1}, .pads_end = {1, 1}}, "conv"));
  return g;
}

TEST(LowerBias, Int32BiasDequantizeBecomesAConstantAndTheLayerStaysInt8) {
  Graph g = int32_bias_conv(true);
  const Graph before = g;
  PassContext ctx = context();
  EXPECT_TRUE(lower_bias(g, ctx));  // Convert(int32) folded
  EXPECT_TRUE(lower_bias(g, ctx));  // Multiply(scale) folded
  EXPECT_FALSE(lower_bias(g, ctx));
  const Node* conv = nullptr;
  for (NodeId id : g.topological_order()) {
    if (g.node(id).name == "conv") conv = &g.node(id);
  }
  ASSERT_NE(conv, nullptr);
  EXPECT_TRUE(g.value(conv->inputs[2]).is_constant());
  // The weights' dequantize is still there for fuse_dequantize_into_layer.
  EXPECT_FALSE(g.value(conv->inputs[1]).is_constant());
  const Tensor x = input_tensor({1, 4, 6, 6}, 0, 2.55f, 21);
  expect_close(run(g, x), run(before, x), 0.0f);

  Graph fused = int32_bias_conv(true);
  PassContext fctx = context();
  run_fusion_passes(fused, fctx);
  EXPECT_EQ(count(fused, OpKind::QuantizedConvolution), 1u);
  EXPECT_EQ(count(fused, OpKind::Convolution), 0u);
}

TEST(LowerBias, NotLoweredWhenTheBiasIsAlreadyConstant) {
  Graph g = int32_bias_conv(false);
  PassContext ctx = context();
  EXPECT_FALSE(lower_bias(g, ctx));
  EXPECT_TRUE(ctx.refusals().empty());
}

TEST(LowerBias, NotLoweredWhenTheBiasDependsOnAnInput) {
  Fixture f;
  const ValueId x = f.b.input("x", {1, 4, 6, 6});
  const ValueId bias_in = f.b.input("b", {8});
  const ValueId y = f.b.convolution(x, conv_weights(f.b, "w", 8, 4, false),
                                    f.b.multiply(bias_in, f.b.scalar(2.0f)), {}, "conv");
  f.b.output(y);
  PassContext ctx = context();
  ctx.begin_round();
  EXPECT_FALSE(lower_bias(f.g, ctx));
  ctx.end_phase();
  ASSERT_EQ(ctx.refusals().size(), 1u);
  EXPECT_EQ(ctx.refusals()[0].pass, "lower_bias");
  EXPECT_EQ(ctx.refusals()[0].node, "conv");
  EXPECT_THAT(ctx.refusals()[0].reason, HasSubstr("not a constant expression"));
}

TEST(PassManager, RefusalsOfTheLastRoundAreKeptOncePerCandidate) {
  Fixture f;
  const ValueId x = f.b.input("x", {1, 4, 6, 6});
  f.b.output(f.b.convolution(x, conv_weights(f.b, "w", 8, 4, false), std::nullopt, {}, "conv"));
  PassContext ctx = context();
  run_fusion_passes(f.g, ctx);
  // The plain f32 conv is refused once, with the reason naming its input.
  std::size_t n = 0;
  for (const Refusal& r : ctx.refusals()) {
    if (r.node == "conv" && r.pass == "fuse_dequantize_into_layer") {
      ++n;
      EXPECT_THAT(r.reason, HasSubstr("graph input"));
    }
  }
  EXPECT_EQ(n, 1u);
}

// PyTorch QAT conv-bn: conv -> Div(per channel) -> Add(bias) -> BatchNorm.
TEST(FoldBatchNorm, BatchNormAfterPerChannelDivAndAddBecomesMultiplyAdd) {
  Fixture f;
  const ValueId x = f.b.input("x", {1, 4, 6, 6});
  ValueId y = f.b.convolution(x, conv_weights(f.b, "w", 8, 4, false), std::nullopt,
                              {.pads_begin = {1, 1}, .pads_end = {1, 1}}, "conv");
  y = f.b.binary(OpKind::Divide, y, f.b.constant("sf", {1, 8, 1, 1}, random_values(8, 0.5f, 2, 12)));
  y = f.b.add(y, f.b.constant("cb", {1, 8, 1, 1}, random_values(8, -1, 1, 13)));
  f.b.output(batch_norm(f.b, y));
  const Graph before = f.g;
  PassContext ctx = context();
  EXPECT_TRUE(fold_batch_norm(f.g, ctx));
  EXPECT_EQ(count(f.g, OpKind::BatchNormalization), 0u);
  EXPECT_EQ(count(f.g, OpKind::Multiply), 1u);
  const Tensor in = input_tensor({1, 4, 6, 6}, -1, 1, 4);
  expect_close(run(f.g, in), run(before, in), 1e-5f);
}

TEST(FoldBatchNorm, NotFoldedWhenANonConstantStepSeparatesItFromTheLayer) {
  Fixture f;
  const ValueId x = f.b.input("x", {1, 4, 6, 6});
  ValueId y = f.b.convolution(x, conv_weights(f.b, "w", 8, 4, false), std::nullopt,
                              {.pads_begin = {1, 1}, .pads_end = {1, 1}}, "conv");
  y = f.b.relu(y);
  f.b.output(batch_norm(f.b, y));
  PassContext ctx = context();
  EXPECT_FALSE(fold_batch_norm(f.g, ctx));
  EXPECT_EQ(count(f.g, OpKind::BatchNormalization), 1u);
}

// --- hoist_data_movement_above_dequantize / fold_constants -----------------------

TEST(HoistReshapeAboveDequantize, FlattenBeforeFullyConnectedMovesOntoTheU8Tensor) {
  Fixture f;
  const ValueId x = f.b.input("x", {2, 8, 1, 1});
  const ValueId q = f.b.fake_quantize(x, 0.0f, 2.55f, 0.0f, 2.55f, 256);
  const ValueId flat = f.b.op(OpKind::Flatten, {q}, FlattenAttrs{1});
  const ValueId w = f.b.constant("w", {4, 8}, random_values(32, -0.5f, 0.5f, 12));
  const ValueId wq = f.b.fake_quantize(w, -0.5f, 0.5f, -0.5f, 0.5f, 255);
  f.b.output(f.b.fully_connected(flat, wq, std::nullopt, "fc"));
  const Graph before = f.g;
  PassContext ctx = context();
  run_fusion_passes(f.g, ctx);
  EXPECT_EQ(count(f.g, OpKind::QuantizedFullyConnected), 1u);
  EXPECT_THAT(ctx.lines(), ::testing::Contains(HasSubstr("hoist_data_movement_above_dequantize")));
  const Tensor x_in = input_tensor({2, 8, 1, 1}, 0, 3, 13);
  expect_close(run(f.g, x_in), run(before, x_in), 1e-4f);
}

TEST(FoldConstants, UnfusedWeightDequantizeIsEvaluatedOnce) {
  Fixture f;
  const ValueId x = f.b.input("x", {1, 4, 6, 6});
  // f32 input (no activation FakeQuantize): the layer stays f32.
  f.b.output(f.b.convolution(x, conv_weights(f.b, "w", 8, 4, true), std::nullopt, {}, "conv"));
  const Graph before = f.g;
  PassContext ctx = context();
  run_fusion_passes(f.g, ctx);
  EXPECT_EQ(f.g.live_node_count(), 1u);
  EXPECT_TRUE(f.g.value(f.g.node(f.g.topological_order()[0]).inputs[1]).is_constant());
  const Tensor x_in = input_tensor({1, 4, 6, 6}, -1, 1, 14);
  expect_close(run(f.g, x_in), run(before, x_in), 1e-5f);
}

TEST(PassManager, ReportsNoChangeOnAGraphWithNothingToFuse) {
  Fixture f;
  const ValueId x = f.b.input("x", {1, 4, 6, 6});
  f.b.output(f.b.relu(x));
  PassContext ctx = context();
  EXPECT_FALSE(run_fusion_passes(f.g, ctx));
  EXPECT_TRUE(ctx.lines().empty());
}

}  // namespace
}  // namespace qfuse::graph
