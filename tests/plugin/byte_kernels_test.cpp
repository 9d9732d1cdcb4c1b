// The byte loops between int8 layers (table lookup, plane interleaving)
// against naive loops written here, at every length around the 64-byte steps
// and their masked tails, on the vector form where the CPU has it and on the
// plain loop.

#include <gtest/gtest.h>

#include <random>
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

}  // namespace
}  // namespace qfuse::plugin
