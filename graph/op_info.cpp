#include "graph/op_info.hpp"

#include <array>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>

#include "graph/graph.hpp"

namespace qfuse::graph {
namespace {

using C = OpCategory;
using E = composer::EltwiseAlg;
using A = EltwiseArgs;
using Ch = ChannelAxis;
constexpr std::optional<E> no_eltwise = std::nullopt;

// In OpKind's order.
// clang-format off
constexpr std::array kOps{
  //     kind                              name                       category           inputs          comm.  eltwise            args      channels     moves  onnx         outputs
  OpInfo{OpKind::Convolution,              "Convolution",             C::layer,          2, 3,           false, no_eltwise,        A::none,  Ch::second,  false, "",          1},
  OpInfo{OpKind::Deconvolution,            "Deconvolution",           C::layer,          2, 3,           false, no_eltwise,        A::none,  Ch::second,  false, "",          1},
  OpInfo{OpKind::FullyConnected,           "FullyConnected",          C::layer,          2, 3,           false, no_eltwise,        A::none,  Ch::last,    false, "",          1},
  OpInfo{OpKind::MatMul,                   "MatMul",                  C::layer,          2, 6,           false, no_eltwise,        A::none,  Ch::last,    false, "",          1},
  OpInfo{OpKind::FakeQuantize,             "FakeQuantize",            C::quantization,   5, 5,           false, no_eltwise,        A::none,  Ch::none,    false, "",          1},
  OpInfo{OpKind::Multiply,                 "Multiply",                C::binary,         2, 2,           true,  no_eltwise,        A::none,  Ch::none,    false, "Mul",       1},
  OpInfo{OpKind::Add,                      "Add",                     C::binary,         2, 2,           true,  no_eltwise,        A::none,  Ch::none,    false, "Add",       1},
  OpInfo{OpKind::Subtract,                 "Subtract",                C::binary,         2, 2,           false, no_eltwise,        A::none,  Ch::none,    false, "Sub",       1},
  OpInfo{OpKind::Divide,                   "Divide",                  C::binary,         2, 2,           false, no_eltwise,        A::none,  Ch::none,    false, "Div",       1},
  OpInfo{OpKind::Minimum,                  "Minimum",                 C::binary,         2, 2,           true,  no_eltwise,        A::none,  Ch::none,    false, "Min",       1},
  OpInfo{OpKind::Maximum,                  "Maximum",                 C::binary,         2, 2,           true,  no_eltwise,        A::none,  Ch::none,    false, "Max",       1},
  OpInfo{OpKind::Round,                    "Round",                   C::unary,          1, 1,           false, E::round,          A::none,  Ch::none,    false, "Round",     1},
  OpInfo{OpKind::Clamp,                    "Clamp",                   C::unary,          1, 1,           false, E::clip,           A::clamp, Ch::none,    false, "",          1},
  OpInfo{OpKind::Relu,                     "Relu",                    C::unary,          1, 1,           false, E::relu,           A::none,  Ch::none,    false, "Relu",      1},
  OpInfo{OpKind::LeakyRelu,                "LeakyRelu",               C::unary,          1, 1,           false, E::relu,           A::alpha, Ch::none,    false, "",          1},
  OpInfo{OpKind::PRelu,                    "PRelu",                   C::other,          2, 2,           false, no_eltwise,        A::none,  Ch::none,    false, "",          1},
  OpInfo{OpKind::Sigmoid,                  "Sigmoid",                 C::unary,          1, 1,           false, E::logistic,       A::none,  Ch::none,    false, "Sigmoid",   1},
  OpInfo{OpKind::Tanh,                     "Tanh",                    C::unary,          1, 1,           false, E::tanh,           A::none,  Ch::none,    false, "Tanh",      1},
  OpInfo{OpKind::Elu,                      "Elu",                     C::unary,          1, 1,           false, E::elu,            A::alpha, Ch::none,    false, "",          1},
  OpInfo{OpKind::Gelu,                     "Gelu",                    C::unary,          1, 1,           false, E::gelu_erf,       A::gelu,  Ch::none,    false, "",          1},
  OpInfo{OpKind::HSwish,                   "HSwish",                  C::unary,          1, 1,           false, E::hardswish,      A::none,  Ch::none,    false, "HardSwish", 1},
  OpInfo{OpKind::HSigmoid,                 "HSigmoid",                C::unary,          1, 1,           false, E::hsigmoid,       A::none,  Ch::none,    false, "",          1},
  OpInfo{OpKind::Swish,                    "Swish",                   C::unary,          1, 1,           false, E::swish,          A::alpha, Ch::none,    false, "",          1},
  OpInfo{OpKind::Exp,                      "Exp",                     C::unary,          1, 1,           false, E::exp,            A::none,  Ch::none,    false, "Exp",       1},
  OpInfo{OpKind::Abs,                      "Abs",                     C::unary,          1, 1,           false, E::abs,            A::none,  Ch::none,    false, "Abs",       1},
  OpInfo{OpKind::Sqrt,                     "Sqrt",                    C::unary,          1, 1,           false, E::sqrt,           A::none,  Ch::none,    false, "Sqrt",      1},
  OpInfo{OpKind::Convert,                  "Convert",                 C::quantization,   1, 1,           false, no_eltwise,        A::none,  Ch::none,    false, "",          1},
  OpInfo{OpKind::BatchNormalization,       "BatchNormalization",      C::normalization,  5, 5,           false, no_eltwise,        A::none,  Ch::none,    false, "",          1},
  OpInfo{OpKind::MaxPool,                  "MaxPool",                 C::pooling,        1, 1,           false, no_eltwise,        A::none,  Ch::none,    true, "",          1},
  OpInfo{OpKind::AvgPool,                  "AvgPool",                 C::pooling,        1, 1,           false, no_eltwise,        A::none,  Ch::none,    false, "",          1},
  OpInfo{OpKind::Reshape,                  "Reshape",                 C::data_movement,  1, 1,           false, no_eltwise,        A::none,  Ch::none,    true, "",          1},
  OpInfo{OpKind::Flatten,                  "Flatten",                 C::data_movement,  1, 1,           false, no_eltwise,        A::none,  Ch::none,    true, "",          1},
  OpInfo{OpKind::Transpose,                "Transpose",               C::data_movement,  1, 1,           false, no_eltwise,        A::none,  Ch::none,    true, "",          1},
  OpInfo{OpKind::Concat,                   "Concat",                  C::data_movement,  1, kVariadic,   false, no_eltwise,        A::none,  Ch::none,    false, "",          1},
  OpInfo{OpKind::Resize,                   "Resize",                  C::data_movement,  1, 1,           false, no_eltwise,        A::none,  Ch::none,    true, "",          1},
  OpInfo{OpKind::Slice,                    "Slice",                   C::data_movement,  1, 1,           false, no_eltwise,        A::none,  Ch::none,    true, "",          1},
  OpInfo{OpKind::ReduceMean,               "ReduceMean",              C::other,          1, 1,           false, no_eltwise,        A::none,  Ch::none,    false, "",          1},
  OpInfo{OpKind::Power,                    "Power",                   C::other,          1, 1,           false, no_eltwise,        A::none,  Ch::none,    false, "",          1},
  OpInfo{OpKind::Softmax,                  "Softmax",                 C::normalization,  1, 2,           false, no_eltwise,        A::none,  Ch::none,    false, "",          1},
  OpInfo{OpKind::Lookup,                   "Lookup",                  C::quantization,   1, 1,           false, no_eltwise,        A::none,  Ch::none,    false, "",          1},
  OpInfo{OpKind::GateMultiply,             "GateMultiply",            C::quantization,   2, 2,           false, no_eltwise,        A::none,  Ch::none,    false, "",          1},
  OpInfo{OpKind::CodeAdd,                  "CodeAdd",                 C::quantization,   2, 2,           false, no_eltwise,        A::none,  Ch::none,    false, "",          1},
  OpInfo{OpKind::QuantizedConvolution,     "QuantizedConvolution",    C::quantized_layer, 2, kVariadic,  false, no_eltwise,        A::none,  Ch::second,  false, "",          1},
  OpInfo{OpKind::QuantizedDeconvolution,   "QuantizedDeconvolution",  C::quantized_layer, 2, kVariadic,  false, no_eltwise,        A::none,  Ch::second,  false, "",          1},
  OpInfo{OpKind::QuantizedFullyConnected,  "QuantizedFullyConnected", C::quantized_layer, 2, kVariadic,  false, no_eltwise,        A::none,  Ch::last,    false, "",          1},
  OpInfo{OpKind::QuantizedMatMul,          "QuantizedMatMul",         C::quantized_layer, 2, kVariadic,  false, no_eltwise,        A::none,  Ch::last,    false, "",          1},
  OpInfo{OpKind::Gather,                   "Gather",                  C::data_movement,  2, 2,           false, no_eltwise,        A::none,  Ch::none,    false, "",          1},
  OpInfo{OpKind::LayerNorm,                "LayerNorm",               C::normalization,  3, 3,           false, no_eltwise,        A::none,  Ch::none,    false, "",          1},
  OpInfo{OpKind::LayerNormQuantize,        "LayerNormQuantize",       C::normalization,  3, 3,           false, no_eltwise,        A::none,  Ch::none,    false, "",          2},
  OpInfo{OpKind::LayerNormDynamicQuantize, "LayerNormDynamicQuantize", C::normalization,  3, 3,           false, no_eltwise,        A::none,  Ch::none,    false, "",          4},
  OpInfo{OpKind::DynamicQuantize,          "DynamicQuantize",         C::quantization,   1, 1,           false, no_eltwise,        A::none,  Ch::none,    false, "",          3},
  OpInfo{OpKind::ShuffleChannels,          "ShuffleChannels",         C::data_movement,  1, 1,           false, no_eltwise,        A::none,  Ch::none,    true, "",          1},
  OpInfo{OpKind::MeanInnerProduct,         "MeanInnerProduct",        C::quantization,   2, 2,           false, no_eltwise,        A::none,  Ch::none,    false, "",          1},
  OpInfo{OpKind::Dequantize,               "Dequantize",              C::quantization,   1, 1,           false, no_eltwise,        A::none,  Ch::none,    false, "",          1},
  OpInfo{OpKind::Quantize,                 "Quantize",                C::quantization,   1, 1,           false, no_eltwise,        A::none,  Ch::none,    false, "",          1},
  OpInfo{OpKind::GeluDynamicQuantize,      "GeluDynamicQuantize",     C::quantization,   1, 1,           false, no_eltwise,        A::none,  Ch::none,    false, "",          4},
  OpInfo{OpKind::GeluQuantize,             "GeluQuantize",            C::quantization,   1, 1,           false, no_eltwise,        A::none,  Ch::none,    false, "",          2},
  OpInfo{OpKind::Attention,                "Attention",               C::other,          3, 4,           false, no_eltwise,        A::none,  Ch::none,    false, "",          1},
};
// clang-format on

constexpr bool in_kind_order() {
  for (std::size_t i = 0; i < kOps.size(); ++i) {
    if (static_cast<std::size_t>(kOps[i].kind) != i) return false;
  }
  return static_cast<std::size_t>(OpKind::Attention) + 1 == kOps.size();
}
static_assert(in_kind_order(), "kOps must hold one row per OpKind, in OpKind's order");

using W = WeightsAxis;
using M = MacCount;
using Anchor = composer::AnchorKind;
// Each layer: its f32 and int8 forms and what the passes and the plugin ask of it.
constexpr std::array<LayerInfo, 4> kLayers{{
    {OpKind::Convolution, OpKind::QuantizedConvolution, Anchor::convolution, W::first,
     M::per_output_pixel},
    {OpKind::Deconvolution, OpKind::QuantizedDeconvolution, Anchor::deconvolution,
     W::deconvolution, M::per_input_pixel},
    {OpKind::FullyConnected, OpKind::QuantizedFullyConnected, Anchor::inner_product, W::first,
     M::per_output_pixel},
    {OpKind::MatMul, OpKind::QuantizedMatMul, Anchor::inner_product, W::matmul, M::contracted},
}};

}  // namespace

const OpInfo& op_info(OpKind kind) { return kOps[static_cast<std::size_t>(kind)]; }

std::optional<OpKind> op_kind_named(std::string_view name) {
  for (const OpInfo& info : kOps) {
    if (info.name == name) return info.kind;
  }
  return std::nullopt;
}

std::optional<OpKind> op_kind_of_onnx(std::string_view onnx_op) {
  if (onnx_op.empty()) return std::nullopt;
  for (const OpInfo& info : kOps) {
    if (info.onnx == onnx_op) return info.kind;
  }
  return std::nullopt;
}

std::string_view to_string(OpKind kind) { return op_info(kind).name; }
bool is_elementwise_binary(OpKind kind) { return op_info(kind).category == OpCategory::binary; }
bool is_elementwise_unary(OpKind kind) { return op_info(kind).category == OpCategory::unary; }
bool is_quantized_layer(OpKind kind) { return op_info(kind).category == OpCategory::quantized_layer; }
bool is_layer(OpKind kind) { return op_info(kind).category == OpCategory::layer; }
bool is_commutative(OpKind kind) { return op_info(kind).commutative; }

std::optional<composer::Eltwise> eltwise_of(const Node& n) {
  const OpInfo& info = op_info(n.kind);
  if (!info.eltwise) return std::nullopt;
  switch (info.eltwise_args) {
    case EltwiseArgs::none: return composer::Eltwise{*info.eltwise, 0.0f, 0.0f};
    case EltwiseArgs::alpha: return composer::Eltwise{*info.eltwise, n.attr<AlphaAttrs>().alpha, 0.0f};
    case EltwiseArgs::clamp: {
      const auto& a = n.attr<ClampAttrs>();
      return composer::Eltwise{*info.eltwise, a.lo, a.hi};
    }
    case EltwiseArgs::gelu:
      return composer::Eltwise{n.attr<GeluAttrs>().approximation == GeluApproximation::erf
                                   ? composer::EltwiseAlg::gelu_erf
                                   : composer::EltwiseAlg::gelu_tanh,
                               0.0f, 0.0f};
  }
  return std::nullopt;
}

const LayerInfo* layer_info(OpKind kind) {
  for (const LayerInfo& info : kLayers) {
    if (info.f32 == kind || info.int8 == kind) return &info;
  }
  return nullptr;
}

OpKind quantized_form(OpKind layer) {
  const LayerInfo* info = layer_info(layer);
  if (info == nullptr || info->f32 != layer) {
    throw std::invalid_argument("quantized_form: " + std::string(to_string(layer)) +
                                " is not a layer");
  }
  return info->int8;
}

OpKind float_form(OpKind kind) {
  const LayerInfo* info = layer_info(kind);
  return info != nullptr && info->int8 == kind ? info->f32 : kind;
}

std::optional<std::size_t> output_channel_axis(OpKind kind, std::size_t rank) {
  switch (op_info(kind).channels) {
    case ChannelAxis::second: return rank >= 2 ? std::optional<std::size_t>(1) : std::nullopt;
    case ChannelAxis::last: return rank >= 1 ? std::optional<std::size_t>(rank - 1) : std::nullopt;
    case ChannelAxis::none: break;
  }
  return std::nullopt;
}

}  // namespace qfuse::graph
