#pragma once
// Internal: where each value of an execution plan lives during an inference.
//
// Graph inputs own their buffers (the host fills them). Every other value is
// a view into one arena per request, at an offset chosen by liveness: two
// values share bytes only when no op runs while both are live. A value may
// also take over its input's bytes outright: Reshape and Flatten view their
// input (no copy); an elementwise op, a full-shape binary op and an int8
// layer's sum post-op write over an input that nothing reads afterwards.

#include <cstdint>
#include <optional>
#include <vector>

#include "graph/graph.hpp"
#include "plugin/layout.hpp"

namespace qfuse::plugin {

struct MemoryPlan {
  static constexpr std::int64_t kOwned = -1;  // a graph input's own buffer
  static constexpr std::int64_t kNone = -2;   // constants and unused values
  static constexpr std::size_t kAlignment = 64;

  std::vector<std::int64_t> offset;    // by ValueId: arena offset, kOwned or kNone
  std::vector<bool> sum_in_place;      // by NodeId: the layer writes over its residual
  std::size_t arena_bytes = 0;
  std::size_t unshared_bytes = 0;      // the same values, one buffer each
  int views = 0;                       // Reshape / Flatten outputs viewing their input
  int in_place = 0;                    // ops writing over their input
};


// The operand an elementwise binary op gives oneDNN's binary primitive as its
// first source, which must have the output's shape (ranks right-aligned; a
// commutative op may swap its operands), or nullopt when neither can: then a
// loop broadcasts both. make_binary, the memory plan and compile's layout
// groups all read it.
std::optional<std::size_t> dnnl_binary_first_source(const graph::Graph& g, const graph::Node& n);

// `order` is the execution order, `layouts` each value's buffer layout.
MemoryPlan plan_memory(const graph::Graph& g, const std::vector<graph::NodeId>& order,
                       const std::vector<Layout>& layouts);

}  // namespace qfuse::plugin
