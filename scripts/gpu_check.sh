#!/usr/bin/env bash
# GPU checks, for a machine with an NVIDIA GPU (DESIGN §8), in a few minutes, with no network and no
# package installs:
#   0. first, in a second: does the libnccl.so.2 the programs will load carry every collective the
#      code calls (scripts/nccl_caps.py; a library built with a subset runs a missing one as an
#      empty kernel, with no error)? Its result is the first line printed;
#   1. configure and build (only the programs it runs) with CUDA and NCCL (MPI when present); report
#      the NCCL it linked and the one it loads;
#   2. the `gpu` tests: every CUDA op against its CPU reference, the MLP on both devices, (with
#      an NCCL that can put 2 ranks on one GPU) the order of step 06's bucket all-reduce, and the
#      reduce-scatter and in-place all-gather on GPU buffers (NCCL; MPI through the host);
#   3. step 01 on the GPU against the CPU, same seed and data order;
#   4. the process group over NCCL at world size 1: step 05's exact resume; step 06 = step 05;
#      step 07 = step 06; step 08 = step 06; two ranks on one GPU without NCCL_MULTI_RANK_GPU_ENABLE end with a clear
#      message (any NCCL refuses them);
#   5. with NCCL >= 2.30 loaded: steps 04-08 at 2 ranks on one GPU (NCCL_MULTI_RANK_GPU_ENABLE=1,
#      scripts/launch.sh): replicas identical, step 06 = step 05, steps 07 and 08 = step 06, the GPU tracks
#      the CPU; the ncclAvg fallback; an IPv6 bootstrap address (SKIPPED where ::1 cannot be bound);
#      then the same at 4 ranks.
# Every multi-rank run is bounded three ways: `timeout` around it (RUN_LIMIT seconds, default 300),
# the trainer's --timeout 60 (its watchdog), and NCCL_MAX_CTAS=2 (NCCL documents "up to 2 ranks per
# GPU" with its default resources, and warns that running out of them hangs).
# Every line of the table it prints can fail; the exit status is 1 when any line FAILED (a machine
# without a GPU: every GPU line fails, but the refusal of two ranks on one GPU is SKIPPED), else 0. SKIPPED lines (e.g. NCCL < 2.30) do not fail it. The
# verdicts are in scripts/gpu_verdict.sh (tested on CPUs with made-up logs).
#
# Usage: [NCCL_ROOT=...] [DDP_DEPS_PREFIX=...] [DDP_GPU_OUT=...] [BENCH=R] scripts/gpu_check.sh [BUILD_DIR]
#   BUILD_DIR        build folder (default build-gpu)
#   DDP_GPU_OUT      output folder (default BUILD_DIR/gpu_check): summary.txt (the table) and
#                    logs.tar.gz (every log and metrics file); nothing else
#   NCCL_ROOT        an NCCL install (include/nccl.h + lib/libnccl.so*), e.g. NCCL 2.30 unpacked;
#                    its lib/ is put first on LD_LIBRARY_PATH
#   DDP_DEPS_PREFIX  Debian packages unpacked by scripts/gpu_deps.sh (OpenBLAS, GoogleTest,
#                    libdeflate) for a machine without them; deps/debs/*.deb are unpacked when present
#   CUDA_ARCHS       CUDA architectures to build (default 90: Hopper)
#   BENCH=R          then run bench/gpu_bench.sh -r R (needs PyTorch; its own build folder,
#                    BUILD_DIR-bench, with the same NCCL and CUDA_ARCHS)
#   RUN_LIMIT        seconds each multi-rank run may take before `timeout` ends it (default 300)
# CUDA libraries may also come from PyTorch's pip wheels (nvidia-*): NCCL is taken from the wheel when
# neither NCCL_ROOT nor the toolkit has one.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
BUILD_DIR=${1:-build-gpu}
DDP_GPU_OUT=${DDP_GPU_OUT:-$BUILD_DIR/gpu_check}
mkdir -p "$DDP_GPU_OUT" || exit 1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
LOG=$work/logs
mkdir -p "$LOG"
. scripts/gpu_verdict.sh  # rows, ok/fail/skip, the verdict_* functions, table
finish() {
  {
    table "# GPU check $(date -u +%Y-%m-%dT%H:%MZ): ${gpu_name:-no GPU}; build $BUILD_DIR"
    echo "# logs in $DDP_GPU_OUT/logs.tar.gz"
  } > "$DDP_GPU_OUT/summary.txt"
  tar -czf "$DDP_GPU_OUT/logs.tar.gz" -C "$work" logs
  echo
  cat "$DDP_GPU_OUT/summary.txt"
  exit $failed
}

wheel_dir() {  # the first site-packages/nvidia/<name> folder, if any
  python3 - "$1" 2>/dev/null <<'PY'
import os, site, sys
for sp in site.getsitepackages() + [site.getusersitepackages()]:
    d = os.path.join(sp, "nvidia", sys.argv[1])
    if os.path.isdir(d):
        print(d)
        break
PY
}

# ---- 0. the GPU ------------------------------------------------------------------------------------
gpu_name=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
nvidia-smi > "$LOG/nvidia-smi.txt" 2>&1
nvidia-smi topo -m >> "$LOG/nvidia-smi.txt" 2>&1

# ---- 1. build ------------------------------------------------------------------------------------
nvcc=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || true)
[ -n "$nvcc" ] || { fail "configure + build" "no nvcc (CUDA toolkit) found"; finish; }
cmake_args=(-DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_COMPILER="$nvcc"
            -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-90}" -DDDP_FETCH_GTEST=OFF)
command -v mpicc > /dev/null || cmake_args+=(-DDDP_ENABLE_MPI=OFF)
command -v ninja > /dev/null && [ ! -f "$BUILD_DIR/CMakeCache.txt" ] && cmake_args+=(-G Ninja)
if [ -z "${NCCL_ROOT:-}" ] && [ ! -f /usr/local/cuda/include/nccl.h ]; then
  w=$(wheel_dir nccl); [ -n "$w" ] && export NCCL_ROOT=$w
fi
if [ -n "${NCCL_ROOT:-}" ]; then
  cmake_args+=(-DNCCL_ROOT="$NCCL_ROOT")
  for d in "$NCCL_ROOT/lib" "$NCCL_ROOT/lib64"; do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  done
fi
if [ -z "${DDP_DEPS_PREFIX:-}" ] && compgen -G "deps/debs/*.deb" > /dev/null; then
  scripts/gpu_deps.sh --unpack > "$LOG/gpu_deps.log" 2>&1 && DDP_DEPS_PREFIX=$PWD/deps/prefix
fi
if [ -n "${DDP_DEPS_PREFIX:-}" ]; then
  P=$DDP_DEPS_PREFIX/usr
  L=$P/lib/x86_64-linux-gnu
  # libdeflate (header, link, libdeflate.so.0) comes from the prefix too: LIBDEFLATE_ROOT makes CMake
  # take them all from there, and $L on LD_LIBRARY_PATH (besides the build tree's RUNPATH) lets every
  # program, test and mpirun rank load it
  cmake_args+=(-DCMAKE_PREFIX_PATH="$P" -DCMAKE_LIBRARY_PATH="$L/openblas-pthread")
  [ -f "$P/include/libdeflate.h" ] && cmake_args+=(-DLIBDEFLATE_ROOT="$P")
  export LD_LIBRARY_PATH="$L/openblas-pthread:$L${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
# ---- NCCL's device functions, first of all ------------------------------------------------------------
# The library the programs will load, in the dynamic loader's order: LD_LIBRARY_PATH, then the
# folder the build links from (its RUNPATH), then ldconfig's cache. After the build, ldd says which
# one was loaded, and the row is checked again if that is another.
nccl_to_load() {
  local d
  local IFS=:
  for d in ${LD_LIBRARY_PATH:-} "${NCCL_ROOT:-/usr/local/cuda}/lib" "${NCCL_ROOT:-/usr/local/cuda}/lib64"; do
    [ -f "$d/libnccl.so.2" ] && { echo "$d/libnccl.so.2"; return; }
  done
  /sbin/ldconfig -p 2> /dev/null | awk '/libnccl\.so\.2 / {print $NF; exit}'
}
caps_row() {  # LIB: the row "NCCL carries every collective the code calls"
  local line="" rc=2
  [ -n "$1" ] && { line=$(scripts/nccl_caps.py "$1"); rc=$?; }
  caps_lib=$1
  caps_verdict=$(verdict_caps "$1" $rc "$line")
  echo "NCCL device functions: ${caps_verdict/$'\t'/: }"
}
caps_row "$(nccl_to_load)"

t0=$SECONDS
if ! cmake -S . -B "$BUILD_DIR" "${cmake_args[@]}" > "$LOG/configure.log" 2>&1; then
  fail "configure + build" "configure failed: $(grep -m1 -A2 'CMake Error' "$LOG/configure.log" | tr '\n' ' ')"
  finish
fi
features=$(grep -oE '\[(✓|✗)\] [A-Za-z+ ]+' "$LOG/configure.log" | sed 's/ *$//' | paste -sd, -)
if ! grep -q '\[✓\] CUDA' "$LOG/configure.log" || ! grep -q '\[✓\] NCCL' "$LOG/configure.log"; then
  fail "configure + build" "no CUDA or no NCCL in the build (set NCCL_ROOT): $features"
  finish
fi
# only what this script runs: the steps, gpu_count, the gpu tests' programs (and the benchmark's)
targets=(01_single_gpu 04_ddp_wrap 05_metrics_ckpt 06_full 07_zero 08_fsdp gpu_count test_order_nccl test_dist_gpu)
grep -q '\[✓\] GoogleTest' "$LOG/configure.log" && targets+=(gpu_tests)
if ! cmake --build "$BUILD_DIR" -j "$(nproc)" --target "${targets[@]}" > "$LOG/build.log" 2>&1; then
  fail "configure + build" "build failed: $(grep -m1 -E 'error' "$LOG/build.log")"
  finish
fi
ok "configure + build" "$((SECONDS - t0)) s; $features"
BIN=$BUILD_DIR/bin

# ---- NCCL: linked and loaded ------------------------------------------------------------------------
# linked: the version in the nccl.h the build compiled against, and the library it linked
nccl_inc=$(sed -n 's/^NCCL_INCLUDE_DIR:[A-Z]*=//p' "$BUILD_DIR/CMakeCache.txt")
nccl_lib=$(sed -n 's/^NCCL_LIBRARY:[A-Z]*=//p' "$BUILD_DIR/CMakeCache.txt")
linked="$(awk '/^#define NCCL_(MAJOR|MINOR|PATCH) / {v = v (v ? "." : "") $3} END {print v}' \
          "$nccl_inc/nccl.h" 2>/dev/null) ($nccl_lib)"
loaded_path=$(ldd "$BIN/05_metrics_ckpt" 2>/dev/null | awk '/libnccl/ {print $3; exit}')
if [ -n "$loaded_path" ] && [ "$(readlink -f "$loaded_path")" != "$(readlink -f "${caps_lib:-/}")" ]; then
  caps_row "$loaded_path"  # not the library predicted above: check the one that loads
fi
verdict "NCCL carries every collective the code calls" "$caps_verdict"
loaded=$(python3 - "$loaded_path" 2>/dev/null <<'PY'
import ctypes, sys
v = ctypes.c_int(0)
ctypes.CDLL(sys.argv[1]).ncclGetVersion(ctypes.byref(v))
c = v.value
print(f"{c // 10000}.{c % 10000 // 100}.{c % 100}" if c >= 10000 else f"{c // 1000}.{c % 1000 // 100}.{c % 100}")
PY
)
nccl_code=0
if [ -z "$loaded" ]; then
  fail "NCCL linked / loaded" "linked $linked; the loaded library ($loaded_path) did not answer ncclGetVersion"
else
  IFS=. read -r ma mi pa <<< "$loaded"
  nccl_code=$((ma * 10000 + mi * 100 + pa))
  if [[ "$linked" == "$loaded "* ]]; then
    ok "NCCL linked / loaded" "linked $linked; loaded $loaded ($loaded_path)"
  else
    fail "NCCL linked / loaded" "header and library differ: linked $linked; loaded $loaded ($loaded_path)"
  fi
fi

# ---- comparisons (one line each: ok|FAILED, a tab, the detail) --------------------------------------
compare() { verdict "$1" "$(python3 scripts/gpu_compare.py "${@:2}")"; }

# A run: name, then the command; its output goes to $LOG/<nn>_<name>.log (last_log), its exit status
# to last_rc. True when it exited 0.
n_run=0
run() {
  local name=$1; shift
  n_run=$((n_run + 1))
  last_log="$LOG/$(printf '%02d' $n_run)_$(echo "$name" | tr -c 'A-Za-z0-9\n' '_').log"
  "$@" > "$last_log" 2>&1
  last_rc=$?
  [ $last_rc -eq 0 ] && return 0
  echo "exit status $last_rc" >> "$last_log"
  return 1
}
last_error() { first_error "$last_log"; }  # the first error line of the latest run's log

# ---- 2. the gpu tests ---------------------------------------------------------------------------------
ngpu=$("$BIN/gpu_count" 2>/dev/null || echo 0)
if [ "$ngpu" -gt 0 ]; then
  ok "GPU visible to CUDA" "$ngpu: $gpu_name"
else
  fail "GPU visible to CUDA" "cudaGetDeviceCount finds none (nvidia-smi: ${gpu_name:-not found})"
fi
NCCL_MAX_CTAS=2 ctest --test-dir "$BUILD_DIR" -L gpu --output-on-failure > "$LOG/ctest_gpu.log" 2>&1
verdict "gpu tests (CUDA vs CPU, every op; MLP)" "$(verdict_gpu_tests "$LOG/ctest_gpu.log")"
verdict "bucket all-reduce order, 2 ranks (gpu test)" "$(verdict_order "$LOG/ctest_gpu.log" "$ngpu")"
verdict "reduce-scatter, all-gather in place (gpu tests)" "$(verdict_dist "$LOG/ctest_gpu.log" "$ngpu")"

# ---- 3. step 01, GPU against CPU --------------------------------------------------------------------
# Real Fashion-MNIST when installed; otherwise IDX files made here (learnable: each class lights its
# own rows of the image), so that the 8-bit pixel path (ops_gather_pixels) runs on the GPU as well.
data=()
data_name="Fashion-MNIST"
fmnist=$(sed -n 's/^DDP_FASHION_MNIST_DIR:[A-Z]*=//p' "$BUILD_DIR/CMakeCache.txt")  # the build's
if [ ! -f "$fmnist/train-images-idx3-ubyte.gz" ]; then
  data_name="IDX files made here"
  python3 - "$work/idx" <<'PY'
import gzip, os, random, struct, sys
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
rng = random.Random(1337)
for split, n in (("train", 16384), ("t10k", 2000)):
    labels = [i % 10 for i in range(n)]
    noise = rng.randbytes(784 * n)
    pixels = bytearray(b % 200 for b in noise)
    for i, k in enumerate(labels):
        for p in range(784 * i + 28 * (2 * k + 4), 784 * i + 28 * (2 * k + 6)):
            pixels[p] = min(255, pixels[p] + 30)
    with gzip.open(f"{out}/{split}-images-idx3-ubyte.gz", "wb", compresslevel=1) as f:
        f.write(struct.pack(">IIII", 2051, n, 28, 28) + bytes(pixels))
    with gzip.open(f"{out}/{split}-labels-idx1-ubyte.gz", "wb", compresslevel=1) as f:
        f.write(struct.pack(">II", 2049, n) + bytes(labels))
PY
  data=(--data fashion-mnist --data_dir "$work/idx")
fi
# hidden 256,256: the CPU side may be the plain C GEMM (no OpenBLAS), which must stay quick
s01=(--epochs 1 --max_steps 200 --batch_size 128 --hidden 256,256 --save_interval 0 --log_interval 100 "${data[@]}")
for dev in cuda cpu; do
  run "step01_$dev" "$BIN/01_single_gpu" --device $dev "${s01[@]}" --metrics "$LOG/step01_$dev.jsonl" ||
    fail "step 01 on $dev ($data_name)" "$(last_error)"
done
compare "step 01: GPU tracks CPU ($data_name)" gpu_cpu "$LOG/step01_cuda.jsonl" "$LOG/step01_cpu.jsonl" 10 1e-4 0.02
run "step01_tf32" "$BIN/01_single_gpu" --device cuda --tf32 "${s01[@]}" --metrics "$LOG/step01_tf32.jsonl" ||
  fail "step 01 on cuda --tf32" "$(last_error)"
# TF32 rounds each GEMM input to 10 mantissa bits (2^-11 relative): ~1e-3 on the loss, not 1e-1.
compare "step 01 --tf32 tracks fp32 on the GPU" gpu_cpu "$LOG/step01_tf32.jsonl" "$LOG/step01_cuda.jsonl" 10 2e-2 0.05

# ---- 4. the process group over NCCL, world size 1 ---------------------------------------------------
small=(--device cuda --backend nccl --data synthetic --dataset_size 16384 --log_interval 100)
export MASTER_ADDR=127.0.0.1
port=29512
# N [VAR=VALUE | -u VAR]... PROGRAM ARGS...: scripts/launch.sh on a fresh pair of ports (MASTER_PORT,
# + 1), with those variables set or unset, NCCL_MAX_CTAS=2, and ended by `timeout` after RUN_LIMIT
# seconds (exit status 124; 137 when it had to kill), whatever the trainer's own watchdog does.
launch() {
  local n=$1 rc unset=() set=(); shift
  while [ $# -gt 0 ]; do
    case $1 in -u) unset+=(-u "$2"); shift 2 ;; [A-Z]*=*) set+=("$1"); shift ;; *) break ;; esac
  done
  env "${unset[@]}" NCCL_MAX_CTAS=2 MASTER_PORT=$port "${set[@]}" \
    timeout -k 10 "${RUN_LIMIT:-300}" scripts/launch.sh -n "$n" "$@"
  rc=$?
  port=$((port + 2))
  return $rc
}
run "step05_2epochs" launch 1 "$BIN/05_metrics_ckpt" "${small[@]}" --epochs 2 --save_interval 0 \
  --metrics "$LOG/s05a_{rank}.jsonl" || fail "step 05, 1 rank, 2 epochs" "$(last_error)"
run "step05_1epoch" launch 1 "$BIN/05_metrics_ckpt" "${small[@]}" --epochs 1 --save_interval 1 \
  --ckpt_dir "$work/ck05" --metrics "$LOG/s05b_{rank}.jsonl" || fail "step 05, 1 rank, 1 epoch" "$(last_error)"
run "step05_resumed" launch 1 "$BIN/05_metrics_ckpt" "${small[@]}" --epochs 2 --save_interval 0 \
  --resume "$work/ck05/checkpoint.bin" --metrics "$LOG/s05c_{rank}.jsonl" ||
  fail "step 05, 1 rank, resumed" "$(last_error)"
compare "step 05, 1 rank: resume is exact" digest \
  "$LOG/s05a_0.jsonl" "$LOG/s05c_0.jsonl"
run "step06_1rank" launch 1 "$BIN/06_full" "${small[@]}" --epochs 1 --bucket_cap_mb 1 --save_interval 0 \
  --metrics "$LOG/s06_{rank}.jsonl" || fail "step 06, 1 rank" "$(last_error)"
# world size 1: step 06 (buckets, a sum, losses read back asynchronously) trains exactly as step 05
compare "step 06 = step 05, 1 rank" same "$LOG/s05b_0.jsonl" "$LOG/s06_0.jsonl" 0
# step 07 (ZeRO-1) at world size 1 on NCCL: its reduce-scatter and all-gather of one rank, so the
# newest GPU code runs even where only an NCCL that cannot share a GPU (< 2.30) loads
run "step07_1rank" launch 1 "$BIN/07_zero" "${small[@]}" --epochs 1 --bucket_cap_mb 1 --save_interval 0 \
  --metrics "$LOG/s07_{rank}.jsonl" || fail "step 07, 1 rank" "$(last_error)"
compare "step 07 = step 06, 1 rank" same "$LOG/s06_0.jsonl" "$LOG/s07_0.jsonl" 0
# step 08 (FSDP) at world size 1: every layer's all-gather and reduce-scatter of one rank, prefetched
run "step08_1rank" launch 1 "$BIN/08_fsdp" "${small[@]}" --epochs 1 --save_interval 0 \
  --metrics "$LOG/s08_{rank}.jsonl" || fail "step 08, 1 rank" "$(last_error)"
compare "step 08 = step 06, 1 rank" same "$LOG/s06_0.jsonl" "$LOG/s08_0.jsonl" 0
run "step06_trace" launch 1 "$BIN/06_full" "${small[@]}" --epochs 1 --bucket_cap_mb 1 --save_interval 0 \
  --max_steps 30 --trace "$LOG/trace06_{rank}.json" || fail "step 06, 1 rank, --trace" "$(last_error)"
compare "step 06 --trace: backward and all-reduce spans" trace "$LOG/trace06_0.json"
if command -v torchrun > /dev/null; then
  if run "step06_torchrun" timeout -k 10 "${RUN_LIMIT:-300}" torchrun --nproc_per_node 1 --master_port $port --redirects 3 --tee 3 \
       --no_python "$BIN/06_full" \
       "${small[@]}" --epochs 1 --max_steps 30 --save_interval 0; then
    ok "step 06 under torchrun, 1 rank" "$(grep -h 'done:' "$last_log" | tail -1)"
  else
    fail "step 06 under torchrun, 1 rank" "$(last_error)"
  fi
else
  skip "step 06 under torchrun, 1 rank" "no torchrun here"
fi

# Two ranks on one GPU without NCCL_MULTI_RANK_GPU_ENABLE: every NCCL refuses them (< 2.30 always,
# >= 2.30 without the variable), so this runs wherever there is a GPU, and must end with our
# message, not hang.
refusal_rc=0
if [ "$ngpu" -gt 0 ]; then
  run "duplicate_gpu" launch 2 -u NCCL_MULTI_RANK_GPU_ENABLE CUDA_VISIBLE_DEVICES=0 "$BIN/05_metrics_ckpt" \
    --device cuda --backend nccl --data synthetic --dataset_size 8192 --max_steps 5 --timeout 60
  refusal_rc=$last_rc
fi
verdict "2 ranks on one GPU without NCCL_MULTI_RANK_GPU_ENABLE" \
  "$(verdict_refusal "$ngpu" "$refusal_rc" "${last_log:-/dev/null}")"

# ---- 5. several ranks on one GPU (NCCL >= 2.30) -------------------------------------------------------
multi="several ranks on one GPU"
if [ "$nccl_code" -lt 23000 ]; then
  skip "$multi (steps 04-08, 2 and 4 ranks)" "needs NCCL >= 2.30 loaded (loaded ${loaded:-unknown}); set NCCL_ROOT to one"
else
  export NCCL_MULTI_RANK_GPU_ENABLE=1
  # 1 epoch of 8192 synthetic samples, batch 64 per rank, hidden 256,256: 64 steps at 2 ranks, 32 at
  # 4. The CPU reference is step 01 with the global batch W·64 (steps 04-06 train exactly as it does,
  # tests/integration/check.py matches_baseline); several CPU ranks would need MPI. --timeout 60:
  # the trainer's watchdog ends a rank stuck in a collective (launch's `timeout` ends the rest).
  mr=(--data synthetic --dataset_size 8192 --epochs 1 --batch_size 64 --hidden 256,256 --save_interval 0
      --log_interval 1000)
  nccl=(--device cuda --backend nccl --timeout 60)
  ipv6=$(ipv6_bindable)
  for np in 2 4; do  # every 2-rank run before the first 4-rank one
    run "cpu_ref_np$np" "$BIN/01_single_gpu" --device cpu "${mr[@]}" --batch_size $((64 * np)) \
      --metrics "$LOG/ref$np.jsonl" || fail "CPU reference for $np ranks (step 01, batch $((64 * np)))" "$(last_error)"
    for s in 04_ddp_wrap 05_metrics_ckpt 06_full 07_zero 08_fsdp; do
      n=${s%%_*}
      if ! run "step${n}_np$np" launch $np "$BIN/$s" "${nccl[@]}" "${mr[@]}" \
             --metrics "$LOG/m${n}_np${np}_{rank}.jsonl"; then
        verdict "step $n, $np ranks on one GPU" "$(verdict_run "$last_rc" "$last_log" "")"
        continue
      fi
      compare "step $n, $np ranks on one GPU: replicas identical" replicas "$LOG/m${n}_np${np}_" $np
    done
    # step 06 = step 05: at 2 ranks a sum of two values has one order, so bit-identical; at 4 the
    # order NCCL sums in may differ between step 05's per-tensor calls and step 06's buckets.
    if [ $np -eq 2 ]; then tol=0; else tol=1e-5; fi
    compare "step 06 = step 05, $np ranks" same "$LOG/m05_np${np}_0.jsonl" "$LOG/m06_np${np}_0.jsonl" $tol
    # step 07 (ZeRO-1: reduce-scatter, shard update, all-gather; 269,322 parameters, padded at 4 ranks)
    compare "step 07 = step 06, $np ranks" same "$LOG/m06_np${np}_0.jsonl" "$LOG/m07_np${np}_0.jsonl" $tol
    # step 08 (FSDP: each layer gathered, its gradient reduce-scattered; a sum of two is order-free)
    compare "step 08 = step 06, $np ranks" same "$LOG/m06_np${np}_0.jsonl" "$LOG/m08_np${np}_0.jsonl" $tol
    for n in 05 06; do  # the global loss (all-reduced) is logged from step 05 on
      compare "step $n, $np ranks: GPU tracks CPU (step 01, batch $((64 * np)))" gpu_cpu \
        "$LOG/m${n}_np${np}_0.jsonl" "$LOG/ref$np.jsonl" 10 1e-4 0.02
    done
    [ $np -eq 2 ] || continue
    # DIST_AVG without ncclAvg (NCCL < 2.10): a sum, then a division on the stream, inside the group
    run "step05_no_avg" launch 2 DDP_NCCL_NO_AVG=1 "$BIN/05_metrics_ckpt" "${nccl[@]}" "${mr[@]}" \
      --metrics "$LOG/noavg_{rank}.jsonl" ||
      fail "step 05, 2 ranks, sum + divide (no ncclAvg)" "$(last_error)"
    compare "step 05, 2 ranks, sum + divide = ncclAvg" same "$LOG/m05_np2_0.jsonl" "$LOG/noavg_0.jsonl" 1e-5
    # NCCL's bootstrap over an IPv6 literal (NCCL_COMM_ID=[::1]:port)
    ipv6_rc=0
    if [ "$ipv6" -eq 1 ]; then
      run "step05_ipv6" launch 2 MASTER_ADDR=::1 "$BIN/05_metrics_ckpt" "${nccl[@]}" "${mr[@]}" \
        --max_steps 5
      ipv6_rc=$last_rc
    fi
    verdict "bootstrap on MASTER_ADDR=::1, 2 ranks" "$(verdict_ipv6 "$ipv6" "$ipv6_rc" "${last_log:-/dev/null}")"
  done
fi

if [ "${BENCH:-0}" -gt 0 ]; then
  # its own build folder (with the benchmarks), the same NCCL (NCCL_ROOT, exported above) and
  # architectures; the deps prefix's libdeflate through CMAKE_PREFIX_PATH
  if BENCH_OUT="$LOG/bench" CUDA_ARCHS="${CUDA_ARCHS:-90}" CMAKE_PREFIX_PATH="${P:-}" \
       bench/gpu_bench.sh -r "$BENCH" "$BUILD_DIR-bench" > "$LOG/bench.log" 2>&1; then
    ok "benchmark (gpu_bench.sh -r $BENCH)" "tables in logs.tar.gz (logs/bench.log)"
  else
    fail "benchmark (gpu_bench.sh -r $BENCH)" "see logs/bench.log"
  fi
fi
finish
