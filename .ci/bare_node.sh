#!/usr/bin/env bash
# CI: the build of an offline CUDA node without root, where OpenBLAS and GoogleTest are not installed:
# both are hidden from CMake (CMAKE_DISABLE_FIND_PACKAGE_BLAS / _GTest) and configure runs with the
# default options (so it tries to download GoogleTest) inside a network namespace with no network
# (`unshare -n`: CI runs as root). Configure must still succeed and say what is missing, the build must
# succeed, and a short CPU training must run through the plain C GEMM and track the OpenBLAS build's
# run of the same configuration (BUILD_DIR, default build, made by scripts/test.sh before this).
# Where no namespace can be made (not root, no unshare), configure runs with the network and
# DDP_FETCH_GTEST=OFF, and one line says the offline check was skipped and why. libdeflate is the one
# library such a node must have (or get from scripts/gpu_deps.sh): configure stops without it, and
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

# The same short training with both GEMMs. The plain GEMM sums in another order than OpenBLAS, so
# the losses differ by fp32 rounding (about 1e-6 at first, growing slowly with training); 1e-3 over
# 30 steps is far above that and far below what a wrong GEMM gives (the loss would not fall).
run=(--device cpu --data synthetic --dataset_size 4096 --epochs 1 --max_steps 30 --batch_size 128
     --save_interval 0 --log_interval 10)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
OPENBLAS_NUM_THREADS=1 "$BUILD_DIR/bin/01_single_gpu" "${run[@]}" --metrics "$tmp/blas.jsonl" > /dev/null
"$BARE/bin/01_single_gpu" "${run[@]}" --metrics "$tmp/plain.jsonl" | tail -2
python3 - "$tmp" <<'PY'
import json, sys
tmp = sys.argv[1]
def losses(name):
    with open(f"{tmp}/{name}.jsonl") as f:
        return [o["loss"] for o in map(json.loads, f) if o["type"] == "step"]
b, p = losses("blas"), losses("plain")
worst = max(abs(x - y) for x, y in zip(b, p))
ok = len(b) == len(p) == 30 and worst < 1e-3 and p[-1] < p[0]
print(f"bare node: 30 steps through the plain C GEMM, loss {p[0]:.4f} -> {p[-1]:.4f}; max |loss diff| "
      f"against OpenBLAS {worst:.2e} (< 1e-3): {'ok' if ok else 'FAILED'}")
sys.exit(0 if ok else 1)
PY
