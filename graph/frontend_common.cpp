#include "graph/frontend_common.hpp"

#include <algorithm>
#include <utility>

namespace qfuse::graph {

namespace {
std::size_t sz(std::int64_t v) { return static_cast<std::size_t>(v); }
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

}  // namespace

Tensor transposed_matrix(const Tensor& m) {
  if (m.shape().size() != 2) throw GraphError("transposed_matrix: a rank-2 tensor expected");
  const std::int64_t rows = m.shape()[0], cols = m.shape()[1];
  Tensor out(m.type(), Shape{cols, rows});
  switch (element_size(m.type())) {
    case 1:
      transpose_tiles(static_cast<const std::uint8_t*>(m.raw_data()),
                      static_cast<std::uint8_t*>(out.raw_data()), rows, cols);
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
