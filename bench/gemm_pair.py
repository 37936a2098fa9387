#!/usr/bin/python3
"""Do two ranks' GEMMs slow each other down on this machine, with no communication at all?

    bench/gemm_pair.py [--build build-perfcpu] [--trials 12] [--reps 40]

Each trial runs gemm_bound (the step's GEMMs alone, one OpenBLAS thread, the course MLP at batch 128)
once on its own, then twice at the same time, as two ranks of a 2-rank job would. Prints every
trial (solo, and the two concurrent copies' median step times) and the medians over trials. If the
copies run as fast as the solo run, the GEMM bound holds per rank at 2 ranks; if they are slower,
that slowdown is a floor of any 2-rank trainer here, ours and PyTorch's alike. Environment as
cpu_ddp.py's (scripts/mpi_env.sh's settings, one thread per rank).
"""
import argparse
import json
import os
import statistics as st
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cpu_ddp  # noqa: E402  (same directory)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", default="build-perfcpu")
    p.add_argument("--trials", type=int, default=12)
    p.add_argument("--reps", type=int, default=40, help="gemm_bound steps per run")
    args = p.parse_args()
    exe = os.path.join(cpu_ddp.ROOT, args.build, "bin", "gemm_bound")
    if not os.access(exe, os.X_OK):
        sys.exit(f"no {exe}: build the gemm_bound target first (configure with -DDDP_BUILD_BENCH=ON)")
    env = cpu_ddp.base_env()
    cmd = [exe, "--reps", str(args.reps), "--warmup", "5"]

    def launch():
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, env=env, text=True)

    def step_ms(proc):
        out, _ = proc.communicate()
        if proc.returncode != 0:
            sys.exit(f"gemm_bound failed with status {proc.returncode}")
        return 1e3 * json.loads(out)["median_step_s"]

    solo, pair = [], []
    print(f"# {cpu_ddp.uptime()}; gemm_bound --reps {args.reps}, course MLP, batch 128, 1 thread")
    print("| trial | solo (ms) | pair: copy 1, copy 2 (ms) | slower copy / solo |")
    print("| --- | --- | --- | --- |")
    for t in range(args.trials):
        s = step_ms(launch())
        a, b = launch(), launch()
        pa, pb = step_ms(a), step_ms(b)
        solo.append(s)
        pair.append(max(pa, pb))
        print(f"| {t + 1} | {s:.1f} | {pa:.1f}, {pb:.1f} | {max(pa, pb) / s:.2f} |", flush=True)
    print(f"\nmedians over {args.trials} trials: solo {st.median(solo):.1f} ms, slower copy of a pair "
          f"{st.median(pair):.1f} ms ({st.median(pair) / st.median(solo):.2f}x); pairs more than 25 % "
          f"slower than their solo run: {sum(p > 1.25 * s for p, s in zip(pair, solo))} of {args.trials}")


if __name__ == "__main__":
    main()
