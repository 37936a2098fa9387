#!/usr/bin/env bash
# The tests: set up, build, then run every test not labelled `gpu` (GPU tests run in
# scripts/gpu_check.sh on a machine with a GPU; here they would only report "skipped").
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BUILD_DIR=${BUILD_DIR:-build}
source scripts/mpi_env.sh
ctest --test-dir "$BUILD_DIR" -LE gpu --output-on-failure --no-tests=error -j "$(nproc)" "$@"
