#pragma once
// Internal: the quantizing loops the native ops share, each the same
// floating-point operations as its scalar definition in composer/ (so the
// same results), two to sixteen values per step with SSE2 / AVX-512.

#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>
#include <variant>
#include <vector>

#include "composer/fake_quantize_formula.hpp"
#include "graph/ops.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#define QFUSE_AVX512_KERNELS 1
#endif

namespace qfuse::plugin {

// Whether the CPU runs AVX-512F (the kernels below check it themselves).
bool has_avx512();

// y[i] = t[i] + bias[c], then + r[i] where r is not null, for `rows` rows of
// `channels` (c = i mod channels): one or two f32 additions each, in that
// order, sixteen at a time with AVX-512 where the CPU has it. y may be t or r.
void add_to_rows(const float* t, const float* bias, const float* r, float* y, std::int64_t rows,
                 std::int64_t channels);

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

// A per-tensor quantization of f32 values to codes, as the unfused Quantize
// (ONNX's QuantizeLinear, onto [code_min, code_max]) or quantizing Convert
// (the range formula) computes it: what ends GateMultiply, CodeAdd and
// LayerNormQuantize.
struct CodesQuantizer {
  explicit CodesQuantizer(const std::variant<graph::ConvertAttrs, graph::QuantizeAttrs>& q) {
    if (const auto* linear = std::get_if<graph::QuantizeAttrs>(&q)) {
      linear_ = true;
      scale_ = linear->scale[0];
      zero_point_ = linear->zero_point[0];
      code_min_ = linear->code_min();
      code_max_ = linear->code_max();
      raise_to_min_ = code_min_ != linear->type_min();
      signed_ = linear->to == ElementType::s8;
    } else {
      const auto& r = std::get<graph::ConvertAttrs>(q);
      il_ = r.input_low;
      range_ = static_cast<double>(r.input_high) - static_cast<double>(r.input_low);
      code_min_ = r.code_min();
      code_max_ = code_min_ + 255;
      signed_ = r.to == ElementType::s8;
    }
  }

  template <typename T>
  void operator()(const float* p, T* y, std::int64_t n) const {
    if (linear_) {
      quantize_linear_span(p, y, n, scale_, zero_point_, code_max_);
      if (raise_to_min_) raise_codes(y, n, code_min_);
    } else {
      quantize_span(p, y, n, il_, range_, code_min_);
    }
  }

  // s8 codes (else u8), as the quantizer's type says: a grid of s8 codes may
  // start at 0 or above (an int8 QuantizeLinear clipped to [0, 127]).
  bool out_signed() const { return signed_; }

  bool linear_ = false;
  float scale_ = 1.0f;
  std::int32_t zero_point_ = 0;
  double il_ = 0.0, range_ = 0.0;
  std::int32_t code_min_ = 0, code_max_ = 255;
  bool raise_to_min_ = false;  // code_min_ is above the type's lowest code
  bool signed_ = false;
};

}  // namespace qfuse::plugin
