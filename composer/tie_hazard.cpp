#include "composer/tie_hazard.hpp"

#include "composer/eltwise_math.hpp"

#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iomanip>
#include <limits>
#include <memory>
#include <mutex>
#include <sstream>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace qfuse::composer {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr std::int64_t kAccWindow = 1024;        // first rounding point: |acc| <= this
constexpr std::int64_t kTieWindow = 2048;        // ties tried, and codes of an unclamped rounding
constexpr std::int64_t kMaxCodes = 65536;        // codes of the previous rounding point
constexpr std::int64_t kMaxEvaluations = 1 << 18;  // per rounding point and channel

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

// Appends what op reads for channel c to a cache key; with c < 0, what it
// reads for every channel (a per-channel constant as its size only).
void append_op_key(std::vector<double>& key, const PostOp& op, int c) {
  if (const auto* e = std::get_if<EltwisePostOp>(&op)) {
    key.insert(key.end(), {0.0, static_cast<double>(e->alg), e->scale, e->alpha, e->beta});
  } else if (const auto* b = std::get_if<BinaryPostOp>(&op)) {
    key.insert(key.end(), {1.0, static_cast<double>(b->alg), static_cast<double>(b->broadcast)});
    if (const auto* t = std::get_if<ConstantTensor>(&b->tensor)) {
      if (c < 0 && t->values.size() > 1) {
        key.insert(key.end(), {2.0, static_cast<double>(t->values.size())});
      } else {
        key.insert(key.end(), {0.0, at(t->values, std::max(c, 0))});
      }
    } else {
      const auto& x = std::get<ExternalTensor>(b->tensor);
      key.insert(key.end(), {1.0, static_cast<double>(x.input), static_cast<double>(x.data_type)});
    }
  } else {
    const auto& sum = std::get<SumPostOp>(op);
    key.insert(key.end(), {2.0, static_cast<double>(sum.input), sum.scale,
                           static_cast<double>(sum.data_type)});
  }
}

// Hashes a key's values by their bits (0.0 and -0.0, equal keys, alike).
struct KeyHash {
  std::size_t operator()(const std::vector<double>& key) const {
    std::uint64_t h = 1469598103934665603ull;
    for (double v : key) {
      std::uint64_t bits;
      const double x = v == 0.0 ? 0.0 : v;
      std::memcpy(&bits, &x, sizeof bits);
      h = (h ^ bits) * 1099511628211ull;
      h ^= h >> 29;
    }
    return static_cast<std::size_t>(h);
  }
};

// Analyses once per process: a model's passes ask about the same chain
// several times (each prefix of a chain, each pass round, the final
// compile), and the channels of a layer share what follows their first
// rounding. Bounded: past kMaxEntries the cache starts again.
template <class Result>
class HazardCache {
 public:
  template <class Compute>
  Result get(const std::vector<double>& key, Compute compute) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      const auto it = entries_.find(key);
      if (it != entries_.end()) return it->second;
    }
    Result result = compute();
    std::lock_guard<std::mutex> lock(mutex_);
    if (entries_.size() >= kMaxEntries) entries_.clear();
    entries_.emplace(key, result);
    return result;
  }

 private:
  static constexpr std::size_t kMaxEntries = 1 << 16;
  std::mutex mutex_;
  std::unordered_map<std::vector<double>, Result, KeyHash> entries_;
};

// The channel analyses of rounding_tie_hazard, keyed in two parts: the
// plan's common arithmetic, interned once per call (one hash of the long
// key), and a channel's own values with its index (a few numbers).
class ChannelHazardCache {
 public:
  using Common = std::shared_ptr<const std::vector<double>>;

  Common intern(const std::vector<double>& common) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& slot = commons_[common];
    if (!slot) slot = std::make_shared<const std::vector<double>>(common);
    return slot;
  }

  template <class Compute>
  std::optional<std::string> get(const Common& common, std::vector<double> tail,
                                 Compute compute) {
    Key key{common, std::move(tail)};
    {
      std::lock_guard<std::mutex> lock(mutex_);
      const auto it = entries_.find(key);
      if (it != entries_.end()) return it->second;
    }
    std::optional<std::string> result = compute();
    std::lock_guard<std::mutex> lock(mutex_);
    if (entries_.size() >= kMaxEntries) {
      // Interned commons held by a running call stay alive through its
      // shared_ptr; its later lookups miss and compute again.
      entries_.clear();
      commons_.clear();
    }
    entries_.emplace(std::move(key), result);
    return result;
  }

 private:
  // Interned: equal commons are one object, so a pointer compares them.
  struct Key {
    Common common;
    std::vector<double> tail;
    bool operator==(const Key& o) const { return common == o.common && tail == o.tail; }
  };
  struct Hash {
    std::size_t operator()(const Key& k) const {
      return KeyHash{}(k.tail) ^
             (std::hash<const void*>{}(k.common.get()) * std::size_t{0x9E3779B97F4A7C15ull});
    }
  };
  static constexpr std::size_t kMaxEntries = 1 << 16;
  std::mutex mutex_;
  std::unordered_map<std::vector<double>, Common, KeyHash> commons_;
  std::unordered_map<Key, std::optional<std::string>, Hash> entries_;
};

// Where a cached reason names its channel.
constexpr std::string_view kChannelMark = "{channel}";

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
    // Whether op i or a later one is a transcendental function, which the
    // primitive approximates (to about 1e-6 relative, more at saturation).
    transcendental_from_.assign(p.post_ops.size() + 1, false);
    for (std::size_t i = p.post_ops.size(); i-- > 0;) {
      const auto* e = std::get_if<EltwisePostOp>(&p.post_ops[i]);
      const bool t = e != nullptr && e->alg != EltwiseAlg::linear && e->alg != EltwiseAlg::relu &&
                     e->alg != EltwiseAlg::clip && e->alg != EltwiseAlg::abs &&
                     e->alg != EltwiseAlg::round && e->alg != EltwiseAlg::hardswish &&
                     e->alg != EltwiseAlg::hsigmoid && e->alg != EltwiseAlg::square;
      transcendental_from_[i] = transcendental_from_[i + 1] || t;
    }
    // Whether op i or a later one reads a tensor.
    reads_from_.assign(p.post_ops.size() + 1, false);
    for (std::size_t i = p.post_ops.size(); i-- > 0;) {
      reads_from_[i] = reads_from_[i + 1] || reads_tensor(p.post_ops[i]);
    }
    // Whether a sum, or another op reading a tensor, comes after op r.
    sum_after_.assign(p.post_ops.size() + 1, false);
    binary_after_.assign(p.post_ops.size() + 1, false);
    for (std::size_t i = p.post_ops.size(); i-- > 1;) {
      const bool sum = std::holds_alternative<SumPostOp>(p.post_ops[i]);
      sum_after_[i - 1] = sum_after_[i] || sum;
      binary_after_[i - 1] = binary_after_[i] || (reads_tensor(p.post_ops[i]) && !sum);
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
      // The first rounding point reads this channel's accumulators; a later
      // one reads the previous one's codes, and what it finds depends only
      // on their interval and the ops from there on, which the channels of
      // a layer usually share.
      std::optional<std::string> hazard;
      if (j == 0) {
        hazard = check_round(j);
      } else {
        static HazardCache<std::optional<std::string>> later_rounds;
        hazard = later_rounds.get(later_round_key(j), [&] {
          mark_channel_ = true;
          auto found = check_round(j);
          mark_channel_ = false;
          return found;
        });
        if (hazard) {
          const std::size_t at_mark = hazard->find(kChannelMark);
          if (at_mark != std::string::npos) {
            hazard->replace(at_mark, kChannelMark.size(), std::to_string(c_));
          }
        }
      }
      if (hazard) return hazard;
    }
    return std::nullopt;
  }

 private:
  double scale() const { return p_.output_scales.empty() ? 1.0 : at(p_.output_scales, c_); }

  // Everything check_round(j), j >= 1, reads: its place among the rounding
  // points, the interval of the previous one's input, the destination, and
  // the ops from the previous rounding point on.
  std::vector<double> later_round_key(std::size_t j) const {
    const std::size_t first = rounds_[j - 1];
    const auto [lo, hi] = input_interval(first);
    std::vector<double> key{static_cast<double>(j), static_cast<double>(rounds_.size()), lo, hi,
                            static_cast<double>(p_.dst_type), p_.dst_zero_point ? 1.0 : 0.0,
                            static_cast<double>(p_.dst_zero_point.value_or(0))};
    for (std::size_t i = first; i < p_.post_ops.size(); ++i) append_op_key(key, p_.post_ops[i], c_);
    return key;
  }

  std::string channel_text() const {
    return mark_channel_ ? std::string(kChannelMark) : std::to_string(c_);
  }

  struct Probe {
    double res = 0.0;  // the residual a sum reads
    double t = 0.0;    // the tensor a binary op reads
  };

  struct Flat {
    enum Kind { unary, binary_constant, binary_tensor, sum } kind = unary;
    EltwiseAlg alg = EltwiseAlg::linear;
    BinaryAlg binary = BinaryAlg::add;
    double scale = 1.0, alpha = 0.0, beta = 0.0, t = 0.0;
  };

  // Op i on y; `res`: the external tensor's value (a residual code).
  double apply(std::size_t i, double y, double res, bool flip, bool up) const {
    return apply(i, y, res, flip, up, res);
  }
  // The same, with `t` the value of a tensor a binary op reads (`res` the
  // residual a sum reads).
  double apply(std::size_t i, double y, double res, bool flip, bool up, double t_ext) const {
    const Flat& f = flat_[i];
    switch (f.kind) {
      case Flat::unary: {
        if (f.alg == EltwiseAlg::linear) return f.scale * (f.alpha * y + f.beta);
        const double v = f.alg == EltwiseAlg::round && flip ? std::floor(y) + (up ? 1.0 : 0.0)
                                                            : eltwise_value(f.alg, y, f.alpha, f.beta);
        return f.scale * v;
      }
      case Flat::binary_constant:
      case Flat::binary_tensor: {
        double t = f.kind == Flat::binary_constant ? f.t : t_ext;
        // A tensor min or max is probed where it changes nothing: it can
        // only bring two values closer.
        if (f.kind == Flat::binary_tensor && f.binary == BinaryAlg::min) t = kInf;
        if (f.kind == Flat::binary_tensor && f.binary == BinaryAlg::max) t = -kInf;
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
        v = static_cast<float>(eltwise_value(e->alg, static_cast<double>(y), e->alpha, e->beta));
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
  double finish(std::size_t first, double y, Probe probe, std::size_t flip_at, bool up) const {
    for (std::size_t i = first; i < p_.post_ops.size(); ++i) {
      y = apply(i, y, probe.res, i == flip_at, up, probe.t);
    }
    if (p_.dst_zero_point) y += *p_.dst_zero_point;
    if (p_.dst_type == DataType::f32) return y;
    return std::clamp(std::nearbyint(y), static_cast<double>(res_lo_), static_cast<double>(res_hi_));
  }

  // The outputs for y entering op `first` with the op at `flip_at` rounding
  // down or up, where every later rounding (an eltwise round, the s8/u8
  // store) whose input is within noise of a tie may go either way too (the
  // fused primitive's f32, and its approximations of transcendental
  // functions, can put it on the other side): their range.
  void finish_range(std::size_t first, double y, Probe probe, std::size_t flip_at, bool up,
                    std::pair<double, double>& range, int branches) const {
    const double tol = transcendental_from_[std::min(first, transcendental_from_.size() - 1)]
                           ? 1e-4
                           : 0x1p-20;
    const auto on_tie = [tol](double v) {
      return std::abs(v - std::floor(v) - 0.5) <= tol * std::max(1.0, std::abs(v));
    };
    const auto take = [&range](double v) {
      range.first = std::min(range.first, v);
      range.second = std::max(range.second, v);
    };
    for (std::size_t i = first; i < p_.post_ops.size(); ++i) {
      if (i != flip_at && branches > 0 && flat_[i].kind == Flat::unary &&
          flat_[i].alg == EltwiseAlg::round && on_tie(y)) {
        finish_range(i, y, probe, i, false, range, branches - 1);
        finish_range(i, y, probe, i, true, range, branches - 1);
        return;
      }
      y = apply(i, y, probe.res, i == flip_at, up, probe.t);
    }
    if (p_.dst_zero_point) y += *p_.dst_zero_point;
    if (p_.dst_type == DataType::f32) {
      take(y);
      return;
    }
    const auto store = [this](double v) {
      return std::clamp(v, static_cast<double>(res_lo_), static_cast<double>(res_hi_));
    };
    if (on_tie(y)) {
      take(store(std::floor(y)));
      take(store(std::floor(y) + 1.0));
    } else {
      take(store(std::nearbyint(y)));
    }
  }

  // The interval of the input of op `stop`, from every accumulator.
  std::pair<double, double> input_interval(std::size_t stop) const {
    const double s = scale();
    double lo = -0x1p31 * std::abs(s), hi = 0x1p31 * std::abs(s);
    for (std::size_t i = 0; i < stop; ++i) {
      const PostOp& op = p_.post_ops[i];
      if (const auto* e = std::get_if<EltwisePostOp>(&op)) {
        if (monotone_increasing(e->alg, e->alpha)) {
          lo = eltwise_value(e->alg, lo, e->alpha, e->beta);
          hi = eltwise_value(e->alg, hi, e->alpha, e->beta);
          if (e->alg == EltwiseAlg::linear && e->alpha == 0) lo = hi = e->beta;
        } else if (e->alg == EltwiseAlg::linear) {  // a negative slope
          const double l = eltwise_value(e->alg, hi, e->alpha, e->beta);
          hi = eltwise_value(e->alg, lo, e->alpha, e->beta);
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

  // Within f32 noise of a tie: each f32 operation rounds at 2^-24 of its
  // result, and `magnitude` bounds every intermediate (a shift that cancels
  // most of a large product leaves that product's error behind).
  static bool near_tie(double v, double magnitude) {
    return std::abs(v - std::floor(v) - 0.5) <= 0x1p-20 * std::max(1.0, magnitude);
  }

  double last_step() const {
    return p_.dst_type == DataType::f32
               ? std::abs(static_cast<double>(std::get<EltwisePostOp>(p_.post_ops[rounds_.back()]).scale))
               : 1.0;
  }

  bool reads_tensor_in(std::size_t from, std::size_t to) const {
    if (to >= p_.post_ops.size() && from < reads_from_.size()) return reads_from_[from];
    bool any = false;
    for (std::size_t i = from; i < to && i < p_.post_ops.size(); ++i) any = any || reads_tensor(p_.post_ops[i]);
    return any;
  }

  // The values of the tensors read after rounding point r worth trying,
  // each tensor on its own: the residual a sum reads, and the tensor a
  // binary add or subtract reads, at a few codes across the range (they
  // shift where the later clamps bite). A tensor min or max is probed where
  // it changes nothing (apply), and a tensor multiply makes any move
  // unbounded (move_at).
  // At most 4 residuals times 4 tensor values; held in place, since the
  // tie loops ask for them thousands of times per channel.
  struct Probes {
    std::array<Probe, 16> items{};
    std::size_t count = 0;
    const Probe* begin() const { return items.data(); }
    const Probe* end() const { return items.data() + count; }
  };

  Probes residual_probes(std::size_t r, double res) const {
    const bool sum = sum_after_[r], binary = binary_after_[r];
    const double lo = static_cast<double>(res_lo_), hi = static_cast<double>(res_hi_);
    const std::array<double, 4> residuals{lo, 0.0, hi, res};
    const std::array<double, 4> tensors{res, 0.0, lo, hi};
    Probes probes;
    for (std::size_t a = sum ? 0 : 3; a < 4; ++a) {
      for (std::size_t b = 0; b < (binary ? 4u : 1u); ++b) {
        probes.items[probes.count++] = {residuals[a], tensors[b]};
      }
    }
    return probes;
  }

  // Every op in [from, to) is monotone in its input (for a fixed value of a
  // tensor it reads).
  bool monotone(std::size_t from, std::size_t to) const {
    for (std::size_t i = from; i < to && i < p_.post_ops.size(); ++i) {
      const auto* e = std::get_if<EltwisePostOp>(&p_.post_ops[i]);
      if (e != nullptr && !monotone_increasing(e->alg, e->alpha) && e->alg != EltwiseAlg::linear) {
        return false;
      }
    }
    return true;
  }

  // The output for an input y of op r equals the output for `far` (beyond
  // y), at every residual probe.
  bool saturated(std::size_t r, double y, double far) const {
    for (const Probe& pr : residual_probes(r, 0.0)) {
      const std::size_t none = p_.post_ops.size();
      if (finish(r, y, pr, none, false) != finish(r, far, pr, none, false)) return false;
    }
    return true;
  }

  // Output codes between rounding the input y of op r down and up, the
  // widest apart the later near-ties allow.
  double move_at(std::size_t r, double y, double res) const {
    constexpr int kBranches = 4;
    // A tensor multiply after the rounding can scale a one-code step to any
    // number of codes.
    for (std::size_t i = r + 1; i < flat_.size(); ++i) {
      if (flat_[i].kind == Flat::binary_tensor && flat_[i].binary == BinaryAlg::mul) return kInf;
    }
    double worst = 0.0;
    for (const Probe& pr : residual_probes(r, res)) {
      std::pair<double, double> down{kInf, -kInf}, up{kInf, -kInf};
      finish_range(r, y, pr, r, false, down, kBranches);
      finish_range(r, y, pr, r, true, up, kBranches);
      const double spread = std::max(std::abs(up.second - down.first), std::abs(down.second - up.first));
      worst = std::max(worst, spread / last_step());
    }
    return worst;
  }

  // Whether a tie at op r can move the output by more than one code: the
  // first tie k + 0.5 across the input's range (every one near zero, powers
  // of two further out) that does, with its move; else the largest move.
  std::pair<double, double> worst_move(std::size_t r) const {
    const auto [lo, hi] = input_interval(r);
    // One more on each side: a clamp bound just past a tie (0.50000003 for
    // an exact 0.5 carried through folded constants) is a value reached.
    const double from = std::floor(std::max(lo - 1.0, -static_cast<double>(kTieWindow)));
    const double to = std::floor(std::min(hi + 1.0, static_cast<double>(kTieWindow)));
    // The powers of two past the window inside the interval, by bit.
    std::uint32_t above = 0, below = 0;
    int bit = 0;
    for (double k = static_cast<double>(kTieWindow); k < 0x1p31; k *= 2.0, ++bit) {
      if (k + 0.5 >= lo && k + 0.5 <= hi) above |= 1u << bit;
      if (-k - 0.5 >= lo && -k - 0.5 <= hi) below |= 1u << bit;
    }
    // The sweep reads these ties, the ops from r on and the destination:
    // the channels of a layer, whose scales differ before r, usually share
    // them all.
    std::vector<double> key{static_cast<double>(r), from, to, static_cast<double>(above),
                            static_cast<double>(below), static_cast<double>(p_.dst_type),
                            p_.dst_zero_point ? 1.0 : 0.0,
                            static_cast<double>(p_.dst_zero_point.value_or(0))};
    for (std::size_t i = r; i < p_.post_ops.size(); ++i) append_op_key(key, p_.post_ops[i], c_);
    static HazardCache<std::pair<double, double>> sweeps;
    return sweeps.get(key, [&] {
      std::vector<double> ties;
      for (double k = from; k <= to; k += 1.0) ties.push_back(k + 0.5);
      bit = 0;
      for (double k = static_cast<double>(kTieWindow); k < 0x1p31; k *= 2.0, ++bit) {
        if ((above >> bit) & 1u) ties.push_back(k + 0.5);
        if ((below >> bit) & 1u) ties.push_back(-k - 0.5);
      }
      std::pair<double, double> worst{0.0, 0.0};
      for (const double t : ties) {
        const double m = move_at(r, t, 0.0);
        if (m > worst.first) worst = {m, t};
        if (worst.first > 1.0 + 1e-6) break;  // one is enough to look closer
      }
      return worst;
    });
  }

  std::string describe_tie(std::size_t j, double y, const char* from, double x, double moved) const {
    std::ostringstream os;
    os << "rounding step " << j + 1 << " of " << rounds_.size() << " meets a .5 tie (input "
       << std::setprecision(9) << y << std::setprecision(6)
       << " from " << from << x << ", channel " << channel_text()
       << ") where rounding it either way moves the output by " << std::nearbyint(moved)
       << " codes; the fused primitive's f32 arithmetic may round it the other way";
    return os.str();
  }

  // The accumulators in [-kAccWindow, kAccWindow] that may put the input of
  // op r within noise of a tie, in increasing order: all of them, unless
  // everything before r is affine (y = a x + b, what a FakeQuantize after a
  // layer composes to); then only those beside each tie k + 0.5 that a x + b
  // crosses (a scale of 0.001 crosses two, not 2049). The tolerance is
  // near_tie's at the largest intermediate anywhere in the window, so the
  // candidates include every accumulator the full loop would flag.
  std::vector<std::int64_t> accumulator_candidates(std::size_t r, bool tensor_before) const {
    std::vector<std::int64_t> all;
    const auto everything = [&all] {
      for (std::int64_t x = -kAccWindow; x <= kAccWindow; ++x) all.push_back(x);
      return all;
    };
    if (tensor_before) return everything();
    for (std::size_t i = 0; i < r; ++i) {
      const Flat& f = flat_[i];
      const bool affine =
          (f.kind == Flat::unary && f.alg == EltwiseAlg::linear) ||
          (f.kind == Flat::binary_constant &&
           (f.binary == BinaryAlg::add || f.binary == BinaryAlg::sub || f.binary == BinaryAlg::mul));
      if (!affine) return everything();
    }
    double magnitude = 0.0;
    const auto eval = [&](double x) {
      double y = x * scale();
      magnitude = std::max(magnitude, std::abs(y));
      for (std::size_t i = 0; i < r; ++i) {
        y = apply(i, y, 0.0, false, false);
        magnitude = std::max(magnitude, std::abs(y));
      }
      return y;
    };
    const double w = static_cast<double>(kAccWindow);
    const double b = eval(0.0), a = eval(1.0) - b, y_lo = eval(-w), y_hi = eval(w);
    if (!std::isfinite(a) || !std::isfinite(b) || !std::isfinite(y_lo) || !std::isfinite(y_hi)) {
      return everything();
    }
    const double tol = 0x1p-20 * std::max(1.0, magnitude);
    const double lo = std::min(y_lo, y_hi) - tol, hi = std::max(y_lo, y_hi) + tol;
    // Ties crossed, and accumulators per tie: past a third of the window the
    // full loop is as cheap.
    const double ties = std::floor(hi - 0.5) - std::ceil(lo - 0.5) + 1.0;
    const double per_tie = std::abs(a) > 0.0 ? 2.0 * tol / std::abs(a) + 3.0 : 2.0 * w + 1.0;
    if (ties * per_tie > (2.0 * w + 1.0) / 3.0) return everything();
    for (double k = std::ceil(lo - 0.5); k <= std::floor(hi - 0.5); k += 1.0) {
      const double t = k + 0.5;
      const double x1 = (t - tol - b) / a, x2 = (t + tol - b) / a;
      const auto from = static_cast<std::int64_t>(std::floor(std::min(x1, x2))) - 1;
      const auto to = static_cast<std::int64_t>(std::ceil(std::max(x1, x2))) + 1;
      for (std::int64_t x = std::max(from, -kAccWindow); x <= std::min(to, kAccWindow); ++x) {
        all.push_back(x);
      }
    }
    std::sort(all.begin(), all.end());
    all.erase(std::unique(all.begin(), all.end()), all.end());
    return all;
  }

  // The first rounding point reads the accumulator (plus the bias), which
  // the unfused path itself only knows to f32 precision: a tie there may
  // round either way in both. What is refused is a tie that recurs (a scale
  // like 0.1 puts every accumulator ending in 5 on one), where the fused
  // primitive would systematically take the other side: at least kRecurring
  // hits over accumulators in [-kAccWindow, kAccWindow] (f32 noise alone
  // near a tie hits about once in 2^19 / |v| accumulators).
  std::optional<std::string> recurring_accumulator_ties(std::size_t r) const {
    constexpr int kRecurring = 8;
    const bool tensor_before = reads_tensor_in(0, r);
    const std::int64_t res_count = tensor_before ? res_hi_ - res_lo_ + 1 : 1;
    if ((2 * kAccWindow + 1) * res_count > kMaxEvaluations) return std::nullopt;
    int hits = 0;
    std::optional<std::string> first_hazard;
    for (const std::int64_t x : accumulator_candidates(r, tensor_before)) {
      for (std::int64_t k = 0; k < res_count; ++k) {
        const double res = static_cast<double>(tensor_before ? res_lo_ + k : 0);
        double y = static_cast<double>(x) * scale();
        double magnitude = std::abs(y);
        for (std::size_t i = 0; i < r; ++i) {
          y = apply(i, y, res, false, false);
          magnitude = std::max(magnitude, std::abs(y));
        }
        if (!near_tie(y, magnitude)) continue;
        if (y - std::floor(y) == 0.5) {
          bool exact = true;
          for (const bool fma : {false, true}) {
            float yf = static_cast<float>(x) * static_cast<float>(scale());
            for (std::size_t i = 0; i < r; ++i) yf = apply_f32(p_.post_ops[i], yf, static_cast<float>(res), fma);
            exact = exact && static_cast<double>(yf) == y;
          }
          if (exact) continue;
        }
        const double moved = move_at(r, y, res);
        if (moved <= 1.0 + 1e-6) continue;
        if (!first_hazard) first_hazard = describe_tie(0, y, "accumulator ", static_cast<double>(x), moved);
        if (++hits >= kRecurring) return first_hazard;
        break;
      }
    }
    return std::nullopt;
  }

  // Ties at the input of the j-th rounding point, and what they move.
  std::optional<std::string> check_round(std::size_t j) {
    const std::size_t r = rounds_[j];
    if (j == 0) return recurring_accumulator_ties(r);

    // Where x enters: the previous rounding point's code (its op writes
    // scale * x). The codes it can write, from the clamps before it.
    const std::size_t first = rounds_[j - 1];
    const auto [lo, hi] = input_interval(first);
    std::int64_t x_lo = -kTieWindow, x_hi = kTieWindow;
    bool bounded = std::isfinite(lo) && std::isfinite(hi) && hi - lo < static_cast<double>(kMaxCodes);
    if (bounded) {
      x_lo = static_cast<std::int64_t>(std::nearbyint(lo));
      x_hi = static_cast<std::int64_t>(std::nearbyint(hi));
    }
    const bool tensor_before = reads_tensor_in(first, r);
    const std::int64_t res_count = tensor_before ? res_hi_ - res_lo_ + 1 : 1;
    // A tensor read in between is enumerated as its codes: one tensor, of
    // the s8/u8 destination's type (an f32 tensor, or two, are not).
    int tensors = 0;
    bool codes = p_.dst_type != DataType::f32;
    for (std::size_t i = first; i < r; ++i) {
      if (!reads_tensor(p_.post_ops[i])) continue;
      ++tensors;
      if (const auto* b = std::get_if<BinaryPostOp>(&p_.post_ops[i])) {
        codes = codes && std::get<ExternalTensor>(b->tensor).data_type == p_.dst_type;
      } else {
        codes = codes && std::get<SumPostOp>(p_.post_ops[i]).data_type == p_.dst_type;
      }
    }
    if (tensors > 1 || (tensors == 1 && !codes)) bounded = false;
    const auto value_at = [&](std::int64_t x, double res, double& magnitude) {
      double y = static_cast<double>(std::get<EltwisePostOp>(p_.post_ops[first]).scale) *
                 static_cast<double>(x);
      magnitude = std::abs(y);
      for (std::size_t i = first + 1; i < r; ++i) {
        y = apply(i, y, res, false, false);
        magnitude = std::max(magnitude, std::abs(y));
      }
      return y;
    };
    if (!bounded && !tensor_before) {
      // The previous rounding point is not clamped before it (the composer
      // moves clamps after a rounding): its codes are unbounded. Codes
      // outside the window are harmless when everything from them to the
      // output is monotone and the output is already saturated at the
      // window's ends (a later clamp): every tie beyond rounds to the same
      // output either way.
      // Or when the window's ends already reach the input's own bounds
      // (a clamp between the two rounding points).
      double m = 0.0;
      const double a = value_at(x_lo, 0.0, m), b = value_at(x_hi, 0.0, m);
      const auto [ylo, yhi] = input_interval(r);
      const bool downstream = monotone(r + 1, p_.post_ops.size());
      bounded = monotone(first + 1, r) &&
                (std::min(a, b) <= ylo || (downstream && saturated(r, std::ceil(std::min(a, b)), -0x1p40))) &&
                (std::max(a, b) >= yhi || (downstream && saturated(r, std::floor(std::max(a, b)), 0x1p40)));
    }
    if (!bounded || (x_hi - x_lo + 1) * res_count > kMaxEvaluations) {
      // The values reaching it cannot all be checked. A tie here that
      // moves the output by at most one code is the contract's one LSB.
      const auto [worst, worst_tie] = worst_move(r);
      if (worst <= 1.0 + 1e-6) return std::nullopt;
      std::ostringstream os;
      os << "rounding step " << j + 1 << " of " << rounds_.size() << " can meet a .5 tie (e.g. input "
         << worst_tie << ", channel " << channel_text() << ") where rounding it either way moves the output by "
         << std::nearbyint(worst) << " codes, and the values reaching it ("
         << (tensor_before ? "codes and a tensor read before it" : "codes of the previous rounding")
         << ") are too many to check";
      return os.str();
    }
    for (std::int64_t x = x_lo; x <= x_hi; ++x) {
      for (std::int64_t k = 0; k < res_count; ++k) {
        const double res = static_cast<double>(tensor_before ? res_lo_ + k : 0);
        double magnitude = 0.0;
        const double y = value_at(x, res, magnitude);
        if (!near_tie(y, magnitude)) continue;
        // An exact tie that f32 computes exactly too (power-of-two scales)
        // rounds half to even in both paths.
        if (y - std::floor(y) == 0.5) {
          bool exact = true;
          for (const bool fma : {false, true}) {
            float yf = std::get<EltwisePostOp>(p_.post_ops[first]).scale * static_cast<float>(x);
            for (std::size_t i = first + 1; i < r; ++i) {
              yf = apply_f32(p_.post_ops[i], yf, static_cast<float>(res), fma);
            }
            exact = exact && static_cast<double>(yf) == y;
          }
          if (exact) continue;
        }
        const double moved = move_at(r, y, res);
        if (moved > 1.0 + 1e-6) return describe_tie(j, y, "code ", static_cast<double>(x), moved);
      }
    }
    return std::nullopt;
  }

  const PostOpsPlan& p_;
  int c_;
  bool mark_channel_ = false;  // reasons name the channel as kChannelMark (cached)
  std::vector<std::size_t> rounds_;
  std::vector<Flat> flat_;
  std::vector<bool> reads_from_;
  std::vector<bool> sum_after_, binary_after_;  // see the constructor
  std::vector<bool> transcendental_from_;
  std::int64_t res_lo_ = 0, res_hi_ = 255;
};

// What the Checker reads for every channel: the destination, the ops, and
// each per-tensor value (a per-channel vector by its size only).
std::vector<double> common_key(const PostOpsPlan& plan) {
  const bool per_channel_scales = plan.output_scales.size() > 1;
  std::vector<double> key{static_cast<double>(plan.dst_type),
                          plan.dst_zero_point ? 1.0 : 0.0,
                          static_cast<double>(plan.dst_zero_point.value_or(0)),
                          plan.output_scales.empty() ? 0.0 : per_channel_scales ? 2.0 : 1.0,
                          plan.output_scales.empty() ? 1.0 : per_channel_scales
                              ? static_cast<double>(plan.output_scales.size())
                              : static_cast<double>(plan.output_scales[0])};
  for (const PostOp& op : plan.post_ops) append_op_key(key, op, -1);
  return key;
}

// What the Checker reads for channel c besides the common key: the values of
// the per-channel vectors at c, in the plan's order.
void channel_values(const PostOpsPlan& plan, int c, std::vector<double>& out) {
  out.clear();
  if (plan.output_scales.size() > 1) out.push_back(at(plan.output_scales, c));
  for (const PostOp& op : plan.post_ops) {
    const auto* b = std::get_if<BinaryPostOp>(&op);
    if (b == nullptr) continue;
    const auto* t = std::get_if<ConstantTensor>(&b->tensor);
    if (t != nullptr && t->values.size() > 1) out.push_back(at(t->values, c));
  }
}

ChannelHazardCache& hazard_cache() {
  static ChannelHazardCache cache;
  return cache;
}

}  // namespace

std::optional<std::string> rounding_tie_hazard(const PostOpsPlan& plan) {
  bool any = false;
  for (const PostOp& op : plan.post_ops) any = any || is_round(op);
  if (!any) return std::nullopt;
  // The first channel of each distinct arithmetic; the reason names the
  // channel, so the cache key carries it too.
  const ChannelHazardCache::Common common = hazard_cache().intern(common_key(plan));
  std::unordered_set<std::vector<double>, KeyHash> seen;
  std::vector<std::vector<double>> keys;
  std::vector<int> channels;
  std::vector<double> values;
  for (int c = 0; c < std::max(1, plan.channels); ++c) {
    channel_values(plan, c, values);
    if (!seen.insert(values).second) continue;
    keys.push_back(values);
    keys.back().push_back(static_cast<double>(c));
    channels.push_back(c);
  }
  // The channels are checked on the team (a layer's channels are as many as
  // its outputs, each thousands of ties); the reason is the first channel's
  // with a hazard, as a loop in order would find it: a channel past one
  // found is skipped, one before it is still checked.
  const auto n = static_cast<std::int64_t>(keys.size());
  std::vector<std::optional<std::string>> hazards(keys.size());
  std::atomic<std::int64_t> first_found{n};
#pragma omp parallel for schedule(dynamic) if (n > 1 && !omp_in_parallel())
  for (std::int64_t i = 0; i < n; ++i) {
    if (i > first_found.load(std::memory_order_relaxed)) continue;
    const auto k = static_cast<std::size_t>(i);
    hazards[k] = hazard_cache().get(common, std::move(keys[k]),
                                    [&] { return Checker(plan, channels[k]).run(); });
    if (hazards[k]) {
      std::int64_t seen_first = first_found.load();
      while (i < seen_first && !first_found.compare_exchange_weak(seen_first, i)) {
      }
    }
  }
  const std::int64_t found = first_found.load();
  if (found < n) return hazards[static_cast<std::size_t>(found)];
  return std::nullopt;
}

}  // namespace qfuse::composer
