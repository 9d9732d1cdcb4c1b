#pragma once
// Each eltwise algorithm in one row (eltwise_table): its name, the ONNX
// operator that computes it alone, whether it is non-decreasing, whether it is
// piecewise linear, and its definition on one value in double: what the
// lookup tables of lookup_elementwise evaluate and what the tie-hazard
// analysis probes. oneDNN's kernels compute the same functions in f32 (within
// their documented accuracy); this is the exact reference. (The oneDNN
// algorithm of each is plugin/post_ops_attr.cpp's to_dnnl: the composer knows
// no oneDNN.)

#include <cstdint>
#include <span>
#include <string_view>

#include "composer/post_op_chain.hpp"

namespace qfuse::composer {

// Non-decreasing in x: always, never, or while alpha >= 0 (a leaky relu's
// slope, linear's factor).
enum class Monotone : std::uint8_t { no, yes, if_alpha_non_negative };

struct EltwiseInfo {
  EltwiseAlg alg;
  std::string_view name;
  // The ONNX operator that is exactly this function with its default
  // attributes ("Tanh"); empty where ONNX needs attributes or several
  // operators (relu with a slope, elu, clip, gelu, swish, ...).
  std::string_view onnx_op;
  Monotone monotone;
  // A clip of affine pieces (relu, linear, clip, round, abs, hsigmoid): a
  // layer's post-ops compute it about as cheaply as a table would.
  bool piecewise_linear;
  double (*value)(double x, double alpha, double beta);
};

// Every row, in the enum's order.
std::span<const EltwiseInfo> eltwise_table();
const EltwiseInfo& eltwise_info(EltwiseAlg alg);

inline double eltwise_value(EltwiseAlg alg, double x, double alpha, double beta) {
  return eltwise_info(alg).value(x, alpha, beta);
}
inline double eltwise_value(const Eltwise& e, double x) {
  return eltwise_value(e.alg, x, e.alpha, e.beta);
}
// Non-decreasing in x for this alpha.
inline bool monotone_increasing(EltwiseAlg alg, double alpha) {
  const Monotone m = eltwise_info(alg).monotone;
  return m == Monotone::yes || (m == Monotone::if_alpha_non_negative && alpha >= 0.0);
}

}  // namespace qfuse::composer
