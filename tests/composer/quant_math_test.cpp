// Quantization arithmetic against references on edge values (ties, values
// beyond 2^52, NaN and infinities) and the FakeQuantize formula's grids.
#include "composer/quant_math.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "composer/eltwise_math.hpp"
#include "composer/fake_quantize_formula.hpp"

namespace qfuse::composer {
namespace {

static_assert(round_half_to_even(0.5) == 0.0);
static_assert(round_half_to_even(1.5) == 2.0);
static_assert(round_half_to_even(2.5) == 2.0);
static_assert(round_half_to_even(-0.5) == 0.0);
static_assert(round_half_to_even(-1.5) == -2.0);
static_assert(round_half_to_even(-2.5) == -2.0);
static_assert(round_half_to_even(2.4999999999999996) == 2.0);

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

// ONNX's QuantizeLinear from its definition, written independently of
// quantize_linear: the quotient in f32 (the spec's arithmetic), rounded half
// to even from its floor and fraction in double, plus the zero point,
// saturated; NaN gives the lowest code, as ONNX Runtime's kernels do.
double quantize_linear_reference(float x, float scale, int zero_point, int lo, int hi) {
  if (std::isnan(x)) return lo;
  const float q = x / scale;
  if (std::isinf(q)) return q > 0 ? hi : lo;
  const double floor = std::floor(static_cast<double>(q));
  const double fraction = static_cast<double>(q) - floor;
  const bool even = std::fmod(std::fabs(floor), 2.0) == 0.0;
  const double rounded = fraction < 0.5 ? floor : fraction > 0.5 ? floor + 1 : even ? floor : floor + 1;
  return std::min<double>(hi, std::max<double>(lo, rounded + zero_point));
}

TEST(QuantizeLinear, MatchesOnnxsDefinitionOnTiesAndAtTheEnds) {
  struct Grid {
    int lo, hi, zero_point;
  };
  const Grid grids[] = {{0, 255, 0}, {0, 255, 3}, {0, 255, 128}, {-128, 127, 0},
                        {-128, 127, -7}, {0, 127, 64}};
  std::vector<float> xs;
  for (int k = -4000; k <= 4000; ++k) xs.push_back(static_cast<float>(k) / 16.0f);
  for (float v : {1e30f, -1e30f, 1e-40f, -1e-40f, std::numeric_limits<float>::infinity(),
                  -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    xs.push_back(v);
  }
  int ties = 0;
  for (const Grid& g : grids) {
    for (float scale : {0.125f, 0.1f, 1.0f / 3.0f, 0.0625f, 2.5e-3f}) {
      for (float x : xs) {
        const double expected = quantize_linear_reference(x, scale, g.zero_point, g.lo, g.hi);
        ASSERT_EQ(quantize_linear(x, scale, g.zero_point, g.lo, g.hi), expected)
            << "x " << x << " scale " << scale << " zero point " << g.zero_point;
        const float q = x / scale;
        ties += std::isfinite(q) && q - std::floor(q) == 0.5f;
      }
    }
  }
  EXPECT_GT(ties, 1000);  // the grid above puts many quotients on a tie
  // PyTorch's symmetric per-channel weights: max|w| / 127.5 as the scale puts
  // the largest weight on w / s = -127.5 exactly, which rounds to -128.
  const float w = -0.7f, s = 0.7f / 127.5f;
  EXPECT_EQ(quantize_linear(w, s, 0, -128, 127),
            quantize_linear_reference(w, s, 0, -128, 127));
}

TEST(FakeQuantizeFormula, ScalesAndZeroPoints) {
  constexpr FakeQuantizeScales u8 = fake_quantize_scales(0.0, 25.5, 0.0, 25.5, 256);
  static_assert(u8.input_scale == 0.1 && u8.input_zero == 0.0);
  constexpr FakeQuantizeScales s8 = fake_quantize_scales(-16.0, 15.875, -128.0, 127.0, 256);
  static_assert(s8.input_scale == 0.125 && s8.input_zero == 128.0);
  static_assert(s8.output_scale == 1.0 && s8.output_zero == 128.0);
  EXPECT_DOUBLE_EQ(fake_quantize_scales(-1.0, 2.0, -1.0, 2.0, 4).input_zero, 1.0);
}

// The quantizing Convert's level is FakeQuantize's level by the range
// definition (a loop here: the bounds, ties, values past either end) except
// that NaN lands on the top level.
TEST(FakeQuantizeFormula, SaturatedLevelIsTheRangeLevelWithNaNOnTop) {
  // Levels 1/16 apart: every x below and its level are exact in double.
  const double il = -8.0, range = 15.9375, steps = 255.0;
  for (int k = -300; k <= 600; ++k) {
    for (double frac : {0.0, 0.25, 0.5, 0.75}) {
      const double x = il + (k + frac) / 16.0;  // ties at frac 0.5
      EXPECT_EQ(saturated_level(x, il, range, steps), fake_quantize_level(x, il, il + range, steps))
          << x;
      double want = (k + frac) < 0.0 ? 0.0 : (k + frac) > steps ? steps : k + frac;
      if (frac == 0.5 && want == k + frac) want = k % 2 == 0 ? k : k + 1;  // half to even
      if (frac == 0.25 && want == k + frac) want = k;
      if (frac == 0.75 && want == k + frac) want = k + 1;
      EXPECT_EQ(saturated_level(x, il, range, steps), want) << x;
    }
  }
  EXPECT_EQ(saturated_level(std::numeric_limits<double>::quiet_NaN(), il, range, steps), steps);
  EXPECT_EQ(saturated_level(-std::numeric_limits<double>::infinity(), il, range, steps), 0.0);
  EXPECT_EQ(saturated_level(std::numeric_limits<double>::infinity(), il, range, steps), steps);
}

TEST(FakeQuantizeFormula, ConvertToCodeRoundsHalfToEvenAndSaturates) {
  for (double lo : {0.0, -128.0}) {
    EXPECT_EQ(convert_to_code(lo - 7.0, lo), lo);
    EXPECT_EQ(convert_to_code(lo + 300.0, lo), lo + 255.0);
    EXPECT_EQ(convert_to_code(lo + 2.5, lo), lo + 2.0);
    EXPECT_EQ(convert_to_code(lo + 3.5, lo), lo + 4.0);
    EXPECT_EQ(convert_to_code(lo + 254.5, lo), lo + 254.0);
    EXPECT_EQ(convert_to_code(lo + 254.6, lo), lo + 255.0);
    EXPECT_EQ(convert_to_code(std::numeric_limits<double>::quiet_NaN(), lo), lo + 255.0);
  }
}

// The eltwise table's columns against the functions themselves: every row
// marked non-decreasing is, sampled across [-8, 8] (log and sqrt from 0.01);
// every row marked piecewise linear has zero second differences away from its
// kinks; and the values are the textbook ones at a few points.
TEST(EltwiseTable, ColumnsAgreeWithTheFunctions) {
  for (const EltwiseInfo& row : eltwise_table()) {
    const bool positive_only = row.alg == EltwiseAlg::log || row.alg == EltwiseAlg::sqrt;
    const double lo = positive_only ? 0.01 : -8.0;
    for (const double alpha : {0.5, -0.5}) {
      const double beta = row.alg == EltwiseAlg::clip ? 1.0 : 0.25;
      const double a = row.alg == EltwiseAlg::clip ? -1.0 : alpha;
      bool increasing = true;
      for (double x = lo; x < 8.0; x += 1.0 / 64) {
        increasing = increasing && row.value(x + 1.0 / 64, a, beta) >= row.value(x, a, beta);
      }
      EXPECT_EQ(increasing, monotone_increasing(row.alg, a)) << row.name << " alpha " << a;
    }
    if (row.piecewise_linear && row.alg != EltwiseAlg::round) {
      int curved = 0;
      for (double x = -7.9; x < 7.9; x += 0.37) {
        const double h = 1e-3;
        const double d2 = row.value(x + h, 0.5, 1.0) - 2 * row.value(x, 0.5, 1.0) + row.value(x - h, 0.5, 1.0);
        curved += std::abs(d2) > 1e-9;
      }
      EXPECT_LE(curved, 3) << row.name << " (a kink or two)";
    }
  }
  EXPECT_EQ(eltwise_value(EltwiseAlg::logistic, 0.0, 0, 0), 0.5);
  EXPECT_EQ(eltwise_value(EltwiseAlg::hardswish, 3.0, 0, 0), 3.0);
  EXPECT_EQ(eltwise_value(EltwiseAlg::hsigmoid, 0.0, 0, 0), 0.5);
  EXPECT_EQ(eltwise_value(EltwiseAlg::round, 2.5, 0, 0), 2.0);
  EXPECT_NEAR(eltwise_value(EltwiseAlg::gelu_erf, 1.0, 0, 0), 0.8413447460685429, 1e-15);
  EXPECT_EQ(eltwise_info(EltwiseAlg::logistic).onnx_op, "Sigmoid");
  EXPECT_EQ(eltwise_info(EltwiseAlg::mish).name, "mish");
}

}  // namespace
}  // namespace qfuse::composer
