// The corpus of exporter-form QDQ models (tools/corpus/build_corpus.py):
// every Conv, ConvTranspose, Gemm and MatMul of each model runs as one int8
// primitive, no refusal names a layer, and the fused outputs match the
// unfused reference within 1 LSB of the output's quantum (>= 99% equal).
//
// Real networks (tools/corpus/ocr_models.py: <net>_f32, <net>_wq, <net>_qdq)
// end in an f32 softmax after dozens of quantized layers, where a one-step
// rounding difference early on moves later values by more than one step. For
// them the fused run is judged on the network's answer instead: the same
// argmax as the unfused run on every row, and no further from the float
// model's output (numpy's, written by the script) than the unfused run is.
// The float model itself must match numpy's output.

#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "graph/onnx/exporter.hpp"
#include "graph/onnx/importer.hpp"
#include "graph/openvino/importer.hpp"
#include <onnx/checker.h>
#include "tests/corpus/corpus_util.hpp"
#include "tools/common/models.hpp"
#include "tools/common/npy.hpp"
#include "graph/passes/pattern.hpp"
#include "graph/model_impl.hpp"
#include "plugin/api_internal.hpp"
#include "qfuse/compare.hpp"

namespace qfuse {
namespace {

namespace fs = std::filesystem;
using corpus::argmax_rows;
using corpus::quantum_of;
using corpus::real_network;

fs::path model_path(const std::string& name) {
  return fs::path(QFUSE_CORPUS_DIR) / (name + ".onnx");
}

// Conv, ConvTranspose, Gemm and MatMul nodes of the ONNX file whose data
// input is quantized in the file: a DequantizeLinear output, possibly behind
// Flatten / Reshape / Transpose / Squeeze / Unsqueeze (which keep its grid);
// and the QOperator format's QLinearConv, QLinearMatMul and QGemm.
// Counted from the file itself, not from qfuse's import.
int onnx_quantized_layer_count(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  ::onnx::ModelProto m;
  EXPECT_TRUE(m.ParseFromIstream(&in)) << path;
  std::map<std::string, const ::onnx::NodeProto*> producer;
  for (const auto& node : m.graph().node()) {
    for (const auto& out : node.output()) producer[out] = &node;
  }
  const auto quantized = [&producer](std::string v) {
    while (true) {
      const auto it = producer.find(v);
      if (it == producer.end()) return false;
      const std::string& op = it->second->op_type();
      // ONNX's dequantize, or NNCF's quantizer (org.openvinotoolkit).
      if (op == "DequantizeLinear" || op == "FakeQuantize") return true;
      if (op != "Flatten" && op != "Reshape" && op != "Transpose" && op != "Squeeze" &&
          op != "Unsqueeze" && op != "Slice" && op != "MaxPool") {
        return false;
      }
      v = it->second->input(0);
    }
  };
  int n = 0;
  for (const auto& node : m.graph().node()) {
    const std::string& op = node.op_type();
    const bool layer = op == "Conv" || op == "ConvTranspose" || op == "Gemm" || op == "MatMul";
    // ONNX Runtime's QOperator layers read codes by definition.
    const bool qoperator = op == "QLinearConv" || op == "QLinearMatMul" || op == "QGemm";
    n += (layer && quantized(node.input(0))) || qoperator;
  }
  return n;
}

// The file's layers an executed op stands for: an Attention is attention's
// two matmuls.
int file_layers(const std::string& op) { return op == "Attention" ? 2 : 1; }

bool is_layer_op(const std::string& op) {
  if (op == "Attention") return true;
  for (const char* l : {"Convolution", "Deconvolution", "FullyConnected", "MatMul"}) {
    if (op == l || op == std::string("Quantized") + l) return true;
  }
  return false;
}

Tensor npy(const std::string& file) { return tools::read_npy(fs::path(QFUSE_CORPUS_DIR) / file); }

Tensor run_on(const CompiledModel& m, const Tensor& x) {
  InferRequest r = m.create_infer_request();
  r.set_input(m.input_names().at(0), x);
  r.infer();
  return r.output(m.output_names().at(0));
}

double mean_abs_diff(const Tensor& a, const Tensor& b) {
  double s = 0.0;
  for (std::int64_t i = 0; i < a.size(); ++i) s += std::abs(double(a.as_float(i)) - b.as_float(i));
  return s / static_cast<double>(a.size());
}

void expect_same_answer(const CompiledModel& fused, const CompiledModel& unfused,
                        const std::string& net) {
  const Tensor x = npy(net + "_f32.input.npy");
  const Tensor ref = npy(net + "_f32.output.npy");
  const Tensor f = run_on(fused, x);
  const Tensor u = run_on(unfused, x);
  ASSERT_EQ(f.shape(), ref.shape());
  if (corpus::is_probability_map(u)) {
    // A detector: its text mask. Near-tie flips spread through 60 layers to
    // scattered edge pixels; DBNet's boxes (mask dilated, contours) do not
    // move for 0.5% of them.
    const double differ = corpus::mask_disagreement(f, u);
    std::cout << "text mask: fused vs unfused differ on " << 100.0 * differ
              << "% of pixels, unfused vs the float model on "
              << 100.0 * corpus::mask_disagreement(u, ref) << "%\n";
    EXPECT_LE(differ, 0.005) << "fused and unfused text masks differ";
  } else {
    EXPECT_EQ(argmax_rows(f), argmax_rows(u)) << "fused and unfused disagree on a row's class";
  }
  const double ef = mean_abs_diff(f, ref), eu = mean_abs_diff(u, ref);
  EXPECT_LE(ef, 1.5 * eu + 1e-6) << "fused is further from the float model (mean |diff| " << ef
                                 << ") than unfused (" << eu << ")";
}

// The corpus's criteria for an imported model `model`: every layer with a
// quantized input int8 (`expected_int8` of them) or refused with a reason,
// each fused layer within one code of the unfused path fed the same values,
// and the outputs within one step end to end.
void expect_int8_and_within_one_lsb(const graph::Graph& g, int expected_int8,
                                    const std::string& model) {
  const CompiledModel fused = compile(g, {.fuse = true});
  const CompiledModel unfused = compile(g, {.fuse = false});

  // Every layer with a quantized input is int8; one left in f32 must have a
  // recorded refusal that says why.
  int int8_layers = 0;
  for (const LayerInfo& l : fused.layers()) {
    // No op on oneDNN's reference kernels or im2col gemm (qfuse dump
    // --summary's "slow kernels"): each runs on a jit / brgemm kernel (the
    // detector's 2x2 / 2 f32 upsampling as a 1x1 convolution and a pixel
    // shuffle).
    const std::string& impl = l.implementation;
    EXPECT_TRUE(impl.find("gemm:jit") == std::string::npos && impl.rfind("ref:", 0) != 0 &&
                impl.rfind("ref_", 0) != 0)
        << l.node << " [" << l.op << "] " << impl;
    if (!is_layer_op(l.op)) continue;
    if (l.precision == "int8") {
      int8_layers += file_layers(l.op);
      EXPECT_EQ(l.implementation.find("ref"), std::string::npos) << l.node << ": " << l.implementation;
      continue;
    }
    const auto& refusals = fused.refusals();
    const bool explained = std::any_of(refusals.begin(), refusals.end(),
                                       [&l](const FusionRefusal& r) { return r.node == l.node; });
    EXPECT_TRUE(explained) << l.node << " [" << l.op << "] stayed " << l.precision
                           << " with no refusal naming it";
  }
  EXPECT_EQ(int8_layers, expected_int8)
      << "int8 layers against the file's layers with a quantized input";

  // Each fused layer fed the unfused path's own values (qfuse compare's
  // isolated figures): within one code of it, and nearly always equal.
  {
    Comparison cmp(make_model(g));
    std::map<std::string, Tensor> inputs;
    const std::string net = real_network(model);
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (const TensorInfo& in : unfused.inputs()) {
      Tensor x(ElementType::f32, in.shape);
      for (float& v : x.data<float>()) v = dist(rng);
      inputs[in.name] = net.empty() ? x : npy(net + "_f32.input.npy");
    }
    cmp.run(inputs);
    for (const TensorDiff& t : cmp.tensors()) {
      if (!t.quantized) continue;
      EXPECT_LE(t.isolated.max_lsb, 1.01) << t.name << " written by " << t.node << " (isolated)";
      // An average pool that keeps its input's grid (PyTorch's) lands exactly
      // on a tie whenever the codes' sum is an odd multiple of half the
      // window (1 in H*W channels): the fused pool rounds the exact mean,
      // the f32 reference breaks the tie by its own summation rounding. Those
      // stay within one step (above) but need not be equal.
      // (The pool's codes may reach the tensor through a Reshape: torch's
      // x.mean([2, 3]) -> flatten.)
      const bool pooled = [&] {
        const graph::Graph& fg = compiled_graph(fused);
        auto v = fg.find_value(t.name);
        while (v && fg.value(*v).producer.valid()) {
          const graph::Node& p = fg.node(fg.value(*v).producer);
          if (p.kind == graph::OpKind::AvgPool) return true;
          if (!graph::pattern::moves_data(p)) return false;
          v = p.inputs[0];
        }
        return false;
      }();
      if (pooled) continue;
      // One near-tie flip is allowed in a small tensor.
      const double unequal =
          (1.0 - t.isolated.equal_share) * static_cast<double>(t.isolated.elements);
      EXPECT_TRUE(t.isolated.equal_share >= 0.999 || unequal < 1.5)
          << t.name << " written by " << t.node << " (isolated): " << unequal << " of "
          << t.isolated.elements << " differ";
    }
  }

  if (const std::string net = real_network(model); !net.empty()) {
    expect_same_answer(fused, unfused, net);
    return;
  }
  InferRequest rf = fused.create_infer_request();
  InferRequest ru = unfused.create_infer_request();
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (const std::string& name : unfused.input_names()) {
    Tensor& x = ru.input(name);
    for (float& v : x.data<float>()) v = dist(rng);
    rf.set_input(name, x);
  }
  rf.infer();
  ru.infer();
  for (const std::string& name : unfused.output_names()) {
    const Tensor& a = rf.output(name);
    const Tensor& b = ru.output(name);
    ASSERT_EQ(a.shape(), b.shape()) << name;
    graph::ValueId out;
    for (graph::ValueId v : compiled_graph(unfused).outputs()) {
      if (compiled_graph(unfused).value(v).name == name) out = v;
    }
    const auto quantum = quantum_of(compiled_graph(unfused), out);
    const Shape& s = b.shape();
    const std::int64_t inner = s.size() > 2 ? element_count(Shape(s.begin() + 2, s.end())) : 1;
    const std::int64_t channels = s.size() > 1 ? s[1] : 1;
    // An output with no grid (an f32 layer output) is judged relative to its
    // largest magnitude: 1e-5 of it counts as equal, more than 1e-4 as over.
    double ref_max = 0.0;
    for (std::int64_t i = 0; i < b.size(); ++i) ref_max = std::max(ref_max, std::abs(double(b.as_float(i))));
    std::int64_t equal = 0, over = 0;
    double worst = 0.0;
    for (std::int64_t i = 0; i < b.size(); ++i) {
      const double e = std::abs(static_cast<double>(a.as_float(i)) - b.as_float(i));
      double lsb;
      if (quantum) {
        const auto c = static_cast<std::size_t>((i / inner) % channels);
        lsb = e / (*quantum)[std::min(c, quantum->size() - 1)];
      } else {
        lsb = e / std::max(1e-30, 1e-4 * ref_max);
        lsb = lsb <= 0.1 ? 0.0 : lsb;
      }
      worst = std::max(worst, lsb);
      equal += lsb < 0.01;
      over += lsb > 1.01;
    }
    // End to end, a near-tie flip in one layer spreads through the layers
    // after it, so equality here proves nothing either way (the isolated
    // figures above are the per-layer criterion); the outputs must stay
    // within one step, and how many are equal is reported.
    std::cout << "  " << model << " output " << name << ": " << equal << " of " << b.size()
              << " equal, " << over << " over 1 LSB (max " << worst << ")\n";
    if (corpus::deep_detector(model)) {
      double dot = 0.0, aa = 0.0, bb = 0.0;
      for (std::int64_t i = 0; i < b.size(); ++i) {
        dot += double(a.as_float(i)) * b.as_float(i);
        aa += double(a.as_float(i)) * a.as_float(i);
        bb += double(b.as_float(i)) * b.as_float(i);
      }
      const double cosine = dot / std::sqrt(aa * bb);
      std::cout << "  cosine " << cosine << "\n";
      EXPECT_GE(cosine, 0.9999) << name;
      EXPECT_LE(static_cast<double>(over), 0.1 * static_cast<double>(b.size())) << name;
      continue;
    }
    EXPECT_EQ(over, 0) << name << ": " << over << " elements over 1 LSB (max " << worst << ")";
  }
}

class Corpus : public ::testing::TestWithParam<std::string> {};

TEST_P(Corpus, EveryLayerIsInt8AndFusedMatchesUnfusedWithinOneLsb) {
  const fs::path path = model_path(GetParam());
  expect_int8_and_within_one_lsb(onnx::import_file(path), onnx_quantized_layer_count(path),
                                 GetParam());
}

// Weights the file quantizes itself (QuantizeLinear on an f32 initializer,
// then DequantizeLinear: PyTorch's export) get ONNX's codes, as numpy computes
// them in float32 (tools/corpus/onnx_codes.py, <model>.weight_codes/): the
// fused layers' s8 weights equal the codes, and the unfused runtime's
// DequantizeLinear output equals numpy's bit for bit. A model whose file
// quantizes no weights has no such directory.
std::vector<std::string> weight_code_models() {
  std::vector<std::string> names;
  for (const std::string& m : corpus::models()) {
    if (fs::is_directory(fs::path(QFUSE_CORPUS_DIR) / (m + ".weight_codes"))) names.push_back(m);
  }
  return names;
}

TEST(CorpusWeightCodes, EveryPyTorchExportHasThem) {
  const std::vector<std::string> with = weight_code_models();
  int torch_exports = 0;
  for (const std::string& m : corpus::models()) {
    if (m.rfind("torch_qat_", 0) != 0) continue;
    ++torch_exports;
    EXPECT_NE(std::find(with.begin(), with.end(), m), with.end()) << m;
  }
  EXPECT_GE(torch_exports, 4);
}

class CorpusWeights : public ::testing::TestWithParam<std::string> {};

TEST_P(CorpusWeights, QuantizeToOnnxsCodes) {
  const fs::path dir = fs::path(QFUSE_CORPUS_DIR) / (GetParam() + ".weight_codes");
  struct Entry {
    std::string key, initializer, dq_output;
  };
  std::vector<Entry> entries;
  std::ifstream index(dir / "index.tsv");
  for (Entry e; std::getline(index, e.key, '\t') && std::getline(index, e.initializer, '\t') &&
                std::getline(index, e.dq_output);) {
    entries.push_back(e);
  }
  ASSERT_FALSE(entries.empty());
  const graph::Graph g = onnx::import_file(model_path(GetParam()));

  // The imported value of each DequantizeLinear output (a Dequantize of a
  // Quantize of the f32 weights).
  const auto imported = [&g](const Entry& e) {
    const auto alias = g.tensor_aliases().find(e.dq_output);
    return alias == g.tensor_aliases().end() ? e.dq_output : alias->second;
  };
  // Fused: the s8 weights quantize_weights made from the Quantize's f32
  // constant ("<constant>.s8").
  const CompiledModel fused = compile(g, {.fuse = true});
  const graph::Graph& fg = compiled_graph(fused);
  std::size_t checked = 0;
  for (const Entry& e : entries) {
    const Tensor codes = tools::read_npy(dir / (e.key + ".codes.npy"));
    const auto fq_out = g.find_value(imported(e));
    ASSERT_TRUE(fq_out.has_value()) << e.dq_output;
    const graph::Node* dq = graph::pattern::producer_of(g, *fq_out, graph::OpKind::Dequantize);
    ASSERT_NE(dq, nullptr) << e.dq_output << " is not imported as a Dequantize";
    const graph::Node* q = graph::pattern::producer_of(g, dq->inputs[0], graph::OpKind::Quantize);
    ASSERT_NE(q, nullptr) << e.dq_output << " does not dequantize a Quantize";
    const auto id = fg.find_value(g.value(q->inputs[0]).name + ".s8");
    ASSERT_TRUE(id.has_value()) << e.initializer << " is not an int8 layer's weights";
    const graph::Value& w = fg.value(*id);
    ASSERT_TRUE(w.is_constant() && w.type == ElementType::s8) << e.initializer;
    ASSERT_EQ(w.constant->size(), codes.size()) << e.initializer;
    for (std::int64_t i = 0; i < codes.size(); ++i) {
      ASSERT_EQ(w.constant->as_float(i), codes.as_float(i)) << e.initializer << " weight " << i;
    }
    checked += static_cast<std::size_t>(codes.size());
  }

  // Unfused: DequantizeLinear's outputs, observed during one inference.
  const CompiledModel unfused = compile(g, {.fuse = false});
  InferRequest r = unfused.create_infer_request();
  std::map<std::string, const Entry*> by_value;
  for (const Entry& e : entries) by_value[imported(e)] = &e;
  std::size_t seen = 0;
  r.set_value_observer([&](const std::string& name, const Tensor& v) {
    const auto it = by_value.find(name);
    if (it == by_value.end()) return;
    ++seen;
    const Tensor dq = tools::read_npy(dir / (it->second->key + ".dq.npy"));
    ASSERT_EQ(v.size(), dq.size()) << name;
    for (std::int64_t i = 0; i < dq.size(); ++i) {
      ASSERT_EQ(v.as_float(i), dq.as_float(i)) << it->second->dq_output << " element " << i;
    }
  });
  r.infer();
  EXPECT_EQ(seen, entries.size());
  EXPECT_GT(checked, 0u);
}

INSTANTIATE_TEST_SUITE_P(Exporters, CorpusWeights, ::testing::ValuesIn(weight_code_models()),
                         [](const auto& p) { return p.param; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(CorpusWeights);

INSTANTIATE_TEST_SUITE_P(Exporters, Corpus, ::testing::ValuesIn(corpus::models()),
                         [](const auto& p) { return p.param; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Corpus);

// The integer-only mode (CompileOptions::integer_only) against the
// float-scale fused path. Every fused layer runs in integer arithmetic unless
// its post-ops have no integer form (a transcendental or leaky activation, a
// binary op reading a tensor), which LayerInfo::integer must then say. The
// small models' outputs on random inputs: within 1 LSB of the float-scale
// outputs, at least 99% equal (an f32 output: cosine >= 0.99999); the real
// networks: the same class on every row (a detector: the same text mask but
// for 0.5% of its pixels), and as close to the float model.
TEST_P(Corpus, IntegerOnlyMatchesFloatScales) {
  const graph::Graph g = onnx::import_file(model_path(GetParam()));
  CompileOptions int_options;
  int_options.integer_only = true;
  const Model model = make_model(g);
  Comparison cmp(model, int_options, CompileOptions{});
  int integer_layers = 0, float_layers = 0;
  for (const LayerInfo& l : cmp.fused().layers()) {
    if (l.op.starts_with("Quantized")) {
      ASSERT_FALSE(l.integer.empty()) << l.node << " says nothing of its integer form";
    }
    if (l.integer == "integer") {
      ++integer_layers;
    } else if (!l.integer.empty()) {
      ++float_layers;
      EXPECT_TRUE(l.integer.find("has no integer form") != std::string::npos ||
                  l.integer.find("leaky relu") != std::string::npos ||
                  l.integer.find("reads a tensor at execution") != std::string::npos ||
                  l.integer.find("the residual is f32") != std::string::npos)
          << l.node << ": " << l.integer;
    }
  }
  std::cout << GetParam() << ": " << integer_layers << " integer, " << float_layers
            << " float-scale layers\n";
  if (const std::string net = real_network(GetParam()); !net.empty()) {
    const Tensor x = npy(net + "_f32.input.npy");
    const Tensor ref = npy(net + "_f32.output.npy");
    const Tensor yi = run_on(cmp.fused(), x);
    const Tensor yf = run_on(cmp.unfused(), x);
    if (corpus::is_probability_map(yf)) {
      const double differ = corpus::mask_disagreement(yi, yf);
      std::cout << "text mask: integer-only vs float scales differ on " << 100.0 * differ
                << "% of pixels\n";
      EXPECT_LE(differ, 0.005) << "integer-only changes the text mask";
    } else {
      EXPECT_EQ(argmax_rows(yi), argmax_rows(yf)) << "integer-only changes a row's class";
    }
    const double ei = mean_abs_diff(yi, ref), ef = mean_abs_diff(yf, ref);
    std::cout << "  mean |diff| from the float model: integer-only " << ei << ", float scales " << ef
              << "\n";
    EXPECT_LE(ei, 1.5 * ef + 1e-6);
    return;
  }
  std::map<std::string, Tensor> inputs;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (const TensorInfo& in : cmp.unfused().inputs()) {
    Tensor x(ElementType::f32, in.shape);
    for (float& v : x.data<float>()) v = dist(rng);
    inputs[in.name] = x;
  }
  cmp.run(inputs);
  // Each layer on its own (fed the float-scale path's values): within one
  // code, and mostly equal. End to end, one-code differences spread through
  // a deep network, so the outputs are judged on their cosine: MobileNetV3-
  // small's ten logits of one random input, after one tie that the integer
  // multipliers round the other way in its second block (1 of 16384 codes,
  // isolated), agree to a cosine of 0.9998.
  for (const TensorDiff& t : cmp.tensors()) {
    if (t.graph_output) {
      std::cout << "  " << t.name << ": max " << (t.quantized ? t.max_lsb : t.max_abs)
                << (t.quantized ? " LSB" : "") << ", " << 100.0 * t.equal_share
                << "% equal, cosine " << t.cosine << "; isolated max " << t.isolated.max_lsb
                << ", " << 100.0 * t.isolated.equal_share << "% equal\n";
      EXPECT_GE(t.cosine, 0.9997) << t.name;
    }
    if (!t.quantized) continue;
    EXPECT_LE(t.isolated.max_lsb, 1.01) << t.name << " (isolated)";
    EXPECT_GE(t.isolated.equal_share, 0.99) << t.name << " (isolated)";
  }
}

// qfuse export-prequantized on every corpus model: the models whose layers
// all have an integer form are written (the others refused with an error
// naming the node); the file passes ONNX's checker; read back, each exported
// layer is one int8 primitive with nothing left of its integer chain outside
// it; the export run in integer-only mode gives the original's integer-only
// outputs bit for bit, and run with float scales stays within 1 LSB of them
// (>= 99% equal).
TEST_P(Corpus, PrequantizedExportRoundTrip) {
  const std::set<std::string> exportable = {
      "conv_f32_bias_per_tensor", "conv_int32_bias_u8", "conv_s8_no_weight_zp", "gap_classifier",
      "matmul_transpose",         "mlp_gemm",           "residual_block",       "torch_style_params",
      "qop_resnet"};
  const graph::Graph g = onnx::import_file(model_path(GetParam()));
  CompileOptions int_options;
  int_options.integer_only = true;
  const CompiledModel original = compile(g, int_options);
  const fs::path out = fs::path(::testing::TempDir()) / (GetParam() + "_prequantized.onnx");
  onnx::ExportReport report;
  try {
    report = onnx::export_prequantized(
        compiled_graph(original), [&](const graph::Node& n) { return integer_plan(original, n); },
        out.string());
  } catch (const UnsupportedError& e) {
    EXPECT_EQ(exportable.count(GetParam()), 0u) << e.what();
    EXPECT_NE(std::string(e.what()).find(" node '"), std::string::npos) << e.what();
    std::cout << "not exported: " << e.what() << "\n";
    return;
  }
  EXPECT_EQ(exportable.count(GetParam()), 1u) << "exported a model outside the expected set";
  EXPECT_NO_THROW(::onnx::checker::check_model(out.string()));

  const graph::Graph back = onnx::import_file(out);
  const CompiledModel back_int = compile(back, int_options);
  const CompiledModel back_float = compile(back, {});
  int layers = 0;
  for (const LayerInfo& l : back_float.layers()) {
    if (is_layer_op(l.op)) {
      layers += file_layers(l.op);
      EXPECT_EQ(l.precision, "int8") << l.node;
    }
    // The exporter names a layer's chain "<layer>/stage<k>/..." and its
    // dequantization "<layer>/scale", "<layer>/shift": none may run alone.
    for (const char* part : {"/stage", "/scale", "/shift", "/residual"}) {
      EXPECT_EQ(l.node.find(part), std::string::npos)
          << l.node << " [" << l.op << "]: part of a layer's integer chain ran on its own";
    }
  }
  EXPECT_EQ(layers, report.layers);
  std::cout << GetParam() << ": " << report.layers << " layers exported and read back as "
            << layers << " int8 primitives\n";

  InferRequest r_orig = original.create_infer_request();
  InferRequest r_int = back_int.create_infer_request();
  InferRequest r_float = back_float.create_infer_request();
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (const TensorInfo& in : original.inputs()) {
    Tensor x(ElementType::f32, in.shape);
    for (float& v : x.data<float>()) v = dist(rng);
    r_orig.set_input(in.name, x);
    r_int.set_input(in.name, x);
    r_float.set_input(in.name, x);
  }
  r_orig.infer();
  r_int.infer();
  r_float.infer();
  const CompiledModel unfused = compile(g, {.fuse = false});
  const graph::Graph& ug = compiled_graph(unfused);
  for (const TensorInfo& o : original.outputs()) {
    const Tensor& a = r_orig.output(o.name);
    const Tensor& b = r_int.output(o.name);
    const Tensor& c = r_float.output(o.name);
    ASSERT_EQ(a.shape(), b.shape());
    std::int64_t same = 0, equal = 0;
    double worst = 0.0;
    std::optional<std::vector<float>> quantum;
    for (graph::ValueId v : ug.outputs()) {
      if (ug.value(v).name == o.name) quantum = quantum_of(ug, v);
    }
    const Shape& s = a.shape();
    const std::int64_t inner = s.size() > 2 ? element_count(Shape(s.begin() + 2, s.end())) : 1;
    const std::int64_t channels = s.size() > 1 ? s[1] : 1;
    for (std::int64_t i = 0; i < a.size(); ++i) {
      same += a.as_float(i) == b.as_float(i);
      const double e = std::abs(static_cast<double>(a.as_float(i)) - c.as_float(i));
      double q = 1e-4 * std::max(1e-30, static_cast<double>(std::abs(a.as_float(i))));
      if (quantum) q = (*quantum)[std::min(static_cast<std::size_t>((i / inner) % channels), quantum->size() - 1)];
      worst = std::max(worst, e / q);
      equal += e / q < 0.01;
    }
    std::cout << "  " << o.name << ": integer-only export = original on " << same << " of "
              << a.size() << "; float scales max " << worst << " LSB, " << equal << " equal\n";
    EXPECT_EQ(same, a.size()) << o.name;
    if (quantum) {
      EXPECT_LE(worst, 1.01) << o.name;
      EXPECT_GE(static_cast<double>(equal), 0.99 * static_cast<double>(a.size())) << o.name;
    }
  }
}

// The float real networks run by qfuse (their Slice, ReduceMean, Pow,
// Softmax, MatMul, ...) against the numpy interpreter of ocr_models.py.
class RealNetworkF32 : public ::testing::TestWithParam<std::string> {};

TEST_P(RealNetworkF32, MatchesTheNumpyInterpreter) {
  const std::string net = GetParam();
  const Tensor x = npy(net + "_f32.input.npy");
  const Tensor ref = npy(net + "_f32.output.npy");
  const graph::Graph g = onnx::import_file(model_path(net + "_f32"));
  for (bool fuse : {false, true}) {
    const Tensor y = run_on(compile(g, {.fuse = fuse}), x);
    ASSERT_EQ(y.shape(), ref.shape());
    double worst = 0.0;
    for (std::int64_t i = 0; i < y.size(); ++i) {
      worst = std::max(worst, std::abs(double(y.as_float(i)) - ref.as_float(i)));
    }
    if (corpus::is_probability_map(ref)) {
      // The detector's 60 f32 layers before its sigmoid (float64 reference):
      // 2.6e-5 measured unfused.
      EXPECT_LE(worst, 1e-4) << (fuse ? "fused" : "unfused");
      EXPECT_LE(corpus::mask_disagreement(y, ref), 1e-4) << (fuse ? "fused" : "unfused");
    } else {
      EXPECT_LE(worst, 1e-5) << (fuse ? "fused" : "unfused");
      EXPECT_EQ(argmax_rows(y), argmax_rows(ref));
    }
  }
}

std::vector<std::string> real_networks() {
  std::vector<std::string> nets;
  for (const std::string& m : corpus::models()) {
    if (m.size() > 4 && m.compare(m.size() - 4, 4, "_f32") == 0 && !real_network(m).empty()) {
      nets.push_back(real_network(m));
    }
  }
  return nets;
}

INSTANTIATE_TEST_SUITE_P(Ocr, RealNetworkF32, ::testing::ValuesIn(real_networks()),
                         [](const auto& p) { return p.param; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(RealNetworkF32);

}  // namespace
}  // namespace qfuse

namespace qfuse {
namespace {

// The BERT-like encoders (tools/corpus/transformers.py, build/corpus/
// transformers/) in their float, static QDQ and dynamic forms: LayerNorm
// spelled out (opset 13) or LayerNormalization (opset 17).
std::vector<std::string> encoder_models() {
  std::vector<std::string> names;
  const fs::path dir = fs::path(QFUSE_CORPUS_DIR) / "transformers";
  if (!fs::is_directory(dir)) return names;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string stem = e.path().stem().string();
    if (e.path().extension() == ".onnx" &&
        (stem.ends_with("_f32") || stem.ends_with("_qdq") || stem.ends_with("_dyn"))) {
      names.push_back(stem);
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

class Encoder : public ::testing::TestWithParam<std::string> {};

// Token ids and a padded mask in, logits out: the float model against the
// numpy interpreter's logits; the QDQ model's MatMuls (weights and attention's
// two activation-by-activation ones) and the head run int8, and each fused
// layer fed the unfused path's values is within one code of it. The dynamic model's 12 MatMulInteger chains run as int8 layers
// whose f32 outputs, fed the unfused path's codes, equal its values bit for
// bit, and so do the codes of every DynamicQuantizeLinear and of the
// quantized embedding tables' Gathers; its logits stay within quantization
// noise of the float model's.
TEST_P(Encoder, ImportsRunsAndFusesTheWeightMatMuls) {
  const fs::path dir = fs::path(QFUSE_CORPUS_DIR) / "transformers";
  const std::string name = GetParam();
  const graph::Graph g = onnx::import_file(dir / (name + ".onnx"));
  std::map<std::string, Tensor> inputs;
  for (const char* in : {"input_ids", "attention_mask"}) {
    inputs[in] = tools::read_npy(dir / (name + "." + in + ".npy"));
  }
  const CompiledModel fused = compile(g, {.fuse = true});
  const CompiledModel unfused = compile(g, {.fuse = false});
  const auto logits = [&inputs](const CompiledModel& m) {
    InferRequest r = m.create_infer_request();
    for (const auto& [k, v] : inputs) r.set_input(k, v);
    r.infer();
    return r.output("logits");
  };
  if (name.ends_with("_f32")) {
    const Tensor ref = tools::read_npy(dir / (name + ".logits.npy"));
    for (const CompiledModel* m : {&fused, &unfused}) {
      const Tensor y = logits(*m);
      ASSERT_EQ(y.shape(), ref.shape());
      for (std::int64_t i = 0; i < y.size(); ++i) {
        EXPECT_NEAR(y.as_float(i), ref.as_float(i), 1e-5) << i;
      }
    }
    return;
  }
  int int8 = 0;  // layers running as one int8 primitive
  for (const LayerInfo& l : fused.layers()) {
    int8 += l.op.starts_with("Quantized") || (l.op == "Attention" && l.precision == "int8") ? file_layers(l.op) : 0;
  }
  if (name.ends_with("_dyn")) {
    EXPECT_EQ(int8, 12);  // quantize_dynamic leaves attention's MatMuls and the Gemm float
    Comparison cmp(make_model(g));
    cmp.run(inputs);
    std::set<std::string> layers;
    for (const LayerInfo& l : fused.layers()) {
      if (l.precision == "int8") layers.insert(l.node);
    }
    int codes = 0, outputs = 0;
    for (const TensorDiff& t : cmp.tensors()) {
      if (t.quantized) {
        ++codes;
        EXPECT_EQ(t.isolated.equal_share, 1.0) << t.name << " (isolated)";
      } else if (layers.count(t.node) != 0) {
        ++outputs;
        EXPECT_EQ(t.isolated.equal_share, 1.0) << t.name << " (isolated)";
      }
    }
    // Codes and zero point of the 8 DynamicQuantizeLinear (one per
    // MatMulInteger input), and the two embedding Gathers' codes.
    EXPECT_EQ(codes, 18);
    EXPECT_EQ(outputs, 12);
    const std::string f32_name = name.substr(0, name.size() - 4) + "_f32";
    const Tensor ref = tools::read_npy(dir / (f32_name + ".logits.npy"));
    const Tensor y = logits(fused);
    for (std::int64_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y.as_float(i), ref.as_float(i), 0.05) << i;
    return;
  }
  // 2 layers x (q, k, v, o, ff1, ff2, Q x K^T, P x V) and the head.
  EXPECT_EQ(int8, 17);
  Comparison cmp(make_model(g));
  cmp.run(inputs);
  int compared = 0;
  for (const TensorDiff& t : cmp.tensors()) {
    if (!t.quantized) continue;
    ++compared;
    EXPECT_LE(t.isolated.max_lsb, 1.01) << t.name << " (isolated)";
    EXPECT_GE(t.isolated.equal_share, 0.999) << t.name << " (isolated)";
  }
  // The first LayerNorm's codes; per layer Q, K^T, V, the attention output
  // and the three LayerNorm / GELU codes the next layers read (the Softmax's
  // codes stay inside the Attention op).
  EXPECT_GE(compared, 15);
}

INSTANTIATE_TEST_SUITE_P(Transformers, Encoder, ::testing::ValuesIn(encoder_models()),
                         [](const auto& p) { return p.param; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Encoder);

// NNCF's FakeQuantize export (tools/corpus/nncf_models.py) run unfused against
// numpy's run of the same network in float64 with the seed's FakeQuantize
// written there: an independent reference for the ranges formula. The f32
// convolutions sum in another order than numpy's, so a value within rounding
// of a level boundary could take the neighbouring level and the layers after
// it carry that on; measured, every output equals numpy's to float precision.
class NncfReference : public ::testing::TestWithParam<std::string> {};

// The unfused run of `g` on numpy's input against numpy's output (files
// <m><suffix>.input.npy / .output.npy): 99% within 1e-5 of the output's
// range, none off by more than 1% of it.
void expect_unfused_matches_numpy(const graph::Graph& g, const std::string& m,
                                  const std::string& suffix) {
  const Tensor x = npy(m + suffix + ".input.npy");
  const Tensor ref = npy(m + suffix + ".output.npy");
  const Tensor y = run_on(compile(g, {.fuse = false}), x);
  ASSERT_EQ(y.shape(), ref.shape());
  double range = 0.0;
  for (std::int64_t i = 0; i < ref.size(); ++i) {
    range = std::max(range, std::abs(double(ref.as_float(i))));
  }
  std::int64_t close = 0;
  double worst = 0.0;
  for (std::int64_t i = 0; i < y.size(); ++i) {
    const double e = std::abs(double(y.as_float(i)) - ref.as_float(i));
    worst = std::max(worst, e);
    close += e <= 1e-5 * range;
  }
  std::cout << "  " << m << ": " << close << " of " << y.size() << " within 1e-5 of the range "
            << range << ", worst " << worst << "\n";
  EXPECT_GE(static_cast<double>(close), 0.99 * static_cast<double>(y.size()));
  EXPECT_LE(worst, 0.01 * range);
}

TEST_P(NncfReference, UnfusedMatchesNumpysSeedFormula) {
  expect_unfused_matches_numpy(onnx::import_file(model_path(GetParam())), GetParam(), ".nncf");
}

// qfuse export's plain ONNX twin of an NNCF model: no org.openvinotoolkit
// node is left, the weights are DequantizeLinear of s8 initializers and the
// activations QuantizeLinear -> DequantizeLinear; read back, it meets the
// same numpy reference, and its layers run int8 but for the classifier
// (exported as MatMul of a Transpose of the weights, which no pass takes).
TEST_P(NncfReference, PlainQdqExportMeetsTheReference) {
  const std::string m = GetParam();
  const CompiledModel original = compile(onnx::import_file(model_path(m)), {.fuse = false});
  const fs::path out = fs::path(::testing::TempDir()) / (m + "_plain.onnx");
  (void)onnx::export_prequantized(compiled_graph(original), onnx::ExportSource{}, out.string());
  std::ifstream in(out, std::ios::binary);
  ::onnx::ModelProto proto;
  ASSERT_TRUE(proto.ParseFromIstream(&in));
  int dequantized_weights = 0;
  std::set<std::string> s8_initializers;
  for (const auto& t : proto.graph().initializer()) {
    if (t.data_type() == ::onnx::TensorProto::INT8 && t.dims_size() == 4) s8_initializers.insert(t.name());
  }
  for (const auto& node : proto.graph().node()) {
    EXPECT_TRUE(node.domain().empty()) << node.name() << " in domain " << node.domain();
    EXPECT_NE(node.op_type(), "Round") << node.name() << ": a FakeQuantize spelled out";
    dequantized_weights += node.op_type() == "DequantizeLinear" && s8_initializers.count(node.input(0));
  }
  EXPECT_GE(dequantized_weights, 3);
  expect_unfused_matches_numpy(onnx::import_file(out), m, ".nncf");
  int convolutions = 0;
  for (const LayerInfo& l : compile(onnx::import_file(out), {.fuse = true}).layers()) {
    convolutions += l.op == "QuantizedConvolution";
  }
  EXPECT_EQ(convolutions, 3);
}

std::vector<std::string> nncf_models() {
  std::vector<std::string> names;
  for (const std::string& m : corpus::models()) {
    if (fs::exists(fs::path(QFUSE_CORPUS_DIR) / (m + ".nncf.output.npy"))) names.push_back(m);
  }
  return names;
}

INSTANTIATE_TEST_SUITE_P(Nncf, NncfReference, ::testing::ValuesIn(nncf_models()),
                         [](const auto& p) { return p.param; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(NncfReference);

// ONNX Runtime's QOperator format (tools/corpus/qoperator_models.py) against
// ONNX Runtime 1.30 itself: every tensor it computed on the model's input with
// its graph optimizations disabled (<model>.ort/, written when the corpus was
// built with Node and onnxruntime-node at hand). Each qfuse node fed ONNX
// Runtime's own inputs (isolated): unfused within one code of ONNX Runtime's
// codes (its QLinearMul, QLinearAveragePool, QLinearGlobalAveragePool and
// QLinearSigmoid round near ties otherwise than ONNX's Dequantize -> op ->
// Quantize; graph/onnx/README.md), and fused within one code as well.
std::vector<std::string> qoperator_models() {
  std::vector<std::string> names;
  for (const std::string& m : corpus::models()) {
    if (m.rfind("qop_", 0) == 0) names.push_back(m);
  }
  return names;
}

class QOperatorAgainstOrt : public ::testing::TestWithParam<std::string> {};

TEST_P(QOperatorAgainstOrt, EveryLayerIsWithinOneCodeOfOnnxRuntime) {
  const std::string m = GetParam();
  const fs::path dir = fs::path(QFUSE_CORPUS_DIR) / (m + ".ort");
  if (!fs::is_directory(dir)) {
    GTEST_SKIP() << m << ": no ONNX Runtime tensors (" << dir.string()
                 << "); the corpus build writes them when node and onnxruntime-node are at hand "
                    "(npm install, as bench/peers/peers.py does, or QFUSE_ORT_NODE_MODULES)";
  }
  std::map<std::string, Tensor> reference;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".npy") {
      reference[tools::tensor_name_of(e.path().stem().string())] = tools::read_npy(e.path());
    }
  }
  const std::map<std::string, Tensor> inputs{{"input", npy(m + ".input.npy")}};
  const graph::Graph g = onnx::import_file(model_path(m));
  for (bool fuse : {false, true}) {
    CompileOptions options;
    options.fuse = fuse;
    Comparison cmp(make_model(g), options, CompileOptions{.fuse = !fuse});
    const std::size_t used = cmp.run_against(inputs, reference);
    EXPECT_GE(used, reference.size() / 2) << "tensors compared with ONNX Runtime's";
    int compared = 0, exact = 0;
    for (const TensorDiff& t : cmp.tensors()) {
      if (!t.quantized || t.isolated.elements == 0) continue;
      ++compared;
      exact += t.isolated.equal_share == 1.0;
      EXPECT_LE(t.isolated.max_lsb, 1.01) << t.name << (fuse ? " fused" : " unfused");
      if (t.isolated.equal_share < 1.0) {
        std::cout << "  " << m << (fuse ? " fused " : " unfused ") << t.name << ": isolated max "
                  << t.isolated.max_lsb << " codes, " << 100.0 * t.isolated.equal_share
                  << "% equal to ONNX Runtime's\n";
      }
    }
    std::cout << m << (fuse ? " fused" : " unfused") << ": " << compared
              << " tensors on a grid against ONNX Runtime's, " << exact << " equal\n";
    EXPECT_GT(compared, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(QOperator, QOperatorAgainstOrt, ::testing::ValuesIn(qoperator_models()),
                         [](const auto& p) { return p.param; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(QOperatorAgainstOrt);

// qfuse export of a QOperator model: the integers its layers compute on
// (codes minus a zero point) are written as DequantizeLinear with scale 1, so
// the file read back has the original's int8 layers, and its unfused outputs
// equal the original's (the same arithmetic, which QOperatorAgainstOrt checks
// against ONNX Runtime).
class QOperatorExport : public ::testing::TestWithParam<std::string> {};

TEST_P(QOperatorExport, PlainQdqExportKeepsEveryInt8LayerAndItsOutputs) {
  const std::string m = GetParam();
  const graph::Graph g = onnx::import_file(model_path(m));
  const CompiledModel original = compile(g, {.fuse = false});
  const fs::path out = fs::path(::testing::TempDir()) / (m + "_plain.onnx");
  (void)onnx::export_prequantized(compiled_graph(original), onnx::ExportSource{}, out.string());
  const graph::Graph back = onnx::import_file(out);
  const auto int8_layers = [](const CompiledModel& c) {
    int k = 0;
    for (const LayerInfo& l : c.layers()) k += l.op.starts_with("Quantized");
    return k;
  };
  const int expected = int8_layers(compile(g, {.fuse = true}));
  EXPECT_GT(expected, 0);
  EXPECT_EQ(int8_layers(compile(back, {.fuse = true})), expected);
  const Tensor x = npy(m + ".input.npy");
  const auto outputs = [&](const CompiledModel& c) {
    InferRequest r = c.create_infer_request();
    r.set_input("input", x);
    r.infer();
    return r.output(c.outputs().at(0).name);
  };
  const Tensor want = outputs(original);
  const Tensor got = outputs(compile(back, {.fuse = false}));
  ASSERT_EQ(got.shape(), want.shape());
  ASSERT_EQ(got.type(), want.type());
  EXPECT_EQ(std::memcmp(got.raw_data(), want.raw_data(), want.byte_size()), 0) << m;
}

INSTANTIATE_TEST_SUITE_P(QOperator, QOperatorExport, ::testing::ValuesIn(qoperator_models()),
                         [](const auto& p) { return p.param; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(QOperatorExport);

// Compiling on several host threads at once, each compile also making its
// primitives on helper threads: f32 convolutions (brgconv_1x1:avx512_core on
// AVX-512 hosts), int8 ones, deconvolutions and depthwise layers described
// concurrently, over and over. oneDNN 2.6's brgemm convolutions keep a
// process-wide static while blocking (dnnl_utils.hpp); every output must be
// bit for bit the output of the same model compiled alone.
TEST(ConcurrentCompile, SeveralModelsOnSeveralThreadsMatchACompileAlone) {
  const std::vector<std::string> names{"ppocr_cls_f32", "ppocr_cls_qdq", "torch_qat_resnet8",
                                       "deconvolution", "nncf_mobilenet_block"};
  struct Case {
    graph::Graph graph;
    std::vector<std::string> input_names;
    std::vector<Tensor> inputs;
    std::vector<std::vector<std::byte>> outputs;  // compiled alone
  };
  const auto run = [](const CompiledModel& model, const Case& c) {
    InferRequest r = model.create_infer_request();
    for (std::size_t i = 0; i < c.inputs.size(); ++i) r.set_input(c.input_names[i], c.inputs[i]);
    r.infer();
    std::vector<std::vector<std::byte>> out;
    for (const std::string& name : model.output_names()) {
      const Tensor t = r.output(name);
      const auto* p = static_cast<const std::byte*>(t.raw_data());
      out.emplace_back(p, p + t.byte_size());
    }
    return out;
  };
  std::vector<Case> cases;
  for (const std::string& m : names) {
    Case c{onnx::import_file(model_path(m)), {}, {}, {}};
    c.inputs = tools::random_inputs(c.graph, 3);
    for (graph::ValueId v : c.graph.inputs()) c.input_names.push_back(c.graph.value(v).name);
    c.outputs = run(compile(c.graph, {.threads = 2}), c);
    cases.push_back(std::move(c));
  }
  constexpr int kThreads = 4, kRounds = 4;
  std::vector<std::string> mismatches(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        for (int round = 0; round < kRounds; ++round) {
          for (std::size_t k = 0; k < cases.size(); ++k) {
            const Case& c = cases[(k + static_cast<std::size_t>(t)) % cases.size()];
            if (run(compile(c.graph, {.threads = 2}), c) != c.outputs) {
              mismatches[static_cast<std::size_t>(t)] +=
                  names[(k + static_cast<std::size_t>(t)) % cases.size()] + " ";
            }
          }
        }
      } catch (const std::exception& e) {
        mismatches[static_cast<std::size_t>(t)] += std::string("threw: ") + e.what();
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(mismatches[static_cast<std::size_t>(t)], "") << "thread " << t;
  }
}

// OpenVINO IR models (tools/corpus/openvino_models.py: <m>.xml + <m>.bin,
// v11 and v10, NNCF's quantizers and compressed weights): the IR reader's
// graph against numpy's float64 run of the network (FakeQuantize by the
// seed's formula), and the corpus's fused criteria with the int8 layer count
// the script counted from the network (<m>.ov.int8_layers).
std::vector<std::string> openvino_models() {
  std::vector<std::string> names;
  const fs::path dir(QFUSE_CORPUS_DIR);
  if (!fs::is_directory(dir)) return names;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string stem = e.path().stem().string();
    if (e.path().extension() == ".xml" && fs::exists(dir / (stem + ".ov.output.npy"))) {
      names.push_back(stem);
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

class OpenVinoCorpus : public ::testing::TestWithParam<std::string> {};

graph::Graph import_ir(const std::string& m) {
  return openvino::import_file(fs::path(QFUSE_CORPUS_DIR) / (m + ".xml"));
}

TEST_P(OpenVinoCorpus, UnfusedMatchesNumpysSeedFormula) {
  expect_unfused_matches_numpy(import_ir(GetParam()), GetParam(), ".ov");
}

TEST_P(OpenVinoCorpus, EveryLayerIsInt8AndFusedMatchesUnfusedWithinOneLsb) {
  std::ifstream in(fs::path(QFUSE_CORPUS_DIR) / (GetParam() + ".ov.int8_layers"));
  int expected = -1;
  in >> expected;
  ASSERT_GT(expected, 0);
  expect_int8_and_within_one_lsb(import_ir(GetParam()), expected, GetParam());
}

// qfuse export's plain ONNX twin of each IR: read back, the same numpy
// reference, and as many int8 layers as the IR (compressed and
// FakeQuantized weights written as DequantizeLinear of their codes, the
// transposed ones of MatMul transposed as codes).
TEST_P(OpenVinoCorpus, PlainQdqExportKeepsEveryInt8Layer) {
  const std::string m = GetParam();
  const graph::Graph ir = import_ir(m);
  const CompiledModel original = compile(ir, {.fuse = false});
  const fs::path out = fs::path(::testing::TempDir()) / (m + "_plain.onnx");
  (void)onnx::export_prequantized(compiled_graph(original), onnx::ExportSource{}, out.string());
  const graph::Graph back = onnx::import_file(out);
  expect_unfused_matches_numpy(back, m, ".ov");
  const auto int8_layers = [](const CompiledModel& c) {
    int k = 0;
    for (const LayerInfo& l : c.layers()) k += l.op.starts_with("Quantized");
    return k;
  };
  EXPECT_EQ(int8_layers(compile(back, {.fuse = true})), int8_layers(compile(ir, {.fuse = true})));
}

TEST(OpenVinoCorpusModels, AllFourAreThere) { EXPECT_EQ(openvino_models().size(), 4u); }

INSTANTIATE_TEST_SUITE_P(OpenVino, OpenVinoCorpus, ::testing::ValuesIn(openvino_models()),
                         [](const auto& p) { return p.param; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(OpenVinoCorpus);

}  // namespace
}  // namespace qfuse
