#!/usr/bin/python3
"""Where the time from launch to the first training step goes, on the CPU at 2 ranks.

    bench/launch_cpu.py [--build build-perf] [--reps 5] [--ranks 2] [--also BUILD ...]

Each repetition runs, interleaved:
  launcher        mpirun -np W /bin/true                      (mpirun starts and reaps W processes)
  + MPI_Init      mpirun -np W allreduce_bench --iters 1 4    (adds MPI_Init, one tiny all-reduce,
                                                               MPI_Finalize)
  + MPI_Init, cm  the same with OMPI_MCA_pml unset            (Open MPI probes for network hardware:
                                                               what scripts/mpi_env.sh's pml=ob1 avoids)
  step 06         launch -> end of step 1 of 06_full on Fashion-MNIST, as cpu_ddp.py measures it
  step 06 (BUILD) the same with the 06_full of each --also build (another commit's, built alike):
                  a before/after comparison in the same rotation, under the same load
and prints the medians (wall seconds, from just before the launcher starts). The remainder of step 06
after "+ MPI_Init" is loading the data, building the model and the first step (whose in-process time
cpu_ddp.py also reports). Environment as cpu_ddp.py's (scripts/mpi_env.sh's settings).
"""
import argparse
import os
import statistics as st
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cpu_ddp  # noqa: E402  (same directory)


def timed(cmd, env):
    t0 = time.monotonic()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return time.monotonic() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--also", action="append", default=[], metavar="BUILD",
                    help="another build folder whose step 06 is timed in the same rotation")
    a = ap.parse_args()
    w = a.ranks
    env = cpu_ddp.base_env()
    env_cm = {k: v for k, v in env.items() if k != "OMPI_MCA_pml"}
    bench = os.path.join(cpu_ddp.ROOT, a.build, "bin", "allreduce_bench")
    mpirun = ["mpirun", "-np", str(w)]
    runs = {
        "launcher (mpirun /bin/true)": lambda: timed(mpirun + ["/bin/true"], env),
        "+ MPI_Init (pml ob1)": lambda: timed(mpirun + [bench, "--iters", "1", "4"], env),
        "+ MPI_Init (pml unset)": lambda: timed(mpirun + [bench, "--iters", "1", "4"], env_cm),
    }
    tmp = tempfile.mkdtemp(prefix="launch_cpu.")
    step_args = argparse.Namespace(build=a.build, steps=2, warmup=0, bucket_cap_mb="25")
    runs["step 06 to end of step 1"] = lambda: cpu_ddp.run_ours(
        step_args, tmp, w, f"s{time.monotonic_ns()}")["first_step_s"]
    for other in a.also:
        other_args = argparse.Namespace(**dict(vars(step_args), build=other))
        runs[f"step 06 ({other})"] = lambda o=other_args: cpu_ddp.run_ours(
            o, tmp, w, f"s{time.monotonic_ns()}")["first_step_s"]
    res = {k: [] for k in runs}
    print(f"load before: {cpu_ddp.uptime()}", flush=True)
    names = list(runs)
    for rep in range(a.reps):
        for k in names[rep % len(names):] + names[:rep % len(names)]:
            res[k].append(runs[k]())
    print(f"load after:  {cpu_ddp.uptime()}\n")
    print(f"{w} ranks, {a.reps} interleaved repetitions, wall seconds from launch: median (min-max)")
    for k in names:
        v = res[k]
        print(f"  {k:30s} {st.median(v):6.3f}  ({min(v):.3f}-{max(v):.3f})  runs: "
              + " ".join(f"{x:.3f}" for x in v))


if __name__ == "__main__":
    main()
