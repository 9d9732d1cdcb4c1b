// qfuse compare: the fused and the unfused path on the same inputs, with the
// differences counted in LSB of each output's quantum when it has one.

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "graph/passes/pattern.hpp"
#include "qfuse/qfuse.hpp"
#include "tools/common/models.hpp"
#include "tools/common/npy.hpp"
#include "tools/qfuse/cli.hpp"

namespace qfuse::cli {
namespace {

namespace fs = std::filesystem;

struct OutputDiff {
  std::string name;
  std::int64_t elements = 0;
  double max_abs = 0.0, mean_abs = 0.0;
  bool quantized = false;  // LSB counts below are meaningful
  std::int64_t equal = 0, one_lsb = 0, more = 0;
  double max_lsb = 0.0;
};

// The quantum of graph output `v`: 1 for integer outputs, So = (oh - ol) /
// (L - 1) per channel when a FakeQuantize with constant ranges produces it.
std::optional<std::vector<float>> output_quantum(const graph::Graph& g, graph::ValueId v) {
  const graph::Value& value = g.value(v);
  if (value.type != ElementType::f32) return std::vector<float>{1.0f};
  const graph::Node* fq = graph::pattern::producer_of(g, v, graph::OpKind::FakeQuantize);
  if (fq == nullptr || value.shape.size() < 2) return std::nullopt;
  auto ol = graph::pattern::channel_vector(g, fq->inputs[3], value.shape, 1);
  auto oh = graph::pattern::channel_vector(g, fq->inputs[4], value.shape, 1);
  if (!ol || !oh) return std::nullopt;
  const std::size_t n = std::max(ol->size(), oh->size());
  const auto lo = graph::pattern::expand(*ol, n), hi = graph::pattern::expand(*oh, n);
  std::vector<float> q(n);
  const double steps = static_cast<double>(fq->attr<graph::FakeQuantizeAttrs>().levels - 1);
  for (std::size_t c = 0; c < n; ++c) q[c] = static_cast<float>(std::abs(hi[c] - lo[c]) / steps);
  return q;
}

OutputDiff diff(const std::string& name, const Tensor& fused, const Tensor& ref,
                const std::optional<std::vector<float>>& quantum) {
  OutputDiff d;
  d.name = name;
  d.elements = ref.size();
  d.quantized = quantum.has_value();
  const Shape& s = ref.shape();
  const std::int64_t inner = s.size() > 2 ? element_count(Shape(s.begin() + 2, s.end())) : 1;
  const std::int64_t channels = s.size() > 1 ? s[1] : 1;
  double sum = 0.0;
  for (std::int64_t i = 0; i < d.elements; ++i) {
    const double a = fused.as_float(i), b = ref.as_float(i);
    const double e = std::abs(a - b);
    d.max_abs = std::max(d.max_abs, e);
    sum += e;
    if (quantum) {
      const auto c = static_cast<std::size_t>((i / inner) % channels);
      const double q = (*quantum)[std::min(c, quantum->size() - 1)];
      const double lsb = q > 0 ? e / q : (e > 0 ? INFINITY : 0.0);
      d.max_lsb = std::max(d.max_lsb, lsb);
      if (lsb < 0.01) {
        ++d.equal;
      } else if (lsb < 1.01) {
        ++d.one_lsb;
      } else {
        ++d.more;
      }
    }
  }
  d.mean_abs = d.elements ? sum / static_cast<double>(d.elements) : 0.0;
  return d;
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

int compare_command(const Args& args) {
  const std::string model_name = args.positional().empty() ? "default" : args.positional()[0];
  const graph::Graph g = load_model(model_name, shape_bindings(args, model_name));
  const CompiledModel fused = compile(g, {.fuse = true});
  const CompiledModel ref = compile(g, {.fuse = false});
  InferRequest rf = fused.create_infer_request();
  InferRequest rr = ref.create_infer_request();
  if (auto dir = args.value("--inputs")) {
    for (const std::string& name : ref.input_names()) {
      const Tensor t = tools::read_npy(fs::path(*dir) / (name + ".npy"));
      rf.set_input(name, t);
      rr.set_input(name, t);
    }
  } else {
    const auto seed = static_cast<unsigned>(args.int_value("--random", 0));
    const std::vector<Tensor> inputs = tools::random_inputs(ref.graph(), seed);
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      rf.set_input(ref.input_names()[i], inputs[i]);
      rr.set_input(ref.input_names()[i], inputs[i]);
    }
  }
  rf.infer();
  rr.infer();

  std::vector<OutputDiff> diffs;
  bool within_one_lsb = true;
  for (graph::ValueId v : ref.graph().outputs()) {
    const std::string& name = ref.graph().value(v).name;
    diffs.push_back(diff(name, rf.output(name), rr.output(name), output_quantum(ref.graph(), v)));
    within_one_lsb = within_one_lsb && (!diffs.back().quantized || diffs.back().more == 0);
  }

  std::size_t int8_layers = 0;
  for (const LayerInfo& l : fused.layers()) int8_layers += l.op.starts_with("Quantized") ? 1 : 0;
  std::cout << "model " << model_name << ": fused " << fused.layers().size() << " nodes ("
            << int8_layers << " int8 layers), unfused " << ref.layers().size() << " nodes\n";
  for (const LayerInfo& l : fused.layers()) {
    if (l.op.starts_with("Quantized")) {
      std::cout << "  " << l.node << " [" << l.op << "] " << l.implementation << '\n';
    }
  }
  for (const OutputDiff& d : diffs) {
    std::cout << std::setprecision(6) << "output " << d.name << ": " << d.elements
              << " elements, max |diff| " << d.max_abs << ", mean |diff| " << d.mean_abs;
    if (d.quantized) {
      std::cout << std::fixed << std::setprecision(3) << "\n  in LSB: equal "
                << 100.0 * static_cast<double>(d.equal) / static_cast<double>(d.elements)
                << "%, 1 LSB " << d.one_lsb << ", >1 LSB " << d.more << ", max "
                << d.max_lsb << " LSB" << std::defaultfloat;
    } else {
      std::cout << " (no quantization grid on this output)";
    }
    std::cout << '\n';
  }

  if (auto path = args.value("--json")) {
    std::ofstream out(*path);
    if (!out) throw IoError("write " + *path + ": cannot create the file");
    out << "{\"model\": \"" << json_escape(model_name) << "\", \"outputs\": [";
    for (std::size_t i = 0; i < diffs.size(); ++i) {
      const OutputDiff& d = diffs[i];
      out << (i ? ", " : "") << "{\"name\": \"" << json_escape(d.name) << "\", \"elements\": "
          << d.elements << ", \"max_abs_diff\": " << d.max_abs << ", \"mean_abs_diff\": "
          << d.mean_abs;
      if (d.quantized) {
        out << ", \"equal\": " << d.equal << ", \"one_lsb\": " << d.one_lsb
            << ", \"more_than_one_lsb\": " << d.more << ", \"max_lsb\": " << d.max_lsb;
      }
      out << "}";
    }
    out << "], \"layers\": [";
    const auto layers = fused.layers();
    for (std::size_t i = 0; i < layers.size(); ++i) {
      out << (i ? ", " : "") << "{\"node\": \"" << json_escape(layers[i].node) << "\", \"op\": \""
          << layers[i].op << "\", \"implementation\": \"" << json_escape(layers[i].implementation)
          << "\", \"post_ops\": \"" << json_escape(layers[i].post_ops) << "\"}";
    }
    out << "]}\n";
  }
  if (auto path = args.value("--html")) {
    std::ofstream out(*path);
    if (!out) throw IoError("write " + *path + ": cannot create the file");
    out << "<!doctype html><meta charset=utf-8><title>qfuse compare " << model_name
        << "</title><style>body{font-family:sans-serif}td,th{border:1px solid #ccc;padding:4px}"
           "table{border-collapse:collapse}</style><h1>qfuse compare: "
        << model_name << "</h1><h2>Outputs (fused vs unfused)</h2><table><tr><th>output</th>"
        << "<th>elements</th><th>max |diff|</th><th>equal %</th><th>1 LSB</th><th>&gt;1 LSB</th></tr>";
    for (const OutputDiff& d : diffs) {
      out << "<tr><td>" << d.name << "</td><td>" << d.elements << "</td><td>" << d.max_abs
          << "</td><td>"
          << (d.quantized ? std::to_string(100.0 * static_cast<double>(d.equal) /
                                           static_cast<double>(d.elements))
                          : "-")
          << "</td><td>" << (d.quantized ? std::to_string(d.one_lsb) : "-") << "</td><td>"
          << (d.quantized ? std::to_string(d.more) : "-") << "</td></tr>";
    }
    out << "</table><h2>Fused layers</h2><table><tr><th>node</th><th>op</th><th>implementation</th>"
           "<th>post-ops</th></tr>";
    for (const LayerInfo& l : fused.layers()) {
      out << "<tr><td>" << l.node << "</td><td>" << l.op << "</td><td>" << l.implementation
          << "</td><td>" << l.post_ops << "</td></tr>";
    }
    out << "</table>\n";
  }
  return within_one_lsb ? 0 : 3;
}

}  // namespace qfuse::cli
