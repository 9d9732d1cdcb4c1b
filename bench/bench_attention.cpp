// Attention as one op against the three it replaces, in one binary run: the
// block q, k, v [1, S, H, D] -> Transposes -> MatMul -> / sqrt(D) -> + mask ->
// Softmax -> MatMul -> Transpose, compiled fused with CompileOptions::
// fuse_attention on (one Attention: qfuse's kernel) and off (the scores
// matmul, the Softmax and the second matmul: oneDNN's matmuls and qfuse's
// row softmax), at 1 thread.
//   int8: u8 codes in (each Dequantize'd), the probabilities quantized onto
//         1/255, the output quantized (static QDQ, as ONNX Runtime writes it);
//   f32:  the dynamic format's float attention.
// Before timing, the two outputs are compared (int8: the same codes; f32:
// within 1e-5); a mismatch fails the benchmark and the exit code. Shapes: the
// corpus encoders' (S 16 and 64, H 4, D 16), the Fashion-MNIST ViT's at batch
// 100 (B 100, S 16) and BERT-base's (S 128 and 384, H 12, D 64). Counter GOPS: both products'
// multiply-adds x 2 per second.

#include <benchmark/benchmark.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <iostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "bench/bench_main.hpp"
#include "graph/builder.hpp"
#include "plugin/api_internal.hpp"

namespace {

using namespace qfuse;
using graph::OpKind;
using graph::ValueId;

bool g_mismatch = false;  // a case's outputs differed: the exit code says so

struct Shape4 {
  std::int64_t s, h, d, batch = 1;
};

graph::Graph attention_graph(const Shape4& a, bool quantized) {
  graph::Graph g;
  graph::Builder b(g);
  const Shape in{a.batch, a.s, a.h, a.d};
  const auto transpose = [&b](ValueId x, graph::Ints perm) {
    return b.op(OpKind::Transpose, {x}, graph::TransposeAttrs{std::move(perm)});
  };
  const auto operand = [&](const char* name, float scale, float zero_point) {
    if (!quantized) return b.input(name, in);
    return b.dequantize(b.input(name, in, ElementType::u8), {scale}, {zero_point});
  };
  const ValueId q = transpose(operand("q", 0.0085f, 120.0f), {0, 2, 1, 3});
  const ValueId k = transpose(operand("k", 0.009f, 131.0f), {0, 2, 3, 1});
  const ValueId v = transpose(operand("v", 0.008f, 126.0f), {0, 2, 1, 3});
  ValueId y = b.matmul(q, k);
  y = b.binary(OpKind::Divide, y, b.scalar(std::sqrt(static_cast<float>(a.d))));
  y = b.add(y, b.input("mask", {1, 1, 1, a.s}));
  y = b.op(OpKind::Softmax, {y}, graph::SoftmaxAttrs{.axis = -1});
  if (quantized) {
    y = b.dequantize(b.quantize(y, ElementType::u8, {1.0f / 255.0f}, {0}), {1.0f / 255.0f}, {0.0f});
  }
  y = transpose(b.matmul(y, v), {0, 2, 1, 3});
  if (quantized) y = b.quantize(y, ElementType::u8, {0.004f}, {128});
  b.output(y);
  return g;
}

struct Instance {
  Instance(CompiledModel m, std::string out)
      : model(std::move(m)), request(model.create_infer_request()), output(std::move(out)) {}
  CompiledModel model;
  InferRequest request;
  std::string output;
};

Instance make(const Shape4& a, bool quantized, bool fused) {
  const graph::Graph g = attention_graph(a, quantized);
  CompileOptions o;
  o.threads = 1;
  o.fuse_attention = fused;
  Instance in(compile(g, o), g.value(g.outputs()[0]).name);
  std::mt19937 rng(3);
  for (const char* name : {"q", "k", "v"}) {
    Tensor t(quantized ? ElementType::u8 : ElementType::f32, {a.batch, a.s, a.h, a.d});
    if (quantized) {
      std::uniform_int_distribution<int> d(0, 255);
      for (auto& x : t.data<std::uint8_t>()) x = static_cast<std::uint8_t>(d(rng));
    } else {
      std::uniform_real_distribution<float> d(-1.0f, 1.0f);
      for (auto& x : t.data<float>()) x = d(rng);
    }
    in.request.set_input(name, t);
  }
  Tensor mask(ElementType::f32, {1, 1, 1, a.s});
  for (std::int64_t j = 0; j < a.s; ++j)
    mask.data<float>()[static_cast<std::size_t>(j)] = j + 3 < a.s ? 0.0f : -10000.0f;
  in.request.set_input("mask", mask);
  return in;
}

// The fused and three-op outputs agree (int8: same codes; f32: within 1e-5).
std::string mismatch(const Shape4& a, bool quantized) {
  Instance one = make(a, quantized, true), three = make(a, quantized, false);
  one.request.infer();
  three.request.infer();
  const Tensor x = one.request.output(one.output), y = three.request.output(three.output);
  for (std::int64_t i = 0; i < x.size(); ++i) {
    if (std::fabs(x.as_float(i) - y.as_float(i)) > (quantized ? 0.0f : 1e-5f)) {
      return "element " + std::to_string(i) + ": " + std::to_string(x.as_float(i)) + " against " +
             std::to_string(y.as_float(i));
    }
  }
  return "";
}

void run(benchmark::State& state, Shape4 a, bool quantized, bool fused) {
  omp_set_num_threads(1);
  if (const std::string why = mismatch(a, quantized); !why.empty()) {
    g_mismatch = true;
    state.SkipWithError(("one op and three ops differ at " + why).c_str());
    return;
  }
  Instance in = make(a, quantized, fused);
  std::string impl;
  for (const LayerInfo& l : in.model.layers()) {
    if (l.op == "Attention" || l.op == "Softmax")
      impl += (impl.empty() ? "" : ",") + l.implementation;
  }
  state.SetLabel(impl);
  for (auto _ : state) in.request.infer();
  const double macs = 2.0 * static_cast<double>(a.batch * a.h * a.s * a.s * a.d);
  state.counters["GOPS"] =
      benchmark::Counter(2.0 * macs / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

void register_all() {
  for (const bool quantized : {true, false}) {
    for (const Shape4 a : {Shape4{16, 4, 16}, Shape4{16, 4, 16, 100}, Shape4{64, 4, 16},
                           Shape4{128, 12, 64}, Shape4{384, 12, 64}}) {
      for (const bool fused : {true, false}) {
        const std::string name = std::string(quantized ? "int8" : "f32") + "/b" +
                                 std::to_string(a.batch) + "_s" + std::to_string(a.s) + "_h" +
                                 std::to_string(a.h) + "_d" + std::to_string(a.d) +
                                 (fused ? "/one_op" : "/three_ops");
        benchmark::RegisterBenchmark(name.c_str(), run, a, quantized, fused)
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (!qfuse::bench::take_isa_flag(argc, argv)) return 2;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return g_mismatch ? 1 : 0;
}
