#pragma once
// Internal to the ONNX frontend: decoding TensorProto and reading attributes.
// The semantics the importer rests on are in importer.hpp.

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <map>
#include <filesystem>
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
std::optional<ElementType> to_element_type(int type);  // f32, u8, s8, s32 only
int to_onnx_type(ElementType type);

// A tensor's values, each held exactly in a double (floats are f32 values,
// integers up to 2^53).
struct Literal {
  int type = kUndefined;
  Shape shape;
  std::vector<double> values;
  // Integer raw data's least and greatest value, found while decoding (a
  // second pass over a large weight's doubles costs as much as the decode).
  std::optional<std::pair<double, double>> extent;
};

// Throws UnsupportedError (naming `what`) for string, float16, bfloat16 and
// complex, GraphError for a size mismatch. External data is read from the
// file its location names under `external_dir` (IoError when it cannot be
// read, GraphError when the location leaves the directory or the bytes it
// names are not there).
Literal decode_tensor(const ::onnx::TensorProto& t, const std::string& what,
                      const std::filesystem::path& external_dir = {});

// Literal -> Tensor of the ONNX type; UnsupportedError for other types.
Tensor to_tensor(const Literal& literal, const std::string& what);
// The same values under another shape of as many elements (no copy of the literal).
Tensor to_tensor(const Literal& literal, const std::string& what, Shape shape);

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
