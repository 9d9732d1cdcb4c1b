#include "composer/eltwise_math.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>

namespace qfuse::composer {
namespace {

double logistic(double x) { return 1.0 / (1.0 + std::exp(-x)); }


using M = Monotone;
constexpr double kSqrtTwoOverPi = 0.7978845608028654;

constexpr std::array kTable{
    EltwiseInfo{EltwiseAlg::relu, "relu", "", M::if_alpha_non_negative, true,
                [](double x, double a, double) { return x > 0 ? x : a * x; }},
    EltwiseInfo{EltwiseAlg::tanh, "tanh", "Tanh", M::yes, false,
                [](double x, double, double) { return std::tanh(x); }},
    EltwiseInfo{EltwiseAlg::elu, "elu", "", M::if_alpha_non_negative, false,
                [](double x, double a, double) { return x > 0 ? x : a * std::expm1(x); }},
    EltwiseInfo{EltwiseAlg::square, "square", "", M::no, false,
                [](double x, double, double) { return x * x; }},
    EltwiseInfo{EltwiseAlg::abs, "abs", "Abs", M::no, true,
                [](double x, double, double) { return std::abs(x); }},
    EltwiseInfo{EltwiseAlg::sqrt, "sqrt", "Sqrt", M::yes, false,
                [](double x, double, double) { return std::sqrt(x); }},
    EltwiseInfo{EltwiseAlg::linear, "linear", "", M::if_alpha_non_negative, true,
                [](double x, double a, double b) { return a * x + b; }},
    EltwiseInfo{EltwiseAlg::clip, "clip", "", M::yes, true,
                [](double x, double a, double b) { return std::min(std::max(x, a), b); }},
    EltwiseInfo{EltwiseAlg::logistic, "logistic", "Sigmoid", M::yes, false,
                [](double x, double, double) { return logistic(x); }},
    EltwiseInfo{EltwiseAlg::exp, "exp", "Exp", M::yes, false,
                [](double x, double, double) { return std::exp(x); }},
    EltwiseInfo{EltwiseAlg::gelu_tanh, "gelu_tanh", "", M::no, false,
                [](double x, double, double) {
                  return 0.5 * x * (1.0 + std::tanh(kSqrtTwoOverPi * (x + 0.044715 * x * x * x)));
                }},
    EltwiseInfo{EltwiseAlg::gelu_erf, "gelu_erf", "", M::no, false,
                [](double x, double, double) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }},
    EltwiseInfo{EltwiseAlg::log, "log", "", M::yes, false,
                [](double x, double, double) { return std::log(x); }},
    EltwiseInfo{EltwiseAlg::swish, "swish", "", M::no, false,
                [](double x, double a, double) { return x * logistic(a * x); }},
    EltwiseInfo{EltwiseAlg::hardswish, "hardswish", "HardSwish", M::no, false,
                [](double x, double, double) { return x * std::min(std::max(x + 3.0, 0.0), 6.0) / 6.0; }},
    EltwiseInfo{EltwiseAlg::hsigmoid, "hsigmoid", "", M::yes, true,
                [](double x, double, double) { return std::min(std::max(x + 3.0, 0.0), 6.0) / 6.0; }},
    EltwiseInfo{EltwiseAlg::round, "round", "Round", M::yes, true,
                [](double x, double, double) { return std::nearbyint(x); }},
    EltwiseInfo{EltwiseAlg::mish, "mish", "", M::no, false,
                [](double x, double, double) { return x * std::tanh(std::log1p(std::exp(x))); }},
};

// Row k describes the enum's value k: eltwise_info indexes by it.
constexpr bool in_enum_order() {
  for (std::size_t k = 0; k < kTable.size(); ++k) {
    if (static_cast<std::size_t>(kTable[k].alg) != k) return false;
  }
  return kTable.size() == static_cast<std::size_t>(EltwiseAlg::mish) + 1;
}
static_assert(in_enum_order(), "eltwise_table: one row per EltwiseAlg, in the enum's order");

}  // namespace

std::span<const EltwiseInfo> eltwise_table() { return kTable; }

const EltwiseInfo& eltwise_info(EltwiseAlg alg) {
  const auto k = static_cast<std::size_t>(alg);
  if (k >= kTable.size()) throw std::invalid_argument("eltwise_info: no such eltwise algorithm");
  return kTable[k];
}

}  // namespace qfuse::composer
