// recognize_activations: activations exporters spell out with elementwise ops
// become one op (HSigmoid, HSwish, Swish), checked by structure and against
// the graph before the pass on inputs across the kinks at -3 and 3. Named
// negatives: a constant that is not 3 / 6, an intermediate read elsewhere.

#include "pass_test_util.hpp"

namespace qfuse::graph {
namespace {

using namespace pass_test;

ValueId scalar(Builder& b, const std::string& name, float v) { return b.constant(name, {1}, {v}); }

// clip(x + 3, 0, 6), with `three` for 3.
ValueId relu6_shifted(Builder& b, ValueId x, float three = 3.0f) {
  return b.op(OpKind::Clamp, {b.add(x, scalar(b, "three", three))}, ClampAttrs{0.0f, 6.0f}, "clip");
}

struct Form {
  std::string name;
  std::function<ValueId(Builder&, ValueId)> spell;
  OpKind becomes;
};

std::vector<Form> forms() {
  return {
      {"DivideClipBy6", [](Builder& b, ValueId x) {
         return b.op(OpKind::Divide, {relu6_shifted(b, x), scalar(b, "six", 6.0f)});
       }, OpKind::HSigmoid},
      {"PaddleHardSwish", [](Builder& b, ValueId x) {
         return b.op(OpKind::Divide, {b.multiply(x, relu6_shifted(b, x)), scalar(b, "six", 6.0f)});
       }, OpKind::HSwish},
      {"XTimesHSigmoid", [](Builder& b, ValueId x) {
         return b.multiply(x, b.unary(OpKind::HSigmoid, x));
       }, OpKind::HSwish},
      {"SiLU", [](Builder& b, ValueId x) { return b.multiply(x, b.unary(OpKind::Sigmoid, x)); },
       OpKind::Swish},
  };
}

Graph spelled(const Form& f) {
  Graph g;
  Builder b(g);
  const ValueId x = b.input("x", {1, 2, 4, 5});
  b.output(f.spell(b, x));
  return g;
}

TEST(RecognizeActivations, SpelledActivationsBecomeOneOp) {
  for (const Form& f : forms()) {
    Graph g = spelled(f);
    const Graph before = g;
    PassContext ctx = context();
    while (recognize_activations(g, ctx)) {
    }
    EXPECT_EQ(g.live_node_count(), 1u) << f.name;
    EXPECT_EQ(g.node(g.topological_order()[0]).kind, f.becomes) << f.name;
    const Tensor x = input_tensor({1, 2, 4, 5}, -5.0f, 5.0f, 31);
    expect_close(run(g, x), run(before, x), 1e-6f);
  }
}

TEST(RecognizeActivationsNegative, AShiftThatIsNot3Stays) {
  Graph g;
  Builder b(g);
  const ValueId x = b.input("x", {1, 2, 4, 5});
  b.output(b.op(OpKind::Divide, {relu6_shifted(b, x, 2.5f), scalar(b, "six", 6.0f)}));
  PassContext ctx = context();
  EXPECT_FALSE(recognize_activations(g, ctx));
  EXPECT_EQ(count(g, OpKind::HSigmoid), 0u);
}

TEST(RecognizeActivationsNegative, ASigmoidReadElsewhereStays) {
  Graph g;
  Builder b(g);
  const ValueId x = b.input("x", {1, 2, 4, 5});
  const ValueId s = b.unary(OpKind::Sigmoid, x, "sigmoid");
  b.output(b.multiply(x, s));
  b.output(s);  // the gate is an output too
  PassContext ctx = context();
  EXPECT_FALSE(recognize_activations(g, ctx));
  EXPECT_EQ(count(g, OpKind::Swish), 0u);
}

}  // namespace
}  // namespace qfuse::graph
