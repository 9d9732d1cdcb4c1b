#include "plugin/shape_cache.hpp"

#include <algorithm>
#include <utility>

#include <spdlog/spdlog.h>

#include "graph/model_impl.hpp"
#include "plugin/execution.hpp"

namespace qfuse {

std::shared_ptr<const CompiledModel::Impl> compile_at_shapes(
    const std::shared_ptr<const CompiledModel::Impl>& base, const InputShapes& shapes);

namespace {

std::string dim_text(const std::string& input, std::size_t d, const std::string& name) {
  return "input '" + input + "' dimension " + std::to_string(d) +
         (name.empty() ? std::string(" (fixed by the model)") : " ('" + name + "')");
}

// The int8 weights `impl`'s layers hold in layouts of their own, not read in
// place from another model's.
std::size_t own_weight_bytes(const CompiledModel::Impl& impl) {
  std::size_t bytes = 0;
  for (const CompiledModel::Impl::KeptConstant& k : impl.kept_constants) {
    const auto now = impl.ops[k.op]->held_input(k.input);
    if (!now) continue;
    const auto held = impl.held.find(k.value.index);
    if (held == impl.held.end() || held->second.data != now->data) bytes += now->desc.get_size();
  }
  return bytes;
}

ShapeInfo shape_info(const InputShapes& shapes, const CompiledModel::Impl& impl) {
  const CompileTimes& t = impl.times;
  return {shapes, own_weight_bytes(impl), impl.memory.arena_bytes,
          t.shapes_ms + t.passes_ms + t.planning_ms + t.primitives_ms};
}

}  // namespace

std::shared_ptr<const CompiledModel::Impl> detail::ImplAccess::root(const CompiledModel& model) {
  return model.shapes_ ? model.shapes_->root : nullptr;
}

std::string shapes_text(const InputShapes& shapes) {
  std::string text;
  for (const auto& [name, shape] : shapes) {
    text += text.empty() ? "" : ", ";
    text += name + "=" + to_string(shape);
  }
  return text;
}

InputShapes input_shapes_of(const graph::Graph& graph) {
  InputShapes shapes;
  for (const graph::ValueId id : graph.inputs()) shapes.emplace(graph.value(id).name, graph.value(id).shape);
  return shapes;
}

std::string resolve_input_shapes(const graph::Graph& graph, const InputShapes& given,
                                 InputShapes* all) {
  std::map<std::string, std::pair<std::int64_t, std::string>> sizes;  // name -> size, where from
  for (const auto& [name, shape] : given) {
    const auto id = std::find_if(graph.inputs().begin(), graph.inputs().end(),
                                 [&, n = &name](graph::ValueId v) { return graph.value(v).name == *n; });
    if (id == graph.inputs().end()) {
      std::string known;
      for (const graph::ValueId v : graph.inputs()) known += (known.empty() ? "" : ", ") + graph.value(v).name;
      return "the model has no input '" + name + "' (inputs: " + known + ")";
    }
    const Shape& was = graph.value(*id).shape;
    if (shape.size() != was.size()) {
      return "input '" + name + "' has rank " + std::to_string(was.size()) + ", the shape given " +
             to_string(shape) + " has rank " + std::to_string(shape.size());
    }
    const std::vector<std::string>& names = graph.dim_names(*id);
    for (std::size_t d = 0; d < shape.size(); ++d) {
      const std::string dim = names.empty() ? std::string() : names[d];
      if (shape[d] < 1) {
        return dim_text(name, d, dim) + " is given " + std::to_string(shape[d]) +
               " (empty tensors are not supported)";
      }
      if (dim.empty()) {
        if (shape[d] != was[d]) {
          const std::vector<std::string>& why = graph.fixed_reasons(*id);
          return dim_text(name, d, dim) + " is " + std::to_string(was[d]) + ", the shape given " +
                 to_string(shape) + " has " + std::to_string(shape[d]) +
                 (d < why.size() && !why[d].empty() ? " (" + why[d] + ")" : "");
        }
        continue;
      }
      const auto [it, inserted] = sizes.emplace(dim, std::make_pair(shape[d], name));
      if (!inserted && it->second.first != shape[d]) {
        return "dimension '" + dim + "' is " + std::to_string(it->second.first) + " in input '" +
               it->second.second + "' and " + std::to_string(shape[d]) + " in input '" + name + "'";
      }
    }
  }
  all->clear();
  for (const graph::ValueId id : graph.inputs()) {
    const graph::Value& v = graph.value(id);
    const auto g = given.find(v.name);
    if (g != given.end()) {
      all->emplace(v.name, g->second);
      continue;
    }
    Shape shape = v.shape;
    const std::vector<std::string>& names = graph.dim_names(id);
    for (std::size_t d = 0; d < names.size(); ++d) {
      const auto s = sizes.find(names[d]);
      if (!names[d].empty() && s != sizes.end()) shape[d] = s->second.first;
    }
    all->emplace(v.name, std::move(shape));
  }
  return {};
}

CompiledModel::ShapeCache::ShapeCache(std::shared_ptr<const Impl> root_model, std::size_t capacity)
    : root(std::move(root_model)), capacity_(capacity) {}

std::shared_ptr<const CompiledModel::Impl> CompiledModel::ShapeCache::get(const InputShapes& shapes) {
  if (shapes == input_shapes_of(root->graph)) return root;
  std::promise<std::shared_ptr<const Impl>> made;
  std::shared_future<std::shared_ptr<const Impl>> kept;
  {
    const std::lock_guard lock(mutex_);
    const auto hit = std::find_if(entries_.begin(), entries_.end(),
                                  [&](const Entry& e) { return e.shapes == shapes; });
    if (hit != entries_.end()) {
      entries_.splice(entries_.begin(), entries_, hit);
      kept = entries_.front().model;
    } else {
      entries_.push_front({shapes, made.get_future().share(), &made});
      while (entries_.size() > capacity_) entries_.pop_back();
    }
  }
  if (kept.valid()) return kept.get();  // waits for a compile on another thread; throws what it threw
  try {
    spdlog::info("compile: new input shapes {}", shapes_text(shapes));
    auto model = compile_at_shapes(root, shapes);
    made.set_value(model);
    return model;
  } catch (...) {
    made.set_exception(std::current_exception());
    const std::lock_guard lock(mutex_);
    // This entry only (another thread may have made a newer one since).
    entries_.remove_if([&](const Entry& e) { return e.maker == &made; });
    throw;
  }
}

std::vector<ShapeInfo> CompiledModel::ShapeCache::shapes() const {
  std::vector<ShapeInfo> out{shape_info(input_shapes_of(root->graph), *root)};
  const std::lock_guard lock(mutex_);
  for (const Entry& e : entries_) {
    // One still compiling on another thread is not listed yet.
    if (e.model.wait_for(std::chrono::seconds(0)) != std::future_status::ready) continue;
    try {
      out.push_back(shape_info(e.shapes, *e.model.get()));
    } catch (...) {  // a failed compile, about to be dropped
    }
  }
  return out;
}

}  // namespace qfuse
