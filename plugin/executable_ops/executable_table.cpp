// Which executable runs each op: one row per OpKind (in OpKind's order, as
// graph/op_info.cpp's table), listing the makers to try in order. A maker
// returns null when its form does not take the node (qfuse's kernel for
// codes in channels last, say), and the next one is tried; the last is
// usually oneDNN's primitive. One that alone runs the node's form throws
// CompileError instead (a Softmax with a mask). Adding an op means one row
// here.

#include <array>
#include <cstddef>
#include <string>

#include "graph/op_info.hpp"
#include "plugin/executable_ops/ops.hpp"
#include "qfuse/error.hpp"

namespace qfuse::plugin {
namespace {

using graph::OpKind;

const CompileOptions& options_of(const OpBuild& b) {
  static const CompileOptions defaults;
  return b.options != nullptr ? *b.options : defaults;
}

// The int8 form of a layer: one oneDNN primitive with its composed post-ops.
std::unique_ptr<ExecutableOp> make_int8_layer(const OpBuild& b) {
  return make_quantized_layer(b.graph, b.node, b.engine, options_of(b), b.layout_of,
                              b.sum_in_place, b.layer_builds, b.held);
}

// Integer-only mode: an int8 AvgPool as integer sums (make_integer_avg_pool).
// Where it has no such form, why not is recorded and the next maker runs it.
std::unique_ptr<ExecutableOp> make_integer_avg_pool_in_integer_mode(const OpBuild& b) {
  const CompileOptions& options = options_of(b);
  const ElementType in = b.in(0).type;
  if (!options.integer_only || (in != ElementType::u8 && in != ElementType::s8) ||
      b.node.attr<graph::PoolAttrs>().to_f32) {
    return nullptr;
  }
  std::string why;
  auto op = make_integer_avg_pool(b.graph, b.node, b.layout_of, options.integer_eta, why);
  if (!op && b.integer_refusal != nullptr) *b.integer_refusal = why;
  return op;
}

struct Executables {
  OpKind kind;
  std::array<MakeExecutable, 3> makers;  // tried in order; unused ones null
};

// clang-format off
constexpr std::array kExecutables{
  Executables{OpKind::Convolution,             {make_dnnl_convolution}},
  Executables{OpKind::Deconvolution,           {make_dnnl_deconvolution}},
  Executables{OpKind::FullyConnected,          {make_dnnl_fully_connected}},
  Executables{OpKind::MatMul,                  {make_dnnl_matmul}},
  Executables{OpKind::FakeQuantize,            {make_fake_quantize}},
  Executables{OpKind::Multiply,                {make_dnnl_binary}},
  Executables{OpKind::Add,                     {make_dnnl_binary}},
  Executables{OpKind::Subtract,                {make_dnnl_binary}},
  Executables{OpKind::Divide,                  {make_dnnl_binary}},
  Executables{OpKind::Minimum,                 {make_dnnl_binary}},
  Executables{OpKind::Maximum,                 {make_dnnl_binary}},
  Executables{OpKind::Round,                   {make_dnnl_eltwise}},
  Executables{OpKind::Clamp,                   {make_dnnl_eltwise}},
  Executables{OpKind::Relu,                    {make_dnnl_eltwise}},
  Executables{OpKind::LeakyRelu,               {make_dnnl_eltwise}},
  Executables{OpKind::PRelu,                   {make_dnnl_prelu}},
  Executables{OpKind::Sigmoid,                 {make_dnnl_eltwise}},
  Executables{OpKind::Tanh,                    {make_dnnl_eltwise}},
  Executables{OpKind::Elu,                     {make_dnnl_eltwise}},
  Executables{OpKind::Gelu,                    {make_dnnl_eltwise}},
  Executables{OpKind::HSwish,                  {make_dnnl_eltwise}},
  Executables{OpKind::HSigmoid,                {make_dnnl_eltwise}},
  Executables{OpKind::Swish,                   {make_dnnl_eltwise}},
  Executables{OpKind::Exp,                     {make_dnnl_eltwise}},
  Executables{OpKind::Abs,                     {make_dnnl_eltwise}},
  Executables{OpKind::Sqrt,                    {make_dnnl_eltwise}},
  Executables{OpKind::Convert,                 {make_quantizing_convert, make_integer_convert, make_dnnl_reorder}},
  Executables{OpKind::BatchNormalization,      {make_dnnl_batch_norm}},
  Executables{OpKind::MaxPool,                 {make_max_pool_of_codes, make_dnnl_pool}},
  Executables{OpKind::AvgPool,                 {make_integer_avg_pool_in_integer_mode, make_dequantized_mean, make_dnnl_pool}},
  Executables{OpKind::Reshape,                 {make_copy}},
  Executables{OpKind::Flatten,                 {make_copy}},
  Executables{OpKind::Transpose,               {make_dnnl_transpose}},
  Executables{OpKind::Concat,                  {make_concat}},
  Executables{OpKind::Resize,                  {make_resize}},
  Executables{OpKind::Slice,                   {make_slice_of_rows, make_dnnl_slice}},
  Executables{OpKind::ReduceMean,              {make_consecutive_reduce_mean, make_dnnl_reduce_mean}},
  Executables{OpKind::Power,                   {make_dnnl_power}},
  Executables{OpKind::Softmax,                 {make_row_softmax, make_strided_softmax, make_dnnl_softmax}},
  Executables{OpKind::Lookup,                  {make_lookup}},
  Executables{OpKind::GateMultiply,            {make_gate_multiply}},
  Executables{OpKind::CodeAdd,                 {make_code_add}},
  Executables{OpKind::QuantizedConvolution,    {make_int8_layer}},
  Executables{OpKind::QuantizedDeconvolution,  {make_int8_layer}},
  Executables{OpKind::QuantizedFullyConnected, {make_int8_layer}},
  Executables{OpKind::QuantizedMatMul,         {make_int8_layer}},
  Executables{OpKind::Gather,                  {make_gather}},
  Executables{OpKind::LayerNorm,               {make_layer_norm}},
  Executables{OpKind::LayerNormQuantize,       {make_layer_norm}},
  Executables{OpKind::LayerNormDynamicQuantize, {make_layer_norm}},
  Executables{OpKind::DynamicQuantize,         {make_dynamic_quantize}},
  Executables{OpKind::ShuffleChannels,         {make_shuffle_channels}},
  Executables{OpKind::MeanInnerProduct,        {make_dnnl_mean_inner_product}},
  Executables{OpKind::Dequantize,              {make_dequantize}},
  Executables{OpKind::Quantize,                {make_quantize}},
  Executables{OpKind::GeluDynamicQuantize,     {make_gelu_quantize}},
  Executables{OpKind::GeluQuantize,            {make_gelu_quantize}},
  Executables{OpKind::Attention,               {make_attention}},
};
// clang-format on

constexpr bool in_kind_order() {
  for (std::size_t i = 0; i < kExecutables.size(); ++i) {
    if (static_cast<std::size_t>(kExecutables[i].kind) != i) return false;
  }
  return static_cast<std::size_t>(OpKind::Attention) + 1 == kExecutables.size();
}
static_assert(in_kind_order(), "kExecutables must hold one row per OpKind, in OpKind's order");

}  // namespace

dnnl::memory::desc OpBuild::in_md(std::size_t i) const {
  return layout_desc(in(i).shape, in(i).type, layout(node.inputs[i]));
}

dnnl::memory::desc OpBuild::out_md() const {
  return layout_desc(out().shape, out().type, layout(node.outputs[0]));
}

std::unique_ptr<ExecutableOp> make_executable(const OpBuild& build) {
  for (const MakeExecutable make : kExecutables[static_cast<std::size_t>(build.node.kind)].makers) {
    if (make == nullptr) break;
    if (auto op = make(build)) return op;
  }
  throw UnsupportedError("compile " + std::string(graph::to_string(build.node.kind)) + " node '" +
                         build.node.name + "': no executable implementation");
}

}  // namespace qfuse::plugin
