"""The claims of exercise 09 (scripts/check_exercise.sh 09): step 09's live drills, on the program built from
the learner's train.c. Claims only, not CTest tests: the same drills run on the step itself as
tests/fault/live_drill.py's scenarios, whose helpers (live, finish, committed, check_tiling, step_losses)
these import. Each failure ends with the likely mistake (exercises/checker/hints.py, step "09").

  live09_shrink_equals_resume  I2, I3: the vote before the update
  live09_no_sample_lost        I1: the reshard from the cursor (and the vote, and the heal's position)
  live09_heal_equals_resume    I5: the heal (parameters, momentum, position)

Each kills replica 2 of 3 as it starts step 4 (DDP_TEST_FT_KILL=2:4), under scripts/launch.sh --ft, with the
drills' small run (515 samples, G = 96: 6 steps an epoch); a few seconds each on 2 cores.
"""
import re

from exercises.checker.hints import LIVE_BEFORE_VOTE, LIVE_HEAL_MOMENTUM, LIVE_HEAL_PARAMS, LIVE_HEAL_STEP, hint
from tests.fault.live_drill import (ARGS, REPLACED_EPOCHS, check_tiling, committed, epochs, finish, live,
                                    step_losses)
from tests.harness.env import Failure
from tests.harness.families import own_binary
from tests.harness.launch import run
from tests.harness.results import digests
from tests.harness.scenario import register, scenario

STEP = "09_live"
LIMIT = 120  # seconds a live launch may take before it counts as hung (the drills take 2 to 5 s)

register(own_binary(STEP), ctest=False)  # the exercise checker's first claim


def failed(what, text, extra=""):
    """A Failure for a run that went wrong: `what`, the likely mistake when the output tells it, the output's
    end."""
    cause = hint(text, STEP)
    return Failure(what + (f"\nlikely cause: {cause}" if cause else "") + extra + f"\n--- output (end)\n{text[-3000:]}")


def tiling(tmp, tag, n_epochs, what):
    """I1 on a drill's DDP_TEST_SAMPLES records: None, or the Failure with the likely mistake."""
    try:
        recs = committed(tmp, tag)
        by_step = {}
        for (e, st), rs in recs.items():
            by_step.setdefault(st, []).extend((e, c, r) for c, _, _, r, _ in rs)
        split = [st for st, rs in sorted(by_step.items()) if len({(e, c) for e, c, _ in rs}) > 1]
        if split:  # one step, several blocks (or epochs): say so first, whatever check_tiling would find first
            raise Failure(f"{what}: step {split[0]}: the ranks disagree on its block: (epoch, cursor, rank) "
                          f"{sorted(set(by_step[split[0]]))}")
        check_tiling(recs, n_epochs, what)
    except Failure as f:
        cause = hint(str(f), STEP)
        return Failure(str(f) + (f"\nlikely cause: {cause}" if cause else ""))
    return None


def joined(text):
    """(the quorum's id, its newest step j, the world before) where replica 2's replacement joined, or None."""
    found = re.findall(r"lighthouse: quorum (\d+) = replicas \[0, 1, 2\], max_step (\d+), world ([23]) -> 3", text)
    return next((tuple(map(int, q)) for q in found if q[0] != "1"), None)  # quorum 1: the launch's


def heal_step(text):
    """None, or the Failure of a replacement whose heal did not bring it to the quorum's newest step."""
    q = joined(text)
    m = re.search(r"replica 2 \(incarnation 1\): healed at step (\d+)", text)
    if q and m and int(m.group(1)) != q[1]:
        return Failure(f"replica 2's replacement joined quorum {q[0]}, whose newest step is {q[1]}, and reported "
                       f"itself healed at step {m.group(1)}\nlikely cause: {LIVE_HEAL_STEP}")
    return None


@scenario(ctest=False, processors=2, needs=("gloo",))  # a claim of exercise 09
def live09_shrink_equals_resume(tmp):
    """3 replicas, replica 2 SIGKILLed as it starts step 4: both survivors report step 4 not committed, commit
    steps 1..12 once each, and end with the losses and digest of a 2-rank run --resume'd from the 3-rank run's
    step-3 checkpoint, bit for bit (I2, I3: the failed step applied nowhere)."""
    p, out = live(tmp, "live", 3, kill="2:4", env_extra={"DDP_TEST_SAMPLES": f"{tmp}/live"})
    rc, text = finish(p, out, LIMIT)
    if rc != 0:
        raise failed(f"the survivors of replica 2, killed at step 4, did not finish (status {rc})", text)
    for r in (0, 1):
        if f"(replica {r}): step 4: " not in text or "-> step 4 not committed" not in text:
            raise failed(f"replica {r} did not report step 4, in which replica 2 died, as not committed", text)
    steps, losses = step_losses(f"{tmp}/live_0.jsonl")
    if steps != list(range(1, 13)):
        raise failed(f"the survivors committed steps {steps}, want 1..12 once each, in order (I3)", text)
    run(STEP, ARGS + ["--max_steps", "3", "--save_interval", "1", "--ckpt_dir", f"{tmp}/ck"], np=3,
        launcher="launch")
    run(STEP, ARGS + ["--resume", f"{tmp}/ck/checkpoint.bin", "--ckpt_dir", f"{tmp}/r",
                      "--metrics", f"{tmp}/res_{{rank}}.jsonl"], np=2, launcher="launch")
    rsteps, rlosses = step_losses(f"{tmp}/res_0.jsonl")
    got, want = digests(f"{tmp}/live_", 2), digests(f"{tmp}/res_", 2)
    if rsteps == steps[3:] and rlosses == losses[3:] and set(got) == set(want) and len(set(got)) == 1:
        print(f"killed at step 4: the survivors = a 2-rank resume from step 3, digest {got[0]}")
        return
    diff = (f"shrink != resume (I2): from step 4 the survivors logged losses {losses[3:6]}..., the 2-rank run "
            f"resumed from step 3 {rlosses[:3]}...; digests {got} vs {want}")
    wrong = tiling(tmp, "live", 2, "the survivors' samples")
    if wrong:
        raise Failure(f"{diff}\n{wrong}")
    if losses[3] != rlosses[0]:  # the same samples (I1 holds), yet step 4 started from other parameters
        raise Failure(f"{diff}\nlikely cause: {LIVE_BEFORE_VOTE}")
    raise Failure(diff)


@scenario(ctest=False, processors=2, needs=("gloo",))  # a claim of exercise 09
def live09_no_sample_lost(tmp):
    """3 replicas for 12 epochs, replica 2 killed at step 4: once the two survivors go on (the rest of epoch 1
    resharded over 2 ranks from position 288), once launch.sh --ft --replace starts it again. Every replica
    lists each committed step's samples (DDP_TEST_SAMPLES): per epoch the committed blocks tile its 516
    positions, each block's samples come from every rank of its world, and each of the 515 samples is trained
    once (the one position of padding aside) (I1)."""
    args = epochs(REPLACED_EPOCHS)
    for tag, replace in (("shrunk", False), ("replaced", True)):
        p, out = live(tmp, tag, 3, kill="2:4", replace=replace, args=args,
                      env_extra={"DDP_TEST_SLOW_RANK": "0:30", "DDP_TEST_SAMPLES": f"{tmp}/{tag}"})
        rc, text = finish(p, out, LIMIT)
        if rc != 0:
            raise failed(f"{tag}: the run did not finish (status {rc})", text)
        wrong = heal_step(text) or tiling(tmp, tag, REPLACED_EPOCHS, f"{tag} ({'replica 2 replaced' if replace else 'the survivors go on'})")
        if wrong:
            raise wrong
    print("12 epochs across a kill, with and without a replacement: every block once, every sample once (I1)")


@scenario(ctest=False, processors=2, needs=("gloo",))  # a claim of exercise 09
def live09_heal_equals_resume(tmp):
    """12 epochs at 3 replicas (steps paced to 30 ms, so that a replacement starts within the run); replica 2
    SIGKILLed at step 4 and started again by launch.sh --ft --replace. Its new incarnation joins at some step
    j and heals from replica 0: every member must then log the same blocks, all three end with one digest,
    and the run equals, bit for bit, a --resume from step j's state (I5)."""
    args = epochs(REPLACED_EPOCHS)
    p, out = live(tmp, "heal", 3, kill="2:4", replace=True, args=args,
                  env_extra={"DDP_TEST_SLOW_RANK": "0:30", "DDP_TEST_SAMPLES": f"{tmp}/heal"})
    rc, text = finish(p, out, LIMIT)
    if rc != 0 and "replicas disagree at step" in text:  # before the join: the vote (hints.diagnose_disagree)
        raise failed(f"the run with a replacement did not finish (status {rc})", text)
    wrong = heal_step(text)
    if wrong:
        raise wrong
    wrong = tiling(tmp, "heal", REPLACED_EPOCHS, "after the heal")
    if wrong and "disagree on its block" in str(wrong):  # the replacement somewhere else in the epoch
        raise wrong
    if rc != 0:
        raise failed(f"the run with a replacement did not finish (status {rc})", text)
    q = joined(text)
    if not q or "replica 2 (incarnation 1): healed at step" not in text:
        raise failed("the replacement did not join and heal", text)
    j, shrank = q[1], q[2] == 2
    got = digests(f"{tmp}/heal_", 3)
    # the reference: a 3-rank run to step 3, (2 ranks to step j,) then 3 ranks from step j to the end
    run(STEP, args + ["--max_steps", "3", "--save_interval", "1", "--ckpt_dir", f"{tmp}/ck"], np=3,
        launcher="launch")
    start = f"{tmp}/ck/checkpoint.bin"
    if shrank:
        run(STEP, args + ["--resume", start, "--max_steps", str(j), "--save_interval", "1",
                          "--ckpt_dir", f"{tmp}/ck2"], np=2, launcher="launch")
        start = f"{tmp}/ck2/checkpoint.bin"
    run(STEP, args + ["--resume", start, "--ckpt_dir", f"{tmp}/r", "--metrics", f"{tmp}/res_{{rank}}.jsonl"],
        np=3, launcher="launch")
    want = digests(f"{tmp}/res_", 3)
    steps, losses = step_losses(f"{tmp}/heal_0.jsonl")
    rsteps, rlosses = step_losses(f"{tmp}/res_0.jsonl")
    all_steps = list(range(1, 6 * REPLACED_EPOCHS + 1))
    if len(set(got)) == 1 and set(got) == set(want) and losses[j:] == rlosses and steps == all_steps:
        how = "after steps at 2 ranks" if shrank else "the survivors' quorum"
        print(f"replica 2 replaced: joined at step {j} ({how}), healed; digest {got[0]} = the resumed run's (I5)")
        return
    diff = (f"heal != resume (I5): replica 2's replacement joined at step {j}; the replicas' digests {got}, the "
            f"run resumed from step {j}'s state {want[0]}; losses from step {j + 1}: {losses[j:j + 3]}... vs "
            f"{rlosses[:3]}...")
    if wrong:
        raise Failure(f"{diff}\n{wrong}")
    if len(set(got)) > 1 and losses[j:j + 1] == rlosses[:1]:
        # the first step after the join started from the same parameters, the next did not
        raise Failure(f"{diff}\nlikely cause: {LIVE_HEAL_MOMENTUM}")
    if losses[j:j + 1] != rlosses[:1]:
        raise Failure(f"{diff}\nlikely cause: {LIVE_HEAL_PARAMS}")
    raise Failure(diff)
