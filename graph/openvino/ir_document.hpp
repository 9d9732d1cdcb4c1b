#pragma once
// Internal to the OpenVINO IR reader: the .xml read by pugixml into layers,
// ports and edges, checked and put in topological order, and the .bin mapped
// read-only. Nothing here knows an operator's meaning (importer.cpp does).
//
// What is checked, each a GraphError naming the layer (type, name, id):
// the XML parses and has <net version="10|11"> with <layers> and <edges>;
// layer ids are unique integers; every edge names an existing layer's output
// port and another's input port; every input port is fed by exactly one edge;
// the layers form no cycle.

#include <pugixml.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "graph/ops.hpp"
#include "qfuse/tensor.hpp"

namespace qfuse::openvino::detail {

using graph::Ints;

// The element types the reader takes (OpenVINO's names: f32, f16, i8, u8,
// i32, i64; IR v10 files may spell them as port precisions FP32, FP16, I8,
// U8, I32, I64).
enum class OvType : std::uint8_t { f32, f16, i8, u8, i32, i64 };
std::optional<OvType> ov_type_named(std::string_view name);
std::string_view ov_type_name(OvType t);
std::size_t ov_type_size(OvType t);
bool is_float(OvType t);

struct Port {
  std::int64_t id = 0;
  std::string precision;
  // -1 where dynamic.
  std::vector<std::int64_t> dims;
  // Tensor names (v11's "names", comma separated, "\," escaped).
  std::vector<std::string> names;
};

// One <layer>: its ports in file order, and where each input comes from.
struct Layer {
  std::int64_t id = 0;
  std::string name, type, version;
  pugi::xml_node data;  // <data>, empty when the layer has none
  std::vector<Port> inputs, outputs;
  struct Source {
    std::size_t layer;   // index in IrDocument::layers
    std::size_t output;  // index in that layer's outputs
  };
  std::vector<Source> sources;  // one per input

  // "Convolution layer 'conv1' (id 7)"
  std::string label() const;
};

// The .bin, mapped read-only (or bytes the caller keeps alive).
class BinData {
 public:
  BinData() = default;
  // IoError when the file cannot be opened or mapped.
  static BinData map_file(const std::filesystem::path& path);
  static BinData view(std::span<const std::byte> bytes);
  BinData(BinData&& other) noexcept;
  BinData& operator=(BinData&& other) noexcept;
  BinData(const BinData&) = delete;
  BinData& operator=(const BinData&) = delete;
  ~BinData();

  const std::byte* data() const { return data_; }
  std::size_t size() const { return size_; }
  bool present() const { return present_; }

 private:
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  bool mapped_ = false;
  bool present_ = false;
};

struct IrDocument {
  int version = 0;  // 10 or 11
  std::string name;
  std::vector<Layer> layers;       // file order
  std::vector<std::size_t> order;  // topological: producers first, ties by file order
  // Readers of each output: consumers[layer][output] = {(layer, input), ...}.
  std::vector<std::vector<std::vector<std::pair<std::size_t, std::size_t>>>> consumers;
  pugi::xml_document xml;
};

// Parses and checks `xml` (GraphError naming `origin` and the layer).
std::unique_ptr<IrDocument> parse_ir(std::string_view xml, const std::string& origin);

// Reads a layer's <data> attributes, each at most once, so that an
// attribute no handler read is reported (UnsupportedError: qfuse would
// otherwise ignore what it changes). Values that do not parse are
// GraphErrors naming the layer and the attribute.
class AttrReader {
 public:
  explicit AttrReader(const Layer& layer);

  bool has(const char* name) const;
  std::string s(const char* name, const std::string& fallback);
  std::string required(const char* name);
  std::int64_t i(const char* name, std::int64_t fallback);
  double f(const char* name, double fallback);
  bool b(const char* name, bool fallback);
  // A comma-separated list ("1, 1" or "1,1"); empty text: no values.
  Ints ints(const char* name, Ints fallback);
  // A shape attribute ("1, 3, 224, 224"; "" is rank 0); -1 where "?" or a range.
  Ints dims(const char* name);
  // Marks an attribute read without interpreting it.
  void ignore(const char* name) { used_.insert(name); }
  // UnsupportedError for the first attribute no handler read.
  void check_all_used() const;
  [[noreturn]] void unsupported_value(const char* name, const std::string& problem) const;

 private:
  const char* raw(const char* name);
  [[noreturn]] void bad(const char* name, const char* value, const char* expected) const;

  const Layer& layer_;
  std::set<std::string> used_;
};

}  // namespace qfuse::openvino::detail
