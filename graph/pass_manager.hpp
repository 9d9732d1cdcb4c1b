#pragma once
// The fusion pipeline: an ordered table of named passes. Each pass has the
// signature `bool pass(Graph&, PassContext&)` and returns true if and only if
// it changed the graph; the manager runs each pass until it reports no change,
// and the whole table again until a full round changes nothing.

#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "graph/graph.hpp"

namespace qfuse::graph {

struct PassOptions {
  // Numerics-changing rewrite (off by default): drop the round inside
  // FakeQuantize -> Sum -> FakeQuantize residual blocks.
  bool allow_residual_round_drop = false;
  // Verify the graph after every pass (always on in debug builds).
  bool verify_each_pass = false;
};

// Asks the backend whether a candidate quantized-layer node can run as one
// primitive. nullopt: yes; otherwise the reason it cannot. The candidate is
// not in the graph; its inputs are, and `output_shape` is its output's shape.
using LayerOracle =
    std::function<std::optional<std::string>(const Graph&, const Node&, const Shape&)>;

class PassContext {
 public:
  PassContext(PassOptions options, LayerOracle oracle);

  const PassOptions& options() const { return options_; }
  // nullopt when the backend (or, without one, the composer) accepts `node`.
  std::optional<std::string> check_layer(const Graph& g, const Node& node,
                                         const Shape& output_shape) const;

  // One info line per rewrite, kept for dumps and tests.
  void log(std::string_view pass, const std::string& message);
  // A candidate left alone, with the reason (debug level).
  void reject(std::string_view pass, const std::string& message);

  const std::vector<std::string>& lines() const { return lines_; }
  std::size_t rewrites() const { return rewrites_; }

 private:
  PassOptions options_;
  LayerOracle oracle_;
  std::vector<std::string> lines_;
  std::size_t rewrites_ = 0;
};

using PassFunction = bool (*)(Graph&, PassContext&);

struct PassEntry {
  std::string_view name;
  PassFunction run;
};

// The passes, in order (see graph/passes/passes.hpp).
std::span<const PassEntry> fusion_pipeline();

// Runs the pipeline on `graph` (which must have shapes). Returns true if
// anything changed.
bool run_passes(Graph& graph, PassContext& ctx, std::span<const PassEntry> passes);
bool run_fusion_passes(Graph& graph, PassContext& ctx);

}  // namespace qfuse::graph
