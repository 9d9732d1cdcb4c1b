// A layer's output through ONNX's QuantizeLinear -> DequantizeLinear (scale S,
// zero point Z) and on into an activation, as QAT exports write MobileNetV3's
// hardswish blocks: the chain rounds x / S and adds Z after the rounding, as
// ONNX does, so the zero point cancels against the dequantize's -Z and the
// layer's post-ops are a round, a clip and the activation; the quantize after
// the activation takes its zero point as given, the destination's. Fused matches
// unfused within 1 LSB, with zero points odd and even; a FakeQuantize given
// by its ranges alone keeps the ranges' form (a named negative).

#include <gtest/gtest.h>

#include <random>

#include "fusion_test_util.hpp"

namespace qfuse::test::fusion {
namespace {

// QuantizeLinear -> DequantizeLinear on a u8 grid (scale, zero point), or
// the same grid given by its ranges only.
ValueId qdq(Builder& b, ValueId x, float scale, int zero_point, bool linear,
            const std::string& name) {
  const float lo = static_cast<float>(-zero_point) * scale;
  const float hi = static_cast<float>(255 - zero_point) * scale;
  if (!linear) return b.fake_quantize(x, lo, hi, lo, hi, 256, name);
  const Shape one{1, 1, 1, 1};
  const ValueId il = b.constant(name + ".il", one, {lo});
  const ValueId ih = b.constant(name + ".ih", one, {hi});
  const ValueId s = b.constant(name + ".scale", one, {scale});
  const ValueId z = b.constant(name + ".zero_point", one, {static_cast<float>(zero_point)});
  return b.op(OpKind::FakeQuantize, {x, il, ih, il, ih, s, z}, graph::FakeQuantizeAttrs{256, 0},
              name);
}

struct Case {
  std::string name;
  int zero_point;
  bool linear;  // scale and zero point given (ONNX's form), else ranges only
};

std::ostream& operator<<(std::ostream& os, const Case& c) { return os << c.name; }

// x -> Q/DQ -> conv1 -> Q/DQ(S, Z) "mid.q" -> HSwish -> Q/DQ -> conv2 -> s8 out
SmallNet build(const Case& c) {
  SmallNet net;
  Builder b(net.graph);
  ValueId y = qdq(b, b.input("x", {1, 4, 8, 8}), 0.02f, 0, c.linear, "x.q");
  y = quantized_conv(b, y, 16, 1, "conv1");
  y = qdq(b, y, 0.031f, c.zero_point, c.linear, "mid.q");
  y = b.unary(OpKind::HSwish, y, "hswish");
  y = qdq(b, y, 0.0123f, 108, c.linear, "act.q");
  close_with_s8_output(b, quantized_conv(b, y, 8, 2, "conv2"), net);
  return net;
}

// The post-ops between the output scales and the destination type.
std::vector<std::string> post_op_list(const std::string& text) {
  const std::size_t a = text.find(" | "), b = text.rfind(" | ");
  std::vector<std::string> ops;
  if (a == std::string::npos || b == a) return ops;
  std::string middle = text.substr(a + 3, b - a - 3);
  if (middle.rfind("dst_zero_point", 0) == 0) middle = middle.substr(middle.find(" | ") + 3);
  for (std::size_t p = 0; p < middle.size();) {
    const std::size_t q = middle.find("; ", p);
    ops.push_back(middle.substr(p, q == std::string::npos ? std::string::npos : q - p));
    p = q == std::string::npos ? middle.size() : q + 2;
  }
  return ops;
}

class QuantizeLinearChain : public ::testing::TestWithParam<Case> {};

TEST_P(QuantizeLinearChain, ZeroPointCancelsAndMatchesUnfused) {
  const Case& c = GetParam();
  const SmallNet net = build(c);
  const CompiledModel fused = compile(net.graph, {.fuse = true});
  bool found = false;
  for (const LayerInfo& l : fused.layers()) {
    if (l.node != "conv1") continue;
    found = true;
    const std::vector<std::string> ops = post_op_list(l.post_ops);
    ASSERT_FALSE(ops.empty()) << l.post_ops;
    if (c.linear) {
      // round * S; clip(-Z * S, (255 - Z) * S); hardswish * (1 / S2)
      ASSERT_EQ(ops.size(), 3U) << l.post_ops;
      EXPECT_EQ(ops[0].rfind("eltwise_round", 0), 0U) << l.post_ops;
      EXPECT_EQ(ops[1].rfind("eltwise_clip", 0), 0U) << l.post_ops;
      // The next grid's zero point as given (108), not -il / S in floats (107.99999).
      EXPECT_NE(l.post_ops.find("| dst_zero_point 108 |"), std::string::npos) << l.post_ops;
    } else {
      // The ranges' form adds Z before the rounding and takes it off after.
      EXPECT_GT(ops.size(), 3U) << l.post_ops;
      EXPECT_EQ(ops[0], "eltwise_linear(1, " + std::to_string(c.zero_point) + ")") << l.post_ops;
    }
  }
  EXPECT_TRUE(found) << describe_layers(fused);
  expect_within_one_lsb(net, fused, 21, 0.99);
}

INSTANTIATE_TEST_SUITE_P(Forms, QuantizeLinearChain,
                         ::testing::Values(Case{"odd_zero_point", 37, true},
                                           Case{"even_zero_point", 128, true},
                                           Case{"zero_point_zero", 0, true},
                                           Case{"ranges_only", 37, false}),
                         [](const auto& p) { return p.param.name; });

}  // namespace
}  // namespace qfuse::test::fusion
