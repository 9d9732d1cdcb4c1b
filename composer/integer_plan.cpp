#include "composer/integer_plan.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>

namespace qfuse::composer {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr std::int32_t kInt32Min = std::numeric_limits<std::int32_t>::min();
constexpr std::int32_t kInt32Max = std::numeric_limits<std::int32_t>::max();

// The chain between two rounding points, per channel:
//   v = clamp(a * x + r * res + b, lo, hi)
// x: the accumulator (stage 0) or the previous stage's integer.
struct Affine {
  std::vector<double> a, b, lo, hi;
  double r = 0.0;          // the residual's coefficient (0: none in this stage)
  bool x_is_acc = true;
};

class Deriver {
 public:
  Deriver(const PostOpsPlan& plan, const std::vector<float>& bias, double eta)
      : plan_(plan), eta_(eta), c_(static_cast<std::size_t>(plan.channels)) {
    f_.a.assign(c_, 1.0);
    f_.b.assign(c_, 0.0);
    f_.lo.assign(c_, -kInf);
    f_.hi.assign(c_, kInf);
    for (std::size_t c = 0; c < c_; ++c) {
      if (!plan.output_scales.empty()) f_.a[c] = at(plan.output_scales, c);
      // oneDNN adds the bias before the output scales.
      if (!bias.empty()) f_.b[c] = static_cast<double>(at(bias, c)) * f_.a[c];
    }
  }

  IntegerPlanResult run() {
    out_.channels = plan_.channels;
    out_.dst_type = plan_.dst_type;
    for (const PostOp& op : plan_.post_ops) {
      if (auto why = apply(op)) return {std::nullopt, *why};
    }
    if (plan_.dst_zero_point) affine(1.0, static_cast<double>(*plan_.dst_zero_point));
    if (plan_.dst_type == DataType::f32) {
      if (!f_.x_is_acc || out_.stages.empty()) dequantize();
    } else {
      const bool s8 = plan_.dst_type == DataType::s8;
      if (auto why = round_point(s8 ? -128 : 0, s8 ? 127 : 255)) return {std::nullopt, *why};
    }
    if (out_.bias.empty()) out_.bias.assign(c_, 0);
    return {std::move(out_), {}};
  }

 private:
  template <typename T>
  static T at(const std::vector<T>& v, std::size_t c) { return v.size() == 1 ? v[0] : v[c]; }

  // v = scale * v + shift (per channel via the callbacks' index).
  template <typename S, typename T>
  void affine_each(S scale, T shift) {
    for (std::size_t c = 0; c < c_; ++c) {
      const double s = scale(c), t = shift(c);
      f_.a[c] *= s;
      f_.b[c] = f_.b[c] * s + t;
      double lo = f_.lo[c] * s + t, hi = f_.hi[c] * s + t;
      if (s < 0) std::swap(lo, hi);
      if (s == 0) lo = hi = t;
      f_.lo[c] = std::isnan(lo) ? -kInf : lo;
      f_.hi[c] = std::isnan(hi) ? kInf : hi;
    }
    // The residual's coefficient must stay one value.
    if (f_.r != 0.0) f_.r *= scale(0);
  }
  void affine(double scale, double shift) {
    affine_each([&](std::size_t) { return scale; }, [&](std::size_t) { return shift; });
  }
  bool uniform(const std::vector<float>& v) const {
    return std::all_of(v.begin(), v.end(), [&](float x) { return x == v[0]; });
  }
  void clamp(std::size_t c, double lo, double hi) {
    // clamp(clamp(v, L, H), lo, hi) = clamp(v, clamp(L, lo, hi), clamp(H, lo, hi))
    f_.lo[c] = std::clamp(f_.lo[c], lo, hi);
    f_.hi[c] = std::clamp(f_.hi[c], lo, hi);
  }

  std::optional<std::string> apply(const PostOp& op) {
    if (const auto* e = std::get_if<EltwisePostOp>(&op)) return eltwise(*e);
    if (const auto* b = std::get_if<BinaryPostOp>(&op)) return binary(*b);
    return sum(std::get<SumPostOp>(op));
  }

  std::optional<std::string> eltwise(const EltwisePostOp& e) {
    switch (e.alg) {
      case EltwiseAlg::linear:
        affine(static_cast<double>(e.scale) * e.alpha, static_cast<double>(e.scale) * e.beta);
        return std::nullopt;
      case EltwiseAlg::relu:
        if (e.alpha != 0.0f) return "a leaky relu (alpha " + std::to_string(e.alpha) + ")";
        for (std::size_t c = 0; c < c_; ++c) clamp(c, 0.0, kInf);
        affine(e.scale, 0.0);
        return std::nullopt;
      case EltwiseAlg::clip:
        for (std::size_t c = 0; c < c_; ++c) clamp(c, e.alpha, e.beta);
        affine(e.scale, 0.0);
        return std::nullopt;
      case EltwiseAlg::round:
        if (auto why = round_point(kInt32Min, kInt32Max)) return why;
        affine(e.scale, 0.0);
        return std::nullopt;
      default:
        return "eltwise " + to_string(e.alg) + " has no integer form";
    }
  }

  std::optional<std::string> binary(const BinaryPostOp& b) {
    const auto* t = std::get_if<ConstantTensor>(&b.tensor);
    if (t == nullptr) return "a binary " + to_string(b.alg) + " reads a tensor at execution";
    const auto& v = t->values;
    const auto value = [&](std::size_t c) { return static_cast<double>(at(v, c)); };
    switch (b.alg) {
      case BinaryAlg::add: affine_each([](std::size_t) { return 1.0; }, value); break;
      case BinaryAlg::sub:
        affine_each([](std::size_t) { return 1.0; }, [&](std::size_t c) { return -value(c); });
        break;
      case BinaryAlg::mul:
        if (f_.r != 0.0 && !uniform(v)) return "a per-channel multiply after the residual add";
        affine_each(value, [](std::size_t) { return 0.0; });
        break;
      case BinaryAlg::min:
        for (std::size_t c = 0; c < c_; ++c) clamp(c, -kInf, value(c));
        break;
      case BinaryAlg::max:
        for (std::size_t c = 0; c < c_; ++c) clamp(c, value(c), kInf);
        break;
    }
    return std::nullopt;
  }

  std::optional<std::string> sum(const SumPostOp& s) {
    if (s.data_type == DataType::f32) return "the residual is f32";
    if (f_.r != 0.0 || out_.residual_input) return "a second residual add";
    // A clamp before the add applies to x alone: it must be an integer, whose
    // bounds then move into the stage that made it.
    if (auto why = clamp_into_last_stage()) return why;
    f_.r = s.scale;
    out_.residual_input = s.input;
    out_.residual_type = s.data_type;
    return std::nullopt;
  }

  // clamp(a x + b, lo, hi) for an integer x (a stage's output) is a clamp of
  // x itself, which that stage then applies.
  std::optional<std::string> clamp_into_last_stage() {
    for (std::size_t c = 0; c < c_; ++c) {
      if (f_.lo[c] == -kInf && f_.hi[c] == kInf) continue;
      if (f_.x_is_acc) return "a clamp on the unrounded accumulator before the residual add";
      if (f_.r != 0.0) return "a clamp after the residual add";
      if (f_.a[c] == 0.0) return "a zero scale before the residual add";
      double lo = (f_.lo[c] - f_.b[c]) / f_.a[c], hi = (f_.hi[c] - f_.b[c]) / f_.a[c];
      if (f_.a[c] < 0) std::swap(lo, hi);
      // The bounds come from grid points: a relative 1e-6 absorbs their
      // float rounding.
      const auto tol = [](double t) { return 1e-6 * std::max(1.0, std::abs(t)); };
      IntegerStage& prev = out_.stages.back();
      if (std::isfinite(lo)) {
        prev.lo[c] = std::max<std::int32_t>(prev.lo[c], to_int32(std::ceil(lo - tol(lo))));
      }
      if (std::isfinite(hi)) {
        prev.hi[c] = std::min<std::int32_t>(prev.hi[c], to_int32(std::floor(hi + tol(hi))));
      }
      f_.lo[c] = -kInf;
      f_.hi[c] = kInf;
    }
    return std::nullopt;
  }

  static std::int32_t to_int32(double v) {
    if (v <= kInt32Min) return kInt32Min;
    if (v >= kInt32Max) return kInt32Max;
    return static_cast<std::int32_t>(v);
  }
  static std::int32_t round_bound(double v, std::int32_t limit_lo, std::int32_t limit_hi) {
    if (v == -kInf) return limit_lo;
    if (v == kInf) return limit_hi;
    return std::clamp(to_int32(std::nearbyint(v)), limit_lo, limit_hi);
  }

  // A rounding point: v rounded half to even, clamped to [type_lo, type_hi],
  // becomes the next stage's x.
  std::optional<std::string> round_point(std::int32_t type_lo, std::int32_t type_hi) {
    IntegerStage st;
    st.multiplier.resize(c_);
    st.shift.resize(c_);
    st.offset.assign(c_, 0);
    st.lo.resize(c_);
    st.hi.resize(c_);
    if (f_.r != 0.0) st.residual_multiplier.resize(c_);
    if (f_.x_is_acc) out_.bias.assign(c_, 0);
    // Per channel: the offset left after the bias, and the shift wanted.
    std::vector<double> rest(c_);
    std::vector<int> wanted(c_), ceiling(c_);
    for (std::size_t c = 0; c < c_; ++c) {
      const double a = f_.a[c];
      double b = f_.b[c];
      if (!std::isfinite(a) || !std::isfinite(b)) return "a non-finite scale or offset";
      // Stage 0: the offset's whole accumulator units go into the int32 bias,
      // what remains (below half a unit) into K below.
      if (f_.x_is_acc && a != 0.0 && std::abs(b / a) < 0x1p30) {
        out_.bias[c] = static_cast<std::int32_t>(std::nearbyint(b / a));
        b -= static_cast<double>(out_.bias[c]) * a;
      }
      rest[c] = b;
      // One shift for a and the residual's coefficient: the finer of the
      // two each asks for, as far as the wider multiplier allows.
      int n = 0;
      int max_shift = 62;
      for (const double m : {a, f_.r}) {
        if (m == 0.0) continue;
        FixedPoint f;
        try {
          f = to_fixed_point(m, eta_, 31);
        } catch (const std::invalid_argument& e) {
          return std::string("a scale beyond 31 bits (") + e.what() + ")";
        }
        n = std::max(n, f.shift);
        max_shift = std::min(max_shift, 30 - static_cast<int>(std::floor(std::log2(std::abs(m)))));
      }
      // The offset in 2^-n units stays below 2^61.
      if (b != 0.0) max_shift = std::min(max_shift, 60 - static_cast<int>(std::ceil(std::log2(std::abs(b)))));
      wanted[c] = n;
      ceiling[c] = max_shift;
    }
    // A stage that adds a residual shifts every channel alike, so that the
    // residual's multiplier is one value (a sum with one scale).
    if (f_.r != 0.0) {
      const int n = std::min(*std::max_element(wanted.begin(), wanted.end()),
                             *std::min_element(ceiling.begin(), ceiling.end()));
      std::fill(wanted.begin(), wanted.end(), n);
    }
    for (std::size_t c = 0; c < c_; ++c) {
      const double a = f_.a[c];
      const double b = rest[c];
      const int n = std::clamp(std::min(wanted[c], ceiling[c]), 0, 62);
      st.shift[c] = n;
      st.multiplier[c] = std::llround(std::ldexp(a, n));
      if (!st.residual_multiplier.empty()) {
        st.residual_multiplier[c] = std::llround(std::ldexp(f_.r, n));
      }
      const double k = std::ldexp(b, n);
      if (std::abs(k) >= 0x1p62) return "an offset beyond 62 bits in fixed point";
      st.offset[c] = std::llround(k);
      if (a != 0.0 && st.multiplier[c] != 0) {
        st.relative_error = std::max(
            st.relative_error, std::abs(std::ldexp(static_cast<double>(st.multiplier[c]), -n) - a) /
                                   std::abs(a));
      }
      st.lo[c] = round_bound(f_.lo[c], type_lo, type_hi);
      st.hi[c] = round_bound(f_.hi[c], type_lo, type_hi);
      if (st.lo[c] > st.hi[c]) st.lo[c] = st.hi[c];
    }
    out_.stages.push_back(std::move(st));
    f_.a.assign(c_, 1.0);
    f_.b.assign(c_, 0.0);
    f_.lo.assign(c_, -kInf);
    f_.hi.assign(c_, kInf);
    f_.r = 0.0;
    f_.x_is_acc = false;
    return std::nullopt;
  }

  void dequantize() {
    // The integer the output dequantizes carries the output's clamp where it
    // can (an 8-bit code, as the pre-quantized form writes it); the float
    // clamp stays, a no-op then.
    if (!f_.x_is_acc && f_.r == 0.0) {
      std::vector<double> lo = f_.lo, hi = f_.hi;
      if (!clamp_into_last_stage()) {
        f_.lo = std::move(lo);
        f_.hi = std::move(hi);
      }
    }
    IntegerDequantize d;
    for (std::size_t c = 0; c < c_; ++c) {
      d.scale.push_back(static_cast<float>(f_.a[c]));
      d.shift.push_back(static_cast<float>(f_.b[c]));
      d.lo.push_back(static_cast<float>(f_.lo[c]));
      d.hi.push_back(static_cast<float>(f_.hi[c]));
    }
    d.residual_scale = static_cast<float>(f_.r);
    out_.dequantize = std::move(d);
    if (out_.bias.empty()) out_.bias.assign(c_, 0);
  }

  const PostOpsPlan& plan_;
  double eta_;
  std::size_t c_;
  Affine f_;
  IntegerPlan out_;
};

}  // namespace

IntegerPlanResult derive_integer_plan(const PostOpsPlan& plan, const std::vector<float>& bias,
                                      double eta) {
  if (plan.channels < 1) return {std::nullopt, "no channels"};
  if (!bias.empty() && bias.size() != 1 && bias.size() != static_cast<std::size_t>(plan.channels)) {
    return {std::nullopt, "bias size differs from the channels"};
  }
  return Deriver(plan, bias, eta).run();
}

double evaluate_integer_plan(const IntegerPlan& plan, std::int32_t acc, int c,
                             std::int32_t residual) {
  const auto i = static_cast<std::size_t>(c);
  std::int64_t x = static_cast<std::int64_t>(acc) + plan.bias[i];
  for (const IntegerStage& st : plan.stages) {
    std::int64_t p = x * st.multiplier[i] + st.offset[i];
    if (!st.residual_multiplier.empty()) p += std::int64_t{residual} * st.residual_multiplier[i];
    x = std::clamp<std::int64_t>(rshift_half_even(p, st.shift[i]), st.lo[i], st.hi[i]);
  }
  if (!plan.dequantize) return static_cast<double>(x);
  const IntegerDequantize& d = *plan.dequantize;
  const float y = d.scale[i] * static_cast<float>(x) + d.residual_scale * static_cast<float>(residual) +
                  d.shift[i];
  return static_cast<double>(std::clamp(y, d.lo[i], d.hi[i]));
}

std::string describe(const IntegerPlan& plan) {
  std::ostringstream os;
  const auto range = [&](const auto& v) {
    const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
    std::ostringstream r;
    if (*lo == *hi) {
      r << *lo;
    } else {
      r << *lo << ".." << *hi;
    }
    return r.str();
  };
  os << "s32 acc + bias[" << range(plan.bias) << "]";
  for (const IntegerStage& st : plan.stages) {
    os << " -> (x*M0[" << range(st.multiplier) << "]";
    if (!st.residual_multiplier.empty()) os << " + res*" << range(st.residual_multiplier);
    os << ") >> " << range(st.shift) << " clamp [" << range(st.lo) << ", " << range(st.hi) << "]";
  }
  if (plan.dequantize) {
    os << " -> f32 * " << range(plan.dequantize->scale);
  } else {
    os << " -> " << to_string(plan.dst_type);
  }
  return os.str();
}

}  // namespace qfuse::composer
