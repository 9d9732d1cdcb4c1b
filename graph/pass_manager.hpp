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

// Asks the backend whether a candidate quantized-layer node (or a Softmax
// that quantizes) can run as one primitive (the plugin composes its chain and
// asks oneDNN for the primitive; the context requires one). nullopt: yes;
// otherwise the reason it cannot. The candidate is not in the graph; its
// inputs are, and `output_shape` is its output's shape.
using LayerOracle =
    std::function<std::optional<std::string>(const Graph&, const Node&, const Shape&)>;

// Why a pass left a candidate alone: plain data, for logs, dumps and tests.
struct Refusal {
  std::string pass;
  std::string node;
  std::string reason;
  bool operator==(const Refusal&) const = default;
};

class PassContext {
 public:
  PassContext(PassOptions options, LayerOracle oracle);

  const PassOptions& options() const { return options_; }
  // nullopt when the backend accepts `node`.
  std::optional<std::string> check_layer(const Graph& g, const Node& node,
                                         const Shape& output_shape) const;

  // One info line per rewrite, kept for dumps and tests.
  void log(std::string_view pass, const std::string& message);
  // A candidate left alone: the node it was about and one reason (debug
  // level). Passes run until a whole round changes nothing; the refusals of
  // that last round describe the final graph and are the ones kept.
  void reject(std::string_view pass, const std::string& node, const std::string& reason);
  // Called by the pass manager at the start of each round / end of a phase.
  void begin_round();
  void end_phase();

  const std::vector<std::string>& lines() const { return lines_; }
  std::size_t rewrites() const { return rewrites_; }
  // The refusals that still hold after the pipeline, in the order made.
  const std::vector<Refusal>& refusals() const { return refusals_; }

 private:
  PassOptions options_;
  LayerOracle oracle_;
  std::vector<std::string> lines_;
  std::size_t rewrites_ = 0;
  std::vector<Refusal> round_refusals_;
  std::vector<Refusal> refusals_;
};

using PassFunction = bool (*)(Graph&, PassContext&);

struct PassEntry {
  std::string_view name;
  PassFunction run;
};

// A phase: passes run in order, each until it changes nothing, the whole
// table again until a round changes nothing. Phases run once, in order, so a
// later phase cannot undo what an earlier one needs (a constant dequantize is
// never folded to f32 before the layer that reads it had its chance to take
// it as int8).
struct PassPhase {
  std::string_view name;
  std::span<const PassEntry> passes;
};

// The phases, in order (see graph/passes/passes.hpp).
std::span<const PassPhase> fusion_phases();

// Runs the pipeline on `graph` (which must have shapes). Returns true if
// anything changed.
bool run_passes(Graph& graph, PassContext& ctx, std::span<const PassEntry> passes);
bool run_fusion_passes(Graph& graph, PassContext& ctx);

}  // namespace qfuse::graph
