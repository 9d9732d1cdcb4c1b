#include "graph/openvino/ir_document.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <queue>
#include <unordered_map>

#include "qfuse/error.hpp"

namespace qfuse::openvino::detail {

namespace {

struct TypeName {
  std::string_view name;       // OpenVINO's element type name
  std::string_view precision;  // the port precision spelling
  OvType type;
  std::size_t size;
};
constexpr TypeName kTypes[] = {
    {"f32", "FP32", OvType::f32, 4}, {"f16", "FP16", OvType::f16, 2},
    {"i8", "I8", OvType::i8, 1},     {"u8", "U8", OvType::u8, 1},
    {"i32", "I32", OvType::i32, 4},  {"i64", "I64", OvType::i64, 8},
};

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::optional<std::int64_t> parse_int(std::string_view s) {
  s = trim(s);
  std::int64_t v = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

std::vector<std::string_view> split_list(std::string_view s) {
  std::vector<std::string_view> out;
  if (trim(s).empty()) return out;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = s.find(',', start);
    out.push_back(trim(s.substr(start, comma - start)));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

// v11's tensor names: comma separated, a comma inside a name escaped as "\,".
std::vector<std::string> split_names(std::string_view s) {
  std::vector<std::string> out;
  std::string cur;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size() && s[i + 1] == ',') {
      cur += ',';
      ++i;
    } else if (s[i] == ',') {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += s[i];
    }
  }
  if (!cur.empty() || !out.empty()) out.push_back(cur);
  return out;
}

[[noreturn]] void malformed(const std::string& origin, const std::string& problem) {
  throw GraphError("import " + origin + ": " + problem);
}

Port read_port(const pugi::xml_node& node, const Layer& layer, const std::string& origin) {
  Port p;
  const auto id = parse_int(node.attribute("id").value());
  if (!id) {
    malformed(origin, layer.label() + ": a port has id '" + node.attribute("id").value() +
                          "' (expected an integer)");
  }
  p.id = *id;
  p.precision = node.attribute("precision").value();
  for (const pugi::xml_node& d : node.children("dim")) {
    const auto v = parse_int(d.text().get());
    if (!v || *v < -1) {
      malformed(origin, layer.label() + ": port " + std::to_string(p.id) + " has dim '" +
                            d.text().get() + "' (expected an integer >= -1)");
    }
    p.dims.push_back(*v);
  }
  p.names = split_names(node.attribute("names").value());
  return p;
}

}  // namespace

std::optional<OvType> ov_type_named(std::string_view name) {
  for (const TypeName& t : kTypes) {
    if (name == t.name || name == t.precision) return t.type;
  }
  return std::nullopt;
}

std::string_view ov_type_name(OvType type) {
  for (const TypeName& t : kTypes) {
    if (t.type == type) return t.name;
  }
  return "?";
}

std::size_t ov_type_size(OvType type) {
  for (const TypeName& t : kTypes) {
    if (t.type == type) return t.size;
  }
  return 0;
}

bool is_float(OvType t) { return t == OvType::f32 || t == OvType::f16; }

std::string Layer::label() const {
  return type + " layer '" + name + "' (id " + std::to_string(id) + ")";
}

// --- the .bin ---------------------------------------------------------------

BinData BinData::map_file(const std::filesystem::path& path) {
  BinData b;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    throw IoError("open " + path.string() + ": " + std::strerror(errno) +
                  " (an OpenVINO IR's weights are in the .bin beside its .xml)");
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw IoError("read " + path.string() + ": not a regular file");
  }
  b.size_ = static_cast<std::size_t>(st.st_size);
  b.present_ = true;
  if (b.size_ > 0) {
    void* p = ::mmap(nullptr, b.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      throw IoError("map " + path.string() + ": " + std::strerror(err));
    }
    b.data_ = static_cast<const std::byte*>(p);
    b.mapped_ = true;
  }
  ::close(fd);
  return b;
}

BinData BinData::view(std::span<const std::byte> bytes) {
  BinData b;
  b.data_ = bytes.data();
  b.size_ = bytes.size();
  b.present_ = true;
  return b;
}

BinData::BinData(BinData&& o) noexcept
    : data_(o.data_), size_(o.size_), mapped_(o.mapped_), present_(o.present_) {
  o.data_ = nullptr;
  o.size_ = 0;
  o.mapped_ = false;
}

BinData& BinData::operator=(BinData&& o) noexcept {
  if (this != &o) {
    if (mapped_) ::munmap(const_cast<std::byte*>(data_), size_);
    data_ = o.data_;
    size_ = o.size_;
    mapped_ = o.mapped_;
    present_ = o.present_;
    o.data_ = nullptr;
    o.size_ = 0;
    o.mapped_ = false;
  }
  return *this;
}

BinData::~BinData() {
  if (mapped_) ::munmap(const_cast<std::byte*>(data_), size_);
}

// --- the XML ----------------------------------------------------------------

std::unique_ptr<IrDocument> parse_ir(std::string_view xml, const std::string& origin) {
  auto doc = std::make_unique<IrDocument>();
  const pugi::xml_parse_result r = doc->xml.load_buffer(xml.data(), xml.size());
  if (!r) {
    malformed(origin, std::string("the XML does not parse: ") + r.description() +
                          " at byte " + std::to_string(r.offset));
  }
  const pugi::xml_node net = doc->xml.child("net");
  if (!net) malformed(origin, "no <net> element (not an OpenVINO IR .xml)");
  const auto version = parse_int(net.attribute("version").value());
  if (!version) malformed(origin, "<net> has no integer 'version' attribute");
  if (*version != 10 && *version != 11) {
    throw UnsupportedError("import " + origin + ": IR version " + std::to_string(*version) +
                           " is not supported (expected 10 or 11)");
  }
  doc->version = static_cast<int>(*version);
  doc->name = net.attribute("name").value();
  const pugi::xml_node layers = net.child("layers");
  if (!layers) malformed(origin, "<net> has no <layers>");

  std::unordered_map<std::int64_t, std::size_t> index_of;
  for (const pugi::xml_node& node : layers.children("layer")) {
    Layer l;
    l.name = node.attribute("name").value();
    l.type = node.attribute("type").value();
    l.version = node.attribute("version").value();
    const auto id = parse_int(node.attribute("id").value());
    if (!id) {
      malformed(origin, "layer '" + l.name + "' of type '" + l.type + "' has id '" +
                            node.attribute("id").value() + "' (expected an integer)");
    }
    l.id = *id;
    if (l.type.empty()) malformed(origin, l.label() + ": no 'type' attribute");
    if (!index_of.emplace(l.id, doc->layers.size()).second) {
      malformed(origin, l.label() + ": another layer has id " + std::to_string(l.id));
    }
    l.data = node.child("data");
    for (const pugi::xml_node& p : node.child("input").children("port")) {
      l.inputs.push_back(read_port(p, l, origin));
    }
    for (const pugi::xml_node& p : node.child("output").children("port")) {
      l.outputs.push_back(read_port(p, l, origin));
    }
    std::set<std::int64_t> ids;
    for (const auto* ports : {&l.inputs, &l.outputs}) {
      for (const Port& p : *ports) {
        if (!ids.insert(p.id).second) {
          malformed(origin, l.label() + ": two ports have id " + std::to_string(p.id));
        }
      }
    }
    l.sources.assign(l.inputs.size(), {SIZE_MAX, 0});
    doc->layers.push_back(std::move(l));
  }
  if (doc->layers.empty()) malformed(origin, "<layers> holds no layer");

  // Edges: from an output port to an input port, each input fed once.
  const pugi::xml_node edges = net.child("edges");
  if (!edges) malformed(origin, "<net> has no <edges>");
  const auto port_index = [](const std::vector<Port>& ports, std::int64_t id) -> std::optional<std::size_t> {
    for (std::size_t k = 0; k < ports.size(); ++k) {
      if (ports[k].id == id) return k;
    }
    return std::nullopt;
  };
  for (const pugi::xml_node& e : edges.children("edge")) {
    const auto fl = parse_int(e.attribute("from-layer").value());
    const auto fp = parse_int(e.attribute("from-port").value());
    const auto tl = parse_int(e.attribute("to-layer").value());
    const auto tp = parse_int(e.attribute("to-port").value());
    const std::string text = "edge " + std::string(e.attribute("from-layer").value()) + ":" +
                             e.attribute("from-port").value() + " -> " +
                             e.attribute("to-layer").value() + ":" + e.attribute("to-port").value();
    if (!fl || !fp || !tl || !tp) malformed(origin, text + ": expected integer layers and ports");
    const auto from = index_of.find(*fl);
    const auto to = index_of.find(*tl);
    if (from == index_of.end()) malformed(origin, text + ": no layer has id " + std::to_string(*fl));
    if (to == index_of.end()) malformed(origin, text + ": no layer has id " + std::to_string(*tl));
    Layer& src = doc->layers[from->second];
    Layer& dst = doc->layers[to->second];
    const auto out = port_index(src.outputs, *fp);
    if (!out) {
      malformed(origin, text + ": " + src.label() + " has no output port " + std::to_string(*fp));
    }
    const auto in = port_index(dst.inputs, *tp);
    if (!in) {
      malformed(origin, text + ": " + dst.label() + " has no input port " + std::to_string(*tp));
    }
    if (dst.sources[*in].layer != SIZE_MAX) {
      malformed(origin, text + ": " + dst.label() + "'s input port " + std::to_string(*tp) +
                            " is fed by two edges");
    }
    dst.sources[*in] = {from->second, *out};
  }

  const std::size_t n = doc->layers.size();
  doc->consumers.resize(n);
  for (std::size_t i = 0; i < n; ++i) doc->consumers[i].resize(doc->layers[i].outputs.size());
  std::vector<std::size_t> pending(n, 0);
  for (std::size_t i = 0; i < n; ++i) {
    const Layer& l = doc->layers[i];
    for (std::size_t k = 0; k < l.sources.size(); ++k) {
      if (l.sources[k].layer == SIZE_MAX) {
        malformed(origin, l.label() + ": input port " + std::to_string(l.inputs[k].id) +
                              " has no edge");
      }
      doc->consumers[l.sources[k].layer][l.sources[k].output].emplace_back(i, k);
      ++pending[i];
    }
  }
  // Kahn's order, the lowest file index first among the ready layers.
  std::priority_queue<std::size_t, std::vector<std::size_t>, std::greater<>> ready;
  for (std::size_t i = 0; i < n; ++i) {
    if (pending[i] == 0) ready.push(i);
  }
  while (!ready.empty()) {
    const std::size_t i = ready.top();
    ready.pop();
    doc->order.push_back(i);
    for (const auto& readers : doc->consumers[i]) {
      for (const auto& [c, k] : readers) {
        if (--pending[c] == 0) ready.push(c);
      }
    }
  }
  if (doc->order.size() != n) {
    for (std::size_t i = 0; i < n; ++i) {
      if (pending[i] > 0) {
        malformed(origin, doc->layers[i].label() + " is on a cycle of edges (or reads one)");
      }
    }
  }
  return doc;
}

// --- attributes -------------------------------------------------------------

AttrReader::AttrReader(const Layer& layer) : layer_(layer) {}

bool AttrReader::has(const char* name) const { return layer_.data.attribute(name); }

const char* AttrReader::raw(const char* name) {
  used_.insert(name);
  const pugi::xml_attribute a = layer_.data.attribute(name);
  return a ? a.value() : nullptr;
}

void AttrReader::bad(const char* name, const char* value, const char* expected) const {
  throw GraphError("import " + layer_.label() + ": attribute '" + name + "' is '" + value +
                   "' (expected " + expected + ")");
}

std::string AttrReader::s(const char* name, const std::string& fallback) {
  const char* v = raw(name);
  return v ? std::string(v) : fallback;
}

std::string AttrReader::required(const char* name) {
  const char* v = raw(name);
  if (!v) throw GraphError("import " + layer_.label() + ": attribute '" + name + "' is missing");
  return v;
}

std::int64_t AttrReader::i(const char* name, std::int64_t fallback) {
  const char* v = raw(name);
  if (!v) return fallback;
  const auto x = parse_int(v);
  if (!x) bad(name, v, "an integer");
  return *x;
}

double AttrReader::f(const char* name, double fallback) {
  const char* v = raw(name);
  if (!v) return fallback;
  const std::string_view t = trim(v);
  double x = 0.0;
  const auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), x);
  if (ec != std::errc() || p != t.data() + t.size() || t.empty() || !std::isfinite(x)) {
    bad(name, v, "a finite number");
  }
  return x;
}

bool AttrReader::b(const char* name, bool fallback) {
  const char* v = raw(name);
  if (!v) return fallback;
  const std::string_view t = trim(v);
  if (t == "true" || t == "1") return true;
  if (t == "false" || t == "0") return false;
  bad(name, v, "true or false");
}

Ints AttrReader::ints(const char* name, Ints fallback) {
  const char* v = raw(name);
  if (!v) return fallback;
  Ints out;
  for (std::string_view item : split_list(v)) {
    const auto x = parse_int(item);
    if (!x) bad(name, v, "a comma-separated list of integers");
    out.push_back(*x);
  }
  return out;
}

Ints AttrReader::dims(const char* name) {
  const char* v = raw(name);
  if (!v) throw GraphError("import " + layer_.label() + ": attribute '" + name + "' is missing");
  Ints out;
  for (std::string_view item : split_list(v)) {
    if (item == "?" || item.find("..") != std::string_view::npos) {
      out.push_back(-1);
      continue;
    }
    const auto x = parse_int(item);
    if (!x || *x < -1) bad(name, v, "a comma-separated list of dimensions");
    out.push_back(*x);
  }
  return out;
}

void AttrReader::check_all_used() const {
  for (const pugi::xml_attribute& a : layer_.data.attributes()) {
    const std::string name = a.name();
    // Written into <data> by OpenVINO's serializer from runtime info; no
    // meaning for the computation.
    if (used_.count(name) || name == "PrimitivesPriority" || name == "alt_width") continue;
    throw UnsupportedError("import " + layer_.label() + ": unsupported attribute '" + name +
                           "' = '" + a.value() + "'");
  }
}

void AttrReader::unsupported_value(const char* name, const std::string& problem) const {
  throw UnsupportedError("import " + layer_.label() + ": attribute '" + name + "' " + problem);
}

}  // namespace qfuse::openvino::detail
