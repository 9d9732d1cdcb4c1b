// qfuse post-ops composer: reduces the chain of basic operations that follows
// one convolution / fully-connected / deconvolution accumulator to oneDNN
// output scales, a destination zero point and post-ops.
//
// Public API
//   PostOpChain (post_op_chain.hpp)   the input: channels, destination type,
//                                     steps (Scale, Shift, Round, Clip, Eltwise,
//                                     Sum, Binary, FakeQuantize)
//   ComposeResult compose(chain, options)
//                                     rewrites the chain with the rules of
//                                     rules.hpp until none applies; returns a
//                                     PostOpsPlan, or no plan and a reason
//   PostOpsPlan (post_ops_plan.hpp)   the backend-neutral result, with the
//                                     rules that produced it
//   The plugin (plugin/post_ops_attr.hpp) turns a plan into oneDNN 2.x
//   attributes and the arguments that binary post-ops read.
//
// Guarantees
//   - Every rewrite keeps the chain's value up to f32 rounding; a plan never
//     computes something else. The exceptions are opt-in (ComposeOptions).
//   - For s8/u8 destinations the fused result equals the step-by-step f32
//     evaluation, or is one LSB off where a value sits on (or within f32
//     rounding of) a .5 tie.
//   - A chain that oneDNN 2.6 cannot express gives no plan and a reason; the
//     caller then runs the steps unfused. compose() does not throw for any
//     input chain.
//
// Rounding is half to even everywhere (Round, eltwise_round, the s8/u8 store).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "composer/post_op_chain.hpp"
#include "composer/post_ops_plan.hpp"

namespace qfuse::composer {

struct ComposeOptions {
  // Drop a round that sits inside a residual block (round -> sum -> round),
  // as the legacy int8 pipelines did. Changes results by up to half a
  // quantum of the first quantization, so it is off unless asked for.
  bool allow_residual_round_drop = false;
  // The relative error bound of the output scales' fixed-point form
  // (PostOpsPlan::fixed_output_scales, NEMO's eta).
  double fixed_point_eta = kDefaultFixedPointEta;
};

struct ComposeResult {
  std::optional<PostOpsPlan> plan;  // set when the chain fuses
  std::string reason;               // why it does not, when plan is empty
  std::vector<AppliedRule> applied_rules;

  bool fused() const { return plan.has_value(); }
};

ComposeResult compose(const PostOpChain& chain, const ComposeOptions& options = {});

}  // namespace qfuse::composer
