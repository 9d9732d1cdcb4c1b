// composer/integer_plan: the integer form of a plan against the plan itself,
// evaluated exactly (long double) in this test from the plan's definition
// (post_ops_plan.hpp), over random plans and accumulators.
//
// The integer form may differ from the exact result only where the exact
// value before a rounding point lies within the integer arithmetic's error of
// a tie: |M0 2^-n - M| |x| (the multipliers' bound eta), the offsets' 2^-n
// quantum, and half a unit of the accumulator for the int32 bias. Everywhere
// else the two must give the same code.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "composer/integer_plan.hpp"

namespace qfuse::composer {
namespace {

using LD = long double;

LD round_half_even(LD v) { return std::nearbyintl(v); }

TEST(IntegerPlan, RshiftHalfEvenMatchesExactRounding) {
  std::mt19937_64 rng(7);
  std::int64_t ties = 0;
  for (int i = 0; i < 2'000'000; ++i) {
    const int n = 1 + static_cast<int>(rng() % 40);
    std::int64_t p = static_cast<std::int64_t>(rng() >> 2) - (std::int64_t{1} << 61);
    if (i % 4 == 0) {
      // An exact tie: k * 2^n + 2^(n-1).
      const std::int64_t k = static_cast<std::int64_t>(rng() % 2'000'001) - 1'000'000;
      p = k * (std::int64_t{1} << n) + (std::int64_t{1} << (n - 1));
      ++ties;
    }
    const LD exact = std::ldexp(static_cast<LD>(p), -n);
    ASSERT_EQ(rshift_half_even(p, n), static_cast<std::int64_t>(round_half_even(exact)))
        << "p " << p << " n " << n;
  }
  EXPECT_EQ(rshift_half_even(12345, 0), 12345);
  EXPECT_GT(ties, 400'000);
}

// The plan's value before its final rounding, exactly; `round_at` collects
// every intermediate rounding (eltwise round) the way the plan defines it.
struct Exact {
  LD value;
  LD min_tie_distance;  // distance of any rounded value to its nearest tie, less
                        // the integer form's error bound there
};

Exact exact_plan(const PostOpsPlan& plan, const std::vector<float>& bias, std::int32_t acc,
                 std::size_t c, std::int32_t residual) {
  const auto at = [c](const std::vector<float>& v) {
    return static_cast<LD>(v.size() == 1 ? v[0] : v[c]);
  };
  LD y = static_cast<LD>(acc) + (bias.empty() ? 0.0L : at(bias));
  if (!plan.output_scales.empty()) y *= at(plan.output_scales);
  LD min_tie = std::numeric_limits<LD>::infinity();
  // The integer form's error before a rounding point: eta = 2^-20 of each
  // product it scales (|x * A| and |res * C|, tracked as `mag`), plus the
  // offsets' 2^-n quanta (2^-16 is generous).
  LD mag = std::fabs(y);
  const auto tie_distance = [&mag](LD v) {
    return std::fabs(std::fabs(v - std::floor(v)) - 0.5L) - (mag * 0x1p-20L + 0x1p-16L);
  };
  for (const PostOp& op : plan.post_ops) {
    if (const auto* e = std::get_if<EltwisePostOp>(&op)) {
      LD v = y;
      switch (e->alg) {
        case EltwiseAlg::relu: v = std::max(v, 0.0L); break;
        case EltwiseAlg::linear: v = static_cast<LD>(e->alpha) * v + static_cast<LD>(e->beta); break;
        case EltwiseAlg::clip:
          v = std::clamp(v, static_cast<LD>(e->alpha), static_cast<LD>(e->beta));
          break;
        case EltwiseAlg::round:
          min_tie = std::min(min_tie, tie_distance(v));
          v = round_half_even(v);
          mag = std::fabs(v);
          break;
        default: ADD_FAILURE() << "unexpected eltwise"; break;
      }
      y = static_cast<LD>(e->scale) * v;
      const LD f = std::fabs(static_cast<LD>(e->scale) *
                             (e->alg == EltwiseAlg::linear ? static_cast<LD>(e->alpha) : 1.0L));
      mag *= f;
    } else if (const auto* b = std::get_if<BinaryPostOp>(&op)) {
      const LD t = at(std::get<ConstantTensor>(b->tensor).values);
      switch (b->alg) {
        case BinaryAlg::add: y += t; break;
        case BinaryAlg::sub: y -= t; break;
        case BinaryAlg::mul:
          y *= t;
          mag *= std::fabs(t);
          break;
        case BinaryAlg::min: y = std::min(y, t); break;
        case BinaryAlg::max: y = std::max(y, t); break;
      }
    } else {
      const LD r = static_cast<LD>(std::get<SumPostOp>(op).scale) * static_cast<LD>(residual);
      y += r;
      mag += std::fabs(r);
    }
  }
  if (plan.dst_zero_point) y += static_cast<LD>(*plan.dst_zero_point);
  if (plan.dst_type != DataType::f32) min_tie = std::min(min_tie, tie_distance(y));
  return {y, min_tie};
}

LD saturate(LD v, DataType t) {
  const LD r = round_half_even(v);
  return t == DataType::s8 ? std::clamp(r, -128.0L, 127.0L) : std::clamp(r, 0.0L, 255.0L);
}

// Random plans of the shapes the composer writes: per-channel output scales,
// a per-channel shift (bias, folded batch norm, zero point), an activation
// clamp, and optionally a FakeQuantize's round on a coarser grid followed by
// an affine map, a clip and a residual add.
struct Case {
  PostOpsPlan plan;
  std::vector<float> bias;
};

Case random_case(std::mt19937& rng, bool with_residual) {
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  Case k;
  PostOpsPlan& p = k.plan;
  p.channels = 1 + static_cast<int>(rng() % 24);
  p.dst_type = rng() % 2 ? DataType::u8 : DataType::s8;
  for (int c = 0; c < p.channels; ++c) {
    p.output_scales.push_back(std::ldexp(0.5f + u(rng), -static_cast<int>(4 + rng() % 10)));
    k.bias.push_back((u(rng) - 0.5f) * 20000.0f);
  }
  if (rng() % 2) {
    std::vector<float> shift;
    for (int c = 0; c < p.channels; ++c) shift.push_back((u(rng) - 0.5f) * 100.0f);
    p.post_ops.push_back(BinaryPostOp{BinaryAlg::add, Broadcast::per_channel, ConstantTensor{shift}});
  }
  if (rng() % 2) p.post_ops.push_back(EltwisePostOp{EltwiseAlg::relu, 1.0f, 0.0f, 0.0f});
  if (with_residual) {
    // round * step; linear(1, lo); clip(lo, hi); sum(scale)
    const float step = 0.5f + 2.0f * u(rng);
    const float lo = -step * static_cast<float>(rng() % 200);
    p.post_ops.push_back(EltwisePostOp{EltwiseAlg::round, step, 0.0f, 0.0f});
    p.post_ops.push_back(EltwisePostOp{EltwiseAlg::linear, 1.0f, 1.0f, lo});
    p.post_ops.push_back(EltwisePostOp{EltwiseAlg::clip, 1.0f, lo, lo + 255.0f * step});
    p.post_ops.push_back(SumPostOp{0, 0.25f + u(rng), DataType::u8});
  }
  if (rng() % 2) p.dst_zero_point = static_cast<std::int32_t>(rng() % 60) - 30;
  return k;
}

void check_cases(bool with_residual, int plans, int samples) {
  std::mt19937 rng(with_residual ? 11 : 5);
  std::int64_t compared = 0, near_tie = 0, off = 0;
  for (int i = 0; i < plans; ++i) {
    const Case k = random_case(rng, with_residual);
    const IntegerPlanResult r = derive_integer_plan(k.plan, k.bias, 1.0 / (1 << 20));
    ASSERT_TRUE(r.plan) << r.reason << " for " << describe(k.plan);
    const IntegerPlan& ip = *r.plan;
    for (int s = 0; s < samples; ++s) {
      const auto c = static_cast<std::size_t>(rng() % static_cast<unsigned>(k.plan.channels));
      const auto acc = static_cast<std::int32_t>(static_cast<std::int64_t>(rng() % 400001) - 200000);
      const auto res = static_cast<std::int32_t>(rng() % 256);
      const Exact e = exact_plan(k.plan, k.bias, acc, c, res);
      const LD want = saturate(e.value, k.plan.dst_type);
      const LD got = static_cast<LD>(evaluate_integer_plan(ip, acc, static_cast<int>(c), res));
      ++compared;
      if (e.min_tie_distance < 0) {
        // A tie at an intermediate rounding moves the output by that grid's
        // step; only how often is checked.
        ++near_tie;
        off += got != want ? 1 : 0;
        continue;
      }
      ASSERT_EQ(got, want) << describe(k.plan) << "\n" << describe(ip) << "\nacc " << acc
                           << " channel " << c << " residual " << res << " exact "
                           << static_cast<double>(e.value);
    }
  }
  std::cout << compared << " accumulators, " << near_tie << " within the error of a tie, " << off
            << " of them rounded the other way\n";
  EXPECT_LT(near_tie, compared / 200);
}

TEST(IntegerPlan, MatchesThePlanAwayFromTies) { check_cases(false, 400, 2500); }

TEST(IntegerPlan, ResidualStageMatchesThePlanAwayFromTies) { check_cases(true, 400, 2500); }

TEST(IntegerPlan, F32OutputDequantizesTheLastInteger) {
  // round * 0.1; linear(1, -12.8); clip(-12.8, 12.7) to f32: the codes 0..255
  // of a u8 grid with zero point 128, dequantized.
  PostOpsPlan p;
  p.channels = 2;
  p.dst_type = DataType::f32;
  p.output_scales = {0.01f, 0.02f};
  p.post_ops.push_back(EltwisePostOp{EltwiseAlg::round, 0.1f, 0.0f, 0.0f});
  p.post_ops.push_back(EltwisePostOp{EltwiseAlg::linear, 1.0f, 1.0f, -12.8f});
  p.post_ops.push_back(EltwisePostOp{EltwiseAlg::clip, 1.0f, -12.8f, 12.7f});
  const IntegerPlanResult r = derive_integer_plan(p, {});
  ASSERT_TRUE(r.plan) << r.reason;
  ASSERT_EQ(r.plan->stages.size(), 1u);
  // The clip became the stage's integer clamp: codes 0..255.
  EXPECT_EQ(r.plan->stages[0].lo[0], 0);
  EXPECT_EQ(r.plan->stages[0].hi[0], 255);
  for (std::int32_t acc : {-100000, -1280, -5, 0, 7, 1249, 1251, 100000}) {
    for (int c = 0; c < 2; ++c) {
      const LD y = std::clamp(round_half_even(static_cast<LD>(acc) * (c ? 0.02L : 0.01L) - 0.0L) *
                                      0.1L - 12.8L,
                              -12.8L, 12.7L);
      EXPECT_NEAR(evaluate_integer_plan(*r.plan, acc, c), static_cast<double>(y), 1e-5)
          << "acc " << acc << " channel " << c;
    }
  }
}

TEST(IntegerPlan, SaysWhyAPlanHasNoIntegerForm) {
  PostOpsPlan p;
  p.channels = 1;
  p.dst_type = DataType::u8;
  p.output_scales = {0.01f};
  p.post_ops.push_back(EltwisePostOp{EltwiseAlg::logistic, 1.0f, 0.0f, 0.0f});
  IntegerPlanResult r = derive_integer_plan(p, {});
  EXPECT_FALSE(r.plan);
  EXPECT_EQ(r.reason, "eltwise logistic has no integer form");

  p.post_ops = {EltwisePostOp{EltwiseAlg::relu, 1.0f, 0.1f, 0.0f}};
  r = derive_integer_plan(p, {});
  EXPECT_FALSE(r.plan);
  EXPECT_NE(r.reason.find("leaky relu"), std::string::npos) << r.reason;

  p.post_ops = {BinaryPostOp{BinaryAlg::mul, Broadcast::full, ExternalTensor{0, DataType::f32}}};
  r = derive_integer_plan(p, {});
  EXPECT_FALSE(r.plan);
  EXPECT_EQ(r.reason, "a binary mul reads a tensor at execution");

  // A clip on the unrounded accumulator before a residual add.
  p.post_ops = {EltwisePostOp{EltwiseAlg::clip, 1.0f, 0.0f, 6.0f}, SumPostOp{0, 1.0f, DataType::u8}};
  r = derive_integer_plan(p, {});
  EXPECT_FALSE(r.plan);
  EXPECT_NE(r.reason.find("unrounded accumulator"), std::string::npos) << r.reason;
}

TEST(IntegerPlan, TinyScaleChannelKeepsItsOffset) {
  // An all-zero channel's weights give a denormal output scale; its output
  // is then its offset alone.
  PostOpsPlan p;
  p.channels = 2;
  p.dst_type = DataType::u8;
  p.output_scales = {1e-43f, 0.01f};
  p.post_ops.push_back(BinaryPostOp{BinaryAlg::add, Broadcast::per_channel,
                                    ConstantTensor{{37.4f, 3.0f}}});
  const IntegerPlanResult r = derive_integer_plan(p, {});
  ASSERT_TRUE(r.plan) << r.reason;
  EXPECT_EQ(evaluate_integer_plan(*r.plan, 2'000'000'000, 0), 37.0);
  EXPECT_EQ(evaluate_integer_plan(*r.plan, -2'000'000'000, 0), 37.0);
  EXPECT_EQ(evaluate_integer_plan(*r.plan, 1000, 1), 13.0);
}

}  // namespace
}  // namespace qfuse::composer
