#include "plugin/executable_ops/byte_kernels.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define QFUSE_X86_KERNELS 1
#endif

namespace qfuse::plugin {
namespace {

#if defined(QFUSE_X86_KERNELS)
// GCC 12's avx512fintrin.h passes an undefined vector as the unused
// pass-through of some conversions, which -Wmaybe-uninitialized reports.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#define QFUSE_VBMI __attribute__((target("avx512f,avx512bw,avx512vbmi")))

// A 256-entry table is four 64-byte registers. vpermi2b looks an index's low
// seven bits up in a pair of them; the index's top bit picks the pair.
struct Table256 {
  __m512i t0, t1, t2, t3, flip;
};

QFUSE_VBMI inline __m512i lookup64(const Table256& t, __m512i codes) {
  const __m512i idx = _mm512_xor_si512(codes, t.flip);
  const __m512i low = _mm512_permutex2var_epi8(t.t0, idx, t.t1);
  const __m512i high = _mm512_permutex2var_epi8(t.t2, idx, t.t3);
  return _mm512_mask_blend_epi8(_mm512_movepi8_mask(idx), low, high);
}

QFUSE_VBMI void lookup_vbmi(const std::uint8_t* in, std::uint8_t* out, std::int64_t n,
                            const std::uint8_t* table, std::uint8_t flip) {
  const Table256 t{_mm512_loadu_si512(table), _mm512_loadu_si512(table + 64),
                   _mm512_loadu_si512(table + 128), _mm512_loadu_si512(table + 192),
                   _mm512_set1_epi8(static_cast<char>(flip))};
  std::int64_t i = 0;
  for (; i + 64 <= n; i += 64) _mm512_storeu_si512(out + i, lookup64(t, _mm512_loadu_si512(in + i)));
  if (i < n) {
    const __mmask64 m = (~__mmask64{0}) >> (64 - (n - i));
    _mm512_mask_storeu_epi8(out + i, m, lookup64(t, _mm512_maskz_loadu_epi8(m, in + i)));
  }
}

// The permute indices of 2 to 4 interleaved planes: output register j of a
// 64-pixel step holds bytes 64 j .. 64 j + 63 of the interleaved run, byte q
// being pixel (64 j + q) / C of plane (64 j + q) % C. Planes 0 and 1 are one
// vpermi2b table and planes 2 and 3 the other; `high` marks the bytes that
// come from the second.
struct InterleaveIndex {
  std::uint8_t idx[4][64];
  std::uint64_t high[4];
  explicit InterleaveIndex(int channels) {
    for (int j = 0; j < channels; ++j) {
      high[j] = 0;
      for (int q = 0; q < 64; ++q) {
        const int p = 64 * j + q, pixel = p / channels, plane = p % channels;
        idx[j][q] = static_cast<std::uint8_t>(pixel + 64 * (plane & 1));
        if (plane >= 2) high[j] |= std::uint64_t{1} << q;
      }
    }
  }
};

QFUSE_VBMI std::int64_t interleave_vbmi(const std::uint8_t* planes, std::int64_t stride,
                                        int channels, std::int64_t n, std::uint8_t* dst) {
  static const InterleaveIndex kIndex[3] = {InterleaveIndex(2), InterleaveIndex(3),
                                            InterleaveIndex(4)};
  const InterleaveIndex& ix = kIndex[channels - 2];
  __m512i idx[4];
  for (int j = 0; j < channels; ++j) idx[j] = _mm512_loadu_si512(ix.idx[j]);
  std::int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    const __m512i p0 = _mm512_loadu_si512(planes + i);
    const __m512i p1 = _mm512_loadu_si512(planes + stride + i);
    const __m512i p2 = channels > 2 ? _mm512_loadu_si512(planes + 2 * stride + i) : p0;
    const __m512i p3 = channels > 3 ? _mm512_loadu_si512(planes + 3 * stride + i) : p2;
    std::uint8_t* out = dst + i * channels;
    for (int j = 0; j < channels; ++j) {
      __m512i v = _mm512_permutex2var_epi8(p0, idx[j], p1);
      if (channels > 2) {
        v = _mm512_mask_blend_epi8(ix.high[j], v, _mm512_permutex2var_epi8(p2, idx[j], p3));
      }
      _mm512_storeu_si512(out + 64 * j, v);
    }
  }
  return i;
}

// AVX-512 F, BW and VL (every AVX-512 server core since Skylake has all three).
bool has_avx512_bw() {
  static const bool yes = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl");
  return yes;
}

template <bool Signed>
__attribute__((target("avx512f,avx512bw"))) inline __m512i max_codes(__m512i a, __m512i b) {
  return Signed ? _mm512_max_epi8(a, b) : _mm512_max_epu8(a, b);
}

// One output row, separably: the window's rows folded into `rows` (one image
// row, all pixels and channels, 64 bytes a step), then each output pixel the
// max of its window's columns of that (64 channels a step, the last masked).
template <bool Signed>
__attribute__((target("avx512f,avx512bw"))) void max_pool_row_avx512(
    const std::uint8_t* x, std::uint8_t* y, const MaxPoolGeometry& g, std::int64_t h0,
    std::int64_t h1, std::int64_t oh) {
  const __m512i lowest = _mm512_set1_epi8(Signed ? static_cast<char>(-128) : 0);
  // The window rows' max over the input columns a strip of outputs reads,
  // then the columns' max per output. The strip is as wide as the buffer
  // allows (the caller checks that one window's columns fit).
  alignas(64) std::uint8_t rows[kMaxPoolRowBytes];
  const std::int64_t span = (g.kw - 1) * g.dw + 1;
  const std::int64_t per_strip = 1 + (kMaxPoolRowBytes / g.c - span) / g.sw;
  for (std::int64_t ow0 = 0; ow0 < g.ow; ow0 += per_strip) {
    const std::int64_t ow1 = std::min(g.ow, ow0 + per_strip);
    const std::int64_t col0 = std::max<std::int64_t>(0, ow0 * g.sw - g.pw);
    const std::int64_t col1 = std::min(g.iw, (ow1 - 1) * g.sw - g.pw + span);
    const std::int64_t width = (col1 - col0) * g.c;
    for (std::int64_t k = 0; k < width; k += 64) {
      const __mmask64 m = width - k >= 64 ? ~__mmask64{0} : (~__mmask64{0}) >> (64 - (width - k));
      __m512i acc = lowest;
      for (std::int64_t i = h0; i < h1; ++i) {
        const std::int64_t ih = oh * g.sh - g.ph + i * g.dh;
        acc = max_codes<Signed>(acc, _mm512_maskz_loadu_epi8(m, x + (ih * g.iw + col0) * g.c + k));
      }
      _mm512_mask_storeu_epi8(rows + k, m, acc);
    }
    for (std::int64_t ow = ow0; ow < ow1; ++ow) {
      const std::int64_t wstart = ow * g.sw - g.pw;
      std::int64_t w0 = 0, w1 = g.kw;
      while (w0 < w1 && wstart + w0 * g.dw < 0) ++w0;
      while (w1 > w0 && wstart + (w1 - 1) * g.dw >= g.iw) --w1;
      std::uint8_t* out = y + ow * g.c;
      for (std::int64_t c = 0; c < g.c; c += 64) {
        const __mmask64 m = g.c - c >= 64 ? ~__mmask64{0} : (~__mmask64{0}) >> (64 - (g.c - c));
        __m512i acc = lowest;
        for (std::int64_t j = w0; j < w1; ++j) {
          acc = max_codes<Signed>(
              acc, _mm512_maskz_loadu_epi8(m, rows + (wstart + j * g.dw - col0) * g.c + c));
        }
        _mm512_mask_storeu_epi8(out + c, m, acc);
      }
    }
  }
}

// 16 channels a step in int32 lanes (the last step masked), over blocks of
// pixels short enough that no lane overflows (2^31 / 255 > 8M pixels).
template <bool Signed>
__attribute__((target("avx512f,avx512bw,avx512vl"))) void channel_sums_avx512(
    const std::uint8_t* x, std::int64_t pixels, std::int64_t channels, std::int64_t* sums) {
  constexpr std::int64_t kBlock = std::int64_t{1} << 22;
  for (std::int64_t p0 = 0; p0 < pixels; p0 += kBlock) {
    const std::int64_t p1 = std::min(pixels, p0 + kBlock);
    for (std::int64_t c = 0; c < channels; c += 16) {
      const __mmask16 m = channels - c >= 16 ? __mmask16{0xFFFF}
                                             : static_cast<__mmask16>((1u << (channels - c)) - 1);
      __m512i acc = _mm512_setzero_si512();
      for (std::int64_t p = p0; p < p1; ++p) {
        const __m128i codes = _mm_maskz_loadu_epi8(m, x + p * channels + c);
        acc = _mm512_add_epi32(acc, Signed ? _mm512_cvtepi8_epi32(codes) : _mm512_cvtepu8_epi32(codes));
      }
      alignas(64) std::int32_t lanes[16];
      _mm512_store_si512(lanes, acc);
      for (std::int64_t k = 0; k < 16 && c + k < channels; ++k) sums[c + k] += lanes[k];
    }
  }
}

// Pixel by pixel: its channels loaded as one (up to 64) or two 64-byte table
// halves, each 64 output channels one vpermi2b.
QFUSE_VBMI void permute_channels_vbmi(const std::uint8_t* x, std::uint8_t* y, std::int64_t pixels,
                                      std::int64_t channels, const std::uint8_t* index) {
  const std::int64_t chunks = (channels + 63) / 64;
  const __mmask64 lo_mask = channels >= 64 ? ~__mmask64{0} : (~__mmask64{0}) >> (64 - channels);
  const __mmask64 hi_mask = channels > 64 ? (~__mmask64{0}) >> (128 - channels) : 0;
  __m512i idx[2];
  for (std::int64_t j = 0; j < chunks; ++j) idx[j] = _mm512_loadu_si512(index + 64 * j);
  for (std::int64_t p = 0; p < pixels; ++p) {
    const std::uint8_t* in = x + p * channels;
    std::uint8_t* out = y + p * channels;
    const __m512i lo = _mm512_maskz_loadu_epi8(lo_mask, in);
    const __m512i hi = channels > 64 ? _mm512_maskz_loadu_epi8(hi_mask, in + 64) : lo;
    _mm512_mask_storeu_epi8(out, lo_mask, _mm512_permutex2var_epi8(lo, idx[0], hi));
    if (chunks > 1) _mm512_mask_storeu_epi8(out + 64, hi_mask, _mm512_permutex2var_epi8(lo, idx[1], hi));
  }
}
#undef QFUSE_VBMI

__attribute__((target("avx512f,avx512bw"))) void copy_rows_avx512(
    const std::uint8_t* src, std::int64_t src_stride, std::uint8_t* dst, std::int64_t dst_stride,
    std::int64_t width, std::int64_t rows) {
  const std::int64_t whole = width / 64 * 64;
  const __mmask64 tail = width == whole ? 0 : (~__mmask64{0}) >> (64 - (width - whole));
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::uint8_t* s = src + r * src_stride;
    std::uint8_t* d = dst + r * dst_stride;
    for (std::int64_t k = 0; k < whole; k += 64) _mm512_storeu_si512(d + k, _mm512_loadu_si512(s + k));
    if (tail) _mm512_mask_storeu_epi8(d + whole, tail, _mm512_maskz_loadu_epi8(tail, s + whole));
  }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

template <typename T>
void max_pool_row(const T* x, T* y, const MaxPoolGeometry& g, std::int64_t h0, std::int64_t h1,
                  std::int64_t oh) {
  for (std::int64_t ow = 0; ow < g.ow; ++ow) {
    T* out = y + ow * g.c;
    for (std::int64_t c = 0; c < g.c; ++c) out[c] = std::numeric_limits<T>::lowest();
    for (std::int64_t i = h0; i < h1; ++i) {
      const std::int64_t ih = oh * g.sh - g.ph + i * g.dh;
      for (std::int64_t j = 0; j < g.kw; ++j) {
        const std::int64_t iw = ow * g.sw - g.pw + j * g.dw;
        if (iw < 0 || iw >= g.iw) continue;
        const T* in = x + (ih * g.iw + iw) * g.c;
        for (std::int64_t c = 0; c < g.c; ++c) out[c] = std::max(out[c], in[c]);
      }
    }
  }
}

}  // namespace

bool has_avx512_vbmi() {
#if defined(QFUSE_X86_KERNELS)
  static const bool yes = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vbmi");
  return yes;
#else
  return false;
#endif
}

void lookup_bytes(const std::uint8_t* in, std::uint8_t* out, std::int64_t n,
                  const std::array<std::uint8_t, 256>& table, std::uint8_t flip, bool vector) {
#if defined(QFUSE_X86_KERNELS)
  if (vector && has_avx512_vbmi()) {
    lookup_vbmi(in, out, n, table.data(), flip);
    return;
  }
#endif
  (void)vector;
  for (std::int64_t i = 0; i < n; ++i) out[i] = table[static_cast<std::uint8_t>(in[i] ^ flip)];
}

void interleave_planes(const std::uint8_t* planes, std::int64_t plane_stride, int channels,
                       std::int64_t n, std::uint8_t* dst, bool vector) {
  if (channels == 1) {
    std::memmove(dst, planes, static_cast<std::size_t>(n));
    return;
  }
  std::int64_t i = 0;
#if defined(QFUSE_X86_KERNELS)
  if (vector && channels <= 4 && has_avx512_vbmi()) {
    i = interleave_vbmi(planes, plane_stride, channels, n, dst);
  }
#endif
  (void)vector;
  for (; i < n; ++i) {
    for (int c = 0; c < channels; ++c) dst[i * channels + c] = planes[c * plane_stride + i];
  }
}

void max_pool_bytes(const std::uint8_t* x, std::uint8_t* y, const MaxPoolGeometry& g,
                    bool is_signed, std::int64_t row_begin, std::int64_t row_end, bool vector) {
#if defined(QFUSE_X86_KERNELS)
  const bool strips = vector && has_avx512_bw() && max_pool_window_fits(g);
#endif
  for (std::int64_t r = row_begin; r < row_end; ++r) {
    const std::int64_t n = r / g.oh, oh = r % g.oh;
    // The window's rows inside the image: i in [h0, h1).
    std::int64_t h0 = 0, h1 = g.kh;
    while (h0 < h1 && oh * g.sh - g.ph + h0 * g.dh < 0) ++h0;
    while (h1 > h0 && oh * g.sh - g.ph + (h1 - 1) * g.dh >= g.ih) --h1;
    const std::uint8_t* image = x + n * g.ih * g.iw * g.c;
    std::uint8_t* row = y + r * g.ow * g.c;
#if defined(QFUSE_X86_KERNELS)
    if (strips) {
      if (is_signed) {
        max_pool_row_avx512<true>(image, row, g, h0, h1, oh);
      } else {
        max_pool_row_avx512<false>(image, row, g, h0, h1, oh);
      }
      continue;
    }
#endif
    (void)vector;
    if (is_signed) {
      max_pool_row(reinterpret_cast<const std::int8_t*>(image), reinterpret_cast<std::int8_t*>(row),
                   g, h0, h1, oh);
    } else {
      max_pool_row(image, row, g, h0, h1, oh);
    }
  }
}

void image_channel_sums(const std::uint8_t* image, std::int64_t pixels, std::int64_t channels,
                        bool is_signed, bool channels_last, std::int64_t* sums) {
  std::fill(sums, sums + channels, 0);
  if (channels_last) {
    channel_sums(image, pixels, channels, is_signed, sums);
    return;
  }
  for (std::int64_t c = 0; c < channels; ++c) {
    channel_sums(image + c * pixels, pixels, 1, is_signed, sums + c);
  }
}

void channel_sums(const std::uint8_t* x, std::int64_t pixels, std::int64_t channels,
                  bool is_signed, std::int64_t* sums, bool vector) {
#if defined(QFUSE_X86_KERNELS)
  if (vector && has_avx512_bw()) {
    if (is_signed) {
      channel_sums_avx512<true>(x, pixels, channels, sums);
    } else {
      channel_sums_avx512<false>(x, pixels, channels, sums);
    }
    return;
  }
#endif
  (void)vector;
  for (std::int64_t p = 0; p < pixels; ++p) {
    const std::uint8_t* row = x + p * channels;
    for (std::int64_t c = 0; c < channels; ++c) {
      sums[c] += is_signed ? static_cast<std::int8_t>(row[c]) : row[c];
    }
  }
}

ChannelPermutation::ChannelPermutation(std::vector<std::int64_t> perm) : perm_(std::move(perm)) {
  const auto channels = static_cast<std::int64_t>(perm_.size());
  if (channels > 128) return;
  index_.assign(static_cast<std::size_t>((channels + 63) / 64 * 64), 0);
  for (std::int64_t c = 0; c < channels; ++c) {
    index_[static_cast<std::size_t>(c)] = static_cast<std::uint8_t>(perm_[static_cast<std::size_t>(c)]);
  }
}

void ChannelPermutation::run(const std::uint8_t* x, std::uint8_t* y, std::int64_t pixels,
                             bool vector) const {
  const auto channels = static_cast<std::int64_t>(perm_.size());
#if defined(QFUSE_X86_KERNELS)
  if (vector && !index_.empty() && has_avx512_vbmi()) {
    permute_channels_vbmi(x, y, pixels, channels, index_.data());
    return;
  }
#endif
  (void)vector;
  for (std::int64_t p = 0; p < pixels; ++p) {
    const std::uint8_t* in = x + p * channels;
    std::uint8_t* out = y + p * channels;
    for (std::int64_t c = 0; c < channels; ++c) out[c] = in[perm_[static_cast<std::size_t>(c)]];
  }
}

void copy_rows(const std::uint8_t* src, std::int64_t src_stride, std::uint8_t* dst,
               std::int64_t dst_stride, std::int64_t width, std::int64_t rows, bool vector) {
#if defined(QFUSE_X86_KERNELS)
  if (vector && width <= 512 && has_avx512_bw()) {
    copy_rows_avx512(src, src_stride, dst, dst_stride, width, rows);
    return;
  }
#endif
  (void)vector;
  for (std::int64_t r = 0; r < rows; ++r) {
    std::memcpy(dst + r * dst_stride, src + r * src_stride, static_cast<std::size_t>(width));
  }
}

}  // namespace qfuse::plugin
