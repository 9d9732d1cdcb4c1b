#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <list>
#include <map>

#include <omp.h>

#include <spdlog/spdlog.h>

#include "plugin/api_internal.hpp"
#include "plugin/execution.hpp"
#include "plugin/shape_cache.hpp"

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

// What a request holds for the input shapes it runs at: buffers, stream and
// op states for one compiled model.
struct ShapeState {
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
  std::vector<std::vector<double>> node_times_us;  // by op, one entry per inference
  std::vector<std::vector<double>> staged_times_us;  // the staged reorders' part of those

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

  bool binds_outputs() const {
    if (!output_copies.empty()) return true;
    return std::any_of(graph().outputs().begin(), graph().outputs().end(), [this](graph::ValueId id) {
      return tensors[id.index].is_view() && tensors[id.index].raw_data() != home[id.index];
    });
  }
};

std::unique_ptr<ShapeState> make_state(std::shared_ptr<const CompiledModel::Impl> model) {
  auto state = std::make_unique<ShapeState>();
  state->model = std::move(model);
  const CompiledModel::Impl& m = *state->model;
  state->stream = dnnl::stream(m.engine);
  const graph::Graph& g = m.graph;
  const plugin::MemoryPlan& plan = m.memory;
  state->arena = aligned_block(plan.arena_bytes, "tensor arena");
  // Every op writes its whole output: garbage here must never show.
  if (state->arena) std::memset(state->arena.get(), 0xff, plan.arena_bytes);
  constexpr std::size_t a = plugin::MemoryPlan::kAlignment;
  const auto bytes_of = [&g](std::uint32_t i) {
    const graph::Value& v = g.value(graph::ValueId{i});
    return static_cast<std::size_t>(element_count(v.shape)) * element_size(v.type);
  };
  std::size_t input_bytes = 0;
  for (std::uint32_t i = 0; i < g.value_count(); ++i) {
    if (plan.offset[i] == plugin::MemoryPlan::kOwned) input_bytes += (bytes_of(i) + a - 1) / a * a;
  }
  state->inputs = aligned_block(input_bytes, "input buffers");
  // Inputs start zeroed, as a Tensor does.
  if (state->inputs) std::memset(state->inputs.get(), 0, input_bytes);
  std::size_t input_offset = 0;
  state->tensors.resize(g.value_count());
  for (std::uint32_t i = 0; i < g.value_count(); ++i) {
    const graph::Value& v = g.value(graph::ValueId{i});
    const std::int64_t offset = plan.offset[i];
    if (offset == plugin::MemoryPlan::kOwned) {
      state->tensors[i] = Tensor::view(v.type, v.shape, state->inputs.get() + input_offset);
      input_offset += (bytes_of(i) + a - 1) / a * a;
    } else if (offset >= 0) {
      state->tensors[i] = Tensor::view(v.type, v.shape, state->arena.get() + offset);
    }
  }
  state->home.resize(g.value_count(), nullptr);
  for (std::uint32_t i = 0; i < g.value_count(); ++i) {
    if (state->tensors[i].is_view()) state->home[i] = state->tensors[i].raw_data();
  }
  state->scratchpad = aligned_block(m.scratchpad_size, "scratchpad");
  state->op_states.resize(m.ops.size());
  return state;
}

}  // namespace

struct InferRequest::Impl {
  using ValueObserver = InferRequest::ValueObserver;
  // The shapes the request has run at, each with its buffers: the current
  // one first, then the others, most recently used first.
  std::list<std::unique_ptr<ShapeState>> states;
  // Symbolic dimensions: where the models at other shapes come from (null:
  // the shapes are fixed).
  std::shared_ptr<CompiledModel::ShapeCache> shapes;
  // Inputs set or bound at other shapes than the current ones, for the next
  // infer(): a copy of the tensor, or the host's buffer (`data`).
  struct Staged {
    Tensor tensor;
    ElementType type = ElementType::f32;
    Shape shape;
    void* data = nullptr;
  };
  std::map<std::string, Staged> staged;
  int threads = 0;
  bool profiling = false;
  ValueObserver observer;
  ValueOverride value_override;  // internal (api_internal.hpp)

  ShapeState& now() { return *states.front(); }
  const ShapeState& now() const { return *states.front(); }

  // Throws InferenceError unless `name` may take `type` and `shape`, one
  // other than its current (only in symbolic dimensions).
  void check_other_shape(const char* call, const std::string& name, ElementType type,
                         const Shape& shape) const {
    const graph::ValueId id = now().find(name, now().graph().inputs(), "input");
    const graph::Value& v = now().graph().value(id);
    const std::string expected = std::string(to_string(v.type)) + to_string(v.shape);
    const std::string got = std::string(to_string(type)) + to_string(shape);
    if (type != v.type || !shapes) {
      throw InferenceError(std::string(call) + ": input '" + name + "' is " + got + " (expected " +
                           expected + ")" +
                           (type == v.type ? "; the model's input shapes are fixed" : ""));
    }
    InputShapes all;
    const std::string misfit = resolve_input_shapes(now().graph(), {{name, shape}}, &all);
    if (!misfit.empty()) throw InferenceError(std::string(call) + ": " + misfit);
  }

  // Makes the state at `all` (every input's shape) the current one. Inputs
  // whose shape stays go with it (their binding, or their elements).
  void switch_to(const InputShapes& all) {
    if (all == input_shapes_of(now().graph())) return;
    ShapeState& was = now();
    const bool bound = was.binds_outputs();
    const auto kept = std::find_if(states.begin(), states.end(), [&](const auto& st) {
      return input_shapes_of(st->graph()) == all;
    });
    if (kept != states.end()) {
      states.splice(states.begin(), states, kept);
    } else {
      states.push_front(make_state(shapes->get(all)));
    }
    ShapeState& s = now();
    for (const graph::ValueId old_id : was.graph().inputs()) {
      const graph::Value& v = was.graph().value(old_id);
      const graph::ValueId id = s.find(v.name, s.graph().inputs(), "input");
      if (s.graph().value(id).shape != v.shape) continue;
      s.tensors[id.index] = s.home_view(id);
      const Tensor& from = was.tensors[old_id.index];
      if (from.raw_data() != was.home[old_id.index]) {  // bound to the host's buffer
        s.tensors[id.index] = Tensor::view(from.type(), from.shape(), const_cast<void*>(from.raw_data()));
      } else if (from.byte_size() > 0) {
        std::memcpy(s.tensors[id.index].raw_data(), from.raw_data(), from.byte_size());
      }
    }
    const auto limit = static_cast<std::size_t>(shapes->root->options.max_shapes) + 1;
    while (states.size() > limit) states.pop_back();
    if (profiling) {
      now().node_times_us.resize(now().model->ops.size());
      now().staged_times_us.resize(now().model->ops.size());
    }
    if (bound && !now().binds_outputs()) {
      spdlog::warn("infer: the outputs bound at other input shapes stay bound there; at {} "
                   "read them with output() (or bind them again)", shapes_text(all));
    }
  }

  // The inputs staged at other shapes: switch to their shapes, then copy or
  // bind them. Every input whose shape changes must be among them.
  void apply_staged() {
    InputShapes given;
    for (const auto& [name, st] : staged) given.emplace(name, st.shape);
    InputShapes all;
    const std::string misfit = resolve_input_shapes(now().graph(), given, &all);
    if (!misfit.empty()) {
      staged.clear();
      throw InferenceError("infer: the inputs set at other shapes do not fit together (they are "
                           "dropped): " + misfit);
    }
    const InputShapes current = input_shapes_of(now().graph());
    for (const auto& [name, shape] : all) {
      if (staged.count(name) == 0 && shape != current.at(name)) {
        throw InferenceError("infer: input '" + name + "' was not set at its new shape " +
                             to_string(shape) + " (it shares a dimension with " +
                             shapes_text(given) + "); set it too");
      }
    }
    switch_to(all);  // may throw (a shape that does not compile): the staged inputs stay
    const auto take = std::move(staged);
    staged.clear();
    ShapeState& s = now();
    for (const auto& [name, st] : take) {
      const graph::ValueId id = s.find(name, s.graph().inputs(), "input");
      if (st.data != nullptr) {
        s.tensors[id.index] = Tensor::view(st.type, st.shape, st.data);
      } else {
        s.tensors[id.index] = s.home_view(id);
        std::memcpy(s.tensors[id.index].raw_data(), st.tensor.raw_data(), st.tensor.byte_size());
      }
    }
  }
};

InferRequest CompiledModel::create_infer_request() const {
  if (!impl_) {
    throw InferenceError("create_infer_request: the model is empty (make one with qfuse::compile)");
  }
  auto impl = std::make_unique<InferRequest::Impl>();
  impl->states.push_back(make_state(impl_));
  impl->shapes = shapes_;
  return InferRequest(std::move(impl));
}

InferRequest::InferRequest(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
InferRequest::~InferRequest() = default;
InferRequest::InferRequest(InferRequest&&) noexcept = default;
InferRequest& InferRequest::operator=(InferRequest&&) noexcept = default;

void InferRequest::set_input(const std::string& name, const Tensor& tensor) {
  Tensor& dst = input(name);
  if (dst.type() == tensor.type() && dst.shape() == tensor.shape()) {
    std::memcpy(dst.raw_data(), tensor.raw_data(), tensor.byte_size());
    impl_->staged.erase(name);
    return;
  }
  impl_->check_other_shape("infer", name, tensor.type(), tensor.shape());
  impl_->staged[name] = {tensor, tensor.type(), tensor.shape(), nullptr};
}

void InferRequest::set_input_shapes(const std::map<std::string, Shape>& inputs) {
  InputShapes all;
  const std::string misfit = resolve_input_shapes(impl_->now().graph(), inputs, &all);
  if (!misfit.empty()) throw InferenceError("set_input_shapes: " + misfit);
  if (!impl_->shapes && all != input_shapes_of(impl_->now().graph())) {
    throw InferenceError("set_input_shapes: the model's input shapes are fixed");
  }
  impl_->switch_to(all);
  for (const auto& given : inputs) impl_->staged.erase(given.first);
}

Tensor& InferRequest::input(const std::string& name) {
  ShapeState& s = impl_->now();
  return s.tensors[s.find(name, s.graph().inputs(), "input").index];
}

const Tensor& InferRequest::output(const std::string& name) const {
  const ShapeState& s = impl_->now();
  graph::ValueId id = s.find(name, s.graph().outputs(), "output");
  const graph::Value& v = s.graph().value(id);
  return v.is_constant() ? *v.constant : s.tensors[id.index];
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
  ShapeState& s = impl_->now();
  const graph::ValueId id = s.find(name, s.graph().inputs(), "input");
  const graph::Value& v = s.graph().value(id);
  impl_->staged.erase(name);
  if (data == nullptr) {
    s.tensors[id.index] = s.home_view(id);
    return;
  }
  if (v.type == type && v.shape != shape && impl_->shapes) {
    impl_->check_other_shape("bind_input", name, type, shape);
    impl_->staged[name] = {Tensor(), type, shape, data};
    return;
  }
  check_binding("input", name, v, type, shape);
  s.tensors[id.index] = Tensor::view(type, shape, data);
}

bool InferRequest::bind_output(const std::string& name, ElementType type, const Shape& shape,
                               void* data) {
  ShapeState& s = impl_->now();
  const graph::Graph& g = s.graph();
  const graph::ValueId id = s.find(name, g.outputs(), "output");
  const graph::Value& v = g.value(id);
  auto& copies = s.output_copies;
  copies.erase(std::remove_if(copies.begin(), copies.end(),
                              [id](const auto& c) { return c.first == id; }),
               copies.end());
  bool own = false;
  for (std::size_t i = 0; i < g.outputs().size(); ++i) {
    if (g.outputs()[i] == id) own = s.model->output_owns_buffer[i];
  }
  if (own) s.tensors[id.index] = s.home_view(id);
  if (data == nullptr) return own;
  check_binding("output", name, v, type, shape);
  if (own) {
    s.tensors[id.index] = Tensor::view(type, shape, data);
  } else {
    copies.emplace_back(id, data);
  }
  return own;
}

void InferRequest::set_profiling(bool on) {
  impl_->profiling = on;
  for (auto& state : impl_->states) {
    state->node_times_us.assign(on ? state->model->ops.size() : 0, {});
    state->staged_times_us.assign(on ? state->model->ops.size() : 0, {});
  }
}

const std::vector<std::vector<double>>& InferRequest::node_times_us() const {
  return impl_->now().node_times_us;
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
  return impl_->now().staged_times_us;
}

void InferRequest::set_threads(int threads) {
  const int limit = impl_->now().model->threads;
  if (threads > limit) {
    spdlog::warn("set_threads({}): the model was compiled for {} threads; using {}", threads, limit,
                 limit);
    threads = limit;
  }
  impl_->threads = std::max(threads, 0);
}

void InferRequest::infer() {
  if (!impl_->staged.empty()) impl_->apply_staged();
  ShapeState& s = impl_->now();
  const int team = impl_->threads > 0 ? impl_->threads : s.model->threads;
  const int caller_threads = omp_get_max_threads();
  omp_set_num_threads(team);
  const struct RestoreThreads {
    int n;
    ~RestoreThreads() { omp_set_num_threads(n); }
  } restore_threads{caller_threads};
  plugin::ExecContext ctx(s.graph(), s.tensors, s.stream, s.scratchpad.get());
  ctx.set_memory_pool(&s.memories);
  for (std::size_t i = 0; i < s.model->ops.size(); ++i) {
    const auto& op = s.model->ops[i];
    ctx.set_op_state(&s.op_states[i]);
    // oneDNN sizes its work for the threads it was created with; fewer are safe.
    const bool alone = team > 1 && s.model->single_threaded[i];
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
        s.node_times_us[i].push_back(
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                .count());
        s.staged_times_us[i].push_back(staged_us);
      }
      if (impl_->observer || impl_->value_override) {
        for (graph::ValueId out : op->node().outputs) {
          Tensor& t = s.tensors[out.index];
          const std::string& name = s.graph().value(out).name;
          if (!t.is_view()) {  // a value without a buffer (nothing reads it)
            if (impl_->observer) impl_->observer(name, t);
            continue;
          }
          const bool channels_last = s.model->layouts[out.index] == plugin::Layout::channels_last &&
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
  for (const auto& [id, data] : s.output_copies) {
    const graph::Value& v = s.graph().value(id);
    const Tensor& t = v.is_constant() ? *v.constant : s.tensors[id.index];
    std::memcpy(data, t.raw_data(), t.byte_size());
  }
}

}  // namespace qfuse
