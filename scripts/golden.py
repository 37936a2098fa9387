#!/usr/bin/env python3
"""Golden runs: the expected per-step losses and final digests of every step, to diff a run against.

tests/golden/<step>_np<W>.jsonl holds, for one step at W ranks on small synthetic data (the flags are
in the file's first line), every rank's per-step loss, each epoch's train loss and test accuracy, and
its final param_digest. They were written by `scripts/golden.py generate` on the 2-core build VM
(OpenBLAS 0.3.21, OPENBLAS_NUM_THREADS=1 as scripts/mpi_env.sh sets it, and OPENBLAS_CORETYPE=Haswell:
the kernel the docs' outputs were made with; that VM's own detection picks Prescott).

Losses are compared within a relative tolerance (--rtol, default 1e-5): a different BLAS build, CPU
kernel or thread count sums in another order and moves the last digits. These runs are short (12 to
36 steps) on a model whose training does not magnify rounding: OpenBLAS's Prescott kernel against the
Haswell one that wrote the files differs by at most 1.3e-7 in any step's loss (measured 2026-12-03 on
01 at 1 rank and 03, 06 and 07 at 3 ranks, every step compared), 75 times below the tolerance; a
wrong program differs by 1e-4 or more from its second step on (golden_catches_wrong). A golden file
is one seed's run: the comparisons of two runs that must hold for every seed are the integration tests' (label
`parity`), not these. The digest is the hash of the
exact parameter bytes, so it only matches on the same BLAS build, CPU and thread count: a digest that
differs while every loss agrees is reported but is not a failure (--strict makes it one). With
OPENBLAS_CORETYPE=Haswell (an x86 CPU with AVX2, Debian's OpenBLAS) the digests should match too.

  scripts/golden.py run STEP W [--program PATH]   run build/bin/STEP (or PATH, e.g. your own build)
                                                  at W ranks with the golden flags, then compare
  scripts/golden.py compare GOLDEN 'RUN_{rank}.jsonl'   compare metrics files you already have
                                                  (written with the golden flags and --metrics)
  scripts/golden.py check                         `run` every golden file with build/bin (a CTest)
  scripts/golden.py generate [STEP...]            rewrite tests/golden/ from build/bin

Exit status: 0 the run matches, 1 it differs (the first differing step is named), 2 usage/run error.
"""
import argparse
import json
import os
import pathlib
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
         # not at 1 rank: there, step 07's reduce-scatter (the CPU ring of common/dist_mpi.c) never ends
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
    return pattern, " ".join(cmd)


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


def close(a, b, rtol):
    return abs(a - b) <= rtol * max(abs(a), abs(b), 1e-12)


def compare(head, want, got, rtol, strict):
    """Prints the verdict; returns 0 when the run matches, 1 at the first difference."""
    def order(e):  # in the order a run produces them: by step, then the epoch, then the final
        if e["type"] == "step":
            return (e["step"], 0, e["rank"])
        if e["type"] == "epoch":
            last = max((x["step"] for x in want if x["type"] == "step" and x["epoch"] == e["epoch"]),
                       default=0)
            return (last, 1, e["rank"])
        return (1 << 60, 2, e["rank"])
    key = lambda e: (e["type"], e["rank"], e.get("step"), e.get("epoch"))
    have = {key(e): e for e in got}
    digest_note = []
    for e in sorted(want, key=order):
        g = have.get(key(e))
        where = f"rank {e['rank']}"
        if e["type"] == "step":
            what = f"step {e['step']} (epoch {e['epoch'] + 1})"
            if g is None:
                print(f"DIFFERS first at {what}, {where}: the run has no such step (expected loss {e['loss']})")
                return 1
            if not close(g["loss"], e["loss"], rtol):
                rel = abs(g["loss"] - e["loss"]) / max(abs(e["loss"]), 1e-12)
                print(f"DIFFERS first at {what}, {where}: loss {g['loss']} against the golden "
                      f"{e['loss']} (relative {rel:.2e} > {rtol:g})")
                return 1
        elif e["type"] == "epoch":
            what = f"the end of epoch {e['epoch'] + 1}"
            if g is None:
                print(f"DIFFERS first at {what}, {where}: the run has no epoch record")
                return 1
            if not close(g["train_loss"], e["train_loss"], rtol) or abs(g["test_acc"] - e["test_acc"]) > 1e-3:
                print(f"DIFFERS first at {what}, {where}: train loss {g['train_loss']}, test accuracy "
                      f"{g['test_acc']} against the golden {e['train_loss']}, {e['test_acc']}")
                return 1
        else:
            if g is None or g["steps"] != e["steps"]:
                print(f"DIFFERS at the end, {where}: {g and g['steps']} steps against the golden {e['steps']}")
                return 1
            if g["param_digest"] != e["param_digest"]:
                digest_note.append(f"rank {e['rank']}: {g['param_digest']} against {e['param_digest']}")
    n_steps = sum(e["type"] == "step" for e in want)
    if digest_note:
        msg = "; ".join(digest_note)
        if strict:
            print(f"DIFFERS at the end: every loss agrees within {rtol:g}, but param_digest differs ({msg})")
            return 1
        print(f"MATCHES within {rtol:g}: {n_steps} step losses and every epoch agree; the final "
              f"param_digest differs ({msg}), as it does on another BLAS build, CPU or thread count (the files were made with "
              f"OPENBLAS_CORETYPE={head.get('openblas_coretype')})")
        return 0
    print(f"MATCHES: {n_steps} step losses (all ranks) within {rtol:g} and every final param_digest "
          f"equal to {head['step']} at {head['world_size']} ranks")
    return 0


def cmd_run(step, w, program, rtol, strict):
    path = golden_path(step, w)
    if not path.exists():
        sys.exit(f"golden: no golden file {path.relative_to(ROOT)} (steps and ranks: "
                 f"{', '.join(f'{s} at {v}' for s, v in STEPS.items())})")
    head, want = load_golden(path)
    with tempfile.TemporaryDirectory() as tmp:
        pattern, cmd = run_step(program or BIN / step, w, head["flags"], tmp)
        print(f"ran: {cmd}")
        return compare(head, want, read_run(pattern, w), rtol, strict)


def cmd_generate(only):
    GOLDEN_DIR.mkdir(parents=True, exist_ok=True)
    for step, ws in STEPS.items():
        if only and step not in only:
            continue
        for w in ws:
            with tempfile.TemporaryDirectory() as tmp:
                pattern, cmd = run_step(BIN / step, w, FLAGS, tmp)
                recs = read_run(pattern, w)
            head = {"type": "golden", "step": step, "world_size": w, "flags": FLAGS,
                    "command": cmd.replace(tmp + "/", "DIR/"),
                    "written_by": "scripts/golden.py generate", "openblas_num_threads": 1,
                    "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE", "(detected)")}
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
    for p in (r, c, sub.choices["check"]):
        p.add_argument("--rtol", type=float, default=1e-5)
        p.add_argument("--strict", action="store_true", help="a differing digest fails too")
    a = ap.parse_args()
    if a.cmd == "generate":
        cmd_generate(a.steps)
        return 0
    if a.cmd == "run":
        return cmd_run(a.step, a.world_size, a.program, a.rtol, a.strict)
    if a.cmd == "compare":
        head, want = load_golden(a.golden)
        w = head["world_size"]
        if w > 1 and "{rank}" not in a.run:
            sys.exit("golden: at more than one rank, give the metrics path with {rank}")
        return compare(head, want, read_run(a.run, w), a.rtol, a.strict)
    bad = 0
    for step, ws in STEPS.items():
        for w in ws:
            print(f"{step} at {w}: ", end="", flush=True)
            bad += cmd_run(step, w, None, a.rtol, a.strict)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
