// Fuzz target: the ONNX importer, then compile (fused and unfused) and one
// inference of what imports. A malformed model must end in a qfuse::Error;
// any other exception, a crash or a sanitizer report is a finding.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <spdlog/spdlog.h>

#include "graph/onnx/importer.hpp"
#include "tests/fuzz/compile_and_run.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const bool quiet = [] {
    spdlog::set_level(spdlog::level::off);
    return true;
  }();
  (void)quiet;
  try {
    const std::string_view bytes(reinterpret_cast<const char*>(data), size);
    const qfuse::graph::Graph g = qfuse::onnx::import_bytes(bytes, {}, "fuzz input");
    qfuse::fuzz::compile_and_run(g);
  } catch (const qfuse::Error&) {
    // The expected outcome for a malformed model.
  }
  return 0;
}
