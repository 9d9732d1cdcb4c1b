// fold_quantize_into_gelu: a DynamicQuantize or per-tensor Quantize reading
// an erf Gelu runs in qfuse's GELU pass (GeluDynamicQuantize, GeluQuantize),
// after a fully connected layer that then writes f32 without the Gelu in its
// chain. Checked against the
// unfused graph (oneDNN's gelu_erf, then DynamicQuantize alone; the kernel
// itself against GELU in double is gelu_kernel_test.cpp's):
// - y within 1e-6 * max(1, |y|) of the unfused y (each GELU within its own
//   bound, 3e-7 and about 4e-7, of the one value);
// - a dynamic grid: the unfused one's scale within 1e-5 of it, the zero
//   point within one (a range end moved by those bounds can move it);
// - the codes within one of the unfused ones, at least 99.9% equal, and
//   within one of the grid's formula in double on y (u8 with a zero point,
//   s8 symmetric, and the dynamic grid).
// Shapes: a small encoder's feed-forward [64, 256], an odd [3, 37] (tails),
// BERT-base's [128, 3072] (the blocks shared by two threads). Named
// negatives: GELU's tanh form stays oneDNN's post-op and a per-channel
// Quantize a node of its own, each with the reason; the pass runs after
// lookup_elementwise and before the layers take their chains.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "graph/builder.hpp"
#include "graph/pass_manager.hpp"
#include "plugin/api_internal.hpp"

// A namespace of its own: helpers named as in the other pass tests of its unity batch.
namespace qfuse::graph::fold_gelu_test {
namespace {

struct Built {
  Graph g;
  std::vector<std::string> outputs;  // GELU's y, then the codes, scale and zero point
};

// x [rows, k] -> FullyConnected (w [n, k], bias) -> Gelu -> `quantizer`
// (DynamicQuantize, or Quantize with attributes `q`).
Built fc_gelu_then(std::int64_t rows, std::int64_t k, std::int64_t n, GeluApproximation form,
                   OpKind quantizer = OpKind::DynamicQuantize, Attributes q = NoAttrs{},
                   bool y_is_output = true) {
  Built b;
  Builder builder(b.g);
  std::mt19937 rng(23);
  std::normal_distribution<float> d(0.0f, 1.0f / std::sqrt(static_cast<float>(k)));
  std::vector<float> w(static_cast<std::size_t>(n * k)), bias(static_cast<std::size_t>(n));
  for (float& v : w) v = 2.0f * d(rng);
  for (float& v : bias) v = 0.5f * d(rng);
  const ValueId x = builder.input("x", {rows, k});
  const ValueId wv = b.g.add_constant("w", Tensor::from_vector<float>({n, k}, w));
  const ValueId bv = b.g.add_constant("b", Tensor::from_vector<float>({n}, bias));
  const ValueId h = builder.fully_connected(x, wv, bv, "ff1");
  const ValueId y = builder.op(OpKind::Gelu, {h}, GeluAttrs{form}, "gelu");
  if (y_is_output) {
    builder.output(y);
    b.outputs.push_back("gelu");
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

std::vector<float> inputs(std::int64_t count) {
  std::mt19937 rng(5);
  std::normal_distribution<float> d(0.0f, 1.5f);
  std::vector<float> x(static_cast<std::size_t>(count));
  for (float& v : x) v = d(rng);
  return x;
}

struct Outcome {
  std::vector<Tensor> outputs;
  std::vector<LayerInfo> layers;
  std::vector<std::string> log;
  std::vector<FusionRefusal> refusals;
};

Outcome run(const Built& b, const Shape& x_shape, const std::vector<float>& x, bool fuse) {
  const CompiledModel m = compile(b.g, {.fuse = fuse, .threads = 2});
  InferRequest r = m.create_infer_request();
  r.set_input("x", Tensor::from_vector<float>(x_shape, x));
  r.infer();
  Outcome out;
  for (const std::string& name : b.outputs) out.outputs.push_back(r.output(name));
  out.layers = m.layers();
  out.log = m.fusion_log();
  out.refusals = m.refusals();
  return out;
}

const LayerInfo* layer(const Outcome& r, const std::string& node) {
  const auto it = std::find_if(r.layers.begin(), r.layers.end(),
                               [&](const LayerInfo& l) { return l.node == node; });
  return it == r.layers.end() ? nullptr : &*it;
}

QuantizeAttrs linear(ElementType to, float scale, std::int32_t zero_point) {
  QuantizeAttrs q;
  q.to = to;
  q.scale = {scale};
  q.zero_point = {zero_point};
  return q;
}

struct Size {
  std::int64_t rows, k, n;
};

struct Case {
  Size size;
  OpKind quantizer;
  Attributes q;
  std::string implementation;
};

class FoldQuantizeIntoGelu : public ::testing::TestWithParam<Case> {};

TEST_P(FoldQuantizeIntoGelu, WithinOneCodeOfTheUnfusedGraph) {
  const Case& c = GetParam();
  const Size s = c.size;
  const bool dynamic = c.quantizer == OpKind::DynamicQuantize;
  const Built b = fc_gelu_then(s.rows, s.k, s.n, GeluApproximation::erf, c.quantizer, c.q);
  const std::vector<float> x = inputs(s.rows * s.k);
  const Outcome fused = run(b, {s.rows, s.k}, x, true);
  const Outcome unfused = run(b, {s.rows, s.k}, x, false);

  ASSERT_EQ(fused.layers.size(), 2u);
  const LayerInfo* fc = layer(fused, "ff1");
  const LayerInfo* gelu = layer(fused, "gelu");
  ASSERT_TRUE(fc != nullptr && gelu != nullptr);
  EXPECT_EQ(gelu->implementation, c.implementation);
  EXPECT_EQ(fc->post_ops.find("gelu"), std::string::npos) << fc->post_ops;
  EXPECT_TRUE(std::any_of(fused.log.begin(), fused.log.end(), [](const std::string& l) {
    return l.rfind("fold_quantize_into_gelu: gelu + q -> one Gelu", 0) == 0;
  }));

  const std::int64_t count = s.rows * s.n;
  const Tensor& y = fused.outputs[0];
  const Tensor& y_unfused = unfused.outputs[0];
  double worst_y = 0.0;
  for (std::int64_t i = 0; i < count; ++i) {
    const double a = y.as_float(i), u = y_unfused.as_float(i);
    worst_y = std::max(worst_y, std::abs(a - u) / std::max(1.0, std::abs(u)));
  }
  EXPECT_LE(worst_y, 1e-6);

  double scale = 0.0, zp = 0.0, code_min = 0.0, code_max = 255.0;
  if (dynamic) {
    scale = fused.outputs[2].as_float(0);
    zp = fused.outputs[3].as_float(0);
    const double unfused_scale = unfused.outputs[2].as_float(0);
    EXPECT_NEAR(scale, unfused_scale, 1e-5 * unfused_scale);
    EXPECT_LE(std::abs(zp - unfused.outputs[3].as_float(0)), 1.0);
  } else {
    const auto& q = std::get<QuantizeAttrs>(c.q);
    scale = q.scale[0];
    zp = q.zero_point[0];
    code_min = q.code_min();
    code_max = q.code_max();
  }

  int worst = 0;
  std::int64_t equal = 0;
  for (std::int64_t i = 0; i < count; ++i) {
    const int code = static_cast<int>(fused.outputs[1].as_float(i));
    const int cu = static_cast<int>(unfused.outputs[1].as_float(i));
    worst = std::max(worst, std::abs(code - cu));
    equal += code == cu;
    // The grid's formula in double on y.
    const double g = y.as_float(i);
    const double formula = std::clamp(std::nearbyint(g / scale) + zp, code_min, code_max);
    EXPECT_LE(std::abs(code - formula), 1.0) << i;
  }
  EXPECT_LE(worst, 1);
  EXPECT_GE(static_cast<double>(equal), 0.999 * static_cast<double>(count));
}

// The static grids as ONNX Runtime's quantizer writes them after GELU (u8,
// its minimum near -0.17 at a zero point of about 10) and s8 symmetric.
std::vector<Case> cases() {
  std::vector<Case> all;
  for (const Size s : {Size{64, 64, 256}, Size{3, 20, 37}, Size{128, 96, 3072}}) {
    all.push_back({s, OpKind::DynamicQuantize, NoAttrs{}, "qfuse:gelu_dynamic_quantize"});
    if (s.rows * s.n > 131072) continue;  // a static one stays the layer's post-ops (below)
    all.push_back({s, OpKind::Quantize, linear(ElementType::u8, 0.017f, 10), "qfuse:gelu_quantize"});
    all.push_back({s, OpKind::Quantize, linear(ElementType::s8, 0.031f, 0), "qfuse:gelu_quantize"});
  }
  // 128 x 1024 = 131072 values, the largest a static one takes: two blocks per thread.
  all.push_back({Size{128, 96, 1024}, OpKind::Quantize, linear(ElementType::u8, 0.017f, 10),
                 "qfuse:gelu_quantize"});
  return all;
}

INSTANTIATE_TEST_SUITE_P(Quantizers, FoldQuantizeIntoGelu, ::testing::ValuesIn(cases()));

TEST(FoldQuantizeIntoGeluRefusals, TheTanhFormStaysThePostOp) {
  const Built b = fc_gelu_then(8, 16, 32, GeluApproximation::tanh);
  const std::vector<float> x = inputs(8 * 16);
  const Outcome fused = run(b, {8, 16}, x, true);
  EXPECT_EQ(layer(fused, "gelu"), nullptr);
  const LayerInfo* q = layer(fused, "q");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->implementation, "qfuse:dynamic_quantize");
  EXPECT_TRUE(std::any_of(fused.refusals.begin(), fused.refusals.end(), [](const FusionRefusal& r) {
    return r.pass == "fold_quantize_into_gelu" && r.node == "gelu" &&
           r.reason.find("tanh form") != std::string::npos;
  }));
}

// With nothing else reading y, GeluQuantize computes it into a block on the
// stack: the same codes as when y is written out.
TEST(FoldQuantizeIntoGelu, CodesAreTheSameWhenNothingReadsY) {
  const QuantizeAttrs q = linear(ElementType::u8, 0.017f, 10);
  const Built with_y = fc_gelu_then(128, 96, 1000, GeluApproximation::erf, OpKind::Quantize, q);
  const Built without_y =
      fc_gelu_then(128, 96, 1000, GeluApproximation::erf, OpKind::Quantize, q, false);
  const std::vector<float> x = inputs(128 * 96);
  const Outcome a = run(with_y, {128, 96}, x, true);
  const Outcome b = run(without_y, {128, 96}, x, true);
  ASSERT_NE(layer(b, "gelu"), nullptr);
  EXPECT_EQ(layer(b, "gelu")->implementation, "qfuse:gelu_quantize");
  ASSERT_EQ(b.outputs.size(), 1u);
  const Tensor& codes = b.outputs[0];
  EXPECT_EQ(codes.byte_size(), a.outputs[1].byte_size());
  EXPECT_EQ(std::memcmp(codes.raw_data(), a.outputs[1].raw_data(), codes.byte_size()), 0);
}

// BERT-base's feed-forward (128 x 3072): the f32 output would leave the
// cache, so the layer keeps GELU and the quantizer as post-ops.
TEST(FoldQuantizeIntoGeluRefusals, ALargeStaticOneStaysThePostOps) {
  const Built b = fc_gelu_then(128, 32, 3072, GeluApproximation::erf, OpKind::Quantize,
                               linear(ElementType::u8, 0.017f, 10));
  const Outcome fused = run(b, {128, 32}, inputs(128 * 32), true);
  EXPECT_EQ(layer(fused, "gelu"), nullptr);
  EXPECT_TRUE(std::any_of(fused.refusals.begin(), fused.refusals.end(), [](const FusionRefusal& r) {
    return r.pass == "fold_quantize_into_gelu" && r.node == "gelu" &&
           r.reason.starts_with("393216 values: the layer's f32 output would leave the cache");
  }));
}

TEST(FoldQuantizeIntoGeluRefusals, APerChannelQuantizeStaysANode) {
  QuantizeAttrs q = linear(ElementType::u8, 0.02f, 10);
  q.scale.assign(32, 0.02f);
  q.zero_point.assign(32, 10);
  q.axis = 1;
  const Built b = fc_gelu_then(8, 16, 32, GeluApproximation::erf, OpKind::Quantize, q);
  const Outcome fused = run(b, {8, 16}, inputs(8 * 16), true);
  EXPECT_EQ(layer(fused, "gelu"), nullptr);
  EXPECT_TRUE(std::any_of(fused.refusals.begin(), fused.refusals.end(), [](const FusionRefusal& r) {
    return r.pass == "fold_quantize_into_gelu" && r.node == "q" &&
           r.reason == "it quantizes per channel";
  }));
}

// In the fuse phase after lookup_elementwise (a Gelu between codes becomes a
// table of 256 codes, exact, where it pays) and before the layers take their
// chains (fuse_dynamic_quantized_layer, fuse_dequantize_into_layer,
// fuse_post_op_chain), which would take the Gelu as oneDNN's post-op.
TEST(FoldQuantizeIntoGeluRefusals, RunsAfterTheTablesAndBeforeTheLayersTakeTheirChains) {
  for (const PassPhase& phase : fusion_phases()) {
    if (phase.name != "fuse") continue;
    const auto at = [&](std::string_view pass) {
      for (std::size_t i = 0; i < phase.passes.size(); ++i) {
        if (phase.passes[i].name == pass) return i;
      }
      ADD_FAILURE() << pass << " is not in the fuse phase";
      return phase.passes.size();
    };
    const std::size_t gelu = at("fold_quantize_into_gelu");
    EXPECT_LT(at("lookup_elementwise"), gelu);
    EXPECT_GT(at("fuse_dynamic_quantized_layer"), gelu);
    EXPECT_GT(at("fuse_dequantize_into_layer"), gelu);
    EXPECT_GT(at("fuse_post_op_chain"), gelu);
    return;
  }
  ADD_FAILURE() << "no fuse phase";
}

}  // namespace
}  // namespace qfuse::graph::fold_gelu_test
