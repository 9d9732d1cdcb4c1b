#!/usr/bin/env bash
# Installs the dependencies, builds qfuse and runs the bundled default model:
# the Fashion-MNIST classifier on the 10,000 test images, unfused and fused,
# with the per-layer compare report in build/reports/. Extra arguments go to
# `qfuse run` (e.g. --threads 1).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${QFUSE_BUILD_DIR:-$root/build}"

bash "$root/cmake/install_deps.sh"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$build" --target qfuse_cli -j "$(nproc)"
"$build/tools/qfuse" run default "$@"
