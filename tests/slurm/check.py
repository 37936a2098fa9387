#!/usr/bin/env python3
"""Slurm checks: the real programs under a real single-node Slurm (tests/slurm/cluster.sh).

CTest runs `python3 -m tests.slurm.check SCENARIO` (label `slurm`) between the fixture's `cluster.sh start` and `stop`;
DDP_SLURM_POINTER names the file in which `start` wrote the cluster's folder. Without a running
cluster (Slurm not installed, not root) a scenario prints one line and exits 77, CTest's skip code.
"""
import argparse
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
from tests.harness.env import BIN, MPIEXEC, SKIP, Failure, small  # noqa: E402
from tests.harness.results import metrics, read_checkpoint  # noqa: E402

BIN = os.path.abspath(BIN)
POINTER = os.environ.get("DDP_SLURM_POINTER", os.path.join(ROOT, "build", "slurm_cluster"))


def cluster_env():
    """The environment of a Slurm client of the test cluster, or None when there is none."""
    if not os.path.isfile(POINTER):
        return None
    conf = os.path.join(open(POINTER).read().strip(), "slurm.conf")
    if not os.path.isfile(conf):
        return None
    env = dict(os.environ, SLURM_CONF=conf)
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    return env


ENV = None


def sh(cmd, tmp, expect_ok=True, timeout=300, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=tmp, env=env or ENV)
    if expect_ok is not None and (p.returncode == 0) != expect_ok:
        raise Failure(f"{' '.join(cmd)} exited {p.returncode}, expected "
                      f"{'0' if expect_ok else 'non-zero'}\n--- stdout\n{p.stdout}\n--- stderr\n{p.stderr}")
    return p


def flags(epochs, **changes):
    """The harness's small, fast settings (SMALL) for `epochs` epochs, some values changed."""
    return small(**changes) + ["--epochs", str(epochs)]


def digests(prefix, np):
    return [metrics(f"{prefix}{r}.jsonl")[2]["param_digest"] for r in range(np)]


def rank_pids(marker):
    """Pids of trainer processes whose command line contains `marker` (a path unique to the test)."""
    out = []
    for d in glob.glob("/proc/[0-9]*"):
        try:
            with open(f"{d}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        if args and args[0].endswith((b"06_full", b"07_zero")) and marker.encode() in b" ".join(args):
            out.append(int(d[6:]))
    return out


def environ_of(pid):
    with open(f"/proc/{pid}/environ", "rb") as f:
        return dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)


def wait_gone(marker, seconds):
    end = time.time() + seconds
    while time.time() < end:
        if not rank_pids(marker):
            return True
        time.sleep(0.1)
    return False


# ---- srun --mpi=pmix equals mpirun ----------------------------------------------------------------

def srun_pmix(step, np):
    def scenario(tmp):
        """srun --mpi=pmix -n N: replicas identical, and equal to mpirun -n N with the same flags"""
        args = flags(1)
        sh(["srun", "--mpi=pmix", "-n", str(np), f"{BIN}/{step}"] + args +
           ["--metrics", f"{tmp}/s{{rank}}.jsonl", "--ckpt_dir", f"{tmp}/s"], tmp)
        sh([MPIEXEC, "-n", str(np), f"{BIN}/{step}"] + args +
           ["--metrics", f"{tmp}/m{{rank}}.jsonl", "--ckpt_dir", f"{tmp}/m"], tmp)
        s, m = digests(f"{tmp}/s", np), digests(f"{tmp}/m", np)
        if len(set(s)) != 1:
            raise Failure(f"srun --mpi=pmix -n {np} {step}: replicas differ: {s}")
        if s[0] != m[0]:
            raise Failure(f"srun --mpi=pmix -n {np} {step} ends with {s[0]}, mpirun -n {np} with {m[0]}")
        if metrics(f"{tmp}/s0.jsonl")[2]["world_size"] != np:
            raise Failure(f"srun --mpi=pmix -n {np}: the trainer did not see {np} ranks")
    scenario.__name__ = f"slurm_srun_pmix_{step[:2]}_np{np}"
    return scenario


def slurm_srun_no_plugin(tmp):
    """srun -n 2 without an MPI plugin on CPUs: an error naming srun --mpi=pmix and mpirun"""
    p = sh(["srun", "-n", "2", f"{BIN}/06_full", "--device", "cpu", "--data", "synthetic",
            "--ckpt_dir", f"{tmp}/c"], tmp, expect_ok=False, timeout=120)
    out = p.stdout + p.stderr
    for needed in ("srun --mpi=pmix", "mpirun"):
        if needed not in out:
            raise Failure(f"srun -n 2 without a plugin: the error does not name `{needed}`:\n{out}")


# ---- the job scripts ------------------------------------------------------------------------------

def slurm_sbatch_train(tmp):
    """sbatch --wait scripts/slurm/train.sbatch --device cpu --data synthetic --epochs 1"""
    env = dict(ENV, DDP_BIN=f"{BIN}/06_full")
    sh(["sbatch", "--wait", "--output", f"{tmp}/out.txt", f"{ROOT}/scripts/slurm/train.sbatch",
        "--device", "cpu", "--data", "synthetic", "--epochs", "1", "--metrics", f"{tmp}/m{{rank}}.jsonl"],
       tmp, env=env)
    out = open(f"{tmp}/out.txt").read()
    if "srun --mpi=pmix" not in out or "done:" not in out:
        raise Failure(f"train.sbatch: no CPU launch or no 'done' line:\n{out}")
    d = digests(f"{tmp}/m", 2)
    if len(set(d)) != 1 or not os.path.isfile(f"{tmp}/checkpoints/06_full/checkpoint.bin"):
        raise Failure(f"train.sbatch: replicas {d}, or no checkpoints/06_full/checkpoint.bin in the "
                      f"submit folder\n{out}")


def slurm_sbatch_workshop(tmp):
    """workshop.sbatch: two participants' jobs side by side, own ports and checkpoint folders"""
    env = dict(ENV, DDP_BIN=f"{BIN}/06_full", DDP_RUNS=f"{tmp}/runs")
    args = flags(1, save_interval=1)
    procs = [subprocess.Popen(["sbatch", "--wait", "--output", f"{tmp}/out{i}.txt",
                               f"{ROOT}/scripts/slurm/workshop.sbatch"] + args, cwd=tmp, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i in range(2)]
    for p in procs:
        if p.wait(timeout=300) != 0:
            raise Failure(f"workshop.sbatch failed:\n{p.stdout.read()}")
    ports, dirs = set(), set()
    for i in range(2):
        out = open(f"{tmp}/out{i}.txt").read()
        line = [l for l in out.splitlines() if l.startswith("workshop.sbatch: job")]
        if not line or "done:" not in out:
            raise Failure(f"workshop.sbatch: no job line or no 'done' line:\n{out}")
        w = line[0].split()
        ports.add(w[4])
        dirs.add(w[6])
        if not os.path.isfile(os.path.join(w[6], "checkpoint.bin")):
            raise Failure(f"workshop.sbatch: no checkpoint in its folder {w[6]}")
    if len(ports) != 2 or len(dirs) != 2:
        raise Failure(f"two workshop jobs shared a port or a folder: ports {ports}, folders {dirs}")


# ---- failures -------------------------------------------------------------------------------------

def job_state(job):
    p = sh(["squeue", "-h", "-j", job, "-o", "%T"], None, expect_ok=None)
    return p.stdout.strip()


def slurm_scancel_resume(tmp):
    """scancel mid-run: every rank stops at the same step and saves, the checkpoint is intact, --resume
    continues exactly"""
    args = flags(6, save_interval=1, dataset_size=4096)
    ck = f"{tmp}/cancelled"
    job = sh(["sbatch", "--parsable", "-n", "2", "--output", f"{tmp}/job.txt", "--wrap",
              " ".join(["srun", "--mpi=pmix", f"{BIN}/06_full"] + args + ["--ckpt_dir", ck])],
             tmp).stdout.strip().split(";")[0]
    end = time.time() + 120
    while not os.path.isfile(f"{ck}/checkpoint.bin") and time.time() < end:
        time.sleep(0.05)
    if not os.path.isfile(f"{ck}/checkpoint.bin"):
        raise Failure(f"job {job} wrote no checkpoint in 120 s:\n{open(f'{tmp}/job.txt').read()}")
    sh(["scancel", job], tmp)
    t0 = time.time()
    if not wait_gone(ck, 30):
        raise Failure(f"scancel {job}: ranks {rank_pids(ck)} still run 30 s later")
    gone = time.time() - t0
    log = open(f"{tmp}/job.txt").read()
    # scancel sends SIGTERM first: the trainers' preemption (common/ckpt/preempt.h) stops every rank after
    # the same step and writes the checkpoint; a run that ended without it was not cancelled at all.
    if "preempted:" not in log:
        raise Failure(f"job {job}: no 'preempted:' line after scancel (finished before it, or killed "
                      f"outright):\n{log}")
    hdr, params = read_checkpoint(f"{ck}/checkpoint.bin")
    if not 1 <= hdr["epoch"] < 6:
        raise Failure(f"the checkpoint left by the cancelled job says epoch {hdr['epoch']}")
    sh(["srun", "--mpi=pmix", "-n", "2", f"{BIN}/06_full"] + args +
       ["--ckpt_dir", ck, "--resume", f"{ck}/checkpoint.bin", "--metrics", f"{tmp}/r{{rank}}.jsonl"], tmp)
    sh(["srun", "--mpi=pmix", "-n", "2", f"{BIN}/06_full"] + args +
       ["--ckpt_dir", f"{tmp}/straight", "--metrics", f"{tmp}/u{{rank}}.jsonl"], tmp)
    r, u = digests(f"{tmp}/r", 2), digests(f"{tmp}/u", 2)
    if len(set(r)) != 1 or r[0] != u[0]:
        raise Failure(f"resumed from epoch {hdr['epoch']}: {r}, uninterrupted: {u}")
    print(f"scancel: ranks gone {gone:.1f} s after scancel; resumed from epoch {hdr['epoch']}, digest {r[0]}")


def slurm_task_killed(tmp):
    """SIGKILL of one task: the job ends within --timeout and no rank is left"""
    timeout = 20
    ck = f"{tmp}/killed"
    cmd = ["srun", "--mpi=pmix", "-n", "2", f"{BIN}/06_full"] + flags(1000) + \
        ["--ckpt_dir", ck, "--timeout", str(timeout)]
    p = subprocess.Popen(cmd, cwd=tmp, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        end = time.time() + 60
        victim = None
        while victim is None and time.time() < end and p.poll() is None:
            for pid in rank_pids(ck):
                try:
                    if environ_of(pid).get(b"SLURM_PROCID") == b"1":
                        victim = pid
                except OSError:
                    pass
            time.sleep(0.1)
        if victim is None:
            raise Failure(f"rank 1 of `{' '.join(cmd)}` never appeared")
        time.sleep(1.0)  # inside training
        os.kill(victim, 9)
        t0 = time.time()
        try:
            out, _ = p.communicate(timeout=timeout + 15)
        except subprocess.TimeoutExpired:
            raise Failure(f"srun still runs {timeout + 15} s after rank 1 was killed (--timeout {timeout})")
        took = time.time() - t0
        if p.returncode == 0:
            raise Failure(f"srun exited 0 after rank 1 was killed\n{out}")
        if not wait_gone(ck, 5):
            raise Failure(f"ranks {rank_pids(ck)} left after srun ended")
        if took > timeout:
            raise Failure(f"the job took {took:.1f} s to end, more than --timeout {timeout}\n{out}")
        print(f"task killed: srun ended {took:.1f} s after SIGKILL of rank 1, exit {p.returncode}")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


SCENARIOS = {f.__name__: f for f in [
    srun_pmix("06_full", 2), srun_pmix("06_full", 3), srun_pmix("07_zero", 2), srun_pmix("07_zero", 3),
    slurm_srun_no_plugin, slurm_sbatch_train, slurm_sbatch_workshop, slurm_scancel_resume,
    slurm_task_killed]}


def main():
    global ENV
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("scenario", choices=sorted(SCENARIOS))
    a = ap.parse_args()
    ENV = cluster_env()
    if ENV is None:
        print(f"skipped {a.scenario}: no test cluster running ({POINTER} missing: "
              f"see tests/slurm/cluster.sh start)")
        return SKIP
    tmp = tempfile.mkdtemp(prefix=a.scenario + "-")
    try:
        SCENARIOS[a.scenario](tmp)
    except Failure as e:
        print(f"FAILED {a.scenario}: {e}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"ok {a.scenario}: {SCENARIOS[a.scenario].__doc__.strip().splitlines()[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
