#include "graph/broadcast.hpp"

#include <algorithm>
#include <numeric>

namespace qfuse::graph {

std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b) {
  const std::size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (std::size_t i = 0; i < r; ++i) {
    const std::int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    const std::int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da != db && da != 1 && db != 1) return std::nullopt;
    out[i] = std::max(da, db);
  }
  return out;
}

bool broadcasts_to(const Shape& from, const Shape& to) {
  const auto b = broadcast_shapes(from, to);
  return b && *b == to;
}

bool is_per_channel(const Shape& s, const Shape& out, std::size_t axis) {
  if (s.size() > out.size() || s.empty()) return false;
  const std::size_t offset = out.size() - s.size();
  if (axis < offset) return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const std::size_t d = i + offset;
    if (s[i] != (d == axis ? out[d] : 1)) return false;
  }
  return true;
}

std::vector<std::int64_t> broadcast_strides(const Shape& shape, std::size_t rank) {
  std::vector<std::int64_t> strides(rank, 0);
  std::int64_t s = 1;
  for (std::size_t i = rank; i-- > 0;) {
    const std::size_t back = rank - 1 - i;
    const std::int64_t d = back < shape.size() ? shape[shape.size() - 1 - back] : 1;
    strides[i] = d == 1 ? 0 : s;
    s *= d;
  }
  return strides;
}

std::vector<std::size_t> broadcast_offsets(const Shape& shape, const Shape& out) {
  const auto n = static_cast<std::size_t>(element_count(out));
  std::vector<std::size_t> offsets(n);
  if (n == 0) return offsets;
  if (static_cast<std::size_t>(element_count(shape)) == n) {
    // As many elements as the output: nothing is broadcast.
    std::iota(offsets.begin(), offsets.end(), std::size_t{0});
    return offsets;
  }
  if (out.empty()) return offsets;
  // An odometer over the outer dimensions, the innermost one as a run.
  const std::vector<std::int64_t> strides = broadcast_strides(shape, out.size());
  const std::size_t last = out.size() - 1;
  const auto inner = static_cast<std::size_t>(out[last]);
  const std::int64_t step = strides[last];
  std::vector<std::int64_t> index(out.size(), 0);
  std::int64_t base = 0;
  for (std::size_t i = 0; i < n; i += inner) {
    for (std::size_t k = 0; k < inner; ++k) {
      offsets[i + k] = static_cast<std::size_t>(base + static_cast<std::int64_t>(k) * step);
    }
    for (std::size_t d = last; d-- > 0;) {
      base += strides[d];
      if (++index[d] < out[d]) break;
      base -= strides[d] * out[d];
      index[d] = 0;
    }
  }
  return offsets;
}

}  // namespace qfuse::graph
