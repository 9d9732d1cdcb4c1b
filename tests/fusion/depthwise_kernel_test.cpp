// The padded 3x3 or 5x5 depthwise layer (strides 1 or 2) with a u8 source
// zero point runs on qfuse's own kernel (where the CPU has AVX-512 VBMI and
// VNNI), within one code of the unfused graph; named neighbours of that form
// stay on oneDNN, each within one code too.

#include <gtest/gtest.h>

#include <random>

#include "fusion_test_util.hpp"
#include "plugin/executable_ops/depthwise_kernel.hpp"
#include "plugin/api_internal.hpp"

namespace qfuse::test::fusion {
namespace {

struct DwCase {
  std::string name;
  std::int64_t channels = 32, kernel = 5, stride = 1, pad = 2;
  Quant source = Quant::asym;  // the depthwise layer's input grid
  // After the depthwise layer: hardswish, x * sigmoid(x) (an EfficientNet
  // export's SiLU), or nothing.
  enum class Activation { hardswish, silu, none } activation = Activation::hardswish;
  std::int64_t stride_w = 0;   // 0: `stride`
};

// x [1, 4, side, side] -> 3x3 conv to `channels` -> hardswish -> FQ (c.source)
//   -> depthwise kernel x kernel (c.stride, c.pad) with bias -> c.activation -> FQ (u8 with
//   a zero point) -> 3x3 conv to 8 -> FQ (s8)
SmallNet depthwise_net(const DwCase& c) {
  SmallNet net;
  Builder b(net.graph);
  const ValueId x =
      b.fake_quantize(b.input("x", {1, 4, 13, 13}), 0.0f, 5.1f, 0.0f, 5.1f, 256, "x.q");
  ValueId y = b.unary(graph::OpKind::HSwish, quantized_conv(b, x, c.channels, 5, "expand"));
  const FqRange mid =
      c.source == Quant::u8 ? make_range(Quant::u8, 0.04) : make_range(Quant::asym, 0.04, 19);
  y = b.fake_quantize(y, mid.il, mid.ih, mid.il, mid.ih, 256, "expand.q");
  std::mt19937 rng(11);
  std::normal_distribution<float> d(0.0f, 0.2f);
  std::vector<float> w(static_cast<std::size_t>(c.channels * c.kernel * c.kernel));
  for (float& v : w) v = d(rng);
  std::vector<float> bias(static_cast<std::size_t>(c.channels));
  for (float& v : bias) v = d(rng);
  const float s = 0.6f / 127.0f;
  const ValueId wq = b.fake_quantize(b.constant("dw.w", {c.channels, 1, c.kernel, c.kernel}, w),
                                     -128 * s, 127 * s, -128 * s, 127 * s, 256, "dw.wq");
  graph::ConvAttrs a;
  a.strides = {c.stride, c.stride_w == 0 ? c.stride : c.stride_w};
  a.dilations = {1, 1};
  a.pads_begin = {c.pad, c.pad};
  a.pads_end = {c.pad, c.pad};
  a.groups = c.channels;
  y = b.convolution(y, wq, b.constant("dw.b", {c.channels}, bias), a, "dw");
  if (c.activation == DwCase::Activation::hardswish) y = b.unary(graph::OpKind::HSwish, y);
  if (c.activation == DwCase::Activation::silu) {
    y = b.multiply(y, b.unary(graph::OpKind::Sigmoid, y));
  }
  const FqRange out = make_range(Quant::asym, 0.05, 9);
  y = b.fake_quantize(y, out.il, out.ih, out.il, out.ih, 256, "dw.q");
  // A layer after it: the network's output is stored plain, its layers'
  // tensors channels last.
  close_with_s8_output(b, quantized_conv(b, y, 8, 6, "project"), net);
  return net;
}

// The depthwise layer fed the unfused graph's input codes (qfuse::Comparison's
// isolated run, so that a near-tie flip upstream does not count): within one
// code of the unfused layer, and at least 99% equal, over three random inputs.
void expect_depthwise_within_one_lsb(const qfuse::Comparison& cmp) {
  for (const TensorDiff& t : cmp.tensors()) {
    if (t.node != "dw") continue;
    EXPECT_TRUE(t.quantized);
    EXPECT_EQ(t.isolated.elements, t.elements);
    EXPECT_LE(t.isolated.max_lsb, 1.0 + 1e-6);
    EXPECT_GE(t.isolated.equal_share, 0.99);
    return;
  }
  ADD_FAILURE() << "no tensor of node dw" << describe_layers(cmp.fused());
}

qfuse::Comparison compared(const SmallNet& net, const CompileOptions& options) {
  qfuse::Comparison cmp(qfuse::make_model(net.graph), options);
  std::mt19937 rng(21);
  std::uniform_real_distribution<float> d(0.0f, 5.0f);
  for (int run = 0; run < 3; ++run) {
    std::vector<float> xv(4 * 13 * 13);
    for (float& v : xv) v = d(rng);
    cmp.run({{"x", Tensor::from_vector<float>({1, 4, 13, 13}, xv)}});
  }
  return cmp;
}

std::string implementation_of(const CompiledModel& m, const std::string& node) {
  for (const LayerInfo& l : m.layers()) {
    if (l.node == node) return l.implementation;
  }
  return {};
}

TEST(DepthwiseLayer, PaddedWithAZeroPointRunsOnTheKernel) {
  DwCase tall{"stride 2 x 1", 32, 5, 2, 2};
  tall.stride_w = 1;
  for (const DwCase& c : {DwCase{"32 channels", 32}, DwCase{"48 channels", 48},
                          DwCase{"24 channels", 24}, DwCase{"stride 2", 32, 5, 2, 2}, tall,
                          DwCase{"3x3", 32, 3, 1, 1}, DwCase{"3x3 stride 2", 24, 3, 2, 1},
                          DwCase{"SiLU", 32, 5, 1, 2, Quant::asym, DwCase::Activation::silu}}) {
    const SmallNet net = depthwise_net(c);
    const qfuse::Comparison cmp = compared(net, {});
    const CompiledModel& fused = cmp.fused();
    ASSERT_EQ(quantized_layers(fused).size(), 3u) << c.name << describe_layers(fused);
    const std::string impl = implementation_of(fused, "dw");
    if (plugin::has_depthwise_kernel_isa()) {
      EXPECT_EQ(impl, plugin::kDepthwiseKernelName) << c.name << describe_layers(fused);
    } else {
      EXPECT_TRUE(is_int8_implementation(impl)) << c.name << describe_layers(fused);
    }
    SCOPED_TRACE(c.name);
    expect_depthwise_within_one_lsb(cmp);
  }
}

// Each differs from the kernel's form in one thing: oneDNN runs it, exactly
// as before.
TEST(DepthwiseLayer, NeighboursOfTheFormStayOnOneDnn) {
  const std::vector<DwCase> cases = {
      {"no source zero point (brdgmm_dw is exact)", 32, 5, 1, 2, Quant::u8},
      {"stride 3", 32, 5, 3, 2, Quant::asym},
      {"3x3 without padding", 32, 3, 1, 0, Quant::asym},
      {"5x5 padding 1", 32, 5, 1, 1, Quant::asym},
  };
  for (const DwCase& c : cases) {
    const SmallNet net = depthwise_net(c);
    const qfuse::Comparison cmp = compared(net, {});
    const CompiledModel& fused = cmp.fused();
    ASSERT_EQ(quantized_layers(fused).size(), 3u) << c.name << describe_layers(fused);
    const std::string impl = implementation_of(fused, "dw");
    EXPECT_NE(impl, plugin::kDepthwiseKernelName) << c.name;
    EXPECT_TRUE(is_int8_implementation(impl)) << c.name << describe_layers(fused);
    SCOPED_TRACE(c.name);
    expect_depthwise_within_one_lsb(cmp);
  }
}

// Integer-only mode: a layer whose chain has an integer form requantizes
// oneDNN's s32 accumulators in integer arithmetic, so it stays on oneDNN; one
// whose chain has none (hardswish) keeps float scales and takes the kernel.
TEST(DepthwiseLayer, IntegerOnlyModeKeepsOneDnnWhereTheChainIsInteger) {
  for (const bool hardswish : {false, true}) {
    DwCase c{"integer only", 32};
    c.activation = hardswish ? DwCase::Activation::hardswish : DwCase::Activation::none;
    CompileOptions options;
    options.integer_only = true;
    const qfuse::Comparison cmp = compared(depthwise_net(c), options);
    const std::string impl = implementation_of(cmp.fused(), "dw");
    if (!hardswish) {
      EXPECT_NE(impl, plugin::kDepthwiseKernelName) << describe_layers(cmp.fused());
    } else if (plugin::has_depthwise_kernel_isa()) {
      EXPECT_EQ(impl, plugin::kDepthwiseKernelName) << describe_layers(cmp.fused());
    }
    SCOPED_TRACE(hardswish ? "hardswish" : "no hardswish");
    expect_depthwise_within_one_lsb(cmp);
  }
}

}  // namespace
}  // namespace qfuse::test::fusion
