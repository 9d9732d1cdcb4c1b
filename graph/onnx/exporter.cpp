#include "graph/onnx/exporter.hpp"

#include <onnx/checker.h>
#include <onnx/onnx_pb.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>

#include "graph/onnx/proto_utils.hpp"
#include "graph/ops.hpp"
#include "qfuse/error.hpp"

namespace qfuse::onnx {
namespace {

using detail::kFloat;
using detail::kInt32;
using detail::kInt64;
using detail::kInt8;
using detail::kUint8;
using graph::Node;
using graph::OpKind;

constexpr int kOpset = 13;

int onnx_type(ElementType t) { return detail::to_onnx_type(t); }

template <typename T>
bool uniform(const std::vector<T>& v) {
  return std::all_of(v.begin(), v.end(), [&](const T& x) { return x == v[0]; });
}

class Writer {
 public:
  explicit Writer(::onnx::GraphProto& g) : g_(g) {}

  std::string fresh(const std::string& base) {
    std::string n = base;
    while (!used_.insert(n).second) n = base + "_" + std::to_string(++counter_);
    return n;
  }
  void reserve(const std::string& n) { used_.insert(n); }

  // An initializer; `shape` empty: a scalar.
  template <typename T>
  std::string constant(const std::string& base, int type, const std::vector<T>& values,
                       const Shape& shape) {
    const std::string n = fresh(base);
    ::onnx::TensorProto* t = g_.add_initializer();
    t->set_name(n);
    t->set_data_type(type);
    for (const std::int64_t d : shape) t->add_dims(d);
    for (const T& v : values) {
      switch (type) {
        case kFloat: t->add_float_data(static_cast<float>(v)); break;
        case kInt64: t->add_int64_data(static_cast<std::int64_t>(v)); break;
        default: t->add_int32_data(static_cast<std::int32_t>(v)); break;  // int32, int8, uint8
      }
    }
    return n;
  }

  ::onnx::NodeProto& node(const std::string& op, const std::string& name,
                          const std::vector<std::string>& inputs, const std::string& output) {
    ::onnx::NodeProto* n = g_.add_node();
    n->set_op_type(op);
    n->set_name(fresh(name));
    for (const std::string& i : inputs) n->add_input(i);
    n->add_output(output);
    return *n;
  }
  // A node whose output gets a fresh name; returns it.
  std::string op(const std::string& op, const std::string& base,
                 const std::vector<std::string>& inputs) {
    const std::string out = fresh(base);
    node(op, base, inputs, out);
    return out;
  }

  static void ints(::onnx::NodeProto& n, const std::string& name, const graph::Ints& v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(::onnx::AttributeProto::INTS);
    for (const std::int64_t x : v) a->add_ints(x);
  }
  static void int_attr(::onnx::NodeProto& n, const std::string& name, std::int64_t v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(::onnx::AttributeProto::INT);
    a->set_i(v);
  }

 private:
  ::onnx::GraphProto& g_;
  std::set<std::string> used_;
  int counter_ = 0;
};

class Exporter {
 public:
  Exporter(const graph::Graph& g,
           const std::function<const composer::IntegerPlan*(const Node&)>& plan_of,
           ::onnx::GraphProto& proto)
      : g_(g), plan_of_(plan_of), w_(proto), proto_(proto) {}

  ExportReport run() {
    for (std::uint32_t i = 0; i < g_.value_count(); ++i) w_.reserve(g_.value(graph::ValueId{i}).name);
    for (graph::ValueId v : g_.inputs()) add_value_info(*proto_.add_input(), v);
    for (graph::NodeId id : g_.topological_order()) emit(g_.node(id));
    for (graph::ValueId v : g_.outputs()) add_value_info(*proto_.add_output(), v);
    return report_;
  }

 private:
  [[noreturn]] void refuse(const Node& n, const std::string& why) const {
    throw UnsupportedError("export-prequantized: " + std::string(graph::to_string(n.kind)) +
                           " node '" + n.name + "': " + why);
  }

  void add_value_info(::onnx::ValueInfoProto& info, graph::ValueId id) {
    const graph::Value& v = g_.value(id);
    info.set_name(v.name);
    auto* t = info.mutable_type()->mutable_tensor_type();
    t->set_elem_type(onnx_type(v.type));
    for (const std::int64_t d : v.shape) t->mutable_shape()->add_dim()->set_dim_value(d);
  }

  const std::string& name(graph::ValueId id) const { return g_.value(id).name; }

  void emit(const Node& n) {
    switch (n.kind) {
      case OpKind::Convert: return convert(n);
      case OpKind::QuantizedConvolution:
      case OpKind::QuantizedFullyConnected:
      case OpKind::QuantizedMatMul: return layer(n);
      case OpKind::QuantizedDeconvolution:
        refuse(n, "ONNX has no integer transposed convolution (ConvInteger covers Conv only)");
      case OpKind::AvgPool: return avg_pool(n);
      case OpKind::MaxPool: return max_pool(n);
      case OpKind::Reshape:
      case OpKind::Flatten: {
        const Shape& s = g_.value(n.outputs[0]).shape;
        const std::string shape = w_.constant(n.name + "/shape", kInt64,
                                              std::vector<std::int64_t>(s.begin(), s.end()),
                                              Shape{static_cast<std::int64_t>(s.size())});
        w_.node("Reshape", n.name, {name(n.inputs[0]), shape}, name(n.outputs[0]));
        return;
      }
      case OpKind::Transpose: {
        auto& t = w_.node("Transpose", n.name, {name(n.inputs[0])}, name(n.outputs[0]));
        Writer::ints(t, "perm", n.attr<graph::TransposeAttrs>().perm);
        return;
      }
      case OpKind::Concat: {
        std::vector<std::string> inputs;
        for (graph::ValueId v : n.inputs) inputs.push_back(name(v));
        auto& c = w_.node("Concat", n.name, inputs, name(n.outputs[0]));
        Writer::int_attr(c, "axis", n.attr<graph::ConcatAttrs>().axis);
        return;
      }
      default:
        refuse(n, "no pre-quantized form for this operator");
    }
  }

  // f32 -> 8-bit: clamp(round((x - lo) * 255 / (hi - lo)), 0, 255) + type min,
  // a QuantizeLinear when lo sits on the grid (it does for Q/DQ models).
  void convert(const Node& n) {
    const auto& a = n.attr<graph::ConvertAttrs>();
    const graph::Value& x = g_.value(n.inputs[0]);
    const graph::Value& y = g_.value(n.outputs[0]);
    if (!a.quantizes()) {
      auto& c = w_.node("Cast", n.name, {x.name}, y.name);
      Writer::int_attr(c, "to", onnx_type(y.type));
      return;
    }
    if (x.type != ElementType::f32) refuse(n, "quantizes a non-f32 tensor");
    const int zt = onnx_type(y.type);
    if (a.quantizes_linear()) {
      // ONNX's own QuantizeLinear: the same arithmetic.
      w_.node("QuantizeLinear", n.name,
              {x.name, w_.constant(n.name + "/scale", kFloat, std::vector<float>{a.scale}, {}),
               w_.constant(n.name + "/zero_point", zt,
                           std::vector<double>{static_cast<double>(a.zero_point)}, {})},
              y.name);
      return;
    }
    const double scale = (static_cast<double>(a.input_high) - a.input_low) / 255.0;
    const double type_min = y.type == ElementType::s8 ? -128.0 : 0.0;
    const double zp = -static_cast<double>(a.input_low) / scale + type_min;
    if (std::abs(zp - std::nearbyint(zp)) < 1e-4) {
      w_.node("QuantizeLinear", n.name,
              {x.name, w_.constant(n.name + "/scale", kFloat, std::vector<double>{scale}, {}),
               w_.constant(n.name + "/zero_point", zt, std::vector<double>{std::nearbyint(zp)}, {})},
              y.name);
      return;
    }
    // The grid does not hold zero: (x - lo) / scale + type min, rounded.
    std::string t = w_.op("Sub", n.name + "/shift",
                          {x.name, w_.constant(n.name + "/lo", kFloat, std::vector<float>{a.input_low}, {})});
    t = w_.op("Mul", n.name + "/scale",
              {t, w_.constant(n.name + "/inv_scale", kFloat, std::vector<double>{1.0 / scale}, {})});
    if (type_min != 0) {
      t = w_.op("Add", n.name + "/type_min",
                {t, w_.constant(n.name + "/min", kFloat, std::vector<double>{type_min}, {})});
    }
    quantize(n.name, t, zt, y.name);
  }

  // QuantizeLinear(x, 1, 0 of type zt) into `out`.
  void quantize(const std::string& base, const std::string& x, int zt, const std::string& out) {
    w_.node("QuantizeLinear", base + "/round",
            {x, w_.constant(base + "/one", kFloat, std::vector<float>{1.0f}, {}),
             w_.constant(base + "/zero", zt, std::vector<std::int32_t>{0}, {})},
            out);
  }

  // A per-channel constant for an output of `rank` whose channels lie on
  // axis 1 (spatial) or last (matrix products); a scalar when uniform.
  template <typename T>
  std::string channel_constant(const std::string& base, int type, const std::vector<T>& v,
                               std::size_t rank, bool spatial) {
    if (uniform(v)) return w_.constant(base, type, std::vector<T>{v[0]}, {});
    Shape s{static_cast<std::int64_t>(v.size())};
    if (spatial) s.resize(rank - 1, 1);
    return w_.constant(base, type, v, s);
  }

  void layer(const Node& n) {
    const composer::IntegerPlan* plan = plan_of_(n);
    if (plan == nullptr) {
      refuse(n, "the layer kept float scales in the integer-only mode (qfuse dump --integer-only "
                "says why)");
    }
    const auto& a = n.attr<graph::QuantizedLayerAttrs>();
    const graph::Value& x = g_.value(n.inputs[0]);
    const graph::Value& wv = g_.value(n.inputs[1]);
    const graph::Value& y = g_.value(n.outputs[0]);
    const bool spatial = n.kind == OpKind::QuantizedConvolution;
    const std::size_t rank = y.shape.size();
    const Tensor& wq = *wv.constant;
    const auto wvals = wq.data<std::int8_t>();

    // The accumulator: ConvInteger / MatMulInteger.
    const std::string xzp = w_.constant(n.name + "/x_zero_point", onnx_type(x.type),
                                        std::vector<std::int32_t>{a.src_zero_point}, {});
    std::string acc = w_.fresh(n.name + "/acc");
    std::vector<double> abs_sum(static_cast<std::size_t>(plan->channels), 0.0);
    if (spatial) {
      const auto& c = std::get<graph::ConvAttrs>(a.geometry);
      const std::string w = w_.constant(n.name + "/weight", kInt8,
                                        std::vector<std::int8_t>(wvals.begin(), wvals.end()),
                                        wv.shape);
      auto& node = w_.node("ConvInteger", n.name, {x.name, w, xzp}, acc);
      Writer::ints(node, "strides", c.strides);
      Writer::ints(node, "dilations", c.dilations);
      graph::Ints pads = c.pads_begin;
      pads.insert(pads.end(), c.pads_end.begin(), c.pads_end.end());
      Writer::ints(node, "pads", pads);
      Writer::int_attr(node, "group", c.groups);
      const std::size_t per = wvals.size() / abs_sum.size();
      for (std::size_t i = 0; i < wvals.size(); ++i) abs_sum[i / per] += std::abs(wvals[i]);
    } else {
      // B is [K, N]: a fully-connected layer's [N, K] weights transposed.
      bool transposed = n.kind == OpKind::QuantizedFullyConnected;
      if (n.kind == OpKind::QuantizedMatMul) {
        const auto& m = std::get<graph::MatMulAttrs>(a.geometry);
        if (m.transpose_a) refuse(n, "transposed activations");
        transposed = m.transpose_b;
      }
      const std::int64_t rows = wv.shape[0], cols = wv.shape[1];
      std::vector<std::int8_t> b(wvals.size());
      Shape bshape{rows, cols};
      if (transposed) {
        bshape = {cols, rows};
        for (std::int64_t r = 0; r < rows; ++r) {
          for (std::int64_t c = 0; c < cols; ++c) {
            b[static_cast<std::size_t>(c * rows + r)] = wvals[static_cast<std::size_t>(r * cols + c)];
          }
        }
      } else {
        std::copy(wvals.begin(), wvals.end(), b.begin());
      }
      for (std::int64_t k = 0; k < bshape[0]; ++k) {
        for (std::int64_t c = 0; c < bshape[1]; ++c) {
          abs_sum[static_cast<std::size_t>(c)] += std::abs(b[static_cast<std::size_t>(k * bshape[1] + c)]);
        }
      }
      const std::string w = w_.constant(n.name + "/weight", kInt8, b, bshape);
      w_.node("MatMulInteger", n.name, {x.name, w, xzp}, acc);
    }
    // |acc + bias| <= 255 sum|w| + |bias| (u8 codes minus a zero point span
    // at most 255): what Cast converts exactly below 2^24.
    double bound = 0.0;
    for (std::size_t c = 0; c < abs_sum.size(); ++c) {
      bound = std::max(bound, 255.0 * abs_sum[c] + std::abs(static_cast<double>(plan->bias[c])));
    }
    if (bound >= 0x1p24) {
      ++report_.inexact_accumulators;
      spdlog::warn("export-prequantized: {}: accumulators may reach {:.0f}, past 2^24: Cast to "
                   "float rounds them there",
                   n.name, bound);
    }
    if (std::any_of(plan->bias.begin(), plan->bias.end(), [](std::int32_t b) { return b != 0; })) {
      acc = w_.op("Add", n.name + "/bias",
                  {acc, channel_constant(n.name + "/bias", kInt32, plan->bias, rank, spatial)});
    }
    // The stage's integer input: int32 accumulators, or (after a rounding
    // point inside the layer) a float holding an integer: an intermediate
    // rounding is Round + Max / Min, so that the chain stays one layer's
    // post-ops when read back (a QuantizeLinear would end the layer there).
    std::string xi = acc;
    bool x_is_float = false;
    std::string residual;
    if (plan->residual_input) {
      residual = name(n.inputs[a.first_external_input() + static_cast<std::size_t>(*plan->residual_input)]);
    }
    const auto to_float = [&](const std::string& v, const std::string& base) {
      const std::string t = w_.op("Cast", base, {v});
      Writer::int_attr(*find_node(t), "to", kFloat);
      return t;
    };
    for (std::size_t s = 0; s < plan->stages.size(); ++s) {
      const composer::IntegerStage& st = plan->stages[s];
      const bool writes_output = s + 1 == plan->stages.size() && y.type != ElementType::f32;
      const std::string base = n.name + "/stage" + std::to_string(s);
      // Integers written as float must be exact there (every one below 2^24
      // is; larger ones only with trailing zero bits).
      const auto exact = [&](const std::vector<std::int64_t>& v, const char* what) {
        for (const std::int64_t value : v) {
          if (static_cast<std::int64_t>(static_cast<float>(value)) != value) {
            refuse(n, std::string(what) + " " + std::to_string(value) +
                          " is not exact as a float (integers are below 2^24; lower "
                          "CompileOptions::integer_eta)");
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
        t = w_.op("Add", base + "/K", {t, channel_constant(base + "/K", kFloat, st.offset, rank, spatial)});
      }
      std::vector<double> shift;
      for (const int sh : st.shift) shift.push_back(std::ldexp(1.0, -sh));
      t = w_.op("Mul", base + "/shift", {t, channel_constant(base + "/shift", kFloat, shift, rank, spatial)});
      if (!writes_output) t = w_.op("Round", base + "/round", {t});
      // The clamp, where narrower than what QuantizeLinear saturates to.
      double type_lo = -0x1p31, type_hi = 0x1p31 - 1;
      if (writes_output) {
        type_lo = y.type == ElementType::s8 ? -128 : 0;
        type_hi = y.type == ElementType::s8 ? 127 : 255;
      }
      const bool clamp_lo = std::any_of(st.lo.begin(), st.lo.end(), [&](std::int32_t v) { return v > type_lo; });
      const bool clamp_hi = std::any_of(st.hi.begin(), st.hi.end(), [&](std::int32_t v) { return v < type_hi; });
      if ((clamp_lo || clamp_hi) && uniform(st.lo) && uniform(st.hi)) {
        // One clamp for every channel: Clip.
        t = w_.op("Clip", base + "/clip",
                  {t, w_.constant(base + "/lo", kFloat, std::vector<double>{static_cast<double>(st.lo[0])}, {}),
                   w_.constant(base + "/hi", kFloat, std::vector<double>{static_cast<double>(st.hi[0])}, {})});
      } else {
        if (clamp_lo) {
          t = w_.op("Max", base + "/lo", {t, channel_constant(base + "/lo", kFloat, st.lo, rank, spatial)});
        }
        if (clamp_hi) {
          t = w_.op("Min", base + "/hi", {t, channel_constant(base + "/hi", kFloat, st.hi, rank, spatial)});
        }
      }
      if (writes_output) {
        quantize(base, t, onnx_type(y.type), y.name);
      } else {
        xi = t;
        x_is_float = true;
      }
    }
    if (y.type == ElementType::f32) {
      const composer::IntegerDequantize& d = *plan->dequantize;
      std::string t = x_is_float ? xi : to_float(xi, n.name + "/dequantize");
      t = w_.op("Mul", n.name + "/scale", {t, channel_constant(n.name + "/scale", kFloat, d.scale, rank, spatial)});
      if (d.residual_scale != 0.0f) {
        std::string r = to_float(residual, n.name + "/residual_cast");
        r = w_.op("Mul", n.name + "/residual_scale",
                  {r, w_.constant(n.name + "/residual_scale", kFloat, std::vector<float>{d.residual_scale}, {})});
        t = w_.op("Add", n.name + "/residual_add", {t, r});
      }
      const bool clamps = std::any_of(d.lo.begin(), d.lo.end(), [](float v) { return std::isfinite(v); }) ||
                          std::any_of(d.hi.begin(), d.hi.end(), [](float v) { return std::isfinite(v); });
      if (clamps && plan->stages.empty()) refuse(n, "a clamp on a dequantized accumulator");
      w_.node("Add", n.name + "/shift", {t, channel_constant(n.name + "/shift", kFloat, d.shift, rank, spatial)},
              y.name);
    }
    ++report_.layers;
  }

  ::onnx::NodeProto* find_node(const std::string& output) {
    for (int i = proto_.node_size() - 1; i >= 0; --i) {
      if (proto_.node(i).output(0) == output) return proto_.mutable_node(i);
    }
    return nullptr;
  }

  void pool_attrs(::onnx::NodeProto& p, const graph::PoolAttrs& a) {
    Writer::ints(p, "kernel_shape", a.kernel);
    Writer::ints(p, "strides", a.strides);
    graph::Ints pads = a.pads_begin;
    pads.insert(pads.end(), a.pads_end.begin(), a.pads_end.end());
    Writer::ints(p, "pads", pads);
  }

  void avg_pool(const Node& n) {
    const auto& a = n.attr<graph::PoolAttrs>();
    const graph::Value& x = g_.value(n.inputs[0]);
    const graph::Value& y = g_.value(n.outputs[0]);
    if (x.type == ElementType::f32) refuse(n, "an f32 pool");
    if (a.out_shift == std::nearbyint(a.out_shift) && std::abs(a.out_shift) <= 255.0f) {
      // round(out_scale * mean + shift) for an integer shift: Q/DQ around the
      // pool, the form int8 runtimes run as one int8 pool.
      const int zt = onnx_type(x.type);
      const std::string dq = w_.op(
          "DequantizeLinear", n.name + "/dequantize",
          {x.name, w_.constant(n.name + "/in_scale", kFloat, std::vector<float>{a.out_scale}, {}),
           w_.constant(n.name + "/in_zero_point", zt, std::vector<std::int32_t>{0}, {})});
      const std::string pooled = w_.fresh(n.name + "/mean");
      auto& p = w_.node("AveragePool", n.name, {dq}, pooled);
      pool_attrs(p, a);
      Writer::int_attr(p, "count_include_pad", a.exclude_pad ? 0 : 1);
      w_.node("QuantizeLinear", n.name + "/quantize",
              {pooled, w_.constant(n.name + "/out_scale", kFloat, std::vector<float>{1.0f}, {}),
               w_.constant(n.name + "/out_zero_point", onnx_type(y.type),
                           std::vector<std::int32_t>{static_cast<std::int32_t>(a.out_shift)}, {})},
              y.name);
      return;
    }
    std::string t = w_.op("Cast", n.name + "/cast", {x.name});
    Writer::int_attr(*find_node(t), "to", kFloat);
    const std::string pooled = w_.fresh(n.name + "/mean");
    auto& p = w_.node("AveragePool", n.name, {t}, pooled);
    pool_attrs(p, a);
    Writer::int_attr(p, "count_include_pad", a.exclude_pad ? 0 : 1);
    t = pooled;
    if (a.out_scale != 1.0f) {
      t = w_.op("Mul", n.name + "/out_scale",
                {t, w_.constant(n.name + "/out_scale", kFloat, std::vector<float>{a.out_scale}, {})});
    }
    if (a.out_shift != 0.0f) {
      t = w_.op("Add", n.name + "/out_shift",
                {t, w_.constant(n.name + "/out_shift", kFloat, std::vector<float>{a.out_shift}, {})});
    }
    quantize(n.name, t, onnx_type(y.type), y.name);
  }

  void max_pool(const Node& n) {
    const auto& a = n.attr<graph::PoolAttrs>();
    auto& p = w_.node("MaxPool", n.name, {name(n.inputs[0])}, name(n.outputs[0]));
    pool_attrs(p, a);
    Writer::ints(p, "dilations", a.dilations);
  }

  const graph::Graph& g_;
  const std::function<const composer::IntegerPlan*(const Node&)>& plan_of_;
  Writer w_;
  ::onnx::GraphProto& proto_;
  ExportReport report_;
};

}  // namespace

ExportReport export_prequantized(
    const graph::Graph& fused,
    const std::function<const composer::IntegerPlan*(const graph::Node&)>& plan_of,
    const std::string& path) {
  ::onnx::ModelProto model;
  model.set_ir_version(7);
  model.set_producer_name("qfuse export-prequantized");
  auto* opset = model.add_opset_import();
  opset->set_domain("");
  opset->set_version(kOpset);
  ::onnx::GraphProto* g = model.mutable_graph();
  g->set_name("prequantized");
  const ExportReport report = Exporter(fused, plan_of, *g).run();
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

}  // namespace qfuse::onnx
