#include "composer/eltwise_math.hpp"

#include <algorithm>
#include <cmath>

namespace qfuse::composer {
namespace {

double logistic(double x) { return 1.0 / (1.0 + std::exp(-x)); }

}  // namespace

double eltwise_value(EltwiseAlg alg, double x, double alpha, double beta) {
  switch (alg) {
    case EltwiseAlg::relu: return x > 0 ? x : alpha * x;
    case EltwiseAlg::tanh: return std::tanh(x);
    case EltwiseAlg::elu: return x > 0 ? x : alpha * std::expm1(x);
    case EltwiseAlg::square: return x * x;
    case EltwiseAlg::abs: return std::abs(x);
    case EltwiseAlg::sqrt: return std::sqrt(x);
    case EltwiseAlg::linear: return alpha * x + beta;
    case EltwiseAlg::clip: return std::min(std::max(x, alpha), beta);
    case EltwiseAlg::logistic: return logistic(x);
    case EltwiseAlg::exp: return std::exp(x);
    case EltwiseAlg::gelu_tanh:
      return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
    case EltwiseAlg::gelu_erf: return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case EltwiseAlg::log: return std::log(x);
    case EltwiseAlg::swish: return x * logistic(alpha * x);
    case EltwiseAlg::hardswish: return x * std::min(std::max(x + 3.0, 0.0), 6.0) / 6.0;
    case EltwiseAlg::hsigmoid: return std::min(std::max(x + 3.0, 0.0), 6.0) / 6.0;
    case EltwiseAlg::round: return std::nearbyint(x);
    case EltwiseAlg::mish: return x * std::tanh(std::log1p(std::exp(x)));
  }
  return x;
}

}  // namespace qfuse::composer
