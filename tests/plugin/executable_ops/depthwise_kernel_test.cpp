// qfuse's 3x3 / 5x5 depthwise kernel (u8 source with a zero point, padding
// kernel / 2)
// against naive loops written here: the sum of w * (x - z) over the taps
// inside the image, then bias and the plan's steps in their documented order.
// Shapes around the kernel's groups of 8 and 4 outputs, strips of 64
// columns, images smaller than the kernel, strides of 2, channels outside
// blocks of 16, and batches; on one thread and on the team.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <unordered_map>
#include <utility>
#include <vector>

#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>

#include "plugin/executable_ops/depthwise_kernel.hpp"
#include "plugin/post_ops_attr.hpp"

namespace qfuse::plugin {
namespace {

using composer::BinaryAlg;
using composer::BinaryPostOp;
using composer::ConstantTensor;
using composer::DataType;
using composer::EltwiseAlg;
using composer::EltwisePostOp;
using composer::PostOpsPlan;

float eltwise(const EltwisePostOp& e, float x) {
  switch (e.alg) {
    case EltwiseAlg::linear: return e.scale * (e.alpha * x + e.beta);
    case EltwiseAlg::relu: return e.scale * (x > 0 ? x : e.alpha * x);
    case EltwiseAlg::clip: return e.scale * std::min(std::max(x, e.alpha), e.beta);
    case EltwiseAlg::hardswish:
      return e.scale * x * (std::min(std::max(x + 3.0f, 0.0f), 6.0f) / 6.0f);
    case EltwiseAlg::round: return e.scale * std::nearbyint(x);
    case EltwiseAlg::logistic: return e.scale / (1.0f + std::exp(-x));
    case EltwiseAlg::swish: return e.scale * x / (1.0f + std::exp(-e.alpha * x));
    default: ADD_FAILURE() << "no reference for " << composer::to_string(e.alg);
  }
  return 0.0f;
}

float binary(BinaryAlg alg, float x, float t) {
  switch (alg) {
    case BinaryAlg::add: return x + t;
    case BinaryAlg::sub: return x - t;
    case BinaryAlg::mul: return x * t;
    case BinaryAlg::min: return std::min(x, t);
    case BinaryAlg::max: return std::max(x, t);
  }
  return 0.0f;
}

float at_channel(const std::vector<float>& v, std::int64_t c) {
  return v.size() == 1 ? v[0] : v[static_cast<std::size_t>(c)];
}

// The plan on one accumulator (bias included) of channel c.
float finish(const PostOpsPlan& plan, float y, std::int64_t c) {
  if (!plan.output_scales.empty()) y *= at_channel(plan.output_scales, c);
  for (const auto& op : plan.post_ops) {
    if (const auto* e = std::get_if<EltwisePostOp>(&op)) {
      y = eltwise(*e, y);
    } else {
      const auto& b = std::get<BinaryPostOp>(op);
      y = binary(b.alg, y, at_channel(std::get<ConstantTensor>(b.tensor).values, c));
    }
  }
  if (plan.dst_zero_point) y += static_cast<float>(*plan.dst_zero_point);
  return y;
}

struct Case {
  DepthwiseShape shape;
  PostOpsPlan plan;
  bool bias = true;
};

std::vector<float> values(std::mt19937& rng, std::int64_t n, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

// The recognizer's chain: per-channel scales, linear, hardswish * k, + v, u8.
PostOpsPlan recognizer_plan(std::mt19937& rng, std::int64_t channels) {
  PostOpsPlan p;
  p.channels = static_cast<int>(channels);
  p.dst_type = DataType::u8;
  // Accumulators of about +-50000: hardswish's input within about +-10.
  p.output_scales = values(rng, channels, 2e-5f, 2e-4f);
  p.output_scales_mask = composer::ScalesMask::per_channel;
  p.post_ops.push_back(EltwisePostOp{EltwiseAlg::linear, 1.0f, 1.0f, 0.3f});
  p.post_ops.push_back(EltwisePostOp{EltwiseAlg::hardswish, 29.0f, 0.0f, 0.0f});
  p.post_ops.push_back(
      BinaryPostOp{BinaryAlg::add, composer::Broadcast::per_channel, ConstantTensor{{11.0f}}});
  return p;
}

// A common scale, leaky relu, a clip and a destination zero point, s8.
PostOpsPlan leaky_plan(std::int64_t channels) {
  PostOpsPlan p;
  p.channels = static_cast<int>(channels);
  p.dst_type = DataType::s8;
  p.output_scales = {1.5e-3f};
  p.post_ops.push_back(EltwisePostOp{EltwiseAlg::relu, 1.0f, 0.1f, 0.0f});
  p.post_ops.push_back(EltwisePostOp{EltwiseAlg::clip, 40.0f, -3.0f, 2.5f});
  p.post_ops.push_back(EltwisePostOp{EltwiseAlg::round, 0.5f, 0.0f, 0.0f});
  p.dst_zero_point = -5;
  return p;
}

// No output scales; every binary algorithm; f32 out.
PostOpsPlan binary_plan(std::mt19937& rng, std::int64_t channels) {
  PostOpsPlan p;
  p.channels = static_cast<int>(channels);
  p.dst_type = DataType::f32;
  const auto bin = [&](BinaryAlg alg, std::vector<float> v) {
    p.post_ops.push_back(
        BinaryPostOp{alg, composer::Broadcast::per_channel, ConstantTensor{std::move(v)}});
  };
  bin(BinaryAlg::mul, values(rng, channels, 1e-5f, 4e-5f));
  bin(BinaryAlg::sub, {0.25f});
  bin(BinaryAlg::min, values(rng, channels, 1.0f, 3.0f));
  bin(BinaryAlg::max, {-2.0f});
  bin(BinaryAlg::add, values(rng, channels, -1.0f, 1.0f));
  return p;
}

void check(const Case& c, std::uint8_t z, unsigned seed) {
  const DepthwiseShape& s = c.shape;
  const std::int64_t C = s.channels, H = s.height, W = s.width;
  const std::int64_t OH = (H - 1) / s.stride_h + 1, OW = (W - 1) / s.stride_w + 1;
  std::mt19937 rng(seed);
  std::vector<std::uint8_t> x(static_cast<std::size_t>(s.batch * H * W * C));
  for (auto& v : x) v = static_cast<std::uint8_t>(rng());
  const int K = s.kernel, pad = K / 2;
  std::vector<std::int8_t> w(static_cast<std::size_t>(C * K * K));
  for (auto& v : w) v = static_cast<std::int8_t>(static_cast<int>(rng() % 255) - 127);
  const std::vector<float> bias = c.bias ? values(rng, C, -2000.0f, 2000.0f) : std::vector<float>{};
  const DepthwiseKernel kernel(s, w.data(), bias, z, c.plan);
  const bool f32 = c.plan.dst_type == DataType::f32;
  const int team = omp_get_max_threads();
  for (const int threads : {1, 2, 3}) {
    const bool parallel = threads > 1;
    omp_set_num_threads(threads);
    // One pixel more than the output, which the kernel must leave alone.
    const auto size = static_cast<std::size_t>(s.batch * OH * OW * C);
    std::vector<std::uint8_t> out((size + static_cast<std::size_t>(C)) * (f32 ? 4 : 1), 0xA5);
    kernel.run(x.data(), out.data(), parallel);
    omp_set_num_threads(team);
    std::int64_t differ = 0;
    for (std::int64_t n = 0; n < s.batch; ++n) {
      for (std::int64_t oh = 0; oh < OH; ++oh) {
        for (std::int64_t ow = 0; ow < OW; ++ow) {
          for (std::int64_t ch = 0; ch < C; ++ch) {
            std::int64_t acc = 0;
            for (std::int64_t kh = 0; kh < K; ++kh) {
              for (std::int64_t kw = 0; kw < K; ++kw) {
                const std::int64_t ih = oh * s.stride_h + kh - pad;
                const std::int64_t iw = ow * s.stride_w + kw - pad;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                const int code = x[static_cast<std::size_t>(((n * H + ih) * W + iw) * C + ch)];
                acc += w[static_cast<std::size_t>((ch * K + kh) * K + kw)] * (code - z);
              }
            }
            const float y = finish(
                c.plan,
                static_cast<float>(acc) + (c.bias ? bias[static_cast<std::size_t>(ch)] : 0.0f), ch);
            const auto i = static_cast<std::size_t>(((n * OH + oh) * OW + ow) * C + ch);
            const std::string where = "n " + std::to_string(n) + " oh " + std::to_string(oh) +
                                      " ow " + std::to_string(ow) + " c " + std::to_string(ch) +
                                      " parallel " + std::to_string(parallel);
            if (f32) {
              float got;
              std::memcpy(&got, out.data() + 4 * i, 4);
              ASSERT_NEAR(got, y, 1e-5f * std::max(1.0f, std::fabs(y))) << where;
              continue;
            }
            const bool u8 = c.plan.dst_type == DataType::u8;
            const float lo = u8 ? 0.0f : -128.0f, hi = u8 ? 255.0f : 127.0f;
            const int want = static_cast<int>(std::nearbyint(std::min(std::max(y, lo), hi)));
            const int got = u8 ? out[i] : static_cast<std::int8_t>(out[i]);
            ASSERT_LE(std::abs(got - want), 1) << where << " want " << want << " got " << got;
            differ += got != want;
          }
        }
      }
    }
    // Off by one only where the float steps round differently at a tie.
    EXPECT_LE(differ, static_cast<std::int64_t>(size) / 1000) << "parallel " << parallel;
    for (std::size_t i = size * (f32 ? 4 : 1); i < out.size(); ++i) {
      ASSERT_EQ(out[i], 0xA5) << "wrote past the output, parallel " << parallel;
    }
  }
}

class DepthwiseKernelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!has_depthwise_kernel_isa()) GTEST_SKIP() << "this CPU lacks AVX-512 VBMI or VNNI";
  }
};

TEST_F(DepthwiseKernelTest, RecognizerChainAtEveryWidthAroundItsGroups) {
  std::mt19937 rng(1);
  for (const std::int64_t w : {1, 2, 3, 4, 5, 7, 8, 9, 12, 13, 16, 17, 63, 64, 65, 80, 130}) {
    for (const std::int64_t h : {1, 3, 12}) {
      const DepthwiseShape s{1, 32, h, w};
      SCOPED_TRACE("h " + std::to_string(h) + " w " + std::to_string(w));
      check(Case{s, recognizer_plan(rng, 32)}, 18, static_cast<unsigned>(h * 1000 + w));
    }
  }
}

TEST_F(DepthwiseKernelTest, StridesOfTwoAndChannelsOutsideBlocksOf16) {
  std::mt19937 rng(8);
  using Pair = std::pair<std::int64_t, std::int64_t>;
  for (const std::int64_t channels : {8, 24, 40, 120}) {
    for (const auto& [sh, sw] : {Pair{2, 1}, Pair{1, 2}, Pair{2, 2}, Pair{1, 1}}) {
      for (const auto& [h, w] : {Pair{12, 80}, Pair{5, 9}, Pair{1, 2}, Pair{6, 133}}) {
        SCOPED_TRACE("channels " + std::to_string(channels) + " strides " + std::to_string(sh) +
                     "x" + std::to_string(sw) + " image " + std::to_string(h) + "x" +
                     std::to_string(w));
        check(Case{{1, channels, h, w, sh, sw}, recognizer_plan(rng, channels)}, 25,
              static_cast<unsigned>(channels + h * w));
      }
    }
  }
  check(Case{{2, 24, 7, 7, 2, 2}, leaky_plan(24)}, 3, 9);
}

TEST_F(DepthwiseKernelTest, ThreeByThree) {
  std::mt19937 rng(10);
  using Pair = std::pair<std::int64_t, std::int64_t>;
  for (const std::int64_t channels : {16, 24, 64}) {
    for (const auto& [sh, sw] : {Pair{1, 1}, Pair{2, 1}, Pair{1, 2}, Pair{2, 2}}) {
      for (const auto& [h, w] : {Pair{24, 160}, Pair{3, 5}, Pair{1, 1}, Pair{2, 67}}) {
        SCOPED_TRACE("channels " + std::to_string(channels) + " strides " + std::to_string(sh) +
                     "x" + std::to_string(sw) + " image " + std::to_string(h) + "x" +
                     std::to_string(w));
        check(Case{{1, channels, h, w, sh, sw, 3}, recognizer_plan(rng, channels)}, 31,
              static_cast<unsigned>(channels * 7 + h * w));
      }
    }
  }
  check(Case{{2, 40, 9, 9, 1, 1, 3}, leaky_plan(40)}, 140, 11);
  check(Case{{1, 32, 6, 13, 2, 2, 3}, binary_plan(rng, 32)}, 2, 12);
}

TEST_F(DepthwiseKernelTest, SignedOutputLeakyReluClipAndZeroPoint) {
  check(Case{{2, 48, 6, 11}, leaky_plan(48)}, 200, 2);
  check(Case{{1, 16, 2, 70}, leaky_plan(16), false}, 1, 3);
}

// EfficientNet's chain: swish, and a sigmoid gate's logistic, over the range
// where e^x saturates.
PostOpsPlan swish_plan(std::mt19937& rng, std::int64_t channels, bool logistic) {
  PostOpsPlan p;
  p.channels = static_cast<int>(channels);
  p.dst_type = DataType::u8;
  // Accumulators of about +-50000: swish's input within about +-5.
  p.output_scales = values(rng, channels, 1e-5f, 1e-4f);
  p.output_scales_mask = composer::ScalesMask::per_channel;
  p.post_ops.push_back(EltwisePostOp{EltwiseAlg::swish, logistic ? 1.0f : 31.0f, 1.0f, 0.0f});
  if (logistic) p.post_ops.push_back(EltwisePostOp{EltwiseAlg::logistic, 250.0f, 0.0f, 0.0f});
  p.dst_zero_point = 9;
  return p;
}

TEST_F(DepthwiseKernelTest, SwishAndLogistic) {
  std::mt19937 rng(13);
  check(Case{{1, 48, 9, 21}, swish_plan(rng, 48, false)}, 60, 14);
  check(Case{{1, 40, 7, 7, 2, 2, 3}, swish_plan(rng, 40, true)}, 200, 15);
}

TEST_F(DepthwiseKernelTest, EveryBinaryAndFloatOutput) {
  std::mt19937 rng(4);
  check(Case{{1, 32, 5, 9}, binary_plan(rng, 32)}, 128, 5);
  check(Case{{3, 16, 4, 4}, binary_plan(rng, 16), false}, 77, 6);
}

// The layer as oneDNN runs it without the kernel: its own depthwise
// primitive (jit_int8) with the attributes qfuse makes from the same plan
// and the source zero point. The kernel's codes must be equal, not only
// within one: it replaces that primitive.
std::vector<std::uint8_t> run_onednn(const DepthwiseShape& s, const std::vector<std::uint8_t>& x,
                                     const std::vector<std::int8_t>& w,
                                     const std::vector<float>& bias, std::uint8_t z,
                                     const PostOpsPlan& plan) {
  using dnnl::memory;
  using tag = memory::format_tag;
  const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  const std::int64_t C = s.channels, K = s.kernel, pad = K / 2;
  const memory::dims dst_dims{s.batch, C, DepthwiseKernel::output_size(s.height, s.stride_h),
                              DepthwiseKernel::output_size(s.width, s.stride_w)};
  const memory::desc src_md({s.batch, C, s.height, s.width}, memory::data_type::u8, tag::nhwc);
  const memory::desc dst_md(dst_dims, memory::data_type::u8, tag::nhwc);
  const memory::desc bias_md({C}, memory::data_type::f32, tag::x);
  dnnl::primitive_attr attr =
      make_primitive_attr(plan, dst_dims, FullTensorLayout::channels_last);
  attr.set_zero_points(DNNL_ARG_SRC, 0, {z});
  const dnnl::convolution_forward::primitive_desc pd(
      {dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src_md,
       memory::desc({C, 1, 1, K, K}, memory::data_type::s8, tag::any), bias_md, dst_md,
       {s.stride_h, s.stride_w}, {pad, pad}, {pad, pad}},
      attr, engine);
  memory src(src_md, engine, const_cast<std::uint8_t*>(x.data()));
  memory plain({{C, 1, 1, K, K}, memory::data_type::s8, tag::goihw}, engine,
               const_cast<std::int8_t*>(w.data()));
  memory weights(pd.weights_desc(), engine);
  dnnl::reorder(plain, weights).execute(stream, plain, weights);
  memory b(bias_md, engine, const_cast<float*>(bias.data()));
  std::vector<std::uint8_t> out(dst_md.get_size());
  memory dst(dst_md, engine, out.data());
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights},
                                      {DNNL_ARG_BIAS, b}, {DNNL_ARG_DST, dst}};
  const auto binaries = binary_post_op_args(plan, dst_dims, FullTensorLayout::channels_last);
  for (auto& [arg, mem] : make_constant_post_op_memory(binaries, engine)) args.emplace(arg, mem);
  dnnl::convolution_forward(pd).execute(stream, args);
  stream.wait();
  return out;
}

TEST_F(DepthwiseKernelTest, EqualToOneDnnsPrimitive) {
  std::mt19937 rng(16);
  for (const DepthwiseShape& s :
       {DepthwiseShape{1, 240, 12, 80}, DepthwiseShape{1, 480, 6, 80, 2, 1},
        DepthwiseShape{2, 72, 9, 9, 2, 2}, DepthwiseShape{1, 64, 24, 40, 1, 1, 3},
        DepthwiseShape{1, 24, 7, 13, 2, 2, 3}}) {
    SCOPED_TRACE("channels " + std::to_string(s.channels) + " kernel " +
                 std::to_string(s.kernel) + " strides " + std::to_string(s.stride_h) + "x" +
                 std::to_string(s.stride_w));
    const std::int64_t elements = s.batch * s.height * s.width * s.channels;
    std::vector<std::uint8_t> x(static_cast<std::size_t>(elements));
    for (auto& v : x) v = static_cast<std::uint8_t>(rng());
    std::vector<std::int8_t> w(static_cast<std::size_t>(s.channels * s.kernel * s.kernel));
    for (auto& v : w) v = static_cast<std::int8_t>(static_cast<int>(rng() % 255) - 127);
    const std::vector<float> bias = values(rng, s.channels, -2000.0f, 2000.0f);
    for (const PostOpsPlan& plan : {recognizer_plan(rng, s.channels), leaky_plan(s.channels)}) {
      PostOpsPlan u8 = plan;
      u8.dst_type = DataType::u8;
      const DepthwiseKernel kernel(s, w.data(), bias, 21, u8);
      const std::vector<std::uint8_t> want = run_onednn(s, x, w, bias, 21, u8);
      std::vector<std::uint8_t> got(want.size());
      kernel.run(x.data(), got.data(), true);
      std::int64_t differ = 0;
      for (std::size_t i = 0; i < got.size(); ++i) differ += got[i] != want[i];
      EXPECT_EQ(differ, 0) << "of " << got.size() << ": " << composer::describe(u8);
    }
  }
}

TEST(DepthwiseKernelRefusal, NamesWhatThePlanHoldsThatTheKernelLacks) {
  std::mt19937 rng(7);
  EXPECT_EQ(depthwise_plan_refusal(recognizer_plan(rng, 32)), std::nullopt);
  {
    PostOpsPlan p = leaky_plan(32);
    p.post_ops.push_back(composer::SumPostOp{0, 1.0f, DataType::u8});
    EXPECT_EQ(depthwise_plan_refusal(p), "a sum post-op (a residual)");
  }
  {
    PostOpsPlan p = leaky_plan(32);
    p.post_ops.push_back(BinaryPostOp{BinaryAlg::add, composer::Broadcast::per_channel,
                                      composer::ExternalTensor{0, DataType::f32}});
    EXPECT_EQ(depthwise_plan_refusal(p), "a binary post-op reading a run-time tensor");
  }
  {
    PostOpsPlan p = leaky_plan(32);
    p.post_ops.push_back(BinaryPostOp{BinaryAlg::add, composer::Broadcast::full,
                                      ConstantTensor{std::vector<float>(32 * 4, 1.0f)}});
    EXPECT_EQ(depthwise_plan_refusal(p), "a binary post-op over a whole tensor");
  }
  {
    PostOpsPlan p = leaky_plan(32);
    p.post_ops.push_back(EltwisePostOp{EltwiseAlg::tanh, 1.0f, 0.0f, 0.0f});
    EXPECT_EQ(depthwise_plan_refusal(p), "eltwise tanh");
  }
  {
    PostOpsPlan p = leaky_plan(32);
    p.output_scales = {1.0f, 2.0f};
    EXPECT_EQ(depthwise_plan_refusal(p), "output scales are neither per tensor nor per channel");
  }
  const std::vector<std::int8_t> w(24 * 25, 1);
  EXPECT_THROW(DepthwiseKernel({1, 24, 4, 4, 3, 1}, w.data(), {}, 3, leaky_plan(24)),
               std::invalid_argument);
  const std::vector<std::int8_t> w7(24 * 49, 1);
  EXPECT_THROW(DepthwiseKernel({1, 24, 4, 4, 1, 1, 7}, w7.data(), {}, 3, leaky_plan(24)),
               std::invalid_argument);
}

}  // namespace
}  // namespace qfuse::plugin
