#!/usr/bin/env bash
# Installs a configured qfuse build into a scratch prefix, then builds
# examples/ against it with CMake (find_package(qfuse)) and a small program
# with pkg-config, and runs them on the installed model.
#   tools/check_install.sh BUILD_DIR [WORK_DIR]
set -euo pipefail
build=$(cd "$1" && pwd)
work=${2:-$build/install-check}
src=$(cd "$(dirname "$0")/.." && pwd)
rm -rf "$work"
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" > "$work.install.log" 2>&1 || { cat "$work.install.log"; exit 1; }
echo "installed: $(find "$prefix" -type f | wc -l) files under $prefix"
model=$prefix/share/qfuse/fashion_mnist/fashion_cnn.onnx

cmake -S "$src/examples" -B "$work/examples" -DCMAKE_PREFIX_PATH="$prefix" \
      -DCMAKE_BUILD_TYPE=Release > "$work/configure.log" 2>&1 || { cat "$work/configure.log"; exit 1; }
cmake --build "$work/examples" -j2 > "$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
echo "examples built against $prefix"
"$work/examples/classify" "$model" | tail -1
"$work/examples/build_model" | tail -1
"$work/examples/classify_c" "$model"

# pkg-config: the C example again, compiled by hand.
export PKG_CONFIG_PATH=$(dirname "$(find "$prefix" -name qfuse.pc | head -1)")
cc -std=c11 -Wall -Werror "$src/examples/classify_c.c" -o "$work/classify_pkgconfig" \
   $(pkg-config --cflags --libs qfuse-onnx) -Wl,-rpath,"$(pkg-config --variable=libdir qfuse)"
"$work/classify_pkgconfig" "$model"
# The installed CLI finds its bundled models under share/qfuse.
"$prefix/bin/qfuse" dump --summary default | head -1
# The Python package, imported from the prefix alone (the build tree is not on
# the path; the module finds the installed libraries through its RPATH).
pydir=$(dirname "$(find "$prefix" -path '*/qfuse/__init__.py' | head -1)")
if [ -n "$pydir" ] && [ "$pydir" != "." ]; then
  (cd "$work" && PYTHONPATH=$(dirname "$pydir") /usr/bin/python3 -c "
import numpy as np, qfuse, sys
assert qfuse.__file__.startswith('$prefix'), qfuse.__file__
m = qfuse.load('$model', shapes={'input': (1, 1, 28, 28)})
y = qfuse.compile(m).run({'input': np.zeros((1, 1, 28, 28), np.float32)})['output']
print('python package:', qfuse.__file__, 'output', y.shape)
")
fi
echo "install check: ok"
