// The byte loops between int8 layers (table lookup, plane interleaving)
// against naive loops written here, at every length around the 64-byte steps
// and their masked tails, on the vector form where the CPU has it and on the
// plain loop.

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <type_traits>
#include <vector>

#include "plugin/executable_ops/byte_kernels.hpp"

namespace qfuse::plugin {
namespace {

std::vector<std::uint8_t> random_bytes(std::mt19937& rng, std::size_t n) {
  std::vector<std::uint8_t> v(n);
  for (auto& b : v) b = static_cast<std::uint8_t>(rng());
  return v;
}

TEST(ByteKernels, LookupEqualsTheTableAtEveryLength) {
  std::mt19937 rng(7);
  std::array<std::uint8_t, 256> table{};
  for (auto& t : table) t = static_cast<std::uint8_t>(rng());
  for (const bool vector : {true, false}) {
    for (const std::uint8_t flip : {std::uint8_t{0}, std::uint8_t{0x80}}) {
      for (std::int64_t n : {0, 1, 63, 64, 65, 127, 128, 129, 200, 4099}) {
        const auto in = random_bytes(rng, static_cast<std::size_t>(n) + 1);
        std::vector<std::uint8_t> out(in.size(), 0xAB);
        lookup_bytes(in.data(), out.data(), n, table, flip, vector);
        for (std::int64_t i = 0; i < n; ++i) {
          // s8 code -128 is table[0]: the index is the code plus 128.
          const int index = flip ? static_cast<std::int8_t>(in[i]) + 128 : in[i];
          ASSERT_EQ(out[i], table[index]) << "n " << n << " i " << i << " vector " << vector;
        }
        EXPECT_EQ(out[n], 0xAB) << "wrote past n = " << n;
      }
    }
  }
}

TEST(ByteKernels, LookupInPlace) {
  std::mt19937 rng(8);
  std::array<std::uint8_t, 256> table{};
  for (int i = 0; i < 256; ++i) table[i] = static_cast<std::uint8_t>(255 - i);
  auto data = random_bytes(rng, 333);
  const auto before = data;
  lookup_bytes(data.data(), data.data(), 333, table, 0);
  for (std::size_t i = 0; i < data.size(); ++i) ASSERT_EQ(data[i], 255 - before[i]);
}

TEST(ByteKernels, InterleaveWritesChannelsInnermost) {
  std::mt19937 rng(9);
  for (const bool vector : {true, false}) {
    for (int channels = 1; channels <= 6; ++channels) {
      for (std::int64_t n : {0, 1, 63, 64, 65, 130, 512}) {
        const std::int64_t stride = 512 + 3;  // planes are not back to back
        const auto planes = random_bytes(rng, static_cast<std::size_t>(stride * channels));
        std::vector<std::uint8_t> dst(static_cast<std::size_t>(n * channels) + 1, 0xCD);
        interleave_planes(planes.data(), stride, channels, n, dst.data(), vector);
        for (std::int64_t i = 0; i < n; ++i) {
          for (int c = 0; c < channels; ++c) {
            ASSERT_EQ(dst[i * channels + c], planes[c * stride + i])
                << "C " << channels << " n " << n << " pixel " << i << " vector " << vector;
          }
        }
        EXPECT_EQ(dst.back(), 0xCD) << "wrote past the run, C " << channels << " n " << n;
      }
    }
  }
}

// The window max of codes, straight from the definition: every tap of every
// window, padded and out-of-image taps skipped.
template <typename T>
std::vector<T> naive_max_pool(const std::vector<T>& x, const MaxPoolGeometry& g) {
  std::vector<T> y(static_cast<std::size_t>(g.n * g.oh * g.ow * g.c));
  for (std::int64_t n = 0; n < g.n; ++n)
    for (std::int64_t oh = 0; oh < g.oh; ++oh)
      for (std::int64_t ow = 0; ow < g.ow; ++ow)
        for (std::int64_t c = 0; c < g.c; ++c) {
          int best = -1000;
          for (std::int64_t i = 0; i < g.kh; ++i)
            for (std::int64_t j = 0; j < g.kw; ++j) {
              const std::int64_t ih = oh * g.sh - g.ph + i * g.dh, iw = ow * g.sw - g.pw + j * g.dw;
              if (ih < 0 || ih >= g.ih || iw < 0 || iw >= g.iw) continue;
              best = std::max(best, static_cast<int>(x[((n * g.ih + ih) * g.iw + iw) * g.c + c]));
            }
          y[((n * g.oh + oh) * g.ow + ow) * g.c + c] = static_cast<T>(best);
        }
  return y;
}

template <typename T>
void check_max_pool(std::mt19937& rng, const MaxPoolGeometry& g, bool vector) {
  std::vector<T> x(static_cast<std::size_t>(g.n * g.ih * g.iw * g.c));
  for (auto& v : x) v = static_cast<T>(rng());
  std::vector<T> y(static_cast<std::size_t>(g.n * g.oh * g.ow * g.c) + 1, T{7});
  max_pool_bytes(reinterpret_cast<const std::uint8_t*>(x.data()),
                 reinterpret_cast<std::uint8_t*>(y.data()), g, std::is_signed_v<T>, 0, g.n * g.oh,
                 vector);
  const std::vector<T> want = naive_max_pool(x, g);
  for (std::size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(static_cast<int>(y[i]), static_cast<int>(want[i]))
        << "element " << i << " C " << g.c << " k " << g.kh << "x" << g.kw << " s " << g.sh
        << " pad " << g.ph << " dilation " << g.dh << " signed " << std::is_signed_v<T>
        << " vector " << vector;
  }
  EXPECT_EQ(y.back(), T{7}) << "wrote past the output";
}

TEST(ByteKernels, MaxPoolEqualsTheWindowMax) {
  std::mt19937 rng(10);
  for (const bool vector : {true, false}) {
    for (const std::int64_t c : {1, 3, 24, 64, 65, 130}) {
      for (const std::int64_t k : {1, 2, 3}) {
        for (const std::int64_t s : {1, 2}) {
          for (const std::int64_t pad : {0, 1}) {
            for (const std::int64_t d : {1, 2}) {
              if (pad >= k) continue;
              MaxPoolGeometry g;
              g.n = 2, g.c = c, g.ih = 7, g.iw = 9;
              g.kh = k, g.kw = k, g.sh = s, g.sw = s, g.ph = pad, g.pw = pad, g.dh = d, g.dw = d;
              g.oh = (g.ih + 2 * pad - d * (k - 1) - 1) / s + 1;
              g.ow = (g.iw + 2 * pad - d * (k - 1) - 1) / s + 1;
              check_max_pool<std::uint8_t>(rng, g, vector);
              check_max_pool<std::int8_t>(rng, g, vector);
            }
          }
        }
      }
    }
  }
}

// Rows wider than the vector form's buffer run in strips of output columns,
// each window whole inside one strip; a window wider than the buffer takes
// the plain loop. Strip edges fall at every offset across these widths.
TEST(ByteKernels, MaxPoolOverRowsWiderThanItsBuffer) {
  std::mt19937 rng(11);
  for (const std::int64_t c : {64, 200, 3000, 5000}) {
    for (const std::int64_t k : {2, 3, 5}) {
      for (const std::int64_t s : {1, 2}) {
        MaxPoolGeometry g;
        g.n = 1, g.c = c, g.ih = 3, g.iw = kMaxPoolRowBytes / c + 7 * k;
        g.kh = k, g.kw = k, g.sh = s, g.sw = s, g.ph = k / 2, g.pw = k / 2;
        g.oh = (g.ih + 2 * g.ph - k) / s + 1;
        g.ow = (g.iw + 2 * g.pw - k) / s + 1;
        ASSERT_GT(g.iw * c, kMaxPoolRowBytes);
        EXPECT_EQ(max_pool_window_fits(g), c * k <= kMaxPoolRowBytes);
        check_max_pool<std::uint8_t>(rng, g, true);
        check_max_pool<std::int8_t>(rng, g, true);
      }
    }
  }
}

TEST(ByteKernels, ChannelPermutationPermutesEveryPixel) {
  std::mt19937 rng(12);
  for (const bool vector : {true, false}) {
    for (const std::int64_t channels : {1, 5, 48, 64, 65, 96, 128, 129, 200}) {
      std::vector<std::int64_t> perm(static_cast<std::size_t>(channels));
      for (std::int64_t c = 0; c < channels; ++c) perm[static_cast<std::size_t>(c)] = c;
      std::shuffle(perm.begin(), perm.end(), rng);
      const ChannelPermutation p(perm);
      for (const std::int64_t pixels : {1, 7}) {
        const auto x = random_bytes(rng, static_cast<std::size_t>(pixels * channels));
        std::vector<std::uint8_t> y(x.size() + 1, 0xEE);
        p.run(x.data(), y.data(), pixels, vector);
        for (std::int64_t q = 0; q < pixels; ++q) {
          for (std::int64_t c = 0; c < channels; ++c) {
            ASSERT_EQ(y[static_cast<std::size_t>(q * channels + c)],
                      x[static_cast<std::size_t>(q * channels + perm[static_cast<std::size_t>(c)])])
                << "C " << channels << " pixel " << q << " c " << c << " vector " << vector;
          }
        }
        EXPECT_EQ(y.back(), 0xEE) << "wrote past the pixels, C " << channels;
      }
    }
  }
}

TEST(ByteKernels, CopyRowsMovesEachRowsBlockAndNothingElse) {
  std::mt19937 rng(13);
  for (const bool vector : {true, false}) {
    for (const std::int64_t width : {1, 24, 63, 64, 65, 130, 600}) {
      const std::int64_t rows = 5, src_stride = width + 7, dst_stride = width + 3;
      const auto src = random_bytes(rng, static_cast<std::size_t>(rows * src_stride));
      std::vector<std::uint8_t> dst(static_cast<std::size_t>(rows * dst_stride), 0x5A);
      copy_rows(src.data(), src_stride, dst.data(), dst_stride, width, rows, vector);
      for (std::int64_t r = 0; r < rows; ++r) {
        for (std::int64_t k = 0; k < dst_stride; ++k) {
          const std::uint8_t want =
              k < width ? src[static_cast<std::size_t>(r * src_stride + k)] : std::uint8_t{0x5A};
          ASSERT_EQ(dst[static_cast<std::size_t>(r * dst_stride + k)], want)
              << "width " << width << " row " << r << " byte " << k << " vector " << vector;
        }
      }
    }
  }
}

TEST(ByteKernels, ChannelSumsAddEveryPixel) {
  std::mt19937 rng(11);
  for (const bool vector : {true, false}) {
    for (const bool is_signed : {false, true}) {
      for (const std::int64_t channels : {1, 3, 16, 17, 72, 130}) {
        for (const std::int64_t pixels : {1, 7, 64}) {
          const auto x = random_bytes(rng, static_cast<std::size_t>(pixels * channels));
          std::vector<std::int64_t> sums(static_cast<std::size_t>(channels) + 1, 5);
          channel_sums(x.data(), pixels, channels, is_signed, sums.data(), vector);
          for (std::int64_t c = 0; c < channels; ++c) {
            std::int64_t want = 5;  // sums are added to
            for (std::int64_t p = 0; p < pixels; ++p) {
              const std::uint8_t b = x[static_cast<std::size_t>(p * channels + c)];
              want += is_signed ? static_cast<std::int8_t>(b) : b;
            }
            ASSERT_EQ(sums[static_cast<std::size_t>(c)], want)
                << "C " << channels << " pixels " << pixels << " c " << c << " signed " << is_signed;
          }
          EXPECT_EQ(sums.back(), 5) << "wrote past the channels";
        }
      }
    }
  }
}

}  // namespace
}  // namespace qfuse::plugin
