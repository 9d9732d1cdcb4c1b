// The bundled Fashion-MNIST models (tools/fashion_mnist/train.py and
// train_vit.py: trained with quantization-aware training in torch, exported to
// ONNX QDQ) on the 10,000 test images of Debian's dataset-fashion-mnist,
// against the figures torch recorded for its fake-quantized model: the CNN's
// fused top-1 within 0.3 percentage points of torch's and fused and unfused
// agreeing on at least 99.5% of the images, the vision transformer's within
// 0.5 points and 99%, and the autoencoder's PSNR within 0.1 dB of torch's; and
// one compiled classifier shared by 8 threads, bit-identical to a serial run.

#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "graph/onnx/exporter.hpp"
#include "graph/onnx/importer.hpp"
#include "plugin/api_internal.hpp"
#include "tools/common/fashion_mnist.hpp"
#include "tools/common/npy.hpp"

namespace qfuse::test {
namespace {

namespace fm = tools::fashion_mnist;

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

const fm::TestSet& test_set() {
  static const fm::TestSet set = fm::load_test_set();
  return set;
}

constexpr std::size_t kPixels = 28 * 28;
constexpr std::int64_t kBatch = 100;  // images per inference (the models' batch is symbolic)

CompiledModel compile_batched(const std::string& path, bool fuse) {
  onnx::ImportOptions options;
  options.input_shapes["input"] = {kBatch, 1, 28, 28};
  return compile(onnx::import_file(path, options), {.fuse = fuse});
}

// Runs `model` on `images` ([N, 1, 28, 28]) kBatch at a time and hands each
// image's output row (`row` values) to `f(i, values)`.
template <typename F>
void for_each_image(const CompiledModel& model, const Tensor& images, std::size_t row, F&& f) {
  InferRequest request = model.create_infer_request();
  Tensor& in = request.input("input");
  const auto n = static_cast<std::size_t>(images.shape()[0]);
  const auto batch = static_cast<std::size_t>(kBatch);
  for (std::size_t first = 0; first < n; first += batch) {
    std::copy_n(images.data<float>().data() + first * kPixels, batch * kPixels, in.data<float>().data());
    request.infer();
    const float* out = request.output("output").data<float>().data();
    for (std::size_t i = 0; i < batch; ++i) f(first + i, out + i * row);
  }
}

std::size_t argmax(const float* v, std::size_t n) {
  return static_cast<std::size_t>(std::max_element(v, v + n) - v);
}

// A classifier's figures on the 10,000 test images, in percent.
struct ClassifierFigures {
  double torch_top1 = 0.0;      // recorded by train.py / train_vit.py
  double unfused_top1 = 0.0;
  double fused_top1 = 0.0;
  double agreement = 0.0;        // fused and unfused give the same class
  double agreement_torch = 0.0;  // fused gives torch's class
};

// The bundled classifier <stem>.onnx fused and unfused on the test set,
// against <stem>.torch.json and <stem>.logits.npy; prints the figures.
ClassifierFigures classify_test_set(const std::string& stem, const CompiledModel& fused,
                                    const CompiledModel& unfused) {
  const fm::TestSet& set = test_set();
  const std::string dir = fm::models_dir();
  const Tensor torch_logits = tools::read_npy(dir + "/" + stem + ".logits.npy");
  const std::size_t n = set.labels.size();
  std::vector<std::size_t> fused_class(n), unfused_class(n);
  for_each_image(fused, set.images, 10, [&](std::size_t i, const float* y) { fused_class[i] = argmax(y, 10); });
  for_each_image(unfused, set.images, 10, [&](std::size_t i, const float* y) { unfused_class[i] = argmax(y, 10); });
  std::size_t fused_right = 0, unfused_right = 0, agree = 0, agree_torch = 0;
  const auto tl = torch_logits.data<float>();
  for (std::size_t i = 0; i < n; ++i) {
    fused_right += fused_class[i] == set.labels[i];
    unfused_right += unfused_class[i] == set.labels[i];
    agree += fused_class[i] == unfused_class[i];
    agree_torch += fused_class[i] == argmax(tl.data() + i * 10, 10);
  }
  const double pct = 100.0 / static_cast<double>(n);
  ClassifierFigures f;
  f.torch_top1 = fm::json_number(read_text(dir + "/" + stem + ".torch.json"), "top1_percent");
  f.unfused_top1 = static_cast<double>(unfused_right) * pct;
  f.fused_top1 = static_cast<double>(fused_right) * pct;
  f.agreement = static_cast<double>(agree) * pct;
  f.agreement_torch = static_cast<double>(agree_torch) * pct;
  std::cout << stem << " accuracy: torch " << f.torch_top1 << "%, unfused " << f.unfused_top1
            << "%, fused " << f.fused_top1 << "%, agreement " << f.agreement
            << "% (fused vs torch's classes " << f.agreement_torch << "%)\n";
  return f;
}

TEST(FashionMnist, ClassifierMatchesTorchFakeQuant) {
  const std::string path = fm::models_dir() + "/fashion_cnn.onnx";
  const CompiledModel fused = compile_batched(path, true);
  const CompiledModel unfused = compile_batched(path, false);
  // Every layer of the classifier runs int8.
  for (const LayerInfo& l : fused.layers()) {
    if (l.macs > 0) {
      EXPECT_EQ(l.precision, "int8") << l.node;
    }
  }
  const ClassifierFigures f = classify_test_set("fashion_cnn", fused, unfused);
  EXPECT_NEAR(f.fused_top1, f.torch_top1, 0.3);
  EXPECT_GE(f.agreement, 99.5);
}

// The vision transformer: all 18 layers run int8 (the patch convolution, the
// 12 Linear layers of the two encoder layers, attention's two MatMuls of
// activations by activations in each, and the head); its fused top-1 within
// 0.5 points of torch's and the same class as unfused on at least 99% of the
// images.
TEST(FashionMnist, VisionTransformerMatchesTorchFakeQuant) {
  const std::string path = fm::models_dir() + "/fashion_vit.onnx";
  const CompiledModel fused = compile_batched(path, true);
  const CompiledModel unfused = compile_batched(path, false);
  int layers = 0;
  for (const LayerInfo& l : fused.layers()) {
    if (l.macs > 0) {
      EXPECT_EQ(l.precision, "int8") << l.node;
      layers += l.op == "Attention" ? 2 : 1;  // attention's two matmuls as one op
    }
  }
  EXPECT_EQ(layers, 18);
  const ClassifierFigures f = classify_test_set("fashion_vit", fused, unfused);
  EXPECT_NEAR(f.fused_top1, f.torch_top1, 0.5);
  EXPECT_GE(f.agreement, 99.0);
}

// The integer-only mode on the classifier: every fused layer and the pool
// in integer arithmetic, top-1 within 0.3 points of torch's and the same
// class as the float-scale fused path on at least 99.5% of the images.
TEST(FashionMnist, IntegerOnlyClassifierMatchesTheFloatScalePath) {
  const fm::TestSet& set = test_set();
  const std::string dir = fm::models_dir();
  const double torch_top1 = fm::json_number(read_text(dir + "/fashion_cnn.torch.json"), "top1_percent");
  onnx::ImportOptions options;
  options.input_shapes["input"] = {kBatch, 1, 28, 28};
  const graph::Graph g = onnx::import_file(dir + "/fashion_cnn.onnx", options);
  CompileOptions int_options;
  int_options.integer_only = true;
  const CompiledModel integer = compile(g, int_options);
  const CompiledModel fused = compile(g, {});
  int integer_layers = 0;
  for (const LayerInfo& l : integer.layers()) {
    if (l.macs > 0 || l.op == "AvgPool") {
      EXPECT_EQ(l.integer, "integer") << l.node;
      ++integer_layers;
    }
  }
  EXPECT_EQ(integer_layers, 7);
  const std::size_t n = set.labels.size();
  std::vector<std::size_t> int_class(n), fused_class(n);
  for_each_image(integer, set.images, 10, [&](std::size_t i, const float* y) { int_class[i] = argmax(y, 10); });
  for_each_image(fused, set.images, 10, [&](std::size_t i, const float* y) { fused_class[i] = argmax(y, 10); });
  std::size_t right = 0, agree = 0;
  for (std::size_t i = 0; i < n; ++i) {
    right += int_class[i] == set.labels[i];
    agree += int_class[i] == fused_class[i];
  }
  const double pct = 100.0 / static_cast<double>(n);
  std::cout << "accuracy: torch " << torch_top1 << "%, integer-only " << static_cast<double>(right) * pct
            << "%, agreement with the float-scale fused path " << static_cast<double>(agree) * pct << "%\n";
  EXPECT_NEAR(static_cast<double>(right) * pct, torch_top1, 0.3);
  EXPECT_GE(static_cast<double>(agree) * pct, 99.5);
}

// The classifier exported in the pre-quantized form and read back: six
// int8 layers, and on the 10,000 test images the integer-only mode gives the
// same logits from the export as from the original, bit for bit.
TEST(FashionMnist, PrequantizedExportGivesTheIntegerOnlyLogits) {
  const fm::TestSet& set = test_set();
  onnx::ImportOptions options;
  options.input_shapes["input"] = {kBatch, 1, 28, 28};
  CompileOptions int_options;
  int_options.integer_only = true;
  const CompiledModel original =
      compile(onnx::import_file(fm::models_dir() + "/fashion_cnn.onnx", options), int_options);
  const std::string path = ::testing::TempDir() + "/fashion_cnn_prequantized.onnx";
  const onnx::ExportReport report = onnx::export_prequantized(
      compiled_graph(original), [&](const graph::Node& n) { return integer_plan(original, n); }, path);
  EXPECT_EQ(report.layers, 6);
  const CompiledModel back = compile(onnx::import_file(path), int_options);
  int int8_layers = 0;
  for (const LayerInfo& l : back.layers()) int8_layers += l.macs > 0 && l.precision == "int8";
  EXPECT_EQ(int8_layers, 6);
  const std::size_t n = set.labels.size();
  std::vector<float> a(n * 10), b(n * 10);
  for_each_image(original, set.images, 10, [&](std::size_t i, const float* y) { std::copy_n(y, 10, a.begin() + static_cast<std::ptrdiff_t>(i * 10)); });
  for_each_image(back, set.images, 10, [&](std::size_t i, const float* y) { std::copy_n(y, 10, b.begin() + static_cast<std::ptrdiff_t>(i * 10)); });
  std::size_t same = 0;
  for (std::size_t i = 0; i < a.size(); ++i) same += a[i] == b[i];
  std::cout << "export read back: " << int8_layers << " int8 layers, " << same << " of " << a.size()
            << " logits equal to the integer-only original\n";
  EXPECT_EQ(same, a.size());
}

TEST(FashionMnist, AutoencoderPsnrMatchesTorch) {
  const fm::TestSet& set = test_set();
  const std::string dir = fm::models_dir();
  const double torch_psnr = fm::json_number(read_text(dir + "/fashion_dae.torch.json"), "psnr_db");
  const Tensor noisy = fm::noisy(set.images);
  const CompiledModel fused = compile_batched(dir + "/fashion_dae.onnx", true);
  for (const LayerInfo& l : fused.layers()) {
    if (l.macs > 0) {
      EXPECT_EQ(l.precision, "int8") << l.node;
    }
  }
  double sum = 0.0;
  const float* clean = set.images.data<float>().data();
  for_each_image(fused, noisy, kPixels, [&](std::size_t i, const float* y) {
    sum += fm::psnr(y, clean + i * kPixels, kPixels);
  });
  const double fused_psnr = sum / static_cast<double>(set.labels.size());
  std::cout << "psnr: torch " << torch_psnr << " dB, fused " << fused_psnr << " dB\n";
  EXPECT_NEAR(fused_psnr, torch_psnr, 0.1);
}

// One compiled model, 8 host threads x 200 inferences each on different
// images, every output bit-identical to a serial run of the same images.
TEST(FashionMnist, ConcurrentRequestsMatchASerialRun) {
  const fm::TestSet& set = test_set();
  const graph::Graph g = onnx::import_file(fm::models_dir() + "/fashion_cnn.onnx",
                                           {.input_shapes = {{"input", {1, 1, 28, 28}}}});
  const CompiledModel model = compile(g);
  constexpr std::size_t kThreads = 8, kRuns = 200;
  const auto image = [](std::size_t thread, std::size_t run) { return (thread * kRuns + run) * 3 % 10000; };
  const auto infer = [&](InferRequest& r, std::size_t i) {
    std::copy_n(set.images.data<float>().data() + i * kPixels, kPixels, r.input("input").data<float>().data());
    r.infer();
    const auto y = r.output("output").data<float>();
    return std::vector<float>(y.begin(), y.end());
  };
  std::vector<std::vector<std::vector<float>>> serial(kThreads), concurrent(kThreads);
  {
    InferRequest r = model.create_infer_request();
    r.set_threads(1);
    for (std::size_t t = 0; t < kThreads; ++t) {
      for (std::size_t k = 0; k < kRuns; ++k) serial[t].push_back(infer(r, image(t, k)));
    }
  }
  std::vector<std::thread> pool;
  for (std::size_t t = 0; t < kThreads; ++t) {
    pool.emplace_back([&, t] {
      InferRequest r = model.create_infer_request();
      r.set_threads(1);
      for (std::size_t k = 0; k < kRuns; ++k) concurrent[t].push_back(infer(r, image(t, k)));
    });
  }
  for (std::thread& th : pool) th.join();
  for (std::size_t t = 0; t < kThreads; ++t) {
    ASSERT_EQ(concurrent[t].size(), kRuns);
    for (std::size_t k = 0; k < kRuns; ++k) {
      ASSERT_EQ(std::memcmp(concurrent[t][k].data(), serial[t][k].data(), 10 * sizeof(float)), 0)
          << "thread " << t << " run " << k;
    }
  }
}

}  // namespace
}  // namespace qfuse::test
