// composer/tie_hazard: chains whose intermediate rounding meets exact .5 ties
// that the fused f32 arithmetic cannot reproduce are refused; chains whose
// ties f32 computes exactly (power-of-two scales) still fuse, and then match
// the step-by-step evaluation on every tie (oneDNN against the reference).

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "composer/composer.hpp"
#include "composer/tie_hazard.hpp"
#include "tests/composer/reference.hpp"

namespace qfuse::composer {
namespace {

TEST(TieHazard, CoarseGridTieAfterAFinerGridIsRefused) {
  // The 16-level grid on [-2.5, 3.5] holds 3.5, the tie of the 2-level
  // FakeQuantize on [0, 7]: unfused rounds it to 0, the folded f32 constants
  // put it at 0.50000003, and rounding it up gives 7.
  PostOpChain chain;
  chain.channels = 1;
  chain.dst_type = DataType::u8;
  append_fake_quantize(chain, {-2.5f}, {3.5f}, {-2.5f}, {3.5f}, 16);
  append_fake_quantize(chain, {0.0f}, {7.0f}, {0.0f}, {7.0f}, 2);
  const ComposeResult r = compose(chain);
  ASSERT_FALSE(r.fused());
  EXPECT_NE(r.reason.find("meets a .5 tie"), std::string::npos) << r.reason;
  EXPECT_NE(r.reason.find("from code 15"), std::string::npos) << r.reason;
  EXPECT_NE(r.reason.find("by 7 codes"), std::string::npos) << r.reason;
}

TEST(TieHazard, NoTiesNoRefusal) {
  // acc / 3 rounded, then 3x: a scale of 1/3 puts no accumulator on a tie,
  // so the gain after the rounding does not matter: this fuses.
  PostOpChain chain;
  chain.channels = 1;
  chain.dst_type = DataType::s8;
  chain.steps.push_back(Scale{{1.0f / 3.0f}});
  chain.steps.push_back(Round{});
  chain.steps.push_back(Scale{{3.0f}});
  EXPECT_TRUE(compose(chain).fused());
  EXPECT_FALSE(rounding_tie_hazard(*compose(chain).plan));
}

TEST(TieHazard, ExactTiesWithPowerOfTwoScalesStillFuseAndMatch) {
  // acc * 0.5 puts every odd accumulator on a tie; 4x after the rounding
  // moves the output by 4 codes per step. f32 computes these ties exactly,
  // so the fused primitive rounds them half to even like the chain.
  PostOpChain chain;
  chain.channels = 2;
  chain.dst_type = DataType::s8;
  chain.steps.push_back(Scale{{0.5f}});
  chain.steps.push_back(Round{});
  chain.steps.push_back(Scale{{4.0f}});
  const ComposeResult r = compose(chain);
  ASSERT_TRUE(r.fused()) << r.reason;
  testing::CaseData d;
  d.pixels = 8;
  d.channels = 2;
  for (int i = 0; i < 16; ++i) d.acc.push_back(2 * i - 15);  // odd: every one a tie
  d.residual.assign(16, 0.0f);
  const std::vector<float> fused = testing::run_fused(*r.plan, d, testing::Anchor::inner_product);
  const testing::Reference ref = testing::evaluate_reference(chain, d);
  ASSERT_EQ(fused.size(), ref.values.size());
  for (std::size_t i = 0; i < fused.size(); ++i) {
    EXPECT_EQ(fused[i], ref.values[i]) << "acc " << d.acc[i];
  }
}

TEST(TieHazard, ScaledTiesF32CannotHoldAreRefused) {
  // The same with 0.1: acc * 0.1 is a tie for every acc ending in 5 in exact
  // arithmetic, and neither path computes it so: the chain (in double, with
  // 0.1f = 0.100000001490116) sees 0.50000000745 and rounds up, the f32
  // primitive sees exactly 0.5 and rounds to even, 4 codes apart.
  PostOpChain chain;
  chain.channels = 1;
  chain.dst_type = DataType::s8;
  chain.steps.push_back(Scale{{0.1f}});
  chain.steps.push_back(Round{});
  chain.steps.push_back(Scale{{4.0f}});
  const ComposeResult r = compose(chain);
  EXPECT_FALSE(r.fused());
  EXPECT_NE(r.reason.find("rounding step 1 of 1"), std::string::npos) << r.reason;
}


TEST(TieHazard, TieAtASaturatedLevelIsRefused) {
  // Found by the fuzz target. Every accumulator saturates the 2-level
  // FakeQuantize on [-6, -5.5]; times -1.865 both levels saturate the 16-level
  // one at 3.5, which is the tie of the 2-level FakeQuantize on [0, 7]: the
  // chain gives 0 for every input. Folded, the saturated value is
  // 0.50000006. Moving that clamp after the rounding would round the bound
  // itself to 1 (output 7 for every input); kept before it, the tie check
  // sees the bound and refuses (at the first rounding point whose move
  // reaches it).
  PostOpChain chain;
  chain.channels = 1;
  chain.dst_type = DataType::s8;
  append_fake_quantize(chain, {-6.0f}, {-5.5f}, {-6.0f}, {-5.5f}, 2);
  chain.steps.push_back(Scale{{-1.8652017f}});
  append_fake_quantize(chain, {-2.5f}, {3.5f}, {-2.5f}, {3.5f}, 16);
  append_fake_quantize(chain, {0.0f}, {7.0f}, {0.0f}, {7.0f}, 2);
  Sum sum;
  sum.scale = 0.25f;
  sum.data_type = DataType::s8;
  chain.steps.push_back(sum);
  chain.steps.push_back(Clip{{-28.5f}, {-14.5f}});
  const ComposeResult r = compose(chain);
  ASSERT_FALSE(r.fused());
  EXPECT_NE(r.reason.find("meets a .5 tie"), std::string::npos) << r.reason;
}

TEST(TieHazard, TieBeyondTheCheckedCodesIsRefused) {
  // The second rounding reads codes / 5000: its first tie is at code 2500,
  // beyond the codes checked for an unclamped rounding ([-2048, 2048]), and
  // the output (4x, saturated only at the s8 limits) is not saturated there:
  // the chain cannot be shown free of ties moving the output by 4 codes.
  PostOpChain chain;
  chain.channels = 1;
  chain.dst_type = DataType::s8;
  chain.steps.push_back(Round{});
  chain.steps.push_back(Scale{{1.0f / 5000.0f}});
  chain.steps.push_back(Round{});
  chain.steps.push_back(Scale{{4.0f}});
  const ComposeResult r = compose(chain);
  ASSERT_FALSE(r.fused());
  EXPECT_NE(r.reason.find("rounding step 2 of 2 can meet a .5 tie"), std::string::npos) << r.reason;
  EXPECT_NE(r.reason.find("too many to check"), std::string::npos) << r.reason;

  // With a clamp before the second rounding the codes are few, none on a
  // tie: it fuses.
  PostOpChain clamped = chain;
  clamped.steps.insert(clamped.steps.begin() + 1, Clip{{-2000.0f}, {2000.0f}});
  EXPECT_TRUE(compose(clamped).fused()) << compose(clamped).reason;
}

TEST(TieHazard, TieAfterAnF32TensorIsNotEnumerated) {
  // A binary add of an f32 tensor between two rounding points: its values
  // cannot be enumerated, and a tie after it moves the output by 3 codes.
  PostOpChain chain;
  chain.channels = 1;
  chain.dst_type = DataType::u8;
  chain.steps.push_back(Round{});
  chain.steps.push_back(Clip{{0.0f}, {10.0f}});
  Binary add;
  add.alg = BinaryAlg::add;
  add.broadcast = Broadcast::full;
  add.input = 0;
  chain.steps.push_back(add);
  chain.steps.push_back(Round{});
  chain.steps.push_back(Scale{{3.0f}});
  const ComposeResult r = compose(chain);
  ASSERT_FALSE(r.fused());
  EXPECT_NE(r.reason.find("a tensor read before it"), std::string::npos) << r.reason;
}

}  // namespace
}  // namespace qfuse::composer

namespace qfuse::composer {
namespace {

// The per-channel answers are cached by what each channel reads, and a
// cached reason is renamed for the plan that asks: the same channels in
// another order name the lowest refused channel of that order, and asking
// again names the same one as the first time.
TEST(TieHazard, ACachedAnswerNamesTheChannelOfThePlanThatAsks) {
  const auto reason_for = [](const std::vector<float>& scales) {
    PostOpChain chain;
    chain.channels = static_cast<int>(scales.size());
    chain.dst_type = DataType::s8;
    // Power-of-two scales tie exactly and fuse; 0.1 and 0.3 make ties f32
    // cannot hold, which are refused.
    chain.steps.push_back(Scale{scales});
    chain.steps.push_back(Round{});
    chain.steps.push_back(Scale{{4.0f}});
    const ComposeResult r = compose(chain);
    EXPECT_FALSE(r.fused());
    return r.reason;
  };
  const std::string first = reason_for({0.5f, 0.25f, 0.1f, 0.3f, 0.5f, 0.1f});
  EXPECT_NE(first.find("channel 2"), std::string::npos) << first;
  const std::string moved = reason_for({0.5f, 0.25f, 0.5f, 0.25f, 0.3f, 0.1f});
  EXPECT_NE(moved.find("channel 4"), std::string::npos) << moved;
  EXPECT_EQ(moved.find("channel 2"), std::string::npos) << moved;
  const std::string again = reason_for({0.5f, 0.25f, 0.1f, 0.3f, 0.5f, 0.1f});
  EXPECT_NE(again.find("channel 2"), std::string::npos) << again;
}

}  // namespace
}  // namespace qfuse::composer

namespace qfuse::composer {
namespace {

// The first rounding point's search visits only the accumulators beside a
// tie when everything before it is affine. A clip far outside any value is
// the identity but not affine, so the same plan with one first is searched
// accumulator by accumulator: both must find the same hazards, with the same
// reasons, over random and tie-prone scales.
TEST(TieHazard, AffinePrefixSearchFindsWhatTheFullSearchFinds) {
  std::mt19937 rng(2024);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  const std::vector<float> tie_prone{0.1f, 0.05f, 0.5f, 0.2f, 0.3f, 1.5f, 0.125f, 0.01f, 2.5f};
  int refused = 0;
  for (int trial = 0; trial < 1500; ++trial) {
    PostOpsPlan plan;
    plan.channels = 1;
    plan.dst_type = trial % 2 ? DataType::u8 : DataType::s8;
    const float s = trial % 3 == 0 ? tie_prone[static_cast<std::size_t>(trial / 3) % tie_prone.size()]
                                   : std::exp2(-12.0f + 13.0f * uniform(rng));
    plan.output_scales = {s};
    const float shift = trial % 4 == 0 ? 0.5f * std::floor(8.0f * uniform(rng))
                                       : std::floor(200.0f * uniform(rng)) - 100.0f;
    plan.post_ops.push_back(EltwisePostOp{EltwiseAlg::linear, 1.0f, 1.0f, shift});
    if (trial % 5 == 0) {
      plan.post_ops.push_back(BinaryPostOp{BinaryAlg::mul, Broadcast::per_channel,
                                           ConstantTensor{{0.5f + uniform(rng)}}});
    }
    plan.post_ops.push_back(EltwisePostOp{EltwiseAlg::round, 1.0f + 7.0f * uniform(rng), 0.0f, 0.0f});
    if (trial % 2 == 0) {
      plan.post_ops.push_back(EltwisePostOp{EltwiseAlg::hardswish, 1.0f + 20.0f * uniform(rng), 0.0f, 0.0f});
    }
    PostOpsPlan full = plan;
    full.post_ops.insert(full.post_ops.begin(), EltwisePostOp{EltwiseAlg::clip, 1.0f, -1e30f, 1e30f});
    const auto fast = rounding_tie_hazard(plan);
    const auto slow = rounding_tie_hazard(full);
    ASSERT_EQ(fast.has_value(), slow.has_value())
        << "trial " << trial << ": " << describe(plan) << "\n" << fast.value_or("") << slow.value_or("");
    if (fast) {
      EXPECT_EQ(*fast, *slow) << "trial " << trial;
      ++refused;
    }
  }
  // Both outcomes occur (a test of nothing otherwise).
  EXPECT_GT(refused, 20);
  EXPECT_LT(refused, 1480);
}

// A later rounding point fed unbounded codes is swept tie by tie, and the
// sweep is shared by the channels whose ops from that rounding on agree,
// whatever their scales before it. A per-channel multiply after it tells
// them apart: by 3 a tie moves the output 3 codes, by 0.5 at most one.
TEST(TieHazard, ChannelsThatDifferOnlyAfterALaterRoundingAreSweptApart) {
  for (const std::size_t hazardous : {std::size_t{0}, std::size_t{2}}) {
    PostOpsPlan plan;
    plan.channels = 4;
    plan.dst_type = DataType::u8;
    plan.output_scales = {0.011f, 0.013f, 0.017f, 0.019f};
    std::vector<float> multiplier(4, 0.5f);
    multiplier[hazardous] = 3.0f;
    plan.post_ops.push_back(EltwisePostOp{EltwiseAlg::round, 1.0f, 0.0f, 0.0f});
    // Small enough that the output is not yet saturated at the codes'
    // window's ends: the codes are not enumerated but swept.
    plan.post_ops.push_back(EltwisePostOp{EltwiseAlg::linear, 1.0f, 0.01f, 0.0f});
    plan.post_ops.push_back(EltwisePostOp{EltwiseAlg::round, 1.0f, 0.0f, 0.0f});
    plan.post_ops.push_back(
        BinaryPostOp{BinaryAlg::mul, Broadcast::per_channel, ConstantTensor{multiplier}});
    const auto found = rounding_tie_hazard(plan);
    ASSERT_TRUE(found.has_value()) << describe(plan);
    std::string channel = "channel ";  // built by appending (GCC 12's -Wrestrict at -O3)
    channel += std::to_string(hazardous);
    channel += ")";
    EXPECT_NE(found->find(channel), std::string::npos) << *found;
    EXPECT_NE(found->find("moves the output by 3 codes"), std::string::npos) << *found;
    // Without the multiply by 3 no channel has a hazard.
    std::get<ConstantTensor>(std::get<BinaryPostOp>(plan.post_ops[3]).tensor).values[hazardous] =
        0.5f;
    EXPECT_EQ(rounding_tie_hazard(plan), std::nullopt) << describe(plan);
  }
}

// The channels are checked on several threads; the reason must still be the
// first hazardous channel's, as checking them one by one in order finds it.
TEST(TieHazard, ManyChannelsReportTheFirstHazardousOne) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  const std::vector<float> tie_prone{0.1f, 0.05f, 0.5f, 0.2f, 0.3f, 1.5f, 0.125f, 0.01f, 2.5f};
  int checked = 0, late = 0;
  for (int trial = 0; trial < 60; ++trial) {
    PostOpsPlan plan;
    plan.channels = 48;
    plan.dst_type = trial % 2 ? DataType::u8 : DataType::s8;
    for (int c = 0; c < plan.channels; ++c) {
      plan.output_scales.push_back(uniform(rng) < 0.1f
                                       ? tie_prone[static_cast<std::size_t>(c) % tie_prone.size()]
                                       : std::exp2(-12.0f + 13.0f * uniform(rng)));
    }
    const float beta = 0.5f * std::floor(8.0f * uniform(rng));
    const EltwisePostOp shift{EltwiseAlg::linear, 1.0f, 1.0f, beta};
    const EltwisePostOp round{EltwiseAlg::round, 1.0f + 7.0f * uniform(rng), 0.0f, 0.0f};
    const EltwisePostOp hardswish{EltwiseAlg::hardswish, 1.0f + 20.0f * uniform(rng), 0.0f, 0.0f};
    plan.post_ops.emplace_back(shift);
    plan.post_ops.emplace_back(round);
    plan.post_ops.emplace_back(hardswish);
    std::optional<int> expected;
    for (int c = 0; c < plan.channels && !expected; ++c) {
      PostOpsPlan one = plan;
      one.channels = 1;
      one.output_scales = {plan.output_scales[static_cast<std::size_t>(c)]};
      if (rounding_tie_hazard(one)) expected = c;
    }
    const auto found = rounding_tie_hazard(plan);
    ASSERT_EQ(found.has_value(), expected.has_value()) << "trial " << trial;
    if (!found) continue;
    ++checked;
    late += *expected > 0 ? 1 : 0;
    std::string channel = "channel ";  // built by appending (GCC 12's -Wrestrict at -O3)
    channel += std::to_string(*expected);
    channel += ")";
    EXPECT_NE(found->find(channel), std::string::npos)
        << "trial " << trial << ": expected channel " << *expected << ": " << *found;
  }
  // Hazards are found, and some past the first channel (a test of nothing otherwise).
  EXPECT_GT(checked, 5);
  EXPECT_GT(late, 3);
}

}  // namespace
}  // namespace qfuse::composer
