#pragma once
// Fashion-MNIST's test set (Debian's dataset-fashion-mnist) and the bundled
// models trained on it (tools/fashion_mnist/train.py, train_vit.py): the
// images, their labels, the autoencoder's deterministic noise and PSNR.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "qfuse/tensor.hpp"

namespace qfuse::tools::fashion_mnist {

// Where Debian's package installs the dataset.
inline constexpr const char* kDataDir = "/usr/share/datasets/fashion-mnist";

struct TestSet {
  Tensor images;                     // f32 [10000, 1, 28, 28], pixel / 255
  std::vector<std::uint8_t> labels;  // 0..9
};

// Reads t10k-images-idx3-ubyte.gz and t10k-labels-idx1-ubyte.gz from `dir`.
// Throws std::runtime_error naming the file when one is missing or malformed.
TestSet load_test_set(const std::string& dir = kDataDir);

// The autoencoder's input noise for element `index` of the test set (image
// major): 0.5 * (u - 0.5), u the top 24 bits of splitmix64(index) / 2^24;
// train.py computes the same.
float noise(std::uint64_t index);

// clip(x + noise(i), 0, 1) over the whole tensor, element i at index i.
Tensor noisy(const Tensor& images);

// 10 log10(1 / mean squared error) of n values in [0, 1].
double psnr(const float* a, const float* b, std::size_t n);

// The directory of the bundled Fashion-MNIST models and torch's results.
std::string models_dir();

// What a bundled model does with a test image: classify it (10 logits per
// image, torch's top-1 in <stem>.torch.json) or denoise it (the noisy image
// in, a clean image out, torch's PSNR in <stem>.torch.json).
enum class Task { classify, denoise };

// A bundled model: its MODEL name on the command line, its files in
// models_dir() (<stem>.onnx, <stem>.torch.json) and what it is.
struct BundledModel {
  std::string name;         // "default", "fashion-vit", "fashion-dae"
  std::string stem;         // "fashion_cnn", ...
  Task task;
  std::string description;  // "CNN classifier", ...

  std::string onnx_file() const { return models_dir() + "/" + stem + ".onnx"; }
  std::string torch_json() const { return models_dir() + "/" + stem + ".torch.json"; }
};

// Every bundled Fashion-MNIST model, "default" first.
const std::vector<BundledModel>& bundled_models();

// The bundled model called `name`, if there is one.
std::optional<BundledModel> find_bundled_model(const std::string& name);

// A number field of a flat JSON object (the torch results files), e.g.
// json_number(text, "top1_percent"). Throws std::runtime_error if absent.
double json_number(const std::string& text, const std::string& key);

}  // namespace qfuse::tools::fashion_mnist
