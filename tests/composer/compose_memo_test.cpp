// ComposeMemo against compose() itself: a hit returns what compose() returns
// for that chain, and chains that differ in any bit are different keys.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "composer/compose_memo.hpp"

namespace qfuse::composer {
namespace {

// Everything a caller reads from a result, bit for bit.
void expect_same(const ComposeResult& got, const ComposeResult& want, const std::string& what) {
  ASSERT_EQ(got.fused(), want.fused()) << what;
  EXPECT_EQ(got.reason, want.reason) << what;
  if (!want.fused()) return;
  const PostOpsPlan& g = *got.plan;
  const PostOpsPlan& w = *want.plan;
  EXPECT_EQ(describe(g), describe(w)) << what;
  const auto same_bits = [](float x, float y) {
    return std::bit_cast<std::uint32_t>(x) == std::bit_cast<std::uint32_t>(y);
  };
  EXPECT_TRUE(std::equal(g.output_scales.begin(), g.output_scales.end(),
                         w.output_scales.begin(), w.output_scales.end(), same_bits))
      << what;
  EXPECT_EQ(g.dst_zero_point, w.dst_zero_point) << what;
  EXPECT_EQ(g.fixed_output_scales.size(), w.fixed_output_scales.size()) << what;
}

// A dequantize scale, a bias, relu and the next quantize: the common chain.
PostOpChain layer_chain(float scale, float shift, DataType dst) {
  PostOpChain chain{2, dst, {Scale{{scale, 0.25F}}, Shift{{shift, 1.0F}},
                             Eltwise{EltwiseAlg::relu, 0.0F, 0.0F}}};
  if (dst != DataType::f32) append_fake_quantize(chain, {0.0F}, {2.55F}, {0.0F}, {2.55F}, 256);
  return chain;
}

TEST(ComposeMemo, AHitReturnsWhatComposeReturns) {
  ComposeMemo memo;
  const std::vector<PostOpChain> chains{
      layer_chain(0.5F, 0.0F, DataType::f32), layer_chain(0.5F, 0.0F, DataType::u8),
      layer_chain(0.5F, -0.0F, DataType::u8), layer_chain(0.5F, 0x1p-149F, DataType::u8),
      layer_chain(-0.0F, 0.0F, DataType::f32), layer_chain(0.0F, 0.0F, DataType::f32),
      // A chain compose() refuses (a round with nothing to round onto): the refusal is kept too.
      PostOpChain{1, DataType::f32, {Eltwise{EltwiseAlg::mish, 0.0F, 0.0F}, Round{}}}};
  for (int pass = 0; pass < 2; ++pass) {
    for (std::size_t i = 0; i < chains.size(); ++i) {
      expect_same(memo.compose(chains[i]), compose(chains[i]),
                  "chain " + std::to_string(i) + " pass " + std::to_string(pass));
    }
  }
  EXPECT_EQ(memo.misses(), chains.size());
  EXPECT_EQ(memo.hits(), chains.size());
}

TEST(ComposeMemo, OptionsArePartOfTheKey) {
  ComposeMemo memo;
  const PostOpChain chain = layer_chain(0.5F, 0.0F, DataType::u8);
  ComposeOptions other;
  other.fixed_point_eta = kDefaultFixedPointEta / 2;
  memo.compose(chain);
  memo.compose(chain, other);
  other.allow_residual_round_drop = true;
  memo.compose(chain, other);
  EXPECT_EQ(memo.misses(), 3U);
  EXPECT_EQ(memo.hits(), 0U);
}

TEST(ComposeMemo, ThreadsShareOneMemo) {
  ComposeMemo memo;
  std::vector<PostOpChain> chains;
  for (int i = 0; i < 16; ++i) {
    chains.push_back(layer_chain(0.5F + 0.01F * static_cast<float>(i), 0.0F, DataType::u8));
  }
  std::vector<std::thread> threads;
  std::vector<std::vector<ComposeResult>> got(4);
  for (std::size_t t = 0; t < got.size(); ++t) {
    threads.emplace_back([&, t] {
      for (const PostOpChain& c : chains) got[t].push_back(memo.compose(c));
    });
  }
  for (std::thread& t : threads) t.join();
  for (std::size_t t = 0; t < got.size(); ++t) {
    for (std::size_t i = 0; i < chains.size(); ++i) {
      expect_same(got[t][i], compose(chains[i]), "thread " + std::to_string(t));
    }
  }
  EXPECT_EQ(memo.hits() + memo.misses(), got.size() * chains.size());
  EXPECT_GE(memo.misses(), chains.size());
}

}  // namespace
}  // namespace qfuse::composer
