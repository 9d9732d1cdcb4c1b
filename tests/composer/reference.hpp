// Test helpers: a naive step-by-step f32 evaluation of a post-op chain
// (written from the definitions, independent of the composer), and a oneDNN
// int8 primitive whose accumulator the test chooses exactly.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "composer/post_op_chain.hpp"
#include "composer/post_ops_plan.hpp"

namespace qfuse::composer::testing {

// Accumulators and external tensors of one test case, row-major
// [pixel][channel] (pixel = n for inner product, (n, h, w) for convolution).
struct CaseData {
  int pixels = 0;
  int channels = 0;
  std::vector<std::int32_t> acc;
  std::vector<float> residual;                 // the Sum input, as stored (integers for s8/u8)
  std::map<int, std::vector<float>> binaries;  // per channel (size C) or full (pixels * C)
};

struct Reference {
  std::vector<float> values;
  // The element passed a rounding point (Round, FakeQuantize, s8/u8 store)
  // within f32 noise of a .5 tie, where a 1-LSB difference is legitimate.
  std::vector<bool> near_tie;
};

Reference evaluate_reference(const PostOpChain& chain, const CaseData& data);

// Every result the step-by-step evaluation can give when each rounding point
// (Round, round, FakeQuantize, the s8/u8 store) whose input sits within f32
// noise of a .5 tie rounds either way: the values a composed plan may
// legitimately produce. One set per element, [pixel][channel].
std::vector<std::vector<float>> evaluate_tie_outcomes(const PostOpChain& chain,
                                                      const CaseData& data);

enum class Anchor { inner_product, convolution_1x1 };

// Runs a u8 x s8 primitive whose s32 accumulators equal data.acc (|acc| <=
// 16383) with the plan's attributes; returns the destination as floats.
std::vector<float> run_fused(const PostOpsPlan& plan, const CaseData& data, Anchor anchor);

struct Comparison {
  int compared = 0;
  int one_lsb = 0;  // differences of one LSB (or one quantum for f32) at ties
  int failures = 0;
  std::string first_failure;
};

// s8/u8: equal, or one off where the reference is near a tie.
// f32: within rel_tolerance * max(1, |ref|), or within tie_quantum where the
// reference is near a tie.
Comparison compare(const Reference& ref, const std::vector<float>& fused, DataType dst_type,
                   float rel_tolerance, float tie_quantum);

}  // namespace qfuse::composer::testing
