#include "tools/common/npy.hpp"

#include <cctype>
#include <cstring>
#include <fstream>
#include <regex>

#include "qfuse/error.hpp"

namespace qfuse::tools {

std::filesystem::path npy_path(const std::filesystem::path& dir, const std::string& tensor) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string stem;
  for (const char c : tensor) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u) != 0 || std::strchr("-_.!~*'()", c) != nullptr) {
      stem += c;
    } else {
      stem += '%';
      stem += kHex[u >> 4];
      stem += kHex[u & 15];
    }
  }
  return dir / (stem + ".npy");
}

std::string tensor_name_of(const std::string& stem) {
  std::string out;
  for (std::size_t i = 0; i < stem.size(); ++i) {
    if (stem[i] == '%' && i + 2 < stem.size() &&
        std::isxdigit(static_cast<unsigned char>(stem[i + 1])) != 0 &&
        std::isxdigit(static_cast<unsigned char>(stem[i + 2])) != 0) {
      out += static_cast<char>(std::stoi(stem.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      out += stem[i];
    }
  }
  return out;
}
namespace {

constexpr char kMagic[] = "\x93NUMPY";

[[noreturn]] void fail(const std::filesystem::path& path, const std::string& problem) {
  throw IoError("read " + path.string() + ": " + problem);
}

std::string descr_of(ElementType type) {
  switch (type) {
    case ElementType::f32: return "<f4";
    case ElementType::s8: return "|i1";
    case ElementType::u8: return "|u1";
    case ElementType::s32: return "<i4";
    case ElementType::s64: return "<i8";
  }
  return "";
}

}  // namespace

Tensor read_npy(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot open the file");
  char magic[6];
  in.read(magic, 6);
  if (!in || std::memcmp(magic, kMagic, 6) != 0) fail(path, "not a .npy file (bad magic)");
  unsigned char version[2];
  in.read(reinterpret_cast<char*>(version), 2);
  std::uint32_t header_len = 0;
  if (version[0] == 1) {
    unsigned char b[2];
    in.read(reinterpret_cast<char*>(b), 2);
    header_len = static_cast<std::uint32_t>(b[0] | (b[1] << 8));
  } else if (version[0] == 2 || version[0] == 3) {
    unsigned char b[4];
    in.read(reinterpret_cast<char*>(b), 4);
    header_len = static_cast<std::uint32_t>(b[0] | (b[1] << 8) | (b[2] << 16)) |
                 (static_cast<std::uint32_t>(b[3]) << 24);
  } else {
    fail(path, "unsupported .npy version " + std::to_string(version[0]));
  }
  if (!in || header_len > (1u << 20)) fail(path, "truncated or oversized header");
  std::string header(header_len, '\0');
  in.read(header.data(), header_len);
  if (!in) fail(path, "truncated header");

  std::smatch m;
  if (!std::regex_search(header, m, std::regex(R"('descr'\s*:\s*'([^']*)')"))) {
    fail(path, "header has no 'descr'");
  }
  const std::string descr = m[1];
  ElementType type;
  if (descr == "<f4") {
    type = ElementType::f32;
  } else if (descr == "|i1" || descr == "<i1" || descr == "i1") {
    type = ElementType::s8;
  } else if (descr == "|u1" || descr == "<u1" || descr == "u1") {
    type = ElementType::u8;
  } else if (descr == "<i4") {
    type = ElementType::s32;
  } else if (descr == "<i8") {
    type = ElementType::s64;
  } else {
    fail(path, "unsupported dtype '" + descr + "' (expected <f4, |i1, |u1, <i4 or <i8)");
  }
  if (std::regex_search(header, m, std::regex(R"('fortran_order'\s*:\s*True)"))) {
    fail(path, "Fortran-ordered arrays are not supported (expected C order)");
  }
  if (!std::regex_search(header, m, std::regex(R"('shape'\s*:\s*\(([^)]*)\))"))) {
    fail(path, "header has no 'shape'");
  }
  Shape shape;
  const std::string dims = m[1];
  std::regex number(R"(\d+)");
  for (auto it = std::sregex_iterator(dims.begin(), dims.end(), number);
       it != std::sregex_iterator(); ++it) {
    shape.push_back(std::stoll(it->str()));
  }
  Tensor t(type, shape);
  in.read(static_cast<char*>(t.raw_data()), static_cast<std::streamsize>(t.byte_size()));
  if (!in) {
    fail(path, "data is shorter than shape " + to_string(shape) + " needs (" +
                   std::to_string(t.byte_size()) + " bytes)");
  }
  return t;
}

void write_npy(const std::filesystem::path& path, const Tensor& tensor) {
  // Python tuple syntax: (), (5,), (1, 3, 8, 8).
  std::string shape;
  for (std::size_t i = 0; i < tensor.shape().size(); ++i) {
    shape += (i ? ", " : "") + std::to_string(tensor.shape()[i]);
  }
  if (tensor.shape().size() == 1) shape += ",";
  std::string header = "{'descr': '" + descr_of(tensor.type()) +
                       "', 'fortran_order': False, 'shape': (" + shape + "), }";
  // Magic (6) + version (2) + length (2) + header + '\n', padded to 64 bytes.
  const std::size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  std::ofstream out(path, std::ios::binary);
  if (!out) throw IoError("write " + path.string() + ": cannot create the file");
  out.write(kMagic, 6);
  const char version[2] = {1, 0};
  out.write(version, 2);
  const auto len = static_cast<std::uint16_t>(header.size());
  const char len_bytes[2] = {static_cast<char>(len & 0xff), static_cast<char>(len >> 8)};
  out.write(len_bytes, 2);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(static_cast<const char*>(tensor.raw_data()),
            static_cast<std::streamsize>(tensor.byte_size()));
  if (!out) throw IoError("write " + path.string() + ": write failed");
}

}  // namespace qfuse::tools
