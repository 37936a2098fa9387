#!/usr/bin/env bash
# The sanitizer check CI runs after the tests: the `asan` preset (AddressSanitizer, LeakSanitizer,
# UndefinedBehaviorSanitizer; CUDA off) builds everything, runs the unit tests, then a short 2-rank
# step 06 run (checkpoints, trace, gradient accumulation, tiny buckets), a 3-rank step 07 run, then
# every collective of the process group at 2, 3 and 4 ranks (tests/mpi/test_dist.c). Any report fails it.
# Needs what scripts/setup.sh installs.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/mpi_env.sh
cmake --preset asan > /dev/null
cmake --build --preset asan -j "$(nproc)"
# The same sanitizer settings as the test preset (Open MPI's own leaks are suppressed).
export ASAN_OPTIONS="abort_on_error=1:detect_leaks=1:fast_unwind_on_malloc=0:strict_string_checks=1"
export LSAN_OPTIONS="suppressions=$PWD/dev/sanitizers/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mpirun -np 2 build-asan/bin/06_full --device cpu --data synthetic --dataset_size 1024 --hidden 32 \
  --epochs 2 --grad_accum 2 --batch_size 32 --bucket_cap_mb 0.01 --save_interval 1 \
  --ckpt_dir "$tmp/ck" --trace "$tmp/trace_{rank}.json" --metrics "$tmp/m_{rank}.jsonl" > "$tmp/run.log"
mpirun -np 2 build-asan/bin/06_full --device cpu --data synthetic --dataset_size 1024 --hidden 32 \
  --epochs 3 --grad_accum 2 --batch_size 32 --save_interval 0 --resume "$tmp/ck/checkpoint.bin" \
  > "$tmp/resume.log"
echo "sanitizers: 2-rank step 06 runs (train, checkpoint, trace, resume) clean"
# step 07 at 3 ranks (25,450 parameters: the last shard padded, buckets across shards), resuming the
# step 06 checkpoint, saving its own
mpirun -np 3 build-asan/bin/07_zero --device cpu --data synthetic --dataset_size 1024 --hidden 32 \
  --epochs 3 --grad_accum 2 --batch_size 32 --bucket_cap_mb 0.01 --save_interval 1 \
  --resume "$tmp/ck/checkpoint.bin" --ckpt_dir "$tmp/ck7" --trace "$tmp/trace7_{rank}.json" > "$tmp/run7.log"
echo "sanitizers: 3-rank step 07 run (resume from step 06, train, checkpoint, trace) clean"
# step 08 at 3 ranks (every layer's shard padded), resuming the step 06 checkpoint, with a snapshot
# every 5 steps (--save_steps)
mpirun -np 3 build-asan/bin/08_fsdp --device cpu --data synthetic --dataset_size 1024 --hidden 32 \
  --epochs 3 --grad_accum 2 --batch_size 32 --save_interval 1 --save_steps 5 \
  --resume "$tmp/ck/checkpoint.bin" --ckpt_dir "$tmp/ck8" --trace "$tmp/trace8_{rank}.json" > "$tmp/run8.log"
echo "sanitizers: 3-rank step 08 run (resume from step 06, train, snapshots, trace) clean"
# the Gloo backend (its worker thread, the rendezvous store) at 2 ranks, started by launch.sh
if ldd build-asan/bin/06_full | grep -q libgloo; then
  scripts/launch.sh -n 2 build-asan/bin/06_full --device cpu --data synthetic --dataset_size 1024 \
    --hidden 32 --epochs 1 --bucket_cap_mb 0.01 --save_interval 0 > "$tmp/gloo.log"
  echo "sanitizers: 2-rank step 06 run on Gloo (launch.sh) clean"
  # step 09's live recovery: replica 2 of 3 SIGKILLed at step 4, the others' group torn down and
  # rebuilt, a replacement joined and healed; the lighthouse, the survivors and the replacement end
  # clean (the killed replica cannot report)
  LIGHTHOUSE=build-asan/bin/lighthouse DDP_TEST_FT_KILL=2:4 DDP_TEST_SLOW_RANK=0:30 \
    scripts/launch.sh --ft --replace -n 3 build-asan/bin/09_live --device cpu --data synthetic \
    --dataset_size 515 --hidden 32 --batch_size 32 --epochs 12 --save_interval 0 > "$tmp/live.log" 2>&1 ||
    { cat "$tmp/live.log"; exit 1; }
  grep -q "healed at step" "$tmp/live.log" || { cat "$tmp/live.log"; echo "no replacement healed"; exit 1; }
  # (launch.sh --ft succeeds when one replica finishes: a report from another is found in the log)
  if grep -qE "Sanitizer|runtime error" "$tmp/live.log"; then cat "$tmp/live.log"; exit 1; fi
  echo "sanitizers: step 09's live recovery (a kill, a new group, a replacement's heal) clean"
fi
ctest --preset asan -L unit -j "$(nproc)"
ctest --preset asan -R '^dist_collectives' -j "$(nproc)"
