// f32 layers with constant weights take the elementwise ops after them as
// oneDNN post-ops: unary ops, and binary ops with a per-channel or scalar
// constant, while nothing else reads the values in between (a MatMul of two
// run-time tensors also a run-time operand per output column). The fused model
// matches the unfused one (every node alone) to float rounding; named
// negatives stop the chain where a separate op must run.

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "fusion_test_util.hpp"

namespace qfuse::test::fusion {
namespace {

Tensor random_values(const Shape& shape, unsigned seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(static_cast<std::size_t>(element_count(shape)));
  for (float& x : v) x = d(rng);
  return Tensor::from_vector<float>(shape, std::move(v));
}

// x[1, 8, 10, 12] -> conv3x3 (16 channels, bias) -> tail -> output
ValueId conv(Builder& b, ValueId x) {
  graph::ConvAttrs a;
  a.pads_begin = {1, 1};
  a.pads_end = {1, 1};
  return b.convolution(x, b.constant("w", random_values({16, 8, 3, 3}, 1, -0.3f, 0.3f)),
                       b.constant("b", random_values({16}, 2)), a, "conv");
}

ValueId per_channel(Builder& b, const std::string& name, unsigned seed) {
  return b.constant(name, random_values({1, 16, 1, 1}, seed, 0.5f, 1.5f));
}

// Fused against unfused on one random input; returns the fused layers.
std::vector<LayerInfo> expect_matches_unfused(const graph::Graph& g, const std::string& output) {
  const CompiledModel fused = compile(g, {.fuse = true});
  const CompiledModel unfused = compile(g, {.fuse = false});
  const Tensor x = random_values({1, 8, 10, 12}, 3, -2.0f, 2.0f);
  const Tensor a = run(fused, "x", x, output);
  const Tensor e = run(unfused, "x", x, output);
  double worst = 0.0;
  for (std::int64_t i = 0; i < e.size(); ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(a.as_float(i)) - e.as_float(i)));
  }
  EXPECT_LT(worst, 1e-5) << describe_layers(fused);
  return fused.layers();
}

TEST(F32PostOps, ActivationAndAffineJoinTheConvolution) {
  graph::Graph g;
  Builder b(g);
  ValueId y = conv(b, b.input("x", {1, 8, 10, 12}));
  y = b.unary(OpKind::HSwish, y);
  y = b.multiply(per_channel(b, "a", 4), y);  // the constant first: commutes
  y = b.add(y, per_channel(b, "c", 5));
  y = b.binary(OpKind::Divide, y, b.scalar(2.0f));
  y = b.unary(OpKind::HSigmoid, y);
  b.output(y);
  const auto layers = expect_matches_unfused(g, g.value(y).name);
  ASSERT_EQ(layers.size(), 1u);
  EXPECT_EQ(layers[0].macs, 16 * 8 * 9 * 10 * 12);  // OC x IC x 3x3 x output pixels
  EXPECT_EQ(layers[0].post_ops,
            "eltwise_hardswish; binary_mul(per_channel); binary_add(per_channel); "
            "binary_div(scalar); eltwise_linear; eltwise_clip_v2");
}

TEST(F32PostOps, FullyConnectedTakesItsChainToo) {
  graph::Graph g;
  Builder b(g);
  const ValueId x = b.input("x", {1, 8, 10, 12});
  const ValueId flat = b.op(OpKind::Flatten, {x}, graph::FlattenAttrs{1});
  ValueId y = b.fully_connected(flat, b.constant("w", random_values({32, 960}, 6, -0.1f, 0.1f)),
                                b.constant("b", random_values({32}, 7)));
  y = b.unary(OpKind::Gelu, y);
  y = b.multiply(y, b.constant("s", random_values({32}, 8)));
  b.output(y);
  const auto layers = expect_matches_unfused(g, g.value(y).name);
  ASSERT_EQ(layers.size(), 2u);  // Flatten, FullyConnected
  EXPECT_EQ(layers[1].post_ops, "eltwise_gelu_erf; binary_mul(per_channel)");
}

// Each tail stops the chain at its first op, which then runs alone.
struct StopCase {
  std::string name;
  std::function<ValueId(Builder&, ValueId)> tail;
  std::size_t layers;  // executable nodes when fused
};

class F32PostOpsStop : public ::testing::TestWithParam<StopCase> {};

TEST_P(F32PostOpsStop, TheChainEndsThere) {
  graph::Graph g;
  Builder b(g);
  const ValueId y = GetParam().tail(b, conv(b, b.input("x", {1, 8, 10, 12})));
  b.output(y);
  const auto layers = expect_matches_unfused(g, g.value(y).name);
  EXPECT_EQ(layers.size(), GetParam().layers);
}

INSTANTIATE_TEST_SUITE_P(
    Negatives, F32PostOpsStop,
    ::testing::Values(
        // The convolution's output is read twice: x * relu(x).
        StopCase{"SecondReader",
                 [](Builder& b, ValueId c) { return b.multiply(c, b.relu(c)); }, 3},
        // constant - x is not x (op) constant.
        StopCase{"ConstantMinusX",
                 [](Builder& b, ValueId c) {
                   return b.binary(OpKind::Subtract, per_channel(b, "k", 9), c);
                 },
                 2},
        // An operand of the output's full shape is not a per-channel constant.
        StopCase{"FullTensorConstant",
                 [](Builder& b, ValueId c) {
                   return b.add(c, b.constant("t", random_values({1, 16, 10, 12}, 10)));
                 },
                 2},
        // Only the Relu joins; the Sigmoid reads a value that is also an output.
        StopCase{"IntermediateIsAnOutput",
                 [](Builder& b, ValueId c) {
                   const ValueId r = b.relu(c);
                   b.output(r);
                   return b.unary(OpKind::Sigmoid, r);
                 },
                 2}),
    [](const auto& p) { return p.param.name; });

// Fused (`options`) against unfused on the named inputs: the same bits in
// `output`. Returns the fused layers.
std::vector<LayerInfo> expect_same_bits_as_unfused(const graph::Graph& g,
                                                   const std::map<std::string, Tensor>& feed,
                                                   const std::string& output,
                                                   CompileOptions options = {.fuse = true}) {
  const auto run_all = [&](const CompiledModel& m) {
    InferRequest r = m.create_infer_request();
    for (const auto& [name, t] : feed) r.set_input(name, t);
    r.infer();
    return r.output(output);
  };
  const CompiledModel fused = compile(g, options);
  const Tensor a = run_all(fused);
  const Tensor e = run_all(compile(g, {.fuse = false}));
  EXPECT_EQ(a.shape(), e.shape());
  std::int64_t differ = 0;
  for (std::int64_t i = 0; i < e.size(); ++i) differ += a.data<float>()[i] != e.data<float>()[i];
  EXPECT_EQ(differ, 0) << describe_layers(fused);
  return fused.layers();
}

// Attention's scores: MatMul(q, k) of two run-time tensors, / sqrt(d), +
// a run-time mask [batch, 1, 1, keys] broadcast over heads and queries.
struct Scores {
  std::int64_t batch = 1;
  bool mask_per_query = false;  // mask [batch, 1, queries, keys]: not per column
};

// Runs the scores graph fused and unfused on the same random q, k and mask;
// expects the same bits and returns the fused layers.
std::vector<LayerInfo> expect_scores_match_unfused(const Scores& sc) {
  constexpr std::int64_t heads = 4, queries = 16, keys = 16, d = 8;
  graph::Graph g;
  Builder b(g);
  const ValueId q = b.input("q", {sc.batch, heads, queries, d});
  const ValueId k = b.input("k", {sc.batch, heads, d, keys});
  const Shape mask_shape{sc.batch, 1, sc.mask_per_query ? queries : 1, keys};
  const ValueId mask = b.input("mask", mask_shape);
  ValueId y = b.matmul(q, k);
  y = b.binary(OpKind::Divide, y, b.scalar(std::sqrt(8.0f)));
  y = b.add(y, mask);
  y = b.op(OpKind::Softmax, {y}, graph::SoftmaxAttrs{.axis = 3});
  b.output(y);
  const std::map<std::string, Tensor> feed{
      {"q", random_values({sc.batch, heads, queries, d}, 11, -2.0f, 2.0f)},
      {"k", random_values({sc.batch, heads, d, keys}, 12, -2.0f, 2.0f)},
      {"mask", random_values(mask_shape, 13, -10000.0f, 0.0f)}};
  return expect_same_bits_as_unfused(g, feed, g.value(y).name);
}

// The mask goes into the Softmax (fold_mask_into_softmax), which adds it in
// the pass that reads the scores anyway; the matmul keeps the scale.
TEST(F32PostOps, AttentionScoresTakeTheScaleAndTheSoftmaxTheMask) {
  const auto layers = expect_scores_match_unfused({});
  ASSERT_EQ(layers.size(), 2u);  // MatMul, Softmax
  EXPECT_EQ(layers[0].op, "MatMul");
  EXPECT_EQ(layers[0].implementation.find("ref"), std::string::npos) << layers[0].implementation;
  if (layers[1].implementation == "qfuse:softmax_masked") {
    EXPECT_EQ(layers[0].post_ops, "binary_div(scalar)");
  } else {  // no AVX-512: the matmul adds the mask
    EXPECT_EQ(layers[0].post_ops, "binary_div(scalar); binary_add(run time, per_channel)");
  }
}

TEST(F32PostOps, AMaskThatVariesByBatchOrQueryGoesIntoTheSoftmax) {
  // [2, 1, 1, keys] varies along the batch, [1, 1, queries, keys] along the
  // rows: not one value per output column of the matmul, but one row of
  // keys per row of scores for the softmax.
  for (const Scores sc : {Scores{2, false}, Scores{1, true}}) {
    const auto layers = expect_scores_match_unfused(sc);
    EXPECT_EQ(layers[0].post_ops, "binary_div(scalar)") << "batch " << sc.batch;
    if (layers.size() == 2u) {
      EXPECT_EQ(layers[1].implementation, "qfuse:softmax_masked") << "batch " << sc.batch;
    } else {  // no AVX-512: MatMul, Add, Softmax
      ASSERT_EQ(layers.size(), 3u) << "batch " << sc.batch;
    }
  }
}

// A whole attention head block as PyTorch exports it: q, k, v [1, S, H, D]
// transposed to heads first (k to [1, H, D, S]), softmax(q k / sqrt(D) +
// mask) v, transposed back. The MatMuls read and write those layouts by
// strides; `k_also_output` gives the key's Transpose a second reader. With
// the attention as three ops (one Attention op is within float rounding of
// them: tests/graph/onnx/onnx_attention_test.cpp).
std::vector<LayerInfo> expect_attention_matches_unfused(bool k_also_output) {
  constexpr std::int64_t s = 16, h = 4, d = 8;
  graph::Graph g;
  Builder b(g);
  const auto transpose = [&b](ValueId x, graph::Ints perm) {
    return b.op(OpKind::Transpose, {x}, graph::TransposeAttrs{std::move(perm)});
  };
  const ValueId q = transpose(b.input("q", {1, s, h, d}), {0, 2, 1, 3});
  const ValueId k = transpose(b.input("k", {1, s, h, d}), {0, 2, 3, 1});
  const ValueId v = transpose(b.input("v", {1, s, h, d}), {0, 2, 1, 3});
  ValueId y = b.matmul(q, k);
  y = b.binary(OpKind::Divide, y, b.scalar(std::sqrt(8.0f)));
  y = b.add(y, b.input("mask", {1, 1, 1, s}));
  y = b.op(OpKind::Softmax, {y}, graph::SoftmaxAttrs{.axis = 3});
  y = transpose(b.matmul(y, v), {0, 2, 1, 3});
  b.output(y);
  if (k_also_output) b.output(k);
  std::map<std::string, Tensor> feed{{"mask", random_values({1, 1, 1, s}, 24, -10000.0f, 0.0f)}};
  unsigned seed = 21;
  for (const char* name : {"q", "k", "v"}) feed.emplace(name, random_values({1, s, h, d}, seed++, -2.0f, 2.0f));
  EXPECT_EQ(g.value(y).shape, (Shape{1, s, h, d}));
  return expect_same_bits_as_unfused(g, feed, g.value(y).name, {.fuse_attention = false});
}

TEST(F32PostOps, AttentionMatMulsReadAndWriteTheTransposedLayoutsByStrides) {
  const auto layers = expect_attention_matches_unfused(false);
  std::vector<std::string> ops;
  for (const LayerInfo& l : layers) {
    ops.push_back(l.op);
    EXPECT_EQ(l.implementation.find("ref"), std::string::npos) << l.node << ": " << l.implementation;
  }
  EXPECT_EQ(ops, (std::vector<std::string>{"MatMul", "Softmax", "MatMul"}));
}

TEST(F32PostOpsStopAt, ATransposeWithAnotherReader) {
  const auto layers = expect_attention_matches_unfused(true);
  std::size_t transposes = 0;
  for (const LayerInfo& l : layers) transposes += l.op == "Transpose";
  EXPECT_EQ(transposes, 1u) << "the key's Transpose is also an output";
}

}  // namespace
}  // namespace qfuse::test::fusion
