// exp_avx512 (avx512_math.hpp), the e^x of the softmax and depthwise kernels,
// against std::exp in double on every float of [-90, 89] at a step of 2^-12
// and beyond: within 2 f32 ulps where e^x >= e^-87, exactly 0 below -87 and
// for NaN, and no subnormal result anywhere (a subnormal costs Intel cores a
// microcode assist in every instruction it enters), e^88.38 above the range.

#include "plugin/executable_ops/avx512_math.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace qfuse::plugin {
namespace {

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx512f"))) void exp_span(const float* x, float* y, std::size_t n) {
  for (std::size_t i = 0; i < n; i += 16) {
    const __mmask16 k = first_lanes(static_cast<std::int64_t>(n - i));
    _mm512_mask_storeu_ps(y + i, k, exp_avx512(_mm512_maskz_loadu_ps(k, x + i)));
  }
}

TEST(ExpAvx512, WithinTwoUlpsAndZeroBelowItsRange) {
  if (!__builtin_cpu_supports("avx512f")) GTEST_SKIP() << "no AVX-512F";
  std::vector<float> x;
  for (int i = -90 * 4096; i <= 89 * 4096; ++i) x.push_back(static_cast<float>(i) / 4096.0f);
  for (const float far :
       {-1e4f, -3.4e38f, -std::numeric_limits<float>::infinity(), 1e4f,
        std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(), -87.0f,
        -86.99999f, -87.00001f, std::numeric_limits<float>::denorm_min()})
    x.push_back(far);
  std::vector<float> y(x.size());
  exp_span(x.data(), y.data(), x.size());
  const float top = std::exp(88.3762626647950f);
  for (std::size_t i = 0; i < x.size(); ++i) {
    ASSERT_NE(std::fpclassify(y[i]), FP_SUBNORMAL) << "x = " << x[i];
    if (std::isnan(x[i]) || x[i] < -87.0f) {
      ASSERT_EQ(y[i], 0.0f) << "x = " << x[i];
    } else if (x[i] > 88.3762626647950f) {
      ASSERT_NEAR(y[i], top, 2.0 * std::ldexp(static_cast<double>(top), -23)) << "x = " << x[i];
    } else {
      const double e = std::exp(static_cast<double>(x[i]));
      ASSERT_LE(std::abs(static_cast<double>(y[i]) - e), 2.0 * std::ldexp(e, -23))
          << "x = " << x[i];
    }
  }
}
#endif

}  // namespace
}  // namespace qfuse::plugin
