// ONNX import: shape and data movement (Flatten, Reshape, Squeeze, Transpose, Concat, Slice, Resize), ReduceMean, Pow, Softmax.

#include <cmath>

#include "graph/onnx/import_internal.hpp"

namespace qfuse::onnx::impl {

void Importer::op_flatten(AttrReader& a) {
  Operand x = in(0);
  const std::int64_t r = rank_of(x.shape);
  std::int64_t axis = a.i("axis", 1);
  if (axis < 0) axis += r;
  expect(axis >= 0 && axis <= r, "axis out of range");
  const Shape out{dims_product(x.shape, 0, axis), dims_product(x.shape, axis, r)};
  // At another batch the first dimension follows the input's.
  const Ints spec = axis == 0 ? Ints{1, -1} : axis == 1 ? Ints{0, -1} : Ints{};
  reshape_to(x, out, spec);
  set_out(0, x);
}

void Importer::op_reshape(AttrReader& a) {
  Operand x = in(0);
  const Literal& spec = lit_in(1, "the target shape");
  const bool spec_from_shape = in(1).from_shape;
  const bool allow_zero = a.i("allowzero", 0) != 0;
  Shape out;
  std::int64_t infer_at = -1, known = 1;
  for (std::size_t k = 0; k < spec.values().size(); ++k) {
    auto d = to_int64(spec.values()[k], "target shape value");
    if (d == 0 && !allow_zero) {
      expect(k < x.shape.size(), "0 in the target shape has no input dimension to copy");
      d = x.shape[k];
    }
    if (d == -1) {
      expect(infer_at < 0, "more than one -1 in the target shape");
      infer_at = i64(k);
      d = 1;
    } else {
      expect(d >= 0, "target shape value " + std::to_string(d) + " is negative (only -1 is allowed)");
      expect(d == 0 || known <= (std::int64_t{1} << 47) / d,
             "target shape has more than 2^47 elements");
      known *= d;
    }
    out.push_back(d);
  }
  const std::int64_t total = element_count(x.shape);
  if (infer_at >= 0) {
    expect(known > 0 && total % known == 0, "cannot infer -1 in the target shape");
    out[sz(infer_at)] = total / known;
  }
  expect(element_count(out) == total, "target shape " + to_string(out) + " has " +
                                          std::to_string(element_count(out)) +
                                          " elements (expected " + std::to_string(total) + ")");
  for (auto d : out) {
    if (d < 1) unsupported("empty tensors are not supported (shape " + to_string(out) + ")");
  }
  // A constant target with 0 or -1 follows the input's shape, as ONNX
  // defines it. One computed from shapes follows the input's symbolic
  // dimensions where import traced it to them; otherwise it is fixed, and
  // so are they (fix_symbols_read_as_constants).
  Ints follow;
  if (spec_from_shape && symbolic_ && !x.literal) {
    if (std::optional<Ints> traced = traced_reshape_spec(x, in(1), allow_zero)) {
      follow = std::move(*traced);
      read_symbolically(1);
    }
  } else if (!spec_from_shape && !allow_zero) {
    for (double d : spec.values()) follow.push_back(static_cast<std::int64_t>(d));
  }
  if (std::none_of(follow.begin(), follow.end(), [](std::int64_t d) { return d <= 0; })) {
    follow.clear();
  }
  reshape_to(x, out, follow);
  set_out(0, x);
}

Ints Importer::axes_attribute_or_input(AttrReader& a, bool input_required) {
  Ints axes;
  if (opset_ < 13) {
    axes = a.ints("axes");
  } else if (input_required || has_in(1)) {
    for (double v : lit_in(1, "axes").values()) axes.push_back(to_int64(v, "axis"));
  }
  return axes;
}

void Importer::op_squeeze(AttrReader& a) {
  Operand x = in(0);
  const Ints axes = axes_attribute_or_input(a, false);
  const std::int64_t r = rank_of(x.shape);
  std::set<std::int64_t> drop;
  for (auto ax : axes) {
    const std::int64_t n = normalize_axis(ax, r, "axis");
    expect(x.shape[sz(n)] == 1, "axis " + std::to_string(ax) + " has size " +
                                    std::to_string(x.shape[sz(n)]) + " (expected 1)");
    drop.insert(n);
  }
  Shape out;
  Ints spec;  // the kept dimensions, which may be symbolic
  for (std::int64_t d = 0; d < r; ++d) {
    const bool squeeze = axes.empty() ? x.shape[sz(d)] == 1 : drop.count(d) > 0;
    if (squeeze) continue;
    spec.push_back(i64(out.size()) == d ? 0 : -2 - d);
    out.push_back(x.shape[sz(d)]);
  }
  // Without axes, a symbolic dimension of size 1 at another binding would be
  // squeezed too: the input's shape stays as given.
  if (symbolic_ && axes.empty()) {
    fix_symbols(dim_syms(x), label() + " has no axes (it squeezes whatever has size 1)");
  }
  reshape_to(x, out, symbolic_ && !x.literal && !axes.empty() ? spec : Ints{});
  set_out(0, x);
}

void Importer::op_unsqueeze(AttrReader& a) {
  Operand x = in(0);
  const Ints axes = axes_attribute_or_input(a, true);
  const std::int64_t r = rank_of(x.shape) + i64(axes.size());
  std::set<std::int64_t> add;
  for (auto ax : axes) add.insert(normalize_axis(ax, r, "axis"));
  expect(add.size() == axes.size(), "repeated axes");
  Shape out;
  Ints spec;  // 1 where inserted, else a copy of the input's dimension
  std::size_t k = 0;
  for (std::int64_t d = 0; d < r; ++d) {
    const bool inserted = add.count(d) != 0;
    spec.push_back(inserted ? 1 : i64(k) == d ? 0 : -2 - i64(k));
    out.push_back(inserted ? 1 : x.shape[k++]);
  }
  reshape_to(x, out, symbolic_ && !x.literal ? spec : Ints{});
  set_out(0, x);
}

void Importer::check_permutation(const Ints& perm, std::size_t rank) const {
  std::vector<bool> seen(rank, false);
  bool ok = perm.size() == rank;
  for (auto p : perm) {
    ok = ok && p >= 0 && p < i64(rank) && !seen[sz(p)];
    if (ok) seen[sz(p)] = true;
  }
  expect(ok, "perm " + to_string(Shape(perm.begin(), perm.end())) + " is not a permutation of " +
                 std::to_string(rank) + " axes");
}

void Importer::op_transpose(AttrReader& a) {
  Operand& x = in(0);
  Ints perm = a.ints("perm");
  if (perm.empty()) {
    for (std::size_t d = x.shape.size(); d-- > 0;) perm.push_back(i64(d));
  }
  expect(perm.size() == x.shape.size(), "perm has the wrong length");
  check_permutation(perm, x.shape.size());
  Shape out;
  for (auto p : perm) out.push_back(x.shape.at(sz(p)));
  if (x.shape.size() <= 1) {
    set_out(0, x);
    return;
  }
  Operand y = x;
  y.f32_value = ValueId{};
  y.quantized = nullptr;
  y.dq_weight = nullptr;
  y.value = emit(OpKind::Transpose, {x.value}, graph::TransposeAttrs{perm});
  if (value_type(y.value) == ElementType::f32) y.f32_value = y.value;
  y.shape = out;
  set_out(0, y);
}

void Importer::op_concat(AttrReader& a) {
  Operand& first = in(0);
  const std::int64_t axis = normalize_axis(a.i("axis", 0), rank_of(first.shape), "axis");
  std::vector<ValueId> inputs;
  Shape out = first.shape;
  out[sz(axis)] = 0;
  bool all_native = true;
  std::optional<Interval> r;
  for (std::size_t k = 0; k < num_inputs(); ++k) {
    Operand& o = in(k);
    if (o.type != first.type) malformed("inputs have different element types");
    out[sz(axis)] += o.shape.at(sz(axis));
    if (o.literal || value_type(o.value) == ElementType::f32) all_native = false;
    if (is_integer_type(o.type)) {
      const Interval q = int_range(o);
      r = r ? Interval{std::min(r->lo, q.lo), std::max(r->hi, q.hi)} : q;
    }
  }
  for (std::size_t k = 0; k < num_inputs(); ++k) {
    inputs.push_back(all_native && !is_float(first.type) ? in(k).value : f32(in(k)));
  }
  const ValueId y = emit(OpKind::Concat, std::move(inputs), graph::ConcatAttrs{axis});
  Operand o;
  o.type = first.type;
  o.value = y;
  o.shape = out;
  o.range = r;
  if (value_type(y) == ElementType::f32) o.f32_value = y;
  set_out(0, o);
}

// A slice of a runtime tensor (slices of constants fold in try_fold).
void Importer::op_slice(AttrReader&) {
  Operand& x = in(0);
  const Values& starts = lit_in(1, "starts").values();
  const Values& ends = lit_in(2, "ends").values();
  const std::int64_t r = rank_of(x.shape);
  Values axes;
  if (has_in(3)) axes = lit_in(3, "axes").values();
  if (axes.empty()) {
    for (std::size_t d = 0; d < starts.size(); ++d) axes.push_back(static_cast<double>(d));
  }
  expect(starts.size() == axes.size() && ends.size() == axes.size(),
         "starts, ends and axes differ in length");
  if (has_in(4)) {
    for (double st : lit_in(4, "steps").values()) {
      expect(st != 0.0, "a step is 0 (steps must be non-zero)");
      if (st != 1.0) unsupported("steps other than 1 on a runtime tensor are not supported");
    }
  }
  graph::SliceAttrs sa;
  sa.begin.assign(sz(r), 0);
  sa.size = x.shape;
  for (std::size_t k = 0; k < axes.size(); ++k) {
    const std::int64_t ax = normalize_axis(to_int64(axes[k], "axis"), r, "axis");
    const double dim = static_cast<double>(x.shape[sz(ax)]);
    const auto clampd = [dim](double v) { return std::clamp(v < 0 ? v + dim : v, 0.0, dim); };
    const auto b = static_cast<std::int64_t>(clampd(starts[k]));
    const auto e = static_cast<std::int64_t>(clampd(ends[k]));
    if (e <= b) unsupported("the slice of axis " + std::to_string(ax) + " is empty");
    sa.begin[sz(ax)] = b;
    sa.size[sz(ax)] = e - b;
  }
  if (sa.size == x.shape) {
    set_out(0, x);
    return;
  }
  Operand y = x;
  y.f32_value = ValueId{};
  y.quantized = nullptr;
  y.dq_weight = nullptr;
  y.value = emit(OpKind::Slice, {x.value}, sa);
  if (value_type(y.value) == ElementType::f32) y.f32_value = y.value;
  y.shape = sa.size;
  set_out(0, y);
}

// The sizes Split cuts `dim` into for `outputs` outputs: the split attribute
// (opset 11-12) or input (13 on), else equal parts; from opset 18 the parts
// are num_outputs of ceil(dim / num_outputs), the last one what is left.
std::vector<std::int64_t> Importer::split_sizes(AttrReader& a, std::int64_t dim) {
  const auto outputs = static_cast<std::int64_t>(node_->output_size());
  std::vector<std::int64_t> sizes;
  if (has_in(1)) {
    if (a.has("num_outputs")) malformed("both the split input and num_outputs are given");
    for (double v : lit_in(1, "split").values()) sizes.push_back(to_int64(v, "split"));
  } else if (a.has("split")) {
    sizes = a.ints("split");
  } else if (a.has("num_outputs")) {
    const std::int64_t n = a.i("num_outputs", 0);
    expect(n == outputs, "num_outputs is " + std::to_string(n) + " for " +
                             std::to_string(outputs) + " outputs");
    const std::int64_t part = (dim + n - 1) / n;
    for (std::int64_t k = 0, left = dim; k < n; ++k, left -= part) {
      sizes.push_back(std::min(part, left));
    }
  } else {
    expect(outputs >= 1 && dim % outputs == 0,
           "dimension " + std::to_string(dim) + " does not split into " +
               std::to_string(outputs) + " equal parts");
    sizes.assign(static_cast<std::size_t>(outputs), dim / std::max<std::int64_t>(outputs, 1));
  }
  expect(static_cast<std::int64_t>(sizes.size()) == outputs,
         "split has " + std::to_string(sizes.size()) + " sizes for " + std::to_string(outputs) +
             " outputs");
  std::int64_t total = 0;
  for (std::int64_t n : sizes) {
    if (n <= 0) unsupported("a part of size " + std::to_string(n) + " (empty parts)");
    total += n;
  }
  expect(total == dim, "the parts sum to " + std::to_string(total) + ", not the dimension " +
                           std::to_string(dim));
  return sizes;
}

// Split (torch.chunk, YOLO's C2f): one Slice per output along the axis.
void Importer::op_split(AttrReader& a) {
  Operand& x = in(0);
  const std::int64_t r = rank_of(x.shape);
  const std::int64_t axis = normalize_axis(a.i("axis", 0), r, "axis");
  const std::vector<std::int64_t> sizes = split_sizes(a, x.shape[sz(axis)]);
  std::int64_t begin = 0;
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    graph::SliceAttrs sa;
    sa.begin.assign(sz(r), 0);
    sa.begin[sz(axis)] = begin;
    sa.size = x.shape;
    sa.size[sz(axis)] = sizes[k];
    begin += sizes[k];
    if (node_->output(static_cast<int>(k)).empty()) continue;
    if (sizes.size() == 1) {
      set_out(k, x);
      continue;
    }
    Operand y = x;
    y.f32_value = ValueId{};
    y.quantized = nullptr;
    y.dq_weight = nullptr;
    y.value = emit(OpKind::Slice, {x.value}, sa, std::to_string(k));
    if (value_type(y.value) == ElementType::f32) y.f32_value = y.value;
    y.shape = sa.size;
    set_out(k, y);
  }
}

void Importer::op_reduce_mean(AttrReader& a) {
  // The mean that starts a spelled-out LayerNorm imports the LayerNorm too;
  // the mean itself is imported below all the same, and dies unread.
  try_spelled_out_layer_norm(a);
  Operand& x = in(0);
  require_float(x, "the input");
  const std::int64_t r = rank_of(x.shape);
  // Axes are an attribute below opset 18 and a constant input from 18.
  Ints axes;
  if (has_in(1)) {
    for (double v : lit_in(1, "axes").values()) axes.push_back(to_int64(v, "axis"));
  } else {
    axes = a.ints("axes");
  }
  if (axes.empty()) {
    if (a.i("noop_with_empty_axes", 0) != 0) {
      set_out(0, x);
      return;
    }
    for (std::int64_t d = 0; d < r; ++d) axes.push_back(d);
  }
  const bool keepdims = a.i("keepdims", 1) != 0;
  Shape kept = x.shape;
  std::set<std::int64_t> reduced;
  for (auto ax : axes) reduced.insert(normalize_axis(ax, r, "axis"));
  expect(reduced.size() == axes.size(), "repeated axes");
  Shape dropped;
  for (std::int64_t d = 0; d < r; ++d) {
    if (reduced.count(d)) {
      kept[sz(d)] = 1;
    } else {
      dropped.push_back(x.shape[sz(d)]);
    }
  }
  // The mean over the height and width of an image (torchvision's
  // x.mean([2, 3])) is a global average pool, which the passes run on the
  // codes when a quantized layer writes x (requantize_avg_pool).
  const bool global_pool = r == 4 && reduced == std::set<std::int64_t>{2, 3};
  graph::PoolAttrs pool;
  if (global_pool) pool.kernel.assign(x.shape.begin() + 2, x.shape.end());
  Operand y = global_pool
                  ? make_float(emit(OpKind::AvgPool, {f32(x)}, pool), kept)
                  : make_float(emit(OpKind::ReduceMean, {f32(x)},
                                    graph::ReduceAttrs{Ints(reduced.begin(), reduced.end())}),
                               kept);
  if (!keepdims) reshape_to(y, dropped);
  set_out(0, y);
}

void Importer::op_pow(AttrReader&) {
  Operand& x = in(0);
  require_float(x, "the base");
  const Literal& e = lit_in(1, "the exponent");
  if (e.values().size() != 1) unsupported("only a single-valued exponent is supported");
  const auto p = static_cast<float>(e.values()[0]);
  set_out(0, make_float(emit(OpKind::Power, {f32(x)}, graph::PowerAttrs{p}), x.shape));
}

void Importer::op_softmax(AttrReader& a) {
  Operand& x = in(0);
  require_float(x, "the input");
  expect(rank_of(x.shape) >= 1, "the input must have rank >= 1");
  const bool by_axis = opset_ >= 13;
  set_out(0, softmax(f32(x), x.shape, a.i("axis", by_axis ? -1 : 1), by_axis));
}

Operand Importer::softmax(ValueId x, const Shape& shape, std::int64_t axis_attr, bool by_axis) {
  const std::int64_t r = rank_of(shape);
  const std::int64_t axis = normalize_axis(axis_attr, r, "axis");
  if (by_axis) {
    return make_float(emit(OpKind::Softmax, {x}, graph::SoftmaxAttrs{axis}), shape);
  }
  // Before opset 13 the input is read as a matrix [d0 * .. * d(axis-1), rest].
  Operand y = make_float(x, shape);
  reshape_to(y, {dims_product(shape, 0, axis), dims_product(shape, axis, r)});
  Operand z = make_float(emit(OpKind::Softmax, {f32(y)}, graph::SoftmaxAttrs{1}), y.shape);
  reshape_to(z, shape);
  return z;
}

// LayerNormalization (opset 17) over the last axis: one LayerNorm node
// (oneDNN's layer normalization). Scale and bias are constants of the last
// dimension's size (bias zero when absent); the Mean and InvStdDev outputs
// are not supported.
void Importer::op_layer_norm(AttrReader& a) {
  max_outputs(1);
  Operand& x = in(0);
  require_float(x, "the input");
  const std::int64_t r = rank_of(x.shape);
  expect(r >= 2, "the input must have rank >= 2");
  const std::int64_t axis = normalize_axis(a.i("axis", -1), r, "axis");
  if (axis != r - 1) {
    unsupported("axis " + std::to_string(axis) + " (qfuse normalizes over the last axis only)");
  }
  const std::int64_t c = x.shape.back();
  const auto vector_of = [&](std::size_t i, const char* what, double fill) {
    if (!has_in(i)) return f32_constant(Values(sz(c), fill), {c}, what);
    const Literal& l = lit_in(i, what);
    expect(element_count(l.shape) == c, std::string(what) + " has " +
                                            std::to_string(element_count(l.shape)) +
                                            " values (expected " + std::to_string(c) + ")");
    return f32_constant(l.values(), {c}, what);
  };
  const ValueId scale = vector_of(1, "scale", 1.0);
  const ValueId bias = vector_of(2, "bias", 0.0);
  const float eps = a.f("epsilon", 1e-5f);
  expect(std::isfinite(eps) && eps >= 0.0f, "epsilon must be finite and >= 0");
  set_out(0, make_float(emit(OpKind::LayerNorm, {f32(x), scale, bias}, graph::LayerNormAttrs{eps}),
                        x.shape));
}

void Importer::op_resize(AttrReader& a) {
  Operand& x = in(0);
  require_float(x, "the input");
  graph::ResizeAttrs r;
  const std::string mode = a.s("mode", "nearest");
  if (mode == "nearest") {
    r.mode = graph::ResizeMode::nearest;
  } else if (mode == "linear") {
    r.mode = graph::ResizeMode::linear;
  } else {
    a.unsupported_value("mode", "value '" + mode + "' (expected nearest or linear)");
  }
  std::size_t scales_i = 1, sizes_i = 3;
  if (opset_ < 11) {
    // Resize-10: (X, scales), asymmetric coordinates, nearest rounds down.
    r.transform = graph::CoordinateTransform::asymmetric;
    r.nearest_mode = graph::NearestMode::floor;
    sizes_i = 99;
  } else {
    scales_i = 2;
    const std::string t = a.s("coordinate_transformation_mode", "half_pixel");
    const auto transform = graph::coordinate_transform_named(t);
    if (!transform) a.unsupported_value("coordinate_transformation_mode", "value '" + t + "'");
    r.transform = *transform;
    const std::string nm = a.s("nearest_mode", "round_prefer_floor");
    const auto nearest = graph::nearest_mode_named(nm);
    if (!nearest) a.unsupported_value("nearest_mode", "value '" + nm + "'");
    r.nearest_mode = *nearest;
    a.ignore("cubic_coeff_a");        // cubic mode only
    a.ignore("extrapolation_value");  // tf_crop_and_resize only
    ignore_input(1);                  // roi: tf_crop_and_resize only, refused above
    if (a.i("exclude_outside", 0) != 0) a.unsupported_value("exclude_outside", "= 1");
    // Opset 18: antialias changes only linear / cubic downscaling, and
    // keep_aspect_ratio_policy only output sizes; a partial `axes` is refused.
    if (a.i("antialias", 0) != 0 && r.mode != graph::ResizeMode::nearest) {
      a.unsupported_value("antialias", "= 1 with mode " + mode);
    }
    const std::string policy = a.s("keep_aspect_ratio_policy", "stretch");
    if (policy != "stretch") a.unsupported_value("keep_aspect_ratio_policy", "value '" + policy + "'");
    const Ints axes = a.ints("axes");
    for (std::size_t d = 0; d < axes.size(); ++d) {
      const auto rank = static_cast<std::int64_t>(x.shape.size());
      if (axes.size() != x.shape.size() || normalize_axis(axes[d], rank, "axis") != i64(d)) {
        a.unsupported_value("axes", "other than all axes in order");
      }
    }
  }
  const std::size_t rank = x.shape.size();
  if (has_in(sizes_i)) {
    ignore_input(scales_i);  // empty when sizes are given
    const Literal& s = lit_in(sizes_i, "sizes");
    expect(s.values().size() == rank, "sizes has the wrong length");
    for (double v : s.values()) r.sizes.push_back(to_int64(v, "size"));
  } else {
    const Literal& s = lit_in(scales_i, "scales");
    expect(s.values().size() == rank, "scales has the wrong length");
    for (std::size_t d = 0; d < rank; ++d) {
      const auto scale = static_cast<float>(s.values()[d]);
      r.scales.push_back(scale);
      r.sizes.push_back(to_int64(
          std::floor(static_cast<double>(x.shape[d]) * static_cast<double>(scale)), "output size"));
    }
  }
  const ValueId y = emit(OpKind::Resize, {f32(x)}, r);
  set_out(0, make_float(y, value_shape(y)));
}

}  // namespace qfuse::onnx::impl

namespace qfuse::onnx::impl {

// Gather of rows (embeddings by token ids, x[:, 0]): one Gather node on the
// data (a constant table or a runtime tensor) by the indices in their own
// integer type; constant indices are checked here. u8 / s8 data (ONNX
// Runtime's quantized embeddings: an int8 table, Gather, DequantizeLinear)
// is gathered as codes, and the DequantizeLinear after it reads them.
void Importer::gather_rows(AttrReader& a, Operand& data, Operand& idx) {
  const bool codes = data.type == kUint8 || data.type == kInt8;
  if (!codes && data.type != kFloat) {
    unsupported("Gather from " + onnx_type_name(data.type) + " data (qfuse gathers FLOAT, "
                "UINT8 and INT8 rows)");
  }
  const std::int64_t rank = rank_of(data.shape);
  if (rank < 1) malformed("Gather's data is a scalar");
  const std::int64_t axis = normalize_axis(a.i("axis", 0), rank, "axis");
  if (idx.literal) {
    const std::int64_t d = data.shape[sz(axis)];
    for (double v : idx.literal->values()) {
      if (v < static_cast<double>(-d) || v >= static_cast<double>(d)) {
        malformed("index " + std::to_string(static_cast<std::int64_t>(v)) + " is out of range for " +
                  "axis " + std::to_string(axis) + " of length " + std::to_string(d));
      }
    }
  }
  // The first n rows, n a symbolic dimension (position embeddings of a
  // sequence): a Slice whose size follows it, not n rows fixed at import.
  if (const auto arange = symbolic_arange(idx); arange && data.literal && !data.from_shape) {
    const auto& [dim, along] = *arange;
    const ValueId table = !codes ? f32(data) : constant(*data.literal, data.literal->shape, "table");
    graph::SliceAttrs box{Ints(data.shape.size(), 0), data.shape};
    box.size[sz(axis)] = idx.shape[along];
    box.size_dims.assign(data.shape.size(), "");
    box.size_dims[sz(axis)] = dim;
    const ValueId rows = emit(OpKind::Slice, {table}, box);
    // [.., n, ..] to [.., indices' shape, ..]: a copy of each dimension but
    // the indices' 1s.
    Shape logical(data.shape.begin(), data.shape.begin() + axis);
    Ints spec;
    spec.assign(sz(axis), 0);  // the dimensions before the axis, in place
    for (std::size_t j = 0; j < idx.shape.size(); ++j) {
      logical.push_back(idx.shape[j]);
      spec.push_back(j == along ? -2 - axis : 1);
    }
    for (std::int64_t j = axis + 1; j < rank; ++j) {
      logical.push_back(data.shape[sz(j)]);
      spec.push_back(-2 - j);
    }
    for (std::size_t j = 0; j < spec.size(); ++j) {
      if (spec[j] == -2 - i64(j)) spec[j] = 0;
    }
    Operand out = make_float(rows, value_shape(rows));
    if (codes) {
      out.type = data.type;
      out.range = range_of(data.literal->values());
    }
    reshape_to(out, logical, spec);
    read_symbolically(1);
    set_out(0, out);
    return;
  }
  const ValueId indices = idx.literal ? constant(*idx.literal, idx.literal->shape, "indices")
                                      : value_type(idx.value) == ElementType::f32 ||
                                                value_type(idx.value) == ElementType::s32 ||
                                                value_type(idx.value) == ElementType::s64
                                            ? idx.value
                                            : f32(idx);
  const ValueId table = !codes        ? f32(data)
                        : data.literal ? constant(*data.literal, data.literal->shape, "table")
                                       : data.value;
  const ValueId y = emit(OpKind::Gather, {table, indices}, graph::GatherAttrs{axis});
  // ONNX's shape: a scalar index (x[:, 0]) drops the axis; the IR carries it as [1].
  Shape logical(data.shape.begin(), data.shape.begin() + axis);
  logical.insert(logical.end(), idx.shape.begin(), idx.shape.end());
  logical.insert(logical.end(), data.shape.begin() + axis + 1, data.shape.end());
  Operand out = make_float(y, value_shape(y));
  if (codes) {
    out.type = data.type;
    out.range = data.range || !data.literal ? data.range : range_of(data.literal->values());
  }
  if (out.shape != logical) reshape_to(out, logical);
  set_out(0, out);
}

void Importer::op_gather(AttrReader& a) {
  Operand& data = in(0);
  Operand& idx = in(1);
  if (!is_integer_type(idx.type)) malformed("the indices are not integers");
  if (!data.literal || data.shape.size() != 1 || data.literal->values().size() != 256 ||
      (data.type != kUint8 && data.type != kInt8)) {
    gather_rows(a, data, idx);
    return;
  }
  (void)normalize_axis(a.i("axis", 0), 1, "axis");
  const Values& t = data.literal->values();
  const Interval r = int_range(idx);
  const auto byte = [](double v) { return static_cast<std::uint8_t>(static_cast<std::int32_t>(v)); };
  std::vector<std::uint8_t> table(256);
  ElementType codes = ElementType::u8;
  if (r.lo >= 0 && r.hi <= 255) {
    for (std::size_t k = 0; k < 256; ++k) table[k] = byte(t[k]);
  } else if (r.lo >= -128 && r.hi <= 127) {
    // s8 codes: code k - 128 reads entry k - 128, negative ones from the end.
    codes = ElementType::s8;
    for (std::size_t k = 0; k < 256; ++k) table[k] = byte(t[(k + 128) % 256]);
  } else {
    // Indices beyond a byte's range: rows of the table, gathered as codes.
    gather_rows(a, data, idx);
    return;
  }
  const ElementType to = data.type == kUint8 ? ElementType::u8 : ElementType::s8;
  const ValueId c = emit(OpKind::Convert, {f32(idx)}, graph::ConvertAttrs{codes}, "codes");
  const ValueId y = emit(OpKind::Lookup, {c}, graph::LookupAttrs{std::move(table), to});
  Operand o;
  o.type = data.type;
  o.value = y;
  o.shape = idx.shape;
  o.range = range_of(t);
  set_out(0, o);
}

}  // namespace qfuse::onnx::impl
