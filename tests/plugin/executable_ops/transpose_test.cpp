// The 1-byte layout change between plain and channels last against naive
// loops, on sizes around the 16x16 blocks, the 64-column strips and the
// 256-row chunks the kernel splits its work into.

#include <cstdint>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "plugin/transpose.hpp"

namespace qfuse::test {
namespace {

struct Size {
  std::int64_t batches, rows, cols;
};

class TransposeBytes : public ::testing::TestWithParam<Size> {};

TEST_P(TransposeBytes, MatchesNaiveLoops) {
  const auto [batches, rows, cols] = GetParam();
  std::mt19937 rng(static_cast<unsigned>(batches * 1000 + rows * 37 + cols));
  std::uniform_int_distribution<int> d(0, 255);
  const auto n = static_cast<std::size_t>(batches * rows * cols);
  std::vector<std::uint8_t> src(n), dst(n, 0xA5), expected(n);
  for (auto& v : src) v = static_cast<std::uint8_t>(d(rng));
  for (std::int64_t b = 0; b < batches; ++b) {
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t c = 0; c < cols; ++c) {
        expected[static_cast<std::size_t>((b * cols + c) * rows + r)] =
            src[static_cast<std::size_t>((b * rows + r) * cols + c)];
      }
    }
  }
  plugin::transpose_bytes(src.data(), dst.data(), batches, rows, cols);
  EXPECT_EQ(dst, expected);
}

INSTANTIATE_TEST_SUITE_P(
    Plugin, TransposeBytes,
    ::testing::Values(Size{1, 1, 1}, Size{1, 3, 3136}, Size{1, 3136, 3}, Size{1, 16, 16},
                      Size{2, 16, 32}, Size{1, 17, 15}, Size{1, 15, 17}, Size{3, 33, 65},
                      Size{1, 64, 3136}, Size{1, 3136, 64}, Size{2, 256, 49}, Size{1, 300, 129},
                      Size{8, 144, 196}, Size{1, 257, 1}, Size{1, 1, 257}),
    [](const ::testing::TestParamInfo<Size>& p) {
      return std::to_string(p.param.batches) + "x" + std::to_string(p.param.rows) + "x" +
             std::to_string(p.param.cols);
    });

}  // namespace
}  // namespace qfuse::test
