// OpenVINO IR import: convolutions, MatMul, pools, ReduceMean, SoftMax, MVN
// and Interpolate.

#include <algorithm>
#include <cmath>

#include "graph/openvino/import_internal.hpp"

namespace qfuse::openvino::impl {

graph::AutoPad Importer::auto_pad(AttrReader& a) {
  const std::string p = a.s("auto_pad", "explicit");
  if (p == "explicit" || p == "notset") return graph::AutoPad::explicit_pads;
  if (p == "same_upper") return graph::AutoPad::same_upper;
  if (p == "same_lower") return graph::AutoPad::same_lower;
  if (p == "valid") return graph::AutoPad::valid;
  a.unsupported_value("auto_pad", "'" + p + "' (expected explicit, same_upper, same_lower or valid)");
}

void Importer::window_attrs(AttrReader& a, std::size_t spatial, graph::Ints& strides,
                            graph::Ints& dilations, graph::Ints& pads_begin,
                            graph::Ints& pads_end) {
  strides = a.ints("strides", Ints(spatial, 1));
  dilations = a.ints("dilations", Ints(spatial, 1));
  pads_begin = a.ints("pads_begin", Ints(spatial, 0));
  pads_end = a.ints("pads_end", Ints(spatial, 0));
  expect(strides.size() == spatial && dilations.size() == spatial &&
             pads_begin.size() == spatial && pads_end.size() == spatial,
         "strides, dilations, pads_begin and pads_end need " + std::to_string(spatial) +
             " values each");
  for (std::size_t i = 0; i < spatial; ++i) {
    expect(strides[i] >= 1 && dilations[i] >= 1, "strides and dilations must be at least 1");
    expect(pads_begin[i] >= 0 && pads_end[i] >= 0, "pads must not be negative");
  }
}

void Importer::expect_layer_operands(const Operand& x, const Operand& w,
                                     std::size_t extra_rank) const {
  require_float(x, "the input");
  require_float(w, "the weights");
  expect(x.shape.size() >= 3 && x.shape.size() <= 5 && w.shape.size() == x.shape.size() + extra_rank,
         "input " + to_string(x.shape) + " and weights " + to_string(w.shape) +
             (extra_rank == 0 ? " (expected rank 3 to 5, the same for both)"
                              : " (expected weights [G, O/G, C/G, k...] of the input's rank + 1)"));
}

// Convolution(x [N, C, spatial...], w [O, C, k...]); the bias is an Add after
// it, which the passes fuse.
void Importer::op_convolution(AttrReader& a) {
  expect_ports(2, 2, 1);
  Operand& x = in(0);
  Operand& w = in(1);
  expect_layer_operands(x, w, 0);
  graph::ConvAttrs c;
  window_attrs(a, x.shape.size() - 2, c.strides, c.dilations, c.pads_begin, c.pads_end);
  graph::apply_auto_pad(auto_pad(a), x.shape, Ints(w.shape.begin() + 2, w.shape.end()), c.strides,
                        c.dilations, c.pads_begin, c.pads_end);
  const ValueId vx = f32(x);
  const ValueId y = emit(OpKind::Convolution, {vx, f32(w)}, c);
  set_out(0, make_float(y, graph_.value(y).shape));
}

// GroupConvolution(x, w [G, O/G, C/G, k...]): a Convolution of G groups on
// the weights reshaped to [O, C/G, k...].
void Importer::op_group_convolution(AttrReader& a) {
  expect_ports(2, 2, 1);
  Operand& x = in(0);
  Operand& w = in(1);
  expect_layer_operands(x, w, 1);
  graph::ConvAttrs c;
  c.groups = w.shape[0];
  window_attrs(a, x.shape.size() - 2, c.strides, c.dilations, c.pads_begin, c.pads_end);
  Shape ws(w.shape.begin() + 1, w.shape.end());
  ws[0] *= w.shape[0];
  graph::apply_auto_pad(auto_pad(a), x.shape, Ints(ws.begin() + 2, ws.end()), c.strides,
                        c.dilations, c.pads_begin, c.pads_end);
  Operand grouped = reshape(w, ws, "weights");
  const ValueId vx = f32(x);
  const ValueId y = emit(OpKind::Convolution, {vx, f32(grouped)}, c);
  set_out(0, make_float(y, graph_.value(y).shape));
}

// ConvolutionBackpropData(x, w [C_in, C_out, k...]) without output_shape:
// qfuse's Deconvolution.
void Importer::op_convolution_backprop_data(AttrReader& a) {
  expect_ports(2, 3, 1);
  if (num_inputs() == 3) unsupported("the output_shape input is not supported");
  Operand& x = in(0);
  Operand& w = in(1);
  expect_layer_operands(x, w, 0);
  const std::size_t spatial = x.shape.size() - 2;
  graph::DeconvAttrs d;
  window_attrs(a, spatial, d.strides, d.dilations, d.pads_begin, d.pads_end);
  d.output_padding = a.ints("output_padding", Ints(spatial, 0));
  expect(d.output_padding.size() == spatial, "output_padding needs one value per spatial dimension");
  const graph::AutoPad pad = auto_pad(a);
  if (pad == graph::AutoPad::valid) {
    std::fill(d.pads_begin.begin(), d.pads_begin.end(), 0);
    std::fill(d.pads_end.begin(), d.pads_end.end(), 0);
  } else if (pad != graph::AutoPad::explicit_pads) {
    a.unsupported_value("auto_pad", "same_upper / same_lower (they need output_shape)");
  }
  const ValueId vx = f32(x);
  const ValueId y = emit(OpKind::Deconvolution, {vx, f32(w)}, d);
  set_out(0, make_float(y, graph_.value(y).shape));
}

// MatMul(A, B): a fully-connected layer when B is a known matrix (weights,
// compressed or FakeQuantized; [N, K] as qfuse's FullyConnected reads it,
// which transpose_b = true gives as is), else qfuse's MatMul.
void Importer::op_matmul(AttrReader& a) {
  expect_ports(2, 2, 1);
  const bool ta = a.b("transpose_a", false), tb = a.b("transpose_b", false);
  Operand& A = in(0);
  Operand& B = in(1);
  require_float(A, "A");
  require_float(B, "B");
  expect(A.shape.size() >= 2 && B.shape.size() >= 2,
         "operands of rank 1 are not supported (A " + to_string(A.shape) + ", B " +
             to_string(B.shape) + ")");
  const ValueId va = f32(A);
  ValueId y;
  if (B.known() && B.shape.size() == 2 && !ta) {
    Operand w = tb ? B : transposed_known(B, {1, 0});
    expect(w.shape[1] == A.shape.back(), "A " + to_string(A.shape) + " and B " +
                                             to_string(B.shape) + " differ in K");
    y = emit(OpKind::FullyConnected, {va, f32(w)});
  } else {
    y = emit(OpKind::MatMul, {va, f32(B)}, graph::MatMulAttrs{ta, tb});
  }
  set_out(0, make_float(y, graph_.value(y).shape));
}

// MaxPool (opset1; opset8 with dilations and an indices output nothing may
// read) and AvgPool (opset1).
void Importer::op_pool(AttrReader& a) {
  const bool is_max = layer_->type == "MaxPool";
  const bool v8 = layer_->version == "opset8";
  expect_ports(1, 1, v8 ? 2 : 1);
  if (v8 && output_read(1)) unsupported("its indices output (port " + std::to_string(layer_->outputs[1].id) + ") is read");
  if (v8) {
    a.ignore("index_element_type");
    a.ignore("axis");
  }
  Operand& x = in(0);
  require_float(x, "the input");
  expect(x.shape.size() >= 3 && x.shape.size() <= 5, "input rank must be 3 to 5");
  const std::size_t spatial = x.shape.size() - 2;
  graph::PoolAttrs p;
  p.kernel = a.ints("kernel", {});
  expect(p.kernel.size() == spatial, "kernel needs " + std::to_string(spatial) + " values");
  for (std::int64_t k : p.kernel) expect(k >= 1, "kernel sizes must be at least 1");
  window_attrs(a, spatial, p.strides, p.dilations, p.pads_begin, p.pads_end);
  if (!is_max) p.exclude_pad = a.b("exclude-pad", false);
  graph::apply_auto_pad(auto_pad(a), x.shape, p.kernel, p.strides, p.dilations, p.pads_begin,
                        p.pads_end);
  const std::string rounding = a.s("rounding_type", "floor");
  if (rounding == "ceil") {
    if (auto problem = graph::add_ceil_mode_padding(p, x.shape, is_max)) {
      a.unsupported_value("rounding_type", "'ceil' " + *problem);
    }
  } else if (rounding != "floor") {
    a.unsupported_value("rounding_type", "'" + rounding + "' (expected floor or ceil)");
  }
  if (!is_max) p.dilations.clear();
  const ValueId y = emit(is_max ? OpKind::MaxPool : OpKind::AvgPool, {f32(x)}, p);
  set_out(0, make_float(y, graph_.value(y).shape));
}

void Importer::op_reduce_mean(AttrReader& a) {
  expect_ports(2, 2, 1);
  const bool keep = a.b("keep_dims", false);
  Operand& x = in(0);
  require_float(x, "the input");
  const std::int64_t r = i64(x.shape.size());
  Ints axes;
  for (std::int64_t axis : ints_in(1, "axes")) axes.push_back(normalize_axis(axis, r, "axis"));
  std::sort(axes.begin(), axes.end());
  axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
  Shape out;
  for (std::int64_t d = 0; d < r; ++d) {
    const bool reduced = std::binary_search(axes.begin(), axes.end(), d);
    if (!reduced) out.push_back(x.shape[sz(d)]);
    if (reduced && keep) out.push_back(1);
  }
  if (axes.empty()) {
    set_out(0, x);
    return;
  }
  set_out(0, make_float(emit(OpKind::ReduceMean, {f32(x)}, graph::ReduceAttrs{axes}), out));
}

void Importer::op_softmax(AttrReader& a) {
  expect_ports(1, 1, 1);
  Operand& x = in(0);
  require_float(x, "the input");
  const std::int64_t axis = a.i("axis", 1);
  if (layer_->version == "opset1") expect(axis >= 0, "axis " + std::to_string(axis) + " (opset1 takes no negative axis)");
  graph::SoftmaxAttrs s;
  s.axis = normalize_axis(axis, i64(x.shape.size()), "axis");
  set_out(0, make_float(emit(OpKind::Softmax, {f32(x)}, s), x.shape));
}

// MVN(x, axes), opset6, over the last dimension with the variance
// normalized and eps inside the square root: layer normalization,
// (x - mean) / sqrt(var + eps) (qfuse's LayerNorm, scale 1 and bias 0; the
// Multiply and Add after it stay ops of their own).
void Importer::op_mvn(AttrReader& a) {
  expect_ports(2, 2, 1);
  Operand& x = in(0);
  require_float(x, "the input");
  const std::int64_t r = i64(x.shape.size());
  const bool normalize_variance = a.b("normalize_variance", true);
  const double eps = a.f("eps", 0.0);
  if (!a.has("eps")) malformed("attribute 'eps' is missing");
  const std::string mode = a.s("eps_mode", "");
  if (mode != "inside_sqrt" && mode != "outside_sqrt") {
    malformed("eps_mode is '" + mode + "' (expected inside_sqrt or outside_sqrt)");
  }
  if (!normalize_variance) a.unsupported_value("normalize_variance", "= false (only a LayerNorm is read)");
  if (mode == "outside_sqrt" && eps != 0.0) {
    a.unsupported_value("eps_mode", "'outside_sqrt' (qfuse's LayerNorm adds eps inside the root)");
  }
  Ints axes;
  for (std::int64_t axis : ints_in(1, "axes")) axes.push_back(normalize_axis(axis, r, "axis"));
  if (axes != Ints{r - 1}) {
    unsupported("normalizes over axes " + to_string(axes) + " (only the last, " +
                std::to_string(r - 1) + ", is read: LayerNorm)");
  }
  const std::int64_t c = x.shape.back();
  const ValueId vx = f32(x);
  const ValueId scale = f32_constant(Values(sz(c), 1.0), {c}, "scale");
  const ValueId bias = f32_constant(Values(sz(c), 0.0), {c}, "bias");
  const ValueId y = emit(OpKind::LayerNorm, {vx, scale, bias},
                         graph::LayerNormAttrs{static_cast<float>(eps)});
  set_out(0, make_float(y, x.shape));
}

// Interpolate opset4 (data, sizes, scales[, axes]) and opset11 (data,
// scales_or_sizes[, axes]), nearest and linear_onnx without padding or
// antialiasing: qfuse's Resize (ONNX's Resize semantics, which these modes
// share).
void Importer::op_interpolate(AttrReader& a) {
  const bool v4 = layer_->version == "opset4";
  expect_ports(v4 ? 3 : 2, v4 ? 4 : 3, 1);
  Operand& x = in(0);
  require_float(x, "the input");
  const std::size_t r = x.shape.size();
  graph::ResizeAttrs ra;
  const std::string mode = a.required("mode");
  if (mode == "nearest") {
    ra.mode = graph::ResizeMode::nearest;
  } else if (mode == "linear_onnx") {
    ra.mode = graph::ResizeMode::linear;
  } else {
    a.unsupported_value("mode", "'" + mode + "' (expected nearest or linear_onnx)");
  }
  const std::string transform = a.s("coordinate_transformation_mode", "half_pixel");
  const auto t = graph::coordinate_transform_named(transform);
  if (!t) a.unsupported_value("coordinate_transformation_mode", "'" + transform + "'");
  ra.transform = *t;
  const std::string nearest = a.s("nearest_mode", "round_prefer_floor");
  const auto nm = graph::nearest_mode_named(nearest);
  if (!nm) a.unsupported_value("nearest_mode", "'" + nearest + "'");
  ra.nearest_mode = *nm;
  if (a.b("antialias", false)) a.unsupported_value("antialias", "= true");
  for (const char* pads : {"pads_begin", "pads_end"}) {
    const Ints p = a.ints(pads, {});
    if (std::any_of(p.begin(), p.end(), [](std::int64_t v) { return v != 0; })) {
      a.unsupported_value(pads, "other than 0");
    }
  }
  a.ignore("cube_coeff");
  const std::string calc = a.required("shape_calculation_mode");
  if (calc != "sizes" && calc != "scales") {
    malformed("shape_calculation_mode is '" + calc + "' (expected sizes or scales)");
  }
  const std::size_t axes_input = v4 ? 3 : 2;
  Ints axes;
  if (num_inputs() > axes_input) {
    for (std::int64_t v : ints_in(axes_input, "axes")) {
      axes.push_back(normalize_axis(v, i64(r), "axis"));
    }
  } else {
    for (std::size_t d = 0; d < r; ++d) axes.push_back(i64(d));
  }
  Shape out = x.shape;
  std::vector<float> scales(r, 1.0f);
  if (calc == "sizes") {
    const Ints sizes = ints_in(1, "sizes");
    expect(sizes.size() == axes.size(), "sizes has " + std::to_string(sizes.size()) +
                                            " values for " + std::to_string(axes.size()) + " axes");
    for (std::size_t k = 0; k < axes.size(); ++k) {
      expect(sizes[k] >= 1, "size " + std::to_string(sizes[k]));
      out[sz(axes[k])] = sizes[k];
    }
  } else {
    const Values s = values_in(v4 ? 2 : 1, "scales");
    expect(s.size() == axes.size(), "scales has " + std::to_string(s.size()) + " values for " +
                                        std::to_string(axes.size()) + " axes");
    for (std::size_t k = 0; k < axes.size(); ++k) {
      const float f = static_cast<float>(s[k]);
      expect(std::isfinite(f) && f > 0.0f, "scale " + std::to_string(s[k]));
      scales[sz(axes[k])] = f;
      // OpenVINO's output size: floor(dim * scale), a hair of tolerance for
      // scales like 1/3 written in f32.
      out[sz(axes[k])] = static_cast<std::int64_t>(
          std::floor(static_cast<double>(f) * static_cast<double>(x.shape[sz(axes[k])]) + 1e-5));
      expect(out[sz(axes[k])] >= 1, "scale " + std::to_string(s[k]) + " leaves an empty output");
    }
    ra.scales = scales;
  }
  ra.sizes = out;
  set_out(0, make_float(emit(OpKind::Resize, {f32(x)}, ra), out));
}

}  // namespace qfuse::openvino::impl
