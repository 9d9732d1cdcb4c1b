// The bundled default model (tools/common/models.cpp): a residual CNN with
// FakeQuantize on both inputs of its residual Add. Every layer, the Add
// included, must end up inside the int8 layers.

#include <gtest/gtest.h>

#include <cmath>

#include "plugin/api_internal.hpp"
#include "tools/common/models.hpp"

namespace qfuse::test {
namespace {

TEST(BundledModel, EveryLayerAndTheResidualAddRunInsideInt8Layers) {
  const graph::Graph g = tools::make_bundled_model("synthetic");
  const CompiledModel fused = compile(g, {.fuse = true});
  std::size_t int8_layers = 0;
  std::string layers;
  for (const LayerInfo& l : fused.layers()) {
    int8_layers += l.op.rfind("Quantized", 0) == 0 ? 1 : 0;
    layers += "\n  " + l.op + " '" + l.node + "' " + l.post_ops;
    EXPECT_NE(l.op, "Add") << "the residual Add runs on its own" << layers;
    EXPECT_NE(l.op, "Convolution") << "'" << l.node << "' runs in f32";
    EXPECT_NE(l.op, "FullyConnected") << "'" << l.node << "' runs in f32";
  }
  EXPECT_EQ(int8_layers, 5u) << layers;  // conv1, conv2 (+ residual), conv3.dw, conv4, fc

  const CompiledModel ref = compile(g, {.fuse = false});
  InferRequest rf = fused.create_infer_request();
  InferRequest rr = ref.create_infer_request();
  const Tensor x = tools::random_inputs(g, 3)[0];
  rf.set_input("image", x);
  rr.set_input("image", x);
  rf.infer();
  rr.infer();
  const auto a = rf.output("logits").data<float>();
  const auto b = rr.output("logits").data<float>();
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-4f) << i;
}

}  // namespace
}  // namespace qfuse::test
