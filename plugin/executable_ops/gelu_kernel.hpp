#pragma once
// Internal: qfuse's erf GELU, GELU(x) = x * Phi(x) = x * 0.5 * (1 + erf(x / sqrt 2)).
//
// Written as GELU(x) = max(x, 0) - |x| * Q(|x|), Q(t) = 0.5 * erfc(t / sqrt 2)
// the normal tail (x * Phi(x) = max(x, 0) - |x| * Q(|x|) for either sign), so
// that a negative x's small result is the product of two accurate factors, not
// the difference of two near-equal ones. Q is a polynomial of degree 5 on each
// of 16 intervals of [0, 6): interpolated at the interval's Chebyshev nodes
// (in double, from std::erfc, when the table is first used), evaluated by
// Horner's rule in u = t * 16 / 6 - i, the coefficients picked per lane by
// a permute. Past 6 the last interval's value at u = 1 (Q(6) = 9.9e-10).
//
// Error against GELU in double (tests/plugin/executable_ops/gelu_kernel_test.cpp
// sweeps it): |y - GELU(x)| <= kGeluErrorBound * max(1, |x|). The AVX-512 and
// the scalar loop run the same operations in the same order (fused
// multiply-adds included) and write the same bits.
//
// oneDNN 2.6's gelu_erf (eltwise primitive and post-op) spends about 0.75 ns
// a value on a 2-core AVX-512 VNNI EPYC; this one about 0.3 (with the range).

#include <cstdint>
#include <utility>

namespace qfuse::plugin {

inline constexpr float kGeluErrorBound = 3e-7f;

// y[i] = GELU(x[i]) for n values (x and y may be the same buffer); returns
// the smallest and largest y (infinity and -infinity when n is 0).
std::pair<float, float> gelu_erf_span(const float* x, float* y, std::int64_t n);
// The scalar loop alone (the one that runs without AVX-512), for the tests.
std::pair<float, float> gelu_erf_span_scalar(const float* x, float* y, std::int64_t n);

}  // namespace qfuse::plugin
