#pragma once
// Helpers shared by the pass tests: graphs with random constants, running a
// graph unfused, counting ops, the plugin's backend check as compile() passes
// it, and the dequantized conv block several passes start from.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "graph/builder.hpp"
#include "graph/passes/passes.hpp"
#include "graph/passes/pattern.hpp"
#include "plugin/api_internal.hpp"
#include "plugin/executable_ops/quantized_layer.hpp"

namespace qfuse::graph::pass_test {

inline std::vector<float> random_values(std::size_t n, float lo, float hi, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

inline std::size_t count(const Graph& g, OpKind kind) {
  std::size_t n = 0;
  for (NodeId id : g.topological_order()) n += g.node(id).kind == kind ? 1 : 0;
  return n;
}

// Runs `g` node by node (quantized nodes, if any, as int8 primitives).
inline std::vector<float> run(const Graph& g, const Tensor& x) {
  const CompiledModel m = compile(g, {.fuse = false});
  InferRequest r = m.create_infer_request();
  r.set_input(m.input_names()[0], x);
  r.infer();
  const Tensor& y = r.output(m.output_names()[0]);
  std::vector<float> out(static_cast<std::size_t>(y.size()));
  for (std::int64_t i = 0; i < y.size(); ++i) out[static_cast<std::size_t>(i)] = y.as_float(i);
  return out;
}

inline Tensor input_tensor(const Shape& shape, float lo, float hi, unsigned seed) {
  return Tensor::from_vector<float>(
      shape, random_values(static_cast<std::size_t>(element_count(shape)), lo, hi, seed));
}

inline void expect_close(const std::vector<float>& a, const std::vector<float>& b, float tol) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    ASSERT_NEAR(a[i], b[i], tol * (1.0f + std::abs(b[i]))) << "element " << i;
  }
}

struct Fixture {
  Graph g;
  Builder b{g};
};

inline ValueId conv_weights(Builder& b, const std::string& name, std::int64_t oc,
                            std::int64_t ic, bool quantize, bool per_channel = true) {
  const auto w = random_values(static_cast<std::size_t>(oc * ic * 9), -0.5f, 0.5f, 3);
  ValueId wv = b.constant(name, {oc, ic, 3, 3}, w);
  if (!quantize) return wv;
  std::vector<float> hi(static_cast<std::size_t>(per_channel ? oc : 1));
  for (std::size_t c = 0; c < hi.size(); ++c) hi[c] = 0.5f - 0.01f * static_cast<float>(c);
  std::vector<float> lo = hi;
  for (float& v : lo) v = -v;
  const Shape rs = per_channel ? Shape{oc, 1, 1, 1} : Shape{1};
  const ValueId l = b.constant(name + ".lo", rs, lo), h = b.constant(name + ".hi", rs, hi);
  return b.fake_quantize(wv, l, h, l, h, 255, name + ".fq");
}

// The plugin's own check, as compile() passes it.
inline PassContext context() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return PassContext(PassOptions{}, [](const Graph& g, const Node& n, const Shape& shape) {
    return plugin::check_quantized_layer(g, n, shape, engine, CompileOptions{});
  });
}

// What the canonicalize phase makes of a dequantize written with elementwise
// ops (Convert [-> Subtract] [-> Multiply], as the importer writes the
// integer operators): one Dequantize op each.
inline void recognize_dequantizes(Graph& g) {
  PassContext ctx = context();
  while (recognize_dequantize(g, ctx)) {
  }
}

inline Graph quantized_block(bool relu_between) {
  Graph g;
  Builder b(g);
  const ValueId x = b.input("x", {1, 4, 6, 6});
  const ValueId q = b.fake_quantize(x, 0.0f, 2.55f, 0.0f, 2.55f, 256, "fq_in");
  ValueId y = b.convolution(q, conv_weights(b, "w", 8, 4, true),
                            b.constant("bias", {8}, random_values(8, -0.2f, 0.2f, 11)),
                            {.pads_begin = {1, 1}, .pads_end = {1, 1}}, "conv");
  y = b.fake_quantize(y, -4.0f, 4.0f, -4.0f, 4.0f, 256, "fq_mid");
  if (relu_between) y = b.relu(y);
  y = b.fake_quantize(y, 0.0f, 4.0f, 0.0f, 4.0f, 256, "fq_out");
  const ValueId w2 = conv_weights(b, "w2", 8, 8, true);
  b.output(b.convolution(y, w2, std::nullopt, {.pads_begin = {1, 1}, .pads_end = {1, 1}}, "conv2"));
  return g;
}

}  // namespace qfuse::graph::pass_test
