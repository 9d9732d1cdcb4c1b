// eliminate_dead_nodes: nodes none of whose outputs is read or a graph output
// are erased, whole dead chains in one call; a node with one read output of
// several, and a graph output nobody reads, stay.

#include "pass_test_util.hpp"

namespace qfuse::graph {
namespace {

using namespace pass_test;

TEST(EliminateDeadNodes, ErasesADeadChainAndKeepsWhatIsRead) {
  Graph g;
  Builder b(g);
  const ValueId x = b.input("x", {1, 4});
  b.output(b.unary(OpKind::Relu, x, "live"));
  (void)b.unary(OpKind::Tanh, b.unary(OpKind::Sigmoid, x, "dead1"), "dead2");
  PassContext ctx = context();
  EXPECT_TRUE(eliminate_dead_nodes(g, ctx));
  ASSERT_EQ(g.live_node_count(), 1u);
  EXPECT_EQ(g.node(g.topological_order()[0]).name, "live");
  EXPECT_FALSE(eliminate_dead_nodes(g, ctx)) << "nothing left to erase";
}

TEST(EliminateDeadNodesNegative, AGraphOutputNobodyReadsStays) {
  Graph g;
  Builder b(g);
  const ValueId x = b.input("x", {1, 4});
  const ValueId y = b.unary(OpKind::Relu, x, "relu");
  b.output(b.unary(OpKind::Tanh, y, "tanh"));
  b.output(y);  // also an output, read by tanh
  PassContext ctx = context();
  EXPECT_FALSE(eliminate_dead_nodes(g, ctx));
  EXPECT_EQ(g.live_node_count(), 2u);
}

TEST(EliminateDeadNodesNegative, ANodeWithOneReadOutputOfThreeStays) {
  Graph g;
  Builder b(g);
  const ValueId x = b.input("x", {1, 8});
  const NodeId dq = g.add_node(OpKind::DynamicQuantize, "dq", {x}, NoAttrs{}, 3);
  infer_node(g, dq);
  b.output(g.node(dq).outputs[1]);  // only the scale is read
  PassContext ctx = context();
  EXPECT_FALSE(eliminate_dead_nodes(g, ctx));
  EXPECT_EQ(g.live_node_count(), 1u);
}

}  // namespace
}  // namespace qfuse::graph
