// FullyConnected (y = x * W^T + b over the last axis) and MatMul (numpy
// batch broadcasting, optional transposes) against loops in double.
// Tolerance: 1e-5 * sum |terms| (+1e-6).

#include "test_util.hpp"

namespace qfuse::test {
namespace {

using test::PrintTo;

struct FcCase {
  std::string name;
  Shape x;
  std::int64_t out_features;
  bool bias;
};

class FullyConnectedTest : public ::testing::TestWithParam<FcCase> {};

TEST_P(FullyConnectedTest, IsXTimesWTransposedPlusBias) {
  const FcCase& c = GetParam();
  std::mt19937 rng(7);
  const std::int64_t k = c.x.back();
  const Tensor x = random_tensor(c.x, rng);
  const Tensor w = random_tensor({c.out_features, k}, rng);
  const Tensor b = random_tensor({c.out_features}, rng);
  std::vector<Operand> ops{input(x), constant(w)};
  if (c.bias) ops.push_back(constant(b));
  const Tensor y = run_op(OpKind::FullyConnected, ops);

  Shape out_shape = c.x;
  out_shape.back() = c.out_features;
  ASSERT_EQ(y.shape(), out_shape);
  const std::int64_t rows = element_count(c.x) / k;
  std::vector<double> expected, tol;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t o = 0; o < c.out_features; ++o) {
      double acc = c.bias ? static_cast<double>(b.data<float>()[idx(o)]) : 0.0;
      double mag = std::fabs(acc);
      for (std::int64_t i = 0; i < k; ++i) {
        const double t = static_cast<double>(x.data<float>()[idx(r * k + i)]) *
                         static_cast<double>(w.data<float>()[idx(o * k + i)]);
        acc += t;
        mag += std::fabs(t);
      }
      expected.push_back(acc);
      tol.push_back(1e-5 * mag + 1e-6);
    }
  }
  EXPECT_TRUE(all_close(y, expected, tol));
}

INSTANTIATE_TEST_SUITE_P(Shapes, FullyConnectedTest,
                         ::testing::Values(FcCase{"x2d_bias", {4, 16}, 8, true},
                                           FcCase{"x2d_no_bias", {1, 37}, 5, false},
                                           FcCase{"x2d_batch3", {3, 64}, 10, true},
                                           FcCase{"x3d_bias", {2, 5, 12}, 7, true},
                                           FcCase{"x3d_no_bias", {3, 1, 9}, 4, false},
                                           FcCase{"x4d", {2, 2, 3, 6}, 3, true}),
                         CaseName{});

struct MatMulCase {
  std::string name;
  Shape a;  // as stored
  Shape b;  // as stored
  bool transpose_a;
  bool transpose_b;
};

// The right operand as a runtime input, and as a constant (reordered once
// into the kernel's layout).
class MatMulTest : public ::testing::TestWithParam<std::tuple<MatMulCase, bool>> {};

TEST_P(MatMulTest, MatchesBroadcastLoops) {
  const MatMulCase& c = std::get<0>(GetParam());
  const bool constant_b = std::get<1>(GetParam());
  std::mt19937 rng(99);
  const Tensor a = random_tensor(c.a, rng);
  const Tensor b = random_tensor(c.b, rng);
  const Tensor y = run_op(OpKind::MatMul, {input(a), constant_b ? constant(b) : input(b)},
                          graph::MatMulAttrs{c.transpose_a, c.transpose_b});

  const std::size_t ra = c.a.size(), rb = c.b.size();
  const std::int64_t m = c.transpose_a ? c.a[ra - 1] : c.a[ra - 2];
  const std::int64_t k = c.transpose_a ? c.a[ra - 2] : c.a[ra - 1];
  const std::int64_t n = c.transpose_b ? c.b[rb - 2] : c.b[rb - 1];
  const Shape batch_a(c.a.begin(), c.a.end() - 2), batch_b(c.b.begin(), c.b.end() - 2);
  const Shape batch = broadcast(batch_a, batch_b);
  Shape out_shape = batch;
  out_shape.push_back(m);
  out_shape.push_back(n);
  ASSERT_EQ(y.shape(), out_shape);

  const std::int64_t batches = element_count(batch);
  std::vector<double> expected, tol;
  for (std::int64_t bi = 0; bi < batches; ++bi) {
    const auto pos = unravel(batch, bi);
    const std::int64_t a_base = broadcast_offset(batch_a, pos) * c.a[ra - 2] * c.a[ra - 1];
    const std::int64_t b_base = broadcast_offset(batch_b, pos) * c.b[rb - 2] * c.b[rb - 1];
    for (std::int64_t i = 0; i < m; ++i) {
      for (std::int64_t j = 0; j < n; ++j) {
        double acc = 0.0, mag = 0.0;
        for (std::int64_t p = 0; p < k; ++p) {
          const std::int64_t ai = c.transpose_a ? p * m + i : i * k + p;
          const std::int64_t bj = c.transpose_b ? j * k + p : p * n + j;
          const double t = static_cast<double>(a.data<float>()[idx(a_base + ai)]) *
                           static_cast<double>(b.data<float>()[idx(b_base + bj)]);
          acc += t;
          mag += std::fabs(t);
        }
        expected.push_back(acc);
        tol.push_back(1e-5 * mag + 1e-6);
      }
    }
  }
  EXPECT_TRUE(all_close(y, expected, tol));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MatMulTest,
    ::testing::Combine(::testing::Values(MatMulCase{"plain_2d", {5, 7}, {7, 3}, false, false},
                      MatMulCase{"transpose_a", {7, 5}, {7, 3}, true, false},
                      MatMulCase{"transpose_b", {5, 7}, {3, 7}, false, true},
                      MatMulCase{"transpose_both", {7, 5}, {3, 7}, true, true},
                      MatMulCase{"batched_3d", {4, 3, 6}, {4, 6, 2}, false, false},
                      MatMulCase{"batched_transpose_b", {2, 3, 6}, {2, 5, 6}, false, true},
                      MatMulCase{"broadcast_b_2d", {3, 4, 5}, {5, 6}, false, false},
                      MatMulCase{"broadcast_a_2d", {4, 5}, {3, 5, 6}, false, false},
                      MatMulCase{"broadcast_batch_ones", {2, 1, 3, 4}, {1, 3, 4, 2}, false, false},
                      MatMulCase{"broadcast_batch_transpose_a", {1, 4, 3}, {5, 4, 2}, true, false},
                      MatMulCase{"rank4_both_transposed", {2, 3, 4, 5}, {2, 3, 6, 4}, true, true}),
                       ::testing::Bool()),
    [](const auto& p) {
      return std::get<0>(p.param).name + (std::get<1>(p.param) ? "_constant_b" : "_input_b");
    });

}  // namespace
}  // namespace qfuse::test
