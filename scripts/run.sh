#!/usr/bin/env bash
# The main job: set up, build, then train the complete trainer (step 06) on Fashion-MNIST, on every
# GPU this process can use (one rank per GPU, NCCL) or, without a GPU, on 2 CPU ranks (MPI).
# Extra arguments go to the trainer, e.g.  scripts/run.sh --epochs 1
# It also builds build/bin/probe, the seconds-long check that every rank can all-reduce with every
# other (mpirun -np 2 build/bin/probe --device cpu; docs/workshop.md).
#
# GPUs are counted as CUDA counts them (build/bin/gpu_count), so CUDA_VISIBLE_DEVICES and MIG are
# honoured; `nvidia-smi -L` lists every GPU of the machine instead. Environment:
#   NPROC=N        ranks to start (default: one per GPU; CPU: 2). More ranks than GPUs is refused
#                  unless NCCL_MULTI_RANK_GPU_ENABLE=1 (NCCL >= 2.30 can share a GPU between ranks);
#                  then NCCL_MAX_CTAS defaults to 2 (NCCL's defaults are for up to 2 ranks per GPU,
#                  and running out of its resources hangs; the trainers set the same).
#   MASTER_ADDR, MASTER_PORT, DDP_NCCL_PORT   for the launch without MPI (scripts/launch.sh): NCCL
#                  bootstraps on MASTER_PORT + 1 (or DDP_NCCL_PORT); MASTER_ADDR may be an IPv6
#                  literal (::1 or [::1]).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh 06_full gpu_count probe  # what this script runs, and the probe (docs/workshop.md); scripts/test.sh builds the rest
BUILD_DIR=${BUILD_DIR:-build}
source scripts/mpi_env.sh
die() { echo "run: $*" >&2; exit 2; }

is_port() { [[ "$1" =~ ^[0-9]{1,5}$ ]] && [ "$((10#$1))" -ge 1 ] && [ "$((10#$1))" -le 65535 ]; }
check_master() {  # the variables the launch without MPI passes on; the trainer checks them again
  if [ -n "${MASTER_PORT:-}" ]; then
    is_port "$MASTER_PORT" || die "MASTER_PORT='$MASTER_PORT' is not a TCP port (1-65535)"
    if [ -z "${DDP_NCCL_PORT:-}" ] && [ "$((10#$MASTER_PORT))" -ge 65535 ]; then
      die "MASTER_PORT=$MASTER_PORT: NCCL bootstraps on MASTER_PORT + 1, which is not a port; choose a lower one or set DDP_NCCL_PORT"
    fi
  fi
  if [ -n "${DDP_NCCL_PORT:-}" ]; then
    is_port "$DDP_NCCL_PORT" || die "DDP_NCCL_PORT='$DDP_NCCL_PORT' is not a TCP port (1-65535)"
  fi
  local addr=${MASTER_ADDR:-}
  if [[ "$addr" == *:* ]]; then  # an IPv6 literal, bare or in brackets (a port belongs in MASTER_PORT)
    addr=${addr#[}; addr=${addr%]}
    python3 -c 'import ipaddress, sys; ipaddress.IPv6Address(sys.argv[1].split("%")[0])' "$addr" 2>/dev/null ||
      die "MASTER_ADDR='$MASTER_ADDR' is neither a host name nor an IPv6 address (give the port in MASTER_PORT)"
  fi
}

if [ -n "${NPROC:-}" ] && ! [[ "$NPROC" =~ ^[1-9][0-9]*$ ]]; then
  die "NPROC='$NPROC' is not a positive number of ranks"
fi
ngpu=0
if grep -q 'DDP_BUILT_WITH_CUDA:INTERNAL=ON' "$BUILD_DIR/CMakeCache.txt" 2>/dev/null; then
  ngpu=$("$BUILD_DIR/bin/gpu_count")
fi
if [ "$ngpu" -gt 0 ]; then
  n=${NPROC:-$ngpu}
  if [ "$n" -gt "$ngpu" ] && [ "${NCCL_MULTI_RANK_GPU_ENABLE:-0}" != 1 ]; then
    die "$n ranks but CUDA shows this process $ngpu GPU(s) (CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-unset}): NCCL takes one rank per GPU; start at most $ngpu, or, with NCCL >= 2.30, set NCCL_MULTI_RANK_GPU_ENABLE=1"
  fi
  if [ "$n" -gt "$ngpu" ]; then
    export NCCL_MAX_CTAS=${NCCL_MAX_CTAS:-2}
    echo "run: $n ranks share $ngpu GPU(s): NCCL_MAX_CTAS=$NCCL_MAX_CTAS"
  fi
  echo "run: $ngpu GPU(s) visible, $n rank(s)"
  if command -v mpirun >/dev/null; then
    exec mpirun -np "$n" "$BUILD_DIR/bin/06_full" --device cuda "$@"
  fi
  check_master
  exec scripts/launch.sh -n "$n" "$BUILD_DIR/bin/06_full" --device cuda "$@"
fi
n=${NPROC:-2}
echo "run: no usable GPU, $n CPU ranks"
exec mpirun -np "$n" "$BUILD_DIR/bin/06_full" --device cpu "$@"
