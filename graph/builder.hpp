#pragma once
// A small fluent API to construct graphs in C++. Every node is shape-checked
// as it is added, so a bad graph fails at the line that built it.
//
//   Graph g;
//   Builder b(g);
//   auto x = b.input("x", {1, 3, 8, 8});
//   auto w = b.constant("w", Tensor::from_vector<float>({4, 3, 3, 3}, weights));
//   auto y = b.relu(b.convolution(x, w, std::nullopt, {.pads_begin = {1, 1}, .pads_end = {1, 1}}));
//   b.output(y);

#include <optional>
#include <string>

#include "graph/graph.hpp"

namespace qfuse::graph {

class Builder {
 public:
  explicit Builder(Graph& graph) : graph_(graph) {}

  ValueId input(std::string name, Shape shape, ElementType type = ElementType::f32);
  ValueId constant(std::string name, Tensor data);
  ValueId constant(std::string name, std::shared_ptr<const Tensor> data);
  ValueId constant(std::string name, Shape shape, std::vector<float> values);
  ValueId scalar(float value);  // f32 constant of shape [1]
  void output(ValueId value);

  // Adds any node, infers its output and returns it. Empty name: "<op>#<n>".
  ValueId op(OpKind kind, std::vector<ValueId> inputs, Attributes attrs = NoAttrs{},
             std::string name = {});

  ValueId convolution(ValueId x, ValueId w, std::optional<ValueId> b, ConvAttrs attrs,
                      std::string name = {});
  ValueId deconvolution(ValueId x, ValueId w, std::optional<ValueId> b, DeconvAttrs attrs,
                        std::string name = {});
  ValueId fully_connected(ValueId x, ValueId w, std::optional<ValueId> b, std::string name = {});
  ValueId matmul(ValueId a, ValueId b, bool transpose_a = false, bool transpose_b = false,
                 std::string name = {});
  ValueId fake_quantize(ValueId x, ValueId il, ValueId ih, ValueId ol, ValueId oh,
                        std::int64_t levels, std::string name = {});
  // FakeQuantize with per-tensor ranges given as numbers.
  ValueId fake_quantize(ValueId x, float il, float ih, float ol, float oh, std::int64_t levels,
                        std::string name = {});

  ValueId binary(OpKind kind, ValueId a, ValueId b, std::string name = {});
  ValueId add(ValueId a, ValueId b) { return binary(OpKind::Add, a, b); }
  ValueId multiply(ValueId a, ValueId b) { return binary(OpKind::Multiply, a, b); }
  ValueId unary(OpKind kind, ValueId x, std::string name = {});
  ValueId relu(ValueId x) { return unary(OpKind::Relu, x); }
  ValueId clamp(ValueId x, float lo, float hi, std::string name = {});
  ValueId convert(ValueId x, ElementType to, std::string name = {});
  // ONNX's QuantizeLinear onto `to`'s first `levels` codes: one scale and
  // zero point, or one per index of `axis`.
  ValueId quantize(ValueId x, ElementType to, std::vector<float> scale,
                   std::vector<std::int32_t> zero_point, std::int64_t axis = 1,
                   std::int32_t levels = 256, std::string name = {});
  // (f32(x) - zero_point) * scale: one value each, or one per index of `axis`.
  ValueId dequantize(ValueId x, std::vector<float> scale, std::vector<float> zero_point,
                     std::int64_t axis = 1, std::string name = {});

  Graph& graph() { return graph_; }

 private:
  std::string auto_name(OpKind kind);

  Graph& graph_;
  std::size_t counter_ = 0;
};

}  // namespace qfuse::graph
