#!/usr/bin/env python3
"""The CPU GEMM's candidates side by side on the course's shapes (issue 41): GFLOP/s and correctness.

    python3 bench/blas_candidates.py [--bin build-bench/bin/blas_bench] [--batches 32,128,256]
                                     [--threads 1,2] [--runs 3] [--reps 20]

Each candidate runs in a process of its own (bench/blas_bench.c: one library, dlopen'ed): OpenBLAS as
Debian's picks its kernel; the same OpenBLAS with kernels forced by hand (OPENBLAS_CORETYPE, for
reference only: what this CPU can do); OpenBLAS from PyPI (scipy-openblas32, a DYNAMIC_ARCH build of a
current OpenBLAS; its symbols carry the prefix `scipy_`); BLIS from Debian (libblis-dev); the
project's plain C GEMM. A candidate that is not installed is listed as such. Each cell is the median
of --runs processes (each the median of --reps steps of the default model's GEMMs, 784-1024-1024-10);
the table says whether every element of each shape was within the float32 GEMM error bound of a
float64 reference, and each candidate's best cell as a share of the fastest correct candidate's.
Build blas_bench with -DDDP_BUILD_BENCH=ON (bench/CMakeLists.txt).
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys

DEBIAN = "/usr/lib/x86_64-linux-gnu"


def scipy_openblas():
    """The PyPI OpenBLAS's library, or None when it is not installed."""
    try:
        import scipy_openblas32
    except ImportError:
        return None
    return os.path.join(scipy_openblas32.get_lib_dir(), scipy_openblas32.get_library(fullname=True))


def candidates():
    """(label, --lib, --prefix, extra environment, forced by hand)"""
    out = [("OpenBLAS (Debian), as it picks itself", f"{DEBIAN}/libopenblas.so.0", "", {}, False)]
    for k in ("Haswell", "SkylakeX", "Cooperlake", "SapphireRapids"):
        out.append((f"OpenBLAS (Debian), OPENBLAS_CORETYPE={k}", f"{DEBIAN}/libopenblas.so.0", "",
                    {"OPENBLAS_CORETYPE": k}, True))
    out.append(("OpenBLAS (PyPI scipy-openblas32), as it picks itself", scipy_openblas(), "scipy_", {}, False))
    out.append(("BLIS (Debian libblis-dev), as it picks itself", f"{DEBIAN}/libblis.so.4", "", {}, False))
    out.append(("plain C GEMM (ops_gemm_plain_cpu)", "plain", "", {}, False))
    return out


def run(binary, lib, prefix, env, batch, threads, reps):
    e = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE",)}
    e.update(env)
    e.update({"OPENBLAS_NUM_THREADS": str(threads), "BLIS_NUM_THREADS": str(threads), "OMP_NUM_THREADS": str(threads)})
    cmd = [binary, "--lib", lib, "--batch", str(batch), "--reps", str(reps)] + (["--prefix", prefix] if prefix else [])
    p = subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {p.stderr.strip()}")
    return json.loads(p.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default="build-bench/bin/blas_bench")
    ap.add_argument("--batches", default="32,128,256")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--reps", type=int, default=20)
    a = ap.parse_args()
    batches = [int(b) for b in a.batches.split(",")]
    threads = [int(t) for t in a.threads.split(",")]
    cells = [(b, t) for t in threads for b in batches]
    with open("/proc/cpuinfo") as f:
        model = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), platform.processor())
    print(f"CPU: {model}; {os.cpu_count()} cores; GFLOP/s of one training step's GEMMs (784-1024-1024-10), "
          f"median of {a.runs} processes x {a.reps} steps\n")
    print("| candidate | library, kernel | " + " | ".join(f"B={b}, {t}T" for b, t in cells) + " | correct |")
    print("| --- | --- | " + " | ".join("---:" for _ in cells) + " | --- |")
    rows = []
    for label, lib, prefix, env, forced in candidates():
        if lib is None or (lib != "plain" and not os.path.exists(lib)):
            print(f"| {label} | not installed | " + " | ".join("" for _ in cells) + " | |")
            continue
        gf, correct, what = [], True, ""
        for b, t in cells:
            runs = [run(a.bin, lib, prefix, env, b, t, a.reps if lib != "plain" else 3)
                    for _ in range(a.runs if lib != "plain" else 1)]
            gf.append(statistics.median(r["gflops"] for r in runs))
            correct &= all(r["correct"] for r in runs)
            what = f"{runs[0]['library'].split(' NO_')[0].split(' DYNAMIC')[0]}, {runs[0]['kernel']}"
        rows.append((label, forced, gf, correct))
        print(f"| {label} | {what} | " + " | ".join(f"{g:.0f}" for g in gf) + f" | {'yes' if correct else 'NO'} |",
              flush=True)
    best = [max(r[2][i] for r in rows if r[3]) for i in range(len(cells))]
    print("\nEach candidate against the fastest correct one, cell by cell (the lowest share):")
    for label, forced, gf, correct in rows:
        share = min(g / m for g, m in zip(gf, best))
        print(f"  {label}: {100 * share:.0f} %{' (forced by hand)' if forced else ''}{'' if correct else ' WRONG RESULTS'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
