// Long chains: every layer fuses, however many rewrites the pipeline needs.

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace qfuse::test::fusion
