#pragma once
// Internal: AVX-512F helpers the native kernels share: e^x on sixteen floats
// (the depthwise kernel's post-ops, the softmax kernels) and the mask of a
// row's first lanes (the row kernels' tails). Callers check the CPU.
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include <cstdint>

namespace qfuse::plugin {

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// e^x to about 1 ulp (Cephes' expf: 2^n * p(r), r = x - n ln 2 in two
// parts, p of degree 7) for x in [-87, 88.38]; e^88.38 above, and 0 below
// -87 (and for NaN), where e^x nears FLT_MIN: a zero there keeps the results
// and the products they enter out of the subnormal range, which Intel cores
// handle by a microcode assist per instruction (masked keys' exponentials made
// attention's product with the values twenty times slower). The lanes below
// are zeroed by the final scaling's mask, so no instruction makes a subnormal.
__attribute__((target("avx512f"), always_inline)) inline __m512 exp_avx512(__m512 x) {
  const __mmask16 normal = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_GE_OQ);
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(88.3762626647950f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_maskz_scalef_ps(normal, p, n);
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// The quotient x / s as the quantizers use it: clamped into integer bounds
// of at most 512 in magnitude, then rounded half to even (cvtps2dq). Where
// x * (1 / s) rounds to the same integer as the f32 quotient, it is that
// product: the two differ by at most 2^-22 of the quotient (three roundings),
// 2^-13 below 512, so only a lane within 2^-12 of a half-integer can round
// otherwise, and a vector with such a lane takes the division (a lane in
// 2048, a vector in 128, of uniformly spread values). A division retires a vector every 5 cycles
// on AMD Zen 4 and every 8 or more on Intel cores; the product and the test
// are six one-cycle operations. NaN and infinities give the same as the
// division (NaN, +-inf). Needs a scale for which quotient_by_product(s):
// 1 / s then is a normal float and the product's rounding as above.
inline bool quotient_by_product(float s) {
  const float a = s < 0.0f ? -s : s;
  return a >= 0x1p-100f && a <= 0x1p100f;
}
__attribute__((target("avx512f"), always_inline)) inline __m512 quotient_for_codes(__m512 x,
                                                                                   __m512 s,
                                                                                   __m512 inv_s) {
  const __m512 t = _mm512_mul_ps(x, inv_s);
  const __m512 frac =
      _mm512_sub_ps(t, _mm512_roundscale_ps(t, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC));
  const __m512 off_half = _mm512_abs_ps(_mm512_sub_ps(frac, _mm512_set1_ps(0.5f)));
  if (_mm512_cmp_ps_mask(off_half, _mm512_set1_ps(0x1p-12f), _CMP_LE_OQ) != 0) {
    return _mm512_div_ps(x, s);
  }
  return t;
}

// The mask of the first `left` of sixteen lanes (all when left >= 16).
__attribute__((target("avx512f"), always_inline)) inline __mmask16 first_lanes(std::int64_t left) {
  return left >= 16 ? static_cast<__mmask16>(0xffff)
                    : static_cast<__mmask16>((1u << static_cast<unsigned>(left)) - 1u);
}

}  // namespace qfuse::plugin
#endif
