// The input of the composer: the chain of basic operations that follows the
// accumulator of one convolution, fully-connected or deconvolution primitive.
//
// Plain data on purpose (no oneDNN include), so that graph passes can build a
// chain without knowing the backend.
//
// Broadcasting convention for every per-channel vector in this file: size 1
// means one value for the whole tensor, size `channels` means one value per
// output channel (dimension 1 of the destination). Any other size is rejected
// by compose() with a reason.
#pragma once

#include <cstdint>
#include <variant>
#include <vector>

namespace qfuse::composer {

enum class DataType { f32, s8, u8 };

// Element-wise functions. The names follow oneDNN's eltwise vocabulary, except
// `hsigmoid`, which oneDNN 2.6 lacks and the composer rewrites into affine
// steps and a clip.
enum class EltwiseAlg {
  relu,  // x > 0 ? x : alpha * x (alpha = 0: relu, alpha > 0: leaky relu)
  tanh,
  elu,  // x > 0 ? x : alpha * (exp(x) - 1)
  square,
  abs,
  sqrt,
  linear,  // alpha * x + beta
  clip,    // min(max(x, alpha), beta)
  logistic,
  exp,
  gelu_tanh,
  gelu_erf,
  log,
  swish,  // x * logistic(alpha * x)
  hardswish,
  hsigmoid,  // min(max(x + 3, 0), 6) / 6
  round,     // half to even
  mish,
};

enum class BinaryAlg { add, sub, mul, min, max };

enum class Broadcast {
  per_channel,  // one value per output channel
  full,         // a tensor with the destination's shape
};

// x * values
struct Scale {
  std::vector<float> values;
};

// x + values
struct Shift {
  std::vector<float> values;
};

// round(x), half to even
struct Round {};

// min(max(x, lo), hi); lo and hi are each per tensor or per channel
struct Clip {
  std::vector<float> lo;
  std::vector<float> hi;
};

struct Eltwise {
  EltwiseAlg alg = EltwiseAlg::relu;
  float alpha = 0.0F;
  float beta = 0.0F;
};

// x + scale * residual. The residual is the external input `input`, stored
// with `data_type`; oneDNN reads it from the destination buffer, so the
// caller must place it there before execution.
struct Sum {
  int input = 0;
  float scale = 1.0F;
  DataType data_type = DataType::f32;
};

// alg(x, t) where t is the external input `input`.
struct Binary {
  BinaryAlg alg = BinaryAlg::add;
  int input = 0;
  Broadcast broadcast = Broadcast::per_channel;
  DataType data_type = DataType::f32;
};

// FakeQuantize(x, il, ih, ol, oh, levels) with the ranges per tensor or per
// channel:
//   x <= min(il, ih) -> ol;  x > max(il, ih) -> oh;
//   else round((x - il) / (ih - il) * (levels - 1)) / (levels - 1) * (oh - ol) + ol
// rounding half to even. compose() expands it into basic steps.
struct FakeQuantize {
  std::vector<float> input_low;
  std::vector<float> input_high;
  std::vector<float> output_low;
  std::vector<float> output_high;
  int levels = 256;
};

// ONNX's QuantizeLinear onto the codes [lo, hi]:
//   clip(round_half_to_even(x / scale) + zero_point, lo, hi)
// with scale and zero point per tensor or per channel (integer zero points).
// The result is the code itself; Shift(-zero_point) then Scale(scale) is its
// DequantizeLinear. compose() expands it into basic steps.
struct Quantize {
  std::vector<float> scale;
  std::vector<float> zero_point;
  float lo = 0.0F;
  float hi = 255.0F;
};

using Step = std::variant<Scale, Shift, Round, Clip, Eltwise, Sum, Binary, FakeQuantize, Quantize>;

// The primitive whose accumulator the chain follows; oneDNN 2.6 accepts
// different attributes for each (no destination zero point for inner product).
enum class AnchorKind { convolution, inner_product, deconvolution };

struct PostOpChain {
  int channels = 1;  // output channels of the anchor primitive
  DataType dst_type = DataType::f32;
  std::vector<Step> steps;
  AnchorKind anchor = AnchorKind::convolution;
};

// Appends FakeQuantize(il, ih, ol, oh, levels) to `chain`; the ranges are per
// tensor (size 1) or per channel (size chain.channels).
void append_fake_quantize(PostOpChain& chain, std::vector<float> input_low,
                          std::vector<float> input_high, std::vector<float> output_low,
                          std::vector<float> output_high, int levels);

}  // namespace qfuse::composer
