#!/usr/bin/env bash
# step01_cpu.sh: step 01 on the CPU against the PyTorch reference and the GEMM-only bound, one thread.
#
# Builds step 01 and bench/gemm_bound.c (CMake targets, Release, $BUILD), then runs
# R interleaved repetitions (the order rotates every repetition) of
#   ours   build/bin/01_single_gpu --device cpu --max_steps S --epochs 1 ... on Fashion-MNIST; its
#          --metrics file is a FIFO read by this script, which stamps every "step" line as it arrives:
#          the gap between consecutive lines is one loop iteration (gather .. SGD, loss readback and
#          the metrics write included); the median over steps > W is the step time;
#   torch  bench/torch_mlp.py (same model, data, batch, optimizer; torch.set_num_threads(1));
#   gemm   the 3L-1 GEMMs of one step alone (gemm_bound), median of S-W repetitions,
# and prints the medians over the R repetitions of each run's median, and their ratios.
# Time to first step: from launch (ours: just before the fork, stamped here; torch: the kernel's start
# time of the process) to the end of step 1.
#
# Usage: bench/step01_cpu.sh [-r R] [-s S] [-w W]     (defaults 5, 60, 10)
# Env:   BUILD (default build-bench), PY (python with torch, default /usr/bin/python3)
# Several people share this machine: look at the load line printed first and last.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build-bench}
PY=${PY:-/usr/bin/python3}
R=5 S=60 W=10
while getopts "r:s:w:" o; do
  case $o in r) R=$OPTARG ;; s) S=$OPTARG ;; w) W=$OPTARG ;; *) exit 2 ;; esac
done
[ "$S" -gt $((W + 1)) ] || { echo "need S > W + 1" >&2; exit 2; }

export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1

mkdir -p "$BUILD/bench"
{
  if [ ! -f "$BUILD/build.ninja" ] && [ ! -f "$BUILD/Makefile" ]; then
    cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDDP_BUILD_BENCH=ON
  else
    cmake -S "$ROOT" -B "$BUILD" -DDDP_BUILD_BENCH=ON  # gemm_bound is a benchmark target
  fi
  cmake --build "$BUILD" -j2 --target 01_single_gpu gemm_bound
} >"$BUILD/bench/build.log" 2>&1 || { cat "$BUILD/bench/build.log" >&2; exit 1; }

echo "load before: $(uptime)"
echo "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset (auto-detected)}  $(getconf _NPROCESSORS_ONLN) CPUs"
"$PY" - "$ROOT" "$BUILD" "$PY" "$R" "$S" "$W" <<'PYEOF'
import json, os, select, statistics as st, subprocess, sys, tempfile, time

root, build, py, R, S, W = sys.argv[1], sys.argv[2], sys.argv[3], *map(int, sys.argv[4:7])
B = 128
ours_bin = os.path.join(build, "bin", "01_single_gpu")
tmp = tempfile.mkdtemp(prefix="step01_cpu.")


def run_ours(rep):
    fifo = os.path.join(tmp, f"metrics{rep}.fifo")
    os.mkfifo(fifo)
    cmd = [ours_bin, "--device", "cpu", "--max_steps", str(S), "--epochs", "1", "--save_interval",
           "0", "--log_interval", "1000000", "--batch_size", str(B), "--metrics", fifo]
    t_launch = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # does not wait for the writer
    stamps, epoch, buf, connected = [], None, b"", False
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP)
    while True:
        ev = poller.poll(100)
        if not ev:
            if p.poll() is not None and not connected:
                break
            continue
        chunk = os.read(fd, 65536)
        t = time.monotonic()
        if not chunk:
            if connected:
                break  # the writer closed
            time.sleep(0.001)  # no writer yet
            continue
        connected = True
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for line in lines:
            rec = json.loads(line)
            if rec["type"] == "step":
                stamps.append((rec["step"], t))
            elif rec["type"] == "epoch":
                epoch = rec
    os.close(fd)
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    err = p.stderr.read().decode()
    if p.returncode != 0 or len(stamps) != S:
        sys.exit(f"01_single_gpu failed (rc {p.returncode}, {len(stamps)} steps):\n{err}")
    gaps = [b[1] - a[1] for a, b in zip(stamps, stamps[1:])][W:]  # gap i = step i+2
    return {"step_s": st.median(gaps), "first_step_s": stamps[0][1] - t_launch,
            "rss_mb": ru.ru_maxrss / 1024, "epoch_sps": epoch["samples_per_s"] if epoch else None}


def run_torch(rep):
    out = subprocess.run([py, os.path.join(root, "bench/torch_mlp.py"), "--steps", str(S),
                          "--warmup", str(W), "--threads", "1", "--batch_size", str(B)],
                         check=True, capture_output=True, text=True).stdout
    r = json.loads(out.strip().splitlines()[-1])
    return {"step_s": r["median_step_s"], "first_step_s": r["first_step_s"],
            "rss_mb": r["peak_rss_mb"]}


def run_gemm(rep):
    out = subprocess.run([os.path.join(build, "bin", "gemm_bound"), "--batch", str(B),
                          "--reps", str(S - W), "--warmup", str(W)],
                         check=True, capture_output=True, text=True).stdout
    r = json.loads([line for line in out.splitlines() if line.startswith("{")][-1])  # after the blas: line
    return {"step_s": r["median_step_s"], "gflops": r["gflops"], "sgd_s": r["sgd_median_s"],
            "sgd_gbps": r["sgd_gbps"]}


runs = {"ours": run_ours, "torch": run_torch, "gemm": run_gemm}
names = list(runs)
res = {k: [] for k in names}
for rep in range(R):
    order = names[rep % 3:] + names[:rep % 3]
    for k in order:
        res[k].append(runs[k](rep))
    print(f"rep {rep + 1}/{R}: " + "  ".join(
        f"{k} {res[k][-1]['step_s'] * 1e3:.2f} ms" for k in names), flush=True)


def med(k, f):
    return st.median(r[f] for r in res[k])


def spread(k, f):
    v = [r[f] for r in res[k]]
    return f"{min(v) * 1e3:.2f}-{max(v) * 1e3:.2f}"


# Per-repetition ratios (each from runs done minutes apart at most), then their median.
vs_torch = st.median(t["step_s"] / o["step_s"] for o, t in zip(res["ours"], res["torch"]))
vs_gemm = st.median(g["step_s"] / o["step_s"] for o, g in zip(res["ours"], res["gemm"]))
print(f"\n1 thread, batch {B}, 784-1024-1024-10, {R} interleaved reps x {S} steps "
      f"(median over steps > {W}); medians over reps")
print(f"{'':22s}{'step ms':>9s} {'(min-max ms)':>14s} {'samples/s':>10s} {'1st step s':>11s} {'RSS MB':>8s}")
for k, label in (("ours", "ours (01_single_gpu)"), ("torch", "PyTorch"), ("gemm", "GEMM bound")):
    sm = med(k, "step_s")
    fs = f"{med(k, 'first_step_s'):11.2f}" if "first_step_s" in res[k][0] else f"{'-':>11s}"
    rss = f"{med(k, 'rss_mb'):8.0f}" if "rss_mb" in res[k][0] else f"{'-':>8s}"
    print(f"{label:22s}{sm * 1e3:9.2f} {spread(k, 'step_s'):>14s} {B / sm:10.0f} {fs} {rss}")
print(f"\nGEMM bound: {med('gemm', 'gflops'):.1f} GFLOP/s (1.224 GFLOP per step)")
print(f"ours/PyTorch (samples/s ratio, median of per-rep ratios):       {vs_torch:.3f}")
print(f"ours/GEMM bound (bound time / our step time, median per rep):  {vs_gemm:.3f}")
vs_floor = st.median((g["step_s"] + g["sgd_s"]) / o["step_s"] for o, g in zip(res["ours"], res["gemm"]))
print(f"SGD pass alone (memory floor of a separate optimizer step): {med('gemm', 'sgd_s') * 1e3:.2f} ms "
      f"at {med('gemm', 'sgd_gbps'):.1f} GB/s")
print(f"ours/(GEMM bound + SGD pass), median per rep:                  {vs_floor:.3f}")
print(f"ours, whole-loop samples/s from the metrics epoch line (incl. step 1): "
      f"{med('ours', 'epoch_sps'):.0f}")
PYEOF
echo "load after:  $(uptime)"
