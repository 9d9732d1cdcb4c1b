#include "graph/builder.hpp"

#include <cctype>

namespace qfuse::graph {

ValueId Builder::input(std::string name, Shape shape, ElementType type) {
  return graph_.add_input(std::move(name), std::move(shape), type);
}

ValueId Builder::constant(std::string name, Tensor data) {
  return graph_.add_constant(std::move(name), std::move(data));
}

ValueId Builder::constant(std::string name, std::shared_ptr<const Tensor> data) {
  return graph_.add_constant(std::move(name), std::move(data));
}

ValueId Builder::constant(std::string name, Shape shape, std::vector<float> values) {
  return constant(std::move(name), Tensor::from_vector<float>(std::move(shape), std::move(values)));
}

ValueId Builder::scalar(float value) {
  return constant("const#" + std::to_string(counter_++), Shape{1}, {value});
}

void Builder::output(ValueId value) { graph_.mark_output(value); }

std::string Builder::auto_name(OpKind kind) {
  std::string name(to_string(kind));
  for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return name + "#" + std::to_string(counter_++);
}

ValueId Builder::op(OpKind kind, std::vector<ValueId> inputs, Attributes attrs,
                    std::string name) {
  if (name.empty()) name = auto_name(kind);
  NodeId id = graph_.add_node(kind, std::move(name), std::move(inputs), std::move(attrs));
  infer_node(graph_, id);
  return graph_.node(id).outputs[0];
}

ValueId Builder::convolution(ValueId x, ValueId w, std::optional<ValueId> b, ConvAttrs attrs,
                             std::string name) {
  std::vector<ValueId> in{x, w};
  if (b) in.push_back(*b);
  return op(OpKind::Convolution, std::move(in), std::move(attrs), std::move(name));
}

ValueId Builder::deconvolution(ValueId x, ValueId w, std::optional<ValueId> b, DeconvAttrs attrs,
                               std::string name) {
  std::vector<ValueId> in{x, w};
  if (b) in.push_back(*b);
  return op(OpKind::Deconvolution, std::move(in), std::move(attrs), std::move(name));
}

ValueId Builder::fully_connected(ValueId x, ValueId w, std::optional<ValueId> b,
                                 std::string name) {
  std::vector<ValueId> in{x, w};
  if (b) in.push_back(*b);
  return op(OpKind::FullyConnected, std::move(in), NoAttrs{}, std::move(name));
}

ValueId Builder::matmul(ValueId a, ValueId b, bool transpose_a, bool transpose_b,
                        std::string name) {
  return op(OpKind::MatMul, {a, b}, MatMulAttrs{transpose_a, transpose_b}, std::move(name));
}

ValueId Builder::fake_quantize(ValueId x, ValueId il, ValueId ih, ValueId ol, ValueId oh,
                               std::int64_t levels, std::string name) {
  return op(OpKind::FakeQuantize, {x, il, ih, ol, oh}, FakeQuantizeAttrs{levels},
            std::move(name));
}

ValueId Builder::fake_quantize(ValueId x, float il, float ih, float ol, float oh,
                               std::int64_t levels, std::string name) {
  return fake_quantize(x, scalar(il), scalar(ih), scalar(ol), scalar(oh), levels,
                       std::move(name));
}

ValueId Builder::binary(OpKind kind, ValueId a, ValueId b, std::string name) {
  return op(kind, {a, b}, NoAttrs{}, std::move(name));
}

ValueId Builder::unary(OpKind kind, ValueId x, std::string name) {
  Attributes attrs = NoAttrs{};
  if (kind == OpKind::LeakyRelu) attrs = AlphaAttrs{0.01f};
  if (kind == OpKind::Elu) attrs = AlphaAttrs{1.0f};
  if (kind == OpKind::Gelu) attrs = GeluAttrs{};
  return op(kind, {x}, std::move(attrs), std::move(name));
}

ValueId Builder::clamp(ValueId x, float lo, float hi, std::string name) {
  return op(OpKind::Clamp, {x}, ClampAttrs{lo, hi}, std::move(name));
}

ValueId Builder::convert(ValueId x, ElementType to, std::string name) {
  return op(OpKind::Convert, {x}, ConvertAttrs{to}, std::move(name));
}

ValueId Builder::quantize(ValueId x, ElementType to, std::vector<float> scale,
                          std::vector<std::int32_t> zero_point, std::int64_t axis,
                          std::int32_t levels, std::string name) {
  return op(OpKind::Quantize, {x},
            QuantizeAttrs{to, std::move(scale), std::move(zero_point), axis, levels},
            std::move(name));
}

ValueId Builder::dequantize(ValueId x, std::vector<float> scale, std::vector<float> zero_point,
                            std::int64_t axis, std::string name) {
  return op(OpKind::Dequantize, {x}, DequantizeAttrs{std::move(scale), std::move(zero_point), axis},
            std::move(name));
}

}  // namespace qfuse::graph
