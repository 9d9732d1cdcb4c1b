// Patterns the importer reads as one op (graph/onnx/import_patterns.cpp):
// LayerNorm spelled out as opset-13 exports write it, and GELU's tanh and erf
// forms. Each recognized form is checked for its node count and against a
// naive loop in double, fused and unfused; each named negative must stay the
// operators it is and still compute what those operators compute.

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <numbers>
#include <string>
#include <vector>

#include "graph/onnx/importer.hpp"
#include "plugin/api_internal.hpp"
#include "tests/graph/onnx/onnx_model_builder.hpp"

namespace qfuse::onnx {
namespace {

using namespace test;
using graph::OpKind;

std::map<std::string, Tensor> run_all(const graph::Graph& g, bool fuse,
                                      const std::map<std::string, Tensor>& inputs,
                                      const std::vector<std::string>& outputs) {
  const CompiledModel model = compile(g, {.fuse = fuse});
  InferRequest r = model.create_infer_request();
  for (const auto& [name, t] : inputs) r.set_input(name, t);
  r.infer();
  std::map<std::string, Tensor> out;
  for (const std::string& name : outputs) out.emplace(name, r.output(name));
  return out;
}

// --- LayerNorm spelled out ------------------------------------------------------

constexpr std::int64_t kB = 2, kR = 3, kC = 8;

// d = x - ReduceMean(x, axes); y = d / Sqrt(ReduceMean(Pow(d, exponent), axes) + eps)
// [* gamma] [+ beta], on x [kB, kR, kC], as PyTorch writes nn.LayerNorm at opset 13
// (exponent and epsilon as Constant nodes placed where it puts them).
struct SpelledLayerNorm {
  Dims axes{-1};
  float exponent = 2.0f;
  float epsilon = 1e-5f;
  bool epsilon_is_input = false;  // an Add of a graph input instead of a constant
  bool gamma = true;
  bool beta = true;
  Dims gamma_dims{kC};
  bool variance_is_output = false;  // the variance also a graph output
};

std::vector<float> gamma_values() { return random_floats(kC, 0.5f, 1.5f, 71); }
std::vector<float> beta_values() { return random_floats(kC, -0.5f, 0.5f, 72); }

void constant_node(Model& m, const std::string& out, float v) {
  auto& n = m.node("Constant", {}, {out});
  auto* a = n.add_attribute();
  a->set_name("value");
  a->set_type(::onnx::AttributeProto_AttributeType_TENSOR);
  a->mutable_t()->set_data_type(kFloat);
  a->mutable_t()->add_float_data(v);
}

std::string build(const SpelledLayerNorm& s) {
  Model m(13);
  m.input("x", kFloat, {kB, kR, kC});
  if (s.epsilon_is_input) m.input("eps", kFloat, {1});
  attr(m.node("ReduceMean", {"x"}, {"mean"}, "ln/ReduceMean"), "axes", s.axes);
  m.node("Sub", {"x", "mean"}, {"d"}, "ln/Sub");
  constant_node(m, "exponent", s.exponent);
  m.node("Pow", {"d", "exponent"}, {"d2"}, "ln/Pow");
  attr(m.node("ReduceMean", {"d2"}, {"var"}, "ln/ReduceMean_1"), "axes", s.axes);
  if (!s.epsilon_is_input) constant_node(m, "eps", s.epsilon);
  m.node("Add", {"var", "eps"}, {"var_eps"}, "ln/Add");
  m.node("Sqrt", {"var_eps"}, {"std"}, "ln/Sqrt");
  m.node("Div", {"d", "std"}, {"normalized"}, "ln/Div");
  std::string y = "normalized";
  if (s.gamma) {
    std::vector<float> g = gamma_values();
    std::int64_t n = 1;
    for (auto d : s.gamma_dims) n *= d;
    g.resize(static_cast<std::size_t>(n), 1.25f);
    m.initializer("gamma", kFloat, s.gamma_dims, g);
    m.node("Mul", {y, "gamma"}, {"scaled"}, "ln/Mul");
    y = "scaled";
  }
  if (s.beta) {
    m.initializer("beta", kFloat, {kC}, beta_values());
    m.node("Add", {y, "beta"}, {"y"}, "ln/Add_1");
  } else {
    m.node("Identity", {y}, {"y"}, "ln/out");
  }
  m.output("y", kFloat);
  if (s.variance_is_output) m.output("var", kFloat);
  return m.bytes();
}

// What the spelled-out operators compute, in double: the mean and the
// "variance" (the mean of d^exponent) over axis `axis` of [kB, kR, kC],
// gamma / beta along the last axis (gamma_dims [kR, kC]: per row too).
std::vector<double> naive(const SpelledLayerNorm& s, const std::vector<float>& x, double eps) {
  const int axis = s.axes[0] < 0 ? static_cast<int>(s.axes[0]) + 3 : static_cast<int>(s.axes[0]);
  const std::int64_t dims[3] = {kB, kR, kC};
  const auto at = [&](std::int64_t b, std::int64_t r, std::int64_t c) {
    return static_cast<std::size_t>((b * kR + r) * kC + c);
  };
  const std::vector<float> g = gamma_values(), be = beta_values();
  std::vector<double> y(x.size());
  for (std::int64_t b = 0; b < kB; ++b) {
    for (std::int64_t r = 0; r < kR; ++r) {
      for (std::int64_t c = 0; c < kC; ++c) {
        std::int64_t idx[3] = {b, r, c};
        double mean = 0.0, var = 0.0;
        for (std::int64_t k = 0; k < dims[axis]; ++k) {
          idx[axis] = k;
          mean += x[at(idx[0], idx[1], idx[2])];
        }
        mean /= static_cast<double>(dims[axis]);
        for (std::int64_t k = 0; k < dims[axis]; ++k) {
          idx[axis] = k;
          var += std::pow(x[at(idx[0], idx[1], idx[2])] - mean, s.exponent);
        }
        var /= static_cast<double>(dims[axis]);
        double v = (x[at(b, r, c)] - mean) / std::sqrt(var + eps);
        if (s.gamma) {
          const bool per_row = s.gamma_dims.size() == 2;
          v *= per_row ? (r == 0 ? g[static_cast<std::size_t>(c)] : 1.25) : g[static_cast<std::size_t>(c)];
        }
        if (s.beta) v += be[static_cast<std::size_t>(c)];
        y[at(b, r, c)] = v;
      }
    }
  }
  return y;
}

// Rows with one large positive value among small negative ones: the mean of
// d^3 is positive along either axis, so the exponent-3 negative has no NaN.
std::vector<float> skewed_input() {
  std::vector<float> x = random_floats(kB * kR * kC, -1.0f, 0.0f, 73);
  for (std::size_t i = 0; i < x.size(); i += 9) x[i] = 6.0f;
  return x;
}

struct Imported {
  graph::Graph g;
  std::size_t layer_norms, reduce_means;
};

Imported import_and_count(const SpelledLayerNorm& s) {
  graph::Graph g = import_bytes(build(s));
  const std::size_t ln = count_nodes(g, OpKind::LayerNorm);
  const std::size_t rm = count_nodes(g, OpKind::ReduceMean);
  return {std::move(g), ln, rm};
}

void expect_matches_naive(const Imported& im, const SpelledLayerNorm& s, double tolerance) {
  const std::vector<float> xv = skewed_input();
  std::map<std::string, Tensor> inputs{{"x", Tensor::from_vector<float>({kB, kR, kC}, xv)}};
  if (s.epsilon_is_input) inputs.emplace("eps", Tensor::from_vector<float>({1}, {s.epsilon}));
  const std::vector<double> e = naive(s, xv, static_cast<double>(s.epsilon));
  for (bool fuse : {false, true}) {
    const Tensor y = run_all(im.g, fuse, inputs, {"y"}).at("y");
    ASSERT_EQ(y.shape(), (Shape{kB, kR, kC}));
    for (std::size_t i = 0; i < e.size(); ++i) {
      EXPECT_NEAR(y.data<float>()[i], e[i], tolerance * (1.0 + std::abs(e[i])))
          << (fuse ? "fused " : "unfused ") << i;
    }
  }
}

TEST(OnnxSpelledLayerNorm, BecomesOneLayerNormMatchingANaiveLoop) {
  // A large epsilon too, so that the loop sees the one the node took.
  for (const auto& [axes, epsilon] : {std::pair{Dims{-1}, 1e-5f}, std::pair{Dims{2}, 0.25f}}) {
    SpelledLayerNorm s;
    s.axes = axes;
    s.epsilon = epsilon;
    const Imported im = import_and_count(s);
    EXPECT_EQ(im.layer_norms, 1u) << axes[0];
    EXPECT_EQ(im.reduce_means, 0u);
    EXPECT_EQ(count_nodes(im.g, OpKind::Power), 0u);
    EXPECT_EQ(count_nodes(im.g, OpKind::Multiply) + count_nodes(im.g, OpKind::Add) +
                  count_nodes(im.g, OpKind::Divide) + count_nodes(im.g, OpKind::Sqrt),
              0u);
    expect_matches_naive(im, s, 1e-5);
  }
}

TEST(OnnxSpelledLayerNorm, WithoutScaleOrBiasTheyAreOneAndZero) {
  for (const auto& [gamma, beta] : {std::pair{false, false}, std::pair{true, false}, std::pair{false, true}}) {
    SpelledLayerNorm s;
    s.gamma = gamma;
    s.beta = beta;
    const Imported im = import_and_count(s);
    EXPECT_EQ(im.layer_norms, 1u);
    EXPECT_EQ(im.reduce_means, 0u);
    EXPECT_EQ(count_nodes(im.g, OpKind::Multiply) + count_nodes(im.g, OpKind::Add), 0u);
    expect_matches_naive(im, s, 1e-5);
  }
}

TEST(OnnxSpelledLayerNorm, EndsBeforeAScaleThatIsNotPerChannel) {
  // gamma [kR, kC] scales each row differently: LayerNorm without a scale,
  // then the Mul and the Add as they are.
  SpelledLayerNorm s;
  s.gamma_dims = {kR, kC};
  const Imported im = import_and_count(s);
  EXPECT_EQ(im.layer_norms, 1u);
  EXPECT_EQ(count_nodes(im.g, OpKind::Multiply), 1u);
  EXPECT_EQ(count_nodes(im.g, OpKind::Add), 1u);
  expect_matches_naive(im, s, 1e-5);
}

TEST(OnnxSpelledLayerNorm, NotRecognizedWhenTheAxisIsNotTheLast) {
  SpelledLayerNorm s;
  s.axes = {1};
  const Imported im = import_and_count(s);
  EXPECT_EQ(im.layer_norms, 0u);
  EXPECT_EQ(im.reduce_means, 2u);
  expect_matches_naive(im, s, 1e-5);
}

TEST(OnnxSpelledLayerNorm, NotRecognizedWhenTheExponentIs3) {
  SpelledLayerNorm s;
  s.exponent = 3.0f;
  const Imported im = import_and_count(s);
  EXPECT_EQ(im.layer_norms, 0u);
  EXPECT_EQ(im.reduce_means, 2u);
  EXPECT_EQ(count_nodes(im.g, OpKind::Power), 1u);
  expect_matches_naive(im, s, 1e-5);
}

TEST(OnnxSpelledLayerNorm, NotRecognizedWhenEpsilonIsNotAConstant) {
  SpelledLayerNorm s;
  s.epsilon_is_input = true;
  s.epsilon = 1e-3f;
  const Imported im = import_and_count(s);
  EXPECT_EQ(im.layer_norms, 0u);
  EXPECT_EQ(im.reduce_means, 2u);
  expect_matches_naive(im, s, 1e-5);
}

TEST(OnnxSpelledLayerNorm, NotRecognizedWhenTheVarianceHasAnotherReader) {
  SpelledLayerNorm s;
  s.variance_is_output = true;
  const Imported im = import_and_count(s);
  EXPECT_EQ(im.layer_norms, 0u);
  EXPECT_EQ(im.reduce_means, 2u);
  expect_matches_naive(im, s, 1e-5);
  // The variance itself, against the loop's mean of d^2.
  const std::vector<float> xv = skewed_input();
  const Tensor var =
      run_all(im.g, false, {{"x", Tensor::from_vector<float>({kB, kR, kC}, xv)}}, {"var"}).at("var");
  ASSERT_EQ(var.shape(), (Shape{kB, kR, 1}));
  for (std::size_t row = 0; row < static_cast<std::size_t>(kB * kR); ++row) {
    double mean = 0.0, v = 0.0;
    for (std::size_t c = 0; c < kC; ++c) mean += xv[row * kC + c] / double(kC);
    for (std::size_t c = 0; c < kC; ++c) v += (xv[row * kC + c] - mean) * (xv[row * kC + c] - mean) / double(kC);
    EXPECT_NEAR(var.data<float>()[row], v, 1e-5 * (1.0 + v)) << row;
  }
}

TEST(OnnxSpelledLayerNorm, NotRecognizedWhenTheDifferenceHasAnotherReader) {
  // d = x - mean is read by a third node (an Abs that is a graph output).
  Model m(13);
  m.input("x", kFloat, {kB, kR, kC});
  attr(m.node("ReduceMean", {"x"}, {"mean"}), "axes", Dims{-1});
  m.node("Sub", {"x", "mean"}, {"d"});
  constant_node(m, "two", 2.0f);
  m.node("Pow", {"d", "two"}, {"d2"});
  attr(m.node("ReduceMean", {"d2"}, {"var"}), "axes", Dims{-1});
  constant_node(m, "eps", 1e-5f);
  m.node("Add", {"var", "eps"}, {"var_eps"});
  m.node("Sqrt", {"var_eps"}, {"std"});
  m.node("Div", {"d", "std"}, {"y"});
  m.node("Abs", {"d"}, {"abs_d"});
  m.output("y", kFloat);
  m.output("abs_d", kFloat);
  const graph::Graph g = import_bytes(m.bytes());
  EXPECT_EQ(count_nodes(g, OpKind::LayerNorm), 0u);
  EXPECT_EQ(count_nodes(g, OpKind::ReduceMean), 2u);
  SpelledLayerNorm s;
  s.gamma = s.beta = false;
  const std::vector<float> xv = skewed_input();
  const std::vector<double> e = naive(s, xv, 1e-5);
  for (bool fuse : {false, true}) {
    const auto out = run_all(g, fuse, {{"x", Tensor::from_vector<float>({kB, kR, kC}, xv)}}, {"y", "abs_d"});
    for (std::size_t i = 0; i < e.size(); ++i) {
      EXPECT_NEAR(out.at("y").data<float>()[i], e[i], 1e-5 * (1.0 + std::abs(e[i]))) << i;
    }
    for (std::size_t row = 0; row < static_cast<std::size_t>(kB * kR); ++row) {
      double mean = 0.0;
      for (std::size_t c = 0; c < kC; ++c) mean += xv[row * kC + c] / double(kC);
      for (std::size_t c = 0; c < kC; ++c) {
        EXPECT_NEAR(out.at("abs_d").data<float>()[row * kC + c], std::abs(xv[row * kC + c] - mean), 1e-5);
      }
    }
  }
}

// --- GELU -----------------------------------------------------------------------

constexpr std::int64_t kN = 96;

// Where 0.5 multiplies: x before (0.5 x) * (1 + f), (1 + f) before
// ((1 + f) * 0.5) * x, or the product (x * (1 + f)) * 0.5.
enum class Half { on_x, on_sum, on_product };
enum class Cube { pow, x_times_x_times_x, x_times_x_squared };

struct TanhGelu {
  Half half = Half::on_x;
  Cube cube = Cube::pow;
  float cubic = 0.044715f;
  bool cube_is_output = false;
};

// 0.5 x (1 + f) from f's tensor name, in the placement asked for.
void gelu_end(Model& m, Half half, const std::string& f) {
  constant_node(m, "one", 1.0f);
  m.node("Add", {f, "one"}, {"one_plus"}, "gelu/Add_1");
  constant_node(m, "half", 0.5f);
  switch (half) {
    case Half::on_x:
      m.node("Mul", {"x", "half"}, {"half_x"}, "gelu/Mul");
      m.node("Mul", {"half_x", "one_plus"}, {"y"}, "gelu/Mul_3");
      break;
    case Half::on_sum:
      m.node("Mul", {"one_plus", "half"}, {"halved"}, "gelu/Mul_3");
      m.node("Mul", {"x", "halved"}, {"y"}, "gelu/Mul_4");
      break;
    case Half::on_product:
      m.node("Mul", {"x", "one_plus"}, {"x_one_plus"}, "gelu/Mul_3");
      m.node("Mul", {"x_one_plus", "half"}, {"y"}, "gelu/Mul_4");
      break;
  }
}

std::string build(const TanhGelu& s) {
  Model m(13);
  m.input("x", kFloat, {1, kN});
  switch (s.cube) {
    case Cube::pow:
      constant_node(m, "three", 3.0f);
      m.node("Pow", {"x", "three"}, {"cube"}, "gelu/Pow");
      break;
    case Cube::x_times_x_times_x:
      m.node("Mul", {"x", "x"}, {"square"}, "gelu/square");
      m.node("Mul", {"square", "x"}, {"cube"}, "gelu/cube");
      break;
    case Cube::x_times_x_squared:
      m.node("Mul", {"x", "x"}, {"square"}, "gelu/square");
      m.node("Mul", {"x", "square"}, {"cube"}, "gelu/cube");
      break;
  }
  constant_node(m, "cubic", s.cubic);
  m.node("Mul", {"cube", "cubic"}, {"cubic_term"}, "gelu/Mul_1");
  m.node("Add", {"x", "cubic_term"}, {"inner"}, "gelu/Add");
  constant_node(m, "sqrt_2_over_pi", 0.7978846f);
  m.node("Mul", {"inner", "sqrt_2_over_pi"}, {"scaled"}, "gelu/Mul_2");
  m.node("Tanh", {"scaled"}, {"t"}, "gelu/Tanh");
  gelu_end(m, s.half, "t");
  m.output("y", kFloat);
  if (s.cube_is_output) m.output("cube", kFloat);
  return m.bytes();
}

std::vector<float> gelu_input() {
  std::vector<float> x = random_floats(kN, -6.0f, 6.0f, 74);
  x[0] = 0.0f;
  x[1] = -3.5f;  // where tanh's form is least accurate in float
  return x;
}

double tanh_form(double x, double cubic) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (x + cubic * x * x * x)));
}

// y within 1e-5 relative + 1e-6 absolute (oneDNN's gelu against double, as
// tests/plugin/executable_ops/eltwise_ops_test.cpp measures it).
void expect_gelu(const graph::Graph& g, const std::vector<float>& xv,
                 double (*f)(double, double), double param) {
  for (bool fuse : {false, true}) {
    const Tensor y = run_all(g, fuse, {{"x", Tensor::from_vector<float>({1, kN}, xv)}}, {"y"}).at("y");
    for (std::size_t i = 0; i < xv.size(); ++i) {
      const double e = f(xv[i], param);
      EXPECT_NEAR(y.data<float>()[i], e, 1e-5 * std::abs(e) + 1e-6)
          << (fuse ? "fused " : "unfused ") << "x = " << xv[i];
    }
  }
}

std::size_t gelus(const graph::Graph& g, graph::GeluApproximation approximation) {
  std::size_t n = 0;
  for (graph::NodeId id : g.topological_order()) {
    const graph::Node& node = g.node(id);
    n += node.kind == OpKind::Gelu && node.attr<graph::GeluAttrs>().approximation == approximation;
  }
  return n;
}

class OnnxTanhGelu : public ::testing::TestWithParam<std::tuple<Half, Cube>> {};

TEST_P(OnnxTanhGelu, BecomesOneGeluMatchingANaiveLoop) {
  TanhGelu s;
  s.half = std::get<0>(GetParam());
  s.cube = std::get<1>(GetParam());
  const graph::Graph g = import_bytes(build(s));
  EXPECT_EQ(gelus(g, graph::GeluApproximation::tanh), 1u);
  EXPECT_EQ(count_nodes(g, OpKind::Tanh), 0u);
  EXPECT_EQ(count_nodes(g, OpKind::Power), 0u);
  EXPECT_EQ(count_nodes(g, OpKind::Multiply) + count_nodes(g, OpKind::Add), 0u);
  expect_gelu(g, gelu_input(), tanh_form, 0.044715);
}

std::string half_name(Half h) {
  return h == Half::on_x ? "HalfOnX" : h == Half::on_sum ? "HalfOnOnePlus" : "HalfOnProduct";
}

INSTANTIATE_TEST_SUITE_P(
    Placements, OnnxTanhGelu,
    ::testing::Combine(::testing::Values(Half::on_x, Half::on_sum, Half::on_product),
                       ::testing::Values(Cube::pow, Cube::x_times_x_times_x, Cube::x_times_x_squared)),
    [](const auto& p) {
      const Cube c = std::get<1>(p.param);
      return half_name(std::get<0>(p.param)) +
             (c == Cube::pow ? "CubeByPow" : c == Cube::x_times_x_times_x ? "CubeXXTimesX" : "CubeXTimesXX");
    });

TEST(OnnxTanhGeluNegative, NotRecognizedWhenTheCubicCoefficientDiffers) {
  TanhGelu s;
  s.cubic = 0.05f;
  const graph::Graph g = import_bytes(build(s));
  EXPECT_EQ(count_nodes(g, OpKind::Gelu), 0u);
  EXPECT_EQ(count_nodes(g, OpKind::Tanh), 1u);
  expect_gelu(g, gelu_input(), tanh_form, static_cast<double>(0.05f));
}

TEST(OnnxTanhGeluNegative, NotRecognizedWhenTheCubeHasAnotherReader) {
  TanhGelu s;
  s.cube_is_output = true;
  s.cube = Cube::x_times_x_times_x;
  const graph::Graph g = import_bytes(build(s));
  EXPECT_EQ(count_nodes(g, OpKind::Gelu), 0u);
  EXPECT_EQ(count_nodes(g, OpKind::Tanh), 1u);
  expect_gelu(g, gelu_input(), tanh_form, 0.044715);
}

TEST(OnnxTanhGeluNegative, TanhAloneStaysTanh) {
  Model m(13);
  m.input("x", kFloat, {1, kN});
  m.node("Tanh", {"x"}, {"y"});
  m.output("y", kFloat);
  const graph::Graph g = import_bytes(m.bytes());
  EXPECT_EQ(count_nodes(g, OpKind::Gelu), 0u);
  EXPECT_EQ(count_nodes(g, OpKind::Tanh), 1u);
  expect_gelu(g, gelu_input(), [](double x, double) { return std::tanh(x); }, 0.0);
}

double erf_form(double x, double) { return 0.5 * x * (1.0 + std::erf(x / std::numbers::sqrt2)); }

class OnnxErfGelu : public ::testing::TestWithParam<Half> {};

TEST_P(OnnxErfGelu, BecomesOneGeluMatchingANaiveLoop) {
  Model m(13);
  m.input("x", kFloat, {1, kN});
  constant_node(m, "sqrt2", 1.4142135f);
  m.node("Div", {"x", "sqrt2"}, {"scaled"}, "gelu/Div");
  m.node("Erf", {"scaled"}, {"e"}, "gelu/Erf");
  gelu_end(m, GetParam(), "e");
  m.output("y", kFloat);
  const graph::Graph g = import_bytes(m.bytes());
  EXPECT_EQ(gelus(g, graph::GeluApproximation::erf), 1u);
  EXPECT_EQ(count_nodes(g, OpKind::Multiply) + count_nodes(g, OpKind::Add) +
                count_nodes(g, OpKind::Divide),
            0u);
  expect_gelu(g, gelu_input(), erf_form, 0.0);
}

INSTANTIATE_TEST_SUITE_P(Placements, OnnxErfGelu,
                         ::testing::Values(Half::on_x, Half::on_sum, Half::on_product),
                         [](const auto& p) { return half_name(p.param); });

}  // namespace
}  // namespace qfuse::onnx
