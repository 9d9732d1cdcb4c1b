#pragma once
// Internal: f32 layers that absorb the elementwise ops after them as oneDNN
// post-ops.
//
// A Convolution or FullyConnected on f32 data with constant weights, or an f32
// MatMul, takes the chain of unary ops and of binary ops with a per-channel or
// scalar constant that follows its output when nothing else reads the values
// in between: PP-LCNet's conv -> HSwish -> x * a + b becomes one primitive
// instead of four. A MatMul of two run-time operands also takes a run-time
// operand per output column (the last dim) or a scalar, which it then lists
// as an input after its two: attention's scores / sqrt(d) + mask is one
// primitive. The post-ops run the same oneDNN algorithms the separate ops
// would.

#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "graph/graph.hpp"

namespace qfuse {
struct AbsorbedTranspose;  // plugin/api_internal.hpp
}

namespace qfuse::plugin {

struct F32PostOp {
  bool binary = false;
  dnnl::algorithm alg = dnnl::algorithm::undef;
  float alpha = 0.0f, beta = 0.0f;  // eltwise
  std::vector<float> values;        // binary: one per output channel, or one
  graph::ValueId operand;           // binary: a run-time operand instead of values
  bool per_channel = false;         // a run-time operand: one per channel (else one)
};

struct F32Chain {
  std::vector<F32PostOp> steps;
  std::vector<std::string> absorbed;  // the nodes the steps came from
  // The same nodes: erased from the graph, which still holds them (the export
  // writes them back as operators).
  std::vector<graph::NodeId> absorbed_nodes;
};

// The eltwise steps the unfused runtime runs for a unary op (HSigmoid is two),
// empty when `n` is not one.
std::vector<F32PostOp> eltwise_steps(const graph::Node& n);

// Rewrites `g`: each absorbing layer then writes the chain's last value and
// the absorbed nodes are gone. Returns the chains by layer NodeId index and
// adds a line per layer to `log`.
std::unordered_map<std::uint32_t, F32Chain> absorb_f32_post_ops(graph::Graph& g,
                                                                std::vector<std::string>& log);

// A run-time binary operand: its execution argument id and descriptor.
struct RuntimeOperand {
  int arg;
  graph::ValueId value;
  dnnl::memory::desc md;
};

// (plugin/post_ops_attr.hpp's apply_chain makes the chain oneDNN post-ops.)

// Whether an int8 layer as given can run: nullopt, or why not.
using QuantizedCheck =
    std::function<std::optional<std::string>(const graph::Graph&, const graph::Node&)>;

// MatMuls of two run-time rank-4 tensors, f32 ones and int8 ones
// (QuantizedMatMul), take the Transposes around them where oneDNN 2.6's
// brgemm matmul reads and writes those layouts by strides (matmul_utils: a
// as acbd, b as acbd or adbc, the product as acbd): attention's
// Transpose(q, 0 2 1 3), Transpose(k, 0 2 3 1), Transpose(v, 0 2 1 3) and the
// Transpose(0 2 1 3) after P x V. Each Transpose taken must have the MatMul
// as its only reader. The one after it is taken only when no post-op reads
// another tensor (f32: no chain in `chains`; int8: no binary or sum step).
// An int8 layer takes them only where `accepts` passes it as it would then
// run (a kernel of oneDNN's own, not its reference). Sets MatMulAttrs::perm_*
// (int8: in QuantizedLayerAttrs::geometry); a line per MatMul to `log`.
// Returns the operands' Transposes taken (the one after a product leaves no
// value behind: the MatMul writes its output).
std::vector<AbsorbedTranspose> absorb_matmul_transposes(
    graph::Graph& g, const std::unordered_map<std::uint32_t, F32Chain>& chains,
    const QuantizedCheck& accepts, std::vector<std::string>& log);

// "hardswish; binary_mul(per_channel); ..." for dumps.
std::string describe(const F32Chain& chain);

}  // namespace qfuse::plugin
