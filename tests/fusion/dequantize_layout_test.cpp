// A Dequantize whose codes are stored channels last (an int8 layer wrote them
// for the next one) and whose f32 output is stored plain (a graph output): a
// reorder writes the codes as f32 in the output's layout and the op
// dequantizes them in place. Its output against the unfused graph's: within
// one step of the grid (the two int8 convolutions may round a near tie the
// other way), and at least 99% equal; a wrong layout would scramble it.

#include "fusion_test_util.hpp"

namespace qfuse::test::fusion {
namespace {

TEST(DequantizeLayout, ChannelsLastCodesDequantizedIntoAPlainOutput) {
  SmallNet net;
  Builder b(net.graph);
  const ValueId x = b.input("x", {1, 4, 8, 8});
  const FqRange in = make_range(Quant::u8, 5.0 / 255.0);
  const ValueId xq = b.fake_quantize(x, in.il, in.ih, in.il, in.ih, 256, "x.q");
  const FqRange mid = make_range(Quant::asym, 0.05, 60);
  const ValueId h = b.fake_quantize(quantized_conv(b, xq, 16, 1, "conv1"), mid.il, mid.ih, mid.il,
                                    mid.ih, 256, "mid.q");
  b.output(h);
  close_with_s8_output(b, quantized_conv(b, h, 8, 2, "conv2"), net);

  const CompiledModel fused = compile(net.graph, {.fuse = true});
  bool staged = false;
  for (const LayerInfo& l : fused.layers()) {
    if (l.op == "Dequantize") {
      EXPECT_NE(l.implementation.find("+qfuse:dequantize"), std::string::npos) << l.implementation;
      staged = l.implementation.find("+qfuse:dequantize") != std::string::npos;
    }
  }
  ASSERT_TRUE(staged) << describe_layers(fused);

  const CompiledModel unfused = compile(net.graph, {.fuse = false});
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> d(0.0f, 5.0f);
  std::vector<float> xv(4 * 8 * 8);
  for (float& v : xv) v = d(rng);
  const Tensor input = Tensor::from_vector<float>({1, 4, 8, 8}, xv);
  const std::string h_name = net.graph.value(h).name;
  const Comparison c = compare_quantized(run(fused, "x", input, h_name),
                                         run(unfused, "x", input, h_name), mid);
  EXPECT_LE(c.max_diff, 1) << c.first_diffs;
  EXPECT_GE(c.equal_fraction(), 0.99) << c.first_diffs;
  expect_within_one_lsb(net, fused, 4);
}

}  // namespace
}  // namespace qfuse::test::fusion
