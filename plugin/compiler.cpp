// compile(): graph -> execution plan. Each live node becomes one executable
// op, in topological order.

#include <cstdlib>
#include <mutex>

#include <spdlog/spdlog.h>

#include "plugin/executable_ops/ops.hpp"
#include "plugin/execution.hpp"

namespace qfuse {

void init_logging() {
  static std::once_flag once;
  std::call_once(once, [] {
    const char* level = std::getenv("QFUSE_LOG_LEVEL");
    spdlog::set_level(level != nullptr ? spdlog::level::from_str(level) : spdlog::level::warn);
  });
}

namespace plugin {

std::unique_ptr<ExecutableOp> make_unfused_op(const graph::Graph& graph, const graph::Node& node,
                                              const dnnl::engine& engine) {
  try {
    if (auto op = make_reference_op(graph, node)) return op;
    if (auto op = make_dnnl_op(graph, node, engine)) return op;
  } catch (const dnnl::error& e) {
    throw CompileError("compile " + std::string(graph::to_string(node.kind)) + " node '" +
                       node.name + "': oneDNN refused the primitive (" + e.what() + ")");
  }
  throw UnsupportedError("compile " + std::string(graph::to_string(node.kind)) + " node '" +
                         node.name + "': no executable implementation");
}

}  // namespace plugin

CompiledModel::CompiledModel() = default;
CompiledModel::~CompiledModel() = default;
CompiledModel::CompiledModel(const CompiledModel&) = default;
CompiledModel& CompiledModel::operator=(const CompiledModel&) = default;
CompiledModel::CompiledModel(CompiledModel&&) noexcept = default;
CompiledModel& CompiledModel::operator=(CompiledModel&&) noexcept = default;
CompiledModel::CompiledModel(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

const graph::Graph& CompiledModel::graph() const { return impl_->graph; }

std::vector<std::string> CompiledModel::input_names() const {
  std::vector<std::string> names;
  for (graph::ValueId id : impl_->graph.inputs()) names.push_back(impl_->graph.value(id).name);
  return names;
}

std::vector<std::string> CompiledModel::output_names() const {
  std::vector<std::string> names;
  for (graph::ValueId id : impl_->graph.outputs()) names.push_back(impl_->graph.value(id).name);
  return names;
}

std::vector<LayerInfo> CompiledModel::layers() const {
  std::vector<LayerInfo> layers;
  for (const auto& op : impl_->ops) {
    layers.push_back({op->node().name, std::string(graph::to_string(op->node().kind)),
                      op->implementation()});
  }
  return layers;
}

CompiledModel compile(const graph::Graph& graph, const CompileOptions& options) {
  init_logging();
  auto impl = std::make_shared<CompiledModel::Impl>();
  impl->graph = graph;
  impl->options = options;
  graph::infer_shapes(impl->graph);
  graph::verify(impl->graph);
  if (options.fuse) {
    spdlog::info("compile: the fused int8 path is not available; running every node unfused");
  }
  try {
    impl->engine = dnnl::engine(dnnl::engine::kind::cpu, 0);
  } catch (const dnnl::error& e) {
    throw CompileError(std::string("compile: cannot create the oneDNN CPU engine (") + e.what() +
                       ")");
  }
  for (graph::NodeId id : impl->graph.topological_order()) {
    const graph::Node& node = impl->graph.node(id);
    auto op = plugin::make_unfused_op(impl->graph, node, impl->engine);
    spdlog::debug("compile: {} {} -> {}", node.name, graph::to_string(node.kind),
                  op->implementation());
    impl->scratchpad_size = std::max(impl->scratchpad_size, op->scratchpad_size());
    impl->ops.push_back(std::move(op));
  }
  spdlog::info("compile: {} nodes, unfused", impl->ops.size());
  return CompiledModel(std::move(impl));
}

}  // namespace qfuse
