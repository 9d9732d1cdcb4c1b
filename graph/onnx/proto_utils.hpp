#pragma once
// Internal to the ONNX frontend: decoding TensorProto and reading attributes.
// The semantics the importer rests on are in importer.hpp.

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "qfuse/error.hpp"
#include "qfuse/tensor.hpp"

namespace qfuse::onnx::detail {

// Element type codes of TensorProto.DataType.
enum OnnxType : int {
  kUndefined = 0,
  kFloat = 1,
  kUint8 = 2,
  kInt8 = 3,
  kUint16 = 4,
  kInt16 = 5,
  kInt32 = 6,
  kInt64 = 7,
  kString = 8,
  kBool = 9,
  kFloat16 = 10,
  kDouble = 11,
  kUint32 = 12,
  kUint64 = 13,
  kComplex64 = 14,
  kComplex128 = 15,
  kBfloat16 = 16,
};

bool is_integer_type(int type);                  // bool and every integer type
std::optional<ElementType> to_element_type(int type);  // f32, u8, s8, s32, s64 only
int to_onnx_type(ElementType type);

// A constant the importer reads and folds: its values, each held exactly in
// a double (floats are f32 values, integers up to 2^53). An initializer of a
// type qfuse tensors hold (FLOAT, UINT8, INT8, INT32, INT64) keeps its
// elements as that tensor instead, and the doubles are made only when
// something reads them: a weight goes from the file to its graph constant
// without them (to_shared_tensor).
class Literal {
 public:
  Literal() = default;
  Literal(int onnx_type, Shape dims, std::vector<double> values)
      : type(onnx_type), shape(std::move(dims)), values_(std::move(values)), have_values_(true) {}
  // `elements` holds the literal's elements as the tensor type of `type`.
  Literal(int onnx_type, Shape dims, std::shared_ptr<const Tensor> elements)
      : type(onnx_type), shape(std::move(dims)), elements_(std::move(elements)) {}

  int type = kUndefined;
  Shape shape;
  // Integer raw data's least and greatest value, found while decoding.
  std::optional<std::pair<double, double>> extent;

  // The values as doubles, made from the elements on first use.
  const std::vector<double>& values() const;
  // The values to change: the elements, if any, are dropped.
  std::vector<double>& mutable_values();
  // The elements as a tensor of the literal's type, or null when the literal
  // holds doubles only.
  const std::shared_ptr<const Tensor>& elements() const { return elements_; }

 private:
  mutable std::vector<double> values_;
  mutable bool have_values_ = false;
  std::shared_ptr<const Tensor> elements_;
};

// Throws UnsupportedError (naming `what`) for string, float16, bfloat16 and
// complex, GraphError for a size mismatch. External data is read from the
// file its location names under `external_dir` (IoError when it cannot be
// read, GraphError when the location leaves the directory or the bytes it
// names are not there).
Literal decode_tensor(const ::onnx::TensorProto& t, const std::string& what,
                      const std::filesystem::path& external_dir = {});
// The same for a tensor decoded once: raw bytes of a type qfuse tensors hold
// are taken out of the message (or read from external data) and become the
// literal's elements where they lie, without a copy.
Literal take_tensor(::onnx::TensorProto& t, const std::string& what,
                    const std::filesystem::path& external_dir = {});

// Literal -> Tensor of the ONNX type; UnsupportedError for other types.
Tensor to_tensor(const Literal& literal, const std::string& what);
// The same values under another shape of as many elements.
Tensor to_tensor(const Literal& literal, const std::string& what, Shape shape);
// The same, shared: a literal that holds its elements gives them (under
// `shape`) without a copy.
std::shared_ptr<const Tensor> to_shared_tensor(const Literal& literal, const std::string& what,
                                               Shape shape);

// Reads one node's attributes and remembers which were read, so that
// anything left over can be reported as unsupported.
class AttrReader {
 public:
  AttrReader(const ::onnx::NodeProto& node, std::string label);

  bool has(const std::string& name) const { return attrs_.count(name) > 0; }
  std::int64_t i(const std::string& name, std::int64_t fallback);
  float f(const std::string& name, float fallback);
  std::string s(const std::string& name, const std::string& fallback);
  std::vector<std::int64_t> ints(const std::string& name, std::vector<std::int64_t> fallback = {});
  std::vector<float> floats(const std::string& name);
  const ::onnx::TensorProto* tensor(const std::string& name);
  // Marks an attribute read without interpreting it (it does not matter here).
  void ignore(const std::string& name) { used_.insert(name); }

  // UnsupportedError for the first attribute nobody read.
  void check_all_used() const;
  [[noreturn]] void unsupported_value(const std::string& name, const std::string& problem) const;

 private:
  const ::onnx::AttributeProto& get(const std::string& name, int type);

  std::string label_;
  std::map<std::string, const ::onnx::AttributeProto*> attrs_;
  std::set<std::string> used_;
};

}  // namespace qfuse::onnx::detail
