// Long chains: every layer fuses, however many rewrites the pipeline needs.

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>

#include "tests/fusion/fusion_test_util.hpp"

namespace qfuse::test::fusion {
namespace {

ValueId fq_weights(Builder& b, const std::string& name, const Shape& s, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(-0.5f, 0.5f);
  std::vector<float> w(at(element_count(s)));
  for (float& e : w) e = d(rng);
  return b.fake_quantize(b.constant(name, s, w), -0.5f, 0.5f, -0.5f, 0.5f, 255, name + ".q");
}

// x -> FQ(u8) -> [conv1x1(FQ(w)) -> FQ(s8)] * n
graph::Graph conv_chain(int n) {
  graph::Graph g;
  Builder b(g);
  std::mt19937 rng(3);
  const graph::ConvAttrs one{.strides = {1, 1}, .dilations = {1, 1}, .pads_begin = {0, 0},
                             .pads_end = {0, 0}, .groups = 1};
  ValueId y = b.fake_quantize(b.input("x", {1, 4, 2, 2}), 0.0f, 2.55f, 0.0f, 2.55f, 256, "x.q");
  for (int i = 0; i < n; ++i) {
    const std::string name = "conv" + std::to_string(i);
    y = b.convolution(y, fq_weights(b, name + ".w", {4, 4, 1, 1}, rng), std::nullopt, one, name);
    y = b.fake_quantize(y, -1.28f, 1.27f, -1.28f, 1.27f, 256, name + ".out");
  }
  b.output(y);
  return g;
}

// Each pass application rewrites one match. With a cap on applications per
// round, quantize_weights would stop part-way down the chain; the next
// FakeQuantize would then not be split (the following layer's weights not
// yet dequantized), fuse_post_op_chain would absorb it whole with an f32
// destination, and the following layer would stay f32 for good.
TEST(PassPipeline, EveryLayerOfAChainOf65ConvolutionsRunsAsInt8) {
  const int n = 65;
  const CompiledModel fused = compile(conv_chain(n), {.fuse = true});
  EXPECT_EQ(static_cast<int>(quantized_layers(fused).size()), n) << describe_layers(fused);
  for (const LayerInfo& l : fused.layers()) {
    EXPECT_NE(l.op, "Convolution") << "'" << l.node << "' runs in f32";
  }
}

// Resident memory of this process now (not its peak), from /proc/self/statm.
std::size_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::size_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
}

// x -> FQ(u8) -> conv -> FQ(u8) -> n x Relu -> y
graph::Graph relu_chain(int n, const Shape& shape) {
  graph::Graph g;
  Builder b(g);
  ValueId y = b.fake_quantize(b.input("x", shape), 0.0f, 2.55f, 0.0f, 2.55f, 256, "x.q");
  y = quantized_conv(b, y, shape[1], 5, "conv");
  y = b.fake_quantize(y, 0.0f, 2.55f, 0.0f, 2.55f, 256, "conv.out");
  for (int i = 0; i < n; ++i) y = b.unary(OpKind::Relu, y, "relu" + std::to_string(i));
  b.output(y);
  return g;
}

// A generated graph of thousands of elementwise nodes compiles in proportion
// to its size, and its memory is what is live: the chain runs in place in one
// buffer, and a request holds no per-node copy of any tensor. (The time is
// measured by the compile benchmark; here, what a quadratic pass or a
// per-node buffer would break.)
TEST(PassPipeline, AChainOfThousandsOfEltwiseNodesRunsInPlaceInOneBuffer) {
  const int n = 4000;
  const Shape shape{1, 16, 32, 32};
  const std::size_t tensor = 16 * 32 * 32 * sizeof(float);
  const graph::Graph g = relu_chain(n, shape);
  [[maybe_unused]] const std::size_t before = resident_bytes();
  const CompiledModel fused = compile(g, {.fuse = true});
  EXPECT_EQ(quantized_layers(fused).size(), 1u) << describe_layers(fused);
  // The layer takes a bounded chain (the relus after it are one post-op);
  // the rest run on their own, each over its input.
  const MemoryInfo memory = fused.memory();
  EXPECT_LE(memory.arena_bytes, 2 * tensor);
  EXPECT_GE(memory.in_place, n - 64);
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> d(-0.5f, 3.0f);
  std::vector<float> xv(at(element_count(shape)));
  for (float& v : xv) v = d(rng);
  const Tensor x = Tensor::from_vector<float>(shape, xv);
  InferRequest request = fused.create_infer_request();
  request.set_input("x", x);
  request.infer();
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  // One tensor per node would be 4000 x 64 KiB = 250 MiB.
  EXPECT_LT(resident_bytes() - std::min(before, resident_bytes()), std::size_t{64} << 20);
#endif
  const std::string out = g.value(g.outputs()[0]).name;
  const Tensor unfused = run(compile(g, {.fuse = false}), "x", x, out);
  const Comparison c = compare_quantized(request.output(out), unfused, make_range(Quant::u8, 0.01));
  EXPECT_LE(c.max_diff, 1) << c.first_diffs;
  EXPECT_EQ(c.off_grid, 0);
}

}  // namespace
}  // namespace qfuse::test::fusion

namespace qfuse::test::fusion {
namespace {

// x -> FQ(u8) -+-> convA -> FQ(u8) = a ---------+
//              +-> convB -> (+ a) -> relu -> FQ(u8) -> convC -> FQ -> y
// a is read only by convB's sum, after convA: convB writes over a's buffer.
graph::Graph projection_block(bool signed_block_output) {
  graph::Graph g;
  Builder b(g);
  std::mt19937 rng(11);
  const graph::ConvAttrs one{.strides = {1, 1}, .dilations = {1, 1}, .pads_begin = {0, 0},
                             .pads_end = {0, 0}, .groups = 1};
  const ValueId x = b.fake_quantize(b.input("x", {1, 8, 6, 6}), 0.0f, 2.55f, 0.0f, 2.55f, 256, "x.q");
  ValueId a = b.convolution(x, fq_weights(b, "wa", {8, 8, 1, 1}, rng), std::nullopt, one, "convA");
  a = b.fake_quantize(b.relu(a), 0.0f, 2.0f, 0.0f, 2.0f, 256, "a.q");
  ValueId y = b.convolution(x, fq_weights(b, "wb", {8, 8, 1, 1}, rng), std::nullopt, one, "convB");
  if (signed_block_output) {
    // Symmetric 256 levels: stored as s8, while the residual is u8.
    const float lo = -4.0f * 128.0f / 127.0f;
    y = b.fake_quantize(b.add(y, a), lo, 4.0f, lo, 4.0f, 256, "b.q");
  } else {
    y = b.fake_quantize(b.relu(b.add(y, a)), 0.0f, 4.0f, 0.0f, 4.0f, 256, "b.q");
  }
  y = b.convolution(y, fq_weights(b, "wc", {8, 8, 1, 1}, rng), std::nullopt, one, "convC");
  b.output(b.fake_quantize(y, -4.0f, 4.0f, -4.0f, 4.0f, 255, "y"));
  return g;
}

Tensor block_input() {
  std::mt19937 rng(12);
  std::uniform_real_distribution<float> d(-0.5f, 3.0f);
  std::vector<float> v(8 * 6 * 6);
  for (float& e : v) e = d(rng);
  return Tensor::from_vector<float>({1, 8, 6, 6}, v);
}

TEST(SumInPlace, ResidualReadOnlyByTheSumIsOverwrittenAndResultsMatch) {
  const graph::Graph g = projection_block(false);
  const CompiledModel fused = compile(g, {.fuse = true});
  const CompiledModel ref = compile(g, {.fuse = false});
  bool in_place = false;
  for (const LayerInfo& l : fused.layers()) {
    if (l.node == "convB") in_place = l.post_ops.find("(sum in place)") != std::string::npos;
  }
  EXPECT_TRUE(in_place) << describe_layers(fused);
  const Tensor yf = run(fused, "x", block_input(), "y");
  const Tensor yu = run(ref, "x", block_input(), "y");
  // Within one quantum (8 / 254) of the output FakeQuantize.
  const float quantum = 8.0f / 254.0f;
  float max_diff = 0.0f;
  for (std::int64_t i = 0; i < yf.size(); ++i) {
    max_diff = std::max(max_diff, std::abs(yf.data<float>()[static_cast<std::size_t>(i)] -
                                           yu.data<float>()[static_cast<std::size_t>(i)]));
  }
  EXPECT_LE(max_diff, quantum * 1.01f);
  // A second inference on the same request sees fresh residuals, not the
  // previous result left in the shared buffer.
  InferRequest r = fused.create_infer_request();
  r.set_input("x", block_input());
  r.infer();
  const std::vector<float> first(r.output("y").data<float>().begin(),
                                 r.output("y").data<float>().end());
  r.infer();
  EXPECT_TRUE(std::equal(first.begin(), first.end(), r.output("y").data<float>().begin()));
}

TEST(SumInPlace, NotInPlaceWhenTheResidualHasAnotherElementType) {
  const graph::Graph g = projection_block(true);
  const CompiledModel fused = compile(g, {.fuse = true});
  bool summed = false;
  for (const LayerInfo& l : fused.layers()) {
    summed = summed || l.post_ops.find("sum(") != std::string::npos;
    EXPECT_EQ(l.post_ops.find("(sum in place)"), std::string::npos) << l.node << ": " << l.post_ops;
  }
  EXPECT_TRUE(summed) << describe_layers(fused);
  const Tensor yf = run(fused, "x", block_input(), "y");
  const Tensor yu = run(compile(g, {.fuse = false}), "x", block_input(), "y");
  for (std::int64_t i = 0; i < yf.size(); ++i) {
    EXPECT_LE(std::abs(yf.data<float>()[static_cast<std::size_t>(i)] -
                       yu.data<float>()[static_cast<std::size_t>(i)]),
              8.0f / 254.0f * 1.01f)
        << i;
  }
}

}  // namespace
}  // namespace qfuse::test::fusion
