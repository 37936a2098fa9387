#!/usr/bin/env python3
"""Fault drill (issue 40, V9 end to end): a SIGTERM that arrives while rank 0 writes a checkpoint that takes
longer than the watchdog's grace after a preemption signal (WATCHDOG_SIGNAL_GRACE_S, 5 s).

Rank 1 waits in the barrier behind rank 0's write. The grace lets a rank stuck in a collective end at once
after a SIGTERM instead of after --timeout; it must count from the signal, not from the start of the wait:
counted from the wait's start, rank 1's barrier was already older than 5 s when the signal came and the
watchdog ended it at once (exit 1, the save lost). The drill makes the write long with SIGSTOP: once rank 0
writes (checkpoint.bin.tmp.PID exists, after a first checkpoint.bin), it stops rank 0, lets the barrier
grow past the grace, sends SIGTERM to every rank, and lets the write go on 2 s more (SIGCONT to rank 0),
7.5 s of writing in all. The job must end with exit 75
(common/ckpt/preempt.h) after the save, with the "preempted" line, no watchdog line, a complete checkpoint.bin,
and a --resume auto run from it must end with the param_digest of a run nothing interrupted (bit for bit).

Usage: python3 -m tests.fault.preempt_slow_save [--step 06_full] [--bin_dir build/bin] [--mpiexec mpirun]
Prints "ok ..." and exits 0, "FAILED ..." and exits 1. Standard library only; the job, checkpoint and
process helpers are tests/harness/drill.py's.
"""
import argparse
import os
import re
import shutil
import signal
import sys
import tempfile
import time

from tests.harness.drill import (BIG, PREEMPTED, Failure, Job, digest, mpi_cmd, reference, verify_checkpoint,
                                 wait_ranks, wait_until)

GRACE_S = 5.0  # common/dist/watchdog.h: WATCHDOG_SIGNAL_GRACE_S
# How long rank 0 stays stopped before the signal: past the grace, so that rank 1's wait is older than it
# when the signal comes. The length of the write is the point here, not a condition to await.
STOPPED_S = GRACE_S + 1.5
# How long the write goes on after the signal: 20 of the watchdog's 100 ms ticks, well inside the grace.
# Rank 0 stays stopped that long after rank 1's SIGTERM, or until rank 1 has ended (the old rule ends it
# at its next tick): without it, a write that ends a few ms after the signal could finish before any
# tick, and the drill would pass on the old rule too.
AFTER_S = 2.0


def running(pid):
    """Whether pid is alive and not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def writing(ck):
    return any(n.startswith("checkpoint.bin.tmp.") for n in os.listdir(ck))


def stop_mid_write(job, ck, rank0):
    """SIGSTOPs rank 0 while it writes a checkpoint (after a first one exists); returns True once it is
    stopped with the write unfinished, False when the job ended first."""
    if not wait_until(lambda: os.path.exists(os.path.join(ck, "checkpoint.bin")) or job.p.poll() is not None,
                      120, 0.002) or job.p.poll() is not None:
        return False
    while job.p.poll() is None:
        if not wait_until(lambda: writing(ck) or job.p.poll() is not None, 120, 0.0005):
            raise Failure(f"never saw a checkpoint being written:\n{job.text()[-2000:]}")
        os.kill(rank0, signal.SIGSTOP)
        if writing(ck):
            return True
        os.kill(rank0, signal.SIGCONT)  # the write ended between the two looks: catch the next one
    return False


def drill(a, work):
    # BIG's own epochs: 1; more here, so that the job is still writing checkpoints when caught
    args = [v if BIG[i - 1] != "--epochs" else "4" for i, v in enumerate(BIG)]
    ref = reference(a, work, a.step, 2, args)
    ck = os.path.join(work, "slow_save")
    job = Job(mpi_cmd(a, a.step, 2, args, ck), ck, work)
    try:
        pids = wait_ranks(job, 2)
        if not stop_mid_write(job, ck, pids[0]):
            raise Failure(f"the job ended before rank 0 could be stopped mid-write:\n{job.text()[-2000:]}")
        t0 = time.monotonic()
        time.sleep(STOPPED_S)
        os.kill(pids[1], signal.SIGTERM)
        os.kill(pids[0], signal.SIGTERM)  # pending until it continues
        wait_until(lambda: not running(pids[1]), AFTER_S, 0.01)
        os.kill(pids[0], signal.SIGCONT)
        stopped = time.monotonic() - t0
        rc = job.wait(120)
    finally:
        job.stop()
    text = job.text()
    m = re.search(r"preempted: SIGTERM or SIGUSR1 on \d+ of \d+ ranks; stopping after step (\d+)", text)
    watch = [l for l in text.splitlines() if "watchdog:" in l]
    if rc != PREEMPTED or not m or watch:
        raise Failure(f"SIGTERM to both ranks after rank 0's write was stopped for {STOPPED_S:g} s (rank 1 "
                      f"waiting behind it): exit {rc} (expected {PREEMPTED}, the save completed), "
                      f"{'a watchdog line: ' + watch[0] if watch else 'no watchdog line'}, "
                      f"{'the preempted line' if m else 'NO preempted line'}:\n{text[-3000:]}")
    real = os.path.join(ck, "checkpoint.bin")
    bad = verify_checkpoint(real) if os.path.exists(real) else "missing"
    if bad:
        raise Failure(f"exit {PREEMPTED}, but checkpoint.bin is not complete: {bad}\n{text[-3000:]}")
    job = Job(mpi_cmd(a, a.step, 2, args, ck), ck, work)
    try:
        rc = job.wait(300)
    finally:
        job.stop()
    after = job.text()
    if rc != 0 or "resumed from" not in after or digest(after) != ref:
        raise Failure(f"the resume after the preemption: exit {rc}, digest {digest(after)}, the uninterrupted "
                      f"run's {ref}:\n{after[-3000:]}")
    print(f"  rank 0 stopped {stopped:.1f} s mid-write (grace {GRACE_S:g} s), SIGTERM {STOPPED_S:g} s in: every rank stopped "
          f"after step {m.group(1)}, exit {PREEMPTED}, checkpoint complete; --resume auto ended with digest "
          f"{ref} as uninterrupted")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--step", default="06_full", choices=["06_full", "07_zero", "08_fsdp"])
    ap.add_argument("--bin_dir", default=os.environ.get("DDP_BIN_DIR", "build/bin"))
    ap.add_argument("--mpiexec", default=os.environ.get("DDP_MPIEXEC", "mpirun"))
    a = ap.parse_args(argv)
    a.hook = []
    a.bin_dir = os.path.abspath(a.bin_dir)
    work = tempfile.mkdtemp(prefix="preempt_slow_save-")
    t0 = time.monotonic()
    try:
        print(f"preempt_slow_save: {a.step} at 2 ranks", flush=True)
        drill(a, work)
    except Failure as e:
        print(f"FAILED preempt_slow_save: {e}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"ok preempt_slow_save ({time.monotonic() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
