#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include <omp.h>

#include <spdlog/spdlog.h>

#include "plugin/api_internal.hpp"
#include "plugin/execution.hpp"

namespace qfuse {

namespace {

using AlignedBlock = std::unique_ptr<std::byte[], void (*)(void*)>;

// `bytes` (rounded up to whole alignment units) at a 64-byte boundary: the
// kernels' vector and AMX tile loads run slower across cache lines (an int8
// inner product read from malloc's 16-byte-aligned blocks ran 35% slower).
AlignedBlock aligned_block(std::size_t bytes, const char* what) {
  constexpr std::size_t a = plugin::MemoryPlan::kAlignment;
  if (bytes == 0) return AlignedBlock(nullptr, std::free);
  AlignedBlock block(static_cast<std::byte*>(std::aligned_alloc(a, (bytes + a - 1) / a * a)),
                     std::free);
  if (!block) {
    throw InferenceError("create_infer_request: cannot allocate the " + std::to_string(bytes) +
                         "-byte " + what);
  }
  return block;
}

// A channels-last tensor (N, spatial..., C bytes under an N, C, spatial...
// shape) in plain order, for the value observer.
Tensor plain_copy(const Tensor& t) {
  Tensor out(t.type(), t.shape());
  const Shape& s = t.shape();
  const std::size_t size = element_size(t.type());
  const auto n = static_cast<std::size_t>(s[0]), c = static_cast<std::size_t>(s[1]);
  const std::size_t spatial = static_cast<std::size_t>(element_count(s)) / std::max<std::size_t>(n * c, 1);
  const auto* src = static_cast<const std::byte*>(t.raw_data());
  auto* dst = static_cast<std::byte*>(out.raw_data());
  for (std::size_t b = 0; b < n; ++b) {
    for (std::size_t ch = 0; ch < c; ++ch) {
      for (std::size_t p = 0; p < spatial; ++p) {
        std::memcpy(dst + ((b * c + ch) * spatial + p) * size, src + ((b * spatial + p) * c + ch) * size,
                    size);
      }
    }
  }
  return out;
}

// The inverse of plain_copy: `plain`'s elements (C order) into the
// channels-last buffer `t`.
void store_channels_last(const Tensor& plain, Tensor& t) {
  const Shape& s = t.shape();
  const std::size_t size = element_size(t.type());
  const auto n = static_cast<std::size_t>(s[0]), c = static_cast<std::size_t>(s[1]);
  const std::size_t spatial = static_cast<std::size_t>(element_count(s)) / std::max<std::size_t>(n * c, 1);
  const auto* src = static_cast<const std::byte*>(plain.raw_data());
  auto* dst = static_cast<std::byte*>(t.raw_data());
  for (std::size_t b = 0; b < n; ++b) {
    for (std::size_t ch = 0; ch < c; ++ch) {
      for (std::size_t p = 0; p < spatial; ++p) {
        std::memcpy(dst + ((b * spatial + p) * c + ch) * size, src + ((b * c + ch) * spatial + p) * size,
                    size);
      }
    }
  }
}

}  // namespace

struct InferRequest::Impl {
  using ValueObserver = InferRequest::ValueObserver;
  std::shared_ptr<const CompiledModel::Impl> model;
  dnnl::stream stream;
  // Intermediate values and outputs, 64-byte aligned (see memory_plan.hpp).
  AlignedBlock arena{nullptr, std::free};
  // The graph inputs, each at a 64-byte boundary.
  AlignedBlock inputs{nullptr, std::free};
  std::vector<Tensor> tensors;  // by ValueId: views of `inputs` or of the arena
  // Where each input and output lives before any binding (null: nowhere).
  // Kept as addresses: a copy of a view Tensor would copy its elements.
  std::vector<void*> home;
  // Bound outputs whose buffer the plan shares: copied to the host at the end.
  std::vector<std::pair<graph::ValueId, void*>> output_copies;
  AlignedBlock scratchpad{nullptr, std::free};
  std::vector<std::any> op_states;  // one per executable op
  // Memory objects the ops share (ExecContext::shared_memory); declared after
  // op_states, so that it goes first and no op state outlives its objects.
  plugin::ExecContext::MemoryPool memories;
  int threads = 0;
  bool profiling = false;
  std::vector<std::vector<double>> node_times_us;  // by op, one entry per inference
  std::vector<std::vector<double>> staged_times_us;  // the staged reorders' part of those
  ValueObserver observer;
  ValueOverride value_override;  // internal (api_internal.hpp)

  const graph::Graph& graph() const { return model->graph; }

  Tensor home_view(graph::ValueId id) const {
    if (home[id.index] == nullptr) return Tensor();
    const graph::Value& v = graph().value(id);
    return Tensor::view(v.type, v.shape, home[id.index]);
  }

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
  if (!impl_) {
    throw InferenceError("create_infer_request: the model is empty (make one with qfuse::compile)");
  }
  auto impl = std::make_unique<InferRequest::Impl>();
  impl->model = impl_;
  impl->stream = dnnl::stream(impl_->engine);
  const graph::Graph& g = impl_->graph;
  const plugin::MemoryPlan& plan = impl_->memory;
  impl->arena = aligned_block(plan.arena_bytes, "tensor arena");
  // Every op writes its whole output: garbage here must never show.
  if (impl->arena) std::memset(impl->arena.get(), 0xff, plan.arena_bytes);
  constexpr std::size_t a = plugin::MemoryPlan::kAlignment;
  const auto bytes_of = [&g](std::uint32_t i) {
    const graph::Value& v = g.value(graph::ValueId{i});
    return static_cast<std::size_t>(element_count(v.shape)) * element_size(v.type);
  };
  std::size_t input_bytes = 0;
  for (std::uint32_t i = 0; i < g.value_count(); ++i) {
    if (plan.offset[i] == plugin::MemoryPlan::kOwned) input_bytes += (bytes_of(i) + a - 1) / a * a;
  }
  impl->inputs = aligned_block(input_bytes, "input buffers");
  // Inputs start zeroed, as a Tensor does.
  if (impl->inputs) std::memset(impl->inputs.get(), 0, input_bytes);
  std::size_t input_offset = 0;
  impl->tensors.resize(g.value_count());
  for (std::uint32_t i = 0; i < g.value_count(); ++i) {
    const graph::Value& v = g.value(graph::ValueId{i});
    const std::int64_t offset = plan.offset[i];
    if (offset == plugin::MemoryPlan::kOwned) {
      impl->tensors[i] = Tensor::view(v.type, v.shape, impl->inputs.get() + input_offset);
      input_offset += (bytes_of(i) + a - 1) / a * a;
    } else if (offset >= 0) {
      impl->tensors[i] = Tensor::view(v.type, v.shape, impl->arena.get() + offset);
    }
  }
  impl->home.resize(g.value_count(), nullptr);
  for (std::uint32_t i = 0; i < g.value_count(); ++i) {
    if (impl->tensors[i].is_view()) impl->home[i] = impl->tensors[i].raw_data();
  }
  impl->scratchpad = aligned_block(impl_->scratchpad_size, "scratchpad");
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
  std::memcpy(dst.raw_data(), tensor.raw_data(), tensor.byte_size());
}

Tensor& InferRequest::input(const std::string& name) {
  return impl_->tensors[impl_->find(name, impl_->graph().inputs(), "input").index];
}

const Tensor& InferRequest::output(const std::string& name) const {
  graph::ValueId id = impl_->find(name, impl_->graph().outputs(), "output");
  const graph::Value& v = impl_->graph().value(id);
  return v.is_constant() ? *v.constant : impl_->tensors[id.index];
}

namespace {

void check_binding(const std::string& what, const std::string& name, const graph::Value& v,
                   ElementType type, const Shape& shape) {
  if (v.type != type || v.shape != shape) {
    throw InferenceError("bind_" + what + ": '" + name + "' is " + std::string(to_string(v.type)) +
                         to_string(v.shape) + " (got a buffer of " +
                         std::string(to_string(type)) + to_string(shape) + ")");
  }
}

}  // namespace

void InferRequest::bind_input(const std::string& name, ElementType type, const Shape& shape,
                              void* data) {
  const graph::ValueId id = impl_->find(name, impl_->graph().inputs(), "input");
  const graph::Value& v = impl_->graph().value(id);
  if (data == nullptr) {
    impl_->tensors[id.index] = impl_->home_view(id);
    return;
  }
  check_binding("input", name, v, type, shape);
  impl_->tensors[id.index] = Tensor::view(type, shape, data);
}

bool InferRequest::bind_output(const std::string& name, ElementType type, const Shape& shape,
                               void* data) {
  const graph::Graph& g = impl_->graph();
  const graph::ValueId id = impl_->find(name, g.outputs(), "output");
  const graph::Value& v = g.value(id);
  auto& copies = impl_->output_copies;
  copies.erase(std::remove_if(copies.begin(), copies.end(),
                              [id](const auto& c) { return c.first == id; }),
               copies.end());
  bool own = false;
  for (std::size_t i = 0; i < g.outputs().size(); ++i) {
    if (g.outputs()[i] == id) own = impl_->model->output_owns_buffer[i];
  }
  if (own) impl_->tensors[id.index] = impl_->home_view(id);
  if (data == nullptr) return own;
  check_binding("output", name, v, type, shape);
  if (own) {
    impl_->tensors[id.index] = Tensor::view(type, shape, data);
  } else {
    copies.emplace_back(id, data);
  }
  return own;
}

void InferRequest::set_profiling(bool on) {
  impl_->profiling = on;
  impl_->node_times_us.assign(on ? impl_->model->ops.size() : 0, {});
  impl_->staged_times_us.assign(on ? impl_->model->ops.size() : 0, {});
}

const std::vector<std::vector<double>>& InferRequest::node_times_us() const {
  return impl_->node_times_us;
}

void InferRequest::set_value_observer(ValueObserver observer) {
  impl_->observer = std::move(observer);
}

void InferRequestAccess::set_value_override(InferRequest& request, ValueOverride override) {
  request.impl_->value_override = std::move(override);
}

void set_value_override(InferRequest& request, ValueOverride override) {
  InferRequestAccess::set_value_override(request, std::move(override));
}

const std::vector<std::vector<double>>& InferRequest::staged_reorder_times_us() const {
  return impl_->staged_times_us;
}

void InferRequest::set_threads(int threads) {
  const int limit = impl_->model->threads;
  if (threads > limit) {
    spdlog::warn("set_threads({}): the model was compiled for {} threads; using {}", threads, limit,
                 limit);
    threads = limit;
  }
  impl_->threads = std::max(threads, 0);
}

void InferRequest::infer() {
  const int team = impl_->threads > 0 ? impl_->threads : impl_->model->threads;
  const int caller_threads = omp_get_max_threads();
  omp_set_num_threads(team);
  const struct RestoreThreads {
    int n;
    ~RestoreThreads() { omp_set_num_threads(n); }
  } restore_threads{caller_threads};
  plugin::ExecContext ctx(impl_->graph(), impl_->tensors, impl_->stream, impl_->scratchpad.get());
  ctx.set_memory_pool(&impl_->memories);
  for (std::size_t i = 0; i < impl_->model->ops.size(); ++i) {
    const auto& op = impl_->model->ops[i];
    ctx.set_op_state(&impl_->op_states[i]);
    // oneDNN sizes its work for the threads it was created with; fewer are safe.
    const bool alone = team > 1 && impl_->model->single_threaded[i];
    if (alone) omp_set_num_threads(1);
    const struct Restore {
      bool alone;
      int team;
      ~Restore() {
        if (alone) omp_set_num_threads(team);
      }
    } restore{alone, team};
    try {
      const auto t0 = impl_->profiling ? std::chrono::steady_clock::now()
                                       : std::chrono::steady_clock::time_point{};
      double staged_us = 0.0;
      ctx.set_staged_clock(impl_->profiling ? &staged_us : nullptr);
      op->execute(ctx);
      if (impl_->profiling) {
        impl_->node_times_us[i].push_back(
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                .count());
        impl_->staged_times_us[i].push_back(staged_us);
      }
      if (impl_->observer || impl_->value_override) {
        for (graph::ValueId out : op->node().outputs) {
          Tensor& t = impl_->tensors[out.index];
          const std::string& name = impl_->graph().value(out).name;
          if (!t.is_view()) {  // a value without a buffer (nothing reads it)
            if (impl_->observer) impl_->observer(name, t);
            continue;
          }
          const bool channels_last = impl_->model->layouts[out.index] == plugin::Layout::channels_last &&
                                     t.shape().size() >= 3;
          Tensor value = channels_last ? plain_copy(t) : Tensor::view(t.type(), t.shape(), t.raw_data());
          if (impl_->observer) impl_->observer(name, value);
          if (!impl_->value_override || !impl_->value_override(name, value)) continue;
          if (value.type() != t.type() || value.shape() != t.shape()) {
            throw InferenceError("infer: the value override replaced '" + name + "' (" +
                                 std::string(to_string(t.type())) + to_string(t.shape()) +
                                 ") with " + std::string(to_string(value.type())) +
                                 to_string(value.shape()));
          }
          if (channels_last) {
            store_channels_last(value, t);
          } else if (value.raw_data() != t.raw_data()) {  // assigned a tensor of its own
            std::memcpy(t.raw_data(), value.raw_data(), t.byte_size());
          }
        }
      }
    } catch (const dnnl::error& e) {
      throw InferenceError("infer " + std::string(graph::to_string(op->node().kind)) + " node '" +
                           op->node().name + "': oneDNN failed (" + e.what() + ")");
    }
  }
  for (const auto& [id, data] : impl_->output_copies) {
    const graph::Value& v = impl_->graph().value(id);
    const Tensor& t = v.is_constant() ? *v.constant : impl_->tensors[id.index];
    std::memcpy(data, t.raw_data(), t.byte_size());
  }
}

}  // namespace qfuse
