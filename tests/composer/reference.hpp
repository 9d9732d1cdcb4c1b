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

// Which rounding points may resolve a near tie either way.
enum class TieBranching {
  // Every one (Round, round, FakeQuantize, the s8/u8 store).
  every_rounding_point,
  // Only where the unfused path itself knows the value to f32 precision
  // only: the first rounding point, which reads the accumulator (the unfused
  // convolution sums in f32), the s8/u8 store, and for an f32 output its
  // last rounding point (the output's own grid). Later rounding points read
  // exact codes and must round as the chain does.
  accumulator_and_output,
};

// Every result the step-by-step evaluation can give when the rounding points
// `branching` allows round a near-.5 tie either way: the values a composed
// plan may legitimately produce. One set per element, [pixel][channel].
std::vector<std::vector<float>> evaluate_tie_outcomes(
    const PostOpChain& chain, const CaseData& data,
    TieBranching branching = TieBranching::every_rounding_point);

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
