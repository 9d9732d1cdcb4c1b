// The memory plan: intermediate values share one arena by liveness, views and
// in-place ops share their input's bytes, and none of it changes a result.
// The safety check recomputes lifetimes from the graph itself; the numeric
// checks compare with naive loops.

#include <algorithm>
#include <functional>
#include <numeric>

#include <gmock/gmock.h>

#include "plugin/memory_plan.hpp"
#include "test_util.hpp"

namespace qfuse::test {
namespace {

using graph::NodeId;
using graph::ValueId;
using plugin::Layout;
using plugin::MemoryPlan;

std::size_t bytes_of(const graph::Value& v) {
  return static_cast<std::size_t>(element_count(v.shape)) * element_size(v.type);
}

// No op writes into the bytes of a value that is still to be read, except
// its last reader writing an elementwise result over it (in place). Views
// (Reshape / Flatten onto their input's bytes) write nothing.
void expect_no_live_overlap(const graph::Graph& g, const MemoryPlan& plan) {
  const std::vector<NodeId> order = g.topological_order();
  const auto end = static_cast<std::int64_t>(order.size());
  std::vector<std::int64_t> from(g.value_count(), -1), to(g.value_count(), -1);
  std::vector<const graph::Node*> producer(g.value_count(), nullptr);
  for (std::int64_t k = 0; k < end; ++k) {
    const graph::Node& n = g.node(order[idx(k)]);
    for (ValueId v : n.inputs) to[v.index] = k;
    for (ValueId v : n.outputs) {
      from[v.index] = to[v.index] = k;
      producer[v.index] = &n;
    }
  }
  for (ValueId v : g.outputs()) to[v.index] = end;
  int writes = 0;
  for (std::uint32_t w = 0; w < g.value_count(); ++w) {
    const std::int64_t ow = plan.offset[w];
    if (ow < 0) continue;
    const graph::Node& p = *producer[w];
    const bool view = (p.kind == OpKind::Reshape || p.kind == OpKind::Flatten) &&
                      plan.offset[p.inputs[0].index] == ow;
    if (view) continue;
    ++writes;
    const graph::Value& wv = g.value(ValueId{w});
    for (std::uint32_t v = 0; v < g.value_count(); ++v) {
      const std::int64_t ov = plan.offset[v];
      if (v == w || ov < 0) continue;
      const graph::Value& vv = g.value(ValueId{v});
      const bool overlap = static_cast<std::size_t>(ov) < static_cast<std::size_t>(ow) + bytes_of(wv) &&
                           static_cast<std::size_t>(ow) < static_cast<std::size_t>(ov) + bytes_of(vv);
      if (!overlap || from[w] < from[v] || from[w] > to[v]) continue;
      const bool in_place = from[w] == to[v] && ov == ow && vv.shape == wv.shape &&
                            vv.type == wv.type &&
                            std::find(p.inputs.begin(), p.inputs.end(), ValueId{v}) != p.inputs.end();
      EXPECT_TRUE(in_place) << "'" << p.name << "' writes '" << wv.name << "' over '" << vv.name
                            << "', which is read until step " << to[v];
    }
  }
  EXPECT_GT(writes, 0);
}

MemoryPlan plan_of(const graph::Graph& g) {
  return plugin::plan_memory(g, g.topological_order(),
                             std::vector<Layout>(g.value_count(), Layout::plain));
}

// x -> 12 x (Multiply by a constant, Relu) -> y: two live buffers suffice.
TEST(MemoryPlan, AChainReusesTwoBuffers) {
  graph::Graph g;
  graph::Builder b(g);
  const Shape shape{1, 16, 32, 32};
  ValueId v = b.input("x", shape);
  for (int i = 0; i < 12; ++i) v = b.relu(b.multiply(v, b.scalar(0.5f + static_cast<float>(i))));
  b.output(v);
  const MemoryPlan plan = plan_of(g);
  const std::size_t tensor = 16 * 32 * 32 * 4;
  EXPECT_EQ(plan.unshared_bytes, 24 * tensor);
  EXPECT_LE(plan.arena_bytes, 2 * tensor);
  EXPECT_EQ(plan.in_place, 24 - 1);  // all but the first Multiply, which reads the input
  expect_no_live_overlap(g, plan);
}

// oneDNN's binary primitive takes as its first source an operand of the
// output's shape (ranks right-aligned); a commutative op may swap; otherwise
// a loop broadcasts both, and no operand's bytes can hold the result.
TEST(MemoryPlan, BinaryFirstSourceIsTheFullShapeOperand) {
  graph::Graph g;
  graph::Builder b(g);
  const ValueId full = b.input("full", {1, 4, 3, 3});
  const ValueId unbatched = b.input("unbatched", {4, 3, 3});
  const ValueId per_channel = b.constant("c", {1, 4, 1, 1}, {1.0f, 2.0f, 3.0f, 4.0f});
  const auto first = [&](OpKind kind, ValueId x, ValueId y) {
    const ValueId out = b.binary(kind, x, y);
    const std::optional<std::size_t> f =
        plugin::dnnl_binary_first_source(g, g.node(g.value(out).producer));
    return f ? static_cast<int>(*f) : -1;
  };
  EXPECT_EQ(first(OpKind::Subtract, full, per_channel), 0);
  EXPECT_EQ(first(OpKind::Subtract, per_channel, full), -1);  // c - x: the loop
  EXPECT_EQ(first(OpKind::Divide, per_channel, full), -1);
  EXPECT_EQ(first(OpKind::Add, per_channel, full), 1);        // swapped
  EXPECT_EQ(first(OpKind::Maximum, per_channel, full), 1);
  EXPECT_EQ(first(OpKind::Multiply, unbatched, per_channel), 0);  // [4, 3, 3] is [1, 4, 3, 3]
  EXPECT_EQ(first(OpKind::Subtract, per_channel, unbatched), -1);
  const ValueId r = b.relu(full);  // not a binary op
  EXPECT_FALSE(plugin::dnnl_binary_first_source(g, g.node(g.value(r).producer)));
}

// A binary op whose first source matches the output only once its rank is
// padded ([4, 3, 3] + [1, 4, 1, 1] -> [1, 4, 3, 3]) reads that source plain,
// so its output stays plain too (a channels-last output beside a plain source
// sends oneDNN to its reference kernel), even when an f32 convolution that
// takes channels last reads it.
TEST(MemoryPlan, ARankPaddedBinaryStaysOnAJitKernel) {
  graph::Graph g;
  graph::Builder b(g);
  std::mt19937 rng(5);
  const ValueId x = b.input("x", {4, 3, 3});
  const ValueId c = b.constant("c", {1, 4, 1, 1}, {0.5f, -1.0f, 2.0f, 0.25f});
  const ValueId sum = b.binary(OpKind::Add, x, c, "add");
  const Tensor w = random_tensor({2, 4, 1, 1}, rng);
  const ValueId y = b.op(OpKind::Convolution, {sum, b.constant("w", w)},
                         graph::ConvAttrs{{1, 1}, {1, 1}, {0, 0}, {0, 0}, 1}, "conv");
  b.output(y);
  const CompiledModel model = compile(g, {.fuse = false});
  for (const LayerInfo& l : model.layers()) {
    EXPECT_EQ(l.implementation.rfind("ref", 0), std::string::npos) << l.node << " " << l.implementation;
  }
  const Tensor xv = random_tensor({4, 3, 3}, rng);
  InferRequest request = model.create_infer_request();
  request.set_input("x", xv);
  request.infer();
  const float cv[4] = {0.5f, -1.0f, 2.0f, 0.25f};
  std::vector<double> want(18);
  for (int o = 0; o < 2; ++o) {
    for (int p = 0; p < 9; ++p) {
      double acc = 0.0;
      for (int k = 0; k < 4; ++k) {
        acc += (static_cast<double>(xv.data<float>()[k * 9 + p]) + cv[k]) * w.data<float>()[o * 4 + k];
      }
      want[static_cast<std::size_t>(o * 9 + p)] = acc;
    }
  }
  EXPECT_TRUE(all_close(request.output(g.value(y).name), want, relative_tolerance(want, 1e-5, 1e-5)));
}

// A value read again later keeps its bytes: Relu(x) may not overwrite x when
// x + Relu(x) follows; views of a value keep it alive.
graph::Graph branchy(Shape shape) {
  graph::Graph g;
  graph::Builder b(g);
  const ValueId x = b.input("x", shape);
  const ValueId a = b.multiply(x, b.scalar(2.0f));                 // a = 2x
  const ValueId r = b.relu(a);                                     // r = relu(a)
  const ValueId s = b.add(a, r);                                   // a read after relu
  const ValueId flat = b.op(OpKind::Reshape, {s}, graph::ReshapeAttrs{{element_count(shape)}});
  const ValueId t = b.unary(OpKind::Sigmoid, s);                   // s read after its view
  const ValueId back = b.op(OpKind::Reshape, {flat}, graph::ReshapeAttrs{shape});
  const ValueId u = b.multiply(t, back);                           // t * s
  const ValueId w = b.unary(OpKind::Tanh, u);
  b.output(w);
  b.output(s);  // an output read by later ops stays intact
  return g;
}

TEST(MemoryPlan, LiveValuesNeverShareBytes) {
  const graph::Graph g = branchy({2, 8, 5, 7});
  const MemoryPlan plan = plan_of(g);
  EXPECT_EQ(plan.views, 2);
  EXPECT_GT(plan.in_place, 0);
  expect_no_live_overlap(g, plan);
}

// Runs `branchy` twice on one request (the second run reads whatever the
// first left in the arena) against naive loops.
TEST(MemoryPlan, SharedBuffersGiveTheDefinedResults) {
  const Shape shape{2, 8, 5, 7};
  const graph::Graph g = branchy(shape);
  const CompiledModel model = compile(g, {.fuse = false});
  InferRequest request = model.create_infer_request();
  std::mt19937 rng(7);
  for (int run = 0; run < 2; ++run) {
    const Tensor x = random_tensor(shape, rng, -2.0f, 2.0f);
    request.set_input("x", x);
    request.infer();
    const auto w = request.output(model.output_names()[0]).data<float>();
    const auto s = request.output(model.output_names()[1]).data<float>();
    for (std::int64_t i = 0; i < x.size(); ++i) {
      const double a = 2.0 * x.data<float>()[idx(i)];
      const double si = a + std::max(a, 0.0);
      const double wi = std::tanh(1.0 / (1.0 + std::exp(-si)) * si);
      ASSERT_NEAR(s[idx(i)], si, 1e-6 * (1 + std::fabs(si))) << "run " << run << " element " << i;
      ASSERT_NEAR(w[idx(i)], wi, 1e-5) << "run " << run << " element " << i;
    }
  }
}

// A copy of an output owns its elements: the next inference does not change it.
TEST(MemoryPlan, ACopiedOutputOutlivesTheNextInference) {
  const Shape shape{2, 8, 5, 7};
  const graph::Graph g = branchy(shape);
  const CompiledModel model = compile(g);
  InferRequest request = model.create_infer_request();
  std::mt19937 rng(8);
  request.set_input("x", random_tensor(shape, rng));
  request.infer();
  const std::string name = model.output_names()[0];
  const Tensor first = request.output(name);
  const std::vector<double> kept = to_double(first);
  EXPECT_FALSE(first.is_view());
  request.set_input("x", random_tensor(shape, rng));
  request.infer();
  EXPECT_EQ(to_double(first), kept);
  EXPECT_NE(to_double(request.output(name)), kept);
}

}  // namespace
}  // namespace qfuse::test
