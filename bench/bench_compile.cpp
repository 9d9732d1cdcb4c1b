// Start-up cost: import, compile and time to first result of the corpus's
// largest models, and compile of generated chains of 10^3 - 10^5 nodes
// (which must grow in proportion to the node count).
//
// Each model benchmark reports its compile phases as counters (milliseconds
// per iteration): shapes, passes, composer, planning, primitives. oneDNN's
// primitive cache is emptied before each iteration, so every primitive is
// generated again as in a new process; qfuse's own caches (tie-hazard
// verdicts) stay warm after the first iteration, which a new process does
// not have (bench/peers/peers.py --startup measures whole process starts).
//
//   qfuse_bench_compile [--corpus DIR] [--isa NAME] [Google Benchmark flags]
//
// DIR defaults to the build tree's corpus; a model missing from it is left
// out with a note on stderr.

#include <benchmark/benchmark.h>

#include <oneapi/dnnl/dnnl.hpp>

#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "bench/bench_main.hpp"
#include "graph/builder.hpp"
#include "graph/onnx/importer.hpp"
#include "plugin/api_internal.hpp"
#include "tools/common/models.hpp"

namespace {

namespace fs = std::filesystem;
using qfuse::CompiledModel;
using qfuse::CompileTimes;
using qfuse::graph::Graph;

// The corpus's real networks, largest first.
const char* const kModels[] = {
    "ppocrv4_det_qdq",           "torch_qat_mobilenet_v3_large", "torch_qat_mobilenet_v3_small",
    "ppocrv4_rec_qdq",           "torch_qat_efficientnet_b0",    "torch_qat_mobilenet_v2",
    "torch_qat_shufflenet_v2",   "ppocr_cls_qdq",
};

void set_phase_counters(benchmark::State& state, const CompileTimes& sum) {
  const auto per_iteration = [&](double ms) {
    return benchmark::Counter(ms, benchmark::Counter::kAvgIterations);
  };
  state.counters["shapes_ms"] = per_iteration(sum.shapes_ms);
  state.counters["passes_ms"] = per_iteration(sum.passes_ms);
  state.counters["composer_ms"] = per_iteration(sum.composer_ms);
  state.counters["planning_ms"] = per_iteration(sum.planning_ms);
  state.counters["primitives_ms"] = per_iteration(sum.primitives_ms);
}

void accumulate(CompileTimes& sum, const CompileTimes& t) {
  sum.shapes_ms += t.shapes_ms;
  sum.passes_ms += t.passes_ms;
  sum.composer_ms += t.composer_ms;
  sum.planning_ms += t.planning_ms;
  sum.primitives_ms += t.primitives_ms;
}

// Empties oneDNN's primitive cache (outside the timing).
void forget_primitives(benchmark::State& state) {
  state.PauseTiming();
  const int capacity = dnnl::get_primitive_cache_capacity();
  dnnl::set_primitive_cache_capacity(0);
  dnnl::set_primitive_cache_capacity(capacity);
  state.ResumeTiming();
}

void run_first_inference(const CompiledModel& model) {
  qfuse::InferRequest request = model.create_infer_request();
  const auto inputs = qfuse::tools::random_inputs(executed_graph(model), 0);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    request.set_input(model.input_names()[i], inputs[i]);
  }
  request.infer();
}

// Reading and importing the ONNX file alone.
void bm_import(benchmark::State& state, const fs::path& file) {
  for (auto _ : state) {
    Graph g = qfuse::onnx::import_file(file);
    benchmark::DoNotOptimize(g);
  }
}

// compile() of an imported graph (fused, the thread count of the process).
void bm_compile(benchmark::State& state, const fs::path& file) {
  const Graph g = qfuse::onnx::import_file(file);
  CompileTimes sum;
  for (auto _ : state) {
    forget_primitives(state);
    const CompiledModel model = qfuse::compile(g, {.fuse = true});
    accumulate(sum, model.compile_times());
  }
  set_phase_counters(state, sum);
}

// What a process does before its first result: import, compile, one request,
// one inference.
void bm_first_result(benchmark::State& state, const fs::path& file) {
  CompileTimes sum;
  for (auto _ : state) {
    forget_primitives(state);
    const Graph g = qfuse::onnx::import_file(file);
    const CompiledModel model = qfuse::compile(g, {.fuse = true});
    run_first_inference(model);
    accumulate(sum, model.compile_times());
  }
  set_phase_counters(state, sum);
}

// x -> FakeQuantize(u8) -> 3x3 conv (FakeQuantized weights) -> FakeQuantize(u8)
// -> n Relus -> y: the layer fuses, the chain runs in place.
Graph relu_chain(int n) {
  Graph g;
  qfuse::graph::Builder b(g);
  const std::int64_t c = 16;
  qfuse::graph::ValueId y = b.fake_quantize(b.input("x", {1, c, 32, 32}), 0.0f, 2.55f, 0.0f,
                                            2.55f, 256, "x.q");
  std::vector<float> w(static_cast<std::size_t>(c * c * 9));
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i % 17) / 16.0f - 0.5f;
  const qfuse::graph::ValueId wq = b.fake_quantize(b.constant("w", {c, c, 3, 3}, w), -0.5f, 0.5f,
                                                   -0.5f, 0.5f, 255, "w.q");
  const qfuse::graph::ConvAttrs attrs{.strides = {1, 1}, .dilations = {1, 1},
                                      .pads_begin = {1, 1}, .pads_end = {1, 1}, .groups = 1};
  y = b.convolution(y, wq, std::nullopt, attrs, "conv");
  y = b.fake_quantize(y, 0.0f, 2.55f, 0.0f, 2.55f, 256, "conv.q");
  for (int i = 0; i < n; ++i) y = b.relu(y);
  b.output(y);
  return g;
}

void bm_relu_chain(benchmark::State& state) {
  const Graph g = relu_chain(static_cast<int>(state.range(0)));
  CompileTimes sum;
  for (auto _ : state) {
    const CompiledModel model = qfuse::compile(g, {.fuse = true});
    accumulate(sum, model.compile_times());
  }
  set_phase_counters(state, sum);
  state.SetComplexityN(state.range(0));
}

fs::path take_corpus_flag(int& argc, char** argv) {
#ifdef QFUSE_CORPUS_DIR
  fs::path dir = QFUSE_CORPUS_DIR;
#else
  fs::path dir;
#endif
  int out = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--corpus" && i + 1 < argc) {
      dir = argv[++i];
    } else if (arg.starts_with("--corpus=")) {
      dir = arg.substr(9);
    } else {
      argv[out++] = argv[i];
    }
  }
  argc = out;
  argv[argc] = nullptr;
  return dir;
}

}  // namespace

int main(int argc, char** argv) {
  if (!qfuse::bench::take_isa_flag(argc, argv)) return 2;
  const fs::path corpus = take_corpus_flag(argc, argv);
  for (const char* name : kModels) {
    const fs::path file = corpus / (std::string(name) + ".onnx");
    if (!fs::exists(file)) {
      std::cerr << "note: " << file.string() << " not found; " << name << " left out\n";
      continue;
    }
    const std::string prefix = std::string(name) + "/";
    benchmark::RegisterBenchmark((prefix + "import").c_str(), bm_import, file)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
    benchmark::RegisterBenchmark((prefix + "compile").c_str(), bm_compile, file)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
    benchmark::RegisterBenchmark((prefix + "first_result").c_str(), bm_first_result, file)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  }
  benchmark::RegisterBenchmark("relu_chain/compile", bm_relu_chain)
      ->RangeMultiplier(10)
      ->Range(1000, 100000)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime()
      ->Complexity(benchmark::oN);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
