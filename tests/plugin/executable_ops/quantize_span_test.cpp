// quantize_linear_span (quantize_spans.hpp), the loop every Quantize, the
// quantizing Softmax, GeluQuantize and the fused attention write codes with,
// against composer::quantize_linear one value at a time (ONNX's
// QuantizeLinear: x / scale in f32, rounded half to even, plus the zero point,
// saturated): the same code for every value. The AVX-512 loop multiplies by
// 1 / scale where that gives the quotient's code, so the values that matter
// are the ones next to the half-integers k + 0.5 (the quotient's ties and
// the floats a few ulps either side), beside random ones, saturating ones,
// infinities, a NaN and denormals, for scales whose inverse is and is not
// exact.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "composer/fake_quantize_formula.hpp"
#include "plugin/executable_ops/quantize_spans.hpp"

namespace qfuse::plugin {
namespace {

std::vector<float> values_near_ties(float scale, int lo, int hi) {
  std::vector<float> x;
  for (int k = lo - 3; k <= hi + 3; ++k) {
    const float tie = (static_cast<float>(k) + 0.5f) * scale;
    float up = tie, down = tie;
    x.push_back(tie);
    for (int step = 0; step < 6; ++step) {
      up = std::nextafter(up, std::numeric_limits<float>::infinity());
      down = std::nextafter(down, -std::numeric_limits<float>::infinity());
      x.push_back(up);
      x.push_back(down);
    }
    x.push_back(static_cast<float>(k) * scale);
  }
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> d(static_cast<float>(lo - 8) * scale,
                                          static_cast<float>(hi + 8) * scale);
  for (int i = 0; i < 20000; ++i) x.push_back(d(rng));
  for (float v : {0.0f, -0.0f, 1e30f, -1e30f, std::numeric_limits<float>::infinity(),
                  -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                  std::numeric_limits<float>::denorm_min(), -1e-40f, 3.0e38f}) {
    x.push_back(v);
  }
  return x;
}

template <typename T>
void expect_same_codes_as_the_formula(float scale, std::int32_t zero_point) {
  constexpr std::int32_t lo = std::numeric_limits<T>::min(), hi = std::numeric_limits<T>::max();
  const std::vector<float> x = values_near_ties(scale, lo - zero_point, hi - zero_point);
  std::vector<T> y(x.size());
  quantize_linear_span(x.data(), y.data(), static_cast<std::int64_t>(x.size()), scale, zero_point,
                       hi);
  std::size_t differ = 0, first = x.size();
  for (std::size_t i = 0; i < x.size(); ++i) {
    const std::int32_t want = composer::quantize_linear(x[i], scale, zero_point, lo, hi);
    if (static_cast<std::int32_t>(y[i]) != want) {
      ++differ;
      if (first == x.size()) first = i;
    }
  }
  EXPECT_EQ(differ, 0u) << "scale " << scale << ", zero point " << zero_point
                        << "; first at x = " << (first < x.size() ? x[first] : 0.0f);
}

TEST(QuantizeLinearSpan, SameCodesAsTheFormulaNextToEveryTie) {
  for (float scale : {1.0f / 255.0f, 0.0039215689f, 0.01f, 0.1f, 0.0085f, 3.7e-3f, 6.2437e-6f,
                      0.25f, 1.0f, 7.5f, 1.3e-30f, 3.0e37f, 1e-39f}) {
    expect_same_codes_as_the_formula<std::uint8_t>(scale, 0);
    expect_same_codes_as_the_formula<std::uint8_t>(scale, 123);
    expect_same_codes_as_the_formula<std::uint8_t>(scale, 255);
    expect_same_codes_as_the_formula<std::int8_t>(scale, 0);
    expect_same_codes_as_the_formula<std::int8_t>(scale, -5);
    expect_same_codes_as_the_formula<std::int8_t>(scale, 127);
  }
}

// Scales whose 1 / scale is not a float's exact inverse, many of them: each
// code next to each tie.
TEST(QuantizeLinearSpan, SameCodesForManyScales) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> exponent(-12.0f, 2.0f);
  for (int i = 0; i < 200; ++i) {
    const float scale = std::exp2(exponent(rng));
    expect_same_codes_as_the_formula<std::uint8_t>(scale, i % 256);
    expect_same_codes_as_the_formula<std::int8_t>(scale, (i % 256) - 128);
  }
}

}  // namespace
}  // namespace qfuse::plugin
