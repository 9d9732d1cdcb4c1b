// The output of the composer: what a primitive must do after its accumulator,
// in a backend-neutral form. plugin/post_ops_attr.hpp turns it into oneDNN 2.x attributes;
// a oneDNN 3.x backend (per-argument scales) would read the same plan.
//
// Evaluation order, per destination element of channel c:
//   y = acc * output_scales[c or 0]
//   y = post_ops[0](y); y = post_ops[1](y); ...
//   y = y + dst_zero_point (if any)
//   dst = y for f32, saturate(round_half_to_even(y)) for s8/u8
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "composer/fixed_point.hpp"
#include "composer/post_op_chain.hpp"

namespace qfuse::composer {

// scale * alg(x, alpha, beta)
struct EltwisePostOp {
  EltwiseAlg alg = EltwiseAlg::linear;
  float scale = 1.0F;
  float alpha = 0.0F;
  float beta = 0.0F;
};

// Values known when composing (a per-channel vector the plan owns).
struct ConstantTensor {
  std::vector<float> values;
};

// A tensor supplied at execution time: the chain's external input `input`.
struct ExternalTensor {
  int input = 0;
  DataType data_type = DataType::f32;
};

// alg(x, tensor)
struct BinaryPostOp {
  BinaryAlg alg = BinaryAlg::add;
  Broadcast broadcast = Broadcast::per_channel;
  std::variant<ConstantTensor, ExternalTensor> tensor;
};

// x + scale * residual, the residual read from the destination buffer as
// `data_type` (the chain's external input `input`).
struct SumPostOp {
  int input = 0;
  float scale = 1.0F;
  DataType data_type = DataType::f32;
};

using PostOp = std::variant<EltwisePostOp, BinaryPostOp, SumPostOp>;

struct AppliedRule {
  std::string rule;
  std::string detail;
};

enum class ScalesMask { common, per_channel };

struct PostOpsPlan {
  int channels = 1;
  DataType dst_type = DataType::f32;
  // Empty means "no output scales" (equivalent to 1).
  std::vector<float> output_scales;
  ScalesMask output_scales_mask = ScalesMask::common;
  std::optional<std::int32_t> dst_zero_point;
  std::vector<PostOp> post_ops;
  std::vector<AppliedRule> applied_rules;
  // The output scales as M0 * 2^-n (one per scale; one for "none"), for
  // integer-only requantization (fixed_point.hpp). Empty when a scale needs
  // more than 31 bits.
  std::vector<FixedPoint> fixed_output_scales;
};

// One line, e.g. "eltwise_relu; binary_mul(per_channel, constant[4]); sum(0.5, s8)".
std::string describe(const PostOp& op);
std::string describe(const std::vector<PostOp>& ops);
std::string describe(const PostOpsPlan& plan);
std::string describe(const Step& step);
std::string describe(const PostOpChain& chain);
std::string to_string(EltwiseAlg alg);
std::string to_string(BinaryAlg alg);
std::string to_string(DataType type);

}  // namespace qfuse::composer
