// qfuse::Comparison: the tensors both compiled graphs compute, the codes a
// fused layer writes compared as the real values they stand for.

#include <gtest/gtest.h>

#include "fusion_test_util.hpp"
#include "plugin/api_internal.hpp"

namespace qfuse::test::fusion {
namespace {

// x -> FQ(u8) -> conv -> FQ(u8 with a zero point, "mid.q") -> conv -> FQ(s8 output)
SmallNet two_layers() {
  SmallNet net;
  Builder b(net.graph);
  const ValueId x = b.fake_quantize(b.input("x", {1, 4, 8, 8}), 0.0f, 5.1f, 0.0f, 5.1f, 256, "x.q");
  ValueId y = quantized_conv(b, x, 8, 1, "first");
  y = b.fake_quantize(y, -1.0f, 4.1f, -1.0f, 4.1f, 256, "mid.q");
  close_with_s8_output(b, quantized_conv(b, y, 8, 2, "second"), net);
  return net;
}

TEST(Compare, LayerBoundariesAndOutputWithinOneLsb) {
  const SmallNet net = two_layers();
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> d(0.0f, 5.0f);
  std::vector<float> xv(256);
  for (float& v : xv) v = d(rng);
  qfuse::Comparison cmp(qfuse::make_model(net.graph));
  cmp.run({{"x", Tensor::from_vector<float>({1, 4, 8, 8}, xv)}});
  cmp.run({{"x", Tensor::from_vector<float>({1, 4, 8, 8}, std::vector<float>(256, 2.5f))}});
  const std::vector<TensorDiff> tensors = cmp.tensors();
  const TensorDiff* mid = nullptr;
  const TensorDiff* out = nullptr;
  for (const TensorDiff& t : tensors) {
    if (t.name == net.graph.value(net.graph.outputs()[0]).name) out = &t;
    if (t.node == "first") mid = &t;
  }
  ASSERT_NE(mid, nullptr);
  ASSERT_NE(out, nullptr);
  // The first layer writes the u8 codes of mid.q: compared as real values on its grid.
  EXPECT_TRUE(mid->quantized);
  EXPECT_EQ(mid->elements, 2 * 8 * 64);
  EXPECT_EQ(mid->lsb[2] + mid->lsb[3], 0) << mid->max_lsb;
  EXPECT_GE(mid->equal_share, 0.99);
  EXPECT_GT(mid->cosine, 0.9999);
  EXPECT_TRUE(out->graph_output);
  EXPECT_TRUE(out->quantized);
  EXPECT_LE(out->max_lsb, 1.0 + 1e-6);
  EXPECT_GT(out->snr_db, 30.0);
}

}  // namespace
}  // namespace qfuse::test::fusion
