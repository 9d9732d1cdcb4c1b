// lookup_elementwise
//
//   r (u8/s8, or a FakeQuantize onto 256 levels) -> f(...) -> Quantize(t)
//                                                 or FQ(quantize only) -> Convert(t)
//     ==>  r -> Lookup(table, t)
//
// An elementwise function of a single tensor that has at most 256 values,
// whose result is quantized, is a function from 256 codes to 256 codes: a
// table. Quantized SiLU as ONNX Runtime's quantizer writes it is the common
// case: x = DQ(Q(conv)), y = Q(x * DQ(Q(sigmoid(x)))). Five f32 ops become
// one byte lookup, and the layer before writes its codes directly.
//
// f may use unary activations, FakeQuantize and Convert with per-tensor
// constants, and binary ops between its own values or with one-element
// constants. It must read its input twice, or hold an activation that costs
// a layer's post-op chain more than a table pass over its output does (a
// hardswish, sigmoid, swish, tanh, gelu...: MobileNetV3's conv -> Q/DQ ->
// hardswish blocks; measured, the 336-channel 5x5 depthwise at 8x8 runs 2.7
// us faster without its round, clip and hardswish post-ops, and the byte
// table over its 21504 codes takes 0.4 us; over at least 4096 values, and
// only where f alone reads the root, its input and its own values), or its
// root must be int8 data that a Slice, Reshape, Transpose or Concat wrote
// (no layer can take the chain; a requantize onto another grid is a table
// too), or f must requantize codes that other ops read as they are (a
// Concat input that a layer beside it reads too). Piecewise-linear steps (relu, leaky relu, clip, hsigmoid, scale and
// shift) stay the layer's post-ops.
// The root r is an int8 tensor, or the output of a per-tensor FakeQuantize
// with 256 levels, which is then split into a quantize to u8 (the code is
// the level) for the layer before to write.
//
// The table evaluates f on each code in double, rounding to f32 wherever the
// graph stores f32, as the unfused runtime computes each op; oneDNN's
// activations may differ from the exact function in the last bit, which can
// move a result that sits within an ulp of a rounding tie by one step.

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "composer/eltwise_math.hpp"
#include "composer/fake_quantize_formula.hpp"
#include "graph/op_info.hpp"
#include "graph/passes/passes.hpp"
#include "graph/passes/pattern.hpp"

namespace qfuse::graph {
namespace {

constexpr std::string_view kPass = "lookup_elementwise";
using namespace pattern;


// A per-tensor FakeQuantize: its ranges.
struct Ranges {
  double il, ih, ol, oh, steps;
};

// Per-tensor constant ranges of a FakeQuantize.
std::optional<Ranges> fq_ranges(const Graph& g, const Node& fq) {
  const auto il = scalar_constant(g, fq.inputs[1]), ih = scalar_constant(g, fq.inputs[2]);
  const auto ol = scalar_constant(g, fq.inputs[3]), oh = scalar_constant(g, fq.inputs[4]);
  if (!il || !ih || !ol || !oh) return std::nullopt;
  return Ranges{*il, *ih, *ol, *oh, static_cast<double>(fq.attr<FakeQuantizeAttrs>().levels) - 1.0};
}

// The FakeQuantize as the runtime computes it: the range definition in double.
double fake_quantize(double x, const Ranges& r) {
  return composer::fake_quantize_value(x, r.il, r.ih, r.ol, r.oh, r.steps);
}

// A node the table can evaluate, given its non-constant inputs.
bool evaluable(const Graph& g, const Node& n) {
  if (n.outputs.size() != 1) return false;
  for (ValueId v : n.inputs) {
    const Value& val = g.value(v);
    if (val.is_constant() && element_count(val.shape) != 1) return false;
  }
  if (is_elementwise_unary(n.kind) || is_elementwise_binary(n.kind)) {
    return g.value(n.outputs[0]).type == ElementType::f32;
  }
  if (n.kind == OpKind::FakeQuantize) return fq_ranges(g, n).has_value();
  if (n.kind == OpKind::Dequantize) return n.attr<DequantizeAttrs>().per_tensor();
  if (n.kind == OpKind::Quantize) return n.attr<QuantizeAttrs>().per_tensor();
  return n.kind == OpKind::Convert;
}

// One node on scalars; f32 results are rounded to float.
double evaluate(const Graph& g, const Node& n, const std::vector<double>& in) {
  const double x = in[0];
  double y = 0.0;
  // Unary activations: their eltwise definition (composer/eltwise_math.hpp).
  if (const auto e = eltwise_of(n)) return static_cast<float>(composer::eltwise_value(*e, x));
  switch (n.kind) {
    case OpKind::FakeQuantize: y = fake_quantize(x, *fq_ranges(g, n)); break;
    case OpKind::Dequantize: {
      const auto& a = n.attr<DequantizeAttrs>();
      return composer::dequantize(static_cast<float>(x), a.zero_point[0], a.scale[0]);
    }
    case OpKind::Quantize: {
      const auto& a = n.attr<QuantizeAttrs>();
      return composer::quantize_linear(static_cast<float>(x), a.scale[0], a.zero_point[0],
                                       a.code_min(), a.code_max());
    }
    case OpKind::Convert: {
      const auto& a = n.attr<ConvertAttrs>();
      if (a.to == ElementType::f32) return static_cast<float>(x);
      const double lo = a.to == ElementType::u8 ? 0.0 : -128.0;
      if (a.quantizes()) {
        const double il = a.input_low;
        return composer::saturated_level(x, il, static_cast<double>(a.input_high) - il, 255.0) + lo;
      }
      return composer::convert_to_code(x, lo);  // NaN (undefined at some code): the top
    }
    default: {
      // Binary, on f32 operands.
      const float a = static_cast<float>(in[0]), b = static_cast<float>(in[1]);
      switch (n.kind) {
        case OpKind::Add: return a + b;
        case OpKind::Subtract: return a - b;
        case OpKind::Multiply: return a * b;
        case OpKind::Divide: return a / b;
        case OpKind::Minimum: return std::min(a, b);
        case OpKind::Maximum: return std::max(a, b);
        default: return std::nan("");
      }
    }
  }
  return static_cast<float>(y);
}

// The function's nodes from `m` back to one root, in execution order, and the root.
struct Function {
  std::vector<NodeId> nodes;
  ValueId root;
};

// A value the walk may stop at: int8, or a 256-level per-tensor FakeQuantize.
bool root_candidate(const Graph& g, ValueId v) {
  if (is_int8(g.value(v).type)) return true;
  const Node* fq = producer_of(g, v, OpKind::FakeQuantize);
  return fq != nullptr && fq->attr<FakeQuantizeAttrs>().levels == 256 && fq_ranges(g, *fq) &&
         fq_ranges(g, *fq)->il < fq_ranges(g, *fq)->ih;
}

std::optional<Function> find_function(const Graph& g, ValueId m,
                                      const std::map<std::uint32_t, std::size_t>& position) {
  std::set<std::uint32_t> nodes;
  std::set<std::uint32_t> leaves;
  // Takes in the producer of `v` and walks on, stopping at root candidates.
  std::function<bool(ValueId, bool)> walk = [&](ValueId v, bool expand) -> bool {
    const Value& val = g.value(v);
    if (val.is_constant()) return element_count(val.shape) == 1;
    if (!expand && root_candidate(g, v)) {
      leaves.insert(v.index);
      return true;
    }
    if (!val.producer.valid()) return false;
    const Node& p = g.node(val.producer);
    if (!evaluable(g, p)) return false;
    if (!nodes.insert(val.producer.index).second) return true;
    for (ValueId in : p.inputs) {
      if (!walk(in, false)) return false;
    }
    return true;
  };
  if (!walk(m, true)) return std::nullopt;
  // Several leaves: open the latest until one is left.
  while (leaves.size() > 1) {
    std::uint32_t latest = *leaves.begin();
    for (std::uint32_t l : leaves) {
      const NodeId p = g.value(ValueId{l}).producer;
      const NodeId q = g.value(ValueId{latest}).producer;
      if (!q.valid() || (p.valid() && position.at(p.index) > position.at(q.index))) latest = l;
    }
    leaves.erase(latest);
    if (!walk(ValueId{latest}, true)) return std::nullopt;
  }
  if (leaves.size() != 1) return std::nullopt;
  Function f;
  f.root = ValueId{*leaves.begin()};
  for (std::uint32_t n : nodes) f.nodes.push_back(NodeId{n});
  std::sort(f.nodes.begin(), f.nodes.end(), [&](NodeId a, NodeId b) {
    return position.at(a.index) < position.at(b.index);
  });
  return f;
}

// f reads its input twice (x * g(x), x + g(x), ...): no layer's post-op
// chain can, while a chain of unary steps is better left to them.
bool reads_twice(const Graph& g, const std::vector<NodeId>& nodes) {
  for (NodeId id : nodes) {
    const Node& n = g.node(id);
    if (is_elementwise_binary(n.kind) && !g.value(n.inputs[0]).is_constant() &&
        !g.value(n.inputs[1]).is_constant()) {
      return true;
    }
  }
  return false;
}

// Int8 data moved or gathered (a channel split's Slice, a Concat): no layer
// ends there to take a chain of steps as its post-ops, so even a plain
// requantize onto another grid (DQ -> Q) is best one table.
bool written_by_data_movement(const Graph& g, ValueId root) {
  const NodeId p = g.value(root).producer;
  if (!is_int8(g.value(root).type) || !p.valid()) return false;
  return moves_data(g.node(p)) || g.node(p).kind == OpKind::Concat;
}

// A table pass pays for itself over this many values per batch item: a
// Lookup op costs about 0.1 us to start, and a squeeze-excitation's
// one-pixel fc1 output (EfficientNet's SiLU over 10 to 48 values) gains
// nothing from leaving the layer's chain (measured: 1 us more over its ten
// blocks). Counted without the batch, so that a model compiled at one batch
// fuses as it does at another (compile_for_shapes).
constexpr std::int64_t kTableMinValues = 4096;

std::int64_t values_per_item(const Shape& shape) {
  return shape.empty() || shape[0] == 0 ? element_count(shape) : element_count(shape) / shape[0];
}

// An activation that costs a layer's post-op chain more than a table pass
// over its output: anything but the piecewise-linear relu, clip, linear,
// round, abs and hsigmoid.
bool costly_activation(const Graph& g, const std::vector<NodeId>& nodes) {
  for (NodeId id : nodes) {
    const auto e = eltwise_of(g.node(id));
    if (e && !composer::eltwise_info(e->alg).piecewise_linear) return true;
  }
  return false;
}

// Only f reads the root and its own values (and the closing FakeQuantize
// its last), and only the root's FakeQuantize reads that one's input:
// otherwise the layer before keeps an f32 reader and cannot take the codes,
// and the f32 steps stay besides the table.
bool read_only_inside(const Graph& g, const Function& f, NodeId closing) {
  std::set<std::uint32_t> inside{closing.index};
  for (NodeId n : f.nodes) inside.insert(n.index);
  const auto inside_only = [&](ValueId v) {
    for (NodeId c : g.consumers(v)) {
      if (!inside.count(c.index)) return false;
    }
    return !g.is_graph_output(v);
  };
  const NodeId root_fq = g.value(f.root).producer;
  if (!root_fq.valid()) return false;
  const ValueId x = g.node(root_fq).inputs[0];
  if (g.consumers(x).size() != 1 || g.is_graph_output(x)) return false;
  if (!inside_only(f.root)) return false;
  for (NodeId n : f.nodes) {
    if (!inside_only(g.node(n).outputs[0])) return false;
  }
  return true;
}

// Whether f of `root`, closed by the FakeQuantize `closing`, is worth a
// table: see the file's header.
// f is a Dequantize alone (a requantize onto another grid) of codes other ops
// read too: the layer writing them keeps their grid for those readers, and
// one byte pass replaces the f32 round trip.
bool requantizes_shared_codes(const Graph& g, const Function& f) {
  return f.nodes.size() == 1 && g.node(f.nodes[0]).kind == OpKind::Dequantize &&
         is_int8(g.value(f.root).type) && g.consumers(f.root).size() > 1;
}

bool worth_a_table(const Graph& g, const Function& f, NodeId closing) {
  if (reads_twice(g, f.nodes) || written_by_data_movement(g, f.root) ||
      requantizes_shared_codes(g, f)) {
    return true;
  }
  // A root some layer can write (a FakeQuantize's, or a Quantize's codes).
  const bool layer_can_write =
      !is_int8(g.value(f.root).type) || producer_of(g, f.root, OpKind::Quantize) != nullptr;
  return layer_can_write && costly_activation(g, f.nodes) &&
         values_per_item(g.value(f.root).shape) >= kTableMinValues &&
         read_only_inside(g, f, closing);
}

// What quantizes f's result to u8/s8 codes: a per-tensor Quantize, or a
// 256-level FakeQuantize onto the type's codes and its Convert.
struct Closing {
  NodeId node;     // the Quantize or the FakeQuantize
  ValueId input;   // f's result
  ElementType to;  // the codes' type
  std::function<double(double)> code;
};

std::optional<Closing> closing_quantize(const Graph& g, const Node& n) {
  if (n.kind == OpKind::Quantize) {
    const auto& q = n.attr<QuantizeAttrs>();
    if (!q.per_tensor()) return std::nullopt;
    return Closing{g.value(n.outputs[0]).producer, n.inputs[0], q.to, [q](double x) {
                     return composer::quantize_linear(static_cast<float>(x), q.scale[0],
                                                      q.zero_point[0], q.code_min(), q.code_max());
                   }};
  }
  if (n.kind != OpKind::Convert) return std::nullopt;
  const ConvertAttrs to = n.attr<ConvertAttrs>();
  if (!is_int8(to.to) || to.quantizes()) return std::nullopt;
  const Node* fq = producer_of(g, n.inputs[0], OpKind::FakeQuantize);
  if (fq == nullptr || !sole_consumer(g, fq->outputs[0])) return std::nullopt;
  const auto out = fq_ranges(g, *fq);
  const double lo = to.to == ElementType::u8 ? 0.0 : -128.0;
  if (!out || fq->attr<FakeQuantizeAttrs>().levels != 256 || out->ol != lo ||
      out->oh != lo + 255.0) {
    return std::nullopt;
  }
  const Ranges r = *out;
  return Closing{g.value(n.inputs[0]).producer, fq->inputs[0], to.to, [r, lo](double x) {
                   return composer::convert_to_code(fake_quantize(x, r), lo);
                 }};
}

}  // namespace

bool lookup_elementwise(Graph& g, PassContext& ctx) {
  const std::vector<NodeId> order = g.topological_order();
  std::map<std::uint32_t, std::size_t> position;
  for (std::size_t k = 0; k < order.size(); ++k) position[order[k].index] = k;
  for (NodeId id : order) {
    const auto closing = closing_quantize(g, g.node(id));
    if (!closing) continue;
    const Node& cv = g.node(id);
    const std::optional<Function> f = find_function(g, closing->input, position);
    if (!f || !worth_a_table(g, *f, closing->node)) continue;
    const Node* root_fq = is_int8(g.value(f->root).type)
                              ? nullptr
                              : producer_of(g, f->root, OpKind::FakeQuantize);
    const ElementType root_type = root_fq ? ElementType::u8 : g.value(f->root).type;
    const double root_lo = root_type == ElementType::s8 ? -128.0 : 0.0;

    // The table: f, then the closing quantize, on each code.
    LookupAttrs attrs;
    attrs.to = closing->to;
    attrs.table.resize(256);
    for (int k = 0; k < 256; ++k) {
      std::map<std::uint32_t, double> value;
      if (root_fq != nullptr) {
        const Ranges r = *fq_ranges(g, *root_fq);
        value[f->root.index] = static_cast<float>(k * (r.oh - r.ol) / r.steps + r.ol);
      } else {
        value[f->root.index] = root_lo + k;
      }
      const auto read = [&](ValueId v) {
        const Value& val = g.value(v);
        return val.is_constant() ? static_cast<double>(val.constant->as_float(0))
                                 : value.at(v.index);
      };
      for (NodeId nid : f->nodes) {
        const Node& n = g.node(nid);
        std::vector<double> in;
        for (ValueId v : n.inputs) in.push_back(read(v));
        value[n.outputs[0].index] = evaluate(g, n, in);
      }
      const double code = closing->code(read(closing->input));
      attrs.table[static_cast<std::size_t>(k)] =
          static_cast<std::uint8_t>(static_cast<std::int32_t>(code) & 0xff);
    }

    // Names and ids first: emitting nodes moves the node table.
    const std::string name = cv.name, fq_name = g.node(closing->node).name;
    const ValueId old = cv.outputs[0];
    const std::string root_name = g.value(f->root).name;
    ValueId source = f->root;
    if (root_fq != nullptr) {
      // The root's codes: its level, quantized to u8 by the same input range.
      const Ranges r = *fq_ranges(g, *root_fq);
      const ValueId x = root_fq->inputs[0];
      const std::size_t rank = g.value(x).shape.size();
      const std::string base = root_fq->name + "/code";
      const auto scalar = [&](const std::string& n, double v) {
        return add_channel_constant(g, base + "/" + n, {static_cast<float>(v)}, rank, 1);
      };
      const ValueId il = scalar("il", r.il), ih = scalar("ih", r.ih);
      const ValueId zero = scalar("lo", 0.0), top = scalar("hi", 255.0);
      const ValueId q = emit(g, OpKind::FakeQuantize, base + "/quantize", {x, il, ih, zero, top},
                             FakeQuantizeAttrs{256});
      source = emit(g, OpKind::Convert, base + "/to_u8", {q}, ConvertAttrs{ElementType::u8});
    }
    const ValueId y = emit(g, OpKind::Lookup, name + "/lookup", {source}, attrs);
    replace_value(g, old, y);
    g.erase_node(id);
    ctx.log(kPass, std::to_string(f->nodes.size()) + " elementwise ops from '" + root_name +
                       "' to " + fq_name + " -> one Lookup of its " +
                       std::string(to_string(root_type)) + " codes");
    return true;
  }
  return false;
}

}  // namespace qfuse::graph
