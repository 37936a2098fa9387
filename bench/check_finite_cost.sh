#!/usr/bin/env bash
# The cost of step 06's --check_finite (and of the fp16/bf16 hooks) on this machine's CPUs: the same
# training with each setting, its samples/s (the metrics file's epoch records) side by side.
#
#   bench/check_finite_cost.sh [RANKS] [EPOCHS]     (defaults 2 and 2; the default 784-1024-1024-10 model,
#                                                   synthetic data, batch 128 per rank, MPI backend)
# Each setting runs twice; the table shows the faster epoch of each (the first epoch pays for warming up).
# On a machine shared with other work, two runs of one setting can differ by more than the settings do:
# build/bin/finite_bench times the check's pass alone.
set -euo pipefail
cd "$(dirname "$0")/.."
np=${1:-2}
epochs=${2:-2}
source scripts/mpi_env.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '# %-28s %12s %12s\n' setting samples/s relative
base=""
for setting in "" "--check_finite" "--comm_hook fp16" "--comm_hook bf16"; do
  best=0
  for run in 1 2; do
    # shellcheck disable=SC2086
    mpirun -np "$np" build/bin/06_full --device cpu --data synthetic --epochs "$epochs" --save_interval 0 \
      --log_interval 100000 $setting --metrics "$tmp/m{rank}.jsonl" >/dev/null
    best=$(python3 - "$tmp/m0.jsonl" "$best" <<'PY'
import json, sys
epochs = [json.loads(l) for l in open(sys.argv[1])]
print(max([float(sys.argv[2])] + [o["samples_per_s"] for o in epochs if o["type"] == "epoch"]))
PY
)
  done
  [ -z "$base" ] && base=$best
  printf '  %-28s %12.0f %12.3f\n' "${setting:-default}" "$best" "$(python3 -c "print($best/$base)")"
done
