// The composer's rewrite rules and the one table that orders them.
//
// A rule looks at the work state (output scales + a list of items, each a
// chain step still to be mapped or an already planned post-op), rewrites the
// first place it matches and returns a short detail for the log, or returns
// nullopt and leaves the state untouched. Rules never call each other; the
// driver in composer.cpp applies the first rule of the table that matches,
// records it and starts again from the top until no rule matches.
//
// Table order matters only in one way: the simplifying rules come before the
// lowering rules (step -> post-op), so a step is lowered only once nothing
// can fold it any more.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "composer/post_op_chain.hpp"
#include "composer/post_ops_plan.hpp"

namespace qfuse::composer {

using Item = std::variant<Scale, Shift, Round, Clip, Eltwise, Sum, Binary, FakeQuantize, Quantize,
                          EltwisePostOp, BinaryPostOp, SumPostOp>;

struct Work {
  int channels = 1;
  DataType dst_type = DataType::f32;
  bool allow_residual_round_drop = false;
  AnchorKind anchor = AnchorKind::convolution;
  std::vector<float> output_scales;  // empty: none yet
  std::optional<std::int32_t> dst_zero_point;
  std::vector<Item> items;
};

using RuleFunction = std::optional<std::string> (*)(Work&);

struct Rule {
  std::string_view name;
  RuleFunction apply;
};

// All rules in application order.
std::span<const Rule> rule_table();

}  // namespace qfuse::composer
