#include <sstream>

#include "qfuse/tensor.hpp"

namespace qfuse {

std::string_view to_string(ElementType type) {
  switch (type) {
    case ElementType::f32: return "f32";
    case ElementType::s8: return "s8";
    case ElementType::u8: return "u8";
    case ElementType::s32: return "s32";
  }
  return "?";
}

std::size_t element_size(ElementType type) {
  switch (type) {
    case ElementType::f32: return 4;
    case ElementType::s8: return 1;
    case ElementType::u8: return 1;
    case ElementType::s32: return 4;
  }
  return 0;
}

std::int64_t element_count(const Shape& shape) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
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
    if (d < 0) throw std::invalid_argument("Tensor: negative dimension in " + to_string(shape_));
  }
  const auto n = static_cast<std::size_t>(size());
  switch (type_) {
    case ElementType::f32: storage_ = std::vector<float>(n); break;
    case ElementType::s8: storage_ = std::vector<std::int8_t>(n); break;
    case ElementType::u8: storage_ = std::vector<std::uint8_t>(n); break;
    case ElementType::s32: storage_ = std::vector<std::int32_t>(n); break;
  }
}

void* Tensor::raw_data() {
  return std::visit([](auto& v) -> void* { return v.data(); }, storage_);
}

const void* Tensor::raw_data() const {
  return std::visit([](const auto& v) -> const void* { return v.data(); }, storage_);
}

Tensor Tensor::reshaped(Shape shape) const {
  if (element_count(shape) != size()) {
    throw std::invalid_argument("Tensor::reshaped: " + to_string(shape_) + " to " +
                                to_string(shape));
  }
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

float Tensor::as_float(std::int64_t i) const {
  return std::visit([i](const auto& v) { return static_cast<float>(v.at(static_cast<std::size_t>(i))); },
                    storage_);
}

}  // namespace qfuse
