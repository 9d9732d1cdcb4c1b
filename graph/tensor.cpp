#include <cstring>
#include <sstream>

#include "qfuse/error.hpp"

#include "qfuse/tensor.hpp"

namespace qfuse {

std::string_view to_string(ElementType type) {
  switch (type) {
    case ElementType::f32: return "f32";
    case ElementType::s8: return "s8";
    case ElementType::u8: return "u8";
    case ElementType::s32: return "s32";
    case ElementType::s64: return "s64";
  }
  return "?";
}

std::size_t element_size(ElementType type) {
  switch (type) {
    case ElementType::f32: return 4;
    case ElementType::s8: return 1;
    case ElementType::u8: return 1;
    case ElementType::s32: return 4;
    case ElementType::s64: return 8;
  }
  return 0;
}

std::int64_t element_count(const Shape& shape) {
  // 2^47 elements (512 TiB of f32) is beyond any model; the bound keeps every
  // byte count and sum of them far from overflowing.
  constexpr std::int64_t kMax = std::int64_t{1} << 47;
  std::int64_t n = 1;
  for (auto d : shape) {
    if (d < 0) throw GraphError("shape " + to_string(shape) + " has a negative dimension");
    if (d != 0 && n > kMax / d) {
      throw GraphError("shape " + to_string(shape) + " has more than 2^47 elements");
    }
    n *= d;
  }
  return n;
}

std::string to_string(const Shape& shape) {
  std::ostringstream os;
  os << '[';
  for (std::size_t i = 0; i < shape.size(); ++i) os << (i ? "," : "") << shape[i];
  os << ']';
  return os.str();
}

Tensor::Tensor(ElementType type, Shape shape) : type_(type), shape_(std::move(shape)) {
  for (auto d : shape_) {
    if (d < 0) throw TensorError("Tensor: negative dimension in " + to_string(shape_));
  }
  const auto n = static_cast<std::size_t>(size());
  switch (type_) {
    case ElementType::f32: storage_ = std::vector<float>(n); break;
    case ElementType::s8: storage_ = std::vector<std::int8_t>(n); break;
    case ElementType::u8: storage_ = std::vector<std::uint8_t>(n); break;
    case ElementType::s32: storage_ = std::vector<std::int32_t>(n); break;
    case ElementType::s64: storage_ = std::vector<std::int64_t>(n); break;
  }
}

Tensor Tensor::view(ElementType type, Shape shape, void* data) {
  Tensor t;
  t.type_ = type;
  t.shape_ = std::move(shape);
  t.view_ = data;
  return t;
}

Tensor::Tensor(const Tensor& other) : type_(other.type_), shape_(other.shape_) {
  if (other.view_ == nullptr) {
    storage_ = other.storage_;
    return;
  }
  *this = Tensor(type_, shape_);
  std::memcpy(raw_data(), other.view_, byte_size());
}

Tensor& Tensor::operator=(const Tensor& other) {
  if (this != &other) *this = Tensor(other);
  return *this;
}

void* Tensor::raw_data() {
  if (view_ != nullptr) return view_;
  return std::visit([](auto& v) -> void* { return v.data(); }, storage_);
}

const void* Tensor::raw_data() const {
  if (view_ != nullptr) return view_;
  return std::visit([](const auto& v) -> const void* { return v.data(); }, storage_);
}

Tensor Tensor::reshaped(Shape shape) const {
  if (element_count(shape) != size()) {
    throw TensorError("Tensor::reshaped: " + to_string(shape_) + " to " + to_string(shape));
  }
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

float Tensor::as_float(std::int64_t i) const {
  if (i < 0 || i >= size()) {
    throw TensorError("Tensor::as_float: element " + std::to_string(i) + " of " +
                      std::to_string(size()));
  }
  const auto k = static_cast<std::size_t>(i);
  const void* p = raw_data();
  switch (type_) {
    case ElementType::f32: return static_cast<const float*>(p)[k];
    case ElementType::s8: return static_cast<const std::int8_t*>(p)[k];
    case ElementType::u8: return static_cast<const std::uint8_t*>(p)[k];
    case ElementType::s32: return static_cast<float>(static_cast<const std::int32_t*>(p)[k]);
    case ElementType::s64: return static_cast<float>(static_cast<const std::int64_t*>(p)[k]);
  }
  return 0.0f;
}

}  // namespace qfuse
