#pragma once
// The `qfuse` command-line tool: argument parsing shared by the subcommands.

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "graph/graph.hpp"
#include "plugin/api_internal.hpp"

namespace qfuse::cli {

// A usage error: printed with the subcommand's usage, exit code 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct OptionSpec {
  std::string name;  // "--inputs"
  bool takes_value;
  std::string help;
};

class Args {
 public:
  // Throws UsageError for unknown options, missing values or too many
  // positional arguments.
  Args(const std::vector<std::string>& argv, const std::vector<OptionSpec>& specs,
       std::size_t max_positional);

  bool flag(const std::string& name) const { return options_.count(name) > 0; }
  std::optional<std::string> value(const std::string& name) const;
  int int_value(const std::string& name, int fallback) const;
  double double_value(const std::string& name, double fallback) const;
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  std::map<std::string, std::string> options_;
  std::vector<std::string> positional_;
};

struct Command {
  std::string name;
  std::string synopsis;
  std::string summary;
  std::vector<OptionSpec> options;
  std::size_t max_positional;
  int (*run)(const Args&);
};

// MODEL: an .onnx file or the name of a bundled model ("default"). `shapes`
// binds the symbolic dimensions of an ONNX model's inputs; `on_phase` is told
// the end of each import phase of an .onnx file ("read", "decode").
graph::Graph load_model(const std::string& model,
                        const std::map<std::string, Shape>& shapes = {},
                        const std::function<void(const char*)>& on_phase = {});

// MODEL imported and compiled; a model file through the compiled-model cache
// when options.cache_dir or QFUSE_CACHE_DIR names one (on a hit, nothing is
// imported and `on_phase` is not called).
CompiledModel compile_model(const std::string& model, const std::map<std::string, Shape>& shapes,
                            const CompileOptions& options,
                            const std::function<void(const char*)>& on_phase = {});

// Input shapes from --shape name=1x3x224x224[,name2=...] and, for an .onnx
// MODEL, from the <input>.npy files in --inputs DIR. Defined in conformance.cpp.
std::map<std::string, Shape> shape_bindings(const Args& args, const std::string& model);
// The input shapes of --shapes x=1x3x224x224,x=8x3x224x224 (several inputs:
// a=..,b=..,a=..,b=..): a new set begins where an input is named again.
// Defined in conformance.cpp.
std::vector<std::map<std::string, Shape>> shape_sets(const std::string& spec);

// Whether a layer report's op name is an int8 layer (QuantizedConvolution, ...).
bool is_int8_layer_op(const std::string& op);

int run_command(const Args& args);
int bench_command(const Args& args);
int dump_command(const Args& args);
int conformance_command(const Args& args);
int compare_command(const Args& args);
int export_command(const Args& args);
int export_plain_command(const Args& args);
int cache_command(const Args& args);

}  // namespace qfuse::cli
