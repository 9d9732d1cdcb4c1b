#include "graph/ops.hpp"

namespace qfuse::graph {

std::string_view to_string(OpKind kind) {
  switch (kind) {
    case OpKind::Convolution: return "Convolution";
    case OpKind::Deconvolution: return "Deconvolution";
    case OpKind::FullyConnected: return "FullyConnected";
    case OpKind::MatMul: return "MatMul";
    case OpKind::FakeQuantize: return "FakeQuantize";
    case OpKind::Multiply: return "Multiply";
    case OpKind::Add: return "Add";
    case OpKind::Subtract: return "Subtract";
    case OpKind::Divide: return "Divide";
    case OpKind::Minimum: return "Minimum";
    case OpKind::Maximum: return "Maximum";
    case OpKind::Round: return "Round";
    case OpKind::Clamp: return "Clamp";
    case OpKind::Relu: return "Relu";
    case OpKind::LeakyRelu: return "LeakyRelu";
    case OpKind::PRelu: return "PRelu";
    case OpKind::Sigmoid: return "Sigmoid";
    case OpKind::Tanh: return "Tanh";
    case OpKind::Elu: return "Elu";
    case OpKind::Gelu: return "Gelu";
    case OpKind::HSwish: return "HSwish";
    case OpKind::HSigmoid: return "HSigmoid";
    case OpKind::Swish: return "Swish";
    case OpKind::Exp: return "Exp";
    case OpKind::Abs: return "Abs";
    case OpKind::Sqrt: return "Sqrt";
    case OpKind::Convert: return "Convert";
    case OpKind::BatchNormalization: return "BatchNormalization";
    case OpKind::MaxPool: return "MaxPool";
    case OpKind::AvgPool: return "AvgPool";
    case OpKind::Reshape: return "Reshape";
    case OpKind::Flatten: return "Flatten";
    case OpKind::Transpose: return "Transpose";
    case OpKind::Concat: return "Concat";
    case OpKind::Resize: return "Resize";
    case OpKind::Slice: return "Slice";
    case OpKind::ReduceMean: return "ReduceMean";
    case OpKind::Power: return "Power";
    case OpKind::Softmax: return "Softmax";
    case OpKind::Lookup: return "Lookup";
    case OpKind::GateMultiply: return "GateMultiply";
    case OpKind::Gather: return "Gather";
    case OpKind::LayerNorm: return "LayerNorm";
    case OpKind::DynamicQuantize: return "DynamicQuantize";
    case OpKind::QuantizedConvolution: return "QuantizedConvolution";
    case OpKind::QuantizedDeconvolution: return "QuantizedDeconvolution";
    case OpKind::QuantizedFullyConnected: return "QuantizedFullyConnected";
    case OpKind::QuantizedMatMul: return "QuantizedMatMul";
  }
  return "?";
}

bool is_elementwise_binary(OpKind kind) {
  switch (kind) {
    case OpKind::Multiply:
    case OpKind::Add:
    case OpKind::Subtract:
    case OpKind::Divide:
    case OpKind::Minimum:
    case OpKind::Maximum: return true;
    default: return false;
  }
}

bool is_elementwise_unary(OpKind kind) {
  switch (kind) {
    case OpKind::Round:
    case OpKind::Clamp:
    case OpKind::Relu:
    case OpKind::LeakyRelu:
    case OpKind::Sigmoid:
    case OpKind::Tanh:
    case OpKind::Elu:
    case OpKind::Gelu:
    case OpKind::HSwish:
    case OpKind::HSigmoid:
    case OpKind::Swish:
    case OpKind::Exp:
    case OpKind::Abs:
    case OpKind::Sqrt: return true;
    default: return false;
  }
}

bool is_quantized_layer(OpKind kind) {
  switch (kind) {
    case OpKind::QuantizedConvolution:
    case OpKind::QuantizedDeconvolution:
    case OpKind::QuantizedFullyConnected:
    case OpKind::QuantizedMatMul: return true;
    default: return false;
  }
}

}  // namespace qfuse::graph
