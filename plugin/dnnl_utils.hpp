#pragma once
// Internal helpers between qfuse types and oneDNN memory descriptors.

#include <oneapi/dnnl/dnnl.hpp>

#include <memory>
#include <mutex>

#include "graph/graph.hpp"

namespace qfuse::plugin {

dnnl::memory::data_type to_dnnl(ElementType type);

// oneDNN 2.6's brgemm convolutions (forward, and the deconvolutions built on
// them) keep the weights' channel granularity of their blocking in a
// process-wide static (brg_blocking_t::last_ic_block_size, set from the
// weights' type by each primitive descriptor's init_conf, read while
// blocking): an f32 and an int8 convolution described at once on two threads
// can block each other's channels. Each convolution and deconvolution
// primitive descriptor, and each next_impl() walk over one, is made under
// this lock (recursive: the builders nest). Fixed in oneDNN 2.7.
[[nodiscard]] std::unique_lock<std::recursive_mutex> convolution_descriptor_lock();

// oneDNN's binary algorithm for an elementwise binary op (a op b), or
// algorithm::undef for any other op.
dnnl::algorithm binary_algorithm(graph::OpKind kind);

// Dense row-major strides of `dims`.
dnnl::memory::dims plain_strides(const dnnl::memory::dims& dims);

// Descriptor of a dense C-ordered tensor (Shape and memory::dims are the same type).
dnnl::memory::desc plain_desc(const Shape& shape, ElementType type);

// Descriptor viewing a dense tensor of shape `stored` through dims
// `dims[i] = stored[perm[i]]` (strides permuted accordingly).
dnnl::memory::desc permuted_desc(const Shape& stored, const std::vector<int>& perm,
                                 ElementType type);

// oneDNN counts dilation from 0 (dense); qfuse and ONNX from 1.
// One shared copy of each distinct memory descriptor among the live ones: a
// dnnl_memory_desc_t takes about 900 bytes, and a graph of 60,000 eltwise
// nodes would otherwise hold three per node. Equal descriptors (oneDNN's
// equality) give the same pointer while any holder lives. Thread-safe.
std::shared_ptr<const dnnl::memory::desc> shared_desc(const dnnl::memory::desc& md);

dnnl::memory::dims to_dnnl_dilations(const graph::Ints& dilations);

// Reorders constant data once, at compile time, on this thread alone: a
// parallel region here would leave the team's workers spinning (libgomp's
// default wait policy) while compile goes on serially, taking a core from it
// (MobileNetV2 QAT, 2 threads: one process start 60-70 -> 40 ms).
void reorder_at_compile(const dnnl::engine& engine, const dnnl::memory& src,
                        const dnnl::memory& dst);

// A constant an op holds in its own memory (`held`), given back as a tensor
// of `value`'s type and shape whose bytes `plain` describes (reorder_at_compile).
Tensor held_constant(const dnnl::engine& engine, const dnnl::memory& held,
                     const dnnl::memory::desc& plain, const graph::Value& value);

// A deconvolution whose kernel equals its stride over 2D weights [IC, OC, kh,
// kw]: no padding, dilation, output padding or groups (each output pixel
// comes from one input pixel).
bool kernel_is_stride(const graph::DeconvAttrs& a, const Shape& weights);

// Shape right-aligned to `rank` by prepending ones.
Shape pad_rank(const Shape& shape, std::size_t rank);

}  // namespace qfuse::plugin
