#pragma once
// Internal: loops over 8-bit codes that run between int8 layers, with an
// AVX-512 VBMI form (64 bytes a step, byte permutes) where the CPU has it and
// a plain loop otherwise. Both forms give the same bytes; `vector = false`
// asks for the plain loop (the tests compare the two).

#include <array>
#include <cstdint>
#include <vector>

namespace qfuse::plugin {

// Whether this CPU runs the VBMI forms (AVX-512 F, BW and VBMI).
bool has_avx512_vbmi();

// out[i] = table[in[i] ^ flip] for i in [0, n). flip 0x80 indexes a table of
// s8 codes from -128. `in` and `out` may be the same array.
void lookup_bytes(const std::uint8_t* in, std::uint8_t* out, std::int64_t n,
                  const std::array<std::uint8_t, 256>& table, std::uint8_t flip,
                  bool vector = true);

// dst[i * channels + c] = planes[c * plane_stride + i] for i in [0, n) and c in
// [0, channels): `channels` planes of bytes interleaved, channel innermost (a
// block of an NCHW image written channels last).
void interleave_planes(const std::uint8_t* planes, std::int64_t plane_stride, int channels,
                       std::int64_t n, std::uint8_t* dst, bool vector = true);

// 2D max pooling of 8-bit codes, channels last (NHWC). Padded cells never win;
// every window must hold at least one real cell (the caller checks). The max
// of codes is the code of the max, so this is MaxPool on a grid exactly.
struct MaxPoolGeometry {
  std::int64_t n = 1, c = 1, ih = 1, iw = 1, oh = 1, ow = 1;
  std::int64_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
};

// The vector form keeps the window rows' max of a strip of output columns in
// a buffer on the stack; it runs where one window's columns fit (c * ((kw - 1)
// * dw + 1) bytes), the plain loop elsewhere.
inline constexpr std::int64_t kMaxPoolRowBytes = 16384;
inline bool max_pool_window_fits(const MaxPoolGeometry& g) {
  return g.c * ((g.kw - 1) * g.dw + 1) <= kMaxPoolRowBytes;
}

// Output rows [row_begin, row_end) of n * oh; `is_signed`: s8 codes, else u8.
void max_pool_bytes(const std::uint8_t* x, std::uint8_t* y, const MaxPoolGeometry& g,
                    bool is_signed, std::int64_t row_begin, std::int64_t row_end,
                    bool vector = true);

// y[p * C + c] = x[p * C + perm[c]] for every pixel p: the channels of a
// channels-last byte tensor permuted. Up to 128 channels, one or two byte
// permutes per 64 output channels (VBMI); more, a plain loop.
class ChannelPermutation {
 public:
  explicit ChannelPermutation(std::vector<std::int64_t> perm);
  void run(const std::uint8_t* x, std::uint8_t* y, std::int64_t pixels, bool vector = true) const;

 private:
  std::vector<std::int64_t> perm_;
  std::vector<std::uint8_t> index_;  // per 64 output channels, 64 table indices
};

// dst[r * dst_stride + k] = src[r * src_stride + k] for k < width and r <
// rows: short strided rows (a channel block of every pixel: a Slice or a
// Concat along channels last) as masked 64-byte moves, long ones by memcpy.
void copy_rows(const std::uint8_t* src, std::int64_t src_stride, std::uint8_t* dst,
               std::int64_t dst_stride, std::int64_t width, std::int64_t rows, bool vector = true);

// sums[c] += the codes of channel c over `pixels` pixels of one image, channels
// last (x[p * channels + c]); `is_signed`: s8 codes, else u8. Exact in int64.
void channel_sums(const std::uint8_t* x, std::int64_t pixels, std::int64_t channels,
                  bool is_signed, std::int64_t* sums, bool vector = true);

// sums[c] = the codes of channel c over the `pixels` pixels of one image,
// channels last or plain (x[c * pixels + p]). Exact in int64.
void image_channel_sums(const std::uint8_t* image, std::int64_t pixels, std::int64_t channels,
                        bool is_signed, bool channels_last, std::int64_t* sums);

}  // namespace qfuse::plugin
