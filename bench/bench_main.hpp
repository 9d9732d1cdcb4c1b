#pragma once
// What every qfuse benchmark binary's main does before Google Benchmark sees
// the command line: --isa NAME (or --isa=NAME) caps oneDNN's instruction set,
// e.g. avx512_core_vnni on a machine with AMX.

#include <cstring>
#include <iostream>
#include <stdexcept>
#include <string>

#include "tools/common/isa.hpp"

namespace qfuse::bench {

// Applies and removes --isa from argv. False (after a message) for a bad value.
inline bool take_isa_flag(int& argc, char** argv) {
  int out = 1;
  for (int i = 1; i < argc; ++i) {
    std::string value;
    if (std::strcmp(argv[i], "--isa") == 0) {
      if (i + 1 >= argc) {
        std::cerr << "--isa needs a value\n";
        return false;
      }
      value = argv[++i];
    } else if (std::strncmp(argv[i], "--isa=", 6) == 0) {
      value = argv[i] + 6;
    } else {
      argv[out++] = argv[i];
      continue;
    }
    try {
      tools::set_max_isa(value);
    } catch (const std::invalid_argument& e) {
      std::cerr << e.what() << '\n';
      return false;
    }
  }
  argc = out;
  argv[argc] = nullptr;
  return true;
}

}  // namespace qfuse::bench
