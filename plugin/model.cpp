// qfuse::Model and qfuse::ModelBuilder: the public handle on a graph and the
// builder hosts use instead of the internal IR.
#include <utility>

#include "plugin/api_internal.hpp"
#include "graph/builder.hpp"

namespace qfuse {

Model::Model() : impl_(std::make_shared<const Impl>()) {}
Model::~Model() = default;
Model::Model(const Model&) = default;
Model& Model::operator=(const Model&) = default;
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;
Model::Model(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {
  if (!impl_) impl_ = std::make_shared<const Impl>();
}
const Model::Impl& Model::impl() const { return *impl_; }

std::vector<TensorInfo> Model::inputs() const {
  return tensor_infos(impl_->graph, impl_->graph.inputs());
}
std::vector<TensorInfo> Model::outputs() const {
  return tensor_infos(impl_->graph, impl_->graph.outputs());
}
std::size_t Model::node_count() const { return impl_->graph.live_node_count(); }

struct ModelBuilder::Impl {
  graph::Graph graph;
  graph::Builder builder{graph};

  graph::ValueId id(ValueRef v, const char* what) const {
    if (v.index >= graph.value_count()) {
      throw GraphError(std::string("ModelBuilder: ") + what + " is not a value of this builder (index " +
                       std::to_string(v.index) + ", " + std::to_string(graph.value_count()) +
                       " values)");
    }
    return graph::ValueId{v.index};
  }
  std::size_t spatial_dims(graph::ValueId x) const {
    const std::size_t rank = graph.value(x).shape.size();
    return rank > 2 ? rank - 2 : 0;
  }
  // Runs one builder call; any failure becomes a GraphError.
  template <class F>
  ValueRef add(F&& f) {
    try {
      return ValueRef{f().index};
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      throw GraphError(std::string("ModelBuilder: ") + e.what());
    }
  }
};

namespace {

graph::Ints or_fill(const std::vector<std::int64_t>& v, std::size_t n, std::int64_t fill) {
  return v.empty() ? graph::Ints(n, fill) : v;
}

}  // namespace

ModelBuilder::ModelBuilder() : impl_(std::make_unique<Impl>()) {}
ModelBuilder::~ModelBuilder() = default;
ModelBuilder::ModelBuilder(ModelBuilder&&) noexcept = default;
ModelBuilder& ModelBuilder::operator=(ModelBuilder&&) noexcept = default;

ValueRef ModelBuilder::input(std::string name, Shape shape, ElementType type) {
  return impl_->add([&] { return impl_->builder.input(std::move(name), std::move(shape), type); });
}

ValueRef ModelBuilder::input(std::string name, Shape shape, ElementType type,
                             std::vector<std::string> dim_names) {
  return impl_->add([&] {
    const graph::ValueId id = impl_->builder.input(std::move(name), std::move(shape), type);
    impl_->graph.set_dim_names(id, std::move(dim_names));
    return id;
  });
}

ValueRef ModelBuilder::constant(std::string name, Tensor data) {
  return impl_->add([&] { return impl_->builder.constant(std::move(name), std::move(data)); });
}

ValueRef ModelBuilder::convolution(ValueRef x, ValueRef w, std::optional<ValueRef> bias,
                                   const ConvolutionParams& p, std::string name) {
  return impl_->add([&] {
    const graph::ValueId xi = impl_->id(x, "convolution input");
    const std::size_t n = impl_->spatial_dims(xi);
    graph::ConvAttrs a{or_fill(p.strides, n, 1), or_fill(p.dilations, n, 1),
                       or_fill(p.pads_begin, n, 0), or_fill(p.pads_end, n, 0), p.groups};
    std::optional<graph::ValueId> b;
    if (bias) b = impl_->id(*bias, "convolution bias");
    return impl_->builder.convolution(xi, impl_->id(w, "convolution weights"), b, std::move(a),
                                      std::move(name));
  });
}

ValueRef ModelBuilder::deconvolution(ValueRef x, ValueRef w, std::optional<ValueRef> bias,
                                     const DeconvolutionParams& p, std::string name) {
  return impl_->add([&] {
    const graph::ValueId xi = impl_->id(x, "deconvolution input");
    const std::size_t n = impl_->spatial_dims(xi);
    graph::DeconvAttrs a{or_fill(p.strides, n, 1),    or_fill(p.dilations, n, 1),
                         or_fill(p.pads_begin, n, 0), or_fill(p.pads_end, n, 0),
                         or_fill(p.output_padding, n, 0), p.groups};
    std::optional<graph::ValueId> b;
    if (bias) b = impl_->id(*bias, "deconvolution bias");
    return impl_->builder.deconvolution(xi, impl_->id(w, "deconvolution weights"), b,
                                        std::move(a), std::move(name));
  });
}

ValueRef ModelBuilder::fully_connected(ValueRef x, ValueRef w, std::optional<ValueRef> bias,
                                       std::string name) {
  return impl_->add([&] {
    std::optional<graph::ValueId> b;
    if (bias) b = impl_->id(*bias, "fully_connected bias");
    return impl_->builder.fully_connected(impl_->id(x, "fully_connected input"),
                                          impl_->id(w, "fully_connected weights"), b,
                                          std::move(name));
  });
}

ValueRef ModelBuilder::matmul(ValueRef a, ValueRef b, bool transpose_a, bool transpose_b,
                              std::string name) {
  return impl_->add([&] {
    return impl_->builder.matmul(impl_->id(a, "matmul a"), impl_->id(b, "matmul b"), transpose_a,
                                 transpose_b, std::move(name));
  });
}

ValueRef ModelBuilder::fake_quantize(ValueRef x, ValueRef il, ValueRef ih, ValueRef ol,
                                     ValueRef oh, std::int64_t levels, std::string name) {
  return impl_->add([&] {
    return impl_->builder.fake_quantize(
        impl_->id(x, "fake_quantize input"), impl_->id(il, "input_low"),
        impl_->id(ih, "input_high"), impl_->id(ol, "output_low"), impl_->id(oh, "output_high"),
        levels, std::move(name));
  });
}

ValueRef ModelBuilder::fake_quantize(ValueRef x, float il, float ih, float ol, float oh,
                                     std::int64_t levels, std::string name) {
  return impl_->add([&] {
    return impl_->builder.fake_quantize(impl_->id(x, "fake_quantize input"), il, ih, ol, oh,
                                        levels, std::move(name));
  });
}

ValueRef ModelBuilder::binary(BinaryOp op, ValueRef a, ValueRef b, std::string name) {
  static constexpr graph::OpKind kinds[] = {graph::OpKind::Add,     graph::OpKind::Subtract,
                                            graph::OpKind::Multiply, graph::OpKind::Divide,
                                            graph::OpKind::Minimum, graph::OpKind::Maximum};
  const auto k = static_cast<std::size_t>(op);
  if (k >= std::size(kinds)) throw GraphError("ModelBuilder::binary: unknown BinaryOp");
  return impl_->add([&] {
    return impl_->builder.binary(kinds[k], impl_->id(a, "binary a"), impl_->id(b, "binary b"),
                                 std::move(name));
  });
}

ValueRef ModelBuilder::unary(UnaryOp op, ValueRef x, std::string name) {
  static constexpr graph::OpKind kinds[] = {
      graph::OpKind::Relu,     graph::OpKind::Sigmoid, graph::OpKind::Tanh,
      graph::OpKind::Gelu,     graph::OpKind::HSwish,  graph::OpKind::HSigmoid,
      graph::OpKind::Exp,      graph::OpKind::Abs,     graph::OpKind::Sqrt,
      graph::OpKind::Round};
  const auto k = static_cast<std::size_t>(op);
  if (k >= std::size(kinds)) throw GraphError("ModelBuilder::unary: unknown UnaryOp");
  return impl_->add([&] {
    return impl_->builder.unary(kinds[k], impl_->id(x, "unary input"), std::move(name));
  });
}

ValueRef ModelBuilder::leaky_relu(ValueRef x, float alpha, std::string name) {
  return impl_->add([&] {
    return impl_->builder.op(graph::OpKind::LeakyRelu, {impl_->id(x, "leaky_relu input")},
                             graph::AlphaAttrs{alpha}, std::move(name));
  });
}

ValueRef ModelBuilder::clamp(ValueRef x, float lo, float hi, std::string name) {
  return impl_->add(
      [&] { return impl_->builder.clamp(impl_->id(x, "clamp input"), lo, hi, std::move(name)); });
}

ValueRef ModelBuilder::convert(ValueRef x, ElementType to, std::string name) {
  return impl_->add(
      [&] { return impl_->builder.convert(impl_->id(x, "convert input"), to, std::move(name)); });
}

ValueRef ModelBuilder::batch_norm(ValueRef x, ValueRef gamma, ValueRef beta, ValueRef mean,
                                  ValueRef variance, float epsilon, std::string name) {
  return impl_->add([&] {
    return impl_->builder.op(graph::OpKind::BatchNormalization,
                             {impl_->id(x, "batch_norm input"), impl_->id(gamma, "gamma"),
                              impl_->id(beta, "beta"), impl_->id(mean, "mean"),
                              impl_->id(variance, "variance")},
                             graph::BatchNormAttrs{epsilon}, std::move(name));
  });
}

namespace {

graph::PoolAttrs pool_attrs(const PoolParams& p, std::size_t n) {
  graph::PoolAttrs a;
  a.kernel = p.kernel;
  a.strides = or_fill(p.strides, n, 1);
  a.pads_begin = or_fill(p.pads_begin, n, 0);
  a.pads_end = or_fill(p.pads_end, n, 0);
  a.dilations = graph::Ints(n, 1);
  a.exclude_pad = p.exclude_pad;
  return a;
}

}  // namespace

ValueRef ModelBuilder::max_pool(ValueRef x, const PoolParams& params, std::string name) {
  return impl_->add([&] {
    const graph::ValueId xi = impl_->id(x, "max_pool input");
    return impl_->builder.op(graph::OpKind::MaxPool, {xi},
                             pool_attrs(params, impl_->spatial_dims(xi)), std::move(name));
  });
}

ValueRef ModelBuilder::avg_pool(ValueRef x, const PoolParams& params, std::string name) {
  return impl_->add([&] {
    const graph::ValueId xi = impl_->id(x, "avg_pool input");
    return impl_->builder.op(graph::OpKind::AvgPool, {xi},
                             pool_attrs(params, impl_->spatial_dims(xi)), std::move(name));
  });
}

ValueRef ModelBuilder::reshape(ValueRef x, Shape shape, std::string name) {
  return impl_->add([&] {
    return impl_->builder.op(graph::OpKind::Reshape, {impl_->id(x, "reshape input")},
                             graph::ReshapeAttrs{std::move(shape)}, std::move(name));
  });
}

ValueRef ModelBuilder::flatten(ValueRef x, std::int64_t axis, std::string name) {
  return impl_->add([&] {
    return impl_->builder.op(graph::OpKind::Flatten, {impl_->id(x, "flatten input")},
                             graph::FlattenAttrs{axis}, std::move(name));
  });
}

ValueRef ModelBuilder::transpose(ValueRef x, std::vector<std::int64_t> perm, std::string name) {
  return impl_->add([&] {
    return impl_->builder.op(graph::OpKind::Transpose, {impl_->id(x, "transpose input")},
                             graph::TransposeAttrs{std::move(perm)}, std::move(name));
  });
}

ValueRef ModelBuilder::concat(const std::vector<ValueRef>& xs, std::int64_t axis,
                              std::string name) {
  return impl_->add([&] {
    std::vector<graph::ValueId> in;
    for (ValueRef x : xs) in.push_back(impl_->id(x, "concat input"));
    return impl_->builder.op(graph::OpKind::Concat, std::move(in), graph::ConcatAttrs{axis},
                             std::move(name));
  });
}

ValueRef ModelBuilder::softmax(ValueRef x, std::int64_t axis, std::string name) {
  return impl_->add([&] {
    return impl_->builder.op(graph::OpKind::Softmax, {impl_->id(x, "softmax input")},
                             graph::SoftmaxAttrs{axis}, std::move(name));
  });
}

void ModelBuilder::output(ValueRef value) {
  impl_->add([&] {
    const graph::ValueId id = impl_->id(value, "output");
    impl_->builder.output(id);
    return id;
  });
}

Model ModelBuilder::build() {
  graph::Graph g = std::move(impl_->graph);
  impl_ = std::make_unique<Impl>();
  try {
    graph::infer_shapes(g);
    graph::verify(g);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw GraphError(std::string("ModelBuilder::build: ") + e.what());
  }
  return make_model(std::move(g));
}

}  // namespace qfuse
