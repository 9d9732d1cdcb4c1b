#pragma once
// NumPy .npy files (format 1.0-3.0, C order) for the element types qfuse
// knows: '<f4', '|i1', '|u1', '<i4'.

#include <filesystem>

#include "qfuse/tensor.hpp"

namespace qfuse::tools {

// Throws IoError naming the file and the problem.
Tensor read_npy(const std::filesystem::path& path);
void write_npy(const std::filesystem::path& path, const Tensor& tensor);

// The .npy file of a tensor in a directory of them: its name percent-encoded
// as JavaScript's encodeURIComponent does (ONNX names hold '/', ':'), so the
// files ONNX Runtime's harness (bench/peers) writes and qfuse's match.
std::filesystem::path npy_path(const std::filesystem::path& dir, const std::string& tensor);
// A file stem's percent-encoded bytes decoded ("%2F" -> "/").
std::string tensor_name_of(const std::string& stem);

}  // namespace qfuse::tools
