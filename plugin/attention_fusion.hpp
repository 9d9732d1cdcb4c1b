#pragma once
// Internal: attention's scores matmul, its Softmax and the probabilities-
// times-values matmul as one Attention node (graph/ops.hpp's AttentionAttrs),
// which qfuse's kernel runs a few query rows at a time with the rows' scores
// in L1 (plugin/executable_ops/attention_op.cpp).
//
// Planning runs it after the f32 layers took their post-ops and the matmuls
// their Transposes (f32_post_ops.hpp), on the two forms transformers come in:
//   int8 (static QDQ): QuantizedMatMul (q, k; f32 out, a per-tensor scale)
//     -> quantizing Softmax [+ mask] -> QuantizedMatMul (codes, v; a
//     per-tensor scale, at most a linear post-op);
//   f32 (ONNX Runtime's dynamic format): MatMul (q, k) [/ c or * c, a scalar
//     post-op] -> Softmax [+ mask] -> MatMul (p, v), no post-ops.
// Each value between them must have no other reader. A candidate the kernel
// cannot run (its CPU, a head size, a layout) keeps its three ops, with the
// reason in the log.

#include <string>
#include <unordered_map>
#include <vector>

#include "graph/graph.hpp"
#include "plugin/f32_post_ops.hpp"

namespace qfuse::plugin {

void fuse_attention(graph::Graph& g, std::unordered_map<std::uint32_t, F32Chain>& chains,
                    std::vector<std::string>& log);

}  // namespace qfuse::plugin
