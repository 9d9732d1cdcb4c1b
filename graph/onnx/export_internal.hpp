#pragma once
// Internal to the ONNX exporter (exporter.hpp says what it writes): the
// Exporter, which walks the fused graph and writes it through a Writer
// (export_writer.hpp). Its members live by concern:
//   exporter.cpp             the driver: tensor names, the graph's inputs and
//                            outputs, each node in order (and the post-ops an
//                            f32 layer absorbed), the pre-quantized form's
//                            shape ops; the public functions;
//   export_ops.cpp           the ordinary operators;
//   export_quantization.cpp  quantization and the ops on codes;
//   export_layers.cpp        the fused int8 layers.

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "graph/graph.hpp"
#include "graph/node_queries.hpp"
#include "graph/onnx/export_writer.hpp"
#include "graph/onnx/exporter.hpp"
#include "graph/onnx/proto_utils.hpp"
#include "graph/ops.hpp"

namespace qfuse::onnx::export_impl {

using detail::kInt32;
using detail::kInt8;
using detail::kUint8;
using graph::is_int8;
using graph::Node;
using graph::OpKind;

inline int onnx_type(ElementType t) { return detail::to_onnx_type(t); }

class Exporter {
 public:
  Exporter(const graph::Graph& g, const ExportSource& source, ::onnx::GraphProto& proto)
      : g_(g), source_(source), w_(proto), proto_(proto) {}

  ExportReport run();

 private:
  // ---- the driver (exporter.cpp) -------------------------------------------
  [[noreturn]] void refuse(const Node& n, const std::string& why) const;
  void add_value_info(::onnx::ValueInfoProto& info, graph::ValueId id);
  const std::string& name(graph::ValueId id) const { return names_[id.index]; }
  std::string in(graph::ValueId id);
  std::string in_f32(graph::ValueId id, const std::string& base);
  std::string cast(const std::string& x, int to, const std::string& base);
  void emit(const Node& n);

  // ---- ordinary ONNX operators (export_ops.cpp) -----------------------------
  // How ordinary() writes an op: the writer (of `n` into `y`), and whether
  // every input must be f32 (else the op is refused, naming the input).
  struct OrdinaryForm {
    void (Exporter::*write)(const Node& n, const std::string& y);
    bool f32_inputs;
  };
  static const std::map<OpKind, OrdinaryForm>& ordinary_forms();
  void ordinary(const Node& n, const std::string& y);
  void require_f32_inputs(const Node& n) const;
  void prequantized_op(const Node& n, const std::string& y);
  void binary_op(const Node& n, const std::string& y);
  void unary_op(const Node& n, const std::string& y);
  void alpha_activation(const Node& n, const std::string& y);
  void prelu(const Node& n, const std::string& y);
  void clamp(const Node& n, const std::string& y);
  void hsigmoid(const Node& n, const std::string& y);
  void power(const Node& n, const std::string& y);
  void swish(const Node& n, const std::string& y);
  void gelu(const Node& n, const std::string& y);
  void gelu_dynamic_quantize(const Node& n, const std::string& y);
  void gelu_quantize(const Node& n, const std::string& y);
  void spell_swish(const std::string& b, const std::string& x, float alpha, const std::string& y);
  void spell_gelu(const std::string& b, const std::string& x, bool tanh_form,
                  const std::string& y);
  void softmax(const Node& n, const std::string& y);
  void layer_norm(const Node& n, const std::string& y);
  void spell_layer_norm(const Node& n, float epsilon, const std::string& y);
  void layer_norm_quantize(const Node& n, const std::string& y);
  void layer_norm_dynamic_quantize(const Node& n, const std::string& y);
  void reduce_mean(const Node& n, const std::string& y);
  void batch_norm(const Node& n, const std::string& y);
  void gather(const Node& n, const std::string& y);
  void resize(const Node& n, const std::string& y);
  void slice(const Node& n, const std::string& y);
  static void pool_attrs(::onnx::NodeProto& p, const graph::PoolAttrs& a);
  void max_pool(const Node& n, const std::string& y);
  void avg_pool(const Node& n, const std::string& y);
  void convolution(const Node& n, const std::string& y);
  void deconvolution(const Node& n, const std::string& y);
  void fully_connected(const Node& n, const std::string& y);
  void matmul(const Node& n, const std::string& y);
  std::string transpose(const std::string& x, const graph::Ints& perm, const std::string& base);
  std::string transpose_last_two(const std::string& x, std::size_t rank, const std::string& base);
  static void conv_attrs(::onnx::NodeProto& node, const graph::Ints& strides,
                         const graph::Ints& dilations, const graph::Ints& pads_begin,
                         const graph::Ints& pads_end, std::int64_t groups, const Shape& w);

  // ---- quantization and the ops on codes (export_quantization.cpp) ----------
  void fake_quantize(const Node& n, const std::string& y);
  void dynamic_quantize(const Node& n, const std::string& y);
  void spell_dynamic_quantize(const Node& n, const std::string& x, std::size_t codes,
                              const std::string& y);
  std::string zero_point_scalar(graph::ValueId v, const std::string& base);
  void lookup(const Node& n, const std::string& y);
  void convert(const Node& n);
  void quantize_linear(const graph::QuantizeAttrs& a, const std::string& xin,
                       const std::string& base, const std::string& out);
  void quantize_as(const graph::ConvertAttrs& a, ElementType to, const std::string& xin,
                   const std::string& base, const std::string& out);
  void gate_multiply(const Node& n, const std::string& y);
  bool constant_on_s8_grid(const Node& n, const std::string& y);
  void quantized_constant(const Node& n);
  std::vector<graph::NodeId> weight_dequantize_nodes(const Node& mul) const;
  std::vector<graph::NodeId> zero_point_dequantize_nodes(const Node& sub) const;
  std::string transposed_weight_dequantize(const std::string& x, const std::string& base,
                                           const std::string& y = {});
  void weight_dequantize(const Node& mul, const std::vector<graph::NodeId>& spanned);
  void code_add(const Node& n, const std::string& y);
  void dequantize(const Node& n, const std::string& y);
  void mean_inner_product(const Node& n, const std::string& y);
  void quantize(const std::string& base, const std::string& x, int zt, const std::string& out);
  void int8_avg_pool(const Node& n);

  // ---- fused int8 layers (export_layers.cpp) --------------------------------
  template <typename T>
  std::string channel_constant(const Node& n, const std::string& base, int type,
                               const std::vector<T>& v);
  std::string accumulator(const Node& n, int channels, bool& is_float,
                          std::vector<double>& abs_sum);
  std::string run_time_weights_accumulator(const Node& n, int channels,
                                           std::vector<double>& abs_sum);
  template <typename T>
  void check_accumulator_bound(const Node& n, const std::vector<double>& abs_sum,
                               const std::vector<T>& bias);
  void layer(const Node& n);
  void check_exact(const Node& n, const std::vector<std::int64_t>& v, const char* what);
  std::string stage_scale(const Node& n, const composer::IntegerStage& st,
                          const std::string& base, std::string t, const std::string& residual,
                          bool writes_output);
  std::string stage_clamp(const Node& n, const composer::IntegerStage& st,
                          const std::string& base, std::string t, bool writes_output);
  void integer_dequantize(const Node& n, const composer::IntegerPlan& plan, std::string t,
                          const std::string& residual);
  void float_scale_layer(const Node& n);
  std::string dynamic_scale(const Node& n, const composer::PostOpsPlan& plan,
                            const std::string& t);
  std::string output_scales(const Node& n, const composer::PostOpsPlan& plan, std::string t);
  std::string post_op(const Node& n, const composer::PostOpsPlan& plan, std::size_t k,
                      std::string t);
  std::string external_input(const Node& n, int input, const std::string& base);
  std::string eltwise(const Node& n, const std::string& b, const std::string& x,
                      composer::EltwiseAlg alg, float alpha, float beta);

  const graph::Graph& g_;
  const ExportSource& source_;
  Writer w_;
  ::onnx::GraphProto& proto_;
  ExportReport report_;
  std::set<std::uint32_t> written_constants_;
  // By ValueId: the rank-0 ONNX tensor DynamicQuantizeLinear wrote for a
  // qfuse scale or zero point of shape [1].
  std::map<std::uint32_t, std::string> scalars_;
  std::vector<std::string> names_;  // by ValueId: the ONNX tensor name
};

}  // namespace qfuse::onnx::export_impl
