// The fused-against-unfused report of qfuse compare, its Python package and
// the bundled models' job: a table, JSON and a self-contained HTML page with
// an SVG plot of the error per tensor in execution order. Public API only.

#include "plugin/report/compare_report.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>

namespace qfuse::report {
namespace {

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

void print_compare_table(std::ostream& out, const std::vector<TensorDiff>& tensors) {
  out << std::left << std::setw(26) << "fused node" << std::setw(34) << "tensor" << std::right
            << std::setw(10) << "elements" << std::setw(10) << "max|diff|" << std::setw(8) << "0 LSB%"
            << std::setw(8) << "1 LSB%" << std::setw(8) << "2 LSB%" << std::setw(8) << ">2 LSB%"
            << std::setw(8) << "equal%" << std::setw(12) << "iso max LSB" << std::setw(11)
            << "iso equal%" << std::setw(10) << "cosine" << std::setw(8) << "SNR dB" << '\n';
  for (const TensorDiff& t : tensors) {
    out << std::left << std::setw(26) << shorten(t.node, 25) << std::setw(34)
              << shorten(t.name + (t.graph_output ? " [out]" : ""), 33) << std::right << std::setw(10)
              << t.elements << std::setw(10) << number(t.max_abs, 5);
    for (int k = 0; k < 4; ++k) {
      out << std::setw(8) << (t.quantized ? number(share(t.lsb[k], t.elements), 2) : "-");
    }
    out << std::setw(8) << number(100.0 * t.equal_share, 2) << std::setw(12)
              << (t.quantized ? number(t.isolated.max_lsb, 2) : "-") << std::setw(11)
              << number(100.0 * t.isolated.equal_share, 2) << std::setw(10) << number(t.cosine, 6)
              << std::setw(8) << number(t.snr_db, 1) << '\n';
  }
}

// Per tensor: the integer-only mode against the unfused path, the float-scale
// fused path against the unfused path, and integer-only against float-scale
// (in codes), with how each layer ran.
void print_integer_table(std::ostream& out, const Comparison& int_vs_unfused,
                         const std::vector<TensorDiff>& float_vs_unfused,
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
  out << "\ninteger-only mode: " << integer_layers << " layers in integer arithmetic, "
            << float_layers << " kept float scales\n";
  const auto cell = [](const TensorDiff* t) {
    if (t == nullptr) return std::string("-");
    return (t->quantized ? number(t->max_lsb, 2) : number(t->max_abs, 5)) + " / " +
           number(100.0 * t->equal_share, 2) + "%";
  };
  out << std::left << std::setw(26) << "fused node" << std::setw(30) << "tensor" << std::right
            << std::setw(22) << "int vs unfused" << std::setw(22) << "float vs unfused"
            << std::setw(22) << "int vs float" << "  mode\n"
            << std::left << std::setw(56) << "" << std::right << std::setw(66)
            << "(max LSB or |diff| / equal)" << '\n';
  for (const TensorDiff& t : int_vs_unfused.tensors()) {
    const auto f = by_name_float.find(t.name);
    const auto i = by_name_if.find(t.node);
    out << std::left << std::setw(26) << shorten(t.node, 25) << std::setw(30)
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

void write_compare_json(std::ostream& out, const std::string& model, const std::string& inputs,
                        const std::vector<TensorDiff>& tensors, const std::vector<LayerInfo>& layers,
                        const std::vector<TensorDiff>* unfused_tensors) {
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
void write_compare_html(std::ostream& out, const std::string& model, const std::string& inputs,
                        const std::vector<TensorDiff>& tensors, const std::vector<LayerInfo>& layers) {
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

std::ofstream create_report_file(const std::string& path) {
  std::ofstream out(path);
  if (!out) throw IoError("write " + path + ": cannot create the file");
  return out;
}

}  // namespace qfuse::report
