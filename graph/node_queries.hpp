#pragma once
// What one node of the graph computes, asked by the passes, the plugin's
// executables, qfuse compare and the exporter alike: a constant's values along
// an axis, a FakeQuantize's grid, whether a pool covers the whole image. The
// passes' own matching and rewriting helpers are graph/passes/pattern.hpp,
// which nothing outside graph/passes includes (tools/check_layering.sh).

#include <cstdint>
#include <optional>
#include <vector>

#include "graph/graph.hpp"

namespace qfuse::graph {

// The live node producing `v` if it has kind `kind`, else null.
const Node* producer_of(const Graph& g, ValueId v, OpKind kind);

// Values of an f32 constant.
std::optional<std::vector<float>> constant_f32(const Graph& g, ValueId v);

// A constant that, broadcast against `shape`, varies at most along `axis`:
// its values as one number (size 1) or one per index of that axis.
std::optional<std::vector<float>> channel_vector(const Graph& g, ValueId v, const Shape& shape,
                                                 std::size_t axis);

// `values` (size 1 or n) expanded to n.
std::vector<float> expand(const std::vector<float>& values, std::size_t n);
// Within `tolerance` of an integer.
bool is_near_integer(double x, double tolerance = 1e-3);

// A MaxPool / AvgPool whose window is the whole image, unpadded.
bool pools_globally(const Graph& g, const Node& pool);

// The quantum (oh - ol) / (L - 1) of a FakeQuantize's output, along `axis`
// of `shape`: one value or one per index of that axis; nullopt when its
// output ranges are not such constants. `output_low` receives ol alike.
std::optional<std::vector<float>> output_quantum(const Graph& g, const Node& fq,
                                                 const Shape& shape, std::size_t axis,
                                                 std::vector<float>* output_low = nullptr);

// The FakeQuantize's four ranges are one value each (per tensor).
bool has_per_tensor_ranges(const Graph& g, const Node& fq);
// The FakeQuantize's output ranges are its input ranges (the same values).
bool output_ranges_are_input_ranges(const Graph& g, const Node& fq);

}  // namespace qfuse::graph
