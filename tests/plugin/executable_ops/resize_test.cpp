// Resize (ONNX semantics). When the scale is sizes / input, the reference
// computes every source coordinate as an exact rational num / den, so
// nearest-mode ties and floor/ceil are decided without rounding error.
// Nearest is compared exactly; linear (multilinear over all 2^rank corners)
// within 1e-6 * sum |w * v| + 1e-7.

#include "test_util.hpp"

namespace qfuse::test {
namespace {

using graph::CoordinateTransform;
using graph::NearestMode;
using graph::ResizeMode;
using test::PrintTo;

struct Rational {
  std::int64_t num;
  std::int64_t den;  // > 0
};

std::int64_t floor_div(std::int64_t a, std::int64_t b) {
  std::int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

// Source coordinate of output index x along an axis of `in` -> `out`.
Rational source_coordinate(CoordinateTransform t, std::int64_t x, std::int64_t in,
                           std::int64_t out) {
  switch (t) {
    case CoordinateTransform::half_pixel: return {(2 * x + 1) * in - out, 2 * out};
    case CoordinateTransform::pytorch_half_pixel:
      return out > 1 ? Rational{(2 * x + 1) * in - out, 2 * out} : Rational{0, 1};
    case CoordinateTransform::align_corners:
      return out == 1 ? Rational{0, 1} : Rational{x * (in - 1), out - 1};
    case CoordinateTransform::asymmetric: return {x * in, out};
    case CoordinateTransform::tf_half_pixel_for_nn: return {(2 * x + 1) * in, 2 * out};
  }
  return {0, 1};
}

std::int64_t nearest(Rational c, NearestMode mode, std::int64_t in) {
  const std::int64_t fl = floor_div(c.num, c.den);
  const std::int64_t rem2 = 2 * (c.num - fl * c.den);  // 2 * fractional part * den
  std::int64_t i = fl;
  switch (mode) {
    case NearestMode::round_prefer_floor: i = rem2 <= c.den ? fl : fl + 1; break;
    case NearestMode::round_prefer_ceil: i = rem2 < c.den ? fl : fl + 1; break;
    case NearestMode::floor: i = fl; break;
    case NearestMode::ceil: i = rem2 == 0 ? fl : fl + 1; break;
  }
  return std::clamp<std::int64_t>(i, 0, in - 1);
}

std::string transform_name(CoordinateTransform t) {
  switch (t) {
    case CoordinateTransform::half_pixel: return "half_pixel";
    case CoordinateTransform::pytorch_half_pixel: return "pytorch_half_pixel";
    case CoordinateTransform::align_corners: return "align_corners";
    case CoordinateTransform::asymmetric: return "asymmetric";
    case CoordinateTransform::tf_half_pixel_for_nn: return "tf_half_pixel_for_nn";
  }
  return "?";
}

std::string mode_name(NearestMode m) {
  switch (m) {
    case NearestMode::round_prefer_floor: return "round_prefer_floor";
    case NearestMode::round_prefer_ceil: return "round_prefer_ceil";
    case NearestMode::floor: return "floor";
    case NearestMode::ceil: return "ceil";
  }
  return "?";
}

struct SizeCase {
  std::string name;
  Shape in;
  Shape out;
};

// Up and down by factors that are exact in float (2, 1/2, 5/4, 3/4, 5/8), so
// that the float scale qfuse derives from sizes equals out / in exactly, plus
// odd sizes that create exact ties. (Ratios such as 5/3 are covered by
// InexactScaleFollowsExactArithmetic.)
const std::vector<SizeCase> kSizes = {
    {"up2", {1, 2, 4, 5}, {1, 2, 8, 10}},
    {"down2", {1, 2, 8, 6}, {1, 2, 4, 3}},
    {"up_odd", {1, 1, 4, 4}, {1, 1, 5, 5}},
    {"down_odd", {1, 2, 8, 8}, {1, 2, 6, 5}},
};

using NearestParam = std::tuple<CoordinateTransform, NearestMode, SizeCase>;

struct NearestName {
  std::string operator()(const ::testing::TestParamInfo<NearestParam>& p) const {
    return transform_name(std::get<0>(p.param)) + "_" + mode_name(std::get<1>(p.param)) + "_" +
           std::get<2>(p.param).name;
  }
};

class ResizeNearestTest : public ::testing::TestWithParam<NearestParam> {};

TEST_P(ResizeNearestTest, GathersTheNearestSource) {
  const auto& [transform, mode, sizes] = GetParam();
  std::mt19937 rng(41);
  const Tensor x = random_tensor(sizes.in, rng);
  graph::ResizeAttrs attrs;
  attrs.mode = ResizeMode::nearest;
  attrs.transform = transform;
  attrs.nearest_mode = mode;
  attrs.sizes = sizes.out;
  const Tensor y = run_op(OpKind::Resize, {input(x)}, attrs);
  ASSERT_EQ(y.shape(), sizes.out);
  const auto in_strides = strides_of(sizes.in);
  std::vector<double> expected;
  for (std::int64_t i = 0; i < element_count(sizes.out); ++i) {
    const auto pos = unravel(sizes.out, i);
    std::int64_t src = 0;
    for (std::size_t d = 0; d < pos.size(); ++d) {
      const Rational c = source_coordinate(transform, pos[d], sizes.in[d], sizes.out[d]);
      src += nearest(c, mode, sizes.in[d]) * in_strides[d];
    }
    expected.push_back(static_cast<double>(x.data<float>()[idx(src)]));
  }
  EXPECT_TRUE(all_equal(y, expected));
}

INSTANTIATE_TEST_SUITE_P(
    All, ResizeNearestTest,
    ::testing::Combine(::testing::Values(CoordinateTransform::half_pixel,
                                         CoordinateTransform::pytorch_half_pixel,
                                         CoordinateTransform::align_corners,
                                         CoordinateTransform::asymmetric,
                                         CoordinateTransform::tf_half_pixel_for_nn),
                       ::testing::Values(NearestMode::round_prefer_floor,
                                         NearestMode::round_prefer_ceil, NearestMode::floor,
                                         NearestMode::ceil),
                       ::testing::ValuesIn(kSizes)),
    NearestName{});

// Hand-checked 1D example: 4 -> 8, asymmetric, source x/2: ties at odd x.
TEST(ResizeNearest, AsymmetricTiesByHand) {
  const Tensor x = filled({1, 1, 4}, {10, 20, 30, 40});
  graph::ResizeAttrs attrs;
  attrs.transform = CoordinateTransform::asymmetric;
  attrs.sizes = {1, 1, 8};
  attrs.nearest_mode = NearestMode::round_prefer_floor;
  EXPECT_TRUE(all_equal(run_op(OpKind::Resize, {input(x)}, attrs),
                        {10, 10, 20, 20, 30, 30, 40, 40}));
  attrs.nearest_mode = NearestMode::round_prefer_ceil;
  EXPECT_TRUE(all_equal(run_op(OpKind::Resize, {input(x)}, attrs),
                        {10, 20, 20, 30, 30, 40, 40, 40}));
}

// 3 -> 5, half_pixel, ceil: output 2 maps to (2 + 0.5) * 3 / 5 - 0.5 = 1 exactly,
// so ceil gives 1. Without explicit scales qfuse maps coordinates with
// in / out exactly (a float scale 5/3 would give 1.00000004 and pick 2).
TEST(ResizeNearest, InexactScaleFollowsExactArithmetic) {
  const Tensor x = filled({1, 1, 1, 3}, {0, 1, 2});
  graph::ResizeAttrs attrs;
  attrs.transform = CoordinateTransform::half_pixel;
  attrs.nearest_mode = NearestMode::ceil;
  attrs.sizes = {1, 1, 1, 5};
  // Coordinates: -0.2, 0.4, 1.0, 1.6, 2.2 -> ceil, clamped: 0, 1, 1, 2, 2.
  EXPECT_TRUE(all_equal(run_op(OpKind::Resize, {input(x)}, attrs), {0, 1, 1, 2, 2}));
}

// Resizing a non-spatial axis (channels) is allowed too.
TEST(ResizeNearest, ChannelAxis) {
  const Tensor x = filled({1, 3, 1, 2}, {1, 2, 3, 4, 5, 6});
  graph::ResizeAttrs attrs;
  attrs.transform = CoordinateTransform::asymmetric;
  attrs.nearest_mode = NearestMode::floor;
  attrs.sizes = {1, 6, 1, 2};
  EXPECT_TRUE(all_equal(run_op(OpKind::Resize, {input(x)}, attrs),
                        {1, 2, 1, 2, 3, 4, 3, 4, 5, 6, 5, 6}));
}

// Explicit scales that differ from sizes / input drive the coordinates:
// 5 -> 8 with scale 2 (asymmetric, floor): source index floor(x / 2).
TEST(ResizeNearest, ExplicitScalesDriveCoordinates) {
  const Tensor x = filled({1, 1, 1, 5}, {0, 1, 2, 3, 4});
  graph::ResizeAttrs attrs;
  attrs.transform = CoordinateTransform::asymmetric;
  attrs.nearest_mode = NearestMode::floor;
  attrs.sizes = {1, 1, 1, 8};
  attrs.scales = {1.0f, 1.0f, 1.0f, 2.0f};
  EXPECT_TRUE(all_equal(run_op(OpKind::Resize, {input(x)}, attrs), {0, 0, 1, 1, 2, 2, 3, 3}));
}

// With explicit scales, align_corners divides by the unfloored resized
// length in * scale (ONNX): 4 -> floor(4 * 0.6) = 2 samples at x * 3 / 1.4.
TEST(ResizeLinear, AlignCornersUsesTheScaledLengthWithExplicitScales) {
  const Tensor x = filled({1, 1, 1, 4}, {1, 2, 3, 4});
  graph::ResizeAttrs attrs;
  attrs.mode = ResizeMode::linear;
  attrs.transform = CoordinateTransform::align_corners;
  attrs.sizes = {1, 1, 1, 2};
  attrs.scales = {1.0f, 1.0f, 1.0f, 0.6f};
  const Tensor y = run_op(OpKind::Resize, {input(x)}, attrs);
  const double c = 3.0 / (4.0 * static_cast<double>(0.6f) - 1.0);
  EXPECT_FLOAT_EQ(y.data<float>()[0], 1.0f);
  EXPECT_NEAR(y.data<float>()[1], 1.0 + c, 1e-6);
}

using LinearParam = std::tuple<CoordinateTransform, SizeCase>;

struct LinearName {
  std::string operator()(const ::testing::TestParamInfo<LinearParam>& p) const {
    return transform_name(std::get<0>(p.param)) + "_" + std::get<1>(p.param).name;
  }
};

class ResizeLinearTest : public ::testing::TestWithParam<LinearParam> {};

TEST_P(ResizeLinearTest, InterpolatesBetweenClampedNeighbours) {
  const auto& [transform, sizes] = GetParam();
  std::mt19937 rng(43);
  const Tensor x = random_tensor(sizes.in, rng);
  graph::ResizeAttrs attrs;
  attrs.mode = ResizeMode::linear;
  attrs.transform = transform;
  attrs.sizes = sizes.out;
  const Tensor y = run_op(OpKind::Resize, {input(x)}, attrs);
  ASSERT_EQ(y.shape(), sizes.out);
  const std::size_t rank = sizes.in.size();
  const auto in_strides = strides_of(sizes.in);
  std::vector<double> expected, tol;
  for (std::int64_t i = 0; i < element_count(sizes.out); ++i) {
    const auto pos = unravel(sizes.out, i);
    // Per axis: the two neighbours (clamped into the input) and their weights.
    std::vector<std::array<std::int64_t, 2>> nb(rank);
    std::vector<std::array<double, 2>> wt(rank);
    for (std::size_t d = 0; d < rank; ++d) {
      const Rational c = source_coordinate(transform, pos[d], sizes.in[d], sizes.out[d]);
      const std::int64_t fl = floor_div(c.num, c.den);
      const double frac = static_cast<double>(c.num - fl * c.den) / static_cast<double>(c.den);
      const std::int64_t hi = sizes.in[d] - 1;
      nb[d] = {std::clamp<std::int64_t>(fl, 0, hi), std::clamp<std::int64_t>(fl + 1, 0, hi)};
      wt[d] = {1.0 - frac, frac};
    }
    double acc = 0.0, mag = 0.0;
    for (std::size_t corner = 0; corner < (std::size_t{1} << rank); ++corner) {
      double w = 1.0;
      std::int64_t src = 0;
      for (std::size_t d = 0; d < rank; ++d) {
        const std::size_t bit = (corner >> d) & 1U;
        w *= wt[d][bit];
        src += nb[d][bit] * in_strides[d];
      }
      const double t = w * static_cast<double>(x.data<float>()[idx(src)]);
      acc += t;
      mag += std::fabs(t);
    }
    expected.push_back(acc);
    tol.push_back(1e-6 * mag + 1e-7);
  }
  EXPECT_TRUE(all_close(y, expected, tol));
}

INSTANTIATE_TEST_SUITE_P(All, ResizeLinearTest,
                         ::testing::Combine(::testing::Values(CoordinateTransform::half_pixel,
                                                              CoordinateTransform::pytorch_half_pixel,
                                                              CoordinateTransform::align_corners,
                                                              CoordinateTransform::asymmetric),
                                            ::testing::ValuesIn(kSizes)),
                         LinearName{});

// Hand-checked: 2 -> 4 linear, half_pixel: coordinates -0.25, 0.25, 0.75, 1.25
// clamp to 0, 0.25, 0.75, 1.
TEST(ResizeLinear, HalfPixelByHand) {
  const Tensor x = filled({1, 1, 2}, {0, 4});
  graph::ResizeAttrs attrs;
  attrs.mode = ResizeMode::linear;
  attrs.transform = CoordinateTransform::half_pixel;
  attrs.sizes = {1, 1, 4};
  EXPECT_TRUE(all_equal(run_op(OpKind::Resize, {input(x)}, attrs), {0, 1, 3, 4}));
  attrs.transform = CoordinateTransform::align_corners;
  const Tensor x3 = filled({1, 1, 3}, {0, 4, 8});
  attrs.sizes = {1, 1, 5};
  EXPECT_TRUE(all_equal(run_op(OpKind::Resize, {input(x3)}, attrs), {0, 2, 4, 6, 8}));
}

}  // namespace
}  // namespace qfuse::test
