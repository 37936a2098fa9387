#!/usr/bin/env bash
# CI: the build of an offline CUDA node without root, where OpenBLAS and GoogleTest are not installed:
# both are hidden from CMake (CMAKE_DISABLE_FIND_PACKAGE_BLAS / _GTest) and configure runs with the
# default options (so it tries to download GoogleTest) inside a network namespace with no network
# (`unshare -n`: CI runs as root). Configure must still succeed and say what is missing, the build must
# succeed, and a short CPU training must run through the plain C GEMM and track the OpenBLAS build's
# run of the same configuration (BUILD_DIR, default build, made by scripts/test.sh before this).
# Where no namespace can be made (not root, no unshare), configure runs with the network and
# DDP_FETCH_GTEST=OFF, and one line says the offline check was skipped and why. libdeflate is the one
# library such a node must have (or get from scripts/gpu/gpu_deps.sh): configure stops without it, and
# nothing links zlib any more.
#
# The CUDA path is compiled too when nvcc is there (as on a CUDA node; BARE_CUDA=OFF leaves it out):
# measured on the 2-core build VM, this whole script took 38 s with it and 27 s without, so it does
# not double CI's time. Offline, the GoogleTest download fails at once (no name resolution; the
# offline configure took 1.9 s in all): with CUDA and a warm ccache (CMAKE_*_COMPILER_LAUNCHER=ccache
# in the environment) the whole script took 26 s on the idle VM and 42 s with its 2 cores shared
# (load 4.7).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
BARE=${BARE_DIR:-build-bare}
rm -rf "$BARE" && mkdir -p "$BARE"
cfg=(cmake -S . -B "$BARE" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDDP_ENABLE_CUDA="${BARE_CUDA:-ON}"
     -DCMAKE_DISABLE_FIND_PACKAGE_BLAS=ON -DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON)
if why=$(unshare -n true 2>&1); then
  offline=1
  # with the loopback up, as on a real offline node (without any interface, Open MPI's mpicc adds a
  # warning to its output and FindMPI then misreads it)
  unshare -n sh -c 'ip link set lo up 2> /dev/null; exec "$@"' offline "${cfg[@]}" \
    > "$BARE/configure.log" 2>&1 || { cat "$BARE/configure.log"; exit 1; }
else
  offline=0
  echo "bare node: offline configure check SKIPPED: cannot make a network namespace (unshare -n: ${why:-failed})"
  "${cfg[@]}" -DDDP_FETCH_GTEST=OFF > "$BARE/configure.log" 2>&1 || { cat "$BARE/configure.log"; exit 1; }
fi
grep -E '\[(✓|✗)\]|no OpenBLAS|libdeflate' "$BARE/configure.log"
grep -q '\[✗\] OpenBLAS' "$BARE/configure.log" || { echo "bare node: OpenBLAS was not hidden"; exit 1; }
grep -q '\[✗\] GoogleTest' "$BARE/configure.log" || { echo "bare node: GoogleTest was not hidden"; exit 1; }
if [ $offline -eq 1 ]; then
  grep -q '\[✗\] GoogleTest: .*download failed' "$BARE/configure.log" ||
    { echo "bare node: configure did not try (and fail) to download GoogleTest offline"; exit 1; }
  echo "bare node: configured offline (unshare -n) with the default options"
fi
cmake --build "$BARE" -j "$(nproc)"
if ldd "$BARE/bin/01_single_gpu" | grep -q openblas; then
  echo "bare node: 01_single_gpu still links OpenBLAS"; exit 1
fi
if readelf -d "$BARE/bin/01_single_gpu" | grep -q 'NEEDED.*\[libz\.so'; then
  echo "bare node: 01_single_gpu links zlib, which the build no longer needs"; exit 1
fi

# The plain GEMM against OpenBLAS: they sum in other orders, so their values differ by fp32 rounding,
# more with every step; by the tests' rule they are compared one step from the same state, within the
# float32 error model (tests/harness/parity.py, through scripts/gpu/gpu_compare.py one_step): OpenBLAS's
# build saves its initial state and takes one step; the bare build resumes that state and takes the
# same step. n counts every sum on the way (the batch's 128 samples and the layers' 784, 1024 and
# 1024 inputs). Then 30 steps of the bare build alone must lower the loss (a sanity check of one run).
run=(--device cpu --data synthetic --dataset_size 4096 --epochs 1 --batch_size 128 --log_interval 10)
one=(--lr 0.05 --momentum 0.9 --max_steps 1 --save_interval 1000)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
OPENBLAS_NUM_THREADS=1 "$BUILD_DIR/bin/01_single_gpu" "${run[@]}" "${one[@]}" --save_init "$tmp/init" \
  --ckpt_dir "$tmp/blas" --metrics "$tmp/blas.jsonl" > /dev/null
"$BARE/bin/01_single_gpu" "${run[@]}" "${one[@]}" --resume "$tmp/init/checkpoint.bin" --ckpt_dir "$tmp/plain" \
  --metrics "$tmp/plain.jsonl" > /dev/null
verdict=$(PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" python3 scripts/gpu/gpu_compare.py one_step "$tmp/init/checkpoint.bin" \
  "$tmp/blas/checkpoint.bin" "$tmp/blas.jsonl" "$tmp/plain/checkpoint.bin" "$tmp/plain.jsonl" 0.05 0.9 2960)
echo "bare node: one step of the plain C GEMM from OpenBLAS's state: $verdict"
[[ $verdict == ok* ]] || exit 1
"$BARE/bin/01_single_gpu" "${run[@]}" --max_steps 30 --save_interval 0 --metrics "$tmp/learn.jsonl" | tail -2
python3 - "$tmp" <<'PY'
import json, sys
with open(f"{sys.argv[1]}/learn.jsonl") as f:
    p = [o["loss"] for o in map(json.loads, f) if o["type"] == "step"]
ok = len(p) == 30 and p[-1] < p[0]
print(f"bare node: 30 steps through the plain C GEMM, loss {p[0]:.4f} -> {p[-1]:.4f}: {'ok' if ok else 'FAILED'}")
sys.exit(0 if ok else 1)
PY
