#!/usr/bin/env python3
"""Step 04 against step 06 on CPU ranks, and the reducer's all-reduce bandwidth against raw MPI.

    bench/reducer_cpu.py [--ranks 2] [--reps 5] [--steps 60] [--build build]

Runs, interleaved and repeated, step 04 (one blocking all-reduce per tensor after backward) and
step 06 (bucketed, overlapped) at the same configuration: 784-1024-1024-10, batch 128 per rank,
Fashion-MNIST, one OpenBLAS thread per rank. The step time of a run is the median interval between
the metrics file's step timestamps after a warm-up; the table reports medians over the repetitions.
A traced step-06 run gives each bucket's all-reduce time, and build/bin/allreduce_bench measures a
raw MPI_Allreduce of the same byte count in the same session, with MPI's buffers hot (a loop of
all-reduces) and cold (--cold: the caches flushed before each call, as backward does in a step). Prints Markdown tables.

--variants runs every configuration under each of several environments, e.g.
    --variants "default;sc=none:OMPI_MCA_btl_vader_single_copy_mechanism=none;thp:GLIBC_TUNABLES=glibc.malloc.hugetlb=1"
(label:KEY=VAL,KEY=VAL, separated by ';'); --extra LABEL=PATH adds another step-06 binary (e.g. a
prototype built elsewhere) at the first cap. --no-bandwidth skips the traced run.

The trace covers a run's first TRACE_STEPS (20) steps, where MPI's buffers are still warming
up. For steady-state bucket times, build step 06 with a longer trace and pass it with --traced_bin:
    cmake -S . -B build-trace -G Ninja -DCMAKE_BUILD_TYPE=Release -DDDP_ENABLE_CUDA=OFF \
          -DCMAKE_C_FLAGS=-DTRACE_STEPS=1000 && cmake --build build-trace --target 06_full
    bench/reducer_cpu.py ... --traced_bin build-trace/bin/06_full --traced_steps 200
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpu_ddp import base_env  # noqa: E402  (the benchmarks' one MPI environment)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def mpi_env(extra=None):
    env = base_env()
    env.update(extra or {})
    return env


def run(cmd, extra_env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, env=mpi_env(extra_env), cwd=ROOT)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{p.stdout}\n{p.stderr}")
    return p.stdout


def step_time(metrics_path, warmup=10):
    times = [o["time"] for o in map(json.loads, open(metrics_path)) if o["type"] == "step"]
    gaps = [b - a for a, b in zip(times[warmup:], times[warmup + 1:])]
    return statistics.median(gaps)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--build", default="build")
    ap.add_argument("--caps", default="25,1", help="bucket caps (MiB) for step 06")
    ap.add_argument("--variants", default="default", help="label:K=V,K=V;label2:... (see above)")
    ap.add_argument("--extra", action="append", default=[], help="LABEL=PATH of another 06_full")
    ap.add_argument("--extra_env", action="append", default=[],
                    help="LABEL=K=V,K=V: another step-06 configuration (first cap) with this environment")
    ap.add_argument("--no-bandwidth", dest="bandwidth", action="store_false")
    ap.add_argument("--traced_bin", help="06_full for the traced run (default: the build's)")
    ap.add_argument("--traced_steps", type=int, default=20,
                    help="steps of the traced run (its first 5 are not counted)")
    a = ap.parse_args()
    b = os.path.join(ROOT, a.build, "bin")
    tmp = tempfile.mkdtemp(prefix="reducer-bench-")
    common = ["--device", "cpu", "--batch_size", "128", "--epochs", "1", "--max_steps", str(a.steps),
              "--save_interval", "0", "--log_interval", "1000000"]
    mpirun = ["mpirun", "-np", str(a.ranks)]
    caps = a.caps.split(",")
    base_configs = [("step 04 (per-tensor, after backward)", f"{b}/04_ddp_wrap", [], {})]
    base_configs += [(f"step 06 (buckets of {c} MiB, overlapped)", f"{b}/06_full", ["--bucket_cap_mb", c], {})
                     for c in caps]
    for e in a.extra:
        label, path = e.split("=", 1)
        base_configs.append((f"{label} (buckets of {caps[0]} MiB)", path, ["--bucket_cap_mb", caps[0]], {}))
    for e in a.extra_env:
        label, kvs = e.split("=", 1)
        env = dict(kv.split("=", 1) for kv in kvs.split(","))
        base_configs.append((f"step 06, {label} (buckets of {caps[0]} MiB)", f"{b}/06_full",
                             ["--bucket_cap_mb", caps[0]], env))
    variants = []
    for v in a.variants.split(";"):
        label, _, kvs = v.partition(":")
        variants.append((label, dict(kv.split("=", 1) for kv in kvs.split(",") if kv)))
    configs = [(vl, name, exe, extra, {**venv, **cenv})
               for vl, venv in variants for name, exe, extra, cenv in base_configs]
    times = {(c[0], c[1]): [] for c in configs}
    for rep in range(a.reps):
        k = rep % len(configs)  # rotate the order every repetition
        for i, (vl, name, exe, extra, env) in enumerate(configs[k:] + configs[:k]):
            m = f"{tmp}/m_{rep}_{i}_{{rank}}.jsonl"
            run(mpirun + [exe] + common + extra + ["--metrics", m], env)
            times[(vl, name)].append(step_time(m.replace("{rank}", "0")))
    print(f"## Step time, {a.ranks} CPU ranks, 784-1024-1024-10, batch 128 per rank "
          f"(median of {a.reps} interleaved runs, each the median step after 10 warm-up steps)\n")
    print("| environment | configuration | step time (ms) | min-max (ms) | samples/s (global) | vs step 04 (same env) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for vl, venv in variants:
        base = statistics.median(times[(vl, base_configs[0][0])])
        for name, _, _, _ in base_configs:
            ts = times[(vl, name)]
            t = statistics.median(ts)
            print(f"| {vl} | {name} | {1e3 * t:.1f} | {1e3 * min(ts):.1f}-{1e3 * max(ts):.1f} | "
                  f"{128 * a.ranks / t:.0f} | {base / t:.2f}x |")
    if not a.bandwidth:
        return

    # Bandwidth: traced step-06 run (default cap) vs raw MPI_Allreduce of the same bytes.
    cap = a.caps.split(",")[0]
    trace = f"{tmp}/trace_{{rank}}.json"
    traced = a.traced_bin or f"{b}/06_full"
    run(mpirun + [traced] + common + ["--bucket_cap_mb", cap, "--trace", trace,
                                      "--max_steps", str(a.traced_steps)])
    # (bucket, bytes) -> step -> [(start, end) per rank]; the ranks' traces share a time zero (a
    # barrier at reducer_init), so the last rank's start is when the all-reduce can really begin.
    spans = {}
    for r in range(a.ranks):
        for e in json.load(open(trace.replace("{rank}", str(r))))["traceEvents"]:
            m = re.match(r"all-reduce bucket (\d+): (\d+) floats", e.get("name", ""))
            if e["ph"] == "X" and m and e["args"]["step"] >= 5:
                key = (int(m.group(1)), 4 * int(m.group(2)))
                spans.setdefault(key, {}).setdefault(e["args"]["step"], []).append(
                    (e["ts"] * 1e-6, (e["ts"] + e["dur"]) * 1e-6))
    if not spans:
        sys.exit("reducer_cpu.py: the traced run recorded no all-reduce after step 4")
    per_bucket, from_last = {}, {}
    for key, steps in spans.items():
        per_bucket[key] = [ends[0][1] - ends[0][0] for ends in steps.values()]  # rank 0's own span
        from_last[key] = [max(e for _, e in v) - max(b for b, _ in v) for v in steps.values()
                          if len(v) == a.ranks] or [float("nan")]
    last_traced = max(s for steps in spans.values() for s in steps)
    sizes = [str(k[1]) for k in sorted(per_bucket)]
    raw_time = {}
    for flags in ([], ["--cold"]):  # MPI's buffers hot (a loop of all-reduces) and cold (as in a step)
        out = run(mpirun + [f"{b}/allreduce_bench", "--iters", "20"] + flags + sizes)
        for line in out.splitlines():
            if line.strip() and not line.startswith("#"):
                raw_time[(int(line.split()[0]), bool(flags))] = float(line.split()[2]) * 1e-6
    n = a.ranks
    print(f"\n## All-reduce bandwidth: step 06's buckets (cap {cap} MiB, traced steps 5-"
          f"{last_traced}) vs raw "
          "MPI_Allreduce of the same bytes\n")
    print("| bucket | bytes | rank 0's span (ms) | from the last rank's start (ms) | its busbw (GB/s) "
          "| raw, hot (ms) | raw, cold (ms) | raw busbw, cold (GB/s) | raw / reducer (hot, cold) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for (i, nbytes), ts in sorted(per_bucket.items()):
        t, tl = statistics.median(ts), statistics.median(from_last[(i, nbytes)])
        bus = lambda dt: nbytes / dt / 1e9 * 2 * (n - 1) / n
        hot, cold = raw_time[(nbytes, False)], raw_time[(nbytes, True)]
        print(f"| {i} | {nbytes} | {1e3 * t:.2f} | {1e3 * tl:.2f} | {bus(tl):.2f} | {1e3 * hot:.2f} | "
              f"{1e3 * cold:.2f} | {bus(cold):.2f} | {hot / tl:.2f}, {cold / tl:.2f} |")
    print("\nRank 0's span runs from its MPI_Iallreduce to the moment it sees the bucket complete "
          "(MPI_Test during backward, MPI_Wait after it): it includes waiting for the other ranks to "
          "start the same bucket, and computation that overlaps it. The span from the last rank's "
          "start to the last rank's completion leaves the waiting out; for the last bucket (launched "
          "after backward, nothing to overlap) it is the transfer.")


if __name__ == "__main__":
    main()
