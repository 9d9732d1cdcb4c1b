#include "plugin/post_ops_attr.hpp"

#include "plugin/dnnl_utils.hpp"
#include "plugin/f32_post_ops.hpp"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

namespace qfuse::plugin {
using namespace composer;  // the plan's types, in this file only

namespace {


dnnl::memory::desc dense_desc(const dnnl::memory::dims& dims, dnnl::memory::data_type type) {
  dnnl::memory::dims strides(dims.size(), 1);
  for (std::size_t i = dims.size(); i-- > 1;) {
    strides[i - 1] = strides[i] * dims[i];
  }
  return dnnl::memory::desc(dims, type, strides);
}

// A per-channel constant whose values are all equal: what the composer writes
// for a repeated eltwise (see repeated_eltwise_is_binary). It goes to oneDNN
// as a scalar operand, the same arithmetic: every kernel loads one value
// instead of a vector per channel group (PP-OCRv4 recognizer 1.71 -> 1.59 ms,
// MobileNetV3-large 0.315 -> 0.278 ms at 2 threads), and on a destination
// with one element per channel ([1, C, 1, 1]: a squeeze-excitation 1x1
// convolution) oneDNN 2.6 would read a [1, C, 1, 1] operand as the whole
// tensor (no_broadcast, src/common/broadcast_strategy.cpp), which only
// ref_int8 takes.
bool equal_values(const BinaryPostOp& op) {
  const auto* c = std::get_if<ConstantTensor>(&op.tensor);
  if (op.broadcast != Broadcast::per_channel || c == nullptr || c->values.empty()) return false;
  return std::all_of(c->values.begin(), c->values.end(),
                     [&c](float v) { return v == c->values.front(); });
}

dnnl::memory::desc binary_desc(const BinaryPostOp& op, const dnnl::memory::dims& dst_dims,
                               FullTensorLayout full, std::size_t channel_axis) {
  if (equal_values(op)) {
    return dense_desc(dnnl::memory::dims(dst_dims.size(), 1), dnnl::memory::data_type::f32);
  }
  if (op.broadcast == Broadcast::per_channel) {
    dnnl::memory::dims dims(dst_dims.size(), 1);
    dims[channel_axis] = dst_dims[channel_axis];
    const auto* external = std::get_if<ExternalTensor>(&op.tensor);
    return dense_desc(dims, external != nullptr ? to_dnnl(external->data_type)
                                                : dnnl::memory::data_type::f32);
  }
  const auto* external = std::get_if<ExternalTensor>(&op.tensor);
  const auto type = external != nullptr ? to_dnnl(external->data_type) : dnnl::memory::data_type::f32;
  if (full == FullTensorLayout::plain || dst_dims.size() < 3) return dense_desc(dst_dims, type);
  dnnl::memory::dims strides(dst_dims.size());
  const auto channels = dst_dims[1];
  dnnl::memory::dim s = channels;
  for (std::size_t i = dst_dims.size(); i-- > 2;) {
    strides[i] = s;
    s *= dst_dims[i];
  }
  strides[1] = 1;
  strides[0] = s;
  return dnnl::memory::desc(dst_dims, type, strides);
}

void require_channel_dim(const dnnl::memory::dims& dst_dims, int channels,
                         std::size_t channel_axis) {
  if (dst_dims.size() < 2 || channel_axis >= dst_dims.size() ||
      dst_dims[channel_axis] != channels) {
    throw std::invalid_argument("make_primitive_attr: destination dim " +
                                std::to_string(channel_axis) + " must be C = " +
                                std::to_string(channels));
  }
}

}  // namespace

dnnl::memory::data_type to_dnnl(DataType type) {
  switch (type) {
    case DataType::f32: return dnnl::memory::data_type::f32;
    case DataType::s8: return dnnl::memory::data_type::s8;
    case DataType::u8: return dnnl::memory::data_type::u8;
  }
  throw std::invalid_argument("to_dnnl: unknown data type");
}

dnnl::algorithm to_dnnl(EltwiseAlg alg) {
  using dnnl::algorithm;
  switch (alg) {
    case EltwiseAlg::relu: return algorithm::eltwise_relu;
    case EltwiseAlg::tanh: return algorithm::eltwise_tanh;
    case EltwiseAlg::elu: return algorithm::eltwise_elu;
    case EltwiseAlg::square: return algorithm::eltwise_square;
    case EltwiseAlg::abs: return algorithm::eltwise_abs;
    case EltwiseAlg::sqrt: return algorithm::eltwise_sqrt;
    case EltwiseAlg::linear: return algorithm::eltwise_linear;
    case EltwiseAlg::clip: return algorithm::eltwise_clip;
    case EltwiseAlg::logistic: return algorithm::eltwise_logistic;
    case EltwiseAlg::exp: return algorithm::eltwise_exp;
    case EltwiseAlg::gelu_tanh: return algorithm::eltwise_gelu_tanh;
    case EltwiseAlg::gelu_erf: return algorithm::eltwise_gelu_erf;
    case EltwiseAlg::log: return algorithm::eltwise_log;
    case EltwiseAlg::swish: return algorithm::eltwise_swish;
    case EltwiseAlg::hardswish: return algorithm::eltwise_hardswish;
    case EltwiseAlg::round: return algorithm::eltwise_round;
    case EltwiseAlg::mish: return algorithm::eltwise_mish;
    case EltwiseAlg::hsigmoid: break;  // compose() rewrites it; 2.6 has no such post-op
  }
  throw std::invalid_argument("to_dnnl: no oneDNN 2.6 eltwise for " + to_string(alg));
}

dnnl::algorithm to_dnnl(BinaryAlg alg) {
  using dnnl::algorithm;
  switch (alg) {
    case BinaryAlg::add: return algorithm::binary_add;
    case BinaryAlg::sub: return algorithm::binary_sub;
    case BinaryAlg::mul: return algorithm::binary_mul;
    case BinaryAlg::min: return algorithm::binary_min;
    case BinaryAlg::max: return algorithm::binary_max;
  }
  throw std::invalid_argument("to_dnnl: unknown binary algorithm");
}

dnnl::primitive_attr user_scratchpad_attr() {
  dnnl::primitive_attr attr;
  use_user_scratchpad(attr);
  return attr;
}

void use_user_scratchpad(dnnl::primitive_attr& attr) {
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
}

void set_layer_quantization(dnnl::primitive_attr& attr, std::optional<int> runtime_scales_mask,
                            std::int32_t src_zero_point, std::int32_t weights_zero_point) {
  if (runtime_scales_mask) attr.set_output_scales(*runtime_scales_mask, {DNNL_RUNTIME_F32_VAL});
  if (src_zero_point != 0) attr.set_zero_points(DNNL_ARG_SRC, 0, {src_zero_point});
  if (weights_zero_point != 0) attr.set_zero_points(DNNL_ARG_WEIGHTS, 0, {weights_zero_point});
}

dnnl::primitive_attr affine_attr(float scale, float shift) {
  dnnl::primitive_attr attr = user_scratchpad_attr();
  if (scale != 1.0f || shift != 0.0f) {
    dnnl::post_ops ops;
    ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_linear, scale, shift);
    attr.set_post_ops(ops);
  }
  return attr;
}

dnnl::primitive_attr output_scale_attr(float scale) {
  dnnl::primitive_attr attr = user_scratchpad_attr();
  attr.set_output_scales(0, {scale});
  return attr;
}

dnnl::primitive_attr make_primitive_attr(const PostOpsPlan& plan,
                                         const dnnl::memory::dims& dst_dims,
                                         FullTensorLayout full, std::size_t channel_axis) {
  require_channel_dim(dst_dims, plan.channels, channel_axis);
  dnnl::primitive_attr attr;
  if (!plan.output_scales.empty()) {
    attr.set_output_scales(
        plan.output_scales_mask == ScalesMask::per_channel ? 1 << channel_axis : 0,
        plan.output_scales);
  }
  if (plan.dst_zero_point) {
    attr.set_zero_points(DNNL_ARG_DST, 0, {*plan.dst_zero_point});
  }
  dnnl::post_ops ops;
  for (const PostOp& op : plan.post_ops) {
    if (const auto* e = std::get_if<EltwisePostOp>(&op)) {
      ops.append_eltwise(e->scale, to_dnnl(e->alg), e->alpha, e->beta);
    } else if (const auto* b = std::get_if<BinaryPostOp>(&op)) {
      ops.append_binary(to_dnnl(b->alg), binary_desc(*b, dst_dims, full, channel_axis));
    } else {
      const auto& s = std::get<SumPostOp>(op);
      // Same type as the destination: leave it implicit, which every
      // implementation accepts; otherwise reinterpret (same size, checked by
      // compose()).
      if (s.data_type == plan.dst_type) {
        ops.append_sum(s.scale);
      } else {
        ops.append_sum(s.scale, to_dnnl(s.data_type));
      }
    }
  }
  attr.set_post_ops(ops);
  return attr;
}

std::vector<BinaryPostOpArg> binary_post_op_args(const PostOpsPlan& plan,
                                                 const dnnl::memory::dims& dst_dims,
                                                 FullTensorLayout full, std::size_t channel_axis) {
  require_channel_dim(dst_dims, plan.channels, channel_axis);
  std::vector<BinaryPostOpArg> args;
  for (std::size_t i = 0; i < plan.post_ops.size(); ++i) {
    const auto* b = std::get_if<BinaryPostOp>(&plan.post_ops[i]);
    if (b == nullptr) {
      continue;
    }
    BinaryPostOpArg arg;
    arg.post_op_index = static_cast<int>(i);
    arg.arg = DNNL_ARG_ATTR_MULTIPLE_POST_OP(static_cast<int>(i)) | DNNL_ARG_SRC_1;
    arg.desc = binary_desc(*b, dst_dims, full, channel_axis);
    if (const auto* external = std::get_if<ExternalTensor>(&b->tensor)) {
      arg.external_input = external->input;
    } else {
      arg.constant_values = std::get<ConstantTensor>(b->tensor).values;
      if (equal_values(*b)) arg.constant_values.resize(1);
    }
    args.push_back(std::move(arg));
  }
  return args;
}

std::unordered_map<int, dnnl::memory> make_constant_post_op_memory(
    const std::vector<BinaryPostOpArg>& args, const dnnl::engine& engine) {
  std::unordered_map<int, dnnl::memory> memories;
  for (const BinaryPostOpArg& arg : args) {
    if (arg.external_input) {
      continue;
    }
    dnnl::memory memory(arg.desc, engine);
    if (arg.desc.get_size() != arg.constant_values.size() * sizeof(float)) {
      throw std::invalid_argument("make_constant_post_op_memory: tensor size mismatch");
    }
    std::memcpy(memory.get_data_handle(), arg.constant_values.data(), arg.desc.get_size());
    memories.emplace(arg.arg, std::move(memory));
  }
  return memories;
}

std::vector<std::pair<int, dnnl::memory>> apply_chain(const F32Chain& chain,
                                                      dnnl::primitive_attr& attr,
                                                      const dnnl::engine& engine,
                                                      std::int64_t channels, int channel_axis,
                                                      int rank,
                                                      std::vector<RuntimeOperand>* runtime) {
  dnnl::post_ops ops;
  std::vector<std::pair<int, dnnl::memory>> args;
  for (const F32PostOp& s : chain.steps) {
    if (!s.binary) {
      ops.append_eltwise(1.0f, s.alg, s.alpha, s.beta);
      continue;
    }
    dnnl::memory::dims dims(static_cast<std::size_t>(rank), 1);
    const bool per_channel = s.operand.valid() ? s.per_channel : s.values.size() != 1;
    dims[static_cast<std::size_t>(channel_axis)] = per_channel ? channels : 1;
    const dnnl::memory::desc md = plain_desc(dims, ElementType::f32);
    const int index = ops.len();
    ops.append_binary(s.alg, md);
    if (s.operand.valid()) {
      if (runtime == nullptr) throw std::logic_error("apply_chain: a run-time operand with nowhere to bind it");
      runtime->push_back({DNNL_ARG_ATTR_MULTIPLE_POST_OP(index) | DNNL_ARG_SRC_1, s.operand, md});
      continue;
    }
    dnnl::memory m(md, engine);
    std::copy(s.values.begin(), s.values.end(), static_cast<float*>(m.get_data_handle()));
    args.emplace_back(DNNL_ARG_ATTR_MULTIPLE_POST_OP(index) | DNNL_ARG_SRC_1, m);
  }
  attr.set_post_ops(ops);
  return args;
}

}  // namespace qfuse::plugin
