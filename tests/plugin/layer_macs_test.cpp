// Multiply-adds per inference of each layer kind (the figure the per-layer
// GOPS and the single-thread threshold use), against counts written out
// from each layer's definition.

#include <gtest/gtest.h>

#include "graph/builder.hpp"
#include "plugin/execution.hpp"

namespace qfuse {
namespace {

using graph::Builder;
using graph::Graph;
using graph::ValueId;

const graph::Node& producer(const Graph& g, ValueId v) { return g.node(g.value(v).producer); }

TEST(LayerMacs, GroupedConvolutionCountsEachOutputOverItsGroupsInputs) {
  Graph g;
  Builder b(g);
  const ValueId x = b.input("x", {1, 8, 10, 10});
  const ValueId w = b.constant("w", {16, 4, 3, 3}, std::vector<float>(16 * 4 * 9, 1.0f));
  const ValueId y = b.convolution(x, w, std::nullopt, {{1, 1}, {1, 1}, {1, 1}, {1, 1}, 2});
  // 16 output channels x 10 x 10 pixels, each over 8 / 2 inputs x 3 x 3 taps.
  EXPECT_EQ(plugin::layer_macs(g, producer(g, y)), 16 * 100 * 4 * 9);
}

TEST(LayerMacs, DeconvolutionCountsEachInputPixelAgainstEveryWeight) {
  Graph g;
  Builder b(g);
  const ValueId x = b.input("x", {1, 4, 5, 5});
  const ValueId w = b.constant("w", {4, 6, 2, 2}, std::vector<float>(4 * 6 * 4, 1.0f));
  const ValueId y =
      b.deconvolution(x, w, std::nullopt, {{2, 2}, {1, 1}, {0, 0}, {0, 0}, {0, 0}, 1});
  // Each of the 5 x 5 input pixels scatters 4 inputs x 6 outputs x 2 x 2 taps.
  EXPECT_EQ(plugin::layer_macs(g, producer(g, y)), 25 * 4 * 6 * 4);
}

TEST(LayerMacs, FullyConnectedAndMatMulCountTheContractedDimension) {
  Graph g;
  Builder b(g);
  const ValueId x = b.input("x", {3, 20});
  const ValueId w = b.constant("w", {7, 20}, std::vector<float>(140, 1.0f));
  const ValueId fc = b.fully_connected(x, w, std::nullopt);
  EXPECT_EQ(plugin::layer_macs(g, producer(g, fc)), 3 * 7 * 20);
  const ValueId a = b.input("a", {2, 5, 6});
  const ValueId m = b.constant("m", {6, 4}, std::vector<float>(24, 1.0f));
  EXPECT_EQ(plugin::layer_macs(g, producer(g, b.matmul(a, m))), 2 * 5 * 4 * 6);
  // Transposed A [2, 6, 5]: still K = 6 per output element.
  const ValueId at = b.input("at", {2, 6, 5});
  EXPECT_EQ(plugin::layer_macs(g, producer(g, b.matmul(at, m, true))), 2 * 5 * 4 * 6);
}

TEST(LayerMacs, OtherOpsCountNothing) {
  Graph g;
  Builder b(g);
  const ValueId x = b.input("x", {2, 3});
  EXPECT_EQ(plugin::layer_macs(g, producer(g, b.relu(x))), 0);
  EXPECT_EQ(plugin::layer_macs(g, producer(g, b.add(x, x))), 0);
}

}  // namespace
}  // namespace qfuse
