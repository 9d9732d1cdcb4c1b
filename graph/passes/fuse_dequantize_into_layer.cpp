// fuse_dequantize_into_layer
//
//   xq (u8|s8) -> Dequantize(Sx, Zx) -------+
//   wq (s8)    -> Dequantize(Sw[oc], 0) ----- layer(+b) -> y
//     ==>  QuantizedLayer(xq, wq, b / (Sx * Sw[oc]); src zero point Zx,
//                         chain: Scale(Sx * Sw[oc]))
//
// conv(Sx * (xq - Zx), Sw[oc] * wq) + b = Sx * Sw[oc] * (conv(xq - Zx, wq) + b / (Sx * Sw[oc])).
// The bias moves into accumulator units (oneDNN 2.x adds it before the output
// scales); when some Sx * Sw[oc] is 0 it stays a Shift after the Scale instead.
// Preconditions: Sx and Zx per tensor, Zx an integer in the storage type's
// range; Sw per tensor or per output channel; b constant; the backend accepts
// the candidate (LayerOracle).
//
// The second form is a squeeze-excitation's fc1 or a classifier: the export
// quantizes nothing between the mean of P pixels and the layer, so its input
// (S / P - Zx) * Sx, with S the channel sums of the codes, lies on no 8-bit
// grid. It is linear in S, so sum_k wq[oc, k] * (S[k] - Zx * P) is an exact
// integer and the layer is that integer times Sx * Sw[oc] / P plus b, which
// MeanInnerProduct computes (in int64, scaled once in double); a Relu read by
// nothing else becomes its clamp at 0. The unfused layer rounds the mean and
// each product to f32, so the two differ by f32 roundings, far below a step of
// the next quantization. Preconditions as above, the weights per output
// channel of a layer that reads nothing but the mean (a 1x1 kernel, no groups).

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <variant>

#include "graph/passes/passes.hpp"
#include "graph/op_info.hpp"
#include "graph/passes/pattern.hpp"

namespace qfuse::graph {
namespace {

constexpr std::string_view kPass = "fuse_dequantize_into_layer";
using namespace pattern;

// The dequantize of u8/s8 codes ending at `v`, with one zero point (all an
// int8 layer's source and weights take) and its scale per tensor or along
// `axis`.
std::optional<Dequantized> match_dequantize(const Graph& g, ValueId v, std::size_t axis) {
  auto d = dequantized(g, v, axis);
  if (!d || d->zero_point.size() != 1) return std::nullopt;
  const ElementType t = g.value(d->codes).type;
  if (t != ElementType::u8 && t != ElementType::s8) return std::nullopt;
  return d;
}


// `v` is computed from a constant alone (weights and their dequantize:
// Dequantize, Convert, Subtract, Multiply, Transpose, Reshape of it).
bool from_constant(const Graph& g, ValueId v) {
  for (int depth = 0; depth < 8; ++depth) {
    if (g.value(v).is_constant()) return true;
    const NodeId p = g.value(v).producer;
    if (!p.valid()) return false;
    const Node& n = g.node(p);
    const bool step = n.kind == OpKind::Dequantize || n.kind == OpKind::Convert ||
                      n.kind == OpKind::Subtract ||
                      n.kind == OpKind::Multiply || n.kind == OpKind::Transpose ||
                      n.kind == OpKind::Reshape;
    if (!step) return false;
    for (std::size_t i = 1; i < n.inputs.size(); ++i) {
      if (!g.value(n.inputs[i]).is_constant()) return false;
    }
    v = n.inputs[0];
  }
  return false;
}

// `v` comes, through data movement, from a FakeQuantize with per-tensor ranges
// or a per-tensor Quantize.
bool quantized_per_tensor(const Graph& g, ValueId v) {
  for (int depth = 0; depth < 8; ++depth) {
    const NodeId p = g.value(v).producer;
    if (!p.valid()) return false;
    const Node& n = g.node(p);
    if (n.kind == OpKind::FakeQuantize) return has_per_tensor_ranges(g, n);
    if (n.kind == OpKind::Quantize) return n.attr<QuantizeAttrs>().per_tensor();
    if (!moves_data(n)) return false;
    v = n.inputs[0];
  }
  return false;
}

bool in_type_range(float z, ElementType t) {
  return is_near_integer(z, 1e-4) && (t == ElementType::u8 ? z >= 0.0f && z <= 255.0f
                                                      : z >= -128.0f && z <= 127.0f);
}

// MatMul(Sa * (a - Za), Sb * (b - Zb)) of two run-time int8 tensors ->
// QuantizedMatMul(a, b; src and weights zero points Za, Zb; Scale(Sa * Sb)),
// each side per tensor. True when it rewrote `id`; a refusal is logged.
bool fuse_runtime_matmul(Graph& g, PassContext& ctx, NodeId id) {
  const Node& layer = g.node(id);
  const auto& mm = layer.attr<MatMulAttrs>();
  const auto a = match_dequantize(g, layer.inputs[0], 0);
  const auto b = match_dequantize(g, layer.inputs[1], 0);
  if (!a || !b) {
    // Name the side that is not quantized per tensor (a side left whole
    // because the other is not counts as quantized).
    const bool b_ok = b || quantized_per_tensor(g, layer.inputs[1]);
    ctx.reject(kPass, layer.name,
               std::string("a MatMul of two run-time tensors runs int8 only when both are "
                           "dequantized u8/s8 tensors per tensor; ") +
                   (b_ok ? "A" : "B") + " is not");
    return false;
  }
  const ElementType at = g.value(a->codes).type, bt = g.value(b->codes).type;
  if (a->scale.size() != 1 || b->scale.size() != 1 || !in_type_range(a->zero_point[0], at) ||
      !in_type_range(b->zero_point[0], bt) || mm.transpose_a || mm.transpose_b) {
    ctx.reject(kPass, layer.name, "the operands' scales or zero points are not per tensor "
                                  "integers of their types");
    return false;
  }
  const Shape out_shape = g.value(layer.outputs[0]).shape;
  QuantizedLayerAttrs attrs;
  attrs.geometry = mm;
  attrs.src_zero_point = static_cast<std::int32_t>(std::lround(a->zero_point[0]));
  attrs.weights_zero_point = static_cast<std::int32_t>(std::lround(b->zero_point[0]));
  attrs.chain.channels = static_cast<int>(out_shape.back());
  attrs.chain.dst_type = composer::DataType::f32;
  attrs.chain.anchor = composer::AnchorKind::inner_product;
  attrs.chain.steps.push_back(composer::Scale{{a->scale[0] * b->scale[0]}});
  const std::vector<ValueId> inputs{a->codes, b->codes};
  Node candidate{layer.name, OpKind::QuantizedMatMul, inputs, {}, attrs, false};
  if (auto reason = ctx.check_layer(g, candidate, out_shape)) {
    ctx.reject(kPass, layer.name, "backend refuses the int8 layer: " + *reason);
    return false;
  }
  const std::string name = layer.name;
  const ValueId old_out = layer.outputs[0];
  const NodeId q = g.add_node(OpKind::QuantizedMatMul, name, inputs, attrs);
  infer_node(g, q);
  replace_value(g, old_out, g.node(q).outputs[0]);
  g.erase_node(id);
  ctx.log(kPass, name + " -> QuantizedMatMul (" + std::string(to_string(at)) + " x " +
                     std::string(to_string(bt)) + ", both at run time, zero points " +
                     std::to_string(attrs.src_zero_point) + " and " +
                     std::to_string(attrs.weights_zero_point) + ")");
  return true;
}

// A layer whose input and weights are dequantized int8: what the rewrite needs.
struct LayerMatch {
  Dequantized x, w;
  std::vector<float> scale;  // Sx * Sw[oc], one per output channel
  std::optional<std::vector<float>> bias;
  std::size_t channels = 0;
};

// Why a side is not a dequantized int8 tensor: what produces it.
std::string producer_text(const Graph& g, ValueId v) {
  const NodeId p = g.value(v).producer;
  if (!p.valid()) return std::string(g.value(v).is_constant() ? "an f32 constant" : "a graph input");
  return "'" + g.node(p).name + "' (" + std::string(to_string(g.node(p).kind)) + ")";
}

// The match for a layer with constant weights, or the reason it is refused.
std::variant<LayerMatch, std::string> match_layer(const Graph& g, const Node& layer) {
  const int w_axis = weights_channel_axis(layer);
  if (w_axis < 0) {
    return std::string(layer.kind == OpKind::Deconvolution
                           ? "grouped deconvolution: the weights' output-channel axis is ambiguous"
                           : "the weights' output-channel axis is unknown (not a constant 2-D matrix)");
  }
  const Shape& x_shape = g.value(layer.inputs[0]).shape;
  const auto x = match_dequantize(g, layer.inputs[0], x_shape.size() > 1 ? 1 : 0);
  const auto w = match_dequantize(g, layer.inputs[1], static_cast<std::size_t>(w_axis));
  if (!x) {
    return "the input is not a dequantized u8/s8 tensor per tensor; it comes from " +
           producer_text(g, layer.inputs[0]);
  }
  if (!w) {
    return "the weights are not dequantized s8 constants; they come from " +
           producer_text(g, layer.inputs[1]);
  }
  if (x->scale.size() != 1) return std::string("input scale is per channel (it cannot become an output scale)");
  const float zp = x->zero_point[0];
  const bool zp_ok = is_near_integer(zp, 1e-4) && in_type_range(zp, g.value(x->codes).type);
  if (!zp_ok || !g.value(w->codes).is_constant() ||
      g.value(w->codes).type != ElementType::s8 || w->zero_point[0] != 0.0f) {
    return std::string("zero points do not allow an int8 layer");
  }
  LayerMatch m{*x, *w, {}, std::nullopt, 0};
  const Shape& out_shape = g.value(layer.outputs[0]).shape;
  const bool spatial = layer.kind == OpKind::Convolution || layer.kind == OpKind::Deconvolution;
  m.channels = static_cast<std::size_t>(spatial ? out_shape[1] : out_shape.back());
  m.scale = expand(w->scale, m.channels);
  for (float& s : m.scale) s *= x->scale[0];
  if (layer.inputs.size() == 3) {
    m.bias = constant_f32(g, layer.inputs[2]);
    if (!m.bias) return std::string("bias is not constant");
  }
  return m;
}

struct Candidate {
  QuantizedLayerAttrs attrs;
  std::vector<ValueId> inputs;
  std::optional<ValueId> added;  // the bias constant made for it, taken back on a refusal
};

// The quantized layer computing `layer` from its match: scale Sx * Sw[oc]
// leading the chain, the bias in accumulator units (added to the graph as a
// constant, the last value, which a refusal takes back), and the source zero
// point folded into that bias where every window lies inside the input.
Candidate make_candidate(Graph& g, const Node& layer, const LayerMatch& m) {
  Candidate c;
  QuantizedLayerAttrs& attrs = c.attrs;
  if (const auto* a = layer.attr_if<ConvAttrs>()) attrs.geometry = *a;
  if (const auto* a = layer.attr_if<DeconvAttrs>()) attrs.geometry = *a;
  if (const auto* a = layer.attr_if<MatMulAttrs>()) attrs.geometry = *a;
  if (layer.kind == OpKind::FullyConnected) attrs.geometry = NoAttrs{};
  attrs.src_zero_point = static_cast<std::int32_t>(std::lround(m.x.zero_point[0]));
  attrs.chain.channels = static_cast<int>(m.channels);
  attrs.chain.dst_type = composer::DataType::f32;
  attrs.chain.anchor = layer_info(layer.kind)->anchor;
  attrs.chain.steps.push_back(
      composer::Scale{all_equal(m.scale) ? std::vector<float>{m.scale[0]} : m.scale});
  c.inputs = {m.x.codes, m.w.codes};
  // Bias in accumulator units, plus the source zero point of a matrix
  // product or an unpadded convolution:
  // sum_k w[n,k] * (x[k] - z) = sum_k w[n,k] * x[k] - z * sum_k w[n,k],
  // exact where every window lies inside the input (no padding). oneDNN
  // 2.6 refuses source zero points on int8 inner products, and on
  // convolutions takes them only in kernels slower than brgconv.
  std::vector<float> acc_bias(m.channels, 0.0f);
  bool use_acc_bias = false;
  if (m.bias) {
    // A zero scale, or one so small that the bias overflows f32 in
    // accumulator units: the bias stays a real-valued shift.
    bool divisible = true;
    for (std::size_t k = 0; k < m.channels; ++k) {
      acc_bias[k] = m.scale[k] != 0.0f ? (*m.bias)[k] / m.scale[k] : 0.0f;
      divisible = divisible && m.scale[k] != 0.0f && std::isfinite(acc_bias[k]);
    }
    if (divisible) {
      use_acc_bias = true;
    } else {
      std::fill(acc_bias.begin(), acc_bias.end(), 0.0f);
      attrs.chain.steps.push_back(composer::Shift{*m.bias});
    }
  }
  const bool spatial = layer.kind == OpKind::Convolution || layer.kind == OpKind::Deconvolution;
  const auto* conv = layer.attr_if<ConvAttrs>();
  const bool unpadded =
      conv != nullptr && layer.kind == OpKind::Convolution &&
      std::all_of(conv->pads_begin.begin(), conv->pads_begin.end(), [](auto p) { return p == 0; }) &&
      std::all_of(conv->pads_end.begin(), conv->pads_end.end(), [](auto p) { return p == 0; });
  if ((!spatial || unpadded) && attrs.src_zero_point != 0) {
    const std::vector<double> sums = weight_sums(g, m.w.codes, layer, m.channels);
    for (std::size_t k = 0; k < m.channels; ++k) {
      acc_bias[k] -= static_cast<float>(attrs.src_zero_point * sums[k]);
    }
    attrs.src_zero_point = 0;
    use_acc_bias = true;
  }
  if (use_acc_bias) {
    attrs.has_bias = true;
    c.added = g.add_constant(
        layer.name + ".bias.acc",
        Tensor::from_vector<float>({static_cast<std::int64_t>(m.channels)}, acc_bias));
    c.inputs.push_back(*c.added);
  }
  return c;
}

// The global pool of codes `v` is the dequantized mean of, directly or
// through a Reshape or Flatten to [N, K].
const Node* mean_of_codes(const Graph& g, ValueId v) {
  const Node* n = g.value(v).producer.valid() ? &g.node(g.value(v).producer) : nullptr;
  if (n != nullptr && (n->kind == OpKind::Reshape || n->kind == OpKind::Flatten) &&
      g.value(v).shape.size() == 2) {
    n = g.value(n->inputs[0]).producer.valid() ? &g.node(g.value(n->inputs[0]).producer) : nullptr;
  }
  if (n == nullptr || n->kind != OpKind::AvgPool || !n->attr<PoolAttrs>().to_f32 ||
      !pools_globally(g, *n)) {
    return nullptr;
  }
  return n;
}

// A MatMul of a matrix by constant weights, nothing permuted or transposed
// on the left.
bool plain_matmul(const Node& layer) {
  if (layer.kind != OpKind::MatMul || layer.inputs.size() != 2) return false;
  const auto& m = layer.attr<MatMulAttrs>();
  return !m.transpose_a && m.perm_a.empty() && m.perm_b.empty() && m.perm_y.empty();
}

// The output channels of a layer that reads a mean alone: a 1x1 convolution
// without groups, a fully connected layer or a plain matmul, writing one
// value per image and output channel ([N, O] or [N, O, 1, ...]: no padding
// around the one pixel). Otherwise why not.
std::variant<std::int64_t, std::string> mean_layer_channels(const Node& layer, const Shape& ws,
                                                            const Shape& x, int w_axis,
                                                            const Shape& out_shape) {
  const std::int64_t k = x[1];
  std::int64_t o = 0;
  if (layer.kind == OpKind::Convolution) {
    const auto& c = layer.attr<ConvAttrs>();
    const bool one_by_one = ws.size() == x.size() &&
                            std::all_of(ws.begin() + 2, ws.end(), [](auto d) { return d == 1; });
    if (c.groups != 1 || !one_by_one || ws[1] != k) {
      return std::string("only a 1x1 convolution without groups reads the mean alone");
    }
    o = ws[0];
  } else if (layer.kind == OpKind::FullyConnected || plain_matmul(layer)) {
    if (ws.size() != 2 || ws[w_axis == 0 ? 1 : 0] != k) {
      return std::string("the weights are not a [K, O] or [O, K] matrix");
    }
    o = ws[static_cast<std::size_t>(w_axis)];
  } else {
    return "a " + std::string(to_string(layer.kind)) + " of it has no integer form here";
  }
  Shape expected(out_shape.size(), 1);
  if (!expected.empty()) expected[0] = x[0];
  if (expected.size() > 1) expected[1] = o;
  if (out_shape != expected) {
    return "the layer writes " + to_string(out_shape) + ", not one value per image and "
           "output channel";
  }
  return o;
}

// s8 weights as [O, K] rows, from [O, K] or (transposed) [K, O].
std::vector<std::int8_t> weights_as_rows(const Tensor& codes, std::int64_t o, std::int64_t k,
                                         bool transposed) {
  const auto src = codes.data<std::int8_t>();
  std::vector<std::int8_t> wk(static_cast<std::size_t>(o * k));
  for (std::int64_t r = 0; r < o; ++r) {
    for (std::int64_t c = 0; c < k; ++c) {
      wk[static_cast<std::size_t>(r * k + c)] =
          src[static_cast<std::size_t>(transposed ? c * o + r : r * k + c)];
    }
  }
  return wk;
}

// The second form above: true when it rewrote `id`; a refusal is logged.
bool fuse_mean_layer(Graph& g, PassContext& ctx, NodeId id, const Node& pool) {
  const Node& layer = g.node(id);
  const PoolAttrs& pa = pool.attr<PoolAttrs>();
  const ValueId codes = pool.inputs[0];
  const Shape& x = g.value(codes).shape;
  const Shape out_shape = g.value(layer.outputs[0]).shape;
  const auto refuse = [&](const std::string& why) {
    ctx.reject(kPass, layer.name, "its input is the mean of '" + pool.name + "''s codes; " + why);
    return false;
  };
  const int w_axis = weights_channel_axis(layer);
  const auto w =
      w_axis < 0 ? std::nullopt
                 : match_dequantize(g, layer.inputs[1], static_cast<std::size_t>(w_axis));
  if (!w || !g.value(w->codes).is_constant() || g.value(w->codes).type != ElementType::s8 ||
      w->zero_point[0] != 0.0f) {
    return refuse("the weights are not dequantized s8 constants without a zero point");
  }
  const std::variant<std::int64_t, std::string> channels =
      mean_layer_channels(layer, g.value(w->codes).shape, x, w_axis, out_shape);
  if (const auto* why = std::get_if<std::string>(&channels)) return refuse(*why);
  const std::int64_t k = x[1], o = std::get<std::int64_t>(channels);
  if (!(pa.out_scale > 0.0f)) return refuse("the mean's scale is not positive");
  const double z = -static_cast<double>(pa.out_shift) / pa.out_scale;
  const ElementType xt = g.value(codes).type;
  if (!in_type_range(static_cast<float>(z), xt)) {
    return refuse("the mean's zero point " + std::to_string(z) + " is not an integer of " +
                  std::string(to_string(xt)));
  }
  // Each plane of the sums times the weights stays in int32 below 2^31 / (255 * 127).
  if (k > 65535) return refuse("more than 65535 input channels");
  std::optional<std::vector<float>> bias;
  if (layer.inputs.size() == 3) {
    bias = constant_f32(g, layer.inputs[2]);
    if (!bias || bias->size() != static_cast<std::size_t>(o)) {
      return refuse("the bias is not a constant per output channel");
    }
  }
  std::int64_t pixels = 1;
  for (std::size_t d = 2; d < x.size(); ++d) pixels *= x[d];

  MeanInnerProductAttrs a;
  const std::vector<float> sw = expand(w->scale, static_cast<std::size_t>(o));
  a.scale.resize(static_cast<std::size_t>(o));
  for (std::size_t c = 0; c < a.scale.size(); ++c) {
    a.scale[c] = static_cast<float>(static_cast<double>(pa.out_scale) * sw[c] /
                                    static_cast<double>(pixels));
  }
  a.shift = bias ? *bias : std::vector<float>(static_cast<std::size_t>(o), 0.0f);
  a.zero_point = static_cast<std::int32_t>(std::lround(z));
  a.out_rank = static_cast<std::int64_t>(out_shape.size());
  const bool transposed = layer.kind == OpKind::MatMul && w_axis == 1;
  const std::vector<std::int8_t> wk =
      weights_as_rows(*g.value(w->codes).constant, o, k, transposed);
  // A Relu that nothing else reads becomes the clamp at 0.
  ValueId result = layer.outputs[0];
  std::vector<NodeId> absorbed;
  const auto relu = sole_consumer(g, result);
  if (relu && g.node(*relu).kind == OpKind::Relu && !g.is_graph_output(result)) {
    a.lo = 0.0f;
    result = g.node(*relu).outputs[0];
    absorbed.push_back(*relu);
  }
  const std::string name = layer.name, pool_name = pool.name;
  const ValueId weights = g.add_constant(
      name + ".weights.s8", Tensor::from_vector<std::int8_t>({o, k}, wk));
  const ValueId y = emit(g, OpKind::MeanInnerProduct, name, {codes, weights}, a);
  replace_value(g, result, y);
  for (NodeId r : absorbed) g.erase_node(r);
  g.erase_node(id);
  ctx.log(kPass, name + " -> MeanInnerProduct (the mean of '" + pool_name + "''s " +
                     std::string(to_string(xt)) + " codes x s8 in integers" +
                     (a.lo == 0.0f ? ", Relu" : "") + ")");
  return true;
}

}  // namespace

bool fuse_dequantize_into_layer(Graph& g, PassContext& ctx) {
  for (NodeId id : g.topological_order()) {
    const Node& layer = g.node(id);
    if (!is_layer(layer.kind)) continue;
    if (layer.kind == OpKind::MatMul && !from_constant(g, layer.inputs[1])) {
      if (fuse_runtime_matmul(g, ctx, id)) return true;
      continue;
    }
    if (const Node* pool = mean_of_codes(g, layer.inputs[0])) {
      if (fuse_mean_layer(g, ctx, id, *pool)) return true;
      continue;
    }
    auto matched = match_layer(g, layer);
    if (const auto* why = std::get_if<std::string>(&matched)) {
      ctx.reject(kPass, layer.name, *why);
      continue;
    }
    const LayerMatch& m = std::get<LayerMatch>(matched);
    Candidate c = make_candidate(g, layer, m);
    const Shape out_shape = g.value(layer.outputs[0]).shape;
    Node candidate{layer.name, quantized_form(layer.kind), c.inputs, {}, c.attrs, false};
    if (auto reason = ctx.check_layer(g, candidate, out_shape)) {
      ctx.reject(kPass, layer.name, "backend refuses the int8 layer: " + *reason);
      if (c.added) g.discard_last_value(*c.added);
      continue;
    }
    // The rewrite: the quantized layer in place of the f32 one.
    const std::string name = layer.name;
    const ValueId old_out = layer.outputs[0];
    const NodeId q = g.add_node(candidate.kind, name, c.inputs, c.attrs);
    infer_node(g, q);
    replace_value(g, old_out, g.node(q).outputs[0]);
    g.erase_node(id);
    ctx.log(kPass, name + " -> " + std::string(to_string(candidate.kind)) + " (" +
                       std::string(to_string(g.value(m.x.codes).type)) + " x s8" +
                       (c.attrs.src_zero_point ? ", src zero point " + std::to_string(c.attrs.src_zero_point) : "") +
                       (c.attrs.has_bias ? ", bias" : "") + ")");
    return true;
  }
  return false;
}

}  // namespace qfuse::graph
