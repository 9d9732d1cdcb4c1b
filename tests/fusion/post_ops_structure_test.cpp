// The composed post-op structure of fused layers, read back through
// CompiledModel::layers(): output scales, int8 destinations, the single sum
// of a residual block, and source zero points.

#include <gtest/gtest.h>

#include "fusion_test_util.hpp"

namespace qfuse::test::fusion {
namespace {

LayerCase conv3x3(std::string name, std::int64_t ic = 16, std::int64_t oc = 16) {
  LayerCase c;
  c.name = std::move(name);
  c.kind = LayerKind::conv;
  c.input = {1, ic, 10, 10};
  c.out_channels = oc;
  c.kernel = {3, 3};
  c.pads_begin = {1, 1};
  c.pads_end = {1, 1};
  c.seed = 7;
  return c;
}

LayerInfo layer_named(const CompiledModel& m, const std::string& name) {
  for (const LayerInfo& l : m.layers()) {
    if (l.node == name) return l;
  }
  ADD_FAILURE() << "no layer '" << name << "'" << describe_layers(m);
  return {};
}

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

// The post-op list between the output scales and the destination type.
std::vector<std::string> post_op_names(const std::string& post_ops) {
  const std::size_t first = post_ops.find(" | ");
  const std::size_t last = post_ops.rfind(" | ");
  std::vector<std::string> names;
  if (first == std::string::npos || last == first) return names;
  std::string list = post_ops.substr(first + 3, last - first - 3);
  if (list.rfind("dst_zero_point", 0) == 0) list = list.substr(list.find(" | ") + 3);
  if (list == "(none)") return names;
  std::size_t start = 0;
  while (start < list.size()) {
    std::size_t end = list.find("; ", start);
    if (end == std::string::npos) end = list.size();
    const std::string item = list.substr(start, end - start);
    names.push_back(item.substr(0, item.find_first_of("( ")));
    start = end + 2;
  }
  return names;
}

// conv -> FQ(s8) -> Relu -> FQ(u8) -> conv: the relu folds into the u8
// range, the first FakeQuantize becomes round/clip post-ops after per-channel
// output scales, and the second one is the u8 destination itself.
TEST(PostOpStructure, ConvFqReluFqChainHasPerChannelOutputScalesAndU8Destination) {
  LayerCase c = conv3x3("conv_fq_relu_fq");
  c.tail = Tail::fq_relu_fq;
  c.output_quant = Quant::u8;
  c.next_layer = true;
  const Model m = ModelBuilder::build(c);
  const CompiledModel fused = compile(m.graph, {.fuse = true});
  const LayerInfo l = layer_named(fused, "layer");
  EXPECT_EQ(l.op, "QuantizedConvolution");
  EXPECT_TRUE(is_int8_implementation(l.implementation)) << l.implementation;
  EXPECT_EQ(l.post_ops.rfind("output_scales [", 0), 0u) << l.post_ops;  // one per channel
  EXPECT_TRUE(l.post_ops.ends_with(" | u8")) << l.post_ops;
  EXPECT_EQ(count_of(l.post_ops, "sum("), 0u) << l.post_ops;
  // FQ(s8): shift to the zero level, round (scaled by So / So_u8), shift
  // back. Its clip to [ol, oh] and the relu are both inside what the u8
  // destination's saturation to [0, 255] already does (oh >= the u8 range's
  // top), so the u8 FakeQuantize needs no post-op of its own.
  EXPECT_EQ(post_op_names(l.post_ops),
            (std::vector<std::string>{"eltwise_linear", "eltwise_round", "binary_add"}))
      << l.post_ops;
  EXPECT_EQ(count_of(l.post_ops, "eltwise_relu"), 0u) << l.post_ops;
  EXPECT_EQ(count_of(l.post_ops, "eltwise_round"), 1u) << l.post_ops;
  for (const LayerInfo& n : fused.layers()) {
    EXPECT_NE(n.op, "Relu") << describe_layers(fused);
  }
}

TEST(PostOpStructure, PerTensorWeightsGiveOneOutputScale) {
  LayerCase c = conv3x3("per_tensor");
  c.per_channel_weights = false;
  c.next_layer = true;
  const Model m = ModelBuilder::build(c);
  const CompiledModel fused = compile(m.graph, {.fuse = true});
  const LayerInfo l = layer_named(fused, "layer");
  EXPECT_EQ(l.post_ops.rfind("output_scales ", 0), 0u) << l.post_ops;
  EXPECT_EQ(l.post_ops.rfind("output_scales [", 0), std::string::npos) << l.post_ops;
  EXPECT_TRUE(l.post_ops.ends_with(" | s8")) << l.post_ops;
}

// y = FQ(conv(xq) + xq): the block input is read once, by one sum post-op,
// straight from its s8 buffer.
TEST(PostOpStructure, ResidualBlockHasExactlyOneSum) {
  LayerCase c = conv3x3("residual");
  c.input_quant = Quant::s8;
  c.tail = Tail::residual;
  c.next_layer = true;
  const Model m = ModelBuilder::build(c);
  const CompiledModel fused = compile(m.graph, {.fuse = true});
  const LayerInfo l = layer_named(fused, "layer");
  EXPECT_EQ(l.op, "QuantizedConvolution");
  EXPECT_EQ(count_of(l.post_ops, "sum("), 1u) << l.post_ops;
  EXPECT_EQ(count_of(l.post_ops, "sum(input 0,"), 1u) << l.post_ops;
  EXPECT_EQ(count_of(l.post_ops, ", s8)"), 1u) << l.post_ops;
  EXPECT_TRUE(l.post_ops.ends_with(" | s8")) << l.post_ops;
  EXPECT_EQ(count_of(l.post_ops, "binary_add(full"), 0u) << "the residual must not be an f32 binary "
                                                        << l.post_ops;
  for (const LayerInfo& n : fused.layers()) {
    EXPECT_NE(n.op, "Add") << describe_layers(fused);
  }
}

// An asymmetric input range (il < 0 < ih, 256 levels) is stored as u8 with
// zero point Z = -il / S and handed to oneDNN as a source zero point.
TEST(PostOpStructure, AsymmetricInputBecomesSourceZeroPoint) {
  LayerCase c = conv3x3("asym");
  c.input_quant = Quant::asym;
  const Model m = ModelBuilder::build(c);
  const CompiledModel fused = compile(m.graph, {.fuse = true});
  bool logged = false;
  for (const std::string& line : fused.fusion_log()) {
    logged = logged || line.find("layer -> QuantizedConvolution (u8 x s8, src zero point 77") !=
                           std::string::npos;
  }
  EXPECT_TRUE(logged) << describe_layers(fused);
  const LayerInfo l = layer_named(fused, "layer");
  EXPECT_TRUE(is_int8_implementation(l.implementation)) << l.implementation;
}

// BatchNormalization with every gamma > 0 folds into the weights (no post-op
// left of it); with a negative gamma it becomes per-channel scale and shift.
TEST(PostOpStructure, BatchNormWithPositiveGammaFoldsIntoWeights) {
  LayerCase c = conv3x3("bn");
  c.tail = Tail::batch_norm;
  c.next_layer = true;
  const Model m = ModelBuilder::build(c);
  const CompiledModel fused = compile(m.graph, {.fuse = true});
  bool folded = false;
  for (const std::string& line : fused.fusion_log()) {
    folded = folded || line == "fold_batch_norm: bn -> layer.weights and .bias";
  }
  EXPECT_TRUE(folded) << describe_layers(fused);
  const LayerInfo l = layer_named(fused, "layer");
  EXPECT_TRUE(post_op_names(l.post_ops).empty()) << l.post_ops;
  EXPECT_TRUE(l.post_ops.ends_with(" | s8")) << l.post_ops;
}

}  // namespace
}  // namespace qfuse::test::fusion
