// compile(): graph -> execution plan. Each live node becomes one executable
// op, in topological order.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>

#include <omp.h>
#include <sys/resource.h>
#include <spdlog/spdlog.h>

#include "composer/composer.hpp"
#include "composer/post_op_chain.hpp"
#include "graph/op_info.hpp"
#include "graph/pass_manager.hpp"
#include "graph/release_memory.hpp"
#include "plugin/executable_ops/ops.hpp"
#include "plugin/executable_ops/quantized_layer.hpp"
#include "plugin/execution.hpp"
#include "plugin/attention_fusion.hpp"
#include "plugin/f32_post_ops.hpp"
#include "plugin/layout_plan.hpp"
#include "plugin/memory_plan.hpp"
#include "plugin/model_cache.hpp"
#include "plugin/api_internal.hpp"
#include "plugin/post_ops_attr.hpp"
#include "plugin/shape_cache.hpp"
#include <oneapi/dnnl/dnnl_debug.h>

namespace qfuse {

void init_logging() {
  static std::once_flag once;
  std::call_once(once, [] {
    const char* level = std::getenv("QFUSE_LOG_LEVEL");
    spdlog::set_level(level != nullptr ? spdlog::level::from_str(level) : spdlog::level::warn);
  });
}

namespace plugin {

Tensor ExecutableOp::plain_input(std::size_t index, const graph::Value& value) const {
  throw std::logic_error("node '" + node().name + "' does not keep its input " +
                         std::to_string(index) + " ('" + value.name + "')");
}

std::int64_t layer_macs(const graph::Graph& g, const graph::Node& n) {
  return layer_macs(g, n, g.value(n.outputs[0]).shape);
}

std::int64_t layer_macs(const graph::Graph& g, const graph::Node& n, const Shape& out) {
  using graph::MacCount;
  if (n.inputs.size() < 2 || out.size() < 2) return 0;
  // The layer over the mean, as the model counts it: [N, K] x [K, O].
  if (n.kind == graph::OpKind::MeanInnerProduct) {
    return element_count(out) * g.value(n.inputs[1]).shape[1];
  }
  // Attention: its two products per batch and head, [M, D] x [D, N] and
  // [M, N] x [N, Dv]: N * (q's elements + the output's).
  if (n.kind == graph::OpKind::Attention) {
    const auto& perm = std::get<graph::MatMulAttrs>(n.attr<graph::AttentionAttrs>().scores.geometry).perm_b;
    const Shape& k = g.value(n.inputs[1]).shape;
    const std::int64_t keys = perm.empty() ? k.back() : k[static_cast<std::size_t>(perm.back())];
    return keys * (element_count(g.value(n.inputs[0]).shape) + element_count(out));
  }
  const graph::LayerInfo* layer = graph::layer_info(n.kind);
  if (layer == nullptr) return 0;
  const Shape& w = g.value(n.inputs[1]).shape;
  const Shape& in = g.value(n.inputs[0]).shape;
  const std::int64_t out_elements = element_count(out);
  switch (layer->macs) {
    case MacCount::per_output_pixel: {
      const std::size_t channels = *graph::output_channel_axis(n.kind, out.size());
      return element_count(w) * (out_elements / out[channels]);
    }
    case MacCount::per_input_pixel: return element_count(w) * (element_count(in) / in[1]);
    case MacCount::contracted: {  // [.., M, K] x [.., K, N]: K per output element
      const auto* a = std::get_if<graph::MatMulAttrs>(&n.attrs);
      if (a == nullptr) return out_elements * in.back();  // int8: activations not transposed
      if (!a->perm_a.empty()) return out_elements * in[static_cast<std::size_t>(a->perm_a.back())];
      return out_elements * (a->transpose_a ? in[in.size() - 2] : in.back());
    }
  }
  return 0;
}

}  // namespace plugin

CompiledModel::CompiledModel() = default;
CompiledModel::~CompiledModel() = default;
CompiledModel::CompiledModel(const CompiledModel&) = default;
CompiledModel& CompiledModel::operator=(const CompiledModel&) = default;
CompiledModel::CompiledModel(CompiledModel&&) noexcept = default;
CompiledModel& CompiledModel::operator=(CompiledModel&&) noexcept = default;
CompiledModel::CompiledModel(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {
  if (impl_ && impl_->passes_graph) {
    shapes_ = std::make_shared<ShapeCache>(impl_, static_cast<std::size_t>(impl_->options.max_shapes));
  }
}
CompiledModel::CompiledModel(std::shared_ptr<const Impl> impl, std::shared_ptr<ShapeCache> shapes)
    : impl_(std::move(impl)), shapes_(std::move(shapes)) {}

CompiledModel CompiledModel::at_shapes(const std::map<std::string, Shape>& inputs) const {
  if (!impl_) throw GraphError("at_shapes: the model is empty (make one with qfuse::compile)");
  InputShapes all;
  const std::string misfit = resolve_input_shapes(impl_->graph, inputs, &all);
  if (!misfit.empty()) throw GraphError("at_shapes: " + misfit);
  if (all == input_shapes_of(impl_->graph)) return *this;
  if (!shapes_) {
    throw GraphError("at_shapes: the model's input shapes are fixed (no input has a symbolic "
                     "dimension); compile the model for " + shapes_text(all));
  }
  return CompiledModel(shapes_->get(all), shapes_);
}

std::vector<ShapeInfo> CompiledModel::shapes() const {
  if (shapes_) return shapes_->shapes();
  if (!impl_) return {};
  const CompileTimes& t = impl_->times;
  return {{input_shapes_of(impl_->graph), 0, impl_->memory.arena_bytes,
           t.shapes_ms + t.passes_ms + t.planning_ms + t.primitives_ms}};
}

namespace {

// A default-constructed CompiledModel reads as an empty model.
const CompiledModel::Impl& empty_impl() {
  static const CompiledModel::Impl empty;
  return empty;
}

}  // namespace

const CompiledModel::Impl& CompiledModel::impl() const { return impl_ ? *impl_ : empty_impl(); }

const graph::Graph& compiled_graph(const CompiledModel& model) {
  const CompiledModel::Impl& impl = detail::ImplAccess::of(model);
  if (impl.kept_constants.empty()) return impl.graph;
  std::call_once(impl.restore_once, [&impl] {
    auto g = std::make_unique<graph::Graph>(impl.graph);
    for (const CompiledModel::Impl::KeptConstant& k : impl.kept_constants) {
      graph::Value& v = g->value(k.value);
      v.constant = std::make_shared<const Tensor>(impl.ops[k.op]->plain_input(k.input, v));
    }
    impl.restored = std::move(g);
  });
  return *impl.restored;
}

const graph::Graph& executed_graph(const CompiledModel& model) { return detail::ImplAccess::of(model).graph; }

const composer::IntegerPlan* integer_plan(const CompiledModel& model, const graph::Node& node) {
  for (const auto& op : detail::ImplAccess::of(model).ops) {
    if (op->node().name == node.name) return op->integer_plan();
  }
  return nullptr;
}

std::optional<composer::PostOpsPlan> composed_plan(const CompiledModel& model,
                                                   const graph::Node& node) {
  if (!graph::is_quantized_layer(node.kind)) return std::nullopt;
  composer::ComposeOptions options;
  options.allow_residual_round_drop = detail::ImplAccess::of(model).options.allow_residual_round_drop;
  options.fixed_point_eta = detail::ImplAccess::of(model).options.integer_eta;
  return composer::compose(node.attr<graph::QuantizedLayerAttrs>().chain, options).plan;
}

std::vector<const graph::Node*> absorbed_post_ops(const CompiledModel& model,
                                                  const graph::Node& node) {
  const CompiledModel::Impl& impl = detail::ImplAccess::of(model);
  if (node.outputs.empty() || node.outputs[0].index >= impl.graph.value_count()) return {};
  const graph::NodeId id = impl.graph.value(node.outputs[0]).producer;
  if (!id.valid()) return {};
  // A node of the graph the ops run, or of compiled_graph()'s copy of it.
  const graph::Graph* g = &impl.graph;
  if (&g->node(id) != &node) g = &compiled_graph(model);
  if (&g->node(id) != &node) return {};
  const auto chain = impl.f32_chains.find(id.index);
  if (chain == impl.f32_chains.end()) return {};
  std::vector<const graph::Node*> nodes;
  for (const graph::NodeId a : chain->second.absorbed_nodes) nodes.push_back(&g->node(a));
  return nodes;
}

const std::vector<AbsorbedTranspose>& absorbed_transposes(const CompiledModel& model) {
  return detail::ImplAccess::of(model).absorbed_transposes;
}

std::vector<std::string> CompiledModel::input_names() const {
  std::vector<std::string> names;
  for (const TensorInfo& t : inputs()) names.push_back(t.name);
  return names;
}

std::vector<std::string> CompiledModel::output_names() const {
  std::vector<std::string> names;
  for (const TensorInfo& t : outputs()) names.push_back(t.name);
  return names;
}

std::vector<TensorInfo> CompiledModel::inputs() const {
  return tensor_infos(impl().graph, impl().graph.inputs());
}

std::vector<TensorInfo> CompiledModel::outputs() const {
  return tensor_infos(impl().graph, impl().graph.outputs());
}

namespace {

using graph::is_int8;

std::string precision_of(const graph::Graph& g, const graph::Node& n) {
  if (graph::is_quantized_layer(n.kind) || n.kind == graph::OpKind::MeanInnerProduct) return "int8";
  if (n.kind == graph::OpKind::Attention) return n.attr<graph::AttentionAttrs>().quantized ? "int8" : "f32";
  const bool in8 = !n.inputs.empty() && is_int8(g.value(n.inputs[0]).type);
  const bool out8 = is_int8(g.value(n.outputs[0]).type);
  if (in8 && out8) return "int8";
  if (out8) return "quantize";
  if (in8) return "dequantize";
  return std::string(to_string(g.value(n.outputs[0]).type));
}

}  // namespace

namespace {

std::string algorithm_name(dnnl::algorithm alg) {
  std::string name = dnnl_alg_kind2str(static_cast<dnnl_alg_kind_t>(alg));
  for (const char* prefix : {"eltwise_", "binary_"}) {
    if (name.rfind(prefix, 0) == 0) return name.substr(std::string(prefix).size());
  }
  return name;
}

ElementType element_type(composer::DataType t) {
  switch (t) {
    case composer::DataType::s8: return ElementType::s8;
    case composer::DataType::u8: return ElementType::u8;
    case composer::DataType::f32: break;
  }
  return ElementType::f32;
}

PostOp post_op_of(const plugin::F32PostOp& step) {
  PostOp p;
  p.kind = step.binary ? PostOp::Kind::binary : PostOp::Kind::eltwise;
  p.algorithm = algorithm_name(step.alg);
  p.alpha = step.alpha;
  p.beta = step.beta;
  p.per_channel = step.binary && step.values.size() > 1;
  if (step.binary) p.values = step.values;
  return p;
}

// A fused layer's plan as data; external operands named by the node's inputs.
void describe_plan(const graph::Graph& g, const graph::Node& n, const composer::PostOpsPlan& plan,
                   LayerInfo& info) {
  info.output_scales = plan.output_scales;
  info.dst_zero_point = plan.dst_zero_point;
  for (const composer::FixedPoint& f : plan.fixed_output_scales) {
    info.fixed_point_bits = std::max(info.fixed_point_bits, f.bits);
    info.fixed_point_shift = std::max(info.fixed_point_shift, f.shift);
    info.fixed_point_error = std::max(info.fixed_point_error, f.relative_error);
  }
  const std::size_t first_external = n.attr<graph::QuantizedLayerAttrs>().first_external_input();
  const auto external_name = [&](int input) {
    const std::size_t i = first_external + static_cast<std::size_t>(input);
    return i < n.inputs.size() ? g.value(n.inputs[i]).name : std::string();
  };
  for (const composer::PostOp& op : plan.post_ops) {
    PostOp p;
    if (const auto* e = std::get_if<composer::EltwisePostOp>(&op)) {
      p.kind = PostOp::Kind::eltwise;
      p.algorithm = algorithm_name(plugin::to_dnnl(e->alg));
      p.scale = e->scale;
      p.alpha = e->alpha;
      p.beta = e->beta;
    } else if (const auto* b = std::get_if<composer::BinaryPostOp>(&op)) {
      p.kind = PostOp::Kind::binary;
      p.algorithm = algorithm_name(plugin::to_dnnl(b->alg));
      p.per_channel = b->broadcast == composer::Broadcast::per_channel;
      if (const auto* c = std::get_if<composer::ConstantTensor>(&b->tensor)) {
        p.values = c->values;
      } else {
        const auto& x = std::get<composer::ExternalTensor>(b->tensor);
        p.operand = external_name(x.input);
        p.operand_type = element_type(x.data_type);
      }
    } else {
      const auto& sum = std::get<composer::SumPostOp>(op);
      p.kind = PostOp::Kind::sum;
      p.algorithm = "sum";
      p.scale = sum.scale;
      p.operand = external_name(sum.input);
      p.operand_type = element_type(sum.data_type);
    }
    info.post_op_list.push_back(std::move(p));
  }
}

}  // namespace

CompiledModel::LayerCounts CompiledModel::layer_counts() const {
  LayerCounts counts;
  for (const auto& op : impl().ops) {
    ++counts.executable_nodes;
    counts.int8_layers += graph::is_quantized_layer(op->node().kind) ? 1 : 0;
  }
  return counts;
}

std::vector<LayerInfo> CompiledModel::layers() const {
  const Impl& model = impl();
  const graph::Graph& g = model.graph;
  std::vector<LayerInfo> layers;
  for (const auto& op : model.ops) {
    const graph::Node& n = op->node();
    const std::string implementation = op->implementation();
    const bool reorder_node = n.kind == graph::OpKind::Convert &&
                              !n.attr<graph::ConvertAttrs>().quantizes() &&
                              implementation.rfind("qfuse", 0) != 0 &&
                              implementation != "reference";
    LayerInfo info{n.name, std::string(graph::to_string(n.kind)), implementation, op->post_ops(),
                   precision_of(g, n), plugin::layer_macs(g, n),
                   op->staged_reorders() + (reorder_node ? 1 : 0), implementation == "reference"};
    if (!n.inputs.empty()) info.src_type = g.value(n.inputs[0]).type;
    if (!n.outputs.empty()) info.dst_type = g.value(n.outputs[0]).type;
    if (const composer::PostOpsPlan* plan = op->plan()) {
      describe_plan(g, n, *plan, info);
    } else if (!n.outputs.empty()) {
      const auto chain = model.f32_chains.find(g.value(n.outputs[0]).producer.index);
      if (chain != model.f32_chains.end()) {
        for (const plugin::F32PostOp& step : chain->second.steps) {
          info.post_op_list.push_back(post_op_of(step));
        }
      }
    }
    if (model.options.integer_only) {
      const std::size_t index = layers.size();
      const auto note = model.integer_refusals.find(index);
      if (op->integer_plan() != nullptr || op->implementation() == "qfuse:integer_avg_pool") {
        info.integer = "integer";
      } else if (!op->integer_refusal().empty()) {
        info.integer = "float scales: " + op->integer_refusal();
      } else if (note != model.integer_refusals.end()) {
        info.integer = "float scales: " + note->second;
      }
    }
    layers.push_back(std::move(info));
  }
  return layers;
}

CompileTimes CompiledModel::compile_times() const { return impl().times; }

MemoryInfo CompiledModel::memory() const {
  const plugin::MemoryPlan& m = impl().memory;
  return {m.arena_bytes, m.unshared_bytes, m.views, m.in_place};
}

const std::vector<std::string>& CompiledModel::fusion_log() const { return impl().fusion_log; }
const std::vector<FusionRefusal>& CompiledModel::refusals() const { return impl().refusals; }

namespace {

// Work below which an op runs on one thread: forking the request's team and
// joining it again costs a few microseconds, more than a second core saves on
// a small op (PP-OCR cls and the small corpus models run 5-30% faster with
// these limits at 2 threads; PP-OCRv4 rec 3%). Measured again with the
// 5x5 depthwise networks, 256K multiply-adds beat 512K (2 threads: PP-OCR
// cls 0.419 -> 0.400 ms, MobileNetV3-small 0.264 -> 0.254, -large 0.377 ->
// 0.372, ResNet-8 0.055 -> 0.052, rec unchanged). Layers count multiply-adds
// and, since a depthwise layer does few per element it writes, output
// elements too (MobileNetV2's 3x3 depthwise over 960 channels at 7x7, 0.42M
// multiply-adds into 47K elements: 13.4 us on one thread, 9.5 us on two);
// everything else output elements.
// Matrix products (inner products and matmuls) split over output columns
// with little per-thread set-up and gain from a second core sooner: a
// transformer encoder's 64x64x64 projections and attention scores (262K
// multiply-adds) run in parallel (encoder_erf_op17_s64_dyn, 2 threads: 0.076
// -> 0.072 ms; the QDQ form 0.065 -> 0.062).
// Depthwise convolutions gain from it sooner still: MobileNetV3-small's 5x5
// depthwise layers (86K - 294K multiply-adds at 4x4 - 8x8) ran on one thread
// under the general limits; the 184-channel 8x8 one takes 10.2 us on one
// thread and 6.3 us on two (the network, 2 threads: 0.294 -> 0.262 ms;
// MobileNetV3-large 0.404 -> 0.367 ms; EfficientNet-B0 0.652 -> 0.609 ms).
constexpr std::int64_t kSerialMacs = std::int64_t{1} << 18;
constexpr std::int64_t kSerialMatrixMacs = std::int64_t{1} << 17;
constexpr std::int64_t kSerialDepthwiseMacs = std::int64_t{1} << 16;
constexpr std::int64_t kSerialElements = 16384;

bool is_matrix_product(graph::OpKind k) {
  return graph::op_info(k).channels == graph::ChannelAxis::last;
}

// One input channel per output channel: weights [OC, 1, kh, kw] over more
// than one input channel.
bool is_depthwise(const graph::Graph& g, const graph::Node& n) {
  if (n.kind != graph::OpKind::Convolution && n.kind != graph::OpKind::QuantizedConvolution) {
    return false;
  }
  const Shape& w = g.value(n.inputs[1]).shape;
  const Shape& in = g.value(n.inputs[0]).shape;
  return w.size() == 4 && w[1] == 1 && in.size() == 4 && in[1] > 1;
}

// `out`: the node's output shape (a candidate the passes check is not in the
// graph yet).
bool runs_single_threaded(const graph::Graph& g, const graph::Node& n, const Shape& out) {
  const std::int64_t macs = plugin::layer_macs(g, n, out);
  const std::int64_t elements = element_count(out);
  if (macs > 0 && is_matrix_product(n.kind)) return macs < kSerialMatrixMacs;
  if (macs > 0 && is_depthwise(g, n)) {
    return macs < kSerialDepthwiseMacs && elements < 2 * kSerialElements;
  }
  if (macs > 0) return macs < kSerialMacs && elements < 2 * kSerialElements;
  return elements < kSerialElements;
}

bool runs_single_threaded(const graph::Graph& g, const graph::Node& n) {
  return runs_single_threaded(g, n, g.value(n.outputs[0]).shape);
}

}  // namespace

CompiledModel compile(const Model& model, const CompileOptions& options) {
  return compile(model_graph(model), options);
}

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

void set_log_level(const CompileOptions& options) {
  if (options.log_level.empty()) return;
  const auto level = spdlog::level::from_str(options.log_level);
  if (level == spdlog::level::off && options.log_level != "off") {
    throw CompileError("compile: unknown log level '" + options.log_level +
                       "' (expected trace, debug, info, warn, error or off)");
  }
  spdlog::set_level(level);
}

void validate_options(const CompileOptions& options) {
  if (!(options.integer_eta > 0.0 && options.integer_eta < 1.0)) {
    throw CompileError("compile: integer_eta is " + std::to_string(options.integer_eta) +
                       " (expected a relative error bound in (0, 1))");
  }
  if (options.threads < 0) {
    throw CompileError("compile: threads is " + std::to_string(options.threads) +
                       " (expected 0 for the default, or a positive count)");
  }
  if (options.max_shapes < 0) {
    throw CompileError("compile: max_shapes is " + std::to_string(options.max_shapes) +
                       " (expected how many other input shapes to keep, 0 or more)");
  }
}

dnnl::engine cpu_engine() {
  try {
    return dnnl::engine(dnnl::engine::kind::cpu, 0);
  } catch (const dnnl::error& e) {
    throw CompileError(std::string("compile: cannot create the oneDNN CPU engine (") + e.what() +
                       ")");
  }
}

// Runs the fusion passes on impl.graph, the backend checking each candidate
// layer; keeps their log and refusals. `layer_builds` keeps what the checks
// built.
// An int8 layer checked for the team it will run on, so that its build can
// be reused.
std::optional<std::string> check_on_its_team(const CompiledModel::Impl& impl,
                                             plugin::LayerBuildCache& layer_builds,
                                             const graph::Graph& g, const graph::Node& n,
                                             const Shape& shape) {
  const int team = omp_get_max_threads();
  if (runs_single_threaded(g, n, shape)) omp_set_num_threads(1);
  auto refusal = plugin::check_quantized_layer(g, n, shape, impl.engine, impl.options, &layer_builds);
  omp_set_num_threads(team);
  return refusal;
}

void fuse(CompiledModel::Impl& impl, plugin::LayerBuildCache& layer_builds) {
  graph::PassContext ctx(
      graph::PassOptions{impl.options.allow_residual_round_drop, false},
      [&impl, &layer_builds](const graph::Graph& g, const graph::Node& n, const Shape& shape) {
        if (n.kind == graph::OpKind::Softmax) {
          if (n.inputs.size() == 2 || n.attr<graph::SoftmaxAttrs>().by_ranges()) {
            return plugin::check_row_softmax(g, n);
          }
          return plugin::check_quantizing_softmax(g, n, impl.engine);
        }
        return check_on_its_team(impl, layer_builds, g, n, shape);
      });
  graph::run_fusion_passes(impl.graph, ctx);
  impl.fusion_log = ctx.lines();
  for (const graph::Refusal& r : ctx.refusals()) {
    impl.refusals.push_back({r.pass, r.node, r.reason});
    impl.fusion_log.push_back(r.pass + ": refused '" + r.node + "': " + r.reason);
  }
  graph::verify(impl.graph);
}

// By graph output: the value has a buffer of its own, plain, that no input
// of its producer and no output of its readers shares.
std::vector<bool> outputs_owning_buffers(const CompiledModel::Impl& impl) {
  const graph::Graph& g = impl.graph;
  const std::vector<std::int64_t>& offsets = impl.memory.offset;
  std::vector<bool> owns;
  for (graph::ValueId out : g.outputs()) {
    const std::int64_t offset = offsets[out.index];
    bool own = offset >= 0 && impl.layouts[out.index] == plugin::Layout::plain;
    const graph::Value& v = g.value(out);
    if (own && v.producer.valid()) {
      for (graph::ValueId in : g.node(v.producer).inputs) own = own && offsets[in.index] != offset;
    }
    for (graph::NodeId c : g.consumers(out)) {
      for (graph::ValueId w : g.node(c).outputs) own = own && offsets[w.index] != offset;
    }
    owns.push_back(own);
  }
  return owns;
}

// The f32 layers' post-ops, each value's layout and its place in memory.
// Returns the execution order.
std::vector<graph::NodeId> plan(CompiledModel::Impl& impl, plugin::LayerBuildCache& layer_builds) {
  // f32 layers take the elementwise ops after them as post-ops (fused mode only:
  // unfused runs every node alone, the reference).
  if (impl.options.fuse) {
    impl.f32_chains = plugin::absorb_f32_post_ops(impl.graph, impl.fusion_log);
    const plugin::QuantizedCheck accepts = [&](const graph::Graph& g, const graph::Node& n) {
      return check_on_its_team(impl, layer_builds, g, n, g.value(n.outputs[0]).shape);
    };
    impl.absorbed_transposes = plugin::absorb_matmul_transposes(impl.graph, impl.f32_chains,
                                                                accepts, impl.fusion_log);
    if (impl.options.fuse_attention && !impl.options.integer_only) {
      plugin::fuse_attention(impl.graph, impl.f32_chains, impl.fusion_log);
    }
    graph::verify(impl.graph);
  }
  impl.layouts = plugin::plan_layouts(impl.graph);
  std::vector<graph::NodeId> order = impl.graph.topological_order();
  impl.memory = plugin::plan_memory(impl.graph, order, impl.layouts);
  impl.output_owns_buffer = outputs_owning_buffers(impl);
  return order;
}

// One node's executable op, or the error that stopped it.
struct MadeOp {
  std::unique_ptr<plugin::ExecutableOp> op;
  bool alone = false;
  std::optional<std::string> integer_refusal;
  std::exception_ptr error;
};

MadeOp make_op(const CompiledModel::Impl& impl, graph::NodeId id,
               const plugin::LayoutOf& layout_of, plugin::LayerBuildCache& layer_builds,
               plugin::EltwisePrimitives& eltwise_primitives) {
  const graph::Graph& g = impl.graph;
  const graph::Node& node = g.node(id);
  const CompileOptions& options = impl.options;
  MadeOp m;
  // A small op's primitive is made for one thread, so that it never forks.
  m.alone = runs_single_threaded(g, node);
  omp_set_num_threads(m.alone ? 1 : impl.threads);
  try {
    const auto chain = impl.f32_chains.find(id.index);
    m.op = plugin::make_executable(plugin::OpBuild{
        g, node, impl.engine, layout_of,
        chain != impl.f32_chains.end() ? &chain->second : nullptr, &options,
        impl.memory.sum_in_place[id.index], &layer_builds, &m.integer_refusal,
        impl.held.empty() ? nullptr : &impl.held, &eltwise_primitives});
  } catch (const dnnl::error& e) {
    m.error = std::make_exception_ptr(
        CompileError("compile " + std::string(graph::to_string(node.kind)) + " node '" +
                     node.name + "': oneDNN refused the primitive (" + e.what() + ")"));
  } catch (...) {
    m.error = std::current_exception();
  }
  return m;
}

// The constants every reader of which keeps its own copy (int8 weights
// reordered into their primitive's layout) leave the graph as soon as their
// last reader is built: it holds a placeholder of their type and shape, a
// view of no memory that no op reads, and compiled_graph() restores them
// from the op when a tool asks. So a model's plain weights and their
// reordered copies are not all resident at once.
class KeptConstantEviction {
 public:
  KeptConstantEviction(const graph::Graph& g, const std::vector<graph::NodeId>& order)
      : unbuilt_(g.value_count(), 0),
        read_otherwise_(g.value_count(), false),
        read_as_other_than_weights_(g.value_count(), false) {
    for (graph::ValueId v : g.outputs()) read_otherwise_[v.index] = true;
    for (graph::NodeId id : order) {
      const graph::Node& n = g.node(id);
      const bool quantized = graph::op_info(n.kind).category == graph::OpCategory::quantized_layer;
      for (std::size_t k = 0; k < n.inputs.size(); ++k) {
        if (!g.value(n.inputs[k]).is_constant()) continue;
        ++unbuilt_[n.inputs[k].index];
        if (!quantized || k != 1) read_as_other_than_weights_[n.inputs[k].index] = true;
      }
    }
  }

  // Ops [from, to) of the build order are made (into `made`, at the same
  // indices, which become their indices in impl.ops): the constants they
  // were the last readers of, all of them keeping a copy, leave the graph.
  void built(CompiledModel::Impl& impl, const std::vector<graph::NodeId>& order,
             const std::vector<MadeOp>& made, std::size_t from, std::size_t to) {
    graph::Graph& g = impl.graph;
    for (std::size_t i = from; i < to; ++i) {
      const std::vector<graph::ValueId>& inputs = g.node(order[i]).inputs;
      for (std::size_t k = 0; k < inputs.size(); ++k) {
        graph::Value& v = g.value(inputs[k]);
        if (!v.is_constant() || unbuilt_[inputs[k].index] == 0) continue;
        if (!made[i].op->keeps_input(k)) read_otherwise_[inputs[k].index] = true;
        if (--unbuilt_[inputs[k].index] > 0 || read_otherwise_[inputs[k].index]) continue;
        bytes_ += v.constant->byte_size();
        g.release_constant(inputs[k]);
        // The graph kept for other shapes keeps what a layer built from it
        // reads besides the weights it takes held (make_quantized_layer).
        if (impl.passes_graph && !read_as_other_than_weights_[inputs[k].index]) {
          impl.passes_graph->release_constant(inputs[k]);
        }
        impl.kept_constants.push_back({inputs[k], i, k});
      }
    }
  }

  void log(const CompiledModel::Impl& impl) const {
    spdlog::info("compile: {} constants ({:.2f} MiB) held only in their layers' layouts",
                 impl.kept_constants.size(), static_cast<double>(bytes_) / (1 << 20));
  }

 private:
  std::vector<std::uint32_t> unbuilt_;  // readers not built yet, per constant value
  std::vector<bool> read_otherwise_;    // a graph output, or read by an op keeping no copy
  std::vector<bool> read_as_other_than_weights_;  // by any op but as a quantized layer's input 1
  std::size_t bytes_ = 0;
};

// Calls make(i) for every i < count, on this thread and up to threads - 1
// helpers (at most one per 8 items). Returns the milliseconds the helpers
// spent in the composer.
double make_on_threads(std::size_t count, int threads,
                       const std::function<void(std::size_t)>& make) {
  std::atomic<std::size_t> next{0};
  std::mutex composer_mutex;
  double helpers_composer_ms = 0.0;
  const auto work = [&] {
    for (std::size_t i; (i = next++) < count;) make(i);
  };
  const auto helper = [&] {
    const double before = plugin::composer_ms_on_this_thread();
    work();
    const std::lock_guard<std::mutex> lock(composer_mutex);
    helpers_composer_ms += plugin::composer_ms_on_this_thread() - before;
  };
  std::vector<std::thread> helpers;
  const std::size_t extra =
      std::min<std::size_t>(static_cast<std::size_t>(std::max(1, threads)) - 1, count / 8);
  for (std::size_t t = 0; t < extra; ++t) {
    try {
      helpers.emplace_back(helper);
    } catch (const std::system_error&) {
      break;  // no thread to be had: the ones running (and this one) make the rest
    }
  }
  work();
  for (std::thread& t : helpers) t.join();
  return helpers_composer_ms;
}

// Logs the ops, all made without error, and keeps them in impl.ops, in
// execution order.
void keep_ops(CompiledModel::Impl& impl, const std::vector<graph::NodeId>& order,
              std::vector<MadeOp>& made) {
  for (std::size_t i = 0; i < made.size(); ++i) {
    const graph::Node& node = impl.graph.node(order[i]);
    std::unique_ptr<plugin::ExecutableOp>& op = made[i].op;
    if (made[i].integer_refusal) impl.integer_refusals[impl.ops.size()] = *made[i].integer_refusal;
    if (op->post_ops().empty()) {
      spdlog::debug("compile: {} [{}] {}", node.name, graph::to_string(node.kind),
                    op->implementation());
    } else {
      spdlog::info("compile: {} [{}] {} | {}", node.name, graph::to_string(node.kind),
                   op->implementation(), op->post_ops());
    }
    impl.scratchpad_size = std::max(impl.scratchpad_size, op->scratchpad_size());
    impl.single_threaded.push_back(made[i].alone);
    impl.ops.push_back(std::move(op));
  }
}

// One executable op per node: its oneDNN primitive, its weights reordered.
// Ops are independent of each other, so `threads` std::threads make them
// (oneDNN's primitive creation is thread-safe; no OpenMP team, whose idle
// workers would spin); they are logged and kept in execution order. Returns
// the milliseconds the helper threads spent in the composer.
double build(CompiledModel::Impl& impl, const std::vector<graph::NodeId>& order,
             plugin::LayerBuildCache& layer_builds) {
  const std::vector<plugin::Layout>& layouts = impl.layouts;
  const plugin::LayoutOf layout_of = [&layouts](graph::ValueId v) { return layouts[v.index]; };
  std::vector<MadeOp> made(order.size());
  KeptConstantEviction eviction(impl.graph, order);
  // In waves: between two, no op is being made, so the constants the last
  // wave's ops took copies of can leave the graph the threads read.
  constexpr std::size_t kWave = 32;
  double helpers_composer_ms = 0.0;
  plugin::EltwisePrimitives eltwise_primitives;
  for (std::size_t from = 0; from < order.size(); from += kWave) {
    const std::size_t to = std::min(order.size(), from + kWave);
    helpers_composer_ms += make_on_threads(to - from, impl.threads, [&](std::size_t i) {
      made[from + i] =
          make_op(impl, order[from + i], layout_of, layer_builds, eltwise_primitives);
    });
    for (std::size_t i = from; i < to; ++i) {
      if (made[i].error) std::rethrow_exception(made[i].error);
    }
    eviction.built(impl, order, made, from, to);
  }
  omp_set_num_threads(impl.threads);
  keep_ops(impl, order, made);
  eviction.log(impl);
  return helpers_composer_ms;
}

void log_compiled(const CompiledModel::Impl& impl, const plugin::LayerBuildCache& layer_builds) {
  spdlog::info("compile: {} executable nodes ({}); {} int8 layers reused the primitive descriptor "
               "their fusion check made",
               impl.ops.size(), impl.options.fuse ? "fused" : "unfused", layer_builds.reused());
  spdlog::info("compile: intermediate tensors in a {:.2f} MiB arena ({:.2f} MiB unshared), "
               "{} views, {} in place",
               static_cast<double>(impl.memory.arena_bytes) / (1 << 20),
               static_cast<double>(impl.memory.unshared_bytes) / (1 << 20), impl.memory.views,
               impl.memory.in_place);
}

// Built from weights held already (a cache entry's, or those of the model
// compiled at other shapes): how many layers use them in place (logged, and
// added to CompileTimes::cache on a cache hit).
void log_held(CompiledModel::Impl& impl) {
  std::size_t in_place = 0;
  for (const CompiledModel::Impl::KeptConstant& k : impl.kept_constants) {
    const auto held = impl.held.find(k.value.index);
    const auto now = impl.ops[k.op]->held_input(k.input);
    in_place += held != impl.held.end() && now && now->data == held->second.data;
  }
  spdlog::info("compile: {} of {} held weight tensors used in place ({} reordered again)",
               in_place, impl.held.size(), impl.held.size() - in_place);
  if (impl.times.cache.empty()) return;
  impl.times.cache += " (" + std::to_string(in_place) + " weight tensors used in place, " +
                      std::to_string(impl.held.size() - in_place) + " reordered)";
}

// The process's peak resident memory in MiB (getrusage: kB on Linux).
double peak_rss_mib() {
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0.0;
  return static_cast<double>(usage.ru_maxrss) / 1024.0;
}

// Validate, fuse, plan and build, each phase timed; `graph` is moved from.
// From a cache entry (`fused`), the graph is the one the passes left, and
// neither shape inference nor the passes run; otherwise `observer`, if any,
// sees the graph the passes leave.
CompiledModel compile_graph(graph::Graph* graph, plugin::FusedGraph* fused,
                            const CompileOptions& options, const plugin::FusedObserver& observer,
                            std::string cache, double cache_ms, bool for_shapes = false) {
  init_logging();
  set_log_level(options);
  validate_options(options);
  auto impl = std::make_shared<CompiledModel::Impl>();
  impl->options = options;
  impl->times.cache = std::move(cache);
  impl->times.cache_ms = cache_ms;
  // Primitives are made for the team that will run them (oneDNN fixes some
  // work splits and scratchpad sizes at creation).
  const int caller_threads = omp_get_max_threads();
  impl->threads = options.threads > 0 ? options.threads : caller_threads;
  omp_set_num_threads(impl->threads);
  const struct RestoreThreads {
    int n;
    ~RestoreThreads() { omp_set_num_threads(n); }
  } restore_threads{caller_threads};
  const double composer_before = plugin::composer_ms_on_this_thread();
  auto phase = Clock::now();
  if (fused != nullptr) {
    impl->graph = std::move(fused->graph);
    impl->fusion_log = std::move(fused->fusion_log);
    impl->refusals = std::move(fused->refusals);
    impl->held = std::move(fused->held);
    impl->cache_entry = std::move(fused->entry);
  } else {
    impl->graph = std::move(*graph);
    graph::infer_shapes(impl->graph);
  }
  graph::verify(impl->graph);
  impl->times.shapes_ms = ms_since(phase);
  impl->times.shapes_peak_rss_mib = peak_rss_mib();
  phase = Clock::now();
  impl->engine = cpu_engine();
  // The layers the passes accepted, built once (see LayerBuildCache); a
  // cache entry's compositions are not composed again.
  plugin::LayerBuildCache layer_builds;
  if (fused != nullptr) layer_builds.add_compositions(std::move(fused->compositions));
  if (options.fuse && fused == nullptr) fuse(*impl, layer_builds);
  impl->times.passes_ms = ms_since(phase);
  impl->times.passes_peak_rss_mib = peak_rss_mib();
  if (for_shapes) impl->passes_graph = impl->graph;
  // The graph as the passes left it, for the cache (planning changes it).
  std::optional<plugin::FusedGraph> for_cache;
  if (observer) {
    for_cache = plugin::FusedGraph{impl->graph, impl->fusion_log, impl->refusals, {}, {}, {}};
  }
  phase = Clock::now();
  const std::vector<graph::NodeId> order = plan(*impl, layer_builds);
  impl->times.planning_ms = ms_since(phase);
  impl->times.planning_peak_rss_mib = peak_rss_mib();
  phase = Clock::now();
  const double helpers_composer_ms = build(*impl, order, layer_builds);
  impl->times.primitives_ms = ms_since(phase);
  impl->times.primitives_peak_rss_mib = peak_rss_mib();
  impl->times.composer_ms =
      plugin::composer_ms_on_this_thread() - composer_before + helpers_composer_ms;
  log_compiled(*impl, layer_builds);
  if (for_shapes) impl->compositions = layer_builds.compositions();
  if (for_cache) {
    phase = Clock::now();
    for (const CompiledModel::Impl::KeptConstant& k : impl->kept_constants) {
      if (auto h = impl->ops[k.op]->held_input(k.input)) for_cache->held.emplace(k.value.index, *h);
    }
    for_cache->compositions = layer_builds.compositions();
    impl->times.cache = observer(*for_cache);
    impl->times.cache_ms += ms_since(phase);
  }
  if (fused != nullptr) log_held(*impl);
  return CompiledModel(std::move(impl));
}

}  // namespace

CompiledModel compile(const graph::Graph& graph, const CompileOptions& options) {
  if (!options.cache_dir.empty()) {
    spdlog::warn("compile: cache_dir is used by the calls that compile a model file "
                 "(compile_onnx, compile_openvino); a model given as a graph is not cached");
  }
  graph::Graph copy = graph;
  const bool symbolic = copy.has_symbolic_dims();
  CompiledModel model = compile_graph(&copy, nullptr, options, nullptr, {}, 0.0, symbolic);
  release_free_memory();  // what the passes, checks and reorders allocated for a while
  return model;
}

CompiledModel compile_for_any_shapes(const graph::Graph& graph, const CompileOptions& options) {
  graph::Graph copy = graph;
  for (const graph::ValueId id : copy.inputs()) {
    // Named already, or fixed by the model (an import's fix_dim): kept.
    if (!copy.dim_names(id).empty() || !copy.fixed_reasons(id).empty()) continue;
    std::vector<std::string> names;
    for (std::size_t d = 0; d < copy.value(id).shape.size(); ++d) {
      names.push_back(copy.value(id).name + "[" + std::to_string(d) + "]");
    }
    copy.set_dim_names(id, std::move(names));
  }
  CompiledModel model = compile_graph(&copy, nullptr, options, nullptr, {}, 0.0, true);
  release_free_memory();
  return model;
}

std::shared_ptr<const CompiledModel::Impl> compile_at_shapes(
    const std::shared_ptr<const CompiledModel::Impl>& b, const InputShapes& shapes) {
  plugin::FusedGraph fused{*b->passes_graph, b->fusion_log, b->refusals, {}, b->compositions, b};
  graph::Graph& g = fused.graph;
  for (const graph::ValueId id : g.inputs()) g.value(id).shape = shapes.at(g.value(id).name);
  // Node by node, so that an op whose output import fixed for the first
  // shapes (a Reshape's target computed from them, a Resize's sizes, a
  // Slice's box) is named before anything after it fails on its shape.
  const graph::Graph& was = *b->passes_graph;
  for (const graph::NodeId id : g.topological_order()) {
    graph::Node& n = g.node(id);
    const bool fixed_at_import =
        (n.kind == graph::OpKind::Reshape && n.attr<graph::ReshapeAttrs>().spec.empty()) ||
        n.kind == graph::OpKind::Resize || n.kind == graph::OpKind::Slice;
    if (fixed_at_import && g.value(n.inputs[0]).shape != was.value(n.inputs[0]).shape) {
      throw UnsupportedError("compile for other shapes: " + std::string(graph::to_string(n.kind)) +
                             " node '" + n.name + "' has its output shape " +
                             to_string(was.value(n.outputs[0]).shape) +
                             " fixed at import, and its input is now " +
                             to_string(g.value(n.inputs[0]).shape) +
                             "; compile the model for these shapes");
    }
    graph::infer_node(g, id);
  }
  // The weights base's layers hold in their own layouts, for the new layers
  // to read in place (compile_graph: held).
  for (const CompiledModel::Impl::KeptConstant& k : b->kept_constants) {
    if (auto h = b->ops[k.op]->held_input(k.input)) fused.held.emplace(k.value.index, *h);
  }
  for (const auto& [index, h] : b->held) fused.held.emplace(index, h);
  // The team the first shape's primitives were made for, whichever thread
  // asks for this one (a request may run with as many).
  CompileOptions options = b->options;
  options.threads = b->threads;
  CompiledModel model = compile_graph(nullptr, &fused, options, nullptr, {}, 0.0);
  release_free_memory();
  return detail::ImplAccess::shared(model);
}

CompiledModel compile_for_shapes(const CompiledModel& base,
                                 const std::map<std::string, Shape>& inputs) {
  const std::shared_ptr<const CompiledModel::Impl> own = detail::ImplAccess::shared(base);
  std::shared_ptr<const CompiledModel::Impl> b = own;
  if (b && !b->passes_graph) b = detail::ImplAccess::root(base);
  if (!b || !b->passes_graph) {
    throw Error("compile for other shapes: the model was not compiled for them "
                "(compile_for_any_shapes keeps what that needs)");
  }
  InputShapes all;
  const std::string misfit = resolve_input_shapes(own->graph, inputs, &all);
  if (!misfit.empty()) throw GraphError("compile for other shapes: " + misfit);
  return CompiledModel(compile_at_shapes(b, all), detail::ImplAccess::shape_cache(base));
}

namespace plugin {

CompiledModel compile_fused(FusedGraph fused, const CompileOptions& options,
                            const std::string& cache, double cache_ms) {
  const bool symbolic = fused.graph.has_symbolic_dims();
  CompiledModel model = compile_graph(nullptr, &fused, options, nullptr, cache, cache_ms, symbolic);
  release_free_memory();
  return model;
}

CompiledModel compile_observed(graph::Graph graph, const CompileOptions& options,
                               const FusedObserver& observer, double cache_ms) {
  const bool symbolic = graph.has_symbolic_dims();
  CompiledModel model = compile_graph(&graph, nullptr, options, observer, {}, cache_ms, symbolic);
  release_free_memory();
  return model;
}

}  // namespace plugin

}  // namespace qfuse
