// Data between two int8 convolutions stays int8 through MaxPool, Transpose,
// Slice, Resize (nearest), Reshape and Concat: in ONNX Runtime's QDQ form
// (the op's output quantized again with its input's parameters) and with the
// quantization only after the op. The op runs on u8, both convolutions are
// int8 primitives, and fused matches unfused within 1 LSB of the output.
// Named negatives keep the op in f32, each for one reason, still within 1 LSB.

#include <gtest/gtest.h>

#include <functional>
#include <random>

#include "fusion_test_util.hpp"

namespace qfuse::test::fusion {
namespace {

constexpr float kActScale = 0.02f;  // u8 grid of the activations: [0, 5.1]

ValueId act_fq(Builder& b, ValueId x, const std::string& name, float scale = kActScale) {
  return b.fake_quantize(x, 0.0f, 255 * scale, 0.0f, 255 * scale, 256, name);
}

using Mover = std::function<ValueId(Builder&, ValueId)>;

struct Case {
  std::string name;
  Mover mover;         // builds the op under test, named "mover"
  bool requantize;     // ORT's form: the same FakeQuantize after the op too
  bool expect_int8;    // the mover runs on u8
  bool channels_last = false;  // ... channels last: conv1 writes its layout, no reorder
};

// x -> FQ -> conv1 -> relu -> [FQ] -> mover -> [FQ] -> conv2 -> FQ(s8) -> y
SmallNet build(const Case& c, bool fq_before_mover = true) {
  SmallNet net;
  Builder b(net.graph);
  const ValueId x = act_fq(b, b.input("x", {1, 4, 8, 8}), "x.q");
  ValueId y = b.relu(quantized_conv(b, x, 8, 1, "conv1"));
  if (fq_before_mover) y = act_fq(b, y, "conv1.q");
  y = c.mover(b, y);
  if (c.requantize || !fq_before_mover) y = act_fq(b, y, "mover.q");
  y = quantized_conv(b, y, 8, 2, "conv2");
  close_with_s8_output(b, y, net);
  return net;
}

void expect_int8_mover_and_one_lsb(const SmallNet& net, bool expect_int8,
                                   bool channels_last = false) {
  const CompiledModel fused = compile(net.graph, {.fuse = true});
  EXPECT_EQ(quantized_layers(fused).size(), 2u) << describe_layers(fused);
  bool found = false;
  for (const LayerInfo& l : fused.layers()) {
    if (l.node != "mover") continue;
    found = true;
    EXPECT_EQ(l.precision == "int8", expect_int8) << l.precision << describe_layers(fused);
  }
  EXPECT_TRUE(found) << describe_layers(fused);
  for (const LayerInfo& l : fused.layers()) {
    if (channels_last && (l.node == "conv1" || l.node == "mover")) {
      EXPECT_EQ(l.reorders, 0) << l.node << describe_layers(fused);
    }
  }
  expect_within_one_lsb(net, fused, 3, 0.99);
}

graph::PoolAttrs pool2x2() {
  graph::PoolAttrs p;
  p.kernel = {2, 2};
  p.strides = {2, 2};
  return p;
}

ValueId max_pool(Builder& b, ValueId x) {
  graph::PoolAttrs p = pool2x2();
  p.kernel = {3, 3};
  p.strides = {1, 1};
  p.pads_begin = {1, 1};
  p.pads_end = {1, 1};
  return b.op(graph::OpKind::MaxPool, {x}, p, "mover");
}

ValueId transpose_hw(Builder& b, ValueId x) {
  return b.op(graph::OpKind::Transpose, {x}, graph::TransposeAttrs{{0, 1, 3, 2}}, "mover");
}

ValueId slice_crop(Builder& b, ValueId x) {
  return b.op(graph::OpKind::Slice, {x}, graph::SliceAttrs{{0, 0, 1, 2}, {1, 8, 6, 5}}, "mover");
}

ValueId nearest(Builder& b, ValueId x, graph::CoordinateTransform transform,
                graph::NearestMode mode, Shape sizes) {
  graph::ResizeAttrs r;
  r.mode = graph::ResizeMode::nearest;
  r.transform = transform;
  r.nearest_mode = mode;
  r.sizes = std::move(sizes);
  return b.op(graph::OpKind::Resize, {x}, r, "mover");
}

ValueId resize_nearest(Builder& b, ValueId x) {
  return nearest(b, x, graph::CoordinateTransform::asymmetric, graph::NearestMode::floor,
                 {1, 8, 16, 16});
}

// Half-pixel centres at a non-integer scale (8 -> 12).
ValueId resize_nearest_half_pixel(Builder& b, ValueId x) {
  return nearest(b, x, graph::CoordinateTransform::half_pixel,
                 graph::NearestMode::round_prefer_floor, {1, 8, 12, 12});
}

// Width only; the height keeps its size but tf_half_pixel_for_nn with
// round_prefer_ceil still shifts its rows by one.
ValueId resize_nearest_shifted_rows(Builder& b, ValueId x) {
  return nearest(b, x, graph::CoordinateTransform::tf_half_pixel_for_nn,
                 graph::NearestMode::round_prefer_ceil, {1, 8, 8, 13});
}

ValueId reshape_roundtrip(Builder& b, ValueId x) {
  const ValueId flat = b.op(graph::OpKind::Reshape, {x}, graph::ReshapeAttrs{{1, 8, 64}}, "flat");
  return b.op(graph::OpKind::Reshape, {flat}, graph::ReshapeAttrs{{1, 8, 8, 8}}, "mover");
}

class Int8DataMovement : public ::testing::TestWithParam<Case> {};

TEST_P(Int8DataMovement, RunsOnU8BetweenInt8LayersWithinOneLsb) {
  expect_int8_mover_and_one_lsb(build(GetParam()), GetParam().expect_int8,
                                GetParam().channels_last);
}

// Quantized only after the op: the FakeQuantize moves above it.
TEST_P(Int8DataMovement, QuantizeAfterTheOpMovesAboveIt) {
  expect_int8_mover_and_one_lsb(build(GetParam(), false), GetParam().expect_int8,
                                GetParam().channels_last);
}

INSTANTIATE_TEST_SUITE_P(
    Ops, Int8DataMovement,
    ::testing::Values(Case{"MaxPool", max_pool, true, true, true},
                      Case{"MaxPoolNoRequantize", max_pool, false, true, true},
                      Case{"Transpose", transpose_hw, true, true},
                      Case{"Slice", slice_crop, true, true, true},
                      Case{"ResizeNearest", resize_nearest, true, true, true},
                      Case{"ResizeNearestHalfPixel", resize_nearest_half_pixel, true, true, true},
                      Case{"ResizeNearestShiftedRows", resize_nearest_shifted_rows, true, true, true},
                      Case{"Reshape", reshape_roundtrip, true, true}),
    [](const auto& p) { return p.param.name; });

// Concat of two int8 branches on one grid runs on u8; a branch on another
// grid is requantized to the output's by the layer that makes it (its chain
// ends on the output grid); a branch that is also a graph output cannot be,
// so the Concat stays f32 (the refusal says why). All within 1 LSB.
SmallNet concat_net(float second_scale, bool right_is_output = false) {
  SmallNet net;
  Builder b(net.graph);
  const ValueId x = act_fq(b, b.input("x", {1, 4, 8, 8}), "x.q");
  const ValueId l = act_fq(b, b.relu(quantized_conv(b, x, 8, 1, "left")), "left.q");
  const ValueId r = act_fq(b, b.relu(quantized_conv(b, x, 8, 2, "right")), "right.q", second_scale);
  if (right_is_output) b.output(r);
  ValueId y = b.op(graph::OpKind::Concat, {l, r}, graph::ConcatAttrs{1}, "mover");
  y = act_fq(b, y, "mover.q");
  y = quantized_conv(b, y, 8, 3, "conv2");
  close_with_s8_output(b, y, net);
  return net;
}

TEST(Int8Concat, EqualGridsConcatOnU8) {
  const SmallNet net = concat_net(kActScale);
  const CompiledModel fused = compile(net.graph, {.fuse = true});
  EXPECT_EQ(quantized_layers(fused).size(), 3u) << describe_layers(fused);
  for (const LayerInfo& l : fused.layers()) {
    if (l.node == "mover") {
      EXPECT_EQ(l.precision, "int8") << describe_layers(fused);
    }
    // Both branches write channels last and the Concat joins them so.
    if (l.node == "mover" || l.node == "left" || l.node == "right") {
      EXPECT_EQ(l.reorders, 0) << l.node << describe_layers(fused);
    }
  }
  expect_within_one_lsb(net, fused, 4, 0.99);
  const CompiledModel unfused = compile(net.graph, {.fuse = false});
  const Tensor x = Tensor::from_vector<float>({1, 4, 8, 8}, std::vector<float>(256, 1.3f));
  const Comparison c = compare_quantized(run(fused, "x", x, net.output),
                                         run(unfused, "x", x, net.output), net.out);
  EXPECT_LE(c.max_diff, 1) << c.first_diffs;
}

void expect_concat(const SmallNet& net, const std::string& precision, std::size_t int8_layers) {
  const CompiledModel fused = compile(net.graph, {.fuse = true});
  EXPECT_EQ(quantized_layers(fused).size(), int8_layers) << describe_layers(fused);
  for (const LayerInfo& l : fused.layers()) {
    if (l.node == "mover") {
      EXPECT_EQ(l.precision, precision) << describe_layers(fused);
    }
  }
  expect_within_one_lsb(net, fused, 4, 0.99);
}

TEST(Int8Concat, AnotherGridIsRequantizedByTheLayerThatMakesIt) {
  expect_concat(concat_net(2 * kActScale), "int8", 3);
}

// An input that is also a graph output gets its own copy of the Concat's
// quantization, and keeps its f32 value for the output: the Concat runs on
// codes, within one step of the unfused graph.
TEST(Int8Concat, AnInputThatIsAlsoAGraphOutputGetsItsOwnQuantization) {
  expect_concat(concat_net(2 * kActScale, true), "int8", 3);
}

// ShuffleNet's unit as PyTorch's quantizable ShuffleNetV2 exports it: the
// previous unit's codes are split in two channel halves by two Slices of one
// dequantized tensor; one half runs a conv, the other joins the conv's output
// in a Concat quantized on a third grid; then the channel shuffle (Reshape ->
// Transpose -> Reshape) feeds the next conv. `side_output` also sends the
// passed-through half out of the model in f32.
SmallNet shuffle_unit(bool side_output = false) {
  SmallNet net;
  Builder b(net.graph);
  const ValueId x = act_fq(b, b.input("x", {1, 4, 8, 8}), "x.q");
  const ValueId y = act_fq(b, b.relu(quantized_conv(b, x, 8, 1, "conv1")), "conv1.q");
  const ValueId keep =
      b.op(graph::OpKind::Slice, {y}, graph::SliceAttrs{{0, 0, 0, 0}, {1, 4, 8, 8}}, "keep");
  const ValueId half =
      b.op(graph::OpKind::Slice, {y}, graph::SliceAttrs{{0, 4, 0, 0}, {1, 4, 8, 8}}, "half");
  const ValueId branch =
      act_fq(b, b.relu(quantized_conv(b, half, 4, 2, "conv2")), "conv2.q", 1.5f * kActScale);
  ValueId cat = b.op(graph::OpKind::Concat, {keep, branch}, graph::ConcatAttrs{1}, "cat");
  cat = act_fq(b, cat, "cat.q", 1.25f * kActScale);
  ValueId s = b.op(graph::OpKind::Reshape, {cat}, graph::ReshapeAttrs{{1, 2, 4, 8, 8}}, "split");
  s = b.op(graph::OpKind::Transpose, {s}, graph::TransposeAttrs{{0, 2, 1, 3, 4}}, "shuffle");
  s = b.op(graph::OpKind::Reshape, {s}, graph::ReshapeAttrs{{1, 8, 8, 8}}, "merge");
  close_with_s8_output(b, quantized_conv(b, s, 8, 3, "conv3"), net);
  if (side_output) b.output(keep);
  return net;
}

std::string precision_of(const CompiledModel& m, const std::string& node) {
  for (const LayerInfo& l : m.layers()) {
    if (l.node == node) return l.precision;
  }
  return "absent";
}

TEST(Int8ChannelShuffle, SplitConcatOnAnotherGridAndShuffleRunOnCodes) {
  const SmallNet net = shuffle_unit();
  const CompiledModel fused = compile(net.graph, {.fuse = true});
  EXPECT_EQ(quantized_layers(fused).size(), 3u) << describe_layers(fused);
  // The shuffle's Reshape -> Transpose -> Reshape is one ShuffleChannels
  // (recognize_channel_shuffle), named after the last Reshape.
  for (const char* n : {"keep", "half", "cat", "merge"}) {
    EXPECT_EQ(precision_of(fused, n), "int8") << n << describe_layers(fused);
  }
  for (const char* n : {"split", "shuffle"}) {
    EXPECT_EQ(precision_of(fused, n), "absent") << n << describe_layers(fused);
  }
  // The passed-through half is requantized onto the Concat's grid by a table.
  int lookups = 0, f32_ops = 0;
  for (const LayerInfo& l : fused.layers()) {
    lookups += l.op == "Lookup";
    f32_ops += l.precision == "f32";
  }
  EXPECT_EQ(lookups, 1) << describe_layers(fused);
  EXPECT_EQ(f32_ops, 0) << describe_layers(fused);
  expect_within_one_lsb(net, fused, 5, 0.99);
}

// The passed-through half is also a model output in f32: requantizing it onto
// the Concat's grid would change what that output sees, so the Concat stays
// f32 with a refusal naming the input; the Slices still run on codes (each
// through its own copy of the dequantize) and all three layers are int8.
// The passed-through half also leaves the model in f32: it keeps that value
// for the output, and the Concat still runs on codes.
TEST(Int8ChannelShuffle, ConcatInputReadAlsoAsAnF32OutputStillConcatsCodes) {
  const SmallNet net = shuffle_unit(true);
  const CompiledModel fused = compile(net.graph, {.fuse = true});
  EXPECT_EQ(quantized_layers(fused).size(), 3u) << describe_layers(fused);
  EXPECT_EQ(precision_of(fused, "cat"), "int8") << describe_layers(fused);
  EXPECT_EQ(precision_of(fused, "half"), "int8") << describe_layers(fused);
  expect_within_one_lsb(net, fused, 6, 0.99);
}

// Named negatives: the op stays f32.
// A second reader of the op's input: quantizing it would change what that
// reader sees, so the FakeQuantize stays below the op.
TEST(Int8DataMovementNegative, InputWithASecondReaderKeepsMaxPoolF32) {
  SmallNet net;
  Builder b(net.graph);
  const ValueId x = act_fq(b, b.input("x", {1, 4, 8, 8}), "x.q");
  const ValueId y = b.relu(quantized_conv(b, x, 8, 1, "conv1"));
  graph::PoolAttrs p = pool2x2();
  ValueId m = act_fq(b, b.op(graph::OpKind::MaxPool, {y}, p, "mover"), "mover.q");
  m = quantized_conv(b, m, 8, 2, "conv2");
  const ValueId side = b.op(graph::OpKind::MaxPool, {y}, p, "side");
  net.out = make_range(Quant::s8, 8.0 / 127.0);
  const ValueId out = b.fake_quantize(b.add(m, side), net.out.il, net.out.ih, net.out.il,
                                      net.out.ih, 256, "out.q");
  b.output(out);
  net.output = net.graph.value(out).name;
  const CompiledModel fused = compile(net.graph, {.fuse = true});
  for (const LayerInfo& l : fused.layers()) {
    if (l.node == "mover") {
      EXPECT_EQ(l.precision, "f32") << describe_layers(fused);
    }
  }
  bool explained = false;
  for (const FusionRefusal& r : fused.refusals()) {
    explained = explained || (r.node == "mover.q" && r.reason.find("other readers") != std::string::npos);
  }
  EXPECT_TRUE(explained) << describe_layers(fused);
}

// Resize linear computes new values: not data movement.
TEST(Int8DataMovementNegative, LinearResizeStaysF32) {
  const Mover linear = [](Builder& b, ValueId x) {
    graph::ResizeAttrs r;
    r.mode = graph::ResizeMode::linear;
    r.sizes = {1, 8, 16, 16};
    return b.op(graph::OpKind::Resize, {x}, r, "mover");
  };
  expect_int8_mover_and_one_lsb(build(Case{"linear", linear, true, false}), false);
}

// A per-channel grid does not commute with Transpose of the channel axis
// handling here: the FakeQuantize stays below the op.
TEST(Int8DataMovementNegative, PerChannelQuantizeAfterTheOpStaysBelowIt) {
  SmallNet net;
  Builder b(net.graph);
  const ValueId x = act_fq(b, b.input("x", {1, 4, 8, 8}), "x.q");
  const ValueId y = b.relu(quantized_conv(b, x, 8, 1, "conv1"));
  const ValueId m = b.op(graph::OpKind::MaxPool, {y}, pool2x2(), "mover");
  std::vector<float> hi(8);
  for (std::size_t c = 0; c < 8; ++c) hi[c] = 255 * kActScale * (1.0f + 0.1f * static_cast<float>(c));
  const ValueId lo = b.constant("lo", {1, 8, 1, 1}, std::vector<float>(8, 0.0f));
  const ValueId h = b.constant("hi", {1, 8, 1, 1}, hi);
  ValueId z = b.fake_quantize(m, lo, h, lo, h, 256, "mover.q");
  z = quantized_conv(b, z, 8, 2, "conv2");
  b.output(z);
  const CompiledModel fused = compile(net.graph, {.fuse = true});
  for (const LayerInfo& l : fused.layers()) {
    if (l.node == "mover") {
      EXPECT_EQ(l.precision, "f32") << describe_layers(fused);
    }
  }
  bool explained = false;
  for (const FusionRefusal& r : fused.refusals()) {
    explained = explained || (r.node == "mover.q" && r.reason.find("per-tensor") != std::string::npos);
  }
  EXPECT_TRUE(explained) << describe_layers(fused);
}

// A one-channel tensor has the same bytes plain and channels last: a layer
// reading a one-channel graph input (a grey image) or writing a one-channel
// graph output (a detector's map) stages no reorder. With two channels the
// same layers stage one each.
TEST(Int8DataMovement, OneChannelGraphInputsAndOutputsNeedNoReorder) {
  for (const std::int64_t channels : {1, 2}) {
    SmallNet net;
    Builder b(net.graph);
    const ValueId x = b.input("x", {1, channels, 8, 8}, ElementType::u8);
    ValueId y = b.multiply(b.convert(x, ElementType::f32), b.scalar(kActScale));
    y = act_fq(b, b.relu(quantized_conv(b, y, 8, 1, "conv1")), "conv1.q");
    y = quantized_conv(b, y, channels, 2, "conv2");
    close_with_s8_output(b, y, net);
    const CompiledModel fused = compile(net.graph, {.fuse = true});
    ASSERT_EQ(quantized_layers(fused).size(), 2u) << describe_layers(fused);
    for (const LayerInfo& l : quantized_layers(fused)) {
      EXPECT_EQ(l.reorders, channels == 1 ? 0 : 1) << channels << " channels" << describe_layers(fused);
    }
    const CompiledModel unfused = compile(net.graph, {.fuse = false});
    std::mt19937 rng(9);
    std::uniform_int_distribution<int> d(0, 255);
    Tensor in(ElementType::u8, {1, channels, 8, 8});
    for (std::uint8_t& v : in.data<std::uint8_t>()) v = static_cast<std::uint8_t>(d(rng));
    const Comparison c =
        compare_quantized(run(fused, "x", in, net.output), run(unfused, "x", in, net.output), net.out);
    EXPECT_LE(c.max_diff, 1) << c.first_diffs;
    EXPECT_GE(c.equal_fraction(), 0.99) << c.first_diffs;
  }
}

}  // namespace
}  // namespace qfuse::test::fusion
