// LayerBuildCache: what the passes' backend check built for the candidate it
// accepted is what compile() reuses for that layer, and only when nothing the
// build read has changed (the node's attributes, the thread count).

#include <omp.h>

#include "pass_test_util.hpp"

namespace qfuse::graph {
namespace {

using namespace pass_test;

struct Checked {
  Graph g = quantized_block(true);
  plugin::LayerBuildCache builds;
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};

  // The fusion passes with the plugin's check, as compile() runs them.
  Checked() {
    PassContext ctx(PassOptions{}, [this](const Graph& graph, const Node& n, const Shape& shape) {
      return plugin::check_quantized_layer(graph, n, shape, engine, CompileOptions{}, &builds);
    });
    run_fusion_passes(g, ctx);
  }

  std::vector<NodeId> layers() const {
    std::vector<NodeId> out;
    for (const NodeId id : g.topological_order()) {
      if (is_quantized_layer(g.node(id).kind)) out.push_back(id);
    }
    return out;
  }

  std::string make(NodeId id) {
    const auto op = plugin::make_quantized_layer(
        g, g.node(id), engine, CompileOptions{},
        [](ValueId) { return plugin::Layout::channels_last; }, false, &builds);
    return op->implementation();
  }
};

struct Threads {
  int before = omp_get_max_threads();
  explicit Threads(int n) { omp_set_num_threads(n); }
  ~Threads() { omp_set_num_threads(before); }
};

TEST(LayerBuildCache, EachAcceptedLayerIsBuiltFromItsCheck) {
  const Threads one(1);
  Checked c;
  const std::vector<NodeId> layers = c.layers();
  ASSERT_EQ(layers.size(), 2u);
  for (const NodeId id : layers)
    EXPECT_THAT(c.make(id), ::testing::Not(::testing::HasSubstr("ref")));
  EXPECT_EQ(c.builds.reused(), layers.size());
  // Each build is taken once: a second op for a layer is made afresh.
  c.make(layers[0]);
  EXPECT_EQ(c.builds.reused(), layers.size());
}

TEST(LayerBuildCache, ALayerMadeForAnotherTeamIsBuiltAgain) {
  const Threads one(1);
  Checked c;
  const Threads two(2);
  for (const NodeId id : c.layers()) c.make(id);
  EXPECT_EQ(c.builds.reused(), 0u);
}

TEST(LayerBuildCache, ALayerChangedAfterItsCheckIsBuiltAgain) {
  const Threads one(1);
  Checked c;
  const std::vector<NodeId> layers = c.layers();
  auto& attrs = c.g.node(layers[1]).attr<QuantizedLayerAttrs>();
  attrs.src_zero_point += 3;  // another primitive: a source zero point
  for (const NodeId id : layers) c.make(id);
  EXPECT_EQ(c.builds.reused(), 1u);
}

}  // namespace
}  // namespace qfuse::graph
