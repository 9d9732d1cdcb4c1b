#include "tools/common/isa.hpp"

#include <stdexcept>
#include <utility>
#include <vector>

namespace qfuse::tools {
namespace {

const std::vector<std::pair<std::string, dnnl::cpu_isa>>& isa_names() {
  static const std::vector<std::pair<std::string, dnnl::cpu_isa>> kNames = {
      {"sse41", dnnl::cpu_isa::sse41},
      {"avx", dnnl::cpu_isa::avx},
      {"avx2", dnnl::cpu_isa::avx2},
      {"avx2_vnni", dnnl::cpu_isa::avx2_vnni},
      {"avx512_core", dnnl::cpu_isa::avx512_core},
      {"avx512_core_vnni", dnnl::cpu_isa::avx512_core_vnni},
      {"avx512_core_bf16", dnnl::cpu_isa::avx512_core_bf16},
      {"avx512_core_amx", dnnl::cpu_isa::avx512_core_amx},
      {"all", dnnl::cpu_isa::all},
  };
  return kNames;
}

}  // namespace

void set_max_isa(const std::string& name) {
  std::string known;
  for (const auto& [n, value] : isa_names()) {
    if (n == name) {
      dnnl::set_max_cpu_isa(value);
      return;
    }
    known += (known.empty() ? "" : ", ") + n;
  }
  throw std::invalid_argument("--isa " + name + ": unknown (expected one of " + known + ")");
}

std::string isa_name(dnnl::cpu_isa isa) {
  for (const auto& [name, value] : isa_names()) {
    if (value == isa) return name;
  }
  return "other";
}

}  // namespace qfuse::tools
