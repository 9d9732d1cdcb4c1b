#!/usr/bin/env bash
# ThreadSanitizer on the concurrency test: one compiled classifier shared by
# 8 host threads x 200 inferences (each with its own request), bit-identical
# to a serial run; and the public API tests.
#
#   tools/tsan.sh
#
# Built with clang -fsanitize=thread. The OpenMP runtime is LLVM's libomp
# (clang -fopenmp links it first, so oneDNN's GOMP_* calls resolve to it too)
# with its ThreadSanitizer tool, libarcher (OMP_TOOL_LIBRARIES): archer tells
# TSan about OpenMP's barriers and task dependencies, which TSan cannot see
# on its own. oneDNN itself is
# Debian's uninstrumented build: TSan checks qfuse's own accesses (and the
# memcpy/memset it intercepts), not oneDNN's kernels. tools/tsan.supp
# suppresses reports from inside libomp itself (uninstrumented), with the
# reason written there. This build compiles file by file (not in unity
# batches, as the other builds do), so that CI also sees every library file
# compile on its own.
set -euo pipefail
cd "$(dirname "$0")/.."
bash cmake/install_deps.sh clang libomp-dev
archer=$(ls /usr/lib/llvm-*/lib/libarcher.so 2>/dev/null | sort -V | tail -1 || true)
[[ -n "$archer" ]] || { echo "tsan: libarcher.so not found (apt install libomp-dev)"; exit 1; }

build=build-tsan
mkdir -p "$build"
CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DQFUSE_TSAN=ON -DQFUSE_BUILD_BENCHMARKS=OFF -DCMAKE_UNITY_BUILD=OFF > "$build/configure.log" 2>&1 \
  || { cat "$build/configure.log"; exit 1; }
cmake --build "$build" -j"$(nproc)" --target qfuse_fashion_mnist_tests qfuse_public_api_tests

export OMP_TOOL_LIBRARIES=$archer
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 history_size=4 suppressions=$PWD/tools/tsan.supp"
export ARCHER_OPTIONS="verbose=1"
"$build/tests/fashion_mnist/qfuse_fashion_mnist_tests" \
  --gtest_filter=FashionMnist.ConcurrentRequestsMatchASerialRun
"$build/tests/plugin/api/qfuse_public_api_tests"
echo "tsan: clean"
