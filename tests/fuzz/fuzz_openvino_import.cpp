// Fuzz target: the OpenVINO IR reader, then compile (fused and unfused) and
// one inference of what imports. An input is the .xml text, a NUL byte, and
// the .bin's bytes (all of it the .xml when there is no NUL). A malformed
// model must end in a qfuse::Error; any other exception, a crash or a
// sanitizer report is a finding.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

#include <spdlog/spdlog.h>

#include "graph/openvino/importer.hpp"
#include "tests/fuzz/compile_and_run.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const bool quiet = [] {
    spdlog::set_level(spdlog::level::off);
    return true;
  }();
  (void)quiet;
  const char* text = reinterpret_cast<const char*>(data);
  const void* nul = size > 0 ? std::memchr(text, 0, size) : nullptr;
  const std::size_t xml_size = nul ? static_cast<std::size_t>(static_cast<const char*>(nul) - text) : size;
  const std::string_view xml(text, xml_size);
  const auto* bin = reinterpret_cast<const std::byte*>(data) + (nul ? xml_size + 1 : size);
  const std::size_t bin_size = nul ? size - xml_size - 1 : 0;
  try {
    const qfuse::graph::Graph g =
        qfuse::openvino::import_buffers(xml, std::span(bin, bin_size), {}, "fuzz input");
    qfuse::fuzz::compile_and_run(g);
  } catch (const qfuse::Error&) {
    // The expected outcome for a malformed model.
  }
  return 0;
}
