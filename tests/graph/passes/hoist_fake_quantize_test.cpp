// hoist_fake_quantize: a per-tensor FakeQuantize after data movement (here a
// MaxPool and a Transpose) moves above it, and one that repeats its input's
// grid is dropped; checked by structure and against the graph before the
// pass. A Concat input read elsewhere too gets its own Quantize, and the
// requantize of such codes becomes one table (lookup_elementwise). Slices of
// one tensor quantized on one grid share one Quantize; an upsampling runs on
// codes even where its input has other readers. Named negatives: per-channel
// ranges, data movement whose input has other readers (FakeQuantize; a Slice
// whose input is also read in f32).

#include "pass_test_util.hpp"

namespace qfuse::graph {
namespace {

using namespace pass_test;

ValueId fq(Builder& b, ValueId x, const std::string& name) {
  return b.fake_quantize(x, -1.0f, 1.55f, -1.0f, 1.55f, 256, name);
}

PoolAttrs max_pool_2x2() {
  PoolAttrs p;
  p.kernel = {2, 2};
  p.strides = {2, 2};
  p.pads_begin = {0, 0};
  p.pads_end = {0, 0};
  return p;
}

// Index of node `name`'s kind in execution order, or -1.
int position(const Graph& g, OpKind kind) {
  int i = 0;
  for (NodeId id : g.topological_order()) {
    if (g.node(id).kind == kind) return i;
    ++i;
  }
  return -1;
}

TEST(HoistFakeQuantize, MovesAboveMaxPoolAndTranspose) {
  for (const bool pool : {true, false}) {
    Graph g;
    Builder b(g);
    const ValueId x = b.input("x", {1, 3, 4, 4});
    const ValueId y = b.unary(OpKind::Tanh, x, "tanh");
    const ValueId m = pool ? b.op(OpKind::MaxPool, {y}, max_pool_2x2(), "mover")
                           : b.op(OpKind::Transpose, {y}, TransposeAttrs{{0, 2, 3, 1}}, "mover");
    b.output(fq(b, m, "fq"));
    const Graph before = g;
    PassContext ctx = context();
    EXPECT_TRUE(hoist_fake_quantize(g, ctx));
    EXPECT_LT(position(g, OpKind::FakeQuantize), position(g, pool ? OpKind::MaxPool : OpKind::Transpose));
    const Tensor xt = input_tensor({1, 3, 4, 4}, -3.0f, 3.0f, 41);
    EXPECT_EQ(run(g, xt), run(before, xt));
  }
}

TEST(HoistFakeQuantize, ASecondFakeQuantizeOnTheSameGridIsDropped) {
  Graph g;
  Builder b(g);
  const ValueId x = b.input("x", {1, 3, 4, 4});
  b.output(fq(b, fq(b, x, "fq1"), "fq2"));
  const Graph before = g;
  PassContext ctx = context();
  EXPECT_TRUE(hoist_fake_quantize(g, ctx));
  EXPECT_EQ(count(g, OpKind::FakeQuantize), 1u);
  const Tensor xt = input_tensor({1, 3, 4, 4}, -3.0f, 3.0f, 42);
  EXPECT_EQ(run(g, xt), run(before, xt));
}

// Concat(a, b) -> Quantize with `a` also a graph output: each input gets its
// own Quantize (a keeps its f32 value for its other reader), and the Concat
// runs on codes; the same values as before.
TEST(HoistFakeQuantize, AConcatInputWithAnotherReaderGetsItsOwnQuantize) {
  Graph g;
  Builder b(g);
  const ValueId x = b.input("x", {1, 3, 4, 4});
  const ValueId a = b.unary(OpKind::Tanh, x, "a");
  const ValueId c = b.op(OpKind::Concat, {a, b.unary(OpKind::Sigmoid, x, "b")}, ConcatAttrs{1},
                         "concat");
  const ValueId q = b.quantize(c, ElementType::u8, {0.0078125f}, {128}, 1, 256, "q");
  b.output(b.dequantize(q, {0.0078125f}, {128.0f}, 1, "dq"));
  b.output(a);
  const Graph before = g;
  PassContext ctx = context();
  EXPECT_TRUE(hoist_fake_quantize(g, ctx));
  EXPECT_EQ(count(g, OpKind::Quantize), 2u);
  for (NodeId id : g.topological_order()) {
    if (g.node(id).kind != OpKind::Concat) continue;
    for (ValueId in : g.node(id).inputs) EXPECT_EQ(g.value(in).type, ElementType::u8);
  }
  const Tensor xt = input_tensor({1, 3, 4, 4}, -3.0f, 3.0f, 43);
  EXPECT_EQ(run(g, xt), run(before, xt));
}

// torch.chunk as FX quantizes it: y -> Slice -> Quantize twice, one grid.
// Each Quantize moves above its Slice and the two merge into one Quantize of
// y (the one a layer making y can write); the same values as before.
TEST(HoistFakeQuantize, SlicesOfOneTensorQuantizedOnOneGridShareOneQuantize) {
  Graph g;
  Builder b(g);
  const ValueId x = b.input("x", {1, 4, 3, 3});
  const ValueId y = b.unary(OpKind::Tanh, x, "tanh");
  for (std::int64_t half : {0, 1}) {
    const std::string k = std::to_string(half);
    const ValueId s = b.op(OpKind::Slice, {y}, SliceAttrs{{0, 2 * half, 0, 0}, {1, 2, 3, 3}},
                           "slice" + k);
    const ValueId q = b.quantize(s, ElementType::u8, {0.0078125f}, {128}, 1, 256, "q" + k);
    b.output(b.dequantize(q, {0.0078125f}, {128.0f}, 1, "dq" + k));
  }
  const Graph before = g;
  PassContext ctx = context();
  while (hoist_fake_quantize(g, ctx)) {
  }
  EXPECT_EQ(count(g, OpKind::Quantize), 1u);
  for (NodeId id : g.topological_order()) {
    if (g.node(id).kind != OpKind::Slice) continue;
    EXPECT_EQ(g.value(g.node(id).inputs[0]).type, ElementType::u8);
  }
  const Tensor xt = input_tensor({1, 4, 3, 3}, -3.0f, 3.0f, 44);
  EXPECT_EQ(run(g, xt), run(before, xt));
}

// The same with FakeQuantize (NNCF's and OpenVINO's form): one FakeQuantize
// of y before the two Slices.
TEST(HoistFakeQuantize, SlicesOfOneTensorFakeQuantizedOnOneGridShareOne) {
  Graph g;
  Builder b(g);
  const ValueId x = b.input("x", {1, 4, 3, 3});
  const ValueId y = b.unary(OpKind::Tanh, x, "tanh");
  for (std::int64_t half : {0, 1}) {
    const std::string k = std::to_string(half);
    const ValueId s = b.op(OpKind::Slice, {y}, SliceAttrs{{0, 2 * half, 0, 0}, {1, 2, 3, 3}},
                           "slice" + k);
    b.output(fq(b, s, "fq" + k));
  }
  const Graph before = g;
  PassContext ctx = context();
  while (hoist_fake_quantize(g, ctx)) {
  }
  EXPECT_EQ(count(g, OpKind::FakeQuantize), 1u);
  EXPECT_LT(position(g, OpKind::FakeQuantize), position(g, OpKind::Slice));
  const Tensor xt = input_tensor({1, 4, 3, 3}, -3.0f, 3.0f, 46);
  EXPECT_EQ(run(g, xt), run(before, xt));
}

// A nearest upsampling whose input another op reads too (YOLO's neck: the
// Concat beside it quantizes that input on a grid of its own): the Quantize
// still moves above the Resize, which keeps more values than it reads, and
// the Resize runs on codes; the same values as before.
TEST(HoistFakeQuantize, AnUpsamplingWhoseInputHasOtherReadersRunsOnCodes) {
  Graph g;
  Builder b(g);
  const ValueId x = b.input("x", {1, 2, 3, 3});
  const ValueId y = b.unary(OpKind::Tanh, x, "tanh");
  ResizeAttrs up;
  up.mode = ResizeMode::nearest;
  up.transform = CoordinateTransform::asymmetric;
  up.nearest_mode = NearestMode::floor;
  up.sizes = {1, 2, 6, 6};
  up.scales = {1.0f, 1.0f, 2.0f, 2.0f};
  const ValueId r = b.op(OpKind::Resize, {y}, up, "up");
  const ValueId q = b.quantize(r, ElementType::u8, {0.0078125f}, {128}, 1, 256, "q");
  b.output(b.dequantize(q, {0.0078125f}, {128.0f}, 1, "dq"));
  const ValueId other = b.quantize(y, ElementType::u8, {0.01f}, {100}, 1, 256, "other");
  b.output(b.dequantize(other, {0.01f}, {100.0f}, 1, "other_dq"));
  const Graph before = g;
  PassContext ctx = context();
  EXPECT_TRUE(hoist_fake_quantize(g, ctx));
  for (NodeId id : g.topological_order()) {
    if (g.node(id).kind != OpKind::Resize) continue;
    EXPECT_EQ(g.value(g.node(id).inputs[0]).type, ElementType::u8);
  }
  const Tensor xt = input_tensor({1, 2, 3, 3}, -3.0f, 3.0f, 45);
  EXPECT_EQ(run(g, xt), run(before, xt));
}

// Codes requantized onto another grid (Dequantize -> Quantize) that another op
// reads as they are: one Lookup, bit for bit the two ops on every code. Named
// negative: with no other reader the Quantize stays, for the layer that
// writes the codes to end its chain with it.
TEST(LookupElementwise, ARequantizeOfSharedCodesIsOneTable) {
  for (const bool shared : {true, false}) {
    Graph g;
    Builder b(g);
    const ValueId codes = b.input("codes", {1, 256}, ElementType::u8);
    const ValueId f = b.dequantize(codes, {0.02f}, {113.0f}, 1, "dq");
    const ValueId q = b.quantize(f, ElementType::u8, {0.03125f}, {7}, 1, 256, "requantize");
    b.output(b.dequantize(q, {0.03125f}, {7.0f}, 1, "out"));
    if (shared) b.output(b.dequantize(codes, {0.5f}, {0.0f}, 1, "other_reader"));
    const Graph before = g;
    PassContext ctx = context();
    EXPECT_EQ(lookup_elementwise(g, ctx), shared);
    EXPECT_EQ(count(g, OpKind::Lookup), shared ? 1u : 0u);
    std::vector<std::uint8_t> all(256);
    for (int k = 0; k < 256; ++k) all[static_cast<std::size_t>(k)] = static_cast<std::uint8_t>(k);
    const Tensor every_code = Tensor::from_vector<std::uint8_t>({1, 256}, all);
    EXPECT_EQ(run(g, every_code), run(before, every_code));
  }
}

TEST(HoistFakeQuantizeNegative, PerChannelRangesStayBelow) {
  Graph g;
  Builder b(g);
  const ValueId x = b.input("x", {1, 3, 4, 4});
  const ValueId m = b.op(OpKind::MaxPool, {b.unary(OpKind::Tanh, x)}, max_pool_2x2(), "mover");
  const ValueId lo = b.constant("lo", {1, 3, 1, 1}, {-1.0f, -2.0f, -0.5f});
  const ValueId hi = b.constant("hi", {1, 3, 1, 1}, {1.0f, 2.0f, 0.5f});
  b.output(b.fake_quantize(m, lo, hi, lo, hi, 256, "fq"));
  PassContext ctx = context();
  EXPECT_FALSE(hoist_fake_quantize(g, ctx));
  EXPECT_GT(position(g, OpKind::FakeQuantize), position(g, OpKind::MaxPool));
}

// A Slice keeps fewer values than it reads: with y read in f32 elsewhere, a
// Quantize of all of y would do more work than the one after the Slice.
TEST(HoistFakeQuantizeNegative, ASliceWhoseInputIsReadInF32Stays) {
  Graph g;
  Builder b(g);
  const ValueId x = b.input("x", {1, 4, 3, 3});
  const ValueId y = b.unary(OpKind::Tanh, x, "tanh");
  const ValueId s = b.op(OpKind::Slice, {y}, SliceAttrs{{0, 0, 0, 0}, {1, 2, 3, 3}}, "slice");
  b.output(b.quantize(s, ElementType::u8, {0.0078125f}, {128}, 1, 256, "q"));
  b.output(b.unary(OpKind::Sigmoid, y, "f32_reader"));
  PassContext ctx = context();
  EXPECT_FALSE(hoist_fake_quantize(g, ctx));
  EXPECT_GT(position(g, OpKind::Quantize), position(g, OpKind::Slice));
  ctx.end_phase();
  bool explained = false;
  for (const Refusal& r : ctx.refusals()) {
    explained |= r.reason.find("keeps fewer values than it reads") != std::string::npos;
  }
  EXPECT_TRUE(explained);
}

TEST(HoistFakeQuantizeNegative, AMoverWhoseInputHasOtherReadersStays) {
  Graph g;
  Builder b(g);
  const ValueId x = b.input("x", {1, 3, 4, 4});
  const ValueId y = b.unary(OpKind::Tanh, x, "tanh");
  b.output(fq(b, b.op(OpKind::MaxPool, {y}, max_pool_2x2(), "mover"), "fq"));
  b.output(y);
  PassContext ctx = context();
  EXPECT_FALSE(hoist_fake_quantize(g, ctx));
  EXPECT_GT(position(g, OpKind::FakeQuantize), position(g, OpKind::MaxPool));
  bool explained = false;
  for (const Refusal& r : ctx.refusals()) explained |= r.reason.find("other readers") != std::string::npos;
  ctx.end_phase();
  for (const Refusal& r : ctx.refusals()) explained |= r.reason.find("other readers") != std::string::npos;
  EXPECT_TRUE(explained);
}

}  // namespace
}  // namespace qfuse::graph
