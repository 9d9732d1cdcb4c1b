// fold_mask_into_softmax: Add(scores, mask) -> Softmax becomes one Softmax
// that adds the mask in its pass over the rows. The fused probabilities are
// checked against the unfused graph (the Add, then the Softmax) bit for bit,
// f32 and quantized, and against the softmax in double of the f32 sums;
// masks per batch, per query and per key, rows with and without a tail
// behind sixteen lanes. Named negatives: a mask per row, an Add read
// elsewhere too.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "graph/broadcast.hpp"
#include "graph/builder.hpp"
#include "plugin/api_internal.hpp"
#include "qfuse/error.hpp"

namespace qfuse::graph {
namespace masked_softmax_test {

std::vector<float> normal_values(const Shape& shape, unsigned seed, float sigma) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(static_cast<std::size_t>(element_count(shape)));
  for (float& x : v) x = d(rng);
  return v;
}

// BERT's padding mask: 0 for the first `keep` keys of batch b, -10000 after.
std::vector<float> padding_mask(const Shape& shape) {
  std::vector<float> v(static_cast<std::size_t>(element_count(shape)), 0.0f);
  const std::int64_t keys = shape.back();
  for (std::size_t i = 0; i < v.size(); ++i) {
    const auto row = static_cast<std::int64_t>(i) / keys, key = static_cast<std::int64_t>(i) % keys;
    if (key >= keys - 1 - row % keys / 2) v[i] = -10000.0f;
  }
  return v;
}

struct Case {
  const char* name;
  Shape x, mask;
  bool quantize = false;
  bool mask_also_output = false;  // the Add's sum has a second reader
};

// x -> Add(x, mask) -> Softmax(last axis) [-> Quantize(u8, 1 / 255)].
Graph masked_softmax(const Case& c) {
  Graph g;
  Builder b(g);
  const ValueId sum = b.add(b.input("x", c.x), b.input("mask", c.mask));
  if (c.mask_also_output) b.output(sum);
  ValueId y = b.op(OpKind::Softmax, {sum}, SoftmaxAttrs{-1}, "softmax");
  if (c.quantize) {
    QuantizeAttrs q;
    q.to = ElementType::u8;
    q.scale = {1.0f / 255.0f};
    q.zero_point = {0};
    y = b.op(OpKind::Quantize, {y}, q, "quantize");
  }
  b.output(y);
  return g;
}

struct Probabilities {
  std::vector<float> values;
  std::vector<LayerInfo> layers;
  std::vector<std::string> log;
};

Probabilities run(const Case& c, bool fuse) {
  const Graph g = masked_softmax(c);
  const CompiledModel m = compile(g, {.fuse = fuse});
  InferRequest r = m.create_infer_request();
  r.set_input("x", Tensor::from_vector<float>(c.x, normal_values(c.x, 5, 4.0f)));
  r.set_input("mask", Tensor::from_vector<float>(c.mask, padding_mask(c.mask)));
  r.infer();
  const Tensor& y = r.output(c.quantize ? "quantize" : "softmax");
  Probabilities out;
  for (std::int64_t i = 0; i < y.size(); ++i) out.values.push_back(y.as_float(i));
  out.layers = m.layers();
  out.log = m.fusion_log();
  return out;
}

bool has_line(const std::vector<std::string>& log, const std::string& start, const std::string& part) {
  return std::any_of(log.begin(), log.end(), [&](const std::string& l) {
    return l.rfind(start, 0) == 0 && l.find(part) != std::string::npos;
  });
}

// Whether this machine runs qfuse's row softmax (the one kernel that adds a
// mask): a masked Softmax compiles.
bool has_avx512_softmax() {
  Graph g;
  Builder b(g);
  b.output(b.op(OpKind::Softmax, {b.input("x", {1, 4}), b.input("m", {1, 4})}, SoftmaxAttrs{-1}, "s"));
  try {
    (void)compile(g, {.fuse = false});
    return true;
  } catch (const Error&) {
    return false;
  }
}

bool masked_kernel(const Probabilities& r) {
  return std::any_of(r.layers.begin(), r.layers.end(), [](const LayerInfo& l) {
    return l.implementation == "qfuse:softmax_masked";
  });
}

class FoldMaskIntoSoftmax : public ::testing::TestWithParam<Case> {};

TEST_P(FoldMaskIntoSoftmax, SameBitsAsTheAddThenTheSoftmax) {
  const Case& c = GetParam();
  const Probabilities fused = run(c, true);
  const Probabilities unfused = run(c, false);
  ASSERT_EQ(fused.values.size(), unfused.values.size());
  std::int64_t differ = 0;
  for (std::size_t i = 0; i < fused.values.size(); ++i) differ += fused.values[i] != unfused.values[i];
  EXPECT_EQ(differ, 0);
  if (!masked_kernel(fused)) GTEST_SKIP() << "no AVX-512: the Add stays";
  EXPECT_TRUE(has_line(fused.log, "fold_mask_into_softmax:", "one Softmax adding the mask"));
  ASSERT_EQ(fused.layers.size(), 1u) << fused.layers[0].op;  // the Softmax alone
  if (c.quantize) return;
  // Against the softmax in double of the f32 sums x + m, within the bound
  // RowSoftmax.MatchesSoftmaxInDouble states: (|v - max| + 4) * 2^-23 relative.
  const std::vector<float> x = normal_values(c.x, 5, 4.0f), m = padding_mask(c.mask);
  const std::vector<std::size_t> at = broadcast_offsets(c.mask, c.x);
  const std::int64_t len = c.x.back(), rows = element_count(c.x) / len;
  double worst = 0.0;
  for (std::int64_t row = 0; row < rows; ++row) {
    std::vector<float> v(static_cast<std::size_t>(len));
    for (std::int64_t i = 0; i < len; ++i) {
      const auto k = static_cast<std::size_t>(row * len + i);
      v[static_cast<std::size_t>(i)] = x[k] + m[at[k]];
    }
    const double mx = *std::max_element(v.begin(), v.end());
    double sum = 0.0;
    for (const float t : v) sum += std::exp(t - mx);
    for (std::int64_t i = 0; i < len; ++i) {
      const double t = v[static_cast<std::size_t>(i)];
      const double p = std::exp(t - mx) / sum;
      if (p < 1e-30) continue;  // a masked key: e^-10000 is 0 in f32 and in double
      const double bound = (std::abs(t - mx) + 4.0) * std::ldexp(1.0, -23);
      worst = std::max(worst, std::abs(fused.values[static_cast<std::size_t>(row * len + i)] - p) / p / bound);
    }
  }
  EXPECT_LE(worst, 1.0);
}

INSTANTIATE_TEST_SUITE_P(
    Masks, FoldMaskIntoSoftmax,
    ::testing::Values(
        // BERT's [batch, 1, 1, keys] over [batch, heads, queries, keys].
        Case{"PerBatchTail", {2, 3, 5, 37}, {2, 1, 1, 37}},
        Case{"PerBatch128", {2, 3, 5, 128}, {2, 1, 1, 128}},
        Case{"PerBatchQuantized", {2, 3, 5, 37}, {2, 1, 1, 37}, true},
        // One mask for every batch; one per query (a causal mask's form).
        Case{"Shared", {2, 3, 6, 16}, {1, 1, 1, 16}},
        Case{"PerQuery", {1, 2, 7, 16}, {7, 16}},
        Case{"PerQueryQuantized", {1, 2, 7, 64}, {1, 1, 7, 64}, true},
        // Rows longer than a quantizing softmax's block: one at a time.
        Case{"LongRowsQuantized", {1, 1, 3, 5000}, {1, 1, 1, 5000}, true}),
    [](const auto& p) { return std::string(p.param.name); });

// The Softmax adds x + m broadcasting both ways: at another binding of a
// graph's symbolic dims, the operand the pass took for the scores may be
// the one that repeats (x [1, 2, 4, 16] and a mask [2, 1, 1, 16]). Against
// the Add then the Softmax, bit for bit.
TEST(MaskedSoftmax, ScoresThatRepeatAlongTheMasksBatch) {
  const Shape xs{1, 2, 4, 16}, ms{2, 1, 1, 16};
  const auto feed = [&](InferRequest& r) {
    r.set_input("x", Tensor::from_vector<float>(xs, normal_values(xs, 7, 4.0f)));
    r.set_input("mask", Tensor::from_vector<float>(ms, padding_mask(ms)));
    r.infer();
  };
  Graph two_inputs;
  Builder b(two_inputs);
  b.output(b.op(OpKind::Softmax, {b.input("x", xs), b.input("mask", ms)}, SoftmaxAttrs{-1}, "softmax"));
  Graph add_then_softmax;
  Builder c(add_then_softmax);
  c.output(c.op(OpKind::Softmax, {c.add(c.input("x", xs), c.input("mask", ms))}, SoftmaxAttrs{-1},
                "softmax"));
  if (!has_avx512_softmax()) GTEST_SKIP() << "no AVX-512: no kernel adds a mask";
  const CompiledModel m = compile(two_inputs, {.fuse = false});
  InferRequest r = m.create_infer_request();
  feed(r);
  const CompiledModel e = compile(add_then_softmax, {.fuse = false});
  InferRequest q = e.create_infer_request();
  feed(q);
  const Tensor& got = r.output("softmax");
  const Tensor& want = q.output("softmax");
  ASSERT_EQ(got.shape(), (Shape{2, 2, 4, 16}));
  ASSERT_EQ(want.shape(), got.shape());
  for (std::int64_t i = 0; i < got.size(); ++i) EXPECT_EQ(got.as_float(i), want.as_float(i)) << i;
}

TEST(FoldMaskIntoSoftmaxNegative, NotFoldedForAMaskPerRow) {
  // [.., 1]: one value per row, which changes no probability but rounds
  // differently; the Add stays for a layer or runs alone.
  const Case c{"PerRow", {1, 2, 8, 16}, {1, 2, 8, 1}};
  const Probabilities fused = run(c, true);
  EXPECT_TRUE(has_line(fused.log, "fold_mask_into_softmax: refused", "not one value per key"));
  EXPECT_FALSE(masked_kernel(fused));
  EXPECT_EQ(fused.values, run(c, false).values);
}

TEST(FoldMaskIntoSoftmaxNegative, NotFoldedWhenTheSumHasAnotherReader) {
  const Case c{"SecondReader", {1, 2, 8, 16}, {1, 1, 1, 16}, false, true};
  const Probabilities fused = run(c, true);
  EXPECT_FALSE(masked_kernel(fused));
  EXPECT_FALSE(has_line(fused.log, "fold_mask_into_softmax:", "one Softmax"));
  EXPECT_EQ(fused.values, run(c, false).values);
}

}  // namespace masked_softmax_test
}  // namespace qfuse::graph
