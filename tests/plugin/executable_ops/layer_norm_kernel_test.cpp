// LayerNorm's row kernel, both of its loops (the AVX-512 one where the CPU
// has it, and the scalar one every CPU runs without it), against the row in
// double, at widths around the 16- and 64-value steps and their tails, on
// rows with a large mean against a small spread (where a one-pass variance
// would cancel). Each y within 2e-5 + 4e-6 * |y| of the double one.

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "plugin/executable_ops/layer_norm_kernel.hpp"

namespace qfuse::plugin {
namespace {

std::vector<double> normalized_in_double(const std::vector<float>& x, const std::vector<float>& scale,
                                         const std::vector<float>& bias, double eps) {
  const auto n = static_cast<double>(x.size());
  double mean = 0.0, var = 0.0;
  for (const float v : x) mean += v;
  mean /= n;
  for (const float v : x) var += (v - mean) * (v - mean);
  var /= n;
  std::vector<double> y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    y[i] = (x[i] - mean) / std::sqrt(var + eps) * scale[i] + bias[i];
  }
  return y;
}

TEST(LayerNormRow, BothLoopsMatchTheRowInDouble) {
  std::mt19937 rng(17);
  for (const std::int64_t n : {1, 5, 15, 16, 17, 37, 63, 64, 65, 100, 768, 1000}) {
    std::normal_distribution<float> values(40.0f, 0.5f), around_one(1.0f, 0.3f), small(0.0f, 0.2f);
    std::vector<float> x(static_cast<std::size_t>(n)), scale(x.size()), bias(x.size());
    for (auto& v : x) v = values(rng);
    for (auto& v : scale) v = around_one(rng);
    for (auto& v : bias) v = small(rng);
    const std::vector<double> ref = normalized_in_double(x, scale, bias, 1e-5);
    std::vector<float> fast(x.size()), plain(x.size());
    normalize_row(x.data(), fast.data(), n, scale.data(), bias.data(), 1e-5f);
    normalize_row_scalar(x.data(), plain.data(), n, scale.data(), bias.data(), 1e-5f);
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double tol = 2e-5 + 4e-6 * std::fabs(ref[i]);
      EXPECT_NEAR(fast[i], ref[i], tol) << "n " << n << " at " << i;
      EXPECT_NEAR(plain[i], ref[i], tol) << "n " << n << " at " << i << " (scalar)";
    }
  }
}

}  // namespace
}  // namespace qfuse::plugin
