// fuse_dynamic_quantized_layer
//
// ONNX Runtime's dynamic format, as the importer writes it (each integer
// tensor read as f32 through a Dequantize of scale 1, zero point 0):
//   x -> DynamicQuantize -> codes, s, z
//   codes -> Dequantize -> Subtract(Dequantize(z)) --+
//   wq (s8) -> Dequantize ---------------------------- FullyConnected -> Multiply(r) -> y
// where r is a run-time scale (s times the weights' scale, one value or one
// per output channel), becomes one dynamic QuantizedFullyConnected(codes, wq,
// z, r) (see QuantizedLayerAttrs): the integer sum_k wq[n, k] * (codes[k] - z)
// that MatMulInteger computes, times r as ONNX's Mul does. When r is
// Multiply(s, constant weight scales), as ONNX Runtime writes it, the layer
// reads s and forms r itself (the same f32 product), one op less per layer.
// fuse_post_op_chain then takes the bias, GELU and residual add after it as
// usual.
#include <cmath>

#include "graph/passes/passes.hpp"
#include "graph/passes/pattern.hpp"

namespace qfuse::graph {
namespace {

constexpr std::string_view kPass = "fuse_dynamic_quantized_layer";
using namespace pattern;
namespace cp = composer;


// `v` = Dequantize(q; scale 1, zero point 0), the integers as f32: q.
std::optional<ValueId> integers_of(const Graph& g, ValueId v) {
  const auto d = dequantized(g, v);
  if (!d || d->scale[0] != 1.0f || d->zero_point[0] != 0.0f) return std::nullopt;
  return d->codes;
}

// codes -> f32 -> Subtract(z as f32) ending at `v`: codes and z (a
// one-element run-time tensor of the codes' type). nullopt otherwise.
struct RuntimeDequantize {
  ValueId codes;
  ValueId zero_point;
};
std::optional<RuntimeDequantize> match_input(const Graph& g, ValueId v) {
  const Node* sub = producer_of(g, v, OpKind::Subtract);
  if (sub == nullptr) return std::nullopt;
  const auto codes_id = integers_of(g, sub->inputs[0]);
  const auto z_id = integers_of(g, sub->inputs[1]);
  if (!codes_id || !z_id) return std::nullopt;
  const Value& codes = g.value(*codes_id);
  const Value& z = g.value(*z_id);
  if (!is_int8(codes.type) || z.type != codes.type || z.is_constant() ||
      element_count(z.shape) != 1) {
    return std::nullopt;
  }
  return RuntimeDequantize{*codes_id, *z_id};
}

// r = Multiply(s, ws) with s a run-time f32 [1] and ws f32 constants (one, or
// `channels` along the last dim): s and ws's values. nullopt otherwise.
struct ScaleProduct {
  ValueId s;
  std::vector<float> weight_scales;
};
std::optional<ScaleProduct> match_scale_product(const Graph& g, ValueId r, std::size_t channels) {
  const Node* mul = producer_of(g, r, OpKind::Multiply);
  if (mul == nullptr || mul->inputs.size() != 2) return std::nullopt;
  for (int side = 0; side < 2; ++side) {
    const Value& s = g.value(mul->inputs[static_cast<std::size_t>(side)]);
    const Value& ws = g.value(mul->inputs[static_cast<std::size_t>(1 - side)]);
    if (s.is_constant() || s.type != ElementType::f32 || element_count(s.shape) != 1) continue;
    if (!ws.is_constant() || ws.type != ElementType::f32) continue;
    const auto count = static_cast<std::size_t>(element_count(ws.shape));
    if (count != 1 && count != channels) continue;
    const auto v = ws.constant->data<float>();
    return ScaleProduct{mul->inputs[static_cast<std::size_t>(side)],
                        std::vector<float>(v.begin(), v.end())};
  }
  return std::nullopt;
}

}  // namespace

bool fuse_dynamic_quantized_layer(Graph& g, PassContext& ctx) {
  for (NodeId id : g.topological_order()) {
    const Node& layer = g.node(id);
    if (layer.kind != OpKind::FullyConnected || layer.inputs.size() != 2) continue;
    const auto x = match_input(g, layer.inputs[0]);
    if (!x) continue;
    const std::string name = layer.name;
    const auto weights = integers_of(g, layer.inputs[1]);
    if (!weights || !g.value(*weights).is_constant() ||
        g.value(*weights).type != ElementType::s8) {
      ctx.reject(kPass, name, "the weights are not s8 constants with a zero point of 0");
      continue;
    }
    const ValueId wq = *weights;
    const ValueId acc = layer.outputs[0];
    const Shape out_shape = g.value(acc).shape;
    const auto channels = static_cast<std::size_t>(out_shape.back());
    const auto next = sole_consumer(g, acc);
    const Node* mul = next ? &g.node(*next) : nullptr;
    if (mul == nullptr || mul->kind != OpKind::Multiply) {
      ctx.reject(kPass, name, "the accumulator is not multiplied by a run-time scale alone");
      continue;
    }
    const ValueId r = mul->inputs[0] == acc ? mul->inputs[1] : mul->inputs[0];
    const Value& rv = g.value(r);
    const auto r_count = static_cast<std::size_t>(element_count(rv.shape));
    if (rv.is_constant() || rv.type != ElementType::f32 ||
        (r_count != 1 && !(r_count == channels && rv.shape.back() == out_shape.back()))) {
      ctx.reject(kPass, name, "the scale after the accumulator is not a run-time f32 value per "
                              "tensor or per output channel");
      continue;
    }
    if (g.value(mul->outputs[0]).shape != out_shape) {
      ctx.reject(kPass, name, "the scale broadcasts the accumulator to another shape");
      continue;
    }

    QuantizedLayerAttrs attrs;
    attrs.geometry = NoAttrs{};
    attrs.dynamic = true;
    ValueId scale = r;
    if (auto product = match_scale_product(g, r, channels)) {
      scale = product->s;
      attrs.dynamic_weight_scales = std::move(product->weight_scales);
    }
    // Each output channel's weight sum (row of w [O, K]), for the zero
    // point's correction, so that building the layer reads no weight.
    const Tensor& w = *g.value(wq).constant;
    const auto wd = w.data<std::int8_t>();
    const std::int64_t rows = w.shape()[0], k = element_count(w.shape()) / rows;
    attrs.weight_sums.assign(static_cast<std::size_t>(rows), 0);
    for (std::int64_t i = 0; i < rows; ++i) {
      // A local sum: a store into the vector could alias the int8 codes and
      // would keep the loop scalar.
      const std::int8_t* row = wd.data() + i * k;
      std::int32_t sum = 0;
      for (std::int64_t j = 0; j < k; ++j) sum += row[j];
      attrs.weight_sums[static_cast<std::size_t>(i)] = sum;
    }
    attrs.chain.channels = static_cast<int>(channels);
    attrs.chain.dst_type = cp::DataType::f32;
    attrs.chain.anchor = cp::AnchorKind::inner_product;
    const std::vector<ValueId> inputs{x->codes, wq, x->zero_point, scale};
    Node candidate{name, OpKind::QuantizedFullyConnected, inputs, {}, attrs, false};
    if (auto reason = ctx.check_layer(g, candidate, out_shape)) {
      ctx.reject(kPass, name, "backend refuses the int8 layer: " + *reason);
      continue;
    }
    const NodeId mul_id = *next;
    const ValueId old_out = mul->outputs[0];
    const NodeId q = g.add_node(OpKind::QuantizedFullyConnected, name, inputs, attrs);
    infer_node(g, q);
    replace_value(g, old_out, g.node(q).outputs[0]);
    g.erase_node(mul_id);
    g.erase_node(id);
    ctx.log(kPass, name + " -> QuantizedFullyConnected (" +
                       std::string(to_string(g.value(x->codes).type)) +
                       " x s8, run-time zero point and " +
                       (r_count == 1 ? "scale" : "per-channel scales") +
                       (scale != r ? ", the product with the weights' scale included" : "") + ")");
    return true;
  }
  return false;
}

}  // namespace qfuse::graph
