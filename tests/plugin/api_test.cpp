// The public API around inference: input checks and concurrent requests on
// one compiled model.

#include <thread>

#include <gmock/gmock.h>

#include "test_util.hpp"

namespace qfuse::test {
namespace {

using ::testing::HasSubstr;

// x[4, 32] -> FullyConnected(w[16, 32], b) -> Relu -> Multiply(scale[16]) -> y
struct SmallModel {
  graph::Graph g;
  Tensor w, b, scale;
  std::string output;

  SmallModel() {
    std::mt19937 rng(51);
    w = random_tensor({16, 32}, rng);
    b = random_tensor({16}, rng);
    scale = random_tensor({16}, rng, 0.5f, 2.0f);
    graph::Builder builder(g);
    const auto x = builder.input("x", {4, 32});
    const auto fc = builder.fully_connected(x, builder.constant("w", w), builder.constant("b", b));
    const auto y = builder.multiply(builder.relu(fc), builder.constant("scale", scale));
    builder.output(y);
    output = g.value(y).name;
  }

  // Naive expectation and tolerance for input x.
  std::pair<std::vector<double>, std::vector<double>> expected(const Tensor& x) const {
    std::vector<double> e, tol;
    for (std::int64_t r = 0; r < 4; ++r) {
      for (std::int64_t o = 0; o < 16; ++o) {
        double acc = b.data<float>()[idx(o)];
        double mag = std::fabs(acc);
        for (std::int64_t k = 0; k < 32; ++k) {
          const double t = static_cast<double>(x.data<float>()[idx(r * 32 + k)]) *
                           static_cast<double>(w.data<float>()[idx(o * 32 + k)]);
          acc += t;
          mag += std::fabs(t);
        }
        const double s = scale.data<float>()[idx(o)];
        e.push_back(std::max(acc, 0.0) * s);
        tol.push_back((1e-5 * mag + 1e-6) * s);
      }
    }
    return {e, tol};
  }
};

TEST(InferRequest, SetInputWithWrongShapeNamesTheInput) {
  SmallModel m;
  const CompiledModel model = compile(m.g);
  InferRequest request = model.create_infer_request();
  try {
    request.set_input("x", Tensor(ElementType::f32, {4, 31}));
    FAIL() << "expected InferenceError";
  } catch (const InferenceError& e) {
    EXPECT_THAT(e.what(), HasSubstr("'x'"));
    EXPECT_THAT(e.what(), HasSubstr("[4,31]"));
    EXPECT_THAT(e.what(), HasSubstr("[4,32]"));
  }
}

TEST(InferRequest, SetInputWithWrongTypeNamesTheInput) {
  SmallModel m;
  const CompiledModel model = compile(m.g);
  InferRequest request = model.create_infer_request();
  try {
    request.set_input("x", Tensor(ElementType::s8, {4, 32}));
    FAIL() << "expected InferenceError";
  } catch (const InferenceError& e) {
    EXPECT_THAT(e.what(), HasSubstr("'x'"));
    EXPECT_THAT(e.what(), HasSubstr("s8"));
  }
}

TEST(InferRequest, UnknownInputNameThrows) {
  SmallModel m;
  const CompiledModel model = compile(m.g);
  InferRequest request = model.create_infer_request();
  try {
    request.set_input("nope", Tensor(ElementType::f32, {4, 32}));
    FAIL() << "expected InferenceError";
  } catch (const InferenceError& e) {
    EXPECT_THAT(e.what(), HasSubstr("'nope'"));
    EXPECT_THAT(e.what(), HasSubstr("x"));
  }
  EXPECT_THROW(request.output("nope"), InferenceError);
}

TEST(InferRequest, ModelReportsNamesAndLayers) {
  SmallModel m;
  const CompiledModel model = compile(m.g);
  EXPECT_EQ(model.input_names(), std::vector<std::string>{"x"});
  EXPECT_EQ(model.output_names(), std::vector<std::string>{m.output});
  // Fused, the fully-connected layer takes the Relu and the scale as post-ops.
  ASSERT_EQ(model.layers().size(), 1u);
  EXPECT_EQ(model.layers()[0].post_ops, "eltwise_relu; binary_mul(per_channel)");
  EXPECT_EQ(compile(m.g, {.fuse = false}).layers().size(), 3u);
}

// Inputs and outputs start at 64-byte boundaries (kernels load whole cache
// lines), and an input starts zeroed.
TEST(InferRequest, BuffersAreCacheLineAligned) {
  SmallModel m;
  const CompiledModel model = compile(m.g);
  InferRequest request = model.create_infer_request();
  const auto address = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p); };
  Tensor& x = request.input("x");
  EXPECT_EQ(address(x.raw_data()) % 64, 0u);
  EXPECT_THAT(x.data<float>(), ::testing::Each(0.0f));
  request.infer();
  EXPECT_EQ(address(request.output(m.output).raw_data()) % 64, 0u);
}

// One compiled model, two requests on two threads with different inputs,
// many rounds: each must see exactly its own result every time.
TEST(InferRequest, TwoThreadsShareOneCompiledModel) {
  SmallModel m;
  const CompiledModel model = compile(m.g);
  std::mt19937 rng(52);
  const Tensor x0 = random_tensor({4, 32}, rng);
  const Tensor x1 = random_tensor({4, 32}, rng, -3.0f, 3.0f);
  const auto e0 = m.expected(x0);
  const auto e1 = m.expected(x1);
  std::vector<Tensor> results[2];
  auto worker = [&](int which) {
    InferRequest request = model.create_infer_request();
    request.set_threads(1);
    const Tensor& x = which == 0 ? x0 : x1;
    for (int round = 0; round < 50; ++round) {
      request.set_input("x", x);
      request.infer();
      results[which].push_back(request.output(m.output));
    }
  };
  std::thread t0(worker, 0);
  std::thread t1(worker, 1);
  t0.join();
  t1.join();
  ASSERT_EQ(results[0].size(), 50u);
  ASSERT_EQ(results[1].size(), 50u);
  for (int round = 0; round < 50; ++round) {
    EXPECT_TRUE(all_close(results[0][idx(round)], e0.first, e0.second)) << "round " << round;
    EXPECT_TRUE(all_close(results[1][idx(round)], e1.first, e1.second)) << "round " << round;
  }
}

// A model compiled for one thread runs on one, whatever the request asks
// (its primitives' scratchpads are sized for one), and gives the same result.
TEST(InferRequest, ThreadsAboveTheCompiledTeamAreCapped) {
  SmallModel m;
  const CompiledModel model = compile(m.g, {.threads = 1});
  InferRequest request = model.create_infer_request();
  request.set_threads(8);
  std::mt19937 rng(54);
  const Tensor x = random_tensor({4, 32}, rng);
  request.set_input("x", x);
  request.infer();
  const auto e = m.expected(x);
  EXPECT_TRUE(all_close(request.output(m.output), e.first, e.second));
  EXPECT_THROW(compile(m.g, {.threads = -1}), CompileError);
}

// Profiling times each executed node and changes nothing that runs; the
// fully-connected layer reports its multiply-adds (4 rows x 16 x 32).
TEST(InferRequest, ProfilingTimesEveryNodeAndKeepsResults) {
  SmallModel m;
  const CompiledModel model = compile(m.g);
  std::mt19937 rng(55);
  const Tensor x = random_tensor({4, 32}, rng);
  InferRequest plain = model.create_infer_request();
  plain.set_input("x", x);
  plain.infer();
  InferRequest profiled = model.create_infer_request();
  profiled.set_profiling(true);
  profiled.set_input("x", x);
  profiled.infer();
  profiled.infer();
  EXPECT_EQ(to_double(profiled.output(m.output)), to_double(plain.output(m.output)));
  const auto layers = model.layers();
  ASSERT_EQ(profiled.node_times_us().size(), layers.size());
  for (const auto& times : profiled.node_times_us()) {
    ASSERT_EQ(times.size(), 2u);
    for (double t : times) EXPECT_GE(t, 0.0);
  }
  EXPECT_EQ(layers[0].macs, 4 * 16 * 32);
  for (const auto& staged : profiled.staged_reorder_times_us()) {
    EXPECT_EQ(staged, std::vector<double>(2, 0.0));  // the FC stages nothing
  }
  profiled.set_profiling(false);
  EXPECT_TRUE(profiled.node_times_us().empty());
  EXPECT_TRUE(profiled.staged_reorder_times_us().empty());
}

// An int8 convolution between a plain u8 graph input and a plain u8 output
// reorders both into and out of channels last: the profile keeps that time
// apart, as part of the node's.
TEST(InferRequest, ProfilingSeparatesStagedReorders) {
  graph::Graph g;
  graph::Builder b(g);
  const auto x = b.input("x", {1, 16, 12, 12}, ElementType::u8);
  const auto xf = b.multiply(b.convert(x, ElementType::f32), b.scalar(1.0f / 64.0f));
  std::mt19937 rng(57);
  const auto w = b.fake_quantize(b.constant("w", random_tensor({16, 16, 3, 3}, rng, -0.5f, 0.5f)),
                                 -0.5f, 0.5f, -0.5f, 0.5f, 255);
  graph::ConvAttrs a{.strides = {1, 1}, .dilations = {1, 1}, .pads_begin = {1, 1},
                     .pads_end = {1, 1}, .groups = 1};
  const auto y = b.fake_quantize(b.relu(b.convolution(xf, w, std::nullopt, a, "conv")), 0.0f,
                                 4.0f, 0.0f, 255.0f, 256);
  b.output(b.convert(y, ElementType::u8, "y"));
  const CompiledModel model = compile(g);
  const auto layers = model.layers();
  ASSERT_EQ(layers.size(), 1u);
  EXPECT_EQ(layers[0].precision, "int8");
  EXPECT_EQ(layers[0].reorders, 2);
  InferRequest request = model.create_infer_request();
  request.set_profiling(true);
  for (int i = 0; i < 3; ++i) request.infer();
  ASSERT_EQ(request.staged_reorder_times_us().size(), 1u);
  const auto& staged = request.staged_reorder_times_us()[0];
  const auto& total = request.node_times_us()[0];
  ASSERT_EQ(staged.size(), 3u);
  for (std::size_t i = 0; i < staged.size(); ++i) {
    EXPECT_GT(staged[i], 0.0);
    EXPECT_LT(staged[i], total[i]);
  }
}

// The model stays usable after the graph it was compiled from is gone, and a
// copy of the model shares the plan.
TEST(CompiledModel, OutlivesItsSourceGraphAndCopies) {
  std::mt19937 rng(53);
  const Tensor x = random_tensor({4, 32}, rng);
  std::pair<std::vector<double>, std::vector<double>> e;
  std::string out;
  CompiledModel copy;
  {
    SmallModel m;
    e = m.expected(x);
    out = m.output;
    const CompiledModel model = compile(m.g);
    copy = model;
  }
  InferRequest request = copy.create_infer_request();
  request.set_input("x", x);
  request.infer();
  EXPECT_TRUE(all_close(request.output(out), e.first, e.second));
}

}  // namespace
}  // namespace qfuse::test

namespace qfuse::test {
namespace {

TEST(CompileOptions, UnknownLogLevelIsAClearError) {
  graph::Graph g;
  graph::Builder b(g);
  b.output(b.relu(b.input("x", {2, 3})));
  try {
    compile(g, {.log_level = "loud"});
    FAIL() << "expected CompileError";
  } catch (const CompileError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown log level 'loud'"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(compile(g, {.log_level = "warn"}));
}

}  // namespace
}  // namespace qfuse::test
