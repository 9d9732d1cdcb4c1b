// fold_quantize_into_layer_norm: the quantizer that reads a LayerNorm
// (QuantizeLinear, a FakeQuantize's quantizing Convert, or
// DynamicQuantizeLinear) runs in the LayerNorm's pass over the rows. The
// fused node's every output (y, the codes, a dynamic grid's scale and zero
// point) is checked bit for bit against the unfused graph (LayerNorm, then
// the quantizer alone), and y and the codes against naive loops in double
// (y within 2e-5; the codes within one, as a tie may fall either side of an
// f32 y). The LayerNorm kernel is checked alone on rows with a tail and a
// large mean. Named negative: a per-channel Quantize stays a node of its own.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "graph/builder.hpp"
#include "plugin/api_internal.hpp"

// A namespace of its own: helpers named as in the other pass tests of its unity batch.
namespace qfuse::graph::fold_layer_norm_test {
namespace {

// Rows of BERT's hidden size, and a short odd width that leaves a tail
// behind every 16-lane step.
const Shape kBert{1, 128, 768};
const Shape kOdd{2, 5, 37};

std::vector<float> random_values(std::int64_t n, float mean, float stddev, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(mean, stddev);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

struct Inputs {
  std::vector<float> x, scale, bias;
};

Inputs inputs_for(const Shape& shape) {
  const std::int64_t c = shape.back();
  // A large mean against a small spread: what a residual stream carries, and
  // where a one-pass variance would cancel.
  return {random_values(element_count(shape), 3.0f, 0.7f, 5), random_values(c, 1.0f, 0.3f, 6),
          random_values(c, 0.0f, 0.2f, 7)};
}

// LayerNorm in double.
std::vector<double> naive_layer_norm(const Shape& shape, const Inputs& in, double eps) {
  const std::int64_t c = shape.back(), rows = element_count(shape) / c;
  std::vector<double> y(in.x.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* x = &in.x[static_cast<std::size_t>(r * c)];
    double mean = 0.0, var = 0.0;
    for (std::int64_t i = 0; i < c; ++i) mean += x[i];
    mean /= static_cast<double>(c);
    for (std::int64_t i = 0; i < c; ++i) var += (x[i] - mean) * (x[i] - mean);
    var /= static_cast<double>(c);
    for (std::int64_t i = 0; i < c; ++i) {
      y[static_cast<std::size_t>(r * c + i)] =
          (x[i] - mean) / std::sqrt(var + eps) * in.scale[static_cast<std::size_t>(i)] +
          in.bias[static_cast<std::size_t>(i)];
    }
  }
  return y;
}

// x -> LayerNorm -> y (an output: another reader, as a post-norm block's
// residual is) -> `quantizer` -> its outputs.
struct Built {
  Graph g;
  std::vector<std::string> outputs;  // y first
};

Built layer_norm_then(const Shape& shape, const Inputs& in, OpKind quantizer, Attributes q,
                      bool y_is_output = true) {
  Built b;
  Builder builder(b.g);
  const std::int64_t c = shape.back();
  const ValueId x = builder.input("x", shape);
  const ValueId scale = b.g.add_constant("scale", Tensor::from_vector<float>({c}, in.scale));
  const ValueId bias = b.g.add_constant("bias", Tensor::from_vector<float>({c}, in.bias));
  const ValueId y = builder.op(OpKind::LayerNorm, {x, scale, bias}, LayerNormAttrs{1e-5f}, "ln");
  if (y_is_output) {
    builder.output(y);
    b.outputs.push_back("ln");
  }
  const NodeId qn = b.g.add_node(quantizer, "q", {y}, std::move(q),
                                 quantizer == OpKind::DynamicQuantize ? 3 : 1);
  infer_node(b.g, qn);
  for (ValueId v : b.g.node(qn).outputs) {
    builder.output(v);
    b.outputs.push_back(b.g.value(v).name);
  }
  return b;
}

struct Outcome {
  std::vector<Tensor> outputs;
  std::vector<LayerInfo> layers;
  std::vector<std::string> log;
};

Outcome run(const Built& b, const Shape& shape, const Inputs& in, bool fuse) {
  const CompiledModel m = compile(b.g, {.fuse = fuse});
  InferRequest r = m.create_infer_request();
  r.set_input("x", Tensor::from_vector<float>(shape, in.x));
  r.infer();
  Outcome out;
  for (const std::string& name : b.outputs) out.outputs.push_back(r.output(name));
  out.layers = m.layers();
  out.log = m.fusion_log();
  return out;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.type() == b.type() && a.shape() == b.shape() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.byte_size()) == 0;
}

bool logged(const Outcome& r, const std::string& prefix) {
  return std::any_of(r.log.begin(), r.log.end(),
                     [&](const std::string& l) { return l.rfind(prefix, 0) == 0; });
}

QuantizeAttrs linear(ElementType to, float scale, std::int32_t zero_point, std::int32_t levels = 256,
                     std::int32_t code_offset = 0) {
  QuantizeAttrs q;
  q.to = to;
  q.scale = {scale};
  q.zero_point = {zero_point};
  q.levels = levels;
  q.code_offset = code_offset;
  return q;
}

TEST(LayerNormKernel, MatchesLayerNormInDouble) {
  for (const Shape& shape : {kOdd, kBert}) {
    const Inputs in = inputs_for(shape);
    Built b = layer_norm_then(shape, in, OpKind::Quantize, linear(ElementType::u8, 0.02f, 128));
    const Outcome r = run(b, shape, in, false);
    EXPECT_EQ(r.layers[0].implementation, "qfuse:layer_norm");
    const std::vector<double> ref = naive_layer_norm(shape, in, 1e-5);
    double worst = 0.0;
    for (std::size_t i = 0; i < ref.size(); ++i) {
      worst = std::max(worst, std::abs(static_cast<double>(r.outputs[0].as_float(static_cast<std::int64_t>(i))) - ref[i]));
    }
    EXPECT_LE(worst, 2e-5) << to_string(shape);
  }
}

struct Case {
  const char* name;
  OpKind quantizer;
  Attributes attrs;
  std::string implementation;
};

class FoldQuantizeIntoLayerNorm : public ::testing::TestWithParam<Case> {};

TEST_P(FoldQuantizeIntoLayerNorm, OneNodeWritesTheUnfusedBits) {
  const Case& c = GetParam();
  for (const Shape& shape : {kOdd, kBert}) {
    const Inputs in = inputs_for(shape);
    const Built b = layer_norm_then(shape, in, c.quantizer, c.attrs);
    const Outcome fused = run(b, shape, in, true);
    const Outcome unfused = run(b, shape, in, false);
    ASSERT_EQ(fused.layers.size(), 1u) << to_string(shape);
    EXPECT_EQ(fused.layers[0].implementation, c.implementation);
    EXPECT_TRUE(logged(fused, "fold_quantize_into_layer_norm: ln + q -> one "));
    ASSERT_EQ(unfused.layers.size(), 2u);
    ASSERT_EQ(fused.outputs.size(), unfused.outputs.size());
    for (std::size_t i = 0; i < fused.outputs.size(); ++i) {
      EXPECT_TRUE(same_bits(fused.outputs[i], unfused.outputs[i]))
          << b.outputs[i] << " " << to_string(shape);
    }
    // The codes against the quantizer's formula on y in double: within one.
    const std::vector<double> y = naive_layer_norm(shape, in, 1e-5);
    std::function<double(double)> code;
    if (c.quantizer == OpKind::DynamicQuantize) {
      // On the grid the node chose from the tensor's range.
      const double scale = fused.outputs[2].as_float(0), zp = fused.outputs[3].as_float(0);
      code = [=](double v) { return std::clamp(std::nearbyint(v / scale) + zp, 0.0, 255.0); };
    } else if (const auto* q = std::get_if<QuantizeAttrs>(&c.attrs)) {
      const double scale = q->scale[0], zp = q->zero_point[0];
      const double lo = q->code_min(), hi = q->code_max();
      code = [=](double v) { return std::clamp(std::nearbyint(v / scale) + zp, lo, hi); };
    } else {
      const auto& r = std::get<ConvertAttrs>(c.attrs);
      const double il = r.input_low, ih = r.input_high, lo = r.code_min();
      code = [=](double v) {
        return std::clamp(std::nearbyint((v - il) * 255.0 / (ih - il)), 0.0, 255.0) + lo;
      };
    }
    int worst = 0;
    for (std::size_t i = 0; i < y.size(); ++i) {
      const double got = fused.outputs[1].as_float(static_cast<std::int64_t>(i));
      worst = std::max(worst, static_cast<int>(std::abs(code(y[i]) - got)));
    }
    EXPECT_LE(worst, 1) << to_string(shape);
  }
}

ConvertAttrs by_ranges(ElementType to, float lo, float hi) {
  ConvertAttrs a;
  a.to = to;
  a.input_low = lo;
  a.input_high = hi;
  return a;
}

INSTANTIATE_TEST_SUITE_P(
    Quantizers, FoldQuantizeIntoLayerNorm,
    ::testing::Values(
        Case{"QuantizeU8", OpKind::Quantize, linear(ElementType::u8, 0.021f, 131),
             "qfuse:layer_norm_quantize"},
        Case{"QuantizeS8", OpKind::Quantize, linear(ElementType::s8, 0.017f, 0),
             "qfuse:layer_norm_quantize"},
        // Symmetric s8 onto [-127, 127]: saturating values must not reach -128.
        Case{"QuantizeS8NarrowSaturating", OpKind::Quantize,
             linear(ElementType::s8, 0.006f, 0, 255, 1), "qfuse:layer_norm_quantize"},
        // An int8 QuantizeLinear clipped to [0, 127]: s8 codes from 0.
        Case{"QuantizeS8FromZero", OpKind::Quantize, linear(ElementType::s8, 0.02f, 0, 128, 128),
             "qfuse:layer_norm_quantize"},
        Case{"ConvertByRanges", OpKind::Convert, by_ranges(ElementType::u8, -2.5f, 2.6f),
             "qfuse:layer_norm_quantize"},
        Case{"DynamicQuantize", OpKind::DynamicQuantize, NoAttrs{},
             "qfuse:layer_norm_dynamic_quantize"}),
    [](const auto& p) { return std::string(p.param.name); });

// Pre-norm: nothing but the quantizer reads y; the fused node still writes it.
TEST(FoldQuantizeIntoLayerNorm, OnlyTheQuantizerReadsTheNormalizedValues) {
  const Inputs in = inputs_for(kBert);
  for (const OpKind kind : {OpKind::Quantize, OpKind::DynamicQuantize}) {
    const Attributes q = kind == OpKind::Quantize ? Attributes{linear(ElementType::u8, 0.02f, 120)}
                                                  : Attributes{NoAttrs{}};
    const Built b = layer_norm_then(kBert, in, kind, q, false);
    const Outcome fused = run(b, kBert, in, true);
    const Outcome unfused = run(b, kBert, in, false);
    ASSERT_EQ(fused.layers.size(), 1u);
    ASSERT_EQ(fused.outputs.size(), unfused.outputs.size());
    for (std::size_t i = 0; i < fused.outputs.size(); ++i) {
      EXPECT_TRUE(same_bits(fused.outputs[i], unfused.outputs[i])) << b.outputs[i];
    }
  }
}

TEST(FoldQuantizeIntoLayerNormNegative, PerChannelQuantizeStaysANodeOfItsOwn) {
  const Inputs in = inputs_for(kOdd);
  QuantizeAttrs q = linear(ElementType::u8, 0.02f, 128);
  q.axis = 2;
  q.scale.assign(37, 0.02f);
  q.scale[3] = 0.03f;
  q.zero_point.assign(37, 128);
  const Built b = layer_norm_then(kOdd, in, OpKind::Quantize, q);
  const Outcome fused = run(b, kOdd, in, true);
  ASSERT_EQ(fused.layers.size(), 2u);
  EXPECT_EQ(fused.layers[0].op, "LayerNorm");
  EXPECT_TRUE(logged(fused, "fold_quantize_into_layer_norm: refused 'q': it quantizes per channel"));
  const Outcome unfused = run(b, kOdd, in, false);
  EXPECT_TRUE(same_bits(fused.outputs[1], unfused.outputs[1]));
}

}  // namespace
}  // namespace qfuse::graph::fold_layer_norm_test
