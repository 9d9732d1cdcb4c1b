#include "reference.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <cstddef>
#include <cstring>
#include <numbers>
#include <stdexcept>

#include <oneapi/dnnl/dnnl.hpp>

#include "plugin/post_ops_attr.hpp"

namespace qfuse::composer::testing {
namespace {

float at(const std::vector<float>& v, int c) {
  return v.size() == 1 ? v.front() : v[static_cast<std::size_t>(c)];
}

// A value within f32 noise of k + 0.5 for an integer k.
bool is_near_tie(double v) {
  const double distance = std::fabs(v - std::floor(v) - 0.5);
  return distance <= 1e-4 * std::max(1.0, std::fabs(v));
}

float eltwise(EltwiseAlg alg, float x, float alpha, float beta) {
  switch (alg) {
    case EltwiseAlg::relu: return x > 0.0F ? x : alpha * x;
    case EltwiseAlg::tanh: return std::tanh(x);
    case EltwiseAlg::elu: return x > 0.0F ? x : alpha * (std::exp(x) - 1.0F);
    case EltwiseAlg::square: return x * x;
    case EltwiseAlg::abs: return std::fabs(x);
    case EltwiseAlg::sqrt: return std::sqrt(x);
    case EltwiseAlg::linear: return alpha * x + beta;
    case EltwiseAlg::clip: return std::min(std::max(x, alpha), beta);
    case EltwiseAlg::logistic: return 1.0F / (1.0F + std::exp(-x));
    case EltwiseAlg::exp: return std::exp(x);
    case EltwiseAlg::gelu_tanh: {
      const float k = std::sqrt(2.0F / std::numbers::pi_v<float>);
      return 0.5F * x * (1.0F + std::tanh(k * (x + 0.044715F * x * x * x)));
    }
    case EltwiseAlg::gelu_erf: return 0.5F * x * (1.0F + std::erf(x / std::numbers::sqrt2_v<float>));
    case EltwiseAlg::log: return std::log(x);
    case EltwiseAlg::swish: return x / (1.0F + std::exp(-alpha * x));
    case EltwiseAlg::hardswish: return x * std::min(std::max(x + 3.0F, 0.0F), 6.0F) / 6.0F;
    case EltwiseAlg::hsigmoid: return std::min(std::max(x + 3.0F, 0.0F), 6.0F) / 6.0F;
    case EltwiseAlg::round: return std::nearbyint(x);
    case EltwiseAlg::mish: return x * std::tanh(std::log1p(std::exp(x)));
  }
  throw std::invalid_argument("reference: unknown eltwise");
}

float binary(BinaryAlg alg, float x, float t) {
  switch (alg) {
    case BinaryAlg::add: return x + t;
    case BinaryAlg::sub: return x - t;
    case BinaryAlg::mul: return x * t;
    case BinaryAlg::min: return std::min(x, t);
    case BinaryAlg::max: return std::max(x, t);
  }
  throw std::invalid_argument("reference: unknown binary");
}

// The definition, evaluated in double with the multiplication before the
// division so that a value exactly on a tie stays exactly on it.
float fake_quantize(const FakeQuantize& fq, float x, int c, bool& near_tie) {
  const double il = at(fq.input_low, c);
  const double ih = at(fq.input_high, c);
  const double ol = at(fq.output_low, c);
  const double oh = at(fq.output_high, c);
  if (x <= std::min(il, ih)) {
    return static_cast<float>(ol);
  }
  if (x > std::max(il, ih)) {
    return static_cast<float>(oh);
  }
  const double steps = fq.levels - 1;
  const double t = (static_cast<double>(x) - il) * steps / (ih - il);
  near_tie = near_tie || is_near_tie(t);
  return static_cast<float>(std::nearbyint(t) / steps * (oh - ol) + ol);
}

// ONNX's QuantizeLinear from its definition: x / scale in f32, rounded half
// to even, plus the zero point, clamped to the codes.
float quantize(const Quantize& q, float x, int c, bool& near_tie) {
  const float t = x / at(q.scale, c);
  near_tie = near_tie || is_near_tie(t);
  return std::min(std::max(std::nearbyint(t) + at(q.zero_point, c), q.lo), q.hi);
}

// One step that does not round (Scale, Shift, Clip, an eltwise other than
// round, Sum, Binary) applied to v; false for the rounding steps, which the
// callers handle.
bool apply_plain(const Step& step, const CaseData& data, std::size_t index, int c, float& v) {
  if (const auto* s = std::get_if<Scale>(&step)) {
    v = v * at(s->values, c);
  } else if (const auto* b = std::get_if<Shift>(&step)) {
    v = v + at(b->values, c);
  } else if (const auto* clip = std::get_if<Clip>(&step)) {
    v = std::min(std::max(v, at(clip->lo, c)), at(clip->hi, c));
  } else if (const auto* e = std::get_if<Eltwise>(&step); e != nullptr && e->alg != EltwiseAlg::round) {
    v = eltwise(e->alg, v, e->alpha, e->beta);
  } else if (const auto* sum = std::get_if<Sum>(&step)) {
    v = v + sum->scale * data.residual[index];
  } else if (const auto* bin = std::get_if<Binary>(&step)) {
    const std::vector<float>& t = data.binaries.at(bin->input);
    v = binary(bin->alg, v, bin->broadcast == Broadcast::per_channel ? t[static_cast<std::size_t>(c)] : t[index]);
  } else {
    return false;
  }
  return true;
}

float evaluate_one(const PostOpChain& chain, const CaseData& data, int p, int c, bool& near_tie) {
  const std::size_t index = static_cast<std::size_t>(p) * static_cast<std::size_t>(data.channels) +
                            static_cast<std::size_t>(c);
  auto v = static_cast<float>(data.acc[index]);
  for (const Step& step : chain.steps) {
    if (apply_plain(step, data, index, c, v)) continue;
    if (const auto* fq = std::get_if<FakeQuantize>(&step)) {
      v = fake_quantize(*fq, v, c, near_tie);
    } else if (const auto* q = std::get_if<Quantize>(&step)) {
      v = quantize(*q, v, c, near_tie);
    } else {  // Round, or eltwise round
      near_tie = near_tie || is_near_tie(v);
      v = std::nearbyint(v);
    }
  }
  if (chain.dst_type != DataType::f32) {
    near_tie = near_tie || is_near_tie(v);
    const float lo = chain.dst_type == DataType::s8 ? -128.0F : 0.0F;
    const float hi = chain.dst_type == DataType::s8 ? 127.0F : 255.0F;
    v = std::nearbyint(std::min(std::max(v, lo), hi));
  }
  return v;
}

dnnl::memory::data_type dnnl_type(DataType type) {
  switch (type) {
    case DataType::f32: return dnnl::memory::data_type::f32;
    case DataType::s8: return dnnl::memory::data_type::s8;
    case DataType::u8: return dnnl::memory::data_type::u8;
  }
  throw std::invalid_argument("unknown type");
}

// Writes `values` (row-major [pixel][channel]) into `memory` laid out as
// N C [H W] with H * W = spatial.
void store(dnnl::memory& memory, const std::vector<float>& values, DataType type, int channels,
           int spatial) {
  const std::size_t count = values.size();
  auto* raw = static_cast<unsigned char*>(memory.get_data_handle());
  for (std::size_t i = 0; i < count; ++i) {
    const std::size_t p = i / static_cast<std::size_t>(channels);
    const std::size_t c = i % static_cast<std::size_t>(channels);
    const std::size_t n = p / static_cast<std::size_t>(spatial);
    const std::size_t hw = p % static_cast<std::size_t>(spatial);
    const std::size_t offset =
        (n * static_cast<std::size_t>(channels) + c) * static_cast<std::size_t>(spatial) + hw;
    if (type == DataType::f32) {
      std::memcpy(raw + offset * 4, &values[i], 4);
    } else if (type == DataType::s8) {
      const auto q = static_cast<std::int8_t>(values[i]);
      std::memcpy(raw + offset, &q, 1);
    } else {
      raw[offset] = static_cast<unsigned char>(values[i]);
    }
  }
}

std::vector<float> load(const dnnl::memory& memory, DataType type, int pixels, int channels,
                        int spatial) {
  std::vector<float> values(static_cast<std::size_t>(pixels) * static_cast<std::size_t>(channels));
  const auto* raw = static_cast<const unsigned char*>(memory.get_data_handle());
  for (std::size_t i = 0; i < values.size(); ++i) {
    const std::size_t p = i / static_cast<std::size_t>(channels);
    const std::size_t c = i % static_cast<std::size_t>(channels);
    const std::size_t n = p / static_cast<std::size_t>(spatial);
    const std::size_t hw = p % static_cast<std::size_t>(spatial);
    const std::size_t offset =
        (n * static_cast<std::size_t>(channels) + c) * static_cast<std::size_t>(spatial) + hw;
    if (type == DataType::f32) {
      std::memcpy(&values[i], raw + offset * 4, 4);
    } else if (type == DataType::s8) {
      std::int8_t q = 0;
      std::memcpy(&q, raw + offset, 1);
      values[i] = q;
    } else {
      values[i] = raw[offset];
    }
  }
  return values;
}

bool is_rounding(const Step& step) {
  if (std::holds_alternative<Round>(step) || std::holds_alternative<FakeQuantize>(step) ||
      std::holds_alternative<Quantize>(step)) {
    return true;
  }
  const auto* e = std::get_if<Eltwise>(&step);
  return e != nullptr && e->alg == EltwiseAlg::round;
}

// evaluate_one from step `from` on, branching at near-tie rounding points
// that `may_branch` allows (and at the s8/u8 store): both neighbours of a tie
// are followed; elsewhere a tie rounds half to even, as the chain does.
void outcomes_from(const PostOpChain& chain, const CaseData& data, std::size_t index, int c,
                   std::size_t from, float v, const std::function<bool(std::size_t)>& may_branch,
                   std::vector<float>& out) {
  const auto round_both = [&](double t, const std::function<float(double)>& back,
                              std::size_t step) {
    if (may_branch(step) && is_near_tie(t) && out.size() < 256) {
      outcomes_from(chain, data, index, c, step + 1, back(std::floor(t)), may_branch, out);
      outcomes_from(chain, data, index, c, step + 1, back(std::floor(t) + 1.0), may_branch, out);
    } else {
      outcomes_from(chain, data, index, c, step + 1, back(std::nearbyint(t)), may_branch, out);
    }
  };
  const auto identity = [](double r) { return static_cast<float>(r); };
  for (std::size_t k = from; k < chain.steps.size(); ++k) {
    const Step& step = chain.steps[k];
    if (apply_plain(step, data, index, c, v)) continue;
    if (const auto* q = std::get_if<Quantize>(&step)) {
      const float t = v / at(q->scale, c);
      const float z = at(q->zero_point, c), lo = q->lo, hi = q->hi;
      round_both(t, [z, lo, hi](double r) {
        return std::min(std::max(static_cast<float>(r) + z, lo), hi);
      }, k);
      return;
    }
    const auto* fq = std::get_if<FakeQuantize>(&step);
    if (fq == nullptr) {  // Round, or eltwise round
      round_both(v, identity, k);
      return;
    }
    const double il = at(fq->input_low, c), ih = at(fq->input_high, c);
    const double ol = at(fq->output_low, c), oh = at(fq->output_high, c);
    if (v <= std::min(il, ih)) {
      v = static_cast<float>(ol);
    } else if (v > std::max(il, ih)) {
      v = static_cast<float>(oh);
    } else {
      const double steps = fq->levels - 1;
      const double t = (static_cast<double>(v) - il) * steps / (ih - il);
      round_both(t, [&](double r) { return static_cast<float>(r / steps * (oh - ol) + ol); }, k);
      return;
    }
  }
  if (chain.dst_type != DataType::f32) {
    const float lo = chain.dst_type == DataType::s8 ? -128.0F : 0.0F;
    const float hi = chain.dst_type == DataType::s8 ? 127.0F : 255.0F;
    const double t = std::min(std::max(v, lo), hi);
    const auto store = [lo, hi](double r) { return std::min(std::max(static_cast<float>(r), lo), hi); };
    if (is_near_tie(t)) {
      out.push_back(store(std::floor(t)));
      out.push_back(store(std::floor(t) + 1.0));
    } else {
      out.push_back(store(std::nearbyint(t)));
    }
    return;
  }
  out.push_back(v);
}

}  // namespace

std::vector<std::vector<float>> evaluate_tie_outcomes(const PostOpChain& chain,
                                                      const CaseData& data, TieBranching branching) {
  std::size_t first = chain.steps.size(), last = chain.steps.size();
  for (std::size_t k = 0; k < chain.steps.size(); ++k) {
    if (!is_rounding(chain.steps[k])) continue;
    if (first == chain.steps.size()) first = k;
    last = k;
  }
  const auto may_branch = [&](std::size_t step) {
    return branching == TieBranching::every_rounding_point || step == first ||
           (chain.dst_type == DataType::f32 && step == last);
  };
  std::vector<std::vector<float>> all;
  for (int p = 0; p < data.pixels; ++p) {
    for (int c = 0; c < data.channels; ++c) {
      const std::size_t index = static_cast<std::size_t>(p) * static_cast<std::size_t>(data.channels) +
                                static_cast<std::size_t>(c);
      std::vector<float> out;
      outcomes_from(chain, data, index, c, 0, static_cast<float>(data.acc[index]), may_branch, out);
      all.push_back(std::move(out));
    }
  }
  return all;
}

Reference evaluate_reference(const PostOpChain& chain, const CaseData& data) {
  Reference ref;
  for (int p = 0; p < data.pixels; ++p) {
    for (int c = 0; c < data.channels; ++c) {
      bool near_tie = false;
      ref.values.push_back(evaluate_one(chain, data, p, c, near_tie));
      ref.near_tie.push_back(near_tie);
    }
  }
  return ref;
}

std::vector<float> run_fused(const PostOpsPlan& plan, const CaseData& data, Anchor anchor) {
  using dnnl::memory;
  using tag = memory::format_tag;
  const int channels = data.channels;
  const int in_channels = 4 * channels;
  // Convolutions use spatial 2x2, so pixels must be a multiple of 4.
  const int spatial = anchor == Anchor::convolution_1x1 ? 4 : 1;
  const int batch = data.pixels / spatial;
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);

  // acc = 64 * (s0 - s1) + (s2 - s3) with weights {64, -64, 1, -1} per channel.
  std::vector<float> src(static_cast<std::size_t>(data.pixels) * static_cast<std::size_t>(in_channels), 0.0F);
  for (int p = 0; p < data.pixels; ++p) {
    for (int c = 0; c < channels; ++c) {
      const std::int32_t acc = data.acc[static_cast<std::size_t>(p * channels + c)];
      if (std::abs(acc) > 16383) {
        throw std::invalid_argument("run_fused: |acc| must be <= 16383");
      }
      const std::int32_t high = acc / 64;
      const std::int32_t low = acc - 64 * high;
      float* s = &src[static_cast<std::size_t>(p * in_channels + 4 * c)];
      s[high >= 0 ? 0 : 1] = static_cast<float>(std::abs(high));
      s[low >= 0 ? 2 : 3] = static_cast<float>(std::abs(low));
    }
  }
  std::vector<float> weights(static_cast<std::size_t>(channels) * static_cast<std::size_t>(in_channels), 0.0F);
  for (int c = 0; c < channels; ++c) {
    float* w = &weights[static_cast<std::size_t>(c * in_channels + 4 * c)];
    w[0] = 64.0F;
    w[1] = -64.0F;
    w[2] = 1.0F;
    w[3] = -1.0F;
  }

  memory::dims src_dims;
  memory::dims wei_dims;
  memory::dims dst_dims;
  if (anchor == Anchor::inner_product) {
    src_dims = {batch, in_channels};
    wei_dims = {channels, in_channels};
    dst_dims = {batch, channels};
  } else {
    src_dims = {batch, in_channels, 2, 2};
    wei_dims = {channels, in_channels, 1, 1};
    dst_dims = {batch, channels, 2, 2};
  }
  const tag act_tag = anchor == Anchor::inner_product ? tag::ab : tag::nchw;
  const tag wei_tag = anchor == Anchor::inner_product ? tag::oi : tag::oihw;
  const memory::desc src_md(src_dims, memory::data_type::u8, act_tag);
  const memory::desc wei_any(wei_dims, memory::data_type::s8, tag::any);
  const memory::desc dst_md(dst_dims, dnnl_type(plan.dst_type), act_tag);

  const dnnl::primitive_attr attr = plugin::make_primitive_attr(plan, dst_dims);
  dnnl::primitive prim;
  memory::desc wei_md;
  if (anchor == Anchor::inner_product) {
    const dnnl::inner_product_forward::primitive_desc pd(
        {dnnl::prop_kind::forward_inference, src_md, wei_any, dst_md}, attr, engine);
    prim = dnnl::inner_product_forward(pd);
    wei_md = pd.weights_desc();
  } else {
    const dnnl::convolution_forward::primitive_desc pd(
        {dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src_md, wei_any,
         dst_md, {1, 1}, {0, 0}, {0, 0}},
        attr, engine);
    prim = dnnl::convolution_forward(pd);
    wei_md = pd.weights_desc();
  }

  memory src_mem(src_md, engine);
  store(src_mem, src, DataType::u8, in_channels, spatial);
  memory wei_plain({wei_dims, memory::data_type::s8, wei_tag}, engine);
  auto* w8 = static_cast<std::int8_t*>(wei_plain.get_data_handle());
  for (std::size_t i = 0; i < weights.size(); ++i) {
    w8[i] = static_cast<std::int8_t>(weights[i]);
  }
  memory wei_mem(wei_md, engine);
  dnnl::reorder(wei_plain, wei_mem).execute(stream, wei_plain, wei_mem);

  memory dst_mem(dst_md, engine);
  std::memset(dst_mem.get_data_handle(), 0, dst_md.get_size());
  if (!data.residual.empty()) {
    // The sum post-op reads the residual from the destination buffer, in the
    // residual's own type (same element size as the destination).
    DataType residual_type = plan.dst_type;
    for (const PostOp& op : plan.post_ops) {
      if (const auto* s = std::get_if<SumPostOp>(&op)) {
        residual_type = s->data_type;
      }
    }
    store(dst_mem, data.residual, residual_type, channels, spatial);
  }

  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, src_mem}, {DNNL_ARG_WEIGHTS, wei_mem}, {DNNL_ARG_DST, dst_mem}};
  const auto binary_args = plugin::binary_post_op_args(plan, dst_dims);
  for (auto& [arg, mem] : plugin::make_constant_post_op_memory(binary_args, engine)) {
    args.emplace(arg, mem);
  }
  for (const plugin::BinaryPostOpArg& arg : binary_args) {
    if (!arg.external_input) {
      continue;
    }
    const std::vector<float>& values = data.binaries.at(*arg.external_input);
    memory mem(arg.desc, engine);
    if (values.size() == static_cast<std::size_t>(channels)) {
      std::memcpy(mem.get_data_handle(), values.data(), values.size() * sizeof(float));
    } else {
      store(mem, values, DataType::f32, channels, spatial);
    }
    args.emplace(arg.arg, mem);
  }
  prim.execute(stream, args);
  stream.wait();
  return load(dst_mem, plan.dst_type, data.pixels, channels, spatial);
}

Comparison compare(const Reference& ref, const std::vector<float>& fused, DataType dst_type,
                   float rel_tolerance, float tie_quantum) {
  Comparison result;
  for (std::size_t i = 0; i < ref.values.size(); ++i) {
    ++result.compared;
    const float expected = ref.values[i];
    const float diff = std::fabs(fused[i] - expected);
    bool ok = false;
    if (dst_type == DataType::f32) {
      ok = diff <= rel_tolerance * std::max(1.0F, std::fabs(expected));
      if (!ok && ref.near_tie[i] && diff <= tie_quantum * 1.001F) {
        ok = true;
        ++result.one_lsb;
      }
    } else {
      ok = diff == 0.0F;
      if (!ok && ref.near_tie[i] && diff == 1.0F) {
        ok = true;
        ++result.one_lsb;
      }
    }
    if (!ok && std::isnan(expected) && std::isnan(fused[i])) {
      ok = true;
    }
    if (!ok) {
      if (result.failures++ == 0) {
        result.first_failure = "element " + std::to_string(i) + ": reference " +
                               std::to_string(expected) + ", fused " + std::to_string(fused[i]) +
                               (ref.near_tie[i] ? " (near tie)" : "");
      }
    }
  }
  return result;
}

}  // namespace qfuse::composer::testing
