#!/usr/bin/env bash
# gpu_bench.sh: steps 01 and 06 on one NVIDIA GPU against the same model trained by PyTorch, in fp32
# and in TF32.
#
# For a machine with an NVIDIA GPU, the CUDA toolkit (or a CUDA build of BUILD_DIR made
# elsewhere), NCCL, and PyTorch with CUDA for $PY. Two models, synthetic data of the
# Fashion-MNIST shape (784 inputs, 10 classes; the same for both implementations, and no dataset needed):
#   course  784-1024-1024-10,            batch 128
#   large   784-4096-4096-4096-4096-10,  batch 1024
# two number formats: fp32 (plain fp32 GEMMs on both sides) and tf32 (our --tf32; PyTorch's
# torch.backends.cuda.matmul.allow_tf32 = True), and five programs per model and format, run R times
# interleaved (the order rotates every repetition):
#   01          build/bin/01_single_gpu --device cuda     (reads the loss every step: waits for the GPU)
#   06          scripts/launch.sh -n 1 build/bin/06_full --device cuda --backend nccl   (world size 1:
#               the process group, the bucketed reducer and NCCL all-reduces of a single rank; the
#               loss is read back asynchronously, so the host queues up to 2 steps ahead)
#   torch       bench/torch_mlp.py --device cuda  (loss.item() every step, as step 01)
#   torch_ddp   the same with --ddp at world size 1 (NCCL)
#   torch_ddp_async  the same with --sync end: no read in the loop, as step 06
# Plus, per model and format, the GEMM bound: the step's 3L-1 GEMMs alone through the same cuBLAS calls,
# timed with CUDA events (build/bin/gemm_bound --device cuda [--tf32], S-W repetitions), and step 01's
# time against it.
# Step time, from the metrics "time" stamps (a step's record is written when its loss reaches the
# host): step 01, the median gap between consecutive records after W warm-up steps; step 06, whose
# records are written up to 2 steps late and sometimes two at once, the mean over the steps after W;
# PyTorch, its median step time (zero_grad .. optimizer step and loss.item()), or with --sync end the
# mean over the steps after W. Prints the medians over repetitions and the ratios PyTorch/ours
# (> 1: ours is faster): 01 against torch, 06 against torch_ddp and torch_ddp_async.
#
# Results as they come: every run appends a line to BENCH_OUT/runs.tsv, and after every repetition
# BENCH_OUT/results.md holds the tables over the repetitions done so far, so that a run stopped early
# still leaves its figures. DDP_GPU_DEADLINE=S (seconds from its start, as scripts/gpu/gpu_check.sh's,
# which passes on what it has left): a run starts only while RUN_EST seconds (default 30) are left,
# each is cut at the deadline, and it ends with the tables of the repetitions it completed (none:
# the GEMM bounds only) before S.
#
# Usage: bench/gpu_bench.sh [-r R] [-s S] [-w W] [BUILD_DIR]   (defaults 3, 200, 20, build-gpu-bench)
# BUILD_DIR is its own (configured with the benchmarks, for CUDA_ARCHS): not scripts/gpu/gpu_check.sh's
# build-gpu, which it would otherwise reconfigure for other architectures and maybe another NCCL.
# Env:   PY (python with CUDA PyTorch, default python3), CUDA_ARCHS (default "80;90"), NCCL_ROOT (the
#        NCCL to build with, else the one in PY's wheels, else the toolkit's), BENCH_OUT (results
#        folder, default BUILD_DIR/gpu_bench; not OUT, which batch runners often set for their
#        own results), MASTER_PORT (default 29650), PRECS (default "fp32 tf32"),
#        MODELS (default "course large").
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
T0=$SECONDS
DEADLINE=${DDP_GPU_DEADLINE:-}
if [ -n "$DEADLINE" ] && ! [[ $DEADLINE =~ ^[1-9][0-9]{0,6}$ ]]; then
  echo "gpu_bench: DDP_GPU_DEADLINE must be a whole number of seconds, got '$DEADLINE'" >&2
  exit 2
fi
RUN_EST=${RUN_EST:-30}
left() {  # seconds left before the deadline, less 5 for the tables (a large number without one)
  if [ -n "$DEADLINE" ]; then echo $((DEADLINE - (SECONDS - T0) - 5)); else echo 999999999; fi
}
bounded() {  # LIMIT CMD...: CMD under `timeout`, cut at the deadline too (exit status 124)
  local lim=$1 l
  shift
  l=$(left)
  if [ "$l" -lt "$lim" ]; then lim=$l; fi
  [ "$lim" -ge 1 ] || return 124
  local rc=0
  timeout -k 2 "$lim" "$@" || rc=$?
  [ $rc -eq 137 ] && rc=124  # it needed the SIGKILL after the TERM: cut all the same
  return $rc
}
R=3 S=200 W=20
while getopts "r:s:w:" o; do
  case $o in r) R=$OPTARG ;; s) S=$OPTARG ;; w) W=$OPTARG ;; *) exit 2 ;; esac
done
shift $((OPTIND - 1))
BUILD_DIR=${1:-$ROOT/build-gpu-bench}
case $BUILD_DIR in /*) ;; *) BUILD_DIR=$PWD/$BUILD_DIR ;; esac
PY=${PY:-python3}
BENCH_OUT=${BENCH_OUT:-$BUILD_DIR/gpu_bench}
export MASTER_ADDR=127.0.0.1 MASTER_PORT=${MASTER_PORT:-29650}
[ "$S" -gt $((W + 1)) ] || { echo "need S > W + 1" >&2; exit 2; }
mkdir -p "$BENCH_OUT"
rm -f "$BENCH_OUT/runs.tsv" "$BENCH_OUT/results.md"

if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "no NVIDIA GPU (nvidia-smi -L failed)" >&2
  exit 1
fi
"$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' ||
  { echo "$PY: PyTorch without CUDA (set PY=python-with-cuda-torch)" >&2; exit 1; }

# ---- build (as scripts/gpu/gpu_check.sh: CUDA + NCCL, Release) ----------------------------------------
nvcc=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || true)
if [ -n "$nvcc" ]; then
  gen=(); command -v ninja >/dev/null && [ ! -f "$BUILD_DIR/CMakeCache.txt" ] && gen=(-G Ninja)
  nccl_hint=()
  nccl_wheel=$("$PY" -c 'import os, site
for sp in site.getsitepackages() + [site.getusersitepackages()]:
    d = os.path.join(sp, "nvidia", "nccl")
    if os.path.isdir(d): print(d); break' 2>/dev/null || true)
  if [ -n "${NCCL_ROOT:-}" ]; then nccl_hint=(-DNCCL_ROOT="$NCCL_ROOT")
  elif [ -n "$nccl_wheel" ]; then nccl_hint=(-DNCCL_ROOT="$nccl_wheel")
  fi
  bounded 900 cmake -S "$ROOT" -B "$BUILD_DIR" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DDDP_BUILD_BENCH=ON \
        -DCMAKE_CUDA_COMPILER="$nvcc" -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-80;90}" \
        "${nccl_hint[@]}" > "$BENCH_OUT/configure.log" 2>&1 || { tail -30 "$BENCH_OUT/configure.log"; exit 1; }
  if ! grep -q '\[✓\] CUDA' "$BENCH_OUT/configure.log" || ! grep -q '\[✓\] NCCL' "$BENCH_OUT/configure.log"; then
    echo "the build has no CUDA or no NCCL: see $BENCH_OUT/configure.log" >&2
    exit 1
  fi
  bounded 1800 cmake --build "$BUILD_DIR" -j "$(nproc)" --target 01_single_gpu 06_full gemm_bound > "$BENCH_OUT/build.log" 2>&1 ||
    { tail -40 "$BENCH_OUT/build.log"; exit 1; }
else
  [ -x "$BUILD_DIR/bin/06_full" ] || { echo "no nvcc and no prebuilt $BUILD_DIR/bin/06_full" >&2; exit 1; }
  echo "no nvcc: reusing $BUILD_DIR"
fi
BIN=$BUILD_DIR/bin

nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | head -1 | sed 's/^/GPU: /'
"$PY" -c 'import torch; print("PyTorch", torch.__version__, "CUDA", torch.version.cuda)'

# ---- runs ---------------------------------------------------------------------------------------------
read -r -a MODELS <<< "${MODELS:-course large}"
read -r -a PRECS <<< "${PRECS:-fp32 tf32}"
declare -A HIDDEN=([course]="1024,1024" [large]="4096,4096,4096,4096")
declare -A BATCH=([course]=128 [large]=1024)
PROGS=(01 06 torch torch_ddp torch_ddp_async)
for m in "${MODELS[@]}"; do [ -n "${HIDDEN[$m]:-}" ] || { echo "unknown model '$m'" >&2; exit 2; }; done
for q in "${PRECS[@]}"; do
  case $q in fp32 | tf32) ;; *) echo "unknown precision '$q' (fp32, tf32)" >&2; exit 2 ;; esac
done

run_one() {  # model precision prog rep -> writes $BENCH_OUT/<model>.<precision>.<prog>.<rep>.json(l)
  local m=$1 q=$2 p=$3 rep=$4
  local h=${HIDDEN[$m]} b=${BATCH[$m]}
  local n=$(((S + 1) * b))  # synthetic samples: one epoch covers S steps
  local fmt=(); [ "$q" = tf32 ] && fmt=(--tf32)
  local ours=(--device cuda --hidden "$h" --batch_size "$b" --data synthetic --dataset_size "$n"
              --epochs 1 --max_steps "$S" --save_interval 0 --log_interval 1000000 "${fmt[@]}")
  local torch_args=(--device cuda --hidden "$h" --batch_size "$b" --data synthetic --dataset_size "$n"
                    --steps "$S" --warmup "$W" "${fmt[@]}")
  local f=$BENCH_OUT/$m.$q.$p.$rep
  MASTER_PORT=$((MASTER_PORT + 2))  # a fresh port pair each run (the store/NCCL port after it)
  local rc=0
  case $p in
    01) bounded 600 "$BIN/01_single_gpu" "${ours[@]}" --metrics "$f.jsonl" > "$f.log" 2>&1 ;;
    06) bounded 600 "$ROOT/scripts/launch.sh" -n 1 "$BIN/06_full" "${ours[@]}" --backend nccl \
          --metrics "$f.jsonl" > "$f.log" 2>&1 ;;
    torch) bounded 600 "$PY" "$ROOT/bench/torch_mlp.py" "${torch_args[@]}" > "$f.json" 2> "$f.log" ;;
    torch_ddp) RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 bounded 600 "$PY" "$ROOT/bench/torch_mlp.py" \
          "${torch_args[@]}" --ddp > "$f.json" 2> "$f.log" ;;
    torch_ddp_async) RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 bounded 600 "$PY" "$ROOT/bench/torch_mlp.py" \
          "${torch_args[@]}" --ddp --sync end > "$f.json" 2> "$f.log" ;;
  esac || rc=$?
  printf '%s\t%s\t%s\t%s\t%s\n' "$m" "$q" "$p" "$rep" "$([ $rc -eq 0 ] && echo ok || echo "exit $rc")" \
    >> "$BENCH_OUT/runs.tsv"
  [ $rc -ne 0 ] || return 0
  if [ $rc -eq 124 ] && [ "$(left)" -lt 1 ]; then return 124; fi  # cut at the deadline
  echo "$m $q $p failed, see $f.log:" >&2
  tail -20 "$f.log" >&2
  exit 1
}

stopped=""  # why it stopped early (the deadline), if it did
for m in "${MODELS[@]}"; do  # the GEMM bound, once per model and format
  for q in "${PRECS[@]}"; do
    fmt=(); [ "$q" = tf32 ] && fmt=(--tf32)
    [ "$(left)" -ge "$RUN_EST" ] || { stopped="the deadline, before gemm_bound ($m, $q)"; break 2; }
    rc=0
    bounded 600 "$BIN/gemm_bound" --device cuda --sizes "784,${HIDDEN[$m]},10" --batch "${BATCH[$m]}" \
      --reps $((S - W)) --warmup "$W" "${fmt[@]}" > "$BENCH_OUT/$m.$q.gemm.json" 2> "$BENCH_OUT/$m.$q.gemm.log" ||
      rc=$?
    if [ $rc -eq 124 ] && [ "$(left)" -lt 1 ]; then
      rm -f "$BENCH_OUT/$m.$q.gemm.json"
      stopped="the deadline, in gemm_bound ($m, $q)"
      break 2
    fi
    [ $rc -eq 0 ] || { echo "gemm_bound ($m, $q) failed, see $BENCH_OUT/$m.$q.gemm.log" >&2; exit 1; }
  done
done

# The tables over the first N repetitions (medians), written to results.md (then printed by the caller).
cat > "$BENCH_OUT/tables.py" <<'PYEOF'
import json, os, statistics as st, sys
out, R, W = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
models, precs = sys.argv[4].split(), sys.argv[5].split()
R_asked, stopped = int(sys.argv[6]), sys.argv[7]
batch = {"course": 128, "large": 1024}
desc = {"course": "784-1024-1024-10, batch 128", "large": "784-4096x4-10, batch 1024"}

def step_s(m, q, p, rep):
    f = f"{out}/{m}.{q}.{p}.{rep}"
    if p.startswith("torch"):
        with open(f + ".json") as fh:
            return json.loads(fh.read().strip().splitlines()[-1])["median_step_s"]
    with open(f + ".jsonl") as fh:
        t = [o["time"] for o in map(json.loads, fh) if o["type"] == "step"]
    if p == "06":  # records are written as losses arrive, sometimes two at once: the window's mean
        return (t[-1] - t[W]) / (len(t) - 1 - W)
    return st.median([b - a for a, b in zip(t, t[1:])][W:])

names = {"01": "ours, step 01", "06": "ours, step 06 (NCCL, world 1)", "torch": "PyTorch",
         "torch_ddp": "PyTorch DDP (NCCL, world 1)",
         "torch_ddp_async": "PyTorch DDP, no read in the loop"}
refs = {"01": ["torch"], "06": ["torch_ddp", "torch_ddp_async"]}
if stopped:
    print(f"\nStopped early by {stopped}: {R} of the {R_asked} repetitions done.")
if R > 0:
    print(f"\n1 GPU, synthetic data; medians over {R} interleaved runs, each the median step after {W} "
          "warm-up steps (step 06 and PyTorch without reads in the loop: the mean step after them)\n")
    print("| model | format | program | step time (ms) | samples/s | PyTorch / ours |")
    print("| --- | --- | --- | --- | --- | --- |")
for m in models if R > 0 else []:
    for q in precs:
        t = {p: [step_s(m, q, p, r) for r in range(R)] for p in names}
        for p in names:
            med = st.median(t[p])
            ratio = ", ".join(f"{st.median(a / b for a, b in zip(t[ref], t[p])):.2f}x vs {ref}"
                              for ref in refs.get(p, []))
            print(f"| {desc[m]} | {q} | {names[p]} | {med * 1e3:.3f} | {batch[m] / med:.0f} | {ratio} |")

print("\n| model | format | GEMM bound (ms, cuBLAS alone) | GFLOP/s | step 01 (ms) | GEMM bound / step 01 |")
print("| --- | --- | --- | --- | --- | --- |")
for m in models:
    for q in precs:
        if not os.path.exists(f"{out}/{m}.{q}.gemm.json"):
            continue  # not measured: the deadline came before it
        with open(f"{out}/{m}.{q}.gemm.json") as fh:
            g = json.load(fh)
        if R == 0:
            print(f"| {desc[m]} | {q} | {g['median_step_s'] * 1e3:.3f} | {g['gflops']:.0f} | - | - |")
            continue
        s01 = st.median(step_s(m, q, "01", r) for r in range(R))
        print(f"| {desc[m]} | {q} | {g['median_step_s'] * 1e3:.3f} | {g['gflops']:.0f} | "
              f"{s01 * 1e3:.3f} | {g['median_step_s'] / s01:.2f} |")
PYEOF
tables() {  # N: results.md over the first N repetitions
  "$PY" "$BENCH_OUT/tables.py" "$BENCH_OUT" "$1" "$W" "${MODELS[*]}" "${PRECS[*]}" "$R" "$stopped" \
    > "$BENCH_OUT/results.md.tmp" && mv "$BENCH_OUT/results.md.tmp" "$BENCH_OUT/results.md"
}

done_reps=0
tables 0  # the GEMM bounds, before any repetition
for ((rep = 0; rep < R; rep++)); do
  for m in "${MODELS[@]}"; do
    for q in "${PRECS[@]}"; do
      k=$((rep % ${#PROGS[@]}))
      for p in "${PROGS[@]:k}" "${PROGS[@]:0:k}"; do
        [ -z "$stopped" ] || break 3
        if [ "$(left)" -lt "$RUN_EST" ]; then stopped="the deadline, in repetition $((rep + 1))"; break 3; fi
        run_one "$m" "$q" "$p" "$rep" || stopped="the deadline, in repetition $((rep + 1))"
      done
    done
  done
  [ -z "$stopped" ] || break
  done_reps=$((rep + 1))
  echo "rep $done_reps/$R done"
  tables $done_reps  # the tables so far
done
tables $done_reps
cat "$BENCH_OUT/results.md"
# 3: stopped early by the deadline (results.md holds the repetitions done, and says so)
[ -z "$stopped" ] || exit 3
