// Which oneDNN kernel an int8 layer gets: AMX only for layers with a long
// reduction and many multiply-adds, the AVX-512 VNNI kernels for the others
// (faster at one image's sizes). Either way fused matches unfused within 1 LSB.

#include <gtest/gtest.h>

#include <random>

#include <oneapi/dnnl/dnnl.hpp>

#include "fusion_test_util.hpp"

namespace qfuse::test::fusion {
namespace {

bool has_amx() {
  return dnnl::get_effective_cpu_isa() == dnnl::cpu_isa::avx512_core_amx;
}

// x[1, 4, 8, 8] -> conv3x3 (4 -> 256 channels: 36 values per output)
//   -> FQ -> conv3x3 (256 -> 256: 2304 values per output, 38M multiply-adds) -> FQ(s8)
SmallNet short_then_long() {
  SmallNet net;
  Builder b(net.graph);
  const ValueId x = b.fake_quantize(b.input("x", {1, 4, 8, 8}), 0.0f, 5.1f, 0.0f, 5.1f, 256, "x.q");
  ValueId y = b.relu(quantized_conv(b, x, 256, 1, "short"));
  y = b.fake_quantize(y, 0.0f, 5.1f, 0.0f, 5.1f, 256, "short.q");
  y = quantized_conv(b, y, 256, 2, "long");
  close_with_s8_output(b, y, net);
  return net;
}

TEST(ImplementationChoice, AmxOnlyForLargeLayers) {
  const SmallNet net = short_then_long();
  const CompiledModel fused = compile(net.graph, {.fuse = true});
  const auto layers = quantized_layers(fused);
  ASSERT_EQ(layers.size(), 2u) << describe_layers(fused);
  for (const LayerInfo& l : layers) {
    EXPECT_TRUE(is_int8_implementation(l.implementation)) << describe_layers(fused);
    const bool amx = l.implementation.find("amx") != std::string::npos;
    if (l.node == "short") {
      EXPECT_FALSE(amx) << describe_layers(fused);
    }
    if (l.node == "long" && has_amx()) {
      EXPECT_TRUE(amx && l.implementation.rfind("brg", 0) == 0) << describe_layers(fused);
    }
  }
  expect_within_one_lsb(net, fused, 5);
}

// x[1, 64, 56, 56] asymmetric u8 (zero point 51) -> conv3x3 (64 -> 64,
// padded: the zero point stays in the kernel, and brgconv refuses it on AMX)
// -> FQ(s8): 116M multiply-adds over 576 values each, where oneDNN's
// non-brgemm AMX kernel is about 2.5x faster than VNNI.
TEST(ImplementationChoice, AmxForLargeLayersOutsideBrgemm) {
  SmallNet net;
  Builder b(net.graph);
  const ValueId x =
      b.fake_quantize(b.input("x", {1, 64, 56, 56}), -1.0f, 4.0f, -1.0f, 4.0f, 256, "x.q");
  close_with_s8_output(b, quantized_conv(b, x, 64, 4, "large"), net);
  const CompiledModel fused = compile(net.graph, {.fuse = true});
  const auto layers = quantized_layers(fused);
  ASSERT_EQ(layers.size(), 1u) << describe_layers(fused);
  EXPECT_TRUE(is_int8_implementation(layers[0].implementation)) << describe_layers(fused);
  if (has_amx()) {
    EXPECT_NE(layers[0].implementation.find("amx"), std::string::npos) << describe_layers(fused);
  }
  const CompiledModel unfused = compile(net.graph, {.fuse = false});
  std::mt19937 rng(6);
  std::uniform_real_distribution<float> d(-1.0f, 4.0f);
  std::vector<float> xv(64 * 56 * 56);
  for (float& v : xv) v = d(rng);
  const Tensor xt = Tensor::from_vector<float>({1, 64, 56, 56}, xv);
  const Comparison c = compare_quantized(run(fused, "x", xt, net.output),
                                         run(unfused, "x", xt, net.output), net.out);
  EXPECT_LE(c.max_diff, 1) << c.first_diffs;
  EXPECT_GE(c.equal_fraction(), 0.99) << c.first_diffs;
}

// A squeeze-excitation fc2: a convolution with one output pixel ([1, 72, 1, 1])
// whose chain quantizes, applies HardSigmoid and quantizes the gate. The
// composer writes the repeated clip/linear steps as per-channel constants of
// one value; on a one-pixel destination oneDNN 2.6 reads such an operand as
// the whole tensor and offers only ref_int8, so they go as scalars: the whole
// chain joins a jit/brgemm kernel and the gate leaves it as u8 codes.
TEST(ImplementationChoice, OnePixelLayerTakesItsGateChainOnAJitKernel) {
  SmallNet net;
  Builder b(net.graph);
  const ValueId x = b.fake_quantize(b.input("x", {1, 4, 8, 8}), 0.0f, 5.1f, 0.0f, 5.1f, 256, "x.q");
  std::mt19937 rng(3);
  std::normal_distribution<float> d(0.0f, 0.05f);
  std::vector<float> w(72 * 4 * 8 * 8);
  for (float& v : w) v = d(rng);
  const float s = 0.2f / 127.0f;
  const ValueId wq = b.fake_quantize(b.constant("fc2.w", {72, 4, 8, 8}, w), -128 * s, 127 * s,
                                     -128 * s, 127 * s, 256, "fc2.wq");
  ValueId y = b.convolution(x, wq, std::nullopt, graph::ConvAttrs{}, "fc2");  // 8x8 kernel: 1 pixel
  y = b.fake_quantize(y, -6.0f, 6.0f * 127.0f / 128.0f, -6.0f, 6.0f * 127.0f / 128.0f, 256, "fc2.q");
  y = b.unary(graph::OpKind::HSigmoid, y, "gate");
  net.out = make_range(Quant::u8, 1.0 / 256.0);
  y = b.fake_quantize(y, net.out.il, net.out.ih, net.out.il, net.out.ih, 256, "gate.q");
  b.output(y);
  net.output = net.graph.value(y).name;

  const CompiledModel fused = compile(net.graph, {.fuse = true});
  ASSERT_EQ(quantized_layers(fused).size(), 1u) << describe_layers(fused);
  for (const LayerInfo& l : fused.layers()) {
    EXPECT_NE(l.precision, "f32") << l.node << " [" << l.op << "]" << describe_layers(fused);
    if (l.node == "fc2") {
      EXPECT_EQ(l.implementation.find("ref"), std::string::npos) << l.implementation;
    }
  }
  expect_within_one_lsb(net, fused, 8, 0.99);
}

// An int8 deconvolution whose kernel equals its stride runs as a 1x1
// convolution and a pixel shuffle when it has fewer than 16 output channels
// (the direct kernel spreads output channels over a vector's lanes); with 16,
// or a kernel larger than the stride, it stays a deconvolution. Each within
// one code of the unfused graph.
TEST(ImplementationChoice, FewChannelKernelIsStrideDeconvolutionIsAShuffledConvolution) {
  struct Case {
    std::int64_t out_channels, kernel, stride;
    bool shuffled;
  };
  for (const Case& c : {Case{1, 2, 2, true}, Case{5, 3, 3, true}, Case{16, 2, 2, false},
                        Case{4, 3, 2, false}}) {
    SmallNet net;
    Builder b(net.graph);
    const ValueId x =
        b.fake_quantize(b.input("x", {1, 4, 8, 8}), 0.0f, 5.1f, 0.0f, 5.1f, 256, "x.q");
    std::mt19937 rng(static_cast<unsigned>(c.out_channels));
    std::normal_distribution<float> d(0.0f, 0.3f);
    std::vector<float> w(static_cast<std::size_t>(4 * c.out_channels * c.kernel * c.kernel));
    for (float& v : w) v = d(rng);
    const float s = 1.0f / 127.0f;
    const ValueId wq = b.fake_quantize(
        b.constant("up.w", {4, c.out_channels, c.kernel, c.kernel}, w), -128 * s, 127 * s,
        -128 * s, 127 * s, 256, "up.wq");
    graph::DeconvAttrs a;
    a.strides = {c.stride, c.stride};
    a.dilations = {1, 1};
    a.pads_begin = {0, 0};
    a.pads_end = {0, 0};
    a.output_padding = {0, 0};
    a.groups = 1;
    net.out = make_range(Quant::u8, 0.02);
    const ValueId y = b.fake_quantize(b.relu(b.deconvolution(x, wq, std::nullopt, a, "up")),
                                      net.out.il, net.out.ih, net.out.il, net.out.ih, 256, "up.q");
    b.output(y);
    net.output = net.graph.value(y).name;
    const CompiledModel fused = compile(net.graph, {.fuse = true});
    ASSERT_EQ(quantized_layers(fused).size(), 1u) << describe_layers(fused);
    for (const LayerInfo& l : fused.layers()) {
      if (l.node != "up") continue;
      EXPECT_EQ(l.implementation.find("pixel shuffle") != std::string::npos, c.shuffled)
          << c.out_channels << " channels, kernel " << c.kernel << ": " << l.implementation;
    }
    expect_within_one_lsb(net, fused, 4);
  }
}

// An f32 1x1 convolution whose source a Transpose wrote (plain layout, as in
// the PP-OCRv4 recognizer's neck): on that layout oneDNN 2.6 offers only
// im2col gemm; the source is staged channels last by one reorder and the
// layer runs on brgconv. Same result as the unfused graph.
TEST(ImplementationChoice, F32ConvAfterATransposeRunsOffGemm) {
  graph::Graph g;
  Builder b(g);
  const ValueId x = b.input("x", {1, 8, 8, 64});
  const ValueId t = b.op(graph::OpKind::Transpose, {x}, graph::TransposeAttrs{{0, 3, 1, 2}}, "t");
  std::mt19937 rng(4);
  std::normal_distribution<float> d(0.0f, 0.1f);
  std::vector<float> w(64 * 64);
  for (float& v : w) v = d(rng);
  const ValueId y = b.convolution(t, b.constant("conv.w", {64, 64, 1, 1}, w), std::nullopt,
                                  graph::ConvAttrs{}, "conv");
  b.output(y);
  const CompiledModel fused = compile(g, {.fuse = true});
  bool found = false;
  for (const LayerInfo& l : fused.layers()) {
    if (l.node != "conv") continue;
    found = true;
    EXPECT_EQ(l.implementation.find("gemm"), std::string::npos) << l.implementation;
    EXPECT_EQ(l.implementation.find("ref"), std::string::npos) << l.implementation;
  }
  EXPECT_TRUE(found) << describe_layers(fused);
  std::vector<float> xv(8 * 8 * 64);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& v : xv) v = u(rng);
  const Tensor in = Tensor::from_vector<float>({1, 8, 8, 64}, xv);
  const std::string out = g.value(y).name;
  const Tensor a = run(fused, "x", in, out);
  const Tensor ref = run(compile(g, {.fuse = false}), "x", in, out);
  ASSERT_EQ(a.shape(), ref.shape());
  for (std::int64_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(a.as_float(i), ref.as_float(i), 1e-4f) << i;
  }
}

}  // namespace
}  // namespace qfuse::test::fusion
