#!/usr/bin/env python3
"""Raw MPI all-reduce time under different settings: blocking vs nonblocking, and the environment
variables that matter on this VM (docs/performance.md), measured interleaved and repeated.

    bench/allreduce_env.py [--ranks 2] [--reps 3] [--iters 20] [--build build]
                                   [--sizes 1048576,4194304,7452712,33554432]

Runs build/bin/allreduce_bench (with and without --nonblocking) under each setting:
  default      scripts/mpi_env.sh only (btl self,vader), without its libnbc choice (see nbc=ring)
  sc=none      OMPI_MCA_btl_vader_single_copy_mechanism=none (no CMA; copy-in/copy-out through the
               shared-memory segment)
  mmap_max=0   MALLOC_MMAP_MAX_=0 (glibc never serves malloc from fresh mmap pages, so MPI's
               temporary buffers are not faulted in again on every call)
  both         the two together (MALLOC_MMAP_MAX_ alone fixes glibc's trim threshold at 128 KiB, so the
               heap top is given back, and faulted in again, after every large free)
  notrim       MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=4 GiB (nothing goes back to the kernel)
  sc=none+notrim  both of those
  thp          GLIBC_TUNABLES=glibc.malloc.hugetlb=1 (malloc asks for transparent huge pages)
  nbc=ring, nbc=recdbl, sc=none+nbc=recdbl  OMPI_MCA_coll_libnbc_iallreduce_algorithm=1 / 4 (the
               nonblocking all-reduce's algorithm; libnbc chooses by size otherwise)
The configurations rotate every repetition; each cell is the median over repetitions of
allreduce_bench's median time (the slowest rank's, per iteration). 7452712 B is the whole gradient of
784-1024-1024-10. Prints a Markdown table of times (ms) and busbw (GB/s).
"""
import argparse
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cpu_ddp  # noqa: E402  (the benchmarks' one MPI environment)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SETTINGS = {
    "default": {},
    "sc=none": {"OMPI_MCA_btl_vader_single_copy_mechanism": "none"},
    "mmap_max=0": {"MALLOC_MMAP_MAX_": "0"},
    "both": {"OMPI_MCA_btl_vader_single_copy_mechanism": "none", "MALLOC_MMAP_MAX_": "0"},
    "notrim": {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": "4294967296"},
    "sc=none+notrim": {"OMPI_MCA_btl_vader_single_copy_mechanism": "none", "MALLOC_MMAP_MAX_": "0",
                       "MALLOC_TRIM_THRESHOLD_": "4294967296"},
    "thp": {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"},
    "nbc=ring": {"OMPI_MCA_coll_libnbc_iallreduce_algorithm": "1"},
    "nbc=recdbl": {"OMPI_MCA_coll_libnbc_iallreduce_algorithm": "4"},
    "sc=none+nbc=recdbl": {"OMPI_MCA_btl_vader_single_copy_mechanism": "none",
                           "OMPI_MCA_coll_libnbc_iallreduce_algorithm": "4"},
}


def base_env():
    env = cpu_ddp.base_env()
    for k in {k for v in SETTINGS.values() for k in v}:  # each setting is chosen here, not inherited
        env.pop(k, None)
    return env


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--build", default="build")
    ap.add_argument("--sizes", default="1048576,4194304,7452712,33554432")
    ap.add_argument("--settings", default="default,sc=none,mmap_max=0,notrim,sc=none+notrim",
                    help="comma-separated, from: " + ", ".join(SETTINGS))
    a = ap.parse_args()
    exe = os.path.join(ROOT, a.build, "bin", "allreduce_bench")
    sizes = [int(s) for s in a.sizes.split(",")]
    configs = [(s, nb) for s in a.settings.split(",") for nb in (False, True)]
    res = {c: {n: [] for n in sizes} for c in configs}
    for rep in range(a.reps):
        k = rep % len(configs)
        for setting, nb in configs[k:] + configs[:k]:
            env = base_env()
            env.update(SETTINGS[setting])
            cmd = ["mpirun", "-np", str(a.ranks), exe, "--iters", str(a.iters)]
            cmd += ["--nonblocking"] if nb else []
            out = subprocess.run(cmd + [str(n) for n in sizes], env=env, capture_output=True,
                                 text=True, check=True).stdout
            for line in out.splitlines():
                if line.strip() and not line.startswith("#"):
                    f = line.split()
                    if int(f[5]) != 0:
                        raise SystemExit(f"wrong results: {line}")
                    res[(setting, nb)][int(f[0])].append(float(f[2]) * 1e-6)
    n = a.ranks
    print(f"## Raw all-reduce, {n} ranks, median of {a.reps} interleaved runs x {a.iters} iterations: "
          "time in ms (busbw GB/s)\n")
    print("| setting | call | " + " | ".join(f"{s / 2**20:.2f} MiB" for s in sizes) + " |")
    print("| --- | --- | " + " | ".join("---" for _ in sizes) + " |")
    for setting, nb in configs:
        cells = []
        for s in sizes:
            t = statistics.median(res[(setting, nb)][s])
            cells.append(f"{t * 1e3:.2f} ({s / t / 1e9 * 2 * (n - 1) / n:.2f})")
        call = "MPI_Iallreduce+Wait" if nb else "MPI_Allreduce"
        print(f"| {setting} | {call} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
