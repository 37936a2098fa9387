#!/usr/bin/env bash
# GPU checks, for a machine with an NVIDIA GPU (DESIGN §8): configure and build with CUDA (MPI if
# present), run the `gpu` tests (every CUDA op against its CPU reference), train step 01 for a few
# hundred steps on the GPU and on the CPU from the same seed and compare the loss curves, then print a
# short table. Finishes in a few minutes. Usage: scripts/gpu_check.sh [BUILD_DIR]
#
# When nvcc is missing but BUILD_DIR already holds a CUDA build (carried from another machine), the
# build is reused and the CUDA libraries are taken from the Python wheels (nvidia-*), if installed.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build-gpu}
OUT=${OUT:-$BUILD_DIR/gpu_check}
mkdir -p "$OUT"
results=()
note() { results+=("$(printf '%-44s %s' "$1" "$2")"); }

wheel_libs=$(python3 - 2>/dev/null <<'PY'
import glob, os, site
dirs = set()
for sp in site.getsitepackages():
    for lib in glob.glob(os.path.join(sp, "nvidia", "*", "lib")):
        dirs.add(lib)
print(":".join(sorted(dirs)))
PY
)
[ -n "$wheel_libs" ] && export LD_LIBRARY_PATH="$wheel_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1

if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
  mpi=ON; command -v mpicc >/dev/null || mpi=OFF
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDDP_ENABLE_MPI=$mpi \
        -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-80;90}" > "$OUT/configure.log" 2>&1 \
    || { tail -30 "$OUT/configure.log"; exit 1; }
  grep -E '\[(✓|✗)\]' "$OUT/configure.log"
  cmake --build "$BUILD_DIR" -j "$(nproc)" > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
  note "configure + build (CUDA, MPI=$mpi)" "ok"
else
  [ -x "$BUILD_DIR/bin/01_single_gpu" ] || { echo "no nvcc and no prebuilt $BUILD_DIR"; exit 1; }
  note "build" "reused $BUILD_DIR (no nvcc here)"
fi

# 1. every CUDA op against its CPU reference
if "$BUILD_DIR/tests/gpu_tests" --gtest_brief=1 > "$OUT/gpu_tests.log" 2>&1; then
  note "gpu tests (CUDA vs CPU, all ops)" "passed: $(grep -c '^\[       OK' "$OUT/gpu_tests.log" || true) ok, $(grep -c 'SKIPPED \]' "$OUT/gpu_tests.log" || true) skipped"
else
  note "gpu tests (CUDA vs CPU, all ops)" "FAILED (see $OUT/gpu_tests.log)"; tail -40 "$OUT/gpu_tests.log"
fi

# 2. step 01, GPU vs CPU, same seed and data: the loss curves must agree closely at first
data=(--data synthetic --dataset_size 16384); [ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] && data=()
common=(--epochs 1 --max_steps 300 --batch_size 128 --save_interval 0 --log_interval 100 "${data[@]}")
for dev in cuda cpu; do
  t0=$(date +%s.%N)
  if "$BUILD_DIR/bin/01_single_gpu" --device $dev "${common[@]}" --metrics "$OUT/step01_$dev.jsonl" \
       > "$OUT/step01_$dev.log" 2>&1; then
    note "step 01 on $dev (300 steps)" "ok, $(python3 -c "import time; print(round(time.time() - $t0, 1))") s wall"
  else
    note "step 01 on $dev (300 steps)" "FAILED"; tail -20 "$OUT/step01_$dev.log"
  fi
done
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
PY
grep -h "samples/s" "$OUT"/step01_*.log | grep "train loss" | sed 's/^/  /'

# 3. the process group over NCCL at world size 1 (NCCL refuses two ranks on one GPU): step 05 and
#    step 06 through the environment launch, step 06 through torchrun, with a trace
short=(--device cuda --epochs 1 --max_steps 200 --save_interval 1 --log_interval 100 "${data[@]}")
launch() {  # name, then the command
  local name=$1; shift
  if MASTER_PORT=${MASTER_PORT:-29512} "$@" > "$OUT/$name.log" 2>&1; then
    note "$name" "ok: $(grep -h 'done:' "$OUT/$name.log" | tail -1)"
  else
    note "$name" "FAILED (see $OUT/$name.log)"; tail -20 "$OUT/$name.log"
  fi
}
launch "step05 nccl, env launch" scripts/launch.sh -n 1 "$BUILD_DIR/bin/05_metrics_ckpt" "${short[@]}" \
  --backend nccl --ckpt_dir "$OUT/ck05" --metrics "$OUT/step05_{rank}.jsonl"
launch "step06 nccl, env launch" scripts/launch.sh -n 1 "$BUILD_DIR/bin/06_full" "${short[@]}" \
  --backend nccl --bucket_cap_mb 1 --ckpt_dir "$OUT/ck06" --trace "$OUT/trace06_{rank}.json" \
  --metrics "$OUT/step06_{rank}.jsonl"
if command -v torchrun >/dev/null; then
  launch "step06 nccl, torchrun" torchrun --nproc_per_node 1 --no_python "$BUILD_DIR/bin/06_full" \
    "${short[@]}" --backend nccl --ckpt_dir "$OUT/ck06t" --trace "$OUT/trace06t_{rank}.json"
else
  note "step06 nccl, torchrun" "skipped: no torchrun"
fi
python3 - "$OUT" >> "$OUT/compare.txt" 2>&1 <<'PY'
import json, sys
out = sys.argv[1]
try:
    ev = json.load(open(f"{out}/trace06_0.json"))["traceEvents"]
    spans = [e for e in ev if e["ph"] == "X"]
    ar = [e for e in spans if e["name"].startswith("all-reduce")]
    bw = [e for e in spans if e["name"].startswith("backward")]
    print(f"  step 06 trace: {len(bw)} backward spans, {len(ar)} all-reduce spans; "
          f"median all-reduce {sorted(e['dur'] for e in ar)[len(ar)//2]:.1f} us")
except Exception as e:
    print(f"  step 06 trace unreadable: {e}")
PY

echo
echo "# GPU check summary"
for r in "${results[@]}"; do echo "$r"; done
echo "# step 01: GPU vs CPU loss (same seed, same data order)"
cat "$OUT/compare.txt"
