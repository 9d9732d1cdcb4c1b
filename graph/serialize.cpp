// The graph as bytes (see serialize.hpp). One function per attribute struct
// lists its fields; the writer and the reader both walk that list, so the two
// directions cannot disagree on a struct's layout.

#include "graph/serialize.hpp"

#include <cstring>
#include <optional>
#include <type_traits>
#include <utility>
#include <variant>

namespace qfuse::graph {

const std::byte* ByteSource::take(std::size_t size) {
  if (size > remaining()) {
    throw GraphError("read graph: the stream ends at byte " + std::to_string(bytes_.size()) +
                     ", " + std::to_string(size) + " bytes wanted at " + std::to_string(at_));
  }
  const std::byte* p = bytes_.data() + at_;
  at_ += size;
  return p;
}

void ByteSource::align(std::size_t alignment) {
  const std::size_t pad = (alignment - at_ % alignment) % alignment;
  take(pad);
}

namespace {

constexpr std::size_t kConstantAlignment = 64;

template <class T>
struct is_vector : std::false_type {};
template <class T, class A>
struct is_vector<std::vector<T, A>> : std::true_type {};
template <class T>
struct is_optional : std::false_type {};
template <class T>
struct is_optional<std::optional<T>> : std::true_type {};
template <class T>
struct is_variant : std::false_type {};
template <class... T>
struct is_variant<std::variant<T...>> : std::true_type {};

// Each struct's fields, in stream order. The writer passes const objects
// through a const_cast and only reads them.
template <class Ar> void fields(Ar&, NoAttrs&) {}
template <class Ar> void fields(Ar& ar, ConvAttrs& x) {
  ar(x.strides, x.dilations, x.pads_begin, x.pads_end, x.groups);
}
template <class Ar> void fields(Ar& ar, DeconvAttrs& x) {
  ar(x.strides, x.dilations, x.pads_begin, x.pads_end, x.output_padding, x.groups);
}
template <class Ar> void fields(Ar& ar, MatMulAttrs& x) {
  ar(x.transpose_a, x.transpose_b, x.perm_a, x.perm_b, x.perm_y);
}
template <class Ar> void fields(Ar& ar, FakeQuantizeAttrs& x) { ar(x.levels); }
template <class Ar> void fields(Ar& ar, ClampAttrs& x) { ar(x.lo, x.hi); }
template <class Ar> void fields(Ar& ar, AlphaAttrs& x) { ar(x.alpha); }
template <class Ar> void fields(Ar& ar, GeluAttrs& x) { ar(x.approximation); }
template <class Ar> void fields(Ar& ar, ConvertAttrs& x) { ar(x.to, x.input_low, x.input_high); }
template <class Ar> void fields(Ar& ar, QuantizeAttrs& x) {
  ar(x.to, x.scale, x.zero_point, x.axis, x.levels, x.code_offset);
}
template <class Ar> void fields(Ar& ar, BatchNormAttrs& x) { ar(x.epsilon); }
template <class Ar> void fields(Ar& ar, PoolAttrs& x) {
  ar(x.kernel, x.strides, x.pads_begin, x.pads_end, x.dilations, x.exclude_pad, x.out_scale,
     x.out_shift, x.to_f32);
}
template <class Ar> void fields(Ar& ar, ReshapeAttrs& x) { ar(x.shape, x.spec); }
template <class Ar> void fields(Ar& ar, FlattenAttrs& x) { ar(x.axis); }
template <class Ar> void fields(Ar& ar, TransposeAttrs& x) { ar(x.perm); }
template <class Ar> void fields(Ar& ar, ShuffleChannelsAttrs& x) { ar(x.groups); }
template <class Ar> void fields(Ar& ar, ConcatAttrs& x) { ar(x.axis); }
template <class Ar> void fields(Ar& ar, ResizeAttrs& x) {
  ar(x.mode, x.transform, x.nearest_mode, x.sizes, x.scales);
}
template <class Ar> void fields(Ar& ar, composer::Scale& x) { ar(x.values); }
template <class Ar> void fields(Ar& ar, composer::Shift& x) { ar(x.values); }
template <class Ar> void fields(Ar&, composer::Round&) {}
template <class Ar> void fields(Ar& ar, composer::Clip& x) { ar(x.lo, x.hi); }
template <class Ar> void fields(Ar& ar, composer::Eltwise& x) { ar(x.alg, x.alpha, x.beta); }
template <class Ar> void fields(Ar& ar, composer::Sum& x) { ar(x.input, x.scale, x.data_type); }
template <class Ar> void fields(Ar& ar, composer::Binary& x) {
  ar(x.alg, x.input, x.broadcast, x.data_type);
}
template <class Ar> void fields(Ar& ar, composer::FakeQuantize& x) {
  ar(x.input_low, x.input_high, x.output_low, x.output_high, x.levels);
}
template <class Ar> void fields(Ar& ar, composer::Quantize& x) {
  ar(x.scale, x.zero_point, x.lo, x.hi);
}
template <class Ar> void fields(Ar& ar, composer::PostOpChain& x) {
  ar(x.channels, x.dst_type, x.steps, x.anchor);
}
template <class Ar> void fields(Ar& ar, QuantizedLayerAttrs& x) {
  ar(x.geometry, x.src_zero_point, x.weights_zero_point, x.has_bias, x.dynamic,
     x.dynamic_weight_scales, x.weight_sums, x.chain);
}
template <class Ar> void fields(Ar& ar, composer::EltwisePostOp& x) {
  ar(x.alg, x.scale, x.alpha, x.beta);
}
template <class Ar> void fields(Ar& ar, composer::ConstantTensor& x) { ar(x.values); }
template <class Ar> void fields(Ar& ar, composer::ExternalTensor& x) { ar(x.input, x.data_type); }
template <class Ar> void fields(Ar& ar, composer::BinaryPostOp& x) {
  ar(x.alg, x.broadcast, x.tensor);
}
template <class Ar> void fields(Ar& ar, composer::SumPostOp& x) {
  ar(x.input, x.scale, x.data_type);
}
template <class Ar> void fields(Ar& ar, composer::AppliedRule& x) { ar(x.rule, x.detail); }
template <class Ar> void fields(Ar& ar, composer::FixedPoint& x) {
  ar(x.multiplier, x.shift, x.bits, x.relative_error);
}
template <class Ar> void fields(Ar& ar, composer::PostOpsPlan& x) {
  ar(x.channels, x.dst_type, x.output_scales, x.output_scales_mask, x.dst_zero_point, x.post_ops,
     x.applied_rules, x.fixed_output_scales);
}
template <class Ar> void fields(Ar& ar, composer::ComposeResult& x) {
  ar(x.plan, x.reason, x.applied_rules);
}
template <class Ar> void fields(Ar& ar, SliceAttrs& x) { ar(x.begin, x.size, x.size_dims); }
template <class Ar> void fields(Ar& ar, ReduceAttrs& x) { ar(x.axes); }
template <class Ar> void fields(Ar& ar, PowerAttrs& x) { ar(x.exponent); }
template <class Ar> void fields(Ar& ar, SoftmaxAttrs& x) {
  ar(x.axis, x.to, x.quantize_scale, x.input_low, x.input_high);
}
template <class Ar> void fields(Ar& ar, LookupAttrs& x) { ar(x.table, x.to); }
template <class Ar> void fields(Ar& ar, AttentionAttrs& x) {
  ar(x.quantized, x.scores, x.mix, x.softmax, x.divisor, x.factor);
}
template <class Ar> void fields(Ar& ar, GateMultiplyAttrs& x) {
  ar(x.zero_point, x.scale, x.quantize);
}
template <class Ar> void fields(Ar& ar, CodeAddAttrs& x) {
  ar(x.a_zero_point, x.a_scale, x.b_zero_point, x.b_scale, x.quantize);
}
template <class Ar> void fields(Ar& ar, MeanInnerProductAttrs& x) {
  ar(x.scale, x.shift, x.zero_point, x.lo, x.hi, x.out_rank);
}
template <class Ar> void fields(Ar& ar, DequantizeAttrs& x) { ar(x.scale, x.zero_point, x.axis); }
template <class Ar> void fields(Ar& ar, GatherAttrs& x) { ar(x.axis); }
template <class Ar> void fields(Ar& ar, LayerNormAttrs& x) { ar(x.epsilon); }
template <class Ar> void fields(Ar& ar, LayerNormQuantizeAttrs& x) { ar(x.epsilon, x.quantize); }

class Writer {
 public:
  explicit Writer(ByteSink& out) : out_(out) {}

  template <class... T>
  void operator()(const T&... xs) {
    (put(xs), ...);
  }

  template <class T>
  void put(const T& x) {
    if constexpr (std::is_arithmetic_v<T> || std::is_enum_v<T>) {
      out_.write(&x, sizeof x);
    } else if constexpr (std::is_same_v<T, std::string>) {
      put(static_cast<std::uint64_t>(x.size()));
      out_.write(x.data(), x.size());
    } else if constexpr (is_vector<T>::value) {
      put(static_cast<std::uint64_t>(x.size()));
      if constexpr (std::is_arithmetic_v<typename T::value_type>) {
        if (!x.empty()) out_.write(x.data(), x.size() * sizeof(typename T::value_type));
      } else {
        for (const auto& e : x) put(e);
      }
    } else if constexpr (is_optional<T>::value) {
      put(x.has_value());
      if (x) put(*x);
    } else if constexpr (is_variant<T>::value) {
      put(static_cast<std::uint32_t>(x.index()));
      std::visit([this](const auto& alt) { this->put(alt); }, x);
    } else if constexpr (IsBoxed<T>::value) {
      put(*x);  // as the set itself: boxing is no part of the format
    } else {
      fields(*this, const_cast<T&>(x));
    }
  }

 private:
  ByteSink& out_;
};

class Reader {
 public:
  explicit Reader(ByteSource& in) : in_(in) {}

  template <class... T>
  void operator()(T&... xs) {
    (get(xs), ...);
  }

  template <class T>
  void get(T& x) {
    if constexpr (std::is_arithmetic_v<T> || std::is_enum_v<T>) {
      std::memcpy(&x, in_.take(sizeof x), sizeof x);
    } else if constexpr (std::is_same_v<T, std::string>) {
      const std::size_t n = count(1);
      x.assign(reinterpret_cast<const char*>(in_.take(n)), n);
    } else if constexpr (is_vector<T>::value) {
      using Element = typename T::value_type;
      if constexpr (std::is_arithmetic_v<Element>) {
        const std::size_t n = count(sizeof(Element));
        x.resize(n);
        if (n > 0) std::memcpy(x.data(), in_.take(n * sizeof(Element)), n * sizeof(Element));
      } else {
        const std::size_t n = count(1);
        x.clear();
        x.reserve(n);
        for (std::size_t i = 0; i < n; ++i) get(x.emplace_back());
      }
    } else if constexpr (is_optional<T>::value) {
      bool present = false;
      get(present);
      if (present) {
        get(x.emplace());
      } else {
        x.reset();
      }
    } else if constexpr (is_variant<T>::value) {
      std::uint32_t index = 0;
      get(index);
      emplace_alternative(x, index, std::make_index_sequence<std::variant_size_v<T>>{});
    } else if constexpr (IsBoxed<T>::value) {
      get(*x);
    } else {
      fields(*this, x);
    }
  }

  // A count of elements at least `least_bytes` each: no more than the
  // stream can still hold.
  std::size_t count(std::size_t least_bytes) {
    std::uint64_t n = 0;
    get(n);
    if (n > in_.remaining() / least_bytes) {
      throw GraphError("read graph: a count of " + std::to_string(n) + " at byte " +
                       std::to_string(in_.position()) + " is more than the stream holds");
    }
    return static_cast<std::size_t>(n);
  }

 private:
  template <class V, std::size_t... I>
  void emplace_alternative(V& v, std::uint32_t index, std::index_sequence<I...>) {
    if (index >= sizeof...(I)) {
      throw GraphError("read graph: alternative " + std::to_string(index) + " of a variant of " +
                       std::to_string(sizeof...(I)));
    }
    const bool found = ((index == I ? (get(v.template emplace<I>()), true) : false) || ...);
    static_cast<void>(found);  // true: index < sizeof...(I) was checked above
  }

  ByteSource& in_;
};

void pad_to(ByteSink& out, std::size_t alignment) {
  static constexpr std::byte kZeros[kConstantAlignment] = {};
  const std::size_t pad = (alignment - out.offset() % alignment) % alignment;
  out.write(kZeros, pad);
}

constexpr std::uint32_t kNoValue = kNotWritten;

}  // namespace

void write_string(ByteSink& out, const std::string& s) { Writer(out).put(s); }
std::string read_string(ByteSource& in) {
  std::string s;
  Reader(in).get(s);
  return s;
}
void write_u64(ByteSink& out, std::uint64_t v) { Writer(out).put(v); }
std::uint64_t read_u64(ByteSource& in) {
  std::uint64_t v = 0;
  Reader(in).get(v);
  return v;
}

// Stream layout: version; the values no live node produces (graph inputs in
// their order, each with its dimension names, then constants, each with its
// bytes); the live nodes in
// topological order, each with its outputs' names, shapes and types; the
// graph outputs; the tensor aliases. Values are renumbered in that order, so
// that a reader adding them through Graph's calls gets the same numbers.
std::vector<std::uint32_t> write_graph(ByteSink& out, const Graph& graph) {
  Writer w(out);
  const std::vector<NodeId> order = graph.topological_order();
  std::vector<std::uint32_t> renumbered(graph.value_count(), kNoValue);
  std::uint32_t next = 0;
  std::vector<ValueId> sources(graph.inputs());
  for (const ValueId v : sources) renumbered[v.index] = next++;
  for (const NodeId id : order) {
    for (const ValueId v : graph.node(id).inputs) {
      if (renumbered[v.index] != kNoValue || !graph.value(v).is_constant()) continue;
      renumbered[v.index] = next++;
      sources.push_back(v);
    }
  }
  w(kSerializedGraphVersion, static_cast<std::uint64_t>(graph.inputs().size()),
    static_cast<std::uint64_t>(sources.size() - graph.inputs().size()));
  for (const ValueId id : sources) {
    const Value& v = graph.value(id);
    w(v.name, v.shape, v.type);
    if (!v.is_constant()) {
      w(graph.dim_names(id), graph.fixed_reasons(id));
      continue;
    }
    const Tensor& t = *v.constant;
    w(t.type(), t.shape());
    pad_to(out, kConstantAlignment);
    out.write(t.raw_data(), t.byte_size());
  }
  w(static_cast<std::uint64_t>(order.size()));
  for (const NodeId id : order) {
    const Node& n = graph.node(id);
    std::vector<std::uint32_t> inputs;
    for (const ValueId v : n.inputs) {
      if (renumbered[v.index] == kNoValue) {
        throw GraphError("write graph: node '" + n.name + "' reads '" + graph.value(v).name +
                         "', which no live node writes");
      }
      inputs.push_back(renumbered[v.index]);
    }
    w(n.name, n.kind, inputs, static_cast<std::uint64_t>(n.outputs.size()));
    for (const ValueId v : n.outputs) {
      renumbered[v.index] = next++;
      const Value& value = graph.value(v);
      w(value.name, value.shape, value.type);
    }
    w(n.attrs);
  }
  std::vector<std::uint32_t> outputs;
  for (const ValueId v : graph.outputs()) outputs.push_back(renumbered[v.index]);
  w(outputs);
  w(static_cast<std::uint64_t>(graph.tensor_aliases().size()));
  for (const auto& [model_name, value_name] : graph.tensor_aliases()) w(model_name, value_name);
  return renumbered;
}

void write_compositions(ByteSink& out, const Compositions& compositions) {
  Writer w(out);
  w(static_cast<std::uint64_t>(compositions.size()));
  for (const auto& [key, result] : compositions) w(key, result);
}

Compositions read_compositions(ByteSource& in) {
  Reader r(in);
  Compositions compositions;
  const std::size_t n = r.count(1);
  for (std::size_t i = 0; i < n; ++i) {
    std::string key;
    composer::ComposeResult result;
    r(key, result);
    compositions.emplace(std::move(key), std::move(result));
  }
  return compositions;
}

void write_aligned(ByteSink& out, const void* data, std::size_t size) {
  pad_to(out, kConstantAlignment);
  out.write(data, size);
}

const std::byte* read_aligned(ByteSource& in, std::size_t size) {
  in.align(kConstantAlignment);
  return in.take(size);
}

Graph read_graph(ByteSource& in, std::shared_ptr<const void> owner) {
  Reader r(in);
  std::uint32_t version = 0;
  r(version);
  if (version != kSerializedGraphVersion) {
    throw GraphError("read graph: format version " + std::to_string(version) + " (this build reads " +
                     std::to_string(kSerializedGraphVersion) + ")");
  }
  Graph g;
  const std::size_t inputs = r.count(1);
  const std::size_t constants = r.count(1);
  std::string name;
  Shape shape;
  ElementType type{};
  for (std::size_t i = 0; i < inputs + constants; ++i) {
    r(name, shape, type);
    if (i < inputs) {
      std::vector<std::string> dim_names, fixed_reasons;
      r(dim_names, fixed_reasons);
      const ValueId id = g.add_input(name, shape, type);
      if (!dim_names.empty()) g.set_dim_names(id, std::move(dim_names));
      g.set_fixed_reasons(id, std::move(fixed_reasons));
      continue;
    }
    const ValueId id = g.add_value(name, shape, type);
    ElementType data_type{};
    Shape data_shape;
    r(data_type, data_shape);
    in.align(kConstantAlignment);
    const std::size_t bytes = static_cast<std::size_t>(element_count(data_shape)) * element_size(data_type);
    void* data = const_cast<std::byte*>(in.take(bytes));
    g.value(id).constant = owned_view(owner, data_type, std::move(data_shape), data);
  }
  const std::size_t nodes = r.count(1);
  std::uint32_t values = static_cast<std::uint32_t>(g.value_count());
  for (std::size_t i = 0; i < nodes; ++i) {
    OpKind kind{};
    std::vector<std::uint32_t> input_numbers;
    std::uint64_t output_count = 0;
    r(name, kind, input_numbers, output_count);
    std::vector<ValueId> node_inputs;
    for (const std::uint32_t v : input_numbers) {
      if (v >= values) {
        throw GraphError("read graph: node '" + name + "' reads value " + std::to_string(v) +
                         " of " + std::to_string(values));
      }
      node_inputs.push_back(ValueId{v});
    }
    if (output_count > in.remaining()) throw GraphError("read graph: node '" + name + "' is cut off");
    std::vector<std::tuple<std::string, Shape, ElementType>> outs(output_count);
    for (auto& [n, s, t] : outs) r(n, s, t);
    Attributes attrs;
    r(attrs);
    const NodeId id = g.add_node(kind, name, std::move(node_inputs), std::move(attrs), outs.size());
    for (std::size_t k = 0; k < outs.size(); ++k) {
      Value& v = g.value(g.node(id).outputs[k]);
      std::tie(v.name, v.shape, v.type) = std::move(outs[k]);
    }
    values = static_cast<std::uint32_t>(g.value_count());
  }
  std::vector<std::uint32_t> outputs;
  r(outputs);
  for (const std::uint32_t v : outputs) {
    if (v >= values) throw GraphError("read graph: output " + std::to_string(v) + " of " + std::to_string(values));
    g.mark_output(ValueId{v});
  }
  const std::size_t aliases = r.count(1);
  for (std::size_t i = 0; i < aliases; ++i) {
    std::string model_name, value_name;
    r(model_name, value_name);
    g.add_tensor_alias(std::move(model_name), std::move(value_name));
  }
  return g;
}

}  // namespace qfuse::graph
