#pragma once
// Internal: f32 layers that absorb the elementwise ops after them as oneDNN
// post-ops.
//
// A Convolution or FullyConnected on f32 data with constant weights takes the
// chain of unary ops and of binary ops with a per-channel or scalar constant
// that follows its output when nothing else reads the values in between:
// PP-LCNet's conv -> HSwish -> x * a + b becomes one primitive instead of four.
// The post-ops run the same oneDNN algorithms the separate ops would.

#include <string>
#include <unordered_map>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "graph/graph.hpp"

namespace qfuse::plugin {

struct F32PostOp {
  bool binary = false;
  dnnl::algorithm alg = dnnl::algorithm::undef;
  float alpha = 0.0f, beta = 0.0f;  // eltwise
  std::vector<float> values;        // binary: one per output channel, or one
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

// The chain as oneDNN post-ops on `attr` for a destination of `channels`
// channels on axis `channel_axis` of `rank` dims; returns the binary operands
// with their execution argument ids.
std::vector<std::pair<int, dnnl::memory>> apply_chain(const F32Chain& chain,
                                                      dnnl::primitive_attr& attr,
                                                      const dnnl::engine& engine,
                                                      std::int64_t channels, int channel_axis,
                                                      int rank);

// "hardswish; binary_mul(per_channel); ..." for dumps.
std::string describe(const F32Chain& chain);

}  // namespace qfuse::plugin
