// quantize_linear_span (quantize_spans.cpp), whose AVX-512 loop divides by
// the scale through quotient_for_codes (x * (1 / s) away from half-integers),
// against composer::quantize_linear on each value (the f32 division): on
// quotients that are exact half-integers and the floats around them, on
// random values, at the type limits, on NaN and infinities, for scales across
// the f32 range (the extremes where the loop keeps the division), u8 and s8,
// several zero points, every length up to two vectors. Bit for bit.

#include "plugin/executable_ops/quantize_spans.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "composer/fake_quantize_formula.hpp"

namespace qfuse::plugin {
namespace {

std::vector<float> values_for(float scale, std::mt19937& rng) {
  std::vector<float> x;
  // Half-integer quotients (as the f32 product k.5 * s gives them) and the
  // four floats on each side.
  for (int k = -300; k <= 300; ++k) {
    const float tie = (static_cast<float>(k) + 0.5f) * scale;
    float up = tie, down = tie;
    x.push_back(tie);
    for (int step = 0; step < 4; ++step) {
      up = std::nextafter(up, std::numeric_limits<float>::infinity());
      down = std::nextafter(down, -std::numeric_limits<float>::infinity());
      x.push_back(up);
      x.push_back(down);
    }
  }
  std::uniform_real_distribution<float> spread(-300.0f, 300.0f);
  for (int i = 0; i < 4000; ++i) x.push_back(spread(rng) * scale);
  const float inf = std::numeric_limits<float>::infinity();
  for (const float v : {0.0f, -0.0f, inf, -inf, std::numeric_limits<float>::quiet_NaN(),
                        std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                        std::numeric_limits<float>::denorm_min(), 1e30f, -1e30f})
    x.push_back(v);
  std::shuffle(x.begin(), x.end(), rng);
  return x;
}

template <typename T>
void expect_codes_of_the_division(float scale, std::int32_t zero_point, std::mt19937& rng) {
  constexpr std::int32_t lo = std::numeric_limits<T>::min(), hi = std::numeric_limits<T>::max();
  const std::vector<float> x = values_for(scale, rng);
  std::vector<T> y(x.size());
  quantize_linear_span<T>(x.data(), y.data(), static_cast<std::int64_t>(x.size()), scale,
                          zero_point);
  for (std::size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(static_cast<std::int32_t>(y[i]),
              composer::quantize_linear(x[i], scale, zero_point, lo, hi))
        << "x = " << x[i] << ", scale " << scale << ", zero point " << zero_point;
  }
  // Every length up to two vectors (the loop's tails).
  for (std::int64_t n = 1; n <= 32; ++n) {
    std::vector<T> z(static_cast<std::size_t>(n));
    quantize_linear_span<T>(x.data(), z.data(), n, scale, zero_point);
    for (std::int64_t i = 0; i < n; ++i) {
      const auto u = static_cast<std::size_t>(i);
      ASSERT_EQ(static_cast<std::int32_t>(z[u]),
                composer::quantize_linear(x[u], scale, zero_point, lo, hi));
    }
  }
}

TEST(QuantizeLinearSpan, TheDivisionsCodesBitForBit) {
  std::mt19937 rng(29);
  std::vector<float> scales = {1.0f / 255.0f, 1.0f / 127.0f, 0.1f,  1.0f,      3.0f,      0x1p-100f,
                               0x1p100f,      1e-35f,        1e35f, 0x1p-101f, 0x1.8p100f};
  std::uniform_real_distribution<float> exponent(-20.0f, 10.0f);
  for (int i = 0; i < 24; ++i) scales.push_back(std::exp2(exponent(rng)));
  for (const float s : scales) {
    for (const std::int32_t z : {0, 1, 128, 255})
      expect_codes_of_the_division<std::uint8_t>(s, z, rng);
    for (const std::int32_t z : {-128, -3, 0, 127})
      expect_codes_of_the_division<std::int8_t>(s, z, rng);
  }
}

}  // namespace
}  // namespace qfuse::plugin
