#pragma once
// NumPy .npy files (format 1.0-3.0, C order) for the element types qfuse
// knows: '<f4', '|i1', '|u1', '<i4'.

#include <filesystem>

#include "qfuse/tensor.hpp"

namespace qfuse::tools {

// Throws IoError naming the file and the problem.
Tensor read_npy(const std::filesystem::path& path);
void write_npy(const std::filesystem::path& path, const Tensor& tensor);

}  // namespace qfuse::tools
