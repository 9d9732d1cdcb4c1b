#pragma once
// Numpy broadcasting, shared by the verifier, the ONNX frontend's constant
// folding, fold_constants and the reference loops: shapes are right-aligned,
// and a dimension of 1 repeats.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "qfuse/tensor.hpp"

namespace qfuse::graph {

// The broadcast shape of `a` and `b`; nullopt when they do not broadcast.
std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b);

// `from` broadcasts to exactly `to` (one direction).
bool broadcasts_to(const Shape& from, const Shape& to);

// `s` broadcast against `out` varies only along `axis`: [C], [1, C, 1, 1], ...
bool is_per_channel(const Shape& s, const Shape& out, std::size_t axis);

// Element strides of a dense tensor of `shape`, right-aligned to `rank`
// dimensions, with 0 along the dimensions it repeats.
std::vector<std::int64_t> broadcast_strides(const Shape& shape, std::size_t rank);

// Calls f(i, offsets) for every element i of the dense (C order) `out`, with
// offsets[k] the element of operand k (strides[k] from broadcast_strides).
template <class F>
void for_each_broadcast(const Shape& out, const std::vector<std::vector<std::int64_t>>& strides,
                        F&& f) {
  const std::size_t rank = out.size();
  const std::int64_t total = element_count(out);
  std::vector<std::int64_t> index(rank, 0);
  std::vector<std::int64_t> offsets(strides.size(), 0);
  for (std::int64_t i = 0; i < total; ++i) {
    f(i, offsets);
    for (std::size_t d = rank; d-- > 0;) {
      ++index[d];
      for (std::size_t k = 0; k < strides.size(); ++k) offsets[k] += strides[k][d];
      if (index[d] < out[d]) break;
      for (std::size_t k = 0; k < strides.size(); ++k) offsets[k] -= strides[k][d] * out[d];
      index[d] = 0;
    }
  }
}

// The element of `shape` each element of `out` reads.
std::vector<std::size_t> broadcast_offsets(const Shape& shape, const Shape& out);

}  // namespace qfuse::graph
