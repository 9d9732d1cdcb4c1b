// Integer-only execution of a fused layer: the composer's plan rewritten so
// that everything between the int32 accumulator and the 8-bit output is
// integer arithmetic (fixed-point multipliers, rounding right shifts, integer
// clamps), as an integer-only runtime or accelerator applies it.
//
// A plan is a chain of affine steps, clamps and rounding points. Clamps
// commute with monotone affine maps and with rounding
// (round(clamp(v, L, H)) = clamp(round(v), round(L), round(H))), so the chain
// between two rounding points reduces to one affine form and one clamp, and
// each rounding point becomes one stage:
//
//   stage 0:  x1 = clamp(rshift((acc + bias[c]) * M0[c] + K[c], n[c]), lo[c], hi[c])
//   stage k:  xk = clamp(rshift(x * M0[c] + res * R[c] + K[c], n[c]), lo[c], hi[c])
//
// with rshift(p, n) = p * 2^-n rounded half to even (as the float path and
// ONNX QuantizeLinear round); `res` is the residual a sum post-op reads (raw
// 8-bit codes) in the stage that adds it. Stage 0's offsets (the layer's
// bias, a folded batch norm's shift, a zero point) become an int32 bias in
// accumulator units (the pre-quantized form's Add(int32 bias)) plus the
// remainder, below half an accumulator unit, as K in 2^-n units: rounding
// that remainder away instead moved 0.01-0.5% of a layer's codes and 12% of
// the bundled CNN's logits by one quantum. The last stage writes the 8-bit
// output (the type's range is part of its clamp); an f32 output dequantizes
// the last integer in float: y = clamp(A[c] * x + C * res + B[c], L[c], H[c]).
//
// Plans with anything else (a non-monotone or transcendental activation, a
// binary post-op reading a tensor, two residuals in one stage) have no
// integer form: derive_integer_plan says why.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "composer/fixed_point.hpp"
#include "composer/post_ops_plan.hpp"

namespace qfuse::composer {

struct IntegerStage {
  // One value, or one per channel, each.
  std::vector<std::int64_t> multiplier;  // M0 (of the stage's input)
  std::vector<int> shift;                // n
  std::vector<std::int64_t> offset;      // K (stage k > 0), in 2^-n units
  std::vector<std::int64_t> residual_multiplier;  // R; empty: no residual here
  std::vector<std::int32_t> lo, hi;
  double relative_error = 0.0;  // largest |M0 2^-n - M| / |M| of the stage
};

// The output of an f32 layer: y = clamp(scale * x + residual_scale * res + shift, lo, hi).
struct IntegerDequantize {
  std::vector<float> scale, shift, lo, hi;  // one, or one per channel
  float residual_scale = 0.0f;
};

struct IntegerPlan {
  int channels = 1;
  DataType dst_type = DataType::u8;
  std::vector<std::int32_t> bias;  // stage 0's, per channel (accumulator units)
  std::vector<IntegerStage> stages;
  std::optional<int> residual_input;  // the chain's external input a stage reads
  DataType residual_type = DataType::u8;
  std::optional<IntegerDequantize> dequantize;  // f32 output
};

struct IntegerPlanResult {
  std::optional<IntegerPlan> plan;
  std::string reason;  // why there is none
};

// `bias`: the layer's bias in accumulator units (added before the output
// scales), empty for none. `eta`: the multipliers' relative error bound.
IntegerPlanResult derive_integer_plan(const PostOpsPlan& plan, const std::vector<float>& bias,
                                      double eta = kDefaultFixedPointEta);

// p * 2^-n rounded half to even (n in [0, 62]; arithmetic shift).
inline std::int64_t rshift_half_even(std::int64_t p, int n) {
  if (n == 0) return p;
  return (p + (std::int64_t{1} << (n - 1)) - 1 + ((p >> n) & 1)) >> n;
}

// Reference evaluation of one element of channel c (tests; the runtime's
// kernels are vectorized forms of the same arithmetic). `residual` is the
// residual's raw code when the plan has one. Returns the 8-bit code, or for
// an f32 layer the float value.
double evaluate_integer_plan(const IntegerPlan& plan, std::int32_t acc, int c,
                             std::int32_t residual = 0);

std::string describe(const IntegerPlan& plan);

}  // namespace qfuse::composer
