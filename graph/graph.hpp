#pragma once
// The qfuse graph IR: values (static shape, element type, optional constant
// data) and nodes (an operator, typed attributes, input and output values).
// Nodes and values are owned by the Graph and refer to each other by typed
// integer ids. Erased nodes stay as tombstones so ids never move.

#include <compare>
#include <cstdint>
#include <limits>
#include <memory>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "graph/ops.hpp"
#include "qfuse/tensor.hpp"

namespace qfuse::graph {

// u8 or s8: the element types of quantized codes.
inline bool is_int8(ElementType t) { return t == ElementType::u8 || t == ElementType::s8; }

template <class Tag>
struct Id {
  static constexpr std::uint32_t kInvalid = std::numeric_limits<std::uint32_t>::max();
  std::uint32_t index = kInvalid;

  bool valid() const { return index != kInvalid; }
  auto operator<=>(const Id&) const = default;
};

using ValueId = Id<struct ValueTag>;
using NodeId = Id<struct NodeTag>;

struct Value {
  std::string name;
  Shape shape;
  ElementType type = ElementType::f32;
  // Constant data, shared between copies of a graph; null for activations.
  std::shared_ptr<const Tensor> constant;
  NodeId producer;  // invalid for graph inputs and constants

  bool is_constant() const { return constant != nullptr; }
};

// A constant's tensor: `data` seen as `type` and `shape`, kept alive by
// `owner` (a mapped file, the buffer an importer read).
std::shared_ptr<const Tensor> owned_view(std::shared_ptr<const void> owner, ElementType type,
                                         Shape shape, const void* data);

struct Node {
  std::string name;
  OpKind kind = OpKind::Relu;
  std::vector<ValueId> inputs;
  std::vector<ValueId> outputs;
  Attributes attrs;
  bool erased = false;

  // The node's attribute set of type A (throws std::bad_variant_access when
  // it holds another), through the box of those Attributes keeps boxed.
  template <class A>
  const A& attr() const {
    if constexpr (kBoxedAttrs<A>) {
      return *std::get<Boxed<A>>(attrs);
    } else {
      return std::get<A>(attrs);
    }
  }
  template <class A>
  A& attr() {
    if constexpr (kBoxedAttrs<A>) {
      return *std::get<Boxed<A>>(attrs);
    } else {
      return std::get<A>(attrs);
    }
  }
  template <class A>
  const A* attr_if() const {
    if constexpr (kBoxedAttrs<A>) {
      const auto* boxed = std::get_if<Boxed<A>>(&attrs);
      return boxed != nullptr ? &**boxed : nullptr;
    } else {
      return std::get_if<A>(&attrs);
    }
  }
};

class Graph {
 public:
  // Values.
  ValueId add_input(std::string name, Shape shape, ElementType type = ElementType::f32);
  // Room for this many nodes and values in all: a frontend that knows its
  // file's size grows the tables once, not by doublings that hold the old
  // table beside the new one.
  void reserve(std::size_t nodes, std::size_t values);
  ValueId add_constant(std::string name, Tensor data);
  // A constant whose elements are shared (an importer's view of its file).
  ValueId add_constant(std::string name, std::shared_ptr<const Tensor> data);
  // The constant's memory goes: it stays a constant of its type and shape,
  // a view of no memory, for a value nothing reads again (a weight its layer
  // holds in a layout of its own, a chain an importer dropped).
  void release_constant(ValueId value);
  ValueId add_value(std::string name, Shape shape = {}, ElementType type = ElementType::f32);
  // Takes back the value added last, which nothing reads and which is no
  // graph input or output: what a pass made for a candidate it then refused,
  // so that a refusal leaves the graph as it was. Throws GraphError otherwise.
  void discard_last_value(ValueId value);
  void mark_output(ValueId value);

  // Adds a node producing fresh output values named after it; shapes are left
  // empty until infer_shapes (or the Builder) fills them.
  NodeId add_node(OpKind kind, std::string name, std::vector<ValueId> inputs,
                  Attributes attrs = NoAttrs{}, std::size_t num_outputs = 1);
  // Marks a node erased; its outputs lose their producer.
  void erase_node(NodeId node);
  // Points every use of `from` (node inputs and graph outputs) at `to`.
  void replace_all_uses(ValueId from, ValueId to);
  // Rewire a node's inputs. A node's inputs change only through these (and
  // the calls above), which keep each value's list of readers: consumers()
  // costs what it returns, not a scan of the graph. verify() checks it.
  void set_input(NodeId node, std::size_t slot, ValueId value);
  void append_input(NodeId node, ValueId value);
  void truncate_inputs(NodeId node, std::size_t count);

  const Value& value(ValueId id) const { return values_.at(id.index); }
  Value& value(ValueId id) { return values_.at(id.index); }
  const Node& node(NodeId id) const { return nodes_.at(id.index); }
  Node& node(NodeId id) { return nodes_.at(id.index); }

  std::size_t value_count() const { return values_.size(); }
  std::size_t node_capacity() const { return nodes_.size(); }
  std::size_t live_node_count() const;

  const std::vector<ValueId>& inputs() const { return inputs_; }
  const std::vector<ValueId>& outputs() const { return outputs_; }

  // A graph input's symbolic dimensions: a name per dimension, "" where the
  // model fixes it (empty: every dimension is fixed). The input's shape binds
  // them for this graph; another binding may change only these, and
  // dimensions of one name (in any input) change together.
  void set_dim_names(ValueId input, std::vector<std::string> names);
  const std::vector<std::string>& dim_names(ValueId input) const;
  bool has_symbolic_dims() const { return !dim_names_.empty(); }
  // The size the inputs' shapes give the symbolic dimension `name`; nullopt
  // when no input has a dimension of that name.
  std::optional<std::int64_t> dim_size(const std::string& name) const;
  // Makes the symbolic dimension `name` fixed in every input (its name
  // becomes ""), saying why: what the model computed from it at import and
  // holds as a constant. `fixed_reasons(input)` gives the reason per
  // dimension ("" where none was recorded; empty: none).
  void fix_dim(const std::string& name, const std::string& reason);
  const std::vector<std::string>& fixed_reasons(ValueId input) const;
  void set_fixed_reasons(ValueId input, std::vector<std::string> reasons);

  // Live nodes whose inputs include `value`, in id order.
  std::vector<NodeId> consumers(ValueId value) const;
  // Throws GraphError when the readers recorded for a value differ from the
  // nodes' inputs (an input changed other than through the calls above).
  void check_uses() const;
  bool is_graph_output(ValueId value) const;
  std::optional<ValueId> find_value(const std::string& name) const;

  // Live nodes in an order where every producer precedes its consumers.
  // Throws GraphError on a cycle.
  std::vector<NodeId> topological_order() const;

  // The names a model file gives its tensors, where the value computing one
  // is named otherwise (an importer names values after their nodes): model
  // tensor name -> value name. qfuse compare reads reference tensors (ONNX
  // Runtime's, by tensor name) through it.
  void add_tensor_alias(std::string model_name, std::string value_name) {
    tensor_aliases_.emplace(std::move(model_name), std::move(value_name));
  }
  const std::map<std::string, std::string>& tensor_aliases() const { return tensor_aliases_; }

 private:
  std::vector<Value> values_;
  std::vector<Node> nodes_;
  // Per value, the live nodes reading it, once per input slot.
  std::vector<std::vector<NodeId>> uses_;
  std::vector<ValueId> inputs_;
  std::vector<ValueId> outputs_;
  std::map<std::uint32_t, std::vector<std::string>> dim_names_;  // by input value index
  std::map<std::uint32_t, std::vector<std::string>> fixed_reasons_;  // by input value index
  std::map<std::string, std::string> tensor_aliases_;
};

// Fills the shape and type of every node's outputs, in topological order,
// checking each node on the way. Throws GraphError naming the first bad node.
void infer_shapes(Graph& graph);

// Infers and checks one node whose inputs already have shapes.
void infer_node(Graph& graph, NodeId node);

// Checks the wiring (ids in range, every used value defined, no cycle, outputs
// present) and that every stored shape agrees with inference.
void verify(const Graph& graph);

// One line per node: "name = Op(inputs) -> shapes".
std::string to_text(const Graph& graph);

}  // namespace qfuse::graph
