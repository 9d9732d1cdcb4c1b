// The one place that builds oneDNN 2.x primitive attributes: a PostOpsPlan
// (an int8 layer's composed chain) as output scales, destination zero point
// and post-ops, with the memory arguments its binary post-ops read; an f32
// layer's absorbed chain (F32Chain) as post-ops; an int8 layer's run-time
// output scales and source / weights zero points; a requantizing pool's and
// a quantizing softmax's scale; the user scratchpad every primitive takes. A
// oneDNN 3.x backend (per-argument scales) replaces this file only.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <unordered_map>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "composer/post_ops_plan.hpp"

namespace qfuse::plugin {

struct F32Chain;
struct RuntimeOperand;

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

// Attributes whose scratchpad the caller passes at execution
// (DNNL_ARG_SCRATCHPAD: the request's arena), as every primitive qfuse runs
// takes it; use_user_scratchpad sets that on `attr`.
dnnl::primitive_attr user_scratchpad_attr();
void use_user_scratchpad(dnnl::primitive_attr& attr);

// An int8 layer's quantization beyond its plan: output scales given at run
// time (a dynamic layer: `runtime_scales_mask`, 0 per tensor), and the
// source and weights zero points (none when 0).
void set_layer_quantization(dnnl::primitive_attr& attr, std::optional<int> runtime_scales_mask,
                            std::int32_t src_zero_point, std::int32_t weights_zero_point);

// User scratchpad and, unless it is the identity, scale * x + shift as an
// eltwise post-op (an int8 pool writing the next grid).
dnnl::primitive_attr affine_attr(float scale, float shift);
// User scratchpad and one output scale (a softmax writing codes).
dnnl::primitive_attr output_scale_attr(float scale);

// An f32 layer's absorbed chain as oneDNN post-ops on `attr`, for a
// destination of `channels` channels on axis `channel_axis` of `rank` dims;
// returns the constant binary operands with their execution argument ids,
// and adds the run-time ones to `runtime` (which may be null when the chain
// has none).
std::vector<std::pair<int, dnnl::memory>> apply_chain(const F32Chain& chain,
                                                      dnnl::primitive_attr& attr,
                                                      const dnnl::engine& engine,
                                                      std::int64_t channels, int channel_axis,
                                                      int rank,
                                                      std::vector<RuntimeOperand>* runtime = nullptr);

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
