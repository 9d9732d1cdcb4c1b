#include "plugin/executable_ops/integer_kernels.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <type_traits>

#include "composer/fixed_point.hpp"
#include "plugin/parallel.hpp"

// One build serves every x86-64 CPU: the hot loops get an AVX-512 clone
// (64-bit lanes: vpmullq, vpsravq) the loader picks when the CPU has it.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define QFUSE_CLONES __attribute__((target_clones("default", "arch=x86-64-v4")))
#else
#define QFUSE_CLONES
#endif

namespace qfuse::plugin {
namespace {

constexpr std::int64_t kChunk = 256;  // elements held in int64 lanes at a time

// p * 2^-n rounded half to even, n >= 1, `half` = 2^(n-1) - 1.
inline std::int64_t rshift(std::int64_t p, std::int64_t half, std::int64_t n) {
  return (p + half + ((p >> n) & 1)) >> n;
}

// `len` elements of one block (whole rows), their per-channel parameters at
// the same offsets in the tiled arrays.
template <typename Res, typename Dst>
QFUSE_CLONES void requantize_block(const IntegerRequantizer::Tiled& t, const std::int32_t* acc,
                                   const Res* residual, Dst* dst, std::int64_t len) {
  alignas(64) std::int64_t x[kChunk];
  alignas(64) std::int64_t res[kChunk];
  for (std::int64_t c0 = 0; c0 < len; c0 += kChunk) {
    const std::int64_t n_el = std::min(kChunk, len - c0);
    const std::int64_t* bias = t.bias.data() + c0;
#pragma omp simd
    for (std::int64_t j = 0; j < n_el; ++j) x[j] = std::int64_t{acc[c0 + j]} + bias[j];
    if (residual != nullptr) {
#pragma omp simd
      for (std::int64_t j = 0; j < n_el; ++j) res[j] = residual[c0 + j];
    } else {
#pragma omp simd
      for (std::int64_t j = 0; j < n_el; ++j) res[j] = 0;
    }
    for (const IntegerRequantizer::Stage& st : t.stages) {
      const std::int64_t* m = st.m.data() + c0;
      const std::int64_t* k = st.k.data() + c0;
      const std::int64_t* half = st.half.data() + c0;
      const std::int64_t* n = st.n.data() + c0;
      const std::int64_t* lo = st.lo.data() + c0;
      const std::int64_t* hi = st.hi.data() + c0;
      if (st.residual) {
        const std::int64_t* r = st.r.data() + c0;
#pragma omp simd
        for (std::int64_t j = 0; j < n_el; ++j) {
          const std::int64_t q = rshift(x[j] * m[j] + res[j] * r[j] + k[j], half[j], n[j]);
          const std::int64_t a = q < lo[j] ? lo[j] : q;
          x[j] = a > hi[j] ? hi[j] : a;
        }
      } else {
#pragma omp simd
        for (std::int64_t j = 0; j < n_el; ++j) {
          const std::int64_t q = rshift(x[j] * m[j] + k[j], half[j], n[j]);
          const std::int64_t a = q < lo[j] ? lo[j] : q;
          x[j] = a > hi[j] ? hi[j] : a;
        }
      }
    }
    Dst* out = dst + c0;
    if constexpr (std::is_same_v<Dst, float>) {
      const float* s = t.dq_scale.data() + c0;
      const float* sh = t.dq_shift.data() + c0;
      const float* l = t.dq_lo.data() + c0;
      const float* h = t.dq_hi.data() + c0;
      const float cr = t.dq_residual;
#pragma omp simd
      for (std::int64_t j = 0; j < n_el; ++j) {
        const float y = s[j] * static_cast<float>(x[j]) + cr * static_cast<float>(res[j]) + sh[j];
        out[j] = std::min(std::max(y, l[j]), h[j]);
      }
    } else {
      // The last stage's clamp holds the type's range.
#pragma omp simd
      for (std::int64_t j = 0; j < n_el; ++j) out[j] = static_cast<Dst>(x[j]);
    }
  }
}

template <typename Res, typename Dst>
void requantize(const IntegerRequantizer::Tiled& t, const std::int32_t* acc, std::int64_t total,
                const void* residual, void* dst) {
  const std::int64_t block = t.block;
  const std::int64_t blocks = (total + block - 1) / block;
  const auto* res = static_cast<const Res*>(residual);
  auto* out = static_cast<Dst*>(dst);
  parallel_for(total >= 32768, blocks, [&](std::int64_t b) {
    const std::int64_t e0 = b * block;
    requantize_block<Res, Dst>(t, acc + e0, res != nullptr ? res + e0 : nullptr, out + e0,
                               std::min(block, total - e0));
  });
}

}  // namespace

IntegerRequantizer::IntegerRequantizer(const composer::IntegerPlan& plan)
    : channels_(plan.channels),
      dst_type_(plan.dst_type),
      residual_type_(plan.residual_type),
      has_residual_(plan.residual_input.has_value()),
      dequantize_(plan.dequantize.has_value()) {
  const auto c = static_cast<std::size_t>(channels_);
  bias_.assign(plan.bias.begin(), plan.bias.end());
  bias_.resize(c, 0);
  for (const composer::IntegerStage& s : plan.stages) {
    Stage st;
    st.residual = !s.residual_multiplier.empty();
    for (std::size_t i = 0; i < c; ++i) {
      std::int64_t m = s.multiplier[i], k = s.offset[i];
      std::int64_t r = st.residual ? s.residual_multiplier[i] : 0;
      std::int64_t n = s.shift[i];
      if (n == 0) {
        // n >= 1 in the kernel: (2p + (p & 1)) >> 1 = p.
        m *= 2;
        k *= 2;
        r *= 2;
        n = 1;
      }
      st.m.push_back(m);
      st.k.push_back(k);
      st.r.push_back(r);
      st.n.push_back(n);
      st.half.push_back((std::int64_t{1} << (n - 1)) - 1);
      st.lo.push_back(s.lo[i]);
      st.hi.push_back(s.hi[i]);
    }
    stages_.push_back(std::move(st));
  }
  if (plan.dequantize) {
    dq_scale_ = plan.dequantize->scale;
    dq_shift_ = plan.dequantize->shift;
    dq_lo_ = plan.dequantize->lo;
    dq_hi_ = plan.dequantize->hi;
    dq_residual_ = plan.dequantize->residual_scale;
  } else if (stages_.empty()) {
    throw std::invalid_argument("integer plan: an 8-bit output without a rounding stage");
  }
  // Whole rows per block, at least kChunk elements: one vector loop covers
  // several rows of a narrow layer.
  const std::int64_t rows_per_block = std::max<std::int64_t>(1, (kChunk + channels_ - 1) / channels_);
  tiled_.block = rows_per_block * channels_;
  const auto tile = [&](const auto& v) {
    std::remove_cvref_t<decltype(v)> out;
    out.reserve(static_cast<std::size_t>(tiled_.block));
    for (std::int64_t r = 0; r < rows_per_block; ++r) out.insert(out.end(), v.begin(), v.end());
    return out;
  };
  tiled_.bias = tile(bias_);
  for (const Stage& st : stages_) {
    Stage t;
    t.residual = st.residual;
    t.m = tile(st.m);
    t.k = tile(st.k);
    t.r = tile(st.r);
    t.half = tile(st.half);
    t.n = tile(st.n);
    t.lo = tile(st.lo);
    t.hi = tile(st.hi);
    tiled_.stages.push_back(std::move(t));
  }
  if (dequantize_) {
    tiled_.dq_scale = tile(dq_scale_);
    tiled_.dq_shift = tile(dq_shift_);
    tiled_.dq_lo = tile(dq_lo_);
    tiled_.dq_hi = tile(dq_hi_);
    tiled_.dq_residual = dq_residual_;
  }
}

void IntegerRequantizer::run(const std::int32_t* acc, std::int64_t rows, const void* residual,
                             void* dst) const {
  using composer::DataType;
  const void* res = has_residual_ ? residual : nullptr;
  const auto go = [&](auto res_tag, auto dst_tag) {
    using Res = decltype(res_tag);
    using Dst = decltype(dst_tag);
    requantize<Res, Dst>(tiled_, acc, rows * channels_, res, dst);
  };
  const bool s8_res = residual_type_ == DataType::s8;
  const auto with_res = [&](auto dst_tag) {
    if (s8_res) {
      go(std::int8_t{}, dst_tag);
    } else {
      go(std::uint8_t{}, dst_tag);
    }
  };
  if (dequantize_) {
    with_res(float{});
  } else if (dst_type_ == DataType::s8) {
    with_res(std::int8_t{});
  } else {
    with_res(std::uint8_t{});
  }
}

IntegerAvgPool::IntegerAvgPool(const Geometry& g, float out_scale, float out_shift, double eta)
    : g_(g) {
  const std::int64_t cells = g.kh * g.kw;
  if (cells < 1 || cells > (std::int64_t{1} << 22)) {
    throw std::invalid_argument("integer average pool: window of " + std::to_string(cells) +
                                " cells");
  }
  for (std::int64_t count = 1; count <= cells; ++count) {
    const double m = static_cast<double>(out_scale) / static_cast<double>(count);
    const composer::FixedPoint f = composer::to_fixed_point(m, eta, 31);
    std::int64_t mult = f.multiplier;
    std::int64_t n = f.shift;
    if (n == 0) {
      mult *= 2;
      n = 1;
    }
    m_.push_back(mult);
    n_.push_back(n);
    half_.push_back((std::int64_t{1} << (n - 1)) - 1);
    k_.push_back(std::llround(std::ldexp(static_cast<double>(out_shift), static_cast<int>(n))));
    relative_error_ = std::max(relative_error_, f.relative_error);
    bits_ = std::max(bits_, f.bits);
  }
}

namespace {

template <typename Src, typename Dst>
QFUSE_CLONES void pool_row(const IntegerAvgPool::Geometry& g, const Src* src, Dst* dst,
                           std::int64_t b, std::int64_t oy, const std::int64_t* m,
                           const std::int64_t* k, const std::int64_t* half, const std::int64_t* n) {
  constexpr std::int64_t lo = std::is_signed_v<Dst> ? -128 : 0;
  constexpr std::int64_t hi = std::is_signed_v<Dst> ? 127 : 255;
  alignas(64) std::int32_t sum[kChunk];
  const std::int64_t y0 = oy * g.sh - g.ph;
  const std::int64_t ya = std::max<std::int64_t>(y0, 0), yb = std::min(y0 + g.kh, g.ih);
  for (std::int64_t ox = 0; ox < g.ow; ++ox) {
    const std::int64_t x0 = ox * g.sw - g.pw;
    const std::int64_t xa = std::max<std::int64_t>(x0, 0), xb = std::min(x0 + g.kw, g.iw);
    const std::int64_t count =
        g.exclude_pad ? std::max<std::int64_t>((yb - ya) * (xb - xa), 1) : g.kh * g.kw;
    const std::int64_t i = count - 1;
    Dst* out = dst + ((b * g.oh + oy) * g.ow + ox) * g.c;
    for (std::int64_t c0 = 0; c0 < g.c; c0 += kChunk) {
      const std::int64_t len = std::min(kChunk, g.c - c0);
#pragma omp simd
      for (std::int64_t j = 0; j < len; ++j) sum[j] = 0;
      for (std::int64_t y = ya; y < yb; ++y) {
        for (std::int64_t x = xa; x < xb; ++x) {
          const Src* in = src + ((b * g.ih + y) * g.iw + x) * g.c + c0;
#pragma omp simd
          for (std::int64_t j = 0; j < len; ++j) sum[j] += in[j];
        }
      }
#pragma omp simd
      for (std::int64_t j = 0; j < len; ++j) {
        const std::int64_t q = rshift(std::int64_t{sum[j]} * m[i] + k[i], half[i], n[i]);
        out[c0 + j] = static_cast<Dst>(std::min(std::max(q, lo), hi));
      }
    }
  }
}

template <typename Src, typename Dst>
void pool(const IntegerAvgPool::Geometry& g, const void* src, void* dst, const std::int64_t* m,
          const std::int64_t* k, const std::int64_t* half, const std::int64_t* n) {
  const std::int64_t rows = g.n * g.oh;
  const bool parallel = rows > 1 && g.n * g.ih * g.iw * g.c >= 16384;
  parallel_for(parallel, rows, [&](std::int64_t r) {
    pool_row<Src, Dst>(g, static_cast<const Src*>(src), static_cast<Dst*>(dst), r / g.oh,
                       r % g.oh, m, k, half, n);
  });
}

}  // namespace

void IntegerAvgPool::run(const void* src, void* dst) const {
  const auto* m = m_.data();
  const auto* k = k_.data();
  const auto* h = half_.data();
  const auto* n = n_.data();
  if (g_.src_signed) {
    if (g_.dst_signed) {
      pool<std::int8_t, std::int8_t>(g_, src, dst, m, k, h, n);
    } else {
      pool<std::int8_t, std::uint8_t>(g_, src, dst, m, k, h, n);
    }
  } else if (g_.dst_signed) {
    pool<std::uint8_t, std::int8_t>(g_, src, dst, m, k, h, n);
  } else {
    pool<std::uint8_t, std::uint8_t>(g_, src, dst, m, k, h, n);
  }
}

}  // namespace qfuse::plugin
