// Quantization arithmetic shared by the composer and its users. Every function
// names its rounding; everything that can be is constexpr.
#pragma once

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

}  // namespace qfuse::composer
