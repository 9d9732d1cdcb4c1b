// Rounding ties inside a fused chain.
//
// A plan with a rounding point before its last one (a FakeQuantize followed by
// more arithmetic and another rounding) can meet an exact .5 tie there: the
// input of that rounding takes a value on a tie for some accumulator or some
// code of the previous rounding point (e.g. the 16-level grid value 3.5
// entering a 2-level FakeQuantize on [0, 7]). The unfused chain computes the
// tie exactly and rounds it half to even; the fused primitive computes the
// same value from folded f32 constants (0.50000003) and may round it the other
// way. One step there moves the output by as many codes as the arithmetic
// after it scales a step to, 7 in that example.
//
// rounding_tie_hazard() looks for such ties in the plan, evaluated in double:
// - for the first rounding point, over accumulators in [-1024, 1024]: ties that
//   recur at least once in 256 accumulators (8 hits there);
// - for a later one, over every code the previous rounding point can write
//   (its input's range, from the clamps; up to 65536 codes; codes in
//   [-1024, 1024] when that input is not clamped before the rounding),
// within f32 noise of a tie (2^-20 relative). For each it evaluates the rest
// of the plan with the tie rounded either way; where the two outputs differ
// by more than one code, it says where, and the composer refuses the chain
// (the plugin then runs it unfused, exactly). Ties rarer than that, and near
// ties f32 cannot tell from ties, remain: the contract is one LSB away from
// them, and a step of the coarser grid at them.
#pragma once

#include <optional>
#include <string>

#include "composer/post_ops_plan.hpp"

namespace qfuse::composer {

std::optional<std::string> rounding_tie_hazard(const PostOpsPlan& plan);

}  // namespace qfuse::composer
