#!/usr/bin/env bash
# GPU checks, for a machine with an NVIDIA GPU (DESIGN §8). In a few minutes:
#   1. configure and build with CUDA and NCCL (MPI when present);
#   2. the `gpu` tests: every CUDA op against its CPU reference, and the MLP on both devices;
#   3. step 01 for up to 300 steps on the GPU and on the CPU from the same seed, on Fashion-MNIST or
#      IDX files made here (the 8-bit pixel path): the loss curves agree;
#   4. the process group over NCCL at world size 1 (NCCL refuses two ranks on one GPU): step 05 through
#      the environment launch, with an exact resume; step 06 through the environment launch and
#      torchrun, with a trace;
# then a summary table. With BENCH=R (R > 0) it then runs scripts/bench/gpu_bench.sh -r R on the same
# build, so that one command does every GPU check and the benchmark (needs PyTorch with CUDA for
# python3, or PY=...; R=1 adds an estimated 2-4 minutes, not yet measured).
# Usage: [BENCH=R] scripts/gpu_check.sh [BUILD_DIR]
#
# CUDA libraries may come from the toolkit (/usr/local/cuda) or from PyTorch's pip wheels (nvidia-*):
# NCCL is looked for in the wheels when the toolkit has none. When nvcc is missing but BUILD_DIR
# already holds a CUDA build (made elsewhere with the same CUDA major version), it is reused and the
# wheels' libraries are put on LD_LIBRARY_PATH.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
BUILD_DIR=${1:-build-gpu}
OUT=${OUT:-$BUILD_DIR/gpu_check}
mkdir -p "$OUT"
results=()
failed=0
note() { results+=("$(printf '%-40s %s' "$1" "$2")"); }
fail() { note "$1" "FAILED: $2"; failed=1; }

wheel_dir() {  # the first site-packages/nvidia/<name> folder, if any
  python3 - "$1" 2>/dev/null <<'PY'
import glob, os, site, sys
dirs = site.getsitepackages() + [site.getusersitepackages()]
for sp in dirs:
    d = os.path.join(sp, "nvidia", sys.argv[1])
    if os.path.isdir(d):
        print(d)
        break
PY
}
wheel_libs() {
  python3 - 2>/dev/null <<'PY'
import glob, os, site
dirs = site.getsitepackages() + [site.getusersitepackages()]
print(":".join(sorted({lib for sp in dirs for lib in glob.glob(os.path.join(sp, "nvidia", "*", "lib"))})))
PY
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1 |
  sed 's/^/GPU: /' || echo "GPU: nvidia-smi not found"

# ---- 1. build ------------------------------------------------------------------------------------
nvcc=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || true)
if [ -n "$nvcc" ]; then
  mpi=ON; command -v mpicc >/dev/null || mpi=OFF
  gen=(); command -v ninja >/dev/null && [ ! -f "$BUILD_DIR/CMakeCache.txt" ] && gen=(-G Ninja)
  nccl_hint=(); nccl_wheel=$(wheel_dir nccl)
  [ -n "$nccl_wheel" ] && nccl_hint=(-DNCCL_ROOT="$nccl_wheel")
  cmake -S . -B "$BUILD_DIR" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DDDP_ENABLE_MPI=$mpi \
        -DCMAKE_CUDA_COMPILER="$nvcc" -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-80;90}" \
        "${nccl_hint[@]}" > "$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; exit 1; }
  grep -E '\[(✓|✗)\]' "$OUT/configure.log"
  if ! grep -q '\[✓\] CUDA' "$OUT/configure.log" || ! grep -q '\[✓\] NCCL' "$OUT/configure.log"; then
    echo "the build has no CUDA or no NCCL: see $OUT/configure.log (set NCCL_ROOT if NCCL is elsewhere)"
    exit 1
  fi
  cmake --build "$BUILD_DIR" -j "$(nproc)" > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
  note "configure + build (CUDA, NCCL, MPI=$mpi)" "ok"
else
  [ -x "$BUILD_DIR/bin/01_single_gpu" ] || { echo "no nvcc and no prebuilt $BUILD_DIR"; exit 1; }
  libs=$(wheel_libs)
  [ -n "$libs" ] && export LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  note "build" "reused $BUILD_DIR (no nvcc here)"
fi
BIN=$BUILD_DIR/bin

# ---- 2. CUDA against CPU, every op -----------------------------------------------------------------
"$BIN/gpu_tests" > "$OUT/gpu_tests.log" 2>&1
rc=$?
passed=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$OUT/gpu_tests.log" | tail -1)
skipped=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$OUT/gpu_tests.log" | tail -1)
# One test (DeviceCuda.InitWithoutGpuDies) skips by design on a machine with a GPU; more skips mean
# the GPU was not usable (e.g. a driver too old for the CUDA runtime).
if [ $rc -eq 0 ] && [ "${skipped:-0}" -le 1 ]; then
  note "gpu tests (CUDA vs CPU, all ops)" "passed ${passed:-?}, skipped ${skipped:-0}"
else
  fail "gpu tests (CUDA vs CPU, all ops)" "rc $rc, passed ${passed:-0}, skipped ${skipped:-0} ($OUT/gpu_tests.log)"
  grep -E "FAILED|Failure|error" "$OUT/gpu_tests.log" | head -20
fi

# ---- 3. step 01, GPU against CPU -------------------------------------------------------------------
# Real Fashion-MNIST when installed; otherwise IDX files made here (learnable: each class lights its
# own rows of the image), so that the 8-bit pixel path (ops_gather_pixels) runs on the GPU as well.
data=()
if [ ! -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  python3 - "$OUT/idx" <<'PY'
import gzip, os, random, struct, sys
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
rng = random.Random(1337)
for split, n in (("train", 16384), ("t10k", 2000)):
    labels = [i % 10 for i in range(n)]
    pixels = bytearray()
    for k in labels:
        img = bytearray(rng.randrange(0, 200) for _ in range(784))
        for r in range(2 * k + 4, 2 * k + 6):
            for c in range(28):
                img[28 * r + c] = min(255, img[28 * r + c] + 30)
        pixels += img
    with gzip.open(f"{out}/{split}-images-idx3-ubyte.gz", "wb") as f:
        f.write(struct.pack(">IIII", 2051, n, 28, 28) + bytes(pixels))
    with gzip.open(f"{out}/{split}-labels-idx1-ubyte.gz", "wb") as f:
        f.write(struct.pack(">II", 2049, n) + bytes(labels))
PY
  data=(--data fashion-mnist --data_dir "$OUT/idx")
fi
common=(--epochs 1 --max_steps 300 --batch_size 128 --save_interval 0 --log_interval 100 "${data[@]}")
for dev in cuda cpu; do
  t0=$(date +%s.%N)
  if "$BIN/01_single_gpu" --device $dev "${common[@]}" --metrics "$OUT/step01_$dev.jsonl" \
       > "$OUT/step01_$dev.log" 2>&1; then
    note "step 01 on $dev (300 steps)" "ok, $(python3 -c "import time; print(round(time.time() - $t0, 1))") s wall"
  else
    fail "step 01 on $dev (300 steps)" "see $OUT/step01_$dev.log"; tail -20 "$OUT/step01_$dev.log"
  fi
done
t0=$(date +%s.%N)
if "$BIN/01_single_gpu" --device cuda --tf32 "${common[@]}" --metrics "$OUT/step01_tf32.jsonl" \
     > "$OUT/step01_tf32.log" 2>&1; then
  note "step 01 on cuda --tf32 (300 steps)" "ok, $(python3 -c "import time; print(round(time.time() - $t0, 1))") s wall"
else
  fail "step 01 on cuda --tf32 (300 steps)" "see $OUT/step01_tf32.log"; tail -20 "$OUT/step01_tf32.log"
fi
python3 - "$OUT" > "$OUT/compare.txt" 2>&1 <<'PY'
import json, sys
out = sys.argv[1]
def losses(dev):
    with open(f"{out}/step01_{dev}.jsonl") as f:
        return [o["loss"] for o in map(json.loads, f) if o["type"] == "step"]
g, c = losses("cuda"), losses("cpu")
for k in (1, 10, 100, 300):
    if k <= min(len(g), len(c)):
        print(f"  loss at step {k:<4} cuda {g[k-1]:.6f}  cpu {c[k-1]:.6f}  |diff| {abs(g[k-1]-c[k-1]):.2e}")
first = max(abs(a - b) for a, b in zip(g[:10], c[:10]))
# fp32 on both sides, different summation orders: ~1e-6 per step at first, growing with training.
print(f"  max |loss diff| over the first 10 steps: {first:.2e} ({'ok' if first < 1e-4 else 'TOO LARGE'})")
try:
    t = losses("tf32")
    d = max(abs(a - b) for a, b in zip(t[:10], g[:10]))
    # TF32 rounds each GEMM input to 10 mantissa bits (2^-11 relative): ~1e-3 on the loss, not 1e-1.
    print(f"  --tf32 against fp32 on the GPU, max |loss diff| over the first 10 steps: {d:.2e} "
          f"({'ok' if d < 2e-2 else 'TOO LARGE'})")
except Exception as e:
    print(f"  --tf32 comparison failed: {e} (TOO LARGE)")
PY

# ---- 4. the process group over NCCL, world size 1 ------------------------------------------------
small=(--device cuda --backend nccl --data synthetic --dataset_size 16384 --log_interval 100)
launch() {  # name, then the command
  local name=$1 log; shift
  log="$OUT/$(echo "$name" | tr -c 'A-Za-z0-9\n' '_').log"
  if MASTER_PORT=${MASTER_PORT:-29512} "$@" > "$log" 2>&1; then
    note "$name" "ok: $(grep -h 'done:' "$log" | tail -1)"
  else
    fail "$name" "see $log"; tail -20 "$log"
  fi
}
launch "step05 env launch, 2 epochs" scripts/launch.sh -n 1 "$BIN/05_metrics_ckpt" "${small[@]}" \
  --epochs 2 --save_interval 1 --ckpt_dir "$OUT/ck05" --metrics "$OUT/step05a_{rank}.jsonl"
# Resume is exact on the GPU too: 2 epochs straight against 1 epoch, a checkpoint, and epoch 2.
launch "step05 env launch, 1 epoch" scripts/launch.sh -n 1 "$BIN/05_metrics_ckpt" "${small[@]}" \
  --epochs 1 --save_interval 1 --ckpt_dir "$OUT/ck05one" --metrics "$OUT/step05c_{rank}.jsonl"
launch "step05 env launch, resumed epoch 2" scripts/launch.sh -n 1 "$BIN/05_metrics_ckpt" "${small[@]}" \
  --epochs 2 --save_interval 0 --resume "$OUT/ck05one/checkpoint.bin" --metrics "$OUT/step05d_{rank}.jsonl"
launch "step06 env launch" scripts/launch.sh -n 1 "$BIN/06_full" "${small[@]}" --epochs 1 \
  --bucket_cap_mb 1 --save_interval 0 --metrics "$OUT/step06_{rank}.jsonl"
launch "step06 env launch, trace" scripts/launch.sh -n 1 "$BIN/06_full" "${small[@]}" --epochs 1 \
  --bucket_cap_mb 1 --save_interval 0 --trace "$OUT/trace06_{rank}.json"
if command -v torchrun >/dev/null; then
  launch "step06 torchrun" torchrun --nproc_per_node 1 --no_python "$BIN/06_full" "${small[@]}" \
    --epochs 1 --save_interval 0 --trace "$OUT/trace06t_{rank}.json"
else
  note "step06 torchrun" "skipped: no torchrun"
fi
python3 - "$OUT" >> "$OUT/compare.txt" 2>&1 <<'PY'
import json, sys
out = sys.argv[1]
def final(name):
    with open(f"{out}/{name}_0.jsonl") as f:
        return [o for o in map(json.loads, f) if o["type"] == "final"][0]["param_digest"]
try:
    a, d = final("step05a"), final("step05d")
    print(f"  step 05 on the GPU: 2 epochs {a}, 1 epoch + resume {d}: "
          f"{'identical' if a == d else 'DIFFERENT'}")
except Exception as e:
    print(f"  step 05 resume comparison failed: {e}")
try:
    # world size 1: step 06 (buckets, a sum, losses read back asynchronously; no --trace, which
    # would wait for the GPU) trains exactly as step 05 (one all-reduce, an average, the loss read
    # every step), and logs every step in order and the same epoch mean
    def records(name):
        with open(f"{out}/{name}_0.jsonl") as f:
            recs = [o for o in map(json.loads, f) if o["type"] in ("step", "epoch")]
        return [(o["type"], o.get("step"), o.get("loss", o.get("train_loss"))) for o in recs]
    s5, s6 = records("step05c"), records("step06")
    steps6 = [s for kind, s, _ in s6 if kind == "step"]
    same = s5 == s6 and steps6 == list(range(1, len(steps6) + 1))
    c, e = final("step05c"), final("step06")
    print(f"  step 06 against step 05 on the GPU: {len(steps6)} step losses and the epoch mean "
          f"{'identical, in order' if same else 'DIFFERENT'}; digests {c} {e}: "
          f"{'identical' if c == e else 'DIFFERENT'}")
except Exception as e:
    print(f"  step 06 against step 05 comparison failed: {e} (DIFFERENT)")
try:
    ev = json.load(open(f"{out}/trace06_0.json"))["traceEvents"]
    spans = [e for e in ev if e["ph"] == "X"]
    ar = sorted(e["dur"] for e in spans if e["name"].startswith("all-reduce"))
    bw = [e for e in spans if e["name"].startswith("backward")]
    print(f"  step 06 trace: {len(bw)} backward spans, {len(ar)} all-reduce spans, "
          f"median all-reduce {ar[len(ar) // 2]:.1f} us")
except Exception as e:
    print(f"  step 06 trace unreadable: {e}")
PY

echo
echo "# GPU check summary"
for r in "${results[@]}"; do echo "$r"; done
echo "# step 01: GPU against CPU (same seed, same data order); step 05 resume; step 06 trace"
cat "$OUT/compare.txt"
grep -q "DIFFERENT\|TOO LARGE" "$OUT/compare.txt" && failed=1

if [ "${BENCH:-0}" -gt 0 ]; then
  echo
  echo "# GPU benchmark (scripts/bench/gpu_bench.sh -r $BENCH)"
  OUT=$OUT/bench scripts/bench/gpu_bench.sh -r "$BENCH" "$BUILD_DIR" || failed=1
fi
exit $failed
