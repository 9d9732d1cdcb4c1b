#!/usr/bin/env bash
# Runs qfuse's libFuzzer targets, each for a bounded time, built with clang,
# AddressSanitizer and UndefinedBehaviorSanitizer:
#   qfuse_fuzz_onnx_import  the ONNX importer, compile (fused and unfused), one inference
#   qfuse_fuzz_openvino_import  the OpenVINO IR reader (input: the .xml, a NUL, the .bin), the same
#   qfuse_fuzz_composer     random post-op chains: the composed primitive against the chain
#
#   tools/fuzz.sh [--seconds N] [--target onnx_import|openvino_import|composer]
#
# Default 600 seconds per target. The working corpus grows in build-fuzz/corpus/;
# a finding is written to build-fuzz/artifacts/<target>/ and the script exits 1.
# Once fixed, copy the input to tests/fuzz/regressions/<target>/:
# ctest replays that directory in every build.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=600
targets=(onnx_import openvino_import composer)
while [[ $# -gt 0 ]]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --target) targets=("$2"); shift 2 ;;
    *) echo "usage: $0 [--seconds N] [--target onnx_import|openvino_import|composer]" >&2; exit 2 ;;
  esac
done
bash cmake/install_deps.sh clang libclang-rt-dev

build=build-fuzz
mkdir -p "$build"
CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DQFUSE_SANITIZE=ON -DQFUSE_FUZZ=ON -DQFUSE_BUILD_BENCHMARKS=OFF > "$build/configure.log" 2>&1 \
  || { cat "$build/configure.log"; exit 1; }
cmake --build "$build" -j"$(nproc)" --target qfuse_fuzz_onnx_import qfuse_fuzz_openvino_import qfuse_fuzz_composer

# oneDNN's OpenMP team would only slow each execution down.
export OMP_NUM_THREADS=1
export ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
status=0
for t in "${targets[@]}"; do
  corpus=$build/corpus/$t
  artifacts=$build/artifacts/$t
  mkdir -p "$corpus" "$artifacts"
  seeds=(tests/fuzz/regressions/$t)
  if [[ $t == onnx_import ]]; then
    seeds+=(tests/bad_inputs/models tools/fashion_mnist)
  elif [[ $t == openvino_import ]]; then
    seeds+=(tests/fuzz/seeds/openvino_import)
  else
    seeds+=(tests/fuzz/seeds/composer)
  fi
  echo "== qfuse_fuzz_$t: ${seconds}s"
  log=$build/fuzz_$t.log
  if ! "$build/tests/fuzz/qfuse_fuzz_$t" "$corpus" "${seeds[@]}" -max_total_time="$seconds" \
        -rss_limit_mb=4096 -max_len=262144 -timeout=30 -print_final_stats=1 \
        -artifact_prefix="$artifacts/" > "$log" 2>&1; then
    status=1
    echo "finding: see $log and $artifacts/"
  fi
  grep -aE "^Done|stat::number_of_executed_units|stat::peak_rss_mb|ERROR|SUMMARY" "$log" | tail -6 || true
  echo "corpus: $(ls "$corpus" | wc -l) inputs"
done
exit $status
