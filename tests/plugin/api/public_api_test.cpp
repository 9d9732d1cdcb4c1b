// The public API as a host sees it: only qfuse/*.hpp included, linked against
// the shared libraries libqfuse and libqfuse_onnx (nothing internal is
// reachable). A quantized convolution built with ModelBuilder, checked against
// naive loops written here; the structured layer query; zero-copy binding;
// ONNX import through qfuse/onnx.hpp, and errors crossing the library
// boundary as their own types.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "qfuse/compare.hpp"
#include "qfuse/onnx.hpp"
#include "qfuse/qfuse.hpp"

namespace {

using qfuse::ElementType;
using qfuse::Tensor;

// OpenVINO FakeQuantize on a per-tensor range, in double (the reference).
double fake_quantize(double x, double lo, double hi, int levels) {
  if (x <= lo) return lo;
  if (x > hi) return hi;
  const double q = std::nearbyint((x - lo) / (hi - lo) * (levels - 1));
  return q / (levels - 1) * (hi - lo) + lo;
}

constexpr int C = 8, O = 16, H = 10, W = 10;
constexpr float kInHi = 2.55f, kOutHi = 6.0f, kW = 0.5f;

struct ConvModel {
  qfuse::Model model;
  std::vector<float> weights, bias;
};

// x -> FQ(u8 grid) -> conv 3x3 pad 1 (weights FQ'd, 255 levels) + bias -> relu -> FQ.
// `dim_names`: x's symbolic dimensions (none: all fixed).
// `shape`: x's shape (at which a symbolic one is compiled first).
ConvModel conv_model(const std::vector<std::string>& dim_names = {},
                     const qfuse::Shape& shape = {1, C, H, W}) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-kW, kW);
  ConvModel m;
  m.weights.resize(O * C * 9);
  m.bias.resize(O);
  for (float& w : m.weights) w = u(rng);
  for (float& b : m.bias) b = u(rng);
  qfuse::ModelBuilder b;
  const auto x = dim_names.empty() ? b.input("x", shape)
                                   : b.input("x", shape, ElementType::f32, dim_names);
  const auto xq = b.fake_quantize(x, 0.0f, kInHi, 0.0f, kInHi, 256, "x_fq");
  const auto w = b.constant("w", Tensor::from_vector<float>({O, C, 3, 3}, m.weights));
  const auto wq = b.fake_quantize(w, -kW, kW, -kW, kW, 255, "w_fq");
  const auto bias = b.constant("b", Tensor::from_vector<float>({O}, m.bias));
  const auto y = b.convolution(xq, wq, bias, {.pads_begin = {1, 1}, .pads_end = {1, 1}}, "conv");
  const auto r = b.unary(qfuse::UnaryOp::relu, y, "relu");
  b.output(b.fake_quantize(r, 0.0f, kOutHi, 0.0f, kOutHi, 256, "y"));
  m.model = b.build();
  return m;
}

// One image of h x w (C channels) through the model, in double.
std::vector<float> reference(const ConvModel& m, const std::vector<float>& x, int h = H, int w = W) {
  std::vector<float> out(static_cast<std::size_t>(O * h * w));
  for (int o = 0; o < O; ++o) {
    for (int i = 0; i < h; ++i) {
      for (int j = 0; j < w; ++j) {
        double acc = m.bias[o];
        for (int c = 0; c < C; ++c) {
          for (int ki = 0; ki < 3; ++ki) {
            for (int kj = 0; kj < 3; ++kj) {
              const int ii = i + ki - 1, jj = j + kj - 1;
              if (ii < 0 || jj < 0 || ii >= h || jj >= w) continue;
              acc += fake_quantize(x[(c * h + ii) * w + jj], 0, kInHi, 256) *
                     fake_quantize(m.weights[((o * C + c) * 3 + ki) * 3 + kj], -kW, kW, 255);
            }
          }
        }
        out[(o * h + i) * w + j] =
            static_cast<float>(fake_quantize(std::max(acc, 0.0), 0, kOutHi, 256));
      }
    }
  }
  return out;
}

std::vector<float> random_input(unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-0.3f, 2.8f);
  std::vector<float> x(C * H * W);
  for (float& v : x) v = u(rng);
  return x;
}

TEST(PublicApi, BuiltModelMatchesNaiveLoopsFusedAndUnfused) {
  const ConvModel m = conv_model();
  const std::vector<float> x = random_input(1);
  const std::vector<float> ref = reference(m, x);
  const double quantum = kOutHi / 255.0;
  for (bool fuse : {false, true}) {
    const qfuse::CompiledModel compiled = qfuse::compile(m.model, {.fuse = fuse});
    qfuse::InferRequest request = compiled.create_infer_request();
    request.set_input("x", Tensor::from_vector<float>({1, C, H, W}, x));
    request.infer();
    const std::vector<qfuse::TensorInfo> outs = compiled.outputs();
    ASSERT_EQ(outs.size(), 1u);
    const Tensor& y = request.output(outs[0].name);
    ASSERT_EQ(y.size(), static_cast<std::int64_t>(ref.size()));
    double worst = 0;
    for (std::size_t i = 0; i < ref.size(); ++i) {
      worst = std::max(worst, std::abs(static_cast<double>(y.as_float(static_cast<std::int64_t>(i))) - ref[i]));
    }
    EXPECT_LE(worst, quantum * 1.001) << (fuse ? "fused" : "unfused");
  }
}

// `n` images of h x w, each random_input-like, as one tensor.
Tensor random_batch(int n, int h, int w, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-0.3f, 2.8f);
  std::vector<float> x(static_cast<std::size_t>(n * C * h * w));
  for (float& v : x) v = u(rng);
  return Tensor::from_vector<float>({n, C, h, w}, x);
}

// The largest distance of `y` ([n, O, h, w]) from the naive loops, image by image.
double worst_error(const ConvModel& m, const Tensor& x, const Tensor& y) {
  const auto n = x.shape()[0], h = x.shape()[2], w = x.shape()[3];
  const std::size_t in = static_cast<std::size_t>(C * h * w), out = static_cast<std::size_t>(O * h * w);
  double worst = 0;
  for (std::int64_t b = 0; b < n; ++b) {
    const std::vector<float> image(x.data<float>().begin() + static_cast<std::ptrdiff_t>(b * in),
                                   x.data<float>().begin() + static_cast<std::ptrdiff_t>((b + 1) * in));
    const std::vector<float> ref = reference(m, image, static_cast<int>(h), static_cast<int>(w));
    for (std::size_t i = 0; i < out; ++i) {
      worst = std::max(worst, std::abs(static_cast<double>(y.data<float>()[b * out + i]) - ref[i]));
    }
  }
  return worst;
}

std::vector<float> values(const Tensor& t) { return {t.data<float>().begin(), t.data<float>().end()}; }

// A model whose batch and image size are symbolic: one request runs it at
// each shape set (compiled on first use, kept, shared), as the naive loops
// and as a model compiled for that shape alone, bit for bit.
TEST(PublicApi, SymbolicDimensionsRunAtEveryShapeTheRequestIsGiven) {
  const ConvModel m = conv_model({"batch", "", "height", "width"});
  const qfuse::CompiledModel compiled = qfuse::compile(m.model, {.threads = 2});
  ASSERT_EQ(compiled.inputs().size(), 1u);
  EXPECT_EQ(compiled.inputs()[0].dim_names, (std::vector<std::string>{"batch", "", "height", "width"}));
  EXPECT_EQ(compiled.inputs()[0].shape, (qfuse::Shape{1, C, H, W}));
  const std::string out = compiled.output_names()[0];
  qfuse::InferRequest request = compiled.create_infer_request();
  const std::vector<std::array<int, 3>> sizes = {{1, 10, 10}, {3, 10, 10}, {2, 7, 9}, {1, 10, 10}, {3, 10, 10}};
  unsigned seed = 11;
  for (const auto& [n, h, w] : sizes) {
    const Tensor x = random_batch(n, h, w, ++seed);
    request.set_input("x", x);
    request.infer();
    const Tensor& y = request.output(out);
    ASSERT_EQ(y.shape(), (qfuse::Shape{n, O, h, w}));
    EXPECT_LE(worst_error(m, x, y), kOutHi / 255.0 * 1.001) << n << "x" << h << "x" << w;
    // The model compiled afresh at this shape: the same bits.
    const qfuse::CompiledModel fixed = qfuse::compile(conv_model({}, x.shape()).model, {.threads = 2});
    qfuse::InferRequest alone = fixed.create_infer_request();
    alone.set_input("x", x);
    alone.infer();
    EXPECT_EQ(values(y), values(alone.output(out))) << n << "x" << h << "x" << w;
  }
  // The three shapes were compiled once each: the first, then the others,
  // the one asked for last first (the request went back to 3x10x10 on the
  // buffers it kept, without asking the model).
  const std::vector<qfuse::ShapeInfo> shapes = compiled.shapes();
  ASSERT_EQ(shapes.size(), 3u);
  EXPECT_EQ(shapes[0].inputs.at("x"), (qfuse::Shape{1, C, H, W}));
  EXPECT_EQ(shapes[1].inputs.at("x"), (qfuse::Shape{2, C, 7, 9}));
  EXPECT_EQ(shapes[2].inputs.at("x"), (qfuse::Shape{3, C, H, W}));
  EXPECT_GT(shapes[0].weight_bytes, 0u);
  for (const qfuse::ShapeInfo& s : shapes) EXPECT_GT(s.arena_bytes, 0u);
  // at_shapes gives the kept model; input() gives buffers of the shapes set.
  EXPECT_EQ(compiled.at_shapes({{"x", {3, C, H, W}}}).inputs()[0].shape, (qfuse::Shape{3, C, H, W}));
  request.set_input_shapes({{"x", {2, C, 7, 9}}});
  EXPECT_EQ(request.input("x").shape(), (qfuse::Shape{2, C, 7, 9}));
}

TEST(PublicApi, ShapesThatDoNotFitNameTheInputAndTheDimension) {
  const auto message = [](auto&& f) {
    try {
      f();
    } catch (const qfuse::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const ConvModel m = conv_model({"batch", "", "height", "width"});
  const qfuse::CompiledModel compiled = qfuse::compile(m.model);
  qfuse::InferRequest request = compiled.create_infer_request();
  EXPECT_NE(message([&] { request.set_input("x", random_batch(1, H, W, 1).reshaped({1, 4, 2 * H, W})); })
                .find("input 'x' dimension 1 (fixed by the model) is 8, the shape given [1,4,20,10] has 4"),
            std::string::npos);
  EXPECT_NE(message([&] { request.set_input("x", Tensor(ElementType::f32, {1, C, H})); })
                .find("input 'x' has rank 4"),
            std::string::npos);
  EXPECT_NE(message([&] { request.set_input("x", Tensor(ElementType::u8, {2, C, H, W})); })
                .find("input 'x' is u8[2,8,10,10]"),
            std::string::npos);
  EXPECT_NE(message([&] { (void)compiled.at_shapes({{"y", {1, C, H, W}}}); }).find("no input 'y'"),
            std::string::npos);
  // A model without symbolic dimensions says its shapes are fixed.
  qfuse::InferRequest fixed = qfuse::compile(conv_model().model).create_infer_request();
  EXPECT_NE(message([&] { fixed.set_input("x", random_batch(2, H, W, 1)); }).find("shapes are fixed"),
            std::string::npos);

  // Two inputs sharing 'batch' must agree on it; an input not set follows
  // the one that is.
  qfuse::ModelBuilder b;
  const auto a = b.input("a", {1, 4}, ElementType::f32, {"batch", ""});
  const auto c = b.input("c", {1, 4}, ElementType::f32, {"batch", ""});
  b.output(b.binary(qfuse::BinaryOp::add, a, c, "sum"));
  const qfuse::CompiledModel two = qfuse::compile(b.build());
  qfuse::InferRequest r = two.create_infer_request();
  r.set_input("a", Tensor(ElementType::f32, {2, 4}));
  r.set_input("c", Tensor(ElementType::f32, {3, 4}));
  EXPECT_NE(message([&] { r.infer(); }).find("dimension 'batch' is 2 in input 'a' and 3 in input 'c'"),
            std::string::npos);
  r.set_input_shapes({{"a", {5, 4}}});
  EXPECT_EQ(r.input("c").shape(), (qfuse::Shape{5, 4}));
  // Every input whose shape changes must be set at it.
  r.set_input("a", Tensor(ElementType::f32, {2, 4}));
  EXPECT_NE(message([&] { r.infer(); }).find("input 'c' was not set at its new shape [2,4]"),
            std::string::npos);

  // An input whose shape stays goes with the request to the new shapes,
  // whichever was set first.
  qfuse::ModelBuilder bs;
  const auto x = bs.input("x", {1, 4}, ElementType::f32, {"batch", ""});
  const auto scale = bs.input("scale", {1, 4});
  bs.output(bs.binary(qfuse::BinaryOp::multiply, x, scale, "y"));
  const qfuse::CompiledModel scaled = qfuse::compile(bs.build());
  for (const bool scale_first : {false, true}) {
    qfuse::InferRequest rs = scaled.create_infer_request();
    const Tensor s4 = Tensor::from_vector<float>({1, 4}, {1, 2, 3, 4});
    const Tensor x3 = Tensor::from_vector<float>({3, 4}, {1, 1, 1, 1, 2, 2, 2, 2, -1, 0, 1, 2});
    if (scale_first) rs.set_input("scale", s4);
    rs.set_input("x", x3);
    if (!scale_first) rs.set_input("scale", s4);
    rs.infer();
    EXPECT_EQ(values(rs.output(scaled.output_names()[0])),
              (std::vector<float>{1, 2, 3, 4, 2, 4, 6, 8, -1, 0, 3, 8}))
        << (scale_first ? "scale set first" : "x set first");
  }

  // max_shapes bounds what the model keeps: the least recently used goes.
  const qfuse::CompiledModel one = qfuse::compile(m.model, {.max_shapes = 1});
  qfuse::InferRequest q = one.create_infer_request();
  for (int n : {2, 3, 4}) {
    q.set_input("x", random_batch(n, H, W, static_cast<unsigned>(n)));
    q.infer();
  }
  ASSERT_EQ(one.shapes().size(), 2u);
  EXPECT_EQ(one.shapes()[1].inputs.at("x")[0], 4);
}

// Host threads, each with a request of its own, run one model at different
// shapes at once (two of them asking for each new shape together): every
// output is the one a serial run gives.
TEST(PublicApi, RequestsOfDifferentShapesRunConcurrently) {
  const ConvModel m = conv_model({"batch", "", "height", "width"});
  const qfuse::CompiledModel compiled = qfuse::compile(m.model, {.threads = 1, .max_shapes = 3});
  const std::string out = compiled.output_names()[0];
  const std::vector<Tensor> inputs = {random_batch(1, H, W, 1), random_batch(2, H, W, 2),
                                      random_batch(1, 6, 8, 3), random_batch(4, 5, 5, 4)};
  std::vector<std::vector<float>> expected;
  for (const Tensor& x : inputs) {
    qfuse::InferRequest r =
        qfuse::compile(conv_model({}, x.shape()).model, {.threads = 1}).create_infer_request();
    r.set_input("x", x);
    r.infer();
    expected.push_back(values(r.output(out)));
  }
  constexpr int kThreads = 4, kRuns = 24;
  std::vector<int> mismatches(kThreads, 0);
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        qfuse::InferRequest r = compiled.create_infer_request();
        for (int i = 0; i < kRuns; ++i) {
          const std::size_t k = static_cast<std::size_t>((i + t / 2) % static_cast<int>(inputs.size()));
          r.set_input("x", inputs[k]);
          r.infer();
          mismatches[static_cast<std::size_t>(t)] += values(r.output(out)) != expected[k];
        }
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(t)] = e.what();
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(mismatches[static_cast<std::size_t>(t)], 0) << "thread " << t;
    EXPECT_EQ(errors[static_cast<std::size_t>(t)], "") << "thread " << t;
  }
  EXPECT_LE(compiled.shapes().size(), 4u);
}

// A chain of 12 quantized convolutions, 3 channels wide (x -> FQ -> conv -> relu -> FQ -> ...).
qfuse::Model conv_chain_model() {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-kW, kW);
  qfuse::ModelBuilder b;
  auto y = b.fake_quantize(b.input("x", {1, C, H, W}), 0.0f, kInHi, 0.0f, kInHi, 256, "x_fq");
  for (int l = 0; l < 12; ++l) {
    const std::string name = "conv" + std::to_string(l);
    std::vector<float> w(C * C * 9);
    for (float& v : w) v = u(rng);
    const auto wq = b.fake_quantize(b.constant(name + ".w", Tensor::from_vector<float>({C, C, 3, 3}, w)),
                                    -kW, kW, -kW, kW, 255, name + ".w_fq");
    y = b.convolution(y, wq, std::nullopt, {.pads_begin = {1, 1}, .pads_end = {1, 1}}, name);
    y = b.fake_quantize(b.unary(qfuse::UnaryOp::relu, y, name + ".relu"), 0.0f, kInHi, 0.0f, kInHi,
                        256, name + ".q");
  }
  b.output(y);
  return b.build();
}

// Compile makes its executable ops on as many threads as it is given: the
// same ops, in the same order, with the same implementations and results as
// on one thread (the sanitizer build runs it under ThreadSanitizer).
TEST(PublicApi, CompilingOnSeveralThreadsGivesTheSameModel) {
  const qfuse::Model model = conv_chain_model();
  const Tensor x = Tensor::from_vector<float>({1, C, H, W}, random_input(3));
  for (bool fuse : {false, true}) {
    const qfuse::CompiledModel one = qfuse::compile(model, {.fuse = fuse, .threads = 1});
    const qfuse::CompiledModel two = qfuse::compile(model, {.fuse = fuse, .threads = 2});
    const auto a = one.layers(), b = two.layers();
    ASSERT_EQ(a.size(), b.size());
    ASSERT_GE(a.size(), 12u);
    for (std::size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].node, b[i].node);
      EXPECT_EQ(a[i].implementation, b[i].implementation) << a[i].node;
      EXPECT_EQ(a[i].post_ops, b[i].post_ops) << a[i].node;
    }
    qfuse::InferRequest ra = one.create_infer_request(), rb = two.create_infer_request();
    ra.set_input("x", x);
    rb.set_input("x", x);
    ra.infer();
    rb.infer();
    const std::string out = one.outputs()[0].name;
    const Tensor &ya = ra.output(out), &yb = rb.output(out);
    ASSERT_EQ(ya.size(), yb.size());
    for (std::int64_t i = 0; i < ya.size(); ++i) {
      ASSERT_EQ(ya.as_float(i), yb.as_float(i)) << (fuse ? "fused" : "unfused") << ", element " << i;
    }
  }
}

TEST(PublicApi, LayerQueryGivesTheFusedPlanAsData) {
  const ConvModel m = conv_model();
  const qfuse::CompiledModel compiled = qfuse::compile(m.model);
  const std::vector<qfuse::LayerInfo> layers = compiled.layers();
  const auto conv = std::find_if(layers.begin(), layers.end(),
                                 [](const qfuse::LayerInfo& l) { return l.precision == "int8"; });
  ASSERT_NE(conv, layers.end());
  EXPECT_EQ(conv->op, "QuantizedConvolution");
  EXPECT_EQ(conv->src_type, ElementType::u8);
  // The output FakeQuantize is the graph output: the layer writes its values
  // as f32 (round and clip as post-ops, then the output quantum).
  EXPECT_EQ(conv->dst_type, ElementType::f32);
  EXPECT_EQ(conv->macs, std::int64_t{O} * C * 9 * H * W);
  // acc * (s_in * s_w / s_out): one per-tensor scale onto the output grid,
  // then round, clip to the grid (relu included) and back to real values.
  ASSERT_EQ(conv->output_scales.size(), 1u);
  const double s_out = kOutHi / 255.0;
  const double expected = (kInHi / 255.0) * (2 * kW / 254.0) / s_out;
  EXPECT_NEAR(conv->output_scales[0], expected, expected * 1e-5);
  EXPECT_FALSE(conv->dst_zero_point.has_value());
  ASSERT_EQ(conv->post_op_list.size(), 2u) << conv->post_ops;
  const qfuse::PostOp& round = conv->post_op_list[0];
  EXPECT_EQ(round.kind, qfuse::PostOp::Kind::eltwise);
  EXPECT_EQ(round.algorithm, "round");
  EXPECT_NEAR(round.scale, s_out, s_out * 1e-6);
  const qfuse::PostOp& clip = conv->post_op_list[1];
  EXPECT_EQ(clip.algorithm, "clip");
  EXPECT_EQ(clip.alpha, 0.0f);
  EXPECT_NEAR(clip.beta, kOutHi, 1e-5);
  EXPECT_NE(conv->implementation, "reference");
}

TEST(PublicApi, ZeroCopyBindingReadsAndWritesTheHostsBuffers) {
  const ConvModel m = conv_model();
  const qfuse::CompiledModel compiled = qfuse::compile(m.model);
  const qfuse::TensorInfo in = compiled.inputs()[0], out = compiled.outputs()[0];
  std::vector<float> x = random_input(2);
  std::vector<float> y(static_cast<std::size_t>(qfuse::element_count(out.shape)), -1.0f);

  qfuse::InferRequest copying = compiled.create_infer_request();
  copying.set_input(in.name, Tensor::from_vector<float>(in.shape, x));
  copying.infer();

  qfuse::InferRequest bound = compiled.create_infer_request();
  bound.bind_input(in.name, in.type, in.shape, x.data());
  const bool zero_copy = bound.bind_output(out.name, out.type, out.shape, y.data());
  EXPECT_TRUE(zero_copy);  // the last layer writes its own buffer
  bound.infer();
  EXPECT_EQ(bound.output(out.name).raw_data(), static_cast<const void*>(y.data()));
  EXPECT_EQ(std::memcmp(y.data(), copying.output(out.name).raw_data(), y.size() * sizeof(float)), 0);
  // The input is read from the host's buffer at each inference (same storage).
  const std::vector<float> next = random_input(3);
  std::copy(next.begin(), next.end(), x.begin());
  bound.infer();
  copying.set_input(in.name, Tensor::from_vector<float>(in.shape, x));
  copying.infer();
  EXPECT_EQ(std::memcmp(y.data(), copying.output(out.name).raw_data(), y.size() * sizeof(float)), 0);
  // Wrong type or shape: an error naming the tensor.
  EXPECT_THROW(bound.bind_input(in.name, ElementType::u8, in.shape, x.data()), qfuse::InferenceError);
  EXPECT_THROW(bound.bind_output(out.name, out.type, {1, 2}, y.data()), qfuse::InferenceError);
  // Unbound, the request writes its own buffer again.
  bound.bind_output(out.name, out.type, out.shape, nullptr);
  bound.infer();
  EXPECT_NE(bound.output(out.name).raw_data(), static_cast<const void*>(y.data()));
}

TEST(PublicApi, SharedOutputBuffersAreCopiedToTheBoundBuffer) {
  // The output is a Reshape view of the FakeQuantize's buffer: not its own.
  qfuse::ModelBuilder b;
  const auto x = b.input("x", {1, 4, 2, 2});
  const auto r = b.unary(qfuse::UnaryOp::relu, x);
  b.output(b.reshape(r, {1, 16}, "flat"));
  const qfuse::CompiledModel compiled = qfuse::compile(b.build());
  std::vector<float> xs(16), ys(16, 0.0f);
  for (int i = 0; i < 16; ++i) xs[static_cast<std::size_t>(i)] = static_cast<float>(i - 8);
  qfuse::InferRequest request = compiled.create_infer_request();
  request.bind_input("x", ElementType::f32, {1, 4, 2, 2}, xs.data());
  const bool zero_copy = request.bind_output("flat", ElementType::f32, {1, 16}, ys.data());
  EXPECT_FALSE(zero_copy);
  request.infer();
  for (int i = 0; i < 16; ++i) EXPECT_EQ(ys[static_cast<std::size_t>(i)], std::max(0.0f, static_cast<float>(i - 8)));
}

TEST(PublicApi, BuilderErrorsAreGraphErrors) {
  qfuse::ModelBuilder b;
  const auto x = b.input("x", {1, 3, 8, 8});
  const auto w = b.constant("w", Tensor(ElementType::f32, {4, 5, 3, 3}));  // 5 != 3 channels
  EXPECT_THROW(b.convolution(x, w, std::nullopt), qfuse::GraphError);
  EXPECT_THROW(b.unary(qfuse::UnaryOp::relu, qfuse::ValueRef{999}), qfuse::GraphError);
  EXPECT_THROW(b.fake_quantize(x, 0.0f, 1.0f, 0.0f, 1.0f, 1), qfuse::GraphError);  // levels < 2
}

// A Tensor misused is a qfuse::Error too (TensorError), across the library
// boundary: what a host catches for every failure of the API.
TEST(PublicApi, TensorMisuseIsATensorError) {
  using qfuse::Tensor;
  EXPECT_THROW(Tensor::from_vector<float>({2}, {1.0f, 2.0f, 3.0f}), qfuse::TensorError);
  EXPECT_THROW(Tensor(qfuse::ElementType::f32, {2, -1}), qfuse::TensorError);
  const Tensor t = Tensor::from_vector<float>({2, 2}, {1.0f, 2.0f, 3.0f, 4.0f});
  EXPECT_THROW((void)t.data<std::int8_t>(), qfuse::TensorError);
  EXPECT_THROW((void)t.as_float(4), qfuse::TensorError);
  EXPECT_THROW((void)t.reshaped({3}), qfuse::TensorError);
  try {
    (void)t.data<std::uint8_t>();
    ADD_FAILURE() << "read f32 data as u8";
  } catch (const qfuse::Error& e) {
    EXPECT_NE(std::string(e.what()).find("element type is f32 (asked for u8)"), std::string::npos)
        << e.what();
  }
}

TEST(PublicApi, EmptyCompiledModelIsAnErrorNotACrash) {
  const qfuse::CompiledModel empty;
  EXPECT_TRUE(empty.layers().empty());
  EXPECT_TRUE(empty.inputs().empty());
  EXPECT_THROW(empty.create_infer_request(), qfuse::InferenceError);
}

TEST(PublicApi, OnnxImportAndErrorsAcrossTheLibraryBoundary) {
  const std::string path = QFUSE_TEST_MODEL;
  const std::vector<qfuse::OnnxInput> declared = qfuse::list_onnx_inputs(path);
  ASSERT_EQ(declared.size(), 1u);
  EXPECT_EQ(declared[0].type, "FLOAT");
  qfuse::OnnxOptions options;
  options.input_shapes[declared[0].name] = {2, 1, 28, 28};
  const qfuse::Model model = qfuse::import_onnx(path, options);
  ASSERT_EQ(model.inputs().size(), 1u);
  EXPECT_EQ(model.inputs()[0].shape, (qfuse::Shape{2, 1, 28, 28}));
  const qfuse::CompiledModel compiled = qfuse::compile(model);
  int int8_layers = 0;
  for (const qfuse::LayerInfo& l : compiled.layers()) int8_layers += l.precision == "int8";
  EXPECT_GE(int8_layers, 3);
  // The counts without a LayerInfo each agree with layers(): the int8
  // layers are the Quantized* operators (other ops run int8 too).
  const qfuse::CompiledModel::LayerCounts counts = compiled.layer_counts();
  EXPECT_EQ(counts.executable_nodes, compiled.layers().size());
  std::size_t quantized_layers = 0;
  for (const qfuse::LayerInfo& l : compiled.layers()) {
    quantized_layers += l.op.rfind("Quantized", 0) == 0 ? 1 : 0;
  }
  EXPECT_GE(quantized_layers, 3u);
  EXPECT_EQ(counts.int8_layers, quantized_layers);
  // Fused against unfused through the public Comparison.
  Tensor x(ElementType::f32, {2, 1, 28, 28});
  for (std::int64_t i = 0; i < x.size(); ++i) x.data<float>()[static_cast<std::size_t>(i)] = static_cast<float>(i % 29) / 29.0f;
  qfuse::Comparison cmp(model);
  cmp.run({{declared[0].name, x}});
  bool saw_output = false;
  for (const qfuse::TensorDiff& d : cmp.tensors()) {
    if (!d.graph_output) continue;
    saw_output = true;
    EXPECT_GT(d.cosine, 0.99) << d.name;
  }
  EXPECT_TRUE(saw_output);

  // Errors thrown inside libqfuse_onnx are caught here by their type.
  EXPECT_THROW(qfuse::import_onnx("/nonexistent/model.onnx"), qfuse::IoError);
  EXPECT_THROW(qfuse::import_onnx_bytes("\x08\x07garbage-not-a-model"), qfuse::GraphError);
  std::ifstream f(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_THROW(qfuse::import_onnx_bytes(std::string_view(bytes).substr(0, bytes.size() / 2)),
               qfuse::GraphError);
}

}  // namespace
