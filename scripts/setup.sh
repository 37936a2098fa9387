#!/usr/bin/env bash
# Installs what building, running and testing ddp-in-c needs on Debian/Ubuntu, if it is missing,
# then configures and builds into build/. Safe to run again: it installs and rebuilds only what changed.
#   scripts/setup.sh                  build everything (the steps, the tests, the benchmarks)
#   scripts/setup.sh TARGET...        build only these targets, e.g. 06_full gpu_count probe (scripts/run.sh)
# The CUDA toolkit is optional and never installed here: when nvcc is found, the GPU path is built too.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(build-essential cmake ninja-build python3 libopenblas-dev libopenmpi-dev openmpi-bin
          libgloo-dev libdeflate-dev libgtest-dev doxygen clang-format git dataset-fashion-mnist)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi

BUILD_DIR=${BUILD_DIR:-build}
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release ${CMAKE_ARGS:-}
fi
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build "$BUILD_DIR" -j "$(nproc)" "${targets[@]}"
