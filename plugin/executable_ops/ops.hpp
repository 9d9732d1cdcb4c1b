#pragma once
// Internal: builders of executable nodes.

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "plugin/executable_ops/quantized_layer.hpp"
#include "plugin/execution.hpp"

namespace qfuse::plugin {

// The layout of each value's buffer (plain when not given).
using LayoutOf = std::function<Layout(graph::ValueId)>;

struct F32Chain;

// A oneDNN primitive with what running it needs besides its arguments; ops
// that run equal primitives may hold one together.
struct SharedPrimitive {
  dnnl::primitive primitive;
  std::shared_ptr<const dnnl::memory::desc> scratchpad;
  std::string implementation;
};

// Eltwise primitives one compile shares among the ops that run equal ones:
// one algorithm and constants on one descriptor, made for one thread count
// (a chain of 60,000 activations holds one primitive, not one per node).
// Thread-safe: ops are made on several threads.
class EltwisePrimitives {
 public:
  struct Key {
    dnnl::algorithm alg = dnnl::algorithm::undef;
    float alpha = 0.0f;
    float beta = 0.0f;
    int threads = 0;
    std::shared_ptr<const dnnl::memory::desc> data;  // shared_desc's, compared by address
    bool operator==(const Key&) const = default;
  };
  // The primitive made for `key` before, or null.
  std::shared_ptr<const SharedPrimitive> find(const Key& key) const;
  // Keeps `made` for `key` unless another thread kept one first; returns the
  // one kept.
  std::shared_ptr<const SharedPrimitive> keep(const Key& key,
                                              std::shared_ptr<const SharedPrimitive> made);

 private:
  struct Hash {
    std::size_t operator()(const Key& k) const;
  };
  mutable std::mutex mutex_;
  std::unordered_map<Key, std::shared_ptr<const SharedPrimitive>, Hash> made_;
};

// What making one node's executable reads.
struct OpBuild {
  const graph::Graph& graph;
  const graph::Node& node;
  const dnnl::engine& engine;
  const LayoutOf& layout_of;
  const F32Chain* chain = nullptr;          // the post-ops an f32 layer absorbed
  const CompileOptions* options = nullptr;  // null: the defaults
  bool sum_in_place = false;                // a quantized layer's (make_quantized_layer)
  LayerBuildCache* layer_builds = nullptr;  // builds the fusion passes kept
  // Set when integer-only mode has no integer form for the node (why not).
  std::optional<std::string>* integer_refusal = nullptr;
  // Constants already in their op's layout (a cache entry's), by value.
  const HeldConstants* held = nullptr;
  EltwisePrimitives* eltwise_primitives = nullptr;  // null: each op makes its own

  const graph::Value& in(std::size_t i) const { return graph.value(node.inputs[i]); }
  const graph::Value& out() const { return graph.value(node.outputs[0]); }
  bool has(std::size_t i) const { return node.inputs.size() > i; }
  Layout layout(graph::ValueId v) const { return layout_of ? layout_of(v) : Layout::plain; }
  bool channels_last(graph::ValueId v) const { return layout(v) == Layout::channels_last; }
  // The descriptor of input i / the output in its buffer's layout.
  dnnl::memory::desc in_md(std::size_t i) const;
  dnnl::memory::desc out_md() const;
};

// Makes one executable, or returns null when its form does not take the node.
using MakeExecutable = std::unique_ptr<ExecutableOp> (*)(const OpBuild&);

// The node's executable: the first of its op's makers (in executable_table.cpp,
// one row per op) that takes it. Throws UnsupportedError naming the node when
// none does; oneDNN's refusals (dnnl::error) reach the caller.
std::unique_ptr<ExecutableOp> make_executable(const OpBuild& build);

// The makers, by the file that holds them.
// quantize_ops.cpp: the quantizers, each with its definition's arithmetic.
std::unique_ptr<ExecutableOp> make_fake_quantize(const OpBuild& b);
std::unique_ptr<ExecutableOp> make_quantize(const OpBuild& b);
std::unique_ptr<ExecutableOp> make_quantizing_convert(const OpBuild& b);
std::unique_ptr<ExecutableOp> make_dequantize(const OpBuild& b);
std::unique_ptr<ExecutableOp> make_dynamic_quantize(const OpBuild& b);
// reduce_mean_op.cpp: a plain f32 ReduceMean over consecutive axes.
std::unique_ptr<ExecutableOp> make_consecutive_reduce_mean(const OpBuild& b);
// layer_norm_op.cpp: LayerNorm, LayerNormQuantize and LayerNormDynamicQuantize.
std::unique_ptr<ExecutableOp> make_layer_norm(const OpBuild& b);
// attention_op.cpp: Attention on qfuse's kernel (int8 by VNNI, or f32);
// check_attention says why it cannot run a node (nullopt: it can).
std::unique_ptr<ExecutableOp> make_attention(const OpBuild& b);
std::optional<std::string> check_attention(const graph::Graph& graph, const graph::Node& node);
// gelu_op.cpp: GeluQuantize and GeluDynamicQuantize on qfuse's erf GELU
// (gelu_kernel.hpp).
std::unique_ptr<ExecutableOp> make_gelu_quantize(const OpBuild& b);
// code_ops.cpp: ops on int8 codes between layers.
std::unique_ptr<ExecutableOp> make_gate_multiply(const OpBuild& b);
std::unique_ptr<ExecutableOp> make_code_add(const OpBuild& b);
std::unique_ptr<ExecutableOp> make_lookup(const OpBuild& b);
std::unique_ptr<ExecutableOp> make_max_pool_of_codes(const OpBuild& b);
std::unique_ptr<ExecutableOp> make_dequantized_mean(const OpBuild& b);
// data_ops.cpp: data movement and conversions, any element type.
std::unique_ptr<ExecutableOp> make_copy(const OpBuild& b);
std::unique_ptr<ExecutableOp> make_concat(const OpBuild& b);
std::unique_ptr<ExecutableOp> make_resize(const OpBuild& b);
std::unique_ptr<ExecutableOp> make_slice_of_rows(const OpBuild& b);
std::unique_ptr<ExecutableOp> make_shuffle_channels(const OpBuild& b);
std::unique_ptr<ExecutableOp> make_gather(const OpBuild& b);
std::unique_ptr<ExecutableOp> make_integer_convert(const OpBuild& b);
// Elementwise binary with numpy broadcasting on both sides.
std::unique_ptr<ExecutableOp> make_broadcast_binary(const OpBuild& b);
// dnnl_ops.cpp: one oneDNN primitive. Elementwise ops, binary ops, pools and
// reorders read and write the layouts `layout_of` gives; the rest are plain.
std::unique_ptr<ExecutableOp> make_dnnl_convolution(const OpBuild& b);
std::unique_ptr<ExecutableOp> make_dnnl_deconvolution(const OpBuild& b);
std::unique_ptr<ExecutableOp> make_dnnl_fully_connected(const OpBuild& b);
std::unique_ptr<ExecutableOp> make_dnnl_matmul(const OpBuild& b);
std::unique_ptr<ExecutableOp> make_dnnl_eltwise(const OpBuild& b);
std::unique_ptr<ExecutableOp> make_dnnl_binary(const OpBuild& b);
std::unique_ptr<ExecutableOp> make_dnnl_prelu(const OpBuild& b);
std::unique_ptr<ExecutableOp> make_dnnl_batch_norm(const OpBuild& b);
std::unique_ptr<ExecutableOp> make_dnnl_pool(const OpBuild& b);
std::unique_ptr<ExecutableOp> make_dnnl_transpose(const OpBuild& b);
std::unique_ptr<ExecutableOp> make_dnnl_reorder(const OpBuild& b);
std::unique_ptr<ExecutableOp> make_dnnl_slice(const OpBuild& b);
std::unique_ptr<ExecutableOp> make_dnnl_reduce_mean(const OpBuild& b);
std::unique_ptr<ExecutableOp> make_dnnl_power(const OpBuild& b);
std::unique_ptr<ExecutableOp> make_dnnl_softmax(const OpBuild& b);
// softmax_op.cpp, on AVX-512 in plain layouts (or channels last with spatial
// dims of 1): a Softmax along the last axis (f32, or writing codes; with a
// mask), and an f32 one along an axis with positions after it. A Softmax
// with a mask or quantizing by ranges has no other kernel: make_row_softmax
// throws CompileError where it cannot run one.
std::unique_ptr<ExecutableOp> make_row_softmax(const OpBuild& b);
std::unique_ptr<ExecutableOp> make_strided_softmax(const OpBuild& b);
std::unique_ptr<ExecutableOp> make_dnnl_mean_inner_product(const OpBuild& b);

// An f32 2D deconvolution whose kernel equals its stride (no padding,
// dilation or groups, constant weights): each input pixel writes its own
// kh x kw output block, so it is a 1x1 convolution to kh * kw * OC channels
// followed by a pixel shuffle, which oneDNN runs with its 1x1 kernels instead
// of its im2col gemm (and without the gemm's kernels generated at the first
// inference). It reads and writes channels last.
bool is_shuffled_1x1_deconvolution(const graph::Graph& graph, const graph::Node& node);

// Whether qfuse's row kernel runs a Softmax with a mask or quantizing by
// ranges (the only kernel that does either): nullopt, else why not.
std::optional<std::string> check_row_softmax(const graph::Graph& graph, const graph::Node& node);

// Whether oneDNN runs a quantizing Softmax (u8 / s8 destination, output
// scale) with an implementation of its own: nullopt, else why not.
std::optional<std::string> check_quantizing_softmax(const graph::Graph& graph,
                                                    const graph::Node& node,
                                                    const dnnl::engine& engine);

}  // namespace qfuse::plugin

namespace qfuse::plugin {

// Integer-only mode: an int8 AvgPool as integer sums and a fixed-point
// 1/(K1*K2) (integer_kernels.hpp). Null, with `why` set, when the node has no
// such form (not 2D, not channels last, a 3D window, dilation).
std::unique_ptr<ExecutableOp> make_integer_avg_pool(const graph::Graph& graph,
                                                    const graph::Node& node,
                                                    const LayoutOf& layout_of, double eta,
                                                    std::string& why);

}  // namespace qfuse::plugin
