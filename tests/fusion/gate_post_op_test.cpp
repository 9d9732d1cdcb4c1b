// A Mul of an int8 layer's output by a runtime per-channel gate (a
// squeeze-excitation gate computed from the block input) joins the layer as a
// binary_mul post-op reading the gate, and the FakeQuantize after it makes the
// destination u8. Fused matches unfused within 1 LSB. The usual SE block,
// whose gate is computed from the layer's own output, cannot: the layer must
// finish before its gate exists, so the Mul stays a separate op.

#include <gtest/gtest.h>

#include <random>

#include "fusion_test_util.hpp"
#include "plugin/api_internal.hpp"

namespace qfuse::test::fusion {
namespace {

constexpr float kAct = 0.02f;

ValueId act_q(Builder& b, ValueId x, const std::string& name) {
  return b.fake_quantize(x, 0.0f, 255 * kAct, 0.0f, 255 * kAct, 256, name);
}

// sigmoid(1x1 conv(GlobalAveragePool(t))): one gate value per channel, [1, oc, 1, 1].
ValueId gate_of(Builder& b, ValueId t, std::int64_t oc) {
  const Shape s = b.graph().value(t).shape;
  graph::PoolAttrs gap;
  gap.kernel = {s[2], s[3]};
  gap.strides = {1, 1};
  const ValueId pooled = b.op(OpKind::AvgPool, {t}, gap, "gap");
  std::mt19937 rng(9);
  std::normal_distribution<float> d(0.0f, 0.5f);
  std::vector<float> w(static_cast<std::size_t>(oc * s[1]));
  for (float& v : w) v = d(rng);
  const ValueId g = b.convolution(pooled, b.constant("gate.w", {oc, s[1], 1, 1}, w), std::nullopt,
                                  graph::ConvAttrs{}, "gate_conv");
  return b.unary(OpKind::Sigmoid, g, "gate");
}

// x -> FQ -> conv1 -> relu -> Mul(gate) -> FQ -> conv2 -> FQ(s8)
// gate from x (from_block_input) or from conv1's own output (the usual SE).
SmallNet build(bool from_block_input) {
  SmallNet net;
  Builder b(net.graph);
  const ValueId x = act_q(b, b.input("x", {1, 4, 8, 8}), "x.q");
  const ValueId y = b.relu(quantized_conv(b, x, 8, 1, "conv1"));
  const ValueId gate = gate_of(b, from_block_input ? x : y, 8);
  ValueId z = act_q(b, b.binary(OpKind::Multiply, y, gate, "gate_mul"), "gated.q");
  z = quantized_conv(b, z, 8, 2, "conv2");
  close_with_s8_output(b, z, net);
  return net;
}

TEST(GatePostOp, GateFromTheBlockInputIsABinaryMulPostOp) {
  const SmallNet net = build(true);
  const CompiledModel fused = compile(net.graph, {.fuse = true});
  bool conv1_gated = false, mul_left = false;
  for (const LayerInfo& l : fused.layers()) {
    if (l.node == "conv1") {
      conv1_gated = l.post_ops.find("binary_mul(per_channel") != std::string::npos &&
                    l.precision == "int8" && is_int8_implementation(l.implementation);
    }
    mul_left |= l.node == "gate_mul";
  }
  EXPECT_TRUE(conv1_gated) << describe_layers(fused);
  EXPECT_FALSE(mul_left) << describe_layers(fused);
  expect_within_one_lsb(net, fused, 2);
}

// Named negative: the gate needs conv1's output (GlobalAveragePool reads it
// too), so conv1's output has two readers and the Mul runs on its own.
TEST(GatePostOp, GateFromTheLayersOwnOutputStaysASeparateMul) {
  const SmallNet net = build(false);
  const CompiledModel fused = compile(net.graph, {.fuse = true});
  bool mul_left = false;
  for (const LayerInfo& l : fused.layers()) {
    if (l.node == "conv1") {
      EXPECT_EQ(l.post_ops.find("binary_mul"), std::string::npos) << l.post_ops;
    }
    mul_left |= l.node == "gate_mul";
  }
  EXPECT_TRUE(mul_left) << describe_layers(fused);
  expect_within_one_lsb(net, fused, 2);
}

// A residual Add of an f32 tensor that is not quantized (the model quantizes
// the layer inputs only, so the skip branch stays f32, as in the PP-OCR
// exports) joins the second layer as a full-tensor binary_add post-op. The
// operand is stored plain and read channels last, like the destination.
TEST(GatePostOp, F32ResidualIsAFullTensorBinaryAdd) {
  SmallNet net;
  Builder b(net.graph);
  const ValueId x = act_q(b, b.input("x", {1, 4, 8, 8}), "x.q");
  const ValueId skip = quantized_conv(b, x, 8, 1, "conv1");  // f32, two readers
  const ValueId y = quantized_conv(b, act_q(b, b.relu(skip), "skip.q"), 8, 2, "conv2");
  ValueId z = act_q(b, b.binary(OpKind::Add, y, skip, "residual"), "sum.q");
  z = quantized_conv(b, z, 8, 3, "conv3");
  close_with_s8_output(b, z, net);
  const CompiledModel fused = compile(net.graph, {.fuse = true});
  bool conv2_adds = false, add_left = false;
  for (const LayerInfo& l : fused.layers()) {
    if (l.node == "conv2") {
      conv2_adds = l.post_ops.find("binary_add(full") != std::string::npos &&
                   is_int8_implementation(l.implementation);
    }
    add_left |= l.node == "residual";
  }
  EXPECT_TRUE(conv2_adds) << describe_layers(fused);
  EXPECT_FALSE(add_left) << describe_layers(fused);
  expect_within_one_lsb(net, fused, 2);
}

// The same with the network's input as the residual: a graph input is stored
// plain, so the layer stages it channels last before the primitive reads it.
TEST(GatePostOp, PlainResidualIsStagedChannelsLast) {
  SmallNet net;
  Builder b(net.graph);
  const ValueId input = b.input("x", {1, 4, 8, 8});
  const ValueId y = quantized_conv(b, act_q(b, input, "x.q"), 4, 4, "conv1");
  ValueId z = act_q(b, b.binary(OpKind::Add, y, input, "residual"), "sum.q");
  close_with_s8_output(b, quantized_conv(b, z, 8, 5, "conv2"), net);
  const CompiledModel fused = compile(net.graph, {.fuse = true});
  bool conv1_adds = false;
  for (const LayerInfo& l : fused.layers()) {
    if (l.node == "conv1") {
      conv1_adds = l.post_ops.find("binary_add(full") != std::string::npos &&
                   is_int8_implementation(l.implementation);
    }
  }
  EXPECT_TRUE(conv1_adds) << describe_layers(fused);
  expect_within_one_lsb(net, fused, 6);
}

// PyTorch's quantized squeeze-excitation (MobileNetV3, EfficientNet): conv1's
// output is quantized (asymmetric u8, zero point 85) and read by both the
// average pool of the gate branch and the Mul; the gate is quantized on
// [0, 1) (scale 1/256) and the product quantized again. conv1 then writes
// codes and the Mul is one GateMultiply on them. `full_gate` makes the gate
// a full [1, 8, 8, 8] tensor instead (named negative: not per channel).
// `in` and `channels`: the input's shape and conv1's output channels;
// `linear`: the product quantized by ONNX's scale and zero point.
SmallNet torch_se(bool conv_after, bool full_gate = false, const Shape& in = {1, 4, 8, 8},
                  std::int64_t channels = 8, bool linear = false) {
  SmallNet net;
  Builder b(net.graph);
  const ValueId x = act_q(b, b.input("x", in), "x.q");
  const FqRange xr = make_range(Quant::asym, 0.03, 85);
  const ValueId y = b.fake_quantize(b.relu(quantized_conv(b, x, channels, 1, "conv1")), xr.il,
                                    xr.ih, xr.il, xr.ih, 256, "conv1.q");
  ValueId gate = full_gate ? b.unary(OpKind::Sigmoid, quantized_conv(b, x, 8, 3, "gate_conv"), "gate")
                           : gate_of(b, y, channels);
  gate = b.fake_quantize(gate, 0.0f, 255.0f / 256.0f, 0.0f, 255.0f / 256.0f, 256, "gate.q");
  const ValueId prod = b.binary(OpKind::Multiply, gate, y, "gate_mul");
  if (!conv_after) {
    net.out = make_range(Quant::u8, 0.015);
    const ValueId z = b.fake_quantize(prod, net.out.il, net.out.ih, net.out.il, net.out.ih, 256,
                                      "out.q");
    b.output(z);
    net.output = net.graph.value(z).name;
    return net;
  }
  const ValueId z = linear ? linear_q(b, prod, kAct, 3, "gated.q") : act_q(b, prod, "gated.q");
  close_with_s8_output(b, quantized_conv(b, z, 8, 2, "conv2"), net);
  return net;
}

std::string op_of(const CompiledModel& m, const std::string& node) {
  for (const LayerInfo& l : m.layers()) {
    if (l.node == node) return l.op + " " + l.precision;
  }
  return "absent";
}

TEST(GateMultiply, TorchSqueezeExcitationGatesTheCodesInOnePass) {
  const SmallNet net = torch_se(true);
  const CompiledModel fused = compile(net.graph, {.fuse = true});
  EXPECT_EQ(op_of(fused, "gate_mul"), "GateMultiply int8") << describe_layers(fused);
  EXPECT_EQ(quantized_layers(fused).size(), 2u) << describe_layers(fused);
  expect_within_one_lsb(net, fused, 3);
}

// The gated codes themselves, the GateMultiply fed the unfused graph's codes
// and gate (compare's isolated figures): the same f32 operations as the
// unfused graph, so every code is equal, ties included.
TEST(GateMultiply, GatedCodesEqualTheUnfusedOnes) {
  const SmallNet net = torch_se(true);
  qfuse::Comparison cmp(qfuse::make_model(net.graph));
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> d(0.0f, 5.0f);
  for (int run = 0; run < 4; ++run) {
    std::vector<float> xv(256);
    for (float& v : xv) v = d(rng);
    cmp.run({{"x", Tensor::from_vector<float>({1, 4, 8, 8}, xv)}});
  }
  bool found = false;
  for (const TensorDiff& t : cmp.tensors()) {
    if (t.node != "gate_mul") continue;
    found = true;
    EXPECT_LT(t.isolated.max_lsb, 0.01) << t.name;  // the same codes (to the f32 step)
    EXPECT_EQ(t.isolated.equal_share, 1.0) << t.name;
    EXPECT_EQ(t.isolated.elements, 4 * 512) << t.name;
  }
  EXPECT_TRUE(found);
}

// The same over pixel counts and channel counts where the 16-code steps
// cross pixels and a tail is left (24, 40 and 20 channels), a gate per image
// (batches 2 and 3), and fewer channels than a step (8); with ONNX's scale
// and zero point (the AVX-512 kernel's form) and with ranges: every code
// equal.
TEST(GateMultiply, GatedCodesEqualTheUnfusedOnesAcrossPixelsAndImages) {
  struct Case {
    Shape in;
    std::int64_t channels;
    bool linear;
  };
  for (const Case& c : {Case{{2, 4, 5, 3}, 24, true}, Case{{1, 4, 3, 3}, 40, true},
                        Case{{1, 4, 7, 7}, 8, true}, Case{{3, 4, 2, 2}, 20, true},
                        Case{{2, 4, 5, 3}, 24, false}}) {
    const SmallNet net = torch_se(true, false, c.in, c.channels, c.linear);
    const CompiledModel fused = compile(net.graph, {.fuse = true});
    ASSERT_EQ(op_of(fused, "gate_mul"), "GateMultiply int8") << describe_layers(fused);
    qfuse::Comparison cmp(qfuse::make_model(net.graph));
    std::mt19937 rng(13);
    std::uniform_real_distribution<float> d(0.0f, 5.0f);
    for (int run = 0; run < 3; ++run) {
      std::vector<float> xv(static_cast<std::size_t>(element_count(c.in)));
      for (float& v : xv) v = d(rng);
      cmp.run({{"x", Tensor::from_vector<float>(c.in, xv)}});
    }
    bool found = false;
    for (const TensorDiff& t : cmp.tensors()) {
      if (t.node != "gate_mul") continue;
      found = true;
      EXPECT_EQ(t.isolated.equal_share, 1.0) << to_string(c.in) << " x " << c.channels;
      EXPECT_EQ(t.isolated.elements, 3 * c.in[0] * c.channels * c.in[2] * c.in[3]);
    }
    EXPECT_TRUE(found) << to_string(c.in) << " x " << c.channels;
  }
}

// Named negative: a gate with a value per element is no channel gate; the
// Multiply is not a GateMultiply (it joins conv1 as a full-tensor binary_mul).
TEST(GateMultiplyNegative, AFullTensorGateIsNoGateMultiply) {
  const SmallNet net = torch_se(true, true);
  const CompiledModel fused = compile(net.graph, {.fuse = true});
  for (const LayerInfo& l : fused.layers()) EXPECT_NE(l.op, "GateMultiply") << describe_layers(fused);
  expect_within_one_lsb(net, fused, 5);
}

}  // namespace
}  // namespace qfuse::test::fusion
