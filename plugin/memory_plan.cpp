#include "plugin/memory_plan.hpp"

#include <algorithm>
#include <numeric>

#include <spdlog/spdlog.h>

#include "composer/post_op_chain.hpp"
#include "graph/op_info.hpp"
#include "plugin/dnnl_utils.hpp"
#include "plugin/f32_post_ops.hpp"

namespace qfuse::plugin {

using graph::NodeId;
using graph::OpKind;
using graph::ValueId;

std::optional<std::size_t> dnnl_binary_first_source(const graph::Graph& g, const graph::Node& n) {
  if (!graph::is_elementwise_binary(n.kind)) return std::nullopt;
  const Shape& out = g.value(n.outputs[0]).shape;
  if (pad_rank(g.value(n.inputs[0]).shape, out.size()) == out) return 0;
  if (graph::is_commutative(n.kind) && pad_rank(g.value(n.inputs[1]).shape, out.size()) == out) {
    return 1;
  }
  return std::nullopt;
}

namespace {

std::size_t aligned(std::size_t bytes) {
  return (bytes + MemoryPlan::kAlignment - 1) / MemoryPlan::kAlignment * MemoryPlan::kAlignment;
}

// The input whose bytes the node's output may take over: the source of an
// elementwise op, the first source of oneDNN's binary primitive (the one of
// the output's shape; its destination may alias only that one) or the
// residual of an int8 layer's sum post-op. Invalid when there is none.
ValueId overwritable_input(const graph::Graph& g, const graph::Node& n) {
  if (n.outputs.size() != 1) return {};
  if (graph::is_elementwise_unary(n.kind)) return n.inputs[0];
  if (graph::is_elementwise_binary(n.kind)) {
    const std::optional<std::size_t> first = dnnl_binary_first_source(g, n);
    return first ? n.inputs[*first] : ValueId{};
  }
  if (graph::is_quantized_layer(n.kind)) {
    const auto& a = n.attr<graph::QuantizedLayerAttrs>();
    for (const composer::Step& step : a.chain.steps) {
      if (const auto* s = std::get_if<composer::Sum>(&step)) {
        return n.inputs[a.first_external_input() + static_cast<std::size_t>(s->input)];
      }
    }
  }
  return {};
}

// Which buffer each value lives in, and how long. Each value has its own
// until it joins its input's; a buffer lives from its first value's producer
// to its values' last reader. Steps are positions in the execution order.
struct Buffers {
  const graph::Graph& g;
  std::vector<std::int64_t> defined;    // by value: the step that writes it (-1: none)
  std::vector<std::int64_t> last_read;  // by value: its last reader (graph outputs: after the end)
  std::vector<std::uint32_t> root;      // by value: the value whose buffer it lives in
  std::vector<std::int64_t> last;       // by root: the buffer's last reader

  // In the arena: neither a constant nor a graph input's own buffer.
  bool in_arena(ValueId v) const {
    return !g.value(v).is_constant() && defined[root[v.index]] >= 0;
  }
  // `out` lives in `in`'s buffer, which then lives until `out`'s last reader.
  void join(ValueId out, ValueId in) {
    const std::uint32_t b = root[in.index];
    root[out.index] = b;
    last[b] = std::max(last[b], last_read[out.index]);
  }
};

// When each value is produced and last read (graph outputs: after the end),
// each in a buffer of its own.
Buffers own_buffers(const graph::Graph& g, const std::vector<NodeId>& order) {
  const std::size_t values = g.value_count();
  const auto end = static_cast<std::int64_t>(order.size());
  Buffers b{g, {}, {}, {}, {}};
  b.defined.assign(values, -1);
  b.last_read.assign(values, -1);
  for (std::int64_t k = 0; k < end; ++k) {
    const graph::Node& n = g.node(order[static_cast<std::size_t>(k)]);
    for (ValueId v : n.inputs) b.last_read[v.index] = k;
    for (ValueId v : n.outputs) b.defined[v.index] = k;
  }
  for (ValueId v : g.outputs()) b.last_read[v.index] = end;
  b.root.resize(values);
  std::iota(b.root.begin(), b.root.end(), 0u);
  b.last = b.last_read;
  return b;
}

// Views and ops writing over their input join the input's buffer.
void share_buffers(const graph::Graph& g, const std::vector<NodeId>& order,
                   const std::vector<Layout>& layouts, Buffers& buffers, MemoryPlan& plan) {
  const auto end = static_cast<std::int64_t>(order.size());
  for (std::int64_t k = 0; k < end; ++k) {
    const NodeId id = order[static_cast<std::size_t>(k)];
    const graph::Node& n = g.node(id);
    if (n.outputs.empty()) continue;
    const ValueId out = n.outputs[0];
    const graph::Value& ov = g.value(out);
    if (n.kind == OpKind::Reshape || n.kind == OpKind::Flatten) {
      // Same bytes under another shape; both stay readable.
      if (buffers.in_arena(n.inputs[0]) && g.value(n.inputs[0]).type == ov.type) {
        buffers.join(out, n.inputs[0]);
        ++plan.views;
      }
      continue;
    }
    const ValueId x = overwritable_input(g, n);
    if (!x.valid() || !buffers.in_arena(x)) continue;
    const graph::Value& xv = g.value(x);
    const std::uint32_t b = buffers.root[x.index];
    // Nothing reads the buffer after this op, and the op reads it once.
    bool ok = xv.type == ov.type && xv.shape == ov.shape &&
              layouts[x.index] == layouts[out.index] && buffers.last[b] <= k;
    ok = ok && std::count_if(n.inputs.begin(), n.inputs.end(), [&](ValueId v) {
                 return !g.value(v).is_constant() && buffers.root[v.index] == b;
               }) == 1;
    if (graph::is_quantized_layer(n.kind)) {
      // The layer writes straight into the residual's buffer only when no
      // staging comes between: int8 convolutions write channels last.
      const bool spatial = graph::op_info(n.kind).channels == graph::ChannelAxis::second;
      ok = ok && (!spatial || layouts[out.index] == Layout::channels_last);
      if (ok) plan.sum_in_place[id.index] = true;
    }
    if (!ok) continue;
    buffers.join(out, x);
    ++plan.in_place;
    spdlog::debug("compile: {} writes over '{}'", n.name, xv.name);
  }
}

// Places the buffers, largest first, at the lowest offset free throughout
// their lifetime; gives every value in the arena its buffer's offset.
void place_buffers(const graph::Graph& g, const Buffers& buffers, MemoryPlan& plan) {
  const std::size_t values = g.value_count();
  struct Buffer {
    std::uint32_t root;
    std::size_t bytes;
    std::int64_t from, to;
    std::size_t offset = 0;
  };
  std::vector<Buffer> placing;
  for (std::uint32_t v = 0; v < values; ++v) {
    if (buffers.root[v] != v || !buffers.in_arena(ValueId{v})) continue;
    const graph::Value& val = g.value(ValueId{v});
    const std::size_t bytes =
        aligned(static_cast<std::size_t>(element_count(val.shape)) * element_size(val.type));
    placing.push_back(
        {v, bytes, buffers.defined[v], std::max(buffers.last[v], buffers.defined[v])});
  }
  for (std::uint32_t v = 0; v < values; ++v) {
    if (!buffers.in_arena(ValueId{v})) continue;
    const graph::Value& val = g.value(ValueId{v});
    plan.unshared_bytes +=
        aligned(static_cast<std::size_t>(element_count(val.shape)) * element_size(val.type));
  }
  std::vector<std::size_t> by_size(placing.size());
  std::iota(by_size.begin(), by_size.end(), std::size_t{0});
  std::stable_sort(by_size.begin(), by_size.end(), [&](std::size_t a, std::size_t b) {
    return placing[a].bytes > placing[b].bytes;
  });
  std::vector<const Buffer*> placed;
  for (std::size_t i : by_size) {
    Buffer& buf = placing[i];
    std::vector<const Buffer*> live;
    for (const Buffer* p : placed) {
      if (p->from <= buf.to && buf.from <= p->to) live.push_back(p);
    }
    std::sort(live.begin(), live.end(),
              [](const Buffer* a, const Buffer* b) { return a->offset < b->offset; });
    std::size_t offset = 0;
    for (const Buffer* p : live) {
      if (offset + buf.bytes <= p->offset) break;
      offset = std::max(offset, p->offset + p->bytes);
    }
    buf.offset = offset;
    plan.arena_bytes = std::max(plan.arena_bytes, offset + buf.bytes);
    placed.push_back(&buf);
  }
  std::vector<std::int64_t> root_offset(values, MemoryPlan::kNone);
  for (const Buffer& buf : placing) root_offset[buf.root] = static_cast<std::int64_t>(buf.offset);
  for (std::uint32_t v = 0; v < values; ++v) {
    if (buffers.in_arena(ValueId{v})) plan.offset[v] = root_offset[buffers.root[v]];
  }
}

}  // namespace

MemoryPlan plan_memory(const graph::Graph& g, const std::vector<NodeId>& order,
                       const std::vector<Layout>& layouts) {
  MemoryPlan plan;
  plan.offset.assign(g.value_count(), MemoryPlan::kNone);
  plan.sum_in_place.assign(g.node_capacity(), false);
  for (ValueId v : g.inputs()) plan.offset[v.index] = MemoryPlan::kOwned;
  Buffers buffers = own_buffers(g, order);
  share_buffers(g, order, layouts, buffers, plan);
  place_buffers(g, buffers, plan);
  return plan;
}

}  // namespace qfuse::plugin
