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
// rounding_tie_hazard() looks for such ties in the plan, evaluated in double
// within f32 noise of a tie (2^-20 of the largest intermediate):
// - at a later rounding point, whose input is the previous one's codes
//   (exact in both paths): every code it can write (from the clamps before
//   it, up to 65536), or the codes in [-2048, 2048] when everything from
//   them to the output is monotone and saturated beyond; and every residual
//   code when a tensor is read in between. Any tie there that moves the
//   output by more than one code is refused. When the values reaching it are
//   too many to check, the chain is refused if a tie anywhere in its range
//   could move the output by more than one code.
// - at the first rounding point, over accumulators in [-1024, 1024]: ties
//   that recur (8 or more hits), such as every accumulator ending in 5 under
//   a scale of 0.1. The unfused path knows that point's input, a sum of f32
//   products, to f32 precision only, so a lone tie there may round either
//   way in both paths.
// What a tie moves is measured with every later rounding (an eltwise round,
// the s8/u8 store) that sits within noise of a tie resolved either way too
// (1e-4 relative after a transcendental post-op, which oneDNN approximates):
// a one-code move followed by a store that f32 puts on the other side of
// its own tie is two. Tensors read after the rounding are probed on their
// own: a sum's residual and a binary add's tensor at codes across their
// range, a min or max at values where it changes nothing; a tensor multiply
// can scale the move to any size, so a tie before one is always refused.
// A tie that f32 computes exactly on both paths (power-of-two scales) is not
// a hazard: both round it half to even. The composer refuses a chain with a
// hazard, and the plugin fuses the longest prefix of it that has none.
#pragma once

#include <optional>
#include <string>

#include "composer/post_ops_plan.hpp"

namespace qfuse::composer {

// The hazard of the lowest channel that has one.
std::optional<std::string> rounding_tie_hazard(const PostOpsPlan& plan);

}  // namespace qfuse::composer
