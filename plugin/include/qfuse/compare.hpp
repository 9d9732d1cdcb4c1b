#pragma once
// Fused against unfused, tensor by tensor: what fusing costs and where.
//
//   qfuse::Comparison cmp(model);              // compiles both ways
//   cmp.run({{"input", x}});                   // once per input set; figures accumulate
//   for (const qfuse::TensorDiff& d : cmp.tensors()) ...
//
// The tensors compared are those that exist in both compiled graphs: every
// graph output, and every activation a fused int8 layer writes (stored as
// u8/s8 codes of a FakeQuantize of the model; compared as the real values
// those codes stand for, against that FakeQuantize's output in the unfused
// graph), and any other value both graphs compute under the same name.
//
// Each figure comes twice. The propagated one (TensorDiff's own fields) is
// what the fused graph computes end to end against the reference: a layer's
// difference there includes what it inherits from earlier layers (in a deep
// network one near-tie flip early on spreads). The isolated one
// (TensorDiff::isolated) comes from a second fused inference in which every
// compared tensor, once its difference is measured, is replaced by the
// reference's (as codes again where the fused graph holds codes): each fused
// layer then reads the reference's own inputs, so its isolated difference is
// the layer's own error alone. Where a layer's inputs equal the reference's
// in the end-to-end run too (the first layer, when the inputs quantize
// alike), its two figures are the same; a layer that computes exactly what
// the reference does has no isolated difference however much it inherits.

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "qfuse/export.hpp"
#include "qfuse/qfuse.hpp"

namespace qfuse {

// A tensor's difference when the fused layer that writes it reads the
// reference's values (see above); the same measures as TensorDiff's.
struct IsolatedDiff {
  std::int64_t elements = 0;  // over all runs
  double max_abs = 0.0;
  std::int64_t lsb[4] = {0, 0, 0, 0};  // on the grid: 0, 1, 2, > 2 quanta
  double max_lsb = 0.0;
  double equal_share = 0.0;
};

// The counts and sums a TensorDiff's shares, cosine and SNR are made of, so
// that differences measured apart (other requests, processes or machines)
// merge exactly: merge().
struct DiffSums {
  std::int64_t equal = 0;           // propagated elements equal
  std::int64_t isolated_equal = 0;  // isolated elements equal
  double fused_ref = 0.0;           // sum fused * unfused
  double fused_sq = 0.0;            // sum fused^2
  double ref_sq = 0.0;              // sum unfused^2
  double diff_sq = 0.0;             // sum (fused - unfused)^2
};

struct TensorDiff {
  std::string name;       // the value in the model (the unfused graph)
  std::string node;       // the fused node that writes it
  bool graph_output = false;
  std::int64_t elements = 0;  // over all runs
  double max_abs = 0.0;
  // On a FakeQuantize's grid: differences in its quanta, rounded: 0, 1, 2, > 2.
  bool quantized = false;
  std::int64_t lsb[4] = {0, 0, 0, 0};
  double max_lsb = 0.0;
  double equal_share = 0.0;  // elements equal: the same code on a grid, else exactly
  double cosine = 1.0;       // of fused and unfused, as vectors
  // 10 log10(sum unfused^2 / sum (fused - unfused)^2); infinity when equal.
  double snr_db = std::numeric_limits<double>::infinity();
  // The layer's own error: the fields above, with every earlier compared
  // tensor replaced by the reference's.
  IsolatedDiff isolated;
  DiffSums sums;
};

class QFUSE_API Comparison {
 public:
  // Compiles `model` unfused and with `fused_options` (fuse forced on; e.g.
  // allow_residual_round_drop to see what that option costs).
  explicit Comparison(const Model& model, const CompileOptions& fused_options = {});
  // Compiles `model` with `options` and with `reference` as given (e.g. the
  // integer-only mode against the float-scale fused one). Values both graphs
  // hold as 8-bit codes compare in codes: one LSB is one code.
  Comparison(const Model& model, const CompileOptions& options, const CompileOptions& reference);
  // The same from two compilations of one model, already made (from its
  // files, through the compiled-model cache): `fused`, and `unfused` as the
  // reference.
  Comparison(CompiledModel fused, CompiledModel unfused);
  ~Comparison();
  Comparison(Comparison&&) noexcept;
  Comparison& operator=(Comparison&&) noexcept;

  const CompiledModel& fused() const;
  const CompiledModel& unfused() const;
  // Runs both on the same inputs (by input name) and adds the differences:
  // the reference once, the fused graph twice (propagated, then isolated).
  void run(const std::map<std::string, Tensor>& inputs);
  // Compares the first compiled model (`options`, or `fused_options`) with
  // tensors computed elsewhere on the same inputs, ONNX Runtime's say, given
  // by the model file's tensor names (a DequantizeLinear output stands for
  // the FakeQuantize it became): propagated and isolated as in run(), with
  // the given tensors as the reference. Tensors the map lacks, or whose
  // shape or type differ, are not compared; the result counts those it used.
  std::size_t run_against(const std::map<std::string, Tensor>& inputs,
                          const std::map<std::string, Tensor>& reference);
  // In the fused graph's execution order.
  std::vector<TensorDiff> tensors() const;
  // Forgets the differences run() and run_against() added; the compiled
  // models stay (e.g. one Comparison per worker, cleared per data partition).
  void clear();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Adds the differences in `more` to those in `into`, tensor by tensor (by
// name, in `into`'s order; a tensor only `more` holds is appended): counts and
// sums add, maxima take the larger, shares, cosine and SNR follow from the
// sums. Merging the tensors() of runs over parts of a data set gives what one
// Comparison over all of it gives (up to the order of floating-point sums).
QFUSE_API void merge(std::vector<TensorDiff>& into, const std::vector<TensorDiff>& more);

// One input set: Comparison(model, fused_options), run(inputs), tensors().
QFUSE_API std::vector<TensorDiff> compare(const Model& model,
                                const std::map<std::string, Tensor>& inputs,
                                const CompileOptions& fused_options = {});

}  // namespace qfuse
