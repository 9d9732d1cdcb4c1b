// qfuse compare: the fused and the unfused path on the same inputs, tensor by
// tensor (qfuse::Comparison): every graph output and every activation a fused
// layer writes, with differences in quanta of its FakeQuantize, equal share,
// cosine and SNR, propagated (fused end to end) and isolated (each fused
// layer fed the reference's values: its own error); as a table, JSON and a
// self-contained HTML page with an SVG plot of the error per tensor in
// execution order.

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "plugin/api_internal.hpp"
#ifdef QFUSE_HAVE_ONNX
#include "graph/onnx/importer.hpp"
#endif
#include "tools/common/fashion_mnist.hpp"
#include "tools/common/models.hpp"
#include "tools/common/npy.hpp"
#include "tools/qfuse/cli.hpp"

namespace qfuse::cli {
namespace {

namespace fs = std::filesystem;

std::string escape(const std::string& s, bool html) {
  std::string out;
  for (char c : s) {
    if (html && c == '<') {
      out += "&lt;";
    } else if (html && c == '>') {
      out += "&gt;";
    } else if (html && c == '&') {
      out += "&amp;";
    } else {
      if (!html && (c == '"' || c == '\\')) out += '\\';
      if (static_cast<unsigned char>(c) >= 0x20) out += c;
    }
  }
  return out;
}

double share(std::int64_t n, std::int64_t of) {
  return of > 0 ? 100.0 * static_cast<double>(n) / static_cast<double>(of) : 0.0;
}

std::string number(double v, int precision = 3) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::ostringstream s;
  s << std::fixed << std::setprecision(precision) << v;
  return s.str();
}

std::string shorten(const std::string& s, std::size_t n) {
  return s.size() <= n ? s : "..." + s.substr(s.size() - (n - 3));
}

// The share of elements off by one quantum or more.
double off_share(std::int64_t equal, std::int64_t elements) {
  return 1.0 - static_cast<double>(equal) / static_cast<double>(std::max<std::int64_t>(elements, 1));
}

}  // namespace

void print_compare_table(const std::vector<TensorDiff>& tensors) {
  std::cout << std::left << std::setw(26) << "fused node" << std::setw(34) << "tensor" << std::right
            << std::setw(10) << "elements" << std::setw(10) << "max|diff|" << std::setw(8) << "0 LSB%"
            << std::setw(8) << "1 LSB%" << std::setw(8) << "2 LSB%" << std::setw(8) << ">2 LSB%"
            << std::setw(8) << "equal%" << std::setw(12) << "iso max LSB" << std::setw(11)
            << "iso equal%" << std::setw(10) << "cosine" << std::setw(8) << "SNR dB" << '\n';
  for (const TensorDiff& t : tensors) {
    std::cout << std::left << std::setw(26) << shorten(t.node, 25) << std::setw(34)
              << shorten(t.name + (t.graph_output ? " [out]" : ""), 33) << std::right << std::setw(10)
              << t.elements << std::setw(10) << number(t.max_abs, 5);
    for (int k = 0; k < 4; ++k) {
      std::cout << std::setw(8) << (t.quantized ? number(share(t.lsb[k], t.elements), 2) : "-");
    }
    std::cout << std::setw(8) << number(100.0 * t.equal_share, 2) << std::setw(12)
              << (t.quantized ? number(t.isolated.max_lsb, 2) : "-") << std::setw(11)
              << number(100.0 * t.isolated.equal_share, 2) << std::setw(10) << number(t.cosine, 6)
              << std::setw(8) << number(t.snr_db, 1) << '\n';
  }
}

// Per tensor: the integer-only mode against the unfused path, the float-scale
// fused path against the unfused path, and integer-only against float-scale
// (in codes), with how each layer ran.
void print_integer_table(const Comparison& int_vs_unfused, const std::vector<TensorDiff>& float_vs_unfused,
                         const std::vector<TensorDiff>& int_vs_float) {
  std::map<std::string, const TensorDiff*> by_name_float, by_name_if;
  for (const TensorDiff& t : float_vs_unfused) by_name_float[t.name] = &t;
  for (const TensorDiff& t : int_vs_float) by_name_if[t.node] = &t;
  std::map<std::string, std::string> mode;
  int integer_layers = 0, float_layers = 0;
  for (const LayerInfo& l : int_vs_unfused.fused().layers()) {
    mode[l.node] = l.integer;
    if (l.integer == "integer") ++integer_layers;
    if (l.integer.starts_with("float")) ++float_layers;
  }
  std::cout << "\ninteger-only mode: " << integer_layers << " layers in integer arithmetic, "
            << float_layers << " kept float scales\n";
  const auto cell = [](const TensorDiff* t) {
    if (t == nullptr) return std::string("-");
    return (t->quantized ? number(t->max_lsb, 2) : number(t->max_abs, 5)) + " / " +
           number(100.0 * t->equal_share, 2) + "%";
  };
  std::cout << std::left << std::setw(26) << "fused node" << std::setw(30) << "tensor" << std::right
            << std::setw(22) << "int vs unfused" << std::setw(22) << "float vs unfused"
            << std::setw(22) << "int vs float" << "  mode\n"
            << std::left << std::setw(56) << "" << std::right << std::setw(66)
            << "(max LSB or |diff| / equal)" << '\n';
  for (const TensorDiff& t : int_vs_unfused.tensors()) {
    const auto f = by_name_float.find(t.name);
    const auto i = by_name_if.find(t.node);
    std::cout << std::left << std::setw(26) << shorten(t.node, 25) << std::setw(30)
              << shorten(t.name + (t.graph_output ? " [out]" : ""), 29) << std::right
              << std::setw(22) << cell(&t)
              << std::setw(22) << cell(f == by_name_float.end() ? nullptr : f->second)
              << std::setw(22) << cell(i == by_name_if.end() ? nullptr : i->second) << "  "
              << mode[t.node] << '\n';
  }
}

namespace {

// A JSON array of the tensors' differences.
void write_tensor_list(std::ostream& out, const std::vector<TensorDiff>& tensors) {
  const auto num = [](double v) { return std::isinf(v) ? std::string("null") : number(v, 6); };
  out << "[";
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const TensorDiff& t = tensors[i];
    out << (i ? ", " : "") << "{\"name\": \"" << escape(t.name, false) << "\", \"node\": \""
        << escape(t.node, false) << "\", \"graph_output\": " << (t.graph_output ? "true" : "false")
        << ", \"elements\": " << t.elements << ", \"max_abs_diff\": " << num(t.max_abs)
        << ", \"quantized\": " << (t.quantized ? "true" : "false");
    if (t.quantized) {
      out << ", \"lsb_histogram\": [" << t.lsb[0] << ", " << t.lsb[1] << ", " << t.lsb[2] << ", "
          << t.lsb[3] << "], \"max_lsb\": " << num(t.max_lsb);
    }
    out << ", \"equal_share\": " << num(t.equal_share) << ", \"cosine\": " << num(t.cosine)
        << ", \"snr_db\": " << num(t.snr_db);
    const IsolatedDiff& iso = t.isolated;
    out << ", \"isolated\": {\"elements\": " << iso.elements << ", \"max_abs_diff\": " << num(iso.max_abs);
    if (t.quantized) {
      out << ", \"lsb_histogram\": [" << iso.lsb[0] << ", " << iso.lsb[1] << ", " << iso.lsb[2] << ", "
          << iso.lsb[3] << "], \"max_lsb\": " << num(iso.max_lsb);
    }
    out << ", \"equal_share\": " << num(iso.equal_share) << "}}";
  }
  out << "]";
}

}  // namespace

void write_compare_json(const std::string& path, const std::string& model, const std::string& inputs,
                        const std::vector<TensorDiff>& tensors, const std::vector<LayerInfo>& layers,
                        const std::vector<TensorDiff>* unfused_tensors) {
  std::ofstream out(path);
  if (!out) throw IoError("write " + path + ": cannot create the file");
  out << "{\"model\": \"" << escape(model, false) << "\", \"inputs\": \"" << escape(inputs, false)
      << "\", \"tensors\": ";
  write_tensor_list(out, tensors);
  if (unfused_tensors != nullptr) {
    out << ", \"unfused_tensors\": ";
    write_tensor_list(out, *unfused_tensors);
  }
  out << ", \"layers\": [";
  for (std::size_t i = 0; i < layers.size(); ++i) {
    out << (i ? ", " : "") << "{\"node\": \"" << escape(layers[i].node, false) << "\", \"op\": \""
        << layers[i].op << "\", \"precision\": \"" << layers[i].precision
        << "\", \"implementation\": \"" << escape(layers[i].implementation, false)
        << "\", \"post_ops\": \"" << escape(layers[i].post_ops, false) << "\", \"integer\": \""
        << escape(layers[i].integer, false) << "\"}";
  }
  out << "]}\n";
}

// A self-contained page: the inputs, an SVG plot of each tensor's SNR (bars,
// left axis; infinite SNR drawn at the top) and share of elements off by one
// quantum or more (right axis; propagated: filled dots, isolated: open
// diamonds) in execution order, the table, and the fused layers.
void write_compare_html(const std::string& path, const std::string& model, const std::string& inputs,
                        const std::vector<TensorDiff>& tensors, const std::vector<LayerInfo>& layers) {
  std::ofstream out(path);
  if (!out) throw IoError("write " + path + ": cannot create the file");
  const std::size_t n = tensors.size();
  const double w = std::max<double>(640.0, 60.0 + 28.0 * static_cast<double>(n)), h = 360.0;
  const double left = 50.0, right = w - 50.0, top = 20.0, bottom = 250.0;
  double snr_max = 10.0;
  for (const TensorDiff& t : tensors) {
    if (!std::isinf(t.snr_db)) snr_max = std::max(snr_max, t.snr_db);
  }
  snr_max = std::ceil(snr_max / 10.0) * 10.0;
  // The right axis: the smallest of 1%, 5%, 25%, 100% that holds every dot.
  double off_max = 0.0;
  for (const TensorDiff& t : tensors) {
    if (t.quantized && t.elements > 0) {
      off_max = std::max({off_max, off_share(t.lsb[0], t.elements),
                          off_share(t.isolated.lsb[0], t.isolated.elements)});
    }
  }
  double off_axis = 1.0;
  for (const double a : {0.01, 0.05, 0.25}) {
    if (off_max <= a) {
      off_axis = a;
      break;
    }
  }
  const double step = n ? (right - left) / static_cast<double>(n) : 0.0;
  const auto y_of = [&](double frac) { return bottom - frac * (bottom - top); };
  out << "<!doctype html><html><head><meta charset=utf-8><title>qfuse compare " << escape(model, true)
      << "</title><style>body{font-family:sans-serif;margin:20px}td,th{border:1px solid #ccc;"
         "padding:3px 6px;font-size:13px}table{border-collapse:collapse}td.n{text-align:right}"
         "</style></head><body><h1>qfuse compare: "
      << escape(model, true) << "</h1><p>Fused against unfused on " << escape(inputs, true)
      << ". Each tensor exists in both graphs: the graph outputs, and the activations the fused "
         "layers write (their u8/s8 codes taken as the real values of the model's FakeQuantize). "
         "Propagated: the fused graph end to end, each layer's difference including what it "
         "inherits. Isolated: a second fused run in which every compared tensor, once measured, is "
         "replaced by the unfused one, so each layer reads the reference's inputs: its own error.</p>"
      << "<h2>Error per tensor, in execution order</h2><svg xmlns='http://www.w3.org/2000/svg' width='"
      << w << "' height='" << h << "' font-size='11'>";
  out << "<line x1='" << left << "' y1='" << bottom << "' x2='" << right << "' y2='" << bottom
      << "' stroke='black'/><line x1='" << left << "' y1='" << top << "' x2='" << left << "' y2='"
      << bottom << "' stroke='steelblue'/><line x1='" << right << "' y1='" << top << "' x2='" << right
      << "' y2='" << bottom << "' stroke='firebrick'/>";
  for (int k = 0; k <= 4; ++k) {
    const double f = k / 4.0;
    out << "<text x='" << left - 6 << "' y='" << y_of(f) + 4 << "' text-anchor='end' fill='steelblue'>"
        << number(snr_max * f, 0) << "</text><text x='" << right + 6 << "' y='" << y_of(f) + 4
        << "' fill='firebrick'>" << number(100.0 * off_axis * f, off_axis < 0.05 ? 2 : 0) << "%</text>";
  }
  out << "<text x='" << left << "' y='" << top - 6 << "' fill='steelblue'>SNR dB (bars; top: equal)</text>"
      << "<text x='" << right << "' y='" << top - 6 << "' text-anchor='end' fill='firebrick'>"
      << "elements off by &gt;= 1 quantum (dots: propagated; diamonds: isolated)</text>";
  for (std::size_t i = 0; i < n; ++i) {
    const TensorDiff& t = tensors[i];
    const double x = left + step * (static_cast<double>(i) + 0.5);
    const double snr = std::isinf(t.snr_db) ? snr_max : std::clamp(t.snr_db, 0.0, snr_max);
    const double y = y_of(snr / snr_max);
    out << "<rect x='" << x - step * 0.35 << "' y='" << y << "' width='" << step * 0.7 << "' height='"
        << bottom - y << "' fill='" << (std::isinf(t.snr_db) ? "lightsteelblue" : "steelblue")
        << "'><title>" << escape(t.name, true) << ": SNR " << number(t.snr_db, 1) << " dB</title></rect>";
    if (t.quantized) {
      const double off = off_share(t.lsb[0], t.elements);
      out << "<circle cx='" << x << "' cy='" << y_of(std::min(off / off_axis, 1.0))
          << "' r='4' fill='firebrick'><title>"
          << escape(t.name, true) << ": " << number(100.0 * off, 3) << "% off by >= 1 quantum</title></circle>";
      const double iso = off_share(t.isolated.lsb[0], t.isolated.elements);
      const double iy = y_of(std::min(iso / off_axis, 1.0));
      out << "<polygon points='" << x << "," << iy - 6 << " " << x + 6 << "," << iy << " " << x << ","
          << iy + 6 << " " << x - 6 << "," << iy
          << "' fill='none' stroke='darkorange' stroke-width='2'><title>" << escape(t.name, true)
          << ": " << number(100.0 * iso, 3) << "% off by >= 1 quantum, isolated</title></polygon>";
    }
    out << "<text transform='translate(" << x + 3 << "," << bottom + 8 << ") rotate(60)'>"
        << escape(shorten(t.node, 24), true) << (t.graph_output ? " [out]" : "") << "</text>";
  }
  out << "</svg><h2>Tensors</h2><table><tr><th>#</th><th>tensor</th><th>fused node</th><th>elements</th>"
         "<th>max |diff|</th><th>0 LSB %</th><th>1 LSB %</th><th>2 LSB %</th><th>&gt;2 LSB %</th>"
         "<th>equal %</th><th>iso max LSB</th><th>iso equal %</th><th>cosine</th><th>SNR dB</th></tr>";
  for (std::size_t i = 0; i < n; ++i) {
    const TensorDiff& t = tensors[i];
    out << "<tr><td class=n>" << i + 1 << "</td><td>" << escape(t.name, true)
        << (t.graph_output ? " (output)" : "") << "</td><td>" << escape(t.node, true)
        << "</td><td class=n>" << t.elements << "</td><td class=n>" << number(t.max_abs, 6) << "</td>";
    for (int k = 0; k < 4; ++k) {
      out << "<td class=n>" << (t.quantized ? number(share(t.lsb[k], t.elements), 3) : "-") << "</td>";
    }
    out << "<td class=n>" << number(100.0 * t.equal_share, 3) << "</td><td class=n>"
        << (t.quantized ? number(t.isolated.max_lsb, 3) : "-") << "</td><td class=n>"
        << number(100.0 * t.isolated.equal_share, 3) << "</td><td class=n>" << number(t.cosine, 6)
        << "</td><td class=n>" << number(t.snr_db, 1) << "</td></tr>";
  }
  out << "</table><h2>Fused graph</h2><table><tr><th>node</th><th>op</th><th>precision</th>"
         "<th>implementation</th><th>post-ops</th></tr>";
  for (const LayerInfo& l : layers) {
    out << "<tr><td>" << escape(l.node, true) << "</td><td>" << l.op << "</td><td>" << l.precision
        << "</td><td>" << escape(l.implementation, true) << "</td><td>" << escape(l.post_ops, true)
        << "</td></tr>";
  }
  out << "</table></body></html>\n";
}

namespace {

// A file name's percent-encoded bytes decoded ("%2F" -> "/").
std::string percent_decoded(const std::string& s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      out += static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

// qfuse compare MODEL --inputs DIR --reference DIR: fused and unfused, each
// against the tensors in the reference directory (by the model's tensor names).
int compare_with_reference(const Args& args, const std::string& model_name,
                           const CompileOptions& options, const std::string& reference_dir) {
  const auto input_dir = args.value("--inputs");
  if (!input_dir) throw UsageError("compare --reference needs the --inputs the reference ran on");
  const Model model = make_model(load_model(model_name, shape_bindings(args, model_name)));
  std::map<std::string, Tensor> inputs, reference;
  for (const TensorInfo& in : model.inputs()) {
    inputs[in.name] = tools::read_npy(fs::path(*input_dir) / (in.name + ".npy"));
  }
  if (!fs::is_directory(reference_dir)) {
    throw IoError("compare --reference " + reference_dir + ": not a directory");
  }
  for (const auto& e : fs::directory_iterator(reference_dir)) {
    if (e.path().extension() != ".npy") continue;
    reference[percent_decoded(e.path().stem().string())] = tools::read_npy(e.path());
  }
  CompileOptions unfused = options;
  unfused.fuse = false;
  Comparison fused_cmp(model, options);
  Comparison unfused_cmp(model, unfused, unfused);
  const std::size_t used = fused_cmp.run_against(inputs, reference);
  unfused_cmp.run_against(inputs, reference);
  std::cout << "model " << model_name << ": " << reference.size() << " reference tensors in "
            << reference_dir << ", " << used << " of them compared; inputs from " << *input_dir
            << "\n\nfused against the reference:\n";
  const std::vector<TensorDiff> fused = fused_cmp.tensors();
  print_compare_table(fused);
  std::cout << "\nunfused against the reference:\n";
  const std::vector<TensorDiff> unfused_diffs = unfused_cmp.tensors();
  print_compare_table(unfused_diffs);
  const std::string desc = "the inputs in " + *input_dir + "; reference " + reference_dir;
  if (auto path = args.value("--json")) {
    write_compare_json(*path, model_name, desc, fused, fused_cmp.fused().layers(), &unfused_diffs);
  }
  return 0;
}

}  // namespace

int compare_command(const Args& args) {
  const std::string model_name = args.positional().empty() ? "default" : args.positional()[0];
  CompileOptions options;
  options.allow_residual_round_drop = args.flag("--allow-residual-round-drop");
  if (auto dir = args.value("--reference")) return compare_with_reference(args, model_name, options, *dir);
  std::string inputs_desc;
  std::optional<Comparison> cmp;
  // --integer-only: the integer-only mode against the unfused path and
  // against the float-scale fused path, on the same inputs.
  const bool integer = args.flag("--integer-only");
  std::optional<Comparison> int_vs_unfused, int_vs_float;
  CompileOptions integer_options = options;
  integer_options.integer_only = true;
  const auto make = [&](const Model& model) {
    cmp.emplace(model, options);
    if (integer) {
      int_vs_unfused.emplace(model, integer_options);
      int_vs_float.emplace(model, integer_options, options);
    }
  };
  const auto run = [&](const std::map<std::string, Tensor>& inputs) {
    cmp->run(inputs);
    if (integer) {
      int_vs_unfused->run(inputs);
      int_vs_float->run(inputs);
    }
  };
  const auto bundled = tools::fashion_mnist::find_bundled_model(model_name);
  if (bundled && !args.value("--inputs") && !args.value("--random") && !args.flag("--shape")) {
#ifdef QFUSE_HAVE_ONNX
    // The bundled Fashion-MNIST models: the test images, 100 per inference.
    namespace fm = tools::fashion_mnist;
    const int images = std::clamp(args.int_value("--images", 10000), 100, 10000) / 100 * 100;
    const fm::TestSet set = fm::load_test_set();
    const bool noisy = bundled->task == fm::Task::denoise;
    const Tensor x = noisy ? fm::noisy(set.images) : set.images;
    make(make_model(onnx::import_file(bundled->onnx_file(), {.input_shapes = {{"input", {100, 1, 28, 28}}}})));
    for (int first = 0; first < images; first += 100) {
      Tensor batch(ElementType::f32, {100, 1, 28, 28});
      std::copy_n(x.data<float>().data() + static_cast<std::size_t>(first) * 784, 100 * 784,
                  batch.data<float>().data());
      run({{"input", batch}});
    }
    inputs_desc = std::to_string(images) + " Fashion-MNIST test images" +
                  (noisy ? " with noise" : "");
#endif
  } else {
    make(make_model(load_model(model_name, shape_bindings(args, model_name))));
    std::map<std::string, Tensor> inputs;
    if (auto dir = args.value("--inputs")) {
      for (const std::string& name : cmp->unfused().input_names()) {
        inputs[name] = tools::read_npy(fs::path(*dir) / (name + ".npy"));
      }
      inputs_desc = "the inputs in " + *dir;
    } else {
      const auto seed = static_cast<unsigned>(args.int_value("--random", 0));
      const std::vector<Tensor> random = tools::random_inputs(compiled_graph(cmp->unfused()), seed);
      for (std::size_t i = 0; i < random.size(); ++i) inputs[cmp->unfused().input_names()[i]] = random[i];
      inputs_desc = "random inputs (seed " + std::to_string(seed) + ")";
    }
    run(inputs);
  }
  const std::vector<TensorDiff> tensors = cmp->tensors();
  const std::vector<LayerInfo> layers = cmp->fused().layers();
  std::size_t int8_layers = 0;
  for (const LayerInfo& l : layers) int8_layers += l.op.starts_with("Quantized") ? 1 : 0;
  std::cout << "model " << model_name << ": fused " << layers.size() << " nodes (" << int8_layers
            << " int8 layers), unfused " << cmp->unfused().layers().size() << " nodes; "
            << inputs_desc << (options.allow_residual_round_drop ? "; allow_residual_round_drop" : "")
            << "\n";
  print_compare_table(tensors);
  if (integer) print_integer_table(*int_vs_unfused, tensors, int_vs_float->tensors());
  bool within_one_lsb = true;
  for (const TensorDiff& t : tensors) {
    if (t.graph_output && t.quantized && (t.lsb[2] + t.lsb[3]) > 0) within_one_lsb = false;
  }
  if (auto path = args.value("--json")) write_compare_json(*path, model_name, inputs_desc, tensors, layers);
  if (auto path = args.value("--html")) {
    write_compare_html(*path, model_name, inputs_desc, tensors, layers);
    std::cout << "report: " << *path << '\n';
  }
  return within_one_lsb ? 0 : 3;
}

}  // namespace qfuse::cli
