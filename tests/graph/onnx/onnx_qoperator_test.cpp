// ONNX Runtime's QOperator format: the com.microsoft operators on 8-bit codes
// (graph/onnx/import_qoperator.cpp). Each is checked against ONNX Runtime's
// own arithmetic, written out here from its CPU kernels (x86-64, ONNX Runtime
// 1.30) as plain loops: over every input code (every pair of codes for the
// binary operators), u8 and s8, with zero points other than 0 and the type's
// middle. Unfused, qfuse computes ONNX's DequantizeLinear -> op ->
// QuantizeLinear; where the kernel rounds otherwise (a float ratio, the zero
// point added before rounding, a polynomial sigmoid) the test says how far
// apart the two may be, and checks that bound. Fused, each stays within one
// code of the reference.

#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "graph/onnx/importer.hpp"
#include "qfuse/error.hpp"
#include "tests/graph/onnx/onnx_model_builder.hpp"

namespace qfuse::onnx {
namespace {

using namespace test;  // Model, attr, run, count_nodes

constexpr const char* kMs = "com.microsoft";

// One element type's codes and the zero points the tests use.
struct Codes {
  int type;        // kUint8 or kInt8
  int lo, hi;      // the type's range
  int zp_a, zp_b;  // zero points of the inputs, neither 0 nor the middle
  int zp_y;        // the output's
};
const Codes kU8{kUint8, 0, 255, 131, 97, 119};
const Codes kS8{kInt8, -128, 127, 3, -11, -7};

std::string type_name(const Codes& c) { return c.type == kUint8 ? "u8" : "s8"; }

int saturate(long v, const Codes& c) { return static_cast<int>(std::clamp<long>(v, c.lo, c.hi)); }

// A scalar zero point of the codes' type, as an initializer.
void zero_point(Model& m, const std::string& name, const Codes& c, int zp) {
  if (c.type == kUint8) {
    m.initializer<std::uint8_t>(name, kUint8, {}, {static_cast<std::uint8_t>(zp)});
  } else {
    m.initializer<std::int8_t>(name, kInt8, {}, {static_cast<std::int8_t>(zp)});
  }
}
void scale(Model& m, const std::string& name, float s) {
  m.initializer<float>(name, kFloat, {}, {s});
}

Tensor codes_tensor(const Codes& c, const Shape& shape, const std::vector<int>& v) {
  if (c.type == kUint8) {
    std::vector<std::uint8_t> b(v.begin(), v.end());
    return Tensor::from_vector<std::uint8_t>(shape, std::move(b));
  }
  std::vector<std::int8_t> b(v.begin(), v.end());
  return Tensor::from_vector<std::int8_t>(shape, std::move(b));
}

std::vector<int> codes_of(const Tensor& t) {
  std::vector<int> v(static_cast<std::size_t>(t.size()));
  for (std::int64_t i = 0; i < t.size(); ++i) v[static_cast<std::size_t>(i)] = static_cast<int>(t.as_float(i));
  return v;
}

// The graph compiled fused or unfused, run once; output "y" as codes.
std::vector<int> run_codes(const graph::Graph& g, bool fuse,
                           const std::map<std::string, Tensor>& inputs) {
  const CompiledModel model = compile(g, {.fuse = fuse});
  InferRequest r = model.create_infer_request();
  for (const auto& [name, t] : inputs) r.set_input(name, t);
  r.infer();
  return codes_of(r.output("y"));
}

// How far qfuse's codes are from the reference's: the largest difference and
// the number of codes that differ.
struct Distance {
  int worst = 0;
  std::size_t differ = 0;
};
Distance distance(const std::vector<int>& got, const std::vector<int>& want) {
  Distance d;
  EXPECT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    d.worst = std::max(d.worst, std::abs(got[i] - want[i]));
    d.differ += got[i] != want[i];
  }
  return d;
}

class QOperator : public ::testing::TestWithParam<Codes> {};

// QLinearAdd / QLinearMul "y" of "a" and "b" (inputs or initializers the
// caller adds) with the given scales and the codes' zero points.
void qlinear_binary(Model& m, const std::string& op, const Codes& c, float sa, float sb,
                    float sc) {
  scale(m, "sa", sa);
  scale(m, "sb", sb);
  scale(m, "sc", sc);
  zero_point(m, "za", c, c.zp_a);
  zero_point(m, "zb", c, c.zp_b);
  zero_point(m, "zc", c, c.zp_y);
  m.node(op, {"a", "sa", "za", "b", "sb", "zb", "sc", "zc"}, {"y"}).set_domain(kMs);
  m.output("y", c.type);
}

// QLinearAdd / QLinearMul of every pair of codes, A[i][j] = i and
// B[i][j] = j (both run-time inputs), and the reference's codes.
struct EveryPair {
  graph::Graph graph;
  std::map<std::string, Tensor> inputs;
  std::vector<int> want;
};
template <class Reference>
EveryPair every_pair(const std::string& op, const Codes& c, float sa, float sb, float sc,
                     Reference reference) {
  Model m;
  m.opset_import(kMs, 1);
  m.input("a", c.type, {256, 256});
  m.input("b", c.type, {256, 256});
  qlinear_binary(m, op, c, sa, sb, sc);
  EveryPair p{import_bytes(m.bytes()), {}, {}};
  std::vector<int> av, bv;
  for (int i = 0; i < 256; ++i) {
    for (int j = 0; j < 256; ++j) {
      av.push_back(c.lo + i);
      bv.push_back(c.lo + j);
      p.want.push_back(reference(c.lo + i, sa, c.zp_a, c.lo + j, sb, c.zp_b, sc, c.zp_y, c));
    }
  }
  p.inputs = {{"a", codes_tensor(c, {256, 256}, av)}, {"b", codes_tensor(c, {256, 256}, bv)}};
  return p;
}

// --- QLinearAdd -------------------------------------------------------------

// ONNX Runtime's QLinearAdd on x86-64 with AVX2 (MlasQLinearAddKernelAvx2):
// ((a - za) * sa + (b - zb) * sb) / sc in f32, rounded half to even, clamped,
// plus zc: DequantizeLinear -> Add -> QuantizeLinear, operation for operation.
int ort_qlinear_add(int a, float sa, int za, int b, float sb, int zb, float sc, int zc,
                    const Codes& c) {
  const float va = static_cast<float>(a - za) * sa;
  const float vb = static_cast<float>(b - zb) * sb;
  const float v = (va + vb) / sc;
  return saturate(std::lrint(v) + zc, c);
}

// Every pair of codes: A[i][j] = i, B[i][j] = j (both run-time inputs).
TEST_P(QOperator, QLinearAddOfEveryPairOfCodesIsOnnxRuntimes) {
  const Codes c = GetParam();
  const EveryPair p = every_pair("QLinearAdd", c, 0.0371f, 0.0213f, 0.0497f, ort_qlinear_add);
  EXPECT_EQ(count_nodes(p.graph, graph::OpKind::Dequantize), 2u);
  EXPECT_EQ(count_nodes(p.graph, graph::OpKind::Add), 1u);
  EXPECT_EQ(count_nodes(p.graph, graph::OpKind::Quantize), 1u);
  const Distance unfused = distance(run_codes(p.graph, false, p.inputs), p.want);
  EXPECT_EQ(unfused.worst, 0) << unfused.differ << " codes differ";
  EXPECT_LE(distance(run_codes(p.graph, true, p.inputs), p.want).worst, 1);
}

// A constant B of one value per channel, broadcast over [1, 4, 3, 3]:
// ONNX Runtime's quantizer writes a quantized initializer so.
TEST_P(QOperator, QLinearAddBroadcastsAConstantOperand) {
  const Codes c = GetParam();
  const float sa = 0.05f, sb = 0.02f, sc = 0.06f;
  Model m;
  m.opset_import(kMs, 1);
  m.input("a", c.type, {1, 4, 3, 3});
  if (c.type == kUint8) {
    m.initializer<std::uint8_t>("b", kUint8, {1, 4, 1, 1}, {0, 90, 200, 255});
  } else {
    m.initializer<std::int8_t>("b", kInt8, {1, 4, 1, 1}, {-128, -30, 70, 127});
  }
  qlinear_binary(m, "QLinearAdd", c, sa, sb, sc);
  const graph::Graph g = import_bytes(m.bytes());
  const int bvals[2][4] = {{0, 90, 200, 255}, {-128, -30, 70, 127}};
  std::vector<int> av, want;
  for (int i = 0; i < 36; ++i) {
    const int a = c.lo + (i * 37) % 256;
    av.push_back(a);
    const int b = bvals[c.type == kUint8 ? 0 : 1][i / 9];
    want.push_back(ort_qlinear_add(a, sa, c.zp_a, b, sb, c.zp_b, sc, c.zp_y, c));
  }
  const std::map<std::string, Tensor> in{{"a", codes_tensor(c, {1, 4, 3, 3}, av)}};
  EXPECT_EQ(distance(run_codes(g, false, in), want).worst, 0);
  EXPECT_LE(distance(run_codes(g, true, in), want).worst, 1);
}

// --- QLinearMul -------------------------------------------------------------

// ONNX Runtime's QLinearMul on x86-64 (qlmul.cpp's SSE2 kernel): the integer
// product (a - za)(b - zb), times the f32 ratio fl(fl(sa * sb) / sc), plus zc
// in f32, rounded half to even and saturated. ONNX's Dequantize -> Mul ->
// Quantize rounds the products and the division differently, so a value
// within f32 noise of a tie can round the other way; and adding zc before
// rounding moves exact ties (x.5) when zc is odd. Within one code.
int ort_qlinear_mul(int a, float sa, int za, int b, float sb, int zb, float sc, int zc,
                    const Codes& c) {
  const float ratio = (sa * sb) / sc;
  const float v = static_cast<float>((a - za) * (b - zb)) * ratio + static_cast<float>(zc);
  return saturate(std::lrint(v), c);
}

TEST_P(QOperator, QLinearMulOfEveryPairOfCodesIsWithinOneCodeOfOnnxRuntimes) {
  const Codes c = GetParam();
  const EveryPair p = every_pair("QLinearMul", c, 0.0371f, 0.0213f, 0.0097f, ort_qlinear_mul);
  EXPECT_EQ(count_nodes(p.graph, graph::OpKind::Multiply), 1u);
  const Distance unfused = distance(run_codes(p.graph, false, p.inputs), p.want);
  EXPECT_LE(unfused.worst, 1);
  EXPECT_LE(unfused.differ, p.want.size() / 100) << "more than 1% of the products differ";
  std::cout << "  QLinearMul " << type_name(c) << ": unfused differs from ONNX Runtime on "
            << unfused.differ << " of " << p.want.size() << " pairs\n";
  EXPECT_LE(distance(run_codes(p.graph, true, p.inputs), p.want).worst, 1);
}

// --- QLinearSigmoid / QLinearLeakyRelu ---------------------------------------

// ONNX Runtime's MlasComputeLogistic on x86-64 (LogisticKernelFma3): Eigen's
// rational approximation on x clamped to [-18, 18], with fused multiply-adds.
float ort_logistic(float x) {
  const float v = std::clamp(x, -18.0f, 18.0f);
  const float v2 = v * v;
  float p = std::fma(v2, 4.37031012579801e-11f, 1.15627324459942e-07f);
  p = std::fma(p, v2, 6.08574864600143e-05f);
  p = std::fma(p, v2, 8.51377133304701e-03f);
  p = std::fma(p, v2, 2.48287947061529e-01f);
  p = p * v;
  float q = std::fma(v2, 6.10247389755681e-13f, 5.76102136993427e-09f);
  q = std::fma(q, v2, 6.29106785017040e-06f);
  q = std::fma(q, v2, 1.70198817374094e-03f);
  q = std::fma(q, v2, 1.16817656904453e-01f);
  q = std::fma(q, v2, 9.93151921023180e-01f);
  return std::clamp(p / q + 0.5f, 0.0f, 1.0f);
}

// ONNX Runtime's QLinearSigmoid / QLinearLeakyRelu table
// (QlinearBuildLookupTable): each code dequantized as sx * (x - zx) in f32, the
// float function, then MlasQuantizeLinear (x / sy rounded half to even, + zy).
template <class F>
std::vector<int> ort_table(const Codes& c, float sx, int zx, float sy, int zy, F f) {
  std::vector<int> t;
  for (int x = c.lo; x <= c.hi; ++x) {
    const float v = f(sx * static_cast<float>(x - zx));
    t.push_back(saturate(std::lrint(v / sy) + zy, c));
  }
  return t;
}

graph::Graph activation_model(const Codes& c, const std::string& op, float sx, float sy,
                              float alpha) {
  Model m;
  m.opset_import(kMs, 1);
  m.input("x", c.type, {256});
  scale(m, "sx", sx);
  scale(m, "sy", sy);
  zero_point(m, "zx", c, c.zp_a);
  zero_point(m, "zy", c, c.zp_y);
  auto& n = m.node(op, {"x", "sx", "zx", "sy", "zy"}, {"y"});
  n.set_domain(kMs);
  if (op == "QLinearLeakyRelu") attr(n, "alpha", alpha);
  m.output("y", c.type);
  return import_bytes(m.bytes());
}

std::vector<int> every_code(const Codes& c) {
  std::vector<int> v;
  for (int x = c.lo; x <= c.hi; ++x) v.push_back(x);
  return v;
}

// qfuse's sigmoid is not Eigen's polynomial: the two differ by a few f32 ulps,
// so a code whose sigmoid lies that close to a rounding tie can take the
// neighbouring code. Within one code, and rarely that.
TEST_P(QOperator, QLinearSigmoidOfEveryCodeIsWithinOneCodeOfOnnxRuntimesTable) {
  const Codes c = GetParam();
  const float sx = 0.0625f, sy = 1.0f / 256.0f;
  const graph::Graph g = activation_model(c, "QLinearSigmoid", sx, sy, 0.0f);
  EXPECT_EQ(count_nodes(g, graph::OpKind::Sigmoid), 1u);
  const std::vector<int> want = ort_table(c, sx, c.zp_a, sy, c.zp_y, ort_logistic);
  const std::map<std::string, Tensor> in{{"x", codes_tensor(c, {256}, every_code(c))}};
  for (bool fuse : {false, true}) {
    const Distance d = distance(run_codes(g, fuse, in), want);
    EXPECT_LE(d.worst, 1) << (fuse ? "fused" : "unfused");
    EXPECT_LE(d.differ, 4u) << (fuse ? "fused" : "unfused");
  }
}

// LeakyRelu's table is exact in f32 (v >= 0 ? v : alpha * v), as qfuse's is.
TEST_P(QOperator, QLinearLeakyReluOfEveryCodeIsOnnxRuntimesTable) {
  const Codes c = GetParam();
  const float sx = 0.031f, sy = 0.029f, alpha = 0.1f;
  const graph::Graph g = activation_model(c, "QLinearLeakyRelu", sx, sy, alpha);
  const std::vector<int> want =
      ort_table(c, sx, c.zp_a, sy, c.zp_y, [alpha](float v) { return v >= 0.0f ? v : alpha * v; });
  const std::map<std::string, Tensor> in{{"x", codes_tensor(c, {256}, every_code(c))}};
  EXPECT_EQ(distance(run_codes(g, false, in), want).worst, 0);
  EXPECT_LE(distance(run_codes(g, true, in), want).worst, 1);
}

// --- QLinearGlobalAveragePool -------------------------------------------------

// ONNX Runtime's QLinearGlobalAveragePool on x86-64 (MlasQLinearGlobalAveragePool,
// MlasRequantizeOutput): the integer sum minus zx * N, times the f32 scale
// fl(sx / fl(sy * N)), rounded half to even, plus zy. ONNX's arithmetic sums
// the dequantized values in f32 and divides twice; a mean within f32 noise of a
// tie can round the other way. Within one code.
std::vector<int> ort_global_average_pool(const Codes& c, const std::vector<int>& x, int channels,
                                         int image, bool channels_last, float sx, int zx,
                                         float sy, int zy) {
  const float s = sx / (sy * static_cast<float>(image));
  std::vector<int> y;
  for (int ch = 0; ch < channels; ++ch) {
    int acc = -zx * image;
    for (int i = 0; i < image; ++i) {
      acc += x[static_cast<std::size_t>(channels_last ? i * channels + ch : ch * image + i)];
    }
    y.push_back(saturate(std::lrint(static_cast<float>(acc) * s) + zy, c));
  }
  return y;
}

TEST_P(QOperator, QLinearGlobalAveragePoolIsWithinOneCodeOfOnnxRuntimes) {
  const Codes c = GetParam();
  const float sx = 0.043f, sy = 0.011f;
  for (bool channels_last : {false, true}) {
    Model m;
    m.opset_import(kMs, 1);
    const Dims dims = channels_last ? Dims{1, 5, 7, 64} : Dims{1, 64, 5, 7};
    m.input("x", c.type, dims);
    scale(m, "sx", sx);
    scale(m, "sy", sy);
    zero_point(m, "zx", c, c.zp_a);
    zero_point(m, "zy", c, c.zp_y);
    auto& n = m.node("QLinearGlobalAveragePool", {"x", "sx", "zx", "sy", "zy"}, {"y"});
    n.set_domain(kMs);
    attr(n, "channels_last", std::int64_t{channels_last ? 1 : 0});
    m.output("y", c.type);
    const graph::Graph g = import_bytes(m.bytes());
    // Channel k's codes: spread over the range, the last channels all at
    // the type's limits.
    std::vector<int> xv(64 * 35);
    for (std::size_t i = 0; i < xv.size(); ++i) {
      const std::size_t ch = channels_last ? i % 64 : i / 35;
      xv[i] = ch >= 62 ? (ch == 62 ? c.lo : c.hi)
                       : c.lo + static_cast<int>((i * 97 + ch * 13) % 256);
    }
    const std::vector<int> want =
        ort_global_average_pool(c, xv, 64, 35, channels_last, sx, c.zp_a, sy, c.zp_y);
    const std::map<std::string, Tensor> in{
        {"x", codes_tensor(c, Shape(dims.begin(), dims.end()), xv)}};
    for (bool fuse : {false, true}) {
      EXPECT_LE(distance(run_codes(g, fuse, in), want).worst, 1)
          << (fuse ? "fused" : "unfused") << (channels_last ? ", channels last" : "");
    }
  }
}

// --- QLinearConcat ------------------------------------------------------------

// ONNX Runtime's QLinearConcat requantizes each input through a table of
// MlasQuantizeLinear(sx * (x - zx)) (a copy where scale and zero point are Y's
// own): Dequantize -> Quantize exactly.
TEST_P(QOperator, QLinearConcatRequantizesEachInputAsOnnxRuntimesTable) {
  const Codes c = GetParam();
  const float s0 = 0.021f, s1 = 0.057f, sy = 0.04f;
  Model m;
  m.opset_import(kMs, 1);
  m.input("x0", c.type, {1, 256, 1, 1});
  m.input("x1", c.type, {1, 256, 1, 1});
  scale(m, "s0", s0);
  scale(m, "s1", s1);
  scale(m, "sy", sy);
  zero_point(m, "z0", c, c.zp_a);
  zero_point(m, "z1", c, c.zp_b);
  zero_point(m, "zy", c, c.zp_y);
  auto& n = m.node("QLinearConcat", {"sy", "zy", "x0", "s0", "z0", "x1", "s1", "z1", "x1", "sy", "zy"},
                   {"y"});
  n.set_domain(kMs);
  attr(n, "axis", std::int64_t{1});
  m.output("y", c.type);
  const graph::Graph g = import_bytes(m.bytes());
  const auto identity = [](float v) { return v; };
  std::vector<int> want = ort_table(c, s0, c.zp_a, sy, c.zp_y, identity);
  const std::vector<int> t1 = ort_table(c, s1, c.zp_b, sy, c.zp_y, identity);
  want.insert(want.end(), t1.begin(), t1.end());
  // The third input is x1 read on Y's own grid: a copy of its codes.
  const std::vector<int> all = every_code(c);
  want.insert(want.end(), all.begin(), all.end());
  const std::map<std::string, Tensor> in{{"x0", codes_tensor(c, {1, 256, 1, 1}, all)},
                                         {"x1", codes_tensor(c, {1, 256, 1, 1}, all)}};
  EXPECT_EQ(distance(run_codes(g, false, in), want).worst, 0);
  EXPECT_LE(distance(run_codes(g, true, in), want).worst, 1);
}

// --- QLinearAveragePool -------------------------------------------------------

// ONNX Runtime's QLinearAveragePool (qlinear_pool.cc): each code dequantized
// to f32, summed over the window in row order, divided by the count
// (count_include_pad = 0: the cells inside the image), then
// nearbyint(y / sy + zy). Adding zy before rounding moves exact ties when zy
// is odd; summation order moves near ties. Within one code.
TEST_P(QOperator, QLinearAveragePoolIsWithinOneCodeOfOnnxRuntimes) {
  const Codes c = GetParam();
  const float sx = 0.05f, sy = 0.03f;
  Model m;
  m.opset_import(kMs, 1);
  m.input("x", c.type, {1, 2, 9, 9});
  scale(m, "sx", sx);
  scale(m, "sy", sy);
  zero_point(m, "zx", c, c.zp_a);
  zero_point(m, "zy", c, c.zp_y);
  auto& n = m.node("QLinearAveragePool", {"x", "sx", "zx", "sy", "zy"}, {"y"});
  n.set_domain(kMs);
  attr(n, "kernel_shape", Dims{3, 3});
  attr(n, "pads", Dims{1, 1, 1, 1});
  attr(n, "strides", Dims{2, 2});
  m.output("y", c.type);
  const graph::Graph g = import_bytes(m.bytes());
  std::vector<int> xv(2 * 81);
  for (std::size_t i = 0; i < xv.size(); ++i) xv[i] = c.lo + static_cast<int>((i * 89) % 256);
  std::vector<int> want;
  for (int ch = 0; ch < 2; ++ch) {
    for (int oh = 0; oh < 5; ++oh) {
      for (int ow = 0; ow < 5; ++ow) {
        float sum = 0.0f;
        int count = 0;
        for (int h = std::max(0, 2 * oh - 1); h < std::min(9, 2 * oh + 2); ++h) {
          for (int w = std::max(0, 2 * ow - 1); w < std::min(9, 2 * ow + 2); ++w) {
            sum += sx * static_cast<float>(xv[static_cast<std::size_t>(ch * 81 + h * 9 + w)] - c.zp_a);
            ++count;
          }
        }
        const float mean = sum / static_cast<float>(count);
        want.push_back(saturate(std::lrint(mean / sy + static_cast<float>(c.zp_y)), c));
      }
    }
  }
  const std::map<std::string, Tensor> in{{"x", codes_tensor(c, {1, 2, 9, 9}, xv)}};
  for (bool fuse : {false, true}) {
    EXPECT_LE(distance(run_codes(g, fuse, in), want).worst, 1) << (fuse ? "fused" : "unfused");
  }
}

// --- QLinearSoftmax -----------------------------------------------------------

// ONNX Runtime's QLinearSoftmax (qlinear_softmax.cc, opset 13, the last axis,
// u8 output): a table of exp((i - 255 + shift) * sx) in double stored as
// float, the row's sum of table[x - max + 255] in f32, then
// nearbyint(table[..] * floor(1 / sy) / sum) + zy. With sy = 1/256 (what the
// quantizer writes) floor(1 / sy) = 1 / sy; the f32 sums differ from qfuse's
// exp and sum by a few ulps. Within one code.
std::vector<int> ort_softmax_u8(const std::vector<int>& x, int rows, int d, float sx, float sy,
                                int zy) {
  double shift = std::log(static_cast<double>(FLT_MAX) / d);
  shift = std::max(0.0, shift - 5.0) / sx;
  std::vector<float> table(256);
  for (int i = 0; i < 256; ++i) {
    table[static_cast<std::size_t>(i)] =
        static_cast<float>(std::exp((static_cast<double>(i) - 255 + shift) * static_cast<double>(sx)));
  }
  const float inverse = std::floor(1.0f / sy);
  std::vector<int> y;
  for (int r = 0; r < rows; ++r) {
    const auto row = x.begin() + r * d;
    const int xmax = *std::max_element(row, row + d);
    float sum = 0.0f;
    for (int k = 0; k < d; ++k) sum += table[static_cast<std::size_t>(255 - xmax + row[k])];
    for (int k = 0; k < d; ++k) {
      const float vt = table[static_cast<std::size_t>(255 - xmax + row[k])];
      y.push_back(std::min(255L, std::lrint(vt * inverse / sum) + zy));
    }
  }
  return y;
}

TEST(QOperatorSoftmax, QLinearSoftmaxIsWithinOneCodeOfOnnxRuntimes) {
  const float sx = 0.083f, sy = 1.0f / 256.0f;
  Model m;
  m.opset_import(kMs, 1);
  m.input("x", kUint8, {16, 10});
  scale(m, "sx", sx);
  scale(m, "sy", sy);
  zero_point(m, "zx", kU8, 100);
  zero_point(m, "zy", kU8, 0);
  auto& n = m.node("QLinearSoftmax", {"x", "sx", "zx", "sy", "zy"}, {"y"});
  n.set_domain(kMs);
  attr(n, "axis", std::int64_t{-1});
  attr(n, "opset", std::int64_t{13});
  m.output("y", kUint8);
  const graph::Graph g = import_bytes(m.bytes());
  EXPECT_EQ(count_nodes(g, graph::OpKind::Softmax), 1u);
  std::vector<int> xv(160);
  for (std::size_t i = 0; i < xv.size(); ++i) xv[i] = static_cast<int>((i * 53 + i / 10 * 7) % 256);
  // A row of one code (every probability 1/10) and a row with one winner.
  std::fill(xv.begin(), xv.begin() + 10, 77);
  std::fill(xv.begin() + 10, xv.begin() + 20, 0);
  xv[15] = 255;
  const std::vector<int> want = ort_softmax_u8(xv, 16, 10, sx, sy, 0);
  const std::map<std::string, Tensor> in{{"x", codes_tensor(kU8, {16, 10}, xv)}};
  for (bool fuse : {false, true}) {
    EXPECT_LE(distance(run_codes(g, fuse, in), want).worst, 1) << (fuse ? "fused" : "unfused");
  }
}

// --- QGemm --------------------------------------------------------------------

// ONNX Runtime's QGemm (quant_gemm.cc, MLAS_QGEMM_REQUANT_OUTPUT_PROCESSOR):
// the int32 sum C[n] + sum_k (a - za)(b - zb[n]), times
// fl(fl(fl(alpha * sa) * sb[n]) / sy), rounded half to even, plus zy. qfuse's
// unfused sum is exact in f32 here (below 2^24) and the product is the same
// f32 multiply: equal. Fused, one int8 inner product.
TEST_P(QOperator, QGemmIsOnnxRuntimesRequantizedProduct) {
  const Codes c = GetParam();
  constexpr int kM = 4, kK = 32, kN = 16;
  const float sa = 0.02f, sy = 0.09f, alpha = 0.75f;
  std::vector<float> sb(kN);
  std::vector<std::int8_t> w(kN * kK);
  std::vector<std::int32_t> bias(kN);
  for (int j = 0; j < kN; ++j) {
    sb[static_cast<std::size_t>(j)] = 0.003f + 0.0007f * static_cast<float>(j);
    bias[static_cast<std::size_t>(j)] = (j * 331) % 1500 - 700;
    for (int k = 0; k < kK; ++k) {
      w[static_cast<std::size_t>(j * kK + k)] = static_cast<std::int8_t>((j * 31 + k * 17) % 255 - 127);
    }
  }
  for (bool requantized : {true, false}) {
    Model m;
    m.opset_import(kMs, 1);
    m.input("a", c.type, {kM, kK});
    scale(m, "sa", sa);
    zero_point(m, "za", c, c.zp_a);
    m.initializer<std::int8_t>("w", kInt8, {kN, kK}, w);
    m.initializer<float>("sb", kFloat, {kN}, sb);
    m.initializer<std::int8_t>("zb", kInt8, {kN}, std::vector<std::int8_t>(kN, 0));
    m.initializer<std::int32_t>("bias", kInt32, {kN}, bias);
    scale(m, "sy", sy);
    zero_point(m, "zy", c, c.zp_y);
    std::vector<std::string> inputs{"a", "sa", "za", "w", "sb", "zb", "bias"};
    if (requantized) {
      inputs.push_back("sy");
      inputs.push_back("zy");
    }
    auto& n = m.node("QGemm", inputs, {"y"}, "gemm");
    n.set_domain(kMs);
    attr(n, "transB", std::int64_t{1});
    attr(n, "alpha", alpha);
    m.output("y", requantized ? c.type : kFloat);
    const graph::Graph g = import_bytes(m.bytes());
    std::vector<int> av(kM * kK);
    for (std::size_t i = 0; i < av.size(); ++i) av[i] = c.lo + static_cast<int>((i * 71) % 256);
    std::vector<double> want;
    for (int i = 0; i < kM; ++i) {
      for (int j = 0; j < kN; ++j) {
        std::int32_t acc = bias[static_cast<std::size_t>(j)];
        for (int k = 0; k < kK; ++k) {
          acc += (av[static_cast<std::size_t>(i * kK + k)] - c.zp_a) * w[static_cast<std::size_t>(j * kK + k)];
        }
        const float s = alpha * sa * sb[static_cast<std::size_t>(j)];
        want.push_back(requantized ? saturate(std::lrint(static_cast<float>(acc) * (s / sy)) + c.zp_y, c)
                                   : static_cast<double>(static_cast<float>(acc) * s));
      }
    }
    const std::map<std::string, Tensor> in{{"a", codes_tensor(c, {kM, kK}, av)}};
    for (bool fuse : {false, true}) {
      const CompiledModel model = compile(g, {.fuse = fuse});
      InferRequest r = model.create_infer_request();
      r.set_input("a", in.at("a"));
      r.infer();
      const Tensor y = r.output("y");
      ASSERT_EQ(y.size(), static_cast<std::int64_t>(want.size()));
      double worst = 0.0;
      for (std::int64_t i = 0; i < y.size(); ++i) {
        const double e = std::abs(y.as_float(i) - want[static_cast<std::size_t>(i)]);
        worst = std::max(worst, requantized ? e : e / std::max(1e-6, std::abs(want[static_cast<std::size_t>(i)])));
      }
      if (requantized) {
        EXPECT_LE(worst, fuse ? 1.0 : 0.0) << (fuse ? "fused" : "unfused");
      } else {
        EXPECT_LE(worst, fuse ? 1e-5 : 0.0) << (fuse ? "fused" : "unfused");
      }
      if (fuse) {
        int int8 = 0;
        for (const LayerInfo& l : model.layers()) int8 += l.precision == "int8";
        EXPECT_EQ(int8, 1) << "QGemm is one int8 layer";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Codes, QOperator, ::testing::Values(kU8, kS8),
                         [](const auto& p) { return type_name(p.param); });

// --- Data movement on codes ---------------------------------------------------

// QuantizeLinear -> MaxPool -> Flatten on uint8, as the QOperator format
// writes them: the pool and the reshape run on the codes, and the output is
// the maximum of the codes.
TEST(QOperatorCodes, MaxPoolAndFlattenRunOnUint8Codes) {
  Model m;
  m.input("x", kFloat, {1, 3, 4, 4});
  scale(m, "s", 0.05f);
  zero_point(m, "z", kU8, 128);
  m.node("QuantizeLinear", {"x", "s", "z"}, {"q"});
  auto& pool = m.node("MaxPool", {"q"}, {"p"});
  attr(pool, "kernel_shape", Dims{2, 2});
  attr(pool, "strides", Dims{2, 2});
  m.node("Flatten", {"p"}, {"y"});
  m.output("y", kUint8);
  const graph::Graph g = import_bytes(m.bytes());
  for (graph::NodeId id : g.topological_order()) {
    const graph::Node& n = g.node(id);
    if (n.kind == graph::OpKind::MaxPool) {
      EXPECT_EQ(g.value(n.inputs[0]).type, ElementType::u8) << "the MaxPool reads the codes";
    }
  }
  std::vector<float> xv(48);
  for (std::size_t i = 0; i < xv.size(); ++i) xv[i] = 0.37f * static_cast<float>(i % 17) - 3.0f;
  const Tensor x = Tensor::from_vector<float>({1, 3, 4, 4}, xv);
  for (bool fuse : {false, true}) {
    const std::vector<int> y = codes_of(run(g, fuse, "x", x, "y"));
    ASSERT_EQ(y.size(), 12u);
    for (std::size_t o = 0; o < 12; ++o) {
      const std::size_t ch = o / 4, oh = (o % 4) / 2, ow = o % 2;
      int want = 0;
      for (std::size_t dh = 0; dh < 2; ++dh) {
        for (std::size_t dw = 0; dw < 2; ++dw) {
          const float v = xv[ch * 16 + (2 * oh + dh) * 4 + 2 * ow + dw];
          want = std::max(want, saturate(std::lrint(v / 0.05f) + 128, kU8));
        }
      }
      EXPECT_EQ(y[o], want) << "output " << o << (fuse ? " fused" : " unfused");
    }
  }
}

// --- Malformed and unsupported forms -------------------------------------------

Model qlinear_add_model(const std::vector<std::string>& inputs) {
  Model m;
  m.opset_import(kMs, 1);
  m.input("a", kUint8, {1, 4});
  m.input("b", kUint8, {1, 4});
  m.input("s_run", kFloat, {1});
  scale(m, "s", 0.1f);
  m.initializer<float>("s2", kFloat, {2}, {0.1f, 0.2f});
  zero_point(m, "z", kU8, 128);
  m.node("QLinearAdd", inputs, {"y"}, "add").set_domain(kMs);
  m.output("y", kUint8);
  return m;
}

template <class E>
std::string import_error(const std::string& bytes) {
  try {
    (void)import_bytes(bytes);
  } catch (const E& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(QOperatorErrors, ARunTimeScaleIsNamed) {
  const Model m = qlinear_add_model({"a", "s_run", "z", "b", "s", "z", "s", "z"});
  EXPECT_NE(import_error<UnsupportedError>(m.bytes()).find(
                "import QLinearAdd node 'add': A_scale (input 1 's_run') must be a constant"),
            std::string::npos);
}

TEST(QOperatorErrors, APerChannelScaleIsNamed) {
  const Model m = qlinear_add_model({"a", "s", "z", "b", "s2", "z", "s", "z"});
  EXPECT_NE(import_error<UnsupportedError>(m.bytes()).find("B_scale has 2 values"),
            std::string::npos);
}

TEST(QOperatorErrors, AMissingInputIsNamed) {
  const Model m = qlinear_add_model({"a", "s", "z", "b", "s", "z"});
  EXPECT_NE(import_error<GraphError>(m.bytes()).find(
                "import QLinearAdd node 'add': takes 7 to 8 inputs, got 6"),
            std::string::npos);
}

TEST(QOperatorErrors, ChannelsLastAveragePoolIsRefused) {
  Model m;
  m.opset_import(kMs, 1);
  m.input("x", kUint8, {1, 4, 4, 3});
  scale(m, "s", 0.1f);
  zero_point(m, "z", kU8, 128);
  auto& n = m.node("QLinearAveragePool", {"x", "s", "z", "s", "z"}, {"y"}, "pool");
  n.set_domain(kMs);
  attr(n, "kernel_shape", Dims{2, 2});
  attr(n, "channels_last", std::int64_t{1});
  m.output("y", kUint8);
  EXPECT_NE(import_error<UnsupportedError>(m.bytes()).find("channels_last"), std::string::npos);
}

TEST(QOperatorErrors, SoftmaxWithoutItsOpsetIsMalformed) {
  Model m;
  m.opset_import(kMs, 1);
  m.input("x", kUint8, {1, 4});
  scale(m, "s", 0.1f);
  zero_point(m, "z", kU8, 0);
  m.node("QLinearSoftmax", {"x", "s", "z", "s", "z"}, {"y"}, "softmax").set_domain(kMs);
  m.output("y", kUint8);
  EXPECT_NE(import_error<GraphError>(m.bytes()).find("attribute 'opset' is missing"),
            std::string::npos);
}

TEST(QOperatorErrors, AnUnknownContribOperatorListsTheKnownOnes) {
  Model m;
  m.opset_import(kMs, 1);
  m.input("x", kUint8, {1, 4});
  m.node("QLinearWhere", {"x"}, {"y"}, "where").set_domain(kMs);
  m.output("y", kUint8);
  const std::string e = import_error<UnsupportedError>(m.bytes());
  EXPECT_NE(e.find("operator QLinearWhere of domain 'com.microsoft' is not supported"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("com.microsoft QLinearAdd"), std::string::npos) << e;
}

}  // namespace
}  // namespace qfuse::onnx
