// Fixed-point form of an output scale, for integer-only requantization.
//
// A fused layer's output scale M = S_in * S_w / S_out (per tensor or per
// channel) is applied without floating point as an integer multiplier and a
// rounding right shift:
//   y = (acc * M0 + 2^(n-1)) >> n  ~=  acc * M,   M ~= M0 * 2^-n
// (an arithmetic shift: ties round towards +infinity, unlike the float path's
// half-to-even; acc * M0 is computed in 64 bits).
//
// The shift comes from a relative error bound eta, as in NEMO's
// requantization (D = 2^d, d >= log2(eps_b / (eps_a * eta)) with
// M = eps_a / eps_b): rounding M * 2^n to the nearest integer errs by at most
// 2^-(n+1), so n = ceil(log2(1 / (2 * M * eta))) keeps |M0 2^-n - M| <= eta M.
// M0 then needs floor(log2(M)) + n + 1 bits; when that exceeds the width
// allowed (31: M0 fits an int32), n is lowered and the bound reported is the
// one reached.
#pragma once

#include <cstdint>
#include <vector>

namespace qfuse::composer {

struct FixedPoint {
  std::int64_t multiplier = 0;  // M0, with M's sign
  int shift = 0;                // n, 0 <= n <= 62
  int bits = 0;                 // bits of |M0| (0 when M0 is 0)
  double relative_error = 0.0;  // |M0 * 2^-n - M| / |M|, as reached
  double value() const;         // M0 * 2^-n
};

// The default bound: 2^-12 keeps an 8-bit output (|acc * M| <= 2^8) within
// 1/16 of a code of the exact product.
constexpr double kDefaultFixedPointEta = 1.0 / 4096.0;

// M finite (0 gives M0 = 0; a negative M a negative M0); eta in (0, 1);
// max_bits in [1, 31].
FixedPoint to_fixed_point(double m, double eta = kDefaultFixedPointEta, int max_bits = 31);

// One per scale (an empty `scales` means M = 1).
std::vector<FixedPoint> to_fixed_point(const std::vector<float>& scales,
                                       double eta = kDefaultFixedPointEta, int max_bits = 31);

// (acc * M0 + 2^(n-1)) >> n, for |acc| < 2^31.
inline std::int64_t rescale(std::int64_t acc, const FixedPoint& f) {
  const std::int64_t p = acc * f.multiplier;
  return f.shift == 0 ? p : (p + (std::int64_t{1} << (f.shift - 1))) >> f.shift;
}

}  // namespace qfuse::composer
