#pragma once
// Internal: the quantizing loops the native ops share, each the same
// floating-point operations as its scalar definition in composer/ (so the
// same results), two to sixteen values per step with SSE2 / AVX-512.

#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "composer/fake_quantize_formula.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#define QFUSE_AVX512_KERNELS 1
#endif

namespace qfuse::plugin {

// Whether the CPU runs AVX-512F (the kernels below check it themselves).
bool has_avx512();

// FakeQuantize with per-tensor ranges il < ih over a contiguous span
// (composer::fake_quantize_value in f64).
void fake_quantize_span(const float* x, float* y, std::int64_t n, double il, double ih,
                        double ol, double oh, double steps);

// The same over a span of channels, one value each, with their own ranges
// (range[k][c]: il, ih, ol, oh of channel c).
void fake_quantize_channels(const float* x, float* y, std::int64_t n,
                            const std::vector<double> (&range)[4], double steps);

// The quantization level of x (composer::saturated_level over 255 steps),
// stored as T from lo.
template <typename T>
T quantize_level(float x, double il, double range, int lo) {
  return static_cast<T>(
      static_cast<int>(composer::saturated_level(static_cast<double>(x), il, range, 255.0)) + lo);
}

// quantize_level over a contiguous span. T: std::uint8_t or std::int8_t.
template <typename T>
void quantize_span(const float* x, T* y, std::int64_t n, double il, double range, int lo);

// composer::quantize_linear over a span onto [T's minimum, hi] (T's whole
// range by default). T: std::uint8_t or std::int8_t.
template <typename T>
void quantize_linear_span(const float* x, T* y, std::int64_t n, float scale,
                          std::int32_t zero_point,
                          std::int32_t hi = std::numeric_limits<T>::max());

// Codes below `lo` raised to it: quantize_linear_span's codes onto [lo, hi]
// when lo is above T's minimum (saturating there first and then at lo is
// saturating at lo, NaN included).
template <typename T>
void raise_codes(T* y, std::int64_t n, std::int32_t lo) {
  const auto floor = static_cast<T>(lo);
  for (std::int64_t i = 0; i < n; ++i) y[i] = std::max(y[i], floor);
}

// The smallest and largest of n values (NaNs are skipped where the vector
// min / max do; a NaN then quantizes to the lowest code, as in
// composer::quantize_linear).
std::pair<float, float> min_max_span(const float* x, std::int64_t n);

}  // namespace qfuse::plugin
