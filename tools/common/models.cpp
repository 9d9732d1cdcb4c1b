#include "tools/common/models.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <stdexcept>

#include "graph/builder.hpp"
#include "plugin/api_internal.hpp"

namespace qfuse::tools {
namespace {

using graph::Builder;
using graph::ConvAttrs;
using graph::OpKind;
using graph::ValueId;

// Activation ranges by tensor name; empty while calibrating.
using Ranges = std::map<std::string, float>;

class DefaultModel {
 public:
  DefaultModel(graph::Graph& g, const Ranges& ranges, bool calibrate)
      : b_(g), ranges_(ranges), calibrate_(calibrate), rng_(20261121) {}

  void build() {
    ValueId x = b_.input("image", {1, 3, 64, 64});
    x = quantize_activation(x, "image.q");
    ValueId c1 = conv_block(x, "conv1", 3, 32, 3, 2, 1, 1, true);
    ValueId c2 = conv_block(c1, "conv2", 32, 32, 3, 1, 1, 1, false);
    ValueId sum = b_.op(OpKind::Add, {c2, c1}, graph::NoAttrs{}, "res1.add");
    sum = quantize_activation(b_.op(OpKind::Relu, {sum}, graph::NoAttrs{}, "res1.relu"), "res1.q");
    ValueId c3 = conv_block(sum, "conv3.dw", 32, 32, 3, 1, 1, 32, true);
    ValueId c4 = conv_block(c3, "conv4", 32, 64, 1, 1, 0, 1, true);
    graph::PoolAttrs gap{.kernel = {32, 32}, .strides = {1, 1}, .pads_begin = {0, 0},
                         .pads_end = {0, 0}, .dilations = {1, 1}, .exclude_pad = true};
    ValueId pooled = quantize_activation(b_.op(OpKind::AvgPool, {c4}, gap, "pool"), "pool.q");
    ValueId flat = b_.op(OpKind::Flatten, {pooled}, graph::FlattenAttrs{1}, "flatten");
    ValueId w = quantized_weights("fc", 10, 64);
    ValueId logits = b_.fully_connected(flat, w, bias("fc", 10), "logits");
    b_.output(logits);
  }

 private:
  // conv -> (relu) -> FakeQuantize u8 (or a symmetric 256-level FQ when the
  // result feeds a residual add, so that negative values survive).
  ValueId conv_block(ValueId x, const std::string& name, std::int64_t ic, std::int64_t oc,
                     std::int64_t k, std::int64_t stride, std::int64_t pad, std::int64_t groups,
                     bool relu) {
    ValueId w = quantized_weights(name, oc, ic / groups * k * k, {oc, ic / groups, k, k});
    ConvAttrs attrs{.strides = {stride, stride}, .dilations = {1, 1}, .pads_begin = {pad, pad},
                    .pads_end = {pad, pad}, .groups = groups};
    ValueId y = b_.convolution(x, w, bias(name, oc), attrs, name);
    if (relu) {
      y = b_.op(OpKind::Relu, {y}, graph::NoAttrs{}, name + ".relu");
      return quantize_activation(y, name + ".q");
    }
    return quantize_activation(y, name + ".q", /*is_signed=*/true);
  }

  ValueId quantize_activation(ValueId x, const std::string& name, bool is_signed = false) {
    if (calibrate_) {
      probes_.emplace_back(name, x);
      return x;
    }
    const float hi = ranges_.at(name);
    if (is_signed) {
      // Symmetric 256 levels with zero point 128: il = -ih * 128 / 127.
      const float lo = -hi * 128.0f / 127.0f;
      return b_.fake_quantize(x, lo, hi, lo, hi, 256, name);
    }
    return b_.fake_quantize(x, 0.0f, hi, 0.0f, hi, 256, name);
  }

  // Constant weights behind a per-output-channel symmetric 255-level FQ.
  ValueId quantized_weights(const std::string& name, std::int64_t oc, std::int64_t fan_in,
                            Shape shape = {}) {
    if (shape.empty()) shape = {oc, fan_in};
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    const float bound = std::sqrt(6.0f / static_cast<float>(fan_in));
    std::vector<float> w(static_cast<std::size_t>(element_count(shape)));
    for (float& v : w) v = dist(rng_) * bound;
    ValueId wv = b_.constant(name + ".weight", shape, w);
    std::vector<float> lo(static_cast<std::size_t>(oc)), hi(lo.size());
    const auto per_oc = static_cast<std::size_t>(element_count(shape) / oc);
    for (std::size_t c = 0; c < lo.size(); ++c) {
      float m = 0.0f;
      for (std::size_t i = 0; i < per_oc; ++i) m = std::max(m, std::abs(w[c * per_oc + i]));
      hi[c] = m;
      lo[c] = -m;
    }
    Shape range_shape(shape.size(), 1);
    range_shape[0] = oc;
    ValueId l = b_.constant(name + ".wlo", range_shape, lo);
    ValueId h = b_.constant(name + ".whi", range_shape, hi);
    return b_.fake_quantize(wv, l, h, l, h, 255, name + ".wq");
  }

  ValueId bias(const std::string& name, std::int64_t oc) {
    std::uniform_real_distribution<float> dist(-0.1f, 0.1f);
    std::vector<float> v(static_cast<std::size_t>(oc));
    for (float& x : v) x = dist(rng_);
    return b_.constant(name + ".bias", {oc}, v);
  }

 public:
  std::vector<std::pair<std::string, ValueId>> probes_;

 private:
  Builder b_;
  const Ranges& ranges_;
  bool calibrate_;
  std::mt19937 rng_;
};

graph::Graph make_default_model() {
  // Pass 1: the f32 network with every activation exposed, run once on a
  // calibration image to find each activation's range.
  Ranges ranges;
  graph::Graph calib;
  DefaultModel calib_model(calib, ranges, true);
  calib_model.build();
  for (const auto& [name, probe] : calib_model.probes_) calib.mark_output(probe);
  CompiledModel compiled = compile(calib, CompileOptions{.fuse = false});
  InferRequest request = compiled.create_infer_request();
  const std::vector<Tensor> inputs = random_inputs(calib, 7);
  request.set_input("image", inputs[0]);
  request.infer();
  for (const auto& [name, probe] : calib_model.probes_) {
    float m = 0.0f;
    for (float v : request.output(calib.value(probe).name).data<float>()) {
      m = std::max(m, std::abs(v));
    }
    ranges[name] = m > 0.0f ? m : 1.0f;
  }
  // Pass 2: the quantized network.
  graph::Graph g;
  DefaultModel model(g, ranges, false);
  model.build();
  return g;
}

}  // namespace

std::vector<std::string> bundled_model_names() { return {"synthetic"}; }

graph::Graph make_bundled_model(const std::string& name) {
  if (name == "synthetic") return make_default_model();
  throw std::invalid_argument("unknown bundled model '" + name + "' (expected default)");
}

std::vector<Tensor> random_inputs(const graph::Graph& graph, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<Tensor> inputs;
  for (ValueId id : graph.inputs()) {
    const graph::Value& v = graph.value(id);
    Tensor t(v.type, v.shape);
    switch (v.type) {
      case ElementType::f32: {
        std::uniform_real_distribution<float> d(0.0f, 1.0f);
        for (float& x : t.data<float>()) x = d(rng);
        break;
      }
      case ElementType::u8: {
        std::uniform_int_distribution<int> d(0, 255);
        for (auto& x : t.data<std::uint8_t>()) x = static_cast<std::uint8_t>(d(rng));
        break;
      }
      case ElementType::s8: {
        std::uniform_int_distribution<int> d(-128, 127);
        for (auto& x : t.data<std::int8_t>()) x = static_cast<std::int8_t>(d(rng));
        break;
      }
      case ElementType::s32: {
        std::uniform_int_distribution<std::int32_t> d(-1000, 1000);
        for (auto& x : t.data<std::int32_t>()) x = d(rng);
        break;
      }
      case ElementType::s64: {
        // Indices and masks (token ids, attention masks): 0 or 1 is valid as either.
        std::uniform_int_distribution<std::int64_t> d(0, 1);
        for (auto& x : t.data<std::int64_t>()) x = d(rng);
        break;
      }
    }
    inputs.push_back(std::move(t));
  }
  return inputs;
}

}  // namespace qfuse::tools
