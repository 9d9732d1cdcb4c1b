#include "plugin/transpose.hpp"

#include <emmintrin.h>

#include <algorithm>

#include "plugin/parallel.hpp"
namespace qfuse::plugin {
namespace {

constexpr std::int64_t kTile = 16;

// Transposes one full 16x16 block: 16 rows of 16 bytes at `src` (stride
// `src_stride`) become 16 rows at `dst` (stride `dst_stride`). Four rounds of
// unpacks interleave 1, 2, 4 and 8 bytes of row pairs.
void transpose_16x16(const std::uint8_t* src, std::int64_t src_stride, std::uint8_t* dst,
                     std::int64_t dst_stride) {
  __m128i a[16], b[16];
  for (int i = 0; i < 16; ++i) {
    a[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i * src_stride));
  }
  // b[2k] / b[2k+1]: columns 0-7 / 8-15 of rows 2k, 2k+1, in 2-byte units.
  for (int k = 0; k < 8; ++k) {
    b[2 * k] = _mm_unpacklo_epi8(a[2 * k], a[2 * k + 1]);
    b[2 * k + 1] = _mm_unpackhi_epi8(a[2 * k], a[2 * k + 1]);
  }
  // a[4m + g]: columns 4g..4g+3 of rows 4m..4m+3, in 4-byte units.
  for (int m = 0; m < 4; ++m) {
    const __m128i lo0 = b[4 * m], hi0 = b[4 * m + 1], lo1 = b[4 * m + 2], hi1 = b[4 * m + 3];
    a[4 * m + 0] = _mm_unpacklo_epi16(lo0, lo1);
    a[4 * m + 1] = _mm_unpackhi_epi16(lo0, lo1);
    a[4 * m + 2] = _mm_unpacklo_epi16(hi0, hi1);
    a[4 * m + 3] = _mm_unpackhi_epi16(hi0, hi1);
  }
  // b[8h + 2g + j]: columns 4g + 2j, 4g + 2j + 1 of rows 8h..8h+7, in 8-byte units.
  for (int h = 0; h < 2; ++h) {
    for (int g = 0; g < 4; ++g) {
      const __m128i x = a[8 * h + g], y = a[8 * h + 4 + g];
      b[8 * h + 2 * g] = _mm_unpacklo_epi32(x, y);
      b[8 * h + 2 * g + 1] = _mm_unpackhi_epi32(x, y);
    }
  }
  // Column c = 4g + 2j + l: rows 0-7 from b[2g + j], rows 8-15 from b[8 + 2g + j].
  for (int g = 0; g < 4; ++g) {
    for (int j = 0; j < 2; ++j) {
      const __m128i top = b[2 * g + j], bottom = b[8 + 2 * g + j];
      const int c = 4 * g + 2 * j;
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + c * dst_stride),
                       _mm_unpacklo_epi64(top, bottom));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (c + 1) * dst_stride),
                       _mm_unpackhi_epi64(top, bottom));
    }
  }
}

}  // namespace

void transpose_bytes(const std::uint8_t* src, std::uint8_t* dst, std::int64_t batches,
                     std::int64_t rows, std::int64_t cols) {
  // Work items: a strip of up to 64 columns by 256 rows of one batch; threads
  // write disjoint parts of dst.
  constexpr std::int64_t kStrip = 64;
  constexpr std::int64_t kRowChunk = 256;  // a multiple of kTile
  const std::int64_t strips = (cols + kStrip - 1) / kStrip;
  const std::int64_t chunks = (rows + kRowChunk - 1) / kRowChunk;
  const std::int64_t items = batches * strips * chunks;
  parallel_for(items > 1 && rows * cols * batches >= 16384, items, [&](std::int64_t item) {
    const std::int64_t b = item / (strips * chunks);
    const std::int64_t c0 = item / chunks % strips * kStrip;
    const std::int64_t c1 = std::min(cols, c0 + kStrip);
    const std::int64_t r0 = item % chunks * kRowChunk;
    const std::int64_t r1 = std::min(rows, r0 + kRowChunk);
    const std::uint8_t* s = src + b * rows * cols;
    std::uint8_t* d = dst + b * rows * cols;
    const std::int64_t full_c1 = c0 + (c1 - c0) / kTile * kTile;
    const std::int64_t full_r1 = r0 + (r1 - r0) / kTile * kTile;
    for (std::int64_t r = r0; r < full_r1; r += kTile) {
      for (std::int64_t c = c0; c < full_c1; c += kTile) {
        transpose_16x16(s + r * cols + c, cols, d + c * rows + r, rows);
      }
    }
    // The ragged edges: rows past the last full block, columns past it.
    for (std::int64_t c = c0; c < c1; ++c) {
      const std::int64_t r_from = c < full_c1 ? full_r1 : r0;
      for (std::int64_t r = r_from; r < r1; ++r) d[c * rows + r] = s[r * cols + c];
    }
  });
}

}  // namespace qfuse::plugin
