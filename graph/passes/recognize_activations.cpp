// recognize_activations
//
// Activations that exporters spell out with elementwise ops become one op, so
// that they run as one oneDNN eltwise and can join a layer's post-op chain
// (a chain is a single line of nodes; x * f(x) reads x twice and is not one):
//
//   Divide(Clamp(Add(x, 3), 0, 6), 6)            ==>  HSigmoid(x)
//   Multiply(Clamp(Add(x, 3), 0, 6), 1/6)        ==>  HSigmoid(x)
//   Divide(Multiply(x, Clamp(Add(x, 3), 0, 6)), 6)   ==>  HSwish(x)    (Paddle)
//   Multiply(Multiply(x, Clamp(Add(x, 3), 0, 6)), 1/6) ==>  HSwish(x)
//   Multiply(x, HSigmoid(x))                     ==>  HSwish(x)   (HardSigmoid 1/6, 1/2)
//   Multiply(x, Sigmoid(x))                      ==>  Swish(x)    (SiLU)
//   Multiply(x, Sigmoid(Multiply(x, b)))         ==>  Swish(x, b) (Paddle swish)
//
// The constants are one-element f32 constants; 3, 6 and 1/6 match to a
// relative 1e-6. Preconditions: every node inside a pattern feeds only the
// next one (x itself may have other readers), and all shapes are x's.

#include <cmath>

#include "graph/passes/passes.hpp"
#include "graph/passes/pattern.hpp"

namespace qfuse::graph {
namespace {

constexpr std::string_view kPass = "recognize_activations";
using namespace pattern;

bool is_scalar(const Graph& g, ValueId v, double expected) {
  const Value& c = g.value(v);
  if (!c.is_constant() || element_count(c.shape) != 1) return false;
  const auto values = constant_f32(g, v);
  return values && std::fabs((*values)[0] - expected) <= 1e-6 * std::fabs(expected);
}

// The operand of a binary node other than `v` (nullopt unless `v` is one of them).
std::optional<ValueId> other_operand(const Node& n, ValueId v) {
  if (n.inputs.size() != 2) return std::nullopt;
  if (n.inputs[0] == v) return n.inputs[1];
  if (n.inputs[1] == v) return n.inputs[0];
  return std::nullopt;
}

// `v` = Clamp(Add(x, 3), 0, 6) with the Add read only by the Clamp: x.
std::optional<ValueId> relu6_of_x_plus_3(const Graph& g, ValueId v) {
  const Node* clamp = producer_of(g, v, OpKind::Clamp);
  if (clamp == nullptr) return std::nullopt;
  const auto& c = clamp->attr<ClampAttrs>();
  if (c.lo != 0.0f || c.hi != 6.0f) return std::nullopt;
  const Node* add = producer_of(g, clamp->inputs[0], OpKind::Add);
  if (add == nullptr || !sole_consumer(g, clamp->inputs[0])) return std::nullopt;
  for (int i = 0; i < 2; ++i) {
    if (is_scalar(g, add->inputs[static_cast<std::size_t>(1 - i)], 3.0) &&
        !g.value(add->inputs[static_cast<std::size_t>(i)]).is_constant()) {
      return add->inputs[static_cast<std::size_t>(i)];
    }
  }
  return std::nullopt;
}

// `n` divides its first input by 6 or multiplies it by 1/6: that input.
std::optional<ValueId> divided_by_6(const Graph& g, const Node& n) {
  if (n.kind == OpKind::Divide && is_scalar(g, n.inputs[1], 6.0)) return n.inputs[0];
  if (n.kind == OpKind::Multiply) {
    if (is_scalar(g, n.inputs[1], 1.0 / 6.0)) return n.inputs[0];
    if (is_scalar(g, n.inputs[0], 1.0 / 6.0)) return n.inputs[1];
  }
  return std::nullopt;
}

struct Match {
  OpKind kind;
  ValueId x;
  float alpha = 1.0f;  // Swish
};

// The nodes between `x` and `y` (exclusive), each read only inside the
// pattern: once y's node is gone they are dead.
void erase_inner(Graph& g, ValueId y, ValueId x) {
  std::vector<ValueId> stack{y};
  while (!stack.empty()) {
    const ValueId v = stack.back();
    stack.pop_back();
    if (v == x || !g.consumers(v).empty()) continue;
    const NodeId p = g.value(v).producer;
    if (!p.valid()) continue;
    const std::vector<ValueId> inputs = g.node(p).inputs;
    g.erase_node(p);
    for (ValueId in : inputs) {
      if (!g.value(in).is_constant()) stack.push_back(in);
    }
  }
}

// The activation whose last node is `n`.
std::optional<Match> match(const Graph& g, const Node& n) {
  if (auto inner = divided_by_6(g, n); inner && sole_consumer(g, *inner)) {
    if (auto x = relu6_of_x_plus_3(g, *inner)) return Match{OpKind::HSigmoid, *x};
    if (const Node* mul = producer_of(g, *inner, OpKind::Multiply)) {
      for (ValueId r : mul->inputs) {
        auto x = relu6_of_x_plus_3(g, r);
        if (x && other_operand(*mul, r) == *x && sole_consumer(g, r)) {
          return Match{OpKind::HSwish, *x};
        }
      }
    }
  }
  if (n.kind == OpKind::Multiply) {
    for (ValueId gate : n.inputs) {
      if (!sole_consumer(g, gate)) continue;
      const auto x = other_operand(n, gate);
      if (const Node* p = producer_of(g, gate, OpKind::HSigmoid); p && p->inputs[0] == x) {
        return Match{OpKind::HSwish, *x};
      }
      const Node* p = producer_of(g, gate, OpKind::Sigmoid);
      if (p == nullptr) continue;
      if (p->inputs[0] == x) return Match{OpKind::Swish, *x};
      // sigmoid(x * b): b a one-element constant, the product read only here.
      const Node* scaled = producer_of(g, p->inputs[0], OpKind::Multiply);
      if (scaled == nullptr || !sole_consumer(g, p->inputs[0])) continue;
      const auto b = other_operand(*scaled, *x);
      if (!b || !g.value(*b).is_constant() || element_count(g.value(*b).shape) != 1) continue;
      return Match{OpKind::Swish, *x, (*constant_f32(g, *b))[0]};
    }
  }
  return std::nullopt;
}

}  // namespace

bool recognize_activations(Graph& g, PassContext& ctx) {
  for (NodeId id : g.topological_order()) {
    const Node& n = g.node(id);
    if (n.kind != OpKind::Divide && n.kind != OpKind::Multiply) continue;
    if (g.value(n.outputs[0]).type != ElementType::f32) continue;
    const auto m = match(g, n);
    if (!m || g.value(m->x).shape != g.value(n.outputs[0]).shape) continue;
    const std::string name = n.name;
    const ValueId old = n.outputs[0];
    const ValueId y = m->kind == OpKind::Swish ? emit(g, m->kind, name, {m->x}, AlphaAttrs{m->alpha})
                                               : emit(g, m->kind, name, {m->x});
    replace_value(g, old, y);
    erase_inner(g, old, m->x);
    ctx.log(kPass, name + " -> " + std::string(to_string(m->kind)) + "(" + g.value(m->x).name +
                       ")");
    return true;
  }
  return false;
}

}  // namespace qfuse::graph
