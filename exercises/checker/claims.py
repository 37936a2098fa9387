"""The claims of exercise 06_fault (scripts/check_exercise.sh 06_fault): the fault drill, one writer,
the barrier after a save, a resume inside a later epoch. Claims only, not CTest tests.
"""
import argparse
import os
import random
import re
import signal
import subprocess
import time

from tests.harness.env import BIN, MPIEXEC, SKIP, dist_args, Failure, small, stop_if_terminated
from exercises.checker.hints import hint
from tests.harness.launch import files_created_in, run
from tests.harness.results import digests, metrics, read_checkpoint
from tests.harness import drill
from tests.harness.scenario import scenario


# ---- the exercise checker ---------------------------------------------------------------------------

# ---- exercise 06_fault: snapshots and resume (scripts/check_exercise.sh 06_fault) ---------------------

def fault_drill_module():
    """The drill of tests/fault/restart_drill.py (its core, tests/harness/drill.py), whose drill the
    exercise's claim runs (imported, not copied)."""
    return drill


FAULT_SEED = 6  # draws the step of the kill and the rank killed


@scenario(ctest=False)  # a claim of exercise 06_fault
def fault06_drill(tmp):
    """The fault drill: a rank SIGKILLed under restart.sh, resumed mid-epoch, ends as if uninterrupted.
    Under scripts/restart.sh, SIGKILL one of 2 ranks of 06_full at a step drawn from a seed; the restart
    resumes inside the epoch and ends with the uninterrupted run's param_digest."""
    rd = fault_drill_module()
    # restart_drill's options
    a = argparse.Namespace(mpiexec=MPIEXEC, bin_dir=os.path.abspath(BIN), hook=[], step="06_full", np=2)
    # restart_drill's SMALL: 64 steps per epoch at 2 ranks, one epoch, a snapshot every 7 steps
    args = rd.SMALL + dist_args("06_full")
    per_epoch = rd.steps_per_epoch(2)
    rng = random.Random(FAULT_SEED)
    at, victim = rng.randint(9, 24), rng.randrange(2)  # after the first snapshot (step 7)
    try:
        ref = rd.reference(a, tmp, "06_full", 2, args)
    except rd.Failure as e:
        cause = hint(str(e), "06_full")
        raise Failure(f"the uninterrupted run failed" + (f"\nlikely cause: {cause}" if cause else "") + f"\n{e}")
    # The epoch lasts well under a second: on a busy machine the kill can land after its end, where even a
    # run without snapshots inside the epoch resumes from the epoch's checkpoint; kill_at_step then drills
    # again (late_after).
    try:
        resumed = rd.kill_at_step(a, tmp, "drill", args, ref, at, victim, late_after=per_epoch,
                                  stop=stop_if_terminated)
    except rd.Failure as e:
        stop_if_terminated()
        text = getattr(e, "text", "")
        after = text.split("restart.sh: attempt 0 failed", 1)[-1]
        resumed_at = re.search(r"resumed from \S+ at epoch (\d+), step (\d+)", after)
        done = re.findall(r"done: (\d+) steps", after)
        first, _, rest = str(e).partition("\n")
        cause = None
        if done and int(done[-1]) > per_epoch and resumed_at:
            cause = (f"the restarted run went on to step {done[-1]}, {int(done[-1]) - per_epoch} steps more than "
                     f"the uninterrupted {per_epoch}: it trained the snapshot's epoch again from its first batch "
                     f"(resume must continue at the saved position, meta.epoch_step, and the snapshot must "
                     f"record it: t->epoch_step)")
        elif hint(text, "06_full"):
            cause = hint(text, "06_full")
        raise Failure(first + (f"\nlikely cause: {cause}" if cause else "") + (f"\n{rest}" if rest else ""))
    if resumed == "the start":
        raise Failure(f"after SIGKILL to rank {victim} at step {at}, attempt 1 started from the beginning: "
                      f"--ckpt_dir held no snapshot, and the {at} steps were trained again\nlikely cause: no "
                      f"snapshot inside the epoch: save one every --save_steps steps (snapshot_due) in run_epoch")
    print(f"SIGKILL to rank {victim} at step {at}; restart.sh restarted; resumed at epoch {resumed[0]}, step "
          f"{resumed[1]}; param_digest {ref} as the uninterrupted run's")


# Flags of the other 06_fault claims: 2 ranks, 2048 synthetic samples, 16 steps per epoch (64 per rank)
FAULT_SMALL = small(dataset_size=2048, log_interval=1) + ["--batch_size", "64"]


@scenario(ctest=False)  # a claim of exercise 06_fault
def fault06_one_writer(tmp):
    """06_full with --save_steps 3 at 2 ranks: one process alone writes every snapshot.
    A writer writes `checkpoint.bin.tmp.<its pid>`, then renames it: one such name per writing process."""
    ck = f"{tmp}/ck"
    os.makedirs(ck)
    seen = files_created_in(ck)
    if seen is None:
        print("skipped: no inotify on this system")
        return SKIP
    run("06_full", FAULT_SMALL + ["--epochs", "2", "--save_steps", "3", "--save_interval", "1", "--ckpt_dir", ck],
        np=2)
    names = [n for n in seen() if n.startswith("checkpoint.bin.tmp.")]
    writers = sorted(set(names))
    if not writers:
        raise Failure("no checkpoint was written (--save_steps 3 --save_interval 1, 2 epochs)")
    if len(writers) != 1:
        raise Failure(f"{len(writers)} processes wrote the snapshots ({', '.join(writers)})\nlikely cause: every "
                      "rank writes the snapshot: the replicas are equal, so only rank 0 should write it "
                      "(`if (t->rank == 0)` in save_checkpoint), and then every rank waits at a barrier")
    print(f"{len(names)} checkpoint writes, all by one process ({writers[0]})")


@scenario(ctest=False)  # a claim of exercise 06_fault
def fault06_barrier(tmp):
    """06_full at 2 ranks: no rank goes on while the checkpoint is being written.
    The writer is stopped (SIGSTOP) in the middle of its write for 3 s: no rank may end its run (write its
    final metrics record) before the file is complete."""
    # A 14 MB checkpoint (784-1024-1024-10), saved once, at the end of the only epoch: the write lasts
    # long enough to be stopped in the act; the stop is found from the writer's temporary file.
    args = small(dataset_size=512, hidden="1024,1024") + [
        "--batch_size", "16", "--epochs", "1", "--save_interval", "1", "--metrics", f"{tmp}/m{{rank}}.jsonl"]
    for attempt in range(3):
        ck = f"{tmp}/ck{attempt}"
        os.makedirs(ck)
        seen = files_created_in(ck)
        if seen is None:
            print("skipped: no inotify on this system")
            return SKIP
        for r in range(2):
            if os.path.exists(f"{tmp}/m{r}.jsonl"):
                os.remove(f"{tmp}/m{r}.jsonl")
        cmd = [MPIEXEC, "-n", "2", os.path.abspath(os.path.join(BIN, "06_full"))] + args + ["--ckpt_dir", ck] + dist_args("06_full")
        with open(f"{tmp}/out", "w") as out:
            p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=tmp)
        writer, went_on, caught = None, [], False
        try:
            deadline = time.time() + 300
            while writer is None and p.poll() is None and time.time() < deadline:
                stop_if_terminated()
                names = [n for n in seen() if n.startswith("checkpoint.bin.tmp.")]
                if names:
                    writer = int(names[0].rsplit(".", 1)[1])
                    try:
                        os.kill(writer, signal.SIGSTOP)
                    except OSError:
                        writer = None
                        break
                else:
                    time.sleep(0.0005)
            if writer is not None:
                caught = not os.path.exists(f"{ck}/checkpoint.bin")  # stopped before its rename
                end = time.time() + 3
                while caught and time.time() < end and not went_on:
                    went_on = [r for r in range(2) if os.path.exists(f"{tmp}/m{r}.jsonl") and
                               '"type":"final"' in open(f"{tmp}/m{r}.jsonl").read()]
                    time.sleep(0.05)
                os.kill(writer, signal.SIGCONT)
            try:
                rc = p.wait(timeout=300)
            except subprocess.TimeoutExpired:
                rc = None
        finally:
            if writer is not None:
                try:
                    os.kill(writer, signal.SIGCONT)
                except OSError:
                    pass
            if p.poll() is None:
                p.kill()
                p.wait()
        stop_if_terminated()
        with open(f"{tmp}/out") as f:
            text = f.read()
        if rc != 0:
            cause = hint(text, "06_full")
            raise Failure((f"likely cause: {cause}\n" if cause else "") +
                          f"{' '.join(cmd)} exited {rc}, expected 0\n--- output\n{text[-3000:]}")
        if writer is None:
            raise Failure(f"no checkpoint was written (--save_interval 1):\n{text[-2000:]}")
        if went_on:
            raise Failure(f"rank {', '.join(map(str, went_on))} ended its run (wrote its final metrics record) "
                          f"while process {writer} was still writing the checkpoint\nlikely cause: no barrier "
                          "after the save: every rank must wait (dist_barrier, outside `if (rank == 0)`) until the "
                          "writer is done, so that none goes on, or reads the file after a restart, before it is "
                          "complete")
        if caught:
            print(f"process {writer} stopped for 3 s in the middle of its checkpoint write: no rank went on")
            return
        # the write ended before the stop landed (a busy machine): a retry, counted by dev/soak.sh
        print(f"RETRY: fault06_barrier: the checkpoint write was over before it could be stopped (try {attempt + 1})",
              flush=True)
    raise Failure("the checkpoint write was over before it could be stopped, 3 times: could not check the barrier")


@scenario(ctest=False)  # a claim of exercise 06_fault
def fault06_resume_mid_epoch(tmp):
    """06_full at 2 ranks: a snapshot inside a later epoch resumes at the next step, not at the epoch's start.
    2 epochs of 16 steps, a snapshot every 6 steps: the one after step 18, 2 steps into epoch 2 (the run then
    stops at step 22 without saving), records its position, and --resume auto runs steps 19..32, ending with
    the uninterrupted run's parameters. (Inside a later epoch the steps done in it, 2, and the global step,
    18, differ: a resume that takes one for the other is seen.)"""
    per_epoch, epochs, every, stop = 2048 // 2 // 64, 2, 6, 22
    snap = stop // every * every  # the last snapshot before the stop: step 18
    epoch, done = divmod(snap, per_epoch)  # epoch 1 (the second), 2 steps into it
    total = per_epoch * epochs
    common = FAULT_SMALL + ["--epochs", str(epochs), "--save_steps", str(every), "--ckpt_dir", f"{tmp}/ck"]
    run("06_full", FAULT_SMALL + ["--epochs", str(epochs), "--metrics", f"{tmp}/a{{rank}}.jsonl"], np=2)
    run("06_full", common + ["--max_steps", str(stop)], np=2)
    ck = f"{tmp}/ck/checkpoint.bin"
    if not os.path.exists(ck):
        raise Failure(f"--save_steps {every} --max_steps {stop} (--save_interval 0): no snapshot was written inside "
                      "an epoch\nlikely cause: run_epoch saves no snapshot every --save_steps steps (snapshot_due, "
                      "then save_checkpoint)")
    hdr, _ = read_checkpoint(ck)
    if (hdr["epoch"], hdr["step"]) != (epoch, snap):
        raise Failure(f"the snapshot taken after step {snap} ({done} steps into epoch {epoch + 1}) records epoch "
                      f"{hdr['epoch']} (counted from 0), step {hdr['step']}")
    if hdr["epoch_step"] != done:
        raise Failure(f"the snapshot taken after step {snap}, {done} steps into epoch {epoch + 1}, records "
                      f"{hdr['epoch_step']} steps done in that epoch, not {done}\nlikely cause: the snapshot does "
                      "not record the position in the epoch: set t->epoch_step (the steps of this epoch done) "
                      "before save_checkpoint")
    out, _ = run("06_full", common + ["--resume", "auto", "--metrics", f"{tmp}/b{{rank}}.jsonl"], np=2)
    steps, _, final = metrics(f"{tmp}/b0.jsonl")
    logged = [s["step"] for s in steps]
    if final["steps"] != total:
        ran = final["steps"] - snap
        if final["steps"] == snap + total - per_epoch * epoch:  # the saved epoch again from its first batch
            cause = (f"{ran} steps after the snapshot: epoch {epoch + 1} again from its first batch, a whole epoch"
                     f"\nlikely cause: resume started the "
                     f"epoch over: take the steps already done in the saved epoch from the checkpoint "
                     f"(t->epoch_step = meta.epoch_step)")
        elif final["steps"] == snap + max(0, per_epoch - snap) + per_epoch * (epochs - 1 - epoch):
            cause = (f"{ran} steps after the snapshot: the rest of epoch {epoch + 1} was skipped\nlikely cause: "
                     f"resume took the global step (meta.step, {snap}) for the steps done in the saved epoch "
                     f"({done}, meta.epoch_step): the two are equal only in the first epoch: "
                     f"t->epoch_step = meta.epoch_step")
        else:
            cause = f"{ran} steps after the snapshot, not {total - snap}"
        raise Failure(f"resumed from the snapshot at step {snap}, the run ended at step {final['steps']}, the "
                      f"uninterrupted one at {total}: {cause}")
    if logged != list(range(snap + 1, total + 1)):
        raise Failure(f"the resumed run logged steps {logged}, expected {snap + 1}..{total}")
    if digests(f"{tmp}/a", 2) != digests(f"{tmp}/b", 2):
        raise Failure(f"resumed at step {snap}: {digests(f'{tmp}/b', 2)}, uninterrupted: {digests(f'{tmp}/a', 2)}")
    print(f"the snapshot at step {snap} recorded epoch {epoch} (counted from 0), {done} steps in; the resume ran "
          f"steps {snap + 1}..{total} and ended with the uninterrupted run's parameters")


# ---- the checker on a workshop seat -----------------------------------------------------------------

@scenario(timeout=120)  # a CTest test (exercise_seat_ports), no claim of an exercise
def exercise_seat_ports(tmp):
    """DDP_PORTS=FIRST-LAST (docs/workshop.md: each seat's range): the MASTER_PORT pairs of the checker's
    Gloo claims (tests/harness/ports.py) lie in it. 3 processes at once reserve a pair each in a range of
    3 pairs: 3 different pairs, all inside; a 4th process finds none and says so, naming the range."""
    import sys
    from tests.harness.ports import port_free
    first = next((p for p in range(29500, 29900, 10) if all(port_free(q) for q in range(p, p + 6))), None)
    if first is None:
        print("skipped: no 6 free consecutive ports from 29500 on")
        return SKIP
    env = dict(os.environ, DDP_PORTS=f"{first}-{first + 5}")
    code = ("import sys, time; from tests.harness.ports import free_master_port; print(free_master_port(), flush=True); "
            "sys.stdin.read()")  # holds its pair until told to end
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    procs = [subprocess.Popen([sys.executable, "-c", code], cwd=root, env=env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    try:
        got = sorted(int(p.stdout.readline() or -1) for p in procs)
        last = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, input="", capture_output=True,
                              text=True, timeout=60)
    finally:
        for p in procs:
            p.communicate(input="", timeout=30)
    if got != [first, first + 2, first + 4]:
        raise Failure(f"DDP_PORTS={first}-{first + 5}: 3 processes at once got MASTER_PORT {got}, expected the 3 pairs "
                      f"of the range ({first}, {first + 2}, {first + 4})")
    if last.returncode == 0 or f"DDP_PORTS={first}-{first + 5}" not in last.stderr:
        raise Failure(f"a 4th process, with the range's 3 pairs taken, exited {last.returncode} "
                      f"({last.stdout.strip()}): it should fail naming DDP_PORTS\n{last.stderr[-1000:]}")
    print(f"DDP_PORTS={first}-{first + 5}: 3 processes reserved {got}; a 4th found none: "
          f"{last.stderr.strip().splitlines()[-1][:160]}")
