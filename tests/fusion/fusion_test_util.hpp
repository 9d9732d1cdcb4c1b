#pragma once
// Helpers of the fusion tests: quantized single-layer models described by a
// plain struct, built with graph::Builder, run unfused (the f32 reference)
// and fused, and compared in the quantized domain of the output.
//
// A model is
//
//   x -> FQ_in -> [pre: 1x1 conv -> FQ] -> LAYER(FQ(w)) [+ b] -> tail -> FQ_out
//     -> [next: 1x1 conv / FC / MatMul -> FQ_final] -> graph output
//
// Activation ranges (other than FQ_in's) are calibrated like a real
// post-training flow: the same network without those FakeQuantize nodes runs
// unfused on the test input, and each range covers what was seen there.
// With `power_of_two_scales` every scale is 2^k (weights, inputs, outputs), so
// the f32 reference computes every pre-FakeQuantize value exactly and values
// that sit on a rounding tie stay exactly on it in both paths.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iomanip>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "graph/builder.hpp"
#include "plugin/api_internal.hpp"

namespace qfuse::test::fusion {

using graph::Builder;
using graph::Ints;
using graph::OpKind;
using graph::ValueId;

// An f32 3x3 convolution (padding 1) whose N(0, 0.3) weights go through a
// symmetric s8 FakeQuantize: what a QAT export writes for a conv layer.
inline ValueId quantized_conv(Builder& b, ValueId x, std::int64_t oc, unsigned seed,
                              const std::string& name) {
  const std::int64_t ic = b.graph().value(x).shape[1];
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 0.3f);
  std::vector<float> w(static_cast<std::size_t>(oc * ic * 9));
  for (float& v : w) v = d(rng);
  const float s = 1.0f / 127.0f;
  const ValueId wq = b.fake_quantize(b.constant(name + ".w", {oc, ic, 3, 3}, w), -128 * s,
                                     127 * s, -128 * s, 127 * s, 256, name + ".wq");
  graph::ConvAttrs a;
  a.pads_begin = {1, 1};
  a.pads_end = {1, 1};
  return b.convolution(x, wq, std::nullopt, a, name);
}

enum class LayerKind { conv, deconv, fc, matmul };

// How an activation FakeQuantize maps its range (L = 256):
//   u8:   il = 0,            ih = 255 * S
//   s8:   il = -128 * S,     ih = 127 * S     (= -ih * 128 / 127: stored as s8)
//   asym: il = -Z * S,       ih = (255 - Z) * S, 0 < Z < 255 (u8 with a zero point)
enum class Quant { u8, s8, asym };

enum class Tail {
  none,                    // y -> FQ_out
  relu,                    // y -> Relu -> FQ_out
  fq_relu_fq,              // y -> FQ_mid -> Relu -> FQ_out
  fq_leaky_relu_fq,        // y -> FQ_mid -> LeakyRelu(0.1) -> FQ_out
  fq_leaky_relu_quarter_fq,  // y -> FQ_mid -> LeakyRelu(0.25) -> FQ_out (alpha exact in f32)
  clamp,                   // y -> Clamp (inside FQ_out's range) -> FQ_out
  fq_sigmoid_fq,           // y -> FQ_mid -> Sigmoid -> FQ_out
  fq_tanh_fq,              // y -> FQ_mid -> Tanh -> FQ_out
  batch_norm,              // y -> BatchNormalization (gamma > 0) -> FQ_out
  batch_norm_negative,     // y -> BatchNormalization (some gamma < 0) -> FQ_out
  channel_mul_add,         // y -> Multiply(c[oc] > 0) -> Add(d[oc]) -> FQ_out
  channel_mul_add_signed,  // y -> Multiply(c[oc], mixed signs) -> Add(d[oc]) -> FQ_out
  residual,                // y -> Add(layer input, dequantized) -> FQ_out
};

struct LayerCase {
  std::string name;
  LayerKind kind = LayerKind::conv;
  // conv / deconv: N, C, spatial...;  fc: rows, K;  matmul: batch..., M, K
  Shape input;
  std::int64_t out_channels = 8;
  Ints kernel;  // spatial kernel (conv / deconv)
  Ints strides, dilations, pads_begin, pads_end, output_padding;  // empty: 1,1,0,0,0
  std::int64_t groups = 1;
  bool transpose_b = false;  // matmul: weights stored [N, K]
  bool per_channel_weights = true;
  int weight_levels = 255;  // 255: il = -ih;  256: il = -ih * 128 / 127
  Quant input_quant = Quant::u8;
  bool bias = true;
  Tail tail = Tail::none;
  Quant output_quant = Quant::s8;
  bool pre_layer = false;   // the layer's input comes from another fused 1x1 conv
  bool next_layer = false;  // a fused layer reads the result (int8 destination)
  bool power_of_two_scales = false;
  unsigned seed = 1;
};

inline std::ostream& operator<<(std::ostream& os, const LayerCase& c) { return os << c.name; }

// Number of int8 layers the fused model should hold.
inline int expected_quantized_layers(const LayerCase& c) {
  return 1 + (c.pre_layer ? 1 : 0) + (c.next_layer ? 1 : 0);
}

inline std::size_t at(std::int64_t i) { return static_cast<std::size_t>(i); }

// The range of one activation FakeQuantize.
struct FqRange {
  float il = 0.0f, ih = 0.0f;
  double scale = 1.0;  // So = Si
};

inline FqRange make_range(Quant kind, double scale, int zero_point = 85) {
  const auto s = static_cast<float>(scale);
  switch (kind) {
    case Quant::u8: return {0.0f, 255.0f * s, scale};
    case Quant::s8: return {-128.0f * s, 127.0f * s, scale};
    case Quant::asym:
      return {-static_cast<float>(zero_point) * s, static_cast<float>(255 - zero_point) * s, scale};
  }
  return {};
}

// The range covering [lo, hi] (values seen during calibration).
inline FqRange calibrated_range(Quant kind, float lo, float hi, bool power_of_two) {
  double scale = 0.0;
  int zero_point = 0;
  const double m = std::max({std::fabs(lo), std::fabs(hi), 1e-3f});
  switch (kind) {
    case Quant::u8: scale = std::max(static_cast<double>(hi), 1e-3) / 255.0; break;
    case Quant::s8: scale = m / 127.0; break;
    case Quant::asym: {
      const double l = std::min(static_cast<double>(lo), 0.0);
      const double h = std::max(static_cast<double>(hi), 1e-3);
      scale = (h - l) / 255.0;
      if (power_of_two) scale = std::exp2(std::ceil(std::log2(scale)));
      zero_point = static_cast<int>(std::clamp(std::round(-l / scale), 1.0, 254.0));
      return make_range(kind, scale, zero_point);
    }
  }
  if (power_of_two) scale = std::exp2(std::ceil(std::log2(scale)));
  return make_range(kind, scale);
}

// A model of one LayerCase: the graph, its output and the output quantum.
struct Model {
  graph::Graph graph;
  std::string input;
  std::string output;
  std::string pre_fq_output;  // when built with `expose_pre_fq`: the value the last FQ reads
  FqRange out_range;
  Tensor x;  // the test input
};

class ModelBuilder {
 public:
  // Calibrate, then build the final graph. With `expose_pre_fq`, the value
  // the final FakeQuantize reads is a second graph output (for the tie count;
  // such a graph is run unfused only, the extra output blocks fusion).
  static Model build(const LayerCase& c, bool expose_pre_fq = false) {
    Model model;
    model.x = make_input(c);
    std::map<std::string, std::pair<float, float>> seen;
    {
      graph::Graph calib;
      ModelBuilder mb(calib, c, nullptr);
      mb.build_network();
      CompiledModel cm = compile(calib, {.fuse = false});
      InferRequest r = cm.create_infer_request();
      r.set_input("x", model.x);
      r.infer();
      for (const auto& [name, value] : mb.probes_) {
        const Tensor& t = r.output(calib.value(value).name);
        float lo = 0.0f, hi = 0.0f;
        for (float v : t.data<float>()) {
          lo = std::min(lo, v);
          hi = std::max(hi, v);
        }
        seen[name] = {lo, hi};
      }
    }
    std::map<std::string, FqRange> ranges;
    for (const auto& [name, lh] : seen) {
      ranges[name] = calibrated_range(kind_of(c, name), lh.first, lh.second, c.power_of_two_scales);
    }
    ModelBuilder mb(model.graph, c, &ranges);
    mb.expose_pre_fq_ = expose_pre_fq;
    const ValueId y = mb.build_network();
    model.input = "x";
    model.output = model.graph.value(y).name;
    model.out_range = mb.last_range_;
    if (expose_pre_fq) model.pre_fq_output = model.graph.value(mb.last_pre_fq_).name;
    return model;
  }

  static Tensor make_input(const LayerCase& c) {
    std::mt19937 rng(c.seed * 7919u + 17u);
    const FqRange r = input_range(c);
    std::vector<float> v(at(element_count(c.input)));
    if (c.power_of_two_scales) {
      // Small quantized values around the zero level, one in four exactly on
      // a tie of FQ_in, one in sixteen beyond the range: accumulators stay
      // small, so the output quantum is a few accumulator units and many
      // pre-FQ values sit exactly on its rounding ties.
      const double zero = -r.il / r.scale;
      std::uniform_int_distribution<int> offset(-6, 6);
      std::uniform_int_distribution<int> pick(0, 15);
      for (float& e : v) {
        const int p = pick(rng);
        double level = std::clamp(zero + offset(rng), 0.0, 254.0);
        if (p < 4) level += 0.5;
        if (p == 15) level = offset(rng) < 0 ? -2.0 : 257.0;
        e = static_cast<float>(r.il + level * r.scale);
      }
    } else {
      std::uniform_real_distribution<float> wide(r.il - 3.0f * static_cast<float>(r.scale),
                                                 r.ih + 3.0f * static_cast<float>(r.scale));
      std::uniform_int_distribution<int> level(0, 254);
      std::uniform_int_distribution<int> pick(0, 7);
      for (float& e : v) {
        // One element in eight on a rounding tie of FQ_in (up to the f32
        // rounding of il + (k + 0.5) * S).
        e = pick(rng) == 0 ? static_cast<float>(r.il + (level(rng) + 0.5) * r.scale) : wide(rng);
      }
    }
    return Tensor::from_vector<float>(c.input, std::move(v));
  }

  static FqRange input_range(const LayerCase& c) {
    const double s = c.power_of_two_scales ? 1.0 / 64.0 : 0.0137;
    return make_range(c.input_quant, s, 77);
  }

 private:
  ModelBuilder(graph::Graph& g, const LayerCase& c, const std::map<std::string, FqRange>* ranges)
      : b_(g), c_(c), ranges_(ranges), rng_(c.seed) {}

  bool calibrating() const { return ranges_ == nullptr; }

  static Quant kind_of(const LayerCase& c, const std::string& name) {
    if (name == "pre.q") return c.input_quant;
    if (name == "mid.q") return Quant::s8;
    if (name == "out.q") return c.output_quant;
    return Quant::s8;  // final.q
  }

  // FakeQuantize `x` with the calibrated range `name`; while calibrating,
  // `probe` (default x) becomes a graph output and x passes unchanged.
  ValueId quantize(ValueId x, const std::string& name, std::optional<ValueId> probe = {}) {
    if (calibrating()) {
      probes_.emplace_back(name, probe.value_or(x));
      b_.graph().mark_output(probe.value_or(x));
      return x;
    }
    const FqRange r = ranges_->at(name);
    last_range_ = r;
    last_pre_fq_ = x;
    return b_.fake_quantize(x, r.il, r.ih, r.il, r.ih, 256, name);
  }

  std::vector<float> uniform(std::size_t n, float lo, float hi) {
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(n);
    for (float& e : v) e = d(rng_);
    return v;
  }

  // Constant weights of `shape` with output channels on `axis`, behind a
  // per-channel (or per-tensor) symmetric FakeQuantize.
  ValueId quantized_weights(const std::string& name, const Shape& shape, std::size_t axis,
                            bool per_channel, int levels) {
    const std::int64_t oc = shape[axis];
    std::int64_t inner = 1;
    for (std::size_t i = axis + 1; i < shape.size(); ++i) inner *= shape[i];
    const std::int64_t fan_in = element_count(shape) / oc;
    const std::size_t n = at(element_count(shape));
    std::vector<float> w(n);
    std::vector<float> hi(at(oc));
    if (c_.power_of_two_scales) {
      // Sw[oc] = 2^-(7 + oc % 3) (one value when per tensor); the weights
      // use the low levels -3..3 of the range (small accumulators, see make_input).
      for (std::int64_t o = 0; o < oc; ++o) {
        hi[at(o)] = 127.0f * std::exp2(-7.0f - static_cast<float>(per_channel ? o % 3 : 0));
      }
      std::uniform_real_distribution<float> d(-3.45f, 3.45f);
      for (std::size_t i = 0; i < n; ++i) {
        const auto o = at((static_cast<std::int64_t>(i) / inner) % oc);
        w[i] = d(rng_) * hi[o] / 127.0f;
      }
    } else {
      const float bound = std::sqrt(6.0f / static_cast<float>(fan_in));
      std::uniform_real_distribution<float> d(-1.0f, 1.0f);
      for (std::size_t i = 0; i < n; ++i) {
        // Channels of different magnitude, so per-channel scales matter.
        const auto o = (static_cast<std::int64_t>(i) / inner) % oc;
        w[i] = d(rng_) * bound * (0.5f + 0.25f * static_cast<float>(o % 4));
      }
      for (std::size_t i = 0; i < n; ++i) {
        const auto o = at((static_cast<std::int64_t>(i) / inner) % oc);
        hi[o] = std::max(hi[o], std::fabs(w[i]));
      }
    }
    if (!per_channel) {
      const float m = *std::max_element(hi.begin(), hi.end());
      hi.assign(1, m);
    }
    std::vector<float> lo(hi.size());
    for (std::size_t i = 0; i < hi.size(); ++i) {
      lo[i] = levels == 256 ? -hi[i] * 128.0f / 127.0f : -hi[i];
      if (levels == 256 && c_.power_of_two_scales) {
        // Sw = 2 * hi / 254 is kept; the 256-level range is [-128 Sw, 127 Sw].
        const float sw = hi[i] / 127.0f;
        lo[i] = -128.0f * sw;
      }
    }
    Shape range_shape(shape.size(), 1);
    if (per_channel) range_shape[axis] = oc;
    const ValueId wv = b_.constant(name + ".weight", shape, w);
    const ValueId l = b_.constant(name + ".wlo", range_shape, lo);
    const ValueId h = b_.constant(name + ".whi", range_shape, hi);
    return b_.fake_quantize(wv, l, h, l, h, levels, name + ".wq");
  }

  // Per-channel constant broadcast over the layer output (rank, channel axis).
  ValueId channel_constant(const std::string& name, const std::vector<float>& v, std::size_t rank,
                           std::size_t axis) {
    Shape s(rank, 1);
    s[axis] = static_cast<std::int64_t>(v.size());
    if (axis + 1 == rank) s = {static_cast<std::int64_t>(v.size())};
    return b_.constant(name, s, v);
  }

  std::optional<ValueId> make_bias(const std::string& name, std::int64_t oc, float acc_unit) {
    if (!c_.bias) return std::nullopt;
    std::vector<float> v = uniform(at(oc), -0.3f, 0.3f);
    if (c_.power_of_two_scales) {
      // Whole multiples of the coarsest accumulator unit: exact everywhere.
      std::uniform_int_distribution<int> k(-40, 40);
      for (float& e : v) e = static_cast<float>(k(rng_)) * acc_unit;
    }
    return b_.constant(name, {oc}, v);
  }

  ValueId spatial_1x1(ValueId x, const std::string& name, std::int64_t ic, std::int64_t oc,
                      std::size_t spatial) {
    Shape ws{oc, ic};
    for (std::size_t i = 0; i < spatial; ++i) ws.push_back(1);
    const ValueId w = quantized_weights(name, ws, 0, true, 255);
    graph::ConvAttrs a{.strides = Ints(spatial, 1), .dilations = Ints(spatial, 1),
                       .pads_begin = Ints(spatial, 0), .pads_end = Ints(spatial, 0), .groups = 1};
    return b_.convolution(x, w, std::nullopt, a, name);
  }

  ValueId build_network() {
    ValueId x = b_.input("x", c_.input);
    const FqRange in = input_range(c_);
    ValueId xq = b_.fake_quantize(x, in.il, in.ih, in.il, in.ih, 256, "x.q");
    const bool spatial = c_.kind == LayerKind::conv || c_.kind == LayerKind::deconv;
    const std::size_t rank = c_.input.size();
    const std::size_t nsp = spatial ? rank - 2 : 0;
    if (c_.pre_layer) {
      // Only for spatial layers: a 1x1 conv keeping the channel count.
      xq = quantize(spatial_1x1(xq, "pre", c_.input[1], c_.input[1], nsp), "pre.q");
    }
    const std::int64_t oc = c_.out_channels;
    const float acc_unit = static_cast<float>(in.scale) * std::exp2(-7.0f);
    ValueId y;
    std::size_t channel_axis = 1;
    switch (c_.kind) {
      case LayerKind::conv: {
        const std::int64_t ic = c_.input[1];
        Shape ws{oc, ic / c_.groups};
        ws.insert(ws.end(), c_.kernel.begin(), c_.kernel.end());
        const ValueId w = quantized_weights("layer", ws, 0, c_.per_channel_weights, c_.weight_levels);
        graph::ConvAttrs a{.strides = or_default(c_.strides, nsp, 1),
                           .dilations = or_default(c_.dilations, nsp, 1),
                           .pads_begin = or_default(c_.pads_begin, nsp, 0),
                           .pads_end = or_default(c_.pads_end, nsp, 0),
                           .groups = c_.groups};
        y = b_.convolution(xq, w, make_bias("layer.bias", oc, acc_unit), a, "layer");
        break;
      }
      case LayerKind::deconv: {
        const std::int64_t ic = c_.input[1];
        Shape ws{ic, oc / c_.groups};
        ws.insert(ws.end(), c_.kernel.begin(), c_.kernel.end());
        const ValueId w = quantized_weights("layer", ws, 1, c_.per_channel_weights, c_.weight_levels);
        graph::DeconvAttrs a{.strides = or_default(c_.strides, nsp, 1),
                             .dilations = or_default(c_.dilations, nsp, 1),
                             .pads_begin = or_default(c_.pads_begin, nsp, 0),
                             .pads_end = or_default(c_.pads_end, nsp, 0),
                             .output_padding = or_default(c_.output_padding, nsp, 0),
                             .groups = c_.groups};
        y = b_.deconvolution(xq, w, make_bias("layer.bias", oc, acc_unit), a, "layer");
        break;
      }
      case LayerKind::fc: {
        const ValueId w = quantized_weights("layer", {oc, c_.input.back()}, 0,
                                            c_.per_channel_weights, c_.weight_levels);
        y = b_.fully_connected(xq, w, make_bias("layer.bias", oc, acc_unit), "layer");
        channel_axis = rank - 1;
        break;
      }
      case LayerKind::matmul: {
        const std::int64_t k = c_.input.back();
        const Shape ws = c_.transpose_b ? Shape{oc, k} : Shape{k, oc};
        const ValueId w = quantized_weights("layer", ws, c_.transpose_b ? 0 : 1,
                                            c_.per_channel_weights, c_.weight_levels);
        y = b_.matmul(xq, w, false, c_.transpose_b, "layer");
        if (auto bias = make_bias("layer.bias", oc, acc_unit)) y = b_.add(y, *bias);
        channel_axis = rank - 1;
        break;
      }
    }
    y = tail(y, xq, oc, rank, channel_axis);
    if (c_.next_layer) {
      switch (c_.kind) {
        case LayerKind::conv:
        case LayerKind::deconv: y = spatial_1x1(y, "next", oc, 8, nsp); break;
        case LayerKind::fc:
          y = b_.fully_connected(y, quantized_weights("next", {8, oc}, 0, true, 255), std::nullopt,
                                 "next");
          break;
        case LayerKind::matmul:
          y = b_.matmul(y, quantized_weights("next", {oc, 8}, 1, true, 255), false, false, "next");
          break;
      }
      y = quantize(y, "final.q");
    }
    if (expose_pre_fq_ && !calibrating()) b_.graph().mark_output(last_pre_fq_);
    if (!calibrating()) b_.output(y);
    return y;
  }

  ValueId tail(ValueId y, ValueId layer_input, std::int64_t oc, std::size_t rank,
               std::size_t axis) {
    switch (c_.tail) {
      case Tail::none: return quantize(y, "out.q");
      case Tail::relu: return quantize(b_.relu(y), "out.q");
      case Tail::fq_relu_fq: return quantize(b_.relu(quantize(y, "mid.q")), "out.q");
      case Tail::fq_leaky_relu_fq:
        return quantize(b_.op(OpKind::LeakyRelu, {quantize(y, "mid.q")}, graph::AlphaAttrs{0.1f}),
                        "out.q");
      case Tail::fq_leaky_relu_quarter_fq:
        return quantize(b_.op(OpKind::LeakyRelu, {quantize(y, "mid.q")}, graph::AlphaAttrs{0.25f}),
                        "out.q");
      case Tail::fq_sigmoid_fq:
        return quantize(b_.unary(OpKind::Sigmoid, quantize(y, "mid.q")), "out.q");
      case Tail::fq_tanh_fq:
        return quantize(b_.unary(OpKind::Tanh, quantize(y, "mid.q")), "out.q");
      case Tail::clamp: {
        // The clamp cuts inside the FQ range, so it is a real clip post-op.
        float lo = -1.0f, hi = 1.0f;
        if (!calibrating()) {
          const FqRange r = ranges_->at("out.q");
          lo = 0.6f * r.il;
          hi = 0.6f * r.ih;
        }
        return quantize(b_.clamp(y, lo, hi), "out.q", y);
      }
      case Tail::batch_norm:
      case Tail::batch_norm_negative: {
        const auto n = at(oc);
        std::vector<float> gamma = uniform(n, 0.5f, 1.5f);
        if (c_.tail == Tail::batch_norm_negative) {
          for (std::size_t i = 0; i < n; i += 3) gamma[i] = -gamma[i];
        }
        const std::vector<float> beta = uniform(n, -0.2f, 0.2f);
        const std::vector<float> mean = uniform(n, -0.2f, 0.2f);
        const std::vector<float> var = uniform(n, 0.5f, 2.0f);
        const ValueId bn = b_.op(OpKind::BatchNormalization,
                                 {y, b_.constant("bn.gamma", {oc}, gamma),
                                  b_.constant("bn.beta", {oc}, beta),
                                  b_.constant("bn.mean", {oc}, mean),
                                  b_.constant("bn.var", {oc}, var)},
                                 graph::BatchNormAttrs{1e-5f}, "bn");
        return quantize(bn, "out.q");
      }
      case Tail::channel_mul_add:
      case Tail::channel_mul_add_signed: {
        std::vector<float> m = uniform(at(oc), 0.5f, 2.0f);
        if (c_.tail == Tail::channel_mul_add_signed) {
          for (std::size_t i = 1; i < m.size(); i += 2) m[i] = -m[i];
        }
        const std::vector<float> a = uniform(at(oc), -0.5f, 0.5f);
        const ValueId mul = b_.multiply(y, channel_constant("mul.c", m, rank, axis));
        return quantize(b_.add(mul, channel_constant("add.c", a, rank, axis)), "out.q");
      }
      case Tail::residual: return quantize(b_.add(y, layer_input), "out.q");
    }
    return y;
  }

  static Ints or_default(const Ints& v, std::size_t n, std::int64_t value) {
    return v.empty() ? Ints(n, value) : v;
  }

  Builder b_;
  const LayerCase& c_;
  const std::map<std::string, FqRange>* ranges_;
  std::mt19937 rng_;
  bool expose_pre_fq_ = false;
  std::vector<std::pair<std::string, ValueId>> probes_;
  FqRange last_range_;
  ValueId last_pre_fq_;
};

inline Tensor run(const CompiledModel& model, const std::string& input, const Tensor& x,
                  const std::string& output) {
  InferRequest r = model.create_infer_request();
  r.set_input(input, x);
  r.infer();
  return r.output(output);
}

// Fused versus unfused, in LSB of the output quantum.
struct Comparison {
  std::int64_t elements = 0;
  std::int64_t equal = 0;
  std::int64_t one_lsb = 0;
  std::int64_t max_diff = 0;
  std::int64_t off_grid = 0;  // outputs not on the quantization grid (either path)
  std::string first_diffs;    // positions of the first differences
  // With the reference's pre-FQ values: elements whose rounding position lies
  // within f32 rounding (1e-4 LSB) of a .5 tie, and how many of those agree.
  std::int64_t near_ties = 0;
  std::int64_t equal_at_near_ties = 0;

  double equal_fraction() const {
    return elements == 0 ? 0.0 : static_cast<double>(equal) / static_cast<double>(elements);
  }
  // Equal fraction over the elements that are not near a tie: two correct
  // f32 evaluation orders may break a near-tie either way, nothing else.
  double equal_fraction_off_ties() const {
    const std::int64_t n = elements - near_ties;
    return n == 0 ? 1.0 : static_cast<double>(equal - equal_at_near_ties) / static_cast<double>(n);
  }
};

// Rounding position of the reference value entering the output FQ is within
// 1e-4 LSB of a .5 tie.
inline bool near_tie(const Tensor& pre, std::int64_t i, const FqRange& r) {
  const double v = (static_cast<double>(pre.as_float(i)) - r.il) / r.scale;
  return std::fabs(v - std::floor(v) - 0.5) < 1e-4;
}

inline Comparison compare_quantized(const Tensor& fused, const Tensor& unfused, const FqRange& r,
                                    const Tensor* pre = nullptr) {
  Comparison c;
  c.elements = unfused.size();
  std::ostringstream os;
  int shown = 0;
  for (std::int64_t i = 0; i < unfused.size(); ++i) {
    const double a = (static_cast<double>(fused.as_float(i)) - r.il) / r.scale;
    const double b = (static_cast<double>(unfused.as_float(i)) - r.il) / r.scale;
    const double qa = std::nearbyint(a), qb = std::nearbyint(b);
    if (std::fabs(a - qa) > 1e-2 || std::fabs(b - qb) > 1e-2) ++c.off_grid;
    const auto d = static_cast<std::int64_t>(std::fabs(qa - qb));
    if (pre != nullptr && near_tie(*pre, i, r)) {
      ++c.near_ties;
      c.equal_at_near_ties += d == 0 ? 1 : 0;
    }
    c.equal += d == 0 ? 1 : 0;
    c.one_lsb += d == 1 ? 1 : 0;
    c.max_diff = std::max(c.max_diff, d);
    if (d != 0 && shown++ < 8) os << " [" << i << "] fused q " << qa << " unfused q " << qb << ";";
  }
  c.first_diffs = os.str();
  return c;
}

// Elements of `pre` (the value the output FQ reads) exactly on a rounding tie.
inline std::int64_t count_ties(const Tensor& pre, const FqRange& r) {
  std::int64_t n = 0;
  for (std::int64_t i = 0; i < pre.size(); ++i) {
    const double v = (static_cast<double>(pre.as_float(i)) - r.il) / r.scale;
    if (v > 0.0 && v < 255.0 && v - std::floor(v) == 0.5) ++n;
  }
  return n;
}

inline bool is_quantized_op(const std::string& op) { return op.rfind("Quantized", 0) == 0; }

inline std::vector<LayerInfo> quantized_layers(const CompiledModel& m) {
  std::vector<LayerInfo> out;
  for (const LayerInfo& l : m.layers()) {
    if (is_quantized_op(l.op)) out.push_back(l);
  }
  return out;
}

inline std::string describe_layers(const CompiledModel& m) {
  std::ostringstream os;
  for (const LayerInfo& l : m.layers()) {
    os << "\n  " << l.op << " '" << l.node << "' [" << l.implementation << "] " << l.post_ops;
  }
  os << "\n fusion log:";
  for (const std::string& line : m.fusion_log()) os << "\n  " << line;
  return os.str();
}

// The layer ran as an int8 oneDNN implementation (not the reference one).
inline bool is_int8_implementation(const std::string& impl) {
  return !impl.empty() && impl != "reference" && impl.find("ref") == std::string::npos;
}

// A network of the int8 data-flow tests (input "x" [1, 4, 8, 8]): its
// graph, its output's name and that output's grid.
struct SmallNet {
  graph::Graph graph;
  std::string output;
  FqRange out;
};

// ONNX's QuantizeLinear -> DequantizeLinear as the importer writes it (u8).
inline ValueId linear_q(Builder& b, ValueId x, float scale, int zero_point,
                        const std::string& name) {
  const ValueId q = b.quantize(x, ElementType::u8, {scale}, {zero_point}, 1, 256, name + "/q");
  return b.dequantize(q, {scale}, {static_cast<float>(zero_point)}, 1, name);
}

// Closes `net` at `y` with an s8 FakeQuantize on [-8, 8]: the output grid.
inline void close_with_s8_output(Builder& b, ValueId y, SmallNet& net) {
  net.out = make_range(Quant::s8, 8.0 / 127.0);
  y = b.fake_quantize(y, net.out.il, net.out.ih, net.out.il, net.out.ih, 256, "out.q");
  b.output(y);
  net.output = net.graph.value(y).name;
}

// `fused` against the unfused graph on inputs uniform in [0, 5]: within 1 LSB
// of the output grid, and at least `min_equal` of the elements equal.
inline void expect_within_one_lsb(const SmallNet& net, const CompiledModel& fused, unsigned seed,
                                  double min_equal = 0.99, std::int64_t side = 8) {
  const CompiledModel unfused = compile(net.graph, {.fuse = false});
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(0.0f, 5.0f);
  std::vector<float> xv(static_cast<std::size_t>(4 * side * side));
  for (float& v : xv) v = d(rng);
  const Tensor x = Tensor::from_vector<float>({1, 4, side, side}, xv);
  const Comparison c = compare_quantized(run(fused, "x", x, net.output),
                                         run(unfused, "x", x, net.output), net.out);
  EXPECT_LE(c.max_diff, 1) << c.first_diffs;
  EXPECT_GE(c.equal_fraction(), min_equal) << c.first_diffs;
}

}  // namespace qfuse::test::fusion
