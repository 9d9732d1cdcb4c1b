#include "composer/rules.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <utility>

#include <spdlog/fmt/fmt.h>

#include "composer/fake_quantize_formula.hpp"
#include "composer/quant_math.hpp"

namespace qfuse::composer {
namespace {

// ---------------------------------------------------------------------------
// Helpers on per-tensor / per-channel vectors (size 1 or channels).

bool is_per_tensor(const std::vector<float>& v) { return v.size() == 1; }

float at(const std::vector<float>& v, std::size_t c) { return v.size() == 1 ? v.front() : v[c]; }

template <typename F>
std::vector<float> combine(const std::vector<float>& a, const std::vector<float>& b, F f) {
  const std::size_t width = std::max(a.size(), b.size());
  std::vector<float> out(width);
  for (std::size_t c = 0; c < width; ++c) {
    out[c] = f(at(a, c), at(b, c));
  }
  return out;
}

template <typename F>
bool all_of(const std::vector<float>& v, F f) {
  return std::all_of(v.begin(), v.end(), f);
}

bool all_equal(const std::vector<float>& v) {
  return std::all_of(v.begin(), v.end(), [&](float x) { return x == v.front(); });
}

bool all_finite(const std::vector<float>& v) {
  return all_of(v, [](float x) { return std::isfinite(x); });
}

std::vector<float> broadcast(const std::vector<float>& v, int channels) {
  return is_per_tensor(v) ? std::vector<float>(static_cast<std::size_t>(channels), v.front()) : v;
}

std::string text(const std::vector<float>& v) {
  if (is_per_tensor(v)) {
    return fmt::format("{}", v.front());
  }
  return fmt::format("[{}, {}, ... x{}]", v[0], v[1], v.size());
}

template <typename T>
T* item_at(Work& work, std::size_t i) {
  return i < work.items.size() ? std::get_if<T>(&work.items[i]) : nullptr;
}

void replace(Work& work, std::size_t i, std::size_t count, std::vector<Item> replacement) {
  const auto first = work.items.begin() + static_cast<std::ptrdiff_t>(i);
  work.items.erase(first, first + static_cast<std::ptrdiff_t>(count));
  work.items.insert(work.items.begin() + static_cast<std::ptrdiff_t>(i),
                    std::make_move_iterator(replacement.begin()),
                    std::make_move_iterator(replacement.end()));
}

bool is_integer_store(DataType type) { return type == DataType::s8 || type == DataType::u8; }

float type_min(DataType type) { return type == DataType::s8 ? -128.0F : 0.0F; }
float type_max(DataType type) { return type == DataType::s8 ? 127.0F : 255.0F; }

// ---------------------------------------------------------------------------
// Normalising rules: input steps that are special cases of basic steps.

// FQ(x) == round(clip(x, il, ih) * (1/Si) + Zi) * So + ol   (needs il < ih; checked before the rules run)
std::optional<std::string> fake_quantize_is_crop_affine_round_affine(Work& work) {
  for (std::size_t i = 0; i < work.items.size(); ++i) {
    if (const auto* fq = item_at<FakeQuantize>(work, i)) {
      const int levels = fq->levels;
      FakeQuantizeAffine a = decompose_fake_quantize(*fq);
      std::string detail =
          fmt::format("levels {}: crop [{}, {}], x * {} + {}, round, x * {} + {}", levels,
                      text(a.crop_low), text(a.crop_high), text(a.input_scale),
                      text(a.input_shift), text(a.output_scale), text(a.output_shift));
      replace(work, i, 1,
              {Clip{std::move(a.crop_low), std::move(a.crop_high)}, Scale{std::move(a.input_scale)},
               Shift{std::move(a.input_shift)}, Round{}, Scale{std::move(a.output_scale)},
               Shift{std::move(a.output_shift)}});
      return detail;
    }
  }
  return std::nullopt;
}

// (quantize(x; S, Z, lo, hi) - Z) * S == clip(round(x * (1/S)), lo - Z, hi - Z) * S
// (Z an integer: adding it to an integer and taking it off again is exact,
// so the pair needs no shift; x / S as below)
std::optional<std::string> quantize_then_dequantize_is_clipped_round(Work& work) {
  for (std::size_t i = 0; i + 2 < work.items.size(); ++i) {
    const auto* q = item_at<Quantize>(work, i);
    const auto* shift = item_at<Shift>(work, i + 1);
    const auto* scale = item_at<Scale>(work, i + 2);
    if (q == nullptr || shift == nullptr || scale == nullptr || scale->values != q->scale ||
        shift->values.size() != q->zero_point.size()) {
      continue;
    }
    bool undoes = true;
    for (std::size_t c = 0; c < q->zero_point.size(); ++c) {
      undoes = undoes && shift->values[c] == -q->zero_point[c];
    }
    if (!undoes) continue;
    std::vector<float> inverse, lo, hi;
    for (float s : q->scale) inverse.push_back(1.0F / s);
    for (float z : q->zero_point) {
      lo.push_back(q->lo - z);
      hi.push_back(q->hi - z);
    }
    std::string detail = fmt::format("scale {}, codes [{}, {}] - zero point {}", text(q->scale),
                                     q->lo, q->hi, text(q->zero_point));
    std::vector<float> s = q->scale;
    replace(work, i, 3, {Scale{std::move(inverse)}, Round{}, Clip{std::move(lo), std::move(hi)},
                         Scale{std::move(s)}});
    return detail;
  }
  return std::nullopt;
}

// store_T(quantize(x; S, Z, lo, hi)) == store_T(clip(x * (1/S) + Z, lo, hi))  iff it is the chain's first rounding point and T is s8/u8
// The store rounds half to even. Equal except where x / S sits on a .5 tie
// and Z is odd: there the store rounds x / S + Z to the other neighbour, one
// code. Ties at the first rounding point are the unfused path's too, known
// only to f32 precision (tie_hazard.hpp); later rounding points read exact
// codes and keep ONNX's order. It saves the round and leaves Z to the
// destination's zero point.
std::optional<std::string> final_quantize_is_scaled_store(Work& work) {
  if (!is_integer_store(work.dst_type) || work.items.empty()) return std::nullopt;
  const auto* q = std::get_if<Quantize>(&work.items.back());
  if (q == nullptr) return std::nullopt;
  for (std::size_t i = 0; i + 1 < work.items.size(); ++i) {
    const Item& item = work.items[i];
    const auto* e = std::get_if<Eltwise>(&item);
    if (std::holds_alternative<Round>(item) || std::holds_alternative<FakeQuantize>(item) ||
        std::holds_alternative<Quantize>(item) || (e != nullptr && e->alg == EltwiseAlg::round)) {
      return std::nullopt;
    }
  }
  std::vector<float> inverse;
  for (float s : q->scale) inverse.push_back(1.0F / s);
  std::string detail = fmt::format("scale {}, zero point {}", text(q->scale), text(q->zero_point));
  std::vector<Item> replacement{Scale{std::move(inverse)}, Shift{q->zero_point},
                                Clip{{q->lo}, {q->hi}}};
  replace(work, work.items.size() - 1, 1, std::move(replacement));
  return detail;
}

// quantize(x; S, Z, lo, hi) == clip(round(x * (1/S)) + Z, lo, hi)
// (x / S taken as x * (1 / S), the primitive's output scale; the two f32
// results differ at most at a .5 tie, by one code)
std::optional<std::string> quantize_is_scale_round_shift_clip(Work& work) {
  for (std::size_t i = 0; i < work.items.size(); ++i) {
    if (const auto* q = item_at<Quantize>(work, i)) {
      std::vector<float> inverse;
      for (float s : q->scale) inverse.push_back(1.0F / s);
      std::string detail = fmt::format("scale {}, zero point {}, codes [{}, {}]", text(q->scale),
                                       text(q->zero_point), q->lo, q->hi);
      replace(work, i, 1,
              {Scale{std::move(inverse)}, Round{}, Shift{q->zero_point}, Clip{{q->lo}, {q->hi}}});
      return detail;
    }
  }
  return std::nullopt;
}

// linear(x; alpha, beta) == x * alpha + beta
std::optional<std::string> linear_is_scale_then_shift(Work& work) {
  for (std::size_t i = 0; i < work.items.size(); ++i) {
    const auto* e = item_at<Eltwise>(work, i);
    if (e != nullptr && e->alg == EltwiseAlg::linear) {
      const float alpha = e->alpha;
      const float beta = e->beta;
      replace(work, i, 1, {Scale{{alpha}}, Shift{{beta}}});
      return fmt::format("linear({}, {}) at {}", alpha, beta, i);
    }
  }
  return std::nullopt;
}

// eltwise clip(x; alpha, beta) == min(max(x, alpha), beta)
std::optional<std::string> eltwise_clip_is_clip(Work& work) {
  for (std::size_t i = 0; i < work.items.size(); ++i) {
    const auto* e = item_at<Eltwise>(work, i);
    if (e != nullptr && e->alg == EltwiseAlg::clip) {
      const float lo = e->alpha;
      const float hi = e->beta;
      replace(work, i, 1, {Clip{{lo}, {hi}}});
      return fmt::format("clip({}, {}) at {}", lo, hi, i);
    }
  }
  return std::nullopt;
}

// eltwise round(x) == Round(x), both half to even
std::optional<std::string> eltwise_round_is_round(Work& work) {
  for (std::size_t i = 0; i < work.items.size(); ++i) {
    const auto* e = item_at<Eltwise>(work, i);
    if (e != nullptr && e->alg == EltwiseAlg::round) {
      replace(work, i, 1, {Round{}});
      return fmt::format("at {}", i);
    }
  }
  return std::nullopt;
}

// hsigmoid(x) == min(max(x + 3, 0), 6) / 6 == clip(x * (1/6) + 1/2, 0, 1)   (no hsigmoid post-op in oneDNN 2.6)
std::optional<std::string> hsigmoid_is_clipped_affine(Work& work) {
  for (std::size_t i = 0; i < work.items.size(); ++i) {
    const auto* e = item_at<Eltwise>(work, i);
    if (e != nullptr && e->alg == EltwiseAlg::hsigmoid) {
      replace(work, i, 1, {Scale{{1.0F / 6.0F}}, Shift{{0.5F}}, Clip{{0.0F}, {1.0F}}});
      return fmt::format("at {}", i);
    }
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------
// Simplifying rules.

// v[c] == v[0] for every c  =>  the per-channel vector v is the per-tensor value v[0]
std::optional<std::string> uniform_channels_are_per_tensor(Work& work) {
  const auto collapse = [](std::vector<float>& v) {
    if (v.size() > 1 && all_equal(v)) {
      // erase, not resize(1): GCC 12 at -O3 warns (array-bounds) on the shrinking resize.
      v.erase(v.begin() + 1, v.end());
      return true;
    }
    return false;
  };
  for (std::size_t i = 0; i < work.items.size(); ++i) {
    if (auto* s = item_at<Scale>(work, i); s != nullptr && collapse(s->values)) {
      return fmt::format("scale {} at {}", s->values.front(), i);
    }
    if (auto* b = item_at<Shift>(work, i); b != nullptr && collapse(b->values)) {
      return fmt::format("shift {} at {}", b->values.front(), i);
    }
    if (auto* c = item_at<Clip>(work, i)) {
      const bool lo = collapse(c->lo);
      const bool hi = collapse(c->hi);
      if (lo || hi) {
        return fmt::format("clip [{}, {}] at {}", text(c->lo), text(c->hi), i);
      }
    }
  }
  if (work.output_scales.size() > 1 && all_equal(work.output_scales)) {
    work.output_scales.erase(work.output_scales.begin() + 1, work.output_scales.end());
    return fmt::format("output scales {}", work.output_scales.front());
  }
  return std::nullopt;
}

// x * 1 == x
std::optional<std::string> multiply_by_one_is_identity(Work& work) {
  for (std::size_t i = 0; i < work.items.size(); ++i) {
    const auto* s = item_at<Scale>(work, i);
    if (s != nullptr && all_of(s->values, [](float v) { return v == 1.0F; })) {
      work.items.erase(work.items.begin() + static_cast<std::ptrdiff_t>(i));
      return fmt::format("at {}", i);
    }
  }
  return std::nullopt;
}

// x + 0 == x
std::optional<std::string> add_of_zero_is_identity(Work& work) {
  for (std::size_t i = 0; i < work.items.size(); ++i) {
    const auto* b = item_at<Shift>(work, i);
    if (b != nullptr && all_of(b->values, [](float v) { return v == 0.0F; })) {
      work.items.erase(work.items.begin() + static_cast<std::ptrdiff_t>(i));
      return fmt::format("at {}", i);
    }
  }
  return std::nullopt;
}

// saturate_T(clip(x, lo, hi)) == saturate_T(x)  iff the clip is the last step, T is s8/u8, lo <= min(T) + 0.5 and hi > max(T) - 0.5
// The store clamps to T's range and rounds half to even, so every x below a
// lo <= min(T) + 0.5 stores min(T) either way (min(T) is even: 0, -128), and
// every x above a hi > max(T) - 0.5 stores max(T): FakeQuantize ranges
// carried through floats leave such bounds (7.6e-06, 254.99998).
std::optional<std::string> saturation_covers_final_clip(Work& work) {
  if (!is_integer_store(work.dst_type) || work.dst_zero_point || work.items.empty()) {
    return std::nullopt;
  }
  const auto* c = item_at<Clip>(work, work.items.size() - 1);
  if (c == nullptr) {
    return std::nullopt;
  }
  const float lo = type_min(work.dst_type);
  const float hi = type_max(work.dst_type);
  if (!all_of(c->lo, [&](float v) { return v <= lo + 0.5F; }) ||
      !all_of(c->hi, [&](float v) { return v > hi - 0.5F; })) {
    return std::nullopt;
  }
  std::string detail = fmt::format("clip [{}, {}] covers {} [{}, {}]", text(c->lo), text(c->hi),
                                   to_string(work.dst_type), lo, hi);
  work.items.pop_back();
  return detail;
}

// saturate_T(round(x)) == saturate_T(x)  iff the round is the last step and T is s8/u8 (the store rounds half to even too)
std::optional<std::string> saturation_rounds_final_round(Work& work) {
  if (!is_integer_store(work.dst_type) || work.dst_zero_point || work.items.empty() ||
      item_at<Round>(work, work.items.size() - 1) == nullptr) {
    return std::nullopt;
  }
  work.items.pop_back();
  return fmt::format("before the {} store", to_string(work.dst_type));
}

// round(x) ~= x (off by at most half a quantum)  iff allow_residual_round_drop and the round feeds a residual sum (FQ -> sum -> FQ)
std::optional<std::string> residual_round_is_dropped(Work& work) {
  if (!work.allow_residual_round_drop) {
    return std::nullopt;
  }
  for (std::size_t i = 0; i < work.items.size(); ++i) {
    if (item_at<Round>(work, i) == nullptr) {
      continue;
    }
    // The round of the second FQ may already be gone (the s8/u8 store does
    // it), so a following sum is what marks the residual block.
    for (std::size_t j = i + 1; j < work.items.size(); ++j) {
      if (item_at<Sum>(work, j) != nullptr) {
        work.items.erase(work.items.begin() + static_cast<std::ptrdiff_t>(i));
        return fmt::format("round at {} before the sum at {}", i, j);
      }
    }
  }
  return std::nullopt;
}

// (x * a) * b == x * (a * b)
std::optional<std::string> adjacent_scales_fold(Work& work) {
  for (std::size_t i = 0; i + 1 < work.items.size(); ++i) {
    auto* a = item_at<Scale>(work, i);
    const auto* b = item_at<Scale>(work, i + 1);
    if (a != nullptr && b != nullptr) {
      std::string detail = fmt::format("{} * {} at {}", text(a->values), text(b->values), i);
      a->values = combine(a->values, b->values, [](float x, float y) { return x * y; });
      work.items.erase(work.items.begin() + static_cast<std::ptrdiff_t>(i + 1));
      return detail;
    }
  }
  return std::nullopt;
}

// (x + a) + b == x + (a + b)
std::optional<std::string> adjacent_shifts_fold(Work& work) {
  for (std::size_t i = 0; i + 1 < work.items.size(); ++i) {
    auto* a = item_at<Shift>(work, i);
    const auto* b = item_at<Shift>(work, i + 1);
    if (a != nullptr && b != nullptr) {
      std::string detail = fmt::format("{} + {} at {}", text(a->values), text(b->values), i);
      a->values = combine(a->values, b->values, [](float x, float y) { return x + y; });
      work.items.erase(work.items.begin() + static_cast<std::ptrdiff_t>(i + 1));
      return detail;
    }
  }
  return std::nullopt;
}

// (x + b) * s == x * s + b * s  iff it does not turn a per-tensor shift per-channel, unless the scale then folds (the shift is first or follows a scale)
std::optional<std::string> scale_moves_before_shift(Work& work) {
  for (std::size_t i = 0; i + 1 < work.items.size(); ++i) {
    const auto* b = item_at<Shift>(work, i);
    const auto* s = item_at<Scale>(work, i + 1);
    if (b == nullptr || s == nullptr) {
      continue;
    }
    const bool keeps_shape = is_per_tensor(s->values) || !is_per_tensor(b->values);
    const bool scale_folds = i == 0 || item_at<Scale>(work, i - 1) != nullptr;
    if (!keeps_shape && !scale_folds) {
      continue;
    }
    std::string detail = fmt::format("(x + {}) * {} at {}", text(b->values), text(s->values), i);
    Shift moved{combine(b->values, s->values, [](float x, float y) { return x * y; })};
    Scale scale = *s;
    replace(work, i, 2, {std::move(scale), std::move(moved)});
    return detail;
  }
  return std::nullopt;
}

// round(x) + c == round(x + c)  iff every c is an even integer (with ties to even, an odd c moves a tie by one)
// Exact in real numbers, not in f32: there the sum x + c rounds first, so an
// x within half an ulp of x + c from a tie can round the other way (one code;
// the integer added to the rounded value is exact). Kept for the post-op it
// saves where the shift ends the chain as the destination's zero point:
// MobileNetV3-large's depthwise layers whose codes a table reads, even zero
// points all, differ from ONNX Runtime at 2 of 21504 codes in one layer
// (bench/peers/against_ort.py; none with an explicit round before the shift).
std::optional<std::string> even_shift_moves_before_round(Work& work) {
  constexpr float kExactIntegerLimit = 16777216.0F;  // 2^24: beyond, f32 has no odd integers
  for (std::size_t i = 0; i + 1 < work.items.size(); ++i) {
    const auto* b = item_at<Shift>(work, i + 1);
    if (item_at<Round>(work, i) == nullptr || b == nullptr) {
      continue;
    }
    const bool even = all_of(b->values, [&](float v) {
      return std::fabs(v) < kExactIntegerLimit && is_integer(static_cast<double>(v) / 2.0);
    });
    if (!even) {
      continue;
    }
    std::string detail = fmt::format("shift {} at {}", text(b->values), i + 1);
    Shift moved = *b;
    replace(work, i, 2, {std::move(moved), Round{}});
    return detail;
  }
  return std::nullopt;
}

// clip(x, lo, hi) * s == clip(x * s, min(lo*s, hi*s), max(lo*s, hi*s)) and clip(x, lo, hi) + b == clip(x + b, lo + b, hi + b)  iff a per-tensor clip stays per tensor
std::optional<std::string> affine_moves_before_clip(Work& work) {
  // Exact in f32 too: x -> fl(x * s) and x -> fl(x + b) are monotone.
  for (std::size_t i = 0; i + 1 < work.items.size(); ++i) {
    const auto* c = item_at<Clip>(work, i);
    if (c == nullptr) {
      continue;
    }
    const bool clip_per_tensor = is_per_tensor(c->lo) && is_per_tensor(c->hi);
    Clip moved_clip;
    Item moved_step;
    std::string detail;
    if (const auto* s = item_at<Scale>(work, i + 1)) {
      if (clip_per_tensor && !is_per_tensor(s->values)) {
        continue;
      }
      const auto a = combine(c->lo, s->values, [](float x, float y) { return x * y; });
      const auto b = combine(c->hi, s->values, [](float x, float y) { return x * y; });
      moved_clip.lo = combine(a, b, [](float x, float y) { return std::min(x, y); });
      moved_clip.hi = combine(a, b, [](float x, float y) { return std::max(x, y); });
      moved_step = *s;
      detail = fmt::format("scale {} at {}", text(s->values), i + 1);
    } else if (const auto* sh = item_at<Shift>(work, i + 1)) {
      if (clip_per_tensor && !is_per_tensor(sh->values)) {
        continue;
      }
      moved_clip.lo = combine(c->lo, sh->values, [](float x, float y) { return x + y; });
      moved_clip.hi = combine(c->hi, sh->values, [](float x, float y) { return x + y; });
      moved_step = *sh;
      detail = fmt::format("shift {} at {}", text(sh->values), i + 1);
    } else {
      continue;
    }
    if (!all_finite(moved_clip.lo) || !all_finite(moved_clip.hi)) {
      continue;
    }
    replace(work, i, 2, {std::move(moved_step), std::move(moved_clip)});
    return detail;
  }
  return std::nullopt;
}

// round(clip(x, lo, hi)) == clip(round(x), round(lo), round(hi))   (round is monotone)
//
// Not when a bound is within f32 noise of a .5 tie: the bound is a value the
// chain reaches (a saturated FakeQuantize level carried through folded
// constants, 0.50000003 for an exact 0.5), and rounding it here would decide
// that tie from the folded constants, for every input that saturates. Left
// before the rounding, the bound stays a value the tie check sees.
std::optional<std::string> clip_moves_after_round(Work& work) {
  const auto near_tie = [](const std::vector<float>& v) {
    return std::any_of(v.begin(), v.end(), [](float x) {
      const double d = static_cast<double>(x);
      return std::abs(d - std::floor(d) - 0.5) <= 0x1p-20 * std::max(1.0, std::abs(d));
    });
  };
  for (std::size_t i = 0; i + 1 < work.items.size(); ++i) {
    const auto* c = item_at<Clip>(work, i);
    if (c == nullptr || item_at<Round>(work, i + 1) == nullptr || near_tie(c->lo) ||
        near_tie(c->hi)) {
      continue;
    }
    const auto rounded = [](const std::vector<float>& v) {
      std::vector<float> out(v.size());
      std::transform(v.begin(), v.end(), out.begin(),
                     [](float x) { return round_half_to_even(x); });
      return out;
    };
    Clip moved{rounded(c->lo), rounded(c->hi)};
    std::string detail =
        fmt::format("clip [{}, {}] at {} -> [{}, {}]", text(c->lo), text(c->hi), i,
                    text(moved.lo), text(moved.hi));
    replace(work, i, 2, {Round{}, std::move(moved)});
    return detail;
  }
  return std::nullopt;
}

// relu(relu(x)) == relu(x): max(0, .) is idempotent, bit for bit in f32.
std::optional<std::string> repeated_relu_is_one_relu(Work& work) {
  const auto is_relu = [](const Eltwise* e) {
    return e != nullptr && e->alg == EltwiseAlg::relu && e->alpha == 0.0F;
  };
  for (std::size_t i = 0; i + 1 < work.items.size(); ++i) {
    if (is_relu(item_at<Eltwise>(work, i)) && is_relu(item_at<Eltwise>(work, i + 1))) {
      std::size_t end = i + 2;
      while (is_relu(item_at<Eltwise>(work, end))) ++end;
      work.items.erase(work.items.begin() + static_cast<std::ptrdiff_t>(i + 1),
                       work.items.begin() + static_cast<std::ptrdiff_t>(end));
      return fmt::format("{} relus at {} are one", end - i, i);
    }
  }
  return std::nullopt;
}

// relu(x) * s == relu(x * s)  iff every s >= 0. Only for alpha = 0: then
// both sides are bit-identical in f32 too. A leaky relu's alpha * x * s
// rounds differently from alpha * (x * s) and, on integer levels, lands on
// rounding ties the step-by-step evaluation does not (the scale then folds
// into the relu's eltwise scale instead).
std::optional<std::string> scale_moves_before_relu(Work& work) {
  for (std::size_t i = 0; i + 1 < work.items.size(); ++i) {
    const auto* e = item_at<Eltwise>(work, i);
    const auto* s = item_at<Scale>(work, i + 1);
    if (e == nullptr || e->alg != EltwiseAlg::relu || e->alpha != 0.0F || s == nullptr ||
        !all_of(s->values, [](float v) { return v >= 0.0F; })) {
      continue;
    }
    std::string detail = fmt::format("scale {} at {}", text(s->values), i + 1);
    Scale moved = *s;
    Eltwise relu = *e;
    replace(work, i, 2, {std::move(moved), relu});
    return detail;
  }
  return std::nullopt;
}

// (x + k * r) * s == x * s + (k * s) * r  iff s is per tensor (the sum has one scale)
std::optional<std::string> scale_moves_before_sum(Work& work) {
  for (std::size_t i = 0; i + 1 < work.items.size(); ++i) {
    const auto* sum = item_at<Sum>(work, i);
    const auto* s = item_at<Scale>(work, i + 1);
    if (sum == nullptr || s == nullptr || !is_per_tensor(s->values)) {
      continue;
    }
    const float factor = s->values.front();
    Sum scaled = *sum;
    scaled.scale *= factor;
    std::string detail = fmt::format("scale {} at {}, sum scale {} -> {}", factor, i + 1,
                                     sum->scale, scaled.scale);
    replace(work, i, 2, {Scale{{factor}}, scaled});
    return detail;
  }
  return std::nullopt;
}

// acc * s: oneDNN applies output scales to the accumulator before any post-op, so the first multiply is (or joins) them
std::optional<std::string> leading_scale_is_output_scale(Work& work) {
  const auto* s = item_at<Scale>(work, 0);
  if (s == nullptr) {
    return std::nullopt;
  }
  work.output_scales = work.output_scales.empty()
                           ? s->values
                           : combine(work.output_scales, s->values,
                                     [](float x, float y) { return x * y; });
  std::string detail = fmt::format("output scales {}", text(work.output_scales));
  work.items.erase(work.items.begin());
  return detail;
}

// saturate_T(x + z) == saturate_T(x) with destination zero point z  iff the shift is the last step, per tensor, an integer, T is s8/u8 and the anchor is a convolution
std::optional<std::string> final_integer_shift_is_dst_zero_point(Work& work) {
  // Measured on oneDNN 2.6: convolutions take a constant destination zero
  // point, inner products refuse one; deconvolution is untested, so left out.
  if (!is_integer_store(work.dst_type) || work.dst_zero_point || work.items.empty() ||
      work.anchor != AnchorKind::convolution) {
    return std::nullopt;
  }
  const auto* b = item_at<Shift>(work, work.items.size() - 1);
  // Beyond 2^24 the zero point could not be added exactly in f32; far less
  // than that already saturates every output.
  constexpr float kLimit = 16777216.0F;
  if (b == nullptr || !is_per_tensor(b->values) || !is_integer(b->values.front()) ||
      std::fabs(b->values.front()) >= kLimit) {
    return std::nullopt;
  }
  work.dst_zero_point = static_cast<std::int32_t>(b->values.front());
  work.items.pop_back();
  return fmt::format("zero point {}", *work.dst_zero_point);
}

// (e * f(x)) * s == (e * s) * f(x)  iff s is per tensor (an eltwise post-op has one scale)
std::optional<std::string> scale_folds_into_eltwise_post_op(Work& work) {
  for (std::size_t i = 0; i + 1 < work.items.size(); ++i) {
    auto* e = item_at<EltwisePostOp>(work, i);
    const auto* s = item_at<Scale>(work, i + 1);
    if (e == nullptr || s == nullptr || !is_per_tensor(s->values)) {
      continue;
    }
    std::string detail = fmt::format("scale {} into {} at {}", s->values.front(),
                                     to_string(e->alg), i);
    e->scale *= s->values.front();
    work.items.erase(work.items.begin() + static_cast<std::ptrdiff_t>(i + 1));
    return detail;
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------
// Lowering rules: a step that nothing can fold any more becomes a post-op.

// eltwise step f == eltwise post-op 1 * f(x; alpha, beta)
std::optional<std::string> eltwise_is_post_op(Work& work) {
  for (std::size_t i = 0; i < work.items.size(); ++i) {
    if (const auto* e = item_at<Eltwise>(work, i)) {
      const EltwisePostOp op{e->alg, 1.0F, e->alpha, e->beta};
      work.items[i] = op;
      return fmt::format("{} at {}", to_string(op.alg), i);
    }
  }
  return std::nullopt;
}

// Round == eltwise_round (half to even)
std::optional<std::string> round_is_eltwise_round(Work& work) {
  for (std::size_t i = 0; i < work.items.size(); ++i) {
    if (item_at<Round>(work, i) != nullptr) {
      work.items[i] = EltwisePostOp{EltwiseAlg::round, 1.0F, 0.0F, 0.0F};
      return fmt::format("at {}", i);
    }
  }
  return std::nullopt;
}

// per-tensor clip(x, lo, hi) == eltwise_clip(x; lo, hi)
std::optional<std::string> per_tensor_clip_is_eltwise_clip(Work& work) {
  for (std::size_t i = 0; i < work.items.size(); ++i) {
    const auto* c = item_at<Clip>(work, i);
    if (c != nullptr && is_per_tensor(c->lo) && is_per_tensor(c->hi)) {
      const EltwisePostOp op{EltwiseAlg::clip, 1.0F, c->lo.front(), c->hi.front()};
      work.items[i] = op;
      return fmt::format("[{}, {}] at {}", op.alpha, op.beta, i);
    }
  }
  return std::nullopt;
}

// per-channel clip(x, lo, hi) == min(max(x, lo), hi) == binary_min(binary_max(x, lo), hi)
std::optional<std::string> per_channel_clip_is_binary_max_min(Work& work) {
  for (std::size_t i = 0; i < work.items.size(); ++i) {
    const auto* c = item_at<Clip>(work, i);
    if (c == nullptr) {
      continue;
    }
    std::string detail = fmt::format("[{}, {}] at {}", text(c->lo), text(c->hi), i);
    BinaryPostOp max_op{BinaryAlg::max, Broadcast::per_channel,
                        ConstantTensor{broadcast(c->lo, work.channels)}};
    BinaryPostOp min_op{BinaryAlg::min, Broadcast::per_channel,
                        ConstantTensor{broadcast(c->hi, work.channels)}};
    replace(work, i, 1, {std::move(max_op), std::move(min_op)});
    return detail;
  }
  return std::nullopt;
}

// per-tensor x * a + b == eltwise_linear(x; alpha = a, beta = b)
std::optional<std::string> per_tensor_affine_is_eltwise_linear(Work& work) {
  for (std::size_t i = 0; i < work.items.size(); ++i) {
    float alpha = 1.0F;
    float beta = 0.0F;
    std::size_t count = 0;
    if (const auto* s = item_at<Scale>(work, i); s != nullptr && is_per_tensor(s->values)) {
      alpha = s->values.front();
      count = 1;
    }
    if (const auto* b = item_at<Shift>(work, i + count); b != nullptr && is_per_tensor(b->values)) {
      beta = b->values.front();
      ++count;
    }
    if (count == 0) {
      continue;
    }
    replace(work, i, count, {EltwisePostOp{EltwiseAlg::linear, 1.0F, alpha, beta}});
    return fmt::format("linear({}, {}) at {}", alpha, beta, i);
  }
  return std::nullopt;
}

// per-channel x * s == binary_mul(x, s[c])
std::optional<std::string> per_channel_scale_is_binary_mul(Work& work) {
  for (std::size_t i = 0; i < work.items.size(); ++i) {
    const auto* s = item_at<Scale>(work, i);
    if (s != nullptr && !is_per_tensor(s->values)) {
      std::string detail = fmt::format("{} at {}", text(s->values), i);
      work.items[i] = BinaryPostOp{BinaryAlg::mul, Broadcast::per_channel, ConstantTensor{s->values}};
      return detail;
    }
  }
  return std::nullopt;
}

// per-channel x + b == binary_add(x, b[c])
std::optional<std::string> per_channel_shift_is_binary_add(Work& work) {
  for (std::size_t i = 0; i < work.items.size(); ++i) {
    const auto* b = item_at<Shift>(work, i);
    if (b != nullptr && !is_per_tensor(b->values)) {
      std::string detail = fmt::format("{} at {}", text(b->values), i);
      work.items[i] = BinaryPostOp{BinaryAlg::add, Broadcast::per_channel, ConstantTensor{b->values}};
      return detail;
    }
  }
  return std::nullopt;
}

// x + k * r == sum post-op (k, residual data type)
std::optional<std::string> sum_is_sum_post_op(Work& work) {
  for (std::size_t i = 0; i < work.items.size(); ++i) {
    if (const auto* s = item_at<Sum>(work, i)) {
      const SumPostOp op{s->input, s->scale, s->data_type};
      work.items[i] = op;
      return fmt::format("scale {} at {}", op.scale, i);
    }
  }
  return std::nullopt;
}

// alg(x, t) == binary post-op alg with the external tensor t
std::optional<std::string> binary_is_binary_post_op(Work& work) {
  for (std::size_t i = 0; i < work.items.size(); ++i) {
    if (const auto* b = item_at<Binary>(work, i)) {
      const BinaryPostOp op{b->alg, b->broadcast, ExternalTensor{b->input, b->data_type}};
      work.items[i] = op;
      return fmt::format("{} with input {} at {}", to_string(op.alg), b->input, i);
    }
  }
  return std::nullopt;
}

// eltwise_alg post-op k (scale s, alpha a, beta b) == binary ops with constants  iff an earlier post-op has the same alg and other parameters
// oneDNN 2.6's int8 inner product kernels (brgemm, gemm) apply the first
// post-op of an eltwise algorithm's scale, alpha and beta to every later one
// of that algorithm, silently. Linear and clip have binary equivalents; for
// any other algorithm with equal alpha and beta, f(x) * s == f(x) then a
// binary multiply by s makes the repeated post-ops identical.
std::optional<std::string> repeated_eltwise_is_binary(Work& work) {
  const auto same = [](const EltwisePostOp& x, const EltwisePostOp& y) {
    return x.scale == y.scale && x.alpha == y.alpha && x.beta == y.beta;
  };
  const auto constant = [&](BinaryAlg alg, float value) {
    return BinaryPostOp{alg, Broadcast::per_channel,
                        ConstantTensor{std::vector<float>(static_cast<std::size_t>(work.channels), value)}};
  };
  for (std::size_t j = 0; j < work.items.size(); ++j) {
    const auto* later = item_at<EltwisePostOp>(work, j);
    if (later == nullptr) {
      continue;
    }
    std::optional<std::size_t> conflict;
    for (std::size_t i = 0; i < j && !conflict; ++i) {
      const auto* earlier = item_at<EltwisePostOp>(work, i);
      if (earlier != nullptr && earlier->alg == later->alg && !same(*earlier, *later)) {
        conflict = i;
      }
    }
    if (!conflict) {
      continue;
    }
    const EltwisePostOp op = *later;
    std::vector<Item> replacement;
    std::size_t at = j;
    if (op.alg == EltwiseAlg::linear) {
      // s * (a * x + b) == x * (s * a) + s * b
      if (op.scale * op.alpha != 1.0F) {
        replacement.emplace_back(constant(BinaryAlg::mul, op.scale * op.alpha));
      }
      if (op.scale * op.beta != 0.0F) {
        replacement.emplace_back(constant(BinaryAlg::add, op.scale * op.beta));
      }
    } else if (op.alg == EltwiseAlg::clip) {
      replacement.emplace_back(constant(BinaryAlg::max, op.alpha));
      replacement.emplace_back(constant(BinaryAlg::min, op.beta));
      if (op.scale != 1.0F) {
        replacement.emplace_back(constant(BinaryAlg::mul, op.scale));
      }
    } else {
      // s * f(x) == f(x) * s: with equal alpha and beta, moving the scales
      // out to binary multiplies makes the repeated post-ops identical.
      const EltwisePostOp& earlier = std::get<EltwisePostOp>(work.items[*conflict]);
      if (earlier.alpha != op.alpha || earlier.beta != op.beta) {
        continue;
      }
      at = op.scale != 1.0F ? j : *conflict;
      const EltwisePostOp target = std::get<EltwisePostOp>(work.items[at]);
      replacement.emplace_back(EltwisePostOp{target.alg, 1.0F, target.alpha, target.beta});
      replacement.emplace_back(constant(BinaryAlg::mul, target.scale));
    }
    replace(work, at, 1, std::move(replacement));
    return fmt::format("second {} at {}", to_string(op.alg), j);
  }
  return std::nullopt;
}

constexpr std::array kRules{
    Rule{"fake_quantize_is_crop_affine_round_affine", fake_quantize_is_crop_affine_round_affine},
    Rule{"quantize_then_dequantize_is_clipped_round", quantize_then_dequantize_is_clipped_round},
    Rule{"final_quantize_is_scaled_store", final_quantize_is_scaled_store},
    Rule{"quantize_is_scale_round_shift_clip", quantize_is_scale_round_shift_clip},
    Rule{"linear_is_scale_then_shift", linear_is_scale_then_shift},
    Rule{"eltwise_clip_is_clip", eltwise_clip_is_clip},
    Rule{"eltwise_round_is_round", eltwise_round_is_round},
    Rule{"hsigmoid_is_clipped_affine", hsigmoid_is_clipped_affine},
    Rule{"uniform_channels_are_per_tensor", uniform_channels_are_per_tensor},
    Rule{"multiply_by_one_is_identity", multiply_by_one_is_identity},
    Rule{"repeated_relu_is_one_relu", repeated_relu_is_one_relu},
    Rule{"add_of_zero_is_identity", add_of_zero_is_identity},
    Rule{"saturation_covers_final_clip", saturation_covers_final_clip},
    Rule{"saturation_rounds_final_round", saturation_rounds_final_round},
    Rule{"residual_round_is_dropped", residual_round_is_dropped},
    Rule{"adjacent_scales_fold", adjacent_scales_fold},
    Rule{"adjacent_shifts_fold", adjacent_shifts_fold},
    Rule{"scale_moves_before_shift", scale_moves_before_shift},
    Rule{"even_shift_moves_before_round", even_shift_moves_before_round},
    Rule{"affine_moves_before_clip", affine_moves_before_clip},
    Rule{"clip_moves_after_round", clip_moves_after_round},
    Rule{"scale_moves_before_relu", scale_moves_before_relu},
    Rule{"scale_moves_before_sum", scale_moves_before_sum},
    Rule{"leading_scale_is_output_scale", leading_scale_is_output_scale},
    Rule{"final_integer_shift_is_dst_zero_point", final_integer_shift_is_dst_zero_point},
    Rule{"scale_folds_into_eltwise_post_op", scale_folds_into_eltwise_post_op},
    Rule{"eltwise_is_post_op", eltwise_is_post_op},
    Rule{"round_is_eltwise_round", round_is_eltwise_round},
    Rule{"per_tensor_clip_is_eltwise_clip", per_tensor_clip_is_eltwise_clip},
    Rule{"per_channel_clip_is_binary_max_min", per_channel_clip_is_binary_max_min},
    Rule{"per_tensor_affine_is_eltwise_linear", per_tensor_affine_is_eltwise_linear},
    Rule{"per_channel_scale_is_binary_mul", per_channel_scale_is_binary_mul},
    Rule{"per_channel_shift_is_binary_add", per_channel_shift_is_binary_add},
    Rule{"sum_is_sum_post_op", sum_is_sum_post_op},
    Rule{"binary_is_binary_post_op", binary_is_binary_post_op},
    Rule{"repeated_eltwise_is_binary", repeated_eltwise_is_binary},
};

}  // namespace

std::span<const Rule> rule_table() { return kRules; }

}  // namespace qfuse::composer
