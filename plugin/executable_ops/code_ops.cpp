// The ops on int8 codes between layers that a kernel of qfuse's runs faster
// than oneDNN's, each with the unfused arithmetic: GateMultiply, CodeAdd,
// Lookup, the max pool of codes and the dequantized global mean.
#include "plugin/executable_ops/ops.hpp"

#include <algorithm>
#include <array>
#include <limits>
#include <type_traits>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "graph/node_queries.hpp"
#include "plugin/dnnl_utils.hpp"
#include "plugin/executable_ops/byte_kernels.hpp"
#include "plugin/executable_ops/quantize_spans.hpp"
#include "plugin/parallel.hpp"

namespace qfuse::plugin {
namespace {

using graph::Node;
using graph::OpKind;

#if defined(QFUSE_AVX512_KERNELS)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// GateMultiply over whole pixels, channels last, ONNX's QuantizeLinear:
// sixteen codes at a time, ((x - z) * s) * g[c], divided by the scale,
// clamped, rounded half to even, plus the zero point: the f32 operations of
// the scalar path in the same order. `x` starts at a pixel's first channel;
// `g_ext` is the gate row followed by its first 16 values again (C + 16
// floats), so that the gates of any 16 consecutive codes are contiguous.
// Returns how many were done (a multiple of 16).
template <typename In, typename Out>
__attribute__((target("avx512f"))) std::int64_t gate_multiply_avx512(
    const In* x, const float* g_ext, std::int64_t channels, Out* y, std::int64_t n, float z,
    float s, float scale, std::int32_t zero_point, std::int32_t hi) {
  constexpr std::int32_t lo = std::numeric_limits<Out>::min();
  const __m512 vz = _mm512_set1_ps(z), vs = _mm512_set1_ps(s), vscale = _mm512_set1_ps(scale);
  const __m512 vlo = _mm512_set1_ps(static_cast<float>(lo - zero_point));
  const __m512 vhi = _mm512_set1_ps(static_cast<float>(hi - zero_point));
  const __m512i vzp = _mm512_set1_epi32(zero_point);
  std::int64_t i = 0, c = 0;  // c: the channel of x[i]
  for (; i + 16 <= n; i += 16) {
    const __m128i codes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i));
    const __m512i wide = std::is_same_v<In, std::uint8_t> ? _mm512_cvtepu8_epi32(codes)
                                                          : _mm512_cvtepi8_epi32(codes);
    const __m512 v = _mm512_mul_ps(_mm512_sub_ps(_mm512_cvtepi32_ps(wide), vz), vs);
    __m512 q = _mm512_div_ps(_mm512_mul_ps(v, _mm512_loadu_ps(g_ext + c)), vscale);
    q = _mm512_min_ps(_mm512_max_ps(q, vlo), vhi);
    const __m512i r = _mm512_add_epi32(_mm512_cvtps_epi32(q), vzp);
    const __m128i b = std::is_same_v<Out, std::uint8_t> ? _mm512_cvtusepi32_epi8(r)
                                                        : _mm512_cvtsepi32_epi8(r);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), b);
    c += 16;
    while (c >= channels) c -= channels;
  }
  return i;
}

// CodeAdd's f32 sums, sixteen codes at a time: (a - za) * sa + (b - zb) * sb
// with each operation rounded, as the scalar path. GCC compiles
// _mm512_mul_ps / _mm512_add_ps as plain vector arithmetic, which it may
// contract into one fused multiply-add (one rounding fewer, another sum at a
// tie); the explicitly rounded forms are kept as written.
constexpr int kNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
// Sixteen u8 / s8 codes as f32.
template <typename T>
__attribute__((target("avx512f"))) __m512 codes_as_f32(const T* x) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x));
  return _mm512_cvtepi32_ps(std::is_same_v<T, std::uint8_t> ? _mm512_cvtepu8_epi32(bytes)
                                                            : _mm512_cvtepi8_epi32(bytes));
}

template <typename A, typename B>
__attribute__((target("avx512f"))) std::int64_t code_add_avx512(const A* a, const B* b, float* p,
                                                                 std::int64_t n, float za, float sa,
                                                                 float zb, float sb) {
  const __m512 vza = _mm512_set1_ps(za), vsa = _mm512_set1_ps(sa);
  const __m512 vzb = _mm512_set1_ps(zb), vsb = _mm512_set1_ps(sb);
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 va = _mm512_mul_round_ps(_mm512_sub_ps(codes_as_f32(a + i), vza), vsa, kNearest);
    const __m512 vb = _mm512_mul_round_ps(_mm512_sub_ps(codes_as_f32(b + i), vzb), vsb, kNearest);
    _mm512_storeu_ps(p + i, _mm512_add_round_ps(va, vb, kNearest));
  }
  return i;
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

// GateMultiply: codes x times a per-channel gate g, quantized. Per row of
// contiguous codes (one pixel's channels when channels last, one channel's
// plane when plain) the f32 products ((x - z) * s) * g[n, c] go to a small
// buffer, each operation rounded as the unfused Convert, Subtract, Multiply
// and Multiply round it, and the buffer is quantized as the quantizing
// Convert does (quantize_linear_span / quantize_span): the same codes.
class GateMultiplyOp final : public ExecutableOp {
 public:
  GateMultiplyOp(const graph::Graph& g, const Node& node, bool channels_last)
      : ExecutableOp(node), quantize_(node.attr<graph::GateMultiplyAttrs>().quantize) {
    const auto& a = node.attr<graph::GateMultiplyAttrs>();
    zero_point_ = a.zero_point;
    scale_ = a.scale;
    const Shape& x = g.value(node.inputs[0]).shape;
    batch_ = x[0];
    channels_ = x[1];
    inner_ = 1;
    for (std::size_t d = 2; d < x.size(); ++d) inner_ *= x[d];
    gate_batch_ = g.value(node.inputs[1]).shape[0];
    channels_last_ = channels_last;
    in_signed_ = g.value(node.inputs[0]).type == ElementType::s8;
  }

  void execute(ExecContext& ctx) const override {
    const void* x = ctx.in(node().inputs[0]).raw_data();
    const float* gate = ctx.in(node().inputs[1]).data<float>().data();
    void* y = ctx.out(node().outputs[0]).raw_data();
    const bool out_signed = quantize_.out_signed();
    if (in_signed_) {
      out_signed ? run(static_cast<const std::int8_t*>(x), gate, static_cast<std::int8_t*>(y))
                 : run(static_cast<const std::int8_t*>(x), gate, static_cast<std::uint8_t*>(y));
    } else {
      out_signed ? run(static_cast<const std::uint8_t*>(x), gate, static_cast<std::int8_t*>(y))
                 : run(static_cast<const std::uint8_t*>(x), gate, static_cast<std::uint8_t*>(y));
    }
  }

  std::string implementation() const override { return "qfuse:gate_multiply"; }

 private:
  static constexpr std::int64_t kChunk = 256;

  // Channels last with AVX-512: each task runs whole pixels as one span, the
  // gates of any 16 consecutive codes read from the gate row extended by its
  // first 16 values (a per-row call cost more than the row's work:
  // MobileNetV3-large's 40-channel 16x16 gate, 6.2 us).
  template <typename In, typename Out>
  bool run_pixels(const In* x, const float* gate, Out* y) const {
#if defined(QFUSE_AVX512_KERNELS)
    if (!channels_last_ || !quantize_.linear_ || quantize_.raise_to_min_ || !has_avx512()) {
      return false;
    }
    const float z = zero_point_, s = scale_;
    constexpr std::int64_t kPixels = 1024;  // per task
    const std::int64_t tasks = (inner_ + kPixels - 1) / kPixels;
    const std::int64_t ext = gate_batch_ * (channels_ + 16);
    constexpr std::int64_t kOnStack = 4096;
    float on_stack[kOnStack];
    std::vector<float> on_heap(static_cast<std::size_t>(ext > kOnStack ? ext : 0));
    float* const g_ext = ext > kOnStack ? on_heap.data() : on_stack;
    for (std::int64_t n = 0; n < gate_batch_; ++n) {
      float* row = g_ext + n * (channels_ + 16);
      std::copy_n(gate + n * channels_, channels_, row);
      for (std::int64_t c = 0; c < 16; ++c) row[channels_ + c] = row[c % channels_];
    }
    parallel_for(batch_ * inner_ * channels_ >= (1 << 18), batch_ * tasks, [&](std::int64_t t) {
      const std::int64_t n = t / tasks, first = (t % tasks) * kPixels;
      const std::int64_t count = std::min(kPixels, inner_ - first) * channels_;
      const float* g = g_ext + (gate_batch_ == 1 ? 0 : n * (channels_ + 16));
      const std::int64_t offset = (n * inner_ + first) * channels_;
      const std::int64_t done = gate_multiply_avx512(x + offset, g, channels_, y + offset, count,
                                                     z, s, quantize_.scale_, quantize_.zero_point_, quantize_.code_max_);
      float p[16];
      for (std::int64_t i = done; i < count; ++i) {
        const float v = (static_cast<float>(x[offset + i]) - z) * s;
        p[i - done] = v * g[i % channels_];
      }
      if (done < count) quantize_(p, y + offset + done, count - done);
    });
    return true;
#else
    (void)x, (void)gate, (void)y;
    return false;
#endif
  }

  template <typename In, typename Out>
  void run(const In* x, const float* gate, Out* y) const {
    if (run_pixels(x, gate, y)) return;
    const std::int64_t rows = channels_last_ ? batch_ * inner_ : batch_ * channels_;
    const std::int64_t row = channels_last_ ? channels_ : inner_;
    const float z = zero_point_, s = scale_;
    parallel_for(rows * row >= (1 << 18), rows, [&](std::int64_t r) {
      const std::int64_t n = channels_last_ ? r / inner_ : r / channels_;
      const float* g = gate + (gate_batch_ == 1 ? 0 : n * channels_);
      const In* src = x + r * row;
      Out* dst = y + r * row;
      float p[kChunk];
      for (std::int64_t k = 0; k < row; k += kChunk) {
        const std::int64_t m = std::min(kChunk, row - k);
        if (channels_last_) {
          for (std::int64_t i = 0; i < m; ++i) {
            const float v = (static_cast<float>(src[k + i]) - z) * s;
            p[i] = v * g[k + i];
          }
          quantize_(p, dst + k, m);
          continue;
        }
        const float gc = g[r % channels_];
        for (std::int64_t i = 0; i < m; ++i) {
          const float v = (static_cast<float>(src[k + i]) - z) * s;
          p[i] = v * gc;
        }
        quantize_(p, dst + k, m);
      }
    });
  }

  CodesQuantizer quantize_;
  float zero_point_ = 0.0f, scale_ = 1.0f;
  std::int64_t batch_ = 1, channels_ = 1, inner_ = 1, gate_batch_ = 1;
  bool channels_last_ = false, in_signed_ = false;
};

// CodeAdd: two code tensors of one shape (and layout) dequantized, added and
// quantized, chunk by chunk: (a - za) * sa and (b - zb) * sb each rounded to
// f32 as the unfused Dequantize rounds them, their f32 sum as the unfused
// Add, then the quantization (CodesQuantizer): the same codes. Sixteen at a
// time on AVX-512 (separate multiplies and an add, never a fused
// multiply-add).
class CodeAddOp final : public ExecutableOp {
 public:
  CodeAddOp(const graph::Graph& g, const Node& node)
      : ExecutableOp(node), quantize_(node.attr<graph::CodeAddAttrs>().quantize) {
    const auto& a = node.attr<graph::CodeAddAttrs>();
    za_ = a.a_zero_point;
    sa_ = a.a_scale;
    zb_ = a.b_zero_point;
    sb_ = a.b_scale;
    a_signed_ = g.value(node.inputs[0]).type == ElementType::s8;
    b_signed_ = g.value(node.inputs[1]).type == ElementType::s8;
  }

  void execute(ExecContext& ctx) const override {
    const void* a = ctx.in(node().inputs[0]).raw_data();
    const void* b = ctx.in(node().inputs[1]).raw_data();
    void* y = ctx.out(node().outputs[0]).raw_data();
    const std::int64_t n = ctx.in(node().inputs[0]).size();
    if (a_signed_) {
      with_b(static_cast<const std::int8_t*>(a), b, y, n);
    } else {
      with_b(static_cast<const std::uint8_t*>(a), b, y, n);
    }
  }

  std::string implementation() const override { return "qfuse:code_add"; }

 private:
  static constexpr std::int64_t kChunk = 256;

  template <typename A>
  void with_b(const A* a, const void* b, void* y, std::int64_t n) const {
    if (b_signed_) {
      with_out(a, static_cast<const std::int8_t*>(b), y, n);
    } else {
      with_out(a, static_cast<const std::uint8_t*>(b), y, n);
    }
  }

  template <typename A, typename B>
  void with_out(const A* a, const B* b, void* y, std::int64_t n) const {
    if (quantize_.out_signed()) {
      run(a, b, static_cast<std::int8_t*>(y), n);
    } else {
      run(a, b, static_cast<std::uint8_t*>(y), n);
    }
  }

  template <typename A, typename B, typename Out>
  void run(const A* a, const B* b, Out* y, std::int64_t n) const {
    const std::int64_t chunks = (n + kChunk - 1) / kChunk;
    parallel_for(n >= (1 << 17), chunks, [&](std::int64_t c) {
      const std::int64_t first = c * kChunk, m = std::min(kChunk, n - first);
      alignas(64) float p[kChunk];
      std::int64_t i = dequantized_sums(a + first, b + first, p, m);
      for (; i < m; ++i) {
        const float va = (static_cast<float>(a[first + i]) - za_) * sa_;
        const float vb = (static_cast<float>(b[first + i]) - zb_) * sb_;
        p[i] = va + vb;
      }
      quantize_(p, y + first, m);
    });
  }

  // The sums of the first multiple of sixteen codes, with AVX-512; how many.
  template <typename A, typename B>
  std::int64_t dequantized_sums(const A* a, const B* b, float* p, std::int64_t m) const {
#if defined(QFUSE_AVX512_KERNELS)
    if (has_avx512()) return code_add_avx512(a, b, p, m, za_, sa_, zb_, sb_);
#else
    (void)a, (void)b, (void)p, (void)m;
#endif
    return 0;
  }

  CodesQuantizer quantize_;
  float za_ = 0.0f, sa_ = 1.0f, zb_ = 0.0f, sb_ = 1.0f;
  bool a_signed_ = false, b_signed_ = false;
};

// Lookup: one byte through a 256-entry table, any layout (input and output
// share it), on all threads once there is enough to share.
class LookupOp final : public ExecutableOp {
 public:
  LookupOp(const graph::Graph& g, const Node& node) : ExecutableOp(node) {
    const auto& a = node.attr<graph::LookupAttrs>();
    std::copy(a.table.begin(), a.table.end(), table_.begin());
    // s8 codes index from -128: flipping the sign bit of the byte does it.
    flip_ = g.value(node.inputs[0]).type == ElementType::s8 ? 0x80 : 0x00;
  }

  void execute(ExecContext& ctx) const override {
    const Tensor& x = ctx.in(node().inputs[0]);
    const auto* in = static_cast<const std::uint8_t*>(x.raw_data());
    auto* out = static_cast<std::uint8_t*>(ctx.out(node().outputs[0]).raw_data());
    const std::int64_t n = x.size();
    constexpr std::int64_t kChunk = 16384;
    parallel_for(n >= 4 * kChunk, (n + kChunk - 1) / kChunk, [&](std::int64_t k) {
      const std::int64_t begin = k * kChunk;
      lookup_bytes(in + begin, out + begin, std::min(kChunk, n - begin), table_, flip_);
    });
  }

  std::string implementation() const override { return "qfuse:lookup"; }

 private:
  std::array<std::uint8_t, 256> table_{};
  std::uint8_t flip_ = 0;
};

// MaxPool of u8/s8 codes, 2D, channels last on both sides: the window max per
// channel, 64 channels a step (oneDNN 2.6's int8 pooling takes 16 us for
// ShuffleNetV2's 3x3/2 stem pool over 24 channels, this about 2). Made only
// when every window holds a real cell.
class MaxPoolBytesOp final : public ExecutableOp {
 public:
  static std::unique_ptr<ExecutableOp> make(const graph::Graph& g, const Node& node,
                                            bool in_channels_last, bool out_channels_last) {
    const auto& a = node.attr<graph::PoolAttrs>();
    const graph::Value& x = g.value(node.inputs[0]);
    const Shape& out = g.value(node.outputs[0]).shape;
    const bool codes = x.type == ElementType::u8 || x.type == ElementType::s8;
    if (!codes || !in_channels_last || !out_channels_last || x.shape.size() != 4 ||
        a.kernel.size() != 2 || a.out_scale != 1.0f || a.out_shift != 0.0f) {
      return nullptr;
    }
    MaxPoolGeometry p;
    p.n = x.shape[0], p.c = x.shape[1], p.ih = x.shape[2], p.iw = x.shape[3];
    p.oh = out[2], p.ow = out[3];
    p.kh = a.kernel[0], p.kw = a.kernel[1], p.sh = a.strides[0], p.sw = a.strides[1];
    p.ph = a.pads_begin[0], p.pw = a.pads_begin[1];
    p.dh = a.dilations.empty() ? 1 : a.dilations[0];
    p.dw = a.dilations.empty() ? 1 : a.dilations[1];
    const auto every_window_real = [](std::int64_t outs, std::int64_t k, std::int64_t s,
                                      std::int64_t pad, std::int64_t d, std::int64_t in) {
      for (std::int64_t o = 0; o < outs; ++o) {
        bool real = false;
        for (std::int64_t i = 0; i < k && !real; ++i) {
          const std::int64_t at = o * s - pad + i * d;
          real = at >= 0 && at < in;
        }
        if (!real) return false;
      }
      return true;
    };
    if (!every_window_real(p.oh, p.kh, p.sh, p.ph, p.dh, p.ih) ||
        !every_window_real(p.ow, p.kw, p.sw, p.pw, p.dw, p.iw) || !max_pool_window_fits(p)) {
      return nullptr;
    }
    return std::unique_ptr<ExecutableOp>(new MaxPoolBytesOp(node, p, x.type == ElementType::s8));
  }

  void execute(ExecContext& ctx) const override {
    const auto* x = static_cast<const std::uint8_t*>(ctx.in(node().inputs[0]).raw_data());
    auto* y = static_cast<std::uint8_t*>(ctx.out(node().outputs[0]).raw_data());
    const std::int64_t rows = g_.n * g_.oh;
    const bool parallel = rows * g_.ow * g_.c >= (1 << 16);
    constexpr std::int64_t kRows = 8;
    parallel_for(parallel, (rows + kRows - 1) / kRows, [&](std::int64_t k) {
      max_pool_bytes(x, y, g_, signed_, k * kRows, std::min(rows, (k + 1) * kRows));
    });
  }

  std::string implementation() const override { return "qfuse:max_pool"; }

 private:
  MaxPoolBytesOp(const Node& node, const MaxPoolGeometry& g, bool is_signed)
      : ExecutableOp(node), g_(g), signed_(is_signed) {}

  MaxPoolGeometry g_;
  bool signed_ = false;
};


// A global AvgPool of u8/s8 codes written as f32 (PoolAttrs::to_f32):
// out_scale * mean + out_shift per image and channel, the codes summed
// exactly in integers and the mean scaled in double, rounded to f32 once.
class DequantizedMeanOp final : public ExecutableOp {
 public:
  DequantizedMeanOp(const graph::Graph& g, const Node& node, bool channels_last)
      : ExecutableOp(node) {
    const auto& a = node.attr<graph::PoolAttrs>();
    const graph::Value& x = g.value(node.inputs[0]);
    signed_ = x.type == ElementType::s8;
    batch_ = x.shape[0];
    channels_ = x.shape[1];
    for (std::size_t d = 2; d < x.shape.size(); ++d) pixels_ *= x.shape[d];
    channels_last_ = channels_last;
    scale_ = static_cast<double>(a.out_scale) / static_cast<double>(pixels_);
    shift_ = a.out_shift;
  }

  void execute(ExecContext& ctx) const override {
    const auto* x = static_cast<const std::uint8_t*>(ctx.in(node().inputs[0]).raw_data());
    float* y = ctx.out(node().outputs[0]).data<float>().data();
    // The per-channel sums live in the request's scratchpad.
    auto* sums = static_cast<std::int64_t*>(ctx.scratchpad());
    for (std::int64_t n = 0; n < batch_; ++n) {
      const std::uint8_t* image = x + n * channels_ * pixels_;
      image_channel_sums(image, pixels_, channels_, signed_, channels_last_, sums);
      for (std::int64_t c = 0; c < channels_; ++c) {
        y[n * channels_ + c] = static_cast<float>(scale_ * static_cast<double>(sums[c]) + shift_);
      }
    }
  }

  std::string implementation() const override { return "qfuse:dequantized_mean"; }
  std::size_t scratchpad_size() const override {
    return static_cast<std::size_t>(channels_) * sizeof(std::int64_t);
  }

 private:
  bool signed_ = false, channels_last_ = false;
  std::int64_t batch_ = 1, channels_ = 1, pixels_ = 1;
  double scale_ = 1.0, shift_ = 0.0;
};


}  // namespace

std::unique_ptr<ExecutableOp> make_gate_multiply(const OpBuild& b) {
  return std::make_unique<GateMultiplyOp>(b.graph, b.node, b.channels_last(b.node.inputs[0]));
}

std::unique_ptr<ExecutableOp> make_code_add(const OpBuild& b) {
  return std::make_unique<CodeAddOp>(b.graph, b.node);
}

std::unique_ptr<ExecutableOp> make_lookup(const OpBuild& b) {
  return std::make_unique<LookupOp>(b.graph, b.node);
}

std::unique_ptr<ExecutableOp> make_max_pool_of_codes(const OpBuild& b) {
  return MaxPoolBytesOp::make(b.graph, b.node, b.channels_last(b.node.inputs[0]),
                              b.channels_last(b.node.outputs[0]));
}

std::unique_ptr<ExecutableOp> make_dequantized_mean(const OpBuild& b) {
  if (!b.node.attr<graph::PoolAttrs>().to_f32) return nullptr;
  return std::make_unique<DequantizedMeanOp>(b.graph, b.node, b.channels_last(b.node.inputs[0]));
}

}  // namespace qfuse::plugin
