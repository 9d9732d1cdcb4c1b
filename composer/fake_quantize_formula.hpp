// FakeQuantize as quantize + dequantize (see post_op_chain.hpp for its
// definition). With L = levels:
//   Si = (ih - il) / (L - 1)   Zi = -il / Si
//   So = (oh - ol) / (L - 1)   Zo = -ol / So
//   q = clamp(round_half_to_even(x / Si + Zi), 0, L - 1);  y = (q - Zo) * So
// For il < x <= ih the first line is exactly the definition's
// round((x - il) / (ih - il) * (L - 1)); outside that range the clamp gives
// q = 0 (-> ol) or q = L - 1 (-> oh), as the definition does.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "composer/post_op_chain.hpp"

namespace qfuse::composer {

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

// Precondition: fake_quantize_unsupported_reason(fq, channels) is nullopt.
FakeQuantizeAffine decompose_fake_quantize(const FakeQuantize& fq);

}  // namespace qfuse::composer
