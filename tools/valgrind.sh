#!/usr/bin/env bash
# Valgrind's memcheck on the main job (qfuse run: the bundled classifier on
# the Fashion-MNIST test set, fused and unfused) of a configured build.
#
#   tools/valgrind.sh [BUILD_DIR] [-- qfuse arguments]
#
# Fails on any memory error and on definitely or indirectly lost blocks.
# "Possibly lost" blocks are reported, not failed: GNU OpenMP keeps its
# thread pool's per-thread data for the life of the process.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
[[ "${1:-}" == "--" ]] && shift
args=("$@")
[[ ${#args[@]} -eq 0 ]] && args=(run --threads 1)
bash cmake/install_deps.sh valgrind
[[ -x "$build/tools/qfuse" ]] || { echo "valgrind: build $build first (tools/test.sh)"; exit 1; }
log=$build/valgrind.log
valgrind --tool=memcheck --leak-check=full --show-leak-kinds=definite,indirect,possible \
  --errors-for-leak-kinds=definite,indirect --error-exitcode=3 --num-callers=30 \
  --log-file="$log" "$build/tools/qfuse" "${args[@]}"
grep -E "ERROR SUMMARY|definitely lost|indirectly lost|possibly lost|still reachable" "$log"
echo "valgrind: clean ($log)"
