#pragma once
// Internal: qfuse's own int8 depthwise convolution for the form where oneDNN
// 2.6 has no fast exact kernel: 3x3 or 5x5 with "same" padding (1 or 2),
// strides 1 or 2, a u8 source with a zero point, channels last. oneDNN's
// brdgmm_dw skips the taps that fall into the padding, which is wrong once
// padding is worth z * w; with the zero point it takes jit_int8 instead, at
// about half brdgmm_dw's speed on 5x5 kernels.
//
// The kernel prepares each input row once per 16 channels as quads of four
// neighbouring columns (vpermb), padding columns with z's code and skipping
// rows outside the image, sums vpdpbusd of the codes against taps 0-3 (and
// then tap 4) of each kernel row, and subtracts z times the sum of the
// weights of the rows it read. So the accumulator is exactly oneDNN's; then
// bias, output scales, post-ops, destination zero point and rounding in
// oneDNN's order.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "composer/post_ops_plan.hpp"

namespace qfuse::plugin {

// The input's shape (NHWC), the strides (1 or 2 each) and the kernel (3 or
// 5, padded by kernel / 2 on every side).
struct DepthwiseShape {
  std::int64_t batch = 1, channels = 0, height = 0, width = 0;
  std::int64_t stride_h = 1, stride_w = 1;
  int kernel = 5;
};

// The implementation string layers report when they run on this kernel.
inline constexpr const char* kDepthwiseKernelName = "qfuse_dw:avx512_core_vnni";

// Whether this CPU runs the kernel (AVX-512 F, BW, VBMI and VNNI).
bool has_depthwise_kernel_isa();

// nullopt when the kernel computes this plan's post-ops (output scales;
// linear, relu, clip, hardswish, logistic, swish and round eltwise; constant
// per-channel or scalar binary add / sub / mul / min / max; a destination
// zero point; u8, s8 or f32 destination); otherwise which part it lacks.
std::optional<std::string> depthwise_plan_refusal(const composer::PostOpsPlan& plan);

class DepthwiseKernel {
 public:
  static constexpr std::int64_t kBlock = 16;  // channels per vector

  // `weights` [channels][kernel][kernel] s8; `bias` one f32 per channel in accumulator
  // units, or empty. The plan must pass depthwise_plan_refusal.
  DepthwiseKernel(const DepthwiseShape& shape, const std::int8_t* weights, std::vector<float> bias,
                  std::uint8_t src_zero_point, const composer::PostOpsPlan& plan);

  // src [batch][height][width][channels] u8, dst [batch][output_size(height,
  // stride_h)][output_size(width, stride_w)][channels] in the plan's
  // destination type. On the calling request's OpenMP team when `parallel`.
  void run(const std::uint8_t* src, void* dst, bool parallel) const;

  // Output rows (columns) of `in` input rows (columns) at `stride` (the same
  // for both kernels, padded by kernel / 2).
  static std::int64_t output_size(std::int64_t in, std::int64_t stride);

  // One step of the post-op program, on per-channel parameter vectors.
  enum class Op { mul, fma, relu, clip, hardswish, swish, round, add, sub, min, max };
  struct Step {
    Op op = Op::mul;
    std::vector<float> p, q;  // one per lane each (as many as the op reads)
  };

 private:
  void run_item(const std::uint8_t* src, void* dst, std::int64_t n, std::int64_t block,
                std::int64_t col0, std::int64_t col1) const;

  DepthwiseShape shape_;
  std::uint8_t zero_point_ = 0;
  composer::DataType dst_type_ = composer::DataType::u8;
  // Per 16-channel block and kernel row, 64 bytes: taps 0-3 of each channel
  // interleaved (w4; a 3x3 kernel's fourth byte 0), and a 5x5 kernel's tap 4
  // in the first byte of each quad (w1).
  std::vector<std::int8_t> w4_, w1_;
  // Vectors of channels are padded with zeros to a multiple of 16 (lanes).
  // z * the sum of a kernel row's weights, [row][lane].
  std::vector<std::int32_t> row_zero_terms_;
  std::vector<float> bias_;  // one per lane (zeros when the layer has none)
  std::vector<Step> steps_;
};

}  // namespace qfuse::plugin
