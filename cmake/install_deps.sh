#!/usr/bin/env bash
# Installs qfuse's build and test dependencies from Debian's packages, and any
# extra packages named as arguments (tools/fuzz.sh: clang; tools/valgrind.sh:
# valgrind). Idempotent: packages already present are left alone. Works as
# root, or via sudo.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libdnnl-dev libspdlog-dev libfmt-dev libxxhash-dev
  libgtest-dev libgmock-dev libbenchmark-dev libpugixml-dev
  libonnx-dev libprotobuf-dev protobuf-compiler libonnx-testdata
  python3 python3-onnx python3-numpy python3-dev python3-pybind11 python3-pytest
  python3-pandas python3-distributed python3-torch
  zlib1g-dev dataset-fashion-mnist
  "$@"
)

# npm fetches the corpus's real networks; nodejs builds that bundle it need no package.
if ! command -v npm >/dev/null 2>&1; then
  packages+=(npm)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install_deps: all packages present"
  exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
  sudo_cmd=()
elif command -v sudo >/dev/null 2>&1; then
  sudo_cmd=(sudo)
else
  echo "install_deps: need root or sudo to install: ${missing[*]}" >&2
  exit 1
fi

echo "install_deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
