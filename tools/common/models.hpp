#pragma once
// Models bundled with qfuse and built in C++, so they need no file. (The
// default model of `qfuse run` is the Fashion-MNIST classifier, an ONNX file:
// tools/fashion_mnist/.)

#include <string>
#include <vector>

#include "graph/graph.hpp"

namespace qfuse::tools {

// Names accepted by make_bundled_model().
std::vector<std::string> bundled_model_names();

// "synthetic": a small residual CNN quantized with FakeQuantize nodes (u8
// activations, per-channel symmetric weights), input "image" [1,3,64,64] with
// values in [0, 1], output "logits" [1,10]. Weights come from a fixed seed and
// activation ranges from one calibration pass of the f32 network.
// Throws std::invalid_argument for an unknown name.
graph::Graph make_bundled_model(const std::string& name);

// Deterministic pseudo-random input for every graph input: f32 uniform in
// [0, 1), u8 in [0, 255], s8 in [-128, 127], s32 in [-1000, 1000].
std::vector<Tensor> random_inputs(const graph::Graph& graph, unsigned seed);

}  // namespace qfuse::tools
