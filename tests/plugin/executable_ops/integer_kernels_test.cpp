// The integer-only mode's kernels: the vectorized requantization against the
// integer plan evaluated one element at a time (composer's reference), and
// the integer average pool against the exact mean (long double).

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "composer/integer_plan.hpp"
#include "plugin/executable_ops/integer_kernels.hpp"

namespace qfuse::plugin {
namespace {

using composer::DataType;

composer::PostOpsPlan random_plan(std::mt19937& rng, int channels, DataType dst, bool residual,
                                  DataType residual_type) {
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  composer::PostOpsPlan p;
  p.channels = channels;
  p.dst_type = dst;
  std::vector<float> shift;
  for (int c = 0; c < channels; ++c) {
    p.output_scales.push_back(std::ldexp(0.5f + u(rng), -static_cast<int>(6 + rng() % 8)));
    shift.push_back((u(rng) - 0.5f) * 60.0f);
  }
  p.post_ops.push_back(composer::BinaryPostOp{composer::BinaryAlg::add,
                                              composer::Broadcast::per_channel,
                                              composer::ConstantTensor{shift}});
  if (residual) {
    const float step = 0.5f + u(rng);
    p.post_ops.push_back(composer::EltwisePostOp{composer::EltwiseAlg::round, step, 0.0f, 0.0f});
    p.post_ops.push_back(composer::EltwisePostOp{composer::EltwiseAlg::clip, 1.0f, -40.0f * step,
                                                 200.0f * step});
    p.post_ops.push_back(composer::SumPostOp{0, 0.3f + u(rng), residual_type});
  } else if (rng() % 2) {
    p.post_ops.push_back(composer::EltwisePostOp{composer::EltwiseAlg::relu, 1.0f, 0.0f, 0.0f});
  }
  if (dst == DataType::f32) {
    p.post_ops.push_back(composer::EltwisePostOp{composer::EltwiseAlg::round, 0.05f, 0.0f, 0.0f});
  }
  return p;
}

template <typename T>
double value_at(const std::vector<std::uint8_t>& bytes, std::size_t i) {
  T v;
  std::memcpy(&v, bytes.data() + i * sizeof(T), sizeof(T));
  return static_cast<double>(v);
}

TEST(IntegerKernels, RequantizerMatchesThePlanElementByElement) {
  std::mt19937 rng(3);
  int cases = 0;
  for (const int channels : {1, 3, 16, 37, 300}) {
    for (const std::int64_t rows : {1, 7, 129}) {
      for (const DataType dst : {DataType::u8, DataType::s8, DataType::f32}) {
        for (const DataType res_type : {DataType::u8, DataType::s8}) {
          for (const bool residual : {false, true}) {
            const auto plan = random_plan(rng, channels, dst, residual, res_type);
            std::vector<float> bias;
            for (int c = 0; c < channels; ++c) bias.push_back(static_cast<float>(rng() % 2001) - 1000.0f);
            const auto r = composer::derive_integer_plan(plan, bias, 1.0 / (1 << 20));
            ASSERT_TRUE(r.plan) << r.reason;
            const std::size_t n = static_cast<std::size_t>(rows) * static_cast<std::size_t>(channels);
            std::vector<std::int32_t> acc(n);
            std::vector<std::uint8_t> res(n);
            for (auto& a : acc) a = static_cast<std::int32_t>(static_cast<std::int64_t>(rng() % 2'000'001) - 1'000'000);
            for (auto& b : res) b = static_cast<std::uint8_t>(rng());
            std::vector<std::uint8_t> out(n * (dst == DataType::f32 ? 4 : 1));
            IntegerRequantizer(*r.plan).run(acc.data(), rows, residual ? res.data() : nullptr, out.data());
            for (std::size_t i = 0; i < n; ++i) {
              const int c = static_cast<int>(i % static_cast<std::size_t>(channels));
              const std::int32_t rv = !residual ? 0
                                      : res_type == DataType::s8 ? static_cast<std::int8_t>(res[i])
                                                                 : res[i];
              const double want = composer::evaluate_integer_plan(*r.plan, acc[i], c, rv);
              const double got = dst == DataType::f32 ? value_at<float>(out, i)
                                 : dst == DataType::s8 ? value_at<std::int8_t>(out, i)
                                                       : value_at<std::uint8_t>(out, i);
              ASSERT_EQ(got, want) << "element " << i << " of " << rows << "x" << channels << ": "
                                   << composer::describe(*r.plan);
            }
            ++cases;
          }
        }
      }
    }
  }
  EXPECT_EQ(cases, 180);
}

long double round_half_even(long double v) { return std::nearbyintl(v); }

TEST(IntegerKernels, AveragePoolMatchesTheExactMean) {
  std::mt19937 rng(5);
  struct Geo {
    std::int64_t ih, iw, kh, kw, sh, sw, ph, pw;
    bool exclude_pad;
  };
  const std::vector<Geo> geos = {{7, 7, 7, 7, 1, 1, 0, 0, true},   // global
                                 {9, 8, 3, 3, 2, 2, 1, 1, true},   // padded, exclude
                                 {9, 8, 3, 3, 2, 2, 1, 1, false},  // padded, include
                                 {5, 6, 2, 2, 2, 2, 0, 0, true},
                                 {14, 14, 14, 14, 1, 1, 0, 0, true}};
  std::int64_t compared = 0, near_tie = 0;
  for (const Geo& geo : geos) {
    for (const bool src_signed : {false, true}) {
      for (const bool dst_signed : {false, true}) {
        IntegerAvgPool::Geometry g;
        g.n = 2;
        g.c = 1 + static_cast<std::int64_t>(rng() % 70);
        g.ih = geo.ih;
        g.iw = geo.iw;
        g.kh = geo.kh;
        g.kw = geo.kw;
        g.sh = geo.sh;
        g.sw = geo.sw;
        g.ph = geo.ph;
        g.pw = geo.pw;
        g.oh = (geo.ih + 2 * geo.ph - geo.kh) / geo.sh + 1;
        g.ow = (geo.iw + 2 * geo.pw - geo.kw) / geo.sw + 1;
        g.exclude_pad = geo.exclude_pad;
        g.src_signed = src_signed;
        g.dst_signed = dst_signed;
        const float out_scale = 0.5f + static_cast<float>(rng() % 1000) / 1000.0f;
        const float out_shift = static_cast<float>(rng() % 41) - 20.0f + 0.25f;
        const double eta = 1.0 / (1 << 20);
        const IntegerAvgPool pool(g, out_scale, out_shift, eta);
        std::vector<std::uint8_t> src(static_cast<std::size_t>(g.n * g.ih * g.iw * g.c));
        for (auto& v : src) v = static_cast<std::uint8_t>(rng());
        std::vector<std::uint8_t> dst(static_cast<std::size_t>(g.n * g.oh * g.ow * g.c));
        pool.run(src.data(), dst.data());
        for (std::int64_t b = 0; b < g.n; ++b) {
          for (std::int64_t oy = 0; oy < g.oh; ++oy) {
            for (std::int64_t ox = 0; ox < g.ow; ++ox) {
              for (std::int64_t c = 0; c < g.c; ++c) {
                long double sum = 0;
                std::int64_t cells = 0;
                for (std::int64_t y = oy * g.sh - g.ph; y < oy * g.sh - g.ph + g.kh; ++y) {
                  for (std::int64_t x = ox * g.sw - g.pw; x < ox * g.sw - g.pw + g.kw; ++x) {
                    if (y < 0 || y >= g.ih || x < 0 || x >= g.iw) continue;
                    const std::uint8_t raw = src[static_cast<std::size_t>(((b * g.ih + y) * g.iw + x) * g.c + c)];
                    sum += src_signed ? static_cast<std::int8_t>(raw) : raw;
                    ++cells;
                  }
                }
                const std::int64_t count = g.exclude_pad ? cells : g.kh * g.kw;
                const long double v = static_cast<long double>(out_scale) * sum / count + out_shift;
                const long double lo = dst_signed ? -128 : 0, hi = dst_signed ? 127 : 255;
                const long double want = std::clamp(round_half_even(v), lo, hi);
                const std::uint8_t raw = dst[static_cast<std::size_t>(((b * g.oh + oy) * g.ow + ox) * g.c + c)];
                const long double got = dst_signed ? static_cast<std::int8_t>(raw) : raw;
                ++compared;
                const long double tie = std::fabs(std::fabs(v - std::floor(v)) - 0.5L);
                if (tie < std::fabs(v) * eta + 1e-5L) {
                  ++near_tie;
                  EXPECT_LE(std::fabs(got - want), 1.0L);
                  continue;
                }
                ASSERT_EQ(got, want) << "b " << b << " oy " << oy << " ox " << ox << " c " << c
                                     << " exact " << static_cast<double>(v);
              }
            }
          }
        }
      }
    }
  }
  std::cout << compared << " pooled values, " << near_tie << " within the fixed-point error of a tie\n";
  EXPECT_LT(near_tie, compared / 50);
}

}  // namespace
}  // namespace qfuse::plugin
