#include "plugin/report/measure.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <thread>

namespace qfuse::report {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

}  // namespace

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const auto i = static_cast<std::size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

double peak_rss_mib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;  // kB
  }
  return 0.0;
}

double LatencyRun::throughput() const {
  return seconds > 0.0 ? static_cast<double>(latencies_ms.size()) / seconds : 0.0;
}

LatencyRun measure_latency(const CompiledModel& model, const std::function<void(InferRequest&)>& fill,
                           const LatencyOptions& options, const std::function<void(double)>& progress) {
  const int requests = std::max(1, options.requests);
  const int threads = std::max(1, options.threads_per_request);
  LatencyRun run;
  std::vector<InferRequest> pool;
  for (int r = 0; r < requests; ++r) {
    pool.push_back(model.create_infer_request());
    pool.back().set_threads(threads);
    fill(pool.back());
    const auto t = Clock::now();
    pool.back().infer();  // warm-up
    if (r == 0) run.first_ms = ms_since(t);
  }
  if (options.per_layer) pool[0].set_profiling(true);

  std::vector<std::vector<double>> latencies(static_cast<std::size_t>(requests));
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration<double>(options.seconds);
  const auto work = [&](int r) {
    omp_set_num_threads(threads);
    auto& mine = latencies[static_cast<std::size_t>(r)];
    const std::size_t at_least = r == 0 ? static_cast<std::size_t>(std::max(1, options.min_inferences)) : 1;
    while (Clock::now() < deadline || mine.size() < at_least) {
      const auto t = Clock::now();
      pool[static_cast<std::size_t>(r)].infer();
      mine.push_back(ms_since(t));
      if (r == 0 && progress) progress(std::min(1.0, ms_since(start) / (1000.0 * options.seconds)));
    }
  };
  // Request 0 runs on this thread (whose OpenMP team is already warm), the
  // others on threads of their own.
  std::vector<std::thread> workers;
  for (int r = 1; r < requests; ++r) workers.emplace_back(work, r);
  work(0);
  for (auto& w : workers) w.join();
  run.seconds = ms_since(start) / 1000.0;
  for (const auto& l : latencies) run.latencies_ms.insert(run.latencies_ms.end(), l.begin(), l.end());
  if (options.per_layer) {
    run.node_times_us = pool[0].node_times_us();
    run.staged_reorder_times_us = pool[0].staged_reorder_times_us();
  }
  return run;
}

std::string NodeTime::node() const { return layer->node + (staged_reorders ? " (staged reorders)" : ""); }
std::string NodeTime::op() const { return staged_reorders ? "Reorder" : layer->op; }
std::string NodeTime::implementation() const {
  return staged_reorders ? "reorder" : layer->implementation;
}
double NodeTime::gops() const {
  const std::int64_t macs = staged_reorders ? 0 : layer->macs;
  return macs > 0 && median_us > 0 ? 2.0 * static_cast<double>(macs) / (median_us * 1e3) : 0.0;
}

std::vector<NodeTime> node_medians(const std::vector<LayerInfo>& layers,
                                   const std::vector<std::vector<double>>& times,
                                   const std::vector<std::vector<double>>& staged) {
  std::vector<NodeTime> rows;
  for (std::size_t i = 0; i < layers.size() && i < times.size(); ++i) {
    const double staged_us = i < staged.size() ? median(staged[i]) : 0.0;
    std::vector<double> own = times[i];
    for (std::size_t k = 0; i < staged.size() && k < own.size() && k < staged[i].size(); ++k) {
      own[k] -= staged[i][k];
    }
    rows.push_back({&layers[i], median(own)});
    if (staged_us > 0.0) rows.push_back({&layers[i], staged_us, true});
  }
  std::stable_sort(rows.begin(), rows.end(),
                   [](const NodeTime& a, const NodeTime& b) { return a.median_us > b.median_us; });
  return rows;
}

}  // namespace qfuse::report
