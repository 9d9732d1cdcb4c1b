// qfuse's erf GELU kernel (gelu_kernel.hpp), both of its loops (the AVX-512
// one where the CPU has it, and the scalar one every CPU runs without it),
// against x * 0.5 * erfc(-x / sqrt 2) in double: every float of [-8, 8] at a
// step of 2^-14 (the 16 intervals' edges and their neighbours among them),
// wider values to 1e30, signed zeros and a NaN. Each y within
// kGeluErrorBound * max(1, |x|); the two loops' y and ranges bit for bit.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "plugin/executable_ops/gelu_kernel.hpp"

namespace qfuse::plugin {
namespace {

double gelu_in_double(float x) {
  const double v = x;
  return 0.5 * v * std::erfc(-v / std::sqrt(2.0));
}

std::vector<float> sweep() {
  std::vector<float> x;
  for (int i = -8 * 16384; i <= 8 * 16384; ++i) x.push_back(static_cast<float>(i) / 16384.0f);
  // Each interval edge (k * 6 / 16) and the floats beside it.
  for (int k = 0; k <= 16; ++k) {
    const float edge = static_cast<float>(k) * 0.375f;
    for (const float e : {edge, -edge}) {
      x.push_back(e);
      x.push_back(std::nextafter(e, 100.0f));
      x.push_back(std::nextafter(e, -100.0f));
    }
  }
  for (const float v : {1e-30f, 1e-10f, 1e-3f, 9.5f, 12.0f, 40.0f, 1e4f, 1e10f, 1e30f}) {
    x.push_back(v);
    x.push_back(-v);
  }
  x.push_back(std::numeric_limits<float>::denorm_min());
  x.push_back(-std::numeric_limits<float>::denorm_min());
  return x;
}

TEST(GeluKernel, WithinItsBoundOfGeluInDouble) {
  const std::vector<float> x = sweep();
  std::vector<float> y(x.size()), y_scalar(x.size());
  gelu_erf_span(x.data(), y.data(), static_cast<std::int64_t>(x.size()));
  gelu_erf_span_scalar(x.data(), y_scalar.data(), static_cast<std::int64_t>(x.size()));
  double worst = 0.0;
  float worst_at = 0.0f;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double err = std::abs(static_cast<double>(y[i]) - gelu_in_double(x[i])) /
                       std::max(1.0, std::abs(static_cast<double>(x[i])));
    if (err > worst) {
      worst = err;
      worst_at = x[i];
    }
    ASSERT_EQ(std::memcmp(&y[i], &y_scalar[i], sizeof(float)), 0) << "x = " << x[i];
  }
  EXPECT_LE(worst, kGeluErrorBound) << "at x = " << worst_at;
  // Far above zero, x itself.
  float big = 1e30f, out = 0.0f;
  gelu_erf_span(&big, &out, 1);
  EXPECT_EQ(out, 1e30f);
}

TEST(GeluKernel, SignedZerosAndNan) {
  const float x[3] = {0.0f, -0.0f, std::numeric_limits<float>::quiet_NaN()};
  float y[3], s[3];
  const auto range = gelu_erf_span(x, y, 3);
  const auto range_scalar = gelu_erf_span_scalar(x, s, 3);
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_TRUE(std::isnan(y[2]));
  EXPECT_TRUE(std::isnan(s[2]));
  // The NaN is left out of the range, as DynamicQuantize's min / max leave it.
  EXPECT_EQ(range.first, 0.0f);
  EXPECT_EQ(range.second, 0.0f);
  EXPECT_EQ(range, range_scalar);
}

TEST(GeluKernel, BothLoopsAgreeOnEveryTailAndRange) {
  for (std::int64_t n = 0; n <= 49; ++n) {
    std::vector<float> x(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) {
      x[static_cast<std::size_t>(i)] = std::sin(static_cast<float>(i) * 1.7f) * 5.0f;
    }
    std::vector<float> y(x.size()), s(x.size());
    const auto range = gelu_erf_span(x.data(), y.data(), n);
    const auto range_scalar = gelu_erf_span_scalar(x.data(), s.data(), n);
    if (n > 0) {  // memcmp takes no null pointer, even for no bytes
      EXPECT_EQ(std::memcmp(y.data(), s.data(), y.size() * sizeof(float)), 0) << n;
    }
    EXPECT_EQ(range, range_scalar) << n;
    float lo = std::numeric_limits<float>::infinity(), hi = -lo;
    for (const float v : y) {
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    EXPECT_EQ(range.first, lo) << n;
    EXPECT_EQ(range.second, hi) << n;
  }
}

// In place (x and y one buffer), as the op may be planned.
TEST(GeluKernel, InPlace) {
  std::vector<float> x = {-3.0f, -1.0f, 0.5f, 2.0f, 7.0f}, y(x.size());
  gelu_erf_span(x.data(), y.data(), 5);
  gelu_erf_span(x.data(), x.data(), 5);
  EXPECT_EQ(x, y);
}

}  // namespace
}  // namespace qfuse::plugin
