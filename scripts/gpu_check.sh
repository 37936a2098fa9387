#!/usr/bin/env bash
# GPU checks, for a machine with an NVIDIA GPU (DESIGN §8), in a few minutes, with no network and no
# package installs:
#   1. configure and build with CUDA and NCCL (MPI when present); report the NCCL it linked and the
#      one it loads;
#   2. the `gpu` tests: every CUDA op against its CPU reference, the MLP on both devices, (with
#      an NCCL that can put 2 ranks on one GPU) the order of step 06's bucket all-reduce, and the
#      reduce-scatter and in-place all-gather on GPU buffers (NCCL; MPI through the host);
#   3. step 01 on the GPU against the CPU, same seed and data order;
#   4. the process group over NCCL at world size 1: step 05's exact resume; step 06 = step 05;
#   5. with NCCL >= 2.30 loaded: steps 04, 05 and 06 at 2 and 4 ranks on one GPU
#      (NCCL_MULTI_RANK_GPU_ENABLE=1, scripts/launch.sh): replicas identical, step 06 = step 05, the
#      GPU tracks the CPU; the ncclAvg fallback; an IPv6 bootstrap address; two ranks on one GPU
#      without the variable end with a clear message.
# Every line of the table it prints can fail; the exit status is 1 when any line FAILED (a machine
# without a GPU: every GPU line fails), else 0. SKIPPED lines (e.g. NCCL < 2.30) do not fail it.
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
#   BENCH=R          then run bench/gpu_bench.sh -r R on the same build (needs PyTorch)
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
rows=()
failed=0
row() { rows+=("$(printf '%-52s %s' "$1" "$2")"); }
ok() { row "$1" "ok: $2"; }
fail() { row "$1" "FAILED: $2"; failed=1; }
skip() { row "$1" "SKIPPED: $2"; }
verdict() {  # name, then a line "ok|FAILED|SKIPPED<TAB>detail" from the comparison script
  local name=$1 line=$2
  case ${line%%$'\t'*} in
    ok) ok "$name" "${line#*$'\t'}" ;;
    SKIPPED) skip "$name" "${line#*$'\t'}" ;;
    *) fail "$name" "${line#*$'\t'}" ;;
  esac
}
finish() {
  {
    echo "# GPU check $(date -u +%Y-%m-%dT%H:%MZ): ${gpu_name:-no GPU}; build $BUILD_DIR"
    printf '%-52s %s\n' "check" "result"
    for r in "${rows[@]}"; do echo "$r"; done
    echo "# $(grep -c ' ok: ' <<< "$(printf '%s\n' "${rows[@]}")") ok," \
         "$(grep -c ' FAILED: ' <<< "$(printf '%s\n' "${rows[@]}")") failed," \
         "$(grep -c ' SKIPPED: ' <<< "$(printf '%s\n' "${rows[@]}")") skipped; logs in $DDP_GPU_OUT/logs.tar.gz"
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
[ "${BENCH:-0}" -gt 0 ] && cmake_args+=(-DDDP_BUILD_BENCH=ON)  # gpu_bench.sh runs gemm_bound
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
if ! cmake --build "$BUILD_DIR" -j "$(nproc)" > "$LOG/build.log" 2>&1; then
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

# ---- comparisons (one line each: ok|FAILED|SKIPPED, a tab, the detail) -------------------------------
cat > "$work/cmp.py" <<'PY'
import json, sys

def recs(path, kind):
    with open(path) as f:
        return [o for o in map(json.loads, f) if o["type"] == kind]

def say(good, detail):
    print(("ok" if good else "FAILED") + "\t" + detail)

def main(cmd, *a):
    try:
        if cmd == "gpu_cpu":  # gpu.jsonl cpu.jsonl K tol acc_tol
            # fp32 on both devices, different summation orders: the losses agree to ~1e-6 at first;
            # the difference grows as training goes on, and a ReLU input near 0 can then fall on
            # either side (a near-tie), after which the two runs are legitimately different runs of
            # the same training. So the first K steps are compared tightly and the end only
            # through the test accuracy, loosely.
            g, c = recs(a[0], "step"), recs(a[1], "step")
            k, tol, acc_tol = int(a[2]), float(a[3]), float(a[4])
            if len(g) < k or len(g) != len(c):
                return say(False, f"{len(g)} GPU steps, {len(c)} CPU steps (need {k} or more, equal)")
            d = max(abs(x["loss"] - y["loss"]) for x, y in zip(g[:k], c[:k]))
            ga, ca = recs(a[0], "epoch")[-1]["test_acc"], recs(a[1], "epoch")[-1]["test_acc"]
            good = d < tol and abs(ga - ca) < acc_tol
            say(good, f"{len(g)} steps; first {k}: max |loss diff| {d:.1e} (< {tol:g}); "
                      f"final test accuracy GPU {ga:.4f}, CPU {ca:.4f} (|diff| < {acc_tol:g})")
        elif cmd == "replicas":  # prefix W
            d = [recs(f"{a[0]}{r}.jsonl", "final")[0]["param_digest"] for r in range(int(a[1]))]
            say(len(set(d)) == 1, f"{a[1]} ranks, digests {' '.join(sorted(set(d)))}"
                + ("" if len(set(d)) == 1 else " (DIFFERENT)"))
        elif cmd == "same":  # a.jsonl b.jsonl tol: digests and step losses; tol 0 = identical
            la, lb = recs(a[0], "step"), recs(a[1], "step")
            da, db = recs(a[0], "final")[0]["param_digest"], recs(a[1], "final")[0]["param_digest"]
            tol = float(a[2])
            d = max((abs(x["loss"] - y["loss"]) for x, y in zip(la, lb)), default=float("inf"))
            steps_ok = len(la) == len(lb) and [x["step"] for x in lb] == list(range(1, len(lb) + 1))
            if tol == 0:
                say(steps_ok and d == 0 and da == db, f"{len(la)} step losses identical: {d == 0}; "
                    f"digests {da} {db}")
            else:
                say(steps_ok and d <= tol, f"{len(la)} steps, max |loss diff| {d:.1e} (<= {tol:g}); "
                    f"digests {da} {db} ({'identical' if da == db else 'not identical'})")
        elif cmd == "trace":  # trace.json
            ev = json.load(open(a[0]))["traceEvents"]
            spans = [e for e in ev if e["ph"] == "X"]
            ar = sorted(e["dur"] for e in spans if e["name"].startswith("all-reduce"))
            bw = [e for e in spans if e["name"].startswith("backward")]
            say(len(ar) > 0 and len(bw) > 0, f"{len(bw)} backward spans, {len(ar)} all-reduce spans, "
                f"median all-reduce {ar[len(ar) // 2] if ar else float('nan'):.1f} us")
        else:
            say(False, f"unknown comparison {cmd}")
    except FileNotFoundError as e:  # the run that writes it failed (its own line says why)
        say(False, f"no {e.filename.rsplit('/', 1)[-1]}: its run failed")
    except Exception as e:
        say(False, f"{type(e).__name__}: {e}")

main(*sys.argv[1:])
PY
compare() { verdict "$1" "$(python3 "$work/cmp.py" "${@:2}")"; }

# A run: name, then the command; its output goes to $LOG/<name>.log. True when it exited 0.
n_run=0
run() {
  local name=$1 log; shift
  n_run=$((n_run + 1))
  log="$LOG/$(printf '%02d' $n_run)_$(echo "$name" | tr -c 'A-Za-z0-9\n' '_').log"
  "$@" > "$log" 2>&1
  local rc=$?
  [ $rc -eq 0 ] && return 0
  echo "exit status $rc" >> "$log"
  return 1
}
last_error() {  # the first error line of the latest run's log (the program's own, if any)
  local log line
  log=$(ls -t "$LOG"/*.log | head -1)
  line=$(grep -h -m1 -E '(^|\]:)error: |ERROR\]' "$log")
  [ -n "$line" ] || line=$(grep -h -iE 'error|failed|exit status' "$log" | tail -1)
  echo "${line:0:160}"
}

# ---- 2. the gpu tests ---------------------------------------------------------------------------------
ngpu=$("$BIN/gpu_count" 2>/dev/null || echo 0)
if [ "$ngpu" -gt 0 ]; then
  ok "GPU visible to CUDA" "$ngpu: $gpu_name"
else
  fail "GPU visible to CUDA" "cudaGetDeviceCount finds none (nvidia-smi: ${gpu_name:-not found})"
fi
ctest --test-dir "$BUILD_DIR" -L gpu --output-on-failure > "$LOG/ctest_gpu.log" 2>&1
# The collectives on GPU buffers (dist_gpu_*) get a line of their own, below.
other_tests=$(grep -vE 'Test +#[0-9]+: dist_gpu_' "$LOG/ctest_gpu.log")
t_pass=$(grep -cE 'Test +#[0-9]+: .* Passed' <<< "$other_tests")
t_skip=$(grep -cE 'Test +#[0-9]+: .*\*\*\*Skipped' <<< "$other_tests")
t_fail=$(grep -cE 'Test +#[0-9]+: .*\*\*\*(Failed|Timeout|Exception)|Test +#[0-9]+: .* Not Run' <<< "$other_tests")
if grep -q "nccl_bucket_order" "$LOG/ctest_gpu.log"; then
  order_line=$(grep -E 'nccl_bucket_order' "$LOG/ctest_gpu.log" | tail -1)
else
  order_line=""
fi
# One test (DeviceCuda.InitWithoutGpuDies) skips by design when a GPU is present; the bucket-order
# test skips where NCCL cannot put 2 ranks on this machine's GPUs (reported on its own line).
allowed=1
[[ "$order_line" == *Skipped* ]] && allowed=2
if [ "$t_pass" -gt 0 ] && [ "$t_fail" -eq 0 ] && [ "$t_skip" -le "$allowed" ]; then
  ok "gpu tests (CUDA vs CPU, every op; MLP)" "$t_pass passed, $t_skip skipped"
else
  fail "gpu tests (CUDA vs CPU, every op; MLP)" "$t_pass passed, $t_fail failed, $t_skip skipped (a skip means no usable GPU)"
fi
if [ -z "$order_line" ]; then
  fail "bucket all-reduce order, 2 ranks (gpu test)" "not built (needs NCCL)"
elif [[ "$order_line" == *Passed* ]]; then
  ok "bucket all-reduce order, 2 ranks (gpu test)" "all-reduce after the gradient, SGD after the all-reduce"
elif [[ "$order_line" == *Skipped* ]]; then
  if [ "$ngpu" -eq 0 ]; then
    fail "bucket all-reduce order, 2 ranks (gpu test)" "skipped: no GPU"
  else
    skip "bucket all-reduce order, 2 ranks (gpu test)" "$(grep -m1 -o 'SKIPPED: .*' "$LOG/ctest_gpu.log" | cut -c10-120)"
  fi
else
  fail "bucket all-reduce order, 2 ranks (gpu test)" "$(grep -m1 'FAILED' "$LOG/ctest_gpu.log" | cut -c1-140)"
fi
# The reduce-scatter and in-place all-gather on GPU buffers (tests/gpu/test_dist_gpu.c): over NCCL at
# 2 and 3 ranks (skipped where NCCL cannot share this machine's GPUs), and over MPI through the host.
dist_lines=$(grep -E 'Test +#[0-9]+: dist_gpu_' "$LOG/ctest_gpu.log")
d_pass=$(grep -c ' Passed' <<< "$dist_lines")
d_skip=$(grep -c '\*\*\*Skipped' <<< "$dist_lines")
d_fail=$(grep -cE '\*\*\*(Failed|Timeout|Exception)| Not Run' <<< "$dist_lines")
d_name="reduce-scatter, all-gather in place (gpu tests)"
if [ -z "$dist_lines" ]; then
  fail "$d_name" "not built (needs NCCL or MPI)"
elif [ "$d_fail" -gt 0 ]; then
  fail "$d_name" "$d_fail failed: $(grep -m1 -E 'FAILED|ERROR' "$LOG/ctest_gpu.log" | cut -c1-120)"
elif [ "$d_pass" -gt 0 ]; then
  ok "$d_name" "$d_pass passed, $d_skip skipped (NCCL tests skip where NCCL cannot share the GPU)"
elif [ "$ngpu" -eq 0 ]; then
  fail "$d_name" "skipped: no GPU"
else
  skip "$d_name" "every one skipped (NCCL cannot share the GPU, and no MPI)"
fi

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
launch() {  # N PROGRAM ARGS...: scripts/launch.sh on a fresh pair of ports (MASTER_PORT, + 1)
  local n=$1 rc; shift
  MASTER_PORT=$port scripts/launch.sh -n "$n" "$@"
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
verdict "step 05, 1 rank: resume is exact" "$(python3 - "$LOG" <<'PY'
import json, sys
d = lambda n: [o for o in map(json.loads, open(f"{sys.argv[1]}/{n}_0.jsonl")) if o["type"] == "final"][0]["param_digest"]
try:
    a, c = d("s05a"), d("s05c")
    print(("ok" if a == c else "FAILED") + f"\t2 epochs {a}, 1 epoch + checkpoint + epoch 2 {c}")
except FileNotFoundError as e:
    print(f"FAILED\tno {e.filename.rsplit('/', 1)[-1]}: its run failed")
except Exception as e:
    print(f"FAILED\t{type(e).__name__}: {e}")
PY
)"
run "step06_1rank" launch 1 "$BIN/06_full" "${small[@]}" --epochs 1 --bucket_cap_mb 1 --save_interval 0 \
  --metrics "$LOG/s06_{rank}.jsonl" || fail "step 06, 1 rank" "$(last_error)"
# world size 1: step 06 (buckets, a sum, losses read back asynchronously) trains exactly as step 05
compare "step 06 = step 05, 1 rank" same "$LOG/s05b_0.jsonl" "$LOG/s06_0.jsonl" 0
run "step06_trace" launch 1 "$BIN/06_full" "${small[@]}" --epochs 1 --bucket_cap_mb 1 --save_interval 0 \
  --max_steps 30 --trace "$LOG/trace06_{rank}.json" || fail "step 06, 1 rank, --trace" "$(last_error)"
compare "step 06 --trace: backward and all-reduce spans" trace "$LOG/trace06_0.json"
if command -v torchrun > /dev/null; then
  if run "step06_torchrun" torchrun --nproc_per_node 1 --master_port $port --redirects 3 --tee 3 \
       --no_python "$BIN/06_full" \
       "${small[@]}" --epochs 1 --max_steps 30 --save_interval 0; then
    ok "step 06 under torchrun, 1 rank" "$(grep -h 'done:' "$(ls -t "$LOG"/*.log | head -1)" | tail -1)"
  else
    fail "step 06 under torchrun, 1 rank" "$(last_error)"
  fi
else
  skip "step 06 under torchrun, 1 rank" "no torchrun here"
fi

# ---- 5. several ranks on one GPU (NCCL >= 2.30) -------------------------------------------------------
multi="several ranks on one GPU"
if [ "$nccl_code" -lt 23000 ]; then
  skip "$multi (steps 04-07, 2 and 4 ranks)" "needs NCCL >= 2.30 loaded (loaded ${loaded:-unknown}); set NCCL_ROOT to one"
else
  export NCCL_MULTI_RANK_GPU_ENABLE=1
  # 1 epoch of 8192 synthetic samples, batch 64 per rank, hidden 256,256: 64 steps at 2 ranks, 32 at
  # 4. The CPU reference is step 01 with the global batch W·64 (steps 04-06 train exactly as it does,
  # tests/integration/check.py matches_baseline); several CPU ranks would need MPI.
  mr=(--data synthetic --dataset_size 8192 --epochs 1 --batch_size 64 --hidden 256,256 --save_interval 0
      --log_interval 1000)
  for np in 2 4; do
    run "cpu_ref_np$np" "$BIN/01_single_gpu" --device cpu "${mr[@]}" --batch_size $((64 * np)) \
      --metrics "$LOG/ref$np.jsonl" || fail "CPU reference for $np ranks (step 01, batch $((64 * np)))" "$(last_error)"
    for s in 04_ddp_wrap 05_metrics_ckpt 06_full 07_zero; do
      n=${s%%_*}
      if ! run "step${n}_np$np" launch $np "$BIN/$s" --device cuda --backend nccl "${mr[@]}" \
             --metrics "$LOG/m${n}_np${np}_{rank}.jsonl"; then
        fail "step $n, $np ranks on one GPU" "$(last_error)"
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
    for n in 05 06; do  # the global loss (all-reduced) is logged from step 05 on
      compare "step $n, $np ranks: GPU tracks CPU (step 01, batch $((64 * np)))" gpu_cpu \
        "$LOG/m${n}_np${np}_0.jsonl" "$LOG/ref$np.jsonl" 10 1e-4 0.02
    done
  done
  # DIST_AVG without ncclAvg (NCCL < 2.10): a sum, then a division on the stream, inside the group
  run "step05_no_avg" env DDP_NCCL_NO_AVG=1 MASTER_PORT=$port scripts/launch.sh -n 2 \
    "$BIN/05_metrics_ckpt" --device cuda --backend nccl "${mr[@]}" --metrics "$LOG/noavg_{rank}.jsonl" ||
    fail "step 05, 2 ranks, sum + divide (no ncclAvg)" "$(last_error)"
  port=$((port + 2))
  compare "step 05, 2 ranks, sum + divide = ncclAvg" same "$LOG/m05_np2_0.jsonl" "$LOG/noavg_0.jsonl" 1e-5
  # NCCL's bootstrap over an IPv6 literal (NCCL_COMM_ID=[::1]:port)
  if run "step05_ipv6" env MASTER_ADDR=::1 MASTER_PORT=$port scripts/launch.sh -n 2 \
       "$BIN/05_metrics_ckpt" --device cuda --backend nccl "${mr[@]}" --max_steps 5; then
    ok "bootstrap on MASTER_ADDR=::1, 2 ranks" "NCCL_COMM_ID=[::1]:port"
  else
    fail "bootstrap on MASTER_ADDR=::1, 2 ranks" "$(last_error)"
  fi
  port=$((port + 2))
  # without NCCL_MULTI_RANK_GPU_ENABLE, two ranks on one GPU must end with our message, not hang
  if run "duplicate_gpu" env -u NCCL_MULTI_RANK_GPU_ENABLE CUDA_VISIBLE_DEVICES=0 MASTER_PORT=$port \
       scripts/launch.sh -n 2 "$BIN/05_metrics_ckpt" --device cuda --backend nccl "${mr[@]}" \
       --max_steps 5 --timeout 60; then
    fail "2 ranks on one GPU without NCCL_MULTI_RANK_GPU_ENABLE" "it ran: expected a refusal"
  elif grep -q "several ranks of this node are on the same GPU" "$(ls -t "$LOG"/*.log | head -1)"; then
    ok "2 ranks on one GPU without NCCL_MULTI_RANK_GPU_ENABLE" "refused with the explanation"
  else
    fail "2 ranks on one GPU without NCCL_MULTI_RANK_GPU_ENABLE" "no explanation: $(last_error)"
  fi
fi

if [ "${BENCH:-0}" -gt 0 ]; then
  if OUT="$LOG/bench" bench/gpu_bench.sh -r "$BENCH" "$BUILD_DIR" > "$LOG/bench.log" 2>&1; then
    ok "benchmark (gpu_bench.sh -r $BENCH)" "tables in logs.tar.gz (logs/bench.log)"
  else
    fail "benchmark (gpu_bench.sh -r $BENCH)" "see logs/bench.log"
  fi
fi
finish
