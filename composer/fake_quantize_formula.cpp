#include "composer/fake_quantize_formula.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <utility>

#include <spdlog/fmt/fmt.h>

namespace qfuse::composer {
namespace {

float at(const std::vector<float>& values, std::size_t c) {
  return values.size() == 1 ? values.front() : values[c];
}

}  // namespace

std::optional<std::string> quantize_unsupported_reason(const Quantize& q, int channels) {
  const auto sized = [channels](const std::vector<float>& v) {
    return v.size() == 1 || v.size() == static_cast<std::size_t>(channels);
  };
  if (!sized(q.scale) || !sized(q.zero_point)) {
    return fmt::format("Quantize has {} scales and {} zero points (expected 1 or {} each)",
                       q.scale.size(), q.zero_point.size(), channels);
  }
  for (float s : q.scale) {
    if (!(s > 0.0F) || !std::isfinite(s) || !std::isfinite(1.0F / s)) {
      return fmt::format("Quantize scale {} is not a positive f32 with a finite reciprocal", s);
    }
  }
  for (float z : q.zero_point) {
    if (!std::isfinite(z) || z != std::nearbyint(z)) {
      return fmt::format("Quantize zero point {} is not an integer", z);
    }
  }
  if (!(q.lo <= q.hi) || q.lo != std::nearbyint(q.lo) || q.hi != std::nearbyint(q.hi)) {
    return fmt::format("Quantize codes [{}, {}] are not an integer range", q.lo, q.hi);
  }
  return std::nullopt;
}

std::optional<std::string> fake_quantize_unsupported_reason(const FakeQuantize& fq, int channels) {
  if (fq.levels < 2) {
    return fmt::format("FakeQuantize needs at least 2 levels (got {})", fq.levels);
  }
  const std::pair<const char*, const std::vector<float>*> ranges[] = {
      {"input_low", &fq.input_low},
      {"input_high", &fq.input_high},
      {"output_low", &fq.output_low},
      {"output_high", &fq.output_high}};
  std::size_t width = 1;
  for (const auto& [name, values] : ranges) {
    if (values->size() != 1 && values->size() != static_cast<std::size_t>(channels)) {
      return fmt::format("FakeQuantize {} has {} values (expected 1 or {})", name, values->size(),
                         channels);
    }
    if (!std::all_of(values->begin(), values->end(), [](float v) { return std::isfinite(v); })) {
      return fmt::format("FakeQuantize {} is not finite", name);
    }
    width = std::max(width, values->size());
  }
  for (std::size_t c = 0; c < width; ++c) {
    const float il = at(fq.input_low, c);
    const float ih = at(fq.input_high, c);
    if (il == ih) {
      return fmt::format("FakeQuantize channel {} has an empty input range (il == ih == {})", c, il);
    }
    if (il > ih) {
      return fmt::format("FakeQuantize channel {} has an inverted input range (il {} > ih {})", c,
                         il, ih);
    }
  }
  return std::nullopt;
}

FakeQuantizeAffine decompose_fake_quantize(const FakeQuantize& fq) {
  const std::size_t width = std::max({fq.input_low.size(), fq.input_high.size(),
                                      fq.output_low.size(), fq.output_high.size()});
  const bool input_per_channel = std::max(fq.input_low.size(), fq.input_high.size()) > 1;
  const bool output_per_channel = std::max(fq.output_low.size(), fq.output_high.size()) > 1;
  FakeQuantizeAffine affine;
  for (std::size_t c = 0; c < width; ++c) {
    const FakeQuantizeScales s = fake_quantize_scales(at(fq.input_low, c), at(fq.input_high, c),
                                                      at(fq.output_low, c), at(fq.output_high, c),
                                                      fq.levels);
    if (c == 0 || input_per_channel) {
      affine.crop_low.push_back(at(fq.input_low, c));
      affine.crop_high.push_back(at(fq.input_high, c));
      affine.input_scale.push_back(static_cast<float>(1.0 / s.input_scale));
      affine.input_shift.push_back(static_cast<float>(s.input_zero));
    }
    if (c == 0 || output_per_channel) {
      affine.output_scale.push_back(static_cast<float>(s.output_scale));
      affine.output_shift.push_back(at(fq.output_low, c));
    }
  }
  return affine;
}

}  // namespace qfuse::composer
