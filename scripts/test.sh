#!/usr/bin/env bash
# The tests: set up, build, then run every test not labelled `gpu` (GPU tests run in
# scripts/gpu/gpu_check.sh on a machine with a GPU; here they would only report "skipped").
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# What only the tests need: a real Slurm (label `slurm`: slurmctld, slurmd, srun and sbatch, Slurm's
# pmix plugin mpi_pmix.so in slurm-wlm-basic-plugins, munge) and network namespaces (label
# `multinode`: ip from iproute2) and torchrun (python3-torch: the torchrun launches of the gloo and
# fault tests, and the bucket table checked against PyTorch's own function; 54 s to install here).
# Where they cannot be installed, those tests skip, saying why.
TEST_PACKAGES=(slurm-wlm slurm-wlm-basic-plugins munge iproute2 python3-torch)
missing=()
for p in "${TEST_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "test: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  { $SUDO apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"; } ||
    echo "test: could not install ${missing[*]}: the slurm, multinode and torchrun tests will skip"
fi
BUILD_DIR=${BUILD_DIR:-build}
source scripts/mpi_env.sh
# Twice as many tests at a time as cores: many of them spend much of their time starting processes,
# compiling (the exercise checkers) or waiting (the fault drills), so two tests share a core well
# (measured: the exercise checkers 02-05 in 153 s at -j 4 against 196 s at -j 2 on the 2-core VM).
# CTest starts the longest first, by their times in the last run (tests/CMakeLists.txt says why no
# test sets PROCESSORS). DDP_TEST_JOBS overrides it.
ctest --test-dir "$BUILD_DIR" -LE gpu --output-on-failure --no-tests=error -j "${DDP_TEST_JOBS:-$((2 * $(nproc)))}" "$@"
