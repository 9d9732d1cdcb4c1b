#include "graph/graph.hpp"

#include <algorithm>
#include <sstream>

#include "qfuse/error.hpp"

namespace qfuse::graph {

ValueId Graph::add_value(std::string name, Shape shape, ElementType type) {
  ValueId id{static_cast<std::uint32_t>(values_.size())};
  values_.push_back(Value{std::move(name), std::move(shape), type, nullptr, NodeId{}});
  uses_.emplace_back();
  return id;
}

void Graph::discard_last_value(ValueId value) {
  const bool last = value.valid() && value.index + 1 == values_.size();
  if (!last || !uses_.back().empty() || is_graph_output(value) ||
      std::find(inputs_.begin(), inputs_.end(), value) != inputs_.end() ||
      values_.back().producer.valid()) {
    throw GraphError("discard_last_value: '" +
                     (value.valid() && value.index < values_.size() ? values_[value.index].name
                                                                    : std::string("?")) +
                     "' is not an unread value added last");
  }
  values_.pop_back();
  uses_.pop_back();
}

ValueId Graph::add_input(std::string name, Shape shape, ElementType type) {
  ValueId id = add_value(std::move(name), std::move(shape), type);
  inputs_.push_back(id);
  return id;
}

void Graph::set_dim_names(ValueId input, std::vector<std::string> names) {
  if (std::find(inputs_.begin(), inputs_.end(), input) == inputs_.end()) {
    throw GraphError("set_dim_names: '" + value(input).name + "' is not a graph input");
  }
  if (names.size() != value(input).shape.size()) {
    throw GraphError("set_dim_names: input '" + value(input).name + "' has rank " +
                     std::to_string(value(input).shape.size()) + ", given " +
                     std::to_string(names.size()) + " dimension names");
  }
  if (std::all_of(names.begin(), names.end(), [](const std::string& n) { return n.empty(); })) {
    dim_names_.erase(input.index);
  } else {
    dim_names_[input.index] = std::move(names);
  }
}

const std::vector<std::string>& Graph::dim_names(ValueId input) const {
  static const std::vector<std::string> kFixed;
  const auto it = dim_names_.find(input.index);
  return it == dim_names_.end() ? kFixed : it->second;
}

std::optional<std::int64_t> Graph::dim_size(const std::string& name) const {
  for (const auto& [index, names] : dim_names_) {
    const auto d = std::find(names.begin(), names.end(), name);
    if (d != names.end()) return values_[index].shape[static_cast<std::size_t>(d - names.begin())];
  }
  return std::nullopt;
}

void Graph::fix_dim(const std::string& name, const std::string& reason) {
  for (auto it = dim_names_.begin(); it != dim_names_.end();) {
    std::vector<std::string>& names = it->second;
    for (std::size_t d = 0; d < names.size(); ++d) {
      if (names[d] != name) continue;
      names[d].clear();
      std::vector<std::string>& why = fixed_reasons_[it->first];
      why.resize(names.size());
      why[d] = "'" + name + "' is fixed by the model: " + reason;
    }
    const bool all_fixed =
        std::all_of(names.begin(), names.end(), [](const std::string& n) { return n.empty(); });
    it = all_fixed ? dim_names_.erase(it) : std::next(it);
  }
}

const std::vector<std::string>& Graph::fixed_reasons(ValueId input) const {
  static const std::vector<std::string> kNone;
  const auto it = fixed_reasons_.find(input.index);
  return it == fixed_reasons_.end() ? kNone : it->second;
}

void Graph::set_fixed_reasons(ValueId input, std::vector<std::string> reasons) {
  if (reasons.empty()) {
    fixed_reasons_.erase(input.index);
    return;
  }
  if (reasons.size() != value(input).shape.size()) {
    throw GraphError("set_fixed_reasons: input '" + value(input).name + "' has rank " +
                     std::to_string(value(input).shape.size()) + ", given " +
                     std::to_string(reasons.size()) + " reasons");
  }
  fixed_reasons_[input.index] = std::move(reasons);
}

std::shared_ptr<const Tensor> owned_view(std::shared_ptr<const void> owner, ElementType type,
                                         Shape shape, const void* data) {
  struct Held {
    std::shared_ptr<const void> owner;
    Tensor view;
  };
  auto held = std::make_shared<const Held>(
      Held{std::move(owner), Tensor::view(type, std::move(shape), const_cast<void*>(data))});
  return std::shared_ptr<const Tensor>(held, &held->view);
}

void Graph::release_constant(ValueId value) {
  Value& v = values_.at(value.index);
  if (!v.is_constant()) throw GraphError("release_constant: '" + v.name + "' is no constant");
  v.constant = std::make_shared<const Tensor>(Tensor::view(v.type, v.shape, nullptr));
}

void Graph::reserve(std::size_t nodes, std::size_t values) {
  nodes_.reserve(nodes);
  values_.reserve(values);
  uses_.reserve(values);
}

ValueId Graph::add_constant(std::string name, Tensor data) {
  return add_constant(std::move(name), std::make_shared<const Tensor>(std::move(data)));
}

ValueId Graph::add_constant(std::string name, std::shared_ptr<const Tensor> data) {
  if (!data) throw GraphError("add_constant '" + name + "': no tensor");
  ValueId id = add_value(std::move(name), data->shape(), data->type());
  values_[id.index].constant = std::move(data);
  return id;
}

void Graph::mark_output(ValueId value) {
  if (!value.valid() || value.index >= values_.size()) {
    throw GraphError("mark_output: value id out of range");
  }
  outputs_.push_back(value);
}

NodeId Graph::add_node(OpKind kind, std::string name, std::vector<ValueId> inputs,
                       Attributes attrs, std::size_t num_outputs) {
  NodeId id{static_cast<std::uint32_t>(nodes_.size())};
  for (ValueId in : inputs) {
    if (!in.valid() || in.index >= values_.size()) {
      throw GraphError("add " + std::string(to_string(kind)) + " node '" + name +
                       "': input value id out of range");
    }
  }
  Node node{name, kind, std::move(inputs), {}, std::move(attrs), false};
  for (std::size_t i = 0; i < num_outputs; ++i) {
    std::string out_name = num_outputs == 1 ? name : name + ":" + std::to_string(i);
    ValueId out = add_value(std::move(out_name));
    values_[out.index].producer = id;
    node.outputs.push_back(out);
  }
  for (ValueId in : node.inputs) uses_[in.index].push_back(id);
  nodes_.push_back(std::move(node));
  return id;
}

namespace {

void remove_one(std::vector<NodeId>& uses, NodeId node) {
  const auto it = std::find(uses.begin(), uses.end(), node);
  if (it != uses.end()) uses.erase(it);
}

}  // namespace

void Graph::erase_node(NodeId id) {
  Node& n = nodes_.at(id.index);
  if (!n.erased) {
    for (ValueId in : n.inputs) remove_one(uses_[in.index], id);
  }
  n.erased = true;
  for (ValueId out : n.outputs) values_[out.index].producer = NodeId{};
}

void Graph::replace_all_uses(ValueId from, ValueId to) {
  if (from == to) return;
  std::vector<NodeId> users = std::move(uses_.at(from.index));
  uses_[from.index].clear();
  for (NodeId u : users) {
    Node& n = nodes_[u.index];
    // A node reading `from` twice is listed twice; the first visit rewires both.
    for (ValueId& in : n.inputs) {
      if (in == from) {
        in = to;
      }
    }
    uses_.at(to.index).push_back(u);
  }
  std::replace(outputs_.begin(), outputs_.end(), from, to);
}

void Graph::set_input(NodeId id, std::size_t slot, ValueId value) {
  Node& n = nodes_.at(id.index);
  if (slot >= n.inputs.size() || !value.valid() || value.index >= values_.size()) {
    throw GraphError("set input " + std::to_string(slot) + " of node '" + n.name +
                     "': slot or value out of range");
  }
  if (!n.erased) {
    remove_one(uses_[n.inputs[slot].index], id);
    uses_[value.index].push_back(id);
  }
  n.inputs[slot] = value;
}

void Graph::append_input(NodeId id, ValueId value) {
  Node& n = nodes_.at(id.index);
  if (!value.valid() || value.index >= values_.size()) {
    throw GraphError("append an input to node '" + n.name + "': value id out of range");
  }
  if (!n.erased) uses_[value.index].push_back(id);
  n.inputs.push_back(value);
}

void Graph::truncate_inputs(NodeId id, std::size_t count) {
  Node& n = nodes_.at(id.index);
  while (n.inputs.size() > count) {
    if (!n.erased) remove_one(uses_[n.inputs.back().index], id);
    n.inputs.pop_back();
  }
}

void Graph::check_uses() const {
  std::vector<std::vector<NodeId>> expected(values_.size());
  for (std::uint32_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i].erased) continue;
    for (ValueId in : nodes_[i].inputs) {
      if (in.index < values_.size()) expected[in.index].push_back(NodeId{i});
    }
  }
  for (std::size_t v = 0; v < values_.size(); ++v) {
    std::vector<NodeId> recorded = uses_[v];
    std::sort(recorded.begin(), recorded.end());
    if (recorded != expected[v]) {
      throw GraphError("validate value '" + values_[v].name +
                       "': its recorded readers differ from the nodes' inputs (an input was "
                       "changed other than through Graph::set_input / append_input / "
                       "truncate_inputs)");
    }
  }
}

std::size_t Graph::live_node_count() const {
  return static_cast<std::size_t>(
      std::count_if(nodes_.begin(), nodes_.end(), [](const Node& n) { return !n.erased; }));
}

std::vector<NodeId> Graph::consumers(ValueId value) const {
  std::vector<NodeId> result = uses_.at(value.index);
  std::sort(result.begin(), result.end());
  result.erase(std::unique(result.begin(), result.end()), result.end());
  return result;
}

bool Graph::is_graph_output(ValueId value) const {
  return std::find(outputs_.begin(), outputs_.end(), value) != outputs_.end();
}

std::optional<ValueId> Graph::find_value(const std::string& name) const {
  for (std::uint32_t i = 0; i < values_.size(); ++i) {
    if (values_[i].name == name) return ValueId{i};
  }
  return std::nullopt;
}

std::vector<NodeId> Graph::topological_order() const {
  // Kahn's algorithm over live nodes; ties keep insertion order. A value's
  // readers come from uses_ (one entry per input slot, as counted here).
  std::vector<int> pending(nodes_.size(), 0);
  for (std::uint32_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    if (n.erased) continue;
    for (ValueId in : n.inputs) {
      NodeId p = values_[in.index].producer;
      if (p.valid() && !nodes_[p.index].erased) ++pending[i];
    }
  }
  std::vector<NodeId> order;
  order.reserve(nodes_.size());
  std::vector<std::uint32_t> ready;
  ready.reserve(nodes_.size());
  std::vector<NodeId> readers;
  for (std::uint32_t i = 0; i < nodes_.size(); ++i) {
    if (!nodes_[i].erased && pending[i] == 0) ready.push_back(i);
  }
  std::size_t head = 0;
  while (head < ready.size()) {
    std::uint32_t i = ready[head++];
    order.push_back(NodeId{i});
    for (ValueId out : nodes_[i].outputs) {
      // Readers in id order, as consumers() gives them.
      readers.assign(uses_[out.index].begin(), uses_[out.index].end());
      std::sort(readers.begin(), readers.end());
      for (NodeId u : readers) {
        if (!nodes_[u.index].erased && --pending[u.index] == 0) ready.push_back(u.index);
      }
    }
  }
  if (order.size() != live_node_count()) {
    for (std::uint32_t i = 0; i < nodes_.size(); ++i) {
      if (!nodes_[i].erased && pending[i] > 0) {
        throw GraphError("validate " + std::string(to_string(nodes_[i].kind)) + " node '" +
                         nodes_[i].name + "': the graph has a cycle through this node");
      }
    }
  }
  return order;
}

std::string to_text(const Graph& graph) {
  std::ostringstream os;
  for (ValueId in : graph.inputs()) {
    const Value& v = graph.value(in);
    os << "input " << v.name << ": " << to_string(v.type) << to_string(v.shape) << '\n';
  }
  for (NodeId id : graph.topological_order()) {
    const Node& n = graph.node(id);
    os << n.name << " = " << to_string(n.kind) << '(';
    for (std::size_t i = 0; i < n.inputs.size(); ++i) {
      os << (i ? ", " : "") << graph.value(n.inputs[i]).name;
    }
    os << ") ->";
    for (ValueId out : n.outputs) {
      const Value& v = graph.value(out);
      os << ' ' << to_string(v.type) << to_string(v.shape);
    }
    os << '\n';
  }
  for (ValueId out : graph.outputs()) os << "output " << graph.value(out).name << '\n';
  return os.str();
}

}  // namespace qfuse::graph
