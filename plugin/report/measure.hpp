#pragma once
// Latency measurement shared by `qfuse bench` and the Python package's
// bench(): R requests on R threads for a wall-clock budget, each inference
// timed, and the per-node profile as medians. Uses the public API only.

#include <functional>
#include <string>
#include <vector>

#include "qfuse/qfuse.hpp"

namespace qfuse::report {

double median(std::vector<double> v);
// p in [0, 1]: the nearest-rank percentile (0: min, 1: max).
double percentile(std::vector<double> v, double p);

// The process's peak resident set (VmHWM), in MiB; 0 where /proc has none.
double peak_rss_mib();

struct LatencyOptions {
  int requests = 1;             // parallel requests, one thread each
  int threads_per_request = 1;  // OpenMP threads of each
  double seconds = 3.0;         // wall-clock budget after the warm-up
  int min_inferences = 1;       // request 0 runs at least this many
  bool per_layer = false;       // request 0 records node times
};

struct LatencyRun {
  std::vector<double> latencies_ms;  // every timed inference of every request
  double seconds = 0.0;              // wall clock of the timed part
  double first_ms = 0.0;             // request 0's warm-up inference
  // Request 0's node times with per_layer (InferRequest::node_times_us()).
  std::vector<std::vector<double>> node_times_us, staged_reorder_times_us;

  double throughput() const;  // inferences per second
};

// Creates the requests, lets `fill` set each one's inputs, runs one warm-up
// inference each, then times inferences until the budget is spent. Request 0
// runs on the calling thread; `progress` (if set) is called by it with the
// elapsed share of the budget, 0..1, after each inference.
LatencyRun measure_latency(const CompiledModel& model, const std::function<void(InferRequest&)>& fill,
                           const LatencyOptions& options,
                           const std::function<void(double)>& progress = {});

// One row of the per-node profile: a node's median time without the reorders
// it stages, or (staged_reorders) those reorders alone.
struct NodeTime {
  const LayerInfo* layer;
  double median_us;
  bool staged_reorders = false;

  std::string node() const;
  std::string op() const;
  std::string implementation() const;
  double gops() const;  // 2 * MACs per second, 0 where the node has none
};

// The rows of `layers` (CompiledModel::layers()) from a LatencyRun's node
// times, slowest first.
std::vector<NodeTime> node_medians(const std::vector<LayerInfo>& layers,
                                   const std::vector<std::vector<double>>& times,
                                   const std::vector<std::vector<double>>& staged);

}  // namespace qfuse::report
