#include "composer/post_ops_plan.hpp"

#include "composer/eltwise_math.hpp"

#include <algorithm>
#include <cstddef>
#include <type_traits>

#include <spdlog/fmt/fmt.h>

namespace qfuse::composer {
namespace {

// Up to eight values in full; longer vectors (per-channel scales of wide
// layers) as their count and range, so that logs and dumps stay readable.
std::string values_text(const std::vector<float>& v) {
  if (v.size() == 1) {
    return fmt::format("{}", v.front());
  }
  if (v.size() > 8) {
    const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
    return fmt::format("[{} values in {}..{}]", v.size(), *lo, *hi);
  }
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) {
    out += fmt::format("{}{}", i == 0 ? "" : ", ", v[i]);
  }
  return out + "]";
}

std::string to_string(Broadcast broadcast) {
  return broadcast == Broadcast::per_channel ? "per_channel" : "full";
}

template <typename T>
std::string join(const std::vector<T>& items) {
  std::string out;
  for (const T& item : items) {
    out += (out.empty() ? "" : "; ") + describe(item);
  }
  return out.empty() ? "(none)" : out;
}

}  // namespace

std::string to_string(EltwiseAlg alg) { return std::string(eltwise_info(alg).name); }

std::string to_string(BinaryAlg alg) {
  switch (alg) {
    case BinaryAlg::add: return "add";
    case BinaryAlg::sub: return "sub";
    case BinaryAlg::mul: return "mul";
    case BinaryAlg::min: return "min";
    case BinaryAlg::max: return "max";
  }
  return fmt::format("binary#{}", static_cast<int>(alg));
}

std::string to_string(DataType type) {
  switch (type) {
    case DataType::f32: return "f32";
    case DataType::s8: return "s8";
    case DataType::u8: return "u8";
  }
  return fmt::format("type#{}", static_cast<int>(type));
}

std::string describe(const PostOp& op) {
  if (const auto* e = std::get_if<EltwisePostOp>(&op)) {
    std::string out = "eltwise_" + to_string(e->alg);
    if (e->alg == EltwiseAlg::linear || e->alg == EltwiseAlg::clip) {
      out += fmt::format("({}, {})", e->alpha, e->beta);
    } else if (e->alpha != 0.0F || e->beta != 0.0F) {
      out += fmt::format("(alpha {}, beta {})", e->alpha, e->beta);
    }
    if (e->scale != 1.0F) {
      out += fmt::format(" * {}", e->scale);
    }
    return out;
  }
  if (const auto* b = std::get_if<BinaryPostOp>(&op)) {
    const std::string tensor =
        std::visit([](const auto& t) -> std::string {
          if constexpr (std::is_same_v<std::decay_t<decltype(t)>, ConstantTensor>) {
            return values_text(t.values);
          } else {
            return fmt::format("input {} {}", t.input, to_string(t.data_type));
          }
        }, b->tensor);
    return fmt::format("binary_{}({}, {})", to_string(b->alg), to_string(b->broadcast), tensor);
  }
  const auto& s = std::get<SumPostOp>(op);
  return fmt::format("sum(input {}, {}, {})", s.input, s.scale, to_string(s.data_type));
}

std::string describe(const std::vector<PostOp>& ops) { return join(ops); }

std::string describe(const PostOpsPlan& plan) {
  std::string out = "output_scales ";
  out += plan.output_scales.empty() ? "(none)" : values_text(plan.output_scales);
  if (plan.dst_zero_point) {
    out += fmt::format(" | dst_zero_point {}", *plan.dst_zero_point);
  }
  out += " | " + describe(plan.post_ops) + " | " + to_string(plan.dst_type);
  return out;
}

std::string describe(const Step& step) {
  if (const auto* s = std::get_if<Scale>(&step)) {
    return "scale " + values_text(s->values);
  }
  if (const auto* b = std::get_if<Shift>(&step)) {
    return "shift " + values_text(b->values);
  }
  if (std::holds_alternative<Round>(step)) {
    return "round";
  }
  if (const auto* c = std::get_if<Clip>(&step)) {
    return fmt::format("clip({}, {})", values_text(c->lo), values_text(c->hi));
  }
  if (const auto* e = std::get_if<Eltwise>(&step)) {
    return fmt::format("{}({}, {})", to_string(e->alg), e->alpha, e->beta);
  }
  if (const auto* sum = std::get_if<Sum>(&step)) {
    return fmt::format("sum(input {}, {}, {})", sum->input, sum->scale, to_string(sum->data_type));
  }
  if (const auto* bin = std::get_if<Binary>(&step)) {
    return fmt::format("{}(input {}, {})", to_string(bin->alg), bin->input,
                       to_string(bin->broadcast));
  }
  if (const auto* q = std::get_if<Quantize>(&step)) {
    return fmt::format("quantize({}, zero point {}, codes [{}, {}])", values_text(q->scale),
                       values_text(q->zero_point), q->lo, q->hi);
  }
  const auto& fq = std::get<FakeQuantize>(step);
  return fmt::format("fake_quantize({}, {}, {}, {}, levels {})", values_text(fq.input_low),
                     values_text(fq.input_high), values_text(fq.output_low),
                     values_text(fq.output_high), fq.levels);
}

std::string describe(const PostOpChain& chain) {
  return join(chain.steps) + " | " + to_string(chain.dst_type);
}

}  // namespace qfuse::composer
