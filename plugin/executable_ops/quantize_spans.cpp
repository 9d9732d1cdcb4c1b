// The quantizing loops the native ops share (quantize_spans.hpp).

#include "plugin/executable_ops/quantize_spans.hpp"

#include <cstring>
#include <type_traits>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(QFUSE_AVX512_KERNELS)
#include <immintrin.h>

#include "plugin/executable_ops/avx512_math.hpp"
#endif

namespace qfuse::plugin {
namespace {

// FakeQuantize by its ranges, in double (composer::fake_quantize_level):
//   x <= min(il, ih) -> ol;  x > max(il, ih) -> oh;
//   else q = round_half_to_even((x - il) * (L - 1) / (ih - il)),
//        y = q * (oh - ol) / (L - 1) + ol.
// Rounds half to even a double in [0, 2^51] by adding and removing 1.5 * 2^52
// (the default rounding mode does the rounding); NaN stays NaN.
constexpr double kRoundHalfEven = 6755399441055744.0;

#if defined(__SSE2__)
// fake_quantize_level's f64 operations on two values with their ranges.
__m128d fake_quantize_two(__m128d v, __m128d il, __m128d ih, __m128d ol, __m128d oh,
                          __m128d steps) {
  const __m128d round = _mm_set1_pd(kRoundHalfEven);
  __m128d q = _mm_div_pd(_mm_mul_pd(_mm_sub_pd(v, il), steps), _mm_sub_pd(ih, il));
  q = _mm_sub_pd(_mm_add_pd(q, round), round);
  const __m128d mid = _mm_add_pd(_mm_div_pd(_mm_mul_pd(q, _mm_sub_pd(oh, ol)), steps), ol);
  const __m128d le = _mm_cmple_pd(v, il), gt = _mm_cmpgt_pd(v, ih);
  const __m128d upper = _mm_or_pd(_mm_and_pd(gt, oh), _mm_andnot_pd(gt, mid));
  return _mm_or_pd(_mm_and_pd(le, ol), _mm_andnot_pd(le, upper));
}
#endif

#if defined(QFUSE_AVX512_KERNELS)
// GCC 12's avx512fintrin.h passes an undefined vector as the unused
// pass-through of min / max, which -Wmaybe-uninitialized reports.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// AVX-512 forms of quantize_linear_span and min_max_span, sixteen lanes, the
// same f32 operations (divide, clamp with the NaN going to the low bound,
// convert rounding half to even, add the zero point), the division as
// quotient_for_codes (avx512_math.hpp) where the scale allows, so the same
// codes; the caller checks the CPU.
template <typename T>
__attribute__((target("avx512f"))) std::int64_t quantize_linear_avx512(
    const float* x, T* y, std::int64_t n, float scale, std::int32_t zero_point, std::int32_t hi) {
  constexpr std::int32_t lo = std::numeric_limits<T>::min();
  const __m512 vs = _mm512_set1_ps(scale);
  const __m512 vlo = _mm512_set1_ps(static_cast<float>(lo - zero_point));
  const __m512 vhi = _mm512_set1_ps(static_cast<float>(hi - zero_point));
  const __m512i vzp = _mm512_set1_epi32(zero_point);
  static_assert(sizeof(T) == 1, "quotient_for_codes: bounds within 512");
  const bool by_product = quotient_by_product(scale);
  const __m512 inv = _mm512_set1_ps(by_product ? 1.0f / scale : 0.0f);
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    __m512 q = by_product ? quotient_for_codes(v, vs, inv) : _mm512_div_ps(v, vs);
    q = _mm512_min_ps(_mm512_max_ps(q, vlo), vhi);
    const __m512i c = _mm512_add_epi32(_mm512_cvtps_epi32(q), vzp);  // in [lo, hi]
    const __m128i b = std::is_same_v<T, std::uint8_t> ? _mm512_cvtusepi32_epi8(c)
                                                      : _mm512_cvtsepi32_epi8(c);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), b);
  }
  return i;
}

__attribute__((target("avx512f"))) void add_to_rows_avx512(const float* t, const float* bias,
                                                           const float* r, float* y,
                                                           std::int64_t rows,
                                                           std::int64_t channels) {
  for (std::int64_t row = 0; row < rows; ++row) {
    const std::int64_t at = row * channels;
    for (std::int64_t c = 0; c < channels; c += 16) {
      const __mmask16 k = first_lanes(channels - c);
      __m512 v =
          _mm512_add_ps(_mm512_maskz_loadu_ps(k, t + at + c), _mm512_maskz_loadu_ps(k, bias + c));
      if (r != nullptr) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(k, r + at + c));
      _mm512_mask_storeu_ps(y + at + c, k, v);
    }
  }
}

__attribute__((target("avx512f"))) std::int64_t min_max_avx512(const float* x, std::int64_t n,
                                                               float& lo, float& hi) {
  __m512 mn = _mm512_set1_ps(lo), mx = _mm512_set1_ps(hi);
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    mn = _mm512_min_ps(v, mn);  // a NaN in v keeps mn
    mx = _mm512_max_ps(v, mx);
  }
  alignas(64) float a[16], b[16];
  _mm512_store_ps(a, mn);
  _mm512_store_ps(b, mx);
  for (int k = 0; k < 16; ++k) {
    lo = std::min(lo, a[k]);
    hi = std::max(hi, b[k]);
  }
  return i;
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

}  // namespace

bool has_avx512() {
  static const bool yes = __builtin_cpu_supports("avx512f") != 0;
  return yes;
}

void add_to_rows(const float* t, const float* bias, const float* r, float* y, std::int64_t rows,
                 std::int64_t channels) {
#if defined(QFUSE_AVX512_KERNELS)
  if (has_avx512()) {
    add_to_rows_avx512(t, bias, r, y, rows, channels);
    return;
  }
#endif
  for (std::int64_t i = 0; i < rows * channels; ++i) {
    const float v = t[i] + bias[i % channels];
    y[i] = r != nullptr ? v + r[i] : v;
  }
}

// FakeQuantize with per-tensor ranges il < ih over a contiguous span: the
// same f64 operations as fake_quantize_level, two values per step with SSE2,
// so the same results.
void fake_quantize_span(const float* x, float* y, std::int64_t n, double il, double ih,
                        double ol, double oh, double steps) {
  std::int64_t i = 0;
#if defined(__SSE2__)
  const __m128d vil = _mm_set1_pd(il), vih = _mm_set1_pd(ih), vol = _mm_set1_pd(ol);
  const __m128d voh = _mm_set1_pd(oh), vsteps = _mm_set1_pd(steps);
  const auto two = [&](__m128d v) {
    return _mm_cvtpd_ps(fake_quantize_two(v, vil, vih, vol, voh, vsteps));
  };
  for (; i + 4 <= n; i += 4) {
    const __m128 f = _mm_loadu_ps(x + i);
    const __m128 lo = two(_mm_cvtps_pd(f));
    const __m128 hi = two(_mm_cvtps_pd(_mm_movehl_ps(f, f)));
    _mm_storeu_ps(y + i, _mm_movelh_ps(lo, hi));
  }
#endif
  for (; i < n; ++i) {
    y[i] = static_cast<float>(
        composer::fake_quantize_value(static_cast<double>(x[i]), il, ih, ol, oh, steps));
  }
}

// The same over a span of channels, one value each, with their own ranges
// (range[k][c]: il, ih, ol, oh of channel c): a per-channel FakeQuantize on
// [N, C] or [N, C, 1, 1], whose planes are single values.
void fake_quantize_channels(const float* x, float* y, std::int64_t n,
                            const std::vector<double> (&range)[4], double steps) {
  std::int64_t i = 0;
#if defined(__SSE2__)
  const __m128d vsteps = _mm_set1_pd(steps);
  for (; i + 2 <= n; i += 2) {
    const auto u = static_cast<std::size_t>(i);
    // Two floats: 8 bytes with no alignment (movq).
    const __m128i pair = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(x + i));
    const __m128d v = _mm_cvtps_pd(_mm_castsi128_ps(pair));
    const __m128d r = fake_quantize_two(v, _mm_loadu_pd(&range[0][u]), _mm_loadu_pd(&range[1][u]),
                                        _mm_loadu_pd(&range[2][u]), _mm_loadu_pd(&range[3][u]),
                                        vsteps);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(y + i), _mm_castps_si128(_mm_cvtpd_ps(r)));
  }
#endif
  for (; i < n; ++i) {
    const auto u = static_cast<std::size_t>(i);
    y[i] = static_cast<float>(composer::fake_quantize_value(
        static_cast<double>(x[i]), range[0][u], range[1][u], range[2][u], range[3][u], steps));
  }
}

// quantize_level over a contiguous span, four values per step with SSE2 (the
// same f64 operations as saturated_level, so the same results).
template <typename T>
void quantize_span(const float* x, T* y, std::int64_t n, double il, double range, int lo) {
  std::int64_t i = 0;
#if defined(__SSE2__)
  const __m128d vil = _mm_set1_pd(il), v255 = _mm_set1_pd(255.0), vrange = _mm_set1_pd(range);
  const __m128d vzero = _mm_setzero_pd(), vround = _mm_set1_pd(kRoundHalfEven);
  const __m128i vlo = _mm_set1_epi32(lo);
  const auto level = [&](__m128d t) {
    t = _mm_div_pd(_mm_mul_pd(_mm_sub_pd(t, vil), v255), vrange);
    t = _mm_min_pd(t, v255);  // NaN -> 255 (minpd returns the second operand)
    t = _mm_max_pd(t, vzero);
    t = _mm_sub_pd(_mm_add_pd(t, vround), vround);
    return _mm_cvttpd_epi32(t);  // two int32 in the low half
  };
  for (; i + 4 <= n; i += 4) {
    const __m128 f = _mm_loadu_ps(x + i);
    const __m128i lo2 = level(_mm_cvtps_pd(f));
    const __m128i hi2 = level(_mm_cvtps_pd(_mm_movehl_ps(f, f)));
    const __m128i q = _mm_add_epi32(_mm_unpacklo_epi64(lo2, hi2), vlo);
    const __m128i w = _mm_packs_epi32(q, q);  // in [-128, 255]: exact in int16
    const __m128i b = std::is_same_v<T, std::uint8_t> ? _mm_packus_epi16(w, w) : _mm_packs_epi16(w, w);
    const std::int32_t four = _mm_cvtsi128_si32(b);
    std::memcpy(y + i, &four, 4);
  }
#endif
  for (; i < n; ++i) y[i] = quantize_level<T>(x[i], il, range, lo);
}


// composer::quantize_linear over a span onto [T's minimum, hi] (T's whole
// range by default), sixteen values per step with AVX-512 where the CPU has
// it, else four with SSE2, by the same f32 operations (divps; maxps / minps,
// which send NaN to the lower bound as the scalar form does; cvtps2dq, which
// rounds half to even in the default MXCSR).
template <typename T>
void quantize_linear_span(const float* x, T* y, std::int64_t n, float scale,
                          std::int32_t zero_point, std::int32_t hi) {
  constexpr std::int32_t lo = std::numeric_limits<T>::min();
  std::int64_t i = 0;
#if defined(QFUSE_AVX512_KERNELS)
  if (has_avx512()) i = quantize_linear_avx512(x, y, n, scale, zero_point, hi);
#endif
#if defined(__SSE2__)
  const __m128 vs = _mm_set1_ps(scale);
  const __m128 vlo = _mm_set1_ps(static_cast<float>(lo - zero_point));
  const __m128 vhi = _mm_set1_ps(static_cast<float>(hi - zero_point));
  const __m128i vzp = _mm_set1_epi32(zero_point);
  for (; i + 4 <= n; i += 4) {
    __m128 q = _mm_div_ps(_mm_loadu_ps(x + i), vs);
    q = _mm_min_ps(_mm_max_ps(q, vlo), vhi);
    const __m128i c = _mm_add_epi32(_mm_cvtps_epi32(q), vzp);  // in [lo, hi]
    const __m128i w = _mm_packs_epi32(c, c);
    const __m128i b = std::is_same_v<T, std::uint8_t> ? _mm_packus_epi16(w, w) : _mm_packs_epi16(w, w);
    const std::int32_t four = _mm_cvtsi128_si32(b);
    std::memcpy(y + i, &four, 4);
  }
#endif
  for (; i < n; ++i) y[i] = static_cast<T>(composer::quantize_linear(x[i], scale, zero_point, lo, hi));
}

// The smallest and largest of n values (NaNs are skipped where the vector
// min / max do; a NaN then quantizes to the lowest code, as in
// composer::quantize_linear), sixteen lanes at a time with AVX-512, else four
// with SSE2.
std::pair<float, float> min_max_span(const float* x, std::int64_t n) {
  float lo = std::numeric_limits<float>::infinity(), hi = -lo;
  std::int64_t i = 0;
#if defined(QFUSE_AVX512_KERNELS)
  if (has_avx512() && n >= 16) i = min_max_avx512(x, n, lo, hi);
#endif
#if defined(__SSE2__)
  if (n - i >= 16) {
    __m128 mn0 = _mm_set1_ps(lo), mn1 = mn0, mx0 = _mm_set1_ps(hi), mx1 = mx0;
    for (; i + 8 <= n; i += 8) {
      const __m128 a = _mm_loadu_ps(x + i), b = _mm_loadu_ps(x + i + 4);
      mn0 = _mm_min_ps(a, mn0);
      mn1 = _mm_min_ps(b, mn1);
      mx0 = _mm_max_ps(a, mx0);
      mx1 = _mm_max_ps(b, mx1);
    }
    alignas(16) float mn[4], mx[4];
    _mm_store_ps(mn, _mm_min_ps(mn0, mn1));
    _mm_store_ps(mx, _mm_max_ps(mx0, mx1));
    for (int k = 0; k < 4; ++k) {
      lo = std::min(lo, mn[k]);
      hi = std::max(hi, mx[k]);
    }
  }
#endif
  for (; i < n; ++i) {
    lo = x[i] < lo ? x[i] : lo;
    hi = x[i] > hi ? x[i] : hi;
  }
  return {lo, hi};
}


template void quantize_span<std::uint8_t>(const float*, std::uint8_t*, std::int64_t, double, double, int);
template void quantize_span<std::int8_t>(const float*, std::int8_t*, std::int64_t, double, double, int);
template void quantize_linear_span<std::uint8_t>(const float*, std::uint8_t*, std::int64_t, float,
                                                 std::int32_t, std::int32_t);
template void quantize_linear_span<std::int8_t>(const float*, std::int8_t*, std::int64_t, float,
                                                std::int32_t, std::int32_t);

}  // namespace qfuse::plugin
