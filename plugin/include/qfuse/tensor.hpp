#pragma once
// Element types, shapes and the owning Tensor used for constants, inputs and outputs.

#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include "qfuse/error.hpp"
#include "qfuse/export.hpp"

namespace qfuse {

// s64: integer indices (token ids, masks) as ONNX models take them as inputs.
enum class ElementType : std::uint8_t { f32, s8, u8, s32, s64 };

QFUSE_API std::string_view to_string(ElementType type);
QFUSE_API std::size_t element_size(ElementType type);

template <class T>
constexpr ElementType element_type_of() {
  if constexpr (std::is_same_v<T, float>) {
    return ElementType::f32;
  } else if constexpr (std::is_same_v<T, std::int8_t>) {
    return ElementType::s8;
  } else if constexpr (std::is_same_v<T, std::uint8_t>) {
    return ElementType::u8;
  } else if constexpr (std::is_same_v<T, std::int64_t>) {
    return ElementType::s64;
  } else {
    static_assert(std::is_same_v<T, std::int32_t>, "unsupported element type");
    return ElementType::s32;
  }
}

// Dimensions, outermost first. Every dimension is static and > 0 once bound.
using Shape = std::vector<std::int64_t>;

QFUSE_API std::int64_t element_count(const Shape& shape);
QFUSE_API std::string to_string(const Shape& shape);

// A dense, C-ordered tensor. It owns its elements, except a view, which reads
// and writes memory owned elsewhere (a request's arena); a copy of a view owns
// a copy of its elements.
class QFUSE_API Tensor {
 public:
  Tensor() = default;
  Tensor(ElementType type, Shape shape);  // zero-filled
  // `data` holds element_count(shape) elements of `type` and outlives the view.
  static Tensor view(ElementType type, Shape shape, void* data);

  Tensor(const Tensor& other);
  Tensor& operator=(const Tensor& other);
  Tensor(Tensor&& other) noexcept = default;
  Tensor& operator=(Tensor&& other) noexcept = default;
  ~Tensor() = default;

  bool is_view() const { return view_ != nullptr; }

  template <class T>
  static Tensor from_vector(Shape shape, std::vector<T> values);

  ElementType type() const { return type_; }
  const Shape& shape() const { return shape_; }
  std::int64_t size() const { return element_count(shape_); }
  std::size_t byte_size() const { return static_cast<std::size_t>(size()) * element_size(type_); }

  template <class T>
  std::span<T> data();
  template <class T>
  std::span<const T> data() const;

  void* raw_data();
  const void* raw_data() const;

  // Same elements, new shape of equal element count.
  Tensor reshaped(Shape shape) const;

  // Element i as float, whatever the element type.
  float as_float(std::int64_t i) const;

 private:
  using Storage = std::variant<std::vector<float>, std::vector<std::int8_t>,
                               std::vector<std::uint8_t>, std::vector<std::int32_t>,
                               std::vector<std::int64_t>>;
  ElementType type_ = ElementType::f32;
  Shape shape_;
  Storage storage_;
  void* view_ = nullptr;
};

template <class T>
Tensor Tensor::from_vector(Shape shape, std::vector<T> values) {
  Tensor t;
  t.type_ = element_type_of<T>();
  t.shape_ = std::move(shape);
  if (static_cast<std::int64_t>(values.size()) != t.size()) {
    throw TensorError("Tensor::from_vector: " + std::to_string(values.size()) +
                      " values for shape " + to_string(t.shape_));
  }
  t.storage_ = std::move(values);
  return t;
}

template <class T>
std::span<T> Tensor::data() {
  if (view_ != nullptr && type_ == element_type_of<T>()) {
    return {static_cast<T*>(view_), static_cast<std::size_t>(size())};
  }
  auto* v = std::get_if<std::vector<T>>(&storage_);
  if (view_ != nullptr || v == nullptr) {
    throw TensorError("Tensor::data: element type is " + std::string(to_string(type_)) +
                      " (asked for " + std::string(to_string(element_type_of<T>())) + ")");
  }
  return {v->data(), v->size()};
}

template <class T>
std::span<const T> Tensor::data() const {
  if (view_ != nullptr && type_ == element_type_of<T>()) {
    return {static_cast<const T*>(view_), static_cast<std::size_t>(size())};
  }
  const auto* v = std::get_if<std::vector<T>>(&storage_);
  if (view_ != nullptr || v == nullptr) {
    throw TensorError("Tensor::data: element type is " + std::string(to_string(type_)) +
                      " (asked for " + std::string(to_string(element_type_of<T>())) + ")");
  }
  return {v->data(), v->size()};
}

}  // namespace qfuse
