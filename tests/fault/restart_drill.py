#!/usr/bin/env python3
"""Fault drills: a job that loses a rank and is restarted ends with the parameters of one that never failed.

Each drill runs a real job on synthetic data (`mpirun -np W build/bin/STEP --device cpu ... --save_steps N
--resume auto --ckpt_dir D`) next to a reference run of the same command that nothing interrupts, and
compares the final param_digest lines bit for bit. Drills:

  kill        under scripts/restart.sh, SIGKILL one rank (drawn from the seed) when the progress line of a
              step drawn from the seed appears; one trial per seed
  save        under scripts/restart.sh, SIGKILL rank 0 while it writes the checkpoint (a
              checkpoint.bin.tmp.PID exists, after a first checkpoint.bin)
  startup     under scripts/restart.sh, SIGKILL the last rank as soon as MPI is up (before any snapshot; a kill
              inside MPI_Init can leave Open MPI 4.1's mpirun waiting for good with the others exited,
              which no supervisor sees: it hung this drill's attempt 0 for good once, in a -j4 suite)
  preempt     SIGTERM to one rank (no supervisor): every rank stops after the same step (the checkpoint's
              step, each rank's final metrics record), mpirun exits 75, and --resume auto continues exactly
  limit       a corrupt checkpoint under --resume auto: each attempt refuses it (never a fresh start), and
              restart.sh stops after --max_restarts with the failure's status and the "limit" line
  supervisor  SIGTERM to restart.sh: the attempt ends, nothing of it is left, no further attempt, exit 143
  torchrun    torchrun --max_restarts (--max-restarts) at one rank, a rank SIGKILLed; exit 77 (skipped) without torchrun
  metrics     the kill drill with --metrics and --trace: each rank's metrics file keeps attempt 0's steps, an
              "attempt" record, then attempt 1's, and its final record names the attempt and the step it
              resumed from; attempt 0's trace stays, attempt 1's is FILE.attempt1.json (both were truncated)
  unsaved     SIGTERM to one rank with --save_interval 0 and no --save_steps: no checkpoint is written (another
              run's file in --ckpt_dir stays), the output says so, and the exit status is 143, not 75; with
              --save_interval 5 the same stop saves and exits 75
  settings    --resume auto with other --lr, --momentum, --weight_decay and --epochs resumes (a checkpoint does
              not record them) and says that they are not compared; another --seed is refused

With --comm_hook powersgd every run of step 06 compresses its gradients with PowerSGD (from step 3), whose
state each rank saves beside the checkpoint: a kill must never leave a checkpoint without its states.
Every process a drill starts is stopped by the drill (by pid and session), also when it fails.
Standard library only; the drills' core (the job, the kill at a step, kill_rank.py's process helpers) is
tests/harness/drill.py's. Exit 1 on any failure, 77 when skipped.
Environment: DDP_BIN_DIR (default build/bin), DDP_MPIEXEC (default mpirun).
"""
import argparse
import json
import os
import random
import re
import shutil
import signal
import struct
import sys
import tempfile
import time

from tests.harness.drill import (BIG, PREEMPTED, RESTART, SMALL, Failure, Job, digest, kill_and_compare, kill_at_step,
                                 mpi_cmd, reference, steps_per_epoch, supervised, verify_checkpoint, wait_ranks,
                                 wait_until)
from tests.harness.launch import torchrun_rendezvous


def drill_kill(a, work):
    refs = {}
    for seed in a.seeds:
        rng = random.Random(seed)
        at, victim = rng.randint(3, 24), rng.randrange(a.np)
        if a.step not in refs:
            refs[a.step] = reference(a, work, a.step, a.np, SMALL)
        t0 = time.monotonic()
        resumed = kill_at_step(a, work, f"kill-{seed}", SMALL, refs[a.step], at, victim,
                               late_after=steps_per_epoch(a.np))
        print(f"  seed {seed}: SIGKILL rank {victim} at step {at}; restarted from {resumed}; "
              f"digest {refs[a.step]} as uninterrupted ({time.monotonic() - t0:.1f} s, start-up included)", flush=True)


def drill_save(a, work):
    ref = reference(a, work, a.step, a.np, BIG)
    job, ck = supervised(a, work, "save", a.step, a.np, BIG)
    real = os.path.join(ck, "checkpoint.bin")
    try:
        pids = wait_ranks(job, a.np)
        if not wait_until(lambda: os.path.exists(real), 120, 0.002):
            raise Failure(f"no first checkpoint:\n{job.text()[-2000:]}")
        tmp = lambda: any(n.startswith("checkpoint.bin.tmp.") for n in os.listdir(ck))
        if not wait_until(tmp, 120, 0.0005):
            raise Failure(f"never saw a checkpoint being written:\n{job.text()[-2000:]}")
        bad = verify_checkpoint(real)
        resumed = kill_and_compare(job, ref, pids[0], what="kill while writing")
        print(f"  SIGKILL rank 0 while it wrote the checkpoint (the previous one: {bad or 'complete'}); "
              f"restarted from {resumed}; digest {ref} as uninterrupted", flush=True)
    finally:
        job.stop()


def drill_startup(a, work):
    ref = reference(a, work, a.step, a.np, SMALL)
    job, ck = supervised(a, work, "startup", a.step, a.np, SMALL)
    try:
        pids = wait_ranks(job, a.np)
        if not job.wait_for(f"rank 0 of {a.np} ", 120):  # setup()'s line: every rank is past MPI_Init
            raise Failure(f"the ranks never got past MPI_Init:\n{job.text()[-2000:]}")
        if os.path.exists(os.path.join(ck, "checkpoint.bin")):
            raise Failure("a snapshot existed before the start-up kill")
        kill_and_compare(job, ref, pids[a.np - 1], what="kill during start-up")
        after = job.text().split("restart.sh: attempt 0 failed", 1)[-1]
        if "starting from the beginning" not in after or "resumed from" in after:
            raise Failure(f"expected attempt 1 to start from the beginning:\n{job.text()[-2000:]}")
        print(f"  SIGKILL rank {a.np - 1} during start-up, before any snapshot: attempt 1 started from the "
              f"beginning; digest {ref} as uninterrupted", flush=True)
    finally:
        job.stop()


def final_records(path_fmt, np):
    steps = []
    for r in range(np):
        with open(path_fmt.replace("{rank}", str(r))) as f:
            last = [l for l in f if '"type":"final"' in l]
        steps.append(int(re.search(r'"steps":(\d+)', last[-1]).group(1)) if last else None)
    return steps


def sigterm_at(job, a, at, victim):
    """Waits for `job`'s progress line of step `at`, sends SIGTERM to rank `victim` (a preemption) and
    waits for the job's end; returns (exit status, output)."""
    try:
        if not job.wait_for(f" step {at}/", 120):
            raise Failure(f"no progress line for step {at}:\n{job.text()[-2000:]}")
        os.kill(wait_ranks(job, a.np)[victim], signal.SIGTERM)
        rc = job.wait(120)
    finally:
        job.stop()
    return rc, job.text()


def drill_preempt(a, work):
    ref = reference(a, work, a.step, a.np, SMALL)
    rng = random.Random(a.seeds[0])
    at, victim = rng.randint(3, 24), rng.randrange(a.np)
    ck = os.path.join(work, "preempt")
    metrics = os.path.join(work, "m{rank}.jsonl")
    rc, text = sigterm_at(Job(mpi_cmd(a, a.step, a.np, SMALL + ["--metrics", metrics], ck), ck, work), a, at,
                          victim)
    m = re.search(r"preempted: SIGTERM or SIGUSR1 on 1 of \d+ ranks; stopping after step (\d+)", text)
    if rc != PREEMPTED or not m:
        raise Failure(f"SIGTERM to rank {victim}: exit {rc} (expected {PREEMPTED}) or no 'preempted' line:\n"
                      f"{text[-3000:]}")
    stop = int(m.group(1))
    with open(os.path.join(ck, "checkpoint.bin"), "rb") as f:
        head = f.read(32)
    saved = struct.unpack_from("<Q", head, 24)[0]
    ranks = final_records(metrics, a.np)
    if saved != stop or ranks != [stop] * a.np:
        raise Failure(f"stopped after step {stop}, checkpoint at step {saved}, ranks' last steps {ranks}")
    job = Job(mpi_cmd(a, a.step, a.np, SMALL, ck), ck, work)
    try:
        rc = job.wait(300)
    finally:
        job.stop()
    if rc != 0 or digest(job.text()) != ref:
        raise Failure(f"the resume after the preemption: exit {rc}, digest {digest(job.text())}, "
                      f"the uninterrupted run's {ref}")
    print(f"  SIGTERM to rank {victim} at step {at}: every rank stopped after step {stop} (checkpoint and "
          f"final records agree), exit {PREEMPTED}; --resume auto ended with digest {ref} as uninterrupted")


def drill_limit(a, work):
    ck = os.path.join(work, "limit")
    os.mkdir(ck)
    with open(os.path.join(ck, "checkpoint.bin"), "wb") as f:  # the magic and version, then garbage
        f.write(b"DDPCKPT\0" + b"\x02\0\0\0" + b"not a checkpoint" * 8)
    job = Job([RESTART, "--max_restarts", "1", "--"] + mpi_cmd(a, a.step, a.np, SMALL, ck), ck, work)
    try:
        rc = job.wait(120)
    finally:
        job.stop()
    text = job.text()
    limit = re.search(r"restart\.sh: attempt 1 failed with status (\d+); the limit of 1 restarts was reached", text)
    if rc == 0 or not limit or int(limit.group(1)) != rc:
        raise Failure(f"expected the limit line and its status as the exit status, got {rc}:\n{text[-3000:]}")
    if "starting from the beginning" in text or "restart.sh: attempt 0 failed" not in text:
        raise Failure(f"a corrupt checkpoint must fail every attempt, never start fresh:\n{text[-3000:]}")
    print(f"  a corrupt checkpoint.bin under --resume auto: both attempts refused it; restart.sh exited {rc} "
          f"after '{limit.group(0)}'")


def drill_supervisor(a, work):
    args = SMALL + ["--epochs", "100"]  # the last --epochs wins: far longer than the drill
    job, ck = supervised(a, work, "supervisor", a.step, a.np, args)
    try:
        if not job.wait_for(" step 3/", 120):
            raise Failure(f"no progress line for step 3:\n{job.text()[-2000:]}")
        os.kill(job.p.pid, signal.SIGTERM)
        rc = job.wait(60)
        left = job.tagged()
    finally:
        job.stop()
    text = job.text()
    if rc != 128 + signal.SIGTERM or "got SIGTERM; stopping attempt 0; no further attempt" not in text:
        raise Failure(f"SIGTERM to restart.sh: exit {rc} (expected 143) or no 'no further attempt' line:\n"
                      f"{text[-3000:]}")
    if left or "restart 1 of" in text:
        raise Failure(f"processes of the attempt left running ({left}) or a further attempt:\n{text[-3000:]}")
    print(f"  SIGTERM to restart.sh during training: exit {rc}, no process of the job left, no further attempt")


def drill_torchrun(a, work):
    torchrun = shutil.which("torchrun")
    if not torchrun:
        print("SKIP: torchrun is not installed (pip install torch): the torchrun --max-restarts drill did not run")
        return 77
    ref = reference(a, work, a.step, 1, SMALL)
    for attempt in range(3):
        ck = os.path.join(work, f"torchrun-{attempt}")
        # --monitor_interval 0.2: the agent notices the killed worker within 0.2 s instead of 5 (its default)
        # torchrun_rendezvous: a free port (a plain torchrun's 29500 is every other torchrun's too)
        # DDP_TEST_SLOW_RANK paces the worker (25 ms before each step's gradient all-reduce; the arithmetic
        # is the reference's): its 128 steps of a few ms ended before the kill at step 20 could land on a
        # busy machine (torchrun's tee stands between the line and this process); now 108 steps, 2.7 s,
        # are left after the line.
        cmd = ["env", "DDP_TEST_SLOW_RANK=0:25", torchrun, *torchrun_rendezvous(), "--nproc_per_node", "1",
               "--max_restarts", "3",
               "--monitor_interval", "0.2",
               "--redirects", "2", "--tee", "1",
               "--no_python", os.path.join(a.bin_dir, a.step), "--device", "cpu"] + SMALL + [
                   "--resume", "auto", "--ckpt_dir", ck]
        job = Job(cmd, ck, work)
        killed = False
        try:
            if not job.wait_for(" step 20/", 120):
                raise Failure(f"no progress line for step 20:\n{job.text()[-2000:]}")
            for p in [p for p in job.tagged() if p != job.p.pid]:
                try:
                    with open(f"/proc/{p}/cmdline", "rb") as f:
                        if not f.read().startswith(os.path.join(a.bin_dir, a.step).encode()):
                            continue
                    os.kill(p, signal.SIGKILL)
                    killed = True
                    break
                except (OSError, ProcessLookupError):  # it ended meanwhile
                    continue
            rc = job.wait(300)
        finally:
            job.stop()
        if job.text().count("global batch:") >= 2:
            break
        if killed and "done:" not in job.text():
            raise Failure(f"torchrun did not restart the worker:\n{job.text()[-3000:]}")
        # Still, a machine busy enough can let the run end before the kill lands: nothing was tested;
        # again (dev/soak.sh counts these lines).
        print("RETRY: torchrun: the worker had ended before the kill: drilled again", flush=True)
    else:
        raise Failure("three times the worker ended before the kill at step 20: the machine is too busy for the drill")
    if rc != 0 or digest(job.text()) != ref:
        raise Failure(f"torchrun --max-restarts: exit {rc}, digest {digest(job.text())}, uninterrupted {ref}")
    print(f"  torchrun --max-restarts 3, the worker SIGKILLed at step 20: digest {ref} as uninterrupted")


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def trace_steps(path):
    """The optimizer steps of a trace's spans (a trace cut short by SIGKILL has no closing brackets)."""
    with open(path) as f:
        return sorted({int(m) for m in re.findall(r'"args": \{"step": (\d+)\}', f.read())})


def drill_metrics(a, work):
    ref = reference(a, work, a.step, a.np, SMALL)
    rng = random.Random(a.seeds[0])
    at, victim = rng.randint(9, 24), rng.randrange(a.np)  # after the first snapshot (step 7)
    metrics, trace = os.path.join(work, "m{rank}.jsonl"), os.path.join(work, "t{rank}.json")
    resumed = kill_at_step(a, work, "metrics", SMALL + ["--metrics", metrics, "--trace", trace], ref, at, victim,
                           fresh=[os.path.join(work, "m*.jsonl"), os.path.join(work, "t*.json")],
                           late_after=steps_per_epoch(a.np))
    start = int(resumed[1]) if resumed != "the start" else 0
    for r in range(a.np):
        path = metrics.replace("{rank}", str(r))
        recs = read_jsonl(path)
        final = [o for o in recs if o["type"] == "final"]
        steps = {o["step"] for o in recs if o["type"] == "step"}
        marks = [i for i, o in enumerate(recs) if o["type"] == "attempt"]
        if len(final) != 1 or recs[-1] is not final[0]:
            raise Failure(f"{path}: {len(final)} final records, the last line {recs[-1]}")
        total = final[0]["steps"]
        if steps != set(range(1, total + 1)):
            raise Failure(f"{path}: the step records cover {min(steps)}..{max(steps)} of 1..{total}: an "
                          f"attempt's lines were lost")
        if (len(marks) != 1 or recs[marks[0]].get("attempt") != 1
                or not any(o["type"] == "step" and o["step"] >= at for o in recs[:marks[0]])):
            raise Failure(f"{path}: expected attempt 0's steps up to {at}, then one attempt record of attempt 1; "
                          f"attempt records at lines {marks}")
        if final[0].get("attempt") != 1 or final[0].get("start_step") != start:
            raise Failure(f"{path}: the final record {final[0]} does not say attempt 1, resumed from step {start}")
        first = trace.replace("{rank}", str(r))
        again = first.replace(".json", ".attempt1.json")
        if not os.path.exists(again) or not os.path.exists(first):
            raise Failure(f"expected attempt 0's trace {first} and attempt 1's {again}: {sorted(os.listdir(work))}")
        try:
            with open(again) as f:
                json.load(f)  # attempt 1 ended normally: a complete document
        except ValueError as e:
            raise Failure(f"{again} is not valid JSON: {e}")
        if trace_steps(first)[:1] not in ([], [0]) or trace_steps(again)[:1] != [start]:
            raise Failure(f"attempt 0's trace has steps {trace_steps(first)[:3]}..., attempt 1's "
                          f"{trace_steps(again)[:3]}... (expected 0 and {start})")
    print(f"  SIGKILL rank {victim} at step {at}, resumed from step {start}: every rank's metrics file holds "
          f"steps 1..{total} (attempt 0's, then attempt 1's), the final record says attempt 1 from step {start}; "
          f"both attempts' traces kept; digest {ref} as uninterrupted")


# --save_interval 0 and no --save_steps: saving is off ("0 = never").
NO_SAVE = ["--data", "synthetic", "--dataset_size", "4096", "--hidden", "128", "--batch_size", "32",
           "--epochs", "100", "--save_interval", "0", "--log_interval", "1"]


def drill_unsaved(a, work):
    rng = random.Random(a.seeds[0])
    at, victim = rng.randint(3, 24), rng.randrange(a.np)
    ck = os.path.join(work, "unsaved")
    os.mkdir(ck)
    other = b"another run's checkpoint: preemption must not replace it"
    with open(os.path.join(ck, "checkpoint.bin"), "wb") as f:
        f.write(other)
    for extra, want_rc in (([], 143), (["--save_interval", "5"], PREEMPTED)):
        metrics = os.path.join(work, f"u{len(extra)}_{{rank}}.jsonl")
        cmd = [a.mpiexec, "-np", str(a.np), os.path.join(a.bin_dir, a.step), "--device", "cpu"] + NO_SAVE + extra + [
            "--ckpt_dir", ck, "--metrics", metrics]
        rc, text = sigterm_at(Job(cmd, ck, work), a, at, victim)
        m = re.search(r"preempted: SIGTERM or SIGUSR1 on 1 of \d+ ranks; stopping after step (\d+)", text)
        stop = int(m.group(1)) if m else None
        ranks = final_records(metrics, a.np)
        with open(os.path.join(ck, "checkpoint.bin"), "rb") as f:
            kept = f.read() == other
        if not extra:
            if rc != want_rc or not m or "saved " in text or "no checkpoint written" not in text or not kept:
                raise Failure(f"SIGTERM with saving off: exit {rc} (expected {want_rc}), the other run's file "
                              f"{'kept' if kept else 'REPLACED'}:\n{text[-3000:]}")
            if ranks != [stop] * a.np:
                raise Failure(f"stopped after step {stop}, but the ranks' final records say {ranks}")
            print(f"  saving off: SIGTERM to rank {victim} at step {at}: every rank stopped after step {stop}, "
                  f"nothing written (the other run's checkpoint.bin kept), exit {rc}")
        else:
            if rc != want_rc or not m or f"saved {ck}/checkpoint.bin" not in text or kept:
                raise Failure(f"SIGTERM with --save_interval 5: exit {rc} (expected {want_rc}) or no "
                              f"checkpoint:\n{text[-3000:]}")
            print(f"  --save_interval 5: the same SIGTERM saved the checkpoint at step {stop}; exit {rc}")


def run_job(a, args, ck, work):
    job = Job(mpi_cmd(a, a.step, a.np, args, ck), ck, work)
    try:
        rc = job.wait(300)
    finally:
        job.stop()
    return rc, job.text()


def drill_settings(a, work):
    ck = os.path.join(work, "settings")
    rc, text = run_job(a, SMALL + ["--max_steps", "10"], ck, work)
    if rc != 0 or "saved " not in text:
        raise Failure(f"the first run (--max_steps 10) exited {rc} or saved nothing:\n{text[-3000:]}")
    other = ["--lr", "0.2", "--momentum", "0.5", "--weight_decay", "0.001", "--epochs", "2"]
    rc, text = run_job(a, SMALL + other, ck, work)
    note = ("not recorded, so this run's apply: --lr, --momentum, --weight_decay, --epochs and every other "
            "flag")
    if rc != 0 or "resumed from" not in text or note not in text:
        raise Failure(f"other --lr, --momentum, --weight_decay and --epochs: exit {rc}, expected a resume and "
                      f"the note '{note}':\n{text[-3000:]}")
    rc, text = run_job(a, SMALL + ["--seed", "7"], ck, work)
    if rc == 0 or "starting from the beginning" in text or "resumed from" in text:
        raise Failure(f"another --seed must be refused, got exit {rc}:\n{text[-3000:]}")
    print(f"  --resume auto: other --lr, --momentum, --weight_decay and --epochs resumed, and the output said "
          f"they are not compared; another --seed was refused (exit {rc})")


DRILLS = {"kill": drill_kill, "save": drill_save, "startup": drill_startup, "preempt": drill_preempt,
          "limit": drill_limit, "supervisor": drill_supervisor, "torchrun": drill_torchrun,
          "metrics": drill_metrics, "unsaved": drill_unsaved, "settings": drill_settings}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("drill", choices=sorted(DRILLS))
    ap.add_argument("--step", default="06_full", choices=["06_full", "07_zero", "08_fsdp", "09_live"])
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--seeds", default="1", help="comma-separated seeds of the kill points (default 1)")
    ap.add_argument("--bin_dir", default=os.environ.get("DDP_BIN_DIR", "build/bin"))
    ap.add_argument("--mpiexec", default=os.environ.get("DDP_MPIEXEC", "mpirun"))
    ap.add_argument("--comm_hook", choices=["allreduce", "powersgd"], default="allreduce",
                    help="step 06's --comm_hook in every run (powersgd: from step 3, its state saved with the "
                         "checkpoints)")
    a = ap.parse_args(argv)
    a.hook = [] if a.comm_hook == "allreduce" else ["--comm_hook", a.comm_hook, "--powersgd_start_iter", "3"]
    a.bin_dir = os.path.abspath(a.bin_dir)
    a.seeds = [int(s) for s in a.seeds.split(",")]
    work = tempfile.mkdtemp(prefix=f"restart_drill-{a.drill}-")
    t0 = time.monotonic()
    try:
        print(f"restart_drill {a.drill}: {a.step} at {a.np} ranks, seeds {a.seeds}"
              + (f", --comm_hook {a.comm_hook}" if a.hook else ""), flush=True)
        rc = DRILLS[a.drill](a, work) or 0
    except Failure as e:
        print(f"FAILED {a.drill}: {e}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if rc == 0:
        print(f"ok {a.drill} ({time.monotonic() - t0:.1f} s)")
    return rc


if __name__ == "__main__":
    sys.exit(main())
