#pragma once
// What the file frontends (graph/onnx, graph/openvino) share: the padding
// rules of convolutions and pools, the checks a FakeQuantize gets at import,
// and moving constant values. Problems come back as text; each frontend
// throws them with its own node's name.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "graph/graph.hpp"

namespace qfuse::graph {

// How a layer's padding is given: as written, or computed from the input
// (SAME: the output is ceil(in / stride), the odd cell at the end for upper,
// at the beginning for lower; VALID: none).
enum class AutoPad : std::uint8_t { explicit_pads, same_upper, same_lower, valid };

// Sets pads_begin / pads_end for `mode` (explicit: left as they are). x is
// [N, C, spatial...]; kernel, strides and dilations have one entry per
// spatial dimension.
void apply_auto_pad(AutoPad mode, const Shape& x, const Ints& kernel, const Ints& strides,
                    const Ints& dilations, Ints& pads_begin, Ints& pads_end);

// A pool whose output size rounds up (ONNX's ceil_mode, OpenVINO's
// rounding_type "ceil") as extra cells at the end of pads_end. nullopt when
// done; else why it cannot be written so (the last window would start in
// the padding, or an average would count the extra cells).
std::optional<std::string> add_ceil_mode_padding(PoolAttrs& p, const Shape& x, bool is_max);

// Resize's coordinate transforms and nearest modes by the names ONNX's Resize
// and OpenVINO's Interpolate both use; nullopt for a name qfuse does not run.
std::optional<CoordinateTransform> coordinate_transform_named(std::string_view name);
std::optional<NearestMode> nearest_mode_named(std::string_view name);

// levels outside [2, 65536]: the problem, as the FakeQuantize op takes them.
std::optional<std::string> fake_quantize_levels_problem(std::int64_t levels);

// Constant input limits in order. The FakeQuantize formula reads inverted
// ones (input_low above input_high) through min / max, but no quantizer
// writes them and they would run a descending grid: the problem, naming the
// first such pair. Limits that do not broadcast (or are empty) are left to
// shape inference.
std::optional<std::string> inverted_limits_problem(const std::vector<double>& low,
                                                   const std::vector<double>& high);

// Erases the nodes whose outputs nothing reads (a frontend imports every
// node of the file; a dead one never runs).
void remove_dead_nodes(Graph& g);
// Erases the node producing `v` when nothing reads `v` and it is no graph
// output, then in turn its inputs' producers left unread; constants left
// unread hold a placeholder of no memory from then on. For a chain an
// importer made on constants (a dequantize of constant codes) whose last
// reader took another form of them: its bytes are freed during the import.
void erase_unread_chain(Graph& g, ValueId v);

// A matrix [rows, cols] as [cols, rows], of any element type.
Tensor transposed_matrix(const Tensor& m);

// `v` (dense, of `shape`) transposed by `perm`; its shape in out_shape.
std::vector<double> transpose_values(const std::vector<double>& v, const Shape& shape,
                                     const Ints& perm, Shape& out_shape);

}  // namespace qfuse::graph
