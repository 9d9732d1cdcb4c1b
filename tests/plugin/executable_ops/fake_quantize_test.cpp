// FakeQuantize against the definition in DESIGN.md ("Semantics to honour"):
//   x <= min(il, ih) -> ol;  x > max(il, ih) -> oh;
//   else round((x - il) / (ih - il) * (L - 1)) / (L - 1) * (oh - ol) + ol,
// rounding half to even. The reference evaluates it in long double; results
// must match exactly (bit for bit after conversion to float).

#include "test_util.hpp"

namespace qfuse::test {
namespace {

using test::PrintTo;

double fake_quantize_reference(double x, double il, double ih, double ol, double oh,
                               std::int64_t levels) {
  if (x <= std::min(il, ih)) return ol;
  if (x > std::max(il, ih)) return oh;
  const long double steps = static_cast<long double>(levels - 1);
  const long double t = (static_cast<long double>(x) - il) / (static_cast<long double>(ih) - il);
  const long double q = std::nearbyint(t * steps);  // default rounding mode: half to even
  return static_cast<double>(q / steps * (static_cast<long double>(oh) - ol) + ol);
}

// x: [N, C, H, W] (or any rank); ranges broadcast per numpy.
std::vector<double> fake_quantize_expected(const Tensor& x, const Tensor& il, const Tensor& ih,
                                           const Tensor& ol, const Tensor& oh,
                                           std::int64_t levels) {
  std::vector<double> e;
  for (std::int64_t i = 0; i < x.size(); ++i) {
    const auto pos = unravel(x.shape(), i);
    auto at = [&](const Tensor& t) {
      return static_cast<double>(t.data<float>()[idx(broadcast_offset(t.shape(), pos))]);
    };
    // The output is f32: the exact value rounded once to float.
    const double r = fake_quantize_reference(static_cast<double>(x.data<float>()[idx(i)]), at(il),
                                             at(ih), at(ol), at(oh), levels);
    e.push_back(static_cast<double>(static_cast<float>(r)));
  }
  return e;
}

Tensor run_fake_quantize(const Tensor& x, const Tensor& il, const Tensor& ih, const Tensor& ol,
                         const Tensor& oh, std::int64_t levels) {
  return run_op(OpKind::FakeQuantize,
                {input(x), constant(il), constant(ih), constant(ol), constant(oh)},
                graph::FakeQuantizeAttrs{levels});
}

Tensor scalar(float v) { return filled({1}, {v}); }

// Self-check of the reference on hand-computed values, so that the
// comparisons below rest on something checked by hand.
TEST(FakeQuantizeReference, HandComputedValues) {
  // L = 256 over [0, 255]: identity on integers, ties to even.
  EXPECT_EQ(fake_quantize_reference(2.5, 0, 255, 0, 255, 256), 2.0);
  EXPECT_EQ(fake_quantize_reference(3.5, 0, 255, 0, 255, 256), 4.0);
  EXPECT_EQ(fake_quantize_reference(-1.0, 0, 255, 0, 255, 256), 0.0);
  EXPECT_EQ(fake_quantize_reference(300.0, 0, 255, 0, 255, 256), 255.0);
  // L = 2 over [0, 1] to [-1, 1]: the single threshold 0.5 is a tie -> 0 -> -1.
  EXPECT_EQ(fake_quantize_reference(0.5, 0, 1, -1, 1, 2), -1.0);
  EXPECT_EQ(fake_quantize_reference(0.75, 0, 1, -1, 1, 2), 1.0);
}

struct FqCase {
  std::string name;
  Shape x;
  Shape range_shape;
  std::int64_t levels;
};

class FakeQuantizeRandomTest : public ::testing::TestWithParam<FqCase> {};

// Random inputs spanning beyond the ranges; random per-channel ranges
// (some inverted when the case name says so).
TEST_P(FakeQuantizeRandomTest, MatchesDefinitionExactly) {
  const FqCase& c = GetParam();
  std::mt19937 rng(2024);
  const Tensor x = random_tensor(c.x, rng, -3.0f, 3.0f);
  const std::int64_t n = element_count(c.range_shape);
  std::uniform_real_distribution<float> low(-2.0f, -0.1f), high(0.1f, 2.0f);
  std::vector<float> il(idx(n)), ih(idx(n)), ol(idx(n)), oh(idx(n));
  for (std::int64_t i = 0; i < n; ++i) {
    il[idx(i)] = low(rng);
    ih[idx(i)] = high(rng);
    ol[idx(i)] = low(rng);
    oh[idx(i)] = high(rng);
    if (c.name.find("inverted") != std::string::npos && i % 2 == 0) {
      std::swap(il[idx(i)], ih[idx(i)]);
    }
  }
  const Tensor til = filled(c.range_shape, il), tih = filled(c.range_shape, ih);
  const Tensor tol = filled(c.range_shape, ol), toh = filled(c.range_shape, oh);
  const Tensor y = run_fake_quantize(x, til, tih, tol, toh, c.levels);
  ASSERT_EQ(y.shape(), c.x);
  EXPECT_TRUE(all_equal(y, fake_quantize_expected(x, til, tih, tol, toh, c.levels)));
}

INSTANTIATE_TEST_SUITE_P(
    Ranges, FakeQuantizeRandomTest,
    ::testing::Values(FqCase{"per_tensor_L256", {2, 3, 4, 5}, {1}, 256},
                      FqCase{"per_tensor_L255", {1, 4, 6, 6}, {1}, 255},
                      FqCase{"per_tensor_L16", {1, 3, 5, 5}, {1}, 16},
                      FqCase{"per_tensor_L2", {1, 3, 5, 5}, {1}, 2},
                      FqCase{"per_channel_L256", {2, 4, 3, 3}, {1, 4, 1, 1}, 256},
                      // Enough elements for the per-channel planes to run on all threads.
                      FqCase{"per_channel_large_L256", {2, 16, 40, 30}, {1, 16, 1, 1}, 256},
                      FqCase{"per_channel_3d_range_L255", {2, 4, 3, 3}, {4, 1, 1}, 255},
                      FqCase{"per_channel_L16", {1, 6, 2, 7}, {1, 6, 1, 1}, 16},
                      FqCase{"per_channel_inverted_L256", {1, 4, 5, 5}, {1, 4, 1, 1}, 256},
                      FqCase{"per_tensor_inverted_L16", {1, 2, 5, 5}, {1}, 16},
                      FqCase{"per_weight_channel_L255", {8, 3, 3, 3}, {8, 1, 1, 1}, 255},
                      FqCase{"full_shape_ranges_L256", {1, 2, 3, 4}, {1, 2, 3, 4}, 256},
                      FqCase{"rank2_per_column_L256", {5, 6}, {6}, 256},
                      // Planes of one value (a classifier's [N, C] and [N, C, 1, 1]),
                      // an odd channel count leaving a tail.
                      FqCase{"rank2_per_column_odd_L256", {3, 7}, {7}, 256},
                      FqCase{"per_channel_1x1_L255", {2, 9, 1, 1}, {1, 9, 1, 1}, 255}),
    CaseName{});

// Ties: with il = 0, ih = L - 1 the quantization step is 1 and x = k + 0.5 is an
// exact tie, which must round to the even neighbour. Output range [-1, 1] scaled
// by L - 1 keeps the dequantized value distinguishable.
struct TieCase {
  std::string name;
  std::int64_t levels;
};

class FakeQuantizeTieTest : public ::testing::TestWithParam<TieCase> {};

TEST_P(FakeQuantizeTieTest, TiesRoundHalfToEven) {
  const std::int64_t levels = GetParam().levels;
  const auto top = static_cast<float>(levels - 1);
  std::vector<float> xs;
  std::vector<double> expected_q;
  for (float k = 0.0f; k + 1.0f <= top; k += 1.0f) {
    xs.push_back(k + 0.5f);
    const double even = std::fmod(k, 2.0f) == 0.0f ? k : k + 1.0;
    expected_q.push_back(even);
  }
  // Range bounds and values just inside them.
  xs.insert(xs.end(), {0.0f, top, -0.5f, top + 0.5f, std::nextafter(top, 0.0f)});
  expected_q.insert(expected_q.end(), {0.0, top, 0.0, top, top});
  const auto n = static_cast<std::int64_t>(xs.size());
  const Tensor x = filled({1, n}, xs);
  // Output range [0, 2 * (L - 1)]: y = 2 q, exact in float.
  const Tensor y = run_fake_quantize(x, scalar(0.0f), scalar(top), scalar(0.0f),
                                     scalar(2.0f * top), levels);
  std::vector<double> expected;
  for (double q : expected_q) expected.push_back(2.0 * q);
  EXPECT_TRUE(all_equal(y, expected));
  // And the reference agrees with the hand-derived values.
  std::vector<double> ref;
  for (float v : xs) ref.push_back(fake_quantize_reference(v, 0.0, top, 0.0, 2.0 * top, levels));
  EXPECT_EQ(ref, expected);
}

INSTANTIATE_TEST_SUITE_P(Levels, FakeQuantizeTieTest,
                         ::testing::Values(TieCase{"L2", 2}, TieCase{"L16", 16},
                                           TieCase{"L255", 255}, TieCase{"L256", 256}),
                         CaseName{});

// Exactly on the bounds: x == il gives ol (x <= min), x == ih gives oh via the
// formula (q = L - 1), values below/above saturate.
TEST(FakeQuantize, ValuesOnRangeBounds) {
  const Tensor x = filled({1, 6}, {-1.0f, 1.0f, -1.5f, 1.5f, -0.999f, 0.999f});
  const Tensor y = run_fake_quantize(x, scalar(-1.0f), scalar(1.0f), scalar(-4.0f),
                                     scalar(4.0f), 256);
  EXPECT_EQ(y.data<float>()[0], -4.0f);
  EXPECT_EQ(y.data<float>()[1], 4.0f);
  EXPECT_EQ(y.data<float>()[2], -4.0f);
  EXPECT_EQ(y.data<float>()[3], 4.0f);
  const Tensor il = scalar(-1.0f), ih = scalar(1.0f), ol = scalar(-4.0f), oh = scalar(4.0f);
  EXPECT_TRUE(all_equal(y, fake_quantize_expected(x, il, ih, ol, oh, 256)));
}

// Inverted input range il > ih: x <= min(il, ih) = ih gives ol (not oh, as the
// formula alone would), x > max = il gives oh, and inside the range the formula
// with a negative denominator maps x == il to ol and values near ih to oh.
TEST(FakeQuantize, InvertedInputRange) {
  // il = 15, ih = 0, L = 16: step -1. q = round((x - 15) / -15 * 15) = 15 - x.
  const Tensor x = filled({1, 8}, {0.0f, -1.0f, 15.0f, 16.0f, 14.0f, 1.0f, 7.5f, 8.5f});
  const Tensor y = run_fake_quantize(x, scalar(15.0f), scalar(0.0f), scalar(0.0f),
                                     scalar(15.0f), 16);
  // q: x=0 -> ol=0; x=-1 -> 0; x=15 -> 0; x=16 -> oh=15; x=14 -> 1; x=1 -> 14;
  // x=7.5 -> round(7.5) = 8; x=8.5 -> round(6.5) = 6.
  EXPECT_TRUE(all_equal(y, {0, 0, 0, 15, 1, 14, 8, 6}));
}

// Inverted per-channel ranges mixed with normal ones.
TEST(FakeQuantize, PerChannelMixedDirections) {
  const Tensor x = filled({1, 2, 1, 4}, {0.0f, 1.0f, 2.5f, 3.0f, 0.0f, 1.0f, 2.5f, 3.0f});
  const Tensor il = filled({1, 2, 1, 1}, {0.0f, 3.0f});
  const Tensor ih = filled({1, 2, 1, 1}, {3.0f, 0.0f});
  const Tensor ol = filled({1, 2, 1, 1}, {0.0f, 0.0f});
  const Tensor oh = filled({1, 2, 1, 1}, {3.0f, 3.0f});
  const Tensor y = run_fake_quantize(x, il, ih, ol, oh, 4);
  // Channel 0: q = round(x): 0, 1, 2 (tie to even), 3.
  // Channel 1: x=0 <= min -> 0; q = round(3 - x): 2, round(0.5) = 0, 0.
  EXPECT_TRUE(all_equal(y, {0, 1, 2, 3, 0, 2, 0, 0}));
}

// Output range inverted too (ol > oh) is plain arithmetic.
TEST(FakeQuantize, InvertedOutputRange) {
  const Tensor x = filled({4}, {-1.0f, 0.0f, 1.0f, 2.0f});
  const Tensor y =
      run_fake_quantize(x, scalar(0.0f), scalar(2.0f), scalar(1.0f), scalar(-1.0f), 3);
  EXPECT_TRUE(all_equal(y, {1, 1, 0, -1}));
}

// A quantizing Convert (what a FakeQuantize + Convert to u8/s8 becomes when
// no layer takes them) stores exactly the FakeQuantize's level: random
// values, values on the grid's ties, values beyond the range and infinities.
void expect_quantizing_convert_matches(ElementType to, float il, float ih) {
  std::mt19937 rng(11);
  const Shape shape{1, 8, 5, 7};
  Tensor x = random_tensor(shape, rng, il - 0.5f, ih + 0.5f);
  auto v = x.data<float>();
  const double step = (static_cast<double>(ih) - il) / 255.0;
  for (std::size_t i = 0; i < v.size(); i += 3) {
    v[i] = static_cast<float>(il + (static_cast<double>(i % 255) + 0.5) * step);  // ties
  }
  v[1] = std::numeric_limits<float>::infinity();
  v[2] = -std::numeric_limits<float>::infinity();
  graph::ConvertAttrs a{to};
  a.input_low = il;
  a.input_high = ih;
  const Tensor y = run_op(OpKind::Convert, {input(x)}, a);
  ASSERT_EQ(y.type(), to);
  const double lo = to == ElementType::u8 ? 0.0 : -128.0;
  for (std::int64_t i = 0; i < x.size(); ++i) {
    const double e = fake_quantize_reference(v[idx(i)], il, ih, lo, lo + 255.0, 256);
    ASSERT_EQ(y.as_float(i), e) << "x = " << v[idx(i)] << " at " << i;
  }
}

TEST(QuantizingConvert, U8MatchesFakeQuantizeLevels) {
  expect_quantizing_convert_matches(ElementType::u8, -0.7f, 2.9f);
}

TEST(QuantizingConvert, S8MatchesFakeQuantizeLevels) {
  expect_quantizing_convert_matches(ElementType::s8, -1.28f, 1.27f);
}

// --- ONNX's grid: FakeQuantize(x, il, ih, il, ih, scale, zero_point) ---------
//
// ONNX's QuantizeLinear -> DequantizeLinear, checked against codes worked out
// here with integer arithmetic on values chosen so that x / s is exact in f32
// (s a power of two): x / s = k + 0.5 rounds to the even one of k, k + 1,
// then the zero point is added, then the code saturates.

// round_half_to_even(t) for t = m / 2 (m an integer), without floating point.
std::int64_t half_even(std::int64_t m) {
  if (m % 2 == 0) return m / 2;
  const std::int64_t below = (m - 1) / 2 - ((m - 1) % 2 != 0 && m < 0 ? 1 : 0);
  return below % 2 == 0 ? below : below + 1;
}

TEST(FakeQuantizeLinearReference, HalfEvenByHand) {
  EXPECT_EQ(half_even(5), 2);     // 2.5 -> 2
  EXPECT_EQ(half_even(7), 4);     // 3.5 -> 4
  EXPECT_EQ(half_even(-5), -2);   // -2.5 -> -2
  EXPECT_EQ(half_even(-255), -128);  // -127.5 -> -128
  EXPECT_EQ(half_even(255), 128);    // 127.5 -> 128
  EXPECT_EQ(half_even(49), 24);      // 24.5 -> 24
  EXPECT_EQ(half_even(-1), 0);       // -0.5 -> 0
}

// ONNX's QuantizeLinear -> DequantizeLinear as the two ops run it: the codes
// of one, dequantized by the other, per tensor or along `axis`.
Tensor run_pair(const Tensor& x, ElementType to, const std::vector<float>& scale,
                const std::vector<float>& zero_point, std::int64_t axis = 1) {
  graph::QuantizeAttrs q;
  q.to = to;
  q.scale = scale;
  q.zero_point.clear();
  for (float z : zero_point) q.zero_point.push_back(static_cast<std::int32_t>(z));
  q.axis = axis;
  const Tensor codes = run_op(OpKind::Quantize, {input(x)}, q);
  return run_op(OpKind::Dequantize, {input(codes)},
                graph::DequantizeAttrs{scale, zero_point, axis});
}

struct LinearGridCase {
  ElementType type;  // u8 or s8: codes [0, 255] or [-128, 127]
  int zero_point;
};

class QuantizeDequantizeTest : public ::testing::TestWithParam<LinearGridCase> {};

// Every half step from below the grid to above it, per tensor (the vector
// loop and its scalar tail) and per channel along axis 1 and axis 0 (weights).
TEST_P(QuantizeDequantizeTest, TiesRoundBeforeTheZeroPointIsAdded) {
  const LinearGridCase p = GetParam();
  const int lo = p.type == ElementType::u8 ? 0 : -128, hi = lo + 255;
  const float s = 0.25f;
  std::vector<float> xs;
  std::vector<float> expected;
  for (std::int64_t m = 2 * (lo - p.zero_point) - 6; m <= 2 * (hi - p.zero_point) + 6; ++m) {
    xs.push_back(static_cast<float>(m) * 0.5f * s);  // x / s = m / 2 exactly
    const std::int64_t q = std::clamp<std::int64_t>(half_even(m) + p.zero_point, lo, hi);
    expected.push_back(static_cast<float>(q - p.zero_point) * s);
  }
  const auto n = static_cast<std::int64_t>(xs.size());
  const auto grid = [&](const Shape& shape) {
    return run_pair(filled(shape, xs), p.type, {s}, {static_cast<float>(p.zero_point)});
  };
  for (const Shape& shape : {Shape{n}, Shape{1, 1, n}}) {
    const Tensor y = grid(shape);
    for (std::int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(y.data<float>()[idx(i)], expected[idx(i)])
          << "x / s = " << xs[idx(i)] / s << ", zero point " << p.zero_point;
    }
  }
  // Per channel: channel c has scale s * 2^-c (ties stay exact) along axis 1,
  // and along axis 0 (ranges shaped [C, 1]: the general loop).
  for (const bool axis0 : {false, true}) {
    const std::int64_t channels = 3;
    std::vector<float> x, sc, zp, e;
    for (std::int64_t c = 0; c < channels; ++c) {
      const float sc_c = s / static_cast<float>(1 << c);
      sc.push_back(sc_c);
      zp.push_back(static_cast<float>(p.zero_point));
      for (std::int64_t i = 0; i < n; ++i) {
        x.push_back(xs[idx(i)] / static_cast<float>(1 << c));
        e.push_back(expected[idx(i)] / static_cast<float>(1 << c));
      }
    }
    const Shape xshape = axis0 ? Shape{channels, n} : Shape{1, channels, n};
    const Tensor y = run_pair(filled(xshape, x), p.type, sc, zp, axis0 ? 0 : 1);
    for (std::size_t i = 0; i < e.size(); ++i) {
      ASSERT_EQ(y.data<float>()[i], e[i]) << "element " << i << (axis0 ? " (axis 0)" : "");
    }
  }
}

// PyTorch's per-channel symmetric weights: s = max|w| / 127.5 in f32 puts the
// largest weight on w / s = -127.5 (-> -128) or +127.5 (-> 128 -> 127).
// ONNX divides in f32; the expected codes here divide in f32 too, and the
// test checks that the ties it is about are really there.
TEST(QuantizeDequantize, TorchSymmetricWeightsOnTiesQuantizeAsOnnx) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  const std::int64_t channels = 64, per = 9;
  std::vector<float> w(static_cast<std::size_t>(channels * per)), sc, zp;
  int ties = 0;
  for (std::int64_t c = 0; c < channels; ++c) {
    float m = 0.0f;
    for (std::int64_t k = 0; k < per; ++k) {
      w[idx(c * per + k)] = d(rng);
      m = std::max(m, std::abs(w[idx(c * per + k)]));
    }
    const float s = m / 127.5f;
    sc.push_back(s);
    zp.push_back(0.0f);
    for (std::int64_t k = 0; k < per; ++k) ties += std::abs(w[idx(c * per + k)] / s) == 127.5f;
  }
  ASSERT_GT(ties, channels / 2) << "the test needs weights on w / s = +-127.5";
  const Tensor y = run_pair(filled({channels, per}, w), ElementType::s8, sc, zp, 0);
  for (std::int64_t i = 0; i < channels * per; ++i) {
    const float s = sc[idx(i / per)];
    const float q = std::clamp(std::nearbyint(w[idx(i)] / s), -128.0f, 127.0f);
    ASSERT_EQ(y.data<float>()[idx(i)], q * s) << "w / s = " << w[idx(i)] / s;
  }
}

INSTANTIATE_TEST_SUITE_P(Grids, QuantizeDequantizeTest,
                         ::testing::Values(LinearGridCase{ElementType::u8, 0},
                                           LinearGridCase{ElementType::u8, 3},
                                           LinearGridCase{ElementType::u8, 128},
                                           LinearGridCase{ElementType::u8, 127},
                                           LinearGridCase{ElementType::s8, 0},
                                           LinearGridCase{ElementType::s8, -5}));

// A Quantize (ONNX's QuantizeLinear) stores those codes.
TEST(Quantize, StoresOnnxCodesOnTies) {
  for (const ElementType to : {ElementType::u8, ElementType::s8}) {
    for (const int zp : {0, 3, -7}) {
      if (to == ElementType::u8 && zp < 0) continue;
      const int lo = to == ElementType::u8 ? 0 : -128, hi = lo + 255;
      std::vector<float> xs;
      for (std::int64_t m = -600; m <= 600; ++m) xs.push_back(static_cast<float>(m) * 0.125f);
      xs.push_back(std::numeric_limits<float>::infinity());
      xs.push_back(-std::numeric_limits<float>::infinity());
      graph::QuantizeAttrs a;
      a.to = to;
      a.scale = {0.25f};
      a.zero_point = {zp};
      const auto n = static_cast<std::int64_t>(xs.size());
      const Tensor y = run_op(OpKind::Quantize, {input(filled({n}, xs))}, a);
      for (std::int64_t i = 0; i < n - 2; ++i) {
        const std::int64_t m = static_cast<std::int64_t>(i) - 600;  // x / s = m / 2
        const double e = static_cast<double>(std::clamp<std::int64_t>(half_even(m) + zp, lo, hi));
        ASSERT_EQ(y.as_float(i), e) << "x / s = " << static_cast<double>(m) / 2 << ", zp " << zp;
      }
      EXPECT_EQ(y.as_float(n - 2), hi);
      EXPECT_EQ(y.as_float(n - 1), lo);
    }
  }
}

// Per channel along each axis, and onto fewer codes than the type holds
// (torch's reduce_range): saturate(round_half_even(x / s[c]) + z[c]) onto
// [type min, type min + levels - 1], the quotient in f32, from a naive loop.
TEST(Quantize, PerChannelAndNarrowLevels) {
  const Shape shape{2, 3, 5, 7};
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> d(-4.0f, 4.0f);
  std::vector<float> xs(static_cast<std::size_t>(element_count(shape)));
  for (float& v : xs) v = std::nearbyint(d(rng) * 16.0f) / 16.0f;  // many ties
  const Tensor x = filled(shape, xs);
  for (const ElementType to : {ElementType::u8, ElementType::s8}) {
    for (std::int64_t axis = 0; axis < 4; ++axis) {
      for (const std::int32_t levels : {256, 128}) {
        graph::QuantizeAttrs a;
        a.to = to;
        a.axis = axis;
        a.levels = levels;
        a.scale.clear();
        a.zero_point.clear();
        for (std::int64_t c = 0; c < shape[idx(axis)]; ++c) {
          a.scale.push_back(0.0625f * static_cast<float>(c + 1));
          a.zero_point.push_back((to == ElementType::u8 ? 60 : -3) + static_cast<std::int32_t>(c));
        }
        const Tensor y = run_op(OpKind::Quantize, {input(x)}, a);
        const std::int64_t lo = to == ElementType::u8 ? 0 : -128, hi = lo + levels - 1;
        for (std::int64_t i = 0; i < x.size(); ++i) {
          const std::size_t c = idx(unravel(shape, i)[idx(axis)]);
          const float q = xs[idx(i)] / a.scale[c];
          const std::int64_t code = static_cast<std::int64_t>(std::nearbyint(q)) + a.zero_point[c];
          ASSERT_EQ(y.as_float(i), static_cast<float>(std::clamp(code, lo, hi)))
              << index_string(shape, i) << " axis " << axis << " levels " << levels;
        }
      }
    }
  }
}

}  // namespace
}  // namespace qfuse::test
