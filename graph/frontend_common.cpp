#include "graph/frontend_common.hpp"

#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include <algorithm>
#include <cstdint>
#include <utility>

namespace qfuse::graph {

namespace {
std::size_t sz(std::int64_t v) { return static_cast<std::size_t>(v); }
std::int64_t i64(std::size_t v) { return static_cast<std::int64_t>(v); }
}  // namespace

void apply_auto_pad(AutoPad mode, const Shape& x, const Ints& kernel, const Ints& strides,
                    const Ints& dilations, Ints& pads_begin, Ints& pads_end) {
  if (mode == AutoPad::explicit_pads) return;
  const std::size_t spatial = kernel.size();
  pads_begin.assign(spatial, 0);
  pads_end.assign(spatial, 0);
  if (mode == AutoPad::valid) return;
  for (std::size_t i = 0; i < spatial; ++i) {
    const std::int64_t in_size = x[i + 2];
    const std::int64_t out = (in_size + strides[i] - 1) / strides[i];
    const std::int64_t extent = (kernel[i] - 1) * dilations[i] + 1;
    const std::int64_t total = std::max<std::int64_t>(0, (out - 1) * strides[i] + extent - in_size);
    const std::int64_t small = total / 2;
    pads_begin[i] = mode == AutoPad::same_upper ? small : total - small;
    pads_end[i] = total - pads_begin[i];
  }
}

std::optional<std::string> add_ceil_mode_padding(PoolAttrs& p, const Shape& x, bool is_max) {
  for (std::size_t i = 0; i < p.kernel.size(); ++i) {
    const std::int64_t in_size = x[i + 2];
    const std::int64_t dilation = p.dilations.empty() ? 1 : p.dilations[i];
    const std::int64_t extent = (p.kernel[i] - 1) * dilation + 1;
    // Extra cells at the end turn the floor of the output size into its ceiling.
    const std::int64_t padded = in_size + p.pads_begin[i] + p.pads_end[i];
    const std::int64_t out = (padded - extent + p.strides[i] - 1) / p.strides[i] + 1;
    if ((out - 1) * p.strides[i] >= in_size + p.pads_begin[i]) {
      return "where the last window starts in the padding";
    }
    const std::int64_t extra = (out - 1) * p.strides[i] + extent - padded;
    if (extra > 0 && !is_max && !p.exclude_pad) return "with count_include_pad = 1";
    p.pads_end[i] += std::max<std::int64_t>(0, extra);
  }
  return std::nullopt;
}

std::optional<CoordinateTransform> coordinate_transform_named(std::string_view name) {
  static constexpr std::pair<std::string_view, CoordinateTransform> kNames[] = {
      {"half_pixel", CoordinateTransform::half_pixel},
      {"pytorch_half_pixel", CoordinateTransform::pytorch_half_pixel},
      {"align_corners", CoordinateTransform::align_corners},
      {"asymmetric", CoordinateTransform::asymmetric},
      {"tf_half_pixel_for_nn", CoordinateTransform::tf_half_pixel_for_nn}};
  for (const auto& [n, t] : kNames) {
    if (n == name) return t;
  }
  return std::nullopt;
}

std::optional<NearestMode> nearest_mode_named(std::string_view name) {
  static constexpr std::pair<std::string_view, NearestMode> kNames[] = {
      {"round_prefer_floor", NearestMode::round_prefer_floor},
      {"round_prefer_ceil", NearestMode::round_prefer_ceil},
      {"floor", NearestMode::floor},
      {"ceil", NearestMode::ceil}};
  for (const auto& [n, m] : kNames) {
    if (n == name) return m;
  }
  return std::nullopt;
}

std::optional<std::string> fake_quantize_levels_problem(std::int64_t levels) {
  if (levels >= 2 && levels <= 65536) return std::nullopt;
  return "levels must be in [2, 65536] (got " + std::to_string(levels) + ")";
}

std::optional<std::string> inverted_limits_problem(const std::vector<double>& l,
                                                   const std::vector<double>& h) {
  if (l.empty() || h.empty() || (l.size() != h.size() && l.size() != 1 && h.size() != 1)) {
    return std::nullopt;
  }
  const std::size_t n = std::max(l.size(), h.size());
  for (std::size_t k = 0; k < n; ++k) {
    const double a = l[l.size() == 1 ? 0 : k], b = h[h.size() == 1 ? 0 : k];
    if (a > b) {
      return "input_low " + std::to_string(a) + " is above input_high " + std::to_string(b) +
             (n > 1 ? " at index " + std::to_string(k) : std::string()) + " (inverted limits)";
    }
  }
  return std::nullopt;
}

void remove_dead_nodes(Graph& g) {
  std::vector<int> uses(g.value_count(), 0);
  for (std::size_t i = 0; i < g.node_capacity(); ++i) {
    const Node& n = g.node(NodeId{static_cast<std::uint32_t>(i)});
    if (n.erased) continue;
    for (ValueId in : n.inputs) ++uses[in.index];
  }
  for (ValueId out : g.outputs()) ++uses[out.index];
  // Producers come before consumers, so one backward sweep finds every dead node.
  for (std::size_t i = g.node_capacity(); i-- > 0;) {
    const NodeId id{static_cast<std::uint32_t>(i)};
    const Node& n = g.node(id);
    if (n.erased) continue;
    const bool dead = std::all_of(n.outputs.begin(), n.outputs.end(),
                                  [&](ValueId v) { return uses[v.index] == 0; });
    if (!dead) continue;
    for (ValueId in : n.inputs) --uses[in.index];
    g.erase_node(id);
  }
}

void erase_unread_chain(Graph& g, ValueId v) {
  const Value& value = g.value(v);
  const auto is_output = [&g](ValueId x) {
    return std::find(g.outputs().begin(), g.outputs().end(), x) != g.outputs().end();
  };
  if (!g.consumers(v).empty() || is_output(v)) return;
  if (value.is_constant()) {
    g.release_constant(v);
    return;
  }
  if (!value.producer.valid()) return;
  const NodeId producer = value.producer;
  const std::vector<ValueId> inputs = g.node(producer).inputs;
  for (ValueId out : g.node(producer).outputs) {
    if (!g.consumers(out).empty() || is_output(out)) return;
  }
  g.erase_node(producer);
  for (ValueId in : inputs) erase_unread_chain(g, in);
}

namespace {

// dst[j][i] = src[i][j] for a rows x cols matrix of T, in 32 x 32 tiles (each
// read and written while in cache).
template <class T>
void transpose_tiles(const T* src, T* dst, std::int64_t rows, std::int64_t cols) {
  constexpr std::int64_t kTile = 32;
  for (std::int64_t i0 = 0; i0 < rows; i0 += kTile) {
    for (std::int64_t j0 = 0; j0 < cols; j0 += kTile) {
      const std::int64_t i1 = std::min(rows, i0 + kTile), j1 = std::min(cols, j0 + kTile);
      for (std::int64_t i = i0; i < i1; ++i) {
        for (std::int64_t j = j0; j < j1; ++j) dst[j * rows + i] = src[i * cols + j];
      }
    }
  }
}

#ifdef __SSE2__
// Bytes in 16 x 16 blocks: four rounds of SSE2 unpacks (8-, 16-, 32-, then
// 64-bit interleaves) turn 16 rows into 16 columns; the edges go through
// transpose_tiles. Eight times the tiled loop's speed on BERT-base's weights.
void transpose_bytes(const std::uint8_t* src, std::uint8_t* dst, std::int64_t rows,
                     std::int64_t cols) {
  const std::int64_t rows16 = rows / 16 * 16, cols16 = cols / 16 * 16;
  for (std::int64_t i0 = 0; i0 < rows16; i0 += 16) {
    for (std::int64_t j0 = 0; j0 < cols16; j0 += 16) {
      __m128i r[16];  // std::array drops __m128i's alignment attribute
      for (std::size_t i = 0; i < 16; ++i) {
        r[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + (i0 + i64(i)) * cols + j0));
      }
      __m128i t[16];
      for (std::size_t i = 0; i < 8; ++i) {
        t[2 * i] = _mm_unpacklo_epi8(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm_unpackhi_epi8(r[2 * i], r[2 * i + 1]);
      }
      for (std::size_t i = 0; i < 4; ++i) {
        for (std::size_t k = 0; k < 2; ++k) {
          r[4 * i + k] = _mm_unpacklo_epi16(t[4 * i + k], t[4 * i + k + 2]);
          r[4 * i + k + 2] = _mm_unpackhi_epi16(t[4 * i + k], t[4 * i + k + 2]);
        }
      }
      for (std::size_t i = 0; i < 2; ++i) {
        for (std::size_t k = 0; k < 4; ++k) {
          t[8 * i + k] = _mm_unpacklo_epi32(r[8 * i + k], r[8 * i + k + 4]);
          t[8 * i + k + 4] = _mm_unpackhi_epi32(r[8 * i + k], r[8 * i + k + 4]);
        }
      }
      for (std::size_t k = 0; k < 8; ++k) {
        r[k] = _mm_unpacklo_epi64(t[k], t[k + 8]);
        r[k + 8] = _mm_unpackhi_epi64(t[k], t[k + 8]);
      }
      // r[k] holds the column of this row block at position q(k) of the
      // interleaves: bits of k read as (bit0, bit1, bit2, bit3) -> 8,4,2,1.
      for (std::size_t k = 0; k < 16; ++k) {
        const std::size_t col = (k & 1) << 3 | (k & 2) << 1 | (k & 4) >> 1 | (k & 8) >> 3;
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (j0 + i64(col)) * rows + i0), r[k]);
      }
    }
  }
  // The edges: the last rows % 16 rows, then the last cols % 16 columns.
  for (std::int64_t i = rows16; i < rows; ++i) {
    for (std::int64_t j = 0; j < cols; ++j) dst[j * rows + i] = src[i * cols + j];
  }
  for (std::int64_t i = 0; i < rows16; ++i) {
    for (std::int64_t j = cols16; j < cols; ++j) dst[j * rows + i] = src[i * cols + j];
  }
}
#endif

}  // namespace

Tensor transposed_matrix(const Tensor& m) {
  if (m.shape().size() != 2) throw GraphError("transposed_matrix: a rank-2 tensor expected");
  const std::int64_t rows = m.shape()[0], cols = m.shape()[1];
  Tensor out(m.type(), Shape{cols, rows});
  switch (element_size(m.type())) {
    case 1:
#ifdef __SSE2__
      transpose_bytes(static_cast<const std::uint8_t*>(m.raw_data()),
                      static_cast<std::uint8_t*>(out.raw_data()), rows, cols);
#else
      transpose_tiles(static_cast<const std::uint8_t*>(m.raw_data()),
                      static_cast<std::uint8_t*>(out.raw_data()), rows, cols);
#endif
      break;
    case 4:
      transpose_tiles(static_cast<const std::uint32_t*>(m.raw_data()),
                      static_cast<std::uint32_t*>(out.raw_data()), rows, cols);
      break;
    case 8:
      transpose_tiles(static_cast<const std::uint64_t*>(m.raw_data()),
                      static_cast<std::uint64_t*>(out.raw_data()), rows, cols);
      break;
    default: throw GraphError("transposed_matrix: unexpected element size");
  }
  return out;
}

std::vector<double> transpose_values(const std::vector<double>& v, const Shape& shape,
                                     const Ints& perm, Shape& out_shape) {
  const std::size_t r = shape.size();
  out_shape.assign(r, 0);
  for (std::size_t i = 0; i < r; ++i) out_shape[i] = shape[sz(perm[i])];
  std::vector<std::int64_t> in_strides(r, 1);
  for (std::size_t i = r; i-- > 1;) in_strides[i - 1] = in_strides[i] * shape[i];
  std::vector<double> out(v.size());
  if (r == 2 && perm[0] == 1 && perm[1] == 0) {
    transpose_tiles(v.data(), out.data(), shape[0], shape[1]);
    return out;
  }
  std::vector<std::int64_t> idx(r, 0);
  for (std::size_t k = 0; k < out.size(); ++k) {
    std::int64_t off = 0;
    for (std::size_t d = 0; d < r; ++d) off += idx[d] * in_strides[sz(perm[d])];
    out[k] = v[sz(off)];
    for (std::size_t d = r; d-- > 0;) {
      if (++idx[d] < out_shape[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

}  // namespace qfuse::graph
