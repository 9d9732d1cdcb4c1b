// fuse_post_op_chain
//
//   QuantizedLayer -> a -> b -> ... -> FQ(0..L-1) -> Convert(u8)  (or -> Quantize(u8))
//     ==>  QuantizedLayer[chain: ..., a, b, ..., FakeQuantize; dst u8]
//
// Walks the single-consumer chain after a quantized layer and turns each node
// into composer steps:
//   Multiply / Add / Subtract / Divide by a per-tensor or per-channel constant
//     -> Scale / Shift (x - c = x + (-c); x / c = x * (1/c); c - x = -x + c)
//   Clamp -> Clip;  Round -> Round;  Relu, LeakyRelu, Elu, Sigmoid, Tanh, Gelu,
//     HSwish, HSigmoid, Swish, Exp, Abs, Sqrt -> Eltwise
//   FakeQuantize with constant ranges -> FakeQuantize
//   Quantize and the Dequantize that alone reads it (a Q/DQ pair no layer
//     took the codes of) -> Quantize, Shift(-Z), Scale(S); S is the
//     Dequantize's, which may differ from the Quantize's with the same zero
//     points (ONNX Runtime's QOperator layers requantize with scale 1 and
//     their readers dequantize with the output's scale)
//   Add of another tensor of the same shape (a residual):
//     dequantized int8 r = (rq - Zr) * Sr -> Sum(rq, Sr) [+ Shift(-Sr * Zr)]
//     any other f32 tensor               -> Binary(add, full tensor), or after
//                                           a matrix product Sum(f32)
//   Multiply by an f32 runtime tensor of the output's shape or of one value per
//     channel (a gate), Add of a per-channel one -> Binary(mul | add)
//   Convert(u8|s8) right after a FakeQuantize whose levels are the integers of
//     that type -> the destination type (the chain ends there)
//   Any other Quantize (ONNX's QuantizeLinear) -> Quantize, the destination
//     type (the chain ends there)
// Every prefix is offered to the backend (LayerOracle); the longest one it
// accepts is fused, so a chain is never cut into something that would not run.

#include <algorithm>
#include <cmath>

#include "graph/broadcast.hpp"
#include "graph/op_info.hpp"
#include "graph/passes/passes.hpp"
#include "graph/passes/pattern.hpp"

namespace qfuse::graph {
namespace {

constexpr std::string_view kPass = "fuse_post_op_chain";
using namespace pattern;

// Every prefix of a chain is composed and offered to oneDNN, longest first
// (a longer prefix may be accepted where a shorter one is not: a final
// FakeQuantize folds the steps before it). Real chains have a few nodes; the
// bound on a layer's steps keeps a pathological one (thousands of elementwise
// nodes) from costing
// quadratic compile time. oneDNN 2.6 takes at most 32 post-ops anyway.
constexpr std::size_t kMaxChainSteps = 64;
namespace cp = composer;

struct Absorbed {
  NodeId node;
  std::optional<NodeId> dequantize;  // a Quantize's own Dequantize, taken with it
  std::vector<cp::Step> steps;
  std::vector<ValueId> externals;  // new external inputs these steps read
  std::optional<ElementType> dst_type;
};



cp::DataType to_composer(ElementType t) {
  switch (t) {
    case ElementType::s8: return cp::DataType::s8;
    case ElementType::u8: return cp::DataType::u8;
    default: return cp::DataType::f32;
  }
}

// A FakeQuantize with constant ranges per tensor or per channel: the
// composer's FakeQuantize step.
bool absorb_fake_quantize(const Graph& g, const Node& n, const Shape& shape, std::size_t axis,
                          Absorbed& a) {
  std::vector<std::vector<float>> r;
  for (std::size_t i = 1; i < 5; ++i) {
    auto v = channel_vector(g, n.inputs[i], shape, axis);
    if (!v) return false;
    r.push_back(*v);
  }
  a.steps.push_back(cp::FakeQuantize{r[0], r[1], r[2], r[3],
                                     static_cast<int>(n.attr<FakeQuantizeAttrs>().levels)});
  return true;
}

// The Dequantize that alone reads the Quantize's codes with its zero points,
// per tensor or along its axis, whatever its scale: (q - Z) * S.
const Node* dequantize_reading(const Graph& g, const Node& q) {
  const auto reader = sole_consumer(g, q.outputs[0]);
  if (!reader || g.is_graph_output(q.outputs[0])) return nullptr;
  const Node& dq = g.node(*reader);
  if (dq.kind != OpKind::Dequantize) return nullptr;
  const auto& qa = q.attr<QuantizeAttrs>();
  DequantizeAttrs d = dq.attr<DequantizeAttrs>();
  if (d.scale.size() != qa.scale.size()) return nullptr;
  d.scale = qa.scale;  // the zero points and the axis must match
  return undoes(d, qa) ? &dq : nullptr;
}

// ONNX's QuantizeLinear: the composer's Quantize step. With the Dequantize
// that alone reads it (a Q/DQ pair whose codes no layer took), that one joins
// as Shift(-Z), Scale(S) and the chain goes on in f32; otherwise the codes
// are the destination and the chain ends.
bool absorb_quantize(const Graph& g, const Node& n, std::size_t axis, Absorbed& a) {
  const auto& q = n.attr<QuantizeAttrs>();
  if (!q.per_tensor() && static_cast<std::size_t>(q.axis) != axis) return false;
  std::vector<float> zero;
  for (std::int32_t z : q.zero_point) zero.push_back(static_cast<float>(z));
  a.steps.push_back(cp::Quantize{q.scale, zero, static_cast<float>(q.code_min()),
                                 static_cast<float>(q.code_max())});
  if (const Node* dq = dequantize_reading(g, n)) {
    for (float& z : zero) z = -z;
    a.steps.push_back(cp::Shift{std::move(zero)});
    a.steps.push_back(cp::Scale{dq->attr<DequantizeAttrs>().scale});
    a.dequantize = g.value(dq->outputs[0]).producer;
    return true;
  }
  a.dst_type = q.to;
  return true;
}

// Multiply / Add / Subtract / Divide of the running value `cur` by a
// constant, a gate or a residual.
bool absorb_arithmetic(const Graph& g, const Node& n, ValueId cur, const Shape& shape,
                       std::size_t axis, int next_external, bool matrix_product, Absorbed& a) {
  const bool cur_first = n.inputs[0] == cur;
  const ValueId other = n.inputs[cur_first ? 1 : 0];
  if (g.value(other).is_constant()) {
    auto v = channel_vector(g, other, shape, axis);
    if (!v) return false;
    if (n.kind == OpKind::Multiply) {
      a.steps.push_back(cp::Scale{*v});
    } else if (n.kind == OpKind::Add) {
      a.steps.push_back(cp::Shift{*v});
    } else if (n.kind == OpKind::Subtract) {
      for (float& x : *v) x = -x;
      if (cur_first) {
        a.steps.push_back(cp::Shift{*v});
      } else {  // c - x
        a.steps.push_back(cp::Scale{{-1.0f}});
        for (float& x : *v) x = -x;
        a.steps.push_back(cp::Shift{*v});
      }
    } else {
      if (!cur_first) return false;
      for (float& x : *v) {
        if (x == 0.0f) return false;
        x = 1.0f / x;
      }
      a.steps.push_back(cp::Scale{*v});
    }
    return true;
  }
  if (g.value(other).type != ElementType::f32) return false;
  // A runtime tensor of one value per channel (squeeze-excitation's gate
  // computed from something other than this layer's output) or of the
  // output's shape: a binary post-op reading it.
  const bool full = g.value(other).shape == shape;
  bool per_channel = !full && is_per_channel(g.value(other).shape, shape, axis);
  // Where the output has size 1 outside the channel axis, the operand's 1
  // there may be a symbolic dimension at its size of the moment (a batch of
  // one): it would not be per channel at another binding.
  if (per_channel && g.has_symbolic_dims()) {
    const std::size_t offset = shape.size() - g.value(other).shape.size();
    for (std::size_t d = offset; d < shape.size(); ++d) {
      if (d != axis && shape[d] == 1) per_channel = false;
    }
  }
  if ((n.kind == OpKind::Multiply && (full || per_channel)) ||
      (n.kind == OpKind::Add && per_channel)) {
    a.steps.push_back(cp::Binary{n.kind == OpKind::Multiply ? cp::BinaryAlg::mul
                                                            : cp::BinaryAlg::add,
                                 next_external,
                                 full ? cp::Broadcast::full : cp::Broadcast::per_channel,
                                 cp::DataType::f32});
    a.externals.push_back(other);
    return true;
  }
  if (n.kind != OpKind::Add || !full) return false;
  // Residual: a dequantized int8 tensor is read directly by a sum post-op.
  if (const auto d = dequantized(g, other)) {
    const ElementType t = g.value(d->codes).type;
    if (t == ElementType::u8 || t == ElementType::s8) {
      a.steps.push_back(cp::Sum{next_external, d->scale[0], to_composer(t)});
      if (d->zero_point[0] != 0.0f) a.steps.push_back(cp::Shift{{-d->scale[0] * d->zero_point[0]}});
      a.externals.push_back(d->codes);
      return true;
    }
  }
  // Any other f32 residual: a full-tensor binary add; a sum post-op
  // instead after a matrix product, whose fast oneDNN 2.6 kernel (brgemm
  // inner product) takes binary operands only per channel or per tensor
  // (the sum reads the residual from the f32 destination, placed there
  // first or shared in place).
  if (matrix_product) {
    a.steps.push_back(cp::Sum{next_external, 1.0f, cp::DataType::f32});
  } else {
    a.steps.push_back(cp::Binary{cp::BinaryAlg::add, next_external, cp::Broadcast::full,
                                 cp::DataType::f32});
  }
  a.externals.push_back(other);
  return true;
}

// Steps for node `n` reading the running value `cur` (shape `shape`, output
// channels on `axis`), or nullopt when `n` cannot join the chain.
std::optional<Absorbed> absorb(const Graph& g, NodeId id, ValueId cur, const Shape& shape,
                               std::size_t axis, int next_external, bool matrix_product) {
  const Node& n = g.node(id);
  if (n.outputs.size() != 1 || g.value(n.outputs[0]).shape != shape) return std::nullopt;
  Absorbed a{id, std::nullopt, {}, {}, std::nullopt};
  // Round and Clamp are the composer's own steps (its rules reason about
  // them); the other unary ops are one eltwise each.
  switch (n.kind) {
    case OpKind::Round: a.steps.push_back(cp::Round{}); return a;
    case OpKind::Clamp:
      a.steps.push_back(cp::Clip{{n.attr<ClampAttrs>().lo}, {n.attr<ClampAttrs>().hi}});
      return a;
    default: break;
  }
  if (auto e = eltwise_of(n)) {
    a.steps.push_back(*e);
    return a;
  }
  bool taken = false;
  switch (n.kind) {
    case OpKind::FakeQuantize: taken = absorb_fake_quantize(g, n, shape, axis, a); break;
    case OpKind::Quantize: taken = absorb_quantize(g, n, axis, a); break;
    case OpKind::Convert: {
      const ElementType to = n.attr<ConvertAttrs>().to;
      if (to != ElementType::u8 && to != ElementType::s8) return std::nullopt;
      // Convert to u8/s8 rounds half to even and saturates: exactly the
      // primitive's store into an s8/u8 destination.
      a.dst_type = to;
      return a;
    }
    case OpKind::Multiply:
    case OpKind::Add:
    case OpKind::Subtract:
    case OpKind::Divide:
      taken = absorb_arithmetic(g, n, cur, shape, axis, next_external, matrix_product, a);
      break;
    default: break;
  }
  if (!taken) return std::nullopt;
  return a;
}

}  // namespace

bool fuse_post_op_chain(Graph& g, PassContext& ctx) {
  for (NodeId id : g.topological_order()) {
    const Node& layer = g.node(id);
    if (!is_quantized_layer(layer.kind)) continue;
    const auto& base = layer.attr<QuantizedLayerAttrs>();
    if (base.dst_type() != ElementType::f32) continue;
    const Shape shape = g.value(layer.outputs[0]).shape;
    const bool spatial = op_info(layer.kind).channels == ChannelAxis::second;
    const std::size_t axis = output_channel_axis(layer.kind, shape.size()).value_or(1);

    // Collect the longest absorbable chain.
    std::vector<Absorbed> chain;
    int externals = static_cast<int>(layer.inputs.size() - base.first_external_input());
    ValueId cur = layer.outputs[0];
    std::size_t steps = base.chain.steps.size();
    while (true) {
      auto next = sole_consumer(g, cur);
      if (!next) break;
      if (steps >= kMaxChainSteps) {
        ctx.reject(kPass, layer.name,
                   "'" + g.node(*next).name + "' cannot join the chain: it already has " +
                       std::to_string(steps) + " steps");
        break;
      }
      auto a = absorb(g, *next, cur, shape, axis, externals, !spatial);
      if (!a) break;
      externals += static_cast<int>(a->externals.size());
      steps += a->steps.size();
      cur = g.node(a->dequantize.value_or(*next)).outputs[0];
      const bool last = a->dst_type.has_value();
      chain.push_back(std::move(*a));
      if (last) break;
    }
    if (chain.empty()) continue;

    // The longest prefix the backend accepts; the refusal kept is the one of
    // the first node left out (one prefix longer than the one taken).
    std::string refused;
    for (std::size_t k = chain.size(); k > 0; --k) {
      QuantizedLayerAttrs attrs = base;
      std::vector<ValueId> inputs = layer.inputs;
      for (std::size_t i = 0; i < k; ++i) {
        attrs.chain.steps.insert(attrs.chain.steps.end(), chain[i].steps.begin(),
                                 chain[i].steps.end());
        inputs.insert(inputs.end(), chain[i].externals.begin(), chain[i].externals.end());
        if (chain[i].dst_type) {
          attrs.chain.dst_type = to_composer(*chain[i].dst_type);
        }
      }
      Node candidate{layer.name, layer.kind, inputs, {}, attrs, false};
      if (auto reason = ctx.check_layer(g, candidate, shape)) {
        refused = "'" + g.node(chain[k - 1].node).name + "' cannot join the chain: " + *reason;
        if (k == 1) ctx.reject(kPass, layer.name, refused);
        continue;
      }
      if (!refused.empty()) ctx.reject(kPass, layer.name, refused);
      const std::string name = layer.name;
      const NodeId last = chain[k - 1].dequantize.value_or(chain[k - 1].node);
      const ValueId last_out = g.node(last).outputs[0];
      std::string absorbed;
      for (std::size_t i = 0; i < k; ++i) {
        absorbed += (i ? ", " : "") + g.node(chain[i].node).name;
        if (chain[i].dequantize) absorbed += " + " + g.node(*chain[i].dequantize).name;
      }
      const NodeId fused = g.add_node(layer.kind, name, inputs, attrs);
      infer_node(g, fused);
      replace_value(g, last_out, g.node(fused).outputs[0]);
      g.erase_node(id);
      for (std::size_t i = 0; i < k; ++i) {
        g.erase_node(chain[i].node);
        if (chain[i].dequantize) g.erase_node(*chain[i].dequantize);
      }
      ctx.log(kPass, name + " absorbed " + absorbed + " (dst " +
                         std::string(to_string(attrs.dst_type())) + ")");
      return true;
    }
  }
  return false;
}

}  // namespace qfuse::graph
