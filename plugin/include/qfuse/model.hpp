#pragma once
// An uncompiled model and the builder that makes one. A host either imports
// a model (qfuse/onnx.hpp) or builds it here, op by op; compile() (qfuse.hpp)
// turns it into a CompiledModel.
//
//   qfuse::ModelBuilder b;
//   auto x = b.input("x", {1, 3, 8, 8});
//   auto xq = b.fake_quantize(x, 0.0f, 2.55f, 0.0f, 2.55f, 256);
//   auto w = b.constant("w", qfuse::Tensor::from_vector<float>({4, 3, 3, 3}, weights));
//   auto y = b.convolution(xq, w, std::nullopt, {.pads_begin = {1, 1}, .pads_end = {1, 1}});
//   b.output(b.unary(qfuse::UnaryOp::relu, y));
//   qfuse::Model model = b.build();
//
// Every op is checked as it is added (shapes, types, attributes): a bad model
// fails with a GraphError at the line that built it.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "qfuse/export.hpp"
#include "qfuse/tensor.hpp"

namespace qfuse {

// A graph input or output as the compiled model sees it.
struct TensorInfo {
  std::string name;
  ElementType type = ElementType::f32;
  Shape shape;
  // A graph input's symbolic dimensions, one name per dimension ("" where
  // the model fixes it); empty when the whole shape is fixed. `shape` is the
  // size they were compiled at; a request may set others (InferRequest), and
  // dimensions of one name, in any input, change together.
  std::vector<std::string> dim_names;
  // Per dimension, why the model fixes it where the import traced a reason
  // (a node reads the size as a constant), else ""; empty when none.
  std::vector<std::string> fixed_reasons;
};

// A model: an immutable graph of operators, shared by the copies of a Model.
namespace detail {
struct ImplAccess;  // qfuse's own code: the internals behind a handle
}  // namespace detail

class QFUSE_API Model {
 public:
  Model();  // empty: no inputs, no outputs
  ~Model();
  Model(const Model&);
  Model& operator=(const Model&);
  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;

  std::vector<TensorInfo> inputs() const;
  std::vector<TensorInfo> outputs() const;
  std::size_t node_count() const;

  // Internal: the graph behind the handle (qfuse's own code reaches it
  // through detail::ImplAccess).
  struct Impl;
  explicit Model(std::shared_ptr<const Impl> impl);

 private:
  friend struct detail::ImplAccess;
  const Impl& impl() const;
  std::shared_ptr<const Impl> impl_;
};

// A value being built: an index into the builder's graph.
struct ValueRef {
  std::uint32_t index = UINT32_MAX;
};

// Spatial attributes: one entry per spatial dimension. Empty means the
// default for every dimension (stride 1, dilation 1, padding 0).
struct ConvolutionParams {
  std::vector<std::int64_t> strides;
  std::vector<std::int64_t> dilations;
  std::vector<std::int64_t> pads_begin;
  std::vector<std::int64_t> pads_end;
  std::int64_t groups = 1;
};

// Transposed convolution; output = (in - 1) * stride + (k - 1) * dilation + 1
// - pad_begin - pad_end + output_padding.
struct DeconvolutionParams {
  std::vector<std::int64_t> strides;
  std::vector<std::int64_t> dilations;
  std::vector<std::int64_t> pads_begin;
  std::vector<std::int64_t> pads_end;
  std::vector<std::int64_t> output_padding;
  std::int64_t groups = 1;
};

// MaxPool / AvgPool. AvgPool divides by the real (unpadded) cells when
// exclude_pad, by the kernel size otherwise.
struct PoolParams {
  std::vector<std::int64_t> kernel;
  std::vector<std::int64_t> strides;
  std::vector<std::int64_t> pads_begin;
  std::vector<std::int64_t> pads_end;
  bool exclude_pad = true;
};

enum class UnaryOp : std::uint8_t {
  relu, sigmoid, tanh, gelu, hswish, hsigmoid, exp, abs, sqrt, round  // round: half to even
};
enum class BinaryOp : std::uint8_t { add, subtract, multiply, divide, minimum, maximum };

class QFUSE_API ModelBuilder {
 public:
  ModelBuilder();
  ~ModelBuilder();
  ModelBuilder(ModelBuilder&&) noexcept;
  ModelBuilder& operator=(ModelBuilder&&) noexcept;

  // Names are unique; an empty node name becomes "<Op>#<n>".
  ValueRef input(std::string name, Shape shape, ElementType type = ElementType::f32);
  // An input with symbolic dimensions (TensorInfo::dim_names): a name per
  // dimension, "" where it is fixed; `shape` is the size to compile at first.
  ValueRef input(std::string name, Shape shape, ElementType type,
                 std::vector<std::string> dim_names);
  ValueRef constant(std::string name, Tensor data);

  // Layers: x is [N, C, spatial...]; w is [O, C / groups, k...] for a
  // convolution, [C, O / groups, k...] for a deconvolution, [O, K] for a
  // fully-connected layer (y = x w^T + b over x's last dimension).
  ValueRef convolution(ValueRef x, ValueRef w, std::optional<ValueRef> bias,
                       const ConvolutionParams& params = {}, std::string name = {});
  ValueRef deconvolution(ValueRef x, ValueRef w, std::optional<ValueRef> bias,
                         const DeconvolutionParams& params = {}, std::string name = {});
  ValueRef fully_connected(ValueRef x, ValueRef w, std::optional<ValueRef> bias,
                           std::string name = {});
  ValueRef matmul(ValueRef a, ValueRef b, bool transpose_a = false, bool transpose_b = false,
                  std::string name = {});

  // FakeQuantize (OpenVINO's definition): ranges broadcast to x, `levels` >= 2.
  ValueRef fake_quantize(ValueRef x, ValueRef input_low, ValueRef input_high, ValueRef output_low,
                         ValueRef output_high, std::int64_t levels, std::string name = {});
  ValueRef fake_quantize(ValueRef x, float input_low, float input_high, float output_low,
                         float output_high, std::int64_t levels, std::string name = {});

  // Elementwise; binary operands broadcast like numpy.
  ValueRef binary(BinaryOp op, ValueRef a, ValueRef b, std::string name = {});
  ValueRef unary(UnaryOp op, ValueRef x, std::string name = {});
  ValueRef leaky_relu(ValueRef x, float alpha, std::string name = {});
  ValueRef clamp(ValueRef x, float lo, float hi, std::string name = {});
  // To an integer type: rounds half to even and saturates.
  ValueRef convert(ValueRef x, ElementType to, std::string name = {});
  ValueRef batch_norm(ValueRef x, ValueRef gamma, ValueRef beta, ValueRef mean,
                      ValueRef variance, float epsilon = 1e-5f, std::string name = {});

  ValueRef max_pool(ValueRef x, const PoolParams& params, std::string name = {});
  ValueRef avg_pool(ValueRef x, const PoolParams& params, std::string name = {});
  ValueRef reshape(ValueRef x, Shape shape, std::string name = {});
  ValueRef flatten(ValueRef x, std::int64_t axis = 1, std::string name = {});
  ValueRef transpose(ValueRef x, std::vector<std::int64_t> perm, std::string name = {});
  ValueRef concat(const std::vector<ValueRef>& xs, std::int64_t axis, std::string name = {});
  ValueRef softmax(ValueRef x, std::int64_t axis = -1, std::string name = {});

  // Marks a graph output (in call order).
  void output(ValueRef value);

  // The model built so far, validated; the builder is empty afterwards.
  Model build();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace qfuse
