"""Step 09's live recovery under scripts/launch.sh --ft: a replica dies or freezes, the others go on.

Each scenario names the invariant it proves (docs/09_live.md):
  I1  no sample lost or taken twice within an epoch across a shrink and a heal: the committed blocks of
      each epoch tile its positions, each block's samples are shared by the world of its step, and every
      sample is trained once (the padding's repeats aside);
  I2  shrink = resume: the survivors of a kill at step k+1 log the same losses and end with the same
      digest, bit for bit, as the smaller world --resume'd from step k's checkpoint;
  I3  the failed step is committed nowhere: every step appears once, in order, and the step that failed
      is the smaller world's step (its loss is the resumed run's), no partial gradient applied;
  I6  bounded recovery: after a SIGKILL the survivors' next quorum comes within --join_timeout + 1 s
      (measured phases printed); after a SIGSTOP within max(--ft_op_timeout, --heartbeat_timeout) +
      --join_timeout + 1 s;
  I7  below --min_replicas: the survivor ends with its own status (76), the cause named;
  I5  heal = resume: a replacement (launch.sh --ft --replace) joins at step j; then all replicas are
      bit-identical, and the run ends as a 3-rank --resume from step j's state, bit for bit;
  I8  quorums are isolated: the frozen replica, resumed after the others formed a new quorum, is refused
      with a message (status 78), never hung;
  I9  a replica whose parameters silently differ: the next quorum is refused, naming the replicas.
The replica to fail signals itself as it starts the chosen step (test hook DDP_TEST_FT_KILL=REPLICA:STEP[:stop]),
so that the step that failed is known; the held-out drills kill from outside, at any moment.
"""
import os
import re
import signal
import subprocess
import time

from tests.harness.drill import Output
from tests.harness.env import SEED, BIN, LAUNCH_SH, Failure
from tests.harness.launch import env_launch_env, run
from tests.harness.results import digests, metrics
from tests.harness.scenario import scenario

# 515 samples, G = 96 at 3 ranks: 6 steps an epoch (the last block short), 12 in all; 63 hidden units.
ARGS = ["--device", "cpu", "--data", "synthetic", "--dataset_size", "515", "--hidden", "63", "--lr", "0.05",
        "--momentum", "0.9", "--batch_size", "32", "--epochs", "2", "--log_interval", "1000",
        "--save_interval", "0", "--seed", SEED]
# The timeout hierarchy of the drills: a frozen peer is seen within 2 s.
FT = ["--ft_op_timeout", "2", "--heartbeat_timeout", "1", "--join_timeout", "0.5", "--ft_quorum_timeout", "20"]
REFUSED = 76  # steps/09_live/ft.h: FT_EXIT_REFUSED
LEFT_OUT = 78  # FT_EXIT_LEFT_OUT


# The drills with a replacement run long enough for it to start, load its data and join on a loaded
# machine (each step paced to 30 ms by DDP_TEST_SLOW_RANK): 12 epochs of 6 steps, 2.2 s at least.
REPLACED_EPOCHS = 12


def epochs(n):
    """ARGS with --epochs n."""
    args = list(ARGS)
    args[args.index("--epochs") + 1] = str(n)
    return args


def live(tmp, tag, np, extra=(), kill=None, replace=False, env_extra=None, args=ARGS):
    """Starts `launch.sh --ft [--replace] -n np 09_live`; returns (Popen, Output) (stdout and stderr
    together)."""
    env = dict(env_launch_env(), LIGHTHOUSE_LOG=f"{tmp}/{tag}_lighthouse.jsonl", **(env_extra or {}))
    if kill:
        env["DDP_TEST_FT_KILL"] = kill
    cmd = [LAUNCH_SH, "--ft"] + (["--replace"] if replace else []) + ["-n", str(np), os.path.join(BIN, "09_live")]
    cmd += args + FT + list(extra) + ["--metrics", f"{tmp}/{tag}_{{rank}}.jsonl"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                         start_new_session=True)
    return p, Output(p.stdout)


def finish(p, out, timeout=240):
    """The launch's exit status and output, ending it (and failing) when it outlives `timeout`."""
    try:
        rc = p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        raise Failure(f"the live launch hung for {timeout} s:\n{out.text()}")
    return rc, out.text()


def step_losses(path):
    steps = metrics(path)[0]
    return [s["step"] for s in steps], [s["loss"] for s in steps]


def recovery_times(text):
    """Each survivor's printed phases: [(detect, quorum, reconnect)]."""
    return [tuple(map(float, m)) for m in
            re.findall(r"-> \d+; detect ([\d.]+) s, quorum ([\d.]+) s, reconnect ([\d.]+) s", text)]


def shrink_and_resume(tmp, tag, extra=()):
    """I2's drill with the flags `extra`: a 3-rank run stopped after step 3 (its checkpoint) and resumed at
    2 ranks, and 3 replicas under --ft whose replica 2 dies as it starts step 4. Fails unless the survivors
    finish and equal the resumed run from step 4 on: the same steps and losses, one digest for all.
    Returns (the live run's output, its steps, its digest)."""
    run("09_live", ARGS + list(extra) + ["--max_steps", "3", "--save_interval", "1", "--ckpt_dir", f"{tmp}/ck"],
        np=3, launcher="launch")
    run("09_live", ARGS + list(extra) + ["--resume", f"{tmp}/ck/checkpoint.bin", "--ckpt_dir", f"{tmp}/r",
                                         "--metrics", f"{tmp}/res_{{rank}}.jsonl"], np=2, launcher="launch")
    p, out = live(tmp, tag, 3, extra=extra, kill="2:4")
    rc, text = finish(p, out)
    if rc != 0:
        raise Failure(f"{' '.join(extra)}: the survivors did not finish (status {rc}):\n{text}")
    steps, losses = step_losses(f"{tmp}/{tag}_0.jsonl")
    rsteps, rlosses = step_losses(f"{tmp}/res_0.jsonl")
    got, want = digests(f"{tmp}/{tag}_", 2), digests(f"{tmp}/res_", 2)
    if rsteps != steps[3:] or rlosses != losses[3:] or set(got) != set(want) or len(set(got)) != 1:
        raise Failure(f"{' '.join(extra)}: shrink != resume (I2): losses from step 4 {losses[3:6]}... vs the "
                      f"resumed run's {rlosses[:3]}... (steps {rsteps[:3]}...); digests {got} vs {want}")
    return text, steps, got[0]


@scenario(processors=2, labels=("fault", "parity"), needs=("gloo",), timeout=300)
def live_shrink_equals_resume(tmp):
    """3 replicas, replica 2 SIGKILLed as it starts step 4: replicas 0 and 1 commit steps 1..12 once each
    and end with the digest and losses of a 2-rank run --resume'd from the 3-rank run's step-3
    checkpoint (I2, I3); their new quorum comes within --join_timeout + 1 s (I6)."""
    text, steps, digest = shrink_and_resume(tmp, "live")
    for r in (0, 1):
        if f"(replica {r}): step 4: " not in text or "-> step 4 not committed" not in text:
            raise Failure(f"replica {r} did not report its failed step 4:\n{text}")
    if "replica 2 exited on SIGKILL" not in text:
        raise Failure(f"launch.sh did not name the dead replica:\n{text}")
    if steps != list(range(1, 13)):
        raise Failure(f"the survivors committed steps {steps}, want 1..12 once each, in order (I3)")
    times = recovery_times(text)
    if len(times) != 2 or any(q + c > 0.5 + 1.0 for _, q, c in times):
        raise Failure(f"recovery phases {times}: want 2 survivors, quorum + reconnect within --join_timeout "
                      f"0.5 + 1 s (I6):\n{text}")
    print(f"killed at step 4: survivors = 2-rank resume from step 3, digest {digest}; phases (detect, quorum, "
          f"reconnect) {times}")


@scenario(processors=2, labels=("fault", "parity"), needs=("gloo",), timeout=300)
def live_no_failure(tmp):
    """Under --ft without a failure step 09 ends with the digest and losses of its run without --ft (I0)."""
    run("09_live", ARGS + ["--metrics", f"{tmp}/plain_{{rank}}.jsonl"], np=3, launcher="launch")
    p, out = live(tmp, "ft", 3)
    rc, text = finish(p, out)
    if rc != 0:
        raise Failure(f"--ft without a failure exited {rc}:\n{text}")
    if digests(f"{tmp}/ft_", 3) != digests(f"{tmp}/plain_", 3) or \
            step_losses(f"{tmp}/ft_0.jsonl") != step_losses(f"{tmp}/plain_0.jsonl"):
        raise Failure(f"--ft changed the run: {digests(f'{tmp}/ft_', 3)} vs {digests(f'{tmp}/plain_', 3)}")
    print(f"--ft, no failure: digest {digests(f'{tmp}/ft_', 3)[0]} as without --ft")


@scenario(processors=2, labels=("fault",), needs=("gloo",), timeout=300)
def live_frozen_replica(tmp):
    """Replica 2 of 3 SIGSTOPs itself as it starts step 4: the others' collective times out
    (--ft_op_timeout 2), the lighthouse drops the silent replica (--heartbeat_timeout 1), and the two go
    on within the hierarchy's bound (I6). Resumed (SIGCONT) once they did, the late replica is refused
    by the lighthouse and ends with status 78 (left out), never hung (I8)."""
    p, out = live(tmp, "frozen", 3, kill="2:4:stop")
    try:
        if not out.wait_for("SIGSTOP at the start of step 4", 120):
            raise Failure(f"replica 2 never stopped:\n{out.text()}")
        t0 = time.monotonic()
        if not out.wait_for("quorum 2 = replicas [0, 1]", 30):
            raise Failure(f"no quorum without the frozen replica within 30 s:\n{''.join(out.lines)}")
        took = time.monotonic() - t0
        pid = int(re.search(r"replica 2 \(pid (\d+)\): test hook", "".join(out.lines)).group(1))
        os.kill(pid, signal.SIGCONT)
    except Failure:
        os.killpg(p.pid, signal.SIGKILL)
        raise
    rc, text = finish(p, out)
    bound = max(2, 1) + 0.5 + 1.0
    if took > bound + 2.0:  # seen from outside, through the launcher's pipe: 2 s of slack for a loaded machine
        raise Failure(f"the survivors' quorum came {took:.1f} s after the stop, bound {bound} s (I6):\n{text}")
    if rc != 0 or f"replica 2 exited with status {LEFT_OUT}" not in text:
        raise Failure(f"want the survivors to finish (0) and replica 2 refused ({LEFT_OUT}); got {rc}:\n{text}")
    if not re.search(r"replica 2: the lighthouse refused a quorum: .*not a member of quorum", text):
        raise Failure(f"the late replica's refusal does not say why (I8):\n{text}")
    steps, _ = step_losses(f"{tmp}/frozen_0.jsonl")
    if steps != list(range(1, 13)):
        raise Failure(f"the survivors committed steps {steps}, want 1..12")
    print(f"frozen at step 4: quorum of the other two {took:.2f} s later (bound {bound} s); the late replica "
          "refused with status 78")


@scenario(processors=2, labels=("fault",), needs=("gloo",), timeout=300)
def live_below_min_replicas(tmp):
    """--min_replicas 2 at 2 replicas, replica 1 killed at step 3: replica 0 cannot train on alone; it ends
    with status 76 and the lighthouse's reason, and commits no step after 2 (I7)."""
    p, out = live(tmp, "min", 2, extra=["--min_replicas", "2"], kill="1:3")
    rc, text = finish(p, out)
    if rc != REFUSED:
        raise Failure(f"want status {REFUSED} (no quorum of --min_replicas 2), got {rc}:\n{text}")
    if not re.search(r"replica 0: the lighthouse refused a quorum: quorum impossible: 1 live replica.*"
                     r"--min_replicas 2", text):
        raise Failure(f"the refusal does not name the cause (I7):\n{text}")
    with open(f"{tmp}/min_0.jsonl") as f:
        steps = [int(m) for m in re.findall(r'"type": ?"step".*?"step": ?(\d+)', f.read())]
    if steps != [1, 2]:
        raise Failure(f"replica 0 committed steps {steps}, want 1 and 2 only (I7)")
    print("alone below --min_replicas 2: status 76, cause named")


@scenario(processors=2, labels=("fault",), needs=("gloo", "mpi"), timeout=120)
def live_refuses_mpi_and_bad_timeouts(tmp):
    """Live recovery refuses MPI with one line saying why, and a timeout hierarchy out of order naming the
    pair (issue 44: what the course teaches about ULFM and pytorch/torchtitan#2899)."""
    env = dict(env_launch_env(), DDP_LIGHTHOUSE="127.0.0.1:1")
    p = subprocess.run([os.path.join(BIN, "09_live"), "--backend", "mpi"] + ARGS, capture_output=True,
                       text=True, env=env, timeout=60)
    if p.returncode != 2 or "MPI would need ULFM" not in p.stderr:
        raise Failure(f"--backend mpi under --ft: want status 2 and the ULFM line, got {p.returncode}:\n{p.stderr}")
    p = subprocess.run([os.path.join(BIN, "09_live")] + ARGS + ["--ft_op_timeout", "40"], capture_output=True,
                       text=True, env=env, timeout=60)
    if p.returncode != 2 or "--ft_quorum_timeout 30 must exceed --ft_op_timeout 40 + --join_timeout 1" not in p.stderr:
        raise Failure(f"an out-of-order hierarchy: want status 2 naming the pair, got {p.returncode}:\n{p.stderr}")
    p = subprocess.run([os.path.join(BIN, "09_live")] + ARGS + ["--timeout", "20"], capture_output=True,
                       text=True, env=env, timeout=60)
    if p.returncode != 2 or "--timeout 20 must exceed --ft_quorum_timeout 30" not in p.stderr:
        raise Failure(f"--timeout below --ft_quorum_timeout: want status 2, got {p.returncode}:\n{p.stderr}")
    print("MPI refused (ULFM); the hierarchy's pairs named")


@scenario(processors=2, labels=("fault", "parity"), needs=("gloo",), timeout=300)
def live_replace_heals(tmp):
    """12 epochs at 3 replicas (each step paced to 30 ms by DDP_TEST_SLOW_RANK, so that a replacement
    starts within the run); replica 2 SIGKILLed at step 4 and started again by launch.sh --ft --replace.
    Its new incarnation joins at some step j and heals from replica 0: then all three end with one digest,
    and the run equals, bit for bit, a 2-rank --resume from step 3 to step j followed by a 3-rank
    --resume from step j (I5, with I2 before the join)."""
    args = epochs(REPLACED_EPOCHS)
    p, out = live(tmp, "heal", 3, kill="2:4", replace=True, env_extra={"DDP_TEST_SLOW_RANK": "0:30"}, args=args)
    rc, text = finish(p, out)
    if rc != 0:
        raise Failure(f"the replaced run did not finish (status {rc}):\n{text}")
    # It joins the survivors' quorum 2 when it asks before they do (then the world never shrank), else
    # quorum 3, after steps at 2 ranks: both are heal = resume, from step j.
    m = re.search(r"lighthouse: quorum ([23]) = replicas \[0, 1, 2\], max_step (\d+), world ([23]) -> 3", text)
    if not m or "replica 2 (incarnation 1): healed at step" not in text:
        raise Failure(f"the replacement did not join and heal:\n{text}")
    j, shrank = int(m.group(2)), m.group(3) == "2"
    got = digests(f"{tmp}/heal_", 3)
    if len(set(got)) != 1:
        raise Failure(f"after the heal at step {j} the replicas differ (I5): {got}\n{text}")
    run("09_live", args + ["--max_steps", "3", "--save_interval", "1", "--ckpt_dir", f"{tmp}/ck"], np=3,
        launcher="launch")
    start = f"{tmp}/ck/checkpoint.bin"
    if shrank:
        run("09_live", args + ["--resume", start, "--max_steps", str(j), "--save_interval", "1",
                               "--ckpt_dir", f"{tmp}/ck2"], np=2, launcher="launch")
        start = f"{tmp}/ck2/checkpoint.bin"
    run("09_live", args + ["--resume", start, "--ckpt_dir", f"{tmp}/r",
                           "--metrics", f"{tmp}/res_{{rank}}.jsonl"], np=3, launcher="launch")
    want = digests(f"{tmp}/res_", 3)
    steps, losses = step_losses(f"{tmp}/heal_0.jsonl")
    rsteps, rlosses = step_losses(f"{tmp}/res_0.jsonl")
    if set(got) != set(want) or losses[j:] != rlosses or steps != list(range(1, 6 * REPLACED_EPOCHS + 1)):
        raise Failure(f"heal != resume (I5): joined at step {j}; digests {got[0]} vs the resumed run's {want[0]}; "
                      f"losses after it {losses[j:j + 3]}... vs {rlosses[:3]}...; steps {steps[:3]}..{steps[-1]}")
    how = "after steps at 2 ranks" if shrank else "the survivors' quorum"
    print(f"replica 2 replaced: joined at step {j} ({how}), healed; digest {got[0]} = the resumed runs' (I5)")


@scenario(processors=2, labels=("fault",), needs=("gloo",), timeout=300)
def live_digest_check(tmp):
    """Replica 1's first parameter is corrupted at step 2 (DDP_TEST_FT_CORRUPT): nothing notices until
    replica 2 dies at step 4; then replicas 0 and 1, both at step 3, report different digests and the
    lighthouse refuses their quorum, naming both (I9); they end with status 76."""
    p, out = live(tmp, "spoil", 3, kill="2:4", env_extra={"DDP_TEST_FT_CORRUPT": "1:2"})
    rc, text = finish(p, out)
    if rc != REFUSED:
        raise Failure(f"want status {REFUSED} (the quorum refused), got {rc}:\n{text}")
    if not re.search(r"refused a quorum: replicas disagree at step 3: replica 0 digest [0-9a-f]{16}, "
                     r"replica 1 digest [0-9a-f]{16}", text):
        raise Failure(f"the refusal does not name the replicas that disagree (I9):\n{text}")
    print("a corrupted replica: quorum refused, replicas 0 and 1 named")


def committed(tmp, tag):
    """Every committed step's records (DDP_TEST_SAMPLES): {(epoch, step): [(cursor, G, W, rank, ids)]}."""
    steps = {}
    pat = re.compile(r"epoch (\d+) step (\d+) cursor (\d+) G (\d+) W (\d+) rank (\d+):(.*)")
    for name in sorted(os.listdir(tmp)):
        if not name.startswith(f"{tag}_") or not name.endswith(".txt"):
            continue
        with open(os.path.join(tmp, name)) as f:
            for line in f:
                m = pat.fullmatch(line.rstrip("\n"))
                if not m:
                    raise Failure(f"{name}: not a record: {line!r}")
                e, st, c, g, w, r = map(int, m.groups()[:6])
                ids = [int(x) for x in m.group(7).split(",") if x.strip()]
                steps.setdefault((e, st), []).append((c, g, w, r, ids))
    return steps


def check_tiling(steps, epochs, what):
    """I1 over the records of committed(): raises Failure naming the first gap, overlap or lost sample."""
    if sorted(s for _, s in steps) != list(range(1, 6 * epochs + 1)):
        raise Failure(f"{what}: committed steps {sorted(s for _, s in steps)}: want 1..{6 * epochs}, each once")
    for epoch in range(epochs):
        blocks, ids = [], []
        for (e, st), recs in sorted(steps.items()):
            if e != epoch:
                continue
            cursors, gs, worlds = {c for c, *_ in recs}, {g for _, g, *_ in recs}, {w for _, _, w, *_ in recs}
            ranks = sorted(r for *_, r, _ in recs)
            if len(cursors) != 1 or len(gs) != 1 or len(worlds) != 1:
                raise Failure(f"{what}: step {st}: the ranks disagree on its block: cursors {cursors}, G {gs}, "
                              f"W {worlds}")
            (c,), (g,), (w,) = cursors, gs, worlds
            if ranks != list(range(w)):
                raise Failure(f"{what}: step {st}: records of ranks {ranks}, its world has {w} (a rank's samples "
                              "lost or a rank counted twice)")
            got = [i for *_, r_ids in recs for i in r_ids]
            if len(got) != g:
                raise Failure(f"{what}: step {st}: {len(got)} samples over its {w} ranks, its block has {g}")
            blocks.append((c, g))
            ids += got
        at = 0
        for c, g in blocks:
            if c != at:
                raise Failure(f"{what}: epoch {epoch + 1}: the block at {c} follows one that ended at {at}: a gap "
                              f"or an overlap (blocks {blocks})")
            at = c + g
        if at != 516:
            raise Failure(f"{what}: epoch {epoch + 1}: the blocks end at {at}, the epoch has 516 positions")
        once = set(ids)
        if once != set(range(515)) or len(ids) != 516:
            lost = sorted(set(range(515)) - once)
            raise Failure(f"{what}: epoch {epoch + 1}: {len(ids)} samples trained, {len(once)} distinct (never: "
                          f"{lost[:8]}...); want all 515, one of them twice (the padding)")


@scenario(processors=2, labels=("fault",), needs=("gloo",), timeout=300)
def live_no_sample_lost(tmp):
    """3 replicas for 12 epochs of 515 samples (G = 96), replica 2 killed at step 4: once with the two
    survivors going on (the rest of epoch 1 shared by 2 ranks, 48 samples each), once replaced by
    launch.sh --ft --replace. Every replica lists the samples of each step it committed (DDP_TEST_SAMPLES).
    Per epoch the committed blocks [cursor, cursor + G) tile the epoch's 516 positions with no gap or
    overlap; each step's samples come from every rank of its world, G in all; and every one of the 515
    samples is trained exactly once an epoch but for the one position of padding (I1)."""
    args = epochs(REPLACED_EPOCHS)
    for tag, replace in (("shrunk", False), ("replaced", True)):
        p, out = live(tmp, tag, 3, kill="2:4", replace=replace, args=args,
                      env_extra={"DDP_TEST_SLOW_RANK": "0:30", "DDP_TEST_SAMPLES": f"{tmp}/{tag}"})
        rc, text = finish(p, out)
        if rc != 0 or (replace and "replica 2 (incarnation 1): healed at step" not in text):
            raise Failure(f"{tag}: the run did not finish (status {rc}), or no replacement healed:\n{text}")
        if not replace and "epoch 1 resharded at position 288 of 516: G = 96 over 2 ranks" not in text:
            raise Failure(f"{tag}: no reshard to 2 ranks at position 288:\n{text}")
        check_tiling(committed(tmp, tag), REPLACED_EPOCHS, tag)
    print("12 epochs across a kill, with and without a replacement: every block once, every sample once (I1)")


@scenario(processors=2, labels=("fault", "parity"), needs=("gloo",), timeout=300)
def live_per_rank_batch(tmp):
    """--ft_batch per_rank: replica 2 of 3 killed at step 4; the rest of epoch 1 keeps G = 96 (its
    cursor counts blocks of 96), and epoch 2 takes 32 per rank, G = 64: 9 steps instead of 6, the change
    said in one line. The survivors equal a 2-rank --resume from step 3 with --ft_batch per_rank, bit
    for bit (I2 under per_rank)."""
    text, steps, digest = shrink_and_resume(tmp, "pr", ["--ft_batch", "per_rank"])
    if "--ft_batch per_rank: 64 samples per step from here on (was 96)" not in text:
        raise Failure(f"the change of the global batch was not said:\n{text}")
    if steps != list(range(1, 16)):
        raise Failure(f"committed steps {steps}: want 1..15 (6 of G 96, then 9 of G 64)")
    print(f"--ft_batch per_rank: G 96 to the end of epoch 1, then 64 (15 steps); = the resumed run, digest {digest}")
