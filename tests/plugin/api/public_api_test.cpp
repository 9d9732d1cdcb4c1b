// The public API as a host sees it: only qfuse/*.hpp included, linked against
// the shared libraries libqfuse and libqfuse_onnx (nothing internal is
// reachable). A quantized convolution built with ModelBuilder, checked against
// naive loops written here; the structured layer query; zero-copy binding;
// ONNX import through qfuse/onnx.hpp, and errors crossing the library
// boundary as their own types.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
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
ConvModel conv_model() {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-kW, kW);
  ConvModel m;
  m.weights.resize(O * C * 9);
  m.bias.resize(O);
  for (float& w : m.weights) w = u(rng);
  for (float& b : m.bias) b = u(rng);
  qfuse::ModelBuilder b;
  const auto x = b.input("x", {1, C, H, W});
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

std::vector<float> reference(const ConvModel& m, const std::vector<float>& x) {
  std::vector<float> out(O * H * W);
  for (int o = 0; o < O; ++o) {
    for (int i = 0; i < H; ++i) {
      for (int j = 0; j < W; ++j) {
        double acc = m.bias[o];
        for (int c = 0; c < C; ++c) {
          for (int ki = 0; ki < 3; ++ki) {
            for (int kj = 0; kj < 3; ++kj) {
              const int ii = i + ki - 1, jj = j + kj - 1;
              if (ii < 0 || jj < 0 || ii >= H || jj >= W) continue;
              acc += fake_quantize(x[(c * H + ii) * W + jj], 0, kInHi, 256) *
                     fake_quantize(m.weights[((o * C + c) * 3 + ki) * 3 + kj], -kW, kW, 255);
            }
          }
        }
        out[(o * H + i) * W + j] =
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
