#!/usr/bin/env python3
"""Golden runs: the expected per-step losses and final digests of every step, to diff a run against.

tests/golden/<step>_np<W>.jsonl holds, for one step at W ranks on small synthetic data (the flags are
in the file's first line), every rank's per-step loss, each epoch's train loss and test accuracy, and
its final param_digest. They were written by `dev/golden.py generate` on the 2-core build VM
(OpenBLAS 0.3.34.481.3 from PyPI, the build's default BLAS, which picks its SkylakeX kernel there by
itself, and OPENBLAS_NUM_THREADS=1 as scripts/mpi_env.sh sets it: the BLAS the docs' outputs were made
with; each file's header names it).

How a run is compared (the project's rule for comparing runs: bit equality where the arithmetic is
the same, structure where it is not, never a value at the end of a trajectory under a guessed
tolerance):
- where the run's BLAS (its start-up line `blas: LIBRARY VERSION, kernel K, N thread`) is the one that
  wrote the files (their header's "kernel"), the arithmetic is the same: every loss, train loss, test
  accuracy and param_digest must be equal to the file's (the metrics print float32 values with 9
  significant digits, which is exact);
- on any other kernel the GEMMs add in another order and the values differ in their last bits, more
  with every step, so only structure is compared with the file: the same records (every rank's
  steps, epochs and final record), the same step counts, and the same ranks with equal digests (all
  equal from step 04 on, all different in step 03). `run --program PATH` then also runs this build's
  own program beside PATH, on this machine, and requires PATH's values to equal it bit for bit.
A golden file is one seed's run: the comparisons of two runs that must hold for every seed are the
integration tests' (label `parity`), not these.

  dev/golden.py run STEP W [--program PATH]   run build/bin/STEP (or PATH, e.g. your own build)
                                              at W ranks with the golden flags, then compare
  dev/golden.py compare GOLDEN 'RUN_{rank}.jsonl' [--structure]   compare metrics files you
                                              already have (written with the golden flags and
                                              --metrics; on the files' kernel, else --structure)
  dev/golden.py check                         `run` every golden file with build/bin (a CTest)
  dev/golden.py generate [STEP...]            rewrite tests/golden/ from build/bin

Exit status: 0 the run matches, 1 it differs (the first differing step is named), 2 usage/run error.
"""
import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
GOLDEN_DIR = ROOT / "tests" / "golden"
BIN = pathlib.Path(os.environ.get("DDP_BIN_DIR", ROOT / "build" / "bin"))  # as the tests' harness (tests/harness/env.py)
FLAGS = ["--device", "cpu", "--data", "synthetic", "--dataset_size", "2048", "--hidden", "64",
         "--lr", "0.05", "--momentum", "0.9", "--epochs", "2", "--log_interval", "1000",
         "--save_interval", "0"]
STEPS = {"01_single_gpu": [1], "02_init": [1, 2, 3], "03_sampler": [1, 2, 3], "04_ddp_wrap": [1, 2, 3],
         "05_metrics_ckpt": [1, 2, 3], "06_full": [1, 2, 3],
         # not at 1 rank: there, step 07's reduce-scatter (the CPU ring of common/dist/dist_mpi.c) never ends
         "07_zero": [2, 3]}


def golden_path(step, w):
    return GOLDEN_DIR / f"{step}_np{w}.jsonl"


def run_step(program, w, flags, outdir):
    """Runs `program` at w ranks (mpirun from 2 on), metrics into outdir; returns the file pattern."""
    pattern = os.path.join(outdir, "m_{rank}.jsonl")
    cmd = [str(program)] + flags + ["--metrics", pattern]
    if w > 1 or not pathlib.Path(program).name.startswith("01"):
        cmd = [os.environ.get("DDP_MPIEXEC", "mpirun"), "-np", str(w)] + cmd
    env = dict(os.environ, OPENBLAS_NUM_THREADS=os.environ.get("OPENBLAS_NUM_THREADS", "1"))
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    except subprocess.TimeoutExpired:
        sys.exit(f"golden: {' '.join(cmd)} did not end within 300 s")
    if p.returncode != 0:
        sys.exit(f"golden: {' '.join(cmd)} failed (status {p.returncode}):\n{p.stderr[-3000:]}")
    return pattern, " ".join(cmd), run_kernel(p.stdout + p.stderr)


def run_kernel(output):
    """The BLAS a run names in its start-up line, library, version, kernel and threads, e.g. "OpenBLAS
    0.3.34.481.3, kernel SkylakeX, 1 thread" (two versions' kernels of one name need not add in the
    same order); "none" for a build without OpenBLAS."""
    m = re.search(r"^blas: (\S+ \S+, kernel \S+, \d+ threads?)", output, re.M)
    if m:
        return m.group(1)
    return "none" if re.search(r"^blas: none", output, re.M) else "unknown"


def file_kernel(head):
    """The kernel that wrote a golden file (files written before the header named it: the
    OPENBLAS_CORETYPE they were made with, at OPENBLAS_NUM_THREADS=1)."""
    if "kernel" in head:
        return head["kernel"]
    return f"{head.get('openblas_coretype')}, {head.get('openblas_num_threads', 1)} thread"


def read_run(pattern, w):
    """Every rank's records of one run, without the fields that vary from run to run."""
    records = []
    for r in range(w):
        path = pattern.replace("{rank}", str(r))
        if not os.path.exists(path):
            sys.exit(f"golden: {path} does not exist (a run at {w} ranks writes one file per rank)")
        for line in open(path):
            e = json.loads(line)
            if e["type"] == "step":
                records.append({"type": "step", "rank": r, "step": e["step"], "epoch": e["epoch"],
                                "loss": e["loss"]})
            elif e["type"] == "epoch":
                records.append({"type": "epoch", "rank": r, "epoch": e["epoch"],
                                "train_loss": e["train_loss"], "test_acc": e["test_acc"]})
            elif e["type"] == "final":
                records.append({"type": "final", "rank": r, "steps": e["steps"],
                                "param_digest": e["param_digest"]})
    return records


def load_golden(path):
    lines = [json.loads(l) for l in open(path)]
    if not lines or lines[0].get("type") != "golden":
        sys.exit(f"golden: {path} is not a golden file (no header line)")
    return lines[0], lines[1:]


def order_of(want):
    def order(e):  # in the order a run produces them: by step, then the epoch, then the final
        if e["type"] == "step":
            return (e["step"], 0, e["rank"])
        if e["type"] == "epoch":
            last = max((x["step"] for x in want if x["type"] == "step" and x["epoch"] == e["epoch"]),
                       default=0)
            return (last, 1, e["rank"])
        return (1 << 60, 2, e["rank"])
    return order


def key(e):
    return (e["type"], e["rank"], e.get("step"), e.get("epoch"))


def missing(e, what, where):
    if e["type"] == "step":
        return f"DIFFERS first at {what}, {where}: the run has no such step (expected loss {e['loss']})"
    if e["type"] == "epoch":
        return f"DIFFERS first at {what}, {where}: the run has no epoch record"
    return f"DIFFERS at the end, {where}: the run has no final record"


def where_of(e):
    if e["type"] == "step":
        return f"step {e['step']} (epoch {e['epoch'] + 1})"
    if e["type"] == "epoch":
        return f"the end of epoch {e['epoch'] + 1}"
    return "the end"


def compare_values(want, got, against):
    """Bit equality (the same arithmetic): every value of `want` equal in `got`. Prints the verdict;
    returns 0 when equal, 1 at the first difference."""
    have = {key(e): e for e in got}
    fields = {"step": ("loss",), "epoch": ("train_loss", "test_acc"), "final": ("steps", "param_digest")}
    for e in sorted(want, key=order_of(want)):
        g, what, where = have.get(key(e)), where_of(e), f"rank {e['rank']}"
        if g is None:
            print(missing(e, what, where))
            return 1
        for f in fields[e["type"]]:
            if g[f] != e[f]:
                print(f"DIFFERS first at {what}, {where}: {f} {g[f]}, {against} {e[f]} "
                      "(compared bit for bit: the same arithmetic)")
                return 1
    return 0


def digest_groups(records):
    """The ranks grouped by equal final digests, e.g. [[0, 1, 2]] (replicas) or [[0], [1]] (step 03)."""
    groups = {}
    for e in records:
        if e["type"] == "final":
            groups.setdefault(e["param_digest"], []).append(e["rank"])
    return sorted(sorted(g) for g in groups.values())


def compare_structure(want, got):
    """Structure (another kernel): the same records, step counts and ranks with equal digests."""
    have = {key(e): e for e in got}
    for e in sorted(want, key=order_of(want)):
        g = have.get(key(e))
        if g is None:
            print(missing(e, where_of(e), f"rank {e['rank']}"))
            return 1
        if e["type"] == "final" and g["steps"] != e["steps"]:
            print(f"DIFFERS at the end, rank {e['rank']}: {g['steps']} steps against the golden {e['steps']}")
            return 1
    extra = sorted(set(have) - {key(e) for e in want})
    if extra:
        print(f"DIFFERS: the run has records the golden file has not, first {extra[0]}")
        return 1
    if digest_groups(want) != digest_groups(got):
        print(f"DIFFERS at the end: the ranks with equal param_digests are {digest_groups(got)}, the golden "
              f"file's {digest_groups(want)} (replicas that should be identical are not, or the other way)")
        return 1
    return 0


def compare(head, want, got, kernel, live=None):
    """Prints the verdict; returns 0 when the run matches, 1 at the first difference. kernel: the run's
    (None: unknown, compared as the files' kernel); live: the records of this build's own program run
    here beside it, compared bit for bit on another kernel."""
    n_steps = sum(e["type"] == "step" for e in want)
    ours = file_kernel(head)
    if kernel is None or kernel == ours:
        if compare_values(want, got, "the golden file has"):
            return 1
        print(f"MATCHES bit for bit: {n_steps} step losses (all ranks), every epoch and every final "
              f"param_digest of {head['step']} at {head['world_size']} ranks (kernel {ours})")
        return 0
    if live is not None and compare_values(live, got, "this build's step program, run here, has"):
        return 1
    if compare_structure(want, got):
        return 1
    print(f"MATCHES in structure: kernel {kernel}, not the files' {ours}, so the values are not compared "
          f"with the file (they differ in their last bits); {n_steps} step records, every epoch, the final "
          f"steps and the ranks with equal digests {digest_groups(got)} are the file's"
          + ("; every value equals this build's program run here, bit for bit" if live is not None else ""))
    return 0


def cmd_run(step, w, program):
    path = golden_path(step, w)
    if not path.exists():
        sys.exit(f"golden: no golden file {path.relative_to(ROOT)} (steps and ranks: "
                 f"{', '.join(f'{s} at {v}' for s, v in STEPS.items())})")
    head, want = load_golden(path)
    with tempfile.TemporaryDirectory() as tmp:
        pattern, cmd, kernel = run_step(program or BIN / step, w, head["flags"], tmp)
        print(f"ran: {cmd}")
        got = read_run(pattern, w)
        live = None
        if program and kernel != file_kernel(head) and pathlib.Path(program).resolve() != (BIN / step).resolve():
            os.makedirs(os.path.join(tmp, "live"))
            lpattern, lcmd, _ = run_step(BIN / step, w, head["flags"], os.path.join(tmp, "live"))
            print(f"and, the reference on this kernel: {lcmd}")
            live = read_run(lpattern, w)
        return compare(head, want, got, kernel, live)


def cmd_generate(only):
    GOLDEN_DIR.mkdir(parents=True, exist_ok=True)
    for step, ws in STEPS.items():
        if only and step not in only:
            continue
        for w in ws:
            with tempfile.TemporaryDirectory() as tmp:
                pattern, cmd, kernel = run_step(BIN / step, w, FLAGS, tmp)
                recs = read_run(pattern, w)
            head = {"type": "golden", "step": step, "world_size": w, "flags": FLAGS,
                    "command": cmd.replace(tmp + "/", "DIR/"),
                    "written_by": "dev/golden.py generate", "openblas_num_threads": 1,
                    "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE", "(detected)"), "kernel": kernel}
            with open(golden_path(step, w), "w") as f:
                for e in [head] + recs:
                    f.write(json.dumps(e) + "\n")
            print(f"wrote {golden_path(step, w).relative_to(ROOT)}: {len(recs)} records")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("step")
    r.add_argument("world_size", type=int)
    r.add_argument("--program", help="the trainer to run instead of build/bin/STEP")
    c = sub.add_parser("compare")
    c.add_argument("golden")
    c.add_argument("run", help="the run's metrics file(s), with {rank} when W > 1")
    sub.add_parser("check")
    gen = sub.add_parser("generate")
    gen.add_argument("steps", nargs="*", help="only these steps (default: all)")
    c.add_argument("--structure", action="store_true",
                   help="the run used another OpenBLAS kernel than the files': compare structure only")
    a = ap.parse_args()
    if a.cmd == "generate":
        cmd_generate(a.steps)
        return 0
    if a.cmd == "run":
        return cmd_run(a.step, a.world_size, a.program)
    if a.cmd == "compare":
        head, want = load_golden(a.golden)
        w = head["world_size"]
        if w > 1 and "{rank}" not in a.run:
            sys.exit("golden: at more than one rank, give the metrics path with {rank}")
        return compare(head, want, read_run(a.run, w), "another kernel" if a.structure else None)
    bad = 0
    for step, ws in STEPS.items():
        for w in ws:
            print(f"{step} at {w}: ", end="", flush=True)
            bad += cmd_run(step, w, None)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
