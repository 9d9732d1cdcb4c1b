// Whole-model latency of the bundled models, fused versus unfused.

#include <benchmark/benchmark.h>

#include "plugin/api_internal.hpp"
#include "tools/common/models.hpp"

namespace {

void run_model(benchmark::State& state, bool fuse) {
  const qfuse::graph::Graph g = qfuse::tools::make_bundled_model("synthetic");
  const qfuse::CompiledModel model = qfuse::compile(g, {.fuse = fuse});
  qfuse::InferRequest request = model.create_infer_request();
  const auto inputs = qfuse::tools::random_inputs(executed_graph(model), 0);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    request.set_input(model.input_names()[i], inputs[i]);
  }
  for (auto _ : state) request.infer();
}

void BM_DefaultModelUnfused(benchmark::State& state) { run_model(state, false); }
void BM_DefaultModelFused(benchmark::State& state) { run_model(state, true); }

BENCHMARK(BM_DefaultModelUnfused)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_DefaultModelFused)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
