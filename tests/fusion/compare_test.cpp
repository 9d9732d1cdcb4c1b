// qfuse::Comparison: the tensors both compiled graphs compute, the codes a
// fused layer writes compared as the real values they stand for; the
// propagated difference and the isolated one (each fused layer fed the
// reference's values).

#include <gtest/gtest.h>

#include "fusion_test_util.hpp"
#include "plugin/api_internal.hpp"
#include "plugin/execution.hpp"

namespace qfuse::test::fusion {
namespace {

// x -> FQ(u8) -> conv -> FQ(u8 with a zero point, "mid.q") -> conv -> FQ(s8 output)
SmallNet two_layers() {
  SmallNet net;
  Builder b(net.graph);
  const ValueId x = b.fake_quantize(b.input("x", {1, 4, 8, 8}), 0.0f, 5.1f, 0.0f, 5.1f, 256, "x.q");
  ValueId y = quantized_conv(b, x, 8, 1, "first");
  y = b.fake_quantize(y, -1.0f, 4.1f, -1.0f, 4.1f, 256, "mid.q");
  close_with_s8_output(b, quantized_conv(b, y, 8, 2, "second"), net);
  return net;
}

TEST(Compare, LayerBoundariesAndOutputWithinOneLsb) {
  const SmallNet net = two_layers();
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> d(0.0f, 5.0f);
  std::vector<float> xv(256);
  for (float& v : xv) v = d(rng);
  qfuse::Comparison cmp(qfuse::make_model(net.graph));
  cmp.run({{"x", Tensor::from_vector<float>({1, 4, 8, 8}, xv)}});
  cmp.run({{"x", Tensor::from_vector<float>({1, 4, 8, 8}, std::vector<float>(256, 2.5f))}});
  const std::vector<TensorDiff> tensors = cmp.tensors();
  const TensorDiff* mid = nullptr;
  const TensorDiff* out = nullptr;
  for (const TensorDiff& t : tensors) {
    if (t.name == net.graph.value(net.graph.outputs()[0]).name) out = &t;
    if (t.node == "first") mid = &t;
  }
  ASSERT_NE(mid, nullptr);
  ASSERT_NE(out, nullptr);
  // The first layer writes the u8 codes of mid.q: compared as real values on its grid.
  EXPECT_TRUE(mid->quantized);
  EXPECT_EQ(mid->elements, 2 * 8 * 64);
  EXPECT_EQ(mid->lsb[2] + mid->lsb[3], 0) << mid->max_lsb;
  EXPECT_GE(mid->equal_share, 0.99);
  EXPECT_GT(mid->cosine, 0.9999);
  EXPECT_TRUE(out->graph_output);
  EXPECT_TRUE(out->quantized);
  EXPECT_LE(out->max_lsb, 1.0 + 1e-6);
  EXPECT_GT(out->snr_db, 30.0);
}

// Inputs a layer is likely to round differently fused and unfused.
Tensor random_x(unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(0.0f, 5.0f);
  std::vector<float> xv(256);
  for (float& v : xv) v = d(rng);
  return Tensor::from_vector<float>({1, 4, 8, 8}, xv);
}

// Six input sets: one Comparison over all of them, against two halves merged
// (the second half on the same Comparison after clear()).
TEST(CompareMerge, HalvesMergedEqualOneRunOverAll) {
  const SmallNet net = two_layers();
  const qfuse::Model model = qfuse::make_model(net.graph);
  qfuse::Comparison all(model);
  qfuse::Comparison part(model);
  for (unsigned i = 0; i < 6; ++i) all.run({{"x", random_x(100 + i)}});
  for (unsigned i = 0; i < 3; ++i) part.run({{"x", random_x(100 + i)}});
  std::vector<TensorDiff> merged = part.tensors();
  part.clear();
  EXPECT_TRUE(part.tensors().empty());  // nothing measured since
  for (unsigned i = 3; i < 6; ++i) part.run({{"x", random_x(100 + i)}});
  const std::vector<TensorDiff> second = part.tensors();
  qfuse::merge(merged, second);
  const std::vector<TensorDiff> whole = all.tensors();
  ASSERT_EQ(merged.size(), whole.size());
  bool some_off = false;
  for (std::size_t k = 0; k < whole.size(); ++k) {
    const TensorDiff& a = merged[k];
    const TensorDiff& b = whole[k];
    SCOPED_TRACE(b.name);
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.elements, b.elements);
    EXPECT_EQ(a.elements, 2 * second[k].elements);
    for (int j = 0; j < 4; ++j) {
      EXPECT_EQ(a.lsb[j], b.lsb[j]);
      EXPECT_EQ(a.isolated.lsb[j], b.isolated.lsb[j]);
    }
    EXPECT_EQ(a.sums.equal, b.sums.equal);
    EXPECT_EQ(a.max_abs, b.max_abs);
    EXPECT_EQ(a.max_lsb, b.max_lsb);
    EXPECT_DOUBLE_EQ(a.equal_share, b.equal_share);
    EXPECT_NEAR(a.cosine, b.cosine, 1e-12);
    if (std::isinf(b.snr_db)) {
      EXPECT_TRUE(std::isinf(a.snr_db));
    } else {
      EXPECT_NEAR(a.snr_db, b.snr_db, 1e-9);
    }
    some_off = some_off || b.sums.equal < b.elements;
  }
  EXPECT_TRUE(some_off) << "no tensor differs: the merge of the sums is not exercised";
}

// Every scale a power of two (inputs, weights k / 64, activations), so that
// the unfused path computes each pre-FakeQuantize value exactly and a fused
// layer given the same input codes writes the same codes, ties included.
const graph::ConvAttrs kOneByOne{.strides = {1, 1}, .dilations = {1, 1}, .pads_begin = {0, 0},
                                 .pads_end = {0, 0}, .groups = 1};

ValueId pow2_conv(Builder& b, ValueId x, std::int64_t oc, unsigned seed, int k_max,
                  const std::string& name) {
  const std::int64_t ic = b.graph().value(x).shape[1];
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> k(-k_max, k_max);
  std::vector<float> w(at(oc * ic));
  for (float& v : w) v = static_cast<float>(k(rng)) / 64.0f;
  const float s = 1.0f / 64.0f;
  const ValueId wq = b.fake_quantize(b.constant(name + ".w", {oc, ic, 1, 1}, w), -128 * s, 127 * s,
                                     -128 * s, 127 * s, 256, name + ".wq");
  return b.convolution(x, wq, std::nullopt, kOneByOne, name);
}

// The second layer and the output: b.q -> conv "second" -> FQ(s8, "y").
ValueId second_layer(Builder& b, ValueId bq) {
  const ValueId y = pow2_conv(b, bq, 8, 12, 64, "second");
  return b.fake_quantize(y, -128.0f / 4, 127.0f / 4, -128.0f / 4, 127.0f / 4, 256, "y");
}

constexpr float kBq = 255.0f / 8;  // b.q: u8, quantum 1/8

// x -> FQ(u8, "x.q") -> conv "first" -> FQ(s8, quantum 1/4, "b.mid") -> (+ x.q) ->
//   FQ(u8, quantum 1/8, "b.q") -> conv "second" -> FQ(s8, "y")
// The first layer is a residual block: with allow_residual_round_drop its
// fused form skips b.mid's round (off by up to half of b.mid's quantum, one
// quantum of b.q), which the unfused graph keeps.
graph::Graph residual_then_conv() {
  graph::Graph g;
  Builder b(g);
  const ValueId x = b.fake_quantize(b.input("x", {2, 8, 6, 6}), 0.0f, 255.0f / 16, 0.0f, 255.0f / 16,
                                    256, "x.q");
  ValueId y = pow2_conv(b, x, 8, 11, 12, "first");
  y = b.fake_quantize(y, -128.0f / 4, 127.0f / 4, -128.0f / 4, 127.0f / 4, 256, "b.mid");
  y = b.fake_quantize(b.add(y, x), 0.0f, kBq, 0.0f, kBq, 256, "b.q");
  b.output(second_layer(b, y));
  return g;
}

Tensor residual_input(unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(0.0f, 15.0f);
  std::vector<float> v(2 * 8 * 6 * 6);
  for (float& e : v) e = d(rng);
  return Tensor::from_vector<float>({2, 8, 6, 6}, v);
}

const TensorDiff& find(const std::vector<TensorDiff>& tensors, const std::string& name) {
  for (const TensorDiff& t : tensors) {
    if (t.name == name) return t;
  }
  ADD_FAILURE() << "no tensor " << name;
  static const TensorDiff none;
  return none;
}

void expect_isolated_equals_propagated(const TensorDiff& t) {
  SCOPED_TRACE(t.name);
  EXPECT_EQ(t.isolated.elements, t.elements);
  EXPECT_EQ(t.isolated.max_abs, t.max_abs);
  for (int k = 0; k < 4; ++k) EXPECT_EQ(t.isolated.lsb[k], t.lsb[k]) << k;
  EXPECT_EQ(t.isolated.max_lsb, t.max_lsb);
  EXPECT_EQ(t.isolated.equal_share, t.equal_share);
}

TEST(CompareIsolated, SecondLayerFedTheReferenceHasNoErrorOfItsOwn) {
  const graph::Graph g = residual_then_conv();
  CompileOptions options;
  options.allow_residual_round_drop = true;
  qfuse::Comparison cmp(qfuse::make_model(g), options);
  // Both layers run int8; the round inside the residual block is dropped.
  std::string first_post_ops;
  for (const LayerInfo& l : cmp.fused().layers()) {
    if (l.node == "first") first_post_ops = l.post_ops;
  }
  EXPECT_NE(first_post_ops.find("sum"), std::string::npos) << describe_layers(cmp.fused());
  EXPECT_EQ(quantized_layers(cmp.fused()).size(), 2u) << describe_layers(cmp.fused());
  // The second layer reads b.q's codes stored channels last: the isolated run
  // writes the reference into that layout.
  const graph::Graph& fg = compiled_graph(cmp.fused());
  bool bq_channels_last = false;
  for (std::uint32_t i = 0; i < fg.value_count(); ++i) {
    if (fg.value(graph::ValueId{i}).name == "b.q/to_u8") {
      bq_channels_last = detail::ImplAccess::of(cmp.fused()).layouts[i] == plugin::Layout::channels_last;
    }
  }
  EXPECT_TRUE(bq_channels_last) << describe_layers(cmp.fused());

  // The reference's b.q and y, through the public observer, on the same inputs.
  const CompiledModel unfused = compile(g, {.fuse = false});
  InferRequest reference = unfused.create_infer_request();
  Tensor ref_bq, ref_y;
  reference.set_value_observer([&](const std::string& name, const Tensor& t) {
    if (name == "b.q") ref_bq = t;
    if (name == "y") ref_y = t;
  });
  // Independently: the second layer alone, fused, on the reference's b.q
  // (on b.q's grid, so its FakeQuantize gives back the same codes), against
  // the reference's y, in quanta of y.
  graph::Graph tail;
  {
    Builder b(tail);
    const ValueId in = b.input("b", {2, 8, 6, 6});
    b.output(second_layer(b, b.fake_quantize(in, 0.0f, kBq, 0.0f, kBq, 256, "b.q")));
  }
  const CompiledModel tail_fused = compile(tail, {.fuse = true});
  std::int64_t tail_lsb[4] = {0, 0, 0, 0};
  double tail_max_abs = 0.0;
  for (unsigned seed : {1u, 2u, 3u}) {
    const Tensor x = residual_input(seed);
    cmp.run({{"x", x}});
    reference.set_input("x", x);
    reference.infer();
    ASSERT_EQ(ref_bq.size(), 2 * 8 * 36);
    const Tensor y = run(tail_fused, "b", ref_bq, "y");
    for (std::int64_t i = 0; i < y.size(); ++i) {
      const double e = std::abs(static_cast<double>(y.as_float(i)) - ref_y.as_float(i));
      tail_max_abs = std::max(tail_max_abs, e);
      ++tail_lsb[static_cast<std::size_t>(std::min(std::round(e * 4.0), 3.0))];
    }
  }
  const std::vector<TensorDiff> tensors = cmp.tensors();
  const TensorDiff& xq = find(tensors, "x.q");
  const TensorDiff& bq = find(tensors, "b.q");
  const TensorDiff& y = find(tensors, "y");
  EXPECT_EQ(bq.node, "first");
  EXPECT_EQ(y.node, "second");
  EXPECT_TRUE(y.graph_output);
  // The input codes are the same in both graphs: the first layer reads the
  // same input in both fused runs, so its two figures are the same.
  EXPECT_EQ(xq.lsb[0], xq.elements);
  EXPECT_EQ(xq.isolated.lsb[0], xq.isolated.elements);
  // The first layer has an error of its own (the dropped round: half of
  // b.mid's quantum, then b.q's own round of the sum, which holds x.q's
  // sixteenths, can move both ways): mostly one quantum, at most two.
  EXPECT_GT(bq.lsb[1], 0);
  EXPECT_EQ(bq.lsb[3], 0);
  EXPECT_LE(bq.max_lsb, 2.0);
  EXPECT_LT(bq.equal_share, 0.95);
  expect_isolated_equals_propagated(bq);
  // The second layer inherits it (propagated), but fed the reference's b.q
  // it computes the reference's y exactly (isolated).
  EXPECT_EQ(y.elements, 3 * 2 * 8 * 36);
  EXPECT_GT(y.lsb[1] + y.lsb[2] + y.lsb[3], 0) << "the inherited error should show in y";
  EXPECT_LT(y.equal_share, 1.0);
  EXPECT_EQ(y.isolated.elements, y.elements);
  EXPECT_EQ(y.isolated.lsb[0], y.isolated.elements);
  EXPECT_EQ(y.isolated.max_abs, 0.0);
  EXPECT_EQ(y.isolated.max_lsb, 0.0);
  EXPECT_EQ(y.isolated.equal_share, 1.0);
  // And the isolated figures are those of the second layer run on its own.
  EXPECT_EQ(y.isolated.max_abs, tail_max_abs);
  for (int k = 0; k < 4; ++k) EXPECT_EQ(y.isolated.lsb[k], tail_lsb[k]) << k;
}

TEST(CompareIsolated, EqualsPropagatedWhenFusedMatchesUnfusedExactly) {
  // Without the option every round is kept: fused computes unfused exactly.
  qfuse::Comparison cmp(qfuse::make_model(residual_then_conv()));
  for (unsigned seed : {1u, 2u}) cmp.run({{"x", residual_input(seed)}});
  const std::vector<TensorDiff> tensors = cmp.tensors();
  EXPECT_GE(tensors.size(), 3u);
  for (const TensorDiff& t : tensors) {
    EXPECT_EQ(t.equal_share, 1.0) << t.name;
    EXPECT_EQ(t.max_abs, 0.0) << t.name;
    expect_isolated_equals_propagated(t);
  }
}

TEST(CompareIsolated, TwoLayersWithinOneLsbBothWays) {
  // Real (not power-of-two) scales: the isolated figures are defined for
  // every compared tensor and never exceed the propagated bound.
  const SmallNet net = two_layers();
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> d(0.0f, 5.0f);
  std::vector<float> xv(256);
  for (float& v : xv) v = d(rng);
  qfuse::Comparison cmp(qfuse::make_model(net.graph));
  cmp.run({{"x", Tensor::from_vector<float>({1, 4, 8, 8}, xv)}});
  const std::vector<TensorDiff> tensors = cmp.tensors();
  for (const TensorDiff& t : tensors) {
    SCOPED_TRACE(t.name);
    EXPECT_EQ(t.isolated.elements, t.elements);
    if (t.quantized) {
      EXPECT_EQ(t.isolated.lsb[2] + t.isolated.lsb[3], 0);
      EXPECT_EQ(t.isolated.lsb[0] + t.isolated.lsb[1], t.isolated.elements);
    }
    EXPECT_GE(t.isolated.equal_share, 0.99);
  }
  // The first layer reads the same input codes in both runs.
  for (const TensorDiff& t : tensors) {
    if (t.node == "first") expect_isolated_equals_propagated(t);
  }
}

// run_against with the unfused path's own tensors as the external reference
// gives run()'s figures; a reference tensor moved by one quantum shows there
// as one LSB (isolated too), and a tensor the reference lacks is not compared.
TEST(CompareAgainst, ExternalReferenceOfTheUnfusedValuesGivesRunsFigures) {
  const graph::Graph g = residual_then_conv();
  CompileOptions options;
  options.allow_residual_round_drop = true;
  const qfuse::Model model = qfuse::make_model(g);
  const Tensor x = residual_input(4);
  qfuse::Comparison direct(model, options);
  direct.run({{"x", x}});

  const CompiledModel unfused = compile(g, {.fuse = false});
  InferRequest r = unfused.create_infer_request();
  std::map<std::string, Tensor> reference;
  r.set_value_observer([&](const std::string& name, const Tensor& t) { reference[name] = t; });
  r.set_input("x", x);
  r.infer();
  qfuse::Comparison against(model, options);
  EXPECT_GE(against.run_against({{"x", x}}, reference), 3u);
  const std::vector<TensorDiff> a = against.tensors(), d = direct.tensors();
  ASSERT_EQ(a.size(), d.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    SCOPED_TRACE(a[i].name);
    EXPECT_EQ(a[i].name, d[i].name);
    EXPECT_EQ(a[i].max_abs, d[i].max_abs);
    for (int k = 0; k < 4; ++k) EXPECT_EQ(a[i].lsb[k], d[i].lsb[k]);
    for (int k = 0; k < 4; ++k) EXPECT_EQ(a[i].isolated.lsb[k], d[i].isolated.lsb[k]);
  }

  // Without the option fused computes unfused exactly. y's reference moved
  // up by one quantum (0.25) everywhere and b.q left out: every element of y
  // is one LSB off, propagated and isolated, and b.q is not compared.
  std::map<std::string, Tensor> moved = reference;
  for (float& v : moved.at("y").data<float>()) v += 0.25f;
  moved.erase("b.q");
  qfuse::Comparison shifted(model);
  shifted.run_against({{"x", x}}, moved);
  const std::vector<TensorDiff> s = shifted.tensors();
  for (const TensorDiff& t : s) EXPECT_NE(t.name, "b.q") << "b.q has no reference";
  const TensorDiff& y = find(s, "y");
  EXPECT_EQ(y.lsb[1], y.elements);
  EXPECT_EQ(y.isolated.lsb[1], y.isolated.elements);
  EXPECT_EQ(y.max_lsb, 1.0);
  EXPECT_EQ(find(s, "x.q").max_lsb, 0.0);
}

TEST(CompareValueOverride, ObserverSeesTheComputedValueLaterNodesReadTheReplacement) {
  const graph::Graph g = residual_then_conv();
  const CompiledModel fused = compile(g, {.fuse = true});
  InferRequest r = fused.create_infer_request();
  r.set_input("x", residual_input(1));
  std::int64_t observed_nonzero_codes = 0;
  std::vector<float> observed_y;
  r.set_value_observer([&](const std::string& name, const Tensor& t) {
    if (name == "b.q/to_u8") {
      for (std::uint8_t q : t.data<std::uint8_t>()) observed_nonzero_codes += q != 0 ? 1 : 0;
    }
    if (name == "y") observed_y.assign(t.data<float>().begin(), t.data<float>().end());
  });
  // b.q's codes (stored channels last) replaced by a tensor of their own,
  // all zero: the second layer (no bias) then computes 0 everywhere; y (a
  // plain graph output) rewritten in place afterwards.
  set_value_override(r, [](const std::string& name, Tensor& t) {
    if (name == "b.q/to_u8") {
      t = Tensor(ElementType::u8, t.shape());
      return true;
    }
    if (name == "y") {
      EXPECT_TRUE(std::all_of(t.data<float>().begin(), t.data<float>().end(),
                              [](float v) { return v == 0.0f; }));
      for (float& v : t.data<float>()) v = 1.5f;
      return true;
    }
    return false;
  });
  r.infer();
  EXPECT_GT(observed_nonzero_codes, 0);
  ASSERT_EQ(observed_y.size(), 2u * 8 * 36);
  EXPECT_TRUE(std::all_of(observed_y.begin(), observed_y.end(), [](float v) { return v == 0.0f; }));
  for (float v : r.output("y").data<float>()) ASSERT_EQ(v, 1.5f);
  // The type and shape must stay.
  set_value_override(r, [](const std::string& name, Tensor& t) {
    if (name != "b.q/to_u8") return false;
    t = Tensor(ElementType::s8, t.shape());
    return true;
  });
  EXPECT_THROW(r.infer(), InferenceError);
  // Switched off: the request computes as before.
  set_value_override(r, {});
  r.set_value_observer({});
  r.infer();
  const Tensor y = run(fused, "x", residual_input(1), "y");
  EXPECT_TRUE(std::equal(y.data<float>().begin(), y.data<float>().end(),
                         r.output("y").data<float>().begin()));
}

}  // namespace
}  // namespace qfuse::test::fusion
