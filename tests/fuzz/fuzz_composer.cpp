// Fuzz target: the post-ops composer on random chains. compose() must not
// throw; when it returns a plan, the oneDNN int8 primitive running that plan
// must equal the step-by-step f32 evaluation of the chain (s8/u8: equal,
// except at a rounding tie, where the value may round the other way: one step
// of that grid carried to the output, see tie_move; f32: within 1e-5
// relative, or 2e-4 after a transcendental eltwise). A chain oneDNN refuses
// is no finding: the plugin then runs it unfused.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <variant>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "composer/composer.hpp"
#include "composer/post_ops_plan.hpp"
#include "tests/composer/reference.hpp"
#include "tests/fuzz/byte_reader.hpp"

namespace {

using namespace qfuse::composer;  // NOLINT

constexpr int kPixels = 8;

float nice_scale(qfuse::fuzz::ByteReader& p) {
  static constexpr float kScales[] = {0.5f,   0.25f,  2.0f, 1.0f / 3.0f, 0.1f,   -1.0f,
                                      0.0078125f, 3.0f, 0.02f,      1.5f,  -0.5f, 0.0039215686f};
  if (p.flag()) return kScales[p.in_range<std::size_t>(0, std::size(kScales) - 1)];
  return p.real(-4.0f, 4.0f);
}

std::vector<float> values(qfuse::fuzz::ByteReader& p, int channels, float lo, float hi, float step) {
  const int n = p.flag() ? 1 : channels;
  std::vector<float> v;
  for (int i = 0; i < n; ++i) {
    v.push_back(lo + step * static_cast<float>(p.in_range<int>(
                              0, static_cast<int>((hi - lo) / step))));
  }
  return v;
}

// How far a value on a rounding tie can move the output of channel c: the
// composer's contract is exactness up to f32 rounding, except that a value on
// (or within f32 rounding of) a .5 tie at a rounding point may round the
// other way. That moves it by one step of that point's grid; the steps after
// it carry the move (times |scale|, or an eltwise's slope), and a later
// rounding point with step h turns a move B into ceil(B / h) of its steps.
// The s8/u8 store rounds to whole codes. Written from the definitions of the
// steps, independently of the composer.
double tie_move(const PostOpChain& chain, int c) {
  const auto at = [c](const std::vector<float>& v) {
    return static_cast<double>(v.size() == 1 ? v[0] : v[static_cast<std::size_t>(c)]);
  };
  double move = 0.0;
  const auto round_to = [&move](double h) {
    move = std::max(h, std::ceil(move / h - 1e-6) * h);
  };
  for (const Step& step : chain.steps) {
    if (const auto* s = std::get_if<Scale>(&step)) move *= std::abs(at(s->values));
    if (std::holds_alternative<Round>(step)) round_to(1.0);
    if (const auto* f = std::get_if<FakeQuantize>(&step)) {
      const double in = std::abs(at(f->input_high) - at(f->input_low));
      const double out = std::abs(at(f->output_high) - at(f->output_low));
      const double steps = f->levels - 1;
      move *= in > 0.0 ? steps / in : 0.0;  // into index units
      round_to(1.0);
      move *= out / steps;
    }
    if (const auto* e = std::get_if<Eltwise>(&step)) {
      if (e->alg == EltwiseAlg::round) round_to(1.0);
      if (e->alg == EltwiseAlg::linear) move *= std::abs(static_cast<double>(e->alpha));
      if (e->alg == EltwiseAlg::relu) move *= std::max(1.0, std::abs(static_cast<double>(e->alpha)));
      if (e->alg == EltwiseAlg::hardswish) move *= 1.5;
    }
    if (const auto* b = std::get_if<Binary>(&step)) {
      if (b->alg == BinaryAlg::mul) move *= 2.0;  // the operands here are at most 2 in magnitude
    }
  }
  return std::max(1.0, std::ceil(move - 1e-6));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  qfuse::fuzz::ByteReader p(data, size);
  PostOpChain chain;
  chain.channels = p.in_range<int>(1, 8);
  chain.dst_type = p.pick({DataType::f32, DataType::s8, DataType::u8});
  const bool conv = p.flag();
  chain.anchor = conv ? AnchorKind::convolution : AnchorKind::inner_product;
  const bool quantized = chain.dst_type != DataType::f32;
  bool transcendental = false;
  const int steps = p.in_range<int>(0, 6);
  for (int i = 0; i < steps; ++i) {
    switch (p.in_range<int>(0, 7)) {
      case 0: {
        std::vector<float> s;
        const int n = p.flag() ? 1 : chain.channels;
        for (int c = 0; c < n; ++c) s.push_back(nice_scale(p));
        chain.steps.push_back(Scale{s});
        break;
      }
      case 1: chain.steps.push_back(Shift{values(p, chain.channels, -64.0f, 64.0f, 0.25f)}); break;
      case 2:
        if (quantized) chain.steps.push_back(Round{});
        break;
      case 3: {
        const float lo = -32.0f + 0.5f * static_cast<float>(p.in_range<int>(0, 64));
        const float hi = lo + 0.5f * static_cast<float>(p.in_range<int>(0, 64));
        chain.steps.push_back(Clip{{lo}, {hi}});
        break;
      }
      case 4: {
        Eltwise e;
        e.alg = p.pick({EltwiseAlg::relu, EltwiseAlg::linear, EltwiseAlg::clip,
                                    EltwiseAlg::abs, EltwiseAlg::hardswish, EltwiseAlg::hsigmoid,
                                    EltwiseAlg::tanh, EltwiseAlg::logistic, EltwiseAlg::round});
        if (e.alg == EltwiseAlg::round && !quantized) e.alg = EltwiseAlg::relu;
        if (e.alg == EltwiseAlg::relu) e.alpha = p.pick({0.0f, 0.1f, 0.25f});
        if (e.alg == EltwiseAlg::linear) {
          e.alpha = nice_scale(p);
          e.beta = 0.25f * static_cast<float>(p.in_range<int>(-32, 32));
        }
        if (e.alg == EltwiseAlg::clip) {
          e.alpha = static_cast<float>(p.in_range<int>(-16, 0));
          e.beta = e.alpha + static_cast<float>(p.in_range<int>(0, 32));
        }
        transcendental = transcendental || e.alg == EltwiseAlg::tanh ||
                         e.alg == EltwiseAlg::logistic;
        chain.steps.push_back(e);
        break;
      }
      case 5: {
        Sum s;
        s.input = 0;
        s.scale = p.pick({1.0f, 0.5f, 2.0f, 0.25f});
        s.data_type = chain.dst_type;
        chain.steps.push_back(s);
        break;
      }
      case 6: {
        Binary b;
        b.alg = p.pick({BinaryAlg::add, BinaryAlg::sub, BinaryAlg::mul,
                                    BinaryAlg::min, BinaryAlg::max});
        b.broadcast = p.flag() ? Broadcast::per_channel : Broadcast::full;
        b.input = b.broadcast == Broadcast::per_channel ? 1 : 2;
        chain.steps.push_back(b);
        break;
      }
      default: {
        if (!quantized) break;
        const float il = -0.5f * static_cast<float>(p.in_range<int>(0, 16));
        const float ih = il + 0.5f * static_cast<float>(p.in_range<int>(1, 32));
        const int levels = p.pick({2, 16, 255, 256});
        append_fake_quantize(chain, {il}, {ih}, {il}, {ih}, levels);
        break;
      }
    }
  }

  ComposeResult result;
  try {
    result = compose(chain);
  } catch (...) {
    std::fprintf(stderr, "compose() threw on: %s\n", describe(chain).c_str());
    std::abort();
  }
  if (!result.fused()) return 0;

  testing::CaseData d;
  d.pixels = kPixels;
  d.channels = chain.channels;
  const std::size_t count = static_cast<std::size_t>(kPixels * chain.channels);
  const bool ties = p.flag();
  for (std::size_t i = 0; i < count; ++i) {
    std::int32_t v = p.in_range<std::int32_t>(-3000, 3000);
    d.acc.push_back(ties ? (v | 1) : v);
  }
  for (std::size_t i = 0; i < count; ++i) {
    switch (chain.dst_type) {
      case DataType::f32: d.residual.push_back(0.25f * static_cast<float>(p.in_range<int>(-200, 200))); break;
      case DataType::s8: d.residual.push_back(static_cast<float>(p.in_range<int>(-128, 127))); break;
      case DataType::u8: d.residual.push_back(static_cast<float>(p.in_range<int>(0, 255))); break;
    }
  }
  for (int c = 0; c < chain.channels; ++c) {
    d.binaries[1].push_back(0.5f * static_cast<float>(p.in_range<int>(-16, 16)));
  }
  for (std::size_t i = 0; i < count; ++i) {
    d.binaries[2].push_back(0.125f * static_cast<float>(p.in_range<int>(-16, 16)));
  }

  std::vector<float> fused;
  try {
    fused = testing::run_fused(*result.plan, d,
                               conv ? testing::Anchor::convolution_1x1 : testing::Anchor::inner_product);
  } catch (const dnnl::error&) {
    return 0;  // oneDNN refused the attributes: the plugin runs the chain unfused
  }
  const testing::Reference ref = testing::evaluate_reference(chain, d);
  testing::Comparison cmp =
      testing::compare(ref, fused, chain.dst_type, transcendental ? 2e-4f : 1e-5f, 1.0f);
  if (cmp.failures > 0 && quantized) {
    // At a tie, the move the contract allows (tie_move).
    cmp.failures = 0;
    for (std::size_t i = 0; i < ref.values.size(); ++i) {
      const int c = static_cast<int>(i % static_cast<std::size_t>(chain.channels));
      const double q = tie_move(chain, c);
      const double diff = std::abs(static_cast<double>(fused[i]) - ref.values[i]);
      if (diff != 0.0 && !(ref.near_tie[i] && diff <= q + 1e-6)) {
        if (cmp.failures++ == 0) {
          cmp.first_failure = "element " + std::to_string(i) + ": reference " +
                              std::to_string(ref.values[i]) + ", fused " + std::to_string(fused[i]) +
                              (ref.near_tie[i] ? " (near tie)" : "") + ", allowed at a tie " +
                              std::to_string(q);
        }
      }
    }
  }
  if (cmp.failures > 0) {
    std::fprintf(stderr, "fused plan differs from the chain: %s\nchain: %s\nplan:  %s\n",
                 cmp.first_failure.c_str(), describe(chain).c_str(), describe(*result.plan).c_str());
    std::abort();
  }
  return 0;
}
