#!/usr/bin/env python3
"""The launcher matrix: every step 02 to 08 at 2 and 3 ranks under every launcher, from one table.

    python3 -m tests.integration.matrix LAUNCHER NP          run one cell (CTest: matrix_<launcher>_np<NP>),
                                                             e.g. python3 -m tests.integration.matrix launch 3
    python3 -m tests.integration.matrix --cells local|slurm  the cells, one a line: NAME LAUNCHER NP BACKEND
                                   (tests.cmake reads them at configure time, so that the CTest tests come
                                   from the table)
    python3 -m tests.integration.matrix --table              the table, as a reader would want it
(from the repository's root, or with it on PYTHONPATH: it imports the harness, tests/harness/)

A cell runs every step of STEPS under one launcher at one rank count and checks each step's claim
(below); at 2 ranks the steps marked same_at_2 must end with one digest, and under every launcher the
reference launcher's (mpirun's); at 3 ranks the steps marked parity_at_3 must agree after one step
from the same start within the float32 bound of parity(). Every failure is reported, not only the
first, and the cell exits 1 if there is one; 77 (CTest's skip) with one line when the launcher is
missing (torchrun without python3-torch, srun without the test cluster of tests/slurm/cluster.sh).

Environment: DDP_BIN_DIR (the programs, default build/bin), DDP_MPIEXEC, DDP_TEST_SEED (--seed of
every run; default: the programs' own default, read from --help), DDP_SLURM_POINTER (the test
cluster, for the srun columns), DDP_HAVE_MPI (OFF: no mpirun reference for the other launchers).
Standard library only, like the harness (tests/harness/), whose launch lines (torchrun_cmd, env_launch_env) it shares.
"""
import argparse
import importlib.util
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
from exercises.checker.hints import hint  # the likely cause of a failed run (the exercise checker's table)
from tests.harness import env as harness_env
from tests.harness.env import MPIEXEC, SKIP, Failure
from tests.harness.launch import env_launch_env, launch, torchrun_cmd
from tests.harness.ports import free_master_port
from tests.harness.parity import step_within_rounding
from tests.harness.results import global_losses, metrics, read_checkpoint

BIN = os.path.abspath(os.environ.get("DDP_BIN_DIR", os.path.join(ROOT, "build", "bin")))
harness_env.BIN = BIN
# One OpenBLAS thread per process, as CTest's environment has it (scripts/mpi_env.sh): OpenBLAS splits
# a GEMM's sums by its thread count, so step 01, run alone, must use the ranks' one thread to be
# their reference (mpirun binds each rank to a core; torchrun and launch.sh set OMP_NUM_THREADS=1).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
HAVE_MPI = os.environ.get("DDP_HAVE_MPI", "ON").upper() in ("ON", "1", "TRUE", "YES")

# ---- the table ------------------------------------------------------------------------------------

# The launchers (the columns): name -> (backend, where the cell runs, how N ranks start). "local":
# this machine; "slurm": the test cluster, which CTest's fixture slurm_cluster starts and stops
# (tests/slurm/tests.cmake).
LAUNCHERS = {
    "mpirun": ("mpi", "local", "mpirun -n N"),
    "launch": ("gloo", "local", "scripts/launch.sh -n N"),
    "torchrun": ("gloo", "local",
                 "torchrun --nproc_per_node N --no_python (--standalone's rendezvous, on a free port)"),
    "srun_pmix": ("mpi", "slurm", "srun --mpi=pmix -n N"),
    "srun": ("gloo", "slurm", "srun -n N, MASTER_ADDR and MASTER_PORT exported"),
}
RANKS = (2, 3)
# The reference launcher: at 2 ranks every other launcher's digests must be its digests.
REFERENCE = "mpirun"

# The steps (the rows) and what each claims at W ranks:
#   redundant  every rank trains on all the data: each rank's parameters are step 01's, bit for bit
#   drift      no gradient sync: the ranks' parameters all differ (by design)
#   replicas   every rank ends with the same parameters, bit for bit
# same_at_2: at 2 ranks these steps end with the same digest (every sum has two terms, which any
# algorithm adds the same way, and dividing by 2 is exact, before or after the sum).
# parity_at_3: at 3 ranks one step of these from the same start agrees within parity()'s bound (each
# sums the same three 1/W-scaled terms, perhaps in another order).
STEPS = [
    # step             claim        same_at_2  parity_at_3
    ("02_init", "redundant", False, False),
    ("03_sampler", "drift", False, False),
    ("04_ddp_wrap", "replicas", True, False),
    ("05_metrics_ckpt", "replicas", True, False),
    ("06_full", "replicas", True, True),
    ("07_zero", "replicas", True, True),
    ("08_fsdp", "replicas", True, True),
    ("09_live", "replicas", True, True),
]

# The settings of every run: small and fast (a 784-63-10 MLP, 50,095 parameters, a multiple of
# neither 2 nor 3, so the shards of 07 and 08 are padded; 512 samples, 32 per rank and step: 16 steps
# at 2 ranks over 2 epochs, 12 at 3, the last batch of each epoch padded by the sampler).
SETTINGS = ["--device", "cpu", "--data", "synthetic", "--dataset_size", "512", "--hidden", "63",
            "--lr", "0.05", "--momentum", "0.9", "--batch_size", "32", "--epochs", "2",
            "--log_interval", "1000", "--save_interval", "0"]
LR = 0.05
MOMENTUM = 0.9
RUN_TIMEOUT = 60  # --timeout of every run of a step with a process group: a hang ends after 60 s
# The line of a failed run's output quoted in its summary: the first that looks like the error.
ERROR_LINE = re.compile(r"error|^\s*\*\*\* \w|abort|segmentation fault|watchdog|killed|signal", re.IGNORECASE)
# A rank 0 that could not listen on the Gloo store's port (common/dist/dist_launch.c, bootstrap_port). Under
# torchrun's c10d rendezvous (--standalone's; torch 1.13 sets TORCHELASTIC_USE_AGENT_STORE=False)
# that port is MASTER_PORT itself, which torchrun took from bind(0) and let go again: until rank 0
# listens there, another test's connection may take it as its local port, and its TIME_WAIT refuses
# the listen even with SO_REUSEADDR. On this VM, with other tests' connections around, 4 launches in
# about 100 failed so, once twice in a row. The launch is tried up to PORT_RETRIES more times, each
# noted in the output.
PORT_TAKEN = re.compile(r"cannot listen on port \d+ for the rendezvous store: Address already in use")
PORT_RETRIES = 2
RUN_LIMIT = 300  # seconds a launch may take before it is stopped (torchrun alone starts in ~8 s)


def cells(where=None):
    """(name, launcher, ranks, backend) of every cell, in table order."""
    return [(f"matrix_{launcher}_np{np}", launcher, np, backend)
            for launcher, (backend, at, _) in LAUNCHERS.items() if where in (None, at) for np in RANKS]


def reference_steps():
    """The steps a non-reference cell at 2 ranks runs again under REFERENCE: those whose digests no
    other comparison pins down (02's is step 01's; same_at_2's are the first one's)."""
    group = [s for s, _, same, _ in STEPS if same]
    return [s for s, claim, same, _ in STEPS if claim == "drift"] + group[:1]


# ---- running a step -------------------------------------------------------------------------------

class Cell:
    """One launcher at one rank count: runs steps, collects every failure."""

    def __init__(self, launcher, np, tmp, seed):
        self.launcher, self.np, self.tmp, self.seed = launcher, np, tmp, seed
        self.failures, self.lines = [], []
        self.torchrun = None
        self.slurm_env = None
        self.runs = 0
        self.retries = 0

    def fail(self, what):
        self.failures.append(what)
        self.say(f"FAIL {what}")

    def say(self, line):
        print(line, flush=True)
        self.lines.append(line)

    def argv_env(self, cmd, launcher):
        """(argv, env) that start self.np ranks of cmd under launcher."""
        np = self.np
        if launcher in ("mpirun", "launch"):
            return launch(cmd, np, launcher)
        if launcher == "torchrun":
            return self.torchrun + cmd, env_launch_env()
        env = dict(self.slurm_env)
        if launcher == "srun_pmix":
            return ["srun", "--mpi=pmix", "--kill-on-bad-exit=1", "-n", str(np)] + cmd, env
        # a plain srun: no MPI; the ranks meet through MASTER_ADDR and MASTER_PORT (docs/06_full.md)
        for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
            env.pop(k, None)
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_master_port()))
        return ["srun", "--kill-on-bad-exit=1", "-n", str(np)] + cmd, env

    def run(self, step, args, tag, launcher=None, np=None, what=""):
        """Runs `step` (under launcher, default this cell's, at this cell's ranks; np=1: alone) with
        --metrics <tag>{rank}.jsonl. Returns the ranks' final objects, or None after a failure."""
        launcher = launcher or self.launcher
        np = np or self.np
        prefix = os.path.join(self.tmp, tag)
        cmd = [os.path.join(BIN, step)] + args + ["--metrics", prefix + "{rank}.jsonl"]
        if not step.startswith("01"):
            cmd += ["--timeout", str(RUN_TIMEOUT)]
        env = None
        if np > 1:
            cmd, env = self.argv_env(cmd, launcher)
        where = (f"{step} under {launcher} at {np} ranks" if np > 1 else step) + what
        self.runs += 1
        rc, out, err = run_bounded(cmd, env, self.tmp, RUN_LIMIT)
        for _ in range(PORT_RETRIES):
            busy = PORT_TAKEN.search(err)
            if rc == 0 or not busy or np == 1:
                break
            # The Gloo store's port, MASTER_PORT + 1, was not free when rank 0 listened (see
            # PORT_TAKEN): noted, and tried again, so that only a repeated failure fails the cell.
            self.say(f"note {where}: {busy.group(0)}: again")
            print(f"RETRY: {where}: {busy.group(0)}", flush=True)  # counted by dev/soak.sh
            self.retries += 1
            if launcher != "torchrun" and env is not None and "MASTER_PORT" in env:
                env = dict(env, MASTER_PORT=str(free_master_port()))
            rc, out, err = run_bounded(cmd, env, self.tmp, RUN_LIMIT)
        if rc != 0:
            cause = hint(out + err)
            lines = (err.strip() or out.strip()).splitlines()
            tail = "\n".join(lines[-12:])
            first = [l for l in lines if ERROR_LINE.search(l)][:1] or lines[-1:]
            self.fail(f"{where}: exit {rc}" + (f": {first[0].strip()[:200]}" if first else "") + ("" if rc != "timeout" else f" (stopped after {RUN_LIMIT} s)")
                      + (f"\n     likely cause: {cause}" if cause else "")
                      + f"\n     {' '.join(cmd)}\n     " + tail.replace("\n", "\n     "))
            return None
        finals = []
        for r in range(np):
            path = f"{prefix}{r}.jsonl"
            try:
                finals.append(metrics(path)[2])
            except (OSError, ValueError, KeyError, Failure) as e:
                self.fail(f"{where}: exit 0 but rank {r}'s metrics are missing or incomplete ({path}: {e})")
                return None
        sizes = sorted({f["world_size"] for f in finals})
        if sizes != [np]:
            self.fail(f"{where}: the ranks report world sizes {sizes}, not {np}")
            return None
        return finals


def run_bounded(cmd, env, cwd, limit):
    """(exit status or "timeout", stdout, stderr). The launch runs in a session of its own: past the
    limit it gets SIGTERM (every launcher here then stops its ranks), then SIGKILL, the whole group."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd,
                         start_new_session=True)
    try:
        out, err = p.communicate(timeout=limit)
        return p.returncode, out, err
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGTERM)
        try:
            out, err = p.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
        return "timeout", out, err


# ---- the claims -----------------------------------------------------------------------------------

def short(d):
    return ", ".join(d)


def claim(cell, step, kind, finals, base):
    """Checks one step's claim on its ranks' final objects; returns the common digest or None."""
    d = [f["param_digest"] for f in finals]
    at = f"{step} under {cell.launcher} at {cell.np} ranks"
    if kind == "redundant":
        if base is None:
            cell.fail(f"{at}: no step 01 digest to compare with (step 01 failed)")
        elif d != [base] * cell.np:
            cell.fail(f"{at}: every rank should be step 01 ({base}), the ranks end at {short(d)}")
        else:
            cell.say(f"ok   {at}: every rank equals step 01 ({base})")
        return None
    if kind == "drift":
        if len(set(d)) != cell.np:
            cell.fail(f"{at}: without gradient sync every rank's parameters should differ, got {short(d)}")
        else:
            cell.say(f"ok   {at}: the replicas drift apart ({short(d)})")
        return None
    if len(set(d)) != 1:
        cell.fail(f"{at}: replicas differ: {short(d)}")
        return None
    cell.say(f"ok   {at}: replicas identical ({d[0]})")
    return d[0]


def f32(x):
    """x rounded to float32 (to nearest, as C's conversion does)."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def read_state(path):
    """(params, momentum) of a checkpoint (common/ckpt/ckpt.h's format: the momentum follows the
    parameters)."""
    _, params = read_checkpoint(path)
    with open(path, "rb") as f:
        data = f.read()
    hsize = struct.unpack_from("<I", data, 12)[0]
    n = len(params)
    return list(params), list(struct.unpack_from(f"<{n}f", data, hsize + 4 * n))


def parity(cell, steps):
    """At W ranks, one optimizer step of each of `steps` from the same start (the same seed), compared.

    Every one of these steps computes, on each rank r, the same local term x_r (the gradient of its
    batch, backward scaled by 1/(B·W): 2 ranks prove it, where every step ends at one digest), and
    its reduced gradient g = x_1 + ... + x_W, summed in an order its collective chooses (06: an
    all-reduce; 07 and 08: reduce-scatters). So two of them differ by the rounding of a W-term sum in
    another order: the tests' error model (tests/harness/parity.py, step_within_rounding) with
    n = W terms, one step from the same state, the same model as every other parity test.
    Checked, per step: the same initial parameters as the first step's (bit for bit) and
    p1 = fl(p0 - fl(lr·m)) for its own saved momentum m (bit for bit: the update itself has no freedom);
    and against the first step, the loss, parameters and momentum within the error model. A wrong
    shard, a missing 1/W or a sum of the wrong terms moves values by their own size, far beyond it."""
    W = cell.np
    lr = f32(LR)
    states = {}
    for step in steps:
        one = SETTINGS + ["--seed", cell.seed, "--max_steps", "1", "--save_interval", "1",
                          "--ckpt_dir", f"{cell.tmp}/one_{step}", "--save_init", f"{cell.tmp}/init_{step}"]
        finals = cell.run(step, one, f"one_{step}_", what=" (one step, for the parity)")
        if finals is None:
            continue
        if len({f["param_digest"] for f in finals}) != 1:
            cell.fail(f"{step} under {cell.launcher} at {W} ranks, one step: replicas differ")
            continue
        p0, m0 = read_state(f"{cell.tmp}/init_{step}/checkpoint.bin")
        p1, m1 = read_state(f"{cell.tmp}/one_{step}/checkpoint.bin")
        bad = [i for i in range(len(p1)) if p1[i] != f32(p0[i] - f32(lr * m1[i]))]
        if bad:
            i = bad[0]
            cell.fail(f"{step} at {W} ranks, one step: {len(bad)} parameters are not p0 - lr·m for the saved "
                      f"momentum m (first: index {i}: p0 {p0[i]!r}, m {m1[i]!r}, p1 {p1[i]!r})")
            continue
        loss = global_losses(f"{cell.tmp}/one_{step}_", W, int(step[:2]))[-1]
        states[step] = (p0, m0, (loss, p1, m1))
    if len(states) < 2:
        cell.say(f"note {cell.launcher} at {W} ranks: fewer than two of {short(steps)} ran one step: "
                 "no parity to compare")
        return
    ref = next(iter(states))
    p0r, m0r, after_r = states[ref]
    sizes = read_checkpoint(f"{cell.tmp}/one_{ref}/checkpoint.bin")[0]["sizes"]
    for step, (p0, _, after) in states.items():
        if step == ref:
            continue
        if p0 != p0r:
            cell.fail(f"{step} at {W} ranks started from other parameters than {ref} (same seed {cell.seed})")
            continue
        if after == after_r:
            cell.say(f"ok   {step} vs {ref} under {cell.launcher} at {W} ranks, one step: bit for bit")
            continue
        ratios, text = step_within_rounding(m0r, after_r, after, lr, MOMENTUM, W, sizes)
        if text:
            cell.fail(f"{step} vs {ref} at {W} ranks, one step from the same start, beyond the float32 bound "
                      f"of a {W}-term sum in another order: {text}")
        else:
            cell.say(f"ok   {step} vs {ref} under {cell.launcher} at {W} ranks, one step: within the bound "
                     f"(worst difference/bound: " + ", ".join(f"{k} {v:.2g}" for k, v in ratios.items()) + ")")


def run_cell(cell):
    common = SETTINGS + ["--seed", cell.seed]
    base = None
    finals = cell.run("01_single_gpu", common, "s01_", np=1)
    if finals:
        base = finals[0]["param_digest"]
    digests = {}
    for step, kind, _, _ in STEPS:
        finals = cell.run(step, common, f"s{step[:2]}_")
        if finals is not None:
            digests[step] = [f["param_digest"] for f in finals]
            claim(cell, step, kind, finals, base)
    np, at = cell.np, f"under {cell.launcher} at {cell.np} ranks"
    if np == 2:
        group = {s: digests[s][0] for s, _, same, _ in STEPS if same and s in digests
                 and len(set(digests[s])) == 1}
        if len(set(group.values())) > 1:
            cell.fail(f"{at}: steps {short(group)} should end with one digest, got "
                      + ", ".join(f"{s[:2]} {d}" for s, d in group.items()))
        elif group:
            cell.say(f"ok   {short(s[:2] for s in group)} {at}: one digest ({next(iter(group.values()))})")
        if cell.launcher != REFERENCE:
            if not HAVE_MPI or not shutil.which(MPIEXEC):
                cell.say(f"note {at}: no {REFERENCE} here (a build without MPI): the digests are not "
                         f"compared with {REFERENCE}'s")
            else:
                for step in reference_steps():
                    ref = cell.run(step, common, f"r{step[:2]}_", launcher=REFERENCE,
                                   what=f" (the reference for {cell.launcher})")
                    if ref is None:
                        continue
                    want = [f["param_digest"] for f in ref]
                    if step in dict((s, same) for s, _, same, _ in STEPS if same):
                        # the same_at_2 steps: each must end where this one does under the reference
                        off = {s: d for s, d in group.items() if d != want[0]}
                        if off or len(set(want)) != 1:
                            cell.fail(f"{at}: steps {short(off)} end at {short(sorted(set(off.values())))}, "
                                      f"{step} under {REFERENCE} at {short(want)}")
                        elif group:
                            cell.say(f"ok   {short(s[:2] for s in group)} {at}: the digest of {step} under "
                                     f"{REFERENCE} ({want[0]})")
                    elif step in digests:
                        if digests[step] != want:
                            cell.fail(f"{at}: {step}'s ranks end at {short(digests[step])}, under {REFERENCE} "
                                      f"at {short(want)}")
                        else:
                            cell.say(f"ok   {step} {at}: every rank's digest as under {REFERENCE}")
    if np == 3:
        parity(cell, [s for s, _, _, par in STEPS if par])


# ---- main -----------------------------------------------------------------------------------------

def default_seed():
    """The programs' own default --seed, as step 01's --help states it."""
    p = subprocess.run([os.path.join(BIN, "01_single_gpu"), "--help"], capture_output=True, text=True)
    m = re.search(r"--seed N .*\(default (\d+)\)", p.stdout + p.stderr)
    if not m:
        raise SystemExit(f"matrix.py: no default seed in {BIN}/01_single_gpu --help (set DDP_TEST_SEED)")
    return m.group(1)


def slurm_env():
    """The test cluster's client environment (tests/slurm/check.py's), or None without a cluster."""
    spec = importlib.util.spec_from_file_location("slurm_check", os.path.join(ROOT, "tests", "slurm", "check.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.cluster_env(), mod.POINTER


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("launcher", nargs="?", choices=list(LAUNCHERS))
    ap.add_argument("np", nargs="?", type=int, choices=RANKS)
    ap.add_argument("--cells", choices=["local", "slurm"], help="print the cells that run there, and exit")
    ap.add_argument("--table", action="store_true", help="print the table, and exit")
    a = ap.parse_args()
    if a.cells:
        for c in cells(a.cells):
            print(" ".join(map(str, c)))
        return 0
    if a.table:
        print("launchers: " + "; ".join(f"{k} ({v[0]}, {v[1]}: {v[2]})" for k, v in LAUNCHERS.items()))
        print(f"ranks: {', '.join(map(str, RANKS))}; reference at 2 ranks: {REFERENCE} "
              f"(run again: {short(reference_steps())})")
        for step, kind, same, par in STEPS:
            print(f"  {step:16} {kind:9} " + ("same digest at 2 ranks  " if same else " " * 24)
                  + ("one-step parity at 3 ranks" if par else ""))
        return 0
    if a.launcher is None or a.np is None:
        ap.error("give LAUNCHER and NP, or --cells, or --table")
    name = f"matrix_{a.launcher}_np{a.np}"
    backend, where, _ = LAUNCHERS[a.launcher]
    seed = os.environ.get("DDP_TEST_SEED") or default_seed()
    tmp = tempfile.mkdtemp(prefix=name + "-")
    cell = Cell(a.launcher, a.np, tmp, seed)
    try:
        if a.launcher == "torchrun":
            tempfile.tempdir = tmp  # torchrun_cmd's log folder, removed with ours
            cell.torchrun = torchrun_cmd(a.np)
            if cell.torchrun is None:
                print(f"skipped {name}: torchrun is not installed (apt-get install python3-torch)")
                return SKIP
        if where == "slurm":
            env, pointer = slurm_env()
            if env is None:
                print(f"skipped {name}: no test cluster running ({pointer} missing: tests/slurm/cluster.sh "
                      "start, or CTest's fixture slurm_cluster_start, which needs root, slurm-wlm and munge)")
                return SKIP
            cell.slurm_env = env
        print(f"{name}: steps 02 to 08 under {LAUNCHERS[a.launcher][2].replace('N', str(a.np), 1)} "
              f"({backend}), --seed {cell.seed}", flush=True)
        t0 = time.monotonic()
        run_cell(cell)
        took = time.monotonic() - t0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if cell.failures:
        print(f"FAILED {name}: {len(cell.failures)} failure(s) in {cell.runs} runs, {took:.0f} s:", file=sys.stderr)
        for f in cell.failures:
            print("  - " + f.splitlines()[0], file=sys.stderr)
        return 1
    again = f" ({cell.retries} again: the store's port was taken)" if cell.retries else ""
    print(f"ok {name}: {cell.runs} runs{again}, every claim holds ({took:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
