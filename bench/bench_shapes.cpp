// What serving every input shape from one compiled model would cost, measured
// on oneDNN itself, before qfuse chooses how to do it:
//   - an int8 matmul (u8 x s8 -> u8, per-channel output scales) whose M is a
//     run-time dimension (DNNL_RUNTIME_DIM_VAL), against one created for each
//     M, at BERT-base's K and N: BM_Matmul/<K>x<N>/M<m>/fixed and /runtime_m.
//     Compare medians of the same run; the label is the implementation.
//   - before the benchmarks, whether the weights' layout a primitive chooses
//     (format any) depends on the shape of its activations: the matmul's on M,
//     a convolution's on the batch and the image size. Weights prepared once
//     for every shape need it not to, or one copy per layout.

#include <cstdint>
#include <iostream>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include <benchmark/benchmark.h>
#include <oneapi/dnnl/dnnl.hpp>

#include "bench/bench_main.hpp"

namespace {

using dnnl::memory;
using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

dnnl::engine& engine() {
  static dnnl::engine e{dnnl::engine::kind::cpu, 0};
  return e;
}

// A blocked layout as text: its inner blocks and the order of its strides.
std::string layout_text(const memory::desc& md) {
  const dnnl_memory_desc_t& d = md.data;
  if (d.format_kind != dnnl_blocked) return "not blocked";
  std::ostringstream os;
  const auto& b = d.format_desc.blocking;
  os << "strides";
  for (int i = 0; i < d.ndims; ++i) os << ' ' << b.strides[i];
  if (b.inner_nblks > 0) {
    os << ", blocks";
    for (int i = 0; i < b.inner_nblks; ++i) os << ' ' << b.inner_blks[i] << "@" << b.inner_idxs[i];
  }
  if (d.extra.flags != 0) os << ", extra " << d.extra.flags;
  return os.str();
}

dnnl::primitive_attr matmul_attr(std::int64_t n) {
  dnnl::primitive_attr attr;
  attr.set_output_scales(1 << 1, std::vector<float>(static_cast<std::size_t>(n), 0.01f));
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

// The matmul for M rows, or for any (run-time M) when m is empty; weights in
// the layout the primitive chooses.
dnnl::matmul::primitive_desc matmul_pd(std::optional<std::int64_t> m, std::int64_t k,
                                       std::int64_t n) {
  const std::int64_t rows = m ? *m : DNNL_RUNTIME_DIM_VAL;
  const memory::desc src({rows, k}, dt::u8, tag::ab);
  const memory::desc weights({k, n}, dt::s8, tag::any);
  const memory::desc dst({rows, n}, dt::u8, tag::ab);
  return {dnnl::matmul::desc(src, weights, dst), matmul_attr(n), engine()};
}

dnnl::convolution_forward::primitive_desc conv_pd(std::int64_t batch, std::int64_t size,
                                                  std::int64_t ic, std::int64_t oc,
                                                  std::int64_t kernel) {
  const std::int64_t pad = kernel / 2;
  const memory::desc src({batch, ic, size, size}, dt::u8, tag::nhwc);
  const memory::desc weights({oc, ic, kernel, kernel}, dt::s8, tag::any);
  const memory::desc dst({batch, oc, size, size}, dt::u8, tag::nhwc);
  dnnl::primitive_attr attr;
  attr.set_output_scales(1 << 1, std::vector<float>(static_cast<std::size_t>(oc), 0.01f));
  return {dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                          dnnl::algorithm::convolution_direct, src, weights,
                                          memory::desc(), dst, {1, 1}, {pad, pad}, {pad, pad}),
          attr, engine()};
}

void print_layout_facts() {
  std::cout << "Weights layouts (format any), by the activations' shape:\n";
  for (const auto& [k, n] : {std::pair<std::int64_t, std::int64_t>{768, 768}, {768, 3072}}) {
    std::cout << "  matmul K" << k << " N" << n << ":\n";
    std::optional<memory::desc> first;
    for (const std::optional<std::int64_t> m :
         {std::optional<std::int64_t>{16}, std::optional<std::int64_t>{128},
          std::optional<std::int64_t>{512}, std::optional<std::int64_t>{}}) {
      std::cout << "    " << (m ? "M " + std::to_string(*m) : std::string("run-time M")) << ": ";
      try {
        const auto pd = matmul_pd(m, k, n);
        const memory::desc w = pd.weights_desc();
        std::cout << pd.impl_info_str() << ", " << layout_text(w)
                  << (first && !(*first == w) ? "  (differs)" : "") << '\n';
        if (!first) first = w;
      } catch (const dnnl::error& e) {
        std::cout << "refused (" << e.what() << ")\n";
      }
    }
  }
  struct Conv {
    std::int64_t ic, oc, kernel;
  };
  for (const Conv c : {Conv{64, 64, 3}, Conv{256, 64, 1}, Conv{3, 64, 7}, Conv{40, 240, 1},
                       Conv{48, 144, 1}}) {
    std::cout << "  conv " << c.ic << "->" << c.oc << " " << c.kernel << "x" << c.kernel << ":\n";
    std::optional<memory::desc> first;
    for (const auto& [batch, size] : {std::pair<std::int64_t, std::int64_t>{1, 56},
                                      {8, 56}, {1, 112}, {1, 14}, {32, 28}, {1, 4}, {3, 4}}) {
      const auto pd = conv_pd(batch, size, c.ic, c.oc, c.kernel);
      const memory::desc w = pd.weights_desc();
      std::cout << "    N " << batch << " " << size << "x" << size << ": " << pd.impl_info_str()
                << ", " << layout_text(w) << (first && !(*first == w) ? "  (differs)" : "")
                << '\n';
      if (!first) first = w;
    }
  }
  std::cout << std::flush;
}

void fill(const memory& m, unsigned seed, int lo, int hi) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(lo, hi);
  auto* p = static_cast<std::uint8_t*>(m.get_data_handle());
  for (std::size_t i = 0; i < m.get_desc().get_size(); ++i) p[i] = static_cast<std::uint8_t>(d(rng));
}

// One matmul of M rows, by a primitive made for M or for any M. The weights
// are reordered once into the primitive's layout, outside the timing.
void BM_Matmul(benchmark::State& state, std::int64_t m, std::int64_t k, std::int64_t n,
               bool runtime_m) {
  dnnl::stream stream(engine());
  const auto pd = runtime_m ? matmul_pd(std::nullopt, k, n) : matmul_pd(m, k, n);
  const dnnl::matmul matmul(pd);
  memory src({{m, k}, dt::u8, tag::ab}, engine());
  memory dst({{m, n}, dt::u8, tag::ab}, engine());
  memory plain({{k, n}, dt::s8, tag::ab}, engine());
  memory weights(pd.weights_desc(), engine());
  const memory scratchpad(pd.scratchpad_desc(), engine());
  fill(src, 1, 0, 255);
  fill(plain, 2, -127, 127);
  dnnl::reorder(plain, weights).execute(stream, plain, weights);
  const std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src},
                                             {DNNL_ARG_WEIGHTS, weights},
                                             {DNNL_ARG_DST, dst},
                                             {DNNL_ARG_SCRATCHPAD, scratchpad}};
  for (auto _ : state) {
    matmul.execute(stream, args);
    stream.wait();
  }
  state.SetLabel(pd.impl_info_str());
  state.counters["ops"] = benchmark::Counter(2.0 * static_cast<double>(m * k * n),
                                             benchmark::Counter::kIsIterationInvariantRate);
}

void register_benchmarks() {
  for (const auto& [k, n] : {std::pair<std::int64_t, std::int64_t>{768, 768}, {768, 3072},
                             {3072, 768}}) {
    for (const std::int64_t m : {16, 32, 64, 128, 256, 512}) {
      for (const bool runtime_m : {false, true}) {
        std::string name = "BM_Matmul/";
        name += std::to_string(k);
        name += "x";
        name += std::to_string(n);
        name += "/M";
        name += std::to_string(m);
        name += runtime_m ? "/runtime_m" : "/fixed";
        benchmark::RegisterBenchmark(name.c_str(), BM_Matmul, m, k, n, runtime_m)
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (!qfuse::bench::take_isa_flag(argc, argv)) return 2;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  print_layout_facts();
  register_benchmarks();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
