// Transformer encoders' quantized matrix products as ONNX writes them:
//
// A. ONNX Runtime's dynamic format (quantize_dynamic):
//      x -> DynamicQuantizeLinear -> xq, xs, xzp
//      MatMulInteger(xq, Wq, xzp, wzp) -> Cast(FLOAT) -> Mul(., Mul(xs, ws)) -> Add(b) [-> act]
//    fused: one dynamic QuantizedFullyConnected (graph/passes/
//    fuse_dynamic_quantized_layer.cpp) whose output equals, bit for bit, a
//    naive loop written here (ORT's grid, the integer sum, times xs * ws in
//    f32, plus b in f32) and the unfused path.
// B. Attention's activation-by-activation MatMuls in static QDQ:
//      Q -> DQ (a), Q -> DQ (b) -> MatMul [-> Mul(c) -> Add(mask)] -> Q -> DQ
//    fused: one QuantizedMatMul reading both operands at run time
//    (fuse_dequantize_into_layer's fuse_runtime_matmul); its codes within one
//    code of a naive loop (ONNX's quantization, an integer product, the
//    scales in double) and of the unfused path.
// Named negatives stay f32 layers, compute what their operators compute, and
// say why in CompiledModel::refusals().

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <map>
#include <numbers>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "graph/onnx/importer.hpp"
#include "plugin/api_internal.hpp"
#include "tests/graph/onnx/onnx_model_builder.hpp"

namespace qfuse::onnx {
namespace {

using namespace test;  // Model, attr, random_floats, count_nodes
using ::testing::HasSubstr;

template <class T>
std::vector<T> random_ints(std::size_t n, int lo, int hi, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<T> v(n);
  for (T& x : v) x = static_cast<T>(d(rng));
  return v;
}

std::size_t sz(std::int64_t v) { return static_cast<std::size_t>(v); }

// One compiled run: the outputs asked for, the executed layers and what the
// fusion passes refused.
struct Result {
  std::map<std::string, Tensor> outputs;
  std::vector<LayerInfo> layers;
  std::vector<FusionRefusal> refusals;
  std::vector<std::string> log;

  const Tensor& out(const std::string& name) const { return outputs.at(name); }
  std::vector<const LayerInfo*> layers_of(const std::string& op) const {
    std::vector<const LayerInfo*> found;
    for (const LayerInfo& l : layers) {
      if (l.op == op) found.push_back(&l);
    }
    return found;
  }
  std::size_t quantized_layers() const {
    return static_cast<std::size_t>(
        std::count_if(layers.begin(), layers.end(),
                      [](const LayerInfo& l) { return l.op.rfind("Quantized", 0) == 0; }));
  }
  // Every layer and every log line, for failure messages.
  std::string describe() const {
    std::string s = "layers:";
    for (const LayerInfo& l : layers) {
      s += "\n  " + l.node + " " + l.op + " (" + l.implementation + ", " + l.precision + ") " +
           l.post_ops;
    }
    s += "\nfusion log:";
    for (const std::string& line : log) s += "\n  " + line;
    return s;
  }
  // The refusals of `pass`, joined, or "" when it refused nothing.
  std::string refusal_text(const std::string& pass) const {
    std::string s;
    for (const FusionRefusal& r : refusals) {
      if (r.pass == pass) s += "'" + r.node + "': " + r.reason + "\n";
    }
    return s;
  }
};

Result run_model(const graph::Graph& g, bool fuse, const std::map<std::string, Tensor>& inputs,
                 const std::vector<std::string>& outputs) {
  const CompiledModel model = compile(g, {.fuse = fuse});
  InferRequest r = model.create_infer_request();
  for (const auto& [name, t] : inputs) r.set_input(name, t);
  r.infer();
  Result res;
  for (const std::string& name : outputs) res.outputs.emplace(name, r.output(name));
  res.layers = model.layers();
  res.refusals = model.refusals();
  res.log = model.fusion_log();
  return res;
}

// Equal floats bit for bit; +0 and -0 count as equal only when `signed_zero`
// is false (a Relu may write either).
bool same_bits(float a, float b, bool signed_zero = true) {
  if (!signed_zero && a == 0.0f && b == 0.0f) return true;
  return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b);
}

// round_half_to_even(x / s) + zp, saturated to [lo, hi], the division in f32:
// ONNX's QuantizeLinear.
int onnx_quantize(float x, float s, int zp, int lo, int hi) {
  const float q = std::nearbyint(x / s);
  return static_cast<int>(
      std::clamp(q + static_cast<float>(zp), static_cast<float>(lo), static_cast<float>(hi)));
}

// =============================================================================
// A. ONNX Runtime's dynamic format
// =============================================================================

// DynamicQuantizeLinear as ONNX Runtime computes it (GetQuantizationParameter
// and MlasQuantizeLinear), in f32 throughout: the range including 0, scale =
// (max - min) / 255 (1 when max == min), zp = round_half_even(clamp(0 - min /
// scale, 0, 255)), codes = saturate(round_half_even(x / scale) + zp).
struct OrtDynamicQuantized {
  std::vector<std::uint8_t> codes;
  float scale = 1.0f;
  int zero_point = 0;
};

OrtDynamicQuantized ort_dynamic_quantize(const std::vector<float>& x) {
  float lo = 0.0f, hi = 0.0f;
  for (float v : x) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  OrtDynamicQuantized q;
  q.scale = hi == lo ? 1.0f : (hi - lo) / 255.0f;
  const float zp = std::clamp(0.0f - lo / q.scale, 0.0f, 255.0f);
  q.zero_point = static_cast<int>(std::nearbyint(zp));
  q.codes.resize(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    q.codes[i] = static_cast<std::uint8_t>(onnx_quantize(x[i], q.scale, q.zero_point, 0, 255));
  }
  return q;
}

enum class Inputs { mixed, positive, negative, zeros };
enum class Activation { none, relu, gelu_erf };

// One layer of ORT's dynamic format, x [m, k] -> y [m, n]. The defaults are
// the format as quantize_dynamic writes it (s8 weights, zero point 0); the
// other fields build the named negatives.
struct DynamicLayer {
  std::int64_t m = 16, k = 64, n = 40;
  bool per_column = false;  // ws [n] instead of a scalar
  Activation activation = Activation::none;
  unsigned seed = 1;
  bool u8_weights = false;             // u8 weights (QUInt8), zero point `weight_zero_point`
  int weight_zero_point = 0;           // a non-zero one: not the fused form
  bool constant_scale = false;         // Cast -> Mul(ws): no run-time xs in the scale
  bool power_of_two_scales = false;    // ws = 2^-e, e in [6, 9]
  bool accumulator_is_output = false;  // the Cast's output is also a graph output
  bool sequence_dim = false;           // x [1, m, k]: [batch, sequence, hidden]
  bool residual = false;               // + a run-time residual after the bias (no activation)

  Dims x_dims() const { return sequence_dim ? Dims{1, m, k} : Dims{m, k}; }
  Dims y_dims() const { return sequence_dim ? Dims{1, m, n} : Dims{m, n}; }
  std::vector<float> residual_values() const {
    return random_floats(sz(m * n), -4.0f, 4.0f, seed + 400);
  }

  // Weight codes in [lo, hi] of the storage type, row-major [k, n].
  std::vector<int> weights() const {
    return u8_weights ? random_ints<int>(sz(k * n), 0, 255, seed + 100)
                      : random_ints<int>(sz(k * n), -127, 127, seed + 100);
  }
  std::vector<float> weight_scales() const {
    const std::size_t count = per_column ? sz(n) : 1;
    if (!power_of_two_scales) return random_floats(count, 0.002f, 0.02f, seed + 200);
    std::vector<float> ws;
    for (int e : random_ints<int>(count, 6, 9, seed + 200)) ws.push_back(std::ldexp(1.0f, -e));
    return ws;
  }
  std::vector<float> bias() const { return random_floats(sz(n), -1.0f, 1.0f, seed + 300); }

  std::string model() const {
    Model md(13);
    md.input("x", kFloat, x_dims());
    md.node("DynamicQuantizeLinear", {"x"}, {"xq", "xs", "xzp"}, "x_QuantizeLinear");
    const std::vector<int> w = weights();
    if (u8_weights) {
      md.initializer("W_quantized", kUint8, {k, n}, std::vector<std::uint8_t>(w.begin(), w.end()));
      md.initializer("W_zero_point", kUint8, {},
                     std::vector<std::uint8_t>{static_cast<std::uint8_t>(weight_zero_point)});
    } else {
      md.initializer("W_quantized", kInt8, {k, n}, std::vector<std::int8_t>(w.begin(), w.end()));
      md.initializer("W_zero_point", kInt8, {},
                     std::vector<std::int8_t>{static_cast<std::int8_t>(weight_zero_point)});
    }
    md.node("MatMulInteger", {"xq", "W_quantized", "xzp", "W_zero_point"}, {"acc"},
            "fc_MatMulInteger");
    attr(md.node("Cast", {"acc"}, {"acc_f"}, "fc_cast"), "to", std::int64_t{kFloat});
    md.initializer("W_scale", kFloat, per_column ? Dims{n} : Dims{}, weight_scales());
    if (constant_scale) {
      md.node("Mul", {"acc_f", "W_scale"}, {"scaled"}, "fc_mul");
    } else {
      md.node("Mul", {"xs", "W_scale"}, {"multiplier"}, "fc_scales_mul");
      md.node("Mul", {"acc_f", "multiplier"}, {"scaled"}, "fc_mul");
    }
    md.initializer("B", kFloat, {n}, bias());
    const std::string biased = activation == Activation::none && !residual ? "y" : "biased";
    md.node("Add", {"scaled", "B"}, {biased}, "fc_add");
    if (residual) {
      md.input("residual", kFloat, y_dims());
      md.node("Add", {"residual", biased}, {"y"}, "residual_add");
    }
    if (activation == Activation::relu) md.node("Relu", {biased}, {"y"}, "fc_relu");
    if (activation == Activation::gelu_erf) {
      md.initializer("sqrt2", kFloat, {}, std::vector<float>{1.4142135f});
      md.initializer("one", kFloat, {}, std::vector<float>{1.0f});
      md.initializer("half", kFloat, {}, std::vector<float>{0.5f});
      md.node("Div", {biased, "sqrt2"}, {"g_scaled"}, "gelu/Div");
      md.node("Erf", {"g_scaled"}, {"g_erf"}, "gelu/Erf");
      md.node("Add", {"g_erf", "one"}, {"g_one_plus"}, "gelu/Add");
      md.node("Mul", {biased, "g_one_plus"}, {"g_prod"}, "gelu/Mul");
      md.node("Mul", {"g_prod", "half"}, {"y"}, "gelu/Mul_1");
    }
    md.output("y", kFloat);
    if (accumulator_is_output) md.output("acc_f", kFloat);
    return md.bytes();
  }

  std::map<std::string, Tensor> feed(const std::vector<float>& x) const {
    std::map<std::string, Tensor> in{{"x", Tensor::from_vector<float>(x_dims(), x)}};
    if (residual) in.emplace("residual", Tensor::from_vector<float>(y_dims(), residual_values()));
    return in;
  }

  std::vector<float> input(Inputs kind) const {
    switch (kind) {
      case Inputs::mixed: return random_floats(sz(m * k), -2.5f, 3.5f, seed);
      case Inputs::positive: return random_floats(sz(m * k), 0.01f, 4.0f, seed);
      case Inputs::negative: return random_floats(sz(m * k), -3.0f, -0.01f, seed);
      case Inputs::zeros: return std::vector<float>(sz(m * k), 0.0f);
    }
    return {};
  }

  // The integer MatMulInteger computes: sum_k (xq - xzp) * (w - wzp), int32.
  std::vector<std::int32_t> accumulators(const OrtDynamicQuantized& q) const {
    const std::vector<int> w = weights();
    std::vector<std::int32_t> acc(sz(m * n), 0);
    for (std::int64_t r = 0; r < m; ++r) {
      for (std::int64_t c = 0; c < n; ++c) {
        std::int32_t s = 0;
        for (std::int64_t i = 0; i < k; ++i) {
          s += (q.codes[sz(r * k + i)] - q.zero_point) * (w[sz(i * n + c)] - weight_zero_point);
        }
        acc[sz(r * n + c)] = s;
      }
    }
    return acc;
  }

  // Before the activation, in f32 as ONNX's operators compute it: Cast of the
  // integer, times fl(xs * ws) (or ws alone), plus b [plus the residual].
  std::vector<float> pre_activation(const std::vector<float>& x) const {
    const OrtDynamicQuantized q = ort_dynamic_quantize(x);
    const std::vector<std::int32_t> acc = accumulators(q);
    const std::vector<float> ws = weight_scales(), b = bias(), res = residual_values();
    std::vector<float> y(acc.size());
    for (std::int64_t r = 0; r < m; ++r) {
      for (std::int64_t c = 0; c < n; ++c) {
        const float w_scale = ws[per_column ? sz(c) : 0];
        const float multiplier = constant_scale ? w_scale : q.scale * w_scale;
        const float scaled = static_cast<float>(acc[sz(r * n + c)]) * multiplier;
        const float biased = scaled + b[sz(c)];
        y[sz(r * n + c)] = residual ? res[sz(r * n + c)] + biased : biased;
      }
    }
    return y;
  }
};

// Checks y against the loop: bit for bit without an activation, equal values
// (either zero) after a Relu, and GELU's erf form within oneDNN's accuracy
// (1e-5 relative + 1e-6 absolute, as the GELU pattern tests measure it).
void expect_matches_loop(const DynamicLayer& d, const std::vector<float>& x, const Tensor& y,
                         const std::string& what) {
  ASSERT_EQ(y.shape(), d.y_dims()) << what;
  ASSERT_EQ(y.type(), ElementType::f32) << what;
  const std::vector<float> pre = d.pre_activation(x);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < pre.size(); ++i) {
    const float got = y.data<float>()[i];
    bool ok = false;
    double expected = pre[i];
    switch (d.activation) {
      case Activation::none: ok = same_bits(got, pre[i]); break;
      case Activation::relu:
        expected = std::max(pre[i], 0.0f);
        ok = same_bits(got, std::max(pre[i], 0.0f), false);
        break;
      case Activation::gelu_erf: {
        const double v = pre[i];
        expected = 0.5 * v * (1.0 + std::erf(v / std::numbers::sqrt2));
        ok = std::abs(got - expected) <= 1e-5 * std::abs(expected) + 1e-6;
        break;
      }
    }
    if (!ok && ++wrong <= 5) {
      ADD_FAILURE() << what << ": element " << i << " (row " << i / sz(d.n) << ", column "
                    << i % sz(d.n) << ") is " << got << " (expected " << expected << ")";
    }
  }
  EXPECT_EQ(wrong, 0u) << what << ": elements that differ from the loop";
}

// The fused model's one dynamic int8 layer.
void expect_one_dynamic_int8_layer(const Result& fused) {
  const auto fcs = fused.layers_of("QuantizedFullyConnected");
  ASSERT_EQ(fcs.size(), 1u) << fused.describe();
  EXPECT_EQ(fused.quantized_layers(), 1u) << fused.describe();
  EXPECT_EQ(fcs[0]->precision, "int8") << fused.describe();
  EXPECT_EQ(fcs[0]->src_type, ElementType::u8) << fused.describe();
  EXPECT_EQ(fcs[0]->dst_type, ElementType::f32) << fused.describe();
  EXPECT_EQ(fcs[0]->implementation.find("ref"), std::string::npos) << fused.describe();
  EXPECT_FALSE(fcs[0]->scalar_fallback) << fused.describe();
  EXPECT_THAT(fcs[0]->post_ops, HasSubstr("output_scales (run time")) << fused.describe();
  // What is left: the run-time quantize. The product of the two scales is
  // the layer's, the bias and the activation are its post-ops.
  std::vector<std::string> ops;
  for (const LayerInfo& l : fused.layers) ops.push_back(l.op);
  EXPECT_THAT(ops, ::testing::ElementsAre("DynamicQuantize", "QuantizedFullyConnected"))
      << fused.describe();
  ASSERT_FALSE(fcs[0]->post_op_list.empty()) << fused.describe();
  const PostOp& bias = fcs[0]->post_op_list[0];
  EXPECT_TRUE(bias.kind == PostOp::Kind::binary && bias.algorithm == "add" && bias.per_channel)
      << fused.describe();
  bool logged = false;
  for (const std::string& line : fused.log) {
    logged = logged || line.rfind("fuse_dynamic_quantized_layer: ", 0) == 0;
  }
  EXPECT_TRUE(logged) << fused.describe();
}

class OnnxDynamicQuantizedMatMul
    : public ::testing::TestWithParam<std::tuple<std::int64_t, std::int64_t, bool, Inputs>> {};

TEST_P(OnnxDynamicQuantizedMatMul, IsOneInt8LayerEqualToANaiveLoopBitForBit) {
  const auto [k, m, per_column, inputs] = GetParam();
  for (unsigned seed : {1u, 2u, 3u}) {
    DynamicLayer d;
    d.k = k;
    d.m = m;
    d.per_column = per_column;
    d.seed = seed;
    const graph::Graph g = import_bytes(d.model());
    EXPECT_EQ(count_nodes(g, graph::OpKind::DynamicQuantize), 1u);
    const std::vector<float> xv = d.input(inputs);
    // The grid the loop used, to make sure each input kind tests what it says.
    const OrtDynamicQuantized q = ort_dynamic_quantize(xv);
    if (inputs == Inputs::positive) {
      ASSERT_EQ(q.zero_point, 0);
    }
    if (inputs == Inputs::negative) {
      ASSERT_EQ(q.zero_point, 255);
    }
    if (inputs == Inputs::zeros) {
      ASSERT_EQ(q.scale, 1.0f);
    }
    const std::map<std::string, Tensor> feed = d.feed(xv);
    const Result unfused = run_model(g, false, feed, {"y"});
    const Result fused = run_model(g, true, feed, {"y"});
    const std::string what = "seed " + std::to_string(seed);
    expect_matches_loop(d, xv, unfused.out("y"), what + " unfused");
    expect_matches_loop(d, xv, fused.out("y"), what + " fused");
    expect_one_dynamic_int8_layer(fused);
    for (std::int64_t i = 0; i < fused.out("y").size(); ++i) {
      ASSERT_TRUE(
          same_bits(fused.out("y").data<float>()[sz(i)], unfused.out("y").data<float>()[sz(i)]))
          << what << " element " << i << ": fused " << fused.out("y").data<float>()[sz(i)]
          << ", unfused " << unfused.out("y").data<float>()[sz(i)];
    }
  }
}

std::string inputs_name(Inputs i) {
  switch (i) {
    case Inputs::mixed: return "MixedSigns";
    case Inputs::positive: return "AllPositiveZp0";
    case Inputs::negative: return "AllNegativeZp255";
    case Inputs::zeros: return "AllZeros";
  }
  return "";
}

INSTANTIATE_TEST_SUITE_P(ShapesScalesInputs, OnnxDynamicQuantizedMatMul,
                         ::testing::Combine(::testing::Values(std::int64_t{64}, std::int64_t{256}),
                                            ::testing::Values(std::int64_t{1}, std::int64_t{16}),
                                            ::testing::Bool(),
                                            ::testing::Values(Inputs::mixed, Inputs::positive,
                                                              Inputs::negative, Inputs::zeros)),
                         [](const auto& p) {
                           return "K" + std::to_string(std::get<0>(p.param)) + "M" +
                                  std::to_string(std::get<1>(p.param)) +
                                  (std::get<2>(p.param) ? "PerColumn" : "PerTensor") +
                                  inputs_name(std::get<3>(p.param));
                         });

// x codes on exact ties of x / scale: min -2.55 and max 0 give scale 0.01 (in
// f32, not exactly) and zero point 255; values k.5 scales away land on the
// ties the loop and the kernel must both round to even.
TEST(OnnxDynamicQuantized, CodesOnTiesMatchTheLoop) {
  DynamicLayer d;
  d.m = 4;
  d.k = 64;
  std::vector<float> xv = d.input(Inputs::mixed);
  const float scale = (0.0f - -2.55f) / 255.0f;
  for (std::size_t i = 0; i < xv.size(); ++i) {
    xv[i] = -static_cast<float>(i % 200 + 0.5) * scale;  // ties, or their f32 neighbours
  }
  xv[0] = -2.55f;
  xv[1] = 0.0f;
  const OrtDynamicQuantized q = ort_dynamic_quantize(xv);
  ASSERT_EQ(q.scale, scale);
  ASSERT_EQ(q.zero_point, 255);
  std::size_t ties = 0;
  for (float x : xv) {
    const float t = x / q.scale;
    ties += t - std::floor(t) == 0.5f;
  }
  ASSERT_GT(ties, xv.size() / 2) << "the inputs should mostly be ties";
  const graph::Graph g = import_bytes(d.model());
  const std::map<std::string, Tensor> feed = d.feed(xv);
  for (bool fuse : {false, true}) {
    const Result r = run_model(g, fuse, feed, {"y"});
    expect_matches_loop(d, xv, r.out("y"), fuse ? "fused" : "unfused");
    if (fuse) expect_one_dynamic_int8_layer(r);
  }
}

// 384 x 256 inputs (BERT's sequence by a hidden size): enough elements for
// DynamicQuantize to split its min / max and its codes over the request's
// threads in chunks, with the minimum in the last chunk and the maximum in
// the middle of another.
TEST(OnnxDynamicQuantized, LargeInputQuantizedInChunksMatchesTheLoop) {
  DynamicLayer d;
  d.m = 384;
  d.k = 256;
  d.n = 24;
  d.seed = 4;
  std::vector<float> xv = d.input(Inputs::mixed);
  xv.back() = -7.25f;
  xv[xv.size() / 3] = 9.5f;
  const graph::Graph g = import_bytes(d.model());
  for (bool fuse : {false, true}) {
    const Result r = run_model(g, fuse, d.feed(xv), {"y"});
    expect_matches_loop(d, xv, r.out("y"), fuse ? "fused" : "unfused");
    if (fuse) expect_one_dynamic_int8_layer(r);
  }
}

// The bias, then a Relu or GELU's erf form: post-ops of the one int8 layer.
TEST(OnnxDynamicQuantized, ReluAndErfGeluAfterTheBiasJoinTheLayer) {
  for (const Activation act : {Activation::relu, Activation::gelu_erf}) {
    for (const bool per_column : {false, true}) {
      DynamicLayer d;
      d.activation = act;
      d.per_column = per_column;
      d.seed = 7;
      const graph::Graph g = import_bytes(d.model());
      const std::vector<float> xv = d.input(Inputs::mixed);
      const std::map<std::string, Tensor> feed = d.feed(xv);
      const std::string what = std::string(act == Activation::relu ? "relu" : "gelu") +
                               (per_column ? " per column" : " per tensor");
      const Result unfused = run_model(g, false, feed, {"y"});
      const Result fused = run_model(g, true, feed, {"y"});
      expect_matches_loop(d, xv, unfused.out("y"), what + " unfused");
      expect_matches_loop(d, xv, fused.out("y"), what + " fused");
      expect_one_dynamic_int8_layer(fused);
      const auto fcs = fused.layers_of("QuantizedFullyConnected");
      ASSERT_EQ(fcs.size(), 1u);
      const std::string algorithm = act == Activation::relu ? "relu" : "gelu_erf";
      bool has = false;
      for (const PostOp& p : fcs[0]->post_op_list) {
        has = has || (p.kind == PostOp::Kind::eltwise && p.algorithm == algorithm);
      }
      EXPECT_TRUE(has) << what << "\n" << fused.describe();
    }
  }
}

// x [1, S, K] as transformers feed it, and the residual add after the
// bias (a sum post-op): still one int8 layer, still bit for bit.
TEST(OnnxDynamicQuantized, SequenceInputAndResidualAddStayBitForBit) {
  for (const bool residual : {false, true}) {
    for (const bool per_column : {false, true}) {
      DynamicLayer d;
      d.sequence_dim = true;
      d.residual = residual;
      d.per_column = per_column;
      d.k = 256;
      d.seed = 9;
      const std::string what = std::string(residual ? "residual" : "no residual") +
                               (per_column ? " per column" : " per tensor");
      const graph::Graph g = import_bytes(d.model());
      const std::vector<float> xv = d.input(Inputs::mixed);
      const Result unfused = run_model(g, false, d.feed(xv), {"y"});
      const Result fused = run_model(g, true, d.feed(xv), {"y"});
      expect_matches_loop(d, xv, unfused.out("y"), what + " unfused");
      expect_matches_loop(d, xv, fused.out("y"), what + " fused");
      const auto fcs = fused.layers_of("QuantizedFullyConnected");
      ASSERT_EQ(fcs.size(), 1u) << what << "\n" << fused.describe();
      EXPECT_EQ(fused.quantized_layers(), 1u) << what << "\n" << fused.describe();
      EXPECT_EQ(fcs[0]->implementation.find("ref"), std::string::npos) << fused.describe();
      EXPECT_EQ(fused.layers.size(), 2u) << what << ": the scales' product is the layer's, the "
                                         << "bias and residual are its post-ops\n"
                                         << fused.describe();
    }
  }
}

// Attention's Q, K and V projections read one DynamicQuantizeLinear (ORT
// quantizes a tensor once for all its readers): three int8 layers, each bit
// for bit its own loop's.
TEST(OnnxDynamicQuantized, OneDynamicQuantizeFeedsThreeProjections) {
  const std::int64_t m = 16, k = 64, n = 32;
  const std::vector<std::string> names{"query", "key", "value"};
  Model md(13);
  md.input("x", kFloat, {1, m, k});
  md.node("DynamicQuantizeLinear", {"x"}, {"xq", "xs", "xzp"}, "x_QuantizeLinear");
  md.initializer("W_zero_point", kInt8, {}, std::vector<std::int8_t>{0});
  std::vector<DynamicLayer> layers;
  for (std::size_t p = 0; p < names.size(); ++p) {
    DynamicLayer d;
    d.m = m;
    d.k = k;
    d.n = n;
    d.sequence_dim = true;
    d.per_column = p == 1;
    d.seed = 60 + static_cast<unsigned>(p);
    const std::string& t = names[p];
    const std::vector<int> w = d.weights();
    md.initializer(t + "_W", kInt8, {k, n}, std::vector<std::int8_t>(w.begin(), w.end()));
    md.initializer(t + "_W_scale", kFloat, d.per_column ? Dims{n} : Dims{}, d.weight_scales());
    md.initializer(t + "_B", kFloat, {n}, d.bias());
    md.node("MatMulInteger", {"xq", t + "_W", "xzp", "W_zero_point"}, {t + "_acc"},
            t + "_MatMulInteger");
    attr(md.node("Cast", {t + "_acc"}, {t + "_acc_f"}, t + "_cast"), "to", std::int64_t{kFloat});
    md.node("Mul", {"xs", t + "_W_scale"}, {t + "_multiplier"}, t + "_scales_mul");
    md.node("Mul", {t + "_acc_f", t + "_multiplier"}, {t + "_scaled"}, t + "_mul");
    md.node("Add", {t + "_scaled", t + "_B"}, {t}, t + "_add");
    md.output(t, kFloat);
    layers.push_back(d);
  }
  const graph::Graph g = import_bytes(md.bytes());
  EXPECT_EQ(count_nodes(g, graph::OpKind::DynamicQuantize), 1u);
  const std::vector<float> xv = layers[0].input(Inputs::mixed);
  const std::map<std::string, Tensor> feed{{"x", Tensor::from_vector<float>({1, m, k}, xv)}};
  for (bool fuse : {false, true}) {
    const Result r = run_model(g, fuse, feed, names);
    for (std::size_t p = 0; p < names.size(); ++p) {
      expect_matches_loop(layers[p], xv, r.out(names[p]),
                          names[p] + (fuse ? " fused" : " unfused"));
    }
    if (!fuse) continue;
    EXPECT_EQ(r.layers_of("QuantizedFullyConnected").size(), 3u) << r.describe();
    EXPECT_EQ(r.layers_of("DynamicQuantize").size(), 1u) << r.describe();
    EXPECT_EQ(r.quantized_layers(), 3u) << r.describe();
  }
}

// A negative: no int8 layer in the fused model, both paths compute what the
// loop does, and fuse_dynamic_quantized_layer refused the layer for
// `reason`.
void expect_not_fused(const DynamicLayer& d, const std::string& reason) {
  const graph::Graph g = import_bytes(d.model());
  const std::vector<float> xv = d.input(Inputs::mixed);
  const std::map<std::string, Tensor> feed = d.feed(xv);
  for (bool fuse : {false, true}) {
    const Result r = run_model(g, fuse, feed, {"y"});
    expect_matches_loop(d, xv, r.out("y"), fuse ? "fused" : "unfused");
    if (!fuse) continue;
    EXPECT_EQ(r.quantized_layers(), 0u) << r.describe();
    EXPECT_EQ(r.layers_of("FullyConnected").size(), 1u) << r.describe();
    EXPECT_THAT(r.refusal_text("fuse_dynamic_quantized_layer"), HasSubstr(reason)) << r.describe();
  }
}

TEST(OnnxDynamicQuantizedNegative, NotFusedWhenWeightsAreU8WithANonZeroZeroPoint) {
  // quantize_dynamic(weight_type=QUInt8): asymmetric u8 weights.
  DynamicLayer d;
  d.u8_weights = true;
  d.weight_zero_point = 131;
  expect_not_fused(d, "the weights are not s8 constants with a zero point of 0");
}

TEST(OnnxDynamicQuantizedNegative, NotFusedWhenS8WeightsHaveANonZeroZeroPoint) {
  DynamicLayer d;
  d.weight_zero_point = -3;
  d.per_column = true;
  expect_not_fused(d, "the weights are not s8 constants with a zero point of 0");
}

TEST(OnnxDynamicQuantizedNegative, NotFusedWhenTheScaleIsAConstant) {
  // Cast -> Mul(W_scale) without the run-time xs: not MatMulInteger's integer
  // times a run-time scale. The layer stays f32, and fold_scale_into_layer
  // takes W_scale into its f32 weights: exact for power-of-two scales (the
  // result is then the loop's bit for bit), else the f32 sum of rounded
  // products, within (k + 3) u sum_k |(x - z) w ws| + 2 u |y| of the loop
  // (u = 2^-24; the standard bound of a k-term sum, the products, the bias).
  for (const bool power_of_two : {true, false}) {
    for (const bool per_column : {false, true}) {
      DynamicLayer d;
      d.constant_scale = true;
      d.power_of_two_scales = power_of_two;
      d.per_column = per_column;
      const std::string what = std::string(power_of_two ? "power-of-two" : "any") +
                               (per_column ? " per column" : " per tensor");
      const graph::Graph g = import_bytes(d.model());
      const std::vector<float> xv = d.input(Inputs::mixed);
      const std::map<std::string, Tensor> feed = d.feed(xv);
      const Result unfused = run_model(g, false, feed, {"y"});
      expect_matches_loop(d, xv, unfused.out("y"), what + " unfused");
      const Result fused = run_model(g, true, feed, {"y"});
      EXPECT_EQ(fused.quantized_layers(), 0u) << fused.describe();
      EXPECT_THAT(fused.refusal_text("fuse_dynamic_quantized_layer"),
                  HasSubstr("not a run-time f32 value"))
          << fused.describe();
      if (power_of_two) {
        expect_matches_loop(d, xv, fused.out("y"), what + " fused");
        continue;
      }
      const OrtDynamicQuantized q = ort_dynamic_quantize(xv);
      const std::vector<int> w = d.weights();
      const std::vector<float> ws = d.weight_scales(), pre = d.pre_activation(xv);
      const double u = std::ldexp(1.0, -24);
      for (std::int64_t r = 0; r < d.m; ++r) {
        for (std::int64_t c = 0; c < d.n; ++c) {
          double terms = 0.0;
          for (std::int64_t i = 0; i < d.k; ++i) {
            terms += std::abs(static_cast<double>(q.codes[sz(r * d.k + i)] - q.zero_point) *
                              w[sz(i * d.n + c)] * ws[per_column ? sz(c) : 0]);
          }
          const float e = pre[sz(r * d.n + c)];
          const double bound = static_cast<double>(d.k + 3) * u * terms + 2.0 * u * std::abs(e);
          EXPECT_NEAR(fused.out("y").data<float>()[sz(r * d.n + c)], e, bound)
              << what << " fused row " << r << " column " << c;
        }
      }
    }
  }
}

TEST(OnnxDynamicQuantizedNegative, NotFusedWhenTheAccumulatorHasAnotherReader) {
  DynamicLayer d;
  d.accumulator_is_output = true;
  const graph::Graph g = import_bytes(d.model());
  const std::vector<float> xv = d.input(Inputs::mixed);
  const std::map<std::string, Tensor> feed = d.feed(xv);
  const std::vector<std::int32_t> acc = d.accumulators(ort_dynamic_quantize(xv));
  for (bool fuse : {false, true}) {
    const Result r = run_model(g, fuse, feed, {"y", "acc_f"});
    expect_matches_loop(d, xv, r.out("y"), fuse ? "fused" : "unfused");
    const Tensor& a = r.out("acc_f");
    ASSERT_EQ(a.size(), static_cast<std::int64_t>(acc.size()));
    for (std::size_t i = 0; i < acc.size(); ++i) {
      ASSERT_EQ(a.data<float>()[i], static_cast<float>(acc[i]))
          << (fuse ? "fused " : "unfused ") << i;
    }
    if (!fuse) continue;
    EXPECT_EQ(r.quantized_layers(), 0u) << r.describe();
    EXPECT_THAT(r.refusal_text("fuse_dynamic_quantized_layer"),
                HasSubstr("not multiplied by a run-time scale alone"))
        << r.describe();
  }
}

// MatMulInteger's a_zero_point may be one value per row of A when it is an
// initializer; at run time the importer takes a single value only.
TEST(OnnxDynamicQuantizedErrors, RunTimeZeroPointWithSeveralValuesNamesTheNode) {
  const std::int64_t m = 4, k = 16, n = 8;
  Model md(13);
  md.input("xq", kUint8, {m, k});
  md.input("xzp", kUint8, {m});
  md.initializer("W", kInt8, {k, n}, random_ints<std::int8_t>(sz(k * n), -127, 127, 5));
  md.node("MatMulInteger", {"xq", "W", "xzp"}, {"acc"}, "per_row_zero_point");
  md.output("acc", kInt32);
  try {
    import_bytes(md.bytes());
    ADD_FAILURE() << "imported a run-time a_zero_point of " << m << " values";
  } catch (const GraphError& e) {
    EXPECT_THAT(e.what(), HasSubstr("MatMulInteger node 'per_row_zero_point'"));
    EXPECT_THAT(e.what(), HasSubstr("a_zero_point"));
    EXPECT_THAT(e.what(), HasSubstr("[4]"));
  }
}

// ORT's quantize_dynamic quantizes both inputs of a MatMul (MatMulInteger's
// quantize_inputs(node, [0, 1])) unless MatMulConstBOnly is set: attention's
// activation-by-activation products then read two DynamicQuantizeLinear
// outputs, b_zero_point included. Either path must compute MatMulInteger's
// integer times as * bs exactly (every partial sum is an integer below 2^24).
TEST(OnnxDynamicQuantized, BothOperandsQuantizedAtRunTimeMatchTheLoop) {
  const std::int64_t m = 16, k = 32, n = 24;
  Model md(13);
  md.input("a", kFloat, {m, k});
  md.input("b", kFloat, {k, n});
  md.node("DynamicQuantizeLinear", {"a"}, {"a_q", "a_scale", "a_zero_point"}, "a_QuantizeLinear");
  md.node("DynamicQuantizeLinear", {"b"}, {"b_q", "b_scale", "b_zero_point"}, "b_QuantizeLinear");
  md.node("MatMulInteger", {"a_q", "b_q", "a_zero_point", "b_zero_point"}, {"acc"}, "scores");
  attr(md.node("Cast", {"acc"}, {"acc_f"}, "scores_cast"), "to", std::int64_t{kFloat});
  md.node("Mul", {"a_scale", "b_scale"}, {"multiplier"}, "scores_scales_mul");
  md.node("Mul", {"acc_f", "multiplier"}, {"y"}, "scores_output_scale_mul");
  md.output("y", kFloat);
  const std::vector<float> av = random_floats(sz(m * k), -1.5f, 2.0f, 51);
  const std::vector<float> bv = random_floats(sz(k * n), -2.0f, 1.0f, 52);
  const OrtDynamicQuantized qa = ort_dynamic_quantize(av), qb = ort_dynamic_quantize(bv);
  const graph::Graph g = import_bytes(md.bytes());
  const std::map<std::string, Tensor> feed{{"a", Tensor::from_vector<float>({m, k}, av)},
                                           {"b", Tensor::from_vector<float>({k, n}, bv)}};
  for (bool fuse : {false, true}) {
    const Result r = run_model(g, fuse, feed, {"y"});
    const Tensor& y = r.out("y");
    ASSERT_EQ(y.shape(), (Shape{m, n}));
    for (std::int64_t i = 0; i < m; ++i) {
      for (std::int64_t j = 0; j < n; ++j) {
        std::int32_t acc = 0;
        for (std::int64_t t = 0; t < k; ++t) {
          acc +=
              (qa.codes[sz(i * k + t)] - qa.zero_point) * (qb.codes[sz(t * n + j)] - qb.zero_point);
        }
        const float e = static_cast<float>(acc) * (qa.scale * qb.scale);
        ASSERT_TRUE(same_bits(y.data<float>()[sz(i * n + j)], e))
            << (fuse ? "fused" : "unfused") << " row " << i << " column " << j << ": "
            << y.data<float>()[sz(i * n + j)] << " (expected " << e << ")";
      }
    }
  }
}

// =============================================================================
// B. Attention's activation-by-activation MatMuls in static QDQ
// =============================================================================

// A per-tensor (or per-axis, for a negative) ONNX grid.
struct Grid {
  int type = kUint8;
  std::vector<float> scale{0.01f};
  std::vector<int> zero_point{128};
  std::int64_t axis = -1;  // per axis when scale has several values

  int lo() const { return type == kUint8 ? 0 : -128; }
  int hi() const { return type == kUint8 ? 255 : 127; }
  float s(std::size_t c) const { return scale[scale.size() > 1 ? c : 0]; }
  int z(std::size_t c) const { return zero_point[zero_point.size() > 1 ? c : 0]; }

  // QuantizeLinear -> DequantizeLinear of `x` into `y`, named `tag`.
  void qdq(Model& m, const std::string& x, const std::string& y, const std::string& tag) const {
    const Dims dims = scale.size() > 1 ? Dims{static_cast<std::int64_t>(scale.size())} : Dims{};
    m.initializer(tag + "_scale", kFloat, dims, scale);
    if (type == kUint8) {
      m.initializer(tag + "_zero_point", kUint8, dims,
                    std::vector<std::uint8_t>(zero_point.begin(), zero_point.end()));
    } else {
      m.initializer(tag + "_zero_point", kInt8, dims,
                    std::vector<std::int8_t>(zero_point.begin(), zero_point.end()));
    }
    auto& q = m.node("QuantizeLinear", {x, tag + "_scale", tag + "_zero_point"}, {y + "_q"},
                     tag + "_QuantizeLinear");
    auto& dq = m.node("DequantizeLinear", {y + "_q", tag + "_scale", tag + "_zero_point"}, {y},
                      tag + "_DequantizeLinear");
    if (axis >= 0) {
      attr(q, "axis", axis);
      attr(dq, "axis", axis);
    }
  }
};

enum class BLayout {
  hdn,               // b [1, H, D, N], quantized as it is
  transposed,        // k [1, H, N, D] -> Q -> DQ -> Transpose(0, 1, 3, 2)
  transposed_first,  // k [1, H, N, D] -> Transpose(0, 1, 3, 2) -> Q -> DQ
  heads_broadcast,   // b [1, 1, D, N], shared by every head
};

// MatMul(DQ(Q(a)), DQ(Q(b))) [* c + mask] -> Q -> DQ, as static QDQ exports
// write attention's Q x K^T (n = s) and P x V (d = s): a [1, H, S, D] times
// b [1, H, D, N] gives y [1, H, S, N]; the mask is [1, 1, 1, N].
struct AttentionMatMul {
  std::int64_t h = 4, s = 32, d = 16, n = 32;
  Grid a_grid{kUint8, {0.0085f}, {120}};
  Grid b_grid{kUint8, {0.009f}, {131}};
  Grid y_grid{kUint8, {0.03f}, {100}};
  float a_lo = -1.0f, a_hi = 1.1f;
  BLayout layout = BLayout::hdn;
  bool scale_and_mask = true;
  float c = 0.25f;          // 1 / sqrt(d)
  bool a_quantized = true;  // false: a plain f32 input
  bool b_quantized = true;
  unsigned seed = 11;

  Dims a_dims() const { return {1, h, s, d}; }
  // The graph input for the right-hand side, before any Transpose.
  Dims b_input_dims() const {
    switch (layout) {
      case BLayout::hdn: return {1, h, d, n};
      case BLayout::transposed:
      case BLayout::transposed_first: return {1, h, n, d};
      case BLayout::heads_broadcast: return {1, 1, d, n};
    }
    return {};
  }
  std::int64_t b_heads() const { return layout == BLayout::heads_broadcast ? 1 : h; }

  std::string model() const {
    Model m(13);
    m.input("a", kFloat, a_dims());
    m.input("b", kFloat, b_input_dims());
    std::string lhs = "a", rhs = "b";
    if (a_quantized) {
      a_grid.qdq(m, "a", "a_dq", "a");
      lhs = "a_dq";
    }
    if (layout == BLayout::transposed_first) {
      attr(m.node("Transpose", {"b"}, {"b_t"}, "k_Transpose"), "perm", Dims{0, 1, 3, 2});
      rhs = "b_t";
    }
    if (b_quantized) {
      b_grid.qdq(m, rhs, "b_dq", "b");
      rhs = "b_dq";
    }
    if (layout == BLayout::transposed) {
      attr(m.node("Transpose", {rhs}, {"b_t"}, "k_Transpose"), "perm", Dims{0, 1, 3, 2});
      rhs = "b_t";
    }
    std::string y = "scores";
    m.node("MatMul", {lhs, rhs}, {y}, "attention_MatMul");
    if (scale_and_mask) {
      m.input("mask", kFloat, {1, 1, 1, n});
      m.initializer("c", kFloat, {}, std::vector<float>{c});
      m.node("Mul", {y, "c"}, {"scaled"}, "attention_Mul");
      m.node("Add", {"scaled", "mask"}, {"masked"}, "attention_Add");
      y = "masked";
    }
    y_grid.qdq(m, y, "y", "y");
    m.output("y", kFloat);
    return m.bytes();
  }

  std::map<std::string, Tensor> inputs() const {
    std::map<std::string, Tensor> in;
    in.emplace(
        "a", Tensor::from_vector<float>(a_dims(), random_floats(sz(h * s * d), a_lo, a_hi, seed)));
    in.emplace("b",
               Tensor::from_vector<float>(
                   b_input_dims(), random_floats(sz(b_heads() * d * n), -1.15f, 1.1f, seed + 1)));
    if (scale_and_mask) {
      std::vector<float> mask = random_floats(sz(n), -1.0f, 0.0f, seed + 2);
      mask[sz(n - 1)] = -10000.0f;  // a masked position: saturates to the lowest code
      mask[0] = 0.0f;
      in.emplace("mask", Tensor::from_vector<float>({1, 1, 1, n}, mask));
    }
    return in;
  }

  // One operand element as the product sees it: (q - z) of ONNX's
  // QuantizeLinear, with its scale, or the f32 value with scale 1.
  static double operand(float x, bool quantized, const Grid& grid, std::size_t channel,
                        double& scale) {
    if (!quantized) {
      scale = 1.0;
      return x;
    }
    scale = grid.s(channel);
    return onnx_quantize(x, grid.s(channel), grid.z(channel), grid.lo(), grid.hi()) -
           grid.z(channel);
  }

  // The output's codes by a naive loop: the integer product of (q - z), its
  // scales in double, then c and the mask, and the output's QuantizeLinear.
  std::vector<int> expected_codes(const std::map<std::string, Tensor>& in) const {
    const auto av = in.at("a").data<float>();
    const auto bv = in.at("b").data<float>();
    const bool transposed = layout == BLayout::transposed || layout == BLayout::transposed_first;
    std::vector<int> codes(sz(h * s * n));
    for (std::int64_t hh = 0; hh < h; ++hh) {
      const std::int64_t bh = layout == BLayout::heads_broadcast ? 0 : hh;
      const std::size_t a_channel = sz(a_grid.axis == 1 ? hh : 0);
      const std::size_t b_channel = sz(b_grid.axis == 1 ? bh : 0);
      for (std::int64_t i = 0; i < s; ++i) {
        for (std::int64_t j = 0; j < n; ++j) {
          double acc = 0.0, sa = 1.0, sb = 1.0;
          for (std::int64_t k = 0; k < d; ++k) {
            const float x = av[sz((hh * s + i) * d + k)];
            const float w =
                transposed ? bv[sz((bh * n + j) * d + k)] : bv[sz((bh * d + k) * n + j)];
            acc += operand(x, a_quantized, a_grid, a_channel, sa) *
                   operand(w, b_quantized, b_grid, b_channel, sb);
          }
          double v = acc * sa * sb;
          if (scale_and_mask) v = v * c + in.at("mask").data<float>()[sz(j)];
          const double q = std::nearbyint(v / y_grid.s(0)) + y_grid.z(0);
          codes[sz((hh * s + i) * n + j)] =
              static_cast<int>(std::clamp<double>(q, y_grid.lo(), y_grid.hi()));
        }
      }
    }
    return codes;
  }

  // The output's codes read back from its dequantized values.
  std::vector<int> codes_of(const Tensor& y) const {
    std::vector<int> codes(sz(y.size()));
    for (std::size_t i = 0; i < codes.size(); ++i) {
      codes[i] = static_cast<int>(std::nearbyint(y.data<float>()[i] / y_grid.s(0))) + y_grid.z(0);
    }
    return codes;
  }
};

// `got` within one code of `expected` everywhere, and equal on at least
// `min_equal` of the elements.
void expect_codes_near(const std::vector<int>& got, const std::vector<int>& expected,
                       double min_equal, const std::string& what) {
  ASSERT_EQ(got.size(), expected.size()) << what;
  std::size_t equal = 0, far = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const int diff = std::abs(got[i] - expected[i]);
    equal += diff == 0;
    if (diff > 1 && ++far <= 5) {
      ADD_FAILURE() << what << ": element " << i << " has code " << got[i] << " (expected "
                    << expected[i] << ")";
    }
  }
  EXPECT_EQ(far, 0u) << what << ": elements more than one code off";
  EXPECT_GE(static_cast<double>(equal), min_equal * static_cast<double>(got.size()))
      << what << ": " << equal << " of " << got.size() << " codes equal";
}

// Fused: one int8 QuantizedMatMul (oneDNN's own kernel, not a reference
// one) with c in its output scale and the mask a per-channel binary add read
// at run time; fused and unfused codes within one code of the loop (99.9%
// equal) and of each other.
void expect_int8_attention_matmul(const AttentionMatMul& at, const std::string& what) {
  const graph::Graph g = import_bytes(at.model());
  const auto in = at.inputs();
  const std::vector<int> expected = at.expected_codes(in);
  // The loop's codes span the grid, the masked column included.
  const auto [lo, hi] = std::minmax_element(expected.begin(), expected.end());
  EXPECT_GT(*hi - *lo, 60) << what << ": the test's codes barely vary";
  const Result unfused = run_model(g, false, in, {"y"});
  const Result fused = run_model(g, true, in, {"y"});
  ASSERT_EQ(fused.out("y").shape(), (Shape{1, at.h, at.s, at.n})) << what;
  const std::vector<int> u = at.codes_of(unfused.out("y")), f = at.codes_of(fused.out("y"));
  expect_codes_near(u, expected, 0.999, what + " unfused vs loop");
  expect_codes_near(f, expected, 0.999, what + " fused vs loop");
  expect_codes_near(f, u, 0.999, what + " fused vs unfused");

  const auto mms = fused.layers_of("QuantizedMatMul");
  ASSERT_EQ(mms.size(), 1u) << what << "\n" << fused.describe();
  EXPECT_EQ(mms[0]->precision, "int8") << what << "\n" << fused.describe();
  EXPECT_EQ(mms[0]->implementation.find("ref"), std::string::npos) << what << "\n"
                                                                   << fused.describe();
  EXPECT_FALSE(mms[0]->scalar_fallback) << what << "\n" << fused.describe();
  EXPECT_TRUE(fused.layers_of("MatMul").empty()) << what << "\n" << fused.describe();
  // Only the two Quantizes (and a Transpose of codes) beside it.
  for (const LayerInfo& l : fused.layers) {
    EXPECT_TRUE(l.op == "QuantizedMatMul" || l.op == "Quantize" || l.op == "Transpose")
        << what << ": " << l.node << " (" << l.op << ") runs beside the int8 layer\n"
        << fused.describe();
    if (l.op == "Transpose") {
      EXPECT_EQ(l.precision, "int8") << what << "\n" << fused.describe();
    }
  }
  if (!at.scale_and_mask) return;
  bool mask = false;
  for (const PostOp& p : mms[0]->post_op_list) {
    mask = mask || (p.kind == PostOp::Kind::binary && p.algorithm == "add" && p.operand == "mask" &&
                    p.per_channel);
  }
  EXPECT_TRUE(mask) << what << "\n" << fused.describe();
}

TEST(OnnxAttentionMatMul, U8TimesU8IsOneInt8MatMulWithinOneCode) {
  AttentionMatMul at;  // b u8 with zero point 131: shifted to s8 each run
  expect_int8_attention_matmul(at, "u8 x u8");
  at.scale_and_mask = false;
  at.y_grid = {kUint8, {0.1f}, {100}};
  expect_int8_attention_matmul(at, "u8 x u8, no scale or mask");
}

TEST(OnnxAttentionMatMul, U8TimesS8WithZeroPoint0IsOneInt8MatMulWithinOneCode) {
  AttentionMatMul at;
  at.b_grid = {kInt8, {0.009f}, {0}};
  expect_int8_attention_matmul(at, "u8 x s8");
}

TEST(OnnxAttentionMatMul, S8TimesS8WithZeroPoints0IsOneInt8MatMulWithinOneCode) {
  AttentionMatMul at;
  at.a_grid = {kInt8, {0.0085f}, {0}};
  at.b_grid = {kInt8, {0.009f}, {0}};
  at.y_grid = {kInt8, {0.03f}, {0}};
  expect_int8_attention_matmul(at, "s8 x s8");
}

TEST(OnnxAttentionMatMul, U8WeightsWithZeroPoint128AndOddShapes) {
  // z = 128 shifts to a weights zero point of 0; no dim a multiple of 16.
  AttentionMatMul at;
  at.b_grid = {kUint8, {0.009f}, {128}};
  at.h = 3;
  at.s = 23;
  at.d = 24;
  at.n = 23;
  at.seed = 21;
  expect_int8_attention_matmul(at, "u8 x u8 z 128");
}

TEST(OnnxAttentionMatMul, ProbabilitiesTimesValues) {
  // P x V: softmax probabilities on a u8 grid of 1/255 with zero point 0,
  // times V [1, H, S, D]; the output is the next layer's input grid.
  AttentionMatMul at;
  at.d = 32;  // the sequence, summed over
  at.n = 16;  // the head size
  at.a_grid = {kUint8, {1.0f / 255.0f}, {0}};
  at.a_lo = 0.0f;
  at.a_hi = 0.3f;
  at.scale_and_mask = false;
  at.y_grid = {kUint8, {0.02f}, {128}};
  expect_int8_attention_matmul(at, "P x V");
}

TEST(OnnxAttentionMatMul, KeyTransposedAfterItsDequantizeMovesOntoTheCodes) {
  AttentionMatMul at;
  at.layout = BLayout::transposed;
  expect_int8_attention_matmul(at, "Q -> DQ -> Transpose");
}

TEST(OnnxAttentionMatMul, KeyTransposedBeforeItsQuantize) {
  AttentionMatMul at;
  at.layout = BLayout::transposed_first;
  expect_int8_attention_matmul(at, "Transpose -> Q -> DQ");
}

TEST(OnnxAttentionMatMul, RightHandSideBroadcastOverHeads) {
  AttentionMatMul at;
  at.layout = BLayout::heads_broadcast;
  expect_int8_attention_matmul(at, "[1, H, S, D] x [1, 1, D, S]");
}

TEST(OnnxAttentionMatMul, SeveralSeedsWithHeadSize64) {
  for (unsigned seed : {31u, 32u, 33u}) {
    AttentionMatMul at;
    at.seed = seed;
    at.d = 64;
    at.c = 0.125f;
    expect_int8_attention_matmul(at, "seed " + std::to_string(seed));
  }
}

// Zero points at and near the types' limits: u8 weights with zero point 0
// (-128 once shifted to s8) or 255, s8 operands with non-zero zero points.
TEST(OnnxAttentionMatMul, ZeroPointsAtTheTypeLimits) {
  struct Case {
    const char* what;
    Grid a, b;
  };
  const Grid a_u8{kUint8, {0.0085f}, {120}};
  const std::vector<Case> cases{
      {"b u8 zero point 0", a_u8, {kUint8, {0.005f}, {0}}},
      {"b u8 zero point 255", a_u8, {kUint8, {0.005f}, {255}}},
      {"a s8 zero point -5", {kInt8, {0.0085f}, {-5}}, {kUint8, {0.009f}, {131}}},
      {"a u8 zero point 0, b s8 zero point 7", {kUint8, {0.0085f}, {0}}, {kInt8, {0.0085f}, {7}}},
  };
  for (const Case& c : cases) {
    AttentionMatMul at;
    at.a_grid = c.a;
    at.b_grid = c.b;
    expect_int8_attention_matmul(at, c.what);
  }
}

// A whole static-QDQ attention block in PyTorch's layout: q, k, v [1, S, H,
// D] quantized, then transposed heads first (k to [1, H, D, S]); scores * c +
// mask quantized, Softmax onto 1/255, P x V quantized, then transposed back
// to [1, S, H, D]. `heads_first` writes the same block on inputs the test
// transposed already, without a Transpose.
struct AttentionBlock {
  std::int64_t s = 24, h = 4, d = 16;
  bool heads_first = false;
  Grid q_grid{kUint8, {0.0085f}, {120}}, k_grid{kUint8, {0.009f}, {131}},
      v_grid{kUint8, {0.008f}, {126}}, scores_grid{kUint8, {0.03f}, {200}},
      p_grid{kUint8, {1.0f / 255.0f}, {0}}, y_grid{kUint8, {0.01f}, {128}};

  Dims sequence_first() const { return {1, s, h, d}; }
  Dims input_dims(const std::string& name) const {
    if (!heads_first) return sequence_first();
    return name == "k" ? Dims{1, h, d, s} : Dims{1, h, s, d};
  }

  std::string model() const {
    Model m(13);
    const auto transpose = [&m](const std::string& x, const std::string& y, Dims perm) {
      attr(m.node("Transpose", {x}, {y}, y + "_Transpose"), "perm", std::move(perm));
    };
    for (const char* name : {"q", "k", "v"}) m.input(name, kFloat, input_dims(name));
    m.input("mask", kFloat, {1, 1, 1, s});
    q_grid.qdq(m, "q", "q_dq", "q");
    k_grid.qdq(m, "k", "k_dq", "k");
    v_grid.qdq(m, "v", "v_dq", "v");
    std::string q = "q_dq", k = "k_dq", v = "v_dq";
    if (!heads_first) {
      transpose(q, "q_t", {0, 2, 1, 3});
      transpose(k, "k_t", {0, 2, 3, 1});
      transpose(v, "v_t", {0, 2, 1, 3});
      q = "q_t", k = "k_t", v = "v_t";
    }
    m.node("MatMul", {q, k}, {"scores"}, "scores_MatMul");
    m.initializer("c", kFloat, {}, std::vector<float>{0.25f});
    m.node("Mul", {"scores", "c"}, {"scaled"}, "scores_Mul");
    m.node("Add", {"scaled", "mask"}, {"masked"}, "scores_Add");
    scores_grid.qdq(m, "masked", "masked_dq", "scores");
    attr(m.node("Softmax", {"masked_dq"}, {"p"}, "p_Softmax"), "axis", std::int64_t{3});
    p_grid.qdq(m, "p", "p_dq", "p");
    m.node("MatMul", {"p_dq", v}, {"context"}, "context_MatMul");
    y_grid.qdq(m, "context", heads_first ? "y" : "context_dq", "y");
    if (!heads_first) transpose("context_dq", "y", {0, 2, 1, 3});
    m.output("y", kFloat);
    return m.bytes();
  }

  // Random q, k, v in PyTorch's layout and a mask with one masked key.
  std::map<std::string, Tensor> inputs() const {
    std::map<std::string, Tensor> in;
    unsigned seed = 41;
    for (const char* name : {"q", "k", "v"}) {
      in.emplace(name, Tensor::from_vector<float>(sequence_first(),
                                                  random_floats(sz(s * h * d), -1.0f, 1.1f, seed++)));
    }
    std::vector<float> mask = random_floats(sz(s), -1.0f, 0.0f, seed);
    mask[sz(s - 1)] = -10000.0f;
    in.emplace("mask", Tensor::from_vector<float>({1, 1, 1, s}, mask));
    return in;
  }
};

// `x` [d0, d1, d2, d3] as Transpose(x, perm) writes it, by loops.
Tensor transposed(const Tensor& x, const Dims& perm) {
  const Shape& in = x.shape();
  Shape out(4);
  for (std::size_t i = 0; i < 4; ++i) out[i] = in[sz(perm[i])];
  std::vector<float> y(sz(x.size()));
  std::array<std::int64_t, 4> at{};
  for (at[0] = 0; at[0] < out[0]; ++at[0]) {
    for (at[1] = 0; at[1] < out[1]; ++at[1]) {
      for (at[2] = 0; at[2] < out[2]; ++at[2]) {
        for (at[3] = 0; at[3] < out[3]; ++at[3]) {
          std::array<std::int64_t, 4> src{};
          for (std::size_t i = 0; i < 4; ++i) src[sz(perm[i])] = at[i];
          const std::int64_t from = ((src[0] * in[1] + src[1]) * in[2] + src[2]) * in[3] + src[3];
          const std::int64_t to = ((at[0] * out[1] + at[1]) * out[2] + at[2]) * out[3] + at[3];
          y[sz(to)] = x.data<float>()[sz(from)];
        }
      }
    }
  }
  return Tensor::from_vector<float>(out, y);
}

// The int8 attention MatMuls take the four Transposes around them (read and
// written by strides): no Transpose runs, and the output is bit for bit the
// one of the same block on inputs transposed beforehand, and within one code
// of the unfused arithmetic.
TEST(OnnxAttentionMatMul, PyTorchLayoutIsReadAndWrittenByStrides) {
  AttentionBlock block;
  const graph::Graph g = import_bytes(block.model());
  const auto in = block.inputs();
  const Result fused = run_model(g, true, in, {"y"});
  const Result unfused = run_model(g, false, in, {"y"});
  const auto mms = fused.layers_of("QuantizedMatMul");
  EXPECT_EQ(mms.size(), 2u) << fused.describe();
  for (const LayerInfo* mm : mms) {
    EXPECT_EQ(mm->implementation.find("ref"), std::string::npos) << fused.describe();
  }
  EXPECT_TRUE(fused.layers_of("Transpose").empty()) << fused.describe();
  std::size_t absorbed = 0;
  for (const std::string& line : fused.log) absorbed += line.find("absorb_matmul_transposes") == 0;
  EXPECT_EQ(absorbed, 2u) << fused.describe();

  block.heads_first = true;
  const graph::Graph g2 = import_bytes(block.model());
  std::map<std::string, Tensor> in2{{"mask", in.at("mask")},
                                    {"q", transposed(in.at("q"), {0, 2, 1, 3})},
                                    {"k", transposed(in.at("k"), {0, 2, 3, 1})},
                                    {"v", transposed(in.at("v"), {0, 2, 1, 3})}};
  const Result plain = run_model(g2, true, in2, {"y"});
  EXPECT_TRUE(plain.layers_of("Transpose").empty()) << plain.describe();
  const Tensor expected = transposed(plain.out("y"), {0, 2, 1, 3});
  ASSERT_EQ(fused.out("y").shape(), expected.shape());
  std::int64_t differ = 0;
  for (std::int64_t i = 0; i < expected.size(); ++i) {
    differ += !same_bits(fused.out("y").data<float>()[sz(i)], expected.data<float>()[sz(i)]);
  }
  EXPECT_EQ(differ, 0) << fused.describe();

  const auto codes = [&](const Tensor& y) {
    std::vector<int> c(sz(y.size()));
    for (std::size_t i = 0; i < c.size(); ++i) {
      c[i] = static_cast<int>(std::nearbyint(y.data<float>()[i] / block.y_grid.s(0))) +
             block.y_grid.z(0);
    }
    return c;
  };
  const std::vector<int> f = codes(fused.out("y")), u = codes(unfused.out("y"));
  const auto [lo, hi] = std::minmax_element(f.begin(), f.end());
  EXPECT_GT(*hi - *lo, 20) << "the test's codes barely vary";
  expect_codes_near(f, u, 0.99, "fused vs unfused");
}


// A negative: no QuantizedMatMul, the MatMul an f32 layer, both paths within
// one code of the loop (the f32 sums round apart from the loop's doubles);
// the refusals of fuse_dequantize_into_layer, returned.
std::string expect_f32_attention_matmul(const AttentionMatMul& at) {
  const graph::Graph g = import_bytes(at.model());
  const auto in = at.inputs();
  const std::vector<int> expected = at.expected_codes(in);
  const Result unfused = run_model(g, false, in, {"y"});
  const Result fused = run_model(g, true, in, {"y"});
  expect_codes_near(at.codes_of(unfused.out("y")), expected, 0.999, "unfused vs loop");
  expect_codes_near(at.codes_of(fused.out("y")), expected, 0.999, "fused vs loop");
  EXPECT_EQ(fused.quantized_layers(), 0u) << fused.describe();
  const auto mms = fused.layers_of("MatMul");
  EXPECT_EQ(mms.size(), 1u) << fused.describe();
  if (mms.size() == 1) {
    EXPECT_EQ(mms[0]->precision, "f32") << fused.describe();
  }
  const std::string refused = fused.refusal_text("fuse_dequantize_into_layer");
  EXPECT_THAT(refused, HasSubstr("'attention_MatMul")) << fused.describe();
  return refused + fused.describe();
}

TEST(OnnxAttentionMatMulNegative, NotFusedWhenTheLeftSideIsNotQuantized) {
  AttentionMatMul at;
  at.a_quantized = false;
  EXPECT_THAT(expect_f32_attention_matmul(at), HasSubstr("per tensor; A is not"));
}

TEST(OnnxAttentionMatMulNegative, NotFusedWhenTheLeftSideIsQuantizedPerHead) {
  AttentionMatMul at;
  at.a_grid = {kUint8, {0.0085f, 0.009f, 0.008f, 0.01f}, {120, 125, 128, 131}, 1};
  EXPECT_THAT(expect_f32_attention_matmul(at),
              HasSubstr("both are dequantized u8/s8 tensors per tensor; A is not"));
}

TEST(OnnxAttentionMatMulNegative, NotFusedWhenTheRightSideIsNotQuantized) {
  AttentionMatMul at;
  at.b_quantized = false;
  expect_f32_attention_matmul(at);  // the reason: see RefusalBlamesTheRightSide... below
}

TEST(OnnxAttentionMatMulNegative, NotFusedWhenTheRightSideIsQuantizedPerHead) {
  AttentionMatMul at;
  at.b_grid = {kUint8, {0.009f, 0.011f, 0.008f, 0.0095f}, {131, 120, 128, 125}, 1};
  expect_f32_attention_matmul(at);  // the reason: see RefusalBlamesTheRightSide... below
}

TEST(OnnxAttentionMatMulNegative, RefusalBlamesTheRightSideWhenItIsNotQuantizedPerTensor) {
  for (const bool b_plain : {true, false}) {
    AttentionMatMul at;
    if (b_plain) {
      at.b_quantized = false;
    } else {
      at.b_grid = {kUint8, {0.009f, 0.011f, 0.008f, 0.0095f}, {131, 120, 128, 125}, 1};
    }
    const std::string refused = expect_f32_attention_matmul(at);
    EXPECT_THAT(refused, HasSubstr("B is not")) << (b_plain ? "plain f32 B" : "per-head B");
    EXPECT_THAT(refused, ::testing::Not(HasSubstr("the input is not")))
        << (b_plain ? "plain f32 B" : "per-head B");
  }
}

// When one side is per head the MatMul stays f32 whatever is split, so
// neither side's Q -> DQ should be split into a quantize and a dequantize:
// whole, each is one vectorized FakeQuantize; split, the per-head one runs
// as qfuse's scalar loop and four f32 ops follow each side.
TEST(OnnxAttentionMatMulNegative, NeitherSideIsSplitWhenOneIsPerHead) {
  for (const bool a_per_head : {true, false}) {
    AttentionMatMul at;
    const Grid per_head{kUint8, {0.009f, 0.011f, 0.008f, 0.0095f}, {131, 120, 128, 125}, 1};
    (a_per_head ? at.a_grid : at.b_grid) = per_head;
    const graph::Graph g = import_bytes(at.model());
    const Result fused = run_model(g, true, at.inputs(), {"y"});
    for (const LayerInfo& l : fused.layers) EXPECT_FALSE(l.scalar_fallback) << l.node;
    for (const std::string& line : fused.log) {
      EXPECT_EQ(line.rfind("split_fake_quantize: ", 0), std::string::npos) << line;
    }
  }
}

}  // namespace
}  // namespace qfuse::onnx
