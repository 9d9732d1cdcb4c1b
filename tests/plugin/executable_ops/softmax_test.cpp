// Softmax against a loop in double: along the last axis (oneDNN's jit
// kernel) and along axes with positions after them (qfuse's strided kernel
// on AVX-512, else oneDNN), on sizes around its sixteen-position blocks and
// with inputs far below the maximum, where exp underflows to 0. Tolerance:
// 4 f32 ulps of the expected value y per unit of |x - max| the result
// depends on (the rounding of x - max, which exp carries), plus 1e-30.

#include <cmath>

#include "test_util.hpp"

namespace qfuse::test {
namespace {

using test::PrintTo;

struct SoftmaxCase {
  std::string name;
  Shape x;
  std::int64_t axis;
  float spread;  // inputs in [-spread, spread]
};

std::vector<double> softmax_reference(const Tensor& x, std::int64_t axis) {
  const Shape& s = x.shape();
  const auto a = static_cast<std::size_t>(axis < 0 ? axis + static_cast<std::int64_t>(s.size()) : axis);
  std::int64_t outer = 1, inner = 1;
  for (std::size_t d = 0; d < a; ++d) outer *= s[d];
  for (std::size_t d = a + 1; d < s.size(); ++d) inner *= s[d];
  const std::int64_t len = s[a];
  const std::vector<double> v = to_double(x);
  std::vector<double> y(v.size());
  for (std::int64_t o = 0; o < outer; ++o) {
    for (std::int64_t i = 0; i < inner; ++i) {
      const auto at = [&](std::int64_t k) { return idx((o * len + k) * inner + i); };
      double m = -INFINITY, sum = 0.0;
      for (std::int64_t k = 0; k < len; ++k) m = std::max(m, v[at(k)]);
      for (std::int64_t k = 0; k < len; ++k) sum += std::exp(v[at(k)] - m);
      for (std::int64_t k = 0; k < len; ++k) y[at(k)] = std::exp(v[at(k)] - m) / sum;
    }
  }
  return y;
}

class SoftmaxTest : public ::testing::TestWithParam<SoftmaxCase> {};

TEST_P(SoftmaxTest, MatchesDoubleLoop) {
  const SoftmaxCase& c = GetParam();
  std::mt19937 rng(17);
  const Tensor x = random_tensor(c.x, rng, -c.spread, c.spread);
  graph::SoftmaxAttrs attrs;
  attrs.axis = c.axis < 0 ? c.axis + static_cast<std::int64_t>(c.x.size()) : c.axis;
  const Tensor y = run_op(OpKind::Softmax, {input(x)}, attrs);
  const std::vector<double> expected = softmax_reference(x, c.axis);
  // exp(x - max) in f32 carries the rounding of x - max, which grows with
  // |x - max|: ~|ln y| for the numerator, up to twice the spread for the
  // terms of the sum. 4 f32 ulps per unit of them.
  std::vector<double> tol(expected.size());
  for (std::size_t i = 0; i < tol.size(); ++i) {
    const double e = expected[i];
    const double reach = 1.0 + std::fabs(std::log(std::max(e, 1e-300))) + 2.0 * c.spread;
    tol[i] = 4.0 * std::ldexp(1.0, -24) * reach * e + 1e-30;
  }
  EXPECT_TRUE(all_close(y, expected, tol));
}

INSTANTIATE_TEST_SUITE_P(
    Axes, SoftmaxTest,
    ::testing::Values(SoftmaxCase{"last", {3, 40}, -1, 4.0f},
                      SoftmaxCase{"yolo_bins", {1, 8, 4, 2100}, 1, 6.0f},
                      SoftmaxCase{"block_tail", {2, 8, 4, 37}, 1, 4.0f},
                      SoftmaxCase{"one_position_short", {2, 5, 15}, 1, 4.0f},
                      SoftmaxCase{"first_axis", {7, 3, 17}, 0, 4.0f},
                      SoftmaxCase{"underflow", {2, 16, 33}, 1, 120.0f},
                      SoftmaxCase{"long_axis", {1, 300, 20}, 1, 10.0f}),
    [](const ::testing::TestParamInfo<SoftmaxCase>& p) { return p.param.name; });

}  // namespace
}  // namespace qfuse::test
