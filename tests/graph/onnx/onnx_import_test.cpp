// The ONNX frontend on models built in memory with the ONNX protobuf API:
// float layers against naive loops, QDQ and pre-quantized layers (one int8
// primitive per layer when fused, fused versus unfused, unfused versus a
// reference written here), symbolic dimensions and the error messages.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "graph/onnx/importer.hpp"
#include "graph/op_info.hpp"
#include "plugin/api_internal.hpp"
#include "tests/graph/onnx/onnx_model_builder.hpp"

namespace qfuse::onnx {
namespace {

using namespace test;  // Model, attr, random_floats, run, count_nodes

template <class T>
std::vector<T> random_ints(std::size_t n, int lo, int hi, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<T> v(n);
  for (T& x : v) x = static_cast<T>(d(rng));
  return v;
}

bool is_int8_layer(const LayerInfo& l) {
  return l.op.rfind("Quantized", 0) == 0 && l.implementation != "reference" &&
         l.implementation.find("ref") == std::string::npos;
}

// 3x3 pad-1 convolution, NCHW, in double.
std::vector<double> conv3x3(const std::vector<double>& x, int c, int h, int w,
                            const std::vector<double>& wt, int oc, const std::vector<double>& b) {
  std::vector<double> y(static_cast<std::size_t>(oc * h * w));
  for (int o = 0; o < oc; ++o)
    for (int i = 0; i < h; ++i)
      for (int j = 0; j < w; ++j) {
        double acc = b.empty() ? 0.0 : b[static_cast<std::size_t>(o)];
        for (int ci = 0; ci < c; ++ci)
          for (int ki = 0; ki < 3; ++ki)
            for (int kj = 0; kj < 3; ++kj) {
              const int ii = i + ki - 1, jj = j + kj - 1;
              if (ii < 0 || jj < 0 || ii >= h || jj >= w) continue;
              acc += x[static_cast<std::size_t>((ci * h + ii) * w + jj)] *
                     wt[static_cast<std::size_t>(((o * c + ci) * 3 + ki) * 3 + kj)];
            }
        y[static_cast<std::size_t>((o * h + i) * w + j)] = acc;
      }
  return y;
}

// --- float layers -------------------------------------------------------------

TEST(OnnxFloat, ConvReluFlattenGemmMatchNaiveLoops) {
  const int c = 2, h = 5, w = 5, oc = 3, n_out = 4;
  const auto wt = random_floats(oc * c * 9, -0.5f, 0.5f, 1);
  const auto bias = random_floats(oc, -0.1f, 0.1f, 2);
  const auto gw = random_floats(n_out * oc * h * w, -0.2f, 0.2f, 3);  // [N_out, K], transB = 1
  const auto gc = random_floats(n_out, -1.0f, 1.0f, 4);
  Model m;
  m.input("x", kFloat, {1, c, h, w});
  m.initializer("w", kFloat, {oc, c, 3, 3}, wt);
  m.initializer("b", kFloat, {oc}, bias);
  m.initializer("gw", kFloat, {n_out, oc * h * w}, gw);
  m.initializer("gc", kFloat, {n_out}, gc);
  auto& conv = m.node("Conv", {"x", "w", "b"}, {"c"}, "conv");
  attr(conv, "pads", Dims{1, 1, 1, 1});
  attr(conv, "kernel_shape", Dims{3, 3});
  m.node("Relu", {"c"}, {"r"});
  m.node("Flatten", {"r"}, {"f"});
  auto& gemm = m.node("Gemm", {"f", "gw", "gc"}, {"y"}, "gemm");
  attr(gemm, "transB", std::int64_t{1});
  attr(gemm, "alpha", 0.5f);
  attr(gemm, "beta", 2.0f);
  m.output("y", kFloat);
  const graph::Graph g = import_bytes(m.bytes());
  EXPECT_EQ(count_nodes(g, graph::OpKind::FullyConnected), 1u);

  const auto xv = random_floats(c * h * w, -1.0f, 1.0f, 5);
  const Tensor y = run(g, false, "x", Tensor::from_vector<float>({1, c, h, w}, xv), "y");
  std::vector<double> xd(xv.begin(), xv.end()), wd(wt.begin(), wt.end()),
      bd(bias.begin(), bias.end());
  auto r = conv3x3(xd, c, h, w, wd, oc, bd);
  for (double& v : r) v = std::max(v, 0.0);
  ASSERT_EQ(y.shape(), (Shape{1, n_out}));
  for (int o = 0; o < n_out; ++o) {
    double acc = 0;
    for (std::size_t k = 0; k < r.size(); ++k) acc += r[k] * gw[static_cast<std::size_t>(o) * r.size() + k];
    const double expected = 0.5 * acc + 2.0 * gc[static_cast<std::size_t>(o)];
    EXPECT_NEAR(y.data<float>()[static_cast<std::size_t>(o)], expected, 1e-4) << "output " << o;
  }
}

TEST(OnnxFloat, HardSigmoidClipAndElementwiseFamily) {
  Model m(13);
  m.input("x", kFloat, {2, 3});
  m.initializer("lo", kFloat, {}, std::vector<float>{-0.25f});
  m.initializer("hi", kFloat, {}, std::vector<float>{0.75f});
  auto& hs = m.node("HardSigmoid", {"x"}, {"a"});
  attr(hs, "alpha", 0.3f);
  attr(hs, "beta", 0.4f);
  m.node("Clip", {"x", "lo", "hi"}, {"b"});
  m.node("Sub", {"a", "b"}, {"c"});
  m.node("LeakyRelu", {"c"}, {"d"});
  m.node("Abs", {"d"}, {"e"});
  m.node("Sqrt", {"e"}, {"y"});
  m.output("y", kFloat);
  const graph::Graph g = import_bytes(m.bytes());
  const std::vector<float> xv{-2.0f, -0.5f, 0.0f, 0.25f, 1.0f, 3.0f};
  const Tensor y = run(g, false, "x", Tensor::from_vector<float>({2, 3}, xv), "y");
  for (std::size_t i = 0; i < xv.size(); ++i) {
    const float a = std::max(0.0f, std::min(1.0f, 0.3f * xv[i] + 0.4f));
    const float b = std::min(std::max(xv[i], -0.25f), 0.75f);
    float d = a - b;
    d = d >= 0 ? d : 0.01f * d;
    EXPECT_NEAR(y.data<float>()[i], std::sqrt(std::abs(d)), 1e-6f) << i;
  }
}

// Shape -> Gather -> Unsqueeze -> Concat -> Reshape folds to one Reshape.
TEST(OnnxFloat, ShapeArithmeticFoldsOnceShapesAreBound) {
  Model m(13);
  m.input("x", kFloat, {-1, 3, 4});
  m.initializer("zero", kInt64, {}, std::vector<std::int64_t>{0});
  m.initializer("axes", kInt64, {1}, std::vector<std::int64_t>{0});
  m.initializer("minus1", kInt64, {1}, std::vector<std::int64_t>{-1});
  m.node("Shape", {"x"}, {"s"});
  m.node("Gather", {"s", "zero"}, {"n"});
  m.node("Unsqueeze", {"n", "axes"}, {"n1"});
  auto& cat = m.node("Concat", {"n1", "minus1"}, {"target"});
  attr(cat, "axis", std::int64_t{0});
  m.node("Reshape", {"x", "target"}, {"y"});
  m.output("y", kFloat);
  const graph::Graph g = import_bytes(m.bytes(), {.input_shapes = {{"x", {2, 3, 4}}}});
  EXPECT_EQ(g.live_node_count(), 1u);
  EXPECT_EQ(g.value(g.outputs()[0]).shape, (Shape{2, 12}));
}

// --- symbolic dimensions and errors ---------------------------------------------

// Opset 11 Softmax reads its input as a matrix [d0 * .. * d(axis-1), rest]:
// axis 1 of [2, 3, 4] normalizes over 12 values, not over the 3 of axis 1.
TEST(OnnxFloat, SoftmaxBeforeOpset13NormalizesTheFlattenedTail) {
  Model m(11);
  m.input("x", kFloat, {2, 3, 4});
  attr(m.node("Softmax", {"x"}, {"y"}), "axis", std::int64_t{1});
  m.output("y", kFloat);
  const graph::Graph g = onnx::import_bytes(m.bytes());
  const std::vector<float> xv = random_floats(24, -3.0f, 3.0f, 5);
  for (bool fuse : {false, true}) {
    const Tensor y = run(g, fuse, "x", Tensor::from_vector<float>({2, 3, 4}, xv), "y");
    for (int b = 0; b < 2; ++b) {
      double mx = -1e30, sum = 0.0;
      for (int i = 0; i < 12; ++i) mx = std::max(mx, double(xv[b * 12 + i]));
      for (int i = 0; i < 12; ++i) sum += std::exp(xv[b * 12 + i] - mx);
      for (int i = 0; i < 12; ++i) {
        EXPECT_NEAR(y.data<float>()[b * 12 + i], std::exp(xv[b * 12 + i] - mx) / sum, 1e-6);
      }
    }
  }
}

// LayerNorm as PaddlePaddle writes it, on a runtime Slice:
// s = x[:, 1:3, :]; d = s - mean(s, -1); y = d / sqrt(mean(d^2, -1) + eps).
// Split in each opset's form: sizes as an attribute (11), as an input (13),
// and equal parts; each output against the input's block copied here.
TEST(OnnxSplit, EachFormCutsTheAxisIntoItsParts) {
  struct Form {
    int opset;
    std::vector<std::int64_t> sizes;  // the expected parts of the 7 channels
    bool attribute, input;
  };
  const Form forms[] = {{11, {2, 4, 1}, true, false}, {13, {3, 1, 3}, false, true}};
  const std::vector<float> xv = random_floats(2 * 7 * 3, -1.0f, 1.0f, 5);
  for (const Form& f : forms) {
    Model m(f.opset);
    m.input("x", kFloat, {2, 7, 3});
    std::vector<std::string> ins{"x"};
    const std::vector<std::string> outs{"y0", "y1", "y2"};
    ASSERT_EQ(outs.size(), f.sizes.size());
    if (f.input) {
      m.initializer("split", kInt64, {static_cast<std::int64_t>(f.sizes.size())}, f.sizes);
      ins.push_back("split");
    }
    auto& n = m.node("Split", ins, outs, "split_node");
    attr(n, "axis", std::int64_t{1});
    if (f.attribute) attr(n, "split", Dims(f.sizes.begin(), f.sizes.end()));
    for (const auto& o : outs) m.output(o, kFloat);
    const graph::Graph g = import_bytes(m.bytes());
    EXPECT_EQ(count_nodes(g, graph::OpKind::Slice), f.sizes.size()) << "opset " << f.opset;
    const CompiledModel model = compile(g, {.fuse = false});
    InferRequest r = model.create_infer_request();
    r.set_input("x", Tensor::from_vector<float>({2, 7, 3}, xv));
    r.infer();
    std::int64_t begin = 0;
    for (std::size_t k = 0; k < f.sizes.size(); ++k) {
      const Tensor y = r.output(outs[k]);
      ASSERT_EQ(y.shape(), (Shape{2, f.sizes[k], 3})) << "opset " << f.opset << " part " << k;
      for (std::int64_t b = 0; b < 2; ++b) {
        for (std::int64_t c = 0; c < f.sizes[k]; ++c) {
          for (std::int64_t w = 0; w < 3; ++w) {
            EXPECT_EQ(y.data<float>()[static_cast<std::size_t>((b * f.sizes[k] + c) * 3 + w)],
                      xv[static_cast<std::size_t>((b * 7 + begin + c) * 3 + w)]);
          }
        }
      }
      begin += f.sizes[k];
    }
  }
  // Equal parts by default; a split that does not cover the axis is named.
  Model even;
  even.input("x", kFloat, {2, 6});
  attr(even.node("Split", {"x"}, {"a", "b", "c"}, "thirds"), "axis", std::int64_t{1});
  for (const char* o : {"a", "b", "c"}) even.output(o, kFloat);
  EXPECT_EQ(count_nodes(import_bytes(even.bytes()), graph::OpKind::Slice), 3u);
  Model bad;
  bad.input("x", kFloat, {2, 6});
  auto& n = bad.node("Split", {"x"}, {"a", "b"}, "short");
  attr(n, "axis", std::int64_t{1});
  attr(n, "split", Dims{2, 3});
  bad.output("a", kFloat);
  bad.output("b", kFloat);
  try {
    import_bytes(bad.bytes());
    ADD_FAILURE() << "a split of 5 of 6 channels was accepted";
  } catch (const GraphError& e) {
    EXPECT_NE(std::string(e.what()).find("Split node 'short': the parts sum to 5, not the "
                                         "dimension 6"),
              std::string::npos)
        << e.what();
  }
}

TEST(OnnxFloat, SliceReduceMeanPowMatchNaiveLoops) {
  Model m;
  m.input("x", kFloat, {2, 4, 5});
  m.initializer("starts", kInt64, {1}, std::vector<std::int64_t>{1});
  m.initializer("ends", kInt64, {1}, std::vector<std::int64_t>{3});
  m.initializer("axes", kInt64, {1}, std::vector<std::int64_t>{1});
  m.initializer("two", kFloat, {}, std::vector<float>{2.0f});
  m.initializer("eps", kFloat, {}, std::vector<float>{1e-5f});
  m.node("Slice", {"x", "starts", "ends", "axes"}, {"s"});
  attr(m.node("ReduceMean", {"s"}, {"mu"}), "axes", Dims{-1});
  m.node("Sub", {"s", "mu"}, {"d"});
  m.node("Pow", {"d", "two"}, {"d2"});
  attr(m.node("ReduceMean", {"d2"}, {"var"}), "axes", Dims{-1});
  m.node("Add", {"var", "eps"}, {"ve"});
  m.node("Sqrt", {"ve"}, {"sd"});
  m.node("Div", {"d", "sd"}, {"y"});
  m.output("y", kFloat);
  const graph::Graph g = onnx::import_bytes(m.bytes());
  const std::vector<float> xv = random_floats(40, -2.0f, 2.0f, 6);
  for (bool fuse : {false, true}) {
    const Tensor y = run(g, fuse, "x", Tensor::from_vector<float>({2, 4, 5}, xv), "y");
    ASSERT_EQ(y.shape(), (Shape{2, 2, 5}));
    for (int b = 0; b < 2; ++b) {
      for (int r = 0; r < 2; ++r) {
        const float* row = &xv[static_cast<std::size_t>(b * 20 + (r + 1) * 5)];
        double mu = 0.0, var = 0.0;
        for (int i = 0; i < 5; ++i) mu += row[i] / 5.0;
        for (int i = 0; i < 5; ++i) var += (row[i] - mu) * (row[i] - mu) / 5.0;
        for (int i = 0; i < 5; ++i) {
          EXPECT_NEAR(y.data<float>()[b * 10 + r * 5 + i], (row[i] - mu) / std::sqrt(var + 1e-5),
                      1e-5);
        }
      }
    }
  }
}

// torchvision's x.mean([2, 3]) is a global average pool: imported as one, so
// the passes can run it on codes. Other means stay ReduceMean.
TEST(OnnxFloat, SpatialReduceMeanIsAGlobalAveragePool) {
  const std::vector<float> xv = random_floats(2 * 3 * 4 * 5, -2.0f, 2.0f, 7);
  for (const bool keepdims : {false, true}) {
    Model m;
    m.input("x", kFloat, {2, 3, 4, 5});
    auto& mean = m.node("ReduceMean", {"x"}, {"y"});
    attr(mean, "axes", Dims{-2, 3});
    attr(mean, "keepdims", std::int64_t{keepdims ? 1 : 0});
    m.output("y", kFloat);
    const graph::Graph g = onnx::import_bytes(m.bytes());
    EXPECT_EQ(count_nodes(g, graph::OpKind::AvgPool), 1u);
    EXPECT_EQ(count_nodes(g, graph::OpKind::ReduceMean), 0u);
    for (bool fuse : {false, true}) {
      const Tensor y = run(g, fuse, "x", Tensor::from_vector<float>({2, 3, 4, 5}, xv), "y");
      ASSERT_EQ(y.shape(), keepdims ? (Shape{2, 3, 1, 1}) : (Shape{2, 3}));
      for (int nc = 0; nc < 6; ++nc) {
        double sum = 0.0;
        for (int i = 0; i < 20; ++i) sum += xv[static_cast<std::size_t>(nc * 20 + i)];
        EXPECT_NEAR(y.data<float>()[nc], sum / 20.0, 1e-6) << nc;
      }
    }
  }
  // Not the spatial axes of an image: the channels, the last axis of a rank-3
  // tensor, or a vector.
  for (const auto& [shape, axes] : {std::pair{Dims{2, 3, 4, 5}, Dims{1}},
                                    std::pair{Dims{2, 3, 4, 5}, Dims{1, 2, 3}},
                                    std::pair{Dims{2, 3, 5}, Dims{2}}, std::pair{Dims{6}, Dims{0}}}) {
    Model m;
    m.input("x", kFloat, shape);
    attr(m.node("ReduceMean", {"x"}, {"y"}), "axes", axes);
    m.output("y", kFloat);
    const graph::Graph g = onnx::import_bytes(m.bytes());
    EXPECT_EQ(count_nodes(g, graph::OpKind::ReduceMean), 1u);
    EXPECT_EQ(count_nodes(g, graph::OpKind::AvgPool), 0u);
  }
}

TEST(OnnxShapes, SymbolicDimsBindByInputAndByName) {
  Model m;
  m.input("a", kFloat, {-1, 3, -2, -3});
  m.input("b", kFloat, {-1, 3, -2, -3});
  m.node("Add", {"a", "b"}, {"y"});
  m.output("y", kFloat);
  const graph::Graph g = import_bytes(m.bytes(), {.input_shapes = {{"a", {2, 3, 8, 9}}}});
  EXPECT_EQ(g.value(g.inputs()[1]).shape, (Shape{2, 3, 8, 9}));
  EXPECT_EQ(g.value(g.outputs()[0]).shape, (Shape{2, 3, 8, 9}));
}

TEST(OnnxShapes, UnresolvedSymbolicDimIsAnErrorNamingIt) {
  Model m;
  m.input("image", kFloat, {-1, 3, 4, 4});
  m.node("Relu", {"image"}, {"y"});
  m.output("y", kFloat);
  try {
    import_bytes(m.bytes());
    FAIL() << "expected GraphError";
  } catch (const GraphError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'image'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'N'"), std::string::npos) << msg;
    // A binding of the input's own rank, its fixed dims as declared.
    EXPECT_NE(msg.find("--shape image=1x3x4x4 with the sizes you run at"), std::string::npos)
        << msg;
  }
}

TEST(OnnxShapes, BindingThatContradictsAStaticDimIsAnError) {
  Model m;
  m.input("x", kFloat, {1, 3});
  m.node("Relu", {"x"}, {"y"});
  m.output("y", kFloat);
  EXPECT_THROW(import_bytes(m.bytes(), {.input_shapes = {{"x", {1, 4}}}}), GraphError);
}

std::string unsupported_message(const Model& m) {
  return import_error<UnsupportedError>(m, "(no UnsupportedError)");
}

// Token embeddings as transformer exports write them: int64 ids in, Gather
// of table rows, a mask cast to float, and x[:, 0] (a scalar index) at the
// end; against naive loops here. An id past the table is an inference error
// naming the node.
TEST(OnnxGather, EmbeddingsByInt64IdsAndAScalarIndexMatchNaiveLoops) {
  const int vocab = 11, dim = 5, seq = 6;
  Model m;
  m.input("ids", kInt64, {1, seq});
  m.input("mask", kInt64, {1, seq});
  const std::vector<float> table = random_floats(vocab * dim, -1.0f, 1.0f, 41);
  m.initializer("table", kFloat, {vocab, dim}, table);
  m.initializer("zero", kInt64, {}, std::vector<std::int64_t>{0});
  m.node("Gather", {"table", "ids"}, {"emb"}, "tokens");
  attr(m.node("Cast", {"mask"}, {"maskf"}, "cast_mask"), "to", std::int64_t{kFloat});
  m.initializer("axes", kInt64, {1}, std::vector<std::int64_t>{2});
  m.node("Unsqueeze", {"maskf", "axes"}, {"mask3"}, "unsqueeze_mask");
  m.node("Mul", {"emb", "mask3"}, {"masked"}, "apply_mask");
  auto& first = m.node("Gather", {"masked", "zero"}, {"cls"}, "first_token");
  attr(first, "axis", std::int64_t{1});
  m.output("masked", kFloat);
  m.output("cls", kFloat);
  const graph::Graph g = import_bytes(m.bytes());
  const std::vector<std::int64_t> ids{3, 0, 10, -1, 7, 3};  // -1: the last row, as ONNX's
  const std::vector<std::int64_t> mask{1, 1, 1, 1, 0, 0};
  for (bool fuse : {false, true}) {
    const CompiledModel model = compile(g, {.fuse = fuse});
    InferRequest r = model.create_infer_request();
    r.set_input("ids", Tensor::from_vector<std::int64_t>({1, seq}, ids));
    r.set_input("mask", Tensor::from_vector<std::int64_t>({1, seq}, mask));
    r.infer();
    const Tensor masked = r.output("masked");
    const Tensor cls = r.output("cls");
    ASSERT_EQ(masked.shape(), (Shape{1, seq, dim}));
    ASSERT_EQ(cls.shape(), (Shape{1, dim}));
    for (int t = 0; t < seq; ++t) {
      const auto row = static_cast<std::size_t>(ids[static_cast<std::size_t>(t)] < 0
                                                    ? ids[static_cast<std::size_t>(t)] + vocab
                                                    : ids[static_cast<std::size_t>(t)]);
      for (int d = 0; d < dim; ++d) {
        const float e = table[row * dim + static_cast<std::size_t>(d)] *
                        static_cast<float>(mask[static_cast<std::size_t>(t)]);
        EXPECT_EQ(masked.data<float>()[static_cast<std::size_t>(t * dim + d)], e) << t << "," << d;
        if (t == 0) {
          EXPECT_EQ(cls.data<float>()[static_cast<std::size_t>(d)], e) << d;
        }
      }
    }
    r.set_input("ids", Tensor::from_vector<std::int64_t>({1, seq}, {3, 0, 11, 1, 1, 1}));
    try {
      r.infer();
      ADD_FAILURE() << "an id past the table ran";
    } catch (const InferenceError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("Gather node 'tokens'"), std::string::npos) << msg;
      EXPECT_NE(msg.find("index 11 is out of range"), std::string::npos) << msg;
    }
  }
}

// LayerNormalization (opset 17) over the last axis, with and without a bias,
// against a naive loop in double; another axis is refused with the node named.
TEST(OnnxLayerNorm, LastAxisMatchesANaiveLoop) {
  const int rows = 6, c = 24;
  for (const bool with_bias : {true, false}) {
    Model m(17);
    m.input("x", kFloat, {1, rows, c});
    const std::vector<float> scale = random_floats(c, 0.5f, 1.5f, 51);
    const std::vector<float> bias = random_floats(c, -0.3f, 0.3f, 52);
    m.initializer("scale", kFloat, {c}, scale);
    std::vector<std::string> inputs{"x", "scale"};
    if (with_bias) {
      m.initializer("bias", kFloat, {c}, bias);
      inputs.push_back("bias");
    }
    attr(m.node("LayerNormalization", inputs, {"y"}, "ln"), "epsilon", 1e-5f);
    m.output("y", kFloat);
    const graph::Graph g = import_bytes(m.bytes());
    EXPECT_EQ(count_nodes(g, graph::OpKind::LayerNorm), 1u);
    const std::vector<float> xv = random_floats(rows * c, -3.0f, 5.0f, 53);
    const Tensor x = Tensor::from_vector<float>({1, rows, c}, xv);
    for (bool fuse : {false, true}) {
      const Tensor y = run(g, fuse, "x", x, "y");
      for (int r = 0; r < rows; ++r) {
        double mean = 0, var = 0;
        for (int k = 0; k < c; ++k) mean += xv[static_cast<std::size_t>(r * c + k)];
        mean /= c;
        for (int k = 0; k < c; ++k) {
          const double d = xv[static_cast<std::size_t>(r * c + k)] - mean;
          var += d * d;
        }
        var /= c;
        for (int k = 0; k < c; ++k) {
          const auto i = static_cast<std::size_t>(r * c + k);
          const double e = (xv[i] - mean) / std::sqrt(var + 1e-5) * scale[static_cast<std::size_t>(k)] +
                           (with_bias ? bias[static_cast<std::size_t>(k)] : 0.0);
          EXPECT_NEAR(y.data<float>()[i], e, 1e-5) << r << "," << k;
        }
      }
    }
  }
  Model m(17);
  m.input("x", kFloat, {1, 4, 8});
  m.initializer("scale", kFloat, {4, 8}, std::vector<float>(32, 1.0f));
  attr(m.node("LayerNormalization", {"x", "scale"}, {"y"}, "ln_two_axes"), "axis", std::int64_t{1});
  m.output("y", kFloat);
  const std::string msg = unsupported_message(m);
  EXPECT_NE(msg.find("'ln_two_axes'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("last axis"), std::string::npos) << msg;
}

TEST(OnnxErrors, UnsupportedOperatorNamesTheOpAndTheNode) {
  Model m;
  m.input("x", kFloat, {1, 4});
  m.node("LpNormalization", {"x"}, {"y"}, "head_norm");
  m.output("y", kFloat);
  const std::string msg = unsupported_message(m);
  EXPECT_NE(msg.find("LpNormalization"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'head_norm'"), std::string::npos) << msg;
}

TEST(OnnxErrors, UnsupportedAttributeNamesTheOpNodeAndAttribute) {
  Model m;
  m.input("x", kFloat, {1, 1, 4, 4});
  m.initializer("w", kFloat, {1, 1, 1, 1}, std::vector<float>{1.0f});
  auto& n = m.node("Conv", {"x", "w"}, {"y"}, "conv7");
  attr(n, "mystery", std::int64_t{3});
  m.output("y", kFloat);
  const std::string msg = unsupported_message(m);
  EXPECT_NE(msg.find("Conv node 'conv7'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'mystery'"), std::string::npos) << msg;
}

TEST(OnnxErrors, UnsupportedAttributeValueIsNamed) {
  Model m;
  m.input("x", kFloat, {1, 1, 2, 2});
  m.initializer("scales", kFloat, {4}, std::vector<float>{1, 1, 2, 2});
  auto& n = m.node("Resize", {"x", "", "scales"}, {"y"}, "up");
  auto* a = n.add_attribute();
  a->set_name("mode");
  a->set_type(::onnx::AttributeProto_AttributeType_STRING);
  a->set_s("cubic");
  m.output("y", kFloat);
  const std::string msg = unsupported_message(m);
  EXPECT_NE(msg.find("Resize node 'up'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'mode'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cubic"), std::string::npos) << msg;
}

TEST(OnnxErrors, CastFromFloatToIntegerIsRejectedNotTruncatedWrongly) {
  Model m;
  m.input("x", kFloat, {4});
  auto& n = m.node("Cast", {"x"}, {"y"}, "to_int");
  attr(n, "to", std::int64_t{kInt8});
  m.output("y", kInt8);
  const std::string msg = unsupported_message(m);
  EXPECT_NE(msg.find("truncates"), std::string::npos) << msg;
}

TEST(OnnxErrors, UnsignedAddThatMayWrapIsRejected) {
  Model m;
  m.input("a", kUint8, {4});
  m.input("b", kUint8, {4});
  m.node("Add", {"a", "b"}, {"y"});
  m.output("y", kUint8);
  EXPECT_NE(unsupported_message(m).find("wrap"), std::string::npos);
}

// --- QuantizeLinear / DequantizeLinear -------------------------------------------

// round_half_to_even(x / s) + zp, saturated: ONNX's QuantizeLinear.
int onnx_quantize(float x, float s, int zp, int lo, int hi) {
  const float q = std::nearbyint(x / s);
  return static_cast<int>(std::clamp(q + static_cast<float>(zp), static_cast<float>(lo),
                                     static_cast<float>(hi)));
}

// ONNX Runtime's quantized embeddings: an int8 table, Gather by token ids,
// DequantizeLinear. The rows are gathered as codes (the table stays int8)
// and dequantized after; against (q - zp) * s computed here, for an s8 table
// without a zero point and a u8 table with one.
TEST(OnnxGather, QuantizedEmbeddingsGatherCodesThenDequantize) {
  const int vocab = 9, dim = 4, seq = 5;
  const std::vector<std::int64_t> ids{3, 0, 8, -1, 3};
  for (const bool u8 : {false, true}) {
    Model m;
    m.input("ids", kInt64, {1, seq});
    std::vector<std::int8_t> s8_table(vocab * dim);
    std::vector<std::uint8_t> u8_table(vocab * dim);
    for (int k = 0; k < vocab * dim; ++k) {
      s8_table[static_cast<std::size_t>(k)] = static_cast<std::int8_t>((k * 37) % 256 - 128);
      u8_table[static_cast<std::size_t>(k)] = static_cast<std::uint8_t>((k * 53) % 256);
    }
    if (u8) {
      m.initializer("table", kUint8, {vocab, dim}, u8_table);
      m.initializer("zp", kUint8, {}, std::vector<std::uint8_t>{131});
    } else {
      m.initializer("table", kInt8, {vocab, dim}, s8_table);
      m.initializer("zp", kInt8, {}, std::vector<std::int8_t>{0});
    }
    m.initializer("s", kFloat, {}, std::vector<float>{0.0173f});
    m.node("Gather", {"table", "ids"}, {"codes"}, "embed");
    m.node("DequantizeLinear", {"codes", "s", "zp"}, {"emb"}, "embed_dq");
    m.output("emb", kFloat);
    const graph::Graph g = import_bytes(m.bytes());
    for (bool fuse : {false, true}) {
      const Tensor y = run(g, fuse, "ids", Tensor::from_vector<std::int64_t>({1, seq}, ids), "emb");
      ASSERT_EQ(y.shape(), (Shape{1, seq, dim}));
      for (int t = 0; t < seq; ++t) {
        const std::int64_t id = ids[static_cast<std::size_t>(t)];
        const auto row = static_cast<std::size_t>(id < 0 ? id + vocab : id);
        for (int d = 0; d < dim; ++d) {
          const std::size_t k = row * dim + static_cast<std::size_t>(d);
          const float q = u8 ? static_cast<float>(u8_table[k]) - 131.0f
                             : static_cast<float>(s8_table[k]);
          EXPECT_EQ(y.data<float>()[static_cast<std::size_t>(t * dim + d)], q * 0.0173f)
              << (u8 ? "u8" : "s8") << (fuse ? " fused " : " unfused ") << t << "," << d;
        }
      }
    }
  }
}

// A 256-entry int8 table read by token ids of any range (int64 at run time)
// is rows of a table, not a byte Lookup: gathered as codes and dequantized.
TEST(OnnxGather, A256EntryTableByWideIndicesGathersRows) {
  Model m;
  m.input("ids", kInt64, {1, 4});
  std::vector<std::uint8_t> table(256);
  for (int k = 0; k < 256; ++k) {
    table[static_cast<std::size_t>(k)] = static_cast<std::uint8_t>(255 - k);
  }
  m.initializer("table", kUint8, {256}, table);
  m.initializer("zp", kUint8, {}, std::vector<std::uint8_t>{128});
  m.initializer("s", kFloat, {}, std::vector<float>{0.25f});
  m.node("Gather", {"table", "ids"}, {"codes"}, "embed");
  m.node("DequantizeLinear", {"codes", "s", "zp"}, {"y"}, "embed_dq");
  m.output("y", kFloat);
  const graph::Graph g = import_bytes(m.bytes());
  EXPECT_EQ(count_nodes(g, graph::OpKind::Gather), 1u);
  const std::vector<std::int64_t> ids{0, 255, 7, -1};
  const Tensor y = run(g, false, "ids", Tensor::from_vector<std::int64_t>({1, 4}, ids), "y");
  for (std::size_t t = 0; t < ids.size(); ++t) {
    const auto row = static_cast<std::size_t>(ids[t] < 0 ? ids[t] + 256 : ids[t]);
    EXPECT_EQ(y.data<float>()[t], (static_cast<float>(table[row]) - 128.0f) * 0.25f) << t;
  }
}

TEST(OnnxQuantize, LoneQuantizeLinearIsExactOnTies) {
  Model m;
  m.input("x", kFloat, {12});
  m.initializer("s", kFloat, {}, std::vector<float>{0.5f});
  m.initializer("zp", kUint8, {}, std::vector<std::uint8_t>{3});
  m.node("QuantizeLinear", {"x", "s", "zp"}, {"y"});
  m.output("y", kUint8);
  const graph::Graph g = import_bytes(m.bytes());
  // x / 0.5 = k + 0.5 exactly: ties on both parities, plus saturation.
  const std::vector<float> xv{0.25f, 0.75f, 1.25f, -0.25f, -0.75f, -1.25f,
                              -1.75f, 2.0f,  200.0f, -10.0f, 0.5f,   127.25f};
  for (bool fuse : {false, true}) {
    const Tensor y = run(g, fuse, "x", Tensor::from_vector<float>({12}, xv), "y");
    for (std::size_t i = 0; i < xv.size(); ++i) {
      EXPECT_EQ(y.data<std::uint8_t>()[i], onnx_quantize(xv[i], 0.5f, 3, 0, 255))
          << "x = " << xv[i] << (fuse ? " fused" : " unfused");
    }
  }
}

TEST(OnnxQuantize, PerAxisDequantizeLinearIsExact) {
  Model m;
  m.input("q", kInt8, {1, 3, 2});
  m.initializer("s", kFloat, {3}, std::vector<float>{0.1f, 0.2f, 0.3f});
  m.initializer("zp", kInt8, {3}, std::vector<std::int8_t>{0, -1, 5});
  auto& n = m.node("DequantizeLinear", {"q", "s", "zp"}, {"y"});
  attr(n, "axis", std::int64_t{1});
  m.output("y", kFloat);
  const graph::Graph g = import_bytes(m.bytes());
  const std::vector<std::int8_t> qv{-128, 127, 0, 5, -3, 100};
  const Tensor y = run(g, false, "q", Tensor::from_vector<std::int8_t>({1, 3, 2}, qv), "y");
  const float s[] = {0.1f, 0.2f, 0.3f};
  const int zp[] = {0, -1, 5};
  for (std::size_t i = 0; i < qv.size(); ++i) {
    const float expected = static_cast<float>(qv[i] - zp[i / 2]) * s[i / 2];
    EXPECT_EQ(y.data<float>()[i], expected) << i;
  }
}

// Every ONNX operator graph/op_info.cpp names as exactly one IR op imports as
// that op (the exporter writes it back by the same column), and a name no row
// has is not taken for one.
TEST(OnnxNames, EachOperatorOfTheTableImportsAsItsOp) {
  std::size_t rows = 0;
  for (int k = 0; k <= static_cast<int>(graph::OpKind::Quantize); ++k) {  // the table's last row
    const auto kind = static_cast<graph::OpKind>(k);
    const std::string_view onnx_op = graph::op_info(kind).onnx;
    if (onnx_op.empty()) continue;
    ++rows;
    const bool binary = graph::is_elementwise_binary(kind);
    Model m;
    m.input("x", kFloat, {1, 4});
    if (binary) m.input("y", kFloat, {1, 4});
    m.node(std::string(onnx_op), binary ? std::vector<std::string>{"x", "y"} : std::vector<std::string>{"x"},
           {"z"});
    m.output("z", kFloat);
    const graph::Graph g = import_bytes(m.bytes());
    EXPECT_EQ(count_nodes(g, kind), 1u) << onnx_op;
    EXPECT_EQ(graph::op_kind_of_onnx(onnx_op), kind) << onnx_op;
  }
  EXPECT_EQ(rows, 14u);
  EXPECT_FALSE(graph::op_kind_of_onnx("Multiply").has_value());
  EXPECT_FALSE(graph::op_kind_of_onnx("").has_value());
}

// Q -> DQ imports one to one: a Quantize and a Dequantize, ONNX's values on ties.
TEST(OnnxQuantize, QdqPairIsAQuantizeAndADequantize) {
  Model m;
  m.input("x", kFloat, {64});
  m.initializer("s", kFloat, {}, std::vector<float>{0.0625f});  // a power of two
  m.initializer("zp", kUint8, {}, std::vector<std::uint8_t>{128});
  m.node("QuantizeLinear", {"x", "s", "zp"}, {"q"});
  m.node("DequantizeLinear", {"q", "s", "zp"}, {"y"});
  m.output("y", kFloat);
  const graph::Graph g = import_bytes(m.bytes());
  EXPECT_EQ(g.live_node_count(), 2u);
  EXPECT_EQ(count_nodes(g, graph::OpKind::Quantize), 1u);
  EXPECT_EQ(count_nodes(g, graph::OpKind::Dequantize), 1u);
  EXPECT_EQ(count_nodes(g, graph::OpKind::FakeQuantize), 0u);

  std::vector<float> xv = random_floats(64, -10.0f, 10.0f, 9);
  xv[0] = 0.03125f;  // tie: 0.5 step
  xv[1] = -0.09375f;
  const Tensor x = Tensor::from_vector<float>({64}, xv);
  for (const bool fuse : {false, true}) {
    const Tensor y = run(g, fuse, "x", x, "y");
    for (std::size_t i = 0; i < xv.size(); ++i) {
      const float expected =
          static_cast<float>(onnx_quantize(xv[i], 0.0625f, 128, 0, 255) - 128) * 0.0625f;
      EXPECT_EQ(y.data<float>()[i], expected) << "x = " << xv[i] << (fuse ? ", fused" : "");
    }
  }
}

// --- QDQ layers ------------------------------------------------------------------

// x -> Q/DQ (u8) -> Conv(DQ(s8 weights, per channel)) + bias -> Relu -> Q/DQ -> y
Model qdq_conv_model(int c, int oc, int hw) {
  Model m;
  m.input("x", kFloat, {1, c, hw, hw});
  m.initializer("xs", kFloat, {}, std::vector<float>{0.02f});
  m.initializer("xz", kUint8, {}, std::vector<std::uint8_t>{128});
  m.initializer("wq", kInt8, {oc, c, 3, 3}, random_ints<std::int8_t>(oc * c * 9, -127, 127, 11));
  m.initializer("ws", kFloat, {oc}, random_floats(oc, 0.001f, 0.004f, 12));
  m.initializer("wz", kInt8, {oc}, std::vector<std::int8_t>(oc, 0));
  m.initializer("b", kFloat, {oc}, random_floats(oc, -0.2f, 0.2f, 13));
  m.initializer("ys", kFloat, {}, std::vector<float>{0.03f});
  m.initializer("yz", kUint8, {}, std::vector<std::uint8_t>{0});
  m.node("QuantizeLinear", {"x", "xs", "xz"}, {"xq"});
  m.node("DequantizeLinear", {"xq", "xs", "xz"}, {"xd"});
  auto& wdq = m.node("DequantizeLinear", {"wq", "ws", "wz"}, {"wd"});
  attr(wdq, "axis", std::int64_t{0});
  auto& conv = m.node("Conv", {"xd", "wd", "b"}, {"c"}, "conv");
  attr(conv, "pads", Dims{1, 1, 1, 1});
  m.node("Relu", {"c"}, {"r"});
  m.node("QuantizeLinear", {"r", "ys", "yz"}, {"rq"});
  m.node("DequantizeLinear", {"rq", "ys", "yz"}, {"y"});
  m.output("y", kFloat);
  return m;
}

TEST(OnnxQdq, ConvImportsAsQdqPairsAndIntegerWeightsAndFusesToOneInt8Layer) {
  const int c = 8, oc = 16, hw = 10;
  const graph::Graph g = import_bytes(qdq_conv_model(c, oc, hw).bytes());
  EXPECT_EQ(count_nodes(g, graph::OpKind::FakeQuantize), 0u);
  EXPECT_EQ(count_nodes(g, graph::OpKind::Quantize), 2u);
  EXPECT_EQ(count_nodes(g, graph::OpKind::Convolution), 1u);
  // Weights stay s8 behind Convert -> Multiply(per-channel scale).
  bool s8_weights = false;
  for (std::uint32_t i = 0; i < g.value_count(); ++i) {
    const auto& v = g.value(graph::ValueId{i});
    s8_weights |= v.is_constant() && v.type == ElementType::s8 && v.shape == Shape{oc, c, 3, 3};
  }
  EXPECT_TRUE(s8_weights);

  const Tensor x = Tensor::from_vector<float>({1, c, hw, hw},
                                              random_floats(c * hw * hw, -2.0f, 2.0f, 14));
  std::vector<LayerInfo> layers;
  const Tensor unfused = run(g, false, "x", x, "y");
  const Tensor fused = run(g, true, "x", x, "y", &layers);
  std::size_t int8_layers = 0;
  for (const auto& l : layers) int8_layers += is_int8_layer(l);
  EXPECT_EQ(int8_layers, 1u);
  // Outputs sit on the 0.03 grid; fused may move a rounding by one step.
  for (std::int64_t i = 0; i < x.size() / c * oc; ++i) {
    const float d = std::abs(fused.data<float>()[static_cast<std::size_t>(i)] -
                             unfused.data<float>()[static_cast<std::size_t>(i)]);
    ASSERT_LE(d, 0.03f * 1.001f) << "element " << i;
  }
}

TEST(OnnxQdq, GemmWithDequantizedWeightsFusesToOneInt8InnerProduct) {
  const int k = 32, n = 10;
  Model m;
  m.input("x", kFloat, {2, k});
  m.initializer("xs", kFloat, {}, std::vector<float>{0.01f});
  m.initializer("xz", kUint8, {}, std::vector<std::uint8_t>{100});
  m.initializer("wq", kInt8, {n, k}, random_ints<std::int8_t>(n * k, -127, 127, 21));
  m.initializer("ws", kFloat, {}, std::vector<float>{0.002f});
  m.initializer("wz", kInt8, {}, std::vector<std::int8_t>{0});
  m.initializer("b", kFloat, {n}, random_floats(n, -0.1f, 0.1f, 22));
  m.node("QuantizeLinear", {"x", "xs", "xz"}, {"xq"});
  m.node("DequantizeLinear", {"xq", "xs", "xz"}, {"xd"});
  m.node("DequantizeLinear", {"wq", "ws", "wz"}, {"wd"});
  auto& gemm = m.node("Gemm", {"xd", "wd", "b"}, {"y"}, "fc");
  attr(gemm, "transB", std::int64_t{1});
  m.output("y", kFloat);
  const graph::Graph g = import_bytes(m.bytes());
  EXPECT_EQ(count_nodes(g, graph::OpKind::FullyConnected), 1u);
  const Tensor x = Tensor::from_vector<float>({2, k}, random_floats(2 * k, -1.0f, 1.0f, 23));
  std::vector<LayerInfo> layers;
  const Tensor unfused = run(g, false, "x", x, "y");
  const Tensor fused = run(g, true, "x", x, "y", &layers);
  std::size_t int8_layers = 0;
  for (const auto& l : layers) int8_layers += is_int8_layer(l);
  EXPECT_EQ(int8_layers, 1u);
  for (std::size_t i = 0; i < 2 * n; ++i) {
    EXPECT_NEAR(fused.data<float>()[i], unfused.data<float>()[i], 1e-4f) << i;
  }
}

// --- ONNX's arithmetic on ties -----------------------------------------------------
//
// Q/DQ pairs keep ONNX's scale and zero point: weights quantize as ONNX does
// (f32 division, round half to even, add the zero point, saturate), and so do
// activations with an odd zero point. Expected codes are computed here with
// onnx_quantize (f32, as ONNX's reference does), and the tests check that the
// ties they are about are present.

// A PyTorch QAT conv: f32 weights -> Q(s8, per channel, s = max|w| / 127.5,
// zp 0) -> DQ, as torch.onnx.export writes a per-channel symmetric
// fake-quantized weight. Extra weights are put on w / s = 24.5.
struct TorchConv {
  int c = 8, oc = 16, hw = 6;
  std::vector<float> w, ws, b;
  int ties_at_ends = 0, ties_inside = 0;
  float xs = 0.015625f, ys = 0.0478f;
  std::uint8_t xz = 128, yz = 7;
};

TorchConv torch_conv() {
  TorchConv t;
  t.w = random_floats(static_cast<std::size_t>(t.oc * t.c * 9), -0.5f, 0.5f, 31);
  t.b = random_floats(static_cast<std::size_t>(t.oc), -0.2f, 0.2f, 32);
  const int per = t.c * 9;
  for (int o = 0; o < t.oc; ++o) {
    float m = 0.0f;
    for (int k = 0; k < per; ++k) m = std::max(m, std::abs(t.w[static_cast<std::size_t>(o * per + k)]));
    const float s = m / 127.5f;
    t.ws.push_back(s);
    // Two weights of each channel onto x.5 ties inside the grid, where f32 holds them.
    for (int k : {1, 2}) {
      const float v = (k == 1 ? 24.5f : -3.5f) * s;
      if (v / s == (k == 1 ? 24.5f : -3.5f)) t.w[static_cast<std::size_t>(o * per + k)] = v;
    }
    for (int k = 0; k < per; ++k) {
      const float r = std::abs(t.w[static_cast<std::size_t>(o * per + k)] / s);
      t.ties_at_ends += r == 127.5f;
      t.ties_inside += r == 24.5f || r == 3.5f;
    }
  }
  return t;
}

Model torch_conv_model(const TorchConv& t) {
  Model m;
  m.input("x", kFloat, {1, t.c, t.hw, t.hw});
  m.initializer("xs", kFloat, {}, std::vector<float>{t.xs});
  m.initializer("xz", kUint8, {}, std::vector<std::uint8_t>{t.xz});
  m.initializer("w", kFloat, {t.oc, t.c, 3, 3}, t.w);
  m.initializer("ws", kFloat, {t.oc}, t.ws);
  m.initializer("wz", kInt8, {t.oc}, std::vector<std::int8_t>(static_cast<std::size_t>(t.oc), 0));
  m.initializer("b", kFloat, {t.oc}, t.b);
  m.initializer("ys", kFloat, {}, std::vector<float>{t.ys});
  m.initializer("yz", kUint8, {}, std::vector<std::uint8_t>{t.yz});
  m.node("QuantizeLinear", {"x", "xs", "xz"}, {"xq"});
  m.node("DequantizeLinear", {"xq", "xs", "xz"}, {"xd"});
  auto& wq = m.node("QuantizeLinear", {"w", "ws", "wz"}, {"wq"});
  attr(wq, "axis", std::int64_t{0});
  auto& wdq = m.node("DequantizeLinear", {"wq", "ws", "wz"}, {"wd"});
  attr(wdq, "axis", std::int64_t{0});
  auto& conv = m.node("Conv", {"xd", "wd", "b"}, {"c"}, "conv");
  attr(conv, "pads", Dims{1, 1, 1, 1});
  m.node("QuantizeLinear", {"c", "ys", "yz"}, {"cq"});
  m.node("DequantizeLinear", {"cq", "ys", "yz"}, {"y"});
  m.output("y", kFloat);
  return m;
}

TEST(OnnxQdq, TorchSymmetricWeightsOnTiesGetOnnxCodesFusedAndUnfused) {
  const TorchConv t = torch_conv();
  ASSERT_GT(t.ties_at_ends, t.oc / 2) << "the model needs weights on w / s = +-127.5";
  ASSERT_GT(t.ties_inside, t.oc) << "the model needs weights on w / s = 24.5 and -3.5";
  const graph::Graph g = import_bytes(torch_conv_model(t).bytes());
  const int per = t.c * 9;
  std::vector<std::int8_t> codes(t.w.size());
  for (std::size_t i = 0; i < t.w.size(); ++i) {
    codes[i] = static_cast<std::int8_t>(onnx_quantize(t.w[i], t.ws[i / static_cast<std::size_t>(per)], 0, -128, 127));
  }

  // Fused: the int8 layer's weights are ONNX's codes.
  const CompiledModel fused_model = compile(g, {.fuse = true});
  const graph::Graph& fg = compiled_graph(fused_model);
  std::size_t layers = 0;
  for (graph::NodeId id : fg.topological_order()) {
    const graph::Node& n = fg.node(id);
    if (n.kind != graph::OpKind::QuantizedConvolution) continue;
    ++layers;
    const graph::Value& wv = fg.value(n.inputs[1]);
    ASSERT_TRUE(wv.is_constant());
    ASSERT_EQ(wv.type, ElementType::s8);
    const auto got = wv.constant->data<std::int8_t>();
    ASSERT_EQ(got.size(), codes.size());
    for (std::size_t i = 0; i < codes.size(); ++i) {
      ASSERT_EQ(got[i], codes[i]) << "weight " << i << ": w / s = "
                                  << t.w[i] / t.ws[i / static_cast<std::size_t>(per)];
    }
  }
  EXPECT_EQ(layers, 1u);

  // Unfused: the dequantized weights are ONNX's (q - 0) * s, bit for bit.
  const CompiledModel unfused_model = compile(g, {.fuse = false});
  InferRequest ur = unfused_model.create_infer_request();
  std::size_t weights_seen = 0;
  ur.set_value_observer([&](const std::string& name, const Tensor& v) {
    if (name != g.tensor_aliases().at("wd")) return;
    ++weights_seen;
    for (std::size_t i = 0; i < codes.size(); ++i) {
      const float e = static_cast<float>(codes[i]) * t.ws[i / static_cast<std::size_t>(per)];
      ASSERT_EQ(v.data<float>()[i], e) << "weight " << i;
    }
  });
  std::vector<float> xv = random_floats(static_cast<std::size_t>(t.c * t.hw * t.hw), -1.5f, 1.5f, 33);
  const Tensor x = Tensor::from_vector<float>({1, t.c, t.hw, t.hw}, xv);
  ur.set_input("x", x);
  ur.infer();
  EXPECT_EQ(weights_seen, 1u);
  const Tensor unfused = ur.output("y");
  const Tensor fused = run(g, true, "x", x, "y");

  // ONNX's arithmetic, here: codes of x, the convolution of dequantized
  // values in double, the output's QuantizeLinear.
  std::vector<double> xd(xv.size()), wd(codes.size());
  for (std::size_t i = 0; i < xv.size(); ++i) {
    xd[i] = static_cast<float>(onnx_quantize(xv[i], t.xs, t.xz, 0, 255) - t.xz) * t.xs;
  }
  for (std::size_t i = 0; i < codes.size(); ++i) {
    wd[i] = static_cast<float>(codes[i]) * t.ws[i / static_cast<std::size_t>(per)];
  }
  const std::vector<double> acc =
      conv3x3(xd, t.c, t.hw, t.hw, wd, t.oc, std::vector<double>(t.b.begin(), t.b.end()));
  std::size_t fused_equal = 0, unfused_equal = 0;
  for (std::size_t i = 0; i < acc.size(); ++i) {
    const int e = onnx_quantize(static_cast<float>(acc[i]), t.ys, t.yz, 0, 255);
    const auto code = [&](const Tensor& y) {
      return static_cast<int>(std::lround(y.data<float>()[i] / t.ys)) + t.yz;
    };
    ASSERT_LE(std::abs(code(fused) - e), 1) << "fused element " << i;
    ASSERT_LE(std::abs(code(unfused) - e), 1) << "unfused element " << i;
    fused_equal += code(fused) == e;
    unfused_equal += code(unfused) == e;
  }
  // Only near-ties of the f32 sums may differ.
  EXPECT_GE(static_cast<double>(unfused_equal), 0.995 * static_cast<double>(acc.size()));
  EXPECT_GE(static_cast<double>(fused_equal), 0.995 * static_cast<double>(acc.size()));
}

// An odd zero point: ONNX rounds x / s half to even, then adds it. The input
// quantization (one quantizing Convert when fused) and the layer after it
// reproduce ONNX's codes on every tie: a 1x1 convolution with unit weights
// carries the input codes to the output grid unchanged.
TEST(OnnxQdq, OddZeroPointActivationsOnTiesGetOnnxCodesFusedAndUnfused) {
  const int c = 4, hw = 8;
  for (const std::uint8_t zp : {std::uint8_t{3}, std::uint8_t{127}, std::uint8_t{128}}) {
    Model m;
    m.input("x", kFloat, {1, c, hw, hw});
    m.initializer("s", kFloat, {}, std::vector<float>{0.25f});
    m.initializer("zp", kUint8, {}, std::vector<std::uint8_t>{zp});
    std::vector<std::int8_t> eye(static_cast<std::size_t>(c * c), 0);
    for (int i = 0; i < c; ++i) eye[static_cast<std::size_t>(i * c + i)] = 1;
    m.initializer("wq", kInt8, {c, c, 1, 1}, eye);
    m.initializer("ws", kFloat, {}, std::vector<float>{1.0f});
    m.initializer("wz", kInt8, {}, std::vector<std::int8_t>{0});
    m.node("QuantizeLinear", {"x", "s", "zp"}, {"xq"});
    m.node("DequantizeLinear", {"xq", "s", "zp"}, {"xd"});
    m.node("DequantizeLinear", {"wq", "ws", "wz"}, {"wd"});
    m.node("Conv", {"xd", "wd"}, {"c"}, "conv");
    m.node("QuantizeLinear", {"c", "s", "zp"}, {"cq"});
    m.node("DequantizeLinear", {"cq", "s", "zp"}, {"y"});
    m.output("y", kFloat);
    const graph::Graph g = import_bytes(m.bytes());
    // x / s = k + 0.5 for k across the grid and beyond it.
    std::vector<float> xv(static_cast<std::size_t>(c * hw * hw));
    int ties = 0;
    for (std::size_t i = 0; i < xv.size(); ++i) {
      xv[i] = (static_cast<float>(static_cast<int>(i) - 140) + 0.5f) * 0.25f;
      ties += std::abs(onnx_quantize(xv[i], 0.25f, zp, 0, 255) - zp) < 120;
    }
    ASSERT_GT(ties, 200);
    const Tensor x = Tensor::from_vector<float>({1, c, hw, hw}, xv);
    std::vector<LayerInfo> layers;
    for (bool fuse : {false, true}) {
      const Tensor y = run(g, fuse, "x", x, "y", &layers);
      for (std::size_t i = 0; i < xv.size(); ++i) {
        const float e = static_cast<float>(onnx_quantize(xv[i], 0.25f, zp, 0, 255) - zp) * 0.25f;
        ASSERT_EQ(y.data<float>()[i], e) << "x / s = " << xv[i] / 0.25f << ", zero point "
                                         << int{zp} << (fuse ? ", fused" : ", unfused");
      }
      if (fuse) {
        std::size_t int8 = 0;
        for (const auto& l : layers) int8 += is_int8_layer(l);
        EXPECT_EQ(int8, 1u);
      }
    }
  }
}

// torch's default x86 QAT activations (reduce_range, quint8 0..127) export as
// QuantizeLinear -> Clip -> DequantizeLinear. The Clip narrows the grid's
// codes: the triple is a Quantize onto those codes and a Dequantize, the
// layer runs int8, and every tie and saturation gives ONNX's codes, clamped,
// fused and unfused.
struct ClipCase {
  std::optional<std::uint8_t> lo, hi;  // Clip's inputs; absent ones are omitted
  int codes_lo, codes_hi;              // the codes that remain
};

// The input's DequantizeLinear reads its scale from `x_dq_scale`.
Model clipped_qdq_conv(int c, int hw, std::uint8_t zp, const ClipCase& k,
                       float x_dq_scale = 0.25f) {
  Model m;
  m.input("x", kFloat, {1, c, hw, hw});
  m.initializer("s", kFloat, {}, std::vector<float>{0.25f});
  m.initializer("xs", kFloat, {}, std::vector<float>{x_dq_scale});
  m.initializer("zp", kUint8, {}, std::vector<std::uint8_t>{zp});
  if (k.lo) m.initializer("lo", kUint8, {}, std::vector<std::uint8_t>{*k.lo});
  if (k.hi) m.initializer("hi", kUint8, {}, std::vector<std::uint8_t>{*k.hi});
  std::vector<std::int8_t> eye(static_cast<std::size_t>(c * c), 0);
  for (int i = 0; i < c; ++i) eye[static_cast<std::size_t>(i * c + i)] = 1;
  m.initializer("wq", kInt8, {c, c, 1, 1}, eye);
  m.initializer("ws", kFloat, {}, std::vector<float>{1.0f});
  m.initializer("wz", kInt8, {}, std::vector<std::int8_t>{0});
  const std::vector<std::string> bounds{k.lo ? "lo" : "", k.hi ? "hi" : ""};
  m.node("QuantizeLinear", {"x", "s", "zp"}, {"xq"});
  m.node("Clip", {"xq", bounds[0], bounds[1]}, {"xc"});
  m.node("DequantizeLinear", {"xc", "xs", "zp"}, {"xd"});
  m.node("DequantizeLinear", {"wq", "ws", "wz"}, {"wd"});
  m.node("Conv", {"xd", "wd"}, {"c"}, "conv");
  m.node("QuantizeLinear", {"c", "s", "zp"}, {"cq"});
  m.node("Clip", {"cq", bounds[0], bounds[1]}, {"cc"});
  m.node("DequantizeLinear", {"cc", "s", "zp"}, {"y"});
  m.output("y", kFloat);
  return m;
}

TEST(OnnxQdq, TorchReduceRangeClipIsANarrowerGridFusedAndExact) {
  const int c = 4, hw = 8;
  const std::vector<ClipCase> cases{
      {std::nullopt, std::uint8_t{127}, 0, 127},      // torch: max only
      {std::uint8_t{0}, std::uint8_t{127}, 0, 127},   // both bounds
      {std::uint8_t{3}, std::uint8_t{200}, 3, 200},   // inside the type on both sides
  };
  for (const std::uint8_t zp : {std::uint8_t{0}, std::uint8_t{61}}) {
    for (const ClipCase& k : cases) {
      if (zp < k.codes_lo) continue;  // a grid without zero: no int8 layer reads it
      const std::string what = "zero point " + std::to_string(zp) + ", codes " +
                               std::to_string(k.codes_lo) + ".." + std::to_string(k.codes_hi);
      const graph::Graph g = import_bytes(clipped_qdq_conv(c, hw, zp, k).bytes());
      EXPECT_EQ(count_nodes(g, graph::OpKind::Clamp), 0u) << what;
      std::size_t narrowed = 0;
      for (graph::NodeId id : g.topological_order()) {
        const graph::Node& n = g.node(id);
        if (n.kind != graph::OpKind::Quantize || g.consumers(n.outputs[0]).empty()) continue;
        const auto& q = n.attr<graph::QuantizeAttrs>();
        EXPECT_EQ(q.code_min(), k.codes_lo) << what;
        EXPECT_EQ(q.code_max(), k.codes_hi) << what;
        ++narrowed;
      }
      EXPECT_EQ(narrowed, 2u) << what;
      // x / s = j + 0.5 across the codes and beyond both ends.
      std::vector<float> xv(static_cast<std::size_t>(c * hw * hw));
      for (std::size_t i = 0; i < xv.size(); ++i) {
        xv[i] = (static_cast<float>(static_cast<int>(i) - 100) + 0.5f) * 0.25f;
      }
      const Tensor x = Tensor::from_vector<float>({1, c, hw, hw}, xv);
      for (bool fuse : {false, true}) {
        std::vector<LayerInfo> layers;
        const Tensor y = run(g, fuse, "x", x, "y", &layers);
        for (std::size_t i = 0; i < xv.size(); ++i) {
          const int q = onnx_quantize(xv[i], 0.25f, zp, k.codes_lo, k.codes_hi);
          ASSERT_EQ(y.data<float>()[i], static_cast<float>(q - zp) * 0.25f)
              << "x / s = " << xv[i] / 0.25f << ", " << what << (fuse ? ", fused" : ", unfused");
        }
        if (!fuse) continue;
        // The input's Quantize and the int8 layer, which writes the output.
        std::size_t int8 = 0, quantizes = 0;
        for (const auto& l : layers) {
          int8 += is_int8_layer(l);
          quantizes += l.op == "Quantize";
          EXPECT_TRUE(is_int8_layer(l) || l.op == "Quantize") << l.node << " " << l.op << "; " << what;
        }
        EXPECT_EQ(int8, 1u) << what;
        EXPECT_EQ(quantizes, 1u) << what;
      }
    }
  }
}

// A Clip that leaves one code is no narrower grid: the nodes stay as written.
// A DequantizeLinear of another grid reads the narrowed codes. Both compute
// ONNX's values.
TEST(OnnxQdq, ClipBetweenQdqThatLeavesOneCodeOrMeetsAnotherGridIsNotFolded) {
  const int c = 4, hw = 8;
  Model one = clipped_qdq_conv(c, hw, 10, {std::uint8_t{7}, std::uint8_t{7}, 7, 7});
  Model other = clipped_qdq_conv(c, hw, 10, {std::nullopt, std::uint8_t{127}, 0, 127}, 0.5f);
  std::vector<float> xv(static_cast<std::size_t>(c * hw * hw));
  for (std::size_t i = 0; i < xv.size(); ++i) {
    xv[i] = (static_cast<float>(static_cast<int>(i) - 100) + 0.5f) * 0.25f;
  }
  const Tensor x = Tensor::from_vector<float>({1, c, hw, hw}, xv);
  {
    const graph::Graph g = import_bytes(one.bytes());
    EXPECT_EQ(count_nodes(g, graph::OpKind::Clamp), 2u);
    EXPECT_EQ(count_nodes(g, graph::OpKind::FakeQuantize), 0u);
    for (bool fuse : {false, true}) {
      const Tensor y = run(g, fuse, "x", x, "y");
      for (std::size_t i = 0; i < xv.size(); ++i) {
        ASSERT_EQ(y.data<float>()[i], (7.0f - 10.0f) * 0.25f) << i << (fuse ? " fused" : "");
      }
    }
  }
  {
    const graph::Graph g = import_bytes(other.bytes());
    // Each Clip is a Quantize onto codes 0..127, whatever grid the
    // DequantizeLinear after it reads them on (the input's: another scale).
    EXPECT_EQ(count_nodes(g, graph::OpKind::Clamp), 0u);
    std::size_t narrowed = 0;
    for (graph::NodeId id : g.topological_order()) {
      const graph::Node& n = g.node(id);
      narrowed += n.kind == graph::OpKind::Quantize && n.attr<graph::QuantizeAttrs>().code_max() == 127;
    }
    EXPECT_EQ(narrowed, 2u);
    for (bool fuse : {false, true}) {
      const Tensor y = run(g, fuse, "x", x, "y");
      for (std::size_t i = 0; i < xv.size(); ++i) {
        const float xd = static_cast<float>(onnx_quantize(xv[i], 0.25f, 10, 0, 127) - 10) * 0.5f;
        const float e = static_cast<float>(onnx_quantize(xd, 0.25f, 10, 0, 127) - 10) * 0.25f;
        ASSERT_EQ(y.data<float>()[i], e) << i << (fuse ? " fused" : "");
      }
    }
  }
}

// ONNX Runtime's default bias: DequantizeLinear(int32, xs * ws[c], 0). It must
// become the inner product's bias, not an f32 Add after the int8 layer.
TEST(OnnxQdq, GemmWithInt32BiasDequantizeFusesWithItsBias) {
  const int k = 32, n = 10;
  Model m;
  m.input("x", kFloat, {2, k});
  m.initializer("xs", kFloat, {}, std::vector<float>{0.01f});
  m.initializer("xz", kUint8, {}, std::vector<std::uint8_t>{100});
  m.initializer("wq", kInt8, {n, k}, random_ints<std::int8_t>(n * k, -127, 127, 24));
  std::vector<float> ws(n), bs(n);
  for (int c = 0; c < n; ++c) {
    ws[static_cast<std::size_t>(c)] = 0.002f + 0.0001f * static_cast<float>(c);
    bs[static_cast<std::size_t>(c)] = 0.01f * ws[static_cast<std::size_t>(c)];
  }
  m.initializer("ws", kFloat, {n}, ws);
  m.initializer("bq", kInt32, {n}, random_ints<std::int32_t>(n, -5000, 5000, 25));
  m.initializer("bs", kFloat, {n}, bs);
  m.initializer("bz", kInt32, {n}, std::vector<std::int32_t>(n, 0));
  m.node("QuantizeLinear", {"x", "xs", "xz"}, {"xq"});
  m.node("DequantizeLinear", {"xq", "xs", "xz"}, {"xd"});
  attr(m.node("DequantizeLinear", {"wq", "ws"}, {"wd"}), "axis", std::int64_t{0});
  attr(m.node("DequantizeLinear", {"bq", "bs", "bz"}, {"bd"}), "axis", std::int64_t{0});
  auto& gemm = m.node("Gemm", {"xd", "wd", "bd"}, {"y"}, "fc");
  attr(gemm, "transB", std::int64_t{1});
  m.output("y", kFloat);
  const graph::Graph g = import_bytes(m.bytes());
  EXPECT_EQ(count_nodes(g, graph::OpKind::FullyConnected), 1u);
  EXPECT_EQ(count_nodes(g, graph::OpKind::Add), 0u);
  const Tensor x = Tensor::from_vector<float>({2, k}, random_floats(2 * k, -1.0f, 1.0f, 26));
  std::vector<LayerInfo> layers;
  const Tensor unfused = run(g, false, "x", x, "y");
  const Tensor fused = run(g, true, "x", x, "y", &layers);
  std::size_t int8_layers = 0;
  for (const auto& l : layers) {
    int8_layers += is_int8_layer(l);
    EXPECT_NE(l.op, "Add") << l.node;
  }
  EXPECT_EQ(int8_layers, 1u);
  for (std::size_t i = 0; i < 2 * n; ++i) {
    EXPECT_NEAR(fused.data<float>()[i], unfused.data<float>()[i], 1e-4f) << i;
  }
}

// --- pre-quantized pattern -----------------------------------------------------------

// ConvInteger -> Add(int32 bias) -> Cast -> Mul(scale) -> Mul(2^-N) -> Relu
//   -> QuantizeLinear(1, 0) -> s8
struct PrequantizedConv {
  int c = 4, oc = 8, hw = 6;
  std::uint8_t x_zp = 7;
  float scale = 11.0f;
  float shift = 1.0f / 4096.0f;
  std::vector<std::int8_t> w = random_ints<std::int8_t>(oc * c * 9, -127, 127, 31);
  std::vector<std::int32_t> b = random_ints<std::int32_t>(oc, -3000, 3000, 32);

  Model model() const {
    Model m;
    m.input("x", kUint8, {1, c, hw, hw});
    m.initializer("w", kInt8, {oc, c, 3, 3}, w);
    m.initializer("xz", kUint8, {}, std::vector<std::uint8_t>{x_zp});
    m.initializer("b", kInt32, {1, oc, 1, 1}, b);
    m.initializer("scale", kFloat, {}, std::vector<float>{scale});
    m.initializer("shift", kFloat, {}, std::vector<float>{shift});
    m.initializer("one", kFloat, {}, std::vector<float>{1.0f});
    m.initializer("zero", kInt8, {}, std::vector<std::int8_t>{0});
    auto& conv = m.node("ConvInteger", {"x", "w", "xz"}, {"acc"}, "conv");
    attr(conv, "pads", Dims{1, 1, 1, 1});
    m.node("Add", {"acc", "b"}, {"biased"});
    auto& cast = m.node("Cast", {"biased"}, {"f"});
    attr(cast, "to", std::int64_t{kFloat});
    m.node("Mul", {"f", "scale"}, {"scaled"});
    m.node("Mul", {"scaled", "shift"}, {"shifted"});
    m.node("Relu", {"shifted"}, {"r"});
    m.node("QuantizeLinear", {"r", "one", "zero"}, {"y"});
    m.output("y", kInt8);
    return m;
  }

  // ONNX's arithmetic: exact int32, then f32 multiplies, round half to even, saturate.
  std::vector<std::int8_t> reference(const std::vector<std::uint8_t>& x) const {
    std::vector<double> xd(x.size()), wd(w.begin(), w.end()), bd(b.begin(), b.end());
    for (std::size_t i = 0; i < x.size(); ++i) xd[i] = x[i] - x_zp;
    const auto acc = conv3x3(xd, c, hw, hw, wd, oc, bd);
    std::vector<std::int8_t> y(acc.size());
    for (std::size_t i = 0; i < acc.size(); ++i) {
      float v = static_cast<float>(acc[i]) * scale * shift;
      v = std::max(v, 0.0f);
      y[i] = static_cast<std::int8_t>(std::clamp(std::nearbyint(v), -128.0f, 127.0f));
    }
    return y;
  }
};

TEST(OnnxPrequantized, ConvIntegerPatternIsExactUnfusedAndOneInt8LayerFused) {
  const PrequantizedConv p;
  const graph::Graph g = import_bytes(p.model().bytes());
  EXPECT_EQ(count_nodes(g, graph::OpKind::Convolution), 1u);
  EXPECT_EQ(count_nodes(g, graph::OpKind::Round), 0u);  // the final Convert rounds and saturates
  const auto xv = random_ints<std::uint8_t>(p.c * p.hw * p.hw, 0, 255, 33);
  const Tensor x = Tensor::from_vector<std::uint8_t>({1, p.c, p.hw, p.hw}, xv);
  const auto expected = p.reference(xv);

  const Tensor unfused = run(g, false, "x", x, "y");
  ASSERT_EQ(unfused.type(), ElementType::s8);
  for (std::size_t i = 0; i < expected.size(); ++i) {
    ASSERT_EQ(unfused.data<std::int8_t>()[i], expected[i]) << "element " << i;
  }
  std::vector<LayerInfo> layers;
  const Tensor fused = run(g, true, "x", x, "y", &layers);
  // scale * 2^-N = 11 / 4096 is exact in f32, so the int8 primitive computes
  // the very same products: no LSB may differ.
  for (std::size_t i = 0; i < expected.size(); ++i) {
    ASSERT_EQ(fused.data<std::int8_t>()[i], expected[i]) << "element " << i;
  }
  std::string got;
  for (const auto& l : layers) got += " " + l.op + "(" + l.implementation + ") " + l.post_ops;
  ASSERT_EQ(layers.size(), 1u) << got;
  EXPECT_TRUE(is_int8_layer(layers[0])) << got;
  // One output scale scale * 2^-N, the relu, and a saturating s8 destination.
  EXPECT_THAT(layers[0].post_ops, ::testing::HasSubstr("output_scales 0.0026855469")) << got;
  EXPECT_THAT(layers[0].post_ops, ::testing::HasSubstr("| s8")) << got;
}

// Import fails with a GraphError: its message, or a note that none came.
std::string graph_error_message(const Model& m) {
  try {
    import_bytes(m.bytes());
  } catch (const GraphError& e) {
    return e.what();
  }
  return "(no GraphError)";
}

// Zero, negative, NaN and infinite scales make no grid: the import names the
// node and the scale. (An infinite scale used to run and print NaN.)
TEST(OnnxErrors, NonPositiveOrNonFiniteScalesNameTheNode) {
  for (const float bad : {0.0f, -0.5f, std::numeric_limits<float>::quiet_NaN(),
                          std::numeric_limits<float>::infinity()}) {
    Model m;
    m.input("x", kFloat, {4});
    m.initializer("s", kFloat, {}, std::vector<float>{bad});
    m.initializer("zp", kUint8, {}, std::vector<std::uint8_t>{3});
    m.node("QuantizeLinear", {"x", "s", "zp"}, {"y"}, "input_quant");
    m.output("y", kUint8);
    const std::string msg = graph_error_message(m);
    EXPECT_THAT(msg, ::testing::HasSubstr("QuantizeLinear node 'input_quant'")) << bad;
    EXPECT_THAT(msg, ::testing::HasSubstr("expected a positive, finite f32")) << bad;
  }
}

// A pre-quantized model's scale is a Mul by a constant: NaN or infinity there
// is an error naming the node, not 127 everywhere (what a NaN scale gave).
TEST(OnnxErrors, NonFiniteScaleOfAPrequantizedLayerNamesTheNode) {
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(),
                          std::numeric_limits<float>::infinity()}) {
    PrequantizedConv p;
    p.scale = bad;
    const std::string msg = graph_error_message(p.model());
    EXPECT_THAT(msg, ::testing::HasSubstr("Multiply node")) << bad;
    EXPECT_THAT(msg, ::testing::HasSubstr("a factor must be finite")) << bad;
  }
}

// Denormal scales stay: exporters write them for weight channels that are all
// but zero (PP-OCRv4 rec has 2.5e-41); the result is as exact as any other.
TEST(OnnxQuantize, DenormalScaleImportsAndRuns) {
  Model m;
  m.input("x", kFloat, {3});
  m.initializer("s", kFloat, {}, std::vector<float>{2.5e-41f});
  m.initializer("zp", kUint8, {}, std::vector<std::uint8_t>{3});
  m.node("QuantizeLinear", {"x", "s", "zp"}, {"y"});
  m.output("y", kUint8);
  const graph::Graph g = import_bytes(m.bytes());
  for (bool fuse : {false, true}) {
    const Tensor y = run(g, fuse, "x", Tensor::from_vector<float>({3}, {0.0f, 1e-45f, -1.0f}), "y");
    EXPECT_EQ(y.data<std::uint8_t>()[0], 3) << fuse;
    EXPECT_EQ(y.data<std::uint8_t>()[1], onnx_quantize(1e-45f, 2.5e-41f, 3, 0, 255)) << fuse;
    EXPECT_EQ(y.data<std::uint8_t>()[2], 0) << fuse;
  }
}

TEST(OnnxPrequantized, MatMulIntegerPatternIsExactUnfusedAndOneInt8LayerFused) {
  const int k = 16, n = 6, rows = 3;
  const auto w = random_ints<std::int8_t>(k * n, -127, 127, 41);
  const auto b = random_ints<std::int32_t>(n, -500, 500, 42);
  Model m;
  m.input("x", kInt8, {rows, k});
  m.initializer("w", kInt8, {k, n}, w);
  m.initializer("b", kInt32, {n}, b);
  m.initializer("scale", kFloat, {}, std::vector<float>{0.0123f});
  m.initializer("one", kFloat, {}, std::vector<float>{1.0f});
  m.initializer("zero", kUint8, {}, std::vector<std::uint8_t>{0});
  m.node("MatMulInteger", {"x", "w"}, {"acc"}, "fc");
  m.node("Add", {"acc", "b"}, {"biased"});
  auto& cast = m.node("Cast", {"biased"}, {"f"});
  attr(cast, "to", std::int64_t{kFloat});
  m.node("Mul", {"f", "scale"}, {"scaled"});
  m.node("QuantizeLinear", {"scaled", "one", "zero"}, {"y"});
  m.output("y", kUint8);
  const graph::Graph g = import_bytes(m.bytes());
  EXPECT_EQ(count_nodes(g, graph::OpKind::FullyConnected), 1u);
  const auto xv = random_ints<std::int8_t>(rows * k, -128, 127, 43);
  const Tensor x = Tensor::from_vector<std::int8_t>({rows, k}, xv);
  for (bool fuse : {false, true}) {
    std::vector<LayerInfo> layers;
    const Tensor y = run(g, fuse, "x", x, "y", &layers);
    if (fuse) {
      std::string got;
      for (const auto& l : layers) got += " " + l.op + "(" + l.implementation + ") " + l.post_ops;
      ASSERT_EQ(layers.size(), 1u) << got;
      EXPECT_TRUE(is_int8_layer(layers[0])) << got;
      EXPECT_THAT(layers[0].post_ops, ::testing::HasSubstr("| u8")) << got;
    }
    for (int r = 0; r < rows; ++r) {
      for (int j = 0; j < n; ++j) {
        std::int64_t acc = b[static_cast<std::size_t>(j)];
        for (int i = 0; i < k; ++i) {
          acc += xv[static_cast<std::size_t>(r * k + i)] * w[static_cast<std::size_t>(i * n + j)];
        }
        const float v = static_cast<float>(acc) * 0.0123f;
        const int expected = static_cast<int>(std::clamp(std::nearbyint(v), 0.0f, 255.0f));
        const int got = y.data<std::uint8_t>()[static_cast<std::size_t>(r * n + j)];
        if (fuse) {
          EXPECT_LE(std::abs(got - expected), 1) << r << "," << j;
        } else {
          EXPECT_EQ(got, expected) << r << "," << j;
        }
      }
    }
  }
}

TEST(OnnxPrequantized, ConvIntegerAccumulatorBoundUsesTheWeights) {
  // 3x3x4 weights of +-127 on u8 input: K * 127 * 255 < 2^24, no warning, exact.
  const PrequantizedConv p;
  EXPECT_NO_THROW(import_bytes(p.model().bytes()));
}

}  // namespace
}  // namespace qfuse::onnx
