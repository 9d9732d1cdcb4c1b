#include "plugin/executable_ops/depthwise_kernel.hpp"

#include <omp.h>

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "plugin/executable_ops/avx512_math.hpp"
#include "plugin/parallel.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define QFUSE_X86_KERNELS 1
#endif

namespace qfuse::plugin {

bool has_depthwise_kernel_isa() {
#if defined(QFUSE_X86_KERNELS)
  static const bool yes = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("avx512vbmi") &&
                          __builtin_cpu_supports("avx512vnni");
  return yes;
#else
  return false;
#endif
}

std::int64_t DepthwiseKernel::output_size(std::int64_t in, std::int64_t stride) {
  return (in - 1) / stride + 1;
}

namespace {

using composer::BinaryAlg;
using composer::EltwiseAlg;
using Op = DepthwiseKernel::Op;

std::optional<Op> binary_op(BinaryAlg alg) {
  switch (alg) {
    case BinaryAlg::add: return Op::add;
    case BinaryAlg::sub: return Op::sub;
    case BinaryAlg::mul: return Op::mul;
    case BinaryAlg::min: return Op::min;
    case BinaryAlg::max: return Op::max;
  }
  return std::nullopt;
}

// One value per channel (a per-tensor value repeated, or the given ones),
// then zeros up to `lanes`.
std::vector<float> per_channel(std::vector<float> v, std::int64_t channels, std::int64_t lanes) {
  if (v.size() == 1) v.assign(static_cast<std::size_t>(channels), v[0]);
  v.resize(static_cast<std::size_t>(lanes), 0.0f);
  return v;
}

}  // namespace

std::optional<std::string> depthwise_plan_refusal(const composer::PostOpsPlan& plan) {
  const auto channels = static_cast<std::size_t>(plan.channels);
  const auto sized = [&](std::size_t n) { return n == 1 || n == channels; };
  if (!plan.output_scales.empty() && !sized(plan.output_scales.size())) {
    return "output scales are neither per tensor nor per channel";
  }
  for (const auto& op : plan.post_ops) {
    if (std::holds_alternative<composer::SumPostOp>(op)) return "a sum post-op (a residual)";
    if (const auto* e = std::get_if<composer::EltwisePostOp>(&op)) {
      switch (e->alg) {
        case EltwiseAlg::linear:
        case EltwiseAlg::relu:
        case EltwiseAlg::clip:
        case EltwiseAlg::hardswish:
        case EltwiseAlg::round:
        case EltwiseAlg::logistic:
        case EltwiseAlg::swish: continue;
        default: return "eltwise " + composer::to_string(e->alg);
      }
    }
    const auto& b = std::get<composer::BinaryPostOp>(op);
    const auto* values = std::get_if<composer::ConstantTensor>(&b.tensor);
    if (values == nullptr) return "a binary post-op reading a run-time tensor";
    if (b.broadcast != composer::Broadcast::per_channel || !sized(values->values.size())) {
      return "a binary post-op over a whole tensor";
    }
    if (!binary_op(b.alg)) return "binary " + composer::to_string(b.alg);
  }
  return std::nullopt;
}

DepthwiseKernel::DepthwiseKernel(const DepthwiseShape& shape, const std::int8_t* weights,
                                 std::vector<float> bias, std::uint8_t src_zero_point,
                                 const composer::PostOpsPlan& plan)
    : shape_(shape), zero_point_(src_zero_point), dst_type_(plan.dst_type) {
  if (const auto why = depthwise_plan_refusal(plan)) throw std::invalid_argument(*why);
  const std::int64_t c_total = shape.channels;
  const bool strides = (shape.stride_h == 1 || shape.stride_h == 2) &&
                       (shape.stride_w == 1 || shape.stride_w == 2);
  if (c_total <= 0 || shape.height <= 0 || shape.width <= 0 || !strides ||
      (shape.kernel != 3 && shape.kernel != 5)) {
    throw std::invalid_argument(
        "depthwise kernel: empty shape, a stride other than 1 or 2, or a kernel other than 3 or 5");
  }
  const std::int64_t blocks = (c_total + kBlock - 1) / kBlock, lanes = blocks * kBlock;
  const int K = shape.kernel;
  w4_.assign(static_cast<std::size_t>(blocks * K * 64), 0);
  w1_.assign(w4_.size(), 0);
  row_zero_terms_.assign(static_cast<std::size_t>(K * lanes), 0);
  for (std::int64_t c = 0; c < c_total; ++c) {
    const std::int64_t block = c / kBlock, lane = c % kBlock;
    for (int kh = 0; kh < K; ++kh) {
      const std::int8_t* row = weights + (c * K + kh) * K;
      const auto at = static_cast<std::size_t>((block * K + kh) * 64 + 4 * lane);
      for (int t = 0; t < std::min(K, 4); ++t) w4_[at + static_cast<std::size_t>(t)] = row[t];
      if (K == 5) w1_[at] = row[4];
      std::int32_t sum = 0;
      for (int t = 0; t < K; ++t) sum += row[t];
      row_zero_terms_[static_cast<std::size_t>(kh * lanes + c)] = sum * src_zero_point;
    }
  }
  bias_ = per_channel(bias.empty() ? std::vector<float>{0.0f} : std::move(bias), c_total, lanes);
  if (!plan.output_scales.empty()) {
    steps_.push_back({Op::mul, per_channel(plan.output_scales, c_total, lanes), {}});
  }
  const auto all = [&](float v) { return per_channel({v}, c_total, lanes); };
  for (const auto& op : plan.post_ops) {
    if (const auto* e = std::get_if<composer::EltwisePostOp>(&op)) {
      switch (e->alg) {
        case EltwiseAlg::linear: steps_.push_back({Op::fma, all(e->alpha), all(e->beta)}); break;
        case EltwiseAlg::relu:
          // oneDNN takes max(x, 0) for alpha 0 (+0 where x * 0 is -0).
          if (e->alpha == 0.0f) {
            steps_.push_back({Op::max, all(0.0f), {}});
          } else {
            steps_.push_back({Op::relu, all(e->alpha), {}});
          }
          break;
        case EltwiseAlg::clip: steps_.push_back({Op::clip, all(e->alpha), all(e->beta)}); break;
        case EltwiseAlg::round: steps_.push_back({Op::round, {}, {}}); break;
        case EltwiseAlg::logistic: steps_.push_back({Op::swish, {}, {}}); break;
        case EltwiseAlg::swish: steps_.push_back({Op::swish, all(e->alpha), {}}); break;
        default: steps_.push_back({Op::hardswish, {}, {}}); break;
      }
      if (e->scale != 1.0f) steps_.push_back({Op::mul, all(e->scale), {}});
      continue;
    }
    const auto& b = std::get<composer::BinaryPostOp>(op);
    steps_.push_back({*binary_op(b.alg),
                      per_channel(std::get<composer::ConstantTensor>(b.tensor).values, c_total,
                                  lanes),
                      {}});
  }
  if (plan.dst_zero_point) {
    steps_.push_back({Op::add, all(static_cast<float>(*plan.dst_zero_point)), {}});
  }
}

#if defined(QFUSE_X86_KERNELS)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#define QFUSE_DW_ISA __attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi,avx512vnni")))
// The per-output steps must inline into the row loop, or their
// accumulators go through memory (GCC -O2 left them out of line: 80 us
// against 58 us on the recognizer's 240-channel layer).
#define QFUSE_DW_INLINE QFUSE_DW_ISA __attribute__((always_inline)) inline

namespace {

// Output columns a work item covers at most, so that its ring of prepared
// rows (5 rows of kMaxStrip + 4 quads of 64 bytes, 21 KB) stays in L1.
constexpr std::int64_t kMaxStrip = 64;
constexpr std::int64_t kMaxQuads = kMaxStrip + 4;
constexpr int kMaxKernel = 5;
// Outputs summed together (accumulators in registers).
constexpr int kOutputs = 8;

// Quad t of a row, for output column col0 + t's taps 0-3 (input columns
// (col0 + t) * stride - pad and the three after it), and tap 4 of output
// col0 + t - 4 / stride: per channel, four neighbouring columns' codes;
// columns outside the image, and channels outside `lanes`, are z.
QFUSE_DW_ISA void prepare_row(const std::uint8_t* row, std::int64_t width, std::int64_t channels,
                              std::int64_t stride, std::int64_t pad, std::int64_t col0,
                              std::int64_t quads, std::uint8_t z, __mmask16 lanes,
                              std::uint8_t* out) {
  // Byte 4 * l + k of a quad is byte l (channel l) of column k.
  alignas(64) static constexpr std::uint8_t kInterleave[64] = {
      0,  16, 32, 48, 1,  17, 33, 49, 2,  18, 34, 50, 3,  19, 35, 51,  //
      4,  20, 36, 52, 5,  21, 37, 53, 6,  22, 38, 54, 7,  23, 39, 55,  //
      8,  24, 40, 56, 9,  25, 41, 57, 10, 26, 42, 58, 11, 27, 43, 59,  //
      12, 28, 44, 60, 13, 29, 45, 61, 14, 30, 46, 62, 15, 31, 47, 63};
  const __m512i interleave = _mm512_load_si512(kInterleave);
  const __m128i z_codes = _mm_set1_epi8(static_cast<char>(z));
  const bool full = lanes == 0xFFFF;
  const auto load = [&](std::int64_t j) QFUSE_DW_ISA {
    const std::uint8_t* p = row + j * channels;
    return full ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(p))
                : _mm_mask_loadu_epi8(z_codes, lanes, p);
  };
  const auto column = [&](std::int64_t j) { return j < 0 || j >= width ? z_codes : load(j); };
  for (std::int64_t t = 0; t < quads; ++t) {
    const std::int64_t j = (col0 + t) * stride - pad;
    __m512i v;
    if (j >= 0 && j + 3 < width) {
      v = _mm512_castsi128_si512(load(j));
      v = _mm512_inserti32x4(v, load(j + 1), 1);
      v = _mm512_inserti32x4(v, load(j + 2), 2);
      v = _mm512_inserti32x4(v, load(j + 3), 3);
    } else {
      v = _mm512_castsi128_si512(column(j));
      v = _mm512_inserti32x4(v, column(j + 1), 1);
      v = _mm512_inserti32x4(v, column(j + 2), 2);
      v = _mm512_inserti32x4(v, column(j + 3), 3);
    }
    _mm512_store_si512(out + t * 64, _mm512_permutexvar_epi8(interleave, v));
  }
}

// One step of the post-op program on n vectors of the same 16 channels.
template <int N>
QFUSE_DW_INLINE void apply(const DepthwiseKernel::Step& s, std::size_t c, __m512* y) {
  switch (s.op) {
    case Op::mul: {
      const __m512 a = _mm512_loadu_ps(s.p.data() + c);
#pragma GCC unroll 8
      for (int i = 0; i < N; ++i) y[i] = _mm512_mul_ps(y[i], a);
      return;
    }
    case Op::fma: {
      const __m512 a = _mm512_loadu_ps(s.p.data() + c), b = _mm512_loadu_ps(s.q.data() + c);
#pragma GCC unroll 8
      for (int i = 0; i < N; ++i) y[i] = _mm512_fmadd_ps(y[i], a, b);
      return;
    }
    case Op::relu: {
      const __m512 a = _mm512_loadu_ps(s.p.data() + c);
#pragma GCC unroll 8
      for (int i = 0; i < N; ++i) {
        const __mmask16 positive = _mm512_cmp_ps_mask(y[i], _mm512_setzero_ps(), _CMP_GT_OS);
        y[i] = _mm512_mask_blend_ps(positive, _mm512_mul_ps(y[i], a), y[i]);
      }
      return;
    }
    case Op::clip: {
      const __m512 lo = _mm512_loadu_ps(s.p.data() + c), hi = _mm512_loadu_ps(s.q.data() + c);
#pragma GCC unroll 8
      for (int i = 0; i < N; ++i) y[i] = _mm512_min_ps(_mm512_max_ps(y[i], lo), hi);
      return;
    }
    case Op::hardswish: {
      // x * min(max(x + 3, 0), 6) / 6, in oneDNN's order.
      const __m512 three = _mm512_set1_ps(3.0f), six = _mm512_set1_ps(6.0f);
#pragma GCC unroll 8
      for (int i = 0; i < N; ++i) {
        __m512 r = _mm512_add_ps(y[i], three);
        r = _mm512_min_ps(_mm512_max_ps(r, _mm512_setzero_ps()), six);
        y[i] = _mm512_mul_ps(y[i], _mm512_div_ps(r, six));
      }
      return;
    }
    case Op::swish: {
      // x * logistic(alpha * x); logistic alone when there is no alpha.
      const bool times_x = !s.p.empty();
      const __m512 a = times_x ? _mm512_loadu_ps(s.p.data() + c) : _mm512_set1_ps(1.0f);
      const __m512 one = _mm512_set1_ps(1.0f);
#pragma GCC unroll 8
      for (int i = 0; i < N; ++i) {
        const __m512 e = exp_avx512(_mm512_mul_ps(_mm512_sub_ps(_mm512_setzero_ps(), a), y[i]));
        const __m512 logistic = _mm512_div_ps(one, _mm512_add_ps(one, e));
        y[i] = times_x ? _mm512_mul_ps(y[i], logistic) : logistic;
      }
      return;
    }
    case Op::round:
#pragma GCC unroll 8
      for (int i = 0; i < N; ++i) {
        y[i] = _mm512_roundscale_ps(y[i], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      }
      return;
    case Op::add: {
      const __m512 a = _mm512_loadu_ps(s.p.data() + c);
#pragma GCC unroll 8
      for (int i = 0; i < N; ++i) y[i] = _mm512_add_ps(y[i], a);
      return;
    }
    case Op::sub: {
      const __m512 a = _mm512_loadu_ps(s.p.data() + c);
#pragma GCC unroll 8
      for (int i = 0; i < N; ++i) y[i] = _mm512_sub_ps(y[i], a);
      return;
    }
    case Op::min: {
      const __m512 a = _mm512_loadu_ps(s.p.data() + c);
#pragma GCC unroll 8
      for (int i = 0; i < N; ++i) y[i] = _mm512_min_ps(y[i], a);
      return;
    }
    case Op::max: {
      const __m512 a = _mm512_loadu_ps(s.p.data() + c);
#pragma GCC unroll 8
      for (int i = 0; i < N; ++i) y[i] = _mm512_max_ps(y[i], a);
      return;
    }
  }
}

// What one work item's groups of outputs read: the ring rows of the input
// rows [lo, hi) (kernel rows kh0...), the block's weights and terms.
struct Group {
  const std::uint8_t* rows[kMaxKernel];
  int count = 0;          // kernel rows read
  __mmask16 lanes = 0xFFFF;  // the block's channels
  const std::int8_t* w4;  // of kernel row kh0
  const std::int8_t* w1;
  __m512i zero_terms;
  __m512 bias;
  std::size_t channel;
};

// N neighbouring outputs (quad offset t in the ring rows; a 5x5 kernel's tap
// 4 is kTap4 = 4 / stride quads after an output's first, and a 3x3 kernel has
// none: kTap4 = 0): accumulators, then bias, post-ops and the store at `out`
// (pixels `pixel_stride` apart).
template <int N, int kTap4>
QFUSE_DW_INLINE void outputs(const Group& g, std::int64_t t,
                             const std::vector<DepthwiseKernel::Step>& steps,
                             composer::DataType type, void* out, std::int64_t pixel_stride) {
  __m512i acc[N];
#pragma GCC unroll 8
  for (int i = 0; i < N; ++i) acc[i] = _mm512_setzero_si512();
  for (int r = 0; r < g.count; ++r) {
    const std::uint8_t* q = g.rows[r] + t * 64;
    const __m512i w4 = _mm512_loadu_si512(g.w4 + r * 64);
    const __m512i w1 = kTap4 > 0 ? _mm512_loadu_si512(g.w1 + r * 64) : w4;
#pragma GCC unroll 8
    for (int i = 0; i < N; ++i) {
      acc[i] = _mm512_dpbusd_epi32(acc[i], _mm512_load_si512(q + i * 64), w4);
      if constexpr (kTap4 > 0) {
        acc[i] = _mm512_dpbusd_epi32(acc[i], _mm512_load_si512(q + (i + kTap4) * 64), w1);
      }
    }
  }
  __m512 y[N];
#pragma GCC unroll 8
  for (int i = 0; i < N; ++i) {
    y[i] = _mm512_add_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(acc[i], g.zero_terms)), g.bias);
  }
  for (const auto& s : steps) apply<N>(s, g.channel, y);
  switch (type) {
    // Saturated in f32 first, as oneDNN does: a value past 2^31 (or +inf)
    // converts to INT_MIN.
    case composer::DataType::u8: {
      auto* o = static_cast<std::uint8_t*>(out);
      const __m512 hi = _mm512_set1_ps(255.0f);
#pragma GCC unroll 8
      for (int i = 0; i < N; ++i) {
        const __m512 v = _mm512_min_ps(_mm512_max_ps(y[i], _mm512_setzero_ps()), hi);
        _mm_mask_storeu_epi8(o + i * pixel_stride, g.lanes,
                             _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(v)));
      }
      return;
    }
    case composer::DataType::s8: {
      auto* o = static_cast<std::int8_t*>(out);
      const __m512 lo = _mm512_set1_ps(-128.0f), hi = _mm512_set1_ps(127.0f);
#pragma GCC unroll 8
      for (int i = 0; i < N; ++i) {
        const __m512 v = _mm512_min_ps(_mm512_max_ps(y[i], lo), hi);
        _mm_mask_storeu_epi8(o + i * pixel_stride, g.lanes,
                             _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(v)));
      }
      return;
    }
    case composer::DataType::f32: {
      auto* o = static_cast<float*>(out);
#pragma GCC unroll 8
      for (int i = 0; i < N; ++i) _mm512_mask_storeu_ps(o + i * pixel_stride, g.lanes, y[i]);
      return;
    }
  }
}

// One output row's `count` outputs of a work item, in groups of 8, 4, 1.
template <int kTap4>
QFUSE_DW_ISA void row_outputs(const Group& g, std::int64_t count,
                              const std::vector<DepthwiseKernel::Step>& steps,
                              composer::DataType type, std::uint8_t* out, std::int64_t C) {
  const std::int64_t stride = (type == composer::DataType::f32 ? 4 : 1) * C;
  std::int64_t t = 0;
  for (; t + kOutputs <= count; t += kOutputs) {
    outputs<kOutputs, kTap4>(g, t, steps, type, out + t * stride, C);
  }
  if (t + 4 <= count) {
    outputs<4, kTap4>(g, t, steps, type, out + t * stride, C);
    t += 4;
  }
  for (; t < count; ++t) outputs<1, kTap4>(g, t, steps, type, out + t * stride, C);
}

}  // namespace

QFUSE_DW_ISA void DepthwiseKernel::run_item(const std::uint8_t* src, void* dst, std::int64_t n,
                                            std::int64_t block, std::int64_t col0,
                                            std::int64_t col1) const {
  const int K = shape_.kernel, pad = K / 2;
  const std::int64_t H = shape_.height, W = shape_.width, C = shape_.channels;
  const std::int64_t sh = shape_.stride_h, sw = shape_.stride_w;
  const std::int64_t OH = output_size(H, sh), OW = output_size(W, sw);
  const std::int64_t lanes = (C + kBlock - 1) / kBlock * kBlock;
  Group g;
  const int tap4 = K == 5 ? static_cast<int>(4 / sw) : 0;
  const std::int64_t quads = col1 - col0 + tap4;
  alignas(64) std::uint8_t ring[kMaxKernel][kMaxQuads * 64];
  const std::uint8_t* image = src + n * H * W * C + block * kBlock;
  const std::size_t element = dst_type_ == composer::DataType::f32 ? 4 : 1;
  const std::int64_t in_block = std::min<std::int64_t>(kBlock, C - block * kBlock);
  g.lanes = static_cast<__mmask16>((1u << in_block) - 1u);
  g.channel = static_cast<std::size_t>(block * kBlock);
  g.bias = _mm512_loadu_ps(bias_.data() + g.channel);
  std::int64_t prepared = 0;  // input rows [0, prepared) are in the ring
  for (std::int64_t oh = 0; oh < OH; ++oh) {
    const std::int64_t top = oh * sh - pad;  // the input row of kernel row 0
    const std::int64_t lo = std::max<std::int64_t>(0, top);
    const std::int64_t hi = std::min<std::int64_t>(H, top + K);
    for (std::int64_t ih = std::max(prepared, lo); ih < hi; ++ih) {
      prepare_row(image + ih * W * C, W, C, sw, pad, col0, quads, zero_point_, g.lanes,
                  ring[ih % K]);
    }
    prepared = std::max(prepared, hi);
    g.count = static_cast<int>(hi - lo);
    g.w4 = w4_.data() + (block * K + lo - top) * 64;
    g.w1 = w1_.data() + (block * K + lo - top) * 64;
    g.zero_terms = _mm512_setzero_si512();
    for (std::int64_t ih = lo; ih < hi; ++ih) {
      g.rows[ih - lo] = ring[ih % K];
      g.zero_terms = _mm512_add_epi32(
          g.zero_terms,
          _mm512_loadu_si512(row_zero_terms_.data() + (ih - top) * lanes + g.channel));
    }
    auto* out =
        static_cast<std::uint8_t*>(dst) +
        static_cast<std::int64_t>(element) * (((n * OH + oh) * OW + col0) * C + block * kBlock);
    switch (tap4) {
      case 4: row_outputs<4>(g, col1 - col0, steps_, dst_type_, out, C); break;
      case 2: row_outputs<2>(g, col1 - col0, steps_, dst_type_, out, C); break;
      default: row_outputs<0>(g, col1 - col0, steps_, dst_type_, out, C); break;
    }
  }
}


#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#else
void DepthwiseKernel::run_item(const std::uint8_t*, void*, std::int64_t, std::int64_t, std::int64_t,
                               std::int64_t) const {
  throw std::logic_error("qfuse's depthwise kernel needs an x86-64 build");
}
constexpr std::int64_t kMaxStrip = 64;
#endif

void DepthwiseKernel::run(const std::uint8_t* src, void* dst, bool parallel) const {
  // Work items: (image, 16 channels, a strip of output columns), split
  // statically among the team. Strips are at most kMaxStrip wide (a 5x5
  // kernel's strip prepares 4 / stride quads more than it writes). Up to 64 channels (a
  // pixel's codes in one cache line), strips go outermost and number a
  // multiple of the team where they stay 8 wide, so that the threads write
  // different pixels: splitting the channels made both write every line
  // (64 channels at 24x160: 67-72 us on two threads against 47). Wider
  // pixels keep channel blocks outermost, as many strips as even out the
  // items (240 channels at 12x80: 59-60 us against 65-66 the other way).
  const std::int64_t blocks = (shape_.channels + kBlock - 1) / kBlock;
  const std::int64_t W = output_size(shape_.width, shape_.stride_w);
  const std::int64_t team = parallel ? std::max(1, omp_get_max_threads()) : 1;
  const std::int64_t fewest = (W + kMaxStrip - 1) / kMaxStrip;
  const bool by_pixels = shape_.channels <= 64 && W / ((fewest + team - 1) / team * team) >= 8;
  std::int64_t strips = fewest;
  if (by_pixels) {
    strips = (fewest + team - 1) / team * team;
  } else {
    const auto uneven = [&](std::int64_t n) { return (shape_.batch * blocks * n) % team != 0; };
    while (uneven(strips) && W / (strips + 1) >= 16) ++strips;
    if (uneven(strips)) strips = fewest;
  }
  const std::int64_t items = shape_.batch * strips * blocks;
  parallel_for(parallel, items, [&](std::int64_t k) {
    std::int64_t block = 0, s = 0;
    if (by_pixels) {
      block = k % blocks;
      s = k / blocks % strips;
    } else {
      s = k % strips;
      block = k / strips % blocks;
    }
    run_item(src, dst, k / blocks / strips, block, W * s / strips, W * (s + 1) / strips);
  });
}

}  // namespace qfuse::plugin
