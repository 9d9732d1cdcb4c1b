#include "graph/onnx/proto_utils.hpp"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <type_traits>

#include "graph/graph.hpp"
#include "graph/onnx/importer.hpp"

namespace qfuse::onnx {

std::string onnx_type_name(int type) {
  static const char* kNames[] = {"UNDEFINED", "FLOAT",  "UINT8",     "INT8",       "UINT16",
                                 "INT16",     "INT32",  "INT64",     "STRING",     "BOOL",
                                 "FLOAT16",   "DOUBLE", "UINT32",    "UINT64",     "COMPLEX64",
                                 "COMPLEX128", "BFLOAT16"};
  if (type >= 0 && type <= 16) return kNames[type];
  return "type " + std::to_string(type);
}

namespace detail {

bool is_integer_type(int type) {
  switch (type) {
    case kUint8:
    case kInt8:
    case kUint16:
    case kInt16:
    case kInt32:
    case kInt64:
    case kBool:
    case kUint32:
    case kUint64: return true;
    default: return false;
  }
}

std::optional<ElementType> to_element_type(int type) {
  switch (type) {
    case kFloat: return ElementType::f32;
    case kUint8: return ElementType::u8;
    case kInt8: return ElementType::s8;
    case kInt32: return ElementType::s32;
    case kInt64: return ElementType::s64;
    default: return std::nullopt;
  }
}

int to_onnx_type(ElementType type) {
  switch (type) {
    case ElementType::f32: return kFloat;
    case ElementType::u8: return kUint8;
    case ElementType::s8: return kInt8;
    case ElementType::s32: return kInt32;
    case ElementType::s64: return kInt64;
  }
  return kUndefined;
}

namespace {

template <class T>
void append_raw(const std::string& raw, Literal& lit) {
  const std::size_t n = raw.size() / sizeof(T);
  // Sized first (a memset), then one loop the compiler vectorizes; a
  // push_back per element checks the capacity each time and does not.
  std::vector<double>& values = lit.mutable_values();
  values.resize(n);
  double* out = values.data();
  const char* in = raw.data();
  T lo = std::numeric_limits<T>::max(), hi = std::numeric_limits<T>::lowest();
  for (std::size_t k = 0; k < n; ++k) {
    T v;
    std::memcpy(&v, in + k * sizeof(T), sizeof(T));
    out[k] = static_cast<double>(v);
    if constexpr (std::is_integral_v<T>) {
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  }
  if constexpr (std::is_integral_v<T>) {
    if (n > 0) lit.extent = {static_cast<double>(lo), static_cast<double>(hi)};
  }
}

std::size_t raw_element_size(int type) {
  switch (type) {
    case kFloat:
    case kInt32:
    case kUint32: return 4;
    case kUint8:
    case kInt8:
    case kBool: return 1;
    case kUint16:
    case kInt16: return 2;
    case kInt64:
    case kUint64:
    case kDouble: return 8;
    default: return 0;
  }
}

}  // namespace

namespace {

// The bytes an external-data tensor names: keys location, offset, length.
std::string read_external(const ::onnx::TensorProto& t, const std::string& what,
                          const std::filesystem::path& dir, std::size_t expected_bytes) {
  std::string location;
  std::int64_t offset = 0, length = -1;
  for (const auto& kv : t.external_data()) {
    try {
      if (kv.key() == "location") location = kv.value();
      if (kv.key() == "offset") offset = std::stoll(kv.value());
      if (kv.key() == "length") length = std::stoll(kv.value());
    } catch (const std::exception&) {
      throw GraphError("import " + what + ": external data " + kv.key() + " '" + kv.value() +
                       "' is not a number");
    }
  }
  if (location.empty()) throw GraphError("import " + what + ": external data without a location");
  if (offset < 0 || length < -1) {
    throw GraphError("import " + what + ": external data offset " + std::to_string(offset) +
                     " / length " + std::to_string(length) + " is negative");
  }
  if (dir.empty()) {
    throw IoError("import " + what + ": external data '" + location +
                  "' needs the model's directory (import the model from its file, or set the "
                  "external data directory)");
  }
  // The location stays inside the model's directory, as ONNX requires.
  const std::filesystem::path rel = std::filesystem::path(location).lexically_normal();
  if (rel.is_absolute() || rel.empty() || *rel.begin() == "..") {
    throw GraphError("import " + what + ": external data location '" + location +
                     "' is outside the model's directory");
  }
  const std::filesystem::path file = dir / rel;
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    throw IoError("import " + what + ": cannot open external data file '" + file.string() + "'");
  }
  in.seekg(0, std::ios::end);
  const auto size = static_cast<std::int64_t>(in.tellg());
  const std::int64_t want = length >= 0 ? length : static_cast<std::int64_t>(expected_bytes);
  if (offset > size || want > size - offset) {
    throw GraphError("import " + what + ": external data [" + std::to_string(offset) + ", " +
                     std::to_string(offset + want) + ") is past the end of '" + file.string() +
                     "' (" + std::to_string(size) + " bytes)");
  }
  if (static_cast<std::size_t>(want) != expected_bytes) {
    throw GraphError("import " + what + ": external data holds " + std::to_string(want) +
                     " bytes (expected " + std::to_string(expected_bytes) + ")");
  }
  std::string bytes(static_cast<std::size_t>(want), '\0');
  in.seekg(offset);
  in.read(bytes.data(), want);
  if (!in) throw IoError("import " + what + ": cannot read external data from '" + file.string() + "'");
  return bytes;
}

}  // namespace

Literal decode_tensor(const ::onnx::TensorProto& t, const std::string& what,
                      const std::filesystem::path& external_dir) {
  Literal lit;
  lit.type = t.data_type();
  for (auto d : t.dims()) lit.shape.push_back(d);
  const std::size_t esize = raw_element_size(lit.type);
  if (esize == 0) {
    throw UnsupportedError("import " + what + ": element type " + onnx_type_name(lit.type) +
                           " is not supported");
  }
  const bool external = t.data_location() == ::onnx::TensorProto_DataLocation_EXTERNAL;
  if (t.has_raw_data() || external) {
    const std::size_t expected = static_cast<std::size_t>(element_count(lit.shape)) * esize;
    // The file's bytes, or the message's own (not copied).
    const std::string from_file = external ? read_external(t, what, external_dir, expected) : "";
    const std::string& raw = external ? from_file : t.raw_data();
    if (raw.size() % esize != 0) {
      throw GraphError("import " + what + ": raw_data of " + std::to_string(raw.size()) +
                       " bytes is not a whole number of " + onnx_type_name(lit.type) + " elements");
    }
    switch (lit.type) {
      case kFloat: append_raw<float>(raw, lit); break;
      case kUint8: append_raw<std::uint8_t>(raw, lit); break;
      case kInt8: append_raw<std::int8_t>(raw, lit); break;
      case kBool: append_raw<std::uint8_t>(raw, lit); break;
      case kUint16: append_raw<std::uint16_t>(raw, lit); break;
      case kInt16: append_raw<std::int16_t>(raw, lit); break;
      case kInt32: append_raw<std::int32_t>(raw, lit); break;
      case kUint32: append_raw<std::uint32_t>(raw, lit); break;
      case kInt64: append_raw<std::int64_t>(raw, lit); break;
      case kUint64: append_raw<std::uint64_t>(raw, lit); break;
      case kDouble: append_raw<double>(raw, lit); break;
      default: break;
    }
  } else {
    std::vector<double>& values = lit.mutable_values();
    switch (lit.type) {
      case kFloat:
        for (float v : t.float_data()) values.push_back(static_cast<double>(v));
        break;
      case kDouble:
        for (double v : t.double_data()) values.push_back(v);
        break;
      case kInt64:
        for (auto v : t.int64_data()) values.push_back(static_cast<double>(v));
        break;
      case kUint32:
      case kUint64:
        for (auto v : t.uint64_data()) values.push_back(static_cast<double>(v));
        break;
      default:
        for (auto v : t.int32_data()) values.push_back(static_cast<double>(v));
        break;
    }
  }
  if (static_cast<std::int64_t>(lit.values().size()) != element_count(lit.shape)) {
    throw GraphError("import " + what + ": " + std::to_string(lit.values().size()) +
                     " values for shape " + to_string(lit.shape) + " (expected " +
                     std::to_string(element_count(lit.shape)) + ")");
  }
  return lit;
}

namespace {

// The least and greatest element. GCC's -O2 leaves this reduction scalar;
// CMakeLists.txt gives this file the dynamic cost model, under which it
// vectorizes.
template <class T>
std::optional<std::pair<double, double>> integer_extent(const Tensor& t) {
  const std::span<const T> v = t.data<T>();
  if (v.empty()) return std::nullopt;
  T lo = v[0], hi = v[0];
  for (const T x : v) {
    lo = std::min(lo, x);
    hi = std::max(hi, x);
  }
  return std::pair<double, double>{static_cast<double>(lo), static_cast<double>(hi)};
}

}  // namespace

Literal take_tensor(::onnx::TensorProto& t, const std::string& what,
                    const std::filesystem::path& external_dir) {
  const std::optional<ElementType> type = to_element_type(t.data_type());
  const bool external = t.data_location() == ::onnx::TensorProto_DataLocation_EXTERNAL;
  if (!type || (!t.has_raw_data() && !external)) return decode_tensor(t, what, external_dir);
  Shape shape(t.dims().begin(), t.dims().end());
  for (std::int64_t d : shape) {
    if (d < 0) throw GraphError("import " + what + ": negative dimension in " + to_string(shape));
  }
  const std::size_t expected = static_cast<std::size_t>(element_count(shape)) * element_size(*type);
  const std::shared_ptr<const std::string> bytes =
      external ? std::make_shared<const std::string>(read_external(t, what, external_dir, expected))
               : std::shared_ptr<const std::string>(t.release_raw_data());
  if (bytes->size() != expected) {
    throw GraphError("import " + what + ": raw_data of " + std::to_string(bytes->size()) +
                     " bytes holds no " + to_string(shape) + " " + onnx_type_name(t.data_type()) +
                     " (expected " + std::to_string(expected) + " bytes)");
  }
  // std::string's buffer comes from operator new, aligned for every element
  // type, or is the string's own small buffer, aligned as the string.
  const std::shared_ptr<const Tensor> elements =
      graph::owned_view(bytes, *type, shape, bytes->data());
  Literal lit(t.data_type(), std::move(shape), elements);
  switch (*type) {
    case ElementType::u8: lit.extent = integer_extent<std::uint8_t>(*elements); break;
    case ElementType::s8: lit.extent = integer_extent<std::int8_t>(*elements); break;
    case ElementType::s32: lit.extent = integer_extent<std::int32_t>(*elements); break;
    case ElementType::s64: lit.extent = integer_extent<std::int64_t>(*elements); break;
    case ElementType::f32: break;
  }
  return lit;
}

const std::vector<double>& Literal::values() const {
  if (!have_values_) {
    if (elements_) {
      const Tensor& t = *elements_;
      values_.resize(static_cast<std::size_t>(t.size()));
      const auto widen = [this](auto in) {
        for (std::size_t k = 0; k < in.size(); ++k) values_[k] = static_cast<double>(in[k]);
      };
      switch (t.type()) {
        case ElementType::f32: widen(t.data<float>()); break;
        case ElementType::u8: widen(t.data<std::uint8_t>()); break;
        case ElementType::s8: widen(t.data<std::int8_t>()); break;
        case ElementType::s32: widen(t.data<std::int32_t>()); break;
        case ElementType::s64: widen(t.data<std::int64_t>()); break;
      }
    }
    have_values_ = true;
  }
  return values_;
}

std::vector<double>& Literal::mutable_values() {
  values();
  elements_.reset();
  return values_;
}

Tensor to_tensor(const Literal& lit, const std::string& what, Shape shape) {
  auto type = to_element_type(lit.type);
  if (!type) {
    throw UnsupportedError("import " + what + ": element type " + onnx_type_name(lit.type) +
                           " is not supported (qfuse tensors are FLOAT, UINT8, INT8, INT32, INT64)");
  }
  const std::int64_t count = lit.elements() ? lit.elements()->size()
                                            : static_cast<std::int64_t>(lit.values().size());
  if (element_count(shape) != count) {
    throw GraphError("import " + what + ": " + std::to_string(count) + " values for shape " +
                     qfuse::to_string(shape));
  }
  if (lit.elements()) {
    const Tensor view =
        Tensor::view(*type, std::move(shape), const_cast<void*>(lit.elements()->raw_data()));
    return Tensor(view);  // a copy of a view owns its elements
  }
  Tensor t(*type, std::move(shape));
  const std::vector<double>& values = lit.values();
  const auto fill = [&values](auto out) {
    using T = typename decltype(out)::value_type;
    for (std::size_t i = 0; i < values.size(); ++i) out[i] = static_cast<T>(values[i]);
  };
  switch (*type) {
    case ElementType::f32: fill(t.data<float>()); break;
    case ElementType::u8: fill(t.data<std::uint8_t>()); break;
    case ElementType::s8: fill(t.data<std::int8_t>()); break;
    case ElementType::s32: fill(t.data<std::int32_t>()); break;
    case ElementType::s64: fill(t.data<std::int64_t>()); break;
  }
  return t;
}

std::shared_ptr<const Tensor> to_shared_tensor(const Literal& lit, const std::string& what,
                                               Shape shape) {
  const std::shared_ptr<const Tensor>& elements = lit.elements();
  if (!elements || !to_element_type(lit.type) || element_count(shape) != elements->size()) {
    return std::make_shared<const Tensor>(to_tensor(lit, what, std::move(shape)));
  }
  if (shape == elements->shape()) return elements;
  return graph::owned_view(elements, elements->type(), std::move(shape), elements->raw_data());
}

Tensor to_tensor(const Literal& lit, const std::string& what) {
  return to_tensor(lit, what, lit.shape);
}

AttrReader::AttrReader(const ::onnx::NodeProto& node, std::string label)
    : label_(std::move(label)) {
  for (const auto& a : node.attribute()) attrs_[a.name()] = &a;
}

const ::onnx::AttributeProto& AttrReader::get(const std::string& name, int type) {
  used_.insert(name);
  const ::onnx::AttributeProto& a = *attrs_.at(name);
  if (a.type() != type && a.type() != ::onnx::AttributeProto_AttributeType_UNDEFINED) {
    throw GraphError("import " + label_ + ": attribute '" + name + "' has type " +
                     std::to_string(a.type()) + " (expected " + std::to_string(type) + ")");
  }
  return a;
}

std::int64_t AttrReader::i(const std::string& name, std::int64_t fallback) {
  if (!has(name)) return fallback;
  return get(name, ::onnx::AttributeProto_AttributeType_INT).i();
}

float AttrReader::f(const std::string& name, float fallback) {
  if (!has(name)) return fallback;
  return get(name, ::onnx::AttributeProto_AttributeType_FLOAT).f();
}

std::string AttrReader::s(const std::string& name, const std::string& fallback) {
  if (!has(name)) return fallback;
  return get(name, ::onnx::AttributeProto_AttributeType_STRING).s();
}

std::vector<std::int64_t> AttrReader::ints(const std::string& name,
                                           std::vector<std::int64_t> fallback) {
  if (!has(name)) return fallback;
  const auto& a = get(name, ::onnx::AttributeProto_AttributeType_INTS);
  return {a.ints().begin(), a.ints().end()};
}

std::vector<float> AttrReader::floats(const std::string& name) {
  if (!has(name)) return {};
  const auto& a = get(name, ::onnx::AttributeProto_AttributeType_FLOATS);
  return {a.floats().begin(), a.floats().end()};
}

const ::onnx::TensorProto* AttrReader::tensor(const std::string& name) {
  if (!has(name)) return nullptr;
  return &get(name, ::onnx::AttributeProto_AttributeType_TENSOR).t();
}

void AttrReader::check_all_used() const {
  for (const auto& [name, a] : attrs_) {
    if (used_.count(name) == 0) {
      throw UnsupportedError("import " + label_ + ": unsupported attribute '" + name + "'");
    }
  }
}

void AttrReader::unsupported_value(const std::string& name, const std::string& problem) const {
  throw UnsupportedError("import " + label_ + ": unsupported attribute '" + name + "' " + problem);
}

}  // namespace detail
}  // namespace qfuse::onnx
