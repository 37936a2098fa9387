#!/usr/bin/python3
"""Step 07 (ZeRO stage 1) against step 06 on the CPU: step time and memory per rank.

    bench/zero_cpu.py [--build build] [--ranks 2,4] [--reps 3] [--steps 60] [--warmup 10]
                      [--hidden 1024,1024] [--data fashion-mnist] [--dataset_size 0]

Both programs run with the same flags (batch 128 per rank, --bucket_cap_mb 25, Fashion-MNIST by
default, one BLAS thread per rank: scripts/mpi_env.sh's settings), --reps times each, interleaved.

Per run:
  step time        the median gap between rank 0's consecutive metrics "time" stamps after --warmup
                   steps (one whole loop iteration)
  peak RSS         every rank's peak resident memory, from its metrics "final" record (getrusage)
  momentum         the optimizer state per rank: step 07 prints it ("optimizer state: N floats per
                   rank"); step 06 holds the whole buffer, n floats (its "model:" line)
The table gives medians over repetitions, and the largest peak RSS over ranks.
"""
import argparse
import json
import os
import re
import statistics as st
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(build, step, np, a, tmp):
    """One run: returns (step time ms, [peak RSS KiB per rank], momentum floats per rank)."""
    cmd = ["mpirun", "-np", str(np), os.path.join(build, "bin", step), "--device", "cpu", "--data", a.data,
           "--hidden", a.hidden, "--batch_size", "128", "--bucket_cap_mb", "25", "--epochs", "1",
           "--max_steps", str(a.steps), "--save_interval", "0", "--log_interval", "1000000",
           "--metrics", f"{tmp}/m{{rank}}.jsonl"]
    if a.dataset_size:
        cmd += ["--dataset_size", str(a.dataset_size)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    times, peaks = [], []
    for r in range(np):
        with open(f"{tmp}/m{r}.jsonl") as f:
            for line in f:
                o = json.loads(line)
                if r == 0 and o["type"] == "step":
                    times.append(o["time"])
                if o["type"] == "final":
                    peaks.append(o["peak_rss_kib"])
    gaps = [b - a_ for a_, b in zip(times, times[1:])][a.warmup:]
    n = int(re.search(r"model: \d+ layers, (\d+) parameters", out).group(1))
    m = re.search(r"optimizer state: (\d+) floats per rank", out)
    return 1000 * st.median(gaps), peaks, int(m.group(1)) if m else n


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--hidden", default="1024,1024")
    ap.add_argument("--data", default="fashion-mnist")
    ap.add_argument("--dataset_size", type=int, default=0)
    a = ap.parse_args()
    print("load:", open("/proc/loadavg").read().split()[:3], file=sys.stderr)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(a.reps):
            for np in [int(x) for x in a.ranks.split(",")]:
                steps = ["06_full", "07_zero"] if rep % 2 == 0 else ["07_zero", "06_full"]
                for step in steps:
                    results.setdefault((np, step), []).append(run(a.build, step, np, a, tmp))
    print("load:", open("/proc/loadavg").read().split()[:3], file=sys.stderr)
    print(f"--hidden {a.hidden}, --data {a.data}, batch 128 per rank, {a.steps} steps, {a.reps} runs each")
    print("| ranks | program | step (ms): median (min–max) | momentum per rank (floats) | peak RSS per rank (MB) |")
    print("| --- | --- | --- | --- | --- |")
    for (np, step), runs in sorted(results.items()):
        ms = [r[0] for r in runs]
        peak = st.median(max(r[1]) for r in runs) / 1024
        print(f"| {np} | {step} | {st.median(ms):.1f} ({min(ms):.1f}–{max(ms):.1f}) | {runs[0][2]:,} | {peak:.1f} |")


if __name__ == "__main__":
    main()
