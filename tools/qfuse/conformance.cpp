// `qfuse conformance DIR`: ONNX's backend node tests (DIR/<test>/model.onnx
// with test_data_set_*/input_N.pb and output_N.pb) run through the importer
// and the runtime, compared with ONNX's tolerances: floats within
// atol 1e-7 + rtol 1e-3 * |expected| (NaN matches NaN), integers exactly.
// A test whose model or data uses anything qfuse does not import is skipped
// with the importer's reason; every other test passes or fails.
//
// Also the --shape / --inputs shape bindings shared by run, bench and dump.

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <sstream>

#include "plugin/api_internal.hpp"
#include "tools/common/npy.hpp"
#include "tools/qfuse/cli.hpp"
#ifdef QFUSE_HAVE_ONNX
#include "graph/onnx/importer.hpp"
#include "graph/openvino/importer.hpp"
#endif

namespace qfuse::cli {
namespace {

namespace fs = std::filesystem;

Shape parse_dims(const std::string& text, const std::string& binding, const std::string& flag) {
  Shape shape;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t end = std::min(text.find('x', start), text.size());
    std::int64_t d = 0;
    const char* first = text.data() + start;
    const char* last = text.data() + end;
    auto [ptr, ec] = std::from_chars(first, last, d);
    if (ec != std::errc() || ptr != last || d < 1) {
      throw UsageError(flag + " '" + binding +
                       "': dimensions must be positive integers joined by 'x' (e.g. 1x3x224x224)");
    }
    shape.push_back(d);
    start = end + 1;
  }
  return shape;
}

#ifdef QFUSE_HAVE_ONNX

struct Outcome {
  enum Status { kPassed, kFailed, kSkipped } status = kPassed;
  std::string reason;
};

// Strips paths and node names so that skips group by their cause.
std::string reason_key(const std::string& message, const std::string& model_path) {
  std::string s = message;
  for (std::size_t at; (at = s.find(model_path)) != std::string::npos;) {
    s.replace(at, model_path.size(), "model");
  }
  static const std::regex kNode(R"( node '[^']*')");
  static const std::regex kInput(R"((input|output|initializer) '[^']*')");
  static const std::regex kOutputN(R"(output (\d+) \('[^']*'\))");
  s = std::regex_replace(s, kNode, "");
  s = std::regex_replace(s, kOutputN, "output $1");
  s = std::regex_replace(s, kInput, "$1");
  for (const char* prefix : {"import model: ", "import "}) {
    if (s.rfind(prefix, 0) == 0) s.erase(0, std::string(prefix).size());
  }
  return s;
}

// Empty when equal under ONNX's tolerances, else a description of the first
// mismatch and the number of mismatches.
std::string compare_tensors(const Tensor& actual, const Tensor& expected) {
  if (actual.type() != expected.type()) {
    return "type " + std::string(to_string(actual.type())) + " (expected " +
           std::string(to_string(expected.type())) + ")";
  }
  if (actual.shape() != expected.shape()) {
    return "shape " + to_string(actual.shape()) + " (expected " + to_string(expected.shape()) + ")";
  }
  std::int64_t bad = 0, first = -1;
  for (std::int64_t i = 0; i < actual.size(); ++i) {
    bool ok;
    if (actual.type() == ElementType::f32) {
      const double a = actual.data<float>()[static_cast<std::size_t>(i)];
      const double e = expected.data<float>()[static_cast<std::size_t>(i)];
      ok = (std::isnan(a) && std::isnan(e)) || a == e || std::abs(a - e) <= 1e-7 + 1e-3 * std::abs(e);
    } else if (actual.type() == ElementType::s32) {
      ok = actual.data<std::int32_t>()[static_cast<std::size_t>(i)] ==
           expected.data<std::int32_t>()[static_cast<std::size_t>(i)];
    } else {
      ok = actual.as_float(i) == expected.as_float(i);
    }
    if (!ok) {
      if (first < 0) first = i;
      ++bad;
    }
  }
  if (bad == 0) return {};
  std::ostringstream os;
  os.precision(9);
  os << bad << " of " << actual.size() << " elements differ; first at " << first << ": got "
     << actual.as_float(first) << ", expected " << expected.as_float(first);
  return os.str();
}

std::vector<fs::path> sorted_subdirs(const fs::path& dir, const std::string& prefix) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_directory() && e.path().filename().string().rfind(prefix, 0) == 0) {
      out.push_back(e.path());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<fs::path> numbered(const fs::path& dir, const std::string& stem) {
  std::vector<fs::path> paths;
  for (int k = 0;; ++k) {
    fs::path p = dir / (stem + "_" + std::to_string(k) + ".pb");
    if (!fs::exists(p)) break;
    paths.push_back(std::move(p));
  }
  return paths;
}

struct DataSet {
  std::vector<fs::path> inputs, outputs;
};

// One run of a test with graph inputs [live, ...) fixed as constants.
Outcome attempt(const fs::path& model_path, const std::vector<onnx::InputInfo>& inputs,
                const std::vector<DataSet>& sets, std::size_t live, bool fuse) {
  onnx::ImportOptions options;
  graph::Graph g;
  std::vector<std::vector<Tensor>> live_inputs(sets.size()), outputs(sets.size());
  try {
    for (std::size_t s = 0; s < sets.size(); ++s) {
      for (std::size_t k = 0; k < live; ++k) {
        live_inputs[s].push_back(onnx::read_tensor_file(sets[s].inputs[k]).tensor);
      }
      for (const fs::path& p : sets[s].outputs) {
        outputs[s].push_back(onnx::read_tensor_file(p).tensor);
      }
    }
    for (std::size_t k = 0; k < inputs.size(); ++k) {
      if (k < live) {
        options.input_shapes[inputs[k].name] = live_inputs[0][k].shape();
      } else {
        options.constant_inputs[inputs[k].name] = read_bytes(sets[0].inputs[k]);
      }
    }
    g = onnx::import_file(model_path, options);
  } catch (const UnsupportedError& e) {
    return {Outcome::kSkipped, reason_key(e.what(), model_path.string())};
  } catch (const Error& e) {
    return {Outcome::kFailed, e.what()};
  }
  try {
    const CompiledModel compiled = compile(g, {.fuse = fuse});
    InferRequest request = compiled.create_infer_request();
    const auto in_names = compiled.input_names();
    const auto out_names = compiled.output_names();
    for (std::size_t s = 0; s < sets.size(); ++s) {
      for (std::size_t k = 0; k < in_names.size(); ++k) {
        request.set_input(in_names[k], live_inputs[s][k]);
      }
      request.infer();
      if (outputs[s].size() != out_names.size()) {
        return {Outcome::kFailed, "the model has " + std::to_string(out_names.size()) +
                                      " outputs, the test data " +
                                      std::to_string(outputs[s].size())};
      }
      for (std::size_t k = 0; k < out_names.size(); ++k) {
        const std::string diff = compare_tensors(request.output(out_names[k]), outputs[s][k]);
        if (!diff.empty()) {
          return {Outcome::kFailed,
                  "data set " + std::to_string(s) + ", output '" + out_names[k] + "': " + diff};
        }
      }
    }
  } catch (const Error& e) {
    return {Outcome::kFailed, e.what()};
  }
  return {};
}

// Runs the test with every input live; when qfuse cannot take that (inputs
// after the first are scales, zero points, shapes, bounds...), once more with
// those inputs fixed as constants, if every data set gives them the same value.
Outcome run_test(const fs::path& test_dir, bool fuse) {
  const fs::path model_path = test_dir / "model.onnx";
  std::vector<onnx::InputInfo> inputs;
  std::vector<DataSet> sets;
  try {
    inputs = onnx::list_inputs(model_path);
  } catch (const Error& e) {
    return {Outcome::kFailed, e.what()};
  }
  for (const auto& in : inputs) {
    if (in.onnx_type == 0) {
      return {Outcome::kSkipped,
              "a graph input is a sequence, map or optional (only tensors are supported)"};
    }
  }
  for (const fs::path& d : sorted_subdirs(test_dir, "test_data_set_")) {
    sets.push_back({numbered(d, "input"), numbered(d, "output")});
  }
  if (sets.empty()) return {Outcome::kSkipped, "no test data"};
  for (const DataSet& s : sets) {
    if (s.inputs.size() != inputs.size()) {
      return {Outcome::kSkipped, "the test data gives " + std::to_string(s.inputs.size()) +
                                     " inputs for " + std::to_string(inputs.size()) +
                                     " graph inputs (omitted optional inputs are not supported)"};
    }
  }
  Outcome first = attempt(model_path, inputs, sets, inputs.size(), fuse);
  if (first.status != Outcome::kSkipped || inputs.size() < 2) return first;
  for (std::size_t s = 1; s < sets.size(); ++s) {
    for (std::size_t k = 1; k < inputs.size(); ++k) {
      if (read_bytes(sets[s].inputs[k]) != read_bytes(sets[0].inputs[k])) return first;
    }
  }
  Outcome fixed = attempt(model_path, inputs, sets, 1, fuse);
  if (fixed.status == Outcome::kSkipped) return fixed;
  if (fixed.status == Outcome::kPassed) fixed.reason = "inputs after the first fixed as constants";
  return fixed;
}

#endif  // QFUSE_HAVE_ONNX

// One NAME=DIMS of `flag`'s comma-separated list.
std::pair<std::string, Shape> parse_binding(const std::string& binding, const std::string& flag) {
  const std::size_t eq = binding.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw UsageError(flag + " '" + binding + "': expected NAME=DIMS (e.g. image=1x3x224x224)");
  }
  return {binding.substr(0, eq), parse_dims(binding.substr(eq + 1), binding, flag)};
}

}  // namespace

std::map<std::string, Shape> shape_bindings(const Args& args, const std::string& model) {
  std::map<std::string, Shape> shapes;
#ifdef QFUSE_HAVE_ONNX
  if (auto dir = args.value("--inputs"); dir && model.ends_with(".onnx")) {
    for (const auto& input : onnx::list_inputs(model)) {
      const fs::path p = tools::npy_path(*dir, input.name);
      if (fs::exists(p)) shapes[input.name] = tools::read_npy(p).shape();
    }
  }
  if (auto dir = args.value("--inputs"); dir && model.ends_with(".xml")) {
    for (const auto& input : openvino::list_inputs(model)) {
      const fs::path p = tools::npy_path(*dir, input.name);
      if (fs::exists(p)) shapes[input.name] = tools::read_npy(p).shape();
    }
  }
#else
  (void)model;
#endif
  if (auto spec = args.value("--shape")) {
    std::stringstream ss(*spec);
    for (std::string binding; std::getline(ss, binding, ',');) {
      auto [name, shape] = parse_binding(binding, "--shape");
      shapes[name] = std::move(shape);
    }
  }
  return shapes;
}

std::vector<std::map<std::string, Shape>> shape_sets(const std::string& spec) {
  std::vector<std::map<std::string, Shape>> sets;
  std::stringstream ss(spec);
  for (std::string binding; std::getline(ss, binding, ',');) {
    auto [name, shape] = parse_binding(binding, "--shapes");
    if (sets.empty() || sets.back().count(name) > 0) sets.emplace_back();
    sets.back()[name] = std::move(shape);
  }
  if (sets.empty()) throw UsageError("--shapes: no shape given");
  return sets;
}

int conformance_command(const Args& args) {
#ifndef QFUSE_HAVE_ONNX
  (void)args;
  throw UnsupportedError("conformance: this build has no ONNX frontend (QFUSE_BUILD_ONNX=OFF)");
#else
  if (args.positional().empty()) throw UsageError("missing DIR");
  const fs::path dir = args.positional()[0];
  if (!fs::is_directory(dir)) throw IoError("conformance: " + dir.string() + " is not a directory");
  const bool fuse = !args.flag("--unfused");
  const bool verbose = args.flag("--verbose");
  const std::string filter = args.value("--filter").value_or("");

  std::size_t passed = 0;
  std::vector<std::pair<std::string, std::string>> failures;
  std::map<std::string, std::vector<std::string>> skipped;  // reason -> tests
  std::size_t skip_count = 0;
  for (const fs::path& test : sorted_subdirs(dir, "")) {
    const std::string name = test.filename().string();
    if (!filter.empty() && name.find(filter) == std::string::npos) continue;
    if (!fs::exists(test / "model.onnx")) continue;
    const Outcome r = run_test(test, fuse);
    switch (r.status) {
      case Outcome::kPassed: ++passed; break;
      case Outcome::kFailed:
        failures.emplace_back(name, r.reason);
        std::cout << "FAIL " << name << ": " << r.reason << '\n';
        break;
      case Outcome::kSkipped:
        ++skip_count;
        skipped[r.reason].push_back(name);
        break;
    }
    if (verbose && r.status == Outcome::kPassed) {
      std::cout << "pass " << name << (r.reason.empty() ? "" : " (" + r.reason + ")") << '\n';
    } else if (verbose && r.status == Outcome::kSkipped) {
      std::cout << "skip " << name << ": " << r.reason << '\n';
    }
  }
  if (!skipped.empty()) {
    std::cout << "\nskipped, by reason:\n";
    for (const auto& [reason, tests] : skipped) {
      std::cout << "  " << reason << " (" << tests.size() << "):";
      for (const auto& t : tests) std::cout << ' ' << t;
      std::cout << '\n';
    }
  }
  if (!failures.empty()) {
    std::cout << "\nfailed:\n";
    for (const auto& [name, reason] : failures) std::cout << "  " << name << ": " << reason << '\n';
  }
  std::cout << '\n'
            << (fuse ? "fused" : "unfused") << " mode: " << passed << " passed, "
            << failures.size() << " failed, " << skip_count << " skipped\n";
  return failures.empty() ? 0 : 1;
#endif
}

}  // namespace qfuse::cli
