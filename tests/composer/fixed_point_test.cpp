// Fixed-point output scales (composer/fixed_point.hpp) against exact
// arithmetic: the integer rescale against long double (acc * M0 < 2^62 is
// exact in its 64-bit mantissa) over millions of accumulators, ties included;
// the error bound against the real scale; the shift against NEMO's bound.
#include <cmath>
#include <cstdint>
#include <random>

#include <gtest/gtest.h>

#include "composer/fixed_point.hpp"

namespace qfuse::composer {
namespace {

// floor(acc * M0 / 2^n + 1/2), in exact long double arithmetic.
std::int64_t exact_rescale(std::int64_t acc, const FixedPoint& f) {
  const long double v = std::ldexp(static_cast<long double>(acc) * static_cast<long double>(f.multiplier), -f.shift);
  return static_cast<std::int64_t>(std::floor(v + 0.5L));
}

TEST(FixedPoint, RescaleEqualsExactRoundingOverMillionsOfAccumulators) {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> log_m(std::log(1e-6), std::log(50.0));
  std::uniform_int_distribution<std::int64_t> acc(-(std::int64_t{1} << 31) + 1, (std::int64_t{1} << 31) - 1);
  std::int64_t checked = 0, ties = 0;
  for (int s = 0; s < 400; ++s) {
    const double m = std::exp(log_m(rng)) * (s % 7 == 0 ? -1.0 : 1.0);
    const FixedPoint f = to_fixed_point(m);
    for (int i = 0; i < 10000; ++i) {
      std::int64_t a = acc(rng);
      if (i % 4 == 0 && f.shift > 0 && f.multiplier != 0) {
        // A tie: acc * M0 = (2k + 1) * 2^(n-1), when M0's odd part divides it.
        const std::int64_t m0 = f.multiplier < 0 ? -f.multiplier : f.multiplier;
        const int twos = __builtin_ctzll(static_cast<unsigned long long>(m0));
        if (twos < f.shift) {
          const std::int64_t unit = std::int64_t{1} << (f.shift - 1 - twos);
          const std::int64_t k = a / (2 * unit);
          a = (2 * k + 1) * unit;
          if (a >= (std::int64_t{1} << 31) || a <= -(std::int64_t{1} << 31)) a = unit;
          const std::int64_t p = a * f.multiplier;
          const std::int64_t half = std::int64_t{1} << (f.shift - 1);
          ties += ((p % (2 * half)) + 2 * half) % (2 * half) == half;
        }
      }
      ASSERT_EQ(rescale(a, f), exact_rescale(a, f)) << "acc " << a << " M0 " << f.multiplier << " n " << f.shift;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 4000000);
  EXPECT_GT(ties, 100000);  // exact ties were exercised
  RecordProperty("ties", static_cast<int>(ties));
}

TEST(FixedPoint, ErrorBoundAndNemoShift) {
  std::mt19937_64 rng(12);
  std::uniform_real_distribution<double> log_m(std::log(1e-6), std::log(100.0));
  for (double eta : {1.0 / 256, 1.0 / 4096, 1.0 / 65536, 1e-7}) {
    for (int i = 0; i < 20000; ++i) {
      const double m = std::exp(log_m(rng));
      const FixedPoint f = to_fixed_point(m, eta);
      ASSERT_LE(f.bits, 31);
      ASSERT_LT(std::abs(f.multiplier), std::int64_t{1} << 31);
      EXPECT_NEAR(f.relative_error, std::abs(f.value() - m) / m, 1e-15);
      // NEMO: d >= log2(1 / (M * eta)) bounds the error by eta; rounding to
      // nearest needs one bit less. Where 31 bits allow that shift, the bound
      // holds and the shift is the smallest that meets it.
      const int nemo = static_cast<int>(std::ceil(std::log2(1.0 / (2.0 * m * eta))));
      if (std::floor(std::log2(m)) + nemo + 1 <= 31 && nemo >= 0) {
        ASSERT_LE(f.relative_error, eta) << m;
        ASSERT_LE(f.shift, nemo) << m;
      }
      // The result against the real product: half a step plus the scale error.
      const std::int64_t acc = 123457;
      EXPECT_LE(std::abs(static_cast<double>(rescale(acc, f)) - acc * m),
                0.5 + acc * m * f.relative_error + 1e-9);
    }
  }
}

TEST(FixedPoint, EdgeCases) {
  EXPECT_EQ(to_fixed_point(0.0).multiplier, 0);
  const FixedPoint one = to_fixed_point(1.0);
  EXPECT_EQ(one.value(), 1.0);
  const FixedPoint neg = to_fixed_point(-0.75);
  EXPECT_EQ(neg.value(), -0.75);
  EXPECT_EQ(rescale(3, neg), -2);  // -2.25 -> -2
  EXPECT_EQ(rescale(2, to_fixed_point(0.25)), 1);   // 0.5 rounds up
  EXPECT_EQ(rescale(-2, to_fixed_point(0.25)), 0);  // -0.5 rounds up
  EXPECT_THROW(to_fixed_point(std::nan("")), std::invalid_argument);
  // A denormal scale (PP-OCRv4 has 2.5e-41): no 62-bit shift reaches it.
  const FixedPoint tiny = to_fixed_point(1e-41);
  EXPECT_EQ(tiny.multiplier, 0);
  EXPECT_EQ(tiny.relative_error, 1.0);
  EXPECT_THROW(to_fixed_point(3e9, 1e-3), std::invalid_argument);  // needs 32 bits
  EXPECT_THROW(to_fixed_point(1e30), std::invalid_argument);
  EXPECT_THROW(to_fixed_point(-1e30), std::invalid_argument);
  const std::vector<FixedPoint> none = to_fixed_point(std::vector<float>{});
  ASSERT_EQ(none.size(), 1u);
  EXPECT_EQ(none[0].value(), 1.0);
}

}  // namespace
}  // namespace qfuse::composer
