// Structure: for each rule, a chain where it applies and the exact plan
// expected (values worked out by hand), plus named cases where it must not.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "composer/composer.hpp"

namespace qfuse::composer {
namespace {

PostOpChain make_chain(int channels, DataType dst, std::vector<Step> steps) {
  return PostOpChain{channels, dst, std::move(steps)};
}

PostOpsPlan fuse(const PostOpChain& chain, const ComposeOptions& options = {}) {
  ComposeResult result = compose(chain, options);
  EXPECT_TRUE(result.fused()) << result.reason;
  return result.plan.value_or(PostOpsPlan{});
}

bool applied(const PostOpsPlan& plan, const std::string& rule) {
  return std::any_of(plan.applied_rules.begin(), plan.applied_rules.end(),
                     [&](const AppliedRule& r) { return r.rule == rule; });
}

using Floats = std::vector<float>;

TEST(ComposeRules, FakeQuantizeIsCropAffineRoundAffine) {
  // il 0, ih 3, ol 0, oh 6, 4 levels: Si = 1, Zi = 0, So = 2.
  PostOpChain chain = make_chain(1, DataType::f32, {});
  append_fake_quantize(chain, {0.0F}, {3.0F}, {0.0F}, {6.0F}, 4);
  const PostOpsPlan plan = fuse(chain);
  EXPECT_TRUE(applied(plan, "fake_quantize_is_crop_affine_round_affine"));
  EXPECT_TRUE(plan.output_scales.empty());
  // round(clip(x, 0, 3)) * 2 == clip(round(x) * 2, 0, 6)
  EXPECT_EQ(describe(plan.post_ops), "eltwise_round * 2; eltwise_clip(0, 6)");
}

// A Q/DQ pair inside a chain: the zero point cancels, one round and one clip
// remain (x / S as the output scale 1 / S).
TEST(ComposeRules, QuantizeThenItsDequantizeIsAClippedRound) {
  const PostOpsPlan plan = fuse(make_chain(
      1, DataType::f32, {Quantize{{0.5F}, {37.0F}, 0.0F, 255.0F}, Shift{{-37.0F}}, Scale{{0.5F}}}));
  EXPECT_TRUE(applied(plan, "quantize_then_dequantize_is_clipped_round"));
  EXPECT_FALSE(plan.dst_zero_point.has_value());
  EXPECT_EQ(plan.output_scales, Floats{2.0F});
  EXPECT_EQ(describe(plan.post_ops), "eltwise_round * 0.5; eltwise_clip(-18.5, 109)");
}

// The destination's Quantize at the chain's first rounding point: the store
// rounds and the zero point is the destination's; after another rounding
// point (exact codes) ONNX's round stays before the zero point.
TEST(ComposeRules, FinalQuantizeIsAScaledStoreOnlyAtTheFirstRoundingPoint) {
  const PostOpsPlan first =
      fuse(make_chain(1, DataType::u8, {Quantize{{0.5F}, {37.0F}, 0.0F, 255.0F}}));
  EXPECT_TRUE(applied(first, "final_quantize_is_scaled_store"));
  EXPECT_EQ(first.dst_zero_point, std::optional<std::int32_t>{37});
  EXPECT_TRUE(first.post_ops.empty()) << describe(first.post_ops);

  const PostOpsPlan later = fuse(make_chain(
      1, DataType::u8, {Round{}, Quantize{{0.5F}, {37.0F}, 0.0F, 255.0F}}));
  EXPECT_FALSE(applied(later, "final_quantize_is_scaled_store"));
  EXPECT_TRUE(applied(later, "quantize_is_scale_round_shift_clip"));
  EXPECT_EQ(later.dst_zero_point, std::optional<std::int32_t>{37});
  // The first round, then ONNX's x / S rounded before Z is added.
  const std::string ops = describe(later.post_ops);
  EXPECT_EQ(ops.rfind("eltwise_round"), ops.size() - std::string("eltwise_round").size()) << ops;
  EXPECT_NE(ops.find("eltwise_round"), ops.rfind("eltwise_round")) << ops;
}

TEST(ComposeCannotFuse, QuantizeWithAFractionalZeroPointOrAZeroScale) {
  for (const Quantize& q : {Quantize{{0.5F}, {3.5F}, 0.0F, 255.0F}, Quantize{{0.0F}, {3.0F}, 0.0F, 255.0F},
                            Quantize{{0.5F}, {3.0F}, 10.0F, 2.0F}}) {
    const ComposeResult r = compose(make_chain(1, DataType::u8, {q}));
    EXPECT_FALSE(r.fused());
    EXPECT_NE(r.reason.find("Quantize"), std::string::npos) << r.reason;
  }
}

TEST(ComposeRules, LinearIsScaleThenShift) {
  const PostOpsPlan plan =
      fuse(make_chain(4, DataType::f32, {Eltwise{EltwiseAlg::linear, 2.0F, 3.0F}}));
  EXPECT_TRUE(applied(plan, "linear_is_scale_then_shift"));
  EXPECT_EQ(plan.output_scales, Floats{2.0F});
  EXPECT_EQ(describe(plan.post_ops), "eltwise_linear(1, 3)");
}

TEST(ComposeRules, EltwiseClipIsClip) {
  const PostOpsPlan plan = fuse(
      make_chain(4, DataType::s8, {Scale{{0.5F}}, Eltwise{EltwiseAlg::clip, -1.0F, 1.0F}}));
  EXPECT_TRUE(applied(plan, "eltwise_clip_is_clip"));
  EXPECT_EQ(plan.output_scales, Floats{0.5F});
  EXPECT_EQ(describe(plan.post_ops), "eltwise_clip(-1, 1)");
}

TEST(ComposeRules, EltwiseRoundIsRound) {
  const PostOpsPlan plan =
      fuse(make_chain(4, DataType::f32, {Scale{{0.5F}}, Eltwise{EltwiseAlg::round}}));
  EXPECT_TRUE(applied(plan, "eltwise_round_is_round"));
  EXPECT_EQ(describe(plan.post_ops), "eltwise_round");
}

TEST(ComposeRules, HsigmoidIsClippedAffine) {
  const PostOpsPlan plan = fuse(make_chain(4, DataType::f32, {Eltwise{EltwiseAlg::hsigmoid}}));
  EXPECT_TRUE(applied(plan, "hsigmoid_is_clipped_affine"));
  EXPECT_EQ(plan.output_scales, Floats{1.0F / 6.0F});
  EXPECT_EQ(describe(plan.post_ops), "eltwise_linear(1, 0.5); eltwise_clip(0, 1)");
}

TEST(ComposeRules, UniformChannelsArePerTensor) {
  const PostOpsPlan plan =
      fuse(make_chain(4, DataType::f32, {Scale{{0.5F, 0.5F, 0.5F, 0.5F}}, Eltwise{EltwiseAlg::tanh}}));
  EXPECT_TRUE(applied(plan, "uniform_channels_are_per_tensor"));
  EXPECT_EQ(plan.output_scales, Floats{0.5F});
  EXPECT_EQ(plan.output_scales_mask, ScalesMask::common);
}

TEST(ComposeRules, MultiplyByOneIsIdentity) {
  const PostOpsPlan plan = fuse(make_chain(
      4, DataType::f32, {Scale{{0.5F}}, Eltwise{EltwiseAlg::tanh}, Scale{{1.0F, 1.0F, 1.0F, 1.0F}}}));
  EXPECT_TRUE(applied(plan, "multiply_by_one_is_identity"));
  EXPECT_EQ(plan.output_scales, Floats{0.5F});
  EXPECT_EQ(describe(plan.post_ops), "eltwise_tanh");
}

TEST(ComposeRules, AddOfZeroIsIdentity) {
  const PostOpsPlan plan = fuse(make_chain(
      4, DataType::f32, {Shift{{0.0F, 0.0F, 0.0F, 0.0F}}, Eltwise{EltwiseAlg::tanh}, Shift{{0.0F}}}));
  EXPECT_TRUE(applied(plan, "add_of_zero_is_identity"));
  EXPECT_TRUE(plan.output_scales.empty());
  EXPECT_EQ(describe(plan.post_ops), "eltwise_tanh");
}

TEST(ComposeRules, SaturationCoversFinalClip) {
  const PostOpsPlan plan =
      fuse(make_chain(4, DataType::s8, {Scale{{0.5F}}, Clip{{-200.0F}, {300.0F}}}));
  EXPECT_TRUE(applied(plan, "saturation_covers_final_clip"));
  EXPECT_EQ(plan.output_scales, Floats{0.5F});
  EXPECT_TRUE(plan.post_ops.empty());
}

TEST(ComposeRules, FinalClipKeptWhenNarrowerThanType) {
  const PostOpsPlan plan =
      fuse(make_chain(4, DataType::u8, {Scale{{0.5F}}, Clip{{0.0F}, {15.0F}}}));
  EXPECT_FALSE(applied(plan, "saturation_covers_final_clip"));
  EXPECT_EQ(describe(plan.post_ops), "eltwise_clip(0, 15)");
}

// The store rounds half to even after clamping to the type, so a clip whose
// bounds round onto the type's ends changes nothing. Each case also checks
// the claim itself on a fine grid of inputs: the dropped clip never changes
// a stored value, and each kept one changes some.
TEST(ComposeRules, SaturationCoversFinalClipWithinHalfAStep) {
  struct Case {
    DataType type;
    float lo, hi;
    bool covered;
  };
  const auto store = [](DataType t, float v) {
    const float lo = t == DataType::s8 ? -128.0F : 0.0F, hi = t == DataType::s8 ? 127.0F : 255.0F;
    return std::nearbyint(std::clamp(v, lo, hi));  // round half to even
  };
  for (const Case& c : {Case{DataType::u8, 7.6293945e-06F, 255.0F, true},
                        Case{DataType::u8, 0.0F, 254.99998F, true},
                        Case{DataType::u8, 0.5F, 254.51F, true},
                        Case{DataType::s8, -127.5F, 126.6F, true},
                        Case{DataType::u8, 0.51F, 255.0F, false},
                        Case{DataType::u8, 0.0F, 254.5F, false},
                        Case{DataType::s8, -127.4F, 127.0F, false},
                        Case{DataType::s8, -128.0F, 126.5F, false}}) {
    const PostOpsPlan plan = fuse(make_chain(4, c.type, {Scale{{0.5F}}, Clip{{c.lo}, {c.hi}}}));
    EXPECT_EQ(applied(plan, "saturation_covers_final_clip"), c.covered) << c.lo << ", " << c.hi;
    EXPECT_EQ(plan.post_ops.empty(), c.covered) << describe(plan.post_ops);
    bool changes = false;
    for (int i = -300 * 512; i <= 300 * 512; ++i) {
      const float x = static_cast<float>(i) / 512.0F;
      changes = changes || store(c.type, std::clamp(x, c.lo, c.hi)) != store(c.type, x);
    }
    EXPECT_EQ(changes, !c.covered) << c.lo << ", " << c.hi;
  }
}

TEST(ComposeRules, FinalClipKeptForF32Destination) {
  const PostOpsPlan plan =
      fuse(make_chain(4, DataType::f32, {Scale{{0.5F}}, Clip{{-200.0F}, {300.0F}}}));
  EXPECT_EQ(describe(plan.post_ops), "eltwise_clip(-200, 300)");
}

TEST(ComposeRules, SaturationRoundsFinalRound) {
  const PostOpsPlan plan = fuse(make_chain(4, DataType::u8, {Scale{{0.5F}}, Round{}}));
  EXPECT_TRUE(applied(plan, "saturation_rounds_final_round"));
  EXPECT_EQ(plan.output_scales, Floats{0.5F});
  EXPECT_TRUE(plan.post_ops.empty());
}

TEST(ComposeRules, RoundKeptForF32Destination) {
  const PostOpsPlan plan = fuse(make_chain(4, DataType::f32, {Scale{{0.5F}}, Round{}}));
  EXPECT_EQ(describe(plan.post_ops), "eltwise_round");
}

// A residual block in the u8 domain: FQ -> sum -> FQ, all with Si = So = 0.5.
PostOpChain residual_block() {
  PostOpChain chain = make_chain(4, DataType::u8, {Scale{{0.25F}}});
  append_fake_quantize(chain, {0.0F}, {127.5F}, {0.0F}, {127.5F}, 256);
  chain.steps.emplace_back(Sum{0, 0.5F, DataType::u8});
  append_fake_quantize(chain, {0.0F}, {127.5F}, {0.0F}, {255.0F}, 256);
  return chain;
}

TEST(ComposeRules, ResidualRoundKeptByDefault) {
  const PostOpsPlan plan = fuse(residual_block());
  EXPECT_FALSE(applied(plan, "residual_round_is_dropped"));
  const std::string ops = describe(plan.post_ops);
  EXPECT_NE(ops.find("eltwise_round"), std::string::npos) << ops;
}

TEST(ComposeRules, ResidualRoundDroppedWhenAllowed) {
  ComposeOptions options;
  options.allow_residual_round_drop = true;
  const PostOpsPlan plan = fuse(residual_block(), options);
  EXPECT_TRUE(applied(plan, "residual_round_is_dropped"));
  // Without the first round: x*0.25 -> clip(x*2, 0, 255)*0.5 -> + 0.5 r -> *2
  // -> u8 store. The second FQ's 2 moves in front of the sum (sum scale
  // 0.5*2 = 1) and across the clip, meeting 0.25*2*0.5*2 = 0.5 at the front.
  EXPECT_EQ(plan.output_scales, Floats{0.5F});
  EXPECT_EQ(describe(plan.post_ops), "eltwise_clip(0, 255); sum(input 0, 1, u8)");
}

TEST(ComposeRules, AdjacentScalesFold) {
  // (x * A + B) * C == x * (A * C) + B * C, per channel.
  const PostOpsPlan plan = fuse(make_chain(
      4, DataType::f32,
      {Scale{{1.0F, 2.0F, 3.0F, 4.0F}}, Shift{{3.0F}}, Scale{{0.5F, 0.25F, 2.0F, 1.0F}}}));
  EXPECT_TRUE(applied(plan, "adjacent_scales_fold"));
  EXPECT_TRUE(applied(plan, "scale_moves_before_shift"));
  EXPECT_EQ(plan.output_scales, (Floats{0.5F, 0.5F, 6.0F, 4.0F}));
  EXPECT_EQ(plan.output_scales_mask, ScalesMask::per_channel);
  EXPECT_EQ(describe(plan.post_ops), "binary_add(per_channel, [1.5, 0.75, 6, 3])");
}

TEST(ComposeRules, AdjacentShiftsFold) {
  const PostOpsPlan plan = fuse(
      make_chain(4, DataType::f32, {Eltwise{EltwiseAlg::tanh}, Shift{{1.0F}}, Shift{{2.0F}}}));
  EXPECT_TRUE(applied(plan, "adjacent_shifts_fold"));
  EXPECT_EQ(describe(plan.post_ops), "eltwise_tanh; eltwise_linear(1, 3)");
}

TEST(ComposeRules, ScaleMovesBeforeShift) {
  const PostOpsPlan plan = fuse(make_chain(4, DataType::f32, {Shift{{4.0F}}, Scale{{0.5F}}}));
  EXPECT_TRUE(applied(plan, "scale_moves_before_shift"));
  EXPECT_EQ(plan.output_scales, Floats{0.5F});
  EXPECT_EQ(describe(plan.post_ops), "eltwise_linear(1, 2)");
}

TEST(ComposeRules, PerChannelScaleNotMovedBeforePerTensorShiftMidChain) {
  const PostOpsPlan plan = fuse(make_chain(
      4, DataType::f32,
      {Eltwise{EltwiseAlg::tanh}, Shift{{1.0F}}, Scale{{1.0F, -2.0F, 3.0F, 4.0F}}}));
  EXPECT_FALSE(applied(plan, "scale_moves_before_shift"));
  EXPECT_EQ(describe(plan.post_ops),
            "eltwise_tanh; eltwise_linear(1, 1); binary_mul(per_channel, [1, -2, 3, 4])");
}

TEST(ComposeRules, EvenShiftMovesBeforeRound) {
  const PostOpsPlan plan =
      fuse(make_chain(4, DataType::f32, {Scale{{0.5F}}, Round{}, Shift{{-128.0F}}}));
  EXPECT_TRUE(applied(plan, "even_shift_moves_before_round"));
  EXPECT_EQ(describe(plan.post_ops), "eltwise_linear(1, -128); eltwise_round");
}

TEST(ComposeRules, OddOutputShiftNotFoldedAcrossRound) {
  // round(0.5) + 3 == 3 but round(0.5 + 3) == 4: ties to even break the identity.
  const PostOpsPlan plan =
      fuse(make_chain(4, DataType::f32, {Scale{{0.5F}}, Round{}, Shift{{3.0F}}}));
  EXPECT_FALSE(applied(plan, "even_shift_moves_before_round"));
  EXPECT_EQ(describe(plan.post_ops), "eltwise_round; eltwise_linear(1, 3)");
}

TEST(ComposeRules, AffineMovesBeforeClip) {
  const PostOpsPlan plan = fuse(make_chain(
      4, DataType::f32, {Clip{{0.0F}, {6.0F}}, Scale{{-2.0F}}, Shift{{1.0F}}}));
  EXPECT_TRUE(applied(plan, "affine_moves_before_clip"));
  EXPECT_EQ(plan.output_scales, Floats{-2.0F});
  EXPECT_EQ(describe(plan.post_ops), "eltwise_linear(1, 1); eltwise_clip(-11, 1)");
}

TEST(ComposeRules, PerTensorClipNotMadePerChannel) {
  const PostOpsPlan plan = fuse(make_chain(
      4, DataType::f32,
      {Eltwise{EltwiseAlg::tanh}, Clip{{0.0F}, {6.0F}}, Scale{{1.0F, 2.0F, 3.0F, 4.0F}}}));
  EXPECT_FALSE(applied(plan, "affine_moves_before_clip"));
  EXPECT_EQ(describe(plan.post_ops),
            "eltwise_tanh; eltwise_clip(0, 6); binary_mul(per_channel, [1, 2, 3, 4])");
}

TEST(ComposeRules, ClipMovesAfterRoundMakingPerChannelCropPerTensor) {
  // Per-channel FQ with il = ol = 0, ih = oh = 255 * Si[c]: the crop
  // [0, ih[c]] becomes the per-tensor clip [0, 255] after the round.
  PostOpChain chain = make_chain(4, DataType::f32, {});
  append_fake_quantize(chain, {0.0F}, {2.55F, 5.1F, 1.275F, 25.5F}, {0.0F},
                       {2.55F, 5.1F, 1.275F, 25.5F}, 256);
  const PostOpsPlan plan = fuse(chain);
  EXPECT_TRUE(applied(plan, "clip_moves_after_round"));
  EXPECT_TRUE(applied(plan, "uniform_channels_are_per_tensor"));
  EXPECT_EQ(plan.output_scales, (Floats{100.0F, 50.0F, 200.0F, 10.0F}));
  EXPECT_EQ(describe(plan.post_ops),
            "eltwise_round; eltwise_clip(0, 255); binary_mul(per_channel, [0.01, 0.02, 0.005, 0.1])");
}

TEST(ComposeRules, ScaleMovesBeforeRelu) {
  const PostOpsPlan plan = fuse(make_chain(
      4, DataType::f32, {Scale{{0.5F}}, Eltwise{EltwiseAlg::relu}, Scale{{1.0F, 2.0F, 3.0F, 0.0F}}}));
  EXPECT_TRUE(applied(plan, "scale_moves_before_relu"));
  EXPECT_EQ(plan.output_scales, (Floats{0.5F, 1.0F, 1.5F, 0.0F}));
  EXPECT_EQ(describe(plan.post_ops), "eltwise_relu");
}

TEST(ComposeRules, RepeatedReluIsOneRelu) {
  const PostOpsPlan plan = fuse(make_chain(
      4, DataType::f32,
      {Eltwise{EltwiseAlg::relu}, Eltwise{EltwiseAlg::relu}, Eltwise{EltwiseAlg::relu}}));
  EXPECT_TRUE(applied(plan, "repeated_relu_is_one_relu"));
  EXPECT_EQ(describe(plan.post_ops), "eltwise_relu");
}

TEST(ComposeRules, LeakyRelusAreNotMerged) {
  // leaky(leaky(x)) = alpha^2 x for x < 0: not one leaky relu of the same alpha.
  const PostOpsPlan plan = fuse(make_chain(
      4, DataType::f32,
      {Eltwise{EltwiseAlg::relu, 0.5F, 0.0F}, Eltwise{EltwiseAlg::relu, 0.5F, 0.0F}}));
  EXPECT_FALSE(applied(plan, "repeated_relu_is_one_relu"));
}

TEST(ComposeRules, ScaleNotMovedBeforeLeakyReluButFoldedIntoIt) {
  // alpha * x * s and alpha * (x * s) round differently in f32.
  const PostOpsPlan plan = fuse(make_chain(
      4, DataType::f32, {Eltwise{EltwiseAlg::relu, 0.1F, 0.0F}, Scale{{0.25F}}}));
  EXPECT_FALSE(applied(plan, "scale_moves_before_relu"));
  EXPECT_TRUE(plan.output_scales.empty());
  EXPECT_EQ(describe(plan.post_ops), "eltwise_relu(alpha 0.1, beta 0) * 0.25");
}

TEST(ComposeRules, NegativeScaleNotMovedAcrossRelu) {
  const PostOpsPlan plan = fuse(make_chain(
      4, DataType::f32, {Scale{{0.5F}}, Eltwise{EltwiseAlg::relu}, Scale{{1.0F, -2.0F, 3.0F, 4.0F}}}));
  EXPECT_FALSE(applied(plan, "scale_moves_before_relu"));
  EXPECT_EQ(plan.output_scales, Floats{0.5F});
  EXPECT_EQ(describe(plan.post_ops), "eltwise_relu; binary_mul(per_channel, [1, -2, 3, 4])");
}

TEST(ComposeRules, NegativePerTensorScaleAfterReluFoldsIntoItsScale) {
  const PostOpsPlan plan =
      fuse(make_chain(4, DataType::f32, {Eltwise{EltwiseAlg::relu}, Scale{{-2.0F}}}));
  EXPECT_FALSE(applied(plan, "scale_moves_before_relu"));
  EXPECT_TRUE(plan.output_scales.empty());
  EXPECT_EQ(describe(plan.post_ops), "eltwise_relu * -2");
}

TEST(ComposeRules, ScaleMovesBeforeSum) {
  const PostOpsPlan plan = fuse(make_chain(
      4, DataType::f32, {Scale{{0.1F}}, Sum{0, 0.5F, DataType::f32}, Scale{{2.0F}}}));
  EXPECT_TRUE(applied(plan, "scale_moves_before_sum"));
  EXPECT_EQ(plan.output_scales, Floats{0.1F * 2.0F});
  EXPECT_EQ(describe(plan.post_ops), "sum(input 0, 1, f32)");
}

TEST(ComposeRules, PerChannelScaleNotMovedAcrossSum) {
  const PostOpsPlan plan = fuse(make_chain(
      4, DataType::f32, {Sum{0, 1.0F, DataType::f32}, Scale{{1.0F, 2.0F, 3.0F, 4.0F}}}));
  EXPECT_FALSE(applied(plan, "scale_moves_before_sum"));
  EXPECT_EQ(describe(plan.post_ops), "sum(input 0, 1, f32); binary_mul(per_channel, [1, 2, 3, 4])");
}

TEST(ComposeRules, LeadingScaleIsOutputScale) {
  const PostOpsPlan plan =
      fuse(make_chain(4, DataType::f32, {Scale{{0.5F, 0.25F, -1.0F, 0.0F}}, Eltwise{EltwiseAlg::tanh}}));
  EXPECT_TRUE(applied(plan, "leading_scale_is_output_scale"));
  EXPECT_EQ(plan.output_scales, (Floats{0.5F, 0.25F, -1.0F, 0.0F}));
  EXPECT_EQ(plan.output_scales_mask, ScalesMask::per_channel);
  EXPECT_EQ(describe(plan.post_ops), "eltwise_tanh");
}

TEST(ComposeRules, FinalIntegerShiftIsDstZeroPoint) {
  // Asymmetric u8 quantize-only FQ: Si = 0.125, il = -4 -> Zi = 32, So = 1, Zo = 0.
  PostOpChain chain = make_chain(4, DataType::u8, {Scale{{1.0F, 2.0F, 0.5F, 0.25F}}});
  append_fake_quantize(chain, {-4.0F}, {27.875F}, {0.0F}, {255.0F}, 256);
  const PostOpsPlan plan = fuse(chain);
  EXPECT_TRUE(applied(plan, "final_integer_shift_is_dst_zero_point"));
  EXPECT_EQ(plan.output_scales, (Floats{8.0F, 16.0F, 4.0F, 2.0F}));
  EXPECT_EQ(plan.dst_zero_point, 32);
  EXPECT_TRUE(plan.post_ops.empty());
}

TEST(ComposeRules, DstZeroPointNotUsedForInnerProduct) {
  // oneDNN 2.6 refuses a destination zero point on int8 inner products.
  PostOpChain chain = make_chain(4, DataType::u8, {Scale{{0.5F}}, Round{}, Shift{{3.0F}}});
  chain.anchor = AnchorKind::inner_product;
  const PostOpsPlan plan = fuse(chain);
  EXPECT_FALSE(plan.dst_zero_point.has_value());
  EXPECT_EQ(describe(plan.post_ops), "eltwise_round; eltwise_linear(1, 3)");
}

TEST(ComposeRules, RepeatedLinearIsBinary) {
  // oneDNN 2.6 int8 inner products would run the second linear as the first.
  const PostOpsPlan plan = fuse(make_chain(
      2, DataType::f32, {Eltwise{EltwiseAlg::tanh}, Shift{{1.0F}}, Round{}, Shift{{3.0F}}}));
  EXPECT_TRUE(applied(plan, "repeated_eltwise_is_binary"));
  EXPECT_EQ(describe(plan.post_ops),
            "eltwise_tanh; eltwise_linear(1, 1); eltwise_round; binary_add(per_channel, [3, 3])");
}

TEST(ComposeRules, RepeatedClipIsBinary) {
  const PostOpsPlan plan = fuse(make_chain(
      2, DataType::f32,
      {Clip{{0.0F}, {100.0F}}, Eltwise{EltwiseAlg::tanh}, Clip{{0.0F}, {0.5F}}}));
  EXPECT_TRUE(applied(plan, "repeated_eltwise_is_binary"));
  EXPECT_EQ(describe(plan.post_ops),
            "eltwise_clip(0, 100); eltwise_tanh; binary_max(per_channel, [0, 0]); "
            "binary_min(per_channel, [0.5, 0.5])");
}

TEST(ComposeRules, RepeatedRoundWithOtherScaleMovesTheScaleToABinaryMultiply) {
  // Two FakeQuantize steps in a row (conv -> FQ -> FQ) produce two rounds.
  const PostOpsPlan plan = fuse(make_chain(
      2, DataType::f32,
      {Round{}, Scale{{0.25F}}, Eltwise{EltwiseAlg::tanh}, Round{}, Scale{{3.0F}}}));
  EXPECT_TRUE(applied(plan, "repeated_eltwise_is_binary"));
  EXPECT_EQ(describe(plan.post_ops),
            "eltwise_round; binary_mul(per_channel, [0.25, 0.25]); eltwise_tanh; eltwise_round; "
            "binary_mul(per_channel, [3, 3])");
}

TEST(ComposeRules, ScaleFoldsIntoEltwisePostOp) {
  const PostOpsPlan plan = fuse(
      make_chain(4, DataType::f32, {Scale{{0.01F}}, Eltwise{EltwiseAlg::tanh}, Scale{{100.0F}}}));
  EXPECT_TRUE(applied(plan, "scale_folds_into_eltwise_post_op"));
  EXPECT_EQ(plan.output_scales, Floats{0.01F});
  EXPECT_EQ(describe(plan.post_ops), "eltwise_tanh * 100");
}

TEST(ComposeRules, PerChannelClipIsBinaryMaxMin) {
  const PostOpsPlan plan = fuse(make_chain(
      4, DataType::f32, {Scale{{0.5F}}, Clip{{-1.0F, -2.0F, -3.0F, -4.0F}, {5.0F}}}));
  EXPECT_TRUE(applied(plan, "per_channel_clip_is_binary_max_min"));
  EXPECT_EQ(describe(plan.post_ops),
            "binary_max(per_channel, [-1, -2, -3, -4]); binary_min(per_channel, [5, 5, 5, 5])");
}

TEST(ComposeRules, PerTensorAffineIsEltwiseLinear) {
  const PostOpsPlan plan = fuse(make_chain(
      4, DataType::f32, {Eltwise{EltwiseAlg::abs}, Shift{{1.0F}}, Scale{{2.0F}}, Shift{{0.5F}}}));
  EXPECT_TRUE(applied(plan, "per_tensor_affine_is_eltwise_linear"));
  EXPECT_EQ(describe(plan.post_ops), "eltwise_abs * 2; eltwise_linear(1, 2.5)");
}

TEST(ComposeRules, PerChannelScaleAndShiftAreBinaryMulAdd) {
  const PostOpsPlan plan = fuse(make_chain(
      2, DataType::f32,
      {Eltwise{EltwiseAlg::tanh}, Scale{{2.0F, 3.0F}}, Shift{{1.0F, -1.0F}}}));
  EXPECT_TRUE(applied(plan, "per_channel_scale_is_binary_mul"));
  EXPECT_TRUE(applied(plan, "per_channel_shift_is_binary_add"));
  EXPECT_EQ(describe(plan.post_ops),
            "eltwise_tanh; binary_mul(per_channel, [2, 3]); binary_add(per_channel, [1, -1])");
}

TEST(ComposeRules, SumAndBinaryAreKeptInOrder) {
  const PostOpsPlan plan = fuse(make_chain(
      4, DataType::s8,
      {Scale{{0.5F}}, Binary{BinaryAlg::add, 1, Broadcast::full, DataType::f32},
       Sum{0, 0.25F, DataType::s8}, Eltwise{EltwiseAlg::relu}}));
  EXPECT_TRUE(applied(plan, "sum_is_sum_post_op"));
  EXPECT_TRUE(applied(plan, "binary_is_binary_post_op"));
  EXPECT_EQ(describe(plan.post_ops),
            "binary_add(full, input 1 f32); sum(input 0, 0.25, s8); eltwise_relu");
}

TEST(ComposeRules, QuantizeOnlyFqU8IsOutputScale) {
  // il = 0, ih = 255 * Si, ol = 0, oh = 255: Zi = 0, So = 1.
  PostOpChain chain = make_chain(4, DataType::u8, {Scale{{1.0F, 2.0F, 0.5F, 0.25F}}});
  append_fake_quantize(chain, {0.0F}, {31.875F}, {0.0F}, {255.0F}, 256);
  const PostOpsPlan plan = fuse(chain);
  EXPECT_EQ(plan.output_scales, (Floats{8.0F, 16.0F, 4.0F, 2.0F}));
  EXPECT_FALSE(plan.dst_zero_point.has_value());
  EXPECT_TRUE(plan.post_ops.empty()) << describe(plan);
}

TEST(ComposeRules, QuantizeOnlyFqS8IsOutputScale) {
  // il = -128 Si, ih = 127 Si, ol = -128, oh = 127: Zi = 128, So = 1, ol = -128.
  PostOpChain chain = make_chain(4, DataType::s8, {});
  append_fake_quantize(chain, {-16.0F}, {15.875F}, {-128.0F}, {127.0F}, 256);
  const PostOpsPlan plan = fuse(chain);
  EXPECT_TRUE(applied(plan, "even_shift_moves_before_round"));
  EXPECT_EQ(plan.output_scales, Floats{8.0F});
  EXPECT_FALSE(plan.dst_zero_point.has_value());
  EXPECT_TRUE(plan.post_ops.empty()) << describe(plan);
}

TEST(ComposeRules, FourBitFqKeepsOnlyTheClip) {
  // The round is last before the u8 store and goes; the clip to 15 is
  // narrower than u8 and stays: store(clip(2x, 0, 15)) rounds it anyway.
  PostOpChain chain = make_chain(4, DataType::u8, {});
  append_fake_quantize(chain, {0.0F}, {7.5F}, {0.0F}, {15.0F}, 16);
  const PostOpsPlan plan = fuse(chain);
  EXPECT_EQ(plan.output_scales, Floats{2.0F});
  EXPECT_EQ(describe(plan.post_ops), "eltwise_clip(0, 15)");
}

// ---- cannot fuse: a reason, no plan, no exception ----

void expect_cannot_fuse(const PostOpChain& chain, const std::string& reason_part) {
  ComposeResult result;
  EXPECT_NO_THROW(result = compose(chain));
  EXPECT_FALSE(result.fused());
  EXPECT_NE(result.reason.find(reason_part), std::string::npos) << result.reason;
}

TEST(ComposeCannotFuse, InvertedFakeQuantizeRange) {
  PostOpChain chain = make_chain(2, DataType::u8, {});
  append_fake_quantize(chain, {0.0F, 3.0F}, {2.0F, 1.0F}, {0.0F}, {255.0F}, 256);
  expect_cannot_fuse(chain, "inverted input range");
}

TEST(ComposeCannotFuse, EmptyFakeQuantizeRange) {
  PostOpChain chain = make_chain(1, DataType::u8, {});
  append_fake_quantize(chain, {1.0F}, {1.0F}, {0.0F}, {255.0F}, 256);
  expect_cannot_fuse(chain, "empty input range");
}

TEST(ComposeCannotFuse, FakeQuantizeWithOneLevel) {
  PostOpChain chain = make_chain(1, DataType::u8, {});
  append_fake_quantize(chain, {0.0F}, {1.0F}, {0.0F}, {255.0F}, 1);
  expect_cannot_fuse(chain, "at least 2 levels");
}

TEST(ComposeCannotFuse, ResidualOfOtherElementSize) {
  expect_cannot_fuse(make_chain(4, DataType::s8, {Sum{0, 1.0F, DataType::f32}}),
                     "same element size");
}

TEST(ComposeCannotFuse, MorePostOpsThanOneDnnTakes) {
  std::vector<Step> steps(33, Eltwise{EltwiseAlg::tanh});
  expect_cannot_fuse(make_chain(4, DataType::f32, steps), "33 post-ops remain; oneDNN 2.6 takes at most 32");
  steps.pop_back();
  EXPECT_TRUE(compose(make_chain(4, DataType::f32, steps)).fused());
}

TEST(ComposeCannotFuse, SecondSum) {
  expect_cannot_fuse(
      make_chain(4, DataType::f32, {Sum{0, 1.0F, DataType::f32}, Sum{1, 1.0F, DataType::f32}}),
      "second sum");
}

TEST(ComposeCannotFuse, WrongChannelCount) {
  expect_cannot_fuse(make_chain(4, DataType::f32, {Scale{{1.0F, 2.0F, 3.0F}}}),
                     "has 3 values (expected 1 or 4)");
}

TEST(ComposeCannotFuse, NonFiniteScale) {
  expect_cannot_fuse(make_chain(1, DataType::f32, {Scale{{std::numeric_limits<float>::infinity()}}}),
                     "not finite");
}

TEST(ComposeCannotFuse, RepeatedLeakyReluWithOtherAlpha) {
  expect_cannot_fuse(make_chain(4, DataType::f32,
                                {Eltwise{EltwiseAlg::relu, 0.1F, 0.0F}, Shift{{-100.0F}},
                                 Eltwise{EltwiseAlg::relu, 0.5F, 0.0F}}),
                     "both relu with different parameters");
}

TEST(ComposeCannotFuse, EmptyClipRange) {
  expect_cannot_fuse(make_chain(1, DataType::f32, {Clip{{2.0F}, {1.0F}}}), "empty range");
}

}  // namespace
}  // namespace qfuse::composer
