// The one place that speaks oneDNN 2.x post-op attributes: turns a PostOpsPlan into a
// dnnl::primitive_attr and lists the memory arguments its binary post-ops
// read. A oneDNN 3.x backend (per-argument scales) replaces this file only.
#pragma once

#include <optional>
#include <unordered_map>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "composer/post_ops_plan.hpp"

namespace qfuse::plugin {

dnnl::memory::data_type to_dnnl(composer::DataType type);
dnnl::algorithm to_dnnl(composer::EltwiseAlg alg);
dnnl::algorithm to_dnnl(composer::BinaryAlg alg);

// How a binary post-op reads a tensor of the destination's shape: dense in
// {N, C, spatial...} order, or channels last (the layout of int8
// convolution destinations; oneDNN's jit kernels want it to match).
enum class FullTensorLayout { plain, channels_last };

// Output scales (mask 0, or 1 << channel_axis for per output channel),
// destination zero point and post-ops. `dst_dims` is the destination shape,
// its output channels at `channel_axis` ({N, C, spatial...}: 1; a batched
// matmul's [..., M, N]: the last); binary post-ops need it for their tensor
// descriptors.
// Throws dnnl::error if oneDNN rejects an attribute (the caller then runs
// the chain unfused).
dnnl::primitive_attr make_primitive_attr(const composer::PostOpsPlan& plan,
                                         const dnnl::memory::dims& dst_dims,
                                         FullTensorLayout full = FullTensorLayout::plain,
                                         std::size_t channel_axis = 1);

// The tensor binary post-op number `post_op_index` reads, passed at execution
// as argument `arg` (DNNL_ARG_ATTR_MULTIPLE_POST_OP(i) | DNNL_ARG_SRC_1).
// Constant tensors (owned by the plan) carry their values; external ones name
// the chain's input the caller must bind.
struct BinaryPostOpArg {
  int arg = 0;
  int post_op_index = 0;
  dnnl::memory::desc desc;
  std::optional<int> external_input;
  std::vector<float> constant_values;
};

std::vector<BinaryPostOpArg> binary_post_op_args(const composer::PostOpsPlan& plan,
                                                 const dnnl::memory::dims& dst_dims,
                                                 FullTensorLayout full = FullTensorLayout::plain,
                                                 std::size_t channel_axis = 1);

// Memory objects holding the constant binary tensors, keyed by argument.
std::unordered_map<int, dnnl::memory> make_constant_post_op_memory(
    const std::vector<BinaryPostOpArg>& args, const dnnl::engine& engine);

}  // namespace qfuse::plugin
