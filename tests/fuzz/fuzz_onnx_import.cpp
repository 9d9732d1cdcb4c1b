// Fuzz target: the ONNX importer, then compile (fused and unfused) and one
// inference of what imports. A malformed model must end in a qfuse::Error;
// any other exception, a crash or a sanitizer report is a finding.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <spdlog/spdlog.h>

#include "graph/onnx/importer.hpp"
#include "plugin/api_internal.hpp"

namespace {

// Inputs whose graphs hold more than this many elements are imported but not
// compiled: the fuzzer looks for wrong handling, not for large allocations.
constexpr std::int64_t kMaxElements = std::int64_t{1} << 22;

bool small_enough(const qfuse::graph::Graph& g) {
  std::int64_t total = 0;
  for (std::uint32_t i = 0; i < g.value_count(); ++i) {
    total += qfuse::element_count(g.value(qfuse::graph::ValueId{i}).shape);
    if (total > kMaxElements) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const bool quiet = [] {
    spdlog::set_level(spdlog::level::off);
    return true;
  }();
  (void)quiet;
  try {
    const std::string_view bytes(reinterpret_cast<const char*>(data), size);
    const qfuse::graph::Graph g = qfuse::onnx::import_bytes(bytes, {}, "fuzz input");
    if (!small_enough(g)) return 0;
    for (bool fuse : {true, false}) {
      const qfuse::CompiledModel model = qfuse::compile(g, {.fuse = fuse, .threads = 1});
      qfuse::InferRequest request = model.create_infer_request();
      request.infer();
      for (const std::string& name : model.output_names()) (void)request.output(name).byte_size();
    }
  } catch (const qfuse::Error&) {
    // The expected outcome for a malformed model.
  }
  return 0;
}
