// compile()'s layout plan: which activations are stored channels last.

#include "plugin/layout_plan.hpp"

#include <algorithm>
#include <numeric>
#include <optional>

#include "graph/op_info.hpp"
#include "plugin/executable_ops/ops.hpp"
#include "plugin/memory_plan.hpp"

namespace qfuse::plugin {
namespace {

bool is_spatial_quantized(graph::OpKind kind) {
  return graph::is_quantized_layer(kind) &&
         graph::op_info(kind).channels == graph::ChannelAxis::second;
}

// Ops that run on channels-last buffers as well as plain ones, and which of
// their operands must then share one layout: elementwise ops, pools, channel
// shuffles and nearest Resize (input and output), Concat and CodeAdd (all of them), binary ops (the
// operands of the output's shape and the output; a broadcast operand is read
// plain). Convert and Slice (reorders, or the quantizing loop) take any
// layouts; int8 convolutions read and write either (staging the other), their
// full-tensor post-op operands too.
//
// same_layout_group: the operands of `n` that must share the output's layout,
// with the output; empty when `n` imposes nothing or cannot run channels last.
std::vector<graph::ValueId> same_layout_group(const graph::Graph& g, const graph::Node& n) {
  using graph::OpKind;
  const Shape& out = g.value(n.outputs[0]).shape;
  if (graph::is_elementwise_unary(n.kind) || n.kind == OpKind::MaxPool ||
      n.kind == OpKind::AvgPool || n.kind == OpKind::Lookup || n.kind == OpKind::GateMultiply ||
      n.kind == OpKind::ShuffleChannels ||
      (n.kind == OpKind::Resize &&
       n.attr<graph::ResizeAttrs>().mode == graph::ResizeMode::nearest)) {
    return {n.inputs[0], n.outputs[0]};
  }
  if (n.kind == OpKind::Concat || n.kind == OpKind::CodeAdd) {
    std::vector<graph::ValueId> group(n.inputs.begin(), n.inputs.end());
    group.push_back(n.outputs[0]);
    return group;
  }
  if (const auto first = plugin::dnnl_binary_first_source(g, n)) {
    // make_binary describes a source of the output's very shape in its
    // buffer's layout and a rank-padded or broadcast one plain: the output
    // shares a layout with the first only when that is the former.
    if (g.value(n.inputs[*first]).shape != out) return {};
    std::vector<graph::ValueId> group{n.outputs[0]};
    for (graph::ValueId v : n.inputs) {
      if (g.value(v).shape == out) group.push_back(v);
    }
    return group;
  }
  return {};
}

// `n` reads or writes `v` in either layout.
bool takes_channels_last(const graph::Graph& g, const graph::Node& n, graph::ValueId v) {
  using graph::OpKind;
  if (is_spatial_quantized(n.kind)) return true;
  // An f32 convolution with constant weights, on its source and destination.
  if (n.kind == OpKind::Convolution && g.value(n.inputs[1]).is_constant() &&
      g.value(n.inputs[0]).type == ElementType::f32) {
    return v == n.inputs[0] || v == n.outputs[0];
  }
  if (plugin::is_shuffled_1x1_deconvolution(g, n)) return v == n.inputs[0] || v == n.outputs[0];
  if (n.kind == OpKind::Slice) return true;  // a reorder from a view, any layouts
  // Sums over the pixels in either layout; one pixel out.
  if (n.kind == OpKind::MeanInnerProduct) return true;
  if (n.kind == OpKind::Convert) {
    // The s32 and s64 loops are plain.
    const ElementType from = g.value(n.inputs[0]).type;
    return n.attr<graph::ConvertAttrs>().to != ElementType::s32 && from != ElementType::s32 &&
           from != ElementType::s64;
  }
  // Either side, in either layout: a reorder writes its codes as f32 in the
  // output's layout when the two differ (make_dequantize).
  if (n.kind == OpKind::Dequantize) return g.value(n.inputs[0]).type != ElementType::s32;
  // Either side, per tensor (QuantizeOp reads and writes either layout).
  if (n.kind == OpKind::Quantize) return n.attr<graph::QuantizeAttrs>().per_tensor();
  const auto group = same_layout_group(g, n);
  return std::find(group.begin(), group.end(), v) != group.end();
}

// Spatial dims all 1: both layouts are the same bytes.
bool layout_free(const Shape& s) {
  return std::all_of(s.begin() + 2, s.end(), [](std::int64_t d) { return d == 1; });
}

}  // namespace

// Activations (rank 3 to 5, f32 / u8 / s8) whose producer and readers all take
// channels last are stored so (any whose spatial dims are all 1 whenever its
// producer takes it: nobody can tell), the layout oneDNN's int8 convolutions want:
// the data then crosses no reorder between them and the elementwise ops, pools
// and quantizations around them. A group of operands that must share a layout
// but does not is made plain, repeated until nothing changes. Graph inputs
// and outputs are plain.
std::vector<plugin::Layout> plan_layouts(const graph::Graph& g) {
  std::vector<plugin::Layout> layouts(g.value_count(), plugin::Layout::plain);
  for (std::uint32_t i = 0; i < g.value_count(); ++i) {
    const graph::ValueId id{i};
    const graph::Value& v = g.value(id);
    if (v.shape.size() < 3 || v.shape.size() > 5) continue;
    if (v.type != ElementType::u8 && v.type != ElementType::s8 && v.type != ElementType::f32) {
      continue;
    }
    if (!v.producer.valid() || g.is_graph_output(id)) continue;
    const graph::Node& p = g.node(v.producer);
    if (p.erased || !takes_channels_last(g, p, id)) continue;
    bool ok = layout_free(v.shape);
    if (!ok) {
      ok = true;
      for (graph::NodeId c : g.consumers(id)) ok = ok && takes_channels_last(g, g.node(c), id);
    }
    if (ok) layouts[i] = plugin::Layout::channels_last;
  }
  // The groups join into classes of values that share one layout; a class
  // with a plain member is plain throughout (what making each disagreeing
  // group plain until nothing changes reaches, in one pass over the graph).
  std::vector<std::uint32_t> parent(g.value_count());
  std::iota(parent.begin(), parent.end(), 0U);
  const auto find = [&](std::uint32_t v) {
    while (parent[v] != v) v = parent[v] = parent[parent[v]];
    return v;
  };
  for (std::uint32_t i = 0; i < g.node_capacity(); ++i) {
    const graph::Node& n = g.node(graph::NodeId{i});
    if (n.erased || n.outputs.empty()) continue;
    std::optional<std::uint32_t> first;
    for (graph::ValueId v : same_layout_group(g, n)) {
      if (layout_free(g.value(v).shape)) continue;
      if (!first) {
        first = find(v.index);
      } else {
        parent[find(v.index)] = *first;
      }
    }
  }
  std::vector<bool> plain(g.value_count(), false);
  for (std::uint32_t v = 0; v < g.value_count(); ++v) {
    if (layouts[v] == plugin::Layout::plain) plain[find(v)] = true;
  }
  for (std::uint32_t v = 0; v < g.value_count(); ++v) {
    if (plain[find(v)]) layouts[v] = plugin::Layout::plain;
  }
  return layouts;
}

}  // namespace qfuse::plugin
