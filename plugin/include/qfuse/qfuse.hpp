#pragma once
// qfuse public API: compile a graph into an immutable model, then run it
// through inference requests (one per host thread).
//
//   qfuse::Model m = ...;                        // qfuse::ModelBuilder or qfuse/onnx.hpp
//   qfuse::CompiledModel model = qfuse::compile(m, {.fuse = false});
//   qfuse::InferRequest request = model.create_infer_request();
//   request.set_input("x", x);
//   request.infer();
//   const qfuse::Tensor& y = request.output("y");
//
// Rounding: every rounding step (Round, FakeQuantize, conversion to an integer
// type) rounds half to even, as ONNX QuantizeLinear and oneDNN do.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "qfuse/error.hpp"
#include "qfuse/export.hpp"
#include "qfuse/model.hpp"
#include "qfuse/tensor.hpp"

namespace qfuse {

struct CompileOptions {
  // Fuse quantized layers into int8 primitives (see graph/passes/passes.hpp).
  // Off: every node runs alone in f32 by its definition (the reference).
  bool fuse = true;
  // Fused mode: attention's scores matmul, Softmax and probabilities-times-
  // values matmul run as one op (qfuse's kernel, a few query rows at a time;
  // int8 with the three ops' bits, f32 within float rounding of them). Off:
  // three ops, for comparison.
  bool fuse_attention = true;
  // Numerics-changing rewrite: drop the round inside FQ -> Sum -> FQ blocks.
  bool allow_residual_round_drop = false;
  // OpenMP threads an inference may use at most: oneDNN sizes each
  // primitive's work split and scratchpad for this many. 0: the runtime's
  // default at compile (omp_get_max_threads()).
  int threads = 0;
  // Integer-only execution: each fused layer writes s32 accumulators and
  // applies its output scales, offsets, clamps and residual add in integer
  // arithmetic (fixed-point multipliers M0 * 2^-n within the relative bound
  // integer_eta, rounding right shifts, half to even), and int8 average
  // pools divide by a fixed-point 1/(K1*K2). What it cannot express (e.g. a
  // sigmoid post-op) keeps its float scales; LayerInfo::integer says which.
  bool integer_only = false;
  // The fixed-point multipliers' relative error bound (NEMO's eta; also what
  // LayerInfo::fixed_point_* report). 2^-20 keeps |acc * M| <= 2^8 within
  // 2^-12 of a code of the exact product, and M0 within 21 bits (the
  // pre-quantized export stores M0 as a float: below 2^24 it is exact).
  double integer_eta = 1.0 / 1048576.0;
  // spdlog level for qfuse's log ("trace", "debug", "info", "warn", "error",
  // "off"); empty keeps the current one (QFUSE_LOG_LEVEL, or warn). The level
  // is process-wide, like spdlog's default logger.
  std::string log_level;
  // A directory for compiled models (the compiled-model cache), used by the
  // calls that compile a model file: compile_onnx (qfuse/onnx.hpp) and
  // compile_openvino (qfuse/openvino.hpp). The first compile of a file
  // stores the model as its passes left it; later ones with the same file
  // bytes, options, qfuse, oneDNN and CPU map that entry and skip the
  // import and passes. Empty: the QFUSE_CACHE_DIR environment variable, else
  // no cache. A directory that cannot be written is a warning.
  std::string cache_dir;
  // A model with symbolic input dimensions (TensorInfo::dim_names) serves
  // other shapes than the one it was compiled at: each new shape is compiled
  // on first use from the graph the passes left, the weights shared where the
  // layers take the same layout. It keeps at most this many such shapes
  // besides its own, the one asked for longest ago going first (and each
  // request keeps its buffers for as many, the least recently run going
  // first). A request holding a shape the model let go keeps it alive.
  int max_shapes = 8;
};

// One post-op of a fused layer, applied in order after the output scales:
//   eltwise: y = scale * algorithm(y, alpha, beta)   (oneDNN's eltwise algorithms:
//            "relu", "linear", "clip", "round", "logistic", "tanh", "gelu_erf", ...)
//   binary:  y = algorithm(y, operand)               ("add", "mul", "max", "min", "sub", "div")
//   sum:     y = y + scale * residual                (the residual read in operand_type)
struct PostOp {
  enum class Kind : std::uint8_t { eltwise, binary, sum };
  Kind kind = Kind::eltwise;
  std::string algorithm;
  float scale = 1.0f;
  float alpha = 0.0f;
  float beta = 0.0f;
  // binary: one operand value per output channel (else one for the tensor)
  bool per_channel = false;
  // binary with a constant operand: its values; empty when read at execution
  std::vector<float> values;
  // binary / sum reading a tensor at execution: the value's name, and its type
  std::string operand;
  ElementType operand_type = ElementType::f32;
};

struct LayerInfo {
  std::string node;            // node name
  std::string op;              // operator
  std::string implementation;  // oneDNN implementation, or "reference"
  std::string post_ops;        // fused layers: output scales and post-op list, as text
  // "int8" (reads and writes u8/s8), "f32", or "quantize" / "dequantize"
  // for the conversions between the two.
  std::string precision;
  // Multiply-adds per inference of a convolution / deconvolution /
  // fully-connected / matmul layer; 0 for other ops.
  std::int64_t macs = 0;
  // Reorders per inference: 1 for a Convert that only changes layout or
  // type, plus the layouts an op stages in and out of its primitive.
  int reorders = 0;
  // qfuse's scalar fallback loop ("reference") rather than a vectorized,
  // multithreaded kernel.
  bool scalar_fallback = false;
  // The same as data. Fused int8 layers: y = accumulator * output_scales[c]
  // (one scale, or one per output channel), then post_op_list in order, then
  // + dst_zero_point, rounded half to even and saturated to dst_type.
  // f32 layers that absorbed elementwise ops: post_op_list alone.
  std::vector<float> output_scales;
  std::optional<std::int32_t> dst_zero_point;
  std::vector<PostOp> post_op_list;
  ElementType src_type = ElementType::f32;  // the node's first input
  ElementType dst_type = ElementType::f32;  // its output
  // Fused int8 layers: the output scales' fixed-point form M0 * 2^-n for
  // integer-only requantization (the widest M0 over channels, the largest
  // shift, and the largest relative error |M0 2^-n - M| / |M| reached; the
  // width follows from the bound CompileOptions::integer_eta, NEMO's
  // d >= log2(1 / (M eta))).
  // 0 bits: no fixed-point form (not a fused layer, or a scale beyond 2^31).
  int fixed_point_bits = 0;
  int fixed_point_shift = 0;
  double fixed_point_error = 0.0;
  // Integer-only mode (CompileOptions::integer_only): "integer" when the
  // layer runs in integer arithmetic after its accumulators (fused layers,
  // int8 average pools), else "float scales: <why>" for a fused layer or
  // pool that could not; empty in the float-scale mode and for other ops.
  std::string integer;
};

// Where a request keeps its tensors: intermediate values share one arena by
// liveness (graph inputs have their own buffers).
struct MemoryInfo {
  std::size_t arena_bytes = 0;
  std::size_t unshared_bytes = 0;  // the same tensors, one buffer each
  int views = 0;                   // Reshape / Flatten outputs on their input's bytes
  int in_place = 0;                // ops writing over an input nothing reads after them
};

// Where compile() spent its time, wall clock in milliseconds.
struct CompileTimes {
  double shapes_ms = 0.0;      // shape inference and checks of the imported graph
  double passes_ms = 0.0;      // the fusion passes, with the backend's check of each candidate
  double composer_ms = 0.0;    // composing post-op chains (part of passes and primitives)
  double planning_ms = 0.0;    // f32 post-op absorption, layouts, the memory plan
  double primitives_ms = 0.0;  // every executable op: oneDNN primitives, weight reorders
  // The process's peak resident memory (MiB, VmHWM) at the end of each
  // phase; 0 where the platform does not say.
  double shapes_peak_rss_mib = 0.0;
  double passes_peak_rss_mib = 0.0;
  double planning_peak_rss_mib = 0.0;
  double primitives_peak_rss_mib = 0.0;
  // The compiled-model cache (CompileOptions::cache_dir): empty when none
  // was used, else "hit <entry> (<n> weight tensors used in place, <m>
  // reordered)", "miss, stored <entry>" or "miss, not stored (<why>)"; and
  // the milliseconds spent hashing the model's files and checking, mapping or
  // writing the entry. A hit maps the entry: the int8 layers' weights are
  // used from it in their primitives' layouts, without a copy.
  std::string cache;
  double cache_ms = 0.0;
};

// A shape a model with symbolic dimensions was compiled at (CompiledModel::shapes).
struct ShapeInfo {
  std::map<std::string, Shape> inputs;  // every input's shape
  // The int8 weights this shape's layers hold in layouts of their own: 0
  // where each layer reads the weights of the shape the model was first
  // compiled at (which holds them all), or those of a mapped cache entry.
  std::size_t weight_bytes = 0;
  std::size_t arena_bytes = 0;  // a request's intermediate values at this shape
  double compile_ms = 0.0;      // compiling this shape, all phases
};

// Why a fusion pass left a candidate node alone (one reason per refusal).
struct FusionRefusal {
  std::string pass;
  std::string node;
  std::string reason;
};

class InferRequest;

class QFUSE_API CompiledModel {
 public:
  CompiledModel();
  ~CompiledModel();
  CompiledModel(const CompiledModel&);
  CompiledModel& operator=(const CompiledModel&);
  CompiledModel(CompiledModel&&) noexcept;
  CompiledModel& operator=(CompiledModel&&) noexcept;

  InferRequest create_infer_request() const;

  // Symbolic input dimensions: the model at other input shapes, compiled on
  // first use and kept (CompileOptions::max_shapes); the same handle for a
  // shape seen before. `inputs` names some or all inputs; one not named keeps
  // its shape, except dimensions sharing a name with a named input's. Throws
  // GraphError naming the input and the dimension that does not fit (a fixed
  // one, a rank, two sizes for one name), UnsupportedError when the graph
  // fixed a shape at import that these inputs would change (naming the node).
  CompiledModel at_shapes(const std::map<std::string, Shape>& inputs) const;
  // The shapes compiled and kept: this model's first, then the others, the
  // one asked for last first (by at_shapes, or by a request at a shape it
  // holds no buffers for).
  std::vector<ShapeInfo> shapes() const;

  MemoryInfo memory() const;
  CompileTimes compile_times() const;
  std::vector<std::string> input_names() const;
  std::vector<std::string> output_names() const;
  // Type and shape of each input / output, in the model's order.
  std::vector<TensorInfo> inputs() const;
  std::vector<TensorInfo> outputs() const;
  // One entry per executed node, in execution order.
  std::vector<LayerInfo> layers() const;
  // How many executable nodes there are, and how many of them are int8
  // layers: the counts of layers() without a LayerInfo made for each.
  struct LayerCounts {
    std::size_t executable_nodes = 0;
    std::size_t int8_layers = 0;
  };
  LayerCounts layer_counts() const;
  // One line per rewrite the fusion passes made, then one per refusal that
  // still holds in the compiled graph ("<pass>: refused '<node>': <reason>").
  const std::vector<std::string>& fusion_log() const;
  // The refusals alone, as data.
  const std::vector<FusionRefusal>& refusals() const;

  // Internal (qfuse's own code reaches it through detail::ImplAccess).
  struct Impl;
  struct ShapeCache;
  explicit CompiledModel(std::shared_ptr<const Impl> impl);
  CompiledModel(std::shared_ptr<const Impl> impl, std::shared_ptr<ShapeCache> shapes);

 private:
  friend struct detail::ImplAccess;
  const Impl& impl() const;
  std::shared_ptr<const Impl> impl_;
  // Symbolic dimensions: the shapes compiled, shared by every handle and
  // request made from the first one (null: the shapes are fixed).
  std::shared_ptr<ShapeCache> shapes_;
};

// Validates, (optionally) fuses and compiles a model. Throws GraphError for a
// malformed model and CompileError when a primitive cannot be created.
QFUSE_API CompiledModel compile(const Model& model, const CompileOptions& options = {});

// Owns the buffers and stream of one inference; use one per host thread.
class QFUSE_API InferRequest {
 public:
  ~InferRequest();
  InferRequest(InferRequest&&) noexcept;
  InferRequest& operator=(InferRequest&&) noexcept;

  // Copies `tensor` into the input buffer; the type must match, and the
  // shape too except in the input's symbolic dimensions (TensorInfo::
  // dim_names). At another shape the tensor is kept, and the next infer()
  // runs the model at the shapes of the inputs set (CompiledModel::
  // at_shapes: compiled on first use), with a buffer set of its own; an
  // InferenceError names the input and the dimension that does not fit.
  void set_input(const std::string& name, const Tensor& tensor);
  // Switches the request to these input shapes now (as at_shapes), so that
  // input() gives buffers of them to fill in place.
  void set_input_shapes(const std::map<std::string, Shape>& inputs);
  // The input buffer itself, at the request's current shapes.
  Tensor& input(const std::string& name);
  const Tensor& output(const std::string& name) const;

  // Zero-copy binding of the host's own buffers: `data` holds the tensor's
  // elements densely in C order, of exactly the input's / output's type and
  // shape (else InferenceError), and stays valid while the request runs.
  // An input is then read from `data` directly (input() and set_input() work
  // on it). An output is written there directly when its buffer is its own
  // (returns true); when the plan shares it (a Reshape view of another value,
  // an op writing over its input, a constant output), each inference copies
  // it there at the end (returns false). nullptr unbinds. An input bound at
  // another shape switches the request at the next infer(), as set_input;
  // bindings belong to the shapes they were made at.
  void bind_input(const std::string& name, ElementType type, const Shape& shape, void* data);
  bool bind_output(const std::string& name, ElementType type, const Shape& shape, void* data);
  // OpenMP threads used by this request's primitives, at most the model's
  // CompileOptions::threads (more are capped, with a warning); 0 = all of them.
  void set_threads(int threads);

  void infer();

  // Per-node timing: while on, each inference records how long each executed
  // node took (the order of CompiledModel::layers()), in microseconds. The
  // nodes run exactly as without it; switching it on clears what was kept.
  void set_profiling(bool on);
  const std::vector<std::vector<double>>& node_times_us() const;
  // The part of each of those times spent in reorders the node stages around
  // its own work (LayerInfo::reorders; a plain neighbour's layout, a residual
  // copied into the destination); 0 where it has none.
  const std::vector<std::vector<double>>& staged_reorder_times_us() const;

  // Called after each executed node with every value it wrote, by name: what
  // qfuse compare reads intermediate tensors through. The tensor is valid
  // during the call only (intermediates share buffers). The nodes run exactly
  // as without it; an empty function switches it off.
  using ValueObserver = std::function<void(const std::string& name, const Tensor& value)>;
  void set_value_observer(ValueObserver observer);

  struct Impl;

 private:
  friend class CompiledModel;
  friend struct InferRequestAccess;  // internal hooks
  explicit InferRequest(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Sets spdlog's level from QFUSE_LOG_LEVEL (trace, debug, info, warn, error,
// off) once; compile() and the ONNX import call it.
QFUSE_API void init_logging();

}  // namespace qfuse
