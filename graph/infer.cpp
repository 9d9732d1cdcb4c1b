// Shape inference: each node's output shapes and types from its inputs and
// attributes (infer_node, infer_shapes). Each operator has one checker that
// validates its inputs and attributes as it infers; every error names the
// node, the operator and the problem. Graph-level validation is verify.cpp.

#include <algorithm>
#include <optional>
#include <cmath>
#include <numeric>
#include <sstream>
#include <type_traits>

#include "graph/broadcast.hpp"
#include "graph/graph.hpp"
#include "graph/op_info.hpp"
#include "qfuse/error.hpp"

namespace qfuse::graph {
namespace {

struct OutputSpec {
  Shape shape;
  ElementType type;
};

std::string ints_to_string(const Ints& v) { return to_string(Shape(v.begin(), v.end())); }

class NodeChecker {
 public:
  NodeChecker(Graph& graph, Node& node) : graph_(graph), node_(node) {}

  [[noreturn]] void fail(const std::string& problem) const {
    throw GraphError("validate " + std::string(to_string(node_.kind)) + " node '" + node_.name +
                     "': " + problem);
  }

  void expect(bool condition, const char* problem) const {
    if (!condition) fail(problem);
  }
  // The message is built only when the check fails: shape inference runs on
  // every node at import and after each rewrite.
  template <typename MakeMessage>
    requires std::is_invocable_v<MakeMessage>
  void expect(bool condition, MakeMessage&& make_message) const {
    if (!condition) fail(std::string(make_message()));
  }

  // The op table's arity (kVariadic: no upper bound).
  void expect_inputs(std::size_t lo, std::size_t hi) const {
    const std::size_t n = node_.inputs.size();
    if (n < lo || (hi != kVariadic && n > hi)) {
      std::ostringstream os;
      os << "wrong number of inputs (expected ";
      if (lo == hi) {
        os << lo;
      } else if (hi == kVariadic) {
        os << "at least " << lo;
      } else {
        os << lo << " to " << hi;
      }
      os << ", got " << n << ')';
      fail(os.str());
    }
  }

  const Node& node() const { return node_; }
  const Value& in(std::size_t i) const { return graph_.value(node_.inputs[i]); }
  const Shape& shape(std::size_t i) const { return in(i).shape; }
  std::size_t rank(std::size_t i) const { return shape(i).size(); }

  void expect_type(std::size_t i, ElementType type) const {
    if (in(i).type != type) {
      fail("input " + std::to_string(i) + " '" + in(i).name + "' has type " +
           std::string(to_string(in(i).type)) + " (expected " + std::string(to_string(type)) + ")");
    }
  }

  void expect_rank(std::size_t i, std::size_t lo, std::size_t hi) const {
    if (rank(i) < lo || rank(i) > hi) {
      fail("input " + std::to_string(i) + " '" + in(i).name + "' has rank " +
           std::to_string(rank(i)) + " (expected " + std::to_string(lo) +
           (lo == hi ? "" : " to " + std::to_string(hi)) + ")");
    }
  }

  // Fills an empty per-spatial-dim attribute with `fill`, then checks its length.
  void spatial_attr(Ints& v, std::size_t spatial, std::int64_t fill, const char* what,
                    std::int64_t min_value) const {
    if (v.empty()) v.assign(spatial, fill);
    if (v.size() != spatial) {
      fail(std::string(what) + " has " + std::to_string(v.size()) + " values (expected " +
           std::to_string(spatial) + ", one per spatial dimension)");
    }
    for (auto x : v) {
      if (x < min_value) {
        fail(std::string(what) + " " + ints_to_string(v) + " has a value below " +
             std::to_string(min_value));
      }
    }
  }

  // Element types of a layer's inputs: all f32, or for a quantized layer
  // (checked separately by check_quantized) nothing here.
  void expect_layer_types() const {
    if (quantized_) return;
    for (std::size_t i = 0; i < node_.inputs.size(); ++i) expect_type(i, ElementType::f32);
  }

  Graph& graph_;
  Node& node_;
  bool quantized_ = false;
};

// What convolution and deconvolution share: inputs x, w[, b] of one rank
// (1D to 3D spatial), groups, and the per-spatial-dim attributes (filled
// with their defaults when empty). Returns the number of spatial dims.
template <class Attrs>
std::size_t check_windowed_layer(NodeChecker& c, Attrs& a, const char* weights_layout) {
  c.expect_rank(0, 3, 5);
  const Shape& x = c.shape(0);
  const Shape& w = c.shape(1);
  const std::size_t spatial = x.size() - 2;
  c.expect(w.size() == x.size(), [&] {
    return "weights " + to_string(w) + " must have the rank of the input " + to_string(x) +
           " (expected " + weights_layout + ")";
  });
  c.expect(a.groups >= 1,
           [&] { return "groups must be >= 1 (got " + std::to_string(a.groups) + ")"; });
  c.spatial_attr(a.strides, spatial, 1, "strides", 1);
  c.spatial_attr(a.dilations, spatial, 1, "dilations", 1);
  c.spatial_attr(a.pads_begin, spatial, 0, "pads_begin", 0);
  c.spatial_attr(a.pads_end, spatial, 0, "pads_end", 0);
  return spatial;
}

OutputSpec check_conv(NodeChecker& c, ConvAttrs& a) {
  const std::size_t spatial = check_windowed_layer(c, a, "OC, IC/groups, k...");
  const Shape& x = c.shape(0);
  const Shape& w = c.shape(1);
  c.expect(x[1] == w[1] * a.groups, [&] {
    return "input channels do not match the weights (expected " + std::to_string(w[1] * a.groups) +
           " = weights dim 1 * groups, got " + std::to_string(x[1]) + ")";
  });
  c.expect(w[0] % a.groups == 0, [&] {
    return "output channels " + std::to_string(w[0]) + " are not divisible by groups " +
           std::to_string(a.groups);
  });
  if (c.node_.inputs.size() == 3) {
    c.expect(c.shape(2) == Shape{w[0]}, [&] {
      return "bias shape " + to_string(c.shape(2)) + " (expected [" + std::to_string(w[0]) + "])";
    });
  }
  c.expect_layer_types();
  Shape out{x[0], w[0]};
  for (std::size_t i = 0; i < spatial; ++i) {
    const std::int64_t extent = (w[i + 2] - 1) * a.dilations[i] + 1;
    const std::int64_t padded = x[i + 2] + a.pads_begin[i] + a.pads_end[i];
    c.expect(padded >= extent, [&] {
      return "kernel extent " + std::to_string(extent) + " exceeds the padded input " +
             std::to_string(padded) + " in spatial dim " + std::to_string(i);
    });
    out.push_back((padded - extent) / a.strides[i] + 1);
  }
  return {out, ElementType::f32};
}

OutputSpec check_deconv(NodeChecker& c, DeconvAttrs& a) {
  const std::size_t spatial = check_windowed_layer(c, a, "IC, OC/groups, k...");
  const Shape& x = c.shape(0);
  const Shape& w = c.shape(1);
  c.spatial_attr(a.output_padding, spatial, 0, "output_padding", 0);
  c.expect(x[1] == w[0], [&] {
    return "input channels do not match the weights (expected " + std::to_string(w[0]) +
           " = weights dim 0, got " + std::to_string(x[1]) + ")";
  });
  c.expect(w[0] % a.groups == 0, [&] {
    return "input channels " + std::to_string(w[0]) + " are not divisible by groups " +
           std::to_string(a.groups);
  });
  const std::int64_t oc = w[1] * a.groups;
  if (c.node_.inputs.size() == 3) {
    c.expect(c.shape(2) == Shape{oc}, [&] {
      return "bias shape " + to_string(c.shape(2)) + " (expected [" + std::to_string(oc) + "])";
    });
  }
  c.expect_layer_types();
  Shape out{x[0], oc};
  for (std::size_t i = 0; i < spatial; ++i) {
    c.expect(a.output_padding[i] < std::max(a.strides[i], a.dilations[i]), [&] {
      return "output_padding " + ints_to_string(a.output_padding) +
             " must be smaller than the stride or the dilation";
    });
    const std::int64_t o = (x[i + 2] - 1) * a.strides[i] + (w[i + 2] - 1) * a.dilations[i] + 1 -
                           a.pads_begin[i] - a.pads_end[i] + a.output_padding[i];
    c.expect(o >= 1, [&] {
      return "output spatial dim " + std::to_string(i) + " would be " + std::to_string(o);
    });
    out.push_back(o);
  }
  return {out, ElementType::f32};
}

OutputSpec check_fully_connected(NodeChecker& c) {
  c.expect_rank(0, 2, 8);
  c.expect_rank(1, 2, 2);
  const Shape& x = c.shape(0);
  const Shape& w = c.shape(1);
  c.expect(x.back() == w[1], [&] {
    return "input features do not match the weights (expected " + std::to_string(w[1]) + ", got " +
           std::to_string(x.back()) + ")";
  });
  if (c.node_.inputs.size() == 3) {
    c.expect(c.shape(2) == Shape{w[0]}, [&] {
      return "bias shape " + to_string(c.shape(2)) + " (expected [" + std::to_string(w[0]) + "])";
    });
  }
  c.expect_layer_types();
  Shape out = x;
  out.back() = w[0];
  return {out, ElementType::f32};
}

OutputSpec check_matmul(NodeChecker& c, const MatMulAttrs& a) {
  // After a and b: in a compiled graph, the run-time operands of the binary
  // post-ops the MatMul absorbed (plugin/f32_post_ops.hpp), f32 like a and b.
  c.expect_rank(0, 2, 8);
  c.expect_rank(1, 2, 8);
  c.expect_layer_types();
  // x and y as the product reads them.
  const auto permuted = [&c](const Shape& s, const Ints& perm, const char* what) {
    if (perm.empty()) return s;
    Ints sorted = perm;
    std::sort(sorted.begin(), sorted.end());
    bool ok = sorted.size() == s.size();
    for (std::size_t i = 0; ok && i < sorted.size(); ++i) ok = sorted[i] == static_cast<std::int64_t>(i);
    c.expect(ok, [&] {
      return std::string(what) + " is not a permutation of the " + std::to_string(s.size()) +
             " dims";
    });
    Shape p(s.size());
    for (std::size_t i = 0; i < s.size(); ++i) p[i] = s[static_cast<std::size_t>(perm[i])];
    return p;
  };
  Shape x = permuted(c.shape(0), a.perm_a, "perm_a");
  Shape y = permuted(c.shape(1), a.perm_b, "perm_b");
  if (a.transpose_a) std::swap(x[x.size() - 1], x[x.size() - 2]);
  if (a.transpose_b) std::swap(y[y.size() - 1], y[y.size() - 2]);
  const std::int64_t m = x[x.size() - 2], k = x.back(), k2 = y[y.size() - 2], n = y.back();
  c.expect(k == k2, [&] {
    return "inner dimensions differ (expected " + std::to_string(k) + ", got " +
           std::to_string(k2) + ")";
  });
  auto batch = broadcast_shapes(Shape(x.begin(), x.end() - 2), Shape(y.begin(), y.end() - 2));
  c.expect(batch.has_value(), [&] {
    return "batch dimensions of " + to_string(c.shape(0)) + " and " + to_string(c.shape(1)) +
           " do not broadcast";
  });
  Shape out = *batch;
  out.push_back(m);
  out.push_back(n);
  return {permuted(out, a.perm_y, "perm_y"), ElementType::f32};
}

OutputSpec check_fake_quantize(NodeChecker& c, const FakeQuantizeAttrs& a) {
  const std::size_t inputs = c.node().inputs.size();
  c.expect(inputs == kFakeQuantizeRangeInputs, [&] {
    return "takes 5 inputs (x and four ranges), got " + std::to_string(inputs);
  });
  c.expect(a.levels >= 2 && a.levels <= 65536,
           [&] { return "levels must be in [2, 65536] (got " + std::to_string(a.levels) + ")"; });
  const Shape& x = c.shape(0);
  static const char* kNames[] = {"x", "input_low", "input_high", "output_low", "output_high"};
  for (std::size_t i = 0; i < inputs; ++i) {
    c.expect_type(i, ElementType::f32);
    // (The messages below are built only on failure: this runs for every
    // element of every range of every FakeQuantize.)
    if (i > 0 && !broadcasts_to(c.shape(i), x)) {
      c.fail(std::string(kNames[i]) + " shape " + to_string(c.shape(i)) +
             " does not broadcast to the input " + to_string(x));
    }
  }
  // Constant ranges are finite, and the input range is not empty: the
  // quantization step divides by input_high - input_low.
  for (std::size_t i = 1; i < 5; ++i) {
    if (!c.in(i).is_constant()) continue;
    const auto v = c.in(i).constant->data<float>();
    for (std::size_t k = 0; k < v.size(); ++k) {
      if (!std::isfinite(v[k])) {
        c.fail(std::string(kNames[i]) + " is " + std::to_string(v[k]) +
               (v.size() > 1 ? " at index " + std::to_string(k) : std::string()) +
               " (ranges must be finite)");
      }
    }
  }
  if (c.in(1).is_constant() && c.in(2).is_constant()) {
    const auto lo = c.in(1).constant->data<float>();
    const auto hi = c.in(2).constant->data<float>();
    if (!lo.empty() && !hi.empty() &&
        (lo.size() == hi.size() || lo.size() == 1 || hi.size() == 1)) {
      const std::size_t n = std::max(lo.size(), hi.size());
      for (std::size_t k = 0; k < n; ++k) {
        const float l = lo[lo.size() == 1 ? 0 : k], h = hi[hi.size() == 1 ? 0 : k];
        if (l == h) {
          c.fail("input range [" + std::to_string(l) + ", " + std::to_string(h) + "]" +
                 (n > 1 ? " at index " + std::to_string(k) : std::string()) +
                 " is empty (the quantization step would divide by zero)");
        }
      }
    }
  }
  return {x, ElementType::f32};
}

OutputSpec check_binary(NodeChecker& c, OpKind kind) {
  c.expect_type(0, ElementType::f32);
  c.expect_type(1, ElementType::f32);
  // A constant operand holds no NaN, and a constant factor or divisor (a
  // scale, as pre-quantized models write one) is finite. (Infinite addends
  // stay: attention masks use them.)
  const bool scales = kind == OpKind::Multiply || kind == OpKind::Divide;
  for (std::size_t i = 0; i < 2; ++i) {
    if (!c.in(i).is_constant()) continue;
    const auto v = c.in(i).constant->data<float>();
    for (std::size_t k = 0; k < v.size(); ++k) {
      if (std::isnan(v[k]) || (scales && std::isinf(v[k]))) {
        c.fail("constant input " + std::to_string(i) + " ('" + c.in(i).name + "') is " +
               std::to_string(v[k]) + (v.size() > 1 ? " at index " + std::to_string(k) : std::string()) +
               (scales ? " (a factor must be finite)" : " (NaN)"));
      }
    }
  }
  auto out = broadcast_shapes(c.shape(0), c.shape(1));
  c.expect(out.has_value(), [&] {
    return "shapes " + to_string(c.shape(0)) + " and " + to_string(c.shape(1)) +
           " do not broadcast";
  });
  return {*out, ElementType::f32};
}

OutputSpec check_unary(NodeChecker& c) {
  c.expect_type(0, ElementType::f32);
  return {c.shape(0), ElementType::f32};
}

bool is_float_or_int8(ElementType t) {
  return t == ElementType::f32 || t == ElementType::u8 || t == ElementType::s8;
}

// Data movement and pooling run on f32 and on u8 / s8 alike.
void expect_float_or_int8(NodeChecker& c, std::size_t i) {
  c.expect(is_float_or_int8(c.in(i).type), [&] {
    return "input " + std::to_string(i) + " '" + c.in(i).name + "' has type " +
           std::string(to_string(c.in(i).type)) + " (expected f32, u8 or s8)";
  });
}

OutputSpec check_pool(NodeChecker& c, PoolAttrs& a, bool is_max) {
  expect_float_or_int8(c, 0);
  c.expect_rank(0, 3, 5);
  const Shape& x = c.shape(0);
  const std::size_t spatial = x.size() - 2;
  c.expect(a.kernel.size() == spatial, [&] {
    return "kernel " + ints_to_string(a.kernel) + " has " + std::to_string(a.kernel.size()) +
           " values (expected " + std::to_string(spatial) + ")";
  });
  c.spatial_attr(a.kernel, spatial, 1, "kernel", 1);
  c.spatial_attr(a.strides, spatial, 1, "strides", 1);
  c.spatial_attr(a.pads_begin, spatial, 0, "pads_begin", 0);
  c.spatial_attr(a.pads_end, spatial, 0, "pads_end", 0);
  c.spatial_attr(a.dilations, spatial, 1, "dilations", 1);
  if (!is_max) {
    c.expect(std::all_of(a.dilations.begin(), a.dilations.end(), [](auto d) { return d == 1; }),
             [&] {
               return "dilations " + ints_to_string(a.dilations) + " are not supported by AvgPool";
             });
  }
  if (a.out_scale != 1.0f || a.out_shift != 0.0f) {
    c.expect(!is_max && c.in(0).type != ElementType::f32,
             "an output requantization (out_scale, out_shift) needs an AvgPool on u8/s8");
    c.expect(std::isfinite(a.out_scale) && a.out_scale > 0.0f && std::isfinite(a.out_shift), [&] {
      return "out_scale " + std::to_string(a.out_scale) + " must be positive and finite";
    });
  }
  if (a.to_f32) {
    c.expect(!is_max && c.in(0).type != ElementType::f32,
             "an f32 mean of codes (to_f32) needs an AvgPool on u8/s8");
    bool global = true;
    for (std::size_t i = 0; i < spatial && i < a.kernel.size(); ++i) {
      global = global && a.kernel[i] == x[i + 2] && a.pads_begin[i] == 0 && a.pads_end[i] == 0;
    }
    c.expect(global, [&] {
      return "an f32 mean of codes (to_f32) needs a global window, kernel " +
             ints_to_string(a.kernel) + " without padding";
    });
  }
  Shape out{x[0], x[1]};
  for (std::size_t i = 0; i < spatial; ++i) {
    const std::int64_t extent = (a.kernel[i] - 1) * a.dilations[i] + 1;
    c.expect(a.pads_begin[i] < extent && a.pads_end[i] < extent, [&] {
      return "padding must be smaller than the kernel extent in spatial dim " + std::to_string(i);
    });
    const std::int64_t padded = x[i + 2] + a.pads_begin[i] + a.pads_end[i];
    c.expect(padded >= extent, [&] {
      return "kernel extent " + std::to_string(extent) + " exceeds the padded input " +
             std::to_string(padded);
    });
    out.push_back((padded - extent) / a.strides[i] + 1);
  }
  return {out, a.to_f32 ? ElementType::f32 : c.in(0).type};
}

std::int64_t normalize_axis(NodeChecker& c, std::int64_t axis, std::int64_t rank,
                            bool inclusive_end) {
  const std::int64_t hi = inclusive_end ? rank : rank - 1;
  if (axis < 0) axis += rank;
  c.expect(axis >= 0 && axis <= hi, [&] {
    return "axis out of range (expected -" + std::to_string(rank) + " to " + std::to_string(hi) +
           ")";
  });
  return axis;
}

OutputSpec check_node(NodeChecker& c);

OutputSpec check_slice(NodeChecker& c, SliceAttrs& a) {
  const Shape& x = c.shape(0);
  c.expect(a.begin.size() == x.size() && a.size.size() == x.size() &&
               (a.size_dims.empty() || a.size_dims.size() == x.size()),
           [&] {
             return "begin " + ints_to_string(a.begin) + " and size " + to_string(a.size) +
                    " must have the input's rank " + std::to_string(x.size());
           });
  for (std::size_t d = 0; d < a.size_dims.size(); ++d) {
    if (a.size_dims[d].empty()) continue;
    // A dimension the model fixed (Graph::fix_dim) keeps the size it had.
    if (const std::optional<std::int64_t> size = c.graph_.dim_size(a.size_dims[d])) a.size[d] = *size;
  }
  for (std::size_t d = 0; d < x.size(); ++d) {
    c.expect(a.begin[d] >= 0 && a.size[d] >= 1 && a.begin[d] + a.size[d] <= x[d], [&] {
      return "the box begin " + ints_to_string(a.begin) + " size " + to_string(a.size) +
             " is not inside the input " + to_string(x);
    });
  }
  return {a.size, c.in(0).type};
}

OutputSpec check_reduce(NodeChecker& c, ReduceAttrs& a) {
  c.expect_type(0, ElementType::f32);
  const auto rank = static_cast<std::int64_t>(c.rank(0));
  for (auto& axis : a.axes) axis = normalize_axis(c, axis, rank, false);
  std::sort(a.axes.begin(), a.axes.end());
  c.expect(std::adjacent_find(a.axes.begin(), a.axes.end()) == a.axes.end() && !a.axes.empty(),
           [&] { return "axes " + ints_to_string(a.axes) + " must be distinct and not empty"; });
  Shape out = c.shape(0);
  for (auto axis : a.axes) out[static_cast<std::size_t>(axis)] = 1;
  return {out, ElementType::f32};
}

// A quantized layer: its own input types and chain, then the geometry of the
// f32 op it replaces, checked on a view holding x, w[, bias].
// The largest per-channel vector a chain step holds (1: every one per tensor).
std::size_t widest_vector(const composer::Step& step) {
  return std::visit(
      [](const auto& s) -> std::size_t {
        using S = std::decay_t<decltype(s)>;
        if constexpr (std::is_same_v<S, composer::Scale> || std::is_same_v<S, composer::Shift>) {
          return s.values.size();
        } else if constexpr (std::is_same_v<S, composer::Clip>) {
          return std::max(s.lo.size(), s.hi.size());
        } else if constexpr (std::is_same_v<S, composer::FakeQuantize>) {
          return std::max({s.input_low.size(), s.input_high.size(), s.output_low.size(),
                           s.output_high.size()});
        } else if constexpr (std::is_same_v<S, composer::Quantize>) {
          return std::max(s.scale.size(), s.zero_point.size());
        } else {
          return 1;
        }
      },
      step);
}

OutputSpec check_quantized(NodeChecker& c, QuantizedLayerAttrs& a) {
  const std::size_t base = a.first_external_input();
  c.expect(c.node_.inputs.size() >= base, [&] {
    return "wrong number of inputs (expected at least " + std::to_string(base) + ", got " +
           std::to_string(c.node_.inputs.size()) + ")";
  });
  c.expect(c.in(0).type == ElementType::u8 || c.in(0).type == ElementType::s8, [&] {
    return "input 0 '" + c.in(0).name + "' has type " + std::string(to_string(c.in(0).type)) +
           " (expected u8 or s8)";
  });
  if (c.node_.kind == OpKind::QuantizedMatMul && !c.in(1).is_constant()) {
    c.expect(c.in(1).type == ElementType::u8 || c.in(1).type == ElementType::s8, [&] {
      return "run-time weights '" + c.in(1).name + "' have type " +
             std::string(to_string(c.in(1).type)) + " (expected u8 or s8)";
    });
  } else {
    c.expect_type(1, ElementType::s8);
    c.expect(c.in(1).is_constant(),
             [&] { return "weights '" + c.in(1).name + "' must be constant"; });
    c.expect(a.weights_zero_point == 0, "constant weights have no zero point");
  }
  if (a.has_bias) c.expect_type(2, ElementType::f32);
  if (a.dynamic) {
    c.expect(c.node_.kind == OpKind::QuantizedFullyConnected && !a.has_bias &&
                 a.src_zero_point == 0,
             "a dynamic layer is a fully-connected one without bias or constant zero point");
    c.expect_type(2, c.in(0).type);
    c.expect(element_count(c.shape(2)) == 1, "the run-time zero point must have one value");
    c.expect_type(3, ElementType::f32);
  }
  c.expect(a.dst_type() != ElementType::s32, "destination type s32 is not supported");
  const int externals = static_cast<int>(c.node_.inputs.size() - base);
  for (const composer::Step& step : a.chain.steps) {
    int input = -1;
    if (const auto* sum = std::get_if<composer::Sum>(&step)) input = sum->input;
    if (const auto* bin = std::get_if<composer::Binary>(&step)) input = bin->input;
    c.expect(input < externals, [&] {
      return "post-op chain reads external input " + std::to_string(input) + " but the node has " +
             std::to_string(externals);
    });
  }
  Node view = c.node_;
  // MatMul has no bias input of its own: check it here and leave it out.
  const bool matmul_bias = c.node_.kind == OpKind::QuantizedMatMul && a.has_bias;
  view.inputs.resize(matmul_bias || a.dynamic ? 2 : base);
  view.attrs = std::visit([](const auto& g) -> Attributes { return g; }, a.geometry);
  view.kind = float_form(c.node_.kind);
  NodeChecker inner(c.graph_, view);
  inner.quantized_ = true;
  OutputSpec spec = check_node(inner);
  const std::optional<std::size_t> axis = output_channel_axis(view.kind, spec.shape.size());
  c.expect(axis.has_value(),
           [&] { return "output " + to_string(spec.shape) + " has no channel axis"; });
  const std::int64_t channels = spec.shape[*axis];
  // A chain of per-tensor steps follows the output to other sizes (the
  // scores of attention at another sequence length); per-channel values
  // hold the count they were made for.
  if (a.chain.channels != channels &&
      std::all_of(a.chain.steps.begin(), a.chain.steps.end(),
                  [](const composer::Step& s) { return widest_vector(s) <= 1; })) {
    a.chain.channels = static_cast<int>(channels);
  }
  c.expect(a.chain.channels == channels, [&] {
    return "post-op chain has " + std::to_string(a.chain.channels) + " channels (expected " +
           std::to_string(channels) + ")";
  });
  // Run-time operands of the chain: per channel, or the output's shape.
  for (const composer::Step& step : a.chain.steps) {
    const auto* bin = std::get_if<composer::Binary>(&step);
    const auto* sum = std::get_if<composer::Sum>(&step);
    if (bin == nullptr && sum == nullptr) continue;
    const std::size_t k = base + static_cast<std::size_t>(bin != nullptr ? bin->input : sum->input);
    if (k >= c.node_.inputs.size()) continue;
    const Shape& ext = c.shape(k);
    const bool per_channel = bin != nullptr && bin->broadcast == composer::Broadcast::per_channel;
    c.expect(per_channel ? is_per_channel(ext, spec.shape, *axis) : ext == spec.shape, [&] {
      return "post-op operand '" + c.in(k).name + "' has shape " + to_string(ext) +
             (per_channel ? ", which is not one value per channel of the output "
                          : ", not the output's ") +
             to_string(spec.shape) + " (the fusion took it " +
             (per_channel ? "per channel" : "whole") + " at the shapes it was compiled for)";
    });
  }
  if (a.dynamic) {
    const std::int64_t scales = element_count(c.shape(3));
    const auto weight_scales = static_cast<std::int64_t>(a.dynamic_weight_scales.size());
    c.expect(
        scales == 1 || (weight_scales == 0 && scales == channels && c.shape(3).back() == channels),
        [&] {
          return "the run-time scale has shape " + to_string(c.shape(3)) + " (expected one value" +
                 (weight_scales == 0 ? " or [" + std::to_string(channels) + "]" : "") + ")";
        });
    c.expect(weight_scales == 0 || weight_scales == 1 || weight_scales == channels, [&] {
      return "the layer has " + std::to_string(weight_scales) + " weight scales (expected 1 or " +
             std::to_string(channels) + ")";
    });
  } else {
    c.expect(a.dynamic_weight_scales.empty(), "only a dynamic layer has run-time weight scales");
  }
  if (matmul_bias) {
    c.expect(c.shape(2) == Shape{channels}, [&] {
      return "bias shape " + to_string(c.shape(2)) + " (expected [" + std::to_string(channels) +
             "])";
    });
  }
  spec.type = a.dst_type();
  return spec;
}

OutputSpec check_prelu(NodeChecker& c) {
  c.expect_type(0, ElementType::f32);
  c.expect_type(1, ElementType::f32);
  c.expect(broadcasts_to(c.shape(1), c.shape(0)), [&] {
    return "slope shape " + to_string(c.shape(1)) + " does not broadcast to the input " +
           to_string(c.shape(0));
  });
  return {c.shape(0), ElementType::f32};
}

OutputSpec check_convert(NodeChecker& c) {
  Node& n = c.node_;
  const auto& a = std::get<ConvertAttrs>(n.attrs);
  c.expect(
      c.in(0).type != ElementType::s64 ||
          (!a.quantizes() &&
           (a.to == ElementType::f32 || a.to == ElementType::s32 || a.to == ElementType::s64)),
      [&] { return "converts s64 to f32 or s32 only (got " + std::string(to_string(a.to)) + ")"; });
  if (a.quantizes()) {
    c.expect_type(0, ElementType::f32);
    c.expect(a.to == ElementType::u8 || a.to == ElementType::s8,
             "a quantizing Convert writes u8 or s8");
    c.expect(
        std::isfinite(a.input_low) && std::isfinite(a.input_high) && a.input_low < a.input_high,
        [&] {
          return "input range [" + std::to_string(a.input_low) + ", " +
                 std::to_string(a.input_high) + "] is empty or not finite";
        });
  }
  return {c.shape(0), a.to};
}

// A quantization's scale and zero point: one value each, or one per index of
// dimension `axis` of the input.
void expect_quantization_parameters(const NodeChecker& c, std::size_t scales,
                                    std::size_t zero_points, std::int64_t axis) {
  const Shape& x = c.shape(0);
  const bool per_tensor = scales == 1 && zero_points == 1;
  if (!per_tensor) {
    c.expect(axis >= 0 && static_cast<std::size_t>(axis) < x.size(), [&] {
      return "axis " + std::to_string(axis) + " is not a dimension of its rank-" +
             std::to_string(x.size()) + " input";
    });
  }
  const auto sized = [&](std::size_t size) {
    return size == 1 ||
           (!per_tensor && static_cast<std::int64_t>(size) == x[static_cast<std::size_t>(axis)]);
  };
  c.expect(scales > 0 && sized(scales) && zero_points > 0 && sized(zero_points), [&] {
    return "scale (" + std::to_string(scales) + " values) and zero point (" +
           std::to_string(zero_points) + ") hold one value or one per index of axis " +
           std::to_string(axis);
  });
}

OutputSpec check_quantize(NodeChecker& c) {
  const auto& a = std::get<QuantizeAttrs>(c.node_.attrs);
  c.expect_type(0, ElementType::f32);
  c.expect(a.to == ElementType::u8 || a.to == ElementType::s8,
           [&] { return "a Quantize writes u8 or s8 (got " + std::string(to_string(a.to)) + ")"; });
  c.expect(a.levels >= 2 && a.code_offset >= 0 && a.code_offset + a.levels <= 256, [&] {
    return "levels " + std::to_string(a.levels) + " from code offset " +
           std::to_string(a.code_offset) + " (expected 2..256 codes within the type)";
  });
  expect_quantization_parameters(c, a.scale.size(), a.zero_point.size(), a.axis);
  for (const float s : a.scale) {
    c.expect(std::isfinite(s) && s > 0.0f,
             [&] { return "scale " + std::to_string(s) + " is not a positive finite f32"; });
  }
  for (const std::int32_t z : a.zero_point) {
    c.expect(z >= a.type_min() && z <= a.type_min() + 255, [&] {
      return "zero point " + std::to_string(z) + " is not a " + std::string(to_string(a.to)) +
             " value";
    });
  }
  return {c.shape(0), a.to};
}

OutputSpec check_batch_normalization(NodeChecker& c) {
  Node& n = c.node_;
  c.expect_rank(0, 2, 5);
  const Shape channel{c.shape(0)[1]};
  for (std::size_t i = 0; i < 5; ++i) c.expect_type(i, ElementType::f32);
  for (std::size_t i = 1; i < 5; ++i) {
    c.expect(c.shape(i) == channel, [&] {
      return "parameter " + std::to_string(i) + " has shape " + to_string(c.shape(i)) +
             " (expected " + to_string(channel) + ")";
    });
  }
  c.expect(std::get<BatchNormAttrs>(n.attrs).epsilon >= 0.0f, "epsilon must be >= 0");
  return {c.shape(0), ElementType::f32};
}

OutputSpec check_reshape(NodeChecker& c) {
  Node& n = c.node_;
  auto& a = std::get<ReshapeAttrs>(n.attrs);
  if (!a.spec.empty()) {
    // The model's target for the input's shape of the moment.
    const Shape& x = c.shape(0);
    Shape target;
    std::int64_t known = 1;
    std::optional<std::size_t> rest;
    for (std::size_t k = 0; k < a.spec.size(); ++k) {
      std::int64_t d = a.spec[k];
      if (d == 0 || d <= -2) {
        const std::size_t from = d == 0 ? k : static_cast<std::size_t>(-2 - d);
        c.expect(from < x.size(), [&] {
          return "target " + to_string(a.spec) + " copies dimension " + std::to_string(from) +
                 " of an input of shape " + to_string(x);
        });
        d = from < x.size() ? x[from] : 1;
      }
      if (d == -1) {
        rest = k;
      } else {
        known *= d;
      }
      target.push_back(d);
    }
    if (rest) {
      const std::int64_t total = element_count(x);
      c.expect(known > 0 && total % known == 0, [&] {
        return "target " + to_string(a.spec) + " cannot take an input of shape " + to_string(x);
      });
      target[*rest] = known > 0 ? total / known : 1;
    }
    a.shape = std::move(target);
  }
  const Shape& target = a.shape;
  c.expect(std::all_of(target.begin(), target.end(), [](auto d) { return d >= 1; }),
           [&] { return "target shape " + to_string(target) + " has a dimension < 1"; });
  c.expect(element_count(target) == element_count(c.shape(0)), [&] {
    return "target shape " + to_string(target) + " has " + std::to_string(element_count(target)) +
           " elements (expected " + std::to_string(element_count(c.shape(0))) + ")";
  });
  return {target, c.in(0).type};
}

OutputSpec check_flatten(NodeChecker& c) {
  Node& n = c.node_;
  auto& a = std::get<FlattenAttrs>(n.attrs);
  const Shape& x = c.shape(0);
  a.axis = normalize_axis(c, a.axis, static_cast<std::int64_t>(x.size()), true);
  const auto split = x.begin() + a.axis;
  // Each part checked on its own: a zero dim in one must not hide an
  // overflow in the other.
  const std::int64_t outer = element_count(Shape(x.begin(), split));
  const std::int64_t inner = element_count(Shape(split, x.end()));
  return {{outer, inner}, c.in(0).type};
}

OutputSpec check_transpose(NodeChecker& c) {
  Node& n = c.node_;
  auto& a = std::get<TransposeAttrs>(n.attrs);
  const Shape& x = c.shape(0);
  if (a.perm.empty()) {
    for (std::size_t i = x.size(); i-- > 0;) a.perm.push_back(static_cast<std::int64_t>(i));
  }
  Ints sorted = a.perm;
  std::sort(sorted.begin(), sorted.end());
  Ints identity(x.size());
  std::iota(identity.begin(), identity.end(), 0);
  c.expect(sorted == identity, [&] {
    return "perm " + ints_to_string(a.perm) + " is not a permutation of the input's " +
           std::to_string(x.size()) + " axes";
  });
  Shape out;
  for (auto p : a.perm) out.push_back(x[static_cast<std::size_t>(p)]);
  return {out, c.in(0).type};
}

OutputSpec check_shuffle_channels(NodeChecker& c) {
  Node& n = c.node_;
  const auto& a = std::get<ShuffleChannelsAttrs>(n.attrs);
  c.expect_rank(0, 2, 5);
  expect_float_or_int8(c, 0);
  const std::int64_t channels = c.shape(0)[1];
  c.expect(a.groups >= 1 && channels % a.groups == 0, [&] {
    return "groups " + std::to_string(a.groups) + " do not divide the " + std::to_string(channels) +
           " channels";
  });
  return {c.shape(0), c.in(0).type};
}

OutputSpec check_concat(NodeChecker& c) {
  Node& n = c.node_;
  auto& a = std::get<ConcatAttrs>(n.attrs);
  const Shape& first = c.shape(0);
  a.axis = normalize_axis(c, a.axis, static_cast<std::int64_t>(first.size()), false);
  Shape out = first;
  for (std::size_t i = 1; i < n.inputs.size(); ++i) {
    Shape s = c.shape(i);
    c.expect(s.size() == first.size() && c.in(i).type == c.in(0).type, [&] {
      return "input " + std::to_string(i) + " " + to_string(s) +
             " differs in rank or type from input 0 " + to_string(first);
    });
    out[static_cast<std::size_t>(a.axis)] += s[static_cast<std::size_t>(a.axis)];
    s[static_cast<std::size_t>(a.axis)] = first[static_cast<std::size_t>(a.axis)];
    c.expect(s == first, [&] {
      return "input " + std::to_string(i) + " " + to_string(c.shape(i)) + " differs from input 0 " +
             to_string(first) + " outside the concat axis";
    });
  }
  return {out, c.in(0).type};
}

OutputSpec check_resize(NodeChecker& c) {
  Node& n = c.node_;
  auto& a = std::get<ResizeAttrs>(n.attrs);
  if (a.mode == ResizeMode::nearest) {
    expect_float_or_int8(c, 0);
  } else {
    c.expect_type(0, ElementType::f32);
  }
  const Shape& x = c.shape(0);
  c.expect(a.sizes.size() == x.size(), [&] {
    return "sizes " + to_string(a.sizes) + " must have the input's rank " +
           std::to_string(x.size());
  });
  c.expect(std::all_of(a.sizes.begin(), a.sizes.end(), [](auto d) { return d >= 1; }),
           [&] { return "sizes " + to_string(a.sizes) + " has a dimension < 1"; });
  c.expect(a.scales.empty() || a.scales.size() == x.size(), [&] {
    return "scales has " + std::to_string(a.scales.size()) + " values (expected 0 or " +
           std::to_string(x.size()) + ")";
  });
  c.expect(std::all_of(a.scales.begin(), a.scales.end(), [](float s) { return s > 0.0f; }),
           "scales must be > 0");
  return {a.sizes, c.in(0).type};
}

OutputSpec check_dequantize(NodeChecker& c) {
  const auto& a = std::get<DequantizeAttrs>(c.node_.attrs);
  const ElementType in = c.in(0).type;
  c.expect(in == ElementType::u8 || in == ElementType::s8 || in == ElementType::s32, [&] {
    return "a Dequantize reads u8, s8 or s32 codes (got " + std::string(to_string(in)) + ")";
  });
  expect_quantization_parameters(c, a.scale.size(), a.zero_point.size(), a.axis);
  for (const float s : a.scale) {
    c.expect(std::isfinite(s), [&] { return "scale " + std::to_string(s) + " is not finite"; });
  }
  for (const float z : a.zero_point) {
    c.expect(std::isfinite(z), [&] { return "zero point " + std::to_string(z) + " is not finite"; });
  }
  return {c.shape(0), ElementType::f32};
}

OutputSpec check_lookup(NodeChecker& c) {
  Node& n = c.node_;
  const auto& a = std::get<LookupAttrs>(n.attrs);
  const ElementType in = c.in(0).type;
  c.expect(in == ElementType::u8 || in == ElementType::s8, "a Lookup reads u8 or s8");
  c.expect(a.to == ElementType::u8 || a.to == ElementType::s8, "a Lookup writes u8 or s8");
  c.expect(a.table.size() == 256,
           [&] { return "a Lookup table has 256 entries, not " + std::to_string(a.table.size()); });
  return {c.shape(0), a.to};
}

OutputSpec check_mean_inner_product(NodeChecker& c) {
  Node& n = c.node_;
  const auto& a = std::get<MeanInnerProductAttrs>(n.attrs);
  const ElementType in = c.in(0).type;
  c.expect(in == ElementType::u8 || in == ElementType::s8,
           "a MeanInnerProduct reads u8 or s8 codes");
  c.expect_type(1, ElementType::s8);
  const Shape& x = c.shape(0);
  const Shape& w = c.shape(1);
  c.expect(x.size() >= 2 && w.size() == 2 && w[1] == x[1], [&] {
    return "the weights must be [O, K] for codes [N, K, ...] " + to_string(x) + " (got " +
           to_string(w) + ")";
  });
  const auto channels = static_cast<std::size_t>(w[0]);
  c.expect(a.scale.size() == channels && a.shift.size() == channels,
           "a MeanInnerProduct has a scale and a shift per output channel");
  c.expect(a.out_rank >= 2, "a MeanInnerProduct writes [N, O] or [N, O, 1, ...]");
  // Each byte plane's products stay in int32: 255 * 128 * K < 2^31.
  c.expect(w[1] <= 65535, "a MeanInnerProduct reads at most 65535 channels");
  Shape out(static_cast<std::size_t>(a.out_rank), 1);
  out[0] = x[0];
  out[1] = w[0];
  return {out, ElementType::f32};
}

// The type of a per-tensor quantization's codes (ConvertAttrs by ranges or
// QuantizeAttrs), checked: u8 or s8, one scale and zero point.
ElementType check_codes_quantization(NodeChecker& c,
                                     const std::variant<ConvertAttrs, QuantizeAttrs>& quantize,
                                     std::string_view op) {
  const ElementType to = std::visit([](const auto& q) { return q.to; }, quantize);
  const auto* by_ranges = std::get_if<ConvertAttrs>(&quantize);
  c.expect((by_ranges == nullptr || by_ranges->quantizes()) &&
               (to == ElementType::u8 || to == ElementType::s8),
           [&] { return "a " + std::string(op) + " quantizes to u8 or s8"; });
  const auto* linear = std::get_if<QuantizeAttrs>(&quantize);
  c.expect(linear == nullptr || linear->per_tensor(),
           [&] { return "a " + std::string(op) + " quantizes per tensor"; });
  return to;
}

OutputSpec check_code_add(NodeChecker& c) {
  const auto& a = std::get<CodeAddAttrs>(c.node_.attrs);
  for (std::size_t i = 0; i < 2; ++i) {
    const ElementType in = c.in(i).type;
    c.expect(in == ElementType::u8 || in == ElementType::s8, "a CodeAdd reads u8 or s8 codes");
  }
  c.expect(c.shape(0) == c.shape(1), [&] {
    return "a CodeAdd adds codes of one shape (got " + to_string(c.shape(0)) + " and " +
           to_string(c.shape(1)) + ")";
  });
  const ElementType to = check_codes_quantization(c, a.quantize, "CodeAdd");
  return {c.shape(0), to};
}

OutputSpec check_gate_multiply(NodeChecker& c) {
  Node& n = c.node_;
  const auto& a = std::get<GateMultiplyAttrs>(n.attrs);
  const ElementType in = c.in(0).type;
  c.expect(in == ElementType::u8 || in == ElementType::s8, "a GateMultiply reads u8 or s8 codes");
  c.expect_type(1, ElementType::f32);
  const ElementType to = check_codes_quantization(c, a.quantize, "GateMultiply");
  const Shape& x = c.shape(0);
  const Shape& g = c.shape(1);
  bool per_channel = x.size() >= 2 && g.size() == x.size() && (g[0] == x[0] || g[0] == 1) &&
                     g[1] == x[1];
  for (std::size_t d = 2; per_channel && d < g.size(); ++d) per_channel = g[d] == 1;
  c.expect(per_channel, [&] {
    return "the gate must be [N or 1, C, 1, ...] for x " + to_string(x) + " (got " + to_string(g) +
           ")";
  });
  return {x, to};
}

// LayerNorm's inputs and attributes; LayerNormQuantize and
// LayerNormDynamicQuantize read the same and write its output first.
OutputSpec check_layer_norm(NodeChecker& c, float eps) {
  for (std::size_t i = 0; i < 3; ++i) c.expect_type(i, ElementType::f32);
  c.expect(c.rank(0) >= 2, "the input must have rank >= 2");
  const Shape channel{c.shape(0).back()};
  c.expect(c.shape(1) == channel && c.shape(2) == channel, [&] {
    return "scale and bias must be " + to_string(channel) + " (the last dimension; got " +
           to_string(c.shape(1)) + " and " + to_string(c.shape(2)) + ")";
  });
  c.expect(std::isfinite(eps) && eps >= 0.0f, "epsilon must be finite and >= 0");
  return {c.shape(0), ElementType::f32};
}

OutputSpec check_gather(NodeChecker& c) {
  Node& n = c.node_;
  const ElementType it = c.in(1).type;
  c.expect(it == ElementType::s32 || it == ElementType::s64 || it == ElementType::f32, [&] {
    return "indices must be s32, s64 or f32 (got " + std::string(to_string(it)) + ")";
  });
  auto& a = std::get<GatherAttrs>(n.attrs);
  c.expect(c.rank(0) >= 1, "data must have rank >= 1");
  a.axis = normalize_axis(c, a.axis, static_cast<std::int64_t>(c.rank(0)), false);
  const Shape& data = c.shape(0);
  const auto axis = static_cast<std::size_t>(a.axis);
  Shape out(data.begin(), data.begin() + static_cast<std::ptrdiff_t>(axis));
  out.insert(out.end(), c.shape(1).begin(), c.shape(1).end());
  out.insert(out.end(), data.begin() + static_cast<std::ptrdiff_t>(axis) + 1, data.end());
  return {out, c.in(0).type};
}

// Attention (AttentionAttrs): q, k and v read through the matmuls' perms as
// [B, H, M, D], [B, H, D, N] and [B, H, N, Dv]; the product [B, H, M, Dv]
// written through mix's perm_y.
OutputSpec check_attention(NodeChecker& c) {
  const auto& a = c.node().attr<AttentionAttrs>();
  const auto& sg = std::get<MatMulAttrs>(a.scores.geometry);
  const auto& mg = std::get<MatMulAttrs>(a.mix.geometry);
  const auto read = [&](std::size_t i, const Ints& perm) {
    const Shape& s = c.shape(i);
    c.expect(s.size() == 4, "q, k and v must have rank 4");
    if (perm.empty()) return s;
    c.expect(perm.size() == 4, "a perm of rank 4");
    Shape r(4);
    for (std::size_t d = 0; d < 4; ++d) r[d] = s[static_cast<std::size_t>(perm[d])];
    return r;
  };
  c.expect(!sg.transpose_a && !sg.transpose_b && !mg.transpose_a && !mg.transpose_b &&
               sg.perm_y.empty() && mg.perm_a.empty(),
           "the matmuls read their operands by perm_a / perm_b and write by mix's perm_y only");
  const Shape q = read(0, sg.perm_a), k = read(1, sg.perm_b), v = read(2, mg.perm_b);
  c.expect(q[0] == k[0] && q[0] == v[0] && q[1] == k[1] && q[1] == v[1], [&] {
    return "q " + to_string(q) + ", k " + to_string(k) + " and v " + to_string(v) +
           " must have the same batch and heads";
  });
  c.expect(q[3] == k[2] && k[3] == v[2], [&] {
    return "q " + to_string(q) + " x k " + to_string(k) + " x v " + to_string(v) +
           " do not chain";
  });
  for (std::size_t i = 0; i < 3; ++i) {
    const ElementType t = c.in(i).type;
    c.expect(a.quantized ? t == ElementType::u8 || t == ElementType::s8 : t == ElementType::f32,
             a.quantized ? "an int8 attention reads u8 / s8 codes" : "an f32 attention reads f32");
  }
  if (c.node().inputs.size() == 4) {
    c.expect_type(3, ElementType::f32);
    const Shape scores{q[0], q[1], q[2], k[3]};
    const std::optional<Shape> both = broadcast_shapes(scores, c.shape(3));
    c.expect(both && *both == scores && c.shape(3).back() == k[3], [&] {
      return "the mask " + to_string(c.shape(3)) + " must broadcast to the scores " +
             to_string(scores) + ", whole along the keys";
    });
  }
  c.expect(a.softmax.quantizes() == a.quantized,
           "the Softmax quantizes exactly when the attention is int8");
  const Shape product{q[0], q[1], q[2], v[3]};
  Shape out = product;
  if (!mg.perm_y.empty()) {
    c.expect(mg.perm_y.size() == 4, "perm_y of rank 4");
    for (std::size_t d = 0; d < 4; ++d) out[d] = product[static_cast<std::size_t>(mg.perm_y[d])];
  }
  return {out, a.quantized ? a.mix.dst_type() : ElementType::f32};
}

OutputSpec check_softmax(NodeChecker& c) {
  Node& n = c.node_;
  c.expect_type(0, ElementType::f32);
  auto& a = std::get<SoftmaxAttrs>(n.attrs);
  Shape out = c.shape(0);
  if (n.inputs.size() == 2) {
    // An additive mask (fold_mask_into_softmax): softmax(x + m) along the
    // last axis, x and m broadcast to one shape (the scores' at the binding
    // the pass saw; symbolic dims may make either repeat at another), both
    // whole along the last axis.
    c.expect_type(1, ElementType::f32);
    const Shape& x = c.shape(0);
    const Shape& m = c.shape(1);
    const std::optional<Shape> both = broadcast_shapes(x, m);
    c.expect(both && !x.empty() && !m.empty() && x.back() == both->back() && m.back() == both->back(),
             [&] {
               return "the scores " + to_string(x) + " and the mask " + to_string(m) +
                      " must broadcast to one shape, both whole along the last axis";
             });
    if (both) out = *both;
  }
  a.axis = normalize_axis(c, a.axis, static_cast<std::int64_t>(out.size()), false);
  if (n.inputs.size() == 2) {
    c.expect(a.axis + 1 == static_cast<std::int64_t>(out.size()),
             "a Softmax with a mask runs along the last axis");
  }
  if (!a.quantizes()) return {out, ElementType::f32};
  c.expect(a.to == ElementType::u8 || a.to == ElementType::s8, [&] {
    return "a quantizing Softmax writes u8 or s8 (got " + std::string(to_string(a.to)) + ")";
  });
  c.expect(std::isfinite(a.quantize_scale), "the quantization scale must be finite");
  if (a.by_ranges()) {
    c.expect(a.quantize_scale == 0.0f, "a Softmax quantizes by a scale or by ranges, not both");
    c.expect(std::isfinite(a.input_low) && std::isfinite(a.input_high) && a.input_high > a.input_low,
             "the quantization ranges must be finite, low below high");
  }
  return {out, a.to};
}

OutputSpec check_node(NodeChecker& c) {
  Node& n = c.node_;
  const OpInfo& info = op_info(n.kind);
  c.expect_inputs(info.min_inputs, info.max_inputs);
  // Whole categories of the op table first; then each op of its own.
  switch (info.category) {
    case OpCategory::binary: return check_binary(c, n.kind);
    case OpCategory::unary:
      if (n.kind == OpKind::Clamp) {
        const auto& a = std::get<ClampAttrs>(n.attrs);
        c.expect(a.lo <= a.hi, [&] {
          return "lo " + std::to_string(a.lo) + " exceeds hi " + std::to_string(a.hi);
        });
      }
      return check_unary(c);
    case OpCategory::quantized_layer:
      return check_quantized(c, n.attr<QuantizedLayerAttrs>());
    default: break;
  }
  switch (n.kind) {
    case OpKind::Convolution: return check_conv(c, n.attr<ConvAttrs>());
    case OpKind::Deconvolution: return check_deconv(c, n.attr<DeconvAttrs>());
    case OpKind::FullyConnected: return check_fully_connected(c);
    case OpKind::MatMul: return check_matmul(c, std::get<MatMulAttrs>(n.attrs));
    case OpKind::FakeQuantize:
      return check_fake_quantize(c, std::get<FakeQuantizeAttrs>(n.attrs));
    case OpKind::PRelu: return check_prelu(c);
    case OpKind::Convert: return check_convert(c);
    case OpKind::BatchNormalization: return check_batch_normalization(c);
    case OpKind::MaxPool: return check_pool(c, n.attr<PoolAttrs>(), true);
    case OpKind::AvgPool: return check_pool(c, n.attr<PoolAttrs>(), false);
    case OpKind::Reshape: return check_reshape(c);
    case OpKind::Flatten: return check_flatten(c);
    case OpKind::Transpose: return check_transpose(c);
    case OpKind::ShuffleChannels: return check_shuffle_channels(c);
    case OpKind::Concat: return check_concat(c);
    case OpKind::Resize: return check_resize(c);
    case OpKind::Slice: return check_slice(c, std::get<SliceAttrs>(n.attrs));
    case OpKind::ReduceMean: return check_reduce(c, std::get<ReduceAttrs>(n.attrs));
    case OpKind::Power: return check_unary(c);
    case OpKind::Lookup: return check_lookup(c);
    case OpKind::Dequantize: return check_dequantize(c);
    case OpKind::Quantize: return check_quantize(c);
    case OpKind::GateMultiply: return check_gate_multiply(c);
    case OpKind::CodeAdd: return check_code_add(c);
    case OpKind::MeanInnerProduct: return check_mean_inner_product(c);
    case OpKind::LayerNorm: return check_layer_norm(c, std::get<LayerNormAttrs>(n.attrs).epsilon);
    case OpKind::LayerNormQuantize:
      return check_layer_norm(c, std::get<LayerNormQuantizeAttrs>(n.attrs).epsilon);
    case OpKind::LayerNormDynamicQuantize:
      return check_layer_norm(c, std::get<LayerNormAttrs>(n.attrs).epsilon);
    case OpKind::Gather: return check_gather(c);
    case OpKind::DynamicQuantize: {
      // The codes; infer_node adds the scale and zero point outputs.
      c.expect_type(0, ElementType::f32);
      return {c.shape(0), ElementType::u8};
    }
    case OpKind::GeluDynamicQuantize: {
      // y; infer_node adds the codes, scale and zero point outputs.
      if (std::get<GeluAttrs>(n.attrs).approximation != GeluApproximation::erf) {
        c.fail("GeluDynamicQuantize computes the erf form only");
      }
      c.expect_type(0, ElementType::f32);
      return {c.shape(0), ElementType::f32};
    }
    case OpKind::GeluQuantize:
      // y; infer_node adds the codes.
      c.expect_type(0, ElementType::f32);
      return {c.shape(0), ElementType::f32};
    case OpKind::Softmax: return check_softmax(c);
    case OpKind::Attention: return check_attention(c);
    default: break;  // a category above
  }
  c.fail("no shape check for this operator");
}

}  // namespace

void infer_node(Graph& graph, NodeId id) {
  Node& node = graph.node(id);
  NodeChecker checker(graph, node);
  for (ValueId in : node.inputs) {
    const Value& v = graph.value(in);
    for (auto d : v.shape) {
      checker.expect(d >= 1, [&] {
        return "input '" + v.name + "' has an unbound or empty shape " + to_string(v.shape);
      });
    }
  }
  const std::size_t outputs = op_info(node.kind).outputs;
  checker.expect(node.outputs.size() == outputs, [&] {
    return "expected " + std::to_string(outputs) + " output(s), got " +
           std::to_string(node.outputs.size());
  });
  OutputSpec spec = check_node(checker);
  Value& out = graph.value(node.outputs[0]);
  out.shape = std::move(spec.shape);
  out.type = spec.type;
  // The further outputs.
  const auto set = [&](std::size_t i, Shape shape, ElementType type) {
    graph.value(node.outputs[i]).shape = std::move(shape);
    graph.value(node.outputs[i]).type = type;
  };
  if (node.kind == OpKind::DynamicQuantize) {
    set(1, Shape{1}, ElementType::f32);
    set(2, Shape{1}, ElementType::u8);
  } else if (node.kind == OpKind::LayerNormQuantize) {
    const auto& q = node.attr<LayerNormQuantizeAttrs>().quantize;
    set(1, out.shape, check_codes_quantization(checker, q, "LayerNormQuantize"));
  } else if (node.kind == OpKind::GeluQuantize) {
    const std::variant<ConvertAttrs, QuantizeAttrs> q = node.attr<QuantizeAttrs>();
    set(1, out.shape, check_codes_quantization(checker, q, "GeluQuantize"));
  } else if (node.kind == OpKind::LayerNormDynamicQuantize ||
             node.kind == OpKind::GeluDynamicQuantize) {
    set(1, out.shape, ElementType::u8);
    set(2, Shape{1}, ElementType::f32);
    set(3, Shape{1}, ElementType::u8);
  }
}

void infer_shapes(Graph& graph) {
  for (NodeId id : graph.topological_order()) infer_node(graph, id);
}

}  // namespace qfuse::graph
