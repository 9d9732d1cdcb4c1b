#include "plugin/executable_ops/byte_kernels.hpp"

#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define QFUSE_VBMI_KERNELS 1
#endif

namespace qfuse::plugin {
namespace {

#if defined(QFUSE_VBMI_KERNELS)
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
#undef QFUSE_VBMI
#endif

}  // namespace

bool has_avx512_vbmi() {
#if defined(QFUSE_VBMI_KERNELS)
  static const bool yes = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vbmi");
  return yes;
#else
  return false;
#endif
}

void lookup_bytes(const std::uint8_t* in, std::uint8_t* out, std::int64_t n,
                  const std::array<std::uint8_t, 256>& table, std::uint8_t flip, bool vector) {
#if defined(QFUSE_VBMI_KERNELS)
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
#if defined(QFUSE_VBMI_KERNELS)
  if (vector && channels <= 4 && has_avx512_vbmi()) {
    i = interleave_vbmi(planes, plane_stride, channels, n, dst);
  }
#endif
  (void)vector;
  for (; i < n; ++i) {
    for (int c = 0; c < channels; ++c) dst[i * channels + c] = planes[c * plane_stride + i];
  }
}

}  // namespace qfuse::plugin
