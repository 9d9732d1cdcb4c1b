// The graph as bytes (graph/serialize.hpp): every attribute struct survives
// the round trip with values unlike its defaults, constants come back as
// aligned views of the stream's bytes, and every truncation of a stream is a
// GraphError, never a read past its end.

#include <gtest/gtest.h>

#include <cstring>

#include "graph/serialize.hpp"

namespace qfuse::graph {
namespace {

class StringSink : public ByteSink {
 public:
  void write(const void* data, std::size_t size) override {
    bytes.append(static_cast<const char*>(data), size);
    offset_ += size;
  }
  std::string bytes;
};

composer::PostOpChain a_chain() {
  composer::PostOpChain c;
  c.channels = 3;
  c.dst_type = composer::DataType::s8;
  c.anchor = composer::AnchorKind::inner_product;
  c.steps = {composer::Scale{{0.5f, 0.25f, 2.0f}},
             composer::Shift{{1.5f}},
             composer::Round{},
             composer::Clip{{-3.0f}, {7.0f}},
             composer::Eltwise{composer::EltwiseAlg::swish, 1.702f, 0.0f},
             composer::Sum{1, 0.75f, composer::DataType::u8},
             composer::Binary{composer::BinaryAlg::max, 2, composer::Broadcast::full,
                              composer::DataType::s8},
             composer::FakeQuantize{{-1.0f}, {1.0f}, {-2.0f}, {2.0f}, 255},
             composer::Quantize{{0.1f}, {3.0f}, -128.0f, 127.0f}};
  return c;
}

AttentionAttrs an_attention() {
  AttentionAttrs a;
  a.quantized = true;
  a.scores.geometry = MatMulAttrs{false, false, {0, 2, 1, 3}, {0, 2, 3, 1}, {}};
  a.scores.src_zero_point = 120;
  a.scores.weights_zero_point = 131;
  a.mix.geometry = MatMulAttrs{false, false, {}, {0, 2, 1, 3}, {0, 2, 1, 3}};
  a.mix.weights_zero_point = 126;
  a.mix.chain = a_chain();
  a.softmax = SoftmaxAttrs{-1, ElementType::u8, 1.0f / 255};
  a.divisor = 8.0f;
  a.factor = 0.125f;
  return a;
}

// One value of every attribute struct, none at its defaults.
std::vector<Attributes> every_attribute() {
  QuantizedLayerAttrs q;
  q.geometry = DeconvAttrs{{2, 2}, {1, 1}, {1, 0}, {0, 1}, {1, 1}, 4};
  q.src_zero_point = 7;
  q.weights_zero_point = -3;
  q.has_bias = true;
  q.dynamic = true;
  q.dynamic_weight_scales = {0.5f, 0.125f};
  q.weight_sums = {-300, 12, 5000000000};
  q.chain = a_chain();
  return {NoAttrs{},
          ConvAttrs{{2, 1}, {1, 2}, {0, 1}, {1, 0}, 3},
          DeconvAttrs{{2, 2}, {1, 1}, {1, 1}, {0, 0}, {1, 0}, 2},
          MatMulAttrs{true, true, {0, 2, 1, 3}, {0, 2, 3, 1}, {0, 2, 1, 3}},
          FakeQuantizeAttrs{255},
          ClampAttrs{-1.5f, 6.0f},
          AlphaAttrs{0.1f},
          GeluAttrs{GeluApproximation::tanh},
          ConvertAttrs{ElementType::s8, -2.0f, 3.0f},
          BatchNormAttrs{1e-3f},
          PoolAttrs{{3, 3}, {2, 2}, {1, 1}, {0, 0}, {1, 2}, false, 0.5f, 1.0f, true},
          ReshapeAttrs{{1, 4, 9}},
          FlattenAttrs{2},
          TransposeAttrs{{0, 2, 3, 1}},
          ConcatAttrs{-1},
          ResizeAttrs{ResizeMode::linear, CoordinateTransform::align_corners,
                      NearestMode::ceil, {1, 3, 8, 8}, {1.0f, 1.0f, 2.0f, 2.0f}},
          SliceAttrs{{0, 1}, {2, 3}},
          ReduceAttrs{{2, 3}},
          PowerAttrs{3.0f},
          SoftmaxAttrs{1, ElementType::u8, 1.0f / 256},
          LookupAttrs{std::vector<std::uint8_t>(256, 9), ElementType::s8},
          q,
          GatherAttrs{1},
          LayerNormAttrs{1e-12f},
          GateMultiplyAttrs{3.0f, 0.5f, QuantizeAttrs{ElementType::s8, {0.25f}, {-2}, 0, 200, 3}},
          CodeAddAttrs{1.0f, 0.5f, 2.0f, 0.25f, ConvertAttrs{ElementType::u8, -1.0f, 1.0f}},
          ShuffleChannelsAttrs{4},
          MeanInnerProductAttrs{{0.5f, 1.5f}, {0.0f, -1.0f}, 3, -6.0f, 6.0f, 4},
          DequantizeAttrs{{0.5f, 0.25f}, {1.0f, 3.0f}, 0},
          QuantizeAttrs{ElementType::s8, {0.5f, 2.0f}, {1, -1}, 0, 128, 64},
          LayerNormQuantizeAttrs{1e-6f, QuantizeAttrs{ElementType::s8, {0.25f}, {0}, 1, 255, 1}},
          an_attention()};
}

bool equal_chains(const composer::PostOpChain& a, const composer::PostOpChain& b) {
  return a.channels == b.channels && a.dst_type == b.dst_type && a.anchor == b.anchor &&
         a.steps.size() == b.steps.size();
}

TEST(SerializeGraph, EveryAttributeSurvivesTheRoundTrip) {
  Graph g;
  const ValueId x = g.add_input("x", {1, 3, 4, 4});
  const ValueId w = g.add_constant("w", Tensor::from_vector<float>({3}, {1.0f, -2.0f, 0.5f}));
  const std::vector<Attributes> attrs = every_attribute();
  ValueId last = x;
  for (std::size_t i = 0; i < attrs.size(); ++i) {
    const NodeId n = g.add_node(OpKind::Add, "n" + std::to_string(i), {last, w}, attrs[i]);
    last = g.node(n).outputs[0];
    g.value(last).shape = {1, 3, 4, static_cast<std::int64_t>(i + 1)};
    g.value(last).type = i % 2 ? ElementType::u8 : ElementType::f32;
  }
  g.mark_output(last);
  g.add_tensor_alias("model name", g.value(last).name);

  StringSink sink;
  sink.write("pad", 3);  // constants align on the stream's offsets, wherever it starts
  write_graph(sink, g);
  auto owner = std::make_shared<std::string>(sink.bytes);
  ByteSource in(std::span(reinterpret_cast<const std::byte*>(owner->data()), owner->size()));
  in.take(3);
  const Graph back = read_graph(in, owner);
  EXPECT_EQ(in.remaining(), 0u);

  ASSERT_EQ(back.live_node_count(), attrs.size());
  const std::vector<NodeId> order = back.topological_order();
  for (std::size_t i = 0; i < attrs.size(); ++i) {
    const Node& n = back.node(order[i]);
    EXPECT_EQ(n.name, "n" + std::to_string(i));
    EXPECT_EQ(n.kind, OpKind::Add);
    ASSERT_EQ(n.attrs.index(), attrs[i].index()) << n.name;
    const Value& out = back.value(n.outputs[0]);
    EXPECT_EQ(out.shape, (Shape{1, 3, 4, static_cast<std::int64_t>(i + 1)}));
    EXPECT_EQ(out.type, i % 2 ? ElementType::u8 : ElementType::f32);
    if (const auto* q = n.attr_if<QuantizedLayerAttrs>()) {
      const auto& want = *std::get<Boxed<QuantizedLayerAttrs>>(attrs[i]);
      EXPECT_EQ(q->geometry, want.geometry);
      EXPECT_EQ(q->src_zero_point, want.src_zero_point);
      EXPECT_EQ(q->weights_zero_point, want.weights_zero_point);
      EXPECT_EQ(q->has_bias, want.has_bias);
      EXPECT_EQ(q->dynamic, want.dynamic);
      EXPECT_EQ(q->dynamic_weight_scales, want.dynamic_weight_scales);
      EXPECT_EQ(q->weight_sums, want.weight_sums);
      ASSERT_TRUE(equal_chains(q->chain, want.chain));
      const auto& s = q->chain.steps;
      EXPECT_EQ(std::get<composer::Scale>(s[0]).values, (std::vector<float>{0.5f, 0.25f, 2.0f}));
      EXPECT_EQ(std::get<composer::Shift>(s[1]).values, std::vector<float>{1.5f});
      EXPECT_EQ(std::get<composer::Clip>(s[3]).hi, std::vector<float>{7.0f});
      const auto& e = std::get<composer::Eltwise>(s[4]);
      EXPECT_EQ(e.alg, composer::EltwiseAlg::swish);
      EXPECT_EQ(e.alpha, 1.702f);
      const auto& sum = std::get<composer::Sum>(s[5]);
      EXPECT_EQ(sum.input, 1);
      EXPECT_EQ(sum.scale, 0.75f);
      EXPECT_EQ(sum.data_type, composer::DataType::u8);
      const auto& b = std::get<composer::Binary>(s[6]);
      EXPECT_EQ(b.alg, composer::BinaryAlg::max);
      EXPECT_EQ(b.broadcast, composer::Broadcast::full);
      EXPECT_EQ(b.data_type, composer::DataType::s8);
      const auto& fq = std::get<composer::FakeQuantize>(s[7]);
      EXPECT_EQ(fq.output_high, std::vector<float>{2.0f});
      EXPECT_EQ(fq.levels, 255);
      const auto& qz = std::get<composer::Quantize>(s[8]);
      EXPECT_EQ(qz.zero_point, std::vector<float>{3.0f});
      EXPECT_EQ(qz.lo, -128.0f);
    } else {
      std::visit(
          [&](const auto& a) {
            using A = std::decay_t<decltype(a)>;
            if constexpr (std::is_same_v<A, Boxed<AttentionAttrs>>) {
              const AttentionAttrs& want = *std::get<A>(attrs[i]);
              EXPECT_EQ(a->quantized, want.quantized);
              EXPECT_TRUE(a->scores.geometry == want.scores.geometry);
              EXPECT_EQ(a->scores.src_zero_point, want.scores.src_zero_point);
              EXPECT_EQ(a->scores.weights_zero_point, want.scores.weights_zero_point);
              EXPECT_TRUE(a->mix.geometry == want.mix.geometry);
              EXPECT_EQ(a->mix.weights_zero_point, want.mix.weights_zero_point);
              EXPECT_TRUE(equal_chains(a->mix.chain, want.mix.chain));
              EXPECT_TRUE(a->softmax == want.softmax);
              EXPECT_EQ(a->divisor, want.divisor);
              EXPECT_EQ(a->factor, want.factor);
            } else if constexpr (!std::is_same_v<A, Boxed<QuantizedLayerAttrs>>) {
              EXPECT_TRUE(a == std::get<A>(attrs[i])) << n.name;
            }
          },
          n.attrs);
    }
  }
  EXPECT_EQ(back.value(back.outputs()[0]).name, g.value(last).name);
  EXPECT_EQ(back.tensor_aliases(), g.tensor_aliases());
  // The constant: a view of the stream's bytes, 64-byte aligned in it.
  const Value& wb = back.value(back.node(order[0]).inputs[1]);
  ASSERT_TRUE(wb.is_constant());
  EXPECT_TRUE(wb.constant->is_view());
  const auto offset = static_cast<const char*>(wb.constant->raw_data()) - owner->data();
  EXPECT_EQ(offset % 64, 0);
  EXPECT_EQ(std::vector<float>(wb.constant->data<float>().begin(), wb.constant->data<float>().end()),
            (std::vector<float>{1.0f, -2.0f, 0.5f}));
}

// The composer's results (a cache entry's compositions): a composed plan
// with scales, a destination zero point, post-ops of each kind and fixed
// points, and a refusal, come back field for field.
TEST(SerializeGraph, CompositionsSurviveTheRoundTrip) {
  composer::PostOpChain fuses;
  fuses.channels = 2;
  fuses.dst_type = composer::DataType::u8;
  fuses.steps = {composer::Scale{{0.02f, 0.03f}}, composer::Shift{{0.5f, -0.25f}},
                 composer::Sum{0, 0.5f, composer::DataType::u8},
                 composer::Eltwise{composer::EltwiseAlg::relu, 0.0f, 0.0f},
                 composer::Binary{composer::BinaryAlg::mul, 1, composer::Broadcast::per_channel,
                                  composer::DataType::f32},
                 composer::Quantize{{0.1f}, {3.0f}, 0.0f, 255.0f}};
  composer::PostOpChain refused = fuses;
  refused.channels = 3;  // per-channel vectors of 2: refused with a reason
  Compositions in{{"fuses", composer::compose(fuses)}, {"refused", composer::compose(refused)}};
  ASSERT_TRUE(in.at("fuses").fused());
  ASSERT_FALSE(in.at("refused").fused());
  StringSink sink;
  write_compositions(sink, in);
  ByteSource src(std::span(reinterpret_cast<const std::byte*>(sink.bytes.data()), sink.bytes.size()));
  const Compositions out = read_compositions(src);
  EXPECT_EQ(src.remaining(), 0u);
  ASSERT_EQ(out.size(), 2u);
  const composer::PostOpsPlan& a = *in.at("fuses").plan;
  const composer::PostOpsPlan& b = *out.at("fuses").plan;
  EXPECT_EQ(composer::describe(b), composer::describe(a));
  EXPECT_EQ(b.channels, a.channels);
  EXPECT_EQ(b.dst_type, a.dst_type);
  EXPECT_EQ(b.output_scales, a.output_scales);
  EXPECT_EQ(b.output_scales_mask, a.output_scales_mask);
  EXPECT_EQ(b.dst_zero_point, a.dst_zero_point);
  ASSERT_EQ(b.post_ops.size(), a.post_ops.size());
  for (std::size_t i = 0; i < a.post_ops.size(); ++i) {
    EXPECT_EQ(composer::describe(b.post_ops[i]), composer::describe(a.post_ops[i]));
  }
  ASSERT_EQ(b.fixed_output_scales.size(), a.fixed_output_scales.size());
  for (std::size_t i = 0; i < a.fixed_output_scales.size(); ++i) {
    EXPECT_EQ(b.fixed_output_scales[i].multiplier, a.fixed_output_scales[i].multiplier);
    EXPECT_EQ(b.fixed_output_scales[i].shift, a.fixed_output_scales[i].shift);
    EXPECT_EQ(b.fixed_output_scales[i].bits, a.fixed_output_scales[i].bits);
    EXPECT_EQ(b.fixed_output_scales[i].relative_error, a.fixed_output_scales[i].relative_error);
  }
  ASSERT_EQ(b.applied_rules.size(), a.applied_rules.size());
  for (std::size_t i = 0; i < a.applied_rules.size(); ++i) {
    EXPECT_EQ(b.applied_rules[i].rule, a.applied_rules[i].rule);
    EXPECT_EQ(b.applied_rules[i].detail, a.applied_rules[i].detail);
  }
  EXPECT_FALSE(out.at("refused").fused());
  EXPECT_EQ(out.at("refused").reason, in.at("refused").reason);
  EXPECT_FALSE(out.at("refused").reason.empty());
}

TEST(SerializeGraph, EveryTruncationIsAGraphError) {
  Graph g;
  const ValueId x = g.add_input("x", {1, 3});
  const ValueId w = g.add_constant("w", Tensor::from_vector<float>({3}, {1.0f, 2.0f, 3.0f}));
  const NodeId n = g.add_node(OpKind::Add, "add", {x, w});
  g.value(g.node(n).outputs[0]).shape = {1, 3};
  g.mark_output(g.node(n).outputs[0]);
  StringSink sink;
  write_graph(sink, g);
  auto owner = std::make_shared<std::string>(sink.bytes);
  for (std::size_t size = 0; size < owner->size(); ++size) {
    ByteSource in(std::span(reinterpret_cast<const std::byte*>(owner->data()), size));
    EXPECT_THROW(read_graph(in, owner), GraphError) << size << " of " << owner->size() << " bytes";
  }
}

TEST(SerializeGraph, AnotherVersionIsRefused) {
  Graph g;
  g.mark_output(g.add_input("x", {1}));
  StringSink sink;
  write_graph(sink, g);
  std::string bytes = sink.bytes;
  bytes[0] = static_cast<char>(bytes[0] + 1);
  ByteSource in(std::span(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()));
  try {
    read_graph(in, nullptr);
    FAIL() << "read another version";
  } catch (const GraphError& e) {
    EXPECT_NE(std::string(e.what()).find("format version"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace qfuse::graph
