// Shape inference and validation: each malformed graph fails with a
// GraphError whose message names the operator, the node and the problem
// ("validate <Op> node '<name>': <problem> (expected X, got Y)").

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <limits>

#include "graph/builder.hpp"
#include "qfuse/error.hpp"
#include "plugin/api_internal.hpp"

namespace qfuse::graph {
namespace {

using ::testing::HasSubstr;

// Runs `f`, expects a GraphError whose message contains every part.
void expect_graph_error(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "expected GraphError";
  } catch (const GraphError& e) {
    for (const auto& p : parts) EXPECT_THAT(e.what(), HasSubstr(p));
  }
}

// Attributes with a few fields set (designated initializers would leave the
// rest unnamed, which -Wmissing-field-initializers rejects).
template <class A, class F>
A with(F set) {
  A a;
  set(a);
  return a;
}

Tensor zeros(Shape shape) { return Tensor(ElementType::f32, std::move(shape)); }

// A graph with input x of `shape` and a builder over it.
struct Fixture {
  Graph g;
  Builder b{g};
  ValueId x;
  explicit Fixture(Shape shape, ElementType type = ElementType::f32)
      : x(b.input("x", std::move(shape), type)) {}
  ValueId weights(Shape shape) { return b.constant("w", zeros(std::move(shape))); }
};

TEST(Validation, WrongInputCount) {
  Fixture f({1, 4});
  expect_graph_error([&] { f.b.op(OpKind::Relu, {f.x, f.x}, NoAttrs{}, "bad"); },
                     {"validate Relu node 'bad'", "wrong number of inputs", "expected 1, got 2"});
  Fixture h({1, 3, 4, 4});
  expect_graph_error([&] { h.b.op(OpKind::Convolution, {h.x}, ConvAttrs{}, "bad_conv"); },
                     {"Convolution node 'bad_conv'", "expected 2 to 3, got 1"});
}

TEST(Validation, ConvChannelMismatch) {
  Fixture f({1, 3, 8, 8});
  const ValueId w = f.weights({4, 2, 3, 3});
  expect_graph_error([&] { f.b.convolution(f.x, w, std::nullopt, {}, "conv1"); },
                     {"Convolution node 'conv1'", "input channels do not match the weights",
                      "expected 2", "got 3"});
}

TEST(Validation, ConvGroupsDoNotDivideOutputChannels) {
  Fixture f({1, 4, 8, 8});
  const ValueId w = f.weights({5, 2, 3, 3});
  expect_graph_error([&] { f.b.convolution(f.x, w, std::nullopt, with<ConvAttrs>([](auto& a) { a.groups = 2; }), "gconv"); },
                     {"Convolution node 'gconv'", "output channels 5", "not divisible by groups 2"});
}

TEST(Validation, ConvGroupsDoNotDivideInputChannels) {
  Fixture f({1, 5, 8, 8});
  const ValueId w = f.weights({4, 2, 3, 3});
  expect_graph_error([&] { f.b.convolution(f.x, w, std::nullopt, with<ConvAttrs>([](auto& a) { a.groups = 2; }), "gconv"); },
                     {"Convolution node 'gconv'", "groups", "expected 4", "got 5"});
}

TEST(Validation, ConvBadBiasShape) {
  Fixture f({1, 3, 8, 8});
  const ValueId w = f.weights({4, 3, 3, 3});
  const ValueId bias = f.b.constant("bias", zeros({3}));
  expect_graph_error([&] { f.b.convolution(f.x, w, bias, {}, "conv_b"); },
                     {"Convolution node 'conv_b'", "bias shape [3]", "expected [4]"});
}

TEST(Validation, DeconvBadBiasShape) {
  Fixture f({1, 4, 5, 5});
  const ValueId w = f.weights({4, 3, 3, 3});  // groups 2 -> OC = 6
  const ValueId bias = f.b.constant("bias", zeros({3}));
  expect_graph_error(
      [&] { f.b.deconvolution(f.x, w, bias, with<DeconvAttrs>([](auto& a) { a.groups = 2; }), "deconv_b"); },
      {"Deconvolution node 'deconv_b'", "bias shape [3]", "expected [6]"});
}

TEST(Validation, FullyConnectedBadBiasShape) {
  Fixture f({2, 8});
  const ValueId w = f.weights({4, 8});
  const ValueId bias = f.b.constant("bias", zeros({8}));
  expect_graph_error([&] { f.b.fully_connected(f.x, w, bias, "fc"); },
                     {"FullyConnected node 'fc'", "bias shape [8]", "expected [4]"});
}

TEST(Validation, KernelLargerThanPaddedInput) {
  Fixture f({1, 3, 2, 2});
  const ValueId w = f.weights({4, 3, 5, 5});
  expect_graph_error(
      [&] {
        f.b.convolution(f.x, w, std::nullopt, with<ConvAttrs>([](auto& a) {
                          a.pads_begin = {1, 1};
                          a.pads_end = {1, 1};
                        }),
                        "big_k");
      },
      {"Convolution node 'big_k'", "kernel extent 5 exceeds the padded input 4"});
}

TEST(Validation, WrongStridesLength) {
  Fixture f({1, 3, 8, 8});
  const ValueId w = f.weights({4, 3, 3, 3});
  expect_graph_error([&] { f.b.convolution(f.x, w, std::nullopt, with<ConvAttrs>([](auto& a) { a.strides = {2}; }), "s"); },
                     {"Convolution node 's'", "strides has 1 values", "expected 2"});
  Fixture p({1, 3, 8, 8});
  expect_graph_error(
      [&] {
        p.b.op(OpKind::MaxPool, {p.x}, with<PoolAttrs>([](auto& a) {
          a.kernel = {2, 2};
          a.strides = {2, 2, 2};
        }), "mp");
      },
      {"MaxPool node 'mp'", "strides has 3 values", "expected 2"});
}

TEST(Validation, FakeQuantizeLevelsOutOfRange) {
  for (std::int64_t levels : {std::int64_t{1}, std::int64_t{65537}}) {
    Fixture f({1, 4});
    expect_graph_error([&] { f.b.fake_quantize(f.x, 0.0f, 1.0f, 0.0f, 1.0f, levels, "fq"); },
                       {"FakeQuantize node 'fq'", "levels must be in [2, 65536]",
                        "got " + std::to_string(levels)});
  }
  Fixture ok({1, 4});
  EXPECT_NO_THROW(ok.b.fake_quantize(ok.x, 0.0f, 1.0f, 0.0f, 1.0f, 65536, "fq"));
  EXPECT_NO_THROW(ok.b.fake_quantize(ok.x, 0.0f, 1.0f, 0.0f, 1.0f, 2, "fq2"));
}

// Non-finite ranges make no grid, and an empty input range divides by zero.
TEST(Validation, FakeQuantizeRangesAreFiniteAndNotEmpty) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Fixture f({1, 4});
  expect_graph_error([&] { f.b.fake_quantize(f.x, 0.0f, inf, 0.0f, 1.0f, 256, "fq"); },
                     {"FakeQuantize node 'fq'", "input_high is inf", "ranges must be finite"});
  expect_graph_error([&] { f.b.fake_quantize(f.x, 0.0f, 1.0f, nan, 1.0f, 256, "fq2"); },
                     {"FakeQuantize node 'fq2'", "output_low is nan"});
  expect_graph_error([&] { f.b.fake_quantize(f.x, 0.5f, 0.5f, 0.0f, 1.0f, 256, "fq3"); },
                     {"FakeQuantize node 'fq3'", "input range [0.500000, 0.500000]", "is empty"});
  Fixture pc({1, 2, 2, 2});
  const ValueId lo = pc.b.constant("lo", Shape{1, 2, 1, 1}, std::vector<float>{0.0f, 1.0f});
  const ValueId hi = pc.b.constant("hi", Shape{1, 2, 1, 1}, std::vector<float>{1.0f, 1.0f});
  expect_graph_error([&] { pc.b.fake_quantize(pc.x, lo, hi, lo, hi, 256, "fq4"); },
                     {"FakeQuantize node 'fq4'", "at index 1", "is empty"});
}

TEST(Validation, FakeQuantizeRangeNotBroadcastable) {
  Fixture f({1, 4, 2, 2});
  const ValueId good = f.b.constant("good", zeros({1, 4, 1, 1}));
  const ValueId bad = f.b.constant("bad", zeros({3}));
  expect_graph_error([&] { f.b.fake_quantize(f.x, bad, good, good, good, 256, "fq"); },
                     {"FakeQuantize node 'fq'", "input_low shape [3]",
                      "does not broadcast to the input [1,4,2,2]"});
  expect_graph_error([&] { f.b.fake_quantize(f.x, good, good, good, bad, 256, "fq2"); },
                     {"FakeQuantize node 'fq2'", "output_high shape [3]"});
  // A range with more elements than x in some dim is not unidirectional.
  const ValueId wide = f.b.constant("wide", zeros({2, 4, 1, 1}));
  expect_graph_error([&] { f.b.fake_quantize(f.x, good, wide, good, good, 256, "fq3"); },
                     {"FakeQuantize node 'fq3'", "input_high shape [2,4,1,1]"});
}

TEST(Validation, BinaryShapesDoNotBroadcast) {
  Fixture f({2, 3});
  const ValueId c = f.b.constant("c", zeros({4, 3}));
  expect_graph_error([&] { f.b.binary(OpKind::Subtract, f.x, c, "sub"); },
                     {"Subtract node 'sub'", "shapes [2,3] and [4,3] do not broadcast"});
}

TEST(Validation, MatMulInnerDimensionMismatch) {
  Fixture f({2, 3});
  const ValueId c = f.b.constant("c", zeros({4, 5}));
  expect_graph_error([&] { f.b.matmul(f.x, c, false, false, "mm"); },
                     {"MatMul node 'mm'", "inner dimensions differ", "expected 3, got 4"});
  // With transpose_b the inner dimension of b is its last axis.
  const ValueId d = f.b.constant("d", zeros({5, 4}));
  expect_graph_error([&] { f.b.matmul(f.x, d, false, true, "mm_t"); },
                     {"MatMul node 'mm_t'", "expected 3, got 4"});
}

TEST(Validation, MatMulBatchDimensionsDoNotBroadcast) {
  Fixture f({2, 3, 4});
  const ValueId c = f.b.constant("c", zeros({3, 4, 5}));
  expect_graph_error([&] { f.b.matmul(f.x, c, false, false, "mm"); },
                     {"MatMul node 'mm'", "do not broadcast"});
}

TEST(Validation, ReshapeElementCountMismatch) {
  Fixture f({2, 3});
  expect_graph_error([&] { f.b.op(OpKind::Reshape, {f.x}, ReshapeAttrs{{4, 2}}, "rs"); },
                     {"Reshape node 'rs'", "target shape [4,2] has 8 elements (expected 6)"});
}

TEST(Validation, TransposeNotAPermutation) {
  Fixture f({2, 3, 4});
  expect_graph_error([&] { f.b.op(OpKind::Transpose, {f.x}, TransposeAttrs{{0, 0, 1}}, "tp"); },
                     {"Transpose node 'tp'", "perm [0,0,1] is not a permutation",
                      "3 axes"});
  expect_graph_error([&] { f.b.op(OpKind::Transpose, {f.x}, TransposeAttrs{{1, 0}}, "tp2"); },
                     {"Transpose node 'tp2'", "perm [1,0] is not a permutation"});
  expect_graph_error([&] { f.b.op(OpKind::Transpose, {f.x}, TransposeAttrs{{0, 1, 3}}, "tp3"); },
                     {"Transpose node 'tp3'", "not a permutation"});
}

TEST(Validation, ConcatMismatch) {
  Fixture f({1, 2, 3});
  const ValueId c = f.b.constant("c", zeros({1, 3, 4}));
  expect_graph_error([&] { f.b.op(OpKind::Concat, {f.x, c}, ConcatAttrs{1}, "cat"); },
                     {"Concat node 'cat'", "input 1 [1,3,4] differs from input 0 [1,2,3]",
                      "outside the concat axis"});
  const ValueId r = f.b.constant("r", zeros({1, 2}));
  expect_graph_error([&] { f.b.op(OpKind::Concat, {f.x, r}, ConcatAttrs{1}, "cat_rank"); },
                     {"Concat node 'cat_rank'", "differs in rank or type"});
  expect_graph_error([&] { f.b.op(OpKind::Concat, {f.x, f.x}, ConcatAttrs{3}, "cat_axis"); },
                     {"Concat node 'cat_axis'", "axis out of range"});
}

TEST(Validation, ResizeSizesRankMismatch) {
  Fixture f({1, 2, 4, 4});
  ResizeAttrs a;
  a.sizes = {1, 2, 8};
  expect_graph_error([&] { f.b.op(OpKind::Resize, {f.x}, a, "rz"); },
                     {"Resize node 'rz'", "sizes [1,2,8] must have the input's rank 4"});
}

TEST(Validation, ClampLoAboveHi) {
  Fixture f({1, 4});
  expect_graph_error([&] { f.b.clamp(f.x, 2.0f, 1.0f, "cl"); },
                     {"Clamp node 'cl'", "lo 2", "exceeds hi 1"});
  EXPECT_NO_THROW(f.b.clamp(f.x, 1.0f, 1.0f, "cl_equal"));
}

TEST(Validation, WrongElementType) {
  Fixture f({1, 4}, ElementType::s8);
  expect_graph_error([&] { f.b.op(OpKind::Relu, {f.x}, NoAttrs{}, "r"); },
                     {"Relu node 'r'", "input 0 'x' has type s8 (expected f32)"});
  Fixture h({1, 3, 4, 4}, ElementType::u8);
  const ValueId w = h.weights({2, 3, 1, 1});
  expect_graph_error([&] { h.b.convolution(h.x, w, std::nullopt, {}, "c"); },
                     {"Convolution node 'c'", "has type u8 (expected f32)"});
}

TEST(Validation, UnboundInputShape) {
  Fixture f({1, 0, 4});
  expect_graph_error([&] { f.b.op(OpKind::Relu, {f.x}, NoAttrs{}, "r"); },
                     {"Relu node 'r'", "input 'x' has an unbound or empty shape [1,0,4]"});
  // Through compile as well, with the graph built without the Builder.
  Graph g;
  const ValueId x = g.add_input("x", {-1, 4});
  const NodeId n = g.add_node(OpKind::Relu, "r", {x});
  g.mark_output(g.node(n).outputs[0]);
  expect_graph_error([&] { compile(g); }, {"'x'", "[-1,4]"});
}

TEST(Validation, GraphWithNoOutputs) {
  Graph g;
  Builder b(g);
  b.relu(b.input("x", {1, 4}));
  expect_graph_error([&] { verify(g); }, {"the graph has no outputs"});
  expect_graph_error([&] { compile(g); }, {"the graph has no outputs"});
}

TEST(Validation, OutputNotProduced) {
  Graph g;
  Builder b(g);
  b.relu(b.input("x", {1, 4}));
  g.mark_output(g.add_value("ghost", {1, 4}));
  expect_graph_error([&] { verify(g); }, {"output 'ghost' is not produced by any node"});
  expect_graph_error([&] { compile(g); }, {"output 'ghost' is not produced by any node"});
}

TEST(Validation, NodeInputNotProduced) {
  Graph g;
  const ValueId x = g.add_input("x", {1, 4});
  const ValueId dangling = g.add_value("dangling", {1, 4});
  const NodeId n = g.add_node(OpKind::Add, "sum", {x, dangling});
  g.mark_output(g.node(n).outputs[0]);
  expect_graph_error([&] { compile(g); },
                     {"Add node 'sum'", "input 'dangling' is not produced by any node"});
}

// Graphs assembled without the Builder skip the per-node checks; compile()
// must still refuse them with the node's context.
TEST(Validation, CompileOfMalformedGraphThrowsGraphError) {
  Graph g;
  const ValueId x = g.add_input("x", {1, 3, 8, 8});
  const ValueId w = g.add_constant("w", zeros({4, 2, 3, 3}));
  const NodeId n = g.add_node(OpKind::Convolution, "conv_raw", {x, w}, ConvAttrs{});
  g.mark_output(g.node(n).outputs[0]);
  expect_graph_error([&] { compile(g); },
                     {"Convolution node 'conv_raw'", "input channels do not match the weights"});
}

TEST(Validation, PoolPaddingMustBeSmallerThanKernel) {
  Fixture f({1, 2, 6, 6});
  expect_graph_error(
      [&] {
        f.b.op(OpKind::MaxPool, {f.x},
               with<PoolAttrs>([](auto& a) {
                 a.kernel = {2, 2};
                 a.pads_begin = {2, 0};
               }), "mp");
      },
      {"MaxPool node 'mp'", "padding must be smaller than the kernel extent"});
  expect_graph_error(
      [&] {
        f.b.op(OpKind::AvgPool, {f.x}, with<PoolAttrs>([](auto& a) {
          a.kernel = {2, 2};
          a.dilations = {2, 2};
        }), "ap");
      },
      {"AvgPool node 'ap'", "not supported by AvgPool"});
}

TEST(Validation, BatchNormParameterShape) {
  Fixture f({1, 3, 4, 4});
  const ValueId good = f.b.constant("good", zeros({3}));
  const ValueId bad = f.b.constant("bad", zeros({4}));
  expect_graph_error(
      [&] {
        f.b.op(OpKind::BatchNormalization, {f.x, good, good, bad, good}, BatchNormAttrs{}, "bn");
      },
      {"BatchNormalization node 'bn'", "parameter 3 has shape [4] (expected [3])"});
}

TEST(Validation, DeconvOutputPaddingMustBeSmallerThanStride) {
  Fixture f({1, 2, 4, 4});
  const ValueId w = f.weights({2, 2, 3, 3});
  expect_graph_error(
      [&] {
        f.b.deconvolution(f.x, w, std::nullopt,
                          with<DeconvAttrs>([](auto& a) {
                            a.strides = {2, 2};
                            a.output_padding = {2, 0};
                          }),
                          "dc");
      },
      {"Deconvolution node 'dc'", "output_padding [2,0]",
       "smaller than the stride or the dilation"});
}

}  // namespace
}  // namespace qfuse::graph
