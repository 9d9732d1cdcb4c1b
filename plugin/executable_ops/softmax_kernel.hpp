#pragma once
// Internal: the softmax of a few rows along the last axis, with attention's
// mask: the row kernel's steps (softmax_op.cpp), which the fused attention
// (attention_op.cpp) runs on its tile of scores too, so both write the same
// bits. Callers check the CPU.
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "plugin/executable_ops/avx512_math.hpp"

namespace qfuse::plugin {

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
// Sixteen values of a row, plus the mask's there when Masked; row_part: the
// first lanes `k` of them, the others `fill`.
template <bool Masked>
__attribute__((target("avx512f"), always_inline)) inline __m512 row_values(const float* x,
                                                                           const float* m) {
  const __m512 v = _mm512_loadu_ps(x);
  if constexpr (Masked) return _mm512_add_ps(v, _mm512_loadu_ps(m));
  return v;
}
template <bool Masked>
__attribute__((target("avx512f"), always_inline)) inline __m512 row_part(const float* x,
                                                                         const float* m,
                                                                         __mmask16 k, __m512 fill) {
  const __m512 v = _mm512_mask_loadu_ps(fill, k, x);
  if constexpr (Masked) return _mm512_add_ps(v, _mm512_maskz_loadu_ps(k, m));
  return v;
}

// Softmax of R consecutive rows of n values each into y (which may be x);
// with Masked, of x + m, m[r] the n values row r adds (a row of attention's
// mask). Each row's arithmetic is the same whatever R is; R > 1 interleaves
// the rows' steps. A row of attention's scores is short (16 to 128 keys),
// and one row alone is a chain of dependent steps (the maximum's reduction
// across lanes, e^x, the sum's reduction, 1 / sum) that keeps the core
// waiting; four rows side by side fill those waits.
// The last step's default: y = e * (1 / sum) stored in place.
struct StoreRows {
  __attribute__((target("avx512f"), always_inline)) void operator()(float* at, int, std::int64_t,
                                                                    __mmask16 k, __m512 v) const {
    _mm512_mask_storeu_ps(at, k, v);
  }
};

// The steps after the maximum, for R rows of n values: y = e^(from - top[r])
// with inv[r] = 1 / the row's sum (from may be y).
template <int R>
__attribute__((target("avx512f"), always_inline)) inline void exp_rows(const float* from, float* y,
                                                                       const float* top,
                                                                       std::int64_t n, float* inv) {
  const __m512 zero = _mm512_setzero_ps();
  __m512 t[R], s0[R], s1[R];
  for (int r = 0; r < R; ++r) {
    t[r] = _mm512_set1_ps(top[r]);
    s0[r] = s1[r] = zero;
  }
  std::int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int r = 0; r < R; ++r) {
      const __m512 v0 = _mm512_loadu_ps(from + r * n + i);
      const __m512 v1 = _mm512_loadu_ps(from + r * n + i + 16);
      const __m512 e0 = exp_avx512(_mm512_sub_ps(v0, t[r]));
      const __m512 e1 = exp_avx512(_mm512_sub_ps(v1, t[r]));
      s0[r] = _mm512_add_ps(s0[r], e0);
      s1[r] = _mm512_add_ps(s1[r], e1);
      _mm512_storeu_ps(y + r * n + i, e0);
      _mm512_storeu_ps(y + r * n + i + 16, e1);
    }
  }
  for (; i < n; i += 16) {
    const __mmask16 k = first_lanes(n - i);
    for (int r = 0; r < R; ++r) {
      const __m512 v = _mm512_maskz_loadu_ps(k, from + r * n + i);
      const __m512 e = _mm512_maskz_mov_ps(k, exp_avx512(_mm512_sub_ps(v, t[r])));
      s0[r] = _mm512_add_ps(s0[r], e);
      _mm512_mask_storeu_ps(y + r * n + i, k, e);
    }
  }
  // Times 1 / sum: within an ulp of the quotient, a sixteenth of the divides.
  for (int r = 0; r < R; ++r) inv[r] = 1.0f / _mm512_reduce_add_ps(_mm512_add_ps(s0[r], s1[r]));
}

// The last step: e * inv[r] of R rows of n exponentials in y, to Finish.
// Finish(at, r, i, k, v) takes each row's last values instead of a store: v
// holds row r's values [i, i + 16) (lanes k) that would go to `at`.
template <int R, class Finish = StoreRows>
__attribute__((target("avx512f"), always_inline)) inline void scale_rows(float* y, const float* inv,
                                                                         std::int64_t n,
                                                                         Finish finish = {}) {
  __m512 by[R];
  for (int r = 0; r < R; ++r) by[r] = _mm512_set1_ps(inv[r]);
  for (std::int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = first_lanes(n - i);
    for (int r = 0; r < R; ++r) {
      finish(y + r * n + i, r, i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, y + r * n + i), by[r]));
    }
  }
}

// The softmax of R rows whose maxima top[r] are known (a caller that took
// them as it wrote the values, mask added): the steps after the maximum, in
// place.
template <int R, class Finish = StoreRows>
__attribute__((target("avx512f"), always_inline)) inline void softmax_rows_from_max(
    float* y, const float* top, std::int64_t n, Finish finish = {}) {
  float inv[R];
  exp_rows<R>(y, y, top, n, inv);
  scale_rows<R>(y, inv, n, finish);
}

// The whole softmax of R rows (see above), Finish as scale_rows'.
template <int R, bool Masked, class Finish = StoreRows>
__attribute__((target("avx512f"), always_inline)) inline void softmax_rows(const float* x,
                                                                           const float* const* m,
                                                                           float* y, std::int64_t n,
                                                                           Finish finish = {}) {
  const __m512 lowest = _mm512_set1_ps(-INFINITY);
  __m512 m0[R], m1[R];
  float top[R], inv[R];
  const float* mk[R];  // the mask's rows (unread unless Masked)
  for (int r = 0; r < R; ++r) {
    m0[r] = m1[r] = lowest;
    mk[r] = Masked ? m[r] : x;
  }
  std::int64_t i = 0;
  // The maximum; Masked: of x + m, which y keeps for the exponentials.
  for (; i + 32 <= n; i += 32) {
    for (int r = 0; r < R; ++r) {
      const __m512 v0 = row_values<Masked>(x + r * n + i, mk[r] + i);
      const __m512 v1 = row_values<Masked>(x + r * n + i + 16, mk[r] + i + 16);
      if constexpr (Masked) {
        _mm512_storeu_ps(y + r * n + i, v0);
        _mm512_storeu_ps(y + r * n + i + 16, v1);
      }
      m0[r] = _mm512_max_ps(m0[r], v0);
      m1[r] = _mm512_max_ps(m1[r], v1);
    }
  }
  for (; i < n; i += 16) {
    const __mmask16 k = first_lanes(n - i);
    for (int r = 0; r < R; ++r) {
      const __m512 v = row_part<Masked>(x + r * n + i, mk[r] + i, k, lowest);
      if constexpr (Masked) _mm512_mask_storeu_ps(y + r * n + i, k, v);
      m0[r] = _mm512_max_ps(m0[r], v);
    }
  }
  for (int r = 0; r < R; ++r) top[r] = _mm512_reduce_max_ps(_mm512_max_ps(m0[r], m1[r]));
  exp_rows<R>(Masked ? y : x, y, top, n, inv);
  scale_rows<R>(y, inv, n, finish);
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

}  // namespace qfuse::plugin
#endif
