// The op table's layer rows and output counts: what the passes and the
// plugin read from it instead of switching on the kind.

#include <string>

#include <gtest/gtest.h>

#include "graph/builder.hpp"
#include "graph/graph.hpp"
#include "graph/op_info.hpp"
#include "qfuse/error.hpp"

namespace qfuse::graph {
namespace {

TEST(LayerTable, EachLayerAndItsInt8FormShareOneRow) {
  int layers = 0;
  for (std::size_t k = 0; k <= static_cast<std::size_t>(OpKind::Quantize); ++k) {
    const auto kind = static_cast<OpKind>(k);
    const LayerInfo* info = layer_info(kind);
    if (is_layer(kind)) {
      ++layers;
      ASSERT_NE(info, nullptr) << to_string(kind);
      const OpKind int8 = quantized_form(kind);
      EXPECT_TRUE(is_quantized_layer(int8)) << to_string(kind);
      EXPECT_EQ(float_form(int8), kind);
      EXPECT_EQ(layer_info(int8), info) << to_string(int8);
      EXPECT_EQ(op_info(kind).channels, op_info(int8).channels) << to_string(kind);
    } else if (!is_quantized_layer(kind)) {
      EXPECT_EQ(info, nullptr) << to_string(kind);
      EXPECT_EQ(float_form(kind), kind);
      EXPECT_THROW(quantized_form(kind), std::invalid_argument) << to_string(kind);
    }
  }
  EXPECT_EQ(layers, 4);
}

TEST(LayerTable, AnchorsAreThePrimitivesTheLayersRunAs) {
  EXPECT_EQ(layer_info(OpKind::QuantizedConvolution)->anchor, composer::AnchorKind::convolution);
  EXPECT_EQ(layer_info(OpKind::QuantizedDeconvolution)->anchor,
            composer::AnchorKind::deconvolution);
  EXPECT_EQ(layer_info(OpKind::QuantizedFullyConnected)->anchor,
            composer::AnchorKind::inner_product);
  EXPECT_EQ(layer_info(OpKind::QuantizedMatMul)->anchor, composer::AnchorKind::inner_product);
}

// A node whose output count differs from the table's is refused by shape
// inference, naming the count: DynamicQuantize has three (codes, scale,
// zero point), every other op one.
TEST(OutputsColumn, ANodeWithTheWrongOutputCountIsRefused) {
  EXPECT_EQ(op_info(OpKind::DynamicQuantize).outputs, 3);
  EXPECT_EQ(op_info(OpKind::Relu).outputs, 1);
  Graph g;
  Builder b(g);
  const ValueId x = b.input("x", {2, 3});
  const NodeId id = g.add_node(OpKind::DynamicQuantize, "dq", {x});
  try {
    infer_node(g, id);
    FAIL() << "a one-output DynamicQuantize was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected 3 output(s), got 1"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace qfuse::graph
