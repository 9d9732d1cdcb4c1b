// One oneDNN int8 primitive per quantized layer: u8/s8 source (with an
// optional source zero point), s8 weights reordered once into the layout the
// implementation wants, f32 bias in accumulator units, and the composer's
// output scales and post-ops.

#include "plugin/executable_ops/quantized_layer.hpp"

#include <algorithm>
#include <any>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <mutex>
#include <numeric>
#include <unordered_map>
#include <variant>

#include <omp.h>
#include <spdlog/spdlog.h>

#include "composer/chain_key.hpp"
#include "composer/composer.hpp"
#include "composer/integer_plan.hpp"
#include "graph/op_info.hpp"
#include "plugin/executable_ops/depthwise_kernel.hpp"
#include "plugin/executable_ops/integer_kernels.hpp"
#include "plugin/executable_ops/quantize_spans.hpp"
#include "plugin/post_ops_attr.hpp"
#include "plugin/dnnl_utils.hpp"
#include "plugin/transpose.hpp"

namespace qfuse::plugin {
namespace {

using dnnl::memory;
using graph::Node;
using graph::OpKind;
using graph::QuantizedLayerAttrs;
using graph::ValueId;

memory::dims to_dims(const graph::Ints& v) { return memory::dims(v.begin(), v.end()); }
std::vector<int> to_int_perm(const graph::Ints& perm) {
  std::vector<int> p;
  for (const std::int64_t d : perm) p.push_back(static_cast<int>(d));
  return p;
}

// u8 -> s8 by w - 128: flipping the top bit of each byte, eight at a time.
void shift_u8_to_s8(const std::uint8_t* in, std::uint8_t* out, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    std::uint64_t v;
    std::memcpy(&v, in + i, 8);
    v ^= 0x8080808080808080ULL;
    std::memcpy(out + i, &v, 8);
  }
  for (; i < n; ++i) out[i] = static_cast<std::uint8_t>(in[i] ^ 0x80u);
}

// Everything needed to create (or just test) the primitive.
struct Build {
  dnnl::primitive_desc pd;
  composer::PostOpsPlan plan;
  memory::desc src_md, weights_md_plain, dst_md;
  memory::dims dst_dims;  // as the composer sees them: {N, C, ...}
  std::optional<std::size_t> sum_input;
  bool spatial = false;
  Layout dst_layout = Layout::plain;
  // How binary post-ops read a tensor of the destination's shape.
  FullTensorLayout full_layout = FullTensorLayout::plain;
  // Per output scale (one, or one per channel): what the bias is multiplied
  // by where a tiny scale was raised (lift_tiny_output_scales); empty: none.
  std::vector<double> bias_factor;
  // The layer's output as it leaves the primitive's layout: dst_md, except in
  // integer-only mode, where the primitive writes s32 accumulators and the
  // integer requantization writes this.
  memory::desc out_md;
  // Integer-only mode: the integer form of `plan` (else why there is none).
  std::optional<composer::IntegerPlan> integer;
  std::string integer_reason;
  // A dynamic layer (QuantizedLayerAttrs::dynamic): its run-time scales
  // (one, or one per channel), and the bias -z * sum_k w[n, k] made each run
  // from its weight sums.
  std::size_t dynamic_scales = 0;
  std::vector<float> dynamic_weight_scales;  // QuantizedLayerAttrs'
  std::vector<std::int64_t> weight_sums;
  // A dynamic layer's last post-op, the model's bias added after the
  // run-time scales, when qfuse adds it after the primitive (take_bias_after):
  // its values per channel; `plan` then lacks it and `reported_plan` is the
  // whole plan.
  std::vector<float> bias_after;
  std::optional<composer::PostOpsPlan> reported_plan;
  // ... followed by the residual's sum (scale 1): the primitive writes into
  // scratch, and y = (t + bias) + residual after it.
  bool residual_after = false;
  // Where the output channels lie in dst_dims; for a matmul of two run-time
  // tensors, whether its u8 weights are shifted to s8 each run.
  std::size_t channel_axis = 1;
  bool runtime_weights = false;
  bool shift_weights = false;
  // A deconvolution whose kernel equals its stride, run as a 1x1 convolution
  // to oc * kh * kw channels (channel (o, i, j) at o * kh * kw + i * kw + j,
  // the plan's per-channel values repeated kh * kw times) whose staged
  // output a pixel shuffle moves into place; dst_dims are the convolution's.
  struct Shuffle {
    std::int64_t kh = 1, kw = 1, oc = 1;
    Shape out;  // the deconvolution's output
    composer::PostOpsPlan layer_plan;  // the plan over the layer's own channels, as reported
  };
  std::optional<Shuffle> shuffle;
};

// The kernel == stride deconvolution's form (no padding, dilation, groups
// or output padding; constant weights) with fewer output channels than a
// vector's 16 lanes: kh, kw and the output channels. oneDNN's direct
// deconvolution spreads output channels over the lanes, so few of them waste
// most of the work: PP-OCRv4 det's 2x2 / 2 upsampling to one channel ran
// jit_deconvolution in 451 us (11 GOPS) and runs brgconv_1x1 + shuffle in 118
// + 11 us. Its 24-channel one ran at 330 GOPS, 89 us; the 1x1 form took 83 us
// and its u8 shuffle 86 more (oneDNN's reorder of strided bytes).
constexpr std::int64_t kShuffleMaxChannels = 16;

std::optional<Build::Shuffle> shuffle_form(const graph::Graph& g, const Node& node,
                                           const Shape& out_shape) {
  if (node.kind != OpKind::QuantizedDeconvolution) return std::nullopt;
  const auto& a = node.attr<QuantizedLayerAttrs>();
  const graph::Value& x = g.value(node.inputs[0]);
  const graph::Value& w = g.value(node.inputs[1]);
  if (a.dynamic || x.shape.size() != 4 || w.shape.size() != 4 || !w.is_constant()) {
    return std::nullopt;
  }
  if (w.shape[1] >= kShuffleMaxChannels ||
      !kernel_is_stride(std::get<graph::DeconvAttrs>(a.geometry), w.shape)) {
    return std::nullopt;
  }
  return Build::Shuffle{w.shape[2], w.shape[3], w.shape[1], out_shape};
}

std::vector<float> repeat_each(const std::vector<float>& v, std::int64_t r) {
  if (v.size() <= 1) return v;
  std::vector<float> out;
  out.reserve(v.size() * static_cast<std::size_t>(r));
  for (const float x : v) out.insert(out.end(), static_cast<std::size_t>(r), x);
  return out;
}

// The plan of a layer whose output channel c becomes channels c * r to
// c * r + r - 1; false when it reads a tensor of the output's shape (a
// residual), which has no such channels.
bool repeat_channels(Build& b, std::int64_t r) {
  composer::PostOpsPlan& plan = b.plan;
  for (auto& op : plan.post_ops) {
    if (std::holds_alternative<composer::SumPostOp>(op)) return false;
    if (auto* bin = std::get_if<composer::BinaryPostOp>(&op)) {
      auto* values = std::get_if<composer::ConstantTensor>(&bin->tensor);
      if (values == nullptr || bin->broadcast != composer::Broadcast::per_channel) return false;
      values->values = repeat_each(values->values, r);
    }
  }
  plan.channels *= static_cast<int>(r);
  plan.output_scales = repeat_each(plan.output_scales, r);
  if (plan.fixed_output_scales.size() > 1) {
    std::vector<composer::FixedPoint> fixed;
    for (const auto& f : plan.fixed_output_scales) {
      fixed.insert(fixed.end(), static_cast<std::size_t>(r), f);
    }
    plan.fixed_output_scales = std::move(fixed);
  }
  if (b.bias_factor.size() > 1) {
    std::vector<double> factor;
    for (const double f : b.bias_factor) {
      factor.insert(factor.end(), static_cast<std::size_t>(r), f);
    }
    b.bias_factor = std::move(factor);
  }
  return true;
}

// oneDNN lists its AMX kernels first. At the sizes of one image they lose to
// the AVX-512 VNNI kernels unless the layer is large: each call configures
// the tiles. On PP-OCR's layers, 1x1 convolutions reducing over 128+ channels
// with 29-55M multiply-adds run 10-40% faster on AMX; those over 16-32
// channels (2-8M) 25-35% slower; 3x3 ones on 4-16 channels of an 8x8 to 17x17
// image take 3-12 us on AMX against 1-2 us on VNNI. On ResNet-50's 3x3 64 ->
// 64 layer at 56x56 (116M), where brgconv refuses the chain (a source or
// destination zero point), the non-brgemm AMX kernel takes 65-75 us against
// 190 us on VNNI, and the AMX deconvolution 40 us against 50 us (the layer
// suite, bench/bench_layers.cpp). So AMX is kept for layers reducing over at
// least `kAmxMinReduction` values with at least `kAmxMinMacs` multiply-adds;
// otherwise the next implementation that is neither AMX nor reference runs.
constexpr std::int64_t kAmxMinReduction = 96;
constexpr std::int64_t kAmxMinMacs = std::int64_t{1} << 24;

// oneDNN's implementation iterator keeps a pointer to the operation
// descriptor it was made from: call this while that descriptor lives (a later
// next_impl() reads a dead stack object: it found nothing in -O3 builds, and
// is what made earlier attempts at iterating crash).
void prefer_vnni_for_small_layers(dnnl::primitive_desc& pd, std::int64_t reduction,
                                  std::int64_t macs) {
  const auto is_amx = [](const std::string& impl) { return impl.find("amx") != std::string::npos; };
  const std::string first = pd.impl_info_str();
  if (!is_amx(first)) return;
  if (reduction >= kAmxMinReduction && macs >= kAmxMinMacs) return;
  dnnl::primitive_desc candidate = pd;
  while (candidate.next_impl()) {
    const std::string impl = candidate.impl_info_str();
    if (impl.find("ref") != std::string::npos) return;
    if (!is_amx(impl)) {
      pd = candidate;
      return;
    }
  }
}

// A layer whose weights in one channel are all (nearly) zero gets a tiny
// weight scale, and that channel an output scale that can be a denormal float
// (PP-OCRv4 rec: 1.1e-43). oneDNN multiplies every accumulator by it, and
// denormal arithmetic takes microcode assists: that 1x1 convolution ran 5x
// slower than its neighbours. Below 2^-100 the accumulator's part,
// |acc * scale| < 2^31 * 2^-100, is far below anything an 8-bit output (or
// f32 rounding of the bias's part) can show, so such a channel's scale is
// raised to 2^-100 and its bias, which oneDNN adds before scaling, lowered by
// the same factor: (acc + bias) * scale keeps its value up to 2^-69.
constexpr float kMinOutputScale = 0x1p-100f;

void lift_tiny_output_scales(Build& b) {
  for (std::size_t c = 0; c < b.plan.output_scales.size(); ++c) {
    float& s = b.plan.output_scales[c];
    if (s == 0.0f || std::fabs(s) >= kMinOutputScale) continue;
    const float lifted = std::copysign(kMinOutputScale, s);
    if (b.bias_factor.empty()) b.bias_factor.assign(b.plan.output_scales.size(), 1.0);
    b.bias_factor[c] = static_cast<double>(s) / static_cast<double>(lifted);
    s = lifted;
  }
}

thread_local double composer_ms = 0.0;

// The composer's options a compilation's layers are composed with.
composer::ComposeOptions compose_options(const CompileOptions& options) {
  composer::ComposeOptions copts;
  copts.allow_residual_round_drop = options.allow_residual_round_drop;
  copts.fixed_point_eta = options.integer_eta;
  return copts;
}

// The compositions a compile has made or been given (LayerBuildCache).
struct KnownCompositions {
  std::mutex mutex;
  LayerBuildCache::Compositions by_key;
};

// compose(), or the composition of an equal chain `known` already holds
// (which keeps the ones it makes).
composer::ComposeResult timed_compose(const composer::PostOpChain& chain,
                                      const composer::ComposeOptions& options,
                                      KnownCompositions* known) {
  std::string key;
  if (known != nullptr) {
    key = composer::chain_key(chain, options);
    const std::lock_guard<std::mutex> lock(known->mutex);
    if (const auto it = known->by_key.find(key); it != known->by_key.end()) return it->second;
  }
  const auto start = std::chrono::steady_clock::now();
  composer::ComposeResult result = composer::compose(chain, options);
  composer_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                     .count();
  if (known != nullptr) {
    const std::lock_guard<std::mutex> lock(known->mutex);
    known->by_key.emplace(std::move(key), result);
  }
  return result;
}

// Why a layer has no int8 primitive of this form: an ordinary answer of
// build_primitive, not an error. oneDNN refusing a descriptor (dnnl::error)
// is the other ordinary answer; anything else thrown is a bug.
struct Refusal {
  std::string reason;
};

// A dynamic layer's run-time scale is the primitive's output scale: nothing
// constant may join it (that would round the product differently from
// ONNX). Its bias -z * sum_k w[n, k] is made each run from the weight sums.
std::optional<Refusal> take_dynamic_scales(Build& b, const graph::Graph& g, const Node& node) {
  const auto& a = node.attr<QuantizedLayerAttrs>();
  const bool unit = std::all_of(b.plan.output_scales.begin(), b.plan.output_scales.end(),
                                [](float s) { return s == 1.0f; });
  if (!unit || b.plan.dst_zero_point) {
    return Refusal{"a constant scale or zero point follows the run-time scale"};
  }
  b.plan.output_scales.clear();
  b.plan.fixed_output_scales.clear();
  b.dynamic_scales = std::max(static_cast<std::size_t>(element_count(g.value(node.inputs[3]).shape)),
                              a.dynamic_weight_scales.size());
  b.dynamic_weight_scales = a.dynamic_weight_scales;
  // The pass that made the layer summed them: no weight is read here.
  if (a.weight_sums.size() != static_cast<std::size_t>(g.value(node.inputs[1]).shape[0])) {
    return Refusal{"a dynamic layer needs one weight sum per output channel (got " +
                   std::to_string(a.weight_sums.size()) + ")"};
  }
  b.weight_sums = a.weight_sums;
  return std::nullopt;
}

// Integer-only mode: the plan's integer form, or why there is none.
void choose_integer_plan(Build& b, const graph::Graph& g, const Node& node,
                         const CompileOptions& options) {
  const auto& a = node.attr<QuantizedLayerAttrs>();
  if (a.dynamic) {
    b.integer_reason = "the scale is known only at run time (a dynamic layer)";
    return;
  }
  if (b.runtime_weights) {
    b.integer_reason = "both operands are known only at run time";
    return;
  }
  std::vector<float> bias;
  if (a.has_bias) {
    const auto values = g.value(node.inputs[2]).constant->data<float>();
    bias.assign(values.begin(), values.end());
  }
  composer::IntegerPlanResult r = composer::derive_integer_plan(b.plan, bias, options.integer_eta);
  b.integer = std::move(r.plan);
  b.integer_reason = std::move(r.reason);
}

// The float plan's tiny scales lifted, and a kernel == stride deconvolution
// in its 1x1 convolution form where its channels can repeat.
void choose_float_form(Build& b, const graph::Graph& g, const Node& node, const Shape& out_shape,
                       const composer::PostOpsPlan& composed) {
  lift_tiny_output_scales(b);
  b.shuffle = shuffle_form(g, node, out_shape);
  if (b.shuffle) b.shuffle->layer_plan = b.plan;
  if (b.shuffle && !repeat_channels(b, b.shuffle->kh * b.shuffle->kw)) {
    b.plan = composed;
    b.bias_factor.clear();
    lift_tiny_output_scales(b);
    b.shuffle.reset();
  }
}

// The residual a sum post-op reads, refused when oneDNN would read it as
// another type of another size than the destination.
std::optional<Refusal> find_sum_input(Build& b, const Node& node) {
  const auto& a = node.attr<QuantizedLayerAttrs>();
  for (const auto& op : b.plan.post_ops) {
    if (const auto* s = std::get_if<composer::SumPostOp>(&op)) {
      b.sum_input = a.first_external_input() + static_cast<std::size_t>(s->input);
      if (to_dnnl(s->data_type) != to_dnnl(a.dst_type()) &&
          element_size(a.dst_type()) != (s->data_type == composer::DataType::f32 ? 4u : 1u)) {
        return Refusal{"sum post-op reads " + composer::to_string(s->data_type) + " from a " +
                       std::string(to_string(a.dst_type())) + " destination"};
      }
    }
  }
  return std::nullopt;
}

// The plan: the composed post-ops and what the layer's form adds to them.
std::variant<Build, Refusal> plan_layer(KnownCompositions* known, const graph::Graph& g,
                                        const Node& node,
                                        const Shape& out_shape, const CompileOptions& options) {
  const auto& a = node.attr<QuantizedLayerAttrs>();
  const composer::ComposeResult composed = timed_compose(a.chain, compose_options(options), known);
  if (!composed.fused()) return Refusal{"composer: " + composed.reason};
  Build b;
  b.plan = *composed.plan;
  if (a.dynamic) {
    if (auto refused = take_dynamic_scales(b, g, node)) return *refused;
  }
  b.runtime_weights = !g.value(node.inputs[1]).is_constant();
  if (options.integer_only) choose_integer_plan(b, g, node, options);
  if (!b.integer) choose_float_form(b, g, node, out_shape, *composed.plan);
  if (auto refused = find_sum_input(b, node)) return *refused;
  return b;
}

// The source, destination and output descriptors and the destination's
// dims and layout as the composer sees them.
void describe_buffers(Build& b, const graph::Graph& g, const Node& node, const Shape& out_shape,
                      Layout src_layout, Layout dst_layout) {
  const auto& a = node.attr<QuantizedLayerAttrs>();
  const graph::Value& x = g.value(node.inputs[0]);
  const graph::Value& w = g.value(node.inputs[1]);
  // Integer-only: the primitive writes the s32 accumulators.
  const ElementType dst_type = b.integer ? ElementType::s32 : a.dst_type();
  if (b.shuffle) {
    // The 1x1 convolution's output, staged channels last.
    const std::int64_t repeat = b.shuffle->kh * b.shuffle->kw;
    const Shape staged{x.shape[0], b.shuffle->oc * repeat, x.shape[2], x.shape[3]};
    b.src_md = layout_desc(x.shape, x.type, src_layout);
    b.dst_md = layout_desc(staged, dst_type, Layout::channels_last);
    b.out_md = b.dst_md;
    b.dst_dims = staged;
    b.spatial = true;
    b.dst_layout = Layout::channels_last;
    b.full_layout = FullTensorLayout::channels_last;
  } else if (node.kind == OpKind::QuantizedConvolution ||
             node.kind == OpKind::QuantizedDeconvolution) {
    b.src_md = layout_desc(x.shape, x.type, src_layout);
    b.dst_md = layout_desc(out_shape, dst_type, dst_layout);
    b.out_md = layout_desc(out_shape, a.dst_type(), dst_layout);
    b.dst_dims = out_shape;
    b.spatial = true;
    b.dst_layout = dst_layout;
    if (dst_layout == Layout::channels_last) {
      b.full_layout = FullTensorLayout::channels_last;
    }
  } else if (b.runtime_weights) {
    // Both operands at run time: the whole batched product, batch dims
    // broadcast (oneDNN wants one rank for all three). Operands the plugin
    // absorbed a Transpose into (MatMulAttrs' perm_a / perm_y, of the
    // product's rank) are read and written by strides.
    const auto& m = std::get<graph::MatMulAttrs>(a.geometry);
    const std::size_t rank = std::max(x.shape.size(), w.shape.size());
    const auto padded = [rank](Shape s) {
      s.insert(s.begin(), static_cast<std::ptrdiff_t>(rank - s.size()), 1);
      return s;
    };
    b.src_md = m.perm_a.empty() ? plain_desc(padded(x.shape), x.type)
                                : permuted_desc(x.shape, to_int_perm(m.perm_a), x.type);
    if (m.perm_y.empty()) {
      b.dst_md = plain_desc(out_shape, dst_type);
      b.out_md = plain_desc(out_shape, a.dst_type());
    } else {
      // The product's dim j is the output's dim inverse[j].
      std::vector<int> inverse(m.perm_y.size());
      for (std::size_t i = 0; i < m.perm_y.size(); ++i) {
        inverse[static_cast<std::size_t>(m.perm_y[i])] = static_cast<int>(i);
      }
      b.dst_md = permuted_desc(out_shape, inverse, dst_type);
      b.out_md = permuted_desc(out_shape, inverse, a.dst_type());
    }
    b.dst_dims = b.dst_md.dims();
  } else {
    // Matrix products run on 2D views: rows = every leading dim.
    const std::int64_t k = x.shape.back();
    const std::int64_t rows = element_count(x.shape) / k;
    const std::int64_t oc = out_shape.back();
    b.src_md = plain_desc(Shape{rows, k}, x.type);
    b.dst_md = plain_desc(Shape{rows, oc}, dst_type);
    b.out_md = plain_desc(Shape{rows, oc}, a.dst_type());
    b.dst_dims = {rows, oc};
  }
  // Where the output channels lie in the primitive's destination (a
  // matrix product runs on a 2D view unless both operands come at run time).
  b.channel_axis = *graph::output_channel_axis(node.kind, b.dst_dims.size());
}

// oneDNN 2.6's brgemm inner product takes a per-channel binary post-op at a
// high price: on a 64 x 64 x 256 u8 layer with run-time output scales, 9.5 us
// with the add against 4.5 without (1.3 us more at 64 x 64 x 64; VNNI and AMX
// alike). A dynamic layer's bias comes after its run-time scales, so it is
// that post-op; where it is the last one (or followed only by the residual's
// sum) and the output f32 rows of channels, qfuse adds it after the primitive
// instead, the same f32 additions of the same scaled value in the same order
// (one rounding each), at the cost of one pass over the output.
void take_bias_after(Build& b, const Node& node) {
  const auto& a = node.attr<QuantizedLayerAttrs>();
  if (!a.dynamic || b.integer || b.shuffle || b.spatial || b.plan.post_ops.empty()) return;
  if (b.plan.dst_type != composer::DataType::f32) return;
  if (b.channel_axis + 1 != b.dst_dims.size()) return;
  // The add may be followed by the residual's sum, which then follows it
  // after the primitive too (the order of the two additions kept).
  std::size_t last = b.plan.post_ops.size() - 1;
  const auto* sum = std::get_if<composer::SumPostOp>(&b.plan.post_ops.back());
  if (sum != nullptr) {
    if (sum->scale != 1.0f || sum->data_type != composer::DataType::f32 || !b.sum_input ||
        last == 0) {
      return;
    }
    --last;
  }
  const auto* add = std::get_if<composer::BinaryPostOp>(&b.plan.post_ops[last]);
  if (add == nullptr || add->alg != composer::BinaryAlg::add ||
      add->broadcast != composer::Broadcast::per_channel) {
    return;
  }
  const auto* values = std::get_if<composer::ConstantTensor>(&add->tensor);
  if (values == nullptr || values->values.size() != static_cast<std::size_t>(b.dst_dims.back())) {
    return;
  }
  b.reported_plan = b.plan;
  b.bias_after = values->values;
  b.residual_after = sum != nullptr;
  b.plan.post_ops.resize(last);
}

// The primitive's attributes: the plan's output scales, zero point and
// post-ops (none in integer-only mode), and the source / weights zero points.
dnnl::primitive_attr layer_primitive_attr(Build& b, const graph::Graph& g, const Node& node) {
  const auto& a = node.attr<QuantizedLayerAttrs>();
  take_bias_after(b, node);
  dnnl::primitive_attr attr = b.integer ? dnnl::primitive_attr()
                                         : make_primitive_attr(b.plan, b.dst_dims, b.full_layout,
                                                               b.channel_axis);
  use_user_scratchpad(attr);
  // oneDNN 2.6 multiplies s8 weights only: u8 ones are shifted by -128 each
  // run, w - z = (w - 128) - (z - 128).
  b.shift_weights = b.runtime_weights && g.value(node.inputs[1]).type == ElementType::u8;
  set_layer_quantization(attr,
                         a.dynamic ? std::optional<int>(b.dynamic_scales > 1 ? 1 << 1 : 0)
                                   : std::nullopt,
                         a.src_zero_point, a.weights_zero_point - (b.shift_weights ? 128 : 0));
  return attr;
}

// What the primitive descriptor of each layer kind reads.
struct Descriptors {
  const graph::Graph& g;
  const Node& node;
  const Shape& out_shape;
  const dnnl::primitive_attr& attr;
  const dnnl::engine& engine;
  memory::desc bias_md;  // f32, or none (integer-only: the integer plan adds it)
  const graph::Value& x() const { return g.value(node.inputs[0]); }
  const graph::Value& w() const { return g.value(node.inputs[1]); }
  const QuantizedLayerAttrs& a() const { return node.attr<QuantizedLayerAttrs>(); }
};

memory::desc format_any(const memory::desc& md) {
  return memory::desc(md.dims(), md.data_type(), memory::format_tag::any);
}

void convolution_pd(Build& b, const Descriptors& d) {
  const auto lock = convolution_descriptor_lock();
  const auto& c = std::get<graph::ConvAttrs>(d.a().geometry);
  const Shape& ws = d.w().shape;
  Shape wd = ws;
  if (c.groups > 1) {
    wd = {c.groups, ws[0] / c.groups};
    wd.insert(wd.end(), ws.begin() + 1, ws.end());
  }
  b.weights_md_plain = plain_desc(wd, ElementType::s8);
  dnnl::convolution_forward::desc desc(
      dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, b.src_md,
      format_any(b.weights_md_plain), d.bias_md, b.dst_md, to_dims(c.strides),
      to_dnnl_dilations(c.dilations), to_dims(c.pads_begin), to_dims(c.pads_end));
  b.pd = dnnl::convolution_forward::primitive_desc(desc, d.attr, d.engine);
  const std::int64_t reduction = element_count(ws) / ws[0];  // IC / groups * kernel
  prefer_vnni_for_small_layers(b.pd, reduction, reduction * element_count(d.out_shape));
}

// The kernel == stride deconvolution as its 1x1 convolution: stored weights
// [IC, OC, kh, kw] are the convolution's [OC * kh * kw, IC] transposed, the
// same memory.
void shuffled_deconvolution_pd(Build& b, const Descriptors& d) {
  const auto lock = convolution_descriptor_lock();
  const std::int64_t ic = d.w().shape[0];
  const std::int64_t oc = b.shuffle->oc * b.shuffle->kh * b.shuffle->kw;
  b.weights_md_plain = permuted_desc(Shape{ic, oc, 1, 1}, {1, 0, 2, 3}, ElementType::s8);
  dnnl::convolution_forward::desc desc(
      dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, b.src_md,
      format_any(b.weights_md_plain), d.bias_md, b.dst_md, {1, 1}, {0, 0}, {0, 0});
  b.pd = dnnl::convolution_forward::primitive_desc(desc, d.attr, d.engine);
  prefer_vnni_for_small_layers(b.pd, ic, ic * element_count(b.dst_dims));
}

void deconvolution_pd(Build& b, const Descriptors& d) {
  if (b.shuffle) return shuffled_deconvolution_pd(b, d);
  const auto lock = convolution_descriptor_lock();
  const auto& c = std::get<graph::DeconvAttrs>(d.a().geometry);
  const Shape& ws = d.w().shape;
  std::vector<int> perm;
  if (c.groups > 1) {
    Shape stored{c.groups, ws[0] / c.groups, ws[1]};
    stored.insert(stored.end(), ws.begin() + 2, ws.end());
    perm = {0, 2, 1};
    for (std::size_t i = 3; i < stored.size(); ++i) perm.push_back(static_cast<int>(i));
    b.weights_md_plain = permuted_desc(stored, perm, ElementType::s8);
  } else {
    perm = {1, 0};
    for (std::size_t i = 2; i < ws.size(); ++i) perm.push_back(static_cast<int>(i));
    b.weights_md_plain = permuted_desc(ws, perm, ElementType::s8);
  }
  memory::dims pads_end;
  for (std::size_t i = 0; i < c.pads_end.size(); ++i) {
    pads_end.push_back(c.pads_end[i] - c.output_padding[i]);
  }
  dnnl::deconvolution_forward::desc desc(
      dnnl::prop_kind::forward_inference, dnnl::algorithm::deconvolution_direct, b.src_md,
      format_any(b.weights_md_plain), d.bias_md, b.dst_md, to_dims(c.strides),
      to_dnnl_dilations(c.dilations), to_dims(c.pads_begin), pads_end);
  b.pd = dnnl::deconvolution_forward::primitive_desc(desc, d.attr, d.engine);
  // Each output sums IC / groups * kernel / stride^2 products on average.
  std::int64_t reduction = element_count(ws) / ws[1] / c.groups;
  for (const std::int64_t s : c.strides) reduction /= std::max<std::int64_t>(s, 1);
  prefer_vnni_for_small_layers(b.pd, reduction, reduction * element_count(d.out_shape));
}

void fully_connected_pd(Build& b, const Descriptors& d) {
  b.weights_md_plain = plain_desc(d.w().shape, ElementType::s8);
  dnnl::inner_product_forward::desc desc(dnnl::prop_kind::forward_inference, b.src_md,
                                         format_any(b.weights_md_plain), d.bias_md, b.dst_md);
  b.pd = dnnl::inner_product_forward::primitive_desc(desc, d.attr, d.engine);
  const std::int64_t reduction = d.x().shape.back();
  // Fully connected layers of 64 rows or more over 64 values or more keep
  // AMX below kAmxMinMacs: with the tiles configured once for many rows it
  // wins at every size of the corpus's encoders (64 tokens, u8 from
  // DynamicQuantizeLinear or QDQ, per layer in the model against VNNI:
  // 64 x 64 x 64 1.8 -> 1.7 us, 64 x 64 x 256 5.6 -> 4.8, 64 x 256 x 64
  // 5.0 -> 3.1); at 16 rows the model ran 4-10% slower on AMX.
  const std::int64_t rows = element_count(d.out_shape) / d.out_shape.back();
  if (rows >= 64 && reduction >= 64) return;
  prefer_vnni_for_small_layers(b.pd, reduction, reduction * element_count(d.out_shape));
}

std::optional<Refusal> matmul_pd(Build& b, const Descriptors& d) {
  const auto& m = std::get<graph::MatMulAttrs>(d.a().geometry);
  const Shape& ws = d.w().shape;
  if (m.transpose_a) return Refusal{"transposed int8 activations"};
  if (b.runtime_weights) {
    if (m.transpose_b) return Refusal{"transposed run-time weights"};
    const std::size_t rank = d.out_shape.size();
    const auto whole = [rank](const graph::Ints& p) { return p.empty() || p.size() == rank; };
    if (!whole(m.perm_a) || !whole(m.perm_b) || !whole(m.perm_y) ||
        (!m.perm_a.empty() && d.x().shape.size() != rank) ||
        (!m.perm_b.empty() && ws.size() != rank)) {
      return Refusal{"an operand read by strides is not of the product's rank"};
    }
    Shape wd = ws;
    wd.insert(wd.begin(), static_cast<std::ptrdiff_t>(d.out_shape.size() - ws.size()), 1);
    b.weights_md_plain = m.perm_b.empty() ? plain_desc(wd, ElementType::s8)
                                          : permuted_desc(ws, to_int_perm(m.perm_b), ElementType::s8);
    dnnl::matmul::desc desc(b.src_md, b.weights_md_plain, memory::desc(), b.dst_md);
    b.pd = dnnl::matmul::primitive_desc(desc, d.attr, d.engine);
    return std::nullopt;
  }
  if (ws.size() != 2) return Refusal{"int8 matmul needs 2D weights"};
  if (!m.perm_a.empty() || !m.perm_b.empty() || !m.perm_y.empty()) {
    return Refusal{"operands read by strides beside constant weights"};
  }
  b.weights_md_plain = m.transpose_b ? permuted_desc(ws, {1, 0}, ElementType::s8)
                                     : plain_desc(ws, ElementType::s8);
  memory::desc bias2d;
  if (d.a().has_bias && !b.integer) {
    bias2d = plain_desc(Shape{1, d.out_shape.back()}, ElementType::f32);
  }
  dnnl::matmul::desc desc(b.src_md, format_any(b.weights_md_plain), bias2d, b.dst_md);
  b.pd = dnnl::matmul::primitive_desc(desc, d.attr, d.engine);
  const std::int64_t reduction = d.x().shape.back();
  prefer_vnni_for_small_layers(b.pd, reduction, reduction * element_count(d.out_shape));
  return std::nullopt;
}

// The layer's int8 primitive: its plan (plan_layer), its buffers' descriptors,
// its attributes, then the primitive descriptor of its kind. An ordinary
// refusal is a value; oneDNN refusing a descriptor throws dnnl::error.
std::variant<Build, Refusal> build_primitive(KnownCompositions* known, const graph::Graph& g,
                                             const Node& node, const Shape& out_shape,
                                             const dnnl::engine& engine,
                                             const CompileOptions& options, Layout src_layout,
                                             Layout dst_layout) {
  std::variant<Build, Refusal> planned = plan_layer(known, g, node, out_shape, options);
  if (std::holds_alternative<Refusal>(planned)) return planned;
  Build& b = std::get<Build>(planned);
  describe_buffers(b, g, node, out_shape, src_layout, dst_layout);
  const dnnl::primitive_attr attr = layer_primitive_attr(b, g, node);
  const auto& a = node.attr<QuantizedLayerAttrs>();
  const std::int64_t repeat = b.shuffle ? b.shuffle->kh * b.shuffle->kw : 1;
  Descriptors d{g, node, out_shape, attr, engine, {}};
  if (a.dynamic) {
    d.bias_md = plain_desc(Shape{static_cast<std::int64_t>(b.weight_sums.size())}, ElementType::f32);
  } else if (a.has_bias && !b.integer) {
    d.bias_md = plain_desc(Shape{element_count(g.value(node.inputs[2]).shape) * repeat},
                           ElementType::f32);
  }
  switch (graph::layer_info(node.kind)->anchor) {
    case composer::AnchorKind::convolution: convolution_pd(b, d); break;
    case composer::AnchorKind::deconvolution: deconvolution_pd(b, d); break;
    case composer::AnchorKind::inner_product:
      if (node.kind == OpKind::QuantizedFullyConnected) {
        fully_connected_pd(b, d);
      } else if (auto refused = matmul_pd(b, d)) {
        return *refused;
      }
      break;
  }
  return planned;
}

class QuantizedLayerOp final : public ExecutableOp {
 public:
  QuantizedLayerOp(const graph::Graph& g, const Node& node, const dnnl::engine& engine,
                   Build build, const std::function<Layout(ValueId)>& layout_of,
                   bool sum_in_place, const HeldConstants* held)
      : ExecutableOp(node), engine_(engine), b_(std::move(build)), sum_in_place_(sum_in_place) {
    implementation_ = b_.pd.impl_info_str();
    scratchpad_md_ = b_.pd.scratchpad_desc();
    std::size_t offset = align(scratchpad_md_.get_size());
    if (b_.spatial) offset = stage_plain_neighbours(g, node, layout_of, offset);
    depthwise_ = depthwise_kernel(g, node);
    if (depthwise_) {
      // The primitive descriptor stays for the plan's checks; no primitive
      // or weights of oneDNN's are made. A plain neighbour's bytes are
      // staged as for the primitive (behind the primitive's scratchpad
      // size, which stays reserved unused).
      implementation_ = kDepthwiseKernelName;
      total_scratch_ = offset;
      return;
    }
    primitive_ = dnnl::primitive(b_.pd.get());
    if (b_.integer) offset = reserve_integer_requantization(g, node, layout_of, offset);
    if (node.attr<QuantizedLayerAttrs>().dynamic) {
      dynamic_bias_offset_ = offset;
      offset = align(offset + b_.weight_sums.size() * sizeof(float));
      dynamic_scales_offset_ = offset;
      offset = align(offset + b_.dynamic_scales * sizeof(float));
    }
    if (b_.shift_weights) {
      shifted_weights_offset_ = offset;
      offset = align(offset + b_.weights_md_plain.get_size());
    }
    if (b_.residual_after) {
      after_offset_ = offset;
      offset = align(offset + b_.dst_md.get_size());
    }
    prepare_constants(g, node, held);
    total_scratch_ = stage_binary_operands(g, node, layout_of, offset);
    if (copies_residual()) prepare_residual_copy(g, node, layout_of);
  }

  void execute(ExecContext& ctx) const override {
    const Node& n = node();
    auto* scratch = static_cast<std::uint8_t*>(ctx.scratchpad());
    if (depthwise_) {
      run_depthwise(ctx, scratch);
      return;
    }
    std::any& slot = ctx.op_state();
    if (!slot.has_value()) slot = make_state();
    State& st = std::any_cast<State&>(slot);

    // Point this request's memory objects at its buffers (which the caller
    // may have replaced since the last run).
    void* user_src = const_cast<void*>(ctx.in(n.inputs[0]).raw_data());
    void* user_dst = ctx.out(n.outputs[0]).raw_data();
    void* src = src_stage_ ? scratch + src_stage_->offset : user_src;
    void* dst = dst_stage_ ? scratch + dst_stage_->offset : user_dst;
    st.args.at(DNNL_ARG_SRC).set_data_handle(src);
    void* primitive_dst = b_.integer          ? scratch + acc_offset_
                          : b_.residual_after ? scratch + after_offset_
                                              : dst;
    st.args.at(DNNL_ARG_DST).set_data_handle(primitive_dst);
    bind_run_time_operands(ctx, st, scratch);
    if (!b_.weight_sums.empty()) bind_dynamic_quantization(ctx, st, scratch);
    stage_inputs(ctx, st, user_src, src, dst);
    primitive_.execute(ctx.stream(), st.args);
    if (!b_.bias_after.empty()) {
      ctx.stream().wait();
      const auto channels = static_cast<std::int64_t>(b_.bias_after.size());
      const std::int64_t rows = element_count(b_.dst_dims) / channels;
      auto* y = static_cast<float*>(dst);
      add_to_rows(
          b_.residual_after ? reinterpret_cast<const float*>(scratch + after_offset_) : y,
          b_.bias_after.data(),
          b_.residual_after ? ctx.in(n.inputs[*b_.sum_input]).data<float>().data() : nullptr, y,
          rows, channels);
    }
    if (b_.integer) requantize(ctx, scratch, dst);
    if (dst_stage_) unstage_output(ctx, st, dst, user_dst);
    ctx.stream().wait();
  }

  std::string implementation() const override { return implementation_; }
  // Constant weights live in weights_ alone once compile is done. A layout
  // whose reorder scaled them (s8 sources on CPUs without VNNI) does not give
  // them back exactly, and keeps the graph's copy.
  // So does an f32 bias bias_ holds as given (not scaled by a lifted output
  // scale, nor repeated for a pixel shuffle).
  bool keeps_input(std::size_t index) const override {
    if (index == 2) return bias_ && b_.bias_factor.empty() && !b_.shuffle && b_.weight_sums.empty();
    if (!weights_ || index != 1) return false;
    const auto& extra = b_.pd.weights_desc().data.extra;
    return (extra.flags & dnnl_memory_extra_flag_scale_adjust) == 0 || extra.scale_adjust == 1.0f;
  }
  Tensor plain_input(std::size_t index, const graph::Value& value) const override {
    if (!keeps_input(index)) return ExecutableOp::plain_input(index, value);
    return index == 2 ? held_constant(engine_, bias_, bias_.get_desc(), value)
                      : held_constant(engine_, weights_, b_.weights_md_plain, value);
  }
  std::optional<HeldConstant> held_input(std::size_t index) const override {
    if (index != 1 || !keeps_input(index)) return std::nullopt;
    return HeldConstant{weights_.get_desc(), weights_.get_data_handle()};
  }
  // A pixel-shuffled deconvolution reports its plan over its own channels,
  // not the one its primitive runs with each value repeated kh * kw times.
  const composer::PostOpsPlan* plan() const override {
    if (b_.reported_plan) return &*b_.reported_plan;
    return b_.shuffle ? &b_.shuffle->layer_plan : &b_.plan;
  }
  std::string post_ops() const override {
    if (b_.integer) return "integer: " + composer::describe(*b_.integer);
    std::string text = composer::describe(*plan()) + (sum_in_place_ ? " (sum in place)" : "");
    if (!b_.weight_sums.empty()) {
      // A dynamic layer: the output scales and the zero point come with the input.
      const std::string none = "output_scales (none)";
      if (const auto at = text.find(none); at != std::string::npos) {
        text.replace(at, none.size(), std::string("output_scales (run time, ") +
                                          (b_.dynamic_scales > 1 ? "per channel" : "per tensor") +
                                          "), src zero point (run time, as bias)");
      }
    }
    if (!b_.bias_after.empty()) {
      text += b_.residual_after ? " (its last binary_add and sum by qfuse after the primitive)"
                                : " (its last binary_add by qfuse after the primitive)";
    }
    if (!b_.integer_reason.empty()) text += " (float scales: " + b_.integer_reason + ")";
    return text;
  }
  const composer::IntegerPlan* integer_plan() const override {
    return b_.integer ? &*b_.integer : nullptr;
  }
  std::string integer_refusal() const override { return b_.integer_reason; }
  std::size_t scratchpad_size() const override { return total_scratch_; }
  int staged_reorders() const override {
    return (src_stage_ ? 1 : 0) + (dst_stage_ ? 1 : 0) + static_cast<int>(binary_stages_.size()) +
           (copies_residual() ? 1 : 0) + (integer_residual_stage_ ? 1 : 0);
  }


 private:
  // Convolutions always run channels last; a plain neighbour gets a reorder
  // through a staging area behind the primitive's scratchpad, unless its
  // bytes are the same in both layouts (one channel, as a detector's map,
  // or one pixel). Returns the scratch offset past the stages.
  std::size_t stage_plain_neighbours(const graph::Graph& g, const Node& node,
                                     const std::function<Layout(ValueId)>& layout_of,
                                     std::size_t offset) {
    const graph::Value& x = g.value(node.inputs[0]);
    const graph::Value& y = g.value(node.outputs[0]);
    const auto needs_stage = [&](ValueId v, const Shape& s) {
      if (layout_of(v) != Layout::plain || s.size() < 3) return false;
      const std::int64_t pixels =
          std::accumulate(s.begin() + 2, s.end(), std::int64_t{1}, std::multiplies<>());
      return s[1] != 1 && pixels != 1;
    };
    if (needs_stage(node.inputs[0], x.shape)) {
      src_stage_ = Stage{offset, layout_desc(x.shape, x.type, Layout::plain), {}};
      src_stage_->reorder = dnnl::reorder(
          dnnl::reorder::primitive_desc(engine_, src_stage_->user_md, engine_, b_.src_md));
      src_stage_->bytes = byte_layout_change(x.shape, x.type, true);
      offset = align(offset + b_.src_md.get_size());
    }
    if (b_.shuffle) {
      dst_stage_ = shuffle_stage(offset, layout_of(node.outputs[0]));
      offset = align(offset + b_.dst_md.get_size());
      implementation_ += " + pixel shuffle";
    } else if (needs_stage(node.outputs[0], y.shape)) {
      dst_stage_ = Stage{offset, layout_desc(y.shape, y.type, Layout::plain), {}};
      dst_stage_->reorder = dnnl::reorder(
          dnnl::reorder::primitive_desc(engine_, b_.out_md, engine_, dst_stage_->user_md));
      dst_stage_->bytes = byte_layout_change(y.shape, y.type, false);
      offset = align(offset + b_.out_md.get_size());
    }
    return offset;
  }

  // Integer-only mode: the s32 accumulators, and a residual stored plain
  // staged channels last. Returns the scratch offset past them.
  std::size_t reserve_integer_requantization(const graph::Graph& g, const Node& node,
                                             const std::function<Layout(ValueId)>& layout_of,
                                             std::size_t offset) {
    acc_offset_ = offset;
    offset = align(offset + b_.dst_md.get_size());
    requantizer_.emplace(*b_.integer);
    if (!b_.integer->residual_input) return offset;
    const std::size_t first_external = node.attr<QuantizedLayerAttrs>().first_external_input();
    const ValueId rv =
        node.inputs[first_external + static_cast<std::size_t>(*b_.integer->residual_input)];
    integer_residual_ = rv;
    const graph::Value& r = g.value(rv);
    if (b_.spatial && layout_of(rv) == Layout::plain && r.shape.size() >= 3) {
      integer_residual_stage_ = Stage{offset, layout_desc(r.shape, r.type, Layout::plain), {}};
      integer_residual_stage_->bytes = byte_layout_change(r.shape, r.type, true);
      offset = align(offset + static_cast<std::size_t>(element_count(r.shape)));
    }
    return offset;
  }

  // Constant weights reordered once into the implementation's layout (run-time
  // ones are bound each run; `held` ones already in that layout are used in
  // place), the f32 bias, and the constant operands of binary post-ops.
  void prepare_constants(const graph::Graph& g, const Node& node, const HeldConstants* held) {
    const auto& a = node.attr<QuantizedLayerAttrs>();
    const auto in_layout = held != nullptr ? held->find(node.inputs[1].index) : HeldConstants::const_iterator{};
    if (!b_.runtime_weights && held != nullptr && in_layout != held->end() &&
        in_layout->second.desc == b_.pd.weights_desc()) {
      weights_ = memory(b_.pd.weights_desc(), engine_, const_cast<void*>(in_layout->second.data));
    } else if (!b_.runtime_weights && held != nullptr && in_layout != held->end()) {
      // Held in another layout (the model compiled at another shape chose
      // another), the graph's copy may be gone: back to plain codes from it
      // (its compensation, if any, left behind), then into this layout.
      const memory held_weights(in_layout->second.desc, engine_,
                                const_cast<void*>(in_layout->second.data));
      memory plain(b_.weights_md_plain, engine_);
      reorder_at_compile(engine_, held_weights, plain);
      weights_ = memory(b_.pd.weights_desc(), engine_);
      reorder_at_compile(engine_, plain, weights_);
    } else if (!b_.runtime_weights) {
      weights_ = memory(b_.pd.weights_desc(), engine_);
      const Tensor& wq = *g.value(node.inputs[1]).constant;
      memory src(b_.weights_md_plain, engine_, const_cast<void*>(wq.raw_data()));
      reorder_at_compile(engine_, src, weights_);
    }
    if (a.has_bias && !b_.integer) {
      const Tensor& bias = *g.value(node.inputs[2]).constant;
      bias_ = memory(b_.pd.weights_desc(1), engine_);
      const std::size_t repeat =
          b_.shuffle ? static_cast<std::size_t>(b_.shuffle->kh * b_.shuffle->kw) : 1;
      const std::vector<float> values = primitive_bias(bias, repeat);
      std::copy(values.begin(), values.end(), static_cast<float*>(bias_.get_data_handle()));
    }
    binary_args_ = binary_post_op_args(b_.plan, b_.dst_dims, b_.full_layout, b_.channel_axis);
    constant_args_ = make_constant_post_op_memory(binary_args_, engine_);
  }

  // A full-tensor binary operand is read channels last; one stored plain is
  // reordered into a staging area first. Returns the scratch offset past them.
  std::size_t stage_binary_operands(const graph::Graph& g, const Node& node,
                                    const std::function<Layout(ValueId)>& layout_of,
                                    std::size_t offset) {
    const std::size_t first_external = node.attr<QuantizedLayerAttrs>().first_external_input();
    for (const auto& arg : binary_args_) {
      if (!arg.external_input || b_.full_layout != FullTensorLayout::channels_last ||
          arg.desc.dims() != b_.dst_dims) {
        continue;
      }
      const ValueId v = node.inputs[first_external + static_cast<std::size_t>(*arg.external_input)];
      const graph::Value& t = g.value(v);
      if (layout_of(v) == Layout::channels_last) continue;
      Stage st{offset, layout_desc(t.shape, t.type, Layout::plain), {}};
      st.reorder = dnnl::reorder(
          dnnl::reorder::primitive_desc(engine_, st.user_md, engine_, arg.desc));
      offset = align(offset + arg.desc.get_size());
      binary_stages_.emplace(arg.arg, std::move(st));
    }
    return offset;
  }

  // The sum post-op reads the residual from the destination buffer, in the
  // residual's data type: a reorder copies it there first.
  void prepare_residual_copy(const graph::Graph& g, const Node& node,
                             const std::function<Layout(ValueId)>& layout_of) {
    const ValueId rv = node.inputs[*b_.sum_input];
    const graph::Value& r = g.value(rv);
    if (b_.spatial) {
      residual_md_ = layout_desc(r.shape, r.type, layout_of(rv));
      if (layout_of(rv) == Layout::plain) residual_bytes_ = byte_layout_change(r.shape, r.type, true);
      residual_dst_md_ = layout_desc(g.value(node.outputs[0]).shape, r.type, Layout::channels_last);
    } else {
      residual_md_ = plain_desc(b_.dst_dims, r.type);
      residual_dst_md_ = plain_desc(b_.dst_dims, r.type);
    }
    residual_copy_ = dnnl::reorder(
        dnnl::reorder::primitive_desc(engine_, residual_md_, engine_, residual_dst_md_));
  }

  // The padded 3x3 or 5x5 depthwise layer (strides 1 or 2) with a source
  // zero point on qfuse's kernel (depthwise_kernel.hpp), where it can take
  // the layer; null otherwise. Says at debug level why a layer of that form
  // stays on oneDNN.
  std::unique_ptr<DepthwiseKernel> depthwise_kernel(const graph::Graph& g, const Node& node) const {
    if (node.kind != OpKind::QuantizedConvolution || !b_.spatial) return nullptr;
    const auto& a = node.attr<QuantizedLayerAttrs>();
    const auto& c = std::get<graph::ConvAttrs>(a.geometry);
    const graph::Value& x = g.value(node.inputs[0]);
    const graph::Value& w = g.value(node.inputs[1]);
    const std::int64_t k = w.shape.size() == 4 ? w.shape[3] : 0, pad = k / 2;
    const auto one_or_two = [](std::int64_t s) { return s == 1 || s == 2; };
    const bool form = x.shape.size() == 4 && x.type == ElementType::u8 &&
                      a.src_zero_point != 0 && c.groups > 1 && c.groups == x.shape[1] &&
                      (k == 3 || k == 5) && w.type == ElementType::s8 && w.is_constant() &&
                      w.shape == Shape{c.groups, 1, k, k} &&
                      c.strides.size() == 2 &&
                      one_or_two(c.strides[0]) && one_or_two(c.strides[1]) &&
                      c.dilations == graph::Ints{1, 1} && c.pads_begin == graph::Ints{pad, pad} &&
                      c.pads_end == graph::Ints{pad, pad};
    if (!form) return nullptr;
    const Shape out{x.shape[0], x.shape[1], DepthwiseKernel::output_size(x.shape[2], c.strides[0]),
                    DepthwiseKernel::output_size(x.shape[3], c.strides[1])};
    if (g.value(node.outputs[0]).shape != out) return nullptr;
    std::string why;
    if (!has_depthwise_kernel_isa()) {
      why = "the CPU lacks AVX-512 VBMI or VNNI";
    } else if (b_.integer) {
      why = "integer-only requantization of oneDNN's accumulators";
    } else if (a.dynamic || b_.runtime_weights) {
      why = "its weights or scales come at run time";
    } else if ((src_stage_ && !src_stage_->bytes) || (dst_stage_ && !dst_stage_->bytes)) {
      why = "its f32 output is stored plain";
    } else if (const auto plan = depthwise_plan_refusal(b_.plan)) {
      why = "its post-ops hold " + *plan;
    }
    if (!why.empty()) {
      spdlog::debug("{}: the padded {}x{} depthwise layer stays on {}: {}", node.name, k, k,
                    implementation_, why);
      return nullptr;
    }
    std::vector<float> bias;
    if (a.has_bias) bias = primitive_bias(*g.value(node.inputs[2]).constant, 1);
    const DepthwiseShape shape{x.shape[0],   x.shape[1],   x.shape[2],          x.shape[3],
                               c.strides[0], c.strides[1], static_cast<int>(k)};
    return std::make_unique<DepthwiseKernel>(
        shape, g.value(node.inputs[1]).constant->data<std::int8_t>().data(), std::move(bias),
        static_cast<std::uint8_t>(a.src_zero_point), b_.plan);
  }

  // The layer's f32 bias as its primitive (or kernel) adds it: each value
  // repeated `repeat` times (a pixel-shuffled deconvolution's channel c is
  // the layer's c / (kh * kw)), times the factor of a lifted output scale.
  std::vector<float> primitive_bias(const Tensor& bias, std::size_t repeat) const {
    const auto given = bias.data<float>();
    std::vector<float> values(given.size() * repeat);
    for (std::size_t c = 0; c < values.size(); ++c) values[c] = given[c / repeat];
    if (!b_.bias_factor.empty()) {
      for (std::size_t c = 0; c < values.size(); ++c) {
        const double f = b_.bias_factor[b_.bias_factor.size() == 1 ? 0 : c];
        values[c] = static_cast<float>(static_cast<double>(values[c]) * f);
      }
    }
    return values;
  }

  void run_depthwise(ExecContext& ctx, std::uint8_t* scratch) const {
    const Node& n = node();
    const void* src = ctx.in(n.inputs[0]).raw_data();
    void* user_dst = ctx.out(n.outputs[0]).raw_data();
    if (src_stage_) {
      void* staged = scratch + src_stage_->offset;
      ctx.staged([&] { src_stage_->bytes->run(src, staged); });
      src = staged;
    }
    void* dst = dst_stage_ ? scratch + dst_stage_->offset : user_dst;
    depthwise_->run(static_cast<const std::uint8_t*>(src), dst, omp_get_max_threads() > 1);
    if (dst_stage_) ctx.staged([&] { dst_stage_->bytes->run(dst, user_dst); });
  }

  struct Stage {
    std::size_t offset;
    memory::desc user_md;  // the plain layout of the graph's buffer
    dnnl::reorder reorder;
    std::optional<ByteLayoutChange> bytes;  // u8 / s8: qfuse's transpose instead
    // What the reorder reads of the staged buffer, when not the primitive's
    // own destination: the pixel shuffle's view.
    memory::desc staged_md = {};
  };

  // The pixel shuffle: two views of dims [n, o, i, j, h, w] (o the
  // deconvolution's output channel, (i, j) the kernel position), one over the
  // staged [N, H, W, OC * kh * kw] buffer, one over the output in `layout`,
  // where the value lands at (h * kh + i, w * kw + j); one reorder moves it.
  Stage shuffle_stage(std::size_t offset, Layout layout) const {
    const Build::Shuffle& f = *b_.shuffle;
    const std::int64_t n = b_.dst_dims[0], c = b_.dst_dims[1], h = b_.dst_dims[2];
    const std::int64_t w = b_.dst_dims[3], kh = f.kh, kw = f.kw, oc = f.oc;
    const std::int64_t ho = f.out[2], wo = f.out[3];
    const memory::dims dims{n, oc, kh, kw, h, w};
    const memory::data_type type = b_.dst_md.data_type();
    Stage st{offset, {}, {}, {}, {}};
    st.staged_md = memory::desc(dims, type, memory::dims{h * w * c, kh * kw, kw, 1, w * c, c});
    st.user_md = memory::desc(
        dims, type,
        layout == Layout::channels_last
            ? memory::dims{ho * wo * oc, 1, wo * oc, oc, kh * wo * oc, kw * oc}
            : memory::dims{oc * ho * wo, ho * wo, wo, 1, kh * wo, kw});
    st.reorder = dnnl::reorder(dnnl::reorder::primitive_desc(engine_, st.staged_md, engine_,
                                                             st.user_md));
    return st;
  }

  // u8 / s8 tensors change layout through qfuse's block transpose, several
  // times faster than oneDNN 2.6's reorder (see plugin/transpose.hpp).
  static std::optional<ByteLayoutChange> byte_layout_change(const Shape& shape, ElementType type,
                                                            bool to_channels_last) {
    if (element_size(type) != 1 || shape.size() < 3 || element_count(shape) == 0) {
      return std::nullopt;
    }
    const std::int64_t spatial = element_count(shape) / (shape[0] * shape[1]);
    return ByteLayoutChange{shape[0], shape[1], spatial, to_channels_last};
  }

  static std::size_t align(std::size_t n) { return (n + 63) / 64 * 64; }

  // One request's memory objects; data handles are set before every run.
  struct State {
    std::unordered_map<int, memory> args;
    memory user_src, user_dst, residual, residual_in_dst;
    memory integer_out;  // integer-only: the requantized output before its dst stage
    memory staged_view;  // the pixel shuffle's view of the staged destination
    std::unordered_map<int, memory> staged_binary;  // plain operands of binary_stages_
  };

  // The binary post-ops' run-time operands (staged channels last where
  // stored plain), the scratchpad, and run-time weights (u8 shifted to s8).
  void bind_run_time_operands(ExecContext& ctx, State& st, std::uint8_t* scratch) const {
    const Node& n = node();
    const std::size_t first_external = n.attr<QuantizedLayerAttrs>().first_external_input();
    for (const auto& arg : binary_args_) {
      if (arg.external_input) {
        const ValueId v = n.inputs[first_external + static_cast<std::size_t>(*arg.external_input)];
        void* data = const_cast<void*>(ctx.in(v).raw_data());
        if (const auto it = binary_stages_.find(arg.arg); it != binary_stages_.end()) {
          memory& user = st.staged_binary.at(arg.arg);
          user.set_data_handle(data);
          st.args.at(arg.arg).set_data_handle(scratch + it->second.offset);
          ctx.staged([&] { it->second.reorder.execute(ctx.stream(), user, st.args.at(arg.arg)); });
        } else {
          st.args.at(arg.arg).set_data_handle(data);
        }
      }
    }
    if (scratchpad_md_.get_size() > 0) st.args.at(DNNL_ARG_SCRATCHPAD).set_data_handle(scratch);
    if (b_.runtime_weights) {
      const Tensor& w = ctx.in(n.inputs[1]);
      if (b_.shift_weights) {
        auto* shifted = scratch + shifted_weights_offset_;
        shift_u8_to_s8(static_cast<const std::uint8_t*>(w.raw_data()), shifted,
                       static_cast<std::size_t>(w.size()));
        st.args.at(DNNL_ARG_WEIGHTS).set_data_handle(shifted);
      } else {
        st.args.at(DNNL_ARG_WEIGHTS).set_data_handle(const_cast<void*>(w.raw_data()));
      }
    }
  }

  // A dynamic layer's bias and output scales, made from its run-time inputs.
  void bind_dynamic_quantization(ExecContext& ctx, State& st, std::uint8_t* scratch) const {
    const Node& n = node();
    // bias[c] = -z * sum_k w[c, k]: with the accumulator, the integer
    // sum_k w[c, k] * (x[k] - z); then the run-time scales.
    const Tensor& zt = ctx.in(n.inputs[2]);
    const std::int64_t z = zt.type() == ElementType::u8 ? zt.data<std::uint8_t>()[0]
                                                        : zt.data<std::int8_t>()[0];
    auto* bias = reinterpret_cast<float*>(scratch + dynamic_bias_offset_);
    for (std::size_t c = 0; c < b_.weight_sums.size(); ++c) {
      bias[c] = static_cast<float>(-z * b_.weight_sums[c]);
    }
    auto* scales = reinterpret_cast<float*>(scratch + dynamic_scales_offset_);
    const auto r = ctx.in(n.inputs[3]).data<float>();
    const std::vector<float>& ws = b_.dynamic_weight_scales;
    if (ws.empty()) {
      std::memcpy(scales, r.data(), b_.dynamic_scales * sizeof(float));
    } else {
      // ONNX Runtime's Mul(s, ws), one f32 product per channel.
      for (std::size_t c = 0; c < b_.dynamic_scales; ++c) {
        scales[c] = r[0] * ws[ws.size() == 1 ? 0 : c];
      }
    }
    st.args.at(DNNL_ARG_BIAS).set_data_handle(bias);
    st.args.at(DNNL_ARG_ATTR_OUTPUT_SCALES).set_data_handle(scales);
  }

  // The sum post-op's residual is copied into the destination first.
  bool copies_residual() const {
    return b_.sum_input && !sum_in_place_ && !b_.integer && !b_.residual_after;
  }

  // The source staged channels last, and the residual the sum post-op reads
  // copied into the destination.
  void stage_inputs(ExecContext& ctx, State& st, void* user_src, void* src, void* dst) const {
    const Node& n = node();
    if (src_stage_) {
      st.user_src.set_data_handle(user_src);
      ctx.staged([&] {
        if (src_stage_->bytes) {
          src_stage_->bytes->run(user_src, src);
        } else {
          src_stage_->reorder.execute(ctx.stream(), st.user_src, st.args.at(DNNL_ARG_SRC));
        }
      });
    }
    if (copies_residual()) {
      st.residual.set_data_handle(const_cast<void*>(ctx.in(n.inputs[*b_.sum_input]).raw_data()));
      st.residual_in_dst.set_data_handle(dst);
      ctx.staged([&] {
        if (residual_bytes_) {
          residual_bytes_->run(st.residual.get_data_handle(), dst);
        } else {
          residual_copy_.execute(ctx.stream(), st.residual, st.residual_in_dst);
        }
      });
    }
  }

  // Integer-only mode: the s32 accumulators requantized into `dst`.
  void requantize(ExecContext& ctx, std::uint8_t* scratch, void* dst) const {
    ctx.stream().wait();
    const void* residual = nullptr;
    if (integer_residual_) {
      residual = ctx.in(*integer_residual_).raw_data();
      if (integer_residual_stage_) {
        void* staged = scratch + integer_residual_stage_->offset;
        ctx.staged([&] { integer_residual_stage_->bytes->run(residual, staged); });
        residual = staged;
      }
    }
    const std::int64_t channels = b_.integer->channels;
    requantizer_->run(reinterpret_cast<const std::int32_t*>(scratch + acc_offset_),
                      element_count(b_.dst_dims) / channels, residual, dst);
  }

  // The output moved from its staging area into the caller's buffer.
  void unstage_output(ExecContext& ctx, State& st, void* dst, void* user_dst) const {
    st.user_dst.set_data_handle(user_dst);
    ctx.staged([&] {
      if (dst_stage_->bytes) {
        dst_stage_->bytes->run(dst, user_dst);
      } else if (dst_stage_->staged_md) {
        st.staged_view.set_data_handle(dst);
        dst_stage_->reorder.execute(ctx.stream(), st.staged_view, st.user_dst);
      } else if (b_.integer) {
        // The requantized output, not the accumulators DST points at.
        st.integer_out.set_data_handle(dst);
        dst_stage_->reorder.execute(ctx.stream(), st.integer_out, st.user_dst);
      } else {
        dst_stage_->reorder.execute(ctx.stream(), st.args.at(DNNL_ARG_DST), st.user_dst);
      }
    });
  }

  State make_state() const {
    State st;
    st.args.emplace(DNNL_ARG_SRC, memory(b_.src_md, engine_, nullptr));
    st.args.emplace(DNNL_ARG_WEIGHTS, b_.runtime_weights ? memory(b_.pd.weights_desc(), engine_, nullptr)
                                                         : weights_);
    if (bias_) st.args.emplace(DNNL_ARG_BIAS, bias_);
    if (!b_.weight_sums.empty()) {
      st.args.emplace(DNNL_ARG_BIAS, memory(b_.pd.weights_desc(1), engine_, nullptr));
      const memory::desc scales_md({static_cast<memory::dim>(b_.dynamic_scales)},
                                   memory::data_type::f32, memory::format_tag::x);
      st.args.emplace(DNNL_ARG_ATTR_OUTPUT_SCALES, memory(scales_md, engine_, nullptr));
    }
    st.args.emplace(DNNL_ARG_DST, memory(b_.dst_md, engine_, nullptr));
    for (const auto& arg : binary_args_) {
      st.args.emplace(arg.arg, arg.external_input ? memory(arg.desc, engine_, nullptr)
                                                  : constant_args_.at(arg.arg));
    }
    if (scratchpad_md_.get_size() > 0) {
      st.args.emplace(DNNL_ARG_SCRATCHPAD, memory(scratchpad_md_, engine_, nullptr));
    }
    for (const auto& [arg, stage] : binary_stages_) {
      st.staged_binary.emplace(arg, memory(stage.user_md, engine_, nullptr));
    }
    if (src_stage_) st.user_src = memory(src_stage_->user_md, engine_, nullptr);
    if (dst_stage_) st.user_dst = memory(dst_stage_->user_md, engine_, nullptr);
    if (dst_stage_ && dst_stage_->staged_md) {
      st.staged_view = memory(dst_stage_->staged_md, engine_, nullptr);
    }
    if (dst_stage_ && b_.integer) st.integer_out = memory(b_.out_md, engine_, nullptr);
    if (copies_residual()) {
      st.residual = memory(residual_md_, engine_, nullptr);
      st.residual_in_dst = memory(residual_dst_md_, engine_, nullptr);
    }
    return st;
  }

  dnnl::engine engine_;
  Build b_;
  dnnl::primitive primitive_;
  std::unique_ptr<DepthwiseKernel> depthwise_;
  std::string implementation_;
  memory::desc scratchpad_md_;
  memory weights_;
  memory bias_;
  std::vector<BinaryPostOpArg> binary_args_;
  std::unordered_map<int, memory> constant_args_;
  memory::desc residual_md_, residual_dst_md_;
  dnnl::reorder residual_copy_;
  std::optional<ByteLayoutChange> residual_bytes_;
  std::optional<Stage> src_stage_, dst_stage_;
  std::unordered_map<int, Stage> binary_stages_;  // by post-op argument
  bool sum_in_place_ = false;
  std::size_t total_scratch_ = 0;
  // A dynamic layer's bias and scales, made in the scratchpad each run.
  std::size_t dynamic_bias_offset_ = 0, dynamic_scales_offset_ = 0;
  std::size_t after_offset_ = 0;  // Build::residual_after: the primitive's output
  // u8 run-time weights as s8 (w - 128), made in the scratchpad each run.
  std::size_t shifted_weights_offset_ = 0;
  // Integer-only mode.
  std::size_t acc_offset_ = 0;
  std::optional<IntegerRequantizer> requantizer_;
  std::optional<ValueId> integer_residual_;
  std::optional<Stage> integer_residual_stage_;
};

}  // namespace

dnnl::memory::desc layout_desc(const Shape& shape, ElementType type, Layout layout) {
  if (layout == Layout::plain || shape.size() < 3) return plain_desc(shape, type);
  // N, C, spatial... stored as N, spatial..., C.
  std::vector<int> perm{0};
  for (std::size_t i = 2; i < shape.size(); ++i) perm.push_back(static_cast<int>(i));
  perm.push_back(1);
  Shape stored;
  for (int p : perm) stored.push_back(shape[static_cast<std::size_t>(p)]);
  // dims[i] = stored[inv[i]]
  std::vector<int> inv(perm.size());
  for (std::size_t i = 0; i < perm.size(); ++i) inv[static_cast<std::size_t>(perm[i])] = static_cast<int>(i);
  return permuted_desc(stored, inv, type);
}

// One accepted check: everything build_primitive() read, and what it built.
struct LayerBuildCache::Impl {
  struct Input {
    Shape shape;
    ElementType type = ElementType::f32;
    std::shared_ptr<const Tensor> constant;  // held, so its address names it
  };
  struct Entry {
    OpKind kind = OpKind::QuantizedConvolution;
    std::vector<Input> inputs;
    Shape out_shape;
    QuantizedLayerAttrs attrs;
    std::string chain;  // composer::chain_key of attrs.chain
    int threads = 1;    // omp_get_max_threads() when the descriptor was made
    Build build;
  };

  static Entry describe(const graph::Graph& g, const Node& node, const Shape& out_shape,
                        const CompileOptions& options) {
    Entry e;
    e.kind = node.kind;
    for (const graph::ValueId id : node.inputs) {
      const graph::Value& v = g.value(id);
      e.inputs.push_back({v.shape, v.type, v.constant});
    }
    e.out_shape = out_shape;
    e.attrs = node.attr<QuantizedLayerAttrs>();
    e.chain = composer::chain_key(e.attrs.chain, compose_options(options));
    e.threads = omp_get_max_threads();
    return e;
  }

  static bool same(const Entry& a, const Entry& b) {
    if (a.kind != b.kind || a.out_shape != b.out_shape || a.threads != b.threads ||
        a.chain != b.chain || a.inputs.size() != b.inputs.size()) {
      return false;
    }
    for (std::size_t i = 0; i < a.inputs.size(); ++i) {
      const Input &x = a.inputs[i], &y = b.inputs[i];
      // An activation may have been replaced by another of its shape and
      // type (a later pass rewrote its producer): the build reads only those.
      if (x.shape != y.shape || x.type != y.type || x.constant != y.constant) {
        return false;
      }
    }
    const QuantizedLayerAttrs &p = a.attrs, &q = b.attrs;
    const auto same_bits = [](float x, float y) {
      return std::bit_cast<std::uint32_t>(x) == std::bit_cast<std::uint32_t>(y);
    };
    return p.geometry == q.geometry && p.src_zero_point == q.src_zero_point &&
           p.weights_zero_point == q.weights_zero_point && p.has_bias == q.has_bias &&
           p.dynamic == q.dynamic &&
           std::equal(p.dynamic_weight_scales.begin(), p.dynamic_weight_scales.end(),
                      q.dynamic_weight_scales.begin(), q.dynamic_weight_scales.end(), same_bits);
  }

  KnownCompositions compositions;
  std::mutex mutex;
  std::unordered_map<std::string, Entry> by_node;  // the last accepted candidate per node name
  std::size_t reused = 0;
};

LayerBuildCache::LayerBuildCache() : impl_(std::make_unique<Impl>()) {}
LayerBuildCache::~LayerBuildCache() = default;

std::size_t LayerBuildCache::reused() const {
  const std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->reused;
}

void LayerBuildCache::add_compositions(Compositions compositions) {
  const std::lock_guard<std::mutex> lock(impl_->compositions.mutex);
  impl_->compositions.by_key.merge(compositions);
}

LayerBuildCache::Compositions LayerBuildCache::compositions() const {
  const std::lock_guard<std::mutex> lock(impl_->compositions.mutex);
  return impl_->compositions.by_key;
}

std::optional<std::string> check_quantized_layer(const graph::Graph& graph,
                                                 const graph::Node& node,
                                                 const Shape& output_shape,
                                                 const dnnl::engine& engine,
                                                 const CompileOptions& options,
                                                 LayerBuildCache* builds) {
  try {
    std::variant<Build, Refusal> built =
        build_primitive(builds != nullptr ? &builds->impl_->compositions : nullptr, graph, node,
                        output_shape, engine, options, Layout::channels_last, Layout::channels_last);
    if (const auto* refusal = std::get_if<Refusal>(&built)) return refusal->reason;
    Build& b = std::get<Build>(built);
    const std::string impl = b.pd.impl_info_str();
    if (impl.find("ref") != std::string::npos) {
      return "oneDNN offers only its reference implementation (" + impl + ")";
    }
    if (builds != nullptr) {
      LayerBuildCache::Impl::Entry e =
          LayerBuildCache::Impl::describe(graph, node, output_shape, options);
      e.build = std::move(b);
      const std::lock_guard<std::mutex> lock(builds->impl_->mutex);
      builds->impl_->by_node.insert_or_assign(node.name, std::move(e));
    }
    return std::nullopt;
  } catch (const dnnl::error& e) {
    return std::string("oneDNN refused it: ") + e.what();
  }
}

std::unique_ptr<ExecutableOp> make_quantized_layer(
    const graph::Graph& graph, const graph::Node& node, const dnnl::engine& engine,
    const CompileOptions& options, const std::function<Layout(graph::ValueId)>& layout_of,
    bool sum_in_place, LayerBuildCache* builds, const HeldConstants* held) {
  const Shape& out_shape = graph.value(node.outputs[0]).shape;
  std::optional<Build> reused;
  if (builds != nullptr) {
    const LayerBuildCache::Impl::Entry now =
        LayerBuildCache::Impl::describe(graph, node, out_shape, options);
    const std::lock_guard<std::mutex> lock(builds->impl_->mutex);
    const auto it = builds->impl_->by_node.find(node.name);
    if (it != builds->impl_->by_node.end() && LayerBuildCache::Impl::same(it->second, now)) {
      reused = std::move(it->second.build);
      builds->impl_->by_node.erase(it);
      ++builds->impl_->reused;
    }
  }
  if (!reused) {
    std::variant<Build, Refusal> built =
        build_primitive(builds != nullptr ? &builds->impl_->compositions : nullptr, graph, node,
                        out_shape, engine, options, Layout::channels_last, Layout::channels_last);
    if (const auto* refusal = std::get_if<Refusal>(&built)) {
      throw CompileError("compile " + std::string(graph::to_string(node.kind)) + " node '" +
                         node.name + "': " + refusal->reason);
    }
    reused = std::move(std::get<Build>(built));
  }
  return std::make_unique<QuantizedLayerOp>(graph, node, engine, std::move(*reused), layout_of,
                                            sum_in_place, held);
}

double composer_ms_on_this_thread() { return composer_ms; }

}  // namespace qfuse::plugin
