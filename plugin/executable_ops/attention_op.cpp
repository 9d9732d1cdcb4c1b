// qfuse's attention kernel: y = softmax(Q K^T * scale + mask) V for each
// batch and head, eight query rows at a time, the rows' scores, probabilities
// and products kept in L1 (the Attention node, graph/ops.hpp's
// AttentionAttrs, made by plugin/attention_fusion.cpp). Each (batch, head)
// packs its keys (and, int8, its values) once for all its rows.
//
// int8 (static QDQ: the scores f32, the probabilities quantized): the
// integer products by AVX-512 VNNI (vpdpbusd, u8 x s8; u8 keys / values are
// shifted to s8 by 128 and s8 queries / probabilities to u8, the zero points'
// corrections exact in int32 from each row's and column's sums), then the
// steps of the three ops it replaces in their order and arithmetic: the
// scores acc * scale as f32 (oneDNN's matmul: the int32 converted, then one
// product), the row kernel's softmax (softmax_kernel.hpp) and its quantizer's
// loop (CodesQuantizer), and the composed plan of the second matmul (acc *
// scale, its linear post-op, the zero point, rounding half to even with
// saturation). Its codes are the three ops' bits.
//
// f32 (ONNX Runtime's dynamic format leaves attention float): the products by
// FMA, the scores divided by the divisor (or times the factor) as the
// matmul's post-op did, the same softmax but for its last product: the
// exponentials times the values, then each row times 1 / its sum (one pass
// over the probabilities fewer). Within float rounding of the three ops
// (the sums' order differs from oneDNN's, and that one product's place).
//
// Both forms take each row's maximum as they write its scores (the mask
// added: the Softmax's own sum), so the softmax starts at e^(x - max).

#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

#include "composer/composer.hpp"
#include "graph/broadcast.hpp"
#include "plugin/executable_ops/ops.hpp"
#include "plugin/executable_ops/quantize_spans.hpp"
#include "plugin/executable_ops/softmax_kernel.hpp"
#include "qfuse/error.hpp"

#if defined(QFUSE_AVX512_KERNELS)
#include <immintrin.h>
#endif

namespace qfuse::plugin {
namespace {

using graph::AttentionAttrs;
using graph::Node;

// Query rows per step: the scores' tile and the products' accumulators; the
// softmax takes two steps' rows at once (softmax_op.cpp: eight rows side by
// side run faster than four).
constexpr std::int64_t kRows = 4;
constexpr std::int64_t kBlockRows = 2 * kRows;
// Key (scores) and value (products) lanes per step: 4 x 16.
constexpr int kChunks = 4;

std::int64_t round_up(std::int64_t x, std::int64_t to) { return (x + to - 1) / to * to; }

// Element strides of a rank-4 operand's logical dims, read through `perm`
// (logical dim i is stored dim perm[i]); empty perm: as stored.
std::array<std::int64_t, 4> logical_strides(const Shape& stored, const graph::Ints& perm) {
  std::array<std::int64_t, 4> st{};
  std::int64_t s = 1;
  for (std::size_t d = 4; d-- > 0;) {
    st[d] = s;
    s *= stored[d];
  }
  if (perm.empty()) return st;
  std::array<std::int64_t, 4> out{};
  for (std::size_t i = 0; i < 4; ++i) out[i] = st[static_cast<std::size_t>(perm[i])];
  return out;
}

// A rank-4 operand's dims as its matmul reads it through `perm` (logical dim
// i is stored dim perm[i]); nullopt for another rank.
std::optional<Shape> logical_shape(const Shape& stored, const graph::Ints& perm) {
  if (stored.size() != 4 || (!perm.empty() && perm.size() != 4)) return std::nullopt;
  Shape r = stored;
  if (!perm.empty()) {
    for (std::size_t d = 0; d < 4; ++d) r[d] = stored[static_cast<std::size_t>(perm[d])];
  }
  return r;
}

// What the kernel reads of the node: sizes, strides, and the arithmetic of
// each step.
struct Geometry {
  std::int64_t batch = 0, heads = 0, m = 0, n = 0, d = 0, dv = 0;
  // Strides: q (b, h, i, d), k (b, h, d, j) as the product reads it,
  // v (b, h, j, dv), y (b, h, i, dv); the mask by (b, h, i).
  std::array<std::int64_t, 4> q{}, k{}, v{}, y{};
  std::array<std::int64_t, 3> mask{};
  bool masked = false;
};

Geometry geometry_of(const graph::Graph& g, const Node& node) {
  const auto& a = node.attr<AttentionAttrs>();
  const auto& sg = std::get<graph::MatMulAttrs>(a.scores.geometry);
  const auto& mg = std::get<graph::MatMulAttrs>(a.mix.geometry);
  Geometry t;
  t.q = logical_strides(g.value(node.inputs[0]).shape, sg.perm_a);
  t.k = logical_strides(g.value(node.inputs[1]).shape, sg.perm_b);
  t.v = logical_strides(g.value(node.inputs[2]).shape, mg.perm_b);
  // shape_refusal() checked the ranks.
  const auto logical = [&](std::size_t i, const graph::Ints& perm) {
    return *logical_shape(g.value(node.inputs[i]).shape, perm);
  };
  const Shape q = logical(0, sg.perm_a), k = logical(1, sg.perm_b), v = logical(2, mg.perm_b);
  t.batch = q[0];
  t.heads = q[1];
  t.m = q[2];
  t.d = q[3];
  t.n = k[3];
  t.dv = v[3];
  // The product (b, h, i, dv) is the output's dim inverse[...]: the output's
  // dim i holds the product's dim perm_y[i].
  const Shape& out = g.value(node.outputs[0]).shape;
  std::array<std::int64_t, 4> out_strides{};
  std::int64_t s = 1;
  for (std::size_t d = 4; d-- > 0;) {
    out_strides[d] = s;
    s *= out[d];
  }
  if (mg.perm_y.empty()) {
    t.y = out_strides;
  } else {
    for (std::size_t i = 0; i < 4; ++i)
      t.y[static_cast<std::size_t>(mg.perm_y[i])] = out_strides[i];
  }
  if (node.inputs.size() == 4) {
    t.masked = true;
    const std::vector<std::int64_t> ms = graph::broadcast_strides(g.value(node.inputs[3]).shape, 4);
    t.mask = {ms[0], ms[1], ms[2]};
  }
  return t;
}

// Why the kernel cannot run the node as given (nullopt: it can).
// Why the operands do not make one attention of rank 4 without broadcasting
// (nullopt: they do): what geometry_of() and the node's shape check assume.
std::optional<std::string> shape_refusal(const graph::Graph& g, const Node& node) {
  const auto& a = node.attr<AttentionAttrs>();
  const auto& sg = std::get<graph::MatMulAttrs>(a.scores.geometry);
  const auto& mg = std::get<graph::MatMulAttrs>(a.mix.geometry);
  const auto logical = [&](std::size_t i, const graph::Ints& perm) {
    return logical_shape(g.value(node.inputs[i]).shape, perm);
  };
  const auto q = logical(0, sg.perm_a), k = logical(1, sg.perm_b), v = logical(2, mg.perm_b);
  if (!q || !k || !v || g.value(node.outputs[0]).shape.size() != 4) return "operands not of rank 4";
  if ((*q)[0] != (*k)[0] || (*q)[0] != (*v)[0] || (*q)[1] != (*k)[1] || (*q)[1] != (*v)[1] ||
      (*q)[3] != (*k)[2] || (*k)[3] != (*v)[2]) {
    return "q, k and v broadcast over batch or heads";
  }
  if (node.inputs.size() == 4) {
    const Shape scores{(*q)[0], (*q)[1], (*q)[2], (*k)[3]};
    const Shape& m = g.value(node.inputs[3]).shape;
    const std::optional<Shape> both = graph::broadcast_shapes(scores, m);
    if (m.size() > 4 || !both || *both != scores || m.empty() || m.back() != (*k)[3]) {
      return "the mask " + to_string(m) + " does not broadcast to the scores " + to_string(scores) +
             " whole along the keys";
    }
  }
  return std::nullopt;
}

std::optional<std::string> refusal(const graph::Graph& g, const Node& node) {
  const auto& a = node.attr<AttentionAttrs>();
  if (auto why = shape_refusal(g, node)) return why;
  const Geometry t = geometry_of(g, node);
  if (a.quantized) {
    static const bool vnni =
        __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
    if (!vnni) return "qfuse's int8 attention kernel needs AVX-512 VNNI";
    if (t.d % 4 != 0) return "a head size of " + std::to_string(t.d) + " (not a multiple of 4)";
  } else if (!has_avx512()) {
    return "qfuse's attention kernel needs AVX-512";
  }
  if (t.q[3] != 1 || t.k[2] != 1 || t.v[3] != 1 || t.y[3] != 1) {
    return "q, k, v and y must each be contiguous along the head's features";
  }
  if (t.masked && g.value(node.inputs[3]).shape.back() != t.n) {
    return "the mask must be whole along the keys";
  }
  return std::nullopt;
}

#if defined(QFUSE_AVX512_KERNELS)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#define QFUSE_ATTENTION_INT8 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))
#define QFUSE_ATTENTION_F32 __attribute__((target("avx512f")))

// The composed plan of the products (mix): acc * scale, then
// alpha * y + beta (a linear post-op; 1, 0 when none), then + zero point,
// stored as `to` (rounded half to even and saturated for u8 / s8).
struct MixOutput {
  float scale = 1.0f, alpha = 1.0f, beta = 0.0f, zero_point = 0.0f;
  bool linear = false;
  ElementType to = ElementType::f32;
};

// The int8 form's per-tensor constants.
struct Int8Steps {
  float scores_scale = 1.0f;
  // Zero points on the kernel's side: queries / probabilities as u8, keys /
  // values as s8.
  std::int32_t zq = 0, zk = 0, zp = 0, zv = 0;
  bool q_signed = false, k_unsigned = false, p_signed = false, v_unsigned = false;
  MixOutput out;
};

// The sum of n bytes (u8, or s8 read as u8 + 128 when `shift`): the row
// sums of the zero points' corrections.
QFUSE_ATTENTION_INT8 inline std::int32_t byte_sum(const std::uint8_t* p, std::int64_t n,
                                                  bool shift) {
  __m512i acc = _mm512_setzero_si512();
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(shift ? 0x80 : 0));
  for (std::int64_t i = 0; i < n; i += 64) {
    const __mmask64 k = n - i >= 64 ? ~__mmask64{0} : (__mmask64{1} << (n - i)) - 1;
    const __m512i v =
        _mm512_xor_si512(_mm512_maskz_loadu_epi8(k, p + i), _mm512_maskz_mov_epi8(k, flip));
    acc = _mm512_add_epi64(acc, _mm512_sad_epu8(v, _mm512_setzero_si512()));
  }
  return static_cast<std::int32_t>(_mm512_reduce_add_epi64(acc));
}

// Keys [n, d] (row j at k + j * stride, d bytes) packed for vpdpbusd: for
// each 16 keys and 4 features, 16 dwords (key lane, 4 bytes), s8; the keys
// past n are 0. col[j]: the sum of key j's s8 values.
QFUSE_ATTENTION_INT8 void pack_keys(const std::uint8_t* k, std::int64_t stride, std::int64_t n,
                                    std::int64_t d, bool to_signed, std::int8_t* packed,
                                    std::int32_t* col) {
  const __m512i lane =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(static_cast<int>(stride)));
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(to_signed ? 0x80 : 0));
  const __m512i ones = _mm512_set1_epi8(1);
  for (std::int64_t j0 = 0; j0 < n; j0 += 16) {
    const __mmask16 live = first_lanes(n - j0);
    __m512i sum = _mm512_setzero_si512();
    for (std::int64_t f = 0; f < d; f += 4) {
      __m512i w =
          _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live, lane, k + j0 * stride + f, 1);
      w = _mm512_maskz_mov_epi32(live, _mm512_xor_si512(w, flip));
      _mm512_storeu_si512(packed, w);
      packed += 64;
      sum = _mm512_dpbusd_epi32(sum, ones, w);
    }
    _mm512_storeu_si512(col + j0, sum);
  }
}

// Values [n, dv] (row j at v + j * stride) packed for vpdpbusd: for each 16
// features and 4 keys, 16 dwords (feature lane, the 4 keys' bytes), s8, the
// keys past n and the features past dv 0; col[c]: the sum of feature c's s8
// values. n4 = n rounded up to 4.
QFUSE_ATTENTION_INT8 void pack_values(const std::uint8_t* v, std::int64_t stride, std::int64_t n,
                                      std::int64_t dv, bool to_signed, std::int8_t* packed,
                                      std::int32_t* col) {
  const __m128i flip = _mm_set1_epi8(static_cast<char>(to_signed ? 0x80 : 0));
  const __m512i ones = _mm512_set1_epi8(1);
  const std::int64_t n4 = round_up(n, 4);
  for (std::int64_t c0 = 0; c0 < dv; c0 += 16) {
    const auto live = static_cast<__mmask16>(first_lanes(dv - c0));
    __m512i sum = _mm512_setzero_si512();
    for (std::int64_t j = 0; j < n4; j += 4) {
      __m128i r[4];
      for (int q = 0; q < 4; ++q) {
        r[q] = j + q < n
                   ? _mm_xor_si128(_mm_maskz_loadu_epi8(live, v + (j + q) * stride + c0), flip)
                   : _mm_setzero_si128();
        r[q] = _mm_maskz_mov_epi8(live, r[q]);
      }
      const __m128i ab_lo = _mm_unpacklo_epi8(r[0], r[1]), ab_hi = _mm_unpackhi_epi8(r[0], r[1]);
      const __m128i cd_lo = _mm_unpacklo_epi8(r[2], r[3]), cd_hi = _mm_unpackhi_epi8(r[2], r[3]);
      __m512i w = _mm512_castsi128_si512(_mm_unpacklo_epi16(ab_lo, cd_lo));
      w = _mm512_inserti32x4(w, _mm_unpackhi_epi16(ab_lo, cd_lo), 1);
      w = _mm512_inserti32x4(w, _mm_unpacklo_epi16(ab_hi, cd_hi), 2);
      w = _mm512_inserti32x4(w, _mm_unpackhi_epi16(ab_hi, cd_hi), 3);
      _mm512_storeu_si512(packed, w);
      packed += 64;
      sum = _mm512_dpbusd_epi32(sum, ones, w);
    }
    _mm512_storeu_si512(col + c0, sum);
  }
}

// acc[r][c] += the products of R rows of u8 bytes (a[r] + 4 * step, one
// dword per step; s8 ones shifted to u8 when Flip) with C packed 16-lane
// blocks (b + c * block + 64 * step), over `steps` steps.
template <int R, int C, bool Flip>
QFUSE_ATTENTION_INT8 inline void dot_tile(__m512i (&out)[kRows][kChunks],
                                          const std::uint8_t* const* a, const std::int8_t* b,
                                          std::int64_t block, std::int64_t steps) {
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  // The accumulators as locals of fixed count: registers, not the caller's memory.
  __m512i acc[R][C];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_si512();
  }
  for (std::int64_t s = 0; s < steps; ++s) {
    __m512i w[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) w[c] = _mm512_loadu_si512(b + c * block + 64 * s);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      std::int32_t four;
      std::memcpy(&four, a[r] + 4 * s, 4);
      __m512i x = _mm512_set1_epi32(four);
      if constexpr (Flip) x = _mm512_xor_si512(x, flip);
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_dpbusd_epi32(acc[r][c], x, w[c]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) out[r][c] = acc[r][c];
  }
}

// dot_tile for kRows rows and 1 to kChunks blocks.
template <bool Flip>
QFUSE_ATTENTION_INT8 inline void dot_tile_of(int chunks, __m512i (&acc)[kRows][kChunks],
                                             const std::uint8_t* const* a, const std::int8_t* b,
                                             std::int64_t block, std::int64_t steps) {
  switch (chunks) {
    case 4:
      dot_tile<kRows, 4, Flip>(acc, a, b, block, steps);
      break;
    case 3:
      dot_tile<kRows, 3, Flip>(acc, a, b, block, steps);
      break;
    case 2:
      dot_tile<kRows, 2, Flip>(acc, a, b, block, steps);
      break;
    default:
      dot_tile<kRows, 1, Flip>(acc, a, b, block, steps);
      break;
  }
}
QFUSE_ATTENTION_INT8 inline void dot_tile_any(int chunks, __m512i (&acc)[kRows][kChunks],
                                              const std::uint8_t* const* a, const std::int8_t* b,
                                              std::int64_t block, std::int64_t steps, bool flip) {
  flip ? dot_tile_of<true>(chunks, acc, a, b, block, steps)
       : dot_tile_of<false>(chunks, acc, a, b, block, steps);
}

// Bytes [0, n) XOR 0x80: s8 codes as u8 ones (c + 128).
QFUSE_ATTENTION_INT8 inline void flip_bytes(std::uint8_t* p, std::int64_t n) {
  for (std::int64_t i = 0; i < n; i += 64) {
    const __mmask64 k = n - i >= 64 ? ~__mmask64{0} : (__mmask64{1} << (n - i)) - 1;
    _mm512_mask_storeu_epi8(p + i, k,
                            _mm512_xor_si512(_mm512_maskz_loadu_epi8(k, p + i),
                                             _mm512_set1_epi8(static_cast<char>(0x80))));
  }
}

// The softmax of `rows` (1 to kBlockRows) rows of n scores in place (the
// mask added), their maxima top[r] taken as the scores were written.
// finish_for(first) gives the scale_rows Finish of the rows from `first` on.
template <class FinishFor>
QFUSE_ATTENTION_F32 inline void softmax_block(float* scores, const float* top, std::int64_t rows,
                                              std::int64_t n, FinishFor finish_for) {
  std::int64_t r = 0;
  if (rows == kBlockRows) {
    softmax_rows_from_max<8>(scores, top, n, finish_for(0));
    return;
  }
  for (; r + 4 <= rows; r += 4) softmax_rows_from_max<4>(scores + r * n, top + r, n, finish_for(r));
  for (; r < rows; ++r) softmax_rows_from_max<1>(scores + r * n, top + r, n, finish_for(r));
}

// The exponentials of the block's rows in place and 1 / each row's sum:
// the softmax but its last product (the f32 form takes it after the
// product with the values).
QFUSE_ATTENTION_F32 inline void exp_block(float* scores, const float* top, std::int64_t rows,
                                          std::int64_t n, float* inv) {
  std::int64_t r = 0;
  if (rows == kBlockRows) {
    exp_rows<8>(scores, scores, top, n, inv);
    return;
  }
  for (; r + 4 <= rows; r += 4) exp_rows<4>(scores + r * n, scores + r * n, top + r, n, inv + r);
  for (; r < rows; ++r) exp_rows<1>(scores + r * n, scores + r * n, top + r, n, inv + r);
}

// A tile's scores x of row r (lanes `live` of 16 at column j): the mask's
// row added (the Softmax's own sum) when there is one, stored at `at`, and
// taken into the row's running maximum.
QFUSE_ATTENTION_F32 inline void put_score(__m512 x, const float* mask_row, std::int64_t j,
                                          __mmask16 live, float* at, __m512& top) {
  if (mask_row != nullptr) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(live, mask_row + j));
  _mm512_mask_storeu_ps(at, live, x);
  top = _mm512_mask_max_ps(top, live, top, x);
}

// A scale_rows Finish (softmax_kernel.hpp) writing each probability's code
// instead of the probability: the arithmetic of quantize_linear_span (x / s
// clamped to the codes, rounded half to even, plus the zero point, the
// division as quotient_for_codes where the scale allows; quantize_spans.cpp)
// on the same f32 value, so the same code; as u8 (s8 codes + 128) into
// codes + row * stride.
struct ProbabilityCodes {
  std::uint8_t* codes;
  std::int64_t stride;
  float scale, lo, hi;      // the quotient's bounds: the codes minus the zero point
  std::int32_t zero_point;  // plus 128 for s8 codes
  float inv_scale;          // 1 / scale, or 0 where quotient_by_product(scale) is false
  __attribute__((target("avx512f"), always_inline)) void operator()(float*, int r, std::int64_t i,
                                                                    __mmask16 k, __m512 v) const {
    const __m512 s = _mm512_set1_ps(scale);
    __m512 q = inv_scale != 0.0f ? quotient_for_codes(v, s, _mm512_set1_ps(inv_scale))
                                 : _mm512_div_ps(v, s);
    q = _mm512_min_ps(_mm512_max_ps(q, _mm512_set1_ps(lo)), _mm512_set1_ps(hi));
    const __m512i c = _mm512_add_epi32(_mm512_cvtps_epi32(q), _mm512_set1_epi32(zero_point));
    _mm512_mask_cvtusepi32_storeu_epi8(codes + r * stride + i, k, c);
  }
};

// One (batch, head) of the int8 form. scratch: the packed keys and values,
// their sums, the rows' scores and codes.
class Int8Head {
 public:
  Int8Head(const Geometry& t, const Int8Steps& st, const CodesQuantizer& quantize,
           std::byte* scratch)
      : t_(t), st_(st), quantize_(quantize) {
    n16_ = round_up(t.n, 16);
    n4_ = round_up(t.n, 4);
    dv16_ = round_up(t.dv, 16);
    keys_ = reinterpret_cast<std::int8_t*>(scratch);
    values_ = keys_ + n16_ * t.d;
    key_sums_ = reinterpret_cast<std::int32_t*>(values_ + dv16_ * n4_);
    value_sums_ = key_sums_ + n16_;
    scores_ = reinterpret_cast<float*>(value_sums_ + dv16_);
    codes_ = reinterpret_cast<std::uint8_t*>(scores_ + kBlockRows * t.n);
    // A plain QuantizeLinear onto its type's codes from the lowest: its loop
    // in the softmax's last step.
    codes_in_softmax_ = quantize.linear_ && !quantize.raise_to_min_;
    const std::int32_t type_lo = quantize.signed_ ? -128 : 0;
    probability_codes_ = {nullptr,
                          n4_,
                          quantize.scale_,
                          static_cast<float>(type_lo - quantize.zero_point_),
                          static_cast<float>(quantize.code_max_ - quantize.zero_point_),
                          quantize.zero_point_ + (quantize.signed_ ? 128 : 0),
                          quotient_by_product(quantize.scale_) ? 1.0f / quantize.scale_ : 0.0f};
  }
  static std::size_t scratch_size(const Geometry& t) {
    const std::int64_t n16 = round_up(t.n, 16), n4 = round_up(t.n, 4), dv16 = round_up(t.dv, 16);
    return static_cast<std::size_t>(n16 * t.d + dv16 * n4 + 4 * (n16 + dv16) +
                                    4 * kBlockRows * t.n + kBlockRows * n4 + 64);
  }

  QFUSE_ATTENTION_INT8 void run(const std::uint8_t* q, const std::uint8_t* k, const std::uint8_t* v,
                                const float* mask, void* y) {
    pack_keys(k, t_.k[3], t_.n, t_.d, st_.k_unsigned, keys_, key_sums_);
    pack_values(v, t_.v[2], t_.n, t_.dv, st_.v_unsigned, values_, value_sums_);
    for (std::int64_t i = 0; i < t_.m; i += kBlockRows) {
      const std::int64_t rows = std::min(kBlockRows, t_.m - i);
      const float* mr[kBlockRows];
      for (std::int64_t r = 0; r < kBlockRows; ++r) {
        const std::int64_t row = i + std::min(r, rows - 1);  // extra rows repeat the last
        mr[r] = mask == nullptr ? nullptr : mask + row * t_.mask[2];
      }
      float top[kBlockRows];
      for (std::int64_t h = 0; h < rows; h += kRows) {
        const std::uint8_t* qr[kRows];
        for (std::int64_t r = 0; r < kRows; ++r)
          qr[r] = q + (i + std::min(h + r, rows - 1)) * t_.q[2];
        scores(qr, mask == nullptr ? nullptr : mr + h, scores_ + h * t_.n, top + h);
      }
      // The probabilities' codes, as u8 (s8 ones shifted by 128, which
      // st_.zp counts), rows n4 apart with zeros past n: written by the
      // softmax's last step where the quantizer is a plain QuantizeLinear.
      const std::uint8_t* pr[kBlockRows];
      std::int32_t p_sums[kBlockRows];
      if (codes_in_softmax_) {
        softmax_block(scores_, top, rows, t_.n, [&](std::int64_t first) {
          ProbabilityCodes f = probability_codes_;
          f.codes = codes_ + first * n4_;
          return f;
        });
        for (std::int64_t r = 0; r < rows && n4_ != t_.n; ++r) {
          std::memset(codes_ + r * n4_ + t_.n, 0, static_cast<std::size_t>(n4_ - t_.n));
        }
      } else {
        softmax_block(scores_, top, rows, t_.n, [](std::int64_t) { return StoreRows{}; });
        quantize_rows(rows);
      }
      for (std::int64_t r = 0; r < kBlockRows; ++r) {
        pr[r] = codes_ + std::min(r, rows - 1) * n4_;
        p_sums[r] = r < rows ? byte_sum(pr[r], t_.n, false) : p_sums[rows - 1];
      }
      for (std::int64_t h = 0; h < rows; h += kRows) {
        mix(pr + h, p_sums + h, y, i + h, std::min(kRows, rows - h));
      }
    }
  }

 private:
  // The codes of the block's rows of probabilities in scores_ by the
  // quantizer's own loop, into codes_.
  QFUSE_ATTENTION_INT8 void quantize_rows(std::int64_t rows) {
    const auto quantize = [&](const float* from, std::uint8_t* to, std::int64_t count) {
      if (quantize_.out_signed()) {
        quantize_(from, reinterpret_cast<std::int8_t*>(to), count);
        flip_bytes(to, count);
      } else {
        quantize_(from, to, count);
      }
    };
    if (n4_ == t_.n) {
      quantize(scores_, codes_, rows * t_.n);
      return;
    }
    for (std::int64_t r = 0; r < rows; ++r) {
      quantize(scores_ + r * t_.n, codes_ + r * n4_, t_.n);
      std::memset(codes_ + r * n4_ + t_.n, 0, static_cast<std::size_t>(n4_ - t_.n));
    }
  }

  // The f32 scores of the kRows rows qr into out (rows of n), plus their
  // mask rows mr (null: none); top[r]: row r's maximum.
  QFUSE_ATTENTION_INT8 void scores(const std::uint8_t* const* qr, const float* const* mr,
                                   float* out, float* top) {
    __m512 row_top[kRows];
    for (std::int64_t r = 0; r < kRows; ++r) row_top[r] = _mm512_set1_ps(-INFINITY);
    const __m512 scale = _mm512_set1_ps(st_.scores_scale);
    // acc - zk * rowsum(q) - zq * colsum(k) + d * zq * zk, by row and lane.
    std::int32_t row_term[kRows];
    for (std::int64_t r = 0; r < kRows; ++r)
      row_term[r] = -st_.zk * byte_sum(qr[r], t_.d, st_.q_signed);
    const __m512i both = _mm512_set1_epi32(static_cast<int>(t_.d) * st_.zq * st_.zk);
    const __m512i zq = _mm512_set1_epi32(st_.zq);
    const std::int64_t block = 16 * t_.d;  // bytes per 16 packed keys
    const std::int64_t steps = t_.d / 4;
    for (std::int64_t j0 = 0; j0 < t_.n; j0 += 16 * kChunks) {
      const auto chunks = static_cast<int>(std::min<std::int64_t>(kChunks, (t_.n - j0 + 15) / 16));
      __m512i acc[kRows][kChunks];
      const std::int8_t* b = keys_ + (j0 / 16) * block;
      dot_tile_any(chunks, acc, qr, b, block, steps, st_.q_signed);
      for (int c = 0; c < chunks; ++c) {
        const std::int64_t j = j0 + 16 * c;
        const __mmask16 live = first_lanes(t_.n - j);
        const __m512i col =
            _mm512_sub_epi32(both, _mm512_mullo_epi32(zq, _mm512_loadu_si512(key_sums_ + j)));
        for (std::int64_t r = 0; r < kRows; ++r) {
          const __m512i exact =
              _mm512_add_epi32(_mm512_add_epi32(acc[r][c], col), _mm512_set1_epi32(row_term[r]));
          put_score(_mm512_mul_ps(_mm512_cvtepi32_ps(exact), scale),
                    mr == nullptr ? nullptr : mr[r], j, live, out + r * t_.n + j, row_top[r]);
        }
      }
    }
    for (std::int64_t r = 0; r < kRows; ++r) top[r] = _mm512_reduce_max_ps(row_top[r]);
  }

  // The products of the rows' codes pr with the values, written to y's rows
  // i .. i + rows.
  QFUSE_ATTENTION_INT8 void mix(const std::uint8_t* const* pr, const std::int32_t* p_sums, void* y,
                                std::int64_t i, std::int64_t rows) {
    const MixOutput& o = st_.out;
    const __m512i both = _mm512_set1_epi32(static_cast<int>(t_.n) * st_.zp * st_.zv);
    const __m512i zp = _mm512_set1_epi32(st_.zp);
    const std::int64_t block = 16 * n4_;  // bytes per 16 packed features
    const std::int64_t steps = n4_ / 4;
    const float lo = o.to == ElementType::s8 ? -128.0f : 0.0f,
                hi = o.to == ElementType::s8 ? 127.0f : 255.0f;
    for (std::int64_t c0 = 0; c0 < t_.dv; c0 += 16 * kChunks) {
      const auto chunks = static_cast<int>(std::min<std::int64_t>(kChunks, (t_.dv - c0 + 15) / 16));
      __m512i acc[kRows][kChunks];
      const std::int8_t* b = values_ + (c0 / 16) * block;
      dot_tile_any(chunks, acc, pr, b, block, steps, false);  // codes_ holds u8
      for (int c = 0; c < chunks; ++c) {
        const std::int64_t f = c0 + 16 * c;
        const __mmask16 live = first_lanes(t_.dv - f);
        const __m512i col =
            _mm512_sub_epi32(both, _mm512_mullo_epi32(zp, _mm512_loadu_si512(value_sums_ + f)));
        for (std::int64_t r = 0; r < rows; ++r) {
          const __m512i exact = _mm512_add_epi32(_mm512_add_epi32(acc[r][c], col),
                                                 _mm512_set1_epi32(-st_.zv * p_sums[r]));
          __m512 x = _mm512_mul_ps(_mm512_cvtepi32_ps(exact), _mm512_set1_ps(o.scale));
          if (o.linear) x = _mm512_fmadd_ps(x, _mm512_set1_ps(o.alpha), _mm512_set1_ps(o.beta));
          x = _mm512_add_ps(x, _mm512_set1_ps(o.zero_point));
          const std::int64_t at = (i + r) * t_.y[2] + f;
          if (o.to == ElementType::f32) {
            _mm512_mask_storeu_ps(static_cast<float*>(y) + at, live, x);
            continue;
          }
          x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(lo)), _mm512_set1_ps(hi));
          const __m512i codes = _mm512_cvtps_epi32(x);
          if (o.to == ElementType::u8) {
            _mm512_mask_cvtusepi32_storeu_epi8(static_cast<std::uint8_t*>(y) + at, live, codes);
          } else {
            _mm512_mask_cvtsepi32_storeu_epi8(static_cast<std::int8_t*>(y) + at, live, codes);
          }
        }
      }
    }
  }

  const Geometry& t_;
  const Int8Steps& st_;
  const CodesQuantizer& quantize_;
  std::int64_t n16_ = 0, n4_ = 0, dv16_ = 0;
  std::int8_t* keys_ = nullptr;
  std::int8_t* values_ = nullptr;
  std::int32_t* key_sums_ = nullptr;
  std::int32_t* value_sums_ = nullptr;
  float* scores_ = nullptr;
  std::uint8_t* codes_ = nullptr;
  bool codes_in_softmax_ = false;
  ProbabilityCodes probability_codes_{};
};

// The f32 form's scaling of the scores: x / divisor (the matmul's binary_div
// post-op; a power of two as the exact product by its inverse), or x *
// factor, or none.
struct F32Scale {
  bool divide = false, multiply = false;
  float by = 1.0f;
};

// acc[r][c] = sum over s of a[r][s * a_step] * b[c * 16 + s * b_step ..] for R
// rows and C 16-lane blocks (`live`: the last block's lanes), into out's
// first R x C.
template <int R, int C, int OutR, int OutC>
QFUSE_ATTENTION_F32 inline void fma_tile(__m512 (&out)[OutR][OutC], const float* const* a,
                                         std::int64_t a_step, const float* b, std::int64_t b_step,
                                         std::int64_t steps, __mmask16 live) {
  static_assert(R <= OutR && C <= OutC);
  __m512 acc[R][C];  // registers (see dot_tile)
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  }
  const float* ar[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) ar[r] = a[r];
  for (std::int64_t s = 0; s < steps; ++s) {
    __m512 w[C];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      w[c] = c + 1 < C ? _mm512_loadu_ps(b + s * b_step + 16 * c)
                       : _mm512_maskz_loadu_ps(live, b + s * b_step + 16 * c);
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 x = _mm512_set1_ps(ar[r][s * a_step]);
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_fmadd_ps(x, w[c], acc[r][c]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) out[r][c] = acc[r][c];
  }
}

template <int R>
QFUSE_ATTENTION_F32 inline void fma_tile_any(int chunks, __m512 (&acc)[kRows][kChunks],
                                             const float* const* a, std::int64_t a_step,
                                             const float* b, std::int64_t b_step,
                                             std::int64_t steps, __mmask16 live) {
  switch (chunks) {
    case 4:
      fma_tile<R, 4>(acc, a, a_step, b, b_step, steps, live);
      break;
    case 3:
      fma_tile<R, 3>(acc, a, a_step, b, b_step, steps, live);
      break;
    case 2:
      fma_tile<R, 2>(acc, a, a_step, b, b_step, steps, live);
      break;
    default:
      fma_tile<R, 1>(acc, a, a_step, b, b_step, steps, live);
      break;
  }
}

// r[c] = column c of the 16 x 16 floats r[0..15] (rows): unpacks within
// 128-bit lanes, then lanes across registers.
QFUSE_ATTENTION_F32 inline void transpose_16x16(__m512 (&r)[16]) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);      // per lane: a0 b0 a1 b1
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);  // a2 b2 a3 b3
  }
  for (int i = 0; i < 16; i += 4) {  // r[i + k]: per lane L, column 4L + k of rows i .. i + 3
    const __m512d a = _mm512_castps_pd(t[i]), b = _mm512_castps_pd(t[i + 1]);
    const __m512d c = _mm512_castps_pd(t[i + 2]), d = _mm512_castps_pd(t[i + 3]);
    r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  __m512 out[16];
  for (int k = 0; k < 4; ++k) {
    const __m512 u0 = _mm512_shuffle_f32x4(r[k], r[4 + k], 0x88);  // lanes 0, 2 of each
    const __m512 u1 = _mm512_shuffle_f32x4(r[k], r[4 + k], 0xdd);  // lanes 1, 3
    const __m512 u2 = _mm512_shuffle_f32x4(r[8 + k], r[12 + k], 0x88);
    const __m512 u3 = _mm512_shuffle_f32x4(r[8 + k], r[12 + k], 0xdd);
    out[k] = _mm512_shuffle_f32x4(u0, u2, 0x88);
    out[8 + k] = _mm512_shuffle_f32x4(u0, u2, 0xdd);
    out[4 + k] = _mm512_shuffle_f32x4(u1, u3, 0x88);
    out[12 + k] = _mm512_shuffle_f32x4(u1, u3, 0xdd);
  }
  for (int c = 0; c < 16; ++c) r[c] = out[c];
}

// One (batch, head) of the f32 form. scratch: the keys transposed ([d][n16])
// and the rows' scores.
class F32Head {
 public:
  F32Head(const Geometry& t, const F32Scale& scale, std::byte* scratch) : t_(t), scale_(scale) {
    n16_ = round_up(t.n, 16);
    keys_ = reinterpret_cast<float*>(scratch);
    scores_ = keys_ + t.d * n16_;
  }
  static std::size_t scratch_size(const Geometry& t) {
    return static_cast<std::size_t>(4 * (t.d * round_up(t.n, 16) + kBlockRows * t.n) + 64);
  }

  QFUSE_ATTENTION_F32 void run(const float* q, const float* k, const float* v, const float* mask,
                               float* y) {
    // Keys transposed: keys_[f * n16 + j] = k[j][f]; 16 keys x 16 features
    // through registers, the rest (the last keys, features past a multiple
    // of 16) gathered.
    const __m512i lane =
        _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                           _mm512_set1_epi32(static_cast<int>(t_.k[3])));
    for (std::int64_t j0 = 0; j0 < t_.n; j0 += 16) {
      const __mmask16 live = first_lanes(t_.n - j0);
      std::int64_t f = 0;
      for (; j0 + 16 <= t_.n && f + 16 <= t_.d; f += 16) {
        __m512 r[16];
        for (int j = 0; j < 16; ++j) r[j] = _mm512_loadu_ps(k + (j0 + j) * t_.k[3] + f);
        transpose_16x16(r);
        for (int c = 0; c < 16; ++c) _mm512_storeu_ps(keys_ + (f + c) * n16_ + j0, r[c]);
      }
      for (; f < t_.d; ++f) {
        _mm512_storeu_ps(
            keys_ + f * n16_ + j0,
            _mm512_mask_i32gather_ps(_mm512_setzero_ps(), live, lane, k + j0 * t_.k[3] + f, 4));
      }
    }
    for (std::int64_t i = 0; i < t_.m; i += kBlockRows) {
      const std::int64_t rows = std::min(kBlockRows, t_.m - i);
      const float* mr[kBlockRows];
      for (std::int64_t r = 0; r < kBlockRows; ++r) {
        const std::int64_t row = i + std::min(r, rows - 1);  // extra rows repeat the last
        mr[r] = mask == nullptr ? nullptr : mask + row * t_.mask[2];
      }
      float top[kBlockRows], inv[kBlockRows];
      for (std::int64_t h = 0; h < rows; h += kRows) {
        const float* qr[kRows];
        for (std::int64_t r = 0; r < kRows; ++r)
          qr[r] = q + (i + std::min(h + r, rows - 1)) * t_.q[2];
        scores(qr, mask == nullptr ? nullptr : mr + h, scores_ + h * t_.n, top + h);
      }
      exp_block(scores_, top, rows, t_.n, inv);
      const float* sr[kBlockRows];
      for (std::int64_t r = 0; r < kBlockRows; ++r) {
        sr[r] = scores_ + std::min(r, rows - 1) * t_.n;  // extra rows repeat the last
      }
      mix(sr, inv, y, i, rows, v);
    }
  }

 private:
  // y's rows i .. i + rows (up to kBlockRows): the exponentials sr times the
  // values (rows of v dv apart), times inv[r], 1 / the row's sum. One or two
  // blocks of values (head sizes to 32) take all the rows in one tile: with
  // four rows they would be four or eight chains of dependent FMAs, each
  // waiting out the FMA's latency, and a broadcast load per FMA besides the
  // values' (eight rows: the head-size-16 attention 18.7 -> 17.1-18.0 us on
  // a Sapphire Rapids VM).
  QFUSE_ATTENTION_F32 void mix(const float* const* sr, const float* inv, float* y, std::int64_t i,
                               std::int64_t rows, const float* v) {
    for (std::int64_t c0 = 0; c0 < t_.dv; c0 += 16 * kChunks) {
      const auto chunks = static_cast<int>(std::min<std::int64_t>(kChunks, (t_.dv - c0 + 15) / 16));
      const __mmask16 live = first_lanes(t_.dv - c0 - 16 * (chunks - 1));
      if (chunks <= 2 && rows > kRows) {
        __m512 acc[kBlockRows][2];
        if (chunks == 2) {
          fma_tile<kBlockRows, 2>(acc, sr, 1, v + c0, t_.v[2], t_.n, live);
        } else {
          fma_tile<kBlockRows, 1>(acc, sr, 1, v + c0, t_.v[2], t_.n, live);
        }
        put(acc, inv, y, i, rows, c0, chunks, live);
        continue;
      }
      for (std::int64_t h = 0; h < rows; h += kRows) {
        __m512 acc[kRows][kChunks];
        fma_tile_any<kRows>(chunks, acc, sr + h, 1, v + c0, t_.v[2], t_.n, live);
        put(acc, inv + h, y, i + h, std::min(kRows, rows - h), c0, chunks, live);
      }
    }
  }

  // y's rows i .. i + rows, blocks c0 .. c0 + 16 * chunks: acc[r] * inv[r].
  template <int R, int C>
  QFUSE_ATTENTION_F32 void put(const __m512 (&acc)[R][C], const float* inv, float* y,
                               std::int64_t i, std::int64_t rows, std::int64_t c0, int chunks,
                               __mmask16 live) const {
    for (std::int64_t r = 0; r < rows; ++r) {
      for (int c = 0; c < chunks; ++c) {
        _mm512_mask_storeu_ps(y + (i + r) * t_.y[2] + c0 + 16 * c,
                              c + 1 < chunks ? __mmask16(0xffff) : live,
                              _mm512_mul_ps(acc[r][c], _mm512_set1_ps(inv[r])));
      }
    }
  }

  // The scores of the kRows rows qr into out (rows of n), plus their mask
  // rows mr (null: none); top[r]: row r's maximum.
  QFUSE_ATTENTION_F32 void scores(const float* const* qr, const float* const* mr, float* out,
                                  float* top) {
    const __m512 by = _mm512_set1_ps(scale_.by);
    __m512 row_top[kRows];
    for (std::int64_t r = 0; r < kRows; ++r) row_top[r] = _mm512_set1_ps(-INFINITY);
    for (std::int64_t j0 = 0; j0 < t_.n; j0 += 16 * kChunks) {
      const auto chunks = static_cast<int>(std::min<std::int64_t>(kChunks, (t_.n - j0 + 15) / 16));
      __m512 acc[kRows][kChunks];
      fma_tile_any<kRows>(chunks, acc, qr, 1, keys_ + j0, n16_, t_.d, __mmask16(0xffff));
      for (int c = 0; c < chunks; ++c) {
        const std::int64_t j = j0 + 16 * c;
        const __mmask16 live = first_lanes(t_.n - j);
        for (std::int64_t r = 0; r < kRows; ++r) {
          __m512 x = acc[r][c];
          if (scale_.divide) x = _mm512_div_ps(x, by);
          if (scale_.multiply) x = _mm512_mul_ps(x, by);
          put_score(x, mr == nullptr ? nullptr : mr[r], j, live, out + r * t_.n + j, row_top[r]);
        }
      }
    }
    for (std::int64_t r = 0; r < kRows; ++r) top[r] = _mm512_reduce_max_ps(row_top[r]);
  }

  const Geometry& t_;
  const F32Scale& scale_;
  std::int64_t n16_ = 0;
  float* keys_ = nullptr;
  float* scores_ = nullptr;
};

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

class AttentionOp final : public ExecutableOp {
 public:
  AttentionOp(const graph::Graph& g, const Node& node)
      : ExecutableOp(node), t_(geometry_of(g, node)), threads_(std::max(1, omp_get_max_threads())) {
    const auto& a = node.attr<AttentionAttrs>();
    quantized_ = a.quantized;
#if defined(QFUSE_AVX512_KERNELS)
    if (a.quantized) {
      const composer::PostOpsPlan scores = *composer::compose(a.scores.chain).plan;
      const composer::PostOpsPlan mix = *composer::compose(a.mix.chain).plan;
      st_.scores_scale = scores.output_scales.empty() ? 1.0f : scores.output_scales[0];
      const auto type = [&](std::size_t i) { return g.value(node.inputs[i]).type; };
      st_.q_signed = type(0) == ElementType::s8;
      st_.k_unsigned = type(1) == ElementType::u8;
      st_.p_signed = a.softmax.to == ElementType::s8;
      st_.v_unsigned = type(2) == ElementType::u8;
      st_.zq = a.scores.src_zero_point + (st_.q_signed ? 128 : 0);
      st_.zk = a.scores.weights_zero_point - (st_.k_unsigned ? 128 : 0);
      st_.zp = a.mix.src_zero_point + (st_.p_signed ? 128 : 0);
      st_.zv = a.mix.weights_zero_point - (st_.v_unsigned ? 128 : 0);
      st_.out.scale = mix.output_scales.empty() ? 1.0f : mix.output_scales[0];
      for (const composer::PostOp& p : mix.post_ops) {
        const auto& e = std::get<composer::EltwisePostOp>(p);
        st_.out.linear = true;
        st_.out.alpha = e.alpha;
        st_.out.beta = e.beta;
      }
      st_.out.zero_point = static_cast<float>(mix.dst_zero_point.value_or(0));
      st_.out.to = a.mix.dst_type();
      const auto& s = a.softmax;
      if (s.by_ranges()) {
        quantize_.emplace(graph::ConvertAttrs{s.to, s.input_low, s.input_high});
      } else {
        graph::QuantizeAttrs q;
        q.to = s.to;
        q.scale = {s.quantize_scale};
        q.zero_point = {0};
        quantize_.emplace(q);
      }
      per_thread_ = Int8Head::scratch_size(t_);
    } else {
      if (a.divisor != 0.0f) {
        int exponent = 0;
        const float mantissa = std::frexp(a.divisor, &exponent);
        if (std::fabs(mantissa) == 0.5f) {  // a power of two: x / c == x * (1 / c)
          scale_.multiply = true;
          scale_.by = 1.0f / a.divisor;
        } else {
          scale_.divide = true;
          scale_.by = a.divisor;
        }
      } else if (a.factor != 0.0f) {
        scale_.multiply = true;
        scale_.by = a.factor;
      }
      per_thread_ = F32Head::scratch_size(t_);
    }
#endif
    per_thread_ = static_cast<std::size_t>(round_up(static_cast<std::int64_t>(per_thread_), 64));
  }

  void execute(ExecContext& ctx) const override {
#if defined(QFUSE_AVX512_KERNELS)
    const Node& n = node();
    const float* mask = t_.masked ? ctx.in(n.inputs[3]).data<float>().data() : nullptr;
    auto* scratch = static_cast<std::byte*>(ctx.scratchpad());
    const std::int64_t pairs = t_.batch * t_.heads;
    const int team = std::min(threads_, omp_get_max_threads());
    const bool parallel =
        team > 1 && pairs > 1 && t_.m * t_.n * (t_.d + t_.dv) * pairs >= (1 << 16);
    const auto head = [&](std::int64_t pair) {
      const std::int64_t b = pair / t_.heads, h = pair % t_.heads;
      std::byte* mine =
          scratch + static_cast<std::size_t>(parallel ? omp_get_thread_num() : 0) * per_thread_;
      const float* m = mask == nullptr ? nullptr : mask + b * t_.mask[0] + h * t_.mask[1];
      const std::int64_t qo = b * t_.q[0] + h * t_.q[1], ko = b * t_.k[0] + h * t_.k[1];
      const std::int64_t vo = b * t_.v[0] + h * t_.v[1], yo = b * t_.y[0] + h * t_.y[1];
      if (quantized_) {
        const auto bytes = [&](std::size_t i) {
          return static_cast<const std::uint8_t*>(ctx.in(n.inputs[i]).raw_data());
        };
        auto* y = static_cast<std::uint8_t*>(ctx.out(n.outputs[0]).raw_data());
        const std::size_t size = st_.out.to == ElementType::f32 ? 4 : 1;
        Int8Head(t_, st_, *quantize_, mine)
            .run(bytes(0) + qo, bytes(1) + ko, bytes(2) + vo, m,
                 y + yo * static_cast<std::int64_t>(size));
      } else {
        const auto floats = [&](std::size_t i) { return ctx.in(n.inputs[i]).data<float>().data(); };
        F32Head(t_, scale_, mine)
            .run(floats(0) + qo, floats(1) + ko, floats(2) + vo, m,
                 ctx.out(n.outputs[0]).data<float>().data() + yo);
      }
    };
    if (!parallel) {
      for (std::int64_t p = 0; p < pairs; ++p) head(p);
      return;
    }
#pragma omp parallel for num_threads(team) schedule(static)
    for (std::int64_t p = 0; p < pairs; ++p) head(p);
#else
    (void)ctx;
#endif
  }

  std::string implementation() const override {
    return quantized_ ? "qfuse:attention_vnni" : "qfuse:attention_f32";
  }
  std::size_t scratchpad_size() const override {
    return per_thread_ * static_cast<std::size_t>(threads_);
  }

 private:
  Geometry t_;
  int threads_;
  bool quantized_ = false;
  std::size_t per_thread_ = 0;
#if defined(QFUSE_AVX512_KERNELS)
  Int8Steps st_;
  F32Scale scale_;
#endif
  std::optional<CodesQuantizer> quantize_;
};

}  // namespace

std::optional<std::string> check_attention(const graph::Graph& graph, const graph::Node& node) {
#if defined(QFUSE_AVX512_KERNELS)
  return refusal(graph, node);
#else
  (void)graph;
  (void)node;
  return "qfuse's attention kernel needs an x86-64 build";
#endif
}

std::unique_ptr<ExecutableOp> make_attention(const OpBuild& b) {
  if (const auto why = check_attention(b.graph, b.node)) {
    throw CompileError("compile Attention node '" + b.node.name + "': " + *why);
  }
  for (std::size_t i = 0; i < b.node.inputs.size(); ++i) {
    if (b.layout(b.node.inputs[i]) != Layout::plain) {
      throw CompileError("compile Attention node '" + b.node.name + "': its inputs must be plain");
    }
  }
  return std::make_unique<AttentionOp>(b.graph, b.node);
}

}  // namespace qfuse::plugin
