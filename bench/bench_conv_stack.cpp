// A stack of four quantized 3x3 convolutions run by
// qfuse (fused int8) against the same convolutions created directly with
// oneDNN (u8 x s8 -> u8, channels last, per-channel output scales, relu
// post-op), plus the two reorders at the graph boundary that qfuse also does
// (plain u8 in, plain u8 out). Compare medians from the same run:
//   BM_QfuseConvStack / BM_RawConvStack  ~ 1 means qfuse loses nothing.
// The unfused reference path is measured on the same graph for scale.

#include <omp.h>

#include <cstring>
#include <random>

#include <benchmark/benchmark.h>
#include <oneapi/dnnl/dnnl.hpp>

#include "bench/bench_main.hpp"
#include "graph/builder.hpp"
#include "plugin/api_internal.hpp"

namespace {

using namespace qfuse;
using graph::OpKind;

constexpr std::int64_t kChannels = 64;
constexpr std::int64_t kSize = 56;
constexpr int kLayers = 4;

std::vector<float> random_vector(std::size_t n, float lo, float hi, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// u8 input -> [dequantize -> conv 3x3 (per-channel FQ weights) + bias -> relu
// -> FQ u8] x kLayers -> u8 output (through a final quantize-only FQ).
graph::Graph conv_stack() {
  graph::Graph g;
  graph::Builder b(g);
  const Shape x_shape{1, kChannels, kSize, kSize};
  graph::ValueId x = b.input("x", x_shape, ElementType::u8);
  const float act_scale = 6.0f / 255.0f;
  graph::ValueId cur = b.multiply(b.convert(x, ElementType::f32), b.scalar(act_scale));
  for (int l = 0; l < kLayers; ++l) {
    const std::string name = "conv" + std::to_string(l);
    const auto w = random_vector(static_cast<std::size_t>(kChannels * kChannels * 9), -0.1f, 0.1f, 1u + static_cast<unsigned>(l));
    const graph::ValueId wv = b.constant(name + ".w", {kChannels, kChannels, 3, 3}, w);
    std::vector<float> lo(kChannels), hi(kChannels);
    for (std::size_t c = 0; c < lo.size(); ++c) {
      hi[c] = 0.1f;
      lo[c] = -0.1f;
    }
    const graph::ValueId l_lo = b.constant(name + ".lo", {kChannels, 1, 1, 1}, lo);
    const graph::ValueId l_hi = b.constant(name + ".hi", {kChannels, 1, 1, 1}, hi);
    const graph::ValueId wq = b.fake_quantize(wv, l_lo, l_hi, l_lo, l_hi, 255);
    const graph::ValueId bias =
        b.constant(name + ".b", {kChannels}, random_vector(kChannels, -0.1f, 0.1f, 99));
    graph::ConvAttrs attrs{.strides = {1, 1}, .dilations = {1, 1}, .pads_begin = {1, 1},
                           .pads_end = {1, 1}, .groups = 1};
    cur = b.relu(b.convolution(cur, wq, bias, attrs, name));
    cur = b.fake_quantize(cur, 0.0f, 6.0f, 0.0f, 6.0f, 256, name + ".q");
  }
  // Quantize-only FQ + Convert: the last layer writes u8.
  cur = b.fake_quantize(cur, 0.0f, 6.0f, 0.0f, 255.0f, 256, "out.q");
  b.output(b.convert(cur, ElementType::u8, "y"));
  return g;
}

Tensor random_u8_input() {
  Tensor t(ElementType::u8, {1, kChannels, kSize, kSize});
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> d(0, 255);
  for (auto& v : t.data<std::uint8_t>()) v = static_cast<std::uint8_t>(d(rng));
  return t;
}

void run_qfuse(benchmark::State& state, bool fuse) {
  const int threads = static_cast<int>(state.range(0));
  omp_set_num_threads(threads);
  const CompiledModel model = compile(conv_stack(), {.fuse = fuse});
  InferRequest request = model.create_infer_request();
  request.set_threads(threads);
  request.set_input("x", random_u8_input());
  request.infer();
  for (auto _ : state) request.infer();
  const double macs = static_cast<double>(kLayers * kChannels * kChannels * 9 * kSize * kSize);
  state.counters["GOPS"] = benchmark::Counter(2.0 * macs / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_QfuseConvStack(benchmark::State& state) { run_qfuse(state, true); }
void BM_UnfusedConvStack(benchmark::State& state) { run_qfuse(state, false); }

void BM_RawConvStack(benchmark::State& state) {
  using dnnl::memory;
  const int threads = static_cast<int>(state.range(0));
  omp_set_num_threads(threads);
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  const memory::dims act{1, kChannels, kSize, kSize};
  const memory::desc plain(act, memory::data_type::u8, memory::format_tag::nchw);
  const memory::desc nhwc(act, memory::data_type::u8, memory::format_tag::nhwc);
  const memory::desc w_any({kChannels, kChannels, 3, 3}, memory::data_type::s8, memory::format_tag::any);
  const memory::desc b_md({kChannels}, memory::data_type::f32, memory::format_tag::a);

  dnnl::primitive_attr attr;
  attr.set_output_scales(1 << 1, std::vector<float>(kChannels, 0.01f));
  dnnl::post_ops ops;
  ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
  attr.set_post_ops(ops);
  dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference,
                                    dnnl::algorithm::convolution_direct, nhwc, w_any, b_md, nhwc,
                                    {1, 1}, {0, 0}, {1, 1}, {1, 1});
  dnnl::convolution_forward::primitive_desc pd(d, attr, engine);
  dnnl::convolution_forward conv(pd);
  state.SetLabel(pd.impl_info_str());

  memory in(plain, engine), out(plain, engine);
  std::vector<memory> acts;
  for (int l = 0; l <= kLayers; ++l) acts.emplace_back(nhwc, engine);
  memory w(pd.weights_desc(), engine), b(b_md, engine);
  std::memset(w.get_data_handle(), 1, pd.weights_desc().get_size());
  std::memset(b.get_data_handle(), 0, b_md.get_size());
  std::memset(in.get_data_handle(), 3, plain.get_size());
  dnnl::reorder to_nhwc(in, acts[0]), to_plain(acts[kLayers], out);
  for (auto _ : state) {
    to_nhwc.execute(stream, in, acts[0]);
    for (int l = 0; l < kLayers; ++l) {
      conv.execute(stream, {{DNNL_ARG_SRC, acts[static_cast<std::size_t>(l)]},
                            {DNNL_ARG_WEIGHTS, w},
                            {DNNL_ARG_BIAS, b},
                            {DNNL_ARG_DST, acts[static_cast<std::size_t>(l) + 1]}});
    }
    to_plain.execute(stream, acts[kLayers], out);
    stream.wait();
  }
  const double macs = static_cast<double>(kLayers * kChannels * kChannels * 9 * kSize * kSize);
  state.counters["GOPS"] = benchmark::Counter(2.0 * macs / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK(BM_RawConvStack)->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_QfuseConvStack)->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_UnfusedConvStack)->Arg(2)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  if (!qfuse::bench::take_isa_flag(argc, argv)) return 2;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
