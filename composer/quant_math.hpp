// Quantization arithmetic shared by the composer and its users. Every function
// names its rounding; everything that can be is constexpr.
#pragma once

#include <cassert>
#include <cstdint>
#include <limits>

namespace qfuse::composer {

// round(x) with ties to the even neighbour (IEEE roundTiesToEven), the rounding
// of oneDNN's eltwise_round, of its f32 -> s8/u8 conversion and of ONNX
// QuantizeLinear. NaN and infinities come back unchanged.
constexpr double round_half_to_even(double x) {
  constexpr double kTwo52 = 4503599627370496.0;  // from here on every double is an integer
  if (!(x > -kTwo52 && x < kTwo52)) {
    return x;
  }
  auto floor_value = static_cast<double>(static_cast<std::int64_t>(x));
  if (floor_value > x) {
    floor_value -= 1.0;
  }
  const double fraction = x - floor_value;  // exact: both operands share the exponent range
  if (fraction > 0.5) {
    return floor_value + 1.0;
  }
  if (fraction < 0.5) {
    return floor_value;
  }
  const bool floor_is_even = static_cast<std::int64_t>(floor_value) % 2 == 0;
  return floor_is_even ? floor_value : floor_value + 1.0;
}

constexpr float round_half_to_even(float x) {
  // Exact: a float widens to double without loss and an integral result
  // within float range is representable again.
  return static_cast<float>(round_half_to_even(static_cast<double>(x)));
}

constexpr bool is_integer(double x) { return round_half_to_even(x) == x; }

// real ~= multiplier * 2^(shift - 31), multiplier in [2^30, 2^31) (or 0).
// For a real in (0, 1), -shift is gemmlowp's right shift n of M = 2^-n * M0.
struct QuantizedMultiplier {
  std::int32_t multiplier = 0;
  int shift = 0;

  friend constexpr bool operator==(const QuantizedMultiplier&, const QuantizedMultiplier&) = default;
};

// Splits real >= 0 into M0 in [0.5, 1) and a power of two, then rounds
// M0 * 2^31 half to even. Reals below 2^-32 (shift < -31) flush to zero, as
// no int32 right shift can represent them.
constexpr QuantizedMultiplier quantize_multiplier(double real) {
  assert(real >= 0.0 && real <= std::numeric_limits<double>::max());
  if (real == 0.0) {
    return {};
  }
  int shift = 0;
  double m0 = real;
  // Multiplying and dividing by two is exact, so M0 keeps every bit of real.
  while (m0 >= 1.0) {
    m0 /= 2.0;
    ++shift;
  }
  while (m0 < 0.5) {
    m0 *= 2.0;
    --shift;
  }
  constexpr double kTwo31 = 2147483648.0;
  auto q = static_cast<std::int64_t>(round_half_to_even(m0 * kTwo31));
  if (q == static_cast<std::int64_t>(kTwo31)) {  // M0 rounded up to 1.0
    q /= 2;
    ++shift;
  }
  if (shift < -31) {
    return {};
  }
  return {static_cast<std::int32_t>(q), shift};
}

// gemmlowp's SaturatingRoundingDoublingHighMul: round(a * b / 2^31) with ties
// towards +infinity (its nudge is asymmetric: 1.5 -> 2, -1.5 -> -1); the one
// overflowing input pair (INT32_MIN, INT32_MIN) saturates.
constexpr std::int32_t saturating_rounding_doubling_high_mul(std::int32_t a, std::int32_t b) {
  if (a == b && a == std::numeric_limits<std::int32_t>::min()) {
    return std::numeric_limits<std::int32_t>::max();
  }
  const std::int64_t ab = static_cast<std::int64_t>(a) * static_cast<std::int64_t>(b);
  const std::int64_t nudge = ab >= 0 ? (std::int64_t{1} << 30) : 1 - (std::int64_t{1} << 30);
  return static_cast<std::int32_t>((ab + nudge) / (std::int64_t{1} << 31));
}

// gemmlowp's RoundingDivideByPOT: round(x / 2^exponent), ties away from zero.
constexpr std::int32_t rounding_divide_by_pot(std::int32_t x, int exponent) {
  assert(exponent >= 0 && exponent <= 31);
  const std::int64_t mask = (std::int64_t{1} << exponent) - 1;
  const std::int64_t remainder = static_cast<std::int64_t>(x) & mask;
  const std::int64_t threshold = (mask >> 1) + (x < 0 ? 1 : 0);
  const std::int64_t quotient = static_cast<std::int64_t>(x) >> exponent;
  return static_cast<std::int32_t>(quotient + (remainder > threshold ? 1 : 0));
}

// x * real for the real that `qm` encodes, in integers only (gemmlowp /
// TFLite scheme). It rounds twice (high multiply, then shift), so it may be
// one off from round_half_to_even(x * real) near ties; it is meant for integer
// requantization paths, not for reproducing the f32 composer results.
// Precondition: x * 2^shift fits in int32 when shift > 0 (as in TFLite).
constexpr std::int32_t multiply_by_quantized_multiplier(std::int32_t x, QuantizedMultiplier qm) {
  assert(qm.shift <= 30);
  const int left_shift = qm.shift > 0 ? qm.shift : 0;
  const int right_shift = qm.shift > 0 ? 0 : -qm.shift;
  const std::int64_t shifted = static_cast<std::int64_t>(x) * (std::int64_t{1} << left_shift);
  assert(shifted >= std::numeric_limits<std::int32_t>::min() &&
         shifted <= std::numeric_limits<std::int32_t>::max());
  return rounding_divide_by_pot(
      saturating_rounding_doubling_high_mul(static_cast<std::int32_t>(shifted), qm.multiplier),
      right_shift);
}

}  // namespace qfuse::composer
