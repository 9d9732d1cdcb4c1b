// The layer suite: the layer shapes users run, each with a realistic chain
// after it, at batch 1 and batch 8. Every case runs four ways in one binary run:
//
//   raw      the oneDNN primitive with the attributes an engineer would write
//            by hand for the chain (output scales, zero points, eltwise / sum
//            post-ops), plus the reorders qfuse makes at the graph's boundary:
//            plain u8 in, channels last inside, plain out. The same work as
//            fused, so fused/raw is what qfuse's runtime costs (goal <= 1.03).
//   fused    the same layer as a qfuse graph (u8 input -> dequantize -> layer
//            with FakeQuantize'd weights -> chain -> FakeQuantize -> u8/s8),
//            compiled and run through the public API;
//   unfused  that graph compiled with fusion off (every node alone, in f32);
//   layer    the raw primitive alone, no boundary reorders: the kernel's
//            ceiling, for the GOPS of the layer itself.
//
// Before a case is timed, the raw and unfused outputs are checked against the
// fused one (at most one quantum apart); a mismatch fails the benchmark and
// the binary's exit code. At the end, one line per case and batch:
//   CASE fused/raw=R unfused/fused=U GOPS=G impl=IMPL raw_impl=... layer_GOPS=...
// with medians when --benchmark_repetitions > 1 (bench/run_layers.sh).
// --isa NAME caps oneDNN's instruction set (e.g. avx512_core_vnni).

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <oneapi/dnnl/dnnl.hpp>

#include "bench/bench_main.hpp"
#include "graph/builder.hpp"
#include "plugin/api_internal.hpp"

namespace {

using namespace qfuse;
using dnnl::memory;
using graph::OpKind;

enum class LayerKind { conv, deconv, fc };
enum class Act { none, relu, relu6, sigmoid, tanh, hswish, gelu };

// A layer and the chain after it. For fully-connected layers `h` is the rows
// per image (tokens) and `w` is 1.
struct Case {
  const char* name;
  LayerKind kind;
  std::int64_t ic, oc, h, w;
  std::int64_t k = 1, stride = 1, pad = 0, groups = 1;
  Act act = Act::relu;
  bool residual = false;             // + a dequantized u8 tensor, before the activation
  bool per_channel_weights = true;   // weight FakeQuantize ranges per output channel
  bool per_channel_output = false;   // output FakeQuantize ranges per channel
  std::int32_t src_zero_point = 0;   // asymmetric u8 source
  ElementType out_type = ElementType::u8;
  float out_lo = 0.0f, out_hi = 4.0f;  // output FakeQuantize range (per tensor)
};

const std::vector<Case>& cases() {
  static const std::vector<Case> kCases = {
      // ResNet-50
      {.name = "r50_3x3_64x64_56", .kind = LayerKind::conv, .ic = 64, .oc = 64, .h = 56, .w = 56,
       .k = 3, .pad = 1},
      {.name = "r50_1x1_256x64_56", .kind = LayerKind::conv, .ic = 256, .oc = 64, .h = 56, .w = 56},
      {.name = "r50_3x3s2_128x128_56", .kind = LayerKind::conv, .ic = 128, .oc = 128, .h = 56,
       .w = 56, .k = 3, .stride = 2, .pad = 1},
      {.name = "r50_1x1_512x2048_7_residual", .kind = LayerKind::conv, .ic = 512, .oc = 2048,
       .h = 7, .w = 7, .residual = true, .out_hi = 6.0f},
      // MobileNetV2 depthwise
      {.name = "mv2_dw3x3_144_56", .kind = LayerKind::conv, .ic = 144, .oc = 144, .h = 56,
       .w = 56, .k = 3, .pad = 1, .groups = 144, .act = Act::relu6, .out_hi = 6.0f},
      {.name = "mv2_dw3x3_960_7", .kind = LayerKind::conv, .ic = 960, .oc = 960, .h = 7, .w = 7,
       .k = 3, .pad = 1, .groups = 960, .act = Act::relu6, .out_hi = 6.0f},
      // PP-OCRv4 recognizer's padded 5x5 depthwise: u8 source with a zero point
      // (oneDNN 2.6 runs it on jit_int8; brdgmm_dw takes no zero point)
      {.name = "ppocr_rec_dw5x5_240_12x80_zp", .kind = LayerKind::conv, .ic = 240, .oc = 240,
       .h = 12, .w = 80, .k = 5, .pad = 2, .groups = 240, .act = Act::hswish,
       .src_zero_point = 18, .out_lo = -0.375f, .out_hi = 4.0f},
      // BERT-base: the attention projection (asymmetric u8 output) and the FFN
      {.name = "bert_fc_128x768x768", .kind = LayerKind::fc, .ic = 768, .oc = 768, .h = 128,
       .w = 1, .act = Act::none, .out_lo = -4.0f, .out_hi = 4.0f},
      {.name = "bert_fc_128x768x3072_gelu", .kind = LayerKind::fc, .ic = 768, .oc = 3072,
       .h = 128, .w = 1, .act = Act::gelu, .out_lo = -0.17f, .out_hi = 4.0f},
      // Decoder upsampling
      {.name = "deconv_s2k4_64x32_28", .kind = LayerKind::deconv, .ic = 64, .oc = 32, .h = 28,
       .w = 28, .k = 4, .stride = 2, .pad = 1},
      // Chains, on ResNet-50's 3x3 64 -> 64 layer
      {.name = "chain_fq_per_tensor_s8", .kind = LayerKind::conv, .ic = 64, .oc = 64, .h = 56,
       .w = 56, .k = 3, .pad = 1, .act = Act::none, .per_channel_weights = false,
       .out_type = ElementType::s8, .out_lo = -4.0f, .out_hi = 4.0f},
      {.name = "chain_fq_per_channel_out", .kind = LayerKind::conv, .ic = 64, .oc = 64, .h = 56,
       .w = 56, .k = 3, .pad = 1, .per_channel_output = true},
      {.name = "chain_sigmoid", .kind = LayerKind::conv, .ic = 64, .oc = 64, .h = 56, .w = 56,
       .k = 3, .pad = 1, .act = Act::sigmoid, .out_hi = 1.0f},
      {.name = "chain_tanh_s8", .kind = LayerKind::conv, .ic = 64, .oc = 64, .h = 56, .w = 56,
       .k = 3, .pad = 1, .act = Act::tanh, .out_type = ElementType::s8, .out_lo = -1.0f,
       .out_hi = 1.0f},
      {.name = "chain_hswish", .kind = LayerKind::conv, .ic = 64, .oc = 64, .h = 56, .w = 56,
       .k = 3, .pad = 1, .act = Act::hswish, .out_lo = -0.375f, .out_hi = 4.0f},
      {.name = "chain_u8_src_zero_point", .kind = LayerKind::conv, .ic = 64, .oc = 64, .h = 56,
       .w = 56, .k = 3, .pad = 1, .src_zero_point = 128},
  };
  return kCases;
}

// ---------------------------------------------------------------------------
// The case's numbers, shared by the qfuse graph and the raw primitive.

struct Quant {
  float scale;
  std::int32_t zero_point;
};

// u8: zero point rounded so that lo and hi sit on the grid; s8: symmetric.
Quant output_quant(ElementType type, float lo, float hi) {
  if (type == ElementType::s8) return {hi / 127.0f, 0};
  const float scale = (hi - lo) / 255.0f;
  return {scale, static_cast<std::int32_t>(std::lround(-lo / scale))};
}

struct Data {
  Shape x_shape, y_shape, w_shape;
  std::int64_t macs = 0;
  float s_in = 1.0f / 255.0f;
  float s_skip = 2.0f / 255.0f;
  std::vector<std::int8_t> w_codes;  // in w_shape's order
  std::vector<float> w_scale;        // per output channel
  std::vector<float> bias;           // real units
  std::vector<Quant> out;            // per output channel (all equal per tensor)
  Tensor x, skip;
};

std::int64_t out_size(std::int64_t in, const Case& c) {
  if (c.kind == LayerKind::deconv) return (in - 1) * c.stride + c.k - 2 * c.pad;
  return (in + 2 * c.pad - c.k) / c.stride + 1;
}

Tensor random_u8(const Shape& shape, unsigned seed) {
  Tensor t(ElementType::u8, shape);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(0, 255);
  for (auto& v : t.data<std::uint8_t>()) v = static_cast<std::uint8_t>(d(rng));
  return t;
}

Data make_data(const Case& c, std::int64_t batch) {
  Data d;
  std::int64_t reduction = 0;  // products summed into one output
  if (c.kind == LayerKind::fc) {
    d.x_shape = batch == 1 ? Shape{c.h, c.ic} : Shape{batch, c.h, c.ic};
    d.y_shape = batch == 1 ? Shape{c.h, c.oc} : Shape{batch, c.h, c.oc};
    d.w_shape = {c.oc, c.ic};
    reduction = c.ic;
    d.macs = batch * c.h * c.oc * c.ic;
  } else {
    const std::int64_t oh = out_size(c.h, c), ow = out_size(c.w, c);
    d.x_shape = {batch, c.ic, c.h, c.w};
    d.y_shape = {batch, c.oc, oh, ow};
    if (c.kind == LayerKind::conv) {
      d.w_shape = {c.oc, c.ic / c.groups, c.k, c.k};
      reduction = c.ic / c.groups * c.k * c.k;
      d.macs = batch * c.oc * oh * ow * reduction;
    } else {
      d.w_shape = {c.ic, c.oc / c.groups, c.k, c.k};
      reduction = c.ic / c.groups * c.k * c.k / (c.stride * c.stride);
      d.macs = batch * c.ic * c.h * c.w * (c.oc / c.groups) * c.k * c.k;
    }
  }
  // Weights in +-3/sqrt(reduction) give outputs of about unit spread.
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> code(-127, 127);
  std::uniform_real_distribution<float> real(-0.5f, 0.5f);
  const float base = 3.0f / std::sqrt(static_cast<float>(reduction));
  for (std::int64_t o = 0; o < c.oc; ++o) {
    const float range = c.per_channel_weights ? base * (0.5f + static_cast<float>(o % 8) / 8.0f) : base;
    d.w_scale.push_back(range / 127.0f);
    d.bias.push_back(real(rng));
    d.out.push_back(c.per_channel_output
                        ? output_quant(c.out_type, 0.0f, 2.0f + static_cast<float>(o % 4))
                        : output_quant(c.out_type, c.out_lo, c.out_hi));
  }
  d.w_codes.resize(static_cast<std::size_t>(element_count(d.w_shape)));
  for (auto& w : d.w_codes) w = static_cast<std::int8_t>(code(rng));
  d.x = random_u8(d.x_shape, 7);
  if (c.residual) d.skip = random_u8(d.y_shape, 8);
  if (c.src_zero_point != 0) d.s_in = 1.0f / 128.0f;
  return d;
}

// Output channel of weight element i (w_shape order).
std::int64_t weight_channel(const Case& c, const Data& d, std::size_t i) {
  const auto idx = static_cast<std::int64_t>(i);
  if (c.kind == LayerKind::deconv) {
    return idx / (d.w_shape[2] * d.w_shape[3]) % d.w_shape[1];
  }
  return idx / (element_count(d.w_shape) / d.w_shape[0]);
}

// ---------------------------------------------------------------------------
// The qfuse graph: u8 x -> Convert -> [- zp] -> * s_in -> layer(FakeQuantize'd
// weights, bias) [+ skip * s_skip] -> activation -> FakeQuantize to codes ->
// Convert to u8 / s8.

graph::Graph make_graph(const Case& c, const Data& d) {
  graph::Graph g;
  graph::Builder b(g);
  graph::ValueId x = b.convert(b.input("x", d.x_shape, ElementType::u8), ElementType::f32);
  if (c.src_zero_point != 0) {
    x = b.binary(OpKind::Subtract, x, b.scalar(static_cast<float>(c.src_zero_point)));
  }
  x = b.multiply(x, b.scalar(d.s_in));

  std::vector<float> w(d.w_codes.size());
  for (std::size_t i = 0; i < w.size(); ++i) {
    w[i] = static_cast<float>(d.w_codes[i]) * d.w_scale[static_cast<std::size_t>(weight_channel(c, d, i))];
  }
  Shape range_shape;
  switch (c.kind) {
    case LayerKind::conv: range_shape = {c.oc, 1, 1, 1}; break;
    case LayerKind::deconv: range_shape = {1, c.oc, 1, 1}; break;
    case LayerKind::fc: range_shape = {c.oc, 1}; break;
  }
  std::vector<float> lo(static_cast<std::size_t>(c.oc)), hi(lo.size());
  for (std::size_t o = 0; o < lo.size(); ++o) {
    hi[o] = d.w_scale[o] * 127.0f;
    lo[o] = -hi[o];
  }
  const graph::ValueId w_lo = b.constant("w.lo", range_shape, lo);
  const graph::ValueId w_hi = b.constant("w.hi", range_shape, hi);
  const graph::ValueId wq =
      b.fake_quantize(b.constant("w", d.w_shape, w), w_lo, w_hi, w_lo, w_hi, 255, "w.fq");
  const graph::ValueId bias = b.constant("bias", {c.oc}, d.bias);

  graph::ValueId y;
  const graph::Ints s{c.stride, c.stride}, p{c.pad, c.pad}, one{1, 1};
  switch (c.kind) {
    case LayerKind::conv:
      y = b.convolution(x, wq, bias, {.strides = s, .dilations = one, .pads_begin = p,
                                      .pads_end = p, .groups = c.groups}, "layer");
      break;
    case LayerKind::deconv:
      y = b.deconvolution(x, wq, bias, {.strides = s, .dilations = one, .pads_begin = p,
                                        .pads_end = p, .output_padding = {0, 0},
                                        .groups = c.groups}, "layer");
      break;
    case LayerKind::fc: y = b.fully_connected(x, wq, bias, "layer"); break;
  }
  if (c.residual) {
    const graph::ValueId skip = b.convert(b.input("skip", d.y_shape, ElementType::u8), ElementType::f32);
    y = b.add(y, b.multiply(skip, b.scalar(d.s_skip)));
  }
  switch (c.act) {
    case Act::none: break;
    case Act::relu: y = b.relu(y); break;
    case Act::relu6: y = b.clamp(y, 0.0f, 6.0f); break;
    case Act::sigmoid: y = b.unary(OpKind::Sigmoid, y); break;
    case Act::tanh: y = b.unary(OpKind::Tanh, y); break;
    case Act::hswish: y = b.unary(OpKind::HSwish, y); break;
    case Act::gelu: y = b.op(OpKind::Gelu, {y}, graph::GeluAttrs{}); break;
  }
  // FakeQuantize onto the codes: [(qmin - zp) s, (qmax - zp) s] -> [qmin, qmax].
  const float qmin = c.out_type == ElementType::u8 ? 0.0f : -128.0f;
  const float qmax = qmin + 255.0f;
  if (c.per_channel_output) {
    const Shape shape = c.kind == LayerKind::fc ? Shape{c.oc} : Shape{1, c.oc, 1, 1};
    std::vector<float> il, ih;
    for (const Quant& q : d.out) {
      il.push_back((qmin - static_cast<float>(q.zero_point)) * q.scale);
      ih.push_back((qmax - static_cast<float>(q.zero_point)) * q.scale);
    }
    const std::size_t n = il.size();
    y = b.fake_quantize(y, b.constant("y.il", shape, il), b.constant("y.ih", shape, ih),
                        b.constant("y.ol", shape, std::vector<float>(n, qmin)),
                        b.constant("y.oh", shape, std::vector<float>(n, qmax)), 256, "y.fq");
  } else {
    const Quant q = d.out[0];
    y = b.fake_quantize(y, (qmin - static_cast<float>(q.zero_point)) * q.scale,
                        (qmax - static_cast<float>(q.zero_point)) * q.scale, qmin, qmax, 256, "y.fq");
  }
  b.output(b.convert(y, c.out_type, "y"));
  return g;
}

// ---------------------------------------------------------------------------
// The raw oneDNN primitive with hand-written attributes.

memory::data_type dt(ElementType t) {
  return t == ElementType::s8 ? memory::data_type::s8 : memory::data_type::u8;
}

memory::dims dims(const Shape& s) { return memory::dims(s.begin(), s.end()); }

struct Raw {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  dnnl::primitive layer;
  std::string impl;
  memory src_user, src, dst, dst_user, skip_user, weights, bias;
  std::unique_ptr<dnnl::reorder> src_in, skip_in, dst_out;  // boundary reorders (spatial layers)

  void run_layer() {
    layer.execute(stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights},
                           {DNNL_ARG_BIAS, bias}, {DNNL_ARG_DST, dst}});
  }
  // What qfuse's request does: stage in, run, stage out.
  void run() {
    if (src_in) src_in->execute(stream, src_user, src);
    if (skip_in) skip_in->execute(stream, skip_user, dst);
    run_layer();
    if (dst_out) dst_out->execute(stream, dst, dst_user);
    stream.wait();
  }
  const void* output() const { return (dst_out ? dst_user : dst).get_data_handle(); }
};

dnnl::algorithm eltwise_alg(Act a) {
  switch (a) {
    case Act::sigmoid: return dnnl::algorithm::eltwise_logistic;
    case Act::tanh: return dnnl::algorithm::eltwise_tanh;
    case Act::hswish: return dnnl::algorithm::eltwise_hardswish;
    default: return dnnl::algorithm::eltwise_gelu_erf;
  }
}

// The chain as post-ops: the residual sum, the activation (1 / s_out as its
// scale where it runs on real values, see raw_attributes) and the inner
// product's destination zero point.
dnnl::post_ops raw_post_ops(const Case& c, const Data& d) {
  const float s_out = d.out[0].scale;
  const std::int32_t dst_zp = d.out[0].zero_point;
  dnnl::post_ops ops;
  if (c.residual) ops.append_sum(d.s_skip / s_out);
  switch (c.act) {
    case Act::none: break;
    case Act::relu: ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f); break;
    case Act::relu6:
      ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_clip, 0.0f, 6.0f / s_out);
      break;
    default: ops.append_eltwise(1.0f / s_out, eltwise_alg(c.act), 0.0f, 0.0f); break;
  }
  if (dst_zp != 0 && c.kind == LayerKind::fc) {
    ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_linear, 1.0f, static_cast<float>(dst_zp));
  }
  return ops;
}

struct RawAttributes {
  dnnl::primitive_attr attr;
  std::vector<float> bias;  // in accumulator units
};

// Attributes. Bias is added to the accumulator (oneDNN 2.x), so it is in
// accumulator units; activations that do not commute with a positive scale
// run on real values and take 1 / s_out as their post-op scale.
RawAttributes raw_attributes(const Case& c, const Data& d) {
  const bool scale_after_act = c.act == Act::sigmoid || c.act == Act::tanh ||
                               c.act == Act::hswish || c.act == Act::gelu;
  RawAttributes a;
  std::vector<float> scales;
  for (std::int64_t o = 0; o < c.oc; ++o) {
    const auto i = static_cast<std::size_t>(o);
    const float acc = d.s_in * d.w_scale[i];
    scales.push_back(scale_after_act ? acc : acc / d.out[i].scale);
    a.bias.push_back(d.bias[i] / acc);
  }
  a.attr.set_output_scales(1 << 1, scales);
  if (c.src_zero_point != 0) a.attr.set_zero_points(DNNL_ARG_SRC, 0, {c.src_zero_point});
  // oneDNN 2.6's inner product takes no zero points: its destination zero
  // point is a shift after the chain (the store rounds and saturates after it).
  const std::int32_t dst_zp = d.out[0].zero_point;
  if (dst_zp != 0 && c.kind != LayerKind::fc) a.attr.set_zero_points(DNNL_ARG_DST, 0, {dst_zp});
  a.attr.set_post_ops(raw_post_ops(c, d));
  return a;
}

// The layer's source and destination and, for spatial layers, the plain
// buffers at the graph's boundary.
struct RawDescs {
  memory::desc src, dst, src_user, dst_user;
};

// Descriptors: channels last inside, plain at the boundary.
RawDescs raw_descs(const Case& c, const Data& d) {
  using tag = memory::format_tag;
  const memory::data_type out_dt = dt(c.out_type);
  RawDescs m;
  if (c.kind != LayerKind::fc) {
    m.src = memory::desc(dims(d.x_shape), memory::data_type::u8, tag::nhwc);
    m.dst = memory::desc(dims(d.y_shape), out_dt, tag::nhwc);
    m.src_user = memory::desc(dims(d.x_shape), memory::data_type::u8, tag::nchw);
    m.dst_user = memory::desc(dims(d.y_shape), out_dt, tag::nchw);
  } else {
    const std::int64_t rows = element_count(d.x_shape) / c.ic;
    m.src = memory::desc({rows, c.ic}, memory::data_type::u8, tag::ab);
    m.dst = memory::desc({rows, c.oc}, out_dt, tag::ab);
  }
  return m;
}

// The weight codes as Data holds them.
memory::desc user_weights_desc(const Case& c, const Data& d) {
  using tag = memory::format_tag;
  memory::desc w;
  switch (c.kind) {
    case LayerKind::conv:
      if (c.groups > 1) {
        w = memory::desc({c.groups, c.oc / c.groups, c.ic / c.groups, c.k, c.k},
                         memory::data_type::s8, tag::goihw);
      } else {
        w = memory::desc(dims(d.w_shape), memory::data_type::s8, tag::oihw);
      }
      break;
    // qfuse's (ONNX's) weights are [IC, OC, k, k]: oneDNN's dims, stored iohw.
    case LayerKind::deconv:
      w = memory::desc({c.oc, c.ic, c.k, c.k}, memory::data_type::s8, tag::iohw);
      break;
    case LayerKind::fc: w = memory::desc({c.oc, c.ic}, memory::data_type::s8, tag::ab); break;
  }
  return w;
}

// The layer's primitive descriptor, its weights in the layout it picks.
dnnl::primitive_desc layer_primitive_desc(const Case& c, const RawDescs& m,
                                          const memory::desc& w_user_md,
                                          const memory::desc& bias_md,
                                          const dnnl::primitive_attr& attr,
                                          const dnnl::engine& eng) {
  const memory::dims strides{c.stride, c.stride}, pads{c.pad, c.pad}, dilations{0, 0};
  const memory::desc w_any(w_user_md.dims(), memory::data_type::s8, memory::format_tag::any);
  dnnl::primitive_desc pd;
  switch (c.kind) {
    case LayerKind::conv: {
      dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_inference,
                                           dnnl::algorithm::convolution_direct, m.src, w_any,
                                           bias_md, m.dst, strides, dilations, pads, pads);
      pd = dnnl::convolution_forward::primitive_desc(desc, attr, eng);
      break;
    }
    case LayerKind::deconv: {
      dnnl::deconvolution_forward::desc desc(dnnl::prop_kind::forward_inference,
                                             dnnl::algorithm::deconvolution_direct, m.src, w_any,
                                             bias_md, m.dst, strides, dilations, pads, pads);
      pd = dnnl::deconvolution_forward::primitive_desc(desc, attr, eng);
      break;
    }
    case LayerKind::fc: {
      dnnl::inner_product_forward::desc desc(dnnl::prop_kind::forward_inference, m.src, w_any,
                                             bias_md, m.dst);
      pd = dnnl::inner_product_forward::primitive_desc(desc, attr, eng);
      break;
    }
  }
  return pd;
}

// A spatial layer's plain buffers at the boundary and the reorders to and
// from them (the residual's straight into the destination).
void add_boundary_reorders(Raw& r, const Case& c, const Data& d, const RawDescs& m) {
  const dnnl::engine& eng = r.engine;
  r.src_user = memory(m.src_user, eng, const_cast<void*>(d.x.raw_data()));
  r.dst_user = memory(m.dst_user, eng);
  r.src_in = std::make_unique<dnnl::reorder>(r.src_user, r.src);
  r.dst_out = std::make_unique<dnnl::reorder>(r.dst, r.dst_user);
  if (c.residual) {
    r.skip_user = memory(memory::desc(dims(d.y_shape), memory::data_type::u8,
                                      memory::format_tag::nchw),
                         eng, const_cast<void*>(d.skip.raw_data()));
    r.skip_in = std::make_unique<dnnl::reorder>(r.skip_user, r.dst);
  }
}

std::unique_ptr<Raw> make_raw(const Case& c, const Data& d) {
  auto r = std::make_unique<Raw>();
  const dnnl::engine& eng = r->engine;
  const RawAttributes a = raw_attributes(c, d);
  const RawDescs m = raw_descs(c, d);
  const memory::desc bias_md({c.oc}, memory::data_type::f32, memory::format_tag::a);
  const memory::desc w_user_md = user_weights_desc(c, d);
  const dnnl::primitive_desc pd = layer_primitive_desc(c, m, w_user_md, bias_md, a.attr, eng);
  r->impl = pd.impl_info_str();
  r->layer = dnnl::primitive(pd.get());

  // Weights reordered once; bias; buffers.
  r->weights = memory(pd.weights_desc(), eng);
  {
    memory user(w_user_md, eng, const_cast<std::int8_t*>(d.w_codes.data()));
    dnnl::reorder(user, r->weights).execute(r->stream, user, r->weights);
    r->stream.wait();
  }
  r->bias = memory(bias_md, eng);
  std::memcpy(r->bias.get_data_handle(), a.bias.data(), a.bias.size() * sizeof(float));
  r->src = memory(m.src, eng);
  r->dst = memory(m.dst, eng);
  if (c.kind != LayerKind::fc) {
    add_boundary_reorders(*r, c, d, m);
  } else {
    std::memcpy(r->src.get_data_handle(), d.x.raw_data(), d.x.byte_size());
  }
  return r;
}

// ---------------------------------------------------------------------------
// The runs.

struct Instance {
  const Case* c;
  std::int64_t batch;
  std::string name() const { return std::string(c->name) + "/b" + std::to_string(batch); }
};

// The fused output of an instance, computed once: what raw and unfused are
// checked against.
const Tensor& fused_output(const Instance& in) {
  static std::map<std::string, Tensor> cache;
  const auto it = cache.find(in.name());
  if (it != cache.end()) return it->second;
  const Data d = make_data(*in.c, in.batch);
  const CompiledModel model = compile(make_graph(*in.c, d));
  InferRequest request = model.create_infer_request();
  request.set_input("x", d.x);
  if (in.c->residual) request.set_input("skip", d.skip);
  request.infer();
  return cache.emplace(in.name(), request.output("y")).first->second;
}

// Largest difference between two u8 / s8 outputs, in codes.
int max_code_diff(const Tensor& ref, const void* other) {
  int worst = 0;
  const std::size_t n = static_cast<std::size_t>(element_count(ref.shape()));
  for (std::size_t i = 0; i < n; ++i) {
    int a = 0, b = 0;
    if (ref.type() == ElementType::u8) {
      a = static_cast<const std::uint8_t*>(ref.raw_data())[i];
      b = static_cast<const std::uint8_t*>(other)[i];
    } else {
      a = static_cast<const std::int8_t*>(ref.raw_data())[i];
      b = static_cast<const std::int8_t*>(other)[i];
    }
    worst = std::max(worst, std::abs(a - b));
  }
  return worst;
}

// Integer operations per second (two per multiply-add), shown as G/s or T/s.
void set_ops(benchmark::State& state, std::int64_t macs) {
  state.counters["ops"] = benchmark::Counter(2.0 * static_cast<double>(macs),
                                             benchmark::Counter::kIsIterationInvariantRate);
}

// One code of difference is allowed: a value on (or within f32 rounding of)
// a .5 tie may round either way.
bool check_output(benchmark::State& state, const Instance& in, const void* out) {
  const int diff = max_code_diff(fused_output(in), out);
  state.counters["max_diff_codes"] = diff;
  if (diff > 1) {
    state.SkipWithError(("output differs from qfuse fused by " + std::to_string(diff) + " codes").c_str());
    return false;
  }
  return true;
}

void bench_raw(benchmark::State& state, Instance in, bool boundary) try {
  const Data d = make_data(*in.c, in.batch);
  const std::unique_ptr<Raw> raw = make_raw(*in.c, d);
  raw->run();
  if (!check_output(state, in, raw->output())) return;
  state.SetLabel(raw->impl);
  if (boundary) {
    for (auto _ : state) raw->run();
  } else {
    for (auto _ : state) {
      raw->run_layer();
      raw->stream.wait();
    }
  }
  set_ops(state, d.macs);
} catch (const std::exception& e) {
  state.SkipWithError(e.what());
}

void bench_qfuse(benchmark::State& state, Instance in, bool fuse) try {
  const Data d = make_data(*in.c, in.batch);
  const CompiledModel model = compile(make_graph(*in.c, d), {.fuse = fuse});
  InferRequest request = model.create_infer_request();
  request.set_input("x", d.x);
  if (in.c->residual) request.set_input("skip", d.skip);
  request.infer();
  if (!fuse && !check_output(state, in, request.output("y").raw_data())) return;
  std::string label;
  int reorders = 0;
  int int8_layers = 0;
  for (const LayerInfo& l : model.layers()) {
    reorders += l.reorders;
    if (l.macs > 0) {
      label = l.implementation + (l.post_ops.empty() ? "" : " | " + l.post_ops);
      int8_layers += l.precision == "int8" ? 1 : 0;
    }
  }
  if (fuse && int8_layers != 1) {
    state.SkipWithError("the layer did not fuse into one int8 primitive");
    return;
  }
  state.SetLabel(label);
  for (auto _ : state) request.infer();
  set_ops(state, d.macs);
  state.counters["nodes"] = static_cast<double>(model.layers().size());
  state.counters["reorders"] = reorders;
} catch (const std::exception& e) {
  state.SkipWithError(e.what());
}

// ---------------------------------------------------------------------------
// The summary: one line per instance from the runs (medians of repetitions
// when there are several).

struct Entry {
  double time = 0.0;  // per iteration, in the run's unit
  std::string label;
};

class SummaryReporter : public benchmark::ConsoleReporter {
 public:
  bool errors() const { return errors_; }

  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      if (r.error_occurred) {
        errors_ = true;
        continue;
      }
      const bool aggregate = r.run_type == Run::RT_Aggregate;
      if (aggregate && r.aggregate_name != "median") continue;
      if (!aggregate && r.repetitions > 1) continue;
      const std::string name = r.run_name.function_name;  // CASE/bN/variant
      Entry& e = entries_[name];
      e.time = r.GetAdjustedRealTime();
      if (!r.report_label.empty()) e.label = r.report_label;
    }
  }

  void Finalize() override {
    ConsoleReporter::Finalize();
    std::ostream& out = GetOutputStream();
    out << "\nsummary (" << tools::effective_isa() << ", "
        << "fused/raw and unfused/fused: whole runs, boundary reorders included; "
        << "GOPS: fused run; layer_GOPS: the raw primitive alone)\n";
    for (const auto& [name, macs] : instances_) {
      const Entry* raw = find(name + "/raw");
      const Entry* fused = find(name + "/fused");
      const Entry* unfused = find(name + "/unfused");
      const Entry* layer = find(name + "/layer");
      if (!fused) continue;
      char line[256];
      const double us = fused->time;  // microseconds
      std::snprintf(line, sizeof line, "%s fused/raw=%.3f unfused/fused=%.1f GOPS=%.0f", name.c_str(),
                    raw ? us / raw->time : 0.0, unfused ? unfused->time / us : 0.0,
                    2.0 * static_cast<double>(macs) / (us * 1e3));
      const std::string impl = fused->label.substr(0, fused->label.find(' '));
      out << line << " impl=" << impl;
      if (raw && raw->label != impl) out << " raw_impl=" << raw->label;
      if (layer) {
        std::snprintf(line, sizeof line, " layer_GOPS=%.0f",
                      2.0 * static_cast<double>(macs) / (layer->time * 1e3));
        out << line;
      }
      out << '\n';
    }
  }

  void add_instance(const std::string& name, std::int64_t macs) { instances_.emplace_back(name, macs); }

 private:
  const Entry* find(const std::string& name) const {
    const auto it = entries_.find(name);
    return it == entries_.end() ? nullptr : &it->second;
  }

  std::map<std::string, Entry> entries_;
  std::vector<std::pair<std::string, std::int64_t>> instances_;
  bool errors_ = false;
};

}  // namespace

int main(int argc, char** argv) {
  if (!qfuse::bench::take_isa_flag(argc, argv)) return 2;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  SummaryReporter reporter;
  for (const Case& c : cases()) {
    for (const std::int64_t batch : {1, 8}) {
      const Instance in{&c, batch};
      const std::string name = in.name();
      reporter.add_instance(name, make_data(c, batch).macs);
      const auto add = [&](const std::string& variant, auto fn) {
        benchmark::RegisterBenchmark((name + "/" + variant).c_str(), fn)
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
      };
      add("raw", [in](benchmark::State& s) { bench_raw(s, in, true); });
      add("fused", [in](benchmark::State& s) { bench_qfuse(s, in, true); });
      add("unfused", [in](benchmark::State& s) { bench_qfuse(s, in, false); });
      add("layer", [in](benchmark::State& s) { bench_raw(s, in, false); });
    }
  }
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return reporter.errors() ? 1 : 0;
}
