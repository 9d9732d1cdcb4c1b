#include "composer/composer.hpp"

#include "composer/tie_hazard.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <utility>

#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>

#include "composer/fake_quantize_formula.hpp"
#include "composer/rules.hpp"

namespace qfuse::composer {
namespace {

// Far above what any real chain needs (a few dozen rewrites); reaching it
// means two rules undo each other, which must not turn into a hang.
constexpr int kMaxRewrites = 10000;

// oneDNN 2.6's post_ops_t::post_ops_limit.
constexpr std::size_t kMaxPostOps = 32;

std::size_t element_size(DataType type) { return type == DataType::f32 ? 4 : 1; }

bool all_finite(const std::vector<float>& v) {
  for (float x : v) {
    if (!std::isfinite(x)) {
      return false;
    }
  }
  return true;
}

std::optional<std::string> check_vector(const char* what, std::size_t index,
                                        const std::vector<float>& v, int channels) {
  if (v.size() != 1 && v.size() != static_cast<std::size_t>(channels)) {
    return fmt::format("step {} ({}) has {} values (expected 1 or {})", index, what, v.size(),
                       channels);
  }
  if (!all_finite(v)) {
    return fmt::format("step {} ({}) has a value that is not finite", index, what);
  }
  return std::nullopt;
}

// Reasons found before any rewrite: malformed chains, and chains oneDNN 2.6
// cannot express whatever the rules do.
std::optional<std::string> unsupported_reason(const PostOpChain& chain) {
  if (chain.channels < 1) {
    return fmt::format("chain has {} channels (expected at least 1)", chain.channels);
  }
  int sums = 0;
  for (std::size_t i = 0; i < chain.steps.size(); ++i) {
    const Step& step = chain.steps[i];
    std::optional<std::string> reason;
    if (const auto* s = std::get_if<Scale>(&step)) {
      reason = check_vector("scale", i, s->values, chain.channels);
    } else if (const auto* b = std::get_if<Shift>(&step)) {
      reason = check_vector("shift", i, b->values, chain.channels);
    } else if (const auto* c = std::get_if<Clip>(&step)) {
      reason = check_vector("clip low", i, c->lo, chain.channels);
      if (!reason) {
        reason = check_vector("clip high", i, c->hi, chain.channels);
      }
      for (std::size_t k = 0; !reason && k < std::max(c->lo.size(), c->hi.size()); ++k) {
        const float lo = c->lo.size() == 1 ? c->lo.front() : c->lo[k];
        const float hi = c->hi.size() == 1 ? c->hi.front() : c->hi[k];
        if (lo > hi) {
          reason = fmt::format("step {} (clip) has an empty range [{}, {}]", i, lo, hi);
        }
      }
    } else if (const auto* e = std::get_if<Eltwise>(&step)) {
      if (!std::isfinite(e->alpha) || !std::isfinite(e->beta)) {
        reason = fmt::format("step {} ({}) has a parameter that is not finite", i,
                             to_string(e->alg));
      } else if (e->alg == EltwiseAlg::clip && e->alpha > e->beta) {
        reason = fmt::format("step {} (clip) has an empty range [{}, {}]", i, e->alpha, e->beta);
      }
    } else if (const auto* sum = std::get_if<Sum>(&step)) {
      if (++sums > 1) {
        reason = fmt::format(
            "step {} is a second sum; oneDNN 2.6 reads the residual from the destination "
            "buffer, which holds only one",
            i);
      } else if (element_size(sum->data_type) != element_size(chain.dst_type)) {
        reason = fmt::format(
            "step {} (sum) has a {} residual for a {} destination; oneDNN 2.6 reads the "
            "residual in place, so both need the same element size",
            i, to_string(sum->data_type), to_string(chain.dst_type));
      } else if (!std::isfinite(sum->scale)) {
        reason = fmt::format("step {} (sum) has a scale that is not finite", i);
      }
    } else if (const auto* bin = std::get_if<Binary>(&step)) {
      if (bin->input < 0) {
        reason = fmt::format("step {} (binary) has input index {} (expected >= 0)", i, bin->input);
      }
    } else if (const auto* fq = std::get_if<FakeQuantize>(&step)) {
      if (auto why = fake_quantize_unsupported_reason(*fq, chain.channels)) {
        reason = fmt::format("step {}: {}", i, *why);
      }
    } else if (const auto* q = std::get_if<Quantize>(&step)) {
      if (auto why = quantize_unsupported_reason(*q, chain.channels)) {
        reason = fmt::format("step {}: {}", i, *why);
      }
    }
    if (reason) {
      return reason;
    }
  }
  return std::nullopt;
}

Item to_item(const Step& step) {
  return std::visit([](const auto& s) -> Item { return s; }, step);
}

// The plan, or the reason why a step is left that no post-op expresses.
std::optional<std::string> collect_post_ops(const Work& work, PostOpsPlan& plan) {
  for (std::size_t i = 0; i < work.items.size(); ++i) {
    const Item& item = work.items[i];
    if (const auto* e = std::get_if<EltwisePostOp>(&item)) {
      plan.post_ops.emplace_back(*e);
    } else if (const auto* b = std::get_if<BinaryPostOp>(&item)) {
      plan.post_ops.emplace_back(*b);
    } else if (const auto* s = std::get_if<SumPostOp>(&item)) {
      plan.post_ops.emplace_back(*s);
    } else {
      return fmt::format("no oneDNN 2.6 post-op expresses the remaining step {}", i);
    }
  }
  if (plan.post_ops.size() > kMaxPostOps) {
    return fmt::format("{} post-ops remain; oneDNN 2.6 takes at most {}", plan.post_ops.size(),
                       kMaxPostOps);
  }
  // See repeated_eltwise_is_binary: what it could not rewrite must not reach
  // oneDNN 2.6, which would compute it with the wrong parameters.
  for (std::size_t j = 0; j < plan.post_ops.size(); ++j) {
    const auto* later = std::get_if<EltwisePostOp>(&plan.post_ops[j]);
    for (std::size_t i = 0; later != nullptr && i < j; ++i) {
      const auto* earlier = std::get_if<EltwisePostOp>(&plan.post_ops[i]);
      if (earlier != nullptr && earlier->alg == later->alg &&
          (earlier->scale != later->scale || earlier->alpha != later->alpha ||
           earlier->beta != later->beta)) {
        return fmt::format(
            "post-ops {} and {} are both {} with different parameters; oneDNN 2.6 int8 kernels "
            "apply the first one's to both",
            i, j, to_string(later->alg));
      }
    }
  }
  return std::nullopt;
}

ComposeResult cannot_fuse(std::string reason, std::vector<AppliedRule> applied) {
  spdlog::debug("composer: cannot fuse: {}", reason);
  return ComposeResult{std::nullopt, std::move(reason), std::move(applied)};
}

}  // namespace

void append_fake_quantize(PostOpChain& chain, std::vector<float> input_low,
                          std::vector<float> input_high, std::vector<float> output_low,
                          std::vector<float> output_high, int levels) {
  chain.steps.emplace_back(FakeQuantize{std::move(input_low), std::move(input_high),
                                        std::move(output_low), std::move(output_high), levels});
}

ComposeResult compose(const PostOpChain& chain, const ComposeOptions& options) {
  if (auto reason = unsupported_reason(chain)) {
    return cannot_fuse(std::move(*reason), {});
  }
  Work work;
  work.channels = chain.channels;
  work.dst_type = chain.dst_type;
  work.allow_residual_round_drop = options.allow_residual_round_drop;
  work.anchor = chain.anchor;
  work.items.reserve(chain.steps.size());
  for (const Step& step : chain.steps) {
    work.items.push_back(to_item(step));
  }

  std::vector<AppliedRule> applied;
  for (bool changed = true; changed;) {
    if (applied.size() >= static_cast<std::size_t>(kMaxRewrites)) {
      return cannot_fuse(fmt::format("rules did not settle after {} rewrites", kMaxRewrites),
                         std::move(applied));
    }
    changed = false;
    for (const Rule& rule : rule_table()) {
      if (auto detail = rule.apply(work)) {
        spdlog::debug("composer: {}: {}", rule.name, *detail);
        applied.push_back({std::string(rule.name), std::move(*detail)});
        changed = true;
        break;
      }
    }
  }

  PostOpsPlan plan;
  plan.channels = chain.channels;
  plan.dst_type = chain.dst_type;
  plan.output_scales = work.output_scales;
  plan.output_scales_mask =
      work.output_scales.size() > 1 ? ScalesMask::per_channel : ScalesMask::common;
  plan.dst_zero_point = work.dst_zero_point;
  if (auto reason = collect_post_ops(work, plan)) {
    return cannot_fuse(std::move(*reason), std::move(applied));
  }
  plan.applied_rules = applied;
  if (auto hazard = rounding_tie_hazard(plan)) {
    return cannot_fuse(std::move(*hazard), std::move(applied));
  }
  try {
    plan.fixed_output_scales = to_fixed_point(plan.output_scales, options.fixed_point_eta);
  } catch (const std::invalid_argument&) {
    plan.fixed_output_scales.clear();  // a scale beyond 2^31: no 31-bit form
  }
  return ComposeResult{std::move(plan), {}, std::move(applied)};
}

}  // namespace qfuse::composer
