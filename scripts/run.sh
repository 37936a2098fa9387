#!/usr/bin/env bash
# The main job: set up, build, then train the complete trainer (step 06) on Fashion-MNIST, on every
# GPU of this machine (one rank per GPU, NCCL) or, without a GPU, on 2 CPU ranks (MPI).
# Extra arguments go to the trainer, e.g.  scripts/run.sh --epochs 1
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BUILD_DIR=${BUILD_DIR:-build}
source scripts/mpi_env.sh
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "$ngpu" -gt 0 ] && grep -q 'DDP_BUILT_WITH_CUDA:INTERNAL=ON' "$BUILD_DIR/CMakeCache.txt" 2>/dev/null; then
  echo "run: $ngpu GPU(s), one rank each"
  if command -v mpirun >/dev/null; then
    exec mpirun -np "$ngpu" "$BUILD_DIR/bin/06_full" --device cuda "$@"
  fi
  exec scripts/launch.sh -n "$ngpu" "$BUILD_DIR/bin/06_full" --device cuda "$@"
fi
echo "run: no usable GPU, 2 CPU ranks"
exec mpirun -np 2 "$BUILD_DIR/bin/06_full" --device cpu "$@"
