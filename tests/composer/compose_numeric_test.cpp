// Numbers: every chain is composed, run as a real oneDNN u8 x s8 primitive
// with the composed attributes, and compared with a step-by-step f32
// evaluation of the original chain (reference.cpp). s8/u8 results must be
// equal or one LSB off at a tie; the count of such elements is reported as
// the test property "one_lsb".
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "composer/composer.hpp"
#include "reference.hpp"

namespace qfuse::composer {
namespace {

using testing::Anchor;
using testing::CaseData;

constexpr int kChannels = 8;
constexpr int kPixels = 96;  // a multiple of 4: convolutions run 2x2 images

struct NumericCase {
  std::string name;
  std::function<PostOpChain(DataType)> make;
  std::vector<DataType> dst_types;
  float tie_quantum = 1.0F;     // f32 only: the step a tie may flip
  float rel_tolerance = 1e-5F;  // f32 only
};

NumericCase numeric_case(std::string name, std::function<PostOpChain(DataType)> make,
                         std::vector<DataType> dst_types, float tie_quantum = 1.0F,
                         float rel_tolerance = 1e-5F) {
  return NumericCase{std::move(name), std::move(make), std::move(dst_types), tie_quantum,
                     rel_tolerance};
}

enum class Inputs { random, ties };

std::vector<float> per_channel(std::initializer_list<float> values) { return values; }

const std::vector<float> kMixedScales = per_channel({0.5F, 0.25F, 1.0F, 2.0F, 0.0F, -0.5F, 0.125F, 0.75F});
const std::vector<float> kNonNegativeScales = per_channel({0.5F, 0.25F, 1.0F, 2.0F, 0.0F, 0.5F, 0.125F, 0.75F});
const std::vector<float> kShifts = per_channel({1.0F, -2.5F, 0.0F, 3.0F, 7.0F, -1.0F, 0.5F, 2.0F});

PostOpChain chain_of(DataType dst, std::vector<Step> steps) {
  return PostOpChain{kChannels, dst, std::move(steps)};
}

PostOpChain activation(EltwiseAlg alg, float alpha, DataType dst) {
  // f32: the activation alone; s8/u8: scaled up so that the store quantizes it.
  std::vector<Step> steps{Scale{{0.002F}}, Eltwise{alg, alpha, 0.0F}};
  if (dst != DataType::f32) {
    steps.emplace_back(Scale{{40.0F}});
  }
  return chain_of(dst, std::move(steps));
}

std::vector<NumericCase> numeric_cases() {
  const std::vector<DataType> all{DataType::f32, DataType::s8, DataType::u8};
  std::vector<NumericCase> cases{
      numeric_case("scale_relu", [](DataType d) { return chain_of(d, {Scale{{0.5F}}, Eltwise{EltwiseAlg::relu}}); }, all),
      numeric_case("per_channel_scale_shift_relu",
       [](DataType d) { return chain_of(d, {Scale{kMixedScales}, Shift{kShifts}, Eltwise{EltwiseAlg::relu}}); }, all),
      numeric_case("relu_then_non_negative_scale",
       [](DataType d) { return chain_of(d, {Scale{{0.5F}}, Eltwise{EltwiseAlg::relu}, Scale{kNonNegativeScales}}); }, all),
      numeric_case("relu_then_negative_scale",
       [](DataType d) { return chain_of(d, {Scale{{0.5F}}, Eltwise{EltwiseAlg::relu}, Scale{kMixedScales}}); }, all),
      numeric_case("relu_then_negative_per_tensor_scale",
       [](DataType d) { return chain_of(d, {Scale{{0.25F}}, Eltwise{EltwiseAlg::relu}, Scale{{-2.0F}}}); },
       {DataType::f32, DataType::s8}),
      numeric_case("affine_fold",
       [](DataType d) { return chain_of(d, {Scale{kMixedScales}, Shift{{3.0F}}, Scale{{0.5F}}, Shift{kShifts}}); }, all),
      numeric_case("zero_scale", [](DataType d) { return chain_of(d, {Scale{{0.0F}}, Eltwise{EltwiseAlg::relu}, Shift{{5.0F}}}); }, all),
      numeric_case("sum_then_scale",
       [](DataType d) { return chain_of(d, {Scale{{0.25F}}, Sum{0, 0.5F, d}, Scale{{2.0F}}}); }, all),
      numeric_case("relu_sum_relu",
       [](DataType d) {
         return chain_of(d, {Scale{kNonNegativeScales}, Eltwise{EltwiseAlg::relu}, Sum{0, 1.0F, d},
                             Eltwise{EltwiseAlg::relu}});
       },
       all),
      numeric_case("eltwise_then_scale",
       [](DataType d) { return chain_of(d, {Scale{{0.002F}}, Eltwise{EltwiseAlg::tanh}, Scale{{100.0F}}}); },
       {DataType::f32, DataType::s8}, 1.0F, 1e-4F),
      numeric_case("clip_per_channel",
       [](DataType d) {
         return chain_of(d, {Scale{{0.5F}}, Clip{per_channel({-1, -20, 0, -100, 5, -3, -7, -60}),
                                                 per_channel({1, 20, 50, 100, 80, 3, 7, 60})}});
       },
       all),
      numeric_case("clip_per_tensor_then_negative_scale",
       [](DataType d) { return chain_of(d, {Scale{{0.5F}}, Clip{{-50.5F}, {60.25F}}, Scale{{-1.0F}}}); }, all),
      numeric_case("round_then_even_shift",
       [](DataType d) { return chain_of(d, {Scale{{0.5F}}, Round{}, Shift{{-128.0F}}}); }, all),
      numeric_case("round_then_odd_shift",
       [](DataType d) { return chain_of(d, {Scale{{0.5F}}, Round{}, Shift{{3.0F}}}); }, all),
      numeric_case("fq_quantize_only_u8",
       [](DataType d) {
         PostOpChain c = chain_of(d, {Scale{kNonNegativeScales}});
         append_fake_quantize(c, {0.0F}, {31.875F}, {0.0F}, {255.0F}, 256);
         return c;
       },
       {DataType::u8, DataType::f32}),
      numeric_case("fq_quantize_only_s8",
       [](DataType d) {
         PostOpChain c = chain_of(d, {Scale{{0.5F}}});
         append_fake_quantize(c, {-16.0F}, {15.875F}, {-128.0F}, {127.0F}, 256);
         return c;
       },
       {DataType::s8, DataType::f32}),
      numeric_case("fq_asymmetric_u8_zero_point",
       [](DataType d) {
         PostOpChain c = chain_of(d, {Scale{{0.0625F}}});
         append_fake_quantize(c, {-4.0F}, {27.875F}, {0.0F}, {255.0F}, 256);
         return c;
       },
       {DataType::u8}),
      numeric_case("fq_dequantized_f32",
       [](DataType d) {
         PostOpChain c = chain_of(d, {Scale{{0.01F}}});
         append_fake_quantize(c, {-1.0F}, {2.0F}, {-1.0F}, {2.0F}, 256);
         return c;
       },
       {DataType::f32}, 3.0F / 255.0F),
      numeric_case("fq_per_channel_ranges",
       [](DataType d) {
         const std::vector<float> high = per_channel({31.875F, 63.75F, 15.9375F, 127.5F, 31.875F, 7.96875F, 255.0F, 63.75F});
         PostOpChain c = chain_of(d, {Scale{{0.5F}}});
         append_fake_quantize(c, {0.0F}, high, {0.0F}, high, 256);
         return c;
       },
       {DataType::f32}, 1.0F),
      numeric_case("fq_4bit",
       [](DataType d) {
         PostOpChain c = chain_of(d, {Scale{{0.5F}}});
         append_fake_quantize(c, {0.0F}, {7.5F}, {0.0F}, {15.0F}, 16);
         return c;
       },
       {DataType::u8, DataType::f32}, 1.0F),
      // ONNX's QuantizeLinear as the destination: zero point odd, even and 0.
      numeric_case("quantize_u8_odd_zero_point",
       [](DataType d) { return chain_of(d, {Scale{{0.0625F}}, Quantize{{0.5F}, {37.0F}, 0.0F, 255.0F}}); },
       {DataType::u8}),
      numeric_case("quantize_u8_even_zero_point_per_channel_scale",
       [](DataType d) { return chain_of(d, {Scale{kNonNegativeScales}, Quantize{{0.25F}, {128.0F}, 0.0F, 255.0F}}); },
       {DataType::u8}),
      numeric_case("quantize_s8_narrow_codes",
       [](DataType d) { return chain_of(d, {Scale{{0.5F}}, Quantize{{0.75F}, {0.0F}, -128.0F, -1.0F}}); },
       {DataType::s8}),
      // A Q/DQ pair inside the chain (its dequantize Shift(-Z), Scale(S)),
      // then a residual and the destination's Quantize.
      numeric_case("quantize_dequantize_residual",
       [](DataType d) {
         return chain_of(d, {Scale{{0.25F}}, Quantize{{0.5F}, {13.0F}, 0.0F, 255.0F}, Shift{{-13.0F}},
                             Scale{{0.5F}}, Sum{0, 0.5F, d}, Quantize{{0.5F}, {3.0F}, 0.0F, 255.0F}});
       },
       {DataType::u8}),
      numeric_case("quantize_dequantize_f32",
       [](DataType d) {
         return chain_of(d, {Scale{{0.01F}}, Quantize{{0.02F}, {-5.0F}, -128.0F, 127.0F}, Shift{{5.0F}},
                             Scale{{0.02F}}});
       },
       {DataType::f32}, 0.02F),
      numeric_case("hsigmoid",
       [](DataType d) {
         std::vector<Step> steps{Scale{{0.002F}}, Eltwise{EltwiseAlg::hsigmoid}};
         if (d != DataType::f32) {
           steps.emplace_back(Scale{{100.0F}});
         }
         return chain_of(d, std::move(steps));
       },
       {DataType::f32, DataType::u8}, 1.0F, 1e-5F),
      numeric_case("binary_inputs",
       [](DataType d) {
         return chain_of(d, {Scale{{0.5F}}, Binary{BinaryAlg::add, 1, Broadcast::per_channel, DataType::f32},
                             Binary{BinaryAlg::mul, 2, Broadcast::full, DataType::f32},
                             Binary{BinaryAlg::max, 1, Broadcast::per_channel, DataType::f32}});
       },
       all),
      numeric_case("residual_block",
       [](DataType d) {
         PostOpChain c = chain_of(d, {Scale{{0.25F}}});
         append_fake_quantize(c, {0.0F}, {127.5F}, {0.0F}, {127.5F}, 256);
         c.steps.emplace_back(Sum{0, 0.5F, d});
         append_fake_quantize(c, {0.0F}, {127.5F}, {0.0F}, {255.0F}, 256);
         return c;
       },
       {DataType::u8}),
  };
  const std::pair<const char*, std::pair<EltwiseAlg, float>> activations[] = {
      {"elu", {EltwiseAlg::elu, 1.0F}},         {"leaky_relu", {EltwiseAlg::relu, 0.1F}},
      {"gelu_erf", {EltwiseAlg::gelu_erf, 0.0F}}, {"gelu_tanh", {EltwiseAlg::gelu_tanh, 0.0F}},
      {"logistic", {EltwiseAlg::logistic, 0.0F}}, {"exp", {EltwiseAlg::exp, 0.0F}},
      {"abs", {EltwiseAlg::abs, 0.0F}},         {"hardswish", {EltwiseAlg::hardswish, 0.0F}},
      {"swish", {EltwiseAlg::swish, 1.0F}},     {"square", {EltwiseAlg::square, 0.0F}},
  };
  for (const auto& [name, alg] : activations) {
    const auto [a, alpha] = alg;
    cases.push_back(numeric_case(std::string("activation_") + name,
                                 [a = a, alpha = alpha](DataType d) { return activation(a, alpha, d); },
                                 {DataType::f32, DataType::s8}, 1.0F, 1e-4F));
  }
  return cases;
}

CaseData make_data(const PostOpChain& chain, Inputs inputs, std::uint32_t seed) {
  std::mt19937 rng(seed);
  CaseData data;
  data.pixels = kPixels;
  data.channels = kChannels;
  const std::size_t count = static_cast<std::size_t>(kPixels) * kChannels;
  std::uniform_int_distribution<std::int32_t> acc(-3000, 3000);
  for (std::size_t i = 0; i < count; ++i) {
    std::int32_t v = acc(rng);
    if (inputs == Inputs::ties) {
      // Odd accumulators: scales 0.5 (and FQ steps of 2) put them on .5 ties.
      v = v | 1;
    }
    data.acc.push_back(v);
  }
  std::uniform_int_distribution<int> u8(0, 255);
  std::uniform_int_distribution<int> s8(-128, 127);
  std::uniform_int_distribution<int> quarter(-200, 200);
  for (std::size_t i = 0; i < count; ++i) {
    switch (chain.dst_type) {
      case DataType::f32: data.residual.push_back(static_cast<float>(quarter(rng)) * 0.25F); break;
      case DataType::s8: data.residual.push_back(static_cast<float>(s8(rng))); break;
      case DataType::u8: data.residual.push_back(static_cast<float>(u8(rng))); break;
    }
  }
  std::uniform_int_distribution<int> small(-16, 16);
  for (int c = 0; c < kChannels; ++c) {
    data.binaries[1].push_back(static_cast<float>(small(rng)) * 0.5F);
  }
  for (std::size_t i = 0; i < count; ++i) {
    data.binaries[2].push_back(static_cast<float>(small(rng)) * 0.125F);
  }
  return data;
}

struct Param {
  NumericCase test_case;
  DataType dst = DataType::f32;
  Inputs inputs = Inputs::random;
  Anchor anchor = Anchor::inner_product;
};

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  const Param& p = info.param;
  return p.test_case.name + "_" + to_string(p.dst) + (p.inputs == Inputs::ties ? "_ties" : "_random") +
         (p.anchor == Anchor::convolution_1x1 ? "_conv" : "_ip");
}

std::vector<Param> all_params() {
  std::vector<Param> params;
  for (const NumericCase& c : numeric_cases()) {
    for (DataType dst : c.dst_types) {
      params.push_back({c, dst, Inputs::random, Anchor::inner_product});
      params.push_back({c, dst, Inputs::ties, Anchor::inner_product});
      params.push_back({c, dst, Inputs::ties, Anchor::convolution_1x1});
    }
  }
  return params;
}

class ComposeNumeric : public ::testing::TestWithParam<Param> {};

TEST_P(ComposeNumeric, FusedPrimitiveMatchesStepByStepChain) {
  const Param& p = GetParam();
  PostOpChain chain = p.test_case.make(p.dst);
  chain.anchor = p.anchor == Anchor::convolution_1x1 ? AnchorKind::convolution : AnchorKind::inner_product;
  const ComposeResult result = compose(chain);
  ASSERT_TRUE(result.fused()) << result.reason;
  const PostOpsPlan& plan = *result.plan;

  const CaseData data = make_data(chain, p.inputs, 20240611U);
  const testing::Reference ref = testing::evaluate_reference(chain, data);
  const std::vector<float> fused = testing::run_fused(plan, data, p.anchor);
  const testing::Comparison cmp = testing::compare(ref, fused, p.dst, p.test_case.rel_tolerance,
                                                   p.test_case.tie_quantum);

  const auto at_ties = std::count(ref.near_tie.begin(), ref.near_tie.end(), true);
  RecordProperty("one_lsb", cmp.one_lsb);
  RecordProperty("at_ties", static_cast<int>(at_ties));
  RecordProperty("compared", cmp.compared);
  std::cout << "[ one_lsb  ] " << param_name({p, 0}) << ": " << cmp.one_lsb << " of "
            << cmp.compared << " (" << at_ties << " at ties) | " << describe(chain) << " => "
            << describe(plan) << "\n";
  EXPECT_EQ(cmp.failures, 0) << cmp.first_failure << "\nchain: " << describe(chain)
                             << "\nplan:  " << describe(plan);
}

INSTANTIATE_TEST_SUITE_P(Chains, ComposeNumeric, ::testing::ValuesIn(all_params()), param_name);

// The opt-in residual round drop changes numbers; it must stay within one
// quantum of the first FQ (0.5) scaled by the sum (0.5) and the second FQ
// (1 / 0.5): at most one LSB of the u8 output, plus the output's own tie.
TEST(ComposeNumericOptIn, ResidualRoundDropStaysWithinOneLsb) {
  PostOpChain chain = chain_of(DataType::u8, {Scale{{0.25F}}});
  chain.anchor = AnchorKind::inner_product;
  append_fake_quantize(chain, {0.0F}, {127.5F}, {0.0F}, {127.5F}, 256);
  chain.steps.emplace_back(Sum{0, 0.5F, DataType::u8});
  append_fake_quantize(chain, {0.0F}, {127.5F}, {0.0F}, {255.0F}, 256);
  ComposeOptions options;
  options.allow_residual_round_drop = true;
  const ComposeResult result = compose(chain, options);
  ASSERT_TRUE(result.fused()) << result.reason;
  const CaseData data = make_data(chain, Inputs::random, 7U);
  const testing::Reference ref = testing::evaluate_reference(chain, data);
  const std::vector<float> fused = testing::run_fused(*result.plan, data, Anchor::inner_product);
  int changed = 0;
  for (std::size_t i = 0; i < fused.size(); ++i) {
    EXPECT_LE(std::fabs(fused[i] - ref.values[i]), 1.0F) << i;
    changed += fused[i] != ref.values[i] ? 1 : 0;
  }
  RecordProperty("changed_by_round_drop", changed);
  std::cout << "[ round drop ] " << changed << " of " << fused.size() << " outputs changed by 1 LSB\n";
}

}  // namespace
}  // namespace qfuse::composer
