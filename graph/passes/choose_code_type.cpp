// choose_code_type
//
//   x -> Quantize(u8, zp 128) -> Dequantize(s, 128)  ==>  x -> Quantize(s8, zp 0) -> Dequantize(s, 0)
//   x -> Quantize(s8, zp z)   -> Dequantize(s, z)    ==>  x -> Quantize(u8, zp z + 128) -> Dequantize(s, z + 128)
//
// The stored codes of a Q/DQ pair (DESIGN.md's storage): s8 with zero point 0
// for a symmetric grid of 256 levels, u8 otherwise. Both rewrites shift every
// code by 128 and the zero point with it, so each dequantized value is the
// same, ties included: saturate(round(x / s) + z) - 128 is saturate(round(x /
// s) + z - 128) onto the shifted bounds. A layer then reads s8 without a
// source zero point (oneDNN 2.6's brgconv drops to jit_int8 with one on a
// padded convolution), or u8 with its zero point.
// Preconditions: every reader of the codes is a Dequantize that undoes the
// Quantize (its codes are no graph output and feed nothing else); per-tensor
// or per-channel zero points all 128 (u8, 256 levels) or all non-zero (s8).

#include <algorithm>

#include "graph/passes/passes.hpp"
#include "graph/passes/pattern.hpp"

namespace qfuse::graph {
namespace {

constexpr std::string_view kPass = "choose_code_type";
using namespace pattern;

// The type the codes of `q` are better stored as, or nullopt to keep them.
std::optional<ElementType> better_type(const QuantizeAttrs& q) {
  const auto all = [&](auto pred) {
    return std::all_of(q.zero_point.begin(), q.zero_point.end(), pred);
  };
  if (q.to == ElementType::u8 && q.levels == 256 && all([](std::int32_t z) { return z == 128; })) {
    return ElementType::s8;
  }
  if (q.to == ElementType::s8 && all([](std::int32_t z) { return z != 0; })) return ElementType::u8;
  return std::nullopt;
}

bool read_only_by_its_dequantizes(const Graph& g, const Node& q) {
  if (g.is_graph_output(q.outputs[0])) return false;
  const auto readers = g.consumers(q.outputs[0]);
  if (readers.empty()) return false;
  return std::all_of(readers.begin(), readers.end(), [&](NodeId r) {
    const Node& dq = g.node(r);
    return dq.kind == OpKind::Dequantize &&
           undoes(dq.attr<DequantizeAttrs>(), q.attr<QuantizeAttrs>());
  });
}

}  // namespace

bool choose_code_type(Graph& g, PassContext& ctx) {
  for (NodeId id : g.topological_order()) {
    const Node& q = g.node(id);
    if (q.kind != OpKind::Quantize) continue;
    const auto to = better_type(q.attr<QuantizeAttrs>());
    if (!to || !read_only_by_its_dequantizes(g, q)) continue;
    const std::int32_t shift = *to == ElementType::s8 ? -128 : 128;
    QuantizeAttrs qa = q.attr<QuantizeAttrs>();
    qa.to = *to;
    for (std::int32_t& z : qa.zero_point) z += shift;
    const std::string name = q.name, model_name = g.value(q.outputs[0]).name;
    const std::vector<NodeId> readers = g.consumers(q.outputs[0]);
    // The codes keep the model's name with their type as a suffix (qfuse
    // compare maps them back onto the model's codes by it).
    const ValueId codes = emit(g, OpKind::Quantize, name + "/to_" + std::string(to_string(*to)),
                               {g.node(id).inputs[0]}, qa);
    g.value(codes).name = model_name + "/to_" + std::string(to_string(*to));
    for (NodeId r : readers) {
      const Node dq = g.node(r);
      DequantizeAttrs da = dq.attr<DequantizeAttrs>();
      for (float& z : da.zero_point) z += static_cast<float>(shift);
      const ValueId y = emit(g, OpKind::Dequantize, dq.name, {codes}, std::move(da));
      replace_value(g, dq.outputs[0], y);
      g.erase_node(r);
    }
    g.erase_node(id);
    ctx.log(kPass, name + " stores its codes as " + std::string(to_string(*to)) +
                       " (zero point shifted by " + std::to_string(shift) + ")");
    return true;
  }
  return false;
}

}  // namespace qfuse::graph
