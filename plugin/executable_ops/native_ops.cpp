// The ops qfuse runs itself: those oneDNN 2.6 has no primitive for (or none
// with the exact semantics qfuse promises), as plain loops, and the byte ops
// between int8 layers that a kernel of qfuse's runs faster than oneDNN's
// (byte_kernels.hpp: lookups, channel permutes, code max pools, row copies).

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define QFUSE_AVX512_KERNELS 1
#endif

#include "composer/fake_quantize_formula.hpp"
#include "graph/broadcast.hpp"
#include "graph/node_queries.hpp"
#include "plugin/dnnl_utils.hpp"
#include "plugin/executable_ops/byte_kernels.hpp"
#include "plugin/executable_ops/ops.hpp"
#include "plugin/parallel.hpp"
#include "qfuse/error.hpp"

namespace qfuse::plugin {
namespace {

using graph::broadcast_strides;
using graph::for_each_broadcast;
using graph::Node;
using graph::OpKind;

class BroadcastBinaryOp final : public ExecutableOp {
 public:
  BroadcastBinaryOp(const graph::Graph& g, const Node& node) : ExecutableOp(node) {
    out_shape_ = g.value(node.outputs[0]).shape;
    strides_ = {broadcast_strides(g.value(node.inputs[0]).shape, out_shape_.size()),
                broadcast_strides(g.value(node.inputs[1]).shape, out_shape_.size())};
  }

  void execute(ExecContext& ctx) const override {
    const float* a = ctx.in(node().inputs[0]).data<float>().data();
    const float* b = ctx.in(node().inputs[1]).data<float>().data();
    float* y = ctx.out(node().outputs[0]).data<float>().data();
    const OpKind kind = node().kind;
    for_each_broadcast(out_shape_, strides_, [&](std::int64_t i, const auto& off) {
      const float x0 = a[off[0]], x1 = b[off[1]];
      float r = 0.0f;
      switch (kind) {
        case OpKind::Add: r = x0 + x1; break;
        case OpKind::Subtract: r = x0 - x1; break;
        case OpKind::Multiply: r = x0 * x1; break;
        case OpKind::Divide: r = x0 / x1; break;
        case OpKind::Minimum: r = std::min(x0, x1); break;
        case OpKind::Maximum: r = std::max(x0, x1); break;
        default: break;
      }
      y[i] = r;
    });
  }

 private:
  Shape out_shape_;
  std::vector<std::vector<std::int64_t>> strides_;
};

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

class FakeQuantizeOp final : public ExecutableOp {
 public:
  FakeQuantizeOp(const graph::Graph& g, const Node& node) : ExecutableOp(node) {
    out_shape_ = g.value(node.outputs[0]).shape;
    for (std::size_t i = 0; i < node.inputs.size(); ++i) {
      strides_.push_back(broadcast_strides(g.value(node.inputs[i]).shape, out_shape_.size()));
    }
    const auto& attrs = node.attr<graph::FakeQuantizeAttrs>();
    levels_ = static_cast<double>(attrs.levels);
    // Constant per-tensor ranges with il < ih: the straight loop.
    per_tensor_ = true;
    for (std::size_t i = 1; i < 5; ++i) {
      const graph::Value& r = g.value(node.inputs[i]);
      per_tensor_ = per_tensor_ && r.is_constant() && element_count(r.shape) == 1;
    }
    if (per_tensor_) {
      for (std::size_t i = 0; i < 4; ++i) {
        ranges_[i] = static_cast<double>(g.value(node.inputs[i + 1]).constant->as_float(0));
      }
      per_tensor_ = ranges_[0] < ranges_[1];
    } else {
      per_channel_ = per_channel_ranges(g, node);
    }
  }

  std::string implementation() const override {
    return per_tensor_ || per_channel_ ? "qfuse:fake_quantize" : "reference";
  }

  void execute(ExecContext& ctx) const override {
    std::vector<const float*> in(node().inputs.size());
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = ctx.in(node().inputs[i]).data<float>().data();
    float* y = ctx.out(node().outputs[0]).data<float>().data();
    const double steps = levels_ - 1.0;
    if (per_tensor_) {
      const std::int64_t total = element_count(out_shape_);
      constexpr std::int64_t kChunk = 4096;
      const std::int64_t chunks = (total + kChunk - 1) / kChunk;
      parallel_for(total >= 32768, chunks, [&](std::int64_t k) {
        const std::int64_t begin = k * kChunk;
        fake_quantize_span(in[0] + begin, y + begin, std::min(kChunk, total - begin), ranges_[0],
                           ranges_[1], ranges_[2], ranges_[3], steps);
      });
      return;
    }
    if (per_channel_) {
      // One span per (n, c) plane with that channel's ranges; planes of one
      // value (a classifier's [1, C]) one span of channels per image.
      const std::int64_t channels = out_shape_[1];
      const std::int64_t inner = element_count(out_shape_) / (out_shape_[0] * channels);
      const std::int64_t planes = out_shape_[0] * channels;
      if (inner == 1) {
        for (std::int64_t b = 0; b < out_shape_[0]; ++b) {
          fake_quantize_channels(in[0] + b * channels, y + b * channels, channels,
                                 channel_ranges_, steps);
        }
        return;
      }
      parallel_for(planes * inner >= 32768, planes, [&](std::int64_t p) {
        const auto c = static_cast<std::size_t>(p % channels);
        fake_quantize_span(in[0] + p * inner, y + p * inner, inner, channel_ranges_[0][c],
                           channel_ranges_[1][c], channel_ranges_[2][c], channel_ranges_[3][c],
                           steps);
      });
      return;
    }
    for_each_broadcast(out_shape_, strides_, [&](std::int64_t i, const auto& off) {
      const double x = in[0][off[0]];
      const double il = in[1][off[1]], ih = in[2][off[2]];
      const double ol = in[3][off[3]], oh = in[4][off[4]];
      y[i] = static_cast<float>(composer::fake_quantize_value(x, il, ih, ol, oh, steps));
    });
  }

 private:
  // Constant ranges varying at most along axis 1 of a full input, il < ih in
  // every channel: fills channel_ranges_.
  bool per_channel_ranges(const graph::Graph& g, const Node& node) {
    const std::size_t rank = out_shape_.size();
    if (rank < 2 || g.value(node.inputs[0]).shape != out_shape_) return false;
    const auto channels = static_cast<std::size_t>(out_shape_[1]);
    for (std::size_t i = 0; i < 4; ++i) {
      const graph::Value& r = g.value(node.inputs[i + 1]);
      if (!r.is_constant() || r.shape.size() > rank) return false;
      const std::size_t lead = rank - r.shape.size();
      for (std::size_t d = 0; d < r.shape.size(); ++d) {
        if (r.shape[d] != 1 && lead + d != 1) return false;
      }
      const std::int64_t n = element_count(r.shape);
      if (n != 1 && n != out_shape_[1]) return false;
      for (std::size_t c = 0; c < channels; ++c) {
        channel_ranges_[i].push_back(r.constant->as_float(n == 1 ? 0 : static_cast<std::int64_t>(c)));
      }
    }
    for (std::size_t c = 0; c < channels; ++c) {
      if (!(channel_ranges_[0][c] < channel_ranges_[1][c])) return false;
    }
    return true;
  }

  Shape out_shape_;
  std::vector<std::vector<std::int64_t>> strides_;
  double levels_ = 256.0;
  bool per_tensor_ = false;
  bool per_channel_ = false;
  double ranges_[4] = {0, 0, 0, 0};             // il, ih, ol, oh
  std::vector<double> channel_ranges_[4];       // the same, per channel
};

// The quantization level of x (composer::saturated_level over 255 steps),
// stored as T from lo.
template <typename T>
T quantize_level(float x, double il, double range, int lo) {
  return static_cast<T>(
      static_cast<int>(composer::saturated_level(static_cast<double>(x), il, range, 255.0)) + lo);
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

#if defined(QFUSE_AVX512_KERNELS)
// GCC 12's avx512fintrin.h passes an undefined vector as the unused
// pass-through of min / max, which -Wmaybe-uninitialized reports.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// AVX-512 forms of the two loops below, sixteen lanes, the same f32
// operations (divide, clamp with the NaN going to the low bound, convert
// rounding half to even, add the zero point); the caller checks the CPU.
bool has_avx512() {
  static const bool yes = __builtin_cpu_supports("avx512f") != 0;
  return yes;
}

template <typename T>
__attribute__((target("avx512f"))) std::int64_t quantize_linear_avx512(
    const float* x, T* y, std::int64_t n, float scale, std::int32_t zero_point, std::int32_t hi) {
  constexpr std::int32_t lo = std::numeric_limits<T>::min();
  const __m512 vs = _mm512_set1_ps(scale);
  const __m512 vlo = _mm512_set1_ps(static_cast<float>(lo - zero_point));
  const __m512 vhi = _mm512_set1_ps(static_cast<float>(hi - zero_point));
  const __m512i vzp = _mm512_set1_epi32(zero_point);
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 q = _mm512_div_ps(_mm512_loadu_ps(x + i), vs);
    q = _mm512_min_ps(_mm512_max_ps(q, vlo), vhi);
    const __m512i c = _mm512_add_epi32(_mm512_cvtps_epi32(q), vzp);  // in [lo, hi]
    const __m128i b = std::is_same_v<T, std::uint8_t> ? _mm512_cvtusepi32_epi8(c)
                                                      : _mm512_cvtsepi32_epi8(c);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), b);
  }
  return i;
}

// GateMultiply over whole pixels, channels last, ONNX's QuantizeLinear:
// sixteen codes at a time, ((x - z) * s) * g[c], divided by the scale,
// clamped, rounded half to even, plus the zero point: the f32 operations of
// the scalar path in the same order. `x` starts at a pixel's first channel;
// `g_ext` is the gate row followed by its first 16 values again (C + 16
// floats), so that the gates of any 16 consecutive codes are contiguous.
// Returns how many were done (a multiple of 16).
template <typename In, typename Out>
__attribute__((target("avx512f"))) std::int64_t gate_multiply_avx512(
    const In* x, const float* g_ext, std::int64_t channels, Out* y, std::int64_t n, float z,
    float s, float scale, std::int32_t zero_point, std::int32_t hi) {
  constexpr std::int32_t lo = std::numeric_limits<Out>::min();
  const __m512 vz = _mm512_set1_ps(z), vs = _mm512_set1_ps(s), vscale = _mm512_set1_ps(scale);
  const __m512 vlo = _mm512_set1_ps(static_cast<float>(lo - zero_point));
  const __m512 vhi = _mm512_set1_ps(static_cast<float>(hi - zero_point));
  const __m512i vzp = _mm512_set1_epi32(zero_point);
  std::int64_t i = 0, c = 0;  // c: the channel of x[i]
  for (; i + 16 <= n; i += 16) {
    const __m128i codes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i));
    const __m512i wide = std::is_same_v<In, std::uint8_t> ? _mm512_cvtepu8_epi32(codes)
                                                          : _mm512_cvtepi8_epi32(codes);
    const __m512 v = _mm512_mul_ps(_mm512_sub_ps(_mm512_cvtepi32_ps(wide), vz), vs);
    __m512 q = _mm512_div_ps(_mm512_mul_ps(v, _mm512_loadu_ps(g_ext + c)), vscale);
    q = _mm512_min_ps(_mm512_max_ps(q, vlo), vhi);
    const __m512i r = _mm512_add_epi32(_mm512_cvtps_epi32(q), vzp);
    const __m128i b = std::is_same_v<Out, std::uint8_t> ? _mm512_cvtusepi32_epi8(r)
                                                        : _mm512_cvtsepi32_epi8(r);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), b);
    c += 16;
    while (c >= channels) c -= channels;
  }
  return i;
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

// composer::quantize_linear over a span onto [T's minimum, hi] (T's whole
// range by default), sixteen values per step with AVX-512 where the CPU has
// it, else four with SSE2, by the same f32 operations (divps; maxps / minps,
// which send NaN to the lower bound as the scalar form does; cvtps2dq, which
// rounds half to even in the default MXCSR).
template <typename T>
void quantize_linear_span(const float* x, T* y, std::int64_t n, float scale,
                          std::int32_t zero_point,
                          std::int32_t hi = std::numeric_limits<T>::max()) {
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

// Codes below `lo` raised to it: quantize_linear_span's codes onto [lo, hi]
// when lo is above T's minimum (saturating there first and then at lo is
// saturating at lo, NaN included).
template <typename T>
void raise_codes(T* y, std::int64_t n, std::int32_t lo) {
  const auto floor = static_cast<T>(lo);
  for (std::int64_t i = 0; i < n; ++i) y[i] = std::max(y[i], floor);
}

// A per-tensor quantization to the stored u8/s8: a quantizing Convert
// (FakeQuantize's range formula) or a Quantize (ONNX's QuantizeLinear),
// computed as FakeQuantizeOp does (the same operations in the same order, so
// every tie rounds the same way). Input and output each plain or channels
// last: one straight loop when they agree, else one per channel plane.
class QuantizeOp final : public ExecutableOp {
 public:
  QuantizeOp(const graph::Graph& g, const Node& node, bool in_channels_last,
             bool out_channels_last)
      : ExecutableOp(node) {
    if (node.kind == OpKind::Quantize) {
      const auto& a = node.attr<graph::QuantizeAttrs>();
      linear_ = true;
      scale_ = a.scale[0];
      zero_point_ = a.zero_point[0];
      lo_ = a.code_min();
      hi_ = a.code_max();
      signed_ = a.to == ElementType::s8;
      raise_to_lo_ = a.code_min() != a.type_min();
    } else {
      const auto& a = node.attr<graph::ConvertAttrs>();
      il_ = a.input_low;
      range_ = static_cast<double>(a.input_high) - static_cast<double>(a.input_low);
      lo_ = a.code_min();
      hi_ = lo_ + 255;
      signed_ = lo_ < 0;
    }
    const Shape& s = g.value(node.inputs[0]).shape;
    in_cl_ = in_channels_last && s.size() >= 3;
    out_cl_ = out_channels_last && s.size() >= 3;
    outer_ = s.empty() ? 1 : s[0];
    channels_ = s.size() >= 2 ? s[1] : 1;
    inner_ = 1;
    for (std::size_t i = 2; i < s.size(); ++i) inner_ *= s[i];
    if (s.size() < 2) outer_ = element_count(s), channels_ = 1;
  }

  void execute(ExecContext& ctx) const override {
    const float* x = ctx.in(node().inputs[0]).data<float>().data();
    Tensor& out = ctx.out(node().outputs[0]);
    if (signed_) {
      run(x, out.data<std::int8_t>().data());
    } else {
      run(x, out.data<std::uint8_t>().data());
    }
  }

  std::string implementation() const override { return "qfuse:quantize"; }

 private:
  // The quantization of a contiguous span, and of one value.
  template <typename T>
  void span(const float* x, T* y, std::int64_t n) const {
    if (linear_) {
      quantize_linear_span(x, y, n, scale_, zero_point_, hi_);
      // Codes from above the type's lowest: the loop saturated to that.
      if (raise_to_lo_) raise_codes(y, n, lo_);
    } else {
      quantize_span(x, y, n, il_, range_, lo_);
    }
  }
  template <typename T>
  T one(float x) const {
    if (linear_) {
      return static_cast<T>(composer::quantize_linear(x, scale_, zero_point_, lo_, hi_));
    }
    return quantize_level<T>(x, il_, range_, lo_);
  }

  template <typename T>
  void run(const float* x, T* y) const {
    const auto plane = [&](const float* src, T* dst, std::int64_t src_stride, std::int64_t n,
                           std::int64_t dst_stride) {
      if (src_stride == 1 && dst_stride == 1) {
        span(src, dst, n);
        return;
      }
      for (std::int64_t i = 0; i < n; ++i) dst[i * dst_stride] = one<T>(src[i * src_stride]);
    };
    // On all of the request's threads once there is enough work to share.
    const std::int64_t total = outer_ * channels_ * inner_;
    const bool parallel = total >= kParallelFrom;
    if (in_cl_ == out_cl_) {
      constexpr std::int64_t kChunk = 4096;
      const std::int64_t chunks = (total + kChunk - 1) / kChunk;
      parallel_for(parallel, chunks, [&](std::int64_t k) {
        const std::int64_t begin = k * kChunk;
        plane(x + begin, y + begin, 1, std::min(kChunk, total - begin), 1);
      });
      return;
    }
    if (!in_cl_ && out_cl_) {
      // Plain to channels last (a graph input): each channel plane quantized
      // a block of pixels at a time with the vector loop, then interleaved.
      constexpr std::int64_t kBlock = 512;
      const std::int64_t blocks = (inner_ + kBlock - 1) / kBlock;
      parallel_for(parallel, outer_ * blocks, [&](std::int64_t k) {
        const std::int64_t n = k / blocks, begin = (k % blocks) * kBlock;
        const std::int64_t len = std::min(kBlock, inner_ - begin);
        T* dst = y + (n * inner_ + begin) * channels_;
        if (channels_ <= kInterleaved) {
          T level[kInterleaved * kBlock];
          for (std::int64_t c = 0; c < channels_; ++c) {
            span(x + (n * channels_ + c) * inner_ + begin, level + c * kBlock, len);
          }
          interleave_planes(reinterpret_cast<const std::uint8_t*>(level), kBlock,
                            static_cast<int>(channels_), len, reinterpret_cast<std::uint8_t*>(dst));
          return;
        }
        T level[kBlock];
        for (std::int64_t c = 0; c < channels_; ++c) {
          span(x + (n * channels_ + c) * inner_ + begin, level, len);
          for (std::int64_t i = 0; i < len; ++i) dst[i * channels_ + c] = level[i];
        }
      });
      return;
    }
    // Offsets of element (n, c, 0) and the step along the spatial dims.
    const std::int64_t plain_step = 1, cl_step = channels_;
    const std::int64_t planes = outer_ * channels_;
    parallel_for(parallel, planes, [&](std::int64_t p) {
      const std::int64_t n = p / channels_, c = p % channels_;
      const std::int64_t plain = (n * channels_ + c) * inner_;
      const std::int64_t cl = n * channels_ * inner_ + c;
      if (in_cl_) {
        plane(x + cl, y + plain, cl_step, inner_, plain_step);
      } else {
        plane(x + plain, y + cl, plain_step, inner_, cl_step);
      }
    });
  }

  static constexpr std::int64_t kParallelFrom = 32768;
  // Up to this many channels (an image's), a block's planes are quantized
  // whole and then interleaved by interleave_planes.
  static constexpr std::int64_t kInterleaved = 4;

  double il_ = 0.0, range_ = 1.0;
  int lo_ = 0;
  int hi_ = 255;  // the highest code (linear): lo_ + levels - 1
  // ONNX's QuantizeLinear instead of the range formula.
  bool linear_ = false;
  bool signed_ = false;      // s8 codes
  bool raise_to_lo_ = false;  // lo_ is above the type's lowest code
  float scale_ = 1.0f;
  std::int32_t zero_point_ = 0;
  bool in_cl_ = false, out_cl_ = false;
  std::int64_t outer_ = 1, channels_ = 1, inner_ = 1;
};

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

// DynamicQuantize: the tensor's range (one pass), its grid
// (composer::dynamic_grid), then the codes (a second pass, quantize_linear_span),
// all on the request's threads once there is enough work to share. Plain
// layouts (the op takes no other).
class DynamicQuantizeOp final : public ExecutableOp {
 public:
  using ExecutableOp::ExecutableOp;

  void execute(ExecContext& ctx) const override {
    const Tensor& in = ctx.in(node().inputs[0]);
    const float* x = in.data<float>().data();
    const std::int64_t n = in.size();
    constexpr std::int64_t kChunk = 8192;
    const std::int64_t chunks = (n + kChunk - 1) / kChunk;
    const bool parallel = n >= kParallelFrom;
    float lo = std::numeric_limits<float>::infinity(), hi = -lo;
    if (parallel) {
#pragma omp parallel for schedule(static) reduction(min : lo) reduction(max : hi)
      for (std::int64_t k = 0; k < chunks; ++k) {
        const auto [a, b] = min_max_span(x + k * kChunk, std::min(kChunk, n - k * kChunk));
        lo = std::min(lo, a);
        hi = std::max(hi, b);
      }
    } else {
      std::tie(lo, hi) = min_max_span(x, n);
    }
    const composer::DynamicGrid grid = composer::dynamic_grid(lo, hi);
    auto* y = ctx.out(node().outputs[0]).data<std::uint8_t>().data();
    parallel_for(parallel, chunks, [&](std::int64_t k) {
      quantize_linear_span(x + k * kChunk, y + k * kChunk, std::min(kChunk, n - k * kChunk),
                           grid.scale, grid.zero_point);
    });
    ctx.out(node().outputs[1]).data<float>()[0] = grid.scale;
    ctx.out(node().outputs[2]).data<std::uint8_t>()[0] = static_cast<std::uint8_t>(grid.zero_point);
  }

  std::string implementation() const override { return "qfuse:dynamic_quantize"; }

 private:
  static constexpr std::int64_t kParallelFrom = 65536;
};

// Convert to s32 by a loop: oneDNN 2.6's reorders disagree on values at or
// beyond 2^31 (some wrap to INT32_MIN). Rounds half to even, saturates.
class ConvertToS32Op final : public ExecutableOp {
 public:
  using ExecutableOp::ExecutableOp;
  void execute(ExecContext& ctx) const override {
    const Tensor& x = ctx.in(node().inputs[0]);
    auto y = ctx.out(node().outputs[0]).data<std::int32_t>();
    for (std::int64_t i = 0; i < x.size(); ++i) {
      const double v = x.as_float(i);
      std::int32_t r;
      if (v >= 2147483647.0) {
        r = std::numeric_limits<std::int32_t>::max();
      } else if (v <= -2147483648.0) {
        r = std::numeric_limits<std::int32_t>::min();
      } else {
        r = static_cast<std::int32_t>(std::nearbyint(v));
      }
      y[static_cast<std::size_t>(i)] = r;
    }
  }
};

// Quantize with a scale and zero point per index of one axis, plain: runs of
// the values that share them, each quantized as QuantizeOp's span does.
class QuantizeChannelsOp final : public ExecutableOp {
 public:
  QuantizeChannelsOp(const graph::Graph& g, const Node& node) : ExecutableOp(node) {
    const auto& a = node.attr<graph::QuantizeAttrs>();
    const Shape& x = g.value(node.inputs[0]).shape;
    const auto axis = static_cast<std::size_t>(a.axis);
    count_ = element_count(x);
    channels_ = x[axis];
    for (std::size_t d = axis + 1; d < x.size(); ++d) inner_ *= x[d];
    for (std::int64_t c = 0; c < channels_; ++c) {
      scale_.push_back(a.scale_at(static_cast<std::size_t>(c)));
      zero_.push_back(a.zero_point_at(static_cast<std::size_t>(c)));
    }
    lo_ = a.code_min();
    hi_ = a.code_max();
    signed_ = a.to == ElementType::s8;
    raise_to_lo_ = a.code_min() != a.type_min();
  }

  void execute(ExecContext& ctx) const override {
    const float* x = ctx.in(node().inputs[0]).data<float>().data();
    void* y = ctx.out(node().outputs[0]).raw_data();
    if (signed_) {
      run(x, static_cast<std::int8_t*>(y));
    } else {
      run(x, static_cast<std::uint8_t*>(y));
    }
  }
  std::string implementation() const override { return "qfuse:quantize"; }

 private:
  template <typename T>
  void run(const float* x, T* y) const {
    const std::int64_t runs = count_ / inner_;
    parallel_for(count_ >= (1 << 16), runs, [&](std::int64_t r) {
      const auto c = static_cast<std::size_t>(r % channels_);
      quantize_linear_span(x + r * inner_, y + r * inner_, inner_, scale_[c], zero_[c], hi_);
      if (raise_to_lo_) raise_codes(y + r * inner_, inner_, lo_);
    });
  }

  std::int64_t count_ = 0, channels_ = 1, inner_ = 1;
  std::vector<float> scale_;
  std::vector<std::int32_t> zero_;
  std::int32_t lo_ = 0, hi_ = 255;
  bool signed_ = false;
  bool raise_to_lo_ = false;
};

// Dequantize: y = (f32(x) - z) * s per element (composer::dequantize), in
// the layout of its output. The input shares it, or a reorder given at
// construction first writes the codes as f32 there and the op then
// dequantizes them in place (the integers are exact in f32). Per-channel
// parameters are indexed in memory order: `inner` values share one, and
// whole rows of `channels` values when the axis is innermost (channels last).
class DequantizeOp final : public ExecutableOp {
 public:
  DequantizeOp(const graph::Graph& g, const Node& node, bool channels_last,
               std::unique_ptr<ExecutableOp> reorder)
      : ExecutableOp(node), reorder_(std::move(reorder)) {
    const auto& a = node.attr<graph::DequantizeAttrs>();
    const Shape& x = g.value(node.inputs[0]).shape;
    type_ = reorder_ ? ElementType::f32 : g.value(node.inputs[0]).type;
    count_ = element_count(x);
    if (a.per_tensor()) {
      scale_ = {a.scale[0]};
      zero_ = {a.zero_point[0]};
      inner_ = count_;
      return;
    }
    const auto axis = static_cast<std::size_t>(a.axis);
    channels_ = x[axis];
    for (std::int64_t c = 0; c < channels_; ++c) {
      scale_.push_back(a.scale_at(static_cast<std::size_t>(c)));
      zero_.push_back(a.zero_point_at(static_cast<std::size_t>(c)));
    }
    // Dims in memory order; `inner` multiplies those after the axis.
    std::vector<std::size_t> order;
    for (std::size_t d = 0; d < x.size(); ++d) order.push_back(d);
    if (channels_last && x.size() >= 3) {
      order.erase(order.begin() + 1);
      order.push_back(1);
    }
    inner_ = 1;
    const auto at = std::find(order.begin(), order.end(), axis);
    for (auto d = at + 1; d != order.end(); ++d) inner_ *= x[*d];
  }

  void execute(ExecContext& ctx) const override {
    if (reorder_) reorder_->execute(ctx);
    float* y = ctx.out(node().outputs[0]).data<float>().data();
    const void* x = reorder_ ? static_cast<const void*>(y) : ctx.in(node().inputs[0]).raw_data();
    switch (type_) {
      case ElementType::u8: run(static_cast<const std::uint8_t*>(x), y); break;
      case ElementType::s8: run(static_cast<const std::int8_t*>(x), y); break;
      case ElementType::s32: run(static_cast<const std::int32_t*>(x), y); break;
      default: run(static_cast<const float*>(x), y); break;
    }
  }

  std::string implementation() const override {
    return reorder_ ? reorder_->implementation() + "+qfuse:dequantize" : "qfuse:dequantize";
  }
  int staged_reorders() const override { return reorder_ ? 1 : 0; }

 private:
  static constexpr std::int64_t kTask = 1 << 14;  // values per task

  template <typename T>
  static void affine(const T* x, float* y, std::int64_t n, float z, float s) {
#pragma omp simd
    for (std::int64_t i = 0; i < n; ++i) y[i] = composer::dequantize(static_cast<float>(x[i]), z, s);
  }

  template <typename T>
  void run(const T* x, float* y) const {
    const bool parallel = count_ >= 4 * kTask;
    if (inner_ == 1 && channels_ > 1) {
      // Channels innermost: rows of `channels` values, a parameter each.
      const std::int64_t rows = count_ / channels_;
      const std::int64_t per_task = std::max<std::int64_t>(1, kTask / channels_);
      const float* s = scale_.data();
      const float* z = zero_.data();
      parallel_for(parallel, (rows + per_task - 1) / per_task, [&](std::int64_t t) {
        const std::int64_t end = std::min(rows, (t + 1) * per_task);
        for (std::int64_t r = t * per_task; r < end; ++r) {
          const T* xr = x + r * channels_;
          float* yr = y + r * channels_;
#pragma omp simd
          for (std::int64_t c = 0; c < channels_; ++c) {
            yr[c] = composer::dequantize(static_cast<float>(xr[c]), z[c], s[c]);
          }
        }
      });
      return;
    }
    // Runs of `inner` values that share a parameter (one run per tensor),
    // cut into tasks of about kTask values.
    const std::int64_t runs = count_ / inner_;
    const std::int64_t pieces = (inner_ + kTask - 1) / kTask;
    parallel_for(parallel, runs * pieces, [&](std::int64_t t) {
      const std::int64_t r = t / pieces, begin = (t % pieces) * kTask;
      const std::int64_t n = std::min(kTask, inner_ - begin);
      const auto c = static_cast<std::size_t>(r % channels_);
      const std::int64_t offset = r * inner_ + begin;
      affine(x + offset, y + offset, n, zero_[c], scale_[c]);
    });
  }

  std::unique_ptr<ExecutableOp> reorder_;
  ElementType type_ = ElementType::u8;
  std::int64_t count_ = 0, channels_ = 1, inner_ = 1;
  std::vector<float> scale_, zero_;
};

// Reshape and Flatten keep the bytes; only the shape changes. The memory plan
// usually makes the output a view of the input, leaving nothing to copy.
class CopyOp final : public ExecutableOp {
 public:
  using ExecutableOp::ExecutableOp;
  void execute(ExecContext& ctx) const override {
    const Tensor& x = ctx.in(node().inputs[0]);
    void* y = ctx.out(node().outputs[0]).raw_data();
    if (y != x.raw_data()) std::memcpy(y, x.raw_data(), x.byte_size());
  }
  std::string implementation() const override { return "qfuse:copy"; }
};

// Concat: each input's block (its dims from the axis on, in memory order)
// copied beside the others' for each index of the dims before it. Inputs and
// output share one layout (the compiler groups them): plain, or channels last
// (N, spatial..., C in memory), where a channel concat copies C_i bytes per
// pixel. Any element type. oneDNN 2.6's concat runs such a channels-last u8
// concat as simple:any at ~0.5 GB/s (ShuffleNet's 48-channel 16x16 concat:
// 21 us); these copies are memcpy-bound.
class ConcatOp final : public ExecutableOp {
 public:
  ConcatOp(const graph::Graph& g, const Node& node, bool channels_last) : ExecutableOp(node) {
    const Shape& out = g.value(node.outputs[0]).shape;
    const auto rank = static_cast<std::int64_t>(out.size());
    std::int64_t axis = node.attr<graph::ConcatAttrs>().axis;
    if (axis < 0) axis += rank;
    // Dims in memory order.
    std::vector<std::int64_t> order;
    for (std::int64_t d = 0; d < rank; ++d) order.push_back(d);
    if (channels_last && rank >= 3) {
      order.erase(order.begin() + 1);
      order.push_back(1);
    }
    const auto pos = static_cast<std::size_t>(
        std::find(order.begin(), order.end(), axis) - order.begin());
    outer_ = 1;
    for (std::size_t k = 0; k < pos; ++k) outer_ *= out[static_cast<std::size_t>(order[k])];
    const std::size_t bytes = element_size(g.value(node.outputs[0]).type);
    for (graph::ValueId in : node.inputs) {
      const Shape& s = g.value(in).shape;
      std::int64_t block = 1;
      for (std::size_t k = pos; k < order.size(); ++k) block *= s[static_cast<std::size_t>(order[k])];
      blocks_.push_back(static_cast<std::size_t>(block) * bytes);
      row_ += blocks_.back();
    }
  }

  void execute(ExecContext& ctx) const override {
    auto* out = static_cast<std::uint8_t*>(ctx.out(node().outputs[0]).raw_data());
    const std::size_t row = row_;
    const bool parallel = static_cast<std::int64_t>(row) * outer_ >= (1 << 20) && outer_ > 1;
    // One input at a time, each copied to its column of every row: no
    // per-run table of input pointers.
    std::size_t column = 0;
    for (std::size_t i = 0; i < blocks_.size(); ++i) {
      const auto* in = static_cast<const std::uint8_t*>(ctx.in(node().inputs[i]).raw_data());
      const std::size_t block = blocks_[i];
      if (!parallel) {
        copy_rows(in, static_cast<std::int64_t>(block), out + column, static_cast<std::int64_t>(row),
                  static_cast<std::int64_t>(block), outer_);
      } else {
        parallel_for(parallel, outer_, [&](std::int64_t o) {
          const auto k = static_cast<std::size_t>(o);
          std::memcpy(out + k * row + column, in + k * block, block);
        });
      }
      column += block;
    }
  }

  std::string implementation() const override { return "qfuse:concat"; }

 private:
  std::int64_t outer_ = 1;
  std::size_t row_ = 0;
  std::vector<std::size_t> blocks_;  // bytes of each input per outer index
};

// Resize with ONNX's coordinate transforms. Nearest copies blocks through a
// table made once (any element type: f32, u8, s8; plain or channels last, the
// same for input and output): one entry per output block, a block being the
// trailing dims the resize leaves alone, so a channels-last upsample copies
// whole pixels. Linear interpolates f32 one axis at a time (multilinear is
// separable) on plain tensors.
class ResizeOp final : public ExecutableOp {
 public:
  ResizeOp(const graph::Graph& g, const Node& node, bool channels_last) : ExecutableOp(node) {
    in_shape_ = g.value(node.inputs[0]).shape;
    attrs_ = node.attr<graph::ResizeAttrs>();
    element_bytes_ = element_size(g.value(node.inputs[0]).type);
    if (attrs_.mode == graph::ResizeMode::nearest) make_block_table(channels_last);
  }

  std::string implementation() const override {
    return attrs_.mode == graph::ResizeMode::nearest ? "qfuse:resize_nearest" : "reference";
  }

  void execute(ExecContext& ctx) const override {
    const Tensor& x = ctx.in(node().inputs[0]);
    Tensor& out = ctx.out(node().outputs[0]);
    if (attrs_.mode == graph::ResizeMode::nearest) {
      const auto* in = static_cast<const std::uint8_t*>(x.raw_data());
      auto* y = static_cast<std::uint8_t*>(out.raw_data());
      const auto blocks = static_cast<std::int64_t>(source_.size());
      const std::size_t bytes = block_ * element_bytes_;
      parallel_for(blocks * static_cast<std::int64_t>(bytes) >= 65536, blocks, [&](std::int64_t i) {
        std::memcpy(y + static_cast<std::size_t>(i) * bytes,
                    in + static_cast<std::size_t>(source_[static_cast<std::size_t>(i)]) * element_bytes_,
                    bytes);
      });
      return;
    }
    std::vector<float> cur(x.data<float>().begin(), x.data<float>().end());
    Shape shape = in_shape_;
    for (std::size_t d = 0; d < shape.size(); ++d) {
      if (shape[d] == attrs_.sizes[d] && scale(d) == 1.0f) continue;
      cur = resize_linear_axis(cur, shape, d);
      shape[d] = attrs_.sizes[d];
    }
    auto y = out.data<float>();
    std::copy(cur.begin(), cur.end(), y.begin());
  }

 private:
  float scale(std::size_t d) const {
    return attrs_.scales.empty()
               ? static_cast<float>(attrs_.sizes[d]) / static_cast<float>(in_shape_[d])
               : attrs_.scales[d];
  }

  // Input coordinate of output coordinate `x` along axis d (ONNX Resize).
  double source_coordinate(std::size_t d, std::int64_t x) const {
    const double s = scale(d);
    const double in = static_cast<double>(in_shape_[d]);
    // ONNX's resized length: in * scale when scales are given (not the
    // floored output size), which matters for align_corners.
    const double out = attrs_.scales.empty() ? static_cast<double>(attrs_.sizes[d]) : in * s;
    const double xd = static_cast<double>(x);
    // v / scale; without explicit scales as v * in / out, so that exact
    // ratios like 3/5 give exact coordinates (1/s would round first).
    const auto unscale = [&](double v) {
      return attrs_.scales.empty() ? v * in / static_cast<double>(attrs_.sizes[d]) : v / s;
    };
    switch (attrs_.transform) {
      case graph::CoordinateTransform::half_pixel: return unscale(xd + 0.5) - 0.5;
      case graph::CoordinateTransform::pytorch_half_pixel:
        return out > 1 ? unscale(xd + 0.5) - 0.5 : 0.0;
      case graph::CoordinateTransform::align_corners:
        return out == 1 ? 0.0 : xd * (in - 1) / (out - 1);
      case graph::CoordinateTransform::asymmetric: return unscale(xd);
      case graph::CoordinateTransform::tf_half_pixel_for_nn: return unscale(xd + 0.5);
    }
    return 0.0;
  }

  std::int64_t nearest_index(std::size_t d, std::int64_t x) const {
    const double c = source_coordinate(d, x);
    double i = 0.0;
    switch (attrs_.nearest_mode) {
      case graph::NearestMode::round_prefer_floor:
        i = (c - std::floor(c) == 0.5) ? std::floor(c) : std::round(c);
        break;
      case graph::NearestMode::round_prefer_ceil:
        i = (c - std::floor(c) == 0.5) ? std::ceil(c) : std::round(c);
        break;
      case graph::NearestMode::floor: i = std::floor(c); break;
      case graph::NearestMode::ceil: i = std::ceil(c); break;
    }
    return std::clamp(static_cast<std::int64_t>(i), std::int64_t{0}, in_shape_[d] - 1);
  }

  // Fills source_ (the input element offset of each output block) and
  // block_ (elements per block). Dims run in memory order, outermost first.
  void make_block_table(bool channels_last) {
    const std::size_t rank = in_shape_.size();
    std::vector<std::size_t> order(rank);
    for (std::size_t i = 0; i < rank; ++i) order[i] = i;
    if (channels_last && rank >= 3) std::rotate(order.begin() + 1, order.begin() + 2, order.end());
    std::vector<std::int64_t> stride(rank);
    std::int64_t st = 1;
    for (std::size_t i = rank; i-- > 0;) {
      stride[order[i]] = st;
      st *= in_shape_[order[i]];
    }
    // Trailing dims copied as they are form the block.
    std::size_t copied = rank;
    block_ = 1;
    while (copied > 0) {
      const std::size_t d = order[copied - 1];
      bool identity = attrs_.sizes[d] == in_shape_[d];
      for (std::int64_t o = 0; identity && o < attrs_.sizes[d]; ++o) identity = nearest_index(d, o) == o;
      if (!identity) break;
      block_ *= static_cast<std::size_t>(in_shape_[d]);
      --copied;
    }
    std::vector<std::vector<std::int64_t>> offset(copied);
    std::int64_t blocks = 1;
    for (std::size_t i = 0; i < copied; ++i) {
      const std::size_t d = order[i];
      for (std::int64_t o = 0; o < attrs_.sizes[d]; ++o) offset[i].push_back(nearest_index(d, o) * stride[d]);
      blocks *= attrs_.sizes[d];
    }
    source_.assign(static_cast<std::size_t>(blocks), 0);
    std::vector<std::int64_t> index(copied, 0);
    for (std::int64_t& src : source_) {
      src = 0;
      for (std::size_t i = 0; i < copied; ++i) src += offset[i][static_cast<std::size_t>(index[i])];
      for (std::size_t i = copied; i-- > 0;) {
        if (++index[i] < attrs_.sizes[order[i]]) break;
        index[i] = 0;
      }
    }
  }

  std::vector<float> resize_linear_axis(const std::vector<float>& x, const Shape& shape,
                                        std::size_t d) const {
    const std::int64_t in = shape[d];
    const std::int64_t out = attrs_.sizes[d];
    std::int64_t outer = 1, inner = 1;
    for (std::size_t i = 0; i < d; ++i) outer *= shape[i];
    for (std::size_t i = d + 1; i < shape.size(); ++i) inner *= shape[i];
    std::vector<float> y(static_cast<std::size_t>(outer * out * inner));
    for (std::int64_t o = 0; o < out; ++o) {
      const double c = std::clamp(source_coordinate(d, o), 0.0, static_cast<double>(in - 1));
      const auto i0 = static_cast<std::int64_t>(std::floor(c));
      const std::int64_t i1 = std::min(i0 + 1, in - 1);
      const double w1 = c - static_cast<double>(i0);
      for (std::int64_t a = 0; a < outer; ++a) {
        const float* p0 = &x[static_cast<std::size_t>((a * in + i0) * inner)];
        const float* p1 = &x[static_cast<std::size_t>((a * in + i1) * inner)];
        float* q = &y[static_cast<std::size_t>((a * out + o) * inner)];
        for (std::int64_t b = 0; b < inner; ++b) {
          q[b] = static_cast<float>((1.0 - w1) * p0[b] + w1 * p1[b]);
        }
      }
    }
    return y;
  }

  Shape in_shape_;
  graph::ResizeAttrs attrs_;
  std::size_t element_bytes_ = 0;
  std::size_t block_ = 1;
  std::vector<std::int64_t> source_;
};

// GateMultiply: codes x times a per-channel gate g, quantized. Per row of
// contiguous codes (one pixel's channels when channels last, one channel's
// plane when plain) the f32 products ((x - z) * s) * g[n, c] go to a small
// buffer, each operation rounded as the unfused Convert, Subtract, Multiply
// and Multiply round it, and the buffer is quantized as the quantizing
// Convert does (quantize_linear_span / quantize_span): the same codes.
class GateMultiplyOp final : public ExecutableOp {
 public:
  GateMultiplyOp(const graph::Graph& g, const Node& node, bool channels_last)
      : ExecutableOp(node) {
    const auto& a = node.attr<graph::GateMultiplyAttrs>();
    zero_point_ = a.zero_point;
    scale_ = a.scale;
    if (const auto* q = std::get_if<graph::QuantizeAttrs>(&a.quantize)) {
      linear_ = true;
      q_scale_ = q->scale[0];
      q_zero_point_ = q->zero_point[0];
      code_min_ = q->code_min();
      code_max_ = q->code_max();
    } else {
      const auto& r = std::get<graph::ConvertAttrs>(a.quantize);
      il_ = r.input_low;
      range_ = static_cast<double>(r.input_high) - static_cast<double>(r.input_low);
      code_min_ = r.code_min();
      code_max_ = code_min_ + 255;
    }
    const Shape& x = g.value(node.inputs[0]).shape;
    batch_ = x[0];
    channels_ = x[1];
    inner_ = 1;
    for (std::size_t d = 2; d < x.size(); ++d) inner_ *= x[d];
    gate_batch_ = g.value(node.inputs[1]).shape[0];
    channels_last_ = channels_last;
    in_signed_ = g.value(node.inputs[0]).type == ElementType::s8;
  }

  void execute(ExecContext& ctx) const override {
    const void* x = ctx.in(node().inputs[0]).raw_data();
    const float* gate = ctx.in(node().inputs[1]).data<float>().data();
    void* y = ctx.out(node().outputs[0]).raw_data();
    const bool out_signed = code_min_ < 0;
    if (in_signed_) {
      out_signed ? run(static_cast<const std::int8_t*>(x), gate, static_cast<std::int8_t*>(y))
                 : run(static_cast<const std::int8_t*>(x), gate, static_cast<std::uint8_t*>(y));
    } else {
      out_signed ? run(static_cast<const std::uint8_t*>(x), gate, static_cast<std::int8_t*>(y))
                 : run(static_cast<const std::uint8_t*>(x), gate, static_cast<std::uint8_t*>(y));
    }
  }

  std::string implementation() const override { return "qfuse:gate_multiply"; }

 private:
  static constexpr std::int64_t kChunk = 256;

  template <typename T>
  void quantize(const float* p, T* y, std::int64_t n) const {
    if (linear_) {
      quantize_linear_span(p, y, n, q_scale_, q_zero_point_, code_max_);
    } else {
      quantize_span(p, y, n, il_, range_, code_min_);
    }
  }

  // Channels last with AVX-512: each task runs whole pixels as one span, the
  // gates of any 16 consecutive codes read from the gate row extended by its
  // first 16 values (a per-row call cost more than the row's work:
  // MobileNetV3-large's 40-channel 16x16 gate, 6.2 us).
  template <typename In, typename Out>
  bool run_pixels(const In* x, const float* gate, Out* y) const {
#if defined(QFUSE_AVX512_KERNELS)
    if (!channels_last_ || !linear_ || !has_avx512()) return false;
    const float z = zero_point_, s = scale_;
    constexpr std::int64_t kPixels = 1024;  // per task
    const std::int64_t tasks = (inner_ + kPixels - 1) / kPixels;
    const std::int64_t ext = gate_batch_ * (channels_ + 16);
    constexpr std::int64_t kOnStack = 4096;
    float on_stack[kOnStack];
    std::vector<float> on_heap(static_cast<std::size_t>(ext > kOnStack ? ext : 0));
    float* const g_ext = ext > kOnStack ? on_heap.data() : on_stack;
    for (std::int64_t n = 0; n < gate_batch_; ++n) {
      float* row = g_ext + n * (channels_ + 16);
      std::copy_n(gate + n * channels_, channels_, row);
      for (std::int64_t c = 0; c < 16; ++c) row[channels_ + c] = row[c % channels_];
    }
    parallel_for(batch_ * inner_ * channels_ >= (1 << 18), batch_ * tasks, [&](std::int64_t t) {
      const std::int64_t n = t / tasks, first = (t % tasks) * kPixels;
      const std::int64_t count = std::min(kPixels, inner_ - first) * channels_;
      const float* g = g_ext + (gate_batch_ == 1 ? 0 : n * (channels_ + 16));
      const std::int64_t offset = (n * inner_ + first) * channels_;
      const std::int64_t done = gate_multiply_avx512(x + offset, g, channels_, y + offset, count,
                                                     z, s, q_scale_, q_zero_point_, code_max_);
      float p[16];
      for (std::int64_t i = done; i < count; ++i) {
        const float v = (static_cast<float>(x[offset + i]) - z) * s;
        p[i - done] = v * g[i % channels_];
      }
      if (done < count) quantize(p, y + offset + done, count - done);
    });
    return true;
#else
    (void)x, (void)gate, (void)y;
    return false;
#endif
  }

  template <typename In, typename Out>
  void run(const In* x, const float* gate, Out* y) const {
    if (run_pixels(x, gate, y)) return;
    const std::int64_t rows = channels_last_ ? batch_ * inner_ : batch_ * channels_;
    const std::int64_t row = channels_last_ ? channels_ : inner_;
    const float z = zero_point_, s = scale_;
    parallel_for(rows * row >= (1 << 18), rows, [&](std::int64_t r) {
      const std::int64_t n = channels_last_ ? r / inner_ : r / channels_;
      const float* g = gate + (gate_batch_ == 1 ? 0 : n * channels_);
      const In* src = x + r * row;
      Out* dst = y + r * row;
      float p[kChunk];
      for (std::int64_t k = 0; k < row; k += kChunk) {
        const std::int64_t m = std::min(kChunk, row - k);
        if (channels_last_) {
          for (std::int64_t i = 0; i < m; ++i) {
            const float v = (static_cast<float>(src[k + i]) - z) * s;
            p[i] = v * g[k + i];
          }
          quantize(p, dst + k, m);
          continue;
        }
        const float gc = g[r % channels_];
        for (std::int64_t i = 0; i < m; ++i) {
          const float v = (static_cast<float>(src[k + i]) - z) * s;
          p[i] = v * gc;
        }
        quantize(p, dst + k, m);
      }
    });
  }

  float zero_point_ = 0.0f, scale_ = 1.0f;
  // The quantization: ONNX's (linear_) or the range formula.
  bool linear_ = false;
  float q_scale_ = 1.0f;
  std::int32_t q_zero_point_ = 0;
  double il_ = 0.0, range_ = 0.0;
  std::int32_t code_min_ = 0, code_max_ = 255;
  std::int64_t batch_ = 1, channels_ = 1, inner_ = 1, gate_batch_ = 1;
  bool channels_last_ = false, in_signed_ = false;
};

// Lookup: one byte through a 256-entry table, any layout (input and output
// share it), on all threads once there is enough to share.
class LookupOp final : public ExecutableOp {
 public:
  LookupOp(const graph::Graph& g, const Node& node) : ExecutableOp(node) {
    const auto& a = node.attr<graph::LookupAttrs>();
    std::copy(a.table.begin(), a.table.end(), table_.begin());
    // s8 codes index from -128: flipping the sign bit of the byte does it.
    flip_ = g.value(node.inputs[0]).type == ElementType::s8 ? 0x80 : 0x00;
  }

  void execute(ExecContext& ctx) const override {
    const Tensor& x = ctx.in(node().inputs[0]);
    const auto* in = static_cast<const std::uint8_t*>(x.raw_data());
    auto* out = static_cast<std::uint8_t*>(ctx.out(node().outputs[0]).raw_data());
    const std::int64_t n = x.size();
    constexpr std::int64_t kChunk = 16384;
    parallel_for(n >= 4 * kChunk, (n + kChunk - 1) / kChunk, [&](std::int64_t k) {
      const std::int64_t begin = k * kChunk;
      lookup_bytes(in + begin, out + begin, std::min(kChunk, n - begin), table_, flip_);
    });
  }

  std::string implementation() const override { return "qfuse:lookup"; }

 private:
  std::array<std::uint8_t, 256> table_{};
  std::uint8_t flip_ = 0;
};

// MaxPool of u8/s8 codes, 2D, channels last on both sides: the window max per
// channel, 64 channels a step (oneDNN 2.6's int8 pooling takes 16 us for
// ShuffleNetV2's 3x3/2 stem pool over 24 channels, this about 2). Made only
// when every window holds a real cell.
class MaxPoolBytesOp final : public ExecutableOp {
 public:
  static std::unique_ptr<ExecutableOp> make(const graph::Graph& g, const Node& node,
                                            bool in_channels_last, bool out_channels_last) {
    const auto& a = node.attr<graph::PoolAttrs>();
    const graph::Value& x = g.value(node.inputs[0]);
    const Shape& out = g.value(node.outputs[0]).shape;
    const bool codes = x.type == ElementType::u8 || x.type == ElementType::s8;
    if (!codes || !in_channels_last || !out_channels_last || x.shape.size() != 4 ||
        a.kernel.size() != 2 || a.out_scale != 1.0f || a.out_shift != 0.0f) {
      return nullptr;
    }
    MaxPoolGeometry p;
    p.n = x.shape[0], p.c = x.shape[1], p.ih = x.shape[2], p.iw = x.shape[3];
    p.oh = out[2], p.ow = out[3];
    p.kh = a.kernel[0], p.kw = a.kernel[1], p.sh = a.strides[0], p.sw = a.strides[1];
    p.ph = a.pads_begin[0], p.pw = a.pads_begin[1];
    p.dh = a.dilations.empty() ? 1 : a.dilations[0];
    p.dw = a.dilations.empty() ? 1 : a.dilations[1];
    const auto every_window_real = [](std::int64_t outs, std::int64_t k, std::int64_t s,
                                      std::int64_t pad, std::int64_t d, std::int64_t in) {
      for (std::int64_t o = 0; o < outs; ++o) {
        bool real = false;
        for (std::int64_t i = 0; i < k && !real; ++i) {
          const std::int64_t at = o * s - pad + i * d;
          real = at >= 0 && at < in;
        }
        if (!real) return false;
      }
      return true;
    };
    if (!every_window_real(p.oh, p.kh, p.sh, p.ph, p.dh, p.ih) ||
        !every_window_real(p.ow, p.kw, p.sw, p.pw, p.dw, p.iw) || !max_pool_window_fits(p)) {
      return nullptr;
    }
    return std::unique_ptr<ExecutableOp>(new MaxPoolBytesOp(node, p, x.type == ElementType::s8));
  }

  void execute(ExecContext& ctx) const override {
    const auto* x = static_cast<const std::uint8_t*>(ctx.in(node().inputs[0]).raw_data());
    auto* y = static_cast<std::uint8_t*>(ctx.out(node().outputs[0]).raw_data());
    const std::int64_t rows = g_.n * g_.oh;
    const bool parallel = rows * g_.ow * g_.c >= (1 << 16);
    constexpr std::int64_t kRows = 8;
    parallel_for(parallel, (rows + kRows - 1) / kRows, [&](std::int64_t k) {
      max_pool_bytes(x, y, g_, signed_, k * kRows, std::min(rows, (k + 1) * kRows));
    });
  }

  std::string implementation() const override { return "qfuse:max_pool"; }

 private:
  MaxPoolBytesOp(const Node& node, const MaxPoolGeometry& g, bool is_signed)
      : ExecutableOp(node), g_(g), signed_(is_signed) {}

  MaxPoolGeometry g_;
  bool signed_ = false;
};

// A Slice that cuts only the innermost dimension in memory (channels of a
// channels-last tensor, the last dim of a plain one): the same block of
// every row, copied by copy_rows. Other slices are oneDNN reorders.
class SliceRowsOp final : public ExecutableOp {
 public:
  static std::unique_ptr<ExecutableOp> make(const graph::Graph& g, const Node& node,
                                            bool in_channels_last, bool out_channels_last) {
    const auto& a = node.attr<graph::SliceAttrs>();
    const graph::Value& x = g.value(node.inputs[0]);
    const Shape& s = x.shape;
    if (s.empty() || in_channels_last != out_channels_last) return nullptr;
    const bool cl = in_channels_last && s.size() >= 3;
    const std::size_t inner = cl ? 1 : s.size() - 1;
    std::int64_t rows = 1;
    for (std::size_t d = 0; d < s.size(); ++d) {
      if (d == inner) continue;
      if (a.begin[d] != 0 || a.size[d] != s[d]) return nullptr;
      rows *= s[d];
    }
    const auto e = static_cast<std::int64_t>(element_size(x.type));
    return std::unique_ptr<ExecutableOp>(
        new SliceRowsOp(node, rows, s[inner] * e, a.size[inner] * e, a.begin[inner] * e));
  }

  void execute(ExecContext& ctx) const override {
    const auto* x = static_cast<const std::uint8_t*>(ctx.in(node().inputs[0]).raw_data());
    auto* y = static_cast<std::uint8_t*>(ctx.out(node().outputs[0]).raw_data());
    copy_rows(x + offset_, src_row_, y, width_, width_, rows_);
  }

  std::string implementation() const override { return "qfuse:slice"; }

 private:
  SliceRowsOp(const Node& node, std::int64_t rows, std::int64_t src_row, std::int64_t width,
              std::int64_t offset)
      : ExecutableOp(node), rows_(rows), src_row_(src_row), width_(width), offset_(offset) {}

  std::int64_t rows_, src_row_, width_, offset_;
};

// ShuffleChannels, any element type: plain, whole channel planes copied in
// the new order; channels last, each pixel's channels permuted (bytes by
// ChannelPermutation). Input and output share the layout.
class ShuffleChannelsOp final : public ExecutableOp {
 public:
  ShuffleChannelsOp(const graph::Graph& g, const Node& node, bool channels_last)
      : ExecutableOp(node), perm_(source_channels(g, node)) {
    const graph::Value& x = g.value(node.inputs[0]);
    element_ = static_cast<std::int64_t>(element_size(x.type));
    batch_ = x.shape[0];
    channels_ = x.shape[1];
    for (std::size_t d = 2; d < x.shape.size(); ++d) inner_ *= x.shape[d];
    channels_last_ = channels_last && x.shape.size() >= 3;
    if (channels_last_ && element_ == 1) bytes_.emplace(perm_);
  }

  void execute(ExecContext& ctx) const override {
    const auto* x = static_cast<const std::uint8_t*>(ctx.in(node().inputs[0]).raw_data());
    auto* y = static_cast<std::uint8_t*>(ctx.out(node().outputs[0]).raw_data());
    if (bytes_) {
      bytes_->run(x, y, batch_ * inner_);
    } else if (channels_last_) {
      const std::int64_t row = channels_ * element_;
      for (std::int64_t p = 0; p < batch_ * inner_; ++p) {
        for (std::int64_t c = 0; c < channels_; ++c) {
          std::memcpy(y + p * row + c * element_,
                      x + p * row + perm_[static_cast<std::size_t>(c)] * element_,
                      static_cast<std::size_t>(element_));
        }
      }
    } else {
      const std::int64_t plane = inner_ * element_;
      for (std::int64_t n = 0; n < batch_; ++n) {
        for (std::int64_t c = 0; c < channels_; ++c) {
          std::memcpy(y + (n * channels_ + c) * plane,
                      x + (n * channels_ + perm_[static_cast<std::size_t>(c)]) * plane,
                      static_cast<std::size_t>(plane));
        }
      }
    }
  }

  std::string implementation() const override { return "qfuse:shuffle_channels"; }

 private:
  // Output channel j * g + i reads input channel i * (C / g) + j.
  static std::vector<std::int64_t> source_channels(const graph::Graph& g, const Node& node) {
    const std::int64_t channels = g.value(node.inputs[0]).shape[1];
    const std::int64_t groups = node.attr<graph::ShuffleChannelsAttrs>().groups;
    const std::int64_t per_group = channels / groups;
    std::vector<std::int64_t> perm(static_cast<std::size_t>(channels));
    for (std::int64_t c = 0; c < channels; ++c) {
      perm[static_cast<std::size_t>(c)] = (c % groups) * per_group + c / groups;
    }
    return perm;
  }

  std::vector<std::int64_t> perm_;
  std::optional<ChannelPermutation> bytes_;
  std::int64_t element_ = 1, batch_ = 1, channels_ = 1, inner_ = 1;
  bool channels_last_ = false;
};

// A global AvgPool of u8/s8 codes written as f32 (PoolAttrs::to_f32):
// out_scale * mean + out_shift per image and channel, the codes summed
// exactly in integers and the mean scaled in double, rounded to f32 once.
class DequantizedMeanOp final : public ExecutableOp {
 public:
  DequantizedMeanOp(const graph::Graph& g, const Node& node, bool channels_last)
      : ExecutableOp(node) {
    const auto& a = node.attr<graph::PoolAttrs>();
    const graph::Value& x = g.value(node.inputs[0]);
    signed_ = x.type == ElementType::s8;
    batch_ = x.shape[0];
    channels_ = x.shape[1];
    for (std::size_t d = 2; d < x.shape.size(); ++d) pixels_ *= x.shape[d];
    channels_last_ = channels_last;
    scale_ = static_cast<double>(a.out_scale) / static_cast<double>(pixels_);
    shift_ = a.out_shift;
  }

  void execute(ExecContext& ctx) const override {
    const auto* x = static_cast<const std::uint8_t*>(ctx.in(node().inputs[0]).raw_data());
    float* y = ctx.out(node().outputs[0]).data<float>().data();
    // The per-channel sums live in the request's scratchpad.
    auto* sums = static_cast<std::int64_t*>(ctx.scratchpad());
    for (std::int64_t n = 0; n < batch_; ++n) {
      const std::uint8_t* image = x + n * channels_ * pixels_;
      image_channel_sums(image, pixels_, channels_, signed_, channels_last_, sums);
      for (std::int64_t c = 0; c < channels_; ++c) {
        y[n * channels_ + c] = static_cast<float>(scale_ * static_cast<double>(sums[c]) + shift_);
      }
    }
  }

  std::string implementation() const override { return "qfuse:dequantized_mean"; }
  std::size_t scratchpad_size() const override {
    return static_cast<std::size_t>(channels_) * sizeof(std::int64_t);
  }

 private:
  bool signed_ = false, channels_last_ = false;
  std::int64_t batch_ = 1, channels_ = 1, pixels_ = 1;
  double scale_ = 1.0, shift_ = 0.0;
};

// Gather: blocks of data (everything after `axis`) copied by index, any
// element type, plain layouts. Indices are checked against the axis's length
// on every inference: a token id past the vocabulary is an error naming the
// node, not a read out of bounds.
class GatherOp final : public ExecutableOp {
 public:
  GatherOp(const graph::Graph& g, const Node& node) : ExecutableOp(node) {
    const Shape& data = g.value(node.inputs[0]).shape;
    const auto axis = static_cast<std::size_t>(node.attr<graph::GatherAttrs>().axis);
    for (std::size_t d = 0; d < axis; ++d) outer_ *= data[d];
    length_ = data[axis];
    for (std::size_t d = axis + 1; d < data.size(); ++d) inner_ *= data[d];
    block_bytes_ = static_cast<std::size_t>(inner_) * element_size(g.value(node.inputs[0]).type);
  }

  void execute(ExecContext& ctx) const override {
    const Tensor& data = ctx.in(node().inputs[0]);
    const Tensor& idx = ctx.in(node().inputs[1]);
    const auto* src = static_cast<const std::byte*>(data.raw_data());
    auto* dst = static_cast<std::byte*>(ctx.out(node().outputs[0]).raw_data());
    const std::int64_t count = idx.size();
    std::vector<std::int64_t> rows(static_cast<std::size_t>(count));
    for (std::int64_t k = 0; k < count; ++k) {
      const std::int64_t i = index(idx, k);
      if (i < -length_ || i >= length_) {
        throw InferenceError("infer Gather node '" + node().name + "': index " + std::to_string(i) +
                             " is out of range (expected [" + std::to_string(-length_) + ", " +
                             std::to_string(length_) + "))");
      }
      rows[static_cast<std::size_t>(k)] = i < 0 ? i + length_ : i;
    }
    for (std::int64_t o = 0; o < outer_; ++o) {
      for (std::int64_t k = 0; k < count; ++k) {
        std::memcpy(dst + static_cast<std::size_t>(o * count + k) * block_bytes_,
                    src + static_cast<std::size_t>(o * length_ + rows[static_cast<std::size_t>(k)]) *
                              block_bytes_,
                    block_bytes_);
      }
    }
  }

  std::string implementation() const override { return "qfuse:gather"; }

 private:
  static std::int64_t index(const Tensor& idx, std::int64_t k) {
    const auto i = static_cast<std::size_t>(k);
    switch (idx.type()) {
      case ElementType::s64: return idx.data<std::int64_t>()[i];
      case ElementType::s32: return idx.data<std::int32_t>()[i];
      default: {
        // An integral f32 (an importer's integer carrier); others are no index.
        const float v = idx.data<float>()[i];
        return std::nearbyint(v) == v && std::abs(v) < 9.0e18f ? static_cast<std::int64_t>(v)
                                                              : std::numeric_limits<std::int64_t>::min();
      }
    }
  }

  std::int64_t outer_ = 1, length_ = 1, inner_ = 1;
  std::size_t block_bytes_ = 0;
};

// Convert from s64 (indices, masks) by a loop: oneDNN 2.6 has no 64-bit
// integers. To f32 rounds to nearest (exact below 2^24); to s32 saturates.
class ConvertFromS64Op final : public ExecutableOp {
 public:
  using ExecutableOp::ExecutableOp;
  void execute(ExecContext& ctx) const override {
    const auto x = ctx.in(node().inputs[0]).data<std::int64_t>();
    Tensor& y = ctx.out(node().outputs[0]);
    if (y.type() == ElementType::f32) {
      auto out = y.data<float>();
      for (std::size_t i = 0; i < x.size(); ++i) out[i] = static_cast<float>(x[i]);
      return;
    }
    auto out = y.data<std::int32_t>();
    for (std::size_t i = 0; i < x.size(); ++i) {
      out[i] = static_cast<std::int32_t>(std::clamp<std::int64_t>(
          x[i], std::numeric_limits<std::int32_t>::min(), std::numeric_limits<std::int32_t>::max()));
    }
  }
  std::string implementation() const override { return "qfuse:convert_s64"; }
};

}  // namespace

std::unique_ptr<ExecutableOp> make_broadcast_binary(const graph::Graph& graph,
                                                    const graph::Node& node) {
  return std::make_unique<BroadcastBinaryOp>(graph, node);
}

std::unique_ptr<ExecutableOp> make_dequantize(const graph::Graph& graph, const graph::Node& node,
                                              bool channels_last,
                                              std::unique_ptr<ExecutableOp> reorder) {
  return std::make_unique<DequantizeOp>(graph, node, channels_last, std::move(reorder));
}

std::unique_ptr<ExecutableOp> make_native_op(const graph::Graph& graph, const graph::Node& node,
                                             const LayoutOf& layout_of) {
  const auto cl = [&layout_of](graph::ValueId v) {
    return layout_of && layout_of(v) == Layout::channels_last;
  };
  switch (node.kind) {
    case OpKind::FakeQuantize: return std::make_unique<FakeQuantizeOp>(graph, node);
    case OpKind::Quantize:
      if (!node.attr<graph::QuantizeAttrs>().per_tensor()) {
        return std::make_unique<QuantizeChannelsOp>(graph, node);
      }
      return std::make_unique<QuantizeOp>(graph, node, cl(node.inputs[0]), cl(node.outputs[0]));
    case OpKind::Dequantize:
      if (cl(node.inputs[0]) != cl(node.outputs[0])) return nullptr;  // make_dequantize
      return std::make_unique<DequantizeOp>(graph, node, cl(node.outputs[0]), nullptr);
    case OpKind::Reshape:
    case OpKind::Flatten: return std::make_unique<CopyOp>(node);
    case OpKind::Resize: return std::make_unique<ResizeOp>(graph, node, cl(node.inputs[0]));
    case OpKind::Lookup: return std::make_unique<LookupOp>(graph, node);
    case OpKind::MaxPool:
      return MaxPoolBytesOp::make(graph, node, cl(node.inputs[0]), cl(node.outputs[0]));
    case OpKind::ShuffleChannels:
      return std::make_unique<ShuffleChannelsOp>(graph, node, cl(node.inputs[0]));
    case OpKind::Slice:
      return SliceRowsOp::make(graph, node, cl(node.inputs[0]), cl(node.outputs[0]));
    case OpKind::AvgPool:
      if (!node.attr<graph::PoolAttrs>().to_f32) return nullptr;
      return std::make_unique<DequantizedMeanOp>(graph, node, cl(node.inputs[0]));
    case OpKind::GateMultiply:
      return std::make_unique<GateMultiplyOp>(graph, node, cl(node.inputs[0]));
    case OpKind::Concat: return std::make_unique<ConcatOp>(graph, node, cl(node.outputs[0]));
    case OpKind::Gather: return std::make_unique<GatherOp>(graph, node);
    case OpKind::DynamicQuantize: return std::make_unique<DynamicQuantizeOp>(node);
    case OpKind::Convert:
      if (graph.value(node.inputs[0]).type == ElementType::s64) {
        return std::make_unique<ConvertFromS64Op>(node);
      }
      if (node.attr<graph::ConvertAttrs>().quantizes()) {
        return std::make_unique<QuantizeOp>(graph, node, cl(node.inputs[0]), cl(node.outputs[0]));
      }
      if (node.attr<graph::ConvertAttrs>().to == ElementType::s32) {
        return std::make_unique<ConvertToS32Op>(node);
      }
      return nullptr;
    default: return nullptr;
  }
}

}  // namespace qfuse::plugin
