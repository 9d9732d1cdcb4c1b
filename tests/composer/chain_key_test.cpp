// chain_key: equal chains and options give one key; a change to any field,
// down to the sign of a zero or one ulp of a denormal, gives another.
#include "composer/chain_key.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace qfuse::composer {
namespace {

// A chain with one step of every kind.
PostOpChain every_step() {
  PostOpChain chain{
      2,
      DataType::u8,
      {Scale{{0.5F, 0.25F}}, Shift{{0.0F, 1.0F}}, Eltwise{EltwiseAlg::swish, 1.0F, 0.0F},
       Sum{1, 0.5F, DataType::u8}, Binary{BinaryAlg::mul, 2, Broadcast::per_channel, DataType::f32},
       Round{}, Clip{{0.0F}, {6.0F}}}};
  append_fake_quantize(chain, {0.0F}, {2.55F}, {0.0F}, {2.55F}, 256);
  return chain;
}

TEST(ChainKey, EqualChainsAndOptionsGiveOneKey) {
  EXPECT_EQ(chain_key(every_step()), chain_key(every_step()));
  EXPECT_EQ(chain_key(PostOpChain{}), chain_key(PostOpChain{}));
}

TEST(ChainKey, EveryFieldIsPartOfTheKey) {
  const std::string base = chain_key(every_step());
  std::vector<std::pair<std::string, PostOpChain>> changed;
  const auto with = [&](const std::string& what, auto change) {
    PostOpChain c = every_step();
    change(c);
    changed.emplace_back(what, c);
  };
  with("channels", [](PostOpChain& c) { c.channels = 3; });
  with("dst_type", [](PostOpChain& c) { c.dst_type = DataType::s8; });
  with("anchor", [](PostOpChain& c) { c.anchor = AnchorKind::inner_product; });
  with("a step dropped", [](PostOpChain& c) { c.steps.pop_back(); });
  with("scale -> shift", [](PostOpChain& c) { c.steps[0] = Shift{{0.5F, 0.25F}}; });
  with("scale value", [](PostOpChain& c) { std::get<Scale>(c.steps[0]).values[1] = 0.2500001F; });
  with("-0.0 for 0.0", [](PostOpChain& c) { std::get<Shift>(c.steps[1]).values[0] = -0.0F; });
  with("a denormal for 0.0",
       [](PostOpChain& c) { std::get<Shift>(c.steps[1]).values[0] = 0x1p-149F; });
  with("one value fewer", [](PostOpChain& c) { std::get<Shift>(c.steps[1]).values.pop_back(); });
  with("eltwise alg",
       [](PostOpChain& c) { std::get<Eltwise>(c.steps[2]).alg = EltwiseAlg::gelu_erf; });
  with("eltwise alpha", [](PostOpChain& c) { std::get<Eltwise>(c.steps[2]).alpha = 2.0F; });
  with("eltwise beta", [](PostOpChain& c) { std::get<Eltwise>(c.steps[2]).beta = 1.0F; });
  with("sum input", [](PostOpChain& c) { std::get<Sum>(c.steps[3]).input = 0; });
  with("sum scale", [](PostOpChain& c) { std::get<Sum>(c.steps[3]).scale = 1.0F; });
  with("sum type", [](PostOpChain& c) { std::get<Sum>(c.steps[3]).data_type = DataType::s8; });
  with("binary alg", [](PostOpChain& c) { std::get<Binary>(c.steps[4]).alg = BinaryAlg::add; });
  with("binary input", [](PostOpChain& c) { std::get<Binary>(c.steps[4]).input = 1; });
  with("binary broadcast",
       [](PostOpChain& c) { std::get<Binary>(c.steps[4]).broadcast = Broadcast::full; });
  with("binary type",
       [](PostOpChain& c) { std::get<Binary>(c.steps[4]).data_type = DataType::u8; });
  with("clip low", [](PostOpChain& c) { std::get<Clip>(c.steps[6]).lo[0] = -1.0F; });
  with("clip high", [](PostOpChain& c) { std::get<Clip>(c.steps[6]).hi[0] = 5.0F; });
  for (const auto& [what, chain] : changed) {
    EXPECT_NE(chain_key(chain), base) << what;
  }
  // The FakeQuantize's fields, whatever steps append_fake_quantize wrote.
  PostOpChain fq_levels{2, DataType::u8, {}};
  append_fake_quantize(fq_levels, {0.0F}, {2.55F}, {0.0F}, {2.55F}, 255);
  PostOpChain fq_range{2, DataType::u8, {}};
  append_fake_quantize(fq_range, {0.0F}, {2.56F}, {0.0F}, {2.55F}, 256);
  PostOpChain fq{2, DataType::u8, {}};
  append_fake_quantize(fq, {0.0F}, {2.55F}, {0.0F}, {2.55F}, 256);
  EXPECT_NE(chain_key(fq_levels), chain_key(fq));
  EXPECT_NE(chain_key(fq_range), chain_key(fq));
  // Keys are not prefixes of each other's fields: [1, 2] + [3] is not [1] + [2, 3].
  EXPECT_NE(chain_key(PostOpChain{1, DataType::f32, {Scale{{1.0F, 2.0F}}, Scale{{3.0F}}}}),
            chain_key(PostOpChain{1, DataType::f32, {Scale{{1.0F}}, Scale{{2.0F, 3.0F}}}}));
}

TEST(ChainKey, OptionsArePartOfTheKey) {
  const PostOpChain chain = every_step();
  ComposeOptions other;
  other.fixed_point_eta = kDefaultFixedPointEta / 2;
  EXPECT_NE(chain_key(chain, other), chain_key(chain));
  other = {};
  other.allow_residual_round_drop = true;
  EXPECT_NE(chain_key(chain, other), chain_key(chain));
}

}  // namespace
}  // namespace qfuse::composer
