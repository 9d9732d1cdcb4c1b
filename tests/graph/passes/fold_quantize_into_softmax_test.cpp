// fold_quantize_into_softmax: a Quantize (ONNX's QuantizeLinear, zero point
// 0) after a Softmax runs inside oneDNN's softmax_v2 as its u8 /
// s8 destination with an output scale. The fused codes are checked against
// the unfused graph (Softmax, then ONNX's formula y / s) and against a naive
// loop in double, within one code; with a power-of-two scale, bit for bit.
// Named negatives: a zero point, and a Softmax read elsewhere too.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "graph/builder.hpp"
#include "plugin/api_internal.hpp"

namespace qfuse::graph {
namespace {

constexpr std::int64_t kRows = 4 * 16, kCols = 16;
const Shape kShape{1, 4, 16, kCols};

std::vector<float> logits() {
  std::mt19937 rng(11);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> v(static_cast<std::size_t>(kRows * kCols));
  for (float& x : v) x = d(rng);
  return v;
}

// x -> Softmax(last axis) -> Quantize(to, scale, zero point) -> output;
// the probabilities also an output when `probabilities_out`.
Graph softmax_then_quantize(ElementType to, float scale, std::int32_t zero_point,
                            bool probabilities_out = false) {
  Graph g;
  Builder b(g);
  const ValueId p = b.op(OpKind::Softmax, {b.input("x", kShape)}, SoftmaxAttrs{3}, "softmax");
  QuantizeAttrs q;
  q.to = to;
  q.scale = {scale};
  q.zero_point = {zero_point};
  b.output(b.op(OpKind::Quantize, {p}, q, "quantize"));
  if (probabilities_out) b.output(p);
  return g;
}

struct Codes {
  std::vector<int> values;
  std::vector<LayerInfo> layers;
  std::vector<std::string> log;
};

Codes run(const Graph& g, bool fuse) {
  const CompiledModel m = compile(g, {.fuse = fuse});
  InferRequest r = m.create_infer_request();
  r.set_input("x", Tensor::from_vector<float>(kShape, logits()));
  r.infer();
  const Tensor& y = r.output("quantize");
  Codes c;
  for (std::int64_t i = 0; i < y.size(); ++i) c.values.push_back(static_cast<int>(y.as_float(i)));
  c.layers = m.layers();
  c.log = m.fusion_log();
  return c;
}

// The softmax of the n values at `row`, in double.
std::vector<double> softmax_in_double(const float* row, std::int64_t n) {
  const double m = *std::max_element(row, row + n);
  std::vector<double> p(static_cast<std::size_t>(n));
  double sum = 0.0;
  for (std::int64_t c = 0; c < n; ++c) sum += p[static_cast<std::size_t>(c)] = std::exp(row[c] - m);
  for (double& v : p) v /= sum;
  return p;
}

// softmax in double, then saturate(round_half_even(y / s) + zp).
std::vector<int> naive_codes(ElementType to, double scale, int zero_point) {
  const std::vector<float> x = logits();
  const int lo = to == ElementType::u8 ? 0 : -128, hi = to == ElementType::u8 ? 255 : 127;
  std::vector<int> out(x.size());
  for (std::int64_t r = 0; r < kRows; ++r) {
    const std::vector<double> p = softmax_in_double(&x[static_cast<std::size_t>(r * kCols)], kCols);
    for (std::int64_t c = 0; c < kCols; ++c) {
      const double q = std::nearbyint(p[static_cast<std::size_t>(c)] / scale) + zero_point;
      out[static_cast<std::size_t>(r * kCols + c)] = static_cast<int>(std::clamp(q, double(lo), double(hi)));
    }
  }
  return out;
}

struct Case {
  const char* name;
  ElementType to;
  float scale;
  bool exact;  // 1 / scale exact in f32: the fused codes equal the unfused ones
};

class FoldQuantizeIntoSoftmax : public ::testing::TestWithParam<Case> {};

TEST_P(FoldQuantizeIntoSoftmax, SoftmaxWritesCodesWithinOneOfOnnxQuantize) {
  const Case c = GetParam();
  const Graph g = softmax_then_quantize(c.to, c.scale, 0);
  const Codes fused = run(g, true);
  const Codes unfused = run(g, false);
  // One node, the Softmax, writing the codes with oneDNN's own kernel.
  ASSERT_EQ(fused.layers.size(), 1u);
  EXPECT_EQ(fused.layers[0].op, "Softmax");
  EXPECT_EQ(fused.layers[0].implementation.find("ref"), std::string::npos) << fused.layers[0].implementation;
  EXPECT_TRUE(std::any_of(fused.log.begin(), fused.log.end(), [](const std::string& l) {
    return l.rfind("fold_quantize_into_softmax: softmax + quantize", 0) == 0;
  }));
  ASSERT_EQ(unfused.layers.size(), 2u);
  const std::vector<int> naive = naive_codes(c.to, c.scale, 0);
  std::size_t equal = 0;
  for (std::size_t i = 0; i < naive.size(); ++i) {
    EXPECT_LE(std::abs(fused.values[i] - unfused.values[i]), 1) << i;
    EXPECT_LE(std::abs(fused.values[i] - naive[i]), 1) << i;
    EXPECT_LE(std::abs(unfused.values[i] - naive[i]), 1) << i;
    equal += fused.values[i] == unfused.values[i];
    // qfuse's kernel quantizes with the Quantize's own loop.
    if (c.exact || fused.layers[0].implementation == "qfuse:softmax") {
      EXPECT_EQ(fused.values[i], unfused.values[i]) << i;
    }
  }
  EXPECT_GE(static_cast<double>(equal), 0.99 * static_cast<double>(naive.size()));
  std::cout << c.name << ": " << naive.size() - equal << " of " << naive.size()
            << " codes differ from ONNX's y / s (" << fused.layers[0].implementation << ")\n";
}

INSTANTIATE_TEST_SUITE_P(
    Scales, FoldQuantizeIntoSoftmax,
    ::testing::Values(Case{"U8Over255", ElementType::u8, 1.0f / 255.0f, false},
                      Case{"S8Over127", ElementType::s8, 1.0f / 127.0f, false},
                      // An encoder's calibrated scale: most large probabilities saturate.
                      Case{"U8Saturating", ElementType::u8, 0.00053947297f, false},
                      Case{"U8PowerOfTwo", ElementType::u8, 1.0f / 256.0f, true},
                      Case{"S8PowerOfTwo", ElementType::s8, 1.0f / 128.0f, true}),
    [](const auto& p) { return std::string(p.param.name); });

// The f32 softmax along the last axis against the quotient in double, on
// rows of 37 (a tail behind every 16 lanes) and of 128 (attention's). Each
// probability within (|x - max| + 4) * 2^-23 relative: the f32 difference
// x - max rounds by up to half an ulp of itself (which e^ turns into that
// relative error), and e^, the sum and the quotient add a few ulp.
TEST(RowSoftmax, MatchesSoftmaxInDouble) {
  for (const std::int64_t len : {37, 128}) {
    const Shape shape{2, 3, 5, len};
    const std::int64_t rows = element_count(shape) / len;
    std::mt19937 rng(3);
    std::normal_distribution<float> d(0.0f, 4.0f);
    std::vector<float> x(static_cast<std::size_t>(element_count(shape)));
    for (float& v : x) v = d(rng);
    Graph g;
    Builder b(g);
    b.output(b.op(OpKind::Softmax, {b.input("x", shape)}, SoftmaxAttrs{-1}, "softmax"));
    const CompiledModel m = compile(g, {.fuse = true});
    InferRequest r = m.create_infer_request();
    r.set_input("x", Tensor::from_vector<float>(shape, x));
    r.infer();
    const Tensor& y = r.output("softmax");
    double worst = 0.0;  // the largest error over its bound
    for (std::int64_t row = 0; row < rows; ++row) {
      const float* xr = &x[static_cast<std::size_t>(row * len)];
      const double mx = *std::max_element(xr, xr + len);
      const std::vector<double> ps = softmax_in_double(xr, len);
      for (std::int64_t i = 0; i < len; ++i) {
        const double p = ps[static_cast<std::size_t>(i)];
        const double bound = (std::abs(xr[i] - mx) + 4.0) * std::ldexp(1.0, -23);
        worst = std::max(worst, std::abs(y.as_float(row * len + i) - p) / p / bound);
      }
    }
    EXPECT_LE(worst, 1.0) << len << " " << m.layers()[0].implementation;
  }
}

// OpenVINO IR's and NNCF's form: the FakeQuantize after the softmax, split
// into a quantizing Convert by ranges [lo, hi]. qfuse's kernel writes its
// codes with the Convert's own loop: the unfused codes bit for bit, and
// within one code of the formula in double on the softmax in double.
TEST(FoldQuantizeIntoSoftmax, SoftmaxWritesTheCodesOfAFakeQuantizesRanges) {
  for (const ElementType to : {ElementType::u8, ElementType::s8}) {
    const float lo = 0.0f, hi = 0.168872f;  // ov_bert_layer's calibrated range
    Graph g;
    Builder b(g);
    const ValueId p = b.op(OpKind::Softmax, {b.input("x", kShape)}, SoftmaxAttrs{3}, "softmax");
    b.output(b.op(OpKind::Convert, {p}, ConvertAttrs{to, lo, hi}, "quantize"));
    const Codes fused = run(g, true);
    const Codes unfused = run(g, false);
    ASSERT_EQ(unfused.layers.size(), 2u);
    EXPECT_EQ(fused.values, unfused.values);
    if (fused.layers.size() != 1u) {  // no AVX-512: only the row kernel quantizes by ranges
      EXPECT_TRUE(std::any_of(fused.log.begin(), fused.log.end(), [](const std::string& l) {
        return l.rfind("fold_quantize_into_softmax: refused", 0) == 0;
      }));
      continue;
    }
    EXPECT_EQ(fused.layers[0].implementation, "qfuse:softmax");
    EXPECT_TRUE(std::any_of(fused.log.begin(), fused.log.end(), [](const std::string& l) {
      return l.rfind("fold_quantize_into_softmax: softmax + quantize", 0) == 0 &&
             l.find("ranges") != std::string::npos;
    }));
    const std::vector<float> x = logits();
    const int type_min = to == ElementType::u8 ? 0 : -128;
    for (std::int64_t r = 0; r < kRows; ++r) {
      const std::vector<double> probs = softmax_in_double(&x[static_cast<std::size_t>(r * kCols)], kCols);
      for (std::int64_t c = 0; c < kCols; ++c) {
        const double y = probs[static_cast<std::size_t>(c)];
        const double code =
            std::clamp(std::nearbyint((y - lo) * 255.0 / (hi - lo)), 0.0, 255.0) + type_min;
        const int got = fused.values[static_cast<std::size_t>(r * kCols + c)];
        EXPECT_LE(std::abs(got - code), 1.0) << r << " " << c;
      }
    }
  }
}

bool refused(const Codes& c, const std::string& what) {
  return std::any_of(c.log.begin(), c.log.end(), [&](const std::string& l) {
    return l.rfind("fold_quantize_into_softmax: refused", 0) == 0 && l.find(what) != std::string::npos;
  });
}

TEST(FoldQuantizeIntoSoftmaxNegative, NotFoldedWhenTheZeroPointIsNotZero) {
  const Graph g = softmax_then_quantize(ElementType::u8, 1.0f / 255.0f, 3);
  const Codes fused = run(g, true);
  ASSERT_EQ(fused.layers.size(), 2u);
  EXPECT_TRUE(refused(fused, "zero point 3")) << fused.log.size();
  const std::vector<int> naive = naive_codes(ElementType::u8, 1.0f / 255.0f, 3);
  const Codes unfused = run(g, false);
  for (std::size_t i = 0; i < naive.size(); ++i) {
    EXPECT_EQ(fused.values[i], unfused.values[i]) << i;
    EXPECT_LE(std::abs(fused.values[i] - naive[i]), 1) << i;
  }
}

TEST(FoldQuantizeIntoSoftmaxNegative, NotFoldedWhenTheProbabilitiesHaveAnotherReader) {
  const Graph g = softmax_then_quantize(ElementType::u8, 1.0f / 255.0f, 0, true);
  const Codes fused = run(g, true);
  ASSERT_EQ(fused.layers.size(), 2u);
  EXPECT_EQ(fused.layers[0].op, "Softmax");
  EXPECT_EQ(fused.layers[1].op, "Quantize");
  const Codes unfused = run(g, false);
  EXPECT_EQ(fused.values, unfused.values);
}

}  // namespace
}  // namespace qfuse::graph
