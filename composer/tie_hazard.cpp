#include "composer/tie_hazard.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <sstream>
#include <vector>

namespace qfuse::composer {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr std::int64_t kAccWindow = 1024;       // first rounding point: |acc| <= this
constexpr std::int64_t kMaxCodes = 65536;       // later ones: codes of the previous one
constexpr std::int64_t kMaxEvaluations = 1 << 16;  // per rounding point and channel

double logistic(double x) { return 1.0 / (1.0 + std::exp(-x)); }

double eltwise(EltwiseAlg alg, double x, double alpha, double beta) {
  switch (alg) {
    case EltwiseAlg::relu: return x > 0 ? x : alpha * x;
    case EltwiseAlg::tanh: return std::tanh(x);
    case EltwiseAlg::elu: return x > 0 ? x : alpha * (std::exp(x) - 1.0);
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

bool monotone_increasing(EltwiseAlg alg, double alpha) {
  switch (alg) {
    case EltwiseAlg::relu: return alpha >= 0;
    case EltwiseAlg::tanh:
    case EltwiseAlg::elu:
    case EltwiseAlg::sqrt:
    case EltwiseAlg::logistic:
    case EltwiseAlg::exp:
    case EltwiseAlg::log:
    case EltwiseAlg::hsigmoid:
    case EltwiseAlg::round:
    case EltwiseAlg::clip: return true;
    case EltwiseAlg::linear: return alpha >= 0;
    default: return false;
  }
}

template <typename T>
double at(const std::vector<T>& v, int c) {
  return static_cast<double>(v.size() == 1 ? v[0] : v[static_cast<std::size_t>(c)]);
}

bool is_round(const PostOp& op) {
  const auto* e = std::get_if<EltwisePostOp>(&op);
  return e != nullptr && e->alg == EltwiseAlg::round;
}

bool reads_tensor(const PostOp& op) {
  if (std::holds_alternative<SumPostOp>(op)) return true;
  const auto* b = std::get_if<BinaryPostOp>(&op);
  return b != nullptr && std::holds_alternative<ExternalTensor>(b->tensor);
}

class Checker {
 public:
  Checker(const PostOpsPlan& p, int c) : p_(p), c_(c) {
    for (std::size_t i = 0; i < p.post_ops.size(); ++i) {
      if (is_round(p.post_ops[i])) rounds_.push_back(i);
      // This channel's arithmetic, flat: the loops below run it thousands
      // of times.
      Flat f;
      const PostOp& op = p.post_ops[i];
      if (const auto* e = std::get_if<EltwisePostOp>(&op)) {
        f.kind = Flat::unary;
        f.alg = e->alg;
        f.scale = e->scale;
        f.alpha = e->alpha;
        f.beta = e->beta;
      } else if (const auto* bin = std::get_if<BinaryPostOp>(&op)) {
        f.binary = bin->alg;
        if (const auto* t = std::get_if<ConstantTensor>(&bin->tensor)) {
          f.kind = Flat::binary_constant;
          f.t = at(t->values, c);
        } else {
          f.kind = Flat::binary_tensor;
        }
      } else {
        f.kind = Flat::sum;
        f.scale = std::get<SumPostOp>(op).scale;
      }
      flat_.push_back(f);
    }
    const bool s8 = p.dst_type == DataType::s8;
    res_lo_ = s8 ? -128 : 0;
    res_hi_ = s8 ? 127 : 255;
  }

  std::optional<std::string> run() {
    if (rounds_.empty()) return std::nullopt;
    // The last eltwise round of an f32 output is the output's own grid.
    const std::size_t checked = p_.dst_type == DataType::f32 ? rounds_.size() - 1 : rounds_.size();
    for (std::size_t j = 0; j < checked; ++j) {
      if (auto hazard = check_round(j)) return hazard;
    }
    return std::nullopt;
  }

 private:
  double scale() const { return p_.output_scales.empty() ? 1.0 : at(p_.output_scales, c_); }

  struct Flat {
    enum Kind { unary, binary_constant, binary_tensor, sum } kind = unary;
    EltwiseAlg alg = EltwiseAlg::linear;
    BinaryAlg binary = BinaryAlg::add;
    double scale = 1.0, alpha = 0.0, beta = 0.0, t = 0.0;
  };

  // Op i on y; `res`: the external tensor's value (a residual code).
  double apply(std::size_t i, double y, double res, bool flip, bool up) const {
    const Flat& f = flat_[i];
    switch (f.kind) {
      case Flat::unary: {
        if (f.alg == EltwiseAlg::linear) return f.scale * (f.alpha * y + f.beta);
        const double v = f.alg == EltwiseAlg::round && flip ? std::floor(y) + (up ? 1.0 : 0.0)
                                                            : eltwise(f.alg, y, f.alpha, f.beta);
        return f.scale * v;
      }
      case Flat::binary_constant:
      case Flat::binary_tensor: {
        const double t = f.kind == Flat::binary_constant ? f.t : res;
        switch (f.binary) {
          case BinaryAlg::add: return y + t;
          case BinaryAlg::sub: return y - t;
          case BinaryAlg::mul: return y * t;
          case BinaryAlg::min: return std::min(y, t);
          case BinaryAlg::max: return std::max(y, t);
        }
        return y;
      }
      case Flat::sum: return y + f.scale * res;
    }
    return y;
  }

  // The same op in f32, as the primitive computes it (linear with or
  // without a fused multiply-add).
  float apply_f32(const PostOp& op, float y, float res, bool fma) const {
    if (const auto* e = std::get_if<EltwisePostOp>(&op)) {
      float v;
      if (e->alg == EltwiseAlg::linear) {
        v = fma ? std::fma(e->alpha, y, e->beta) : e->alpha * y + e->beta;
      } else {
        v = static_cast<float>(eltwise(e->alg, static_cast<double>(y), e->alpha, e->beta));
      }
      return e->scale * v;
    }
    if (const auto* b = std::get_if<BinaryPostOp>(&op)) {
      const float t = std::holds_alternative<ConstantTensor>(b->tensor)
                          ? static_cast<float>(at(std::get<ConstantTensor>(b->tensor).values, c_))
                          : res;
      switch (b->alg) {
        case BinaryAlg::add: return y + t;
        case BinaryAlg::sub: return y - t;
        case BinaryAlg::mul: return y * t;
        case BinaryAlg::min: return std::min(y, t);
        case BinaryAlg::max: return std::max(y, t);
      }
    }
    const float s = std::get<SumPostOp>(op).scale;
    return fma ? std::fma(s, res, y) : y + s * res;
  }

  // The output for y entering op `first`; the op at `flip_at` rounds its
  // input down or up.
  double finish(std::size_t first, double y, double res, std::size_t flip_at, bool up) const {
    for (std::size_t i = first; i < p_.post_ops.size(); ++i) {
      y = apply(i, y, res, i == flip_at, up);
    }
    if (p_.dst_zero_point) y += *p_.dst_zero_point;
    if (p_.dst_type == DataType::f32) return y;
    return std::clamp(std::nearbyint(y), static_cast<double>(res_lo_), static_cast<double>(res_hi_));
  }

  // The interval of the input of op `stop`, from every accumulator.
  std::pair<double, double> input_interval(std::size_t stop) const {
    const double s = scale();
    double lo = -0x1p31 * std::abs(s), hi = 0x1p31 * std::abs(s);
    for (std::size_t i = 0; i < stop; ++i) {
      const PostOp& op = p_.post_ops[i];
      if (const auto* e = std::get_if<EltwisePostOp>(&op)) {
        if (monotone_increasing(e->alg, e->alpha)) {
          lo = eltwise(e->alg, lo, e->alpha, e->beta);
          hi = eltwise(e->alg, hi, e->alpha, e->beta);
          if (e->alg == EltwiseAlg::linear && e->alpha == 0) lo = hi = e->beta;
        } else if (e->alg == EltwiseAlg::linear) {  // a negative slope
          const double l = eltwise(e->alg, hi, e->alpha, e->beta);
          hi = eltwise(e->alg, lo, e->alpha, e->beta);
          lo = l;
        } else {
          lo = -kInf;
          hi = kInf;
        }
        const double a = e->scale * lo, b = e->scale * hi;
        lo = std::min(a, b);
        hi = std::max(a, b);
      } else if (const auto* b = std::get_if<BinaryPostOp>(&op);
                 b != nullptr && std::holds_alternative<ConstantTensor>(b->tensor)) {
        const double t = at(std::get<ConstantTensor>(b->tensor).values, c_);
        switch (b->alg) {
          case BinaryAlg::add: lo += t; hi += t; break;
          case BinaryAlg::sub: lo -= t; hi -= t; break;
          case BinaryAlg::mul: {
            const double x = lo * t, y = hi * t;
            lo = std::min(x, y);
            hi = std::max(x, y);
            break;
          }
          case BinaryAlg::min: lo = std::min(lo, t); hi = std::min(hi, t); break;
          case BinaryAlg::max: lo = std::max(lo, t); hi = std::max(hi, t); break;
        }
      } else {
        lo = -kInf;
        hi = kInf;
      }
      if (std::isnan(lo) || std::isnan(hi)) {
        lo = -kInf;
        hi = kInf;
      }
    }
    return {lo, hi};
  }

  // Within f32 noise of a tie (f32 rounds at 2^-24 relative; a few
  // operations' worth).
  static bool near_tie(double v) {
    return std::abs(v - std::floor(v) - 0.5) <= 0x1p-22 * std::max(1.0, std::abs(v));
  }

  // Ties at the input of the j-th rounding point, and what they move.
  std::optional<std::string> check_round(std::size_t j) {
    const std::size_t r = rounds_[j];
    // Where x enters: the accumulator (before op 0), or the previous
    // rounding point's code (its op writes scale * x).
    const std::size_t first = j == 0 ? 0 : rounds_[j - 1];
    std::int64_t x_lo = -kAccWindow, x_hi = kAccWindow;
    if (j > 0) {
      // The codes the previous rounding point can write; when its input is
      // not clamped before it (the composer moves clamps after a rounding),
      // the codes around 0, where the later clamps keep them apart.
      const auto [lo, hi] = input_interval(first);
      if (std::isfinite(lo) && std::isfinite(hi) && hi - lo < static_cast<double>(kMaxCodes)) {
        x_lo = static_cast<std::int64_t>(std::nearbyint(lo));
        x_hi = static_cast<std::int64_t>(std::nearbyint(hi));
      }
    }
    // A tensor read before the rounding point: its codes are enumerated too.
    bool tensor_before = false;
    for (std::size_t i = first; i < r; ++i) tensor_before = tensor_before || reads_tensor(p_.post_ops[i]);
    const std::int64_t res_count = tensor_before ? res_hi_ - res_lo_ + 1 : 1;
    if ((x_hi - x_lo + 1) * res_count > kMaxEvaluations) return std::nullopt;
    bool tensor_after = false;
    for (std::size_t i = r + 1; i < p_.post_ops.size(); ++i) tensor_after = tensor_after || reads_tensor(p_.post_ops[i]);
    const double last_step = p_.dst_type == DataType::f32
                                 ? std::abs(std::get<EltwisePostOp>(p_.post_ops[rounds_.back()]).scale)
                                 : 1.0;
    // Over accumulators, a tie that recurs (a scale like 0.5 puts every odd
    // one on a tie) shows as many hits; f32 noise alone near a tie hits
    // about once in 2^21 / |v| accumulators. Fewer than kRecurring hits in
    // the window (ties rarer than one in 256 accumulators) are not a
    // structure.
    constexpr int kRecurring = 8;
    int hits = 0;
    std::optional<std::string> first_hazard;
    for (std::int64_t x = x_lo; x <= x_hi; ++x) {
      for (std::int64_t k = 0; k < res_count; ++k) {
        const double res = static_cast<double>(tensor_before ? res_lo_ + k : 0);
        double y;
        if (j == 0) {
          y = static_cast<double>(x) * scale();
        } else {
          y = static_cast<double>(std::get<EltwisePostOp>(p_.post_ops[first]).scale) *
              static_cast<double>(x);
        }
        for (std::size_t i = j == 0 ? 0 : first + 1; i < r; ++i) y = apply(i, y, res, false, false);
        if (!near_tie(y)) continue;
        // An exact tie that f32 computes exactly too (power-of-two scales)
        // rounds half to even in both paths.
        if (y - std::floor(y) == 0.5) {
          bool exact = true;
          for (const bool fma : {false, true}) {
            float yf = j == 0 ? static_cast<float>(x) * static_cast<float>(scale())
                              : std::get<EltwisePostOp>(p_.post_ops[first]).scale * static_cast<float>(x);
            for (std::size_t i = j == 0 ? 0 : first + 1; i < r; ++i) {
              yf = apply_f32(p_.post_ops[i], yf, static_cast<float>(res), fma);
            }
            exact = exact && static_cast<double>(yf) == y;
          }
          if (exact) continue;
        }
        // The rest with the tie rounded down and up; a residual read after
        // it at a few codes across its range.
        for (const double rv : tensor_after && !tensor_before
                                   ? std::vector<double>{static_cast<double>(res_lo_), 0.0,
                                                         static_cast<double>(res_hi_)}
                                   : std::vector<double>{res}) {
          const double down = finish(r, y, rv, r, false);
          const double up = finish(r, y, rv, r, true);
          const double moved = std::abs(up - down) / last_step;
          if (moved <= 1.0 + 1e-6) continue;
          std::ostringstream os;
          os << "rounding step " << j + 1 << " of " << rounds_.size() << " meets a .5 tie (input "
             << y << " from " << (j == 0 ? "accumulator " : "code ") << x << ", channel " << c_
             << ") where rounding it either way moves the output by " << std::nearbyint(moved)
             << " codes; the fused primitive's f32 arithmetic may round it the other way";
          if (j > 0) return os.str();
          if (!first_hazard) first_hazard = os.str();
          if (++hits >= kRecurring) return first_hazard;
          break;
        }
      }
    }
    return std::nullopt;
  }

  const PostOpsPlan& p_;
  int c_;
  std::vector<std::size_t> rounds_;
  std::vector<Flat> flat_;
  std::int64_t res_lo_ = 0, res_hi_ = 255;
};

// What a channel's arithmetic depends on: its output scale and its values
// of the per-channel constants.
std::vector<double> channel_signature(const PostOpsPlan& plan, int c) {
  std::vector<double> sig;
  if (!plan.output_scales.empty()) sig.push_back(at(plan.output_scales, c));
  for (const PostOp& op : plan.post_ops) {
    if (const auto* b = std::get_if<BinaryPostOp>(&op)) {
      if (const auto* t = std::get_if<ConstantTensor>(&b->tensor)) sig.push_back(at(t->values, c));
    }
  }
  return sig;
}

}  // namespace

std::optional<std::string> rounding_tie_hazard(const PostOpsPlan& plan) {
  bool any = false;
  for (const PostOp& op : plan.post_ops) any = any || is_round(op);
  if (!any) return std::nullopt;
  std::set<std::vector<double>> checked;
  for (int c = 0; c < std::max(1, plan.channels); ++c) {
    if (!checked.insert(channel_signature(plan, c)).second) continue;
    if (auto hazard = Checker(plan, c).run()) return hazard;
  }
  return std::nullopt;
}

}  // namespace qfuse::composer
