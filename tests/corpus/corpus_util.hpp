#pragma once
// Helpers the corpus test binaries share: the models of the corpus directory
// (QFUSE_CORPUS_DIR, written by tools/corpus/build_corpus.py) and how their
// outputs are judged.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "graph/graph.hpp"
#include "graph/passes/pattern.hpp"
#include "qfuse/qfuse.hpp"
#include "qfuse/tensor.hpp"

namespace qfuse::corpus {

// The model names (file stems) of the corpus directory, sorted.
inline std::vector<std::string> models() {
  namespace fs = std::filesystem;
  std::vector<std::string> names;
  const fs::path dir(QFUSE_CORPUS_DIR);
  if (!fs::is_directory(dir)) return names;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".onnx") names.push_back(e.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// "<net>" for the real networks' files "<net>_f32|_wq|_qdq", else empty.
inline std::string real_network(const std::string& name) {
  namespace fs = std::filesystem;
  const auto cut = name.rfind('_');
  if (cut == std::string::npos) return {};
  const std::string net = name.substr(0, cut);
  return fs::exists(fs::path(QFUSE_CORPUS_DIR) / (net + "_f32.output.npy")) ? net : std::string();
}

// Whether the model is a detector whose outputs sit 40 and more quantized
// layers deep (torch_qat_yolov8: 55 convolutions, SiLU tables between grids,
// a softmax in the head). A one-code near-tie flip in an early layer moves
// values several layers on by more than a code, so its outputs are judged
// by their cosine and the share within one code; each layer stays held to
// one code in isolation.
inline bool deep_detector(const std::string& name) { return name.find("yolo") != std::string::npos; }

// The quantum of an f32 output made by a FakeQuantize or a Dequantize (per
// channel on axis 1, or per tensor); nullopt when the output has no
// quantization grid.
inline std::optional<std::vector<float>> quantum_of(const graph::Graph& g, graph::ValueId v) {
  if (const graph::Node* dq = graph::pattern::producer_of(g, v, graph::OpKind::Dequantize)) {
    const auto& a = dq->attr<graph::DequantizeAttrs>();
    if (a.per_tensor() || a.axis == 1) return a.scale;
    return std::nullopt;
  }
  const graph::Node* fq = graph::pattern::producer_of(g, v, graph::OpKind::FakeQuantize);
  if (fq == nullptr) return std::nullopt;
  const Shape& shape = g.value(v).shape;
  return graph::pattern::output_quantum(g, *fq, shape, shape.size() > 1 ? 1 : 0);
}

// The index of each row's largest element (rows along the last dimension).
inline std::vector<std::int64_t> argmax_rows(const Tensor& t) {
  const std::int64_t n = t.shape().back();
  std::vector<std::int64_t> out;
  for (std::int64_t r = 0; r < t.size() / n; ++r) {
    std::int64_t best = 0;
    for (std::int64_t i = 1; i < n; ++i) {
      if (t.as_float(r * n + i) > t.as_float(r * n + best)) best = i;
    }
    out.push_back(best);
  }
  return out;
}

// A detector's answer: its probability map [N, 1, H, W] binarized at DBNet's
// threshold (0.3), one mask per image.
inline bool is_probability_map(const Tensor& t) {
  return t.shape().size() == 4 && t.shape()[1] == 1;
}

// The share of pixels whose side of `threshold` differs between two maps.
inline double mask_disagreement(const Tensor& a, const Tensor& b, float threshold = 0.3f) {
  std::int64_t differ = 0;
  for (std::int64_t i = 0; i < a.size(); ++i) {
    differ += (a.as_float(i) > threshold) != (b.as_float(i) > threshold);
  }
  return static_cast<double>(differ) / static_cast<double>(a.size());
}

// What one inference of a compiled model shows, byte for byte: its outputs,
// each layer's implementation and post-ops, and its fusion log.
struct Observed {
  std::vector<std::vector<std::byte>> outputs;
  std::vector<std::string> implementations;
  std::vector<std::string> fusion_log;
};

// `model` run once on `inputs` (in the order of its input names).
inline Observed run(const CompiledModel& model, const std::vector<Tensor>& inputs) {
  InferRequest r = model.create_infer_request();
  const std::vector<std::string> names = model.input_names();
  for (std::size_t i = 0; i < inputs.size(); ++i) r.set_input(names[i], inputs[i]);
  r.infer();
  Observed out;
  for (const std::string& name : model.output_names()) {
    const Tensor t = r.output(name);
    const auto* p = static_cast<const std::byte*>(t.raw_data());
    out.outputs.emplace_back(p, p + t.byte_size());
  }
  for (const LayerInfo& l : model.layers()) {
    out.implementations.push_back(l.node + " " + l.implementation + " " + l.post_ops);
  }
  out.fusion_log = model.fusion_log();
  return out;
}

}  // namespace qfuse::corpus
