// FakeQuantize as quantize + dequantize (see post_op_chain.hpp for its
// definition). With L = levels:
//   Si = (ih - il) / (L - 1)   Zi = -il / Si
//   So = (oh - ol) / (L - 1)   Zo = -ol / So
//   q = clamp(round_half_to_even(x / Si + Zi), 0, L - 1);  y = (q - Zo) * So
// For il < x <= ih the first line is exactly the definition's
// round((x - il) / (ih - il) * (L - 1)); outside that range the clamp gives
// q = 0 (-> ol) or q = L - 1 (-> oh), as the definition does.
//
// The scalar definitions every evaluator uses (the unfused runtime, weight
// quantization, lookup tables, the quantizing Convert) are here too:
// quantize_linear / dequantize_linear are ONNX's QuantizeLinear and
// DequantizeLinear, fake_quantize_level is the range definition.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "composer/post_op_chain.hpp"

namespace qfuse::composer {

// ONNX QuantizeLinear on one value: saturate(round_half_to_even(x / scale) +
// zero_point) onto [lo, hi], the division in f32 (ONNX's reference and ONNX
// Runtime compute it so; a quotient recomputed in double, or from ranges,
// can fall on the other side of a tie: PyTorch's symmetric weights sit on
// w / s = +-127.5 exactly). The quotient is clamped to [lo - zp, hi - zp]
// before rounding, which gives the same code (the bounds are integers) and
// sends NaN to lo, as ONNX Runtime's kernels do. Rounds half to even in the
// default floating-point environment.
inline std::int32_t quantize_linear(float x, float scale, std::int32_t zero_point, std::int32_t lo,
                                    std::int32_t hi) {
  float q = x / scale;
  const auto qlo = static_cast<float>(lo - zero_point), qhi = static_cast<float>(hi - zero_point);
  q = q > qlo ? q : qlo;  // NaN -> qlo
  q = q < qhi ? q : qhi;
  return static_cast<std::int32_t>(std::nearbyint(q)) + zero_point;
}

// ONNX DequantizeLinear on one value: (q - zero_point) * scale in f32.
inline float dequantize_linear(std::int32_t q, std::int32_t zero_point, float scale) {
  return static_cast<float>(q - zero_point) * scale;
}

// The Dequantize op on one code (graph/ops.hpp DequantizeAttrs): (q -
// zero_point) * scale, the subtraction and the product each rounded to f32.
// For an integer zero point and |q - zero_point| < 2^24 the subtraction is
// exact and this is dequantize_linear; a split FakeQuantize's fractional
// zero point rounds there as the unfused Subtract does.
inline float dequantize(float q, float zero_point, float scale) {
  const float centred = q - zero_point;
  return centred * scale;
}

// ONNX's DynamicQuantizeLinear grid for a tensor whose values lie in
// [min, max] (u8 codes): the range is widened to hold 0, then
//   scale = (max - min) / 255 (1 when max == min, all zeros),
//   zero_point = round_half_to_even(clamp(0 - min / scale, 0, 255)),
// all in f32, as ONNX Runtime's kernel computes it (ONNX's reference agrees
// except on the all-zero tensor, where it has no scale; every code is 0
// there either way). The codes are then quantize_linear(x, scale,
// zero_point, 0, 255).
struct DynamicGrid {
  float scale = 1.0f;
  std::int32_t zero_point = 0;
};
inline DynamicGrid dynamic_grid(float min, float max) {
  min = min < 0.0f ? min : 0.0f;
  max = max > 0.0f ? max : 0.0f;
  DynamicGrid g;
  g.scale = max == min ? 1.0f : (max - min) / 255.0f;
  float zp = 0.0f - min / g.scale;
  zp = zp > 0.0f ? zp : 0.0f;
  zp = zp < 255.0f ? zp : 255.0f;
  g.zero_point = static_cast<std::int32_t>(std::nearbyint(zp));
  return g;
}

// FakeQuantize's level by the range definition, in double: 0 for
// x <= min(il, ih), `steps` = L - 1 for x > max(il, ih), else
// round_half_to_even((x - il) * steps / (ih - il)). Multiplying before
// dividing keeps values exactly on a tie exact.
inline double fake_quantize_level(double x, double il, double ih, double steps) {
  if (x <= (il < ih ? il : ih)) return 0.0;
  if (x > (il < ih ? ih : il)) return steps;
  return std::nearbyint((x - il) * steps / (ih - il));
}

// The quantizing Convert's level (FakeQuantize onto levels 0 .. steps over
// [il, il + range]): clamp((x - il) * steps / range, 0, steps) rounded half
// to even, in double. The clamp comes before rounding and sends NaN to
// `steps` (each comparison keeps its second operand, as SSE's minpd does);
// for every other x it equals fake_quantize_level.
inline double saturated_level(double x, double il, double range, double steps) {
  double t = (x - il) * steps / range;
  t = t < steps ? t : steps;  // NaN -> steps
  t = t > 0.0 ? t : 0.0;
  return std::nearbyint(t);
}

// Convert to a u8 / s8 code in [lo, lo + 255]: rounded half to even and
// saturated; NaN lands on the top, as saturated_level's does.
inline double convert_to_code(double x, double lo) {
  if (std::isnan(x)) return lo + 255.0;
  const double q = std::nearbyint(x);
  return q < lo ? lo : q > lo + 255.0 ? lo + 255.0 : q;
}

// The output of level `level` (0 .. steps) by the range definition.
inline double fake_quantize_output(double level, double ol, double oh, double steps) {
  return level * (oh - ol) / steps + ol;
}

// FakeQuantize's output by the range definition, in double: ol for
// x <= min(il, ih), oh for x > max(il, ih) (exactly, not through the level),
// else level * (oh - ol) / steps + ol.
inline double fake_quantize_value(double x, double il, double ih, double ol, double oh,
                                  double steps) {
  if (x <= (il < ih ? il : ih)) return ol;
  if (x > (il < ih ? ih : il)) return oh;
  return fake_quantize_output(fake_quantize_level(x, il, ih, steps), ol, oh, steps);
}

// Per-tensor parameters of one channel, in double so that Zi of a tuned FQ
// (il a multiple of Si) comes out as an exact integer.
struct FakeQuantizeScales {
  double input_scale;   // Si
  double input_zero;    // Zi
  double output_scale;  // So
  double output_zero;   // Zo (infinite when So = 0)
};

constexpr FakeQuantizeScales fake_quantize_scales(double il, double ih, double ol, double oh,
                                                  int levels) {
  const double steps = static_cast<double>(levels - 1);
  const double si = (ih - il) / steps;
  const double so = (oh - ol) / steps;
  return {si, -il * steps / (ih - il), so, so == 0.0 ? 0.0 : -ol / so};
}

// The FQ as the chain crop -> x * input_scale + input_shift -> round ->
// x * output_scale + output_shift, vectors of size 1 or channels:
//   crop = [il, ih], input_scale = 1/Si, input_shift = Zi,
//   output_scale = So, output_shift = -Zo * So = ol.
struct FakeQuantizeAffine {
  std::vector<float> crop_low;
  std::vector<float> crop_high;
  std::vector<float> input_scale;
  std::vector<float> input_shift;
  std::vector<float> output_scale;
  std::vector<float> output_shift;
};

// Why `fq` cannot be expressed as the affine chain above, or nullopt when it
// can: levels < 2, sizes other than 1 or channels, non-finite values, an
// empty input range (il == ih, a step function) or an inverted one (il > ih,
// which the clamp form does not describe).
std::optional<std::string> fake_quantize_unsupported_reason(const FakeQuantize& fq, int channels);
// Why a Quantize step has no defined result (scales that are not positive
// finite f32 with a finite reciprocal, zero points that are not integers,
// sizes other than 1 or `channels`, lo > hi), or nullopt.
std::optional<std::string> quantize_unsupported_reason(const Quantize& q, int channels);

// Precondition: fake_quantize_unsupported_reason(fq, channels) is nullopt.
FakeQuantizeAffine decompose_fake_quantize(const FakeQuantize& fq);

}  // namespace qfuse::composer
