#pragma once
// Internal: the execution plan a CompiledModel holds and the per-request
// context its operations run in.

#include <any>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "composer/composer.hpp"
#include "composer/integer_plan.hpp"
#include "composer/post_ops_plan.hpp"
#include "graph/graph.hpp"
#include "plugin/f32_post_ops.hpp"
#include "plugin/layout.hpp"
#include "plugin/memory_plan.hpp"
#include "plugin/api_internal.hpp"

namespace qfuse::plugin {

// The tensors of one inference request, indexed by ValueId (views into the
// request's arena, see memory_plan.hpp); constants are read from the graph.
class ExecContext {
 public:
  ExecContext(const graph::Graph& graph, std::vector<Tensor>& tensors, dnnl::stream& stream,
              void* scratchpad)
      : graph_(graph), tensors_(tensors), stream_(stream), scratchpad_(scratchpad) {}

  const Tensor& in(graph::ValueId id) const {
    const graph::Value& v = graph_.value(id);
    return v.is_constant() ? *v.constant : tensors_[id.index];
  }
  Tensor& out(graph::ValueId id) { return tensors_[id.index]; }
  dnnl::stream& stream() { return stream_; }
  void* scratchpad() { return scratchpad_; }

  // State the running op keeps in this request between inferences (empty
  // before its first run), e.g. its oneDNN memory objects, so that an
  // inference only updates data handles instead of creating them.
  std::any& op_state() { return *op_state_; }
  void set_op_state(std::any* state) { op_state_ = state; }

  // A memory object of this request for descriptor `md` (a shared_desc) as
  // argument `arg`, shared by every op that asks for the same pair: ops run
  // one at a time and each points it at its buffers before it executes.
  dnnl::memory& shared_memory(const std::shared_ptr<const dnnl::memory::desc>& md, int arg,
                              const dnnl::engine& engine) {
    auto [it, made] = memories_->try_emplace({md.get(), arg});
    if (made) it->second = dnnl::memory(*md, engine, nullptr);
    return it->second;
  }
  using MemoryPool = std::map<std::pair<const void*, int>, dnnl::memory>;
  void set_memory_pool(MemoryPool* pool) { memories_ = pool; }

  // Runs `f`, a reorder the op stages around its own work (a plain
  // neighbour's layout, a residual copied into the destination). While the
  // request profiles, its time is added to *clock, so that the profile shows
  // it as a row of its own (InferRequest::staged_reorder_times_us).
  template <typename F>
  void staged(F&& f) {
    if (staged_clock_ == nullptr) {
      f();
      return;
    }
    const auto t0 = std::chrono::steady_clock::now();
    f();
    *staged_clock_ +=
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  }
  void set_staged_clock(double* clock) { staged_clock_ = clock; }

 private:
  const graph::Graph& graph_;
  std::vector<Tensor>& tensors_;
  dnnl::stream& stream_;
  void* scratchpad_;
  std::any* op_state_ = nullptr;
  MemoryPool* memories_ = nullptr;
  double* staged_clock_ = nullptr;
};

// One compiled node. Immutable after creation, so one instance serves every
// request concurrently; per-request state lives in ExecContext.
// A constant an op holds in its own layout (int8 weights reordered for their
// primitive): its oneDNN descriptor and bytes. The compiled-model cache
// stores them, and an op built from a cache entry uses them in place.
struct HeldConstant {
  dnnl::memory::desc desc;
  const void* data = nullptr;
};
// By value (ValueId index).
using HeldConstants = std::unordered_map<std::uint32_t, HeldConstant>;

// An op reads its node where the compiled model's graph holds it: the graph
// outlives its ops and gains no node after they are made (a copy each cost
// as much again as the graph: 27 MB for a 60,000-node chain).
class ExecutableOp {
 public:
  explicit ExecutableOp(const graph::Node& node) : node_(&node) {}
  virtual ~ExecutableOp() = default;
  ExecutableOp(const ExecutableOp&) = delete;
  ExecutableOp& operator=(const ExecutableOp&) = delete;

  virtual void execute(ExecContext& ctx) const = 0;
  // oneDNN's implementation name, or "reference" for qfuse's own loops.
  virtual std::string implementation() const { return "reference"; }
  virtual std::size_t scratchpad_size() const { return 0; }
  // Reorders the op runs each inference besides its own work: layouts staged
  // in and out of its primitive.
  virtual int staged_reorders() const { return 0; }
  // The fused post-op list, for logs and dumps; empty for unfused nodes.
  virtual std::string post_ops() const { return {}; }
  // A fused int8 layer's composed plan (what post_ops() prints), else null.
  virtual const composer::PostOpsPlan* plan() const { return nullptr; }
  // Integer-only mode: the integer form the layer runs, else null; and why a
  // fused layer kept its float scales (empty otherwise).
  virtual const composer::IntegerPlan* integer_plan() const { return nullptr; }
  virtual std::string integer_refusal() const { return {}; }
  // Whether the op's input `index`, a constant, is held in its primitive's
  // own layout (weights reordered once) and never read from the graph, so
  // that the compiled graph need not hold it too; and the same values plain
  // again, of `value`'s type and shape.
  virtual bool keeps_input(std::size_t) const { return false; }
  virtual Tensor plain_input(std::size_t index, const graph::Value& value) const;
  // Input `index` as the op holds it, for an input it keeps in a layout of
  // its own (see HeldConstant); nullopt otherwise.
  virtual std::optional<HeldConstant> held_input(std::size_t) const { return std::nullopt; }

  const graph::Node& node() const { return *node_; }

 private:
  const graph::Node* node_;
};

// Multiply-adds per inference of a convolution / deconvolution /
// fully-connected / matmul node (f32 or quantized); 0 for any other node.
std::int64_t layer_macs(const graph::Graph& graph, const graph::Node& node);
// The same for a node whose output has shape `out` (one not in the graph yet).
std::int64_t layer_macs(const graph::Graph& graph, const graph::Node& node, const Shape& out);

}  // namespace qfuse::plugin

namespace qfuse {

struct CompiledModel::Impl {
  graph::Graph graph;
  CompileOptions options;
  dnnl::engine engine;
  std::vector<std::unique_ptr<plugin::ExecutableOp>> ops;
  std::vector<std::string> fusion_log;
  std::vector<FusionRefusal> refusals;
  plugin::MemoryPlan memory;
  std::vector<plugin::Layout> layouts;  // by ValueId: how each activation is stored
  // By graph output: the value has a buffer of its own that a host's buffer
  // can replace (InferRequest::bind_output), not one shared with a view or
  // with an op writing over its input.
  std::vector<bool> output_owns_buffer;
  // By NodeId index: the elementwise ops an f32 layer absorbed as post-ops.
  std::unordered_map<std::uint32_t, plugin::F32Chain> f32_chains;
  // The Transposes MatMuls read their operands through, by strides.
  std::vector<AbsorbedTranspose> absorbed_transposes;
  int threads = 1;  // the team the primitives were made for
  // By op: too little work to share between threads (see compiler.cpp).
  std::vector<bool> single_threaded;
  std::size_t scratchpad_size = 0;
  // Integer-only mode: by op index, why an int8 op other than a fused layer
  // (an average pool) kept float arithmetic.
  std::unordered_map<std::size_t, std::string> integer_refusals;
  CompileTimes times;
  // Constants every reader of which keeps its own copy (keeps_input): the
  // graph holds a placeholder of their type and shape (a view of no memory,
  // which no op reads), and compiled_graph() gives the graph with them
  // restored from the op and input named here, made on first need.
  struct KeptConstant {
    graph::ValueId value;
    std::size_t op = 0, input = 0;
  };
  std::vector<KeptConstant> kept_constants;
  // Built from a cache entry: the constants already in their ops' layouts,
  // and the mapped entry they (and the graph's constants) point into.
  plugin::HeldConstants held;
  std::shared_ptr<const void> cache_entry;
  // Compiled to serve other input shapes too (compile_for_shapes): the graph
  // as the passes left it, its constants that layers hold released as in
  // `graph`, and the layers' compositions.
  std::optional<graph::Graph> passes_graph;
  std::map<std::string, composer::ComposeResult> compositions;
  mutable std::once_flag restore_once;
  mutable std::unique_ptr<graph::Graph> restored;
};

}  // namespace qfuse
