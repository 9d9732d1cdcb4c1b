#pragma once
// The definition of each eltwise algorithm on one value, in double: what the
// lookup tables of lookup_elementwise evaluate and what the tie-hazard
// analysis probes. oneDNN's kernels compute the same functions in f32 (within
// their documented accuracy); this is the exact reference.

#include "composer/post_op_chain.hpp"

namespace qfuse::composer {

double eltwise_value(EltwiseAlg alg, double x, double alpha, double beta);
inline double eltwise_value(const Eltwise& e, double x) {
  return eltwise_value(e.alg, x, e.alpha, e.beta);
}

}  // namespace qfuse::composer
