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

# The CPU GEMM: OpenBLAS from PyPI (scipy-openblas32, pinned: the docs' outputs came from this
# version), into deps/ (git-ignored) with pip's --target, so nothing of the system's Python changes.
# Debian's OpenBLAS 0.3.21 does not know recent CPUs and runs a generic kernel there, 4 times slower
# (docs/performance.md, "The CPU's GEMM"); CMake's DDP_BLAS=auto takes this one when it is there.
# Offline, the build goes on with the system's OpenBLAS and says so.
SCIPY_OPENBLAS=scipy-openblas32==0.3.34.481.3
SCIPY_OPENBLAS_DIR=deps/scipy-openblas32
fresh_blas=0
if [ ! -f "$SCIPY_OPENBLAS_DIR/.installed-${SCIPY_OPENBLAS#*==}" ]; then
  if ! python3 -m pip --version > /dev/null 2>&1; then
    echo "setup: installing python3-pip"
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-pip || true
  fi
  rm -rf "$SCIPY_OPENBLAS_DIR"
  if PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$SCIPY_OPENBLAS_DIR" \
      "$SCIPY_OPENBLAS"; then
    touch "$SCIPY_OPENBLAS_DIR/.installed-${SCIPY_OPENBLAS#*==}"
    fresh_blas=1
  else
    rm -rf "$SCIPY_OPENBLAS_DIR"
    echo "setup: could not install $SCIPY_OPENBLAS (offline?): the build uses the system's OpenBLAS"
  fi
fi

BUILD_DIR=${BUILD_DIR:-build}
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ] || [ $fresh_blas -eq 1 ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release ${CMAKE_ARGS:-}
fi
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build "$BUILD_DIR" -j "$(nproc)" "${targets[@]}"
