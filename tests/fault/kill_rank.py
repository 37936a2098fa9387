#!/usr/bin/env python3
"""Fault injection: SIGKILL one rank of `mpirun -np 2 06_full --device cpu` and check the job ends.

The claim under test (docs/02_init.md, "One rank dies"): a failure on any rank ends every rank, so no rank is left
waiting in a collective. Each trial launches a fresh 2-rank job on synthetic data, kills one rank with
SIGKILL at a chosen point and measures the time from the kill until mpirun exits. Points, in turn:

  train       rank 1, a random delay into training (forward, backward, bucket all-reduces, eval)
  save-writer rank 0 while it writes checkpoint.bin.tmp.PID (from the 2nd save on, so that an earlier
              checkpoint.bin exists and must survive)
  save-peer   rank 1 while rank 0 writes (rank 1 waits in the barrier; mpirun then ends rank 0 mid-write)
  save-after  rank 1 right after a new checkpoint.bin appears under its real name

After every trial: mpirun must have exited non-zero within --timeout seconds (otherwise the trial is a
hang: every process of the job's session is killed), no rank may be left running, the output should
name the killed rank (Open MPI prints "process rank R ... exited on signal 9"), and checkpoint.bin, if
present, must be a complete checkpoint (size and CRC-32 as in common/ckpt/ckpt.h). A stale
checkpoint.bin.tmp.PID next to it is expected after SIGKILL (the writer cannot clean up) and is
counted, not failed: what matters is that the real name never holds a partial file.

Standard library only. Exit status 1 on any hang, zero exit code, orphan rank or bad checkpoint.
Environment: DDP_BIN_DIR (default build/bin), DDP_MPIEXEC (default mpirun), as the harness's (tests/harness/env.py).
Its checkpoint and process helpers are tests/harness/drill.py's.
"""
import argparse
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from tests.harness.drill import Output, kill_all, rank_pids, verify_checkpoint, wait_until  # the helpers it shares

MODES = ["train", "save-writer", "save-peer", "save-after"]

# Training sized to run far longer than any trial: the kill always comes first. Saving uses a large
# model (784-2048-2048-10: a 46 MB checkpoint, ~0.1 s to write and fsync) and a tiny epoch, so that
# checkpoints are written every fraction of a second.
TRAIN_ARGS = ["--data", "synthetic", "--dataset_size", "20000", "--hidden", "512,512", "--epochs", "1000",
              "--bucket_cap_mb", "0.25", "--save_interval", "0", "--log_interval", "1000000"]
SAVE_ARGS = ["--data", "synthetic", "--dataset_size", "1024", "--hidden", "2048,2048", "--epochs", "1000",
             "--save_interval", "1", "--log_interval", "1000000"]


# ---- one trial ----------------------------------------------------------------------------------------

def trial(i, mode, a, rng):
    """Runs one trial; returns a dict of what happened."""
    work = tempfile.mkdtemp(prefix=f"kill_rank-{i}-")
    ckdir = os.path.join(work, f"ck-{os.getpid()}-{i}")  # unique: finds this trial's ranks
    os.mkdir(ckdir)
    args = TRAIN_ARGS if mode == "train" else SAVE_ARGS
    cmd = [a.mpiexec, "-np", "2", a.bin, "--device", "cpu", "--ckpt_dir", ckdir] + args
    env = dict(os.environ, OMPI_MCA_rmaps_base_oversubscribe="1", OPENBLAS_NUM_THREADS="1")
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env.setdefault("OMPI_MCA_btl", "self,vader")
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                         start_new_session=True, cwd=work)
    out = Output(p.stdout)
    r = {"trial": i, "mode": mode, "problems": []}
    real, victim, point = os.path.join(ckdir, "checkpoint.bin"), None, None
    try:
        if not out.wait_for("model:", 60):
            raise RuntimeError("the job did not start training within 60 s")
        pids = wait_until(lambda: (lambda d: d if len(d) == 2 else None)(rank_pids(ckdir)), 10)
        if not pids:
            raise RuntimeError("could not find both ranks' pids")
        tmp_exists = lambda: any(n.startswith("checkpoint.bin.tmp.") for n in os.listdir(ckdir))
        if mode == "train":
            victim, delay = 1, rng.uniform(0.0, 1.5)
            time.sleep(delay)
            point = f"{delay:.2f} s into training"
        elif mode in ("save-writer", "save-peer"):
            # save-writer waits for the second save so that a previous checkpoint.bin must survive.
            victim = 0 if mode == "save-writer" else 1
            if mode == "save-writer" and not wait_until(lambda: os.path.exists(real), 60, 0.002):
                raise RuntimeError("no first checkpoint within 60 s")
            if not wait_until(tmp_exists, 60):
                raise RuntimeError("no checkpoint.bin.tmp.* appeared within 60 s")
            delay = rng.uniform(0.0, 0.05)  # the write+fsync takes ~0.1 s here
            time.sleep(delay)
            point = f"{delay * 1e3:.0f} ms into writing"
        else:  # save-after
            victim = 1
            before = os.stat(real).st_ino if os.path.exists(real) else None
            if not wait_until(lambda: os.path.exists(real) and os.stat(real).st_ino != before, 60):
                raise RuntimeError("no new checkpoint.bin within 60 s")
            point = "right after checkpoint.bin appeared"
        if p.poll() is not None:
            raise RuntimeError(f"mpirun exited ({p.returncode}) before the kill")
        os.kill(pids[victim], signal.SIGKILL)
        t_kill = time.monotonic()
        try:
            rc = p.wait(timeout=a.timeout)
            r["seconds"] = time.monotonic() - t_kill
            r["rc"] = rc
        except subprocess.TimeoutExpired:
            r["seconds"], r["rc"] = None, None
            r["problems"].append(f"hang: mpirun still running {a.timeout:.0f} s after the kill")
            kill_all(p.pid, ckdir)
            p.wait(timeout=30)
        if r["rc"] == 0:
            r["problems"].append("mpirun exited 0 after a rank was killed")
        # mpirun may exit while a rank it killed is still ending (seen beside 2 busy loops: 0.2 s was too
        # short): an orphan is a rank that still runs 10 s after it
        wait_until(lambda: not rank_pids(ckdir), 10, poll=0.05)
        left = rank_pids(ckdir)
        if left:
            r["problems"].append(f"ranks still running 10 s after mpirun exited: {left}")
            kill_all(p.pid, ckdir)
    except Exception as e:  # noqa: BLE001 -- any setup failure is a failed trial, and must clean up
        r["problems"].append(f"setup: {e}")
        kill_all(p.pid, ckdir)
        p.wait(timeout=30)
    text = out.text()
    r["victim"], r["point"] = victim, point
    m = re.search(r"process rank (\d+) with PID \d+ on node \S+ exited on signal (\d+)", text)
    r["named"] = (int(m.group(1)), int(m.group(2))) if m else None
    if victim is not None and (m is None or int(m.group(1)) != victim):
        r["problems"].append(f"the output does not name the killed rank {victim} as killed")
    r["ckpt"] = "absent"
    if os.path.exists(real):
        bad = verify_checkpoint(real)
        r["ckpt"] = "ok" if bad is None else f"BAD: {bad}"
        if bad:
            r["problems"].append(f"checkpoint.bin is not a complete checkpoint: {bad}")
    elif mode == "save-writer":
        r["problems"].append("the previous checkpoint.bin disappeared")
    r["stale_tmp"] = sum(n.startswith("checkpoint.bin.tmp.") for n in os.listdir(ckdir))
    if r["problems"] and a.verbose:
        r["output"] = text
    if r["problems"] and a.keep:
        print(f"  kept {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return r


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=20, help="number of trials, modes in turn (default 20)")
    ap.add_argument("--timeout", type=float, default=30.0,
                    help="seconds after the kill within which mpirun must exit (default 30)")
    ap.add_argument("--modes", default=",".join(MODES), help=f"comma-separated subset of {MODES}")
    ap.add_argument("--bin", default=os.path.join(os.environ.get("DDP_BIN_DIR", "build/bin"), "06_full"))
    ap.add_argument("--mpiexec", default=os.environ.get("DDP_MPIEXEC", "mpirun"))
    ap.add_argument("--seed", type=int, default=None, help="seed of the random kill points")
    ap.add_argument("--keep", action="store_true", help="keep the work directory of failed trials")
    ap.add_argument("-v", "--verbose", action="store_true", help="print the job's output of failed trials")
    a = ap.parse_args(argv)
    a.bin = os.path.abspath(a.bin)
    modes = a.modes.split(",")
    if any(m not in MODES for m in modes) or not os.access(a.bin, os.X_OK):
        ap.error(f"unknown mode in {modes} or {a.bin} is not an executable")
    seed = a.seed if a.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    print(f"kill_rank: {a.trials} trials, timeout {a.timeout:.0f} s, seed {seed}, {a.bin}")
    results = []
    for i in range(a.trials):
        r = trial(i, modes[i % len(modes)], a, rng)
        results.append(r)
        secs = "-" if r.get("seconds") is None else f"{r['seconds']:.2f} s"
        print(f"  {i:3d} {r['mode']:<11} kill rank {r['victim']} {r['point'] or ''}: exit {r.get('rc')} "
              f"after {secs}; named {r['named']}; checkpoint {r['ckpt']}, stale tmp {r['stale_tmp']}"
              + "".join(f"\n      PROBLEM: {q}" for q in r["problems"]), flush=True)
        if r.get("output"):
            print("      " + r["output"].replace("\n", "\n      "))
    times = [r["seconds"] for r in results if r.get("seconds") is not None]
    hangs = sum(any(q.startswith("hang") for q in r["problems"]) for r in results)
    codes = {}
    for r in results:
        codes[r.get("rc")] = codes.get(r.get("rc"), 0) + 1
    failed = [r for r in results if r["problems"]]
    print(f"trials {len(results)}, hangs {hangs}, exit codes {codes}, "
          f"time to exit max {max(times) if times else float('nan'):.2f} s / "
          f"mean {sum(times) / len(times) if times else float('nan'):.2f} s, "
          f"checkpoints verified {sum(r['ckpt'] == 'ok' for r in results)}, "
          f"stale tmp files {sum(r['stale_tmp'] for r in results)}, failed trials {len(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
