#pragma once
// oneDNN's CPU ISA levels by the names the command-line tool and the
// benchmarks take (--isa), e.g. to run AMX against AVX-512 VNNI on one machine.

#include <string>

#include <oneapi/dnnl/dnnl.hpp>

namespace qfuse::tools {

// Caps the instruction set oneDNN may use (dnnl::set_max_cpu_isa). Call it
// before any primitive exists. Throws std::invalid_argument for an unknown
// name, listing the known ones.
void set_max_isa(const std::string& name);

// The name of an ISA level ("avx512_core_amx", ...), or "other".
std::string isa_name(dnnl::cpu_isa isa);

// The ISA oneDNN's kernels run at in this process.
inline std::string effective_isa() { return isa_name(dnnl::get_effective_cpu_isa()); }

}  // namespace qfuse::tools
