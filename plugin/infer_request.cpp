#include <omp.h>

#include <spdlog/spdlog.h>

#include "plugin/execution.hpp"

namespace qfuse {

struct InferRequest::Impl {
  std::shared_ptr<const CompiledModel::Impl> model;
  dnnl::stream stream;
  std::vector<Tensor> buffers;  // by ValueId; constants stay empty
  std::vector<std::uint8_t> scratchpad;
  std::vector<std::any> op_states;  // one per executable op
  int threads = 0;

  const graph::Graph& graph() const { return model->graph; }

  graph::ValueId find(const std::string& name, const std::vector<graph::ValueId>& ids,
                      const char* what) const {
    for (graph::ValueId id : ids) {
      if (graph().value(id).name == name) return id;
    }
    std::string known;
    for (graph::ValueId id : ids) known += (known.empty() ? "" : ", ") + graph().value(id).name;
    throw InferenceError(std::string("infer: no ") + what + " named '" + name + "' (expected one of " +
                         known + ")");
  }
};

InferRequest CompiledModel::create_infer_request() const {
  auto impl = std::make_unique<InferRequest::Impl>();
  impl->model = impl_;
  impl->stream = dnnl::stream(impl_->engine);
  const graph::Graph& g = impl_->graph;
  impl->buffers.resize(g.value_count());
  for (std::uint32_t i = 0; i < g.value_count(); ++i) {
    const graph::Value& v = g.value(graph::ValueId{i});
    const bool used = v.producer.valid() ||
                      std::find(g.inputs().begin(), g.inputs().end(), graph::ValueId{i}) !=
                          g.inputs().end();
    if (!v.is_constant() && used && impl_->buffer_of[i] == i) {
      impl->buffers[i] = Tensor(v.type, v.shape);
    }
  }
  impl->scratchpad.resize(impl_->scratchpad_size);
  impl->op_states.resize(impl_->ops.size());
  return InferRequest(std::move(impl));
}

InferRequest::InferRequest(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
InferRequest::~InferRequest() = default;
InferRequest::InferRequest(InferRequest&&) noexcept = default;
InferRequest& InferRequest::operator=(InferRequest&&) noexcept = default;

void InferRequest::set_input(const std::string& name, const Tensor& tensor) {
  Tensor& dst = input(name);
  if (dst.type() != tensor.type() || dst.shape() != tensor.shape()) {
    throw InferenceError("infer: input '" + name + "' is " + std::string(to_string(tensor.type())) +
                         to_string(tensor.shape()) + " (expected " +
                         std::string(to_string(dst.type())) + to_string(dst.shape()) + ")");
  }
  dst = tensor;
}

Tensor& InferRequest::input(const std::string& name) {
  return impl_->buffers[impl_->find(name, impl_->graph().inputs(), "input").index];
}

const Tensor& InferRequest::output(const std::string& name) const {
  graph::ValueId id = impl_->find(name, impl_->graph().outputs(), "output");
  const graph::Value& v = impl_->graph().value(id);
  return v.is_constant() ? *v.constant : impl_->buffers[impl_->model->buffer_of[id.index]];
}

void InferRequest::set_threads(int threads) { impl_->threads = threads; }

void InferRequest::infer() {
  if (impl_->threads > 0) omp_set_num_threads(impl_->threads);
  plugin::ExecContext ctx(impl_->graph(), impl_->buffers, impl_->model->buffer_of, impl_->stream,
                          impl_->scratchpad.data());
  for (std::size_t i = 0; i < impl_->model->ops.size(); ++i) {
    const auto& op = impl_->model->ops[i];
    ctx.set_op_state(&impl_->op_states[i]);
    try {
      op->execute(ctx);
    } catch (const dnnl::error& e) {
      throw InferenceError("infer " + std::string(graph::to_string(op->node().kind)) + " node '" +
                           op->node().name + "': oneDNN failed (" + e.what() + ")");
    }
  }
}

}  // namespace qfuse
