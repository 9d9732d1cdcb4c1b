#!/usr/bin/env bash
# Installs the dependencies, builds everything and runs all tests with ctest.
#   tools/test.sh             release build (RelWithDebInfo) in build/
#   tools/test.sh --sanitize  ASan + UBSan build (Debug at -O1, as ASan's own docs advise
#                             for speed, with line tables for the reports) in build-asan/
#   tools/test.sh --release   Release build (-O3: its own warnings and inlining) in build-release/
#   tools/test.sh --clang     Release build with clang++ (Debian's clang, libomp) in build-clang/
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

build="${QFUSE_BUILD_DIR:-$root/build}"
cmake_args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo)
if [ "${1:-}" = "--sanitize" ]; then
  build="${QFUSE_BUILD_DIR:-$root/build-asan}"
  cmake_args=(-DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=-g1 -O1" "-DCMAKE_C_FLAGS_DEBUG=-g1 -O1"
              -DQFUSE_SANITIZE=ON -DQFUSE_BUILD_BENCHMARKS=OFF)
  # Every ASan (leaks included) and UBSan finding fails the test.
  export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}"
  export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
elif [ "${1:-}" = "--release" ]; then
  build="${QFUSE_BUILD_DIR:-$root/build-release}"
  cmake_args=(-DCMAKE_BUILD_TYPE=Release)
elif [ "${1:-}" = "--clang" ]; then
  build="${QFUSE_BUILD_DIR:-$root/build-clang}"
  cmake_args=(-DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=clang++)
fi

bash "$root/cmake/install_deps.sh"
cmake -S "$root" -B "$build" -G Ninja "${cmake_args[@]}"
cmake --build "$build" -j "$(nproc)"
cd "$build"
# ctest -j runs tests side by side, each with an OpenMP team of its own;
# threads that spin while they wait (OpenMP's default) would take each other's
# cores: three times the run's time on 2 cores.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
ctest --output-on-failure -j "$(nproc)"
