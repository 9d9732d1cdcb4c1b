// Export of a fused graph as ONNX (exporter.hpp): the Exporter's members
// (export_internal.hpp) and the public functions, which wrap the graph in a
// checked model.

#include "graph/onnx/exporter.hpp"

#include <onnx/checker.h>
#include <onnx/onnx_pb.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <numeric>
#include <set>

#include "composer/eltwise_math.hpp"
#include "composer/fake_quantize_formula.hpp"
#include "graph/onnx/export_internal.hpp"
#include "graph/op_info.hpp"
#include "qfuse/error.hpp"

namespace qfuse::onnx {
namespace {

// 14: HardSwish. Between 13 and 14 no operator written here changed meaning
// (Add / Sub / Mul / Div, Relu, Reshape and BatchNormalization only gained
// types or training-mode attributes). Every file gets this one opset: LayerNorm
// (LayerNormalization is opset 17) and Gelu (opset 20) are written spelled out
// as opset-13 exporters write them, and qfuse reads each back as one op.
constexpr int kOpset = 14;

}  // namespace

namespace export_impl {
namespace {

template <typename T>
bool uniform(const std::vector<T>& v) {
  return std::all_of(v.begin(), v.end(), [&](const T& x) { return x == v[0]; });
}

}  // namespace

ExportReport Exporter::run() {
  // ONNX names each tensor once; the IR may give two values one name
  // (a node named like a constant): the second gets a fresh one. Graph
  // inputs and outputs keep theirs.
  names_.resize(g_.value_count());
  std::vector<graph::ValueId> order(g_.inputs().begin(), g_.inputs().end());
  order.insert(order.end(), g_.outputs().begin(), g_.outputs().end());
  for (std::uint32_t i = 0; i < g_.value_count(); ++i) order.push_back(graph::ValueId{i});
  for (graph::ValueId v : order) {
    if (!names_[v.index].empty()) continue;
    names_[v.index] = w_.fresh(g_.value(v).name);
  }
  for (graph::ValueId v : g_.inputs()) add_value_info(*proto_.add_input(), v);
  // Values that still name a node as their producer without being its
  // output: what absorb_f32_post_ops leaves of a layer's former output.
  std::set<std::uint32_t> former_producers;
  for (std::uint32_t i = 0; i < g_.value_count(); ++i) {
    const graph::Value& v = g_.value(graph::ValueId{i});
    if (!v.producer.valid()) continue;
    const Node& p = g_.node(v.producer);
    if (std::find(p.outputs.begin(), p.outputs.end(), graph::ValueId{i}) == p.outputs.end()) {
      former_producers.insert(v.producer.index);
    }
  }
  for (graph::NodeId id : g_.topological_order()) {
    const Node& n = g_.node(id);
    std::vector<const Node*> absorbed;
    if (source_.absorbed_post_ops) {
      absorbed = source_.absorbed_post_ops(n);
    } else if (former_producers.count(id.index) != 0 &&
               (n.kind == OpKind::Convolution || n.kind == OpKind::FullyConnected)) {
      refuse(n, "the layer absorbed elementwise ops as post-ops, and the caller did not say "
                "which (ExportSource::absorbed_post_ops)");
    }
    if (absorbed.empty()) {
      emit(n);
      continue;
    }
    // The layer writes its former output (which the first absorbed node
    // reads), then each absorbed node runs as the operator it was.
    const Node& first = *absorbed.front();
    std::optional<graph::ValueId> former;
    for (graph::ValueId v : first.inputs) {
      if (g_.value(v).producer == id && v != n.outputs[0]) former = v;
    }
    if (!former) {
      for (graph::ValueId v : first.inputs) {
        if (!g_.value(v).is_constant()) former = v;
      }
    }
    if (!former) {
      refuse(n, "cannot find the output of the layer its post-op '" + first.name + "' read");
    }
    ordinary(n, name(*former));
    for (const Node* a : absorbed) {
      ordinary(*a, name(a->outputs[0]));
      ++report_.absorbed_post_ops;
    }
  }
  for (graph::ValueId v : g_.outputs()) add_value_info(*proto_.add_output(), v);
  return report_;
}

void Exporter::refuse(const Node& n, const std::string& why) const {
  throw UnsupportedError("export-prequantized: " + std::string(graph::to_string(n.kind)) +
                         " node '" + n.name + "': " + why);
}

void Exporter::add_value_info(::onnx::ValueInfoProto& info, graph::ValueId id) {
  const graph::Value& v = g_.value(id);
  info.set_name(name(id));
  auto* t = info.mutable_type()->mutable_tensor_type();
  t->set_elem_type(onnx_type(v.type));
  for (const std::int64_t d : v.shape) t->mutable_shape()->add_dim()->set_dim_value(d);
}

// A node input: a constant becomes an initializer of its own name the
// first time it is read.
std::string Exporter::in(graph::ValueId id) {
  const graph::Value& v = g_.value(id);
  if (v.is_constant() && written_constants_.insert(id.index).second) {
    const Tensor& t = *v.constant;
    std::vector<double> values(static_cast<std::size_t>(t.size()));
    for (std::int64_t i = 0; i < t.size(); ++i) values[static_cast<std::size_t>(i)] = t.as_float(i);
    if (t.type() == ElementType::s32) {
      const auto d = t.data<std::int32_t>();  // as_float rounds past 2^24
      values.assign(d.begin(), d.end());
    }
    w_.named_constant(name(id), onnx_type(t.type()), values, v.shape);
  }
  return name(id);
}

// The input as f32: a Cast of an integer tensor.
std::string Exporter::in_f32(graph::ValueId id, const std::string& base) {
  const std::string x = in(id);
  if (g_.value(id).type == ElementType::f32) return x;
  return cast(x, kFloat, base + "/to_f32");
}

std::string Exporter::cast(const std::string& x, int to, const std::string& base) {
  const std::string t = w_.op("Cast", base, {x});
  Writer::int_attr(*w_.producer(t), "to", to);
  return t;
}

void Exporter::emit(const Node& n) {
  switch (n.kind) {
    case OpKind::Convert: return convert(n);
    case OpKind::Quantize:
      if (g_.value(n.inputs[0]).type != ElementType::f32) refuse(n, "quantizes a non-f32 tensor");
      return quantize_linear(n.attr<graph::QuantizeAttrs>(), in(n.inputs[0]), n.name,
                             name(n.outputs[0]));
    case OpKind::QuantizedConvolution:
    case OpKind::QuantizedDeconvolution:
    case OpKind::QuantizedFullyConnected:
    case OpKind::QuantizedMatMul: return layer(n);
    case OpKind::AvgPool:
      if (is_int8(g_.value(n.inputs[0]).type)) return avg_pool(n);
      break;
    case OpKind::MaxPool: return max_pool(n, name(n.outputs[0]));
    case OpKind::Reshape:
    case OpKind::Flatten: {
      const Shape& s = g_.value(n.outputs[0]).shape;
      const std::string shape =
          w_.ints64(n.name + "/shape", std::vector<std::int64_t>(s.begin(), s.end()));
      w_.node("Reshape", n.name, {in(n.inputs[0]), shape}, name(n.outputs[0]));
      return;
    }
    case OpKind::Transpose: {
      auto& t = w_.node("Transpose", n.name, {in(n.inputs[0])}, name(n.outputs[0]));
      Writer::ints(t, "perm", n.attr<graph::TransposeAttrs>().perm);
      return;
    }
    case OpKind::ShuffleChannels: {
      // As exporters write it: Reshape [N, g, C/g, ...], Transpose(0, 2, 1, ...),
      // Reshape back.
      const Shape& s = g_.value(n.inputs[0]).shape;
      const std::int64_t groups = n.attr<graph::ShuffleChannelsAttrs>().groups;
      std::vector<std::int64_t> split{s[0], groups, s[1] / groups};
      split.insert(split.end(), s.begin() + 2, s.end());
      std::vector<std::int64_t> perm(split.size());
      std::iota(perm.begin(), perm.end(), std::int64_t{0});
      std::swap(perm[1], perm[2]);
      const std::string parts = w_.fresh(n.name + "/split");
      w_.node("Reshape", n.name + "/split",
              {in(n.inputs[0]), w_.ints64(n.name + "/split_shape", split)}, parts);
      const std::string swapped = w_.fresh(n.name + "/transpose");
      auto& t = w_.node("Transpose", n.name + "/transpose", {parts}, swapped);
      Writer::ints(t, "perm", perm);
      w_.node(
          "Reshape", n.name,
          {swapped, w_.ints64(n.name + "/shape", std::vector<std::int64_t>(s.begin(), s.end()))},
          name(n.outputs[0]));
      return;
    }
    case OpKind::Concat: {
      std::vector<std::string> inputs;
      for (graph::ValueId v : n.inputs) inputs.push_back(in(v));
      auto& c = w_.node("Concat", n.name, inputs, name(n.outputs[0]));
      Writer::int_attr(c, "axis", n.attr<graph::ConcatAttrs>().axis);
      return;
    }
    default: break;
  }
  ordinary(n, name(n.outputs[0]));
}

// `n` as the ONNX operator(s) it is, writing `y`.
void Exporter::ordinary(const Node& n, const std::string& y) {
  if (source_.prequantized_only) refuse(n, "no pre-quantized form for this operator");
  ++report_.operators;
  const std::string& b = n.name;
  const auto x = [&](std::size_t i) { return in(n.inputs[i]); };
  const auto require_f32 = [&] {
    for (graph::ValueId v : n.inputs) {
      if (g_.value(v).type != ElementType::f32) {
        refuse(n, "reads a " + std::string(to_string(g_.value(v).type)) + " tensor ('" +
                      name(v) + "') where the operator takes f32");
      }
    }
  };
  switch (n.kind) {
    case OpKind::Add:
    case OpKind::Subtract:
    case OpKind::Multiply:
    case OpKind::Divide:
    case OpKind::Minimum:
    case OpKind::Maximum: {
      require_f32();
      w_.node(std::string(graph::op_info(n.kind).onnx), b, {x(0), x(1)}, y);
      return;
    }
    case OpKind::Relu:
    case OpKind::Sigmoid:
    case OpKind::Tanh:
    case OpKind::Exp:
    case OpKind::Abs:
    case OpKind::Sqrt:
    case OpKind::Round:
    case OpKind::HSwish: {
      require_f32();
      w_.node(std::string(graph::op_info(n.kind).onnx), b, {x(0)}, y);
      return;
    }
    case OpKind::LeakyRelu:
    case OpKind::Elu: {
      require_f32();
      auto& node = w_.node(n.kind == OpKind::Elu ? "Elu" : "LeakyRelu", b, {x(0)}, y);
      Writer::float_attr(node, "alpha", n.attr<graph::AlphaAttrs>().alpha);
      return;
    }
    case OpKind::PRelu:
      require_f32();
      w_.node("PRelu", b, {x(0), x(1)}, y);
      return;
    case OpKind::Clamp: {
      require_f32();
      const auto& a = n.attr<graph::ClampAttrs>();
      w_.node("Clip", b, {x(0), w_.scalar(b + "/lo", a.lo), w_.scalar(b + "/hi", a.hi)}, y);
      return;
    }
    case OpKind::HSigmoid: {
      // min(max(x + 3, 0), 6) / 6 = clip(x / 6 + 1/2, 0, 1); qfuse reads
      // HardSigmoid(1/6, 1/2) back as HSigmoid.
      require_f32();
      auto& node = w_.node("HardSigmoid", b, {x(0)}, y);
      Writer::float_attr(node, "alpha", 1.0f / 6.0f);
      Writer::float_attr(node, "beta", 0.5f);
      return;
    }
    case OpKind::Swish:
      require_f32();
      return swish(b, x(0), n.attr<graph::AlphaAttrs>().alpha, y);
    case OpKind::Gelu:
      require_f32();
      return gelu(b, x(0),
                  n.attr<graph::GeluAttrs>().approximation == graph::GeluApproximation::tanh, y);
    case OpKind::Power:
      require_f32();
      w_.node("Pow", b, {x(0), w_.scalar(b + "/exponent", n.attr<graph::PowerAttrs>().exponent)},
              y);
      return;
    case OpKind::Softmax: {
      // A Softmax that writes codes: Softmax, then QuantizeLinear(s, 0)
      // (y / s where the Softmax multiplied by 1 / s: within one code).
      require_f32();
      const auto& a = n.attr<graph::SoftmaxAttrs>();
      const std::string out = a.quantizes() ? w_.fresh(b + "/probabilities") : y;
      auto& node = w_.node("Softmax", b, {x(0)}, out);
      Writer::int_attr(node, "axis", a.axis);
      if (a.quantizes()) {
        w_.node("QuantizeLinear", b + "/quantize",
                {out, w_.constant(b + "/scale", kFloat, std::vector<float>{a.quantize_scale}, {}),
                 w_.constant(b + "/zero_point", onnx_type(a.to), std::vector<double>{0.0}, {})},
                y);
      }
      return;
    }
    case OpKind::LayerNorm:
      require_f32();
      return layer_norm(n, y);
    case OpKind::Gather: return gather(n, y);
    case OpKind::ReduceMean: {
      require_f32();
      auto& node = w_.node("ReduceMean", b, {x(0)}, y);
      Writer::ints(node, "axes", n.attr<graph::ReduceAttrs>().axes);
      Writer::int_attr(node, "keepdims", 1);
      return;
    }
    case OpKind::BatchNormalization: {
      require_f32();
      auto& node = w_.node("BatchNormalization", b, {x(0), x(1), x(2), x(3), x(4)}, y);
      Writer::float_attr(node, "epsilon", n.attr<graph::BatchNormAttrs>().epsilon);
      return;
    }
    case OpKind::Resize: return resize(n, y);
    case OpKind::Slice: {
      const auto& a = n.attr<graph::SliceAttrs>();
      std::vector<std::int64_t> ends, axes;
      for (std::size_t d = 0; d < a.begin.size(); ++d) {
        ends.push_back(a.begin[d] + a.size[d]);
        axes.push_back(static_cast<std::int64_t>(d));
      }
      w_.node("Slice", b,
              {x(0), w_.ints64(b + "/starts", a.begin), w_.ints64(b + "/ends", ends),
               w_.ints64(b + "/axes", axes)},
              y);
      return;
    }
    case OpKind::MaxPool: return max_pool(n, y);
    case OpKind::AvgPool: {
      require_f32();
      const auto& a = n.attr<graph::PoolAttrs>();
      auto& p = w_.node("AveragePool", b, {x(0)}, y);
      pool_attrs(p, a);
      Writer::int_attr(p, "count_include_pad", a.exclude_pad ? 0 : 1);
      return;
    }
    case OpKind::Convolution: {
      require_f32();
      const auto& c = n.attr<graph::ConvAttrs>();
      std::vector<std::string> inputs{x(0), x(1)};
      if (n.inputs.size() > 2) inputs.push_back(x(2));
      auto& node = w_.node("Conv", b, inputs, y);
      conv_attrs(node, c.strides, c.dilations, c.pads_begin, c.pads_end, c.groups,
                 g_.value(n.inputs[1]).shape);
      return;
    }
    case OpKind::Deconvolution: {
      require_f32();
      const auto& c = n.attr<graph::DeconvAttrs>();
      std::vector<std::string> inputs{x(0), x(1)};
      if (n.inputs.size() > 2) inputs.push_back(x(2));
      auto& node = w_.node("ConvTranspose", b, inputs, y);
      conv_attrs(node, c.strides, c.dilations, c.pads_begin, c.pads_end, c.groups,
                 g_.value(n.inputs[1]).shape);
      Writer::ints(node, "output_padding", c.output_padding);
      return;
    }
    case OpKind::FullyConnected: {
      // y = x W^T + b with W [N, K].
      require_f32();
      if (g_.value(n.inputs[0]).shape.size() == 2) {
        std::vector<std::string> inputs{x(0), x(1)};
        if (n.inputs.size() > 2) inputs.push_back(x(2));
        auto& node = w_.node("Gemm", b, inputs, y);
        Writer::int_attr(node, "transB", 1);
        return;
      }
      const std::string wt = transpose_last_two(x(1), 2, b + "/weights_t");
      if (n.inputs.size() < 3) {
        w_.node("MatMul", b, {x(0), wt}, y);
        return;
      }
      const std::string t = w_.op("MatMul", b, {x(0), wt});
      w_.node("Add", b + "/bias", {t, x(2)}, y);
      return;
    }
    case OpKind::MatMul: {
      require_f32();
      const auto& m = n.attr<graph::MatMulAttrs>();
      std::string a0 = x(0), a1 = x(1);
      const auto transpose = [&](const std::string& v, const graph::Ints& perm,
                                 const std::string& base) {
        const std::string t = w_.op("Transpose", base, {v});
        Writer::ints(*w_.producer(t), "perm", perm);
        return t;
      };
      if (!m.perm_a.empty()) a0 = transpose(a0, m.perm_a, b + "/a_perm");
      if (!m.perm_b.empty()) a1 = transpose(a1, m.perm_b, b + "/b_perm");
      if (m.transpose_a) {
        a0 = transpose_last_two(a0, g_.value(n.inputs[0]).shape.size(), b + "/a_t");
      }
      if (m.transpose_b) {
        a1 = transpose_last_two(a1, g_.value(n.inputs[1]).shape.size(), b + "/b_t");
      }
      if (m.perm_y.empty()) {
        w_.node("MatMul", b, {a0, a1}, y);
      } else {
        w_.node("Transpose", b + "/y_perm", {w_.op("MatMul", b, {a0, a1})}, y);
        Writer::ints(*w_.producer(y), "perm", m.perm_y);
      }
      return;
    }
    case OpKind::FakeQuantize: require_f32(); return fake_quantize(n, y);
    case OpKind::Dequantize: return dequantize(n, y);
    case OpKind::Lookup: return lookup(n, y);
    case OpKind::GateMultiply: return gate_multiply(n, y);
    case OpKind::MeanInnerProduct: return mean_inner_product(n, y);
    case OpKind::DynamicQuantize: require_f32(); return dynamic_quantize(n, y);
    case OpKind::Convert:
    case OpKind::Quantize:
    case OpKind::Reshape:
    case OpKind::Flatten:
    case OpKind::Transpose:
    case OpKind::Concat:
      --report_.operators;
      return emit(n);
    default: break;
  }
  refuse(n, "no ONNX form for this operator");
}

std::string Exporter::transpose_last_two(const std::string& x, std::size_t rank,
                                         const std::string& base) {
  graph::Ints perm;
  for (std::size_t d = 0; d < rank; ++d) perm.push_back(static_cast<std::int64_t>(d));
  std::swap(perm[rank - 1], perm[rank - 2]);
  const std::string t = w_.op("Transpose", base, {x});
  Writer::ints(*w_.producer(t), "perm", perm);
  return t;
}

void Exporter::conv_attrs(::onnx::NodeProto& node, const graph::Ints& strides,
                          const graph::Ints& dilations, const graph::Ints& pads_begin,
                          const graph::Ints& pads_end, std::int64_t groups, const Shape& w) {
  Writer::ints(node, "kernel_shape", graph::Ints(w.begin() + 2, w.end()));
  Writer::ints(node, "strides", strides);
  Writer::ints(node, "dilations", dilations);
  graph::Ints pads = pads_begin;
  pads.insert(pads.end(), pads_end.begin(), pads_end.end());
  Writer::ints(node, "pads", pads);
  Writer::int_attr(node, "group", groups);
}

// x * sigmoid(alpha * x)
void Exporter::swish(const std::string& b, const std::string& x, float alpha,
                     const std::string& y) {
  std::string t = x;
  if (alpha != 1.0f) t = w_.op("Mul", b + "/alpha", {x, w_.scalar(b + "/alpha", alpha)});
  t = w_.op("Sigmoid", b + "/sigmoid", {t});
  w_.node("Mul", b, {x, t}, y);
}

// Opset 14 has no Gelu: x * 0.5 * (1 + erf(x / sqrt(2))) as PyTorch writes
// it (which qfuse reads back as one Gelu), or the tanh form
// x * 0.5 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3))).
void Exporter::gelu(const std::string& b, const std::string& x, bool tanh_form,
                    const std::string& y) {
  std::string t;
  if (tanh_form) {
    const std::string x3 = w_.op("Mul", b + "/cube", {w_.op("Mul", b + "/square", {x, x}), x});
    t = w_.op("Mul", b + "/cubic", {x3, w_.scalar(b + "/coefficient", 0.044715)});
    t = w_.op("Add", b + "/inner", {x, t});
    t = w_.op("Mul", b + "/scale", {t, w_.scalar(b + "/sqrt_2_over_pi", 0.7978845608028654)});
    t = w_.op("Tanh", b + "/tanh", {t});
  } else {
    t = w_.op("Div", b + "/div", {x, w_.scalar(b + "/sqrt2", 1.4142135623730951)});
    t = w_.op("Erf", b + "/erf", {t});
  }
  t = w_.op("Add", b + "/one_plus", {t, w_.scalar(b + "/one", 1.0)});
  t = w_.op("Mul", b + "/times_x", {x, t});
  w_.node("Mul", b, {t, w_.scalar(b + "/half", 0.5)}, y);
}

// Opset 14 has no LayerNormalization (17): written as PyTorch spells
// nn.LayerNorm at opset 13, d = x - mean(x); d / sqrt(mean(d^2) + eps)
// * scale + bias over the last axis, which qfuse reads back as one LayerNorm.
void Exporter::layer_norm(const Node& n, const std::string& y) {
  const std::string& b = n.name;
  const auto mean_of_last_axis = [&](const std::string& base, const std::string& t) {
    const std::string m = w_.op("ReduceMean", base, {t});
    Writer::ints(*w_.producer(m), "axes", {-1});
    Writer::int_attr(*w_.producer(m), "keepdims", 1);
    return m;
  };
  const std::string x = in(n.inputs[0]);
  const std::string d = w_.op("Sub", b + "/centered", {x, mean_of_last_axis(b + "/mean", x)});
  const std::string square = w_.op("Pow", b + "/square", {d, w_.scalar(b + "/two", 2.0)});
  std::string t = w_.op("Add", b + "/plus_epsilon",
                        {mean_of_last_axis(b + "/variance", square),
                         w_.scalar(b + "/epsilon", n.attr<graph::LayerNormAttrs>().epsilon)});
  t = w_.op("Sqrt", b + "/deviation", {t});
  t = w_.op("Div", b + "/normalized", {d, t});
  t = w_.op("Mul", b + "/scaled", {t, in(n.inputs[1])});
  w_.node("Add", b, {t, in(n.inputs[2])}, y);
}

// Rows of f32 data by s32 / s64 indices (integral f32 ones cast to int64,
// exactly: the IR holds them below 2^24).
void Exporter::gather(const Node& n, const std::string& y) {
  if (g_.value(n.inputs[0]).type != ElementType::f32) {
    refuse(n, "gathers from a " + std::string(to_string(g_.value(n.inputs[0]).type)) +
                  " tensor (qfuse gathers f32 rows)");
  }
  std::string indices = in(n.inputs[1]);
  if (g_.value(n.inputs[1]).type == ElementType::f32) {
    indices = cast(indices, kInt64, n.name + "/indices");
  }
  auto& node = w_.node("Gather", n.name, {in(n.inputs[0]), indices}, y);
  Writer::int_attr(node, "axis", n.attr<graph::GatherAttrs>().axis);
}

void Exporter::resize(const Node& n, const std::string& y) {
  const auto& a = n.attr<graph::ResizeAttrs>();
  const graph::Value& xv = g_.value(n.inputs[0]);
  static const std::map<graph::CoordinateTransform, const char*> kTransforms = {
      {graph::CoordinateTransform::half_pixel, "half_pixel"},
      {graph::CoordinateTransform::pytorch_half_pixel, "pytorch_half_pixel"},
      {graph::CoordinateTransform::align_corners, "align_corners"},
      {graph::CoordinateTransform::asymmetric, "asymmetric"},
      {graph::CoordinateTransform::tf_half_pixel_for_nn, "tf_half_pixel_for_nn"}};
  static const std::map<graph::NearestMode, const char*> kNearest = {
      {graph::NearestMode::round_prefer_floor, "round_prefer_floor"},
      {graph::NearestMode::round_prefer_ceil, "round_prefer_ceil"},
      {graph::NearestMode::floor, "floor"},
      {graph::NearestMode::ceil, "ceil"}};
  // qfuse reads Resize on f32 only: codes go through as floats (exact),
  // and back by QuantizeLinear(1, 0) (round half to even, saturate, as
  // the int8 resize does).
  const std::string x = in_f32(n.inputs[0], n.name);
  std::vector<std::string> inputs{x, ""};
  if (!a.scales.empty()) {
    inputs.push_back(w_.constant(n.name + "/scales", kFloat, a.scales,
                                 Shape{static_cast<std::int64_t>(a.scales.size())}));
  } else {
    inputs.push_back("");
    inputs.push_back(
        w_.ints64(n.name + "/sizes", std::vector<std::int64_t>(a.sizes.begin(), a.sizes.end())));
  }
  const std::string out = xv.type == ElementType::f32 ? y : w_.fresh(n.name + "/resized");
  auto& r = w_.node("Resize", n.name, inputs, out);
  Writer::string_attr(r, "mode", a.mode == graph::ResizeMode::nearest ? "nearest" : "linear");
  Writer::string_attr(r, "coordinate_transformation_mode", kTransforms.at(a.transform));
  if (a.mode == graph::ResizeMode::nearest) {
    Writer::string_attr(r, "nearest_mode", kNearest.at(a.nearest_mode));
  }
  if (xv.type != ElementType::f32) quantize(n.name, out, onnx_type(g_.value(n.outputs[0]).type), y);
}

// A per-channel constant for an output of `rank` whose channels lie on
// axis 1 (spatial) or last (matrix products); a scalar when uniform.
template <typename T>
std::string Exporter::channel_constant(const std::string& base, int type, const std::vector<T>& v,
                                       std::size_t rank, bool spatial) {
  if (uniform(v)) return w_.constant(base, type, std::vector<T>{v[0]}, {});
  Shape s{static_cast<std::int64_t>(v.size())};
  if (spatial) s.resize(rank - 1, 1);
  return w_.constant(base, type, v, s);
}

// The layer's accumulator sum(w * (x - zero point)), without bias: int32
// from ConvInteger / MatMulInteger, or f32 (exact below 2^24) from a
// ConvTranspose on the codes. `abs_sum`: sum |w| per output channel.
std::string Exporter::accumulator(const Node& n, int channels, bool& is_float,
                                  std::vector<double>& abs_sum) {
  const auto& a = n.attr<graph::QuantizedLayerAttrs>();
  const graph::Value& x = g_.value(n.inputs[0]);
  const graph::Value& wv = g_.value(n.inputs[1]);
  if (!wv.is_constant()) {
    is_float = false;
    return run_time_weights_accumulator(n, channels, abs_sum);
  }
  const Tensor& wq = *wv.constant;
  const auto wvals = wq.data<std::int8_t>();
  abs_sum.assign(static_cast<std::size_t>(channels), 0.0);
  std::string acc = w_.fresh(n.name + "/acc");
  is_float = false;
  if (n.kind == OpKind::QuantizedDeconvolution) {
    // ONNX has no integer ConvTranspose: the codes minus the zero point and
    // the s8 weights as floats, every product and partial sum an integer
    // (exact in f32 below 2^24, whatever the order of the sums).
    const auto& c = std::get<graph::DeconvAttrs>(a.geometry);
    std::string xf = cast(in(n.inputs[0]), kFloat, n.name + "/codes");
    if (a.src_zero_point != 0) {
      xf = w_.op("Sub", n.name + "/zero_point",
                 {xf, w_.scalar(n.name + "/x_zero_point", a.src_zero_point)});
    }
    const std::string w = w_.constant(n.name + "/weight", kFloat,
                                      std::vector<float>(wvals.begin(), wvals.end()), wv.shape);
    auto& node = w_.node("ConvTranspose", n.name, {xf, w}, acc);
    conv_attrs(node, c.strides, c.dilations, c.pads_begin, c.pads_end, c.groups, wv.shape);
    Writer::ints(node, "output_padding", c.output_padding);
    // Weights [IC, OC / groups, k...]: output channel g * OC/groups + j.
    const std::int64_t ocg = wv.shape[1], icg = wv.shape[0] / c.groups;
    const std::int64_t per = element_count(Shape(wv.shape.begin() + 2, wv.shape.end()));
    for (std::size_t i = 0; i < wvals.size(); ++i) {
      const std::int64_t k = static_cast<std::int64_t>(i) / per;
      const std::int64_t ic = k / ocg, j = k % ocg;
      abs_sum[static_cast<std::size_t>((ic / icg) * ocg + j)] += std::abs(wvals[i]);
    }
    is_float = true;
    return acc;
  }
  // A dynamic layer's zero point comes with its input (DynamicQuantizeLinear's).
  const std::string xzp =
      a.dynamic ? zero_point_scalar(n.inputs[2], n.name + "/x_zero_point")
                : w_.constant(n.name + "/x_zero_point", onnx_type(x.type),
                              std::vector<std::int32_t>{a.src_zero_point}, {});
  if (n.kind == OpKind::QuantizedConvolution) {
    const auto& c = std::get<graph::ConvAttrs>(a.geometry);
    const std::string w = w_.constant(n.name + "/weight", kInt8,
                                      std::vector<std::int8_t>(wvals.begin(), wvals.end()),
                                      wv.shape);
    auto& node = w_.node("ConvInteger", n.name, {in(n.inputs[0]), w, xzp}, acc);
    Writer::ints(node, "strides", c.strides);
    Writer::ints(node, "dilations", c.dilations);
    graph::Ints pads = c.pads_begin;
    pads.insert(pads.end(), c.pads_end.begin(), c.pads_end.end());
    Writer::ints(node, "pads", pads);
    Writer::int_attr(node, "group", c.groups);
    const std::size_t per = wvals.size() / abs_sum.size();
    for (std::size_t i = 0; i < wvals.size(); ++i) abs_sum[i / per] += std::abs(wvals[i]);
    return acc;
  }
  // B is [K, N]: a fully-connected layer's [N, K] weights transposed.
  bool transposed = n.kind == OpKind::QuantizedFullyConnected;
  std::string xa = in(n.inputs[0]);
  if (n.kind == OpKind::QuantizedMatMul) {
    const auto& m = std::get<graph::MatMulAttrs>(a.geometry);
    if (m.transpose_a && source_.prequantized_only) refuse(n, "transposed activations");
    if (m.transpose_a) xa = transpose_last_two(xa, x.shape.size(), n.name + "/a_t");
    transposed = m.transpose_b;
  }
  const std::int64_t rows = wv.shape[0], cols = wv.shape[1];
  std::vector<std::int8_t> bm(wvals.size());
  Shape bshape{rows, cols};
  if (transposed) {
    bshape = {cols, rows};
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t c = 0; c < cols; ++c) {
        bm[static_cast<std::size_t>(c * rows + r)] = wvals[static_cast<std::size_t>(r * cols + c)];
      }
    }
  } else {
    std::copy(wvals.begin(), wvals.end(), bm.begin());
  }
  for (std::int64_t k = 0; k < bshape[0]; ++k) {
    for (std::int64_t c = 0; c < bshape[1]; ++c) {
      abs_sum[static_cast<std::size_t>(c)] +=
          std::abs(bm[static_cast<std::size_t>(k * bshape[1] + c)]);
    }
  }
  const std::string w = w_.constant(n.name + "/weight", kInt8, bm, bshape);
  w_.node("MatMulInteger", n.name, {xa, w, xzp}, acc);
  return acc;
}

// A QuantizedMatMul of two run-time tensors (attention's Q x K^T and P x
// V): MatMulInteger on both codes with both zero points, ONNX's own integer
// product (batch dims broadcast as numpy's). Each |w - zero point| is at
// most 255, which is all the accumulator bound can assume.
std::string Exporter::run_time_weights_accumulator(const Node& n, int channels,
                                                   std::vector<double>& abs_sum) {
  const auto& a = n.attr<graph::QuantizedLayerAttrs>();
  if (n.kind != OpKind::QuantizedMatMul) refuse(n, "run-time weights outside a matrix product");
  const auto& m = std::get<graph::MatMulAttrs>(a.geometry);
  if ((m.transpose_a || m.transpose_b) && source_.prequantized_only) {
    refuse(n, "transposed activations");
  }
  const graph::Value& x = g_.value(n.inputs[0]);
  const graph::Value& wv = g_.value(n.inputs[1]);
  std::string xa = in(n.inputs[0]), wb = in(n.inputs[1]);
  if (m.transpose_a) xa = transpose_last_two(xa, x.shape.size(), n.name + "/a_t");
  if (m.transpose_b) wb = transpose_last_two(wb, wv.shape.size(), n.name + "/b_t");
  const std::string xzp = w_.constant(n.name + "/x_zero_point", onnx_type(x.type),
                                      std::vector<std::int32_t>{a.src_zero_point}, {});
  const std::string wzp = w_.constant(n.name + "/w_zero_point", onnx_type(wv.type),
                                      std::vector<std::int32_t>{a.weights_zero_point}, {});
  const std::int64_t depth = wv.shape[wv.shape.size() - (m.transpose_b ? 1 : 2)];
  abs_sum.assign(static_cast<std::size_t>(channels), 255.0 * static_cast<double>(depth));
  const std::string acc = w_.fresh(n.name + "/acc");
  w_.node("MatMulInteger", n.name, {xa, wb, xzp, wzp}, acc);
  return acc;
}

// |acc + bias| <= 255 sum|w| + |bias| (u8 codes minus a zero point span
// at most 255): what Cast converts (and an f32 ConvTranspose sums)
// exactly below 2^24.
template <typename T>
void Exporter::check_accumulator_bound(const Node& n, const std::vector<double>& abs_sum,
                                       const std::vector<T>& bias) {
  double bound = 0.0;
  for (std::size_t c = 0; c < abs_sum.size(); ++c) {
    const double bc =
        bias.empty() ? 0.0 : std::abs(static_cast<double>(bias[bias.size() == 1 ? 0 : c]));
    bound = std::max(bound, 255.0 * abs_sum[c] + bc);
  }
  if (bound >= 0x1p24) {
    ++report_.inexact_accumulators;
    spdlog::warn("export-prequantized: {}: accumulators may reach {:.0f}, past 2^24: Cast to "
                 "float rounds them there",
                 n.name, bound);
  }
}

void Exporter::layer(const Node& n) {
  if (source_.prequantized_only && n.kind == OpKind::QuantizedDeconvolution) {
    refuse(n, "ONNX has no integer transposed convolution (ConvInteger covers Conv only)");
  }
  const auto& a = n.attr<graph::QuantizedLayerAttrs>();
  // A dynamic layer's scale is known only at run time: it keeps float
  // scales in the integer-only mode too.
  const composer::IntegerPlan* plan =
      source_.integer_plan && !a.dynamic ? source_.integer_plan(n) : nullptr;
  if (plan == nullptr) return float_scale_layer(n);
  const graph::Value& y = g_.value(n.outputs[0]);
  const bool spatial =
      n.kind == OpKind::QuantizedConvolution || n.kind == OpKind::QuantizedDeconvolution;
  const std::size_t rank = y.shape.size();

  bool acc_is_float = false;
  std::vector<double> abs_sum;
  std::string acc = accumulator(n, plan->channels, acc_is_float, abs_sum);
  check_accumulator_bound(n, abs_sum, plan->bias);
  if (std::any_of(plan->bias.begin(), plan->bias.end(), [](std::int32_t b) { return b != 0; })) {
    acc = w_.op("Add", n.name + "/bias",
                {acc, acc_is_float
                          ? channel_constant(n.name + "/bias", kFloat, plan->bias, rank, spatial)
                          : channel_constant(n.name + "/bias", kInt32, plan->bias, rank, spatial)});
  }
  // The stage's integer input: int32 accumulators, or (after a rounding
  // point inside the layer) a float holding an integer: an intermediate
  // rounding is Round + Max / Min, so that the chain stays one layer's
  // post-ops when read back (a QuantizeLinear would end the layer there).
  std::string xi = acc;
  bool x_is_float = acc_is_float;
  std::string residual;
  if (plan->residual_input) {
    residual =
        in(n.inputs[a.first_external_input() + static_cast<std::size_t>(*plan->residual_input)]);
  }
  const auto to_float = [&](const std::string& v, const std::string& base) {
    return cast(v, kFloat, base);
  };
  for (std::size_t s = 0; s < plan->stages.size(); ++s) {
    const composer::IntegerStage& st = plan->stages[s];
    const bool writes_output = s + 1 == plan->stages.size() && y.type != ElementType::f32;
    const std::string base = n.name + "/stage" + std::to_string(s);
    // Integers written as float are exact below 2^24 (larger ones only
    // with trailing zero bits); others round to the nearest float.
    const auto exact = [&](const std::vector<std::int64_t>& v, const char* what) {
      for (const std::int64_t value : v) {
        if (static_cast<std::int64_t>(static_cast<float>(value)) != value) {
          if (source_.prequantized_only) {
            refuse(n, std::string(what) + " " + std::to_string(value) +
                          " is not exact as a float (integers are below 2^24; lower "
                          "CompileOptions::integer_eta)");
          }
          ++report_.inexact_constants;
          spdlog::warn("export-prequantized: {}: {} {} is not exact as a float: written as {:.0f} "
                       "(relative error below 2^-24; a value that close to a rounding tie can "
                       "land on the neighbouring code)",
                       n.name, what, value, static_cast<double>(static_cast<float>(value)));
          return;
        }
      }
    };
    exact(st.multiplier, "a multiplier M0 of");
    exact(st.residual_multiplier, "a residual multiplier of");
    exact(st.offset, "an offset K of");
    std::string t = x_is_float ? xi : to_float(xi, base + "/cast");
    t = w_.op("Mul", base + "/M0",
              {t, channel_constant(base + "/M0", kFloat, st.multiplier, rank, spatial)});
    if (!st.residual_multiplier.empty()) {
      std::string r = to_float(residual, base + "/residual_cast");
      r = w_.op("Mul", base + "/R",
                {r, channel_constant(base + "/R", kFloat, st.residual_multiplier, rank, spatial)});
      t = w_.op("Add", base + "/residual_add", {t, r});
    }
    if (std::any_of(st.offset.begin(), st.offset.end(), [](std::int64_t k) { return k != 0; })) {
      t = w_.op("Add", base + "/K",
                {t, channel_constant(base + "/K", kFloat, st.offset, rank, spatial)});
    }
    std::vector<double> shift;
    for (const int sh : st.shift) shift.push_back(std::ldexp(1.0, -sh));
    t = w_.op("Mul", base + "/shift",
              {t, channel_constant(base + "/shift", kFloat, shift, rank, spatial)});
    if (!writes_output) t = w_.op("Round", base + "/round", {t});
    // The clamp, where narrower than what QuantizeLinear saturates to.
    double type_lo = -0x1p31, type_hi = 0x1p31 - 1;
    if (writes_output) {
      type_lo = y.type == ElementType::s8 ? -128 : 0;
      type_hi = y.type == ElementType::s8 ? 127 : 255;
    }
    const bool clamp_lo =
        std::any_of(st.lo.begin(), st.lo.end(), [&](std::int32_t v) { return v > type_lo; });
    const bool clamp_hi =
        std::any_of(st.hi.begin(), st.hi.end(), [&](std::int32_t v) { return v < type_hi; });
    if ((clamp_lo || clamp_hi) && uniform(st.lo) && uniform(st.hi)) {
      // One clamp for every channel: Clip.
      t = w_.op("Clip", base + "/clip",
                {t,
                 w_.constant(base + "/lo", kFloat,
                             std::vector<double>{static_cast<double>(st.lo[0])}, {}),
                 w_.constant(base + "/hi", kFloat,
                             std::vector<double>{static_cast<double>(st.hi[0])}, {})});
    } else {
      if (clamp_lo) {
        t = w_.op("Max", base + "/lo",
                  {t, channel_constant(base + "/lo", kFloat, st.lo, rank, spatial)});
      }
      if (clamp_hi) {
        t = w_.op("Min", base + "/hi",
                  {t, channel_constant(base + "/hi", kFloat, st.hi, rank, spatial)});
      }
    }
    if (writes_output) {
      quantize(base, t, onnx_type(y.type), name(n.outputs[0]));
    } else {
      xi = t;
      x_is_float = true;
    }
  }
  if (y.type == ElementType::f32) {
    const composer::IntegerDequantize& d = *plan->dequantize;
    std::string t = x_is_float ? xi : to_float(xi, n.name + "/dequantize");
    t = w_.op("Mul", n.name + "/scale",
              {t, channel_constant(n.name + "/scale", kFloat, d.scale, rank, spatial)});
    if (d.residual_scale != 0.0f) {
      std::string r = to_float(residual, n.name + "/residual_cast");
      r = w_.op("Mul", n.name + "/residual_scale",
                {r, w_.constant(n.name + "/residual_scale", kFloat,
                                std::vector<float>{d.residual_scale}, {})});
      t = w_.op("Add", n.name + "/residual_add", {t, r});
    }
    const bool clamps =
        std::any_of(d.lo.begin(), d.lo.end(), [](float v) { return std::isfinite(v); }) ||
        std::any_of(d.hi.begin(), d.hi.end(), [](float v) { return std::isfinite(v); });
    if (!clamps || !plan->stages.empty()) {
      // After a stage the codes are clamped already.
      w_.node("Add", n.name + "/shift",
              {t, channel_constant(n.name + "/shift", kFloat, d.shift, rank, spatial)},
              name(n.outputs[0]));
    } else {
      if (source_.prequantized_only) refuse(n, "a clamp on a dequantized accumulator");
      // A clamp on the dequantized accumulator.
      t = w_.op("Add", n.name + "/shift",
                {t, channel_constant(n.name + "/shift", kFloat, d.shift, rank, spatial)});
      t = w_.op("Max", n.name + "/clamp_lo",
                {t, channel_constant(n.name + "/clamp_lo", kFloat, d.lo, rank, spatial)});
      w_.node("Min", n.name + "/clamp_hi",
              {t, channel_constant(n.name + "/clamp_hi", kFloat, d.hi, rank, spatial)},
              name(n.outputs[0]));
    }
  }
  if (n.kind == OpKind::QuantizedDeconvolution) {
    ++report_.deconvolutions;
  } else {
    ++report_.layers;
  }
}

// A layer that kept float scales: its accumulator, then the composed plan
// in f32 as the float-scale path evaluates it (post_ops_plan.hpp):
//   y = (acc + bias) * output_scales; post_ops in order; + dst_zero_point;
//   dst = y (f32) or saturate(round_half_to_even(y)) (QuantizeLinear(1, 0)).
// A dynamic layer (QuantizedLayerAttrs::dynamic) is ONNX Runtime's form:
//   MatMulInteger(codes, W^T, z) -> Cast(float) -> Mul(r), r = s or Mul(s, ws), then post_ops,
// its plan without output scales, bias or a dst zero point.
void Exporter::float_scale_layer(const Node& n) {
  const auto& a = n.attr<graph::QuantizedLayerAttrs>();
  if (a.dynamic && source_.prequantized_only) {
    refuse(n, "the scale is known only at run time (a dynamic layer): no integer form");
  }
  if (!source_.composed_plan || source_.prequantized_only) {
    refuse(n, "the layer kept float scales in the integer-only mode (qfuse dump --integer-only "
              "says why)");
  }
  const std::optional<composer::PostOpsPlan> composed = source_.composed_plan(n);
  if (!composed) refuse(n, "the compiled model has no composed plan for this layer");
  const composer::PostOpsPlan& plan = *composed;
  const graph::Value& y = g_.value(n.outputs[0]);
  const bool spatial =
      n.kind == OpKind::QuantizedConvolution || n.kind == OpKind::QuantizedDeconvolution;
  const std::size_t rank = y.shape.size();
  const std::string& b = n.name;

  bool acc_is_float = false;
  std::vector<double> abs_sum;
  std::string t = accumulator(n, plan.channels, acc_is_float, abs_sum);
  std::vector<float> bias;
  if (a.has_bias) {
    const auto v = g_.value(n.inputs[2]).constant->data<float>();
    bias.assign(v.begin(), v.end());
  }
  check_accumulator_bound(n, abs_sum, bias);
  if (!acc_is_float) t = cast(t, kFloat, b + "/cast");
  if (a.dynamic) {
    // The run-time scale is the whole output scale (as the executable
    // requires): nothing constant joins it.
    const bool unit = std::all_of(plan.output_scales.begin(), plan.output_scales.end(),
                                  [](float s) { return s == 1.0f; });
    if (!unit || plan.dst_zero_point || a.has_bias) {
      refuse(n, "a dynamic layer with a constant output scale, bias or zero point besides its "
                "run-time scale");
    }
    std::string r = in(n.inputs[3]);
    if (!a.dynamic_weight_scales.empty()) {
      // ONNX Runtime's form: r = Mul(s, the weights' scales).
      r = w_.op("Mul", b + "/scales_mul",
                {r, channel_constant(b + "/weight_scale", kFloat, a.dynamic_weight_scales, rank,
                                     spatial)});
    }
    t = w_.op("Mul", b + "/scale", {t, r});
  }
  if (std::any_of(bias.begin(), bias.end(), [](float v) { return v != 0.0f; })) {
    t = w_.op("Add", b + "/bias", {t, channel_constant(b + "/bias", kFloat, bias, rank, spatial)});
  }
  if (!plan.output_scales.empty() &&
      !std::all_of(plan.output_scales.begin(), plan.output_scales.end(),
                   [](float s) { return s == 1.0f; })) {
    // A denormal scale (a channel of zero weights) in two steps: its
    // product with 2^100 is exact, and so is the final 2^-100 on a
    // result in the normal range, without relying on a runtime that
    // multiplies denormals (rather than flushing them to zero).
    const bool tiny = std::any_of(plan.output_scales.begin(), plan.output_scales.end(),
                                  [](float s) { return s != 0.0f && std::fabs(s) < 0x1p-100f; });
    std::vector<float> scales = plan.output_scales;
    if (tiny) {
      for (float& s : scales) s = std::ldexp(s, 100);
    }
    t = w_.op("Mul", b + "/output_scale",
              {t, channel_constant(b + "/output_scale", kFloat, scales, rank, spatial)});
    if (tiny) {
      t = w_.op("Mul", b + "/output_scale_2^-100",
                {t, w_.scalar(b + "/two_pow_minus_100", 0x1p-100)});
    }
  }
  const std::size_t first_external = a.first_external_input();
  const auto external = [&](int input, const std::string& base) {
    return in_f32(n.inputs[first_external + static_cast<std::size_t>(input)], base);
  };
  for (std::size_t k = 0; k < plan.post_ops.size(); ++k) {
    const std::string base = b + "/post_op" + std::to_string(k);
    const composer::PostOp& op = plan.post_ops[k];
    if (const auto* e = std::get_if<composer::EltwisePostOp>(&op)) {
      t = eltwise(n, base, t, e->alg, e->alpha, e->beta);
      if (e->scale != 1.0f) {
        t = w_.op("Mul", base + "/scale", {t, w_.scalar(base + "/scale", e->scale)});
      }
    } else if (const auto* bin = std::get_if<composer::BinaryPostOp>(&op)) {
      std::string other;
      if (const auto* c = std::get_if<composer::ConstantTensor>(&bin->tensor)) {
        if (c->values.size() == 1 || static_cast<int>(c->values.size()) == plan.channels) {
          other = channel_constant(base + "/operand", kFloat, c->values, rank, spatial);
        } else {
          other = w_.constant(base + "/operand", kFloat, c->values, y.shape);
        }
      } else {
        other = external(std::get<composer::ExternalTensor>(bin->tensor).input, base + "/operand");
      }
      static const std::map<composer::BinaryAlg, const char*> kOps = {
          {composer::BinaryAlg::add, "Add"}, {composer::BinaryAlg::sub, "Sub"},
          {composer::BinaryAlg::mul, "Mul"}, {composer::BinaryAlg::min, "Min"},
          {composer::BinaryAlg::max, "Max"}};
      t = w_.op(kOps.at(bin->alg), base, {t, other});
    } else {
      // The residual's raw values (codes) read from the destination.
      const auto& sum = std::get<composer::SumPostOp>(op);
      std::string r = external(sum.input, base + "/residual");
      if (sum.scale != 1.0f) {
        r = w_.op("Mul", base + "/residual_scale", {r, w_.scalar(base + "/scale", sum.scale)});
      }
      t = w_.op("Add", base, {t, r});
    }
  }
  if (plan.dst_zero_point && *plan.dst_zero_point != 0) {
    t = w_.op("Add", b + "/dst_zero_point",
              {t, w_.scalar(b + "/dst_zero_point", *plan.dst_zero_point)});
  }
  if (y.type == ElementType::f32) {
    w_.finish(t, name(n.outputs[0]), b + "/output");
  } else {
    quantize(b, t, onnx_type(y.type), name(n.outputs[0]));
  }
  if (n.kind == OpKind::QuantizedDeconvolution) {
    ++report_.deconvolutions;
  } else {
    ++report_.float_scale_layers;
  }
}

// alg(x, alpha, beta) of the composer's vocabulary.
std::string Exporter::eltwise(const Node& n, const std::string& b, const std::string& x,
                              composer::EltwiseAlg alg, float alpha, float beta) {
  using composer::EltwiseAlg;
  const auto unary = [&](const char* op) { return w_.op(op, b, {x}); };
  // One ONNX operator with its defaults (composer/eltwise_math.hpp's table).
  if (const std::string_view op = composer::eltwise_info(alg).onnx_op; !op.empty()) {
    return w_.op(std::string(op), b, {x});
  }
  switch (alg) {
    case EltwiseAlg::relu: {
      if (alpha == 0.0f) return unary("Relu");
      const std::string t = unary("LeakyRelu");
      Writer::float_attr(*w_.producer(t), "alpha", alpha);
      return t;
    }
    case EltwiseAlg::elu: {
      const std::string t = unary("Elu");
      Writer::float_attr(*w_.producer(t), "alpha", alpha);
      return t;
    }
    case EltwiseAlg::square: return w_.op("Mul", b, {x, x});
    case EltwiseAlg::linear: {
      const std::string t = w_.op("Mul", b + "/alpha", {x, w_.scalar(b + "/alpha", alpha)});
      return beta == 0.0f ? t : w_.op("Add", b + "/beta", {t, w_.scalar(b + "/beta", beta)});
    }
    case EltwiseAlg::clip:
      return w_.op("Clip", b, {x, w_.scalar(b + "/lo", alpha), w_.scalar(b + "/hi", beta)});
    case EltwiseAlg::gelu_tanh:
    case EltwiseAlg::gelu_erf: {
      const std::string t = w_.fresh(b);
      gelu(b, x, alg == EltwiseAlg::gelu_tanh, t);
      return t;
    }
    case EltwiseAlg::swish: {
      const std::string t = w_.fresh(b);
      swish(b, x, alpha, t);
      return t;
    }
    case EltwiseAlg::hsigmoid: {
      const std::string t = unary("HardSigmoid");
      Writer::float_attr(*w_.producer(t), "alpha", 1.0f / 6.0f);
      Writer::float_attr(*w_.producer(t), "beta", 0.5f);
      return t;
    }
    default: break;  // log, mish
  }
  refuse(n, "post-op eltwise " + composer::to_string(alg) +
                ": qfuse has no operator to read its ONNX form back as");
}

void Exporter::pool_attrs(::onnx::NodeProto& p, const graph::PoolAttrs& a) {
  Writer::ints(p, "kernel_shape", a.kernel);
  Writer::ints(p, "strides", a.strides);
  graph::Ints pads = a.pads_begin;
  pads.insert(pads.end(), a.pads_end.begin(), a.pads_end.end());
  Writer::ints(p, "pads", pads);
}

void Exporter::max_pool(const Node& n, const std::string& y) {
  const auto& a = n.attr<graph::PoolAttrs>();
  auto& p = w_.node("MaxPool", n.name, {in(n.inputs[0])}, y);
  pool_attrs(p, a);
  Writer::ints(p, "dilations", a.dilations.empty() ? graph::Ints(a.kernel.size(), 1) : a.dilations);
}

}  // namespace export_impl

ExportReport export_prequantized(const graph::Graph& fused, const ExportSource& source,
                                 const std::string& path) {
  ::onnx::ModelProto model;
  model.set_ir_version(7);
  model.set_producer_name("qfuse export-prequantized");
  auto* opset = model.add_opset_import();
  opset->set_domain("");
  opset->set_version(kOpset);
  ::onnx::GraphProto* g = model.mutable_graph();
  g->set_name("prequantized");
  const ExportReport report = export_impl::Exporter(fused, source, *g).run();
  try {
    ::onnx::checker::check_model(model);
  } catch (const std::exception& e) {
    throw GraphError(std::string("export-prequantized: the written model fails onnx::checker: ") +
                     e.what());
  }
  std::ofstream out(path, std::ios::binary);
  if (!out || !model.SerializeToOstream(&out)) {
    throw IoError("export-prequantized: cannot write " + path);
  }
  return report;
}

ExportReport export_prequantized(
    const graph::Graph& fused,
    const std::function<const composer::IntegerPlan*(const graph::Node&)>& plan_of,
    const std::string& path) {
  ExportSource source;
  source.integer_plan = plan_of;
  source.prequantized_only = true;
  return export_prequantized(fused, source, path);
}

}  // namespace qfuse::onnx
