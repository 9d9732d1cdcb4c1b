#pragma once
// qfuse compare's report of a qfuse::Comparison, shared by the CLI and the
// Python package: a text table, JSON and a self-contained HTML page (an SVG
// plot of each tensor's SNR and off-grid share in execution order, the table,
// the fused layers). Uses the public API only.

#include <fstream>
#include <ostream>
#include <string>
#include <vector>

#include "qfuse/compare.hpp"
#include "qfuse/qfuse.hpp"

namespace qfuse::report {

// One line per tensor: LSB histogram, equal share, isolated figures, cosine, SNR.
void print_compare_table(std::ostream& out, const std::vector<TensorDiff>& tensors);

// Per tensor: the integer-only mode against the unfused path, the float-scale
// fused path against the unfused path, and integer-only against float-scale
// (in codes), with how each layer ran.
void print_integer_table(std::ostream& out, const Comparison& int_vs_unfused,
                         const std::vector<TensorDiff>& float_vs_unfused,
                         const std::vector<TensorDiff>& int_vs_float);

// With `unfused_tensors` (compare --reference), also the unfused path's.
void write_compare_json(std::ostream& out, const std::string& model, const std::string& inputs,
                        const std::vector<TensorDiff>& tensors, const std::vector<LayerInfo>& layers,
                        const std::vector<TensorDiff>* unfused_tensors = nullptr);

// `model` and `inputs` name what was compared in the page's title and text.
void write_compare_html(std::ostream& out, const std::string& model, const std::string& inputs,
                        const std::vector<TensorDiff>& tensors, const std::vector<LayerInfo>& layers);

// A file to write a report into; IoError naming `path` when it cannot be created.
std::ofstream create_report_file(const std::string& path);

}  // namespace qfuse::report
