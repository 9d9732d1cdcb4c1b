#pragma once
// Internal: quantized layers (QuantizedConvolution / Deconvolution /
// FullyConnected / MatMul) as one oneDNN int8 primitive each.

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "composer/composer.hpp"
#include "plugin/execution.hpp"
#include "plugin/layout.hpp"

namespace qfuse::plugin {

dnnl::memory::desc layout_desc(const Shape& shape, ElementType type, Layout layout);

// What the passes' layer checks built, for compile() to reuse: the candidate
// the last check accepted for a layer is usually the node compile() builds,
// and its primitive descriptor is most of a layer's compile time. A build is
// reused only when the node, its inputs (shapes, types, the same constant
// tensors), its attributes (the chain bit for bit) and the thread count it
// was made for are all the same. Safe to use from several threads.
class LayerBuildCache {
 public:
  LayerBuildCache();
  ~LayerBuildCache();
  LayerBuildCache(const LayerBuildCache&) = delete;
  LayerBuildCache& operator=(const LayerBuildCache&) = delete;

  std::size_t reused() const;

  // The layers' compositions (composer::compose's results) by
  // composer::chain_key: each chain is composed once per compile, and ones
  // given here (a cache entry's) are not composed again.
  using Compositions = std::map<std::string, composer::ComposeResult>;
  void add_compositions(Compositions compositions);
  Compositions compositions() const;

  struct Impl;

 private:
  friend std::optional<std::string> check_quantized_layer(const graph::Graph&, const graph::Node&,
                                                          const Shape&, const dnnl::engine&,
                                                          const CompileOptions&,
                                                          LayerBuildCache*);
  friend std::unique_ptr<ExecutableOp> make_quantized_layer(
      const graph::Graph&, const graph::Node&, const dnnl::engine&, const CompileOptions&,
      const std::function<Layout(graph::ValueId)>&, bool, LayerBuildCache*,
      const HeldConstants*);
  std::unique_ptr<Impl> impl_;
};

// nullopt when the backend can run `node` (not yet in the graph) as one
// primitive; otherwise why not. Used by the fusion passes. With `builds`, an
// accepted layer's build is kept there for make_quantized_layer to reuse.
std::optional<std::string> check_quantized_layer(const graph::Graph& graph,
                                                 const graph::Node& node,
                                                 const Shape& output_shape,
                                                 const dnnl::engine& engine,
                                                 const CompileOptions& options,
                                                 LayerBuildCache* builds = nullptr);

// `layout_of(value)` gives the layout of the node's input and output buffers.
// `sum_in_place`: the output shares the buffer of the residual the sum
// post-op reads, so the residual needs no copy. `held`: weights already in
// the layout the primitive wants (a cache entry's) are used in place, not
// reordered again; any other layout is reordered from the graph's constant.
std::unique_ptr<ExecutableOp> make_quantized_layer(
    const graph::Graph& graph, const graph::Node& node, const dnnl::engine& engine,
    const CompileOptions& options, const std::function<Layout(graph::ValueId)>& layout_of,
    bool sum_in_place, LayerBuildCache* builds = nullptr, const HeldConstants* held = nullptr);

// Milliseconds this thread has spent composing post-op chains so far
// (compile() reads it before and after, for CompileTimes::composer_ms).
double composer_ms_on_this_thread();

}  // namespace qfuse::plugin
