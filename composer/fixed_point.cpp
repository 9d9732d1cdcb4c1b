#include "composer/fixed_point.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace qfuse::composer {

double FixedPoint::value() const { return std::ldexp(static_cast<double>(multiplier), -shift); }

FixedPoint to_fixed_point(double m, double eta, int max_bits) {
  if (!std::isfinite(m)) {
    throw std::invalid_argument("to_fixed_point: scale " + std::to_string(m) + " is not finite");
  }
  if (m == 0.0) return FixedPoint{};
  if (m < 0.0) {
    FixedPoint f = to_fixed_point(-m, eta, max_bits);
    f.multiplier = -f.multiplier;
    return f;
  }
  if (!(eta > 0.0 && eta < 1.0) || max_bits < 1 || max_bits > 31) {
    throw std::invalid_argument("to_fixed_point: eta in (0, 1) and max_bits in [1, 31]");
  }
  // The shift NEMO's bound asks for (rounding to nearest halves the error).
  if (m >= std::ldexp(1.0, max_bits)) {
    throw std::invalid_argument("to_fixed_point: scale " + std::to_string(m) + " needs more than " +
                                std::to_string(max_bits) + " bits");
  }
  // log2(1 / (2 M eta)) as a sum of logs: M * eta may underflow.
  const double wanted = std::ceil(-1.0 - std::log2(m) - std::log2(eta));
  int n = static_cast<int>(std::clamp(wanted, 0.0, 62.0));
  // The widest M0 allowed caps it: M * 2^n < 2^max_bits.
  const int exponent = static_cast<int>(std::floor(std::log2(m)));  // 2^e <= m < 2^(e+1)
  n = std::min(n, max_bits - 1 - exponent);
  n = std::clamp(n, 0, 62);
  FixedPoint f;
  f.shift = n;
  f.multiplier = std::llround(std::ldexp(m, n));
  if (f.multiplier >= (std::int64_t{1} << max_bits)) {
    // Rounding up reached 2^max_bits: one shift less.
    f.shift = std::max(0, n - 1);
    f.multiplier = std::llround(std::ldexp(m, f.shift));
  }
  if (f.multiplier >= (std::int64_t{1} << max_bits)) {
    throw std::invalid_argument("to_fixed_point: scale " + std::to_string(m) + " needs more than " +
                                std::to_string(max_bits) + " bits");
  }
  f.bits = f.multiplier == 0
               ? 0
               : static_cast<int>(std::floor(std::log2(static_cast<double>(f.multiplier)))) + 1;
  f.relative_error = std::abs(f.value() - m) / m;
  return f;
}

std::vector<FixedPoint> to_fixed_point(const std::vector<float>& scales, double eta, int max_bits) {
  std::vector<FixedPoint> out;
  if (scales.empty()) {
    out.push_back(to_fixed_point(1.0, eta, max_bits));
    return out;
  }
  for (float s : scales) out.push_back(to_fixed_point(static_cast<double>(s), eta, max_bits));
  return out;
}

}  // namespace qfuse::composer
