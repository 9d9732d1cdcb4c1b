// qfuse._qfuse: the Python binding of the public C++ API (qfuse/qfuse.hpp,
// qfuse/onnx.hpp, qfuse/compare.hpp). The package around it (qfuse/*.py)
// adds from_torch, evaluation and Dask; everything numeric happens here or in
// the library.
//
// Arrays: an input is read in place when it is a C-contiguous array of the
// input's dtype and shape (anything else is refused with a message naming the
// input); outputs are fresh arrays the request writes directly when the plan
// lets it. Inference runs with the GIL released, so Python threads run
// requests in parallel.

#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "qfuse/compare.hpp"
#include "qfuse/onnx.hpp"
#include "qfuse/openvino.hpp"
#include "qfuse/qfuse.hpp"
#include "plugin/report/compare_report.hpp"
#include "plugin/report/measure.hpp"

namespace py = pybind11;

namespace qfuse::python {
namespace {

// ---- element types and arrays ----------------------------------------------

py::dtype dtype_of(ElementType t) {
  switch (t) {
    case ElementType::f32: return py::dtype::of<float>();
    case ElementType::s8: return py::dtype::of<std::int8_t>();
    case ElementType::u8: return py::dtype::of<std::uint8_t>();
    case ElementType::s32: return py::dtype::of<std::int32_t>();
    case ElementType::s64: return py::dtype::of<std::int64_t>();
  }
  throw Error("unknown element type");
}

std::string dtype_name(ElementType t) { return py::str(dtype_of(t)).cast<std::string>(); }

// The element type of a numpy dtype in native byte order (by kind and size:
// an unpickled array's dtype is equal to, not the same object as, numpy's).
std::optional<ElementType> element_type(const py::dtype& d) {
  if (d.byteorder() == '>') return std::nullopt;
  const char kind = d.kind();
  const auto size = d.itemsize();
  if (kind == 'f' && size == 4) return ElementType::f32;
  if (kind == 'i' && size == 1) return ElementType::s8;
  if (kind == 'u' && size == 1) return ElementType::u8;
  if (kind == 'i' && size == 4) return ElementType::s32;
  if (kind == 'i' && size == 8) return ElementType::s64;
  return std::nullopt;
}

std::string shape_text(const std::vector<std::int64_t>& s) {
  std::string out = "(";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + (s.size() == 1 ? ",)" : ")");
}

Shape shape_of(const py::array& a) { return Shape(a.shape(), a.shape() + a.ndim()); }

// `a` as the input `info` expects it, or InferenceError saying what differs.
void check_array(const std::string& what, const TensorInfo& info, const py::array& a) {
  const std::string head = what + " '" + info.name + "': ";
  if (element_type(a.dtype()) != info.type) {
    throw InferenceError(head + "expected dtype " + dtype_name(info.type) + ", got " +
                         py::str(a.dtype()).cast<std::string>() +
                         " (convert it with arr.astype(numpy." + dtype_name(info.type) + "))");
  }
  // Symbolic dimensions may take other sizes (the request checks them).
  const Shape shape = shape_of(a);
  bool fits = shape.size() == info.shape.size();
  for (std::size_t d = 0; fits && d < shape.size(); ++d) {
    fits = shape[d] == info.shape[d] || (!info.dim_names.empty() && !info.dim_names[d].empty());
  }
  if (!fits) {
    std::string expected = "(";
    for (std::size_t d = 0; d < info.shape.size(); ++d) {
      const bool named = !info.dim_names.empty() && !info.dim_names[d].empty();
      expected += (d ? ", " : "") + (named ? info.dim_names[d] : std::to_string(info.shape[d]));
    }
    expected += info.shape.size() == 1 ? ",)" : ")";
    // Why a dimension that differs is fixed, where the import traced it.
    std::string why;
    for (std::size_t d = 0; d < shape.size() && shape.size() == info.shape.size(); ++d) {
      if (shape[d] != info.shape[d] && d < info.fixed_reasons.size() &&
          !info.fixed_reasons[d].empty()) {
        why += "; dimension " + std::to_string(d) + ": " + info.fixed_reasons[d];
      }
    }
    throw InferenceError(head + "expected shape " + expected + ", got " + shape_text(shape) + why);
  }
  if ((a.flags() & py::array::c_style) == 0) {
    throw InferenceError(head +
                         "the array is not C-contiguous (its elements are not dense in C order); "
                         "pass numpy.ascontiguousarray(arr)");
  }
}

// A copy of `a` as a Tensor (bench inputs, comparisons).
Tensor to_tensor(const py::array& a) {
  const std::optional<ElementType> type = element_type(a.dtype());
  if (!type) {
    throw InferenceError("array of dtype " + py::str(a.dtype()).cast<std::string>() +
                         ": qfuse takes float32, int8, uint8, int32 or int64 in native byte order");
  }
  const py::array c = py::array::ensure(a, py::array::c_style);
  Tensor t(*type, shape_of(c));
  std::memcpy(t.raw_data(), c.data(), t.byte_size());
  return t;
}

// name -> array, checked against the model's inputs: every input given, no
// unknown name.
std::map<std::string, py::array> input_arrays(const std::vector<TensorInfo>& inputs,
                                              const py::dict& given) {
  std::map<std::string, py::array> out;
  for (const auto& [key, value] : given) {
    const std::string name = py::str(key);
    const auto it = std::find_if(inputs.begin(), inputs.end(),
                                 [&](const TensorInfo& i) { return i.name == name; });
    if (it == inputs.end()) {
      std::string known;
      for (const TensorInfo& i : inputs) known += (known.empty() ? "'" : ", '") + i.name + "'";
      throw InferenceError("set input '" + name + "': the model has no such input (inputs: " +
                           known + ")");
    }
    if (!py::isinstance<py::array>(value)) {
      throw InferenceError("set input '" + name + "': expected a numpy array, got " +
                           py::str(py::type::of(value)).cast<std::string>());
    }
    py::array a = py::reinterpret_borrow<py::array>(value);
    check_array("set input", *it, a);
    out.emplace(name, std::move(a));
  }
  for (const TensorInfo& i : inputs) {
    if (out.count(i.name) == 0) {
      throw InferenceError("infer: input '" + i.name + "' (" + dtype_name(i.type) + " " +
                           shape_text(i.shape) + ") was not given");
    }
  }
  return out;
}

std::map<std::string, Tensor> input_tensors(const std::vector<TensorInfo>& inputs, const py::dict& given) {
  std::map<std::string, Tensor> out;
  for (const auto& [name, a] : input_arrays(inputs, given)) out.emplace(name, to_tensor(a));
  return out;
}

// ---- records -----------------------------------------------------------------

py::dict tensor_info(const TensorInfo& t) {
  py::dict d;
  d["name"] = t.name;
  d["dtype"] = dtype_of(t.type);
  d["shape"] = py::tuple(py::cast(t.shape));
  // An input's symbolic dimensions by name (None where the model fixes it);
  // the request takes arrays of other sizes in them.
  py::list names;
  for (std::size_t i = 0; i < t.shape.size(); ++i) {
    if (t.dim_names.empty() || t.dim_names[i].empty()) {
      names.append(py::none());
    } else {
      names.append(t.dim_names[i]);
    }
  }
  d["dim_names"] = py::tuple(names);
  return d;
}

py::list tensor_infos(const std::vector<TensorInfo>& ts) {
  py::list out;
  for (const TensorInfo& t : ts) out.append(tensor_info(t));
  return out;
}

std::string post_op_kind(PostOp::Kind k) {
  switch (k) {
    case PostOp::Kind::eltwise: return "eltwise";
    case PostOp::Kind::binary: return "binary";
    case PostOp::Kind::sum: return "sum";
  }
  return "?";
}

py::dict layer_record(const LayerInfo& l) {
  py::dict d;
  d["node"] = l.node;
  d["op"] = l.op;
  d["precision"] = l.precision;
  d["implementation"] = l.implementation;
  d["post_ops"] = l.post_ops;
  d["macs"] = l.macs;
  d["reorders"] = l.reorders;
  d["scalar_fallback"] = l.scalar_fallback;
  d["src_type"] = std::string(to_string(l.src_type));
  d["dst_type"] = std::string(to_string(l.dst_type));
  d["output_scales"] = l.output_scales;
  d["dst_zero_point"] = l.dst_zero_point ? py::cast(*l.dst_zero_point) : py::none();
  py::list ops;
  for (const PostOp& p : l.post_op_list) {
    py::dict o;
    o["kind"] = post_op_kind(p.kind);
    o["algorithm"] = p.algorithm;
    o["scale"] = p.scale;
    o["alpha"] = p.alpha;
    o["beta"] = p.beta;
    o["per_channel"] = p.per_channel;
    o["values"] = p.values;
    o["operand"] = p.operand;
    o["operand_type"] = std::string(to_string(p.operand_type));
    ops.append(o);
  }
  d["post_op_list"] = ops;
  d["fixed_point_bits"] = l.fixed_point_bits;
  d["fixed_point_shift"] = l.fixed_point_shift;
  d["fixed_point_error"] = l.fixed_point_error;
  d["integer"] = l.integer;
  return d;
}

py::list layer_records(const std::vector<LayerInfo>& layers) {
  py::list out;
  for (const LayerInfo& l : layers) out.append(layer_record(l));
  return out;
}

py::list refusal_records(const std::vector<FusionRefusal>& refusals) {
  py::list out;
  for (const FusionRefusal& r : refusals) {
    py::dict d;
    d["pass"] = r.pass;
    d["node"] = r.node;
    d["reason"] = r.reason;
    out.append(d);
  }
  return out;
}

// One TensorDiff as a flat record (what a DataFrame row holds), with the
// implementation and post-ops of the fused node that writes it; `sums`
// carries what merge_records() needs.
py::dict diff_record(const TensorDiff& t, const std::map<std::string, const LayerInfo*>& by_node) {
  py::dict d;
  d["name"] = t.name;
  d["node"] = t.node;
  d["graph_output"] = t.graph_output;
  d["elements"] = t.elements;
  d["quantized"] = t.quantized;
  d["max_abs"] = t.max_abs;
  d["max_lsb"] = t.max_lsb;
  d["lsb0"] = t.lsb[0];
  d["lsb1"] = t.lsb[1];
  d["lsb2"] = t.lsb[2];
  d["lsb_over2"] = t.lsb[3];
  d["equal_share"] = t.equal_share;
  d["cosine"] = t.cosine;
  d["snr_db"] = t.snr_db;
  d["isolated_elements"] = t.isolated.elements;
  d["isolated_max_abs"] = t.isolated.max_abs;
  d["isolated_max_lsb"] = t.isolated.max_lsb;
  d["isolated_lsb0"] = t.isolated.lsb[0];
  d["isolated_lsb1"] = t.isolated.lsb[1];
  d["isolated_lsb2"] = t.isolated.lsb[2];
  d["isolated_lsb_over2"] = t.isolated.lsb[3];
  d["isolated_equal_share"] = t.isolated.equal_share;
  const auto it = by_node.find(t.node);
  d["op"] = it != by_node.end() ? it->second->op : "";
  d["precision"] = it != by_node.end() ? it->second->precision : "";
  d["implementation"] = it != by_node.end() ? it->second->implementation : "";
  d["post_ops"] = it != by_node.end() ? it->second->post_ops : "";
  py::dict s;
  s["equal"] = t.sums.equal;
  s["isolated_equal"] = t.sums.isolated_equal;
  s["fused_ref"] = t.sums.fused_ref;
  s["fused_sq"] = t.sums.fused_sq;
  s["ref_sq"] = t.sums.ref_sq;
  s["diff_sq"] = t.sums.diff_sq;
  d["sums"] = s;
  return d;
}

py::list diff_records(const std::vector<TensorDiff>& tensors, const std::vector<LayerInfo>& layers) {
  std::map<std::string, const LayerInfo*> by_node;
  for (const LayerInfo& l : layers) by_node.emplace(l.node, &l);
  py::list out;
  for (const TensorDiff& t : tensors) out.append(diff_record(t, by_node));
  return out;
}

template <class T>
T field(const py::dict& d, const char* key) {
  if (!d.contains(key)) throw py::key_error(std::string("comparison record without '") + key + "'");
  return d[key].cast<T>();
}

TensorDiff diff_of(const py::dict& d) {
  TensorDiff t;
  t.name = field<std::string>(d, "name");
  t.node = field<std::string>(d, "node");
  t.graph_output = field<bool>(d, "graph_output");
  t.elements = field<std::int64_t>(d, "elements");
  t.quantized = field<bool>(d, "quantized");
  t.max_abs = field<double>(d, "max_abs");
  t.max_lsb = field<double>(d, "max_lsb");
  t.lsb[0] = field<std::int64_t>(d, "lsb0");
  t.lsb[1] = field<std::int64_t>(d, "lsb1");
  t.lsb[2] = field<std::int64_t>(d, "lsb2");
  t.lsb[3] = field<std::int64_t>(d, "lsb_over2");
  t.isolated.elements = field<std::int64_t>(d, "isolated_elements");
  t.isolated.max_abs = field<double>(d, "isolated_max_abs");
  t.isolated.max_lsb = field<double>(d, "isolated_max_lsb");
  t.isolated.lsb[0] = field<std::int64_t>(d, "isolated_lsb0");
  t.isolated.lsb[1] = field<std::int64_t>(d, "isolated_lsb1");
  t.isolated.lsb[2] = field<std::int64_t>(d, "isolated_lsb2");
  t.isolated.lsb[3] = field<std::int64_t>(d, "isolated_lsb_over2");
  t.equal_share = field<double>(d, "equal_share");
  t.isolated.equal_share = field<double>(d, "isolated_equal_share");
  t.cosine = field<double>(d, "cosine");
  t.snr_db = field<double>(d, "snr_db");
  const py::dict s = field<py::dict>(d, "sums");
  t.sums = {.equal = field<std::int64_t>(s, "equal"),
            .isolated_equal = field<std::int64_t>(s, "isolated_equal"),
            .fused_ref = field<double>(s, "fused_ref"),
            .fused_sq = field<double>(s, "fused_sq"),
            .ref_sq = field<double>(s, "ref_sq"),
            .diff_sq = field<double>(s, "diff_sq")};
  return t;
}

std::vector<TensorDiff> diffs_of(const py::list& records) {
  std::vector<TensorDiff> out;
  for (const py::handle& r : records) out.push_back(diff_of(r.cast<py::dict>()));
  return out;
}

LayerInfo layer_of(const py::dict& d) {
  LayerInfo l;
  l.node = field<std::string>(d, "node");
  l.op = field<std::string>(d, "op");
  l.precision = field<std::string>(d, "precision");
  l.implementation = field<std::string>(d, "implementation");
  l.post_ops = field<std::string>(d, "post_ops");
  l.integer = d.contains("integer") ? d["integer"].cast<std::string>() : std::string();
  return l;
}

// ---- compile options ------------------------------------------------------------

// CompileOptions::max_shapes from Python's int.
int checked_max_shapes(int max_shapes) {
  if (max_shapes < 1) {
    throw CompileError("compile: max_shapes must be >= 1, got " + std::to_string(max_shapes));
  }
  return max_shapes;
}

CompileOptions options_of(bool fuse, bool allow_residual_round_drop, int threads, bool integer_only,
                          double integer_eta, const std::string& log_level) {
  if (threads < 0) throw CompileError("compile: threads must be >= 0 (0: all), got " + std::to_string(threads));
  if (!(integer_eta > 0.0 && integer_eta < 1.0)) {
    throw CompileError("compile: integer_eta must lie in (0, 1), got " + std::to_string(integer_eta));
  }
  CompileOptions o;
  o.fuse = fuse;
  o.allow_residual_round_drop = allow_residual_round_drop;
  o.threads = threads;
  o.integer_only = integer_only;
  o.integer_eta = integer_eta;
  o.log_level = log_level;
  return o;
}

py::dict options_dict(const CompileOptions& o) {
  py::dict d;
  d["fuse"] = o.fuse;
  d["allow_residual_round_drop"] = o.allow_residual_round_drop;
  d["threads"] = o.threads;
  d["integer_only"] = o.integer_only;
  d["integer_eta"] = o.integer_eta;
  d["log_level"] = o.log_level;
  return d;
}

// ---- requests -------------------------------------------------------------------

// One InferRequest with the arrays it reads and writes; a lock keeps two
// Python threads from running it at once (each thread takes a request of its
// own, or CompiledModel.run's pool hands them out).
class Request {
 public:
  explicit Request(const CompiledModel& model)
      : request_(model.create_infer_request()), inputs_(model.inputs()), outputs_(model.outputs()) {}

  // Runs on `given` (name -> array, read in place) and returns name -> new array.
  py::dict run(const py::dict& given) {
    std::unique_lock lock(mutex_, std::try_to_lock);
    if (!lock.owns_lock()) {
      throw InferenceError(
          "infer: this request is running on another thread; use one request per thread "
          "(CompiledModel.create_request()) or CompiledModel.run, which takes a free one");
    }
    const std::map<std::string, py::array> in = input_arrays(inputs_, given);
    // The arrays' shapes first: the outputs follow them.
    switch_shapes(in);
    py::dict out;
    for (const TensorInfo& o : outputs_) {
      const Shape shape = request_.output(o.name).shape();
      py::array a(dtype_of(o.type), shape);
      request_.bind_output(o.name, o.type, shape, a.mutable_data());
      out[py::str(o.name)] = a;  // keeps the array alive past the inference
    }
    struct Unbind {
      Request& r;
      ~Unbind() {
        for (const TensorInfo& o : r.outputs_) r.request_.bind_output(o.name, o.type, {}, nullptr);
      }
    } unbind{*this};
    run_locked(in);
    return out;
  }

  void set_threads(int threads) { request_.set_threads(threads); }

  // Per-node times (microseconds) of `runs` inferences on `given`.
  py::list profile(const py::dict& given, int runs, const std::vector<LayerInfo>& layers) {
    std::unique_lock lock(mutex_);
    request_.set_profiling(true);
    struct Off {
      InferRequest& r;
      ~Off() { r.set_profiling(false); }
    } off{request_};
    const std::map<std::string, py::array> in = input_arrays(inputs_, given);
    switch_shapes(in);
    for (int i = 0; i < std::max(1, runs); ++i) run_locked(in);
    return node_rows(layers, request_.node_times_us(), request_.staged_reorder_times_us());
  }

  static py::list node_rows(const std::vector<LayerInfo>& layers,
                            const std::vector<std::vector<double>>& times,
                            const std::vector<std::vector<double>>& staged) {
    py::list out;
    double total = 0.0;
    const std::vector<report::NodeTime> rows = report::node_medians(layers, times, staged);
    for (const report::NodeTime& r : rows) total += r.median_us;
    for (const report::NodeTime& r : rows) {
      py::dict d;
      d["node"] = r.node();
      d["op"] = r.op();
      d["precision"] = r.layer->precision;
      d["implementation"] = r.implementation();
      d["median_us"] = r.median_us;
      d["share"] = total > 0 ? r.median_us / total : 0.0;
      d["gops"] = r.gops();
      d["reorders"] = r.staged_reorders ? 0 : r.layer->reorders;
      d["post_ops"] = r.staged_reorders ? std::string() : r.layer->post_ops;
      out.append(d);
    }
    return out;
  }

 private:
  // Binds the inputs in place (a read-only array is only read: the request
  // never writes its inputs), runs with the GIL released, unbinds them.
  // Input arrays of other shapes than the request's current ones switch it
  // (InferRequest::bind_input).
  void run_locked(const std::map<std::string, py::array>& in) {
    for (const auto& [name, a] : in) {
      request_.bind_input(name, *element_type(a.dtype()), shape_of(a), const_cast<void*>(a.data()));
    }
    struct Unbind {
      Request& r;
      ~Unbind() {
        for (const TensorInfo& i : r.inputs_) r.request_.bind_input(i.name, i.type, {}, nullptr);
      }
    } unbind{*this};
    py::gil_scoped_release release;
    request_.infer();
  }

  // The request at the arrays' shapes (the outputs follow them); nothing to
  // do when they are the last run's.
  void switch_shapes(const std::map<std::string, py::array>& in) {
    std::map<std::string, Shape> shapes;
    for (const auto& [name, a] : in) shapes.emplace(name, shape_of(a));
    if (shapes == last_shapes_) return;
    {
      py::gil_scoped_release release;  // a first use compiles the shape
      request_.set_input_shapes(shapes);
    }
    last_shapes_ = std::move(shapes);
  }

  std::mutex mutex_;
  InferRequest request_;
  std::vector<TensorInfo> inputs_, outputs_;
  std::map<std::string, Shape> last_shapes_;  // of the last switch_shapes
};

// A compiled model with a pool of requests for run() from any thread.
class Compiled {
 public:
  Compiled(CompiledModel model, CompileOptions options, std::optional<Model> source = {})
      : model_(std::move(model)), options_(std::move(options)), source_(std::move(source)) {}

  const CompiledModel& model() const { return model_; }
  const std::optional<Model>& source() const { return source_; }
  const CompileOptions& options() const { return options_; }

  py::dict run(const py::dict& given) {
    std::unique_ptr<Request> r = take();
    struct Give {
      Compiled& c;
      std::unique_ptr<Request>& r;
      ~Give() { c.give(std::move(r)); }
    } give{*this, r};
    return r->run(given);
  }

 private:
  std::unique_ptr<Request> take() {
    {
      std::lock_guard lock(mutex_);
      if (!free_.empty()) {
        std::unique_ptr<Request> r = std::move(free_.back());
        free_.pop_back();
        return r;
      }
    }
    return std::make_unique<Request>(model_);
  }
  void give(std::unique_ptr<Request> r) {
    std::lock_guard lock(mutex_);
    free_.push_back(std::move(r));
  }

  CompiledModel model_;
  CompileOptions options_;
  std::optional<Model> source_;
  std::mutex mutex_;
  std::vector<std::unique_ptr<Request>> free_;
};

std::string dump_text(const CompiledModel& m) {
  std::ostringstream out;
  for (const LayerInfo& l : m.layers()) {
    out << l.node << "  " << l.op << "  " << l.precision << "  " << l.implementation;
    if (!l.post_ops.empty()) out << "  [" << l.post_ops << "]";
    out << '\n';
  }
  if (!m.fusion_log().empty()) out << "\nfusion log:\n";
  for (const std::string& line : m.fusion_log()) out << "  " << line << '\n';
  return out.str();
}

// The exceptions: qfuse.Error and its subclasses, with the library's messages.
void bind_errors(py::module_& m) {
  static py::exception<Error> error(m, "Error", PyExc_RuntimeError);
  static py::exception<GraphError> graph_error(m, "GraphError", error.ptr());
  static py::exception<UnsupportedError> unsupported_error(m, "UnsupportedError", error.ptr());
  static py::exception<CompileError> compile_error(m, "CompileError", error.ptr());
  static py::exception<InferenceError> inference_error(m, "InferenceError", error.ptr());
  static py::exception<IoError> io_error(m, "IoError", error.ptr());
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const GraphError& e) {
      graph_error(e.what());
    } catch (const UnsupportedError& e) {
      unsupported_error(e.what());
    } catch (const CompileError& e) {
      compile_error(e.what());
    } catch (const InferenceError& e) {
      inference_error(e.what());
    } catch (const IoError& e) {
      io_error(e.what());
    } catch (const Error& e) {
      error(e.what());
    }
  });
}

void bind_model(py::module_& m) {
  py::class_<Model>(m, "Model", py::dynamic_attr(),
                    "An imported model (an immutable graph); compile() it to run it.")
      .def_property_readonly("inputs", [](const Model& x) { return tensor_infos(x.inputs()); },
                             "name, dtype and shape of each input")
      .def_property_readonly("outputs", [](const Model& x) { return tensor_infos(x.outputs()); },
                             "name, dtype and shape of each output")
      .def_property_readonly("node_count", &Model::node_count);
}

// import_onnx, onnx_inputs and import_openvino.
void bind_import(py::module_& m) {
  m.def(
      "import_openvino",
      [](const std::string& xml_path, const std::map<std::string, Shape>& shapes,
         const std::string& bin_path) {
        const OpenVinoOptions o{.input_shapes = shapes, .bin_path = bin_path};
        py::gil_scoped_release release;
        return import_openvino(xml_path, o);
      },
      py::arg("xml_path"), py::arg("shapes") = std::map<std::string, Shape>{},
      py::arg("bin_path") = "");

  m.def(
      "import_onnx",
      [](const py::object& source, const std::map<std::string, Shape>& shapes,
         const std::string& external_data_dir) {
        const OnnxOptions o{.input_shapes = shapes, .external_data_dir = external_data_dir};
        if (py::isinstance<py::bytes>(source)) {
          const std::string bytes = source.cast<std::string>();
          py::gil_scoped_release release;
          return import_onnx_bytes(bytes, o, "bytes");
        }
        const std::string path = py::str(source);
        py::gil_scoped_release release;
        return import_onnx(path, o);
      },
      py::arg("source"), py::arg("shapes") = std::map<std::string, Shape>{},
      py::arg("external_data_dir") = "");

  m.def("onnx_inputs", [](const std::string& path) {
    py::list out;
    for (const OnnxInput& i : list_onnx_inputs(path)) {
      py::dict d;
      d["name"] = i.name;
      d["dims"] = i.dims;
      d["dim_params"] = i.dim_params;
      d["type"] = i.type;
      out.append(d);
    }
    return out;
  });
}

void bind_request(py::module_& m) {
  py::class_<Request>(m, "Request",
                      "One inference request: its buffers and stream. Use one per thread.")
      .def("run", &Request::run, py::arg("inputs"),
           "Runs one inference: inputs by name (C-contiguous numpy arrays of the input's dtype "
           "and shape, read in place); returns the outputs by name as new arrays. The GIL is "
           "released while it runs.")
      .def("set_threads", &Request::set_threads, py::arg("threads"),
           "OpenMP threads this request's primitives use, at most the model's (0: all).");
}

// CompiledModel (the Compiled wrapper): its tensors, options, layers and logs, run, and the
// measurements (memory, compile_times, _profile, _bench).
void bind_compiled_model(py::module_& m) {
  py::class_<Compiled>(m, "CompiledModel", py::dynamic_attr())
      .def_property_readonly("_model", [](const Compiled& c) { return c.source(); },
                             "the Model it was compiled from (None for a Comparison's)")
      .def_property_readonly("inputs", [](const Compiled& c) { return tensor_infos(c.model().inputs()); })
      .def_property_readonly("outputs", [](const Compiled& c) { return tensor_infos(c.model().outputs()); })
      .def_property_readonly("options", [](const Compiled& c) { return options_dict(c.options()); })
      .def("create_request", [](const Compiled& c) { return std::make_unique<Request>(c.model()); })
      .def("run", &Compiled::run, py::arg("inputs"))
      .def("_layer_list", [](const Compiled& c) { return layer_records(c.model().layers()); })
      .def("_refusal_list", [](const Compiled& c) { return refusal_records(c.model().refusals()); })
      .def_property_readonly("fusion_log", [](const Compiled& c) { return c.model().fusion_log(); })
      .def("dump_text", [](const Compiled& c) { return dump_text(c.model()); })
      .def("memory",
           [](const Compiled& c) {
             const MemoryInfo mi = c.model().memory();
             py::dict d;
             d["arena_bytes"] = mi.arena_bytes;
             d["unshared_bytes"] = mi.unshared_bytes;
             d["views"] = mi.views;
             d["in_place"] = mi.in_place;
             return d;
           })
      .def("shapes",
           [](const Compiled& c) {
             py::list out;
             for (const ShapeInfo& s : c.model().shapes()) {
               py::dict d, inputs;
               for (const auto& [name, shape] : s.inputs) inputs[py::str(name)] = py::tuple(py::cast(shape));
               d["inputs"] = inputs;
               d["weight_bytes"] = s.weight_bytes;
               d["arena_bytes"] = s.arena_bytes;
               d["compile_ms"] = s.compile_ms;
               out.append(d);
             }
             return out;
           })
      .def("compile_times",
           [](const Compiled& c) {
             const CompileTimes t = c.model().compile_times();
             py::dict d;
             d["shapes_ms"] = t.shapes_ms;
             d["passes_ms"] = t.passes_ms;
             d["composer_ms"] = t.composer_ms;
             d["planning_ms"] = t.planning_ms;
             d["primitives_ms"] = t.primitives_ms;
             d["cache"] = t.cache;
             d["cache_ms"] = t.cache_ms;
             return d;
           })
      .def(
          "_profile",
          [](const Compiled& c, const py::dict& inputs, int runs) {
            Request r(c.model());
            return r.profile(inputs, runs, c.model().layers());
          },
          py::arg("inputs"), py::arg("runs") = 20)
      .def(
          "_bench",
          [](const Compiled& c, const py::dict& inputs, double seconds, int requests,
             int threads_per_request, bool per_layer, int min_inferences) {
            const std::map<std::string, Tensor> given = input_tensors(c.model().inputs(), inputs);
            report::LatencyRun run;
            {
              py::gil_scoped_release release;
              run = report::measure_latency(
                  c.model(),
                  [&given](InferRequest& r) {
                    for (const auto& [name, t] : given) r.set_input(name, t);
                  },
                  {.requests = requests, .threads_per_request = threads_per_request,
                   .seconds = seconds, .min_inferences = min_inferences, .per_layer = per_layer});
            }
            const std::vector<double>& l = run.latencies_ms;
            py::dict d;
            d["requests"] = requests;
            d["threads_per_request"] = threads_per_request;
            d["inferences"] = l.size();
            d["seconds"] = run.seconds;
            d["first_inference_ms"] = run.first_ms;
            d["latency_ms_median"] = report::median(l);
            d["latency_ms_p90"] = report::percentile(l, 0.9);
            d["latency_ms_p99"] = report::percentile(l, 0.99);
            d["latency_ms_min"] = report::percentile(l, 0.0);
            d["latency_ms_max"] = report::percentile(l, 1.0);
            d["throughput_per_s"] = run.throughput();
            d["peak_rss_mib"] = report::peak_rss_mib();
            const std::vector<LayerInfo> layers = c.model().layers();
            d["layers"] = per_layer ? Request::node_rows(layers, run.node_times_us,
                                                         run.staged_reorder_times_us)
                                    : py::list();
            return d;
          },
          py::arg("inputs"), py::arg("seconds"), py::arg("requests"), py::arg("threads_per_request"),
          py::arg("per_layer"), py::arg("min_inferences"));
}

void bind_compile(py::module_& m) {
  m.def(
      "compile",
      [](const Model& model, bool fuse, bool allow_residual_round_drop, int threads, bool integer_only,
         double integer_eta, const std::string& log_level, int max_shapes) {
        CompileOptions o =
            options_of(fuse, allow_residual_round_drop, threads, integer_only, integer_eta, log_level);
        o.max_shapes = checked_max_shapes(max_shapes);
        py::gil_scoped_release release;
        return std::make_unique<Compiled>(compile(model, o), o, model);
      },
      py::arg("model"), py::arg("fuse") = true, py::arg("allow_residual_round_drop") = false,
      py::arg("threads") = 0, py::arg("integer_only") = false,
      py::arg("integer_eta") = 1.0 / 1048576.0, py::arg("log_level") = "",
      py::arg("max_shapes") = CompileOptions{}.max_shapes);
  // A model file imported and compiled in one call, through the compiled-model
  // cache in `cache_dir` (or QFUSE_CACHE_DIR); the result has no source Model.
  m.def(
      "compile_file",
      [](const std::string& path, const std::map<std::string, Shape>& shapes, bool fuse,
         bool allow_residual_round_drop, int threads, bool integer_only, double integer_eta,
         const std::string& log_level, const std::string& cache_dir, int max_shapes) {
        CompileOptions o =
            options_of(fuse, allow_residual_round_drop, threads, integer_only, integer_eta, log_level);
        o.cache_dir = cache_dir;
        o.max_shapes = checked_max_shapes(max_shapes);
        py::gil_scoped_release release;
        CompiledModel c = path.ends_with(".xml")
                              ? compile_openvino(path, {.input_shapes = shapes}, o)
                              : compile_onnx(path, {.input_shapes = shapes}, o);
        return std::make_unique<Compiled>(std::move(c), o);
      },
      py::arg("path"), py::arg("shapes"), py::arg("fuse"), py::arg("allow_residual_round_drop"),
      py::arg("threads"), py::arg("integer_only"), py::arg("integer_eta"), py::arg("log_level"),
      py::arg("cache_dir"), py::arg("max_shapes"));
}

void bind_comparison(py::module_& m) {
  py::class_<Comparison>(m, "Comparison")
      .def(py::init([](const Model& model, bool allow_residual_round_drop, int threads,
                       bool integer_only, double integer_eta, const std::string& log_level) {
             const CompileOptions o = options_of(true, allow_residual_round_drop, threads,
                                                 integer_only, integer_eta, log_level);
             py::gil_scoped_release release;
             return std::make_unique<Comparison>(model, o);
           }),
           py::arg("model"), py::arg("allow_residual_round_drop") = false, py::arg("threads") = 0,
           py::arg("integer_only") = false, py::arg("integer_eta") = 1.0 / 1048576.0,
           py::arg("log_level") = "")
      .def(
          "run",
          [](Comparison& c, const py::dict& inputs) {
            const std::map<std::string, Tensor> t = input_tensors(c.fused().inputs(), inputs);
            py::gil_scoped_release release;
            c.run(t);
          },
          py::arg("inputs"))
      .def(
          "run_against",
          [](Comparison& c, const py::dict& inputs, const py::dict& reference) {
            const std::map<std::string, Tensor> t = input_tensors(c.fused().inputs(), inputs);
            std::map<std::string, Tensor> ref;
            for (const auto& [k, v] : reference) {
              ref.emplace(py::str(k), to_tensor(py::array::ensure(v)));
            }
            py::gil_scoped_release release;
            return c.run_against(t, ref);
          },
          py::arg("inputs"), py::arg("reference"))
      .def("records", [](const Comparison& c) { return diff_records(c.tensors(), c.fused().layers()); })
      .def("fused_layers", [](const Comparison& c) { return layer_records(c.fused().layers()); })
      .def("clear", &Comparison::clear)
      .def("fused",
           [](const Comparison& c) { return std::make_unique<Compiled>(c.fused(), CompileOptions{}); })
      .def("unfused", [](const Comparison& c) {
        CompileOptions o;
        o.fuse = false;
        return std::make_unique<Compiled>(c.unfused(), o);
      });
}

// merge_records, report_html and report_table: the comparison records and their reports.
void bind_reports(py::module_& m) {
  m.def(
      "merge_records",
      [](const py::list& into, const py::list& more) {
        std::vector<TensorDiff> a = diffs_of(into);
        merge(a, diffs_of(more));
        std::map<std::string, py::dict> rows;  // keep op / implementation / post-ops
        for (const py::handle& r : into) rows.emplace(r["name"].cast<std::string>(), r.cast<py::dict>());
        for (const py::handle& r : more) rows.emplace(r["name"].cast<std::string>(), r.cast<py::dict>());
        py::list out;
        for (const TensorDiff& t : a) {
          const py::dict& from = rows.at(t.name);
          std::map<std::string, const LayerInfo*> none;
          py::dict d = diff_record(t, none);
          for (const char* k : {"op", "precision", "implementation", "post_ops"}) d[k] = from[k];
          out.append(d);
        }
        return out;
      },
      py::arg("into"), py::arg("more"),
      "The comparison records of two runs over different data merged (counts and sums add).");

  m.def(
      "report_html",
      [](const py::list& records, const py::list& layers, const std::string& model,
         const std::string& inputs) {
        std::vector<LayerInfo> ls;
        for (const py::handle& l : layers) ls.push_back(layer_of(l.cast<py::dict>()));
        std::ostringstream out;
        report::write_compare_html(out, model, inputs, diffs_of(records), ls);
        return out.str();
      },
      py::arg("records"), py::arg("layers"), py::arg("model"), py::arg("inputs"));
  m.def(
      "report_table",
      [](const py::list& records) {
        std::ostringstream out;
        report::print_compare_table(out, diffs_of(records));
        return out.str();
      },
      py::arg("records"));
}

}  // namespace
}  // namespace qfuse::python

PYBIND11_MODULE(_qfuse, m) {
  using namespace qfuse::python;
  m.doc() = "qfuse's C++ API (import qfuse rather than this module)";
  bind_errors(m);
  bind_model(m);
  bind_import(m);
  bind_request(m);
  bind_compiled_model(m);
  bind_compile(m);
  bind_comparison(m);
  bind_reports(m);
  m.attr("__version__") = QFUSE_PYTHON_VERSION;
}
