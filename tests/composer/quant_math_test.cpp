// Quantization arithmetic against double-precision references on edge values
// (ties, powers of two and their neighbours, INT32 limits) and seeded random
// values.
#include "composer/quant_math.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include <gtest/gtest.h>

#include "composer/fake_quantize_formula.hpp"

namespace qfuse::composer {
namespace {

constexpr std::int32_t kMin = std::numeric_limits<std::int32_t>::min();
constexpr std::int32_t kMax = std::numeric_limits<std::int32_t>::max();

static_assert(round_half_to_even(0.5) == 0.0);
static_assert(round_half_to_even(1.5) == 2.0);
static_assert(round_half_to_even(2.5) == 2.0);
static_assert(round_half_to_even(-0.5) == 0.0);
static_assert(round_half_to_even(-1.5) == -2.0);
static_assert(round_half_to_even(-2.5) == -2.0);
static_assert(round_half_to_even(2.4999999999999996) == 2.0);
static_assert(quantize_multiplier(1.0) == QuantizedMultiplier{1 << 30, 1});
static_assert(quantize_multiplier(0.5) == QuantizedMultiplier{1 << 30, 0});

TEST(QuantMath, RoundHalfToEvenMatchesNearbyint) {
  for (double base : {0.0, 1.0, 2.0, 127.0, 128.0, -128.0, -129.0, 4194304.0, 8388607.0}) {
    for (double offset : {-0.5, -0.49999999999999994, 0.0, 0.25, 0.5, 0.5000000000000001, 0.75}) {
      const double x = base + offset;
      EXPECT_EQ(round_half_to_even(x), std::nearbyint(x)) << x;
      EXPECT_EQ(round_half_to_even(static_cast<float>(x)), std::nearbyint(static_cast<float>(x)))
          << x;
    }
  }
  EXPECT_TRUE(std::isnan(round_half_to_even(std::numeric_limits<double>::quiet_NaN())));
  EXPECT_EQ(round_half_to_even(std::numeric_limits<double>::infinity()),
            std::numeric_limits<double>::infinity());
  EXPECT_EQ(round_half_to_even(9007199254740993.0), 9007199254740993.0);
}

TEST(QuantMath, QuantizeMultiplierEdgeValues) {
  EXPECT_EQ(quantize_multiplier(0.0), (QuantizedMultiplier{0, 0}));
  EXPECT_EQ(quantize_multiplier(0.75), (QuantizedMultiplier{3 << 29, 0}));
  EXPECT_EQ(quantize_multiplier(0.25), (QuantizedMultiplier{1 << 30, -1}));
  EXPECT_EQ(quantize_multiplier(std::ldexp(1.0, -31)), (QuantizedMultiplier{1 << 30, -30}));
  EXPECT_EQ(quantize_multiplier(std::ldexp(1.0, -32)), (QuantizedMultiplier{1 << 30, -31}));
  // Below 2^-32 no int32 right shift reaches: flushed to zero.
  EXPECT_EQ(quantize_multiplier(std::ldexp(1.0, -33)), (QuantizedMultiplier{0, 0}));
  // M0 just below 1 rounds up to 2^31 and renormalises.
  EXPECT_EQ(quantize_multiplier(1.0 - std::ldexp(1.0, -40)), (QuantizedMultiplier{1 << 30, 1}));
  // Ties of M0 * 2^31 go to even.
  EXPECT_EQ(quantize_multiplier(0.5 + std::ldexp(1.0, -32)).multiplier, 1 << 30);
  EXPECT_EQ(quantize_multiplier(0.5 + 3 * std::ldexp(1.0, -32)).multiplier, (1 << 30) + 2);
}

TEST(QuantMath, QuantizeMultiplierRandomRelativeError) {
  std::mt19937 rng(1234);
  std::uniform_real_distribution<double> exponent(-30.0, 20.0);
  for (int i = 0; i < 2000; ++i) {
    const double real = std::pow(2.0, exponent(rng));
    const QuantizedMultiplier qm = quantize_multiplier(real);
    ASSERT_GE(qm.multiplier, 1 << 30);
    const double back = std::ldexp(static_cast<double>(qm.multiplier), qm.shift - 31);
    EXPECT_LE(std::fabs(back - real) / real, std::ldexp(1.0, -31)) << real;
  }
}

TEST(QuantMath, SaturatingRoundingDoublingHighMul) {
  EXPECT_EQ(saturating_rounding_doubling_high_mul(kMin, kMin), kMax);
  EXPECT_EQ(saturating_rounding_doubling_high_mul(kMax, kMax), kMax - 1);
  EXPECT_EQ(saturating_rounding_doubling_high_mul(1 << 30, 1 << 30), 1 << 29);
  // +-3 * 2^30 / 2^31 = +-1.5: ties go towards +infinity.
  EXPECT_EQ(saturating_rounding_doubling_high_mul(3, 1 << 30), 2);
  EXPECT_EQ(saturating_rounding_doubling_high_mul(-3, 1 << 30), -1);
  EXPECT_EQ(saturating_rounding_doubling_high_mul(-5, 1 << 30), -2);
}

TEST(QuantMath, RoundingDivideByPot) {
  EXPECT_EQ(rounding_divide_by_pot(5, 1), 3);
  EXPECT_EQ(rounding_divide_by_pot(-5, 1), -3);
  EXPECT_EQ(rounding_divide_by_pot(4, 1), 2);
  EXPECT_EQ(rounding_divide_by_pot(7, 2), 2);
  EXPECT_EQ(rounding_divide_by_pot(kMax, 31), 1);
  EXPECT_EQ(rounding_divide_by_pot(kMin, 31), -1);
  EXPECT_EQ(rounding_divide_by_pot(kMin, 0), kMin);
}

TEST(QuantMath, MultiplyByQuantizedMultiplierMatchesDouble) {
  std::mt19937 rng(42);
  std::uniform_int_distribution<std::int32_t> value(-(1 << 24), 1 << 24);
  std::uniform_real_distribution<double> scale(0.0001, 0.999);
  for (int i = 0; i < 5000; ++i) {
    const std::int32_t x = value(rng);
    const double m = scale(rng);
    const double expected = static_cast<double>(x) * m;
    const QuantizedMultiplier qm = quantize_multiplier(m);
    const std::int32_t got = multiply_by_quantized_multiplier(x, qm);
    // Two roundings: the high multiply (half a unit of 2^-n, n = -shift)
    // then the shift (half a unit), plus the multiplier's own 2^-31 error.
    const double bound = 0.5 + std::ldexp(0.5, qm.shift) + std::fabs(expected) * std::ldexp(1.0, -30);
    EXPECT_LE(std::fabs(got - expected), bound) << x << " * " << m;
  }
  // Powers of two: exact but for the high multiply's ties towards +infinity.
  EXPECT_EQ(multiply_by_quantized_multiplier(3, quantize_multiplier(0.5)), 2);
  EXPECT_EQ(multiply_by_quantized_multiplier(-3, quantize_multiplier(0.5)), -1);
  EXPECT_EQ(multiply_by_quantized_multiplier(-3, quantize_multiplier(0.25)), -1);
  EXPECT_EQ(multiply_by_quantized_multiplier(kMax, quantize_multiplier(0.5)), 1073741824);
  EXPECT_EQ(multiply_by_quantized_multiplier(1000, quantize_multiplier(4.0)), 4000);
  EXPECT_EQ(multiply_by_quantized_multiplier(kMin / 8, quantize_multiplier(4.0)), kMin / 2);
  EXPECT_EQ(multiply_by_quantized_multiplier(kMin, quantize_multiplier(0.5)), kMin / 2);
}

TEST(FakeQuantizeFormula, ScalesAndZeroPoints) {
  constexpr FakeQuantizeScales u8 = fake_quantize_scales(0.0, 25.5, 0.0, 25.5, 256);
  static_assert(u8.input_scale == 0.1 && u8.input_zero == 0.0);
  constexpr FakeQuantizeScales s8 = fake_quantize_scales(-16.0, 15.875, -128.0, 127.0, 256);
  static_assert(s8.input_scale == 0.125 && s8.input_zero == 128.0);
  static_assert(s8.output_scale == 1.0 && s8.output_zero == 128.0);
  EXPECT_DOUBLE_EQ(fake_quantize_scales(-1.0, 2.0, -1.0, 2.0, 4).input_zero, 1.0);
}

}  // namespace
}  // namespace qfuse::composer
