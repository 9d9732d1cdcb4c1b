#include "tools/common/fashion_mnist.hpp"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>

namespace qfuse::tools::fashion_mnist {
namespace {

// An IDX file (big-endian header: magic with the rank in its last byte, then
// one 32-bit size per dimension, then u8 data), decompressed.
struct Idx {
  std::vector<std::int64_t> dims;
  std::vector<std::uint8_t> data;
};

Idx read_idx_gz(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) {
    throw std::runtime_error("fashion-mnist: cannot open " + path +
                             " (Debian package dataset-fashion-mnist)");
  }
  std::vector<std::uint8_t> raw;
  std::uint8_t buf[1 << 16];
  int got = 0;
  while ((got = gzread(f, buf, sizeof buf)) > 0) raw.insert(raw.end(), buf, buf + got);
  const bool error = got < 0;
  gzclose(f);
  if (error || raw.size() < 4 || raw[0] != 0 || raw[1] != 0 || raw[2] != 0x08) {
    throw std::runtime_error("fashion-mnist: " + path + " is not a u8 IDX file");
  }
  Idx idx;
  const std::size_t rank = raw[3];
  std::size_t count = 1;
  for (std::size_t i = 0; i < rank; ++i) {
    const std::size_t at = 4 + 4 * i;
    if (at + 4 > raw.size()) throw std::runtime_error("fashion-mnist: " + path + " is truncated");
    const std::int64_t d = (std::int64_t{raw[at]} << 24) | (std::int64_t{raw[at + 1]} << 16) |
                           (std::int64_t{raw[at + 2]} << 8) | std::int64_t{raw[at + 3]};
    idx.dims.push_back(d);
    count *= static_cast<std::size_t>(d);
  }
  const std::size_t header = 4 + 4 * rank;
  if (raw.size() != header + count) {
    throw std::runtime_error("fashion-mnist: " + path + " holds " +
                             std::to_string(raw.size() - std::min(raw.size(), header)) +
                             " data bytes (expected " + std::to_string(count) + ")");
  }
  idx.data.assign(raw.begin() + static_cast<std::ptrdiff_t>(header), raw.end());
  return idx;
}

}  // namespace

TestSet load_test_set(const std::string& dir) {
  const Idx images = read_idx_gz(dir + "/t10k-images-idx3-ubyte.gz");
  const Idx labels = read_idx_gz(dir + "/t10k-labels-idx1-ubyte.gz");
  if (images.dims.size() != 3 || images.dims[1] != 28 || images.dims[2] != 28 ||
      labels.dims.size() != 1 || labels.dims[0] != images.dims[0]) {
    throw std::runtime_error("fashion-mnist: unexpected test set dimensions in " + dir);
  }
  TestSet set;
  set.images = Tensor(ElementType::f32, {images.dims[0], 1, 28, 28});
  auto px = set.images.data<float>();
  for (std::size_t i = 0; i < images.data.size(); ++i) {
    px[i] = static_cast<float>(images.data[i]) / 255.0f;
  }
  set.labels = labels.data;
  return set;
}

float noise(std::uint64_t index) {
  std::uint64_t z = (index + 1) * 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z ^= z >> 31;
  const float u = static_cast<float>(z >> 40) / static_cast<float>(1 << 24);
  return 0.5f * (u - 0.5f);
}

Tensor noisy(const Tensor& images) {
  Tensor out = images;
  auto v = out.data<float>();
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::clamp(v[i] + noise(i), 0.0f, 1.0f);
  return out;
}

double psnr(const float* a, const float* b, std::size_t n) {
  double sum = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(a[i]) - static_cast<double>(b[i]);
    sum += d * d;
  }
  return 10.0 * std::log10(1.0 / std::max(sum / static_cast<double>(n), 1e-12));
}

std::string models_dir() {
  if (const char* env = std::getenv("QFUSE_MODELS_DIR")) return env;
  // An installed CLI: <prefix>/bin/qfuse next to <prefix>/share/qfuse/fashion_mnist.
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const std::filesystem::path installed = exe.parent_path().parent_path() / "share" / "qfuse" / "fashion_mnist";
    if (std::filesystem::exists(installed / "fashion_cnn.onnx", ec)) return installed.string();
  }
  return QFUSE_FASHION_MNIST_DIR;
}

const std::vector<BundledModel>& bundled_models() {
  static const std::vector<BundledModel> kModels = {
      {"default", "fashion_cnn", Task::classify, "CNN classifier"},
      {"fashion-vit", "fashion_vit", Task::classify, "vision transformer classifier"},
      {"fashion-dae", "fashion_dae", Task::denoise, "denoising autoencoder"},
  };
  return kModels;
}

std::optional<BundledModel> find_bundled_model(const std::string& name) {
  for (const BundledModel& m : bundled_models()) {
    if (m.name == name) return m;
  }
  return std::nullopt;
}

double json_number(const std::string& text, const std::string& key) {
  const std::string quoted = "\"" + key + "\"";
  const std::size_t at = text.find(quoted);
  const std::size_t colon = at == std::string::npos ? at : text.find(':', at + quoted.size());
  if (colon == std::string::npos) throw std::runtime_error("no number '" + key + "' in the JSON");
  return std::strtod(text.c_str() + colon + 1, nullptr);
}

}  // namespace qfuse::tools::fashion_mnist
