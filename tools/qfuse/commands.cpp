// The subcommands run, bench and dump.

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include <oneapi/dnnl/dnnl.hpp>

#include "plugin/api_internal.hpp"
#ifdef QFUSE_HAVE_ONNX
#include "graph/onnx/exporter.hpp"
#include "graph/onnx/importer.hpp"
#include "graph/openvino/importer.hpp"
#include "plugin/model_files.hpp"
#include "graph/op_info.hpp"
#include "graph/release_memory.hpp"
#endif
#include "plugin/model_cache.hpp"
#include "plugin/report/compare_report.hpp"
#include "tools/common/fashion_mnist.hpp"
#include "tools/common/isa.hpp"
#include "plugin/report/measure.hpp"
#include "tools/common/models.hpp"
#include "tools/common/npy.hpp"
#include "tools/qfuse/cli.hpp"

namespace qfuse::cli {
namespace {

// Where `qfuse run` writes a report the user did not place: under the build
// directory (reports/) for the build tree's own CLI, else the temporary
// directory; never the working directory.
std::string default_report_path(const std::string& file) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path exe = fs::weakly_canonical(fs::read_symlink("/proc/self/exe", ec), ec);
  const fs::path build = fs::weakly_canonical(QFUSE_BINARY_DIR, ec);
  fs::path dir = fs::temp_directory_path(ec);
  const std::string e = exe.string(), b = build.string();
  if (!b.empty() && e.size() > b.size() && e.compare(0, b.size(), b) == 0 && e[b.size()] == '/') {
    dir = build / "reports";
    fs::create_directories(dir, ec);
  }
  const fs::path path = dir / file;
  const fs::path shown = fs::proximate(path, ec);  // relative when under the working directory
  return ec || shown.empty() || shown.string().rfind("..", 0) == 0 ? path.string() : shown.string();
}

using report::median;
using report::NodeTime;
using report::node_medians;
using report::peak_rss_mib;
using report::percentile;

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// --isa caps the instruction set oneDNN may use; before any primitive exists.
void apply_isa(const Args& args) {
  const auto isa = args.value("--isa");
  if (!isa) return;
  try {
    tools::set_max_isa(*isa);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
}

std::string model_argument(const Args& args) {
  return args.positional().empty() ? "default" : args.positional()[0];
}

CompileOptions compile_options(const Args& args) {
  CompileOptions options;
  options.fuse = !args.flag("--unfused");
  options.integer_only = args.flag("--integer-only");
  options.fuse_attention = !args.flag("--attention-as-three-ops");
  options.cache_dir = args.value("--cache-dir").value_or("");
  return options;
}

// Inputs from <dir>/<name>.npy, or deterministic random ones.
void fill_inputs(const CompiledModel& model, InferRequest& request,
                 const std::optional<std::string>& dir) {
  const graph::Graph& g = executed_graph(model);
  if (!dir) {
    const std::vector<Tensor> inputs = tools::random_inputs(g, 0);
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      request.set_input(g.value(g.inputs()[i]).name, inputs[i]);
    }
    return;
  }
  for (const std::string& name : model.input_names()) {
    const fs::path path = tools::npy_path(*dir, name);
    if (!fs::exists(path)) {
      throw IoError("read inputs: no file " + path.string() + " for input '" + name + "'");
    }
    request.set_input(name, tools::read_npy(path));
  }
}

void print_tensor_summary(const std::string& name, const Tensor& t) {
  double lo = 0.0, hi = 0.0, sum = 0.0;
  for (std::int64_t i = 0; i < t.size(); ++i) {
    const double v = t.as_float(i);
    lo = i == 0 ? v : std::min(lo, v);
    hi = i == 0 ? v : std::max(hi, v);
    sum += v;
  }
  std::cout << "output " << name << ": " << to_string(t.type()) << to_string(t.shape())
            << std::setprecision(6) << "  min " << lo << "  max " << hi << "  mean "
            << (t.size() ? sum / static_cast<double>(t.size()) : 0.0) << "\n  values:";
  for (std::int64_t i = 0; i < std::min<std::int64_t>(t.size(), 10); ++i) {
    std::cout << ' ' << t.as_float(i);
  }
  std::cout << (t.size() > 10 ? " ..." : "") << '\n';
}

// Graphviz: one box per executed node (int8 layers filled, with their
// oneDNN implementation and post-ops), one edge per value.
std::string dot_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

void write_dot(std::ostream& out, const graph::Graph& g, const std::vector<LayerInfo>& layers) {
  std::map<std::string, const LayerInfo*> by_name;
  for (const LayerInfo& l : layers) by_name[l.node] = &l;
  out << "digraph qfuse {\n  rankdir=TB;\n  node [shape=box, fontname=monospace];\n";
  for (graph::ValueId in : g.inputs()) {
    out << "  \"v" << in.index << "\" [shape=ellipse, label=\"" << dot_escape(g.value(in).name)
        << "\\n" << to_string(g.value(in).type) << to_string(g.value(in).shape) << "\"];\n";
  }
  for (graph::NodeId id : g.topological_order()) {
    const graph::Node& n = g.node(id);
    const auto it = by_name.find(n.name);
    std::string label = n.name + "\\n" + std::string(graph::to_string(n.kind));
    if (it != by_name.end()) {
      label += "\\n" + dot_escape(it->second->implementation);
      if (!it->second->post_ops.empty()) label += "\\n" + dot_escape(it->second->post_ops);
    }
    out << "  \"n" << id.index << "\" [label=\"" << label << "\""
        << (graph::is_quantized_layer(n.kind) ? ", style=filled, fillcolor=lightblue" : "")
        << "];\n";
    for (graph::ValueId in : n.inputs) {
      const graph::Value& v = g.value(in);
      if (v.is_constant()) continue;
      // Appended, not "n" + to_string(...): GCC 12 at -O3 warns (restrict) on that.
      std::string from(1, v.producer.valid() ? 'n' : 'v');
      from += std::to_string(v.producer.valid() ? v.producer.index : in.index);
      out << "  \"" << from << "\" -> \"n" << id.index << "\" [label=\""
          << to_string(v.type) << to_string(v.shape) << "\"];\n";
    }
  }
  for (graph::ValueId o : g.outputs()) {
    const graph::Value& v = g.value(o);
    out << "  \"o" << o.index << "\" [shape=ellipse, label=\"" << dot_escape(v.name) << "\"];\n";
    if (v.producer.valid()) out << "  \"n" << v.producer.index << "\" -> \"o" << o.index << "\";\n";
  }
  out << "}\n";
}

}  // namespace

bool is_int8_layer_op(const std::string& op) {
  const std::optional<graph::OpKind> kind = graph::op_kind_named(op);
  return kind && graph::is_quantized_layer(*kind);
}

// The imported graph once compiled: the compiled model holds what it runs, so
// the import's constants go (as a host that drops its Model after compile).
void release_import(graph::Graph& g) {
  g = graph::Graph();
  release_free_memory();
}

graph::Graph load_model(const std::string& model, const std::map<std::string, Shape>& shapes,
                        const std::function<void(const char*)>& on_phase) {
  if (model.size() > 5 && model.ends_with(".onnx")) {
#ifdef QFUSE_HAVE_ONNX
    return onnx::import_file(model, {.input_shapes = shapes, .on_phase = on_phase});
#else
    throw UnsupportedError("load " + model +
                           ": this build has no ONNX frontend (QFUSE_BUILD_ONNX=OFF)");
#endif
  }
  if (model.size() > 4 && model.ends_with(".xml")) {
#ifdef QFUSE_HAVE_ONNX
    // An OpenVINO IR: model.xml, its weights in model.bin beside it.
    return openvino::import_file(model, {.input_shapes = shapes});
#else
    throw UnsupportedError("load " + model +
                           ": this build has no file frontends (QFUSE_BUILD_ONNX=OFF)");
#endif
  }
  // The bundled models trained on Fashion-MNIST: ONNX files beside their
  // training scripts.
  if (const auto bundled = tools::fashion_mnist::find_bundled_model(model)) {
    std::map<std::string, Shape> one_image = shapes;  // batch 1 unless --shape says otherwise
    one_image.emplace("input", Shape{1, 1, 28, 28});
    return load_model(bundled->onnx_file(), one_image, on_phase);
  }
  const auto names = tools::bundled_model_names();
  if (std::find(names.begin(), names.end(), model) != names.end()) {
    return tools::make_bundled_model(model);
  }
  std::string known;
  for (const auto& m : tools::fashion_mnist::bundled_models()) known += m.name + ", ";
  for (const std::string& name : names) known += name + ", ";
  throw UsageError("MODEL '" + model + "' is neither an .onnx file, an OpenVINO IR .xml nor a bundled model (" +
                   known.substr(0, known.size() - 2) + ")");
}

CompiledModel compile_model(const std::string& model, const std::map<std::string, Shape>& shapes,
                            const CompileOptions& options,
                            const std::function<void(const char*)>& on_phase) {
#ifdef QFUSE_HAVE_ONNX
  if (model.size() > 5 && model.ends_with(".onnx")) {
    return plugin::compile_files(
        plugin::onnx_model_files(model, {.input_shapes = shapes, .on_phase = on_phase}), options);
  }
  if (model.size() > 4 && model.ends_with(".xml")) {
    return plugin::compile_files(plugin::openvino_model_files(model, {.input_shapes = shapes}),
                                 options);
  }
  if (const auto bundled = tools::fashion_mnist::find_bundled_model(model)) {
    std::map<std::string, Shape> one_image = shapes;
    one_image.emplace("input", Shape{1, 1, 28, 28});
    return compile_model(bundled->onnx_file(), one_image, options, on_phase);
  }
#endif
  CompileOptions uncached = options;
  uncached.cache_dir.clear();  // a model built in code has no file to key an entry by
  return compile(load_model(model, shapes, on_phase), uncached);
}

int cache_command(const Args& args) {
  const std::vector<std::string>& words = args.positional();
  if (words.empty() || (words[0] != "ls" && words[0] != "clear")) {
    throw UsageError("cache: expected 'ls' or 'clear'");
  }
  CompileOptions options;
  options.cache_dir = args.value("--cache-dir").value_or("");
  const fs::path dir = plugin::cache_dir_of(options);
  if (dir.empty()) throw UsageError("cache: no cache directory (--cache-dir DIR or QFUSE_CACHE_DIR)");
  if (words[0] == "clear") {
    std::cout << "cache " << dir.string() << ": removed " << plugin::clear_cache(dir)
              << " entries and temporary files\n";
    return 0;
  }
  const std::vector<plugin::CacheEntryInfo> entries = plugin::list_cache(dir);
  std::uintmax_t bytes = 0;
  for (const plugin::CacheEntryInfo& e : entries) bytes += e.bytes;
  std::cout << "cache " << dir.string() << ": " << entries.size() << " entries, " << std::fixed
            << std::setprecision(1) << static_cast<double>(bytes) / (1 << 20) << " MiB\n";
  for (const plugin::CacheEntryInfo& e : entries) {
    std::cout << e.file.filename().string() << "  " << static_cast<double>(e.bytes) / (1 << 20)
              << " MiB  ";
    if (!e.problem.empty()) {
      std::cout << "unusable: " << e.problem << "\n";
      continue;
    }
    std::cout << e.model << "\n";
    std::istringstream key(e.key);
    for (std::string line; std::getline(key, line);) std::cout << "    " << line << "\n";
  }
  return 0;
}

namespace {

// The class of one image: the index of the largest of its 10 logits.
std::size_t class_of(const float* logits) {
  return static_cast<std::size_t>(std::max_element(logits, logits + 10) - logits);
}

// A classifier's line against torch's recorded top-1: each mode's top-1 on
// the test labels, and how often fused and unfused give the same class;
// with --integer-only a second line for that mode against the fused one.
void print_classification(const std::string& torch_json, const std::vector<std::uint8_t>& labels,
                          const std::vector<float>& unfused, const std::vector<float>& fused,
                          const std::vector<float>* integer) {
  const std::size_t n = labels.size();
  std::size_t unfused_right = 0, fused_right = 0, agree = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t u = class_of(unfused.data() + i * 10);
    const std::size_t q = class_of(fused.data() + i * 10);
    unfused_right += u == labels[i];
    fused_right += q == labels[i];
    agree += u == q;
  }
  const double pct = 100.0 / static_cast<double>(n);
  std::cout << "accuracy: torch " << tools::fashion_mnist::json_number(torch_json, "top1_percent")
            << "%, unfused " << static_cast<double>(unfused_right) * pct << "%, fused "
            << static_cast<double>(fused_right) * pct << "%, agreement "
            << static_cast<double>(agree) * pct << "%\n";
  if (integer == nullptr) return;
  std::size_t right = 0, agree_fused = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t k = class_of(integer->data() + i * 10);
    right += k == labels[i];
    agree_fused += k == class_of(fused.data() + i * 10);
  }
  std::cout << "accuracy: integer-only " << static_cast<double>(right) * pct
            << "%, agreement with fused " << static_cast<double>(agree_fused) * pct << "%\n";
}

// The autoencoder's line: mean PSNR against the clean images, torch's and
// each mode's.
void print_denoising(const std::string& torch_json, const Tensor& clean,
                     const std::vector<float>& unfused, const std::vector<float>& fused,
                     const std::vector<float>* integer) {
  namespace fm = tools::fashion_mnist;
  constexpr std::size_t kPixels = 28 * 28;
  const auto n = static_cast<std::size_t>(clean.shape()[0]);
  const auto mean_psnr = [&](const std::vector<float>& out) {
    double sum = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
      sum += fm::psnr(out.data() + i * kPixels, clean.data<float>().data() + i * kPixels, kPixels);
    }
    return sum / static_cast<double>(n);
  };
  std::cout << std::setprecision(3) << "psnr: torch " << fm::json_number(torch_json, "psnr_db")
            << " dB, unfused " << mean_psnr(unfused) << " dB, fused " << mean_psnr(fused)
            << (integer ? " dB, integer-only " + std::to_string(mean_psnr(*integer)) : "")
            << " dB (noisy input " << fm::json_number(torch_json, "noisy_input_psnr_db")
            << " dB)\n";
}

// What `qfuse run` does with a bundled Fashion-MNIST model and no --inputs:
// all 10,000 test images through the model unfused and fused, in batches of
// 100, against the figures torch recorded for its fake-quantized model.
int fashion_mnist_job(const tools::fashion_mnist::BundledModel& bundled, const Args& args) {
#ifdef QFUSE_HAVE_ONNX
  namespace fm = tools::fashion_mnist;
  const bool classifier = bundled.task == fm::Task::classify;
  const std::string& model_name = bundled.name;
  const std::string file = bundled.onnx_file();
  const int threads = args.int_value("--threads", 0);
  constexpr std::int64_t kBatch = 100;
  constexpr std::size_t kPixels = 28 * 28;
  const fm::TestSet set = fm::load_test_set();
  const Tensor inputs = classifier ? set.images : fm::noisy(set.images);
  const auto n = static_cast<std::size_t>(inputs.shape()[0]);
  const std::size_t row = classifier ? 10 : kPixels;
  const graph::Graph g = onnx::import_file(file, {.input_shapes = {{"input", {kBatch, 1, 28, 28}}}});
  std::cout << "model " << model_name << ": Fashion-MNIST " << bundled.description << " (" << file
            << "), " << n << " test images" << (classifier ? "" : " with noise") << " in batches of "
            << kBatch << '\n';

  struct Mode {
    std::vector<float> outputs;
    double images_per_s = 0.0;
    int layers = 0, int8_layers = 0;
  };
  const auto run_mode = [&](bool fuse, bool integer) {
    CompileOptions options;
    options.fuse = fuse;
    options.integer_only = integer;
    options.threads = threads;
    const CompiledModel model = compile(g, options);
    InferRequest request = model.create_infer_request();
    request.set_threads(threads);
    Mode m;
    for (const LayerInfo& l : model.layers()) {
      m.layers += l.macs > 0 ? 1 : 0;
      m.int8_layers += l.macs > 0 && l.precision == "int8" ? 1 : 0;
    }
    m.outputs.resize(n * row);
    Tensor& in = request.input("input");
    const float* src = inputs.data<float>().data();
    const auto start = Clock::now();
    for (std::size_t first = 0; first < n; first += kBatch) {
      std::copy_n(src + first * kPixels, kBatch * kPixels, in.data<float>().data());
      request.infer();
      const auto out = request.output("output").data<float>();
      std::copy(out.begin(), out.end(), m.outputs.begin() + static_cast<std::ptrdiff_t>(first * row));
    }
    m.images_per_s = static_cast<double>(n) / (ms_since(start) / 1000.0);
    std::cout << std::fixed << std::setprecision(0) << (integer ? "integer-only: " : fuse ? "fused:   " : "unfused: ")
              << m.int8_layers << " of " << m.layers << " layers int8, " << m.images_per_s
              << " images/s\n";
    return m;
  };
  const Mode unfused = run_mode(false, false);
  const Mode fused = run_mode(true, false);
  const bool integer = args.flag("--integer-only");
  const Mode integer_mode = integer ? run_mode(true, true) : Mode{};

  // The per-tensor report on the first 1,000 images (qfuse compare runs all).
  Comparison cmp(make_model(g));
  constexpr std::size_t kReportImages = 1000;
  for (std::size_t first = 0; first < std::min(n, kReportImages); first += kBatch) {
    Tensor batch(ElementType::f32, {kBatch, 1, 28, 28});
    std::copy_n(inputs.data<float>().data() + first * kPixels, kBatch * kPixels,
                batch.data<float>().data());
    cmp.run({{"input", batch}});
  }
  const std::string report = args.value("--html").value_or(
      default_report_path("qfuse_report_" + model_name + ".html"));
  auto report_file = report::create_report_file(report);
  report::write_compare_html(report_file, model_name,
                     std::to_string(std::min(n, kReportImages)) + " Fashion-MNIST test images" +
                         (classifier ? "" : " with noise"),
                     cmp.tensors(), cmp.fused().layers());
  report_file.close();

  std::ifstream f(bundled.torch_json());
  const std::string torch_json((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::cout << std::fixed << std::setprecision(2);
  const std::vector<float>* integer_outputs = integer ? &integer_mode.outputs : nullptr;
  if (classifier) {
    print_classification(torch_json, set.labels, unfused.outputs, fused.outputs, integer_outputs);
  } else {
    print_denoising(torch_json, set.images, unfused.outputs, fused.outputs, integer_outputs);
  }
  std::cout << "report: " << report << " (fused against unfused per layer, "
            << std::min(n, kReportImages) << " images)\n";
  return 0;
#else
  (void)args;
  throw UnsupportedError("run " + bundled.name + ": this build has no ONNX frontend");
#endif
}

}  // namespace

int run_command(const Args& args) {
  const std::string model_name = model_argument(args);
  if (const auto bundled = tools::fashion_mnist::find_bundled_model(model_name);
      bundled && !args.value("--inputs") && !args.flag("--shape")) {
    return fashion_mnist_job(*bundled, args);
  }
  const int repeat = args.int_value("--repeat", 10);
  const int threads = args.int_value("--threads", 0);
  const auto t0 = Clock::now();
  CompileOptions options = compile_options(args);
  options.threads = threads;
  const CompiledModel model = compile_model(model_name, shape_bindings(args, model_name), options);
  const double compile_ms = ms_since(t0);
  if (!model.compile_times().cache.empty()) std::cout << "cache: " << model.compile_times().cache << '\n';
  InferRequest request = model.create_infer_request();
  request.set_threads(threads);
  fill_inputs(model, request, args.value("--inputs"));

  const auto t1 = Clock::now();
  request.infer();
  const double first_ms = ms_since(t1);
  std::vector<double> times;
  for (int i = 0; i < repeat; ++i) {
    const auto t = Clock::now();
    request.infer();
    times.push_back(ms_since(t));
  }

  const CompiledModel::LayerCounts counts = model.layer_counts();
  std::cout << "model " << model_name << ": " << counts.executable_nodes << " executable nodes, "
            << counts.int8_layers << " int8 layers ("
            << (args.flag("--unfused") ? "unfused" : "fused") << ")\n";
  for (const std::string& name : model.output_names()) {
    print_tensor_summary(name, request.output(name));
  }
  std::cout << std::fixed << std::setprecision(3) << "time: compile " << compile_ms
            << " ms, first inference " << first_ms << " ms";
  if (!times.empty()) std::cout << ", median of " << times.size() << " " << median(times) << " ms";
  std::cout << '\n';

  if (auto dir = args.value("--outputs")) {
    fs::create_directories(*dir);
    for (const std::string& name : model.output_names()) {
      tools::write_npy(tools::npy_path(*dir, name), request.output(name));
    }
    std::cout << "wrote " << model.output_names().size() << " output(s) to " << *dir << '\n';
  }
  return 0;
}

std::string shorten(const std::string& s, std::size_t n) {
  return s.size() <= n ? s : s.substr(0, n - 3) + "...";
}

void print_per_layer(const std::vector<NodeTime>& rows) {
  double total = 0.0;
  for (const NodeTime& r : rows) total += r.median_us;
  std::cout << "\nper node (medians; sum " << std::fixed << std::setprecision(3) << total / 1000.0
            << " ms):\n"
            << std::left << std::setw(36) << "node" << std::setw(24) << "op" << std::setw(11)
            << "precision" << std::setw(40) << "implementation" << std::right << std::setw(10)
            << "median us" << std::setw(8) << "%" << std::setw(9) << "GOPS" << std::setw(9)
            << "reorders" << "  post-ops\n";
  for (const NodeTime& r : rows) {
    const LayerInfo& l = *r.layer;
    const double g = r.gops();
    std::cout << std::left << std::setw(36) << shorten(r.node(), 35) << std::setw(24) << r.op()
              << std::setw(11) << l.precision << std::setw(40) << shorten(r.implementation(), 39)
              << std::right << std::setprecision(1) << std::setw(10) << r.median_us << std::setw(8)
              << (total > 0 ? 100.0 * r.median_us / total : 0.0) << std::setw(9);
    if (g > 0) {
      std::cout << g;
    } else {
      std::cout << "";
    }
    std::cout << std::setw(9) << l.reorders << "  "
              << (r.staged_reorders ? "" : shorten(l.post_ops, 60)) << '\n';
  }
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return out + "\"";
}

// What `qfuse bench` measured, for its text and JSON reports.
struct BenchReport {
  std::string model_name;
  const char* mode = "fused";  // or "unfused"
  int requests = 1;
  int per_request = 1;  // threads of each request
  double import_ms = 0.0, compile_ms = 0.0;
  double import_rss_mib = 0.0, compile_rss_mib = 0.0;  // peak RSS after each
  // The import's phases (ONNX files: read, decode): name, ms, peak RSS after.
  struct Phase {
    std::string name;
    double ms, peak_rss_mib;
  };
  std::vector<Phase> import_phases;
  CompileTimes phases;
  report::LatencyRun run;
  double rss_mib = 0.0;  // peak RSS of the whole process, compile included
};

// measure_latency, with a progress bar on a terminal, drawn between request
// 0's inferences when the whole percent changes.
report::LatencyRun measure_with_progress(const CompiledModel& model,
                                         const report::LatencyOptions& options) {
  int shown = -1;
  const auto draw = [&shown](double done) {
    const int pct = static_cast<int>(100.0 * done);
    if (pct == shown) return;
    shown = pct;
    std::cout << "\r[" << std::string(static_cast<std::size_t>(pct / 5), '#')
              << std::string(static_cast<std::size_t>(20 - pct / 5), ' ') << "] " << pct << "%"
              << std::flush;
  };
  const bool progress = isatty(STDOUT_FILENO) != 0;
  const report::LatencyRun run = report::measure_latency(
      model, [&model](InferRequest& r) { fill_inputs(model, r, std::nullopt); }, options,
      progress ? std::function<void(double)>(draw) : std::function<void(double)>());
  if (progress) std::cout << "\r" << std::string(32, ' ') << "\r";
  return run;
}

void print_bench(const BenchReport& b) {
  const std::vector<double>& all = b.run.latencies_ms;
  const CompileTimes& phases = b.phases;
  std::cout << std::fixed << std::setprecision(3) << "model " << b.model_name << " (" << b.mode
            << "), " << b.requests << " request(s) x " << b.per_request << " thread(s), "
            << all.size() << " inferences in " << b.run.seconds << " s\n"
            << "import: " << b.import_ms << " ms, compile: " << b.compile_ms
            << " ms, first inference: " << b.run.first_ms << " ms\n"
            << "compile phases ms: shapes " << phases.shapes_ms << ", passes " << phases.passes_ms
            << ", planning " << phases.planning_ms << ", primitives " << phases.primitives_ms
            << " (composer " << phases.composer_ms << " of passes + primitives)\n"
            << "peak RSS after import: " << b.import_rss_mib << " MiB, after compile: "
            << b.compile_rss_mib << " MiB\n"
            << "phases ms (peak RSS MiB after):";
  for (const BenchReport::Phase& p : b.import_phases) {
    std::cout << ' ' << p.name << ' ' << p.ms << " (" << p.peak_rss_mib << "),";
  }
  std::cout << " shapes " << phases.shapes_ms << " (" << phases.shapes_peak_rss_mib
            << "), passes " << phases.passes_ms << " (" << phases.passes_peak_rss_mib
            << "), planning " << phases.planning_ms << " (" << phases.planning_peak_rss_mib
            << "), primitives and weights " << phases.primitives_ms << " ("
            << phases.primitives_peak_rss_mib << ")\n";
  if (!phases.cache.empty()) {
    std::cout << "cache: " << phases.cache << " (" << phases.cache_ms
              << " ms hashing the model's files and checking, mapping or writing the entry)\n";
  }
  std::cout
            << "latency ms: median " << median(all) << "  p90 " << percentile(all, 0.9)
            << "  p99 " << percentile(all, 0.99) << "  min " << percentile(all, 0.0) << "  max "
            << percentile(all, 1.0) << "\nthroughput: " << b.run.throughput()
            << " inferences/s\npeak RSS: " << b.rss_mib
            << " MiB (the whole process, compile included)\noneDNN ISA: "
            << tools::effective_isa() << '\n';
}

// `rows`: the per-node times, when they were recorded.
void write_bench_json(const std::string& path, const BenchReport& b,
                      const std::vector<NodeTime>* rows) {
  std::ofstream out(path);
  if (!out) throw IoError("write " + path + ": cannot create the file");
  const std::vector<double>& all = b.run.latencies_ms;
  const CompileTimes& phases = b.phases;
  out << std::fixed << std::setprecision(4) << "{\"model\": " << json_string(b.model_name)
      << ", \"mode\": \"" << b.mode << "\", \"requests\": " << b.requests
      << ", \"threads_per_request\": " << b.per_request << ", \"inferences\": " << all.size()
      << ", \"seconds\": " << b.run.seconds << ", \"import_ms\": " << b.import_ms
      << ", \"compile_ms\": " << b.compile_ms
      << ", \"compile_phases_ms\": {\"shapes\": " << phases.shapes_ms
      << ", \"passes\": " << phases.passes_ms << ", \"composer\": " << phases.composer_ms
      << ", \"planning\": " << phases.planning_ms
      << ", \"primitives\": " << phases.primitives_ms << "}"
      << ", \"phases\": [";
  bool first = true;
  const auto phase_json = [&](const std::string& name, double ms, double rss) {
    out << (first ? "" : ", ") << "{\"name\": " << json_string(name) << ", \"ms\": " << ms
        << ", \"peak_rss_mib\": " << rss << "}";
    first = false;
  };
  for (const BenchReport::Phase& p : b.import_phases) phase_json(p.name, p.ms, p.peak_rss_mib);
  phase_json("shapes", phases.shapes_ms, phases.shapes_peak_rss_mib);
  phase_json("passes", phases.passes_ms, phases.passes_peak_rss_mib);
  phase_json("planning", phases.planning_ms, phases.planning_peak_rss_mib);
  phase_json("primitives", phases.primitives_ms, phases.primitives_peak_rss_mib);
  if (!phases.cache.empty()) phase_json("cache", phases.cache_ms, phases.primitives_peak_rss_mib);
  out << "]"
      << ", \"cache\": " << json_string(phases.cache)
      << ", \"import_peak_rss_mib\": " << b.import_rss_mib
      << ", \"compile_peak_rss_mib\": " << b.compile_rss_mib
      << ", \"first_inference_ms\": " << b.run.first_ms
      << ", \"latency_ms_median\": " << median(all)
      << ", \"latency_ms_p90\": " << percentile(all, 0.9)
      << ", \"latency_ms_p99\": " << percentile(all, 0.99)
      << ", \"latency_ms_min\": " << percentile(all, 0.0)
      << ", \"latency_ms_max\": " << percentile(all, 1.0)
      << ", \"throughput_per_s\": " << b.run.throughput() << ", \"peak_rss_mib\": " << b.rss_mib
      << ", \"isa\": " << json_string(tools::effective_isa());
  if (rows) {
    out << ", \"nodes\": [";
    for (std::size_t i = 0; i < rows->size(); ++i) {
      const NodeTime& r = (*rows)[i];
      const LayerInfo& l = *r.layer;
      out << (i ? ", " : "") << "{\"node\": " << json_string(r.node())
          << ", \"op\": " << json_string(r.op())
          << ", \"precision\": " << json_string(l.precision)
          << ", \"implementation\": " << json_string(r.implementation())
          << ", \"post_ops\": " << json_string(r.staged_reorders ? "" : l.post_ops)
          << ", \"median_us\": " << r.median_us << ", \"gops\": " << r.gops()
          << ", \"reorders\": " << l.reorders << "}";
    }
    out << "]";
  }
  out << "}\n";
}

std::string shapes_text(const std::map<std::string, Shape>& shapes) {
  std::string text;
  for (const auto& [name, shape] : shapes) {
    if (!text.empty()) text += ',';
    text += name;
    text += '=';
    for (std::size_t d = 0; d < shape.size(); ++d) {
      if (d > 0) text += 'x';
      text += std::to_string(shape[d]);
    }
  }
  return text;
}

// qfuse bench --shapes: one model compiled at the first shapes and run at
// each other (CompiledModel::at_shapes: compiled on first use from the first,
// the weights prepared once), every one kept, each timed as it comes. With
// --against-fixed, then each against the model compiled for that shape
// alone, timed in alternating rounds.
int bench_shape_sweep(const Args& args, const std::string& model_name, int threads_per_request,
                      double seconds) {
  const std::vector<std::map<std::string, Shape>> sets = shape_sets(*args.value("--shapes"));
  CompileOptions options = compile_options(args);
  options.threads = threads_per_request;
  const report::LatencyOptions timing{.requests = 1, .threads_per_request = threads_per_request,
                                      .seconds = seconds};
  std::cout << "model " << model_name << ", " << sets.size() << " input shapes in one process, "
            << threads_per_request << " thread(s); the first compiled from the file, each "
            << "other from it on first use\n";
  std::cout << std::fixed << std::setprecision(3);
  std::vector<CompiledModel> models;
  for (std::size_t i = 0; i < sets.size(); ++i) {
    const auto start = Clock::now();
    models.push_back(i == 0 ? compile_model(model_name, sets[0], options)
                            : models.front().at_shapes(sets[i]));
    const double compile_ms = ms_since(start);
    const report::LatencyRun run = measure_with_progress(models.back(), timing);
    const std::vector<double>& all = run.latencies_ms;
    std::cout << shapes_text(sets[i]) << ": " << (i == 0 ? "import and compile " : "compile ")
              << compile_ms << " ms, first inference " << run.first_ms << " ms, median "
              << median(all) << " ms (p90 " << percentile(all, 0.9) << "), peak RSS "
              << peak_rss_mib() << " MiB\n";
  }
  for (const ShapeInfo& s : models.front().shapes()) {
    std::cout << "  held at " << shapes_text(s.inputs) << ": int8 weights of its own "
              << static_cast<double>(s.weight_bytes) / (1024.0 * 1024.0) << " MiB, arena "
              << static_cast<double>(s.arena_bytes) / (1024.0 * 1024.0) << " MiB\n";
  }
  if (args.flag("--against-fixed")) {
    std::cout << "against a model compiled for each shape alone (median ms, 4 alternating "
              << "rounds of " << seconds / 4 << " s each):\n";
    for (std::size_t i = 0; i < sets.size(); ++i) {
      const CompiledModel fixed = compile_model(model_name, sets[i], options);
      std::vector<double> swept_ms, fixed_ms;
      report::LatencyOptions round = timing;
      round.seconds = seconds / 4;
      for (int r = 0; r < 4; ++r) {
        const std::vector<double> a = measure_with_progress(models[i], round).latencies_ms;
        const std::vector<double> b = measure_with_progress(fixed, round).latencies_ms;
        swept_ms.insert(swept_ms.end(), a.begin(), a.end());
        fixed_ms.insert(fixed_ms.end(), b.begin(), b.end());
      }
      std::cout << shapes_text(sets[i]) << ": from the first " << median(swept_ms)
                << " ms, compiled alone " << median(fixed_ms) << " ms, ratio "
                << median(swept_ms) / median(fixed_ms) << "\n";
    }
  }
  std::cout << "oneDNN ISA: " << tools::effective_isa() << '\n';
  return 0;
}

int bench_command(const Args& args) {
  apply_isa(args);
  BenchReport b;
  b.model_name = model_argument(args);
  b.mode = args.flag("--unfused") ? "unfused" : "fused";
  b.requests = std::max(1, args.int_value("--requests", 1));
  const int total_threads = args.int_value("--threads", omp_get_max_threads());
  const double seconds = args.double_value("--time", 3.0);
  // Each request runs its own OpenMP team; split the cores between them so
  // parallel requests do not oversubscribe.
  b.per_request = std::max(1, total_threads / b.requests);

  if (args.value("--shapes")) {
    if (args.value("--shape") || args.value("--cache-dir") || b.requests > 1 ||
        args.flag("--per-layer") || args.value("--json")) {
      throw UsageError("--shapes takes none of --shape, --cache-dir, --requests, --per-layer, "
                       "--json");
    }
    return bench_shape_sweep(args, b.model_name, b.per_request, seconds);
  }
  CompileOptions options = compile_options(args);
  options.threads = b.per_request;
  const auto start = Clock::now();
  auto phase_start = start;
  // The import's phases (none on a cache hit); the rest of the time is compile's.
  const CompiledModel model = compile_model(
      b.model_name, shape_bindings(args, b.model_name), options, [&](const char* phase) {
        b.import_phases.push_back({phase, ms_since(phase_start), peak_rss_mib()});
        b.import_ms += b.import_phases.back().ms;
        b.import_rss_mib = peak_rss_mib();
        phase_start = Clock::now();
      });
  b.compile_ms = ms_since(start) - b.import_ms;
  b.compile_rss_mib = peak_rss_mib();
  b.phases = model.compile_times();
  const bool per_layer = args.flag("--per-layer");
  b.run = measure_with_progress(model, {.requests = b.requests,
                                        .threads_per_request = b.per_request,
                                        .seconds = seconds, .per_layer = per_layer});
  b.rss_mib = peak_rss_mib();
  print_bench(b);
  const std::vector<LayerInfo> layers = model.layers();
  std::vector<NodeTime> rows;
  if (per_layer) {
    rows = node_medians(layers, b.run.node_times_us, b.run.staged_reorder_times_us);
    print_per_layer(rows);
  }
  if (auto path = args.value("--json")) write_bench_json(*path, b, per_layer ? &rows : nullptr);
  return 0;
}

// The op a node came from: a fused layer counts as its f32 operator.
std::string source_op(const std::string& op) {
  const std::optional<graph::OpKind> kind = graph::op_kind_named(op);
  return kind ? std::string(graph::to_string(graph::float_form(*kind))) : op;
}

// A convolution, deconvolution, fully-connected or matmul layer, f32 or int8.
bool is_layer_op(const std::string& op) {
  const std::optional<graph::OpKind> kind = graph::op_kind_named(op);
  return kind && (graph::is_layer(*kind) || graph::is_quantized_layer(*kind) ||
                  *kind == graph::OpKind::MeanInnerProduct);
}

// Integer-only mode: how many ops requantize in integer arithmetic, and
// why the others kept float scales, counted per reason.
void print_integer_only(const std::vector<LayerInfo>& layers) {
  std::map<std::string, int> float_scales;
  int integer = 0;
  for (const LayerInfo& l : layers) {
    if (l.integer == "integer") ++integer;
    if (l.integer.starts_with("float scales: ")) ++float_scales[l.integer.substr(14)];
  }
  if (integer > 0 || !float_scales.empty()) {
    int kept = 0;
    for (const auto& [why, n] : float_scales) kept += n;
    std::cout << "integer-only: " << integer << " ops in integer arithmetic, " << kept
              << " kept float scales\n";
    for (const auto& [why, n] : float_scales) std::cout << "  " << n << " x " << why << '\n';
  }
}

// The layers in int8, the integer-only counts, then per op type how many
// nodes run in int8, f32, quantize, dequantize and on reference kernels.
void print_coverage(const std::vector<LayerInfo>& layers) {
  struct Count {
    int int8 = 0, f32 = 0, quantize = 0, dequantize = 0, reference = 0;
  };
  std::map<std::string, Count> counts;
  int layers_total = 0, layers_int8 = 0;
  for (const LayerInfo& l : layers) {
    const std::string op = source_op(l.op);
    Count& c = counts[op];
    if (l.precision == "int8") ++c.int8;
    else if (l.precision == "quantize") ++c.quantize;
    else if (l.precision == "dequantize") ++c.dequantize;
    else ++c.f32;
    if (l.implementation == "reference") ++c.reference;
    if (is_layer_op(op)) {
      ++layers_total;
      layers_int8 += l.precision == "int8";
    }
  }
  std::cout << "layers: " << layers_int8 << " of " << layers_total << " int8\n";
  print_integer_only(layers);
  std::cout << '\n';
  std::cout << std::left << std::setw(22) << "op" << std::right << std::setw(6) << "int8"
            << std::setw(6) << "f32" << std::setw(10) << "quantize" << std::setw(12)
            << "dequantize" << std::setw(11) << "reference" << '\n';
  for (const auto& [op, c] : counts) {
    std::cout << std::left << std::setw(22) << op << std::right << std::setw(6) << c.int8
              << std::setw(6) << c.f32 << std::setw(10) << c.quantize << std::setw(12)
              << c.dequantize << std::setw(11) << c.reference << '\n';
  }
}

// By node name: the fusion refusals that name it.
using RefusalsByNode = std::map<std::string, std::vector<const FusionRefusal*>>;

// Each layer left in f32, with the refusals that name it.
void print_f32_layers(const std::vector<LayerInfo>& layers, const RefusalsByNode& by_node) {
  bool header = false;
  for (const LayerInfo& l : layers) {
    if (!is_layer_op(source_op(l.op)) || l.precision == "int8") continue;
    if (!header) std::cout << "\nlayers left in " << "f32:\n";
    header = true;
    std::cout << "  " << l.node << " [" << l.op << "] " << l.implementation << '\n';
    const auto it = by_node.find(l.node);
    if (it == by_node.end()) {
      std::cout << "      no fusion pass looked at it\n";
      continue;
    }
    for (const FusionRefusal* r : it->second) {
      std::cout << "      " << r->pass << ": " << r->reason << '\n';
    }
  }
}

// Why `n`, an op other than a layer, stays f32.
std::string f32_cause(const graph::Graph& g, const graph::Node& n, const RefusalsByNode& by_node) {
  // A refusal explains the op only when it had int8 data to work with.
  std::string cause = "reads f32 data (nothing quantized before it in the file)";
  for (graph::ValueId in : n.inputs) {
    const graph::Value& v = g.value(in);
    const bool from_layer =
        v.producer.valid() && is_layer_op(std::string(graph::to_string(g.node(v.producer).kind)));
    if (from_layer && cause.rfind("reads f32 data", 0) == 0) {
      cause = "reads a layer's f32 output (the model quantizes after it)";
    }
    const bool dequantized =
        v.producer.valid() && g.node(v.producer).kind == graph::OpKind::Dequantize;
    if (!v.is_constant() && (v.type != ElementType::f32 || dequantized)) {
      cause = "reads dequantized int8 data; no int8 form of it here";
      if (const auto it = by_node.find(n.name); it != by_node.end()) {
        cause = it->second.front()->pass + ": " + it->second.front()->reason;
      }
    }
  }
  return cause;
}

// Why each other op stays f32, counted per op type and cause.
void print_f32_ops(const CompiledModel& model, const std::vector<LayerInfo>& layers,
                   const RefusalsByNode& by_node) {
  const graph::Graph& g = executed_graph(model);
  std::map<std::string, graph::NodeId> node_of;
  for (graph::NodeId id : g.topological_order()) node_of[g.node(id).name] = id;
  std::map<std::string, std::map<std::string, int>> causes;
  for (const LayerInfo& l : layers) {
    const std::string op = source_op(l.op);
    if (l.precision != "f32" || is_layer_op(op) || !node_of.count(l.node)) continue;
    ++causes[op][f32_cause(g, g.node(node_of[l.node]), by_node)];
  }
  if (!causes.empty()) {
    std::cout << "\nother ops left in f32, and why:\n";
    for (const auto& [op, by_cause] : causes) {
      for (const auto& [cause, n] : by_cause) {
        std::cout << "  " << std::left << std::setw(20) << op << std::right << std::setw(4) << n
                  << "  " << cause << '\n';
      }
    }
  }
}

// The reorders per inference, the arena and the ops on scalar fallback loops.
void print_reorders_and_memory(const CompiledModel& model, const std::vector<LayerInfo>& layers) {
  int convert_reorders = 0, staged = 0;
  std::vector<const LayerInfo*> scalar;
  for (const LayerInfo& l : layers) {
    if (l.op == "Convert" || l.op == "Dequantize") convert_reorders += l.reorders;
    else staged += l.reorders;
    if (l.scalar_fallback) scalar.push_back(&l);
  }
  std::cout << "\nreorders per inference: " << convert_reorders + staged << " (" << convert_reorders
            << " in Convert / Dequantize nodes, " << staged << " staged inside layers)\n";
  const MemoryInfo mem = model.memory();
  std::cout << std::fixed << std::setprecision(2) << "memory: intermediate tensors in a "
            << static_cast<double>(mem.arena_bytes) / (1 << 20) << " MiB arena ("
            << static_cast<double>(mem.unshared_bytes) / (1 << 20) << " MiB one buffer each), "
            << mem.views << " views, " << mem.in_place << " ops in place\n"
            << std::defaultfloat;
  std::cout << "scalar fallback loops: " << scalar.size() << '\n';
  for (const LayerInfo* l : scalar) std::cout << "  " << l->node << " [" << l->op << "]\n";
}

void print_slow_kernels(const std::vector<LayerInfo>& layers) {
  // An op on oneDNN's im2col gemm (plain layouts) or its reference kernel
  // (ref:any, ref_int8) runs far below the jit / brgemm kernels of its shape.
  std::vector<const LayerInfo*> slow;
  for (const LayerInfo& l : layers) {
    const std::string& impl = l.implementation;
    if (impl.find("gemm:jit") != std::string::npos || impl.rfind("ref:", 0) == 0 ||
        impl.rfind("ref_", 0) == 0) {
      slow.push_back(&l);
    }
  }
  std::cout << "slow kernels (gemm:jit or ref): " << slow.size() << '\n';
  for (const LayerInfo* l : slow) {
    std::cout << "  " << l->node << " [" << l->op << "] " << l->precision << ' '
              << l->implementation << '\n';
  }
}

// Coverage per op type, then each layer left in f32 with the refusals that
// name it, then every other refusal.
void print_summary(const CompiledModel& model, const std::vector<LayerInfo>& layers) {
  print_coverage(layers);
  RefusalsByNode by_node;
  for (const FusionRefusal& r : model.refusals()) by_node[r.node].push_back(&r);
  print_f32_layers(layers, by_node);
  print_f32_ops(model, layers, by_node);
  print_reorders_and_memory(model, layers);
  print_slow_kernels(layers);
  if (!model.refusals().empty()) {
    std::cout << "\nrefusals (" << model.refusals().size() << "):\n";
    for (const FusionRefusal& r : model.refusals()) {
      std::cout << "  " << r.pass << ": '" << r.node << "': " << r.reason << '\n';
    }
  }
}

int dump_command(const Args& args) {
  const std::string model_name = model_argument(args);
  const CompiledModel model =
      compile(load_model(model_name, shape_bindings(args, model_name)), compile_options(args));
  const auto layers = model.layers();
  if (args.flag("--summary")) {
    std::cout << "model " << model_name << ": " << layers.size() << " executable nodes ("
              << (args.flag("--unfused") ? "unfused" : "fused") << ")\n";
    print_summary(model, layers);
    return 0;
  }
  std::cout << graph::to_text(compiled_graph(model)) << "\nlayers:\n";
  for (const LayerInfo& l : layers) {
    std::cout << "  " << l.node << " [" << l.op << "] " << l.precision << ' ' << l.implementation;
    if (l.reorders > 0) std::cout << "  (" << l.reorders << " reorder" << (l.reorders > 1 ? "s" : "") << ")";
    if (l.scalar_fallback) std::cout << "  SCALAR FALLBACK";
    std::cout << '\n';
    if (!l.post_ops.empty()) std::cout << "      " << l.post_ops << '\n';
    if (l.integer.starts_with("float")) std::cout << "      " << l.integer << '\n';
    if (l.fixed_point_bits > 0) {
      std::cout << "      fixed point: " << l.fixed_point_bits << "-bit multiplier, shift "
                << l.fixed_point_shift << ", relative error " << std::setprecision(3)
                << l.fixed_point_error << std::setprecision(6) << '\n';
    }
  }
  if (!model.fusion_log().empty()) {
    std::cout << "\nfusion:\n";
    for (const std::string& line : model.fusion_log()) std::cout << "  " << line << '\n';
  }
  if (auto path = args.value("--dot")) {
    std::ofstream out(*path);
    if (!out) throw IoError("write " + *path + ": cannot create the file");
    write_dot(out, compiled_graph(model), layers);
    std::cout << "wrote " << *path << '\n';
  }
  return 0;
}

// The model as imported, unfused (its own arithmetic), as plain ONNX: each
// FakeQuantize on a u8 grid as QuantizeLinear -> DequantizeLinear, Quantize
// and Dequantize as ONNX's, every other op as the ONNX operator it is
// (graph/onnx/exporter.hpp); then read back and run on the same random
// inputs as the original, the largest difference printed.
int export_plain_command(const Args& args) {
  if (args.positional().size() != 2) throw UsageError("export: expected MODEL OUT.onnx");
  const std::string model_name = args.positional()[0];
  const std::string out = args.positional()[1];
#ifdef QFUSE_HAVE_ONNX
  const CompiledModel model = compile(load_model(model_name, shape_bindings(args, model_name)),
                                      {.fuse = false});
  const onnx::ExportReport report =
      onnx::export_prequantized(compiled_graph(model), onnx::ExportSource{}, out);
  std::cout << "wrote " << out << ": " << report.operators << " nodes as ONNX operators; "
            << "onnx::checker passed\n";
  const CompiledModel back = compile(onnx::import_file(out), {.fuse = false});
  InferRequest a = model.create_infer_request();
  InferRequest b = back.create_infer_request();
  std::mt19937 rng(0);
  for (const TensorInfo& in : model.inputs()) {
    Tensor& x = a.input(in.name);
    if (x.type() == ElementType::f32) {
      std::uniform_real_distribution<float> d(-1.0f, 1.0f);
      for (float& v : x.data<float>()) v = d(rng);
    }
    b.set_input(in.name, x);
  }
  a.infer();
  b.infer();
  double worst = 0.0;
  for (const std::string& name : model.output_names()) {
    const Tensor& ya = a.output(name);
    const Tensor& yb = b.output(name);
    if (ya.shape() != yb.shape()) throw GraphError("export: output '" + name + "' changed shape");
    double diff = 0.0;
    for (std::int64_t i = 0; i < ya.size(); ++i) {
      diff = std::max(diff, std::abs(static_cast<double>(ya.as_float(i)) - yb.as_float(i)));
    }
    std::cout << "output " << name << ": max |difference| from the original " << diff << "\n";
    worst = std::max(worst, diff);
  }
  return 0;
#else
  (void)out;
  throw UnsupportedError("export " + model_name + ": this build has no ONNX frontend");
#endif
}

// The integer-only mode's fused graph in the pre-quantized ONNX form
// (graph/onnx/exporter.hpp), then read back: it must import, and compile with
// one int8 primitive per layer exported in the integer form.
int export_command(const Args& args) {
  if (args.positional().size() != 2) throw UsageError("export-prequantized: expected MODEL OUT.onnx");
  const std::string model_name = args.positional()[0];
  const std::string out = args.positional()[1];
#ifdef QFUSE_HAVE_ONNX
  CompileOptions options;
  options.integer_only = true;
  const CompiledModel model = compile(load_model(model_name, shape_bindings(args, model_name)), options);
  onnx::ExportSource source;
  source.integer_plan = [&model](const graph::Node& n) { return integer_plan(model, n); };
  source.composed_plan = [&model](const graph::Node& n) { return composed_plan(model, n); };
  source.absorbed_post_ops = [&model](const graph::Node& n) { return absorbed_post_ops(model, n); };
  const onnx::ExportReport report = onnx::export_prequantized(compiled_graph(model), source, out);
  std::cout << "wrote " << out << ": " << report.layers
            << " layers as ConvInteger / MatMulInteger + Add(int32 bias) + Cast + Mul(M0) + "
               "Mul(2^-N) + QuantizeLinear(1, 0)";
  if (report.float_scale_layers > 0) {
    std::cout << ", " << report.float_scale_layers
              << " int8 layers with float scales (integer accumulator, f32 requantization)";
  }
  if (report.deconvolutions > 0) {
    std::cout << ", " << report.deconvolutions << " int8 deconvolutions as f32 ConvTranspose on codes";
  }
  if (report.operators > 0) {
    std::cout << ", " << report.operators << " other nodes as ONNX operators";
    if (report.absorbed_post_ops > 0) {
      std::cout << " (" << report.absorbed_post_ops << " of them post-ops of f32 layers)";
    }
  }
  std::cout << "; onnx::checker passed\n";
  if (report.inexact_accumulators > 0) {
    std::cout << report.inexact_accumulators
              << " layer(s) may have accumulators past 2^24, which a float Cast rounds\n";
  }
  if (report.inexact_constants > 0) {
    std::cout << report.inexact_constants
              << " integer constant(s) (M0, R or K) written rounded to float\n";
  }
  const CompiledModel back = compile(onnx::import_file(out), {});
  int int8 = 0, layers = 0;
  for (const LayerInfo& l : back.layers()) {
    if (l.macs == 0) continue;
    ++layers;
    int8 += l.precision == "int8" ? 1 : 0;
  }
  std::cout << "re-imported: " << int8 << " of " << layers << " layers run as one int8 primitive\n";
  return int8 >= report.layers ? 0 : 3;
#else
  (void)out;
  throw UnsupportedError("export-prequantized " + model_name + ": this build has no ONNX frontend");
#endif
}

}  // namespace qfuse::cli
