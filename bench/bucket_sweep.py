#!/usr/bin/env python3
"""Predicts step 06's step time for each bucket cap from a latency-bandwidth model of the all-reduce,
runs step 06 at each cap, and prints the measured and the predicted step time side by side.

    bench/bucket_sweep.py [--np 2] [--device cpu] [--hidden 1024,1024] [--caps 0.001,0.01,...]
                          [--steps 12] [--png docs/img/bucket_sweep_cpu.png]
    bench/bucket_sweep.py --replot SWEEP.txt --png docs/img/bucket_sweep_cpu.png
    bench/bucket_sweep.py --selftest

The model, in the terms of chapter 06:
  1. All-reduce time: T(n) = a + c*n for a bucket of n bytes, a the per-call overhead (latency) and
     c = 1/bandwidth. Fitted by least squares to build/bin/probe's table over 4 KiB .. 8 MiB (the
     sizes buckets take): MPI on the CPU, NCCL on a GPU, the same probe on both.
  2. Backward's per-layer times: the median "backward layer l" span of a --trace of step 06 (the
     run at the largest cap), over its steps and ranks (dev/trace_timeline.py's spans).
  3. The buckets of each cap: PyTorch's rule, as reducer_assign does it (tensors in backward order,
     a bucket closes once it holds >= its limit, the first limit 1 MiB whatever the cap); checked
     against tests/unit/bucket_table.txt (--selftest) and against each run's own trace.
  4. Simulation: bucket j is ready when the backward of its last (lowest) layer ends;
     start_j = max(ready_j, end_{j-1}); end_j = start_j + a + c*b_j; exposed = end_last - backward
     end. No overlap (all ready at the end) gives k*a + c*S; perfect overlap gives a + c*b_last
     (the buckets closed by the first layer, usually one, are all that is left).
  5. Predicted step time(cap) = base + exposed(cap), base = the measured step time of the largest
     cap (one bucket) minus its exposed time: one calibration point, every other cap is predicted.

Measured step time: the median of the metrics file's step-to-step times on rank 0 after the first
three steps. The runs are short (--steps optimizer steps on synthetic data): a few minutes in all on 2
cores. Prints a table and the measured and the predicted best cap; --png draws both curves
(matplotlib), on a y axis from 0, with caps that make the same buckets joined by a band, so that
jumps between caps with the same buckets read as the machine's noise, not as the cap's effect;
--replot draws that figure again from a saved output of the script (its table), running nothing.
--selftest checks the bucket rule against the table and the simulation's two limits on
synthetic inputs, runs nothing, and exits 0 or 1.
"""
import argparse
import glob
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MIB = 1 << 20
FIRST_BUCKET_BYTES = MIB  # PyTorch's _DEFAULT_FIRST_BUCKET_BYTES, reducer.h's REDUCER_FIRST_BUCKET_BYTES
DEFAULT_CAPS = "0.001,0.01,0.1,0.25,0.5,1,2,4,8,25,100"
BUCKET = re.compile(r"all-reduce bucket (\d+): (\d+) floats")
LAYER = re.compile(r"backward layer (\d+)")


def tensors(sizes):
    """(layer, floats) of each parameter tensor in the order backward produces them."""
    out = []
    for l in reversed(range(len(sizes) - 1)):
        out += [(l, sizes[l + 1]), (l, sizes[l + 1] * sizes[l])]  # bias l, then weight l
    return out


def assign(sizes, cap_bytes, first=FIRST_BUCKET_BYTES):
    """Buckets in launch order as (floats, n_tensors, lowest layer): reducer_assign's rule."""
    out, floats, n, limit = [], 0, 0, first
    for layer, f in tensors(sizes):
        floats, n, low = floats + f, n + 1, layer
        if 4 * floats >= limit:  # the tensor joined even if it overshoots; later buckets get the cap
            out.append((floats, n, low))
            floats, n, limit = 0, 0, cap_bytes
    if n:
        out.append((floats, n, low))
    return out


def simulate(layer_ms, buckets, a, c):
    """Exposed all-reduce time (ms) after backward ends. layer_ms[l]: backward time of layer l (run
    from the last layer to the first); buckets: assign()'s; a in ms, c in ms per byte."""
    end_of, t = {}, 0.0
    for l in reversed(range(len(layer_ms))):
        t += layer_ms[l]
        end_of[l] = t
    end = 0.0
    for floats, _, low in buckets:
        end = max(end_of[low], end) + a + c * 4 * floats
    return max(end - t, 0.0)


def fit(points):
    """Least squares T = a + c*n over (n bytes, T ms): returns (a ms, c ms/byte)."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    c = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)
    return my - c * mx, c


def mpirun(np_, args):
    cmd = ["mpirun", "-np", str(np_)] + args
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    return r.stdout


def probe(o):
    return parse_probe(mpirun(o.np, [os.path.join(o.bin, "probe"), "--device", o.device, "--min_bytes",
                                     "4K", "--max_bytes", "8M", "--factor", "2", "--iters", "20"]))


def parse_probe(out):
    """(bytes, ms) of each row of build/bin/probe's table."""
    pts = []
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 4 and f[0].isdigit() and f[2] == "float":
            pts.append((int(f[0]), float(f[3]) / 1000.0))  # bytes, ms
    if len(pts) < 3:
        sys.exit("probe printed no table:\n" + out)
    return pts


def run_step06(o, cap, outdir):
    tag = f"cap{cap:g}"
    metrics = os.path.join(outdir, f"m_{tag}_{{rank}}.jsonl")
    trace = os.path.join(outdir, f"t_{tag}_{{rank}}.json")
    mpirun(o.np, [os.path.join(o.bin, "06_full"), "--device", o.device, "--data", "synthetic",
                  "--dataset_size", str(o.np * o.batch * (o.steps + 1)), "--batch_size", str(o.batch),
                  "--hidden", o.hidden, "--epochs", "1", "--max_steps", str(o.steps), "--log_interval",
                  "1000", "--save_interval", "0", "--ckpt_dir", os.path.join(outdir, "ckpt"),
                  "--bucket_cap_mb", f"{cap:g}", "--metrics", metrics, "--trace", trace])
    times = [json.loads(l)["time"] for l in open(metrics.replace("{rank}", "0"))
             if '"type":"step"' in l]
    dts = [1e3 * (b - a) for a, b in zip(times, times[1:])][3:]
    spans = []
    for f in sorted(glob.glob(trace.replace("{rank}", "*"))):
        spans += [e for e in json.load(open(f))["traceEvents"] if e.get("ph") == "X"]
    return statistics.median(dts), spans


def layer_times(spans, n_layers):
    by = {l: [] for l in range(n_layers)}
    for e in spans:
        m = LAYER.match(e["name"])
        if m and e["args"]["step"] >= 2:
            by[int(m.group(1))].append(e["dur"] / 1000.0)
    return [statistics.median(by[l]) for l in range(n_layers)]


def traced_buckets(spans):
    floats = {}
    for e in spans:
        m = BUCKET.match(e["name"])
        if m:
            floats[int(m.group(1))] = int(m.group(2))
    return [floats[b] for b in sorted(floats)]


def selftest():
    ok = True
    table = os.path.join(ROOT, "tests", "unit", "bucket_table.txt")
    n = 0
    for line in open(table):
        if line.startswith("#") or not line.strip():
            continue
        f = line.split()
        sizes, cap = [int(x) for x in f[0].split(",")], int(f[1])
        want = [tuple(int(x) for x in b.split(":")) for b in f[2:]]
        got = [(fl, nt) for fl, nt, _ in assign(sizes, cap)]
        if got != want:
            print(f"FAIL bucket rule: {f[0]} cap {cap}: {got} != {want}")
            ok = False
        n += 1
    print(f"bucket rule: {n} cases of {os.path.relpath(table, ROOT)} {'agree' if ok else 'DIFFER'}")
    sizes, a, c = [784, 2048, 2048, 2048, 10], 0.05, 1e-6
    for cap in (0.001, 0.1, 1, 4, 100):
        b = assign(sizes, int(cap * MIB))
        S, k = 4 * sum(x[0] for x in b), len(b)
        # The buckets the first layer closes are all ready when backward ends: with one such bucket
        # (the usual case) perfect overlap leaves a + c*b_last; a cap under the first layer's bias
        # (0.001 MiB) gives that layer two buckets, and both show.
        tail = [x for x in b if x[2] == 0]
        tail_a, tail_bytes = len(tail) * a, 4 * sum(x[0] for x in tail)
        none = simulate([0.0] * 4, b, a, c)  # every bucket ready when backward ends: no overlap
        perfect = simulate([1e6] * 4, b, a, c)  # each layer outlasts every all-reduce: only the last shows
        for what, got, want in (("no overlap", none, k * a + c * S), ("perfect overlap", perfect, tail_a + c * tail_bytes)):
            good = abs(got - want) <= 1e-9 * max(1.0, want)
            ok &= good
            print(f"{'ok  ' if good else 'FAIL'} cap {cap:g} MiB, {k} buckets, {what}: {got:.6f} ms, "
                  f"expected {want:.6f} ms")
    pts = [(x, 0.02 + 3e-7 * x) for x in (4096, 65536, MIB, 8 * MIB)]
    fa, fc = fit(pts)
    good = abs(fa - 0.02) < 1e-9 and abs(fc - 3e-7) < 1e-15
    ok &= good
    print(f"{'ok  ' if good else 'FAIL'} fit recovers a = {fa:.6f} ms, c = {fc:.3e} ms/B")
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--np", type=int, default=2, help="ranks (default 2)")
    ap.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    ap.add_argument("--hidden", default="1024,1024", help="step 06's --hidden (default 1024,1024)")
    ap.add_argument("--batch", type=int, default=128, help="--batch_size per rank (default 128)")
    ap.add_argument("--steps", type=int, default=12, help="optimizer steps per run (default 12)")
    ap.add_argument("--caps", default=DEFAULT_CAPS, help=f"caps in MiB (default {DEFAULT_CAPS})")
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"), help="where probe and 06_full are")
    ap.add_argument("--png", help="draw measured and predicted step time against the cap here")
    ap.add_argument("--replot", metavar="SWEEP.txt", help="draw --png from a saved output; run nothing")
    ap.add_argument("--selftest", action="store_true", help="check the bucket rule and the simulation; run nothing")
    o = ap.parse_args()
    if o.selftest:
        return selftest()
    if o.replot:
        if not o.png:
            sys.exit("--replot needs --png")
        return replot(o.replot, o.png)
    sizes = [784] + [int(x) for x in o.hidden.split(",")] + [10]
    caps = sorted(float(x) for x in o.caps.split(","))
    pts = probe(o)
    a, c = fit(pts)
    print(f"all-reduce fit over {len(pts)} sizes ({pts[0][0]} .. {pts[-1][0]} B, {o.np} ranks, "
          f"{o.device}): a = {1e3 * a:.1f} us per call, 1/c = {1e-6 / c:.2f} GB/s")
    with tempfile.TemporaryDirectory() as d:
        runs = {cap: run_step06(o, cap, d) for cap in caps}
    ref = caps[-1]
    layers = layer_times(runs[ref][1], len(sizes) - 1)
    print("backward per layer (ms, median of the run at the largest cap): "
          + ", ".join(f"layer {l} {t:.2f}" for l, t in enumerate(layers)))
    base = runs[ref][0] - simulate(layers, assign(sizes, int(ref * MIB)), a, c)
    print(f"base (step time without exposed communication, from the {ref:g} MiB run): {base:.2f} ms")
    print(f"{'cap MiB':>8} {'buckets':>7} {'measured ms':>12} {'predicted ms':>13} {'exposed ms':>11}")
    rows = []
    for cap in caps:
        b = assign(sizes, int(cap * MIB))
        traced = traced_buckets(runs[cap][1])
        if traced != [x[0] for x in b]:
            sys.exit(f"cap {cap:g}: the run's buckets {traced} are not the rule's {[x[0] for x in b]}")
        exp = simulate(layers, b, a, c)
        rows.append((cap, len(b), runs[cap][0], base + exp, exp))
        print(f"{cap:8g} {len(b):7d} {runs[cap][0]:12.2f} {base + exp:13.2f} {exp:11.2f}")
    best_m = min(rows, key=lambda r: r[2])
    best_p = min(rows, key=lambda r: r[3])
    print(f"best cap: measured {best_m[0]:g} MiB ({best_m[2]:.2f} ms), predicted {best_p[0]:g} MiB "
          f"({best_p[3]:.2f} ms)")
    if o.png:
        plot(rows, o.png, f"step 06, {o.np} ranks, {o.device}, 784,{o.hidden},10")
    return 0


def plot(rows, png, title):
    """rows: (cap MiB, buckets, measured ms, predicted ms, exposed ms). Caps with the same number of
    buckets in a row are one band: between them only the machine's noise changes the measurement."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    groups, start = [], 0
    for i in range(1, len(rows) + 1):
        if i == len(rows) or rows[i][1] != rows[start][1]:
            groups.append(rows[start:i])
            start = i
    for k, g in enumerate(groups):
        lo, hi = g[0][0] / 1.4, g[-1][0] * 1.4
        ax.axvspan(lo, hi, color="0.93" if k % 2 == 0 else "0.85", zorder=0)
        top = max(r[2] for r in rows) * 1.25
        ax.text((lo * hi) ** 0.5, top * 0.95, f"{g[0][1]} buckets at every cap here", ha="center", va="top",
                fontsize=8)
    ax.semilogx([r[0] for r in rows], [r[2] for r in rows], "o", label="measured (one run per cap)")
    ax.semilogx([r[0] for r in rows], [r[3] for r in rows], "s--", label="predicted (a + c·n model)")
    ax.set_ylim(0, max(r[2] for r in rows) * 1.25)
    ax.set_xlabel("bucket cap (MiB)")
    ax.set_ylabel("step time (ms)")
    ax.set_title(title + "\nthe same buckets in each band: the spread inside a band is the shared machine",
                 fontsize=9)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    print(f"wrote {png}")


def replot(path, png):
    """Draws the figure from a saved output of this script (the table and its title line)."""
    rows, title = [], "step 06"
    for line in open(path):
        f = line.split()
        if line.startswith("$ ") and "--hidden" in f:
            title = f"step 06, 2 ranks, cpu, 784,{f[f.index('--hidden') + 1]},10"
        if len(f) == 5:
            try:
                rows.append((float(f[0]), int(f[1]), float(f[2]), float(f[3]), float(f[4])))
            except ValueError:
                pass
    if not rows:
        sys.exit(f"{path}: no table rows (cap, buckets, measured, predicted, exposed)")
    plot(rows, png, title)
    return 0


if __name__ == "__main__":
    sys.exit(main())
