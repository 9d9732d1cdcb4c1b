#!/usr/bin/env bash
# The per-layer suite (bench/bench_layers.cpp): raw oneDNN, qfuse fused and
# qfuse unfused on ResNet-50, MobileNetV2, BERT and decoder layers with their
# post-op chains, at batch 1 and 8. Builds what it needs, runs the suite with
# repetitions (interleaved, medians), keeps Google Benchmark's JSON and prints
# one line per case:
#   CASE fused/raw=R unfused/fused=U GOPS=G impl=IMPL [raw_impl=...] layer_GOPS=L
#
#   bash bench/run_layers.sh [--quick] [--isa ISA] [--threads N] [--filter REGEX]
#     --quick      each case briefly, no repetitions
#     --isa ISA    cap oneDNN's ISA, e.g. avx512_core_vnni on an AMX machine
#     --threads N  OpenMP threads (default: all cores)
#     --filter RE  only the benchmarks whose name matches RE
# Results: build/bench-results/layers-<isa>-<time>.{json,txt}
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

quick=0
isa=""
filter=""
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 ;;
    --isa) isa="${2:?--isa needs a value}"; shift ;;
    --threads) export OMP_NUM_THREADS="${2:?--threads needs a value}"; shift ;;
    --filter) filter="${2:?--filter needs a value}"; shift ;;
    -h|--help) sed -n '2,15p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run_layers.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

build="${QFUSE_BUILD_DIR:-$root/build}"
bash "$root/cmake/install_deps.sh"
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
fi
cmake --build "$build" --target qfuse_bench_layers -j "$(nproc)"

results="$build/bench-results"
mkdir -p "$results"
stem="$results/layers-${isa:-native}-$(date +%Y%m%d-%H%M%S)"
args=(--benchmark_out="$stem.json" --benchmark_out_format=json)
[ -n "$isa" ] && args+=(--isa "$isa")
[ -n "$filter" ] && args+=(--benchmark_filter="$filter")
if [ "$quick" = 1 ]; then
  args+=(--benchmark_min_time=0.05)
else
  args+=(--benchmark_min_time=0.2 --benchmark_repetitions=5
         --benchmark_enable_random_interleaving=true --benchmark_display_aggregates_only=true)
fi

echo "running the layer suite (${isa:-native ISA}, ${OMP_NUM_THREADS:-$(nproc)} threads); full log: $stem.log"
status=0
"$build/bench/qfuse_bench_layers" "${args[@]}" --benchmark_color=false > "$stem.log" 2>&1 || status=$?
sed -n '/^summary/,$p' "$stem.log" | tee "$stem.txt"
if [ "$status" != 0 ]; then
  echo "run_layers.sh: the suite failed (exit $status); errors:" >&2
  grep "ERROR OCCURRED" "$stem.log" >&2 || tail -20 "$stem.log" >&2
  exit "$status"
fi
echo "JSON: $stem.json"
