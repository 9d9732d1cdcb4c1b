// MaxPool, AvgPool, BatchNormalization and ReduceMean against loops in
// double. MaxPool is exact; AvgPool 1e-5 * mean|x| + 1e-7; BatchNorm 1e-5 *
// (|scaled| + |beta|) + 1e-6; ReduceMean 4e-6 * mean|x| + 1e-7 (an f32 sum of
// at most 64 values: 64 roundings of 2^-24 each).

#include <array>

#include "test_util.hpp"

namespace qfuse::test {
namespace {

using test::PrintTo;

struct PoolCase {
  std::string name;
  Shape x;
  graph::PoolAttrs attrs;
  float lo = -1.0f;
  float hi = 1.0f;
};

struct PoolExpected {
  Shape shape;
  std::vector<double> max, avg, avg_tol;
};

// Right-aligns per-spatial values into 3 dims with `fill`.
std::array<std::int64_t, 3> in3(const graph::Ints& v, std::int64_t fill) {
  std::array<std::int64_t, 3> r{fill, fill, fill};
  for (std::size_t i = 0; i < v.size(); ++i) r[3 - v.size() + i] = v[i];
  return r;
}

PoolExpected pool_reference(const Tensor& x, const graph::PoolAttrs& a) {
  const Shape& s = x.shape();
  const std::size_t sp = s.size() - 2;
  const auto in = in3(graph::Ints(s.begin() + 2, s.end()), 1);
  const auto k = in3(a.kernel, 1);
  const auto st = in3(a.strides.empty() ? graph::Ints(sp, 1) : a.strides, 1);
  const auto d = in3(a.dilations.empty() ? graph::Ints(sp, 1) : a.dilations, 1);
  const auto pb = in3(a.pads_begin.empty() ? graph::Ints(sp, 0) : a.pads_begin, 0);
  const auto pe = in3(a.pads_end.empty() ? graph::Ints(sp, 0) : a.pads_end, 0);
  std::array<std::int64_t, 3> out{};
  for (std::size_t i = 0; i < 3; ++i) {
    out[i] = (in[i] + pb[i] + pe[i] - ((k[i] - 1) * d[i] + 1)) / st[i] + 1;
  }
  PoolExpected e;
  e.shape = {s[0], s[1]};
  for (std::size_t i = 3 - sp; i < 3; ++i) e.shape.push_back(out[i]);
  const auto xs = x.data<float>();
  for (std::int64_t nc = 0; nc < s[0] * s[1]; ++nc) {
    for (std::int64_t oz = 0; oz < out[0]; ++oz) {
      for (std::int64_t oy = 0; oy < out[1]; ++oy) {
        for (std::int64_t ox = 0; ox < out[2]; ++ox) {
          double mx = -std::numeric_limits<double>::infinity();
          double sum = 0.0, mag = 0.0;
          std::int64_t real = 0;
          for (std::int64_t kz = 0; kz < k[0]; ++kz) {
            for (std::int64_t ky = 0; ky < k[1]; ++ky) {
              for (std::int64_t kx = 0; kx < k[2]; ++kx) {
                const std::int64_t iz = oz * st[0] - pb[0] + kz * d[0];
                const std::int64_t iy = oy * st[1] - pb[1] + ky * d[1];
                const std::int64_t ix = ox * st[2] - pb[2] + kx * d[2];
                if (iz < 0 || iz >= in[0] || iy < 0 || iy >= in[1] || ix < 0 || ix >= in[2]) {
                  continue;
                }
                const double v = xs[idx(((nc * in[0] + iz) * in[1] + iy) * in[2] + ix)];
                mx = std::max(mx, v);
                sum += v;
                mag += std::fabs(v);
                ++real;
              }
            }
          }
          const auto div = static_cast<double>(a.exclude_pad ? real : k[0] * k[1] * k[2]);
          e.max.push_back(mx);
          e.avg.push_back(sum / div);
          e.avg_tol.push_back(1e-5 * mag / div + 1e-7);
        }
      }
    }
  }
  return e;
}

class MaxPoolTest : public ::testing::TestWithParam<PoolCase> {};

TEST_P(MaxPoolTest, PaddedCellsNeverWin) {
  const PoolCase& c = GetParam();
  std::mt19937 rng(31);
  const Tensor x = random_tensor(c.x, rng, c.lo, c.hi);
  const Tensor y = run_op(OpKind::MaxPool, {input(x)}, c.attrs);
  const PoolExpected e = pool_reference(x, c.attrs);
  ASSERT_EQ(y.shape(), e.shape);
  EXPECT_TRUE(all_equal(y, e.max));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MaxPoolTest,
    ::testing::Values(
        PoolCase{"k2s2", {2, 4, 8, 6}, {{2, 2}, {2, 2}, {0, 0}, {0, 0}, {1, 1}, true}},
        PoolCase{"k3s2p1", {1, 3, 9, 9}, {{3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, true}},
        PoolCase{"k3s1_asym_pads_negative_inputs",
                 {1, 2, 6, 7},
                 {{3, 3}, {1, 1}, {0, 2}, {2, 1}, {1, 1}, true},
                 -5.0f,
                 -1.0f},
        PoolCase{"dilated", {1, 2, 9, 9}, {{3, 3}, {1, 1}, {2, 2}, {2, 2}, {2, 2}, true}},
        PoolCase{"dilated_strided_asym", {1, 3, 10, 8}, {{2, 3}, {2, 1}, {1, 0}, {0, 2}, {3, 2}, true},
                 -3.0f, -0.5f},
        PoolCase{"pool1d", {1, 3, 10}, {{3}, {2}, {1}, {1}, {1}, true}},
        PoolCase{"pool3d", {1, 2, 5, 6, 4}, {{2, 3, 2}, {2, 1, 2}, {0, 1, 1}, {1, 1, 0}, {1, 1, 1}, true}}),
    CaseName{});

struct AvgCase {
  std::string name;
  Shape x;
  graph::PoolAttrs attrs;
};

class AvgPoolTest : public ::testing::TestWithParam<AvgCase> {};

TEST_P(AvgPoolTest, DividesByRealOrKernelCells) {
  const AvgCase& c = GetParam();
  std::mt19937 rng(32);
  const Tensor x = random_tensor(c.x, rng, 0.5f, 2.0f);
  const Tensor y = run_op(OpKind::AvgPool, {input(x)}, c.attrs);
  const PoolExpected e = pool_reference(x, c.attrs);
  ASSERT_EQ(y.shape(), e.shape);
  EXPECT_TRUE(all_close(y, e.avg, e.avg_tol));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AvgPoolTest,
    ::testing::Values(
        AvgCase{"k3s1p1_exclude", {1, 3, 6, 6}, {{3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, true}},
        AvgCase{"k3s1p1_include", {1, 3, 6, 6}, {{3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, false}},
        AvgCase{"k3s2_asym_exclude", {2, 2, 7, 8}, {{3, 3}, {2, 2}, {0, 1}, {2, 1}, {1, 1}, true}},
        AvgCase{"k3s2_asym_include", {2, 2, 7, 8}, {{3, 3}, {2, 2}, {0, 1}, {2, 1}, {1, 1}, false}},
        AvgCase{"k2s2_no_pad", {1, 4, 8, 8}, {{2, 2}, {2, 2}, {0, 0}, {0, 0}, {1, 1}, true}},
        AvgCase{"global", {2, 8, 7, 7}, {{7, 7}, {1, 1}, {0, 0}, {0, 0}, {1, 1}, true}},
        AvgCase{"global_rect", {1, 3, 5, 9}, {{5, 9}, {1, 1}, {0, 0}, {0, 0}, {1, 1}, false}},
        AvgCase{"pool1d_include", {1, 3, 10}, {{4}, {3}, {2}, {1}, {1}, false}},
        AvgCase{"pool3d_exclude", {1, 2, 4, 5, 6}, {{2, 3, 3}, {2, 2, 2}, {1, 1, 1}, {0, 1, 1}, {1, 1, 1}, true}}),
    CaseName{});

// ---------------------------------------------------------------- BatchNorm

struct BnCase {
  std::string name;
  Shape x;
  float epsilon;
};

class BatchNormTest : public ::testing::TestWithParam<BnCase> {};

TEST_P(BatchNormTest, NormalizesPerChannel) {
  const BnCase& c = GetParam();
  std::mt19937 rng(33);
  const std::int64_t ch = c.x[1];
  const Tensor x = random_tensor(c.x, rng, -3.0f, 3.0f);
  const Tensor gamma = random_tensor({ch}, rng, -2.0f, 2.0f);
  const Tensor beta = random_tensor({ch}, rng, -1.0f, 1.0f);
  const Tensor mean = random_tensor({ch}, rng, -1.0f, 1.0f);
  const Tensor var = random_tensor({ch}, rng, 0.01f, 2.0f);
  const Tensor y = run_op(OpKind::BatchNormalization,
                          {input(x), constant(gamma), constant(beta), constant(mean), constant(var)},
                          graph::BatchNormAttrs{c.epsilon});
  ASSERT_EQ(y.shape(), c.x);
  std::int64_t inner = 1;
  for (std::size_t d = 2; d < c.x.size(); ++d) inner *= c.x[d];
  std::vector<double> expected, tol;
  for (std::int64_t i = 0; i < x.size(); ++i) {
    const std::size_t k = idx((i / inner) % ch);
    const double g = gamma.data<float>()[k], b = beta.data<float>()[k];
    const double m = mean.data<float>()[k], v = var.data<float>()[k];
    const double scaled =
        g * (static_cast<double>(x.data<float>()[idx(i)]) - m) /
        std::sqrt(v + static_cast<double>(c.epsilon));
    expected.push_back(scaled + b);
    tol.push_back(1e-5 * (std::fabs(scaled) + std::fabs(b)) + 1e-6);
  }
  EXPECT_TRUE(all_close(y, expected, tol));
}

INSTANTIATE_TEST_SUITE_P(Shapes, BatchNormTest,
                         ::testing::Values(BnCase{"nchw", {2, 3, 4, 5}, 1e-5f},
                                           BnCase{"nchw_eps_large", {1, 8, 3, 3}, 1e-1f},
                                           BnCase{"nc", {4, 6}, 1e-5f},
                                           BnCase{"ncw", {2, 5, 7}, 1e-3f},
                                           BnCase{"ncdhw", {1, 2, 3, 4, 5}, 1e-5f}),
                         CaseName{});

struct ReduceCase {
  std::string name;
  Shape x;
  graph::Ints axes;
  std::string implementation;  // qfuse's loop over consecutive axes, else oneDNN's
};

class ReduceMeanTest : public ::testing::TestWithParam<ReduceCase> {};

TEST_P(ReduceMeanTest, MeanOverTheAxes) {
  const ReduceCase& c = GetParam();
  std::mt19937 rng(41);
  const Tensor x = random_tensor(c.x, rng, -2.0f, 3.0f);
  graph::Graph g;
  graph::Builder b(g);
  b.output(b.op(OpKind::ReduceMean, {b.input("x", c.x)}, graph::ReduceAttrs{c.axes}, "mean"));
  const CompiledModel model = compile(g, {.fuse = false});
  ASSERT_EQ(model.layers()[0].implementation.rfind(c.implementation, 0), 0u)
      << model.layers()[0].implementation;
  InferRequest request = model.create_infer_request();
  request.set_input("x", x);
  request.infer();
  const Tensor& y = request.output("mean");
  Shape out = c.x;
  for (const auto a : c.axes) out[idx(a)] = 1;
  ASSERT_EQ(y.shape(), out);
  std::vector<double> sum(idx(y.size()), 0.0), mag(idx(y.size()), 0.0);
  const std::vector<std::int64_t> out_strides = strides_of(out);
  const std::int64_t count = x.size() / y.size();
  for (std::int64_t i = 0; i < x.size(); ++i) {
    std::vector<std::int64_t> pos = unravel(c.x, i);
    for (const auto a : c.axes) pos[idx(a)] = 0;
    std::int64_t o = 0;
    for (std::size_t d = 0; d < pos.size(); ++d) o += pos[d] * out_strides[d];
    sum[idx(o)] += x.data<float>()[idx(i)];
    mag[idx(o)] += std::fabs(x.data<float>()[idx(i)]);
  }
  std::vector<double> expected, tol;
  for (std::size_t o = 0; o < sum.size(); ++o) {
    expected.push_back(sum[o] / static_cast<double>(count));
    tol.push_back(4e-6 * mag[o] / static_cast<double>(count) + 1e-7);
  }
  EXPECT_TRUE(all_close(y, expected, tol));
}

INSTANTIATE_TEST_SUITE_P(
    Axes, ReduceMeanTest,
    ::testing::Values(ReduceCase{"tokens", {5, 16, 64}, {1}, "qfuse:reduce_mean"},
                      ReduceCase{"last", {3, 7, 37}, {2}, "qfuse:reduce_mean"},
                      ReduceCase{"spatial", {2, 6, 4, 5}, {2, 3}, "qfuse:reduce_mean"},
                      ReduceCase{"first", {9, 2, 3}, {0}, "qfuse:reduce_mean"},
                      ReduceCase{"all", {4, 3, 5}, {0, 1, 2}, "qfuse:reduce_mean"},
                      ReduceCase{"apart", {2, 3, 4, 5}, {1, 3}, ""}),
    CaseName{});

}  // namespace
}  // namespace qfuse::test
