// The graph IR: ids, topological order, cycle detection, rewiring, erasure,
// consumers, shape inference on graphs built without the Builder, and
// broadcasting's element offsets.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "graph/broadcast.hpp"
#include "graph/builder.hpp"
#include "graph/frontend_common.hpp"
#include "qfuse/error.hpp"
#include "plugin/api_internal.hpp"

namespace qfuse::graph {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::size_t position(const std::vector<NodeId>& order, NodeId id) {
  return static_cast<std::size_t>(std::find(order.begin(), order.end(), id) - order.begin());
}

TEST(GraphIr, AddNodeCreatesNamedOutputsWithProducer) {
  Graph g;
  const ValueId x = g.add_input("x", {1, 4});
  const NodeId n = g.add_node(OpKind::Relu, "r", {x});
  ASSERT_EQ(g.node(n).outputs.size(), 1u);
  const Value& out = g.value(g.node(n).outputs[0]);
  EXPECT_EQ(out.name, "r");
  EXPECT_EQ(out.producer, n);
  EXPECT_FALSE(g.value(x).producer.valid());
  EXPECT_EQ(g.find_value("r"), g.node(n).outputs[0]);
  EXPECT_FALSE(g.find_value("missing").has_value());
}

// Large attribute sets are boxed on the heap; a copy of the graph (what a
// compile of a copy, or a pass's trial, changes) holds its own.
TEST(GraphIr, ACopiedGraphsBoxedAttributesAreItsOwn) {
  Graph g;
  const ValueId x = g.add_input("x", {1, 1, 8, 8});
  PoolAttrs pool;
  pool.kernel = {2, 2};
  pool.strides = {2, 2};
  const NodeId n = g.add_node(OpKind::MaxPool, "p", {x}, pool);
  Graph copy = g;
  copy.node(n).attr<PoolAttrs>().kernel = {3, 3};
  EXPECT_THAT(g.node(n).attr<PoolAttrs>().kernel, ElementsAre(2, 2));
  EXPECT_THAT(copy.node(n).attr<PoolAttrs>().kernel, ElementsAre(3, 3));
  EXPECT_EQ(g.node(n).attr_if<ConvAttrs>(), nullptr);
  ASSERT_NE(g.node(n).attr_if<PoolAttrs>(), nullptr);
  EXPECT_EQ(g.node(n).attr_if<PoolAttrs>()->strides, (Ints{2, 2}));
}

TEST(GraphIr, AddNodeRejectsOutOfRangeInput) {
  Graph g;
  EXPECT_THROW(g.add_node(OpKind::Relu, "r", {ValueId{7}}), GraphError);
  EXPECT_THROW(g.mark_output(ValueId{3}), GraphError);
}

TEST(GraphIr, TopologicalOrderPutsProducersFirstWhateverTheInsertionOrder) {
  Graph g;
  const ValueId x = g.add_input("x", {1, 4});
  const ValueId placeholder = g.add_value("p");
  // Node 0 consumes what node 1 produces: insertion order is not topological.
  const NodeId consumer = g.add_node(OpKind::Relu, "consumer", {placeholder});
  const NodeId producer = g.add_node(OpKind::Abs, "producer", {x});
  g.replace_all_uses(placeholder, g.node(producer).outputs[0]);
  const NodeId independent = g.add_node(OpKind::Exp, "independent", {x});
  const auto order = g.topological_order();
  ASSERT_EQ(order.size(), 3u);
  EXPECT_LT(position(order, producer), position(order, consumer));
  EXPECT_NE(position(order, independent), order.size());
}

TEST(GraphIr, TopologicalOrderKeepsInsertionOrderForIndependentNodes) {
  Graph g;
  const ValueId x = g.add_input("x", {1, 4});
  const NodeId a = g.add_node(OpKind::Relu, "a", {x});
  const NodeId b = g.add_node(OpKind::Abs, "b", {x});
  const NodeId c = g.add_node(OpKind::Add, "c", {g.node(a).outputs[0], g.node(b).outputs[0]});
  EXPECT_THAT(g.topological_order(), ElementsAre(a, b, c));
}

TEST(GraphIr, CycleIsReportedWithANodeOnIt) {
  Graph g;
  const ValueId x = g.add_input("x", {1, 4});
  const NodeId a = g.add_node(OpKind::Add, "loop_a", {x, x});
  const NodeId b = g.add_node(OpKind::Relu, "loop_b", {g.node(a).outputs[0]});
  g.set_input(a, 1, g.node(b).outputs[0]);  // a -> b -> a
  g.mark_output(g.node(b).outputs[0]);
  try {
    g.topological_order();
    FAIL() << "expected GraphError";
  } catch (const GraphError& e) {
    EXPECT_THAT(e.what(), HasSubstr("cycle"));
    EXPECT_THAT(e.what(), ::testing::AnyOf(HasSubstr("'loop_a'"), HasSubstr("'loop_b'")));
  }
  EXPECT_THROW(compile(g), GraphError);
}

TEST(GraphIr, SelfLoopIsACycle) {
  Graph g;
  const ValueId x = g.add_input("x", {1, 4});
  const NodeId a = g.add_node(OpKind::Add, "self", {x, x});
  g.set_input(a, 1, g.node(a).outputs[0]);
  EXPECT_THROW(g.topological_order(), GraphError);
}

TEST(GraphIr, ReplaceAllUsesRewiresNodesAndGraphOutputs) {
  Graph g;
  Builder b(g);
  const ValueId x = b.input("x", {1, 4});
  const ValueId r = b.relu(x);
  const ValueId e = b.unary(OpKind::Exp, r, "exp");
  const ValueId s = b.add(r, e);
  b.output(r);
  b.output(s);
  const ValueId a = b.unary(OpKind::Abs, x, "abs");
  g.replace_all_uses(r, a);
  EXPECT_TRUE(g.consumers(r).empty());
  EXPECT_EQ(g.consumers(a).size(), 2u);
  EXPECT_FALSE(g.is_graph_output(r));
  EXPECT_TRUE(g.is_graph_output(a));
  EXPECT_TRUE(g.is_graph_output(s));
  const Node& add = g.node(g.value(s).producer);
  EXPECT_EQ(add.inputs[0], a);
}

TEST(GraphIr, EraseNodeLeavesATombstone) {
  Graph g;
  Builder b(g);
  const ValueId x = b.input("x", {1, 4});
  const ValueId r = b.relu(x);
  const NodeId relu = g.value(r).producer;
  const ValueId a = b.unary(OpKind::Abs, x, "abs");
  const ValueId y = b.unary(OpKind::Exp, r, "exp");
  b.output(y);
  EXPECT_EQ(g.live_node_count(), 3u);
  g.replace_all_uses(r, a);
  g.erase_node(relu);
  EXPECT_EQ(g.live_node_count(), 2u);
  EXPECT_EQ(g.node_capacity(), 3u);  // ids never move
  EXPECT_TRUE(g.node(relu).erased);
  EXPECT_FALSE(g.value(r).producer.valid());
  EXPECT_TRUE(g.consumers(x).size() == 1u);  // only abs: erased relu no longer counts
  const auto order = g.topological_order();
  EXPECT_EQ(order.size(), 2u);
  EXPECT_EQ(position(order, relu), order.size());
  EXPECT_NO_THROW(verify(g));
  EXPECT_NO_THROW(compile(g));
}

TEST(GraphIr, ConsumersAreLiveNodesInIdOrderListedOnce) {
  Graph g;
  const ValueId x = g.add_input("x", {2, 2});
  const NodeId m = g.add_node(OpKind::Multiply, "square", {x, x});
  const NodeId r = g.add_node(OpKind::Relu, "r", {x});
  const NodeId e = g.add_node(OpKind::Exp, "e", {x});
  EXPECT_THAT(g.consumers(x), ElementsAre(m, r, e));
  g.erase_node(r);
  EXPECT_THAT(g.consumers(x), ElementsAre(m, e));
  EXPECT_TRUE(g.consumers(g.node(m).outputs[0]).empty());
}

TEST(GraphIr, ConsumersFollowEveryRewiring) {
  Graph g;
  const ValueId x = g.add_input("x", {2, 2});
  const ValueId y = g.add_input("y", {2, 2});
  const NodeId m = g.add_node(OpKind::Multiply, "m", {x, x});
  const NodeId a = g.add_node(OpKind::Add, "a", {x, y});
  g.set_input(m, 1, y);
  EXPECT_THAT(g.consumers(x), ElementsAre(m, a));
  EXPECT_THAT(g.consumers(y), ElementsAre(m, a));
  g.set_input(m, 0, y);  // m reads y twice
  EXPECT_THAT(g.consumers(x), ElementsAre(a));
  EXPECT_THAT(g.consumers(y), ElementsAre(m, a));
  g.truncate_inputs(a, 1);
  EXPECT_THAT(g.consumers(y), ElementsAre(m));
  g.append_input(a, y);
  EXPECT_THAT(g.consumers(y), ElementsAre(m, a));
  g.replace_all_uses(y, x);
  EXPECT_TRUE(g.consumers(y).empty());
  EXPECT_THAT(g.consumers(x), ElementsAre(m, a));
  EXPECT_THAT(g.node(m).inputs, ElementsAre(x, x));
  EXPECT_NO_THROW(g.check_uses());
  EXPECT_THROW(g.set_input(m, 2, x), GraphError);
}

TEST(GraphIr, AnInputChangedBehindTheGraphsBackIsCaught) {
  Graph g;
  Builder b(g);
  const ValueId x = b.input("x", {1, 4});
  const ValueId r = b.relu(x);
  const ValueId e = b.unary(OpKind::Exp, x, "exp");
  b.output(b.add(r, e));
  g.node(g.value(e).producer).inputs[0] = r;  // not through set_input
  try {
    verify(g);
    FAIL() << "verify accepted a stale list of readers";
  } catch (const GraphError& err) {
    EXPECT_THAT(err.what(), HasSubstr("recorded readers differ"));
  }
}

TEST(GraphIr, InferShapesFillsOutputsInTopologicalOrder) {
  Graph g;
  const ValueId x = g.add_input("x", {2, 3, 4});
  const ValueId placeholder = g.add_value("p");
  const NodeId t = g.add_node(OpKind::Transpose, "t", {placeholder}, TransposeAttrs{{1, 0}});
  const NodeId f = g.add_node(OpKind::Flatten, "f", {x}, FlattenAttrs{2});
  g.replace_all_uses(placeholder, g.node(f).outputs[0]);
  g.mark_output(g.node(t).outputs[0]);
  infer_shapes(g);
  EXPECT_EQ(g.value(g.node(f).outputs[0]).shape, (Shape{6, 4}));
  EXPECT_EQ(g.value(g.node(t).outputs[0]).shape, (Shape{4, 6}));
  EXPECT_NO_THROW(verify(g));
}

TEST(GraphIr, VerifyCatchesAStoredShapeThatDisagreesWithInference) {
  Graph g;
  Builder b(g);
  const ValueId x = b.input("x", {2, 3});
  const ValueId r = b.op(OpKind::Relu, {x}, NoAttrs{}, "act");
  b.output(r);
  g.value(r).shape = {3, 2};
  try {
    verify(g);
    FAIL() << "expected GraphError";
  } catch (const GraphError& e) {
    EXPECT_THAT(e.what(), HasSubstr("Relu node 'act'"));
    EXPECT_THAT(e.what(), HasSubstr("disagrees with inference"));
  }
}

TEST(GraphIr, BuilderNamesNodesAfterTheirOperator) {
  Graph g;
  Builder b(g);
  const ValueId x = b.input("x", {1, 2});
  const ValueId r = b.relu(x);
  const ValueId c = b.clamp(r, 0.0f, 6.0f);
  EXPECT_EQ(g.value(r).name.rfind("relu#", 0), 0u);
  EXPECT_EQ(g.value(c).name.rfind("clamp#", 0), 0u);
  EXPECT_NE(g.value(r).name, g.value(c).name);
}

TEST(GraphIr, ToTextListsInputsNodesAndOutputs) {
  Graph g;
  Builder b(g);
  const ValueId x = b.input("x", {1, 2});
  b.output(b.op(OpKind::Relu, {x}, NoAttrs{}, "act"));
  const std::string text = to_text(g);
  EXPECT_THAT(text, HasSubstr("input x: f32[1,2]"));
  EXPECT_THAT(text, HasSubstr("act = Relu(x) -> f32[1,2]"));
  EXPECT_THAT(text, HasSubstr("output act"));
}

TEST(GraphIr, CopiesShareConstantsButNotStructure) {
  Graph g;
  Builder b(g);
  const ValueId x = b.input("x", {1, 2});
  const ValueId c = b.constant("c", {2}, {1.0f, 2.0f});
  b.output(b.add(x, c));
  Graph copy = g;
  copy.erase_node(NodeId{0});
  EXPECT_EQ(g.live_node_count(), 1u);
  EXPECT_EQ(copy.live_node_count(), 0u);
  EXPECT_EQ(g.value(c).constant.get(), copy.value(c).constant.get());
}

}  // namespace
}  // namespace qfuse::graph

namespace qfuse::graph {
namespace {

// broadcast_offsets against numpy's rule written out: output index i, as
// coordinates, read at coordinate 0 where the operand's dimension is 1.
TEST(Broadcast, OffsetsFollowNumpysRule) {
  std::mt19937 rng(23);
  std::uniform_int_distribution<int> dim(1, 4), rank(0, 4), coin(0, 2);
  for (int trial = 0; trial < 400; ++trial) {
    Shape out(static_cast<std::size_t>(rank(rng)));
    for (auto& d : out) d = dim(rng);
    // The operand: a suffix of the output's rank, each dimension kept or 1.
    Shape shape(out.begin() + static_cast<std::ptrdiff_t>(
                                  std::uniform_int_distribution<std::size_t>(0, out.size())(rng)),
                out.end());
    for (auto& d : shape) d = coin(rng) == 0 ? 1 : d;
    const std::vector<std::size_t> got = broadcast_offsets(shape, out);
    const std::int64_t n = element_count(out);
    ASSERT_EQ(static_cast<std::int64_t>(got.size()), n);
    for (std::int64_t i = 0; i < n; ++i) {
      std::int64_t rest = i, offset = 0, stride = 1;
      for (std::size_t d = out.size(); d-- > 0;) {
        const std::int64_t coord = rest % out[d];
        rest /= out[d];
        const std::size_t back = out.size() - 1 - d;
        if (back < shape.size()) {
          const std::int64_t sd = shape[shape.size() - 1 - back];
          offset += (sd == 1 ? 0 : coord) * stride;
          stride *= sd;
        }
      }
      ASSERT_EQ(static_cast<std::int64_t>(got[static_cast<std::size_t>(i)]), offset)
          << "element " << i << " of " << to_string(shape) << " -> " << to_string(out);
    }
  }
}

}  // namespace
}  // namespace qfuse::graph

// transposed_matrix against an element-by-element loop, for every element size
// and for shapes on, inside and across its 16 x 16 byte blocks.
template <class T>
void expect_transposed(std::int64_t rows, std::int64_t cols) {
  std::mt19937 rng(static_cast<unsigned>(rows * 1000 + cols));
  std::vector<T> v(static_cast<std::size_t>(rows * cols));
  for (T& e : v) e = static_cast<T>(rng());
  const qfuse::Tensor m = qfuse::Tensor::from_vector<T>({rows, cols}, v);
  const qfuse::Tensor t = qfuse::graph::transposed_matrix(m);
  ASSERT_EQ(t.shape(), (qfuse::Shape{cols, rows}));
  const auto out = t.data<T>();
  for (std::int64_t i = 0; i < rows; ++i) {
    for (std::int64_t j = 0; j < cols; ++j) {
      ASSERT_EQ(out[static_cast<std::size_t>(j * rows + i)],
                v[static_cast<std::size_t>(i * cols + j)])
          << rows << " x " << cols << " at (" << i << ", " << j << ")";
    }
  }
}

TEST(GraphIr, TransposedMatrixMovesEveryElement) {
  const std::vector<std::pair<std::int64_t, std::int64_t>> shapes = {
      {1, 1}, {1, 17}, {16, 16}, {32, 48}, {17, 33}, {3, 100}, {100, 3}, {64, 768}, {45, 16}};
  for (const auto& [r, c] : shapes) {
    expect_transposed<std::int8_t>(r, c);
    expect_transposed<std::uint8_t>(r, c);
    expect_transposed<float>(r, c);
    expect_transposed<std::int64_t>(r, c);
  }
}
