"""Scenarios shared by several steps (the step files register them with their CTest properties), and
the models and helpers that several steps' scenarios use.
"""
import os
import re
import subprocess
import time

from tests.harness.env import BIN, MPIEXEC, SMALL, dist_args, Failure, small, stop_if_terminated
from tests.harness.launch import hint, process_tree, run
from tests.harness.parity import diagnose_losses, Mismatch, one_step_from, one_step_parity
from tests.harness.results import digests, metrics, read_checkpoint, tensor_slices


def diagnose_replicas(tmp, step, np):
    """Why the replicas of a same-seed run differ. Every rank started from the same parameters, so
    after one optimizer step exactly the tensors whose gradients were not averaged differ. Step 04
    saves on every rank, so each rank gets a folder of its own (mpiexec's `:` syntax) and the ranks'
    checkpoints are compared tensor by tensor."""
    if not step.startswith("04"):
        return ("likely cause: every rank started from the same seed, so their updates differ: is every "
                "gradient tensor averaged on every rank, every step?")
    cmd = [MPIEXEC]
    for r in range(np):  # 128 samples per rank and batch 128: one step, then the epoch's checkpoint
        cmd += ([":"] if r else []) + ["-n", "1", os.path.join(BIN, step)] + small(dataset_size=128 * np) + [
            "--epochs", "1", "--save_interval", "1", "--ckpt_dir", f"{tmp}/one{r}"] + dist_args(step)
        os.makedirs(f"{tmp}/one{r}", exist_ok=True)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        return f"(a one-step run to find the tensors that differ failed: {p.stderr.strip()[-300:]})"
    head, p0 = read_checkpoint(f"{tmp}/one0/checkpoint.bin")
    others = [read_checkpoint(f"{tmp}/one{r}/checkpoint.bin")[1] for r in range(1, np)]
    differ = [name for name, a, b in tensor_slices(head["sizes"])
              if any(p0[a:b] != q[a:b] for q in others)]
    if not differ:
        return "(after one step the replicas are still identical: they part later)"
    return (f"likely cause: after one step the replicas differ in {', '.join(differ)} and agree "
            f"elsewhere: {'that gradient is' if len(differ) == 1 else 'those gradients are'} not "
            f"averaged over the ranks (average_gradients must all-reduce every layer's weight and bias)")


def replicas_identical(step, np):
    def scenario(tmp):
        run(step, SMALL + ["--epochs", "2", "--metrics", f"{tmp}/m{{rank}}.jsonl"], np=np)
        d = digests(f"{tmp}/m", np)
        if len(set(d)) != 1:
            raise Failure(f"{step} with {np} ranks: replicas differ: {d}\n{diagnose_replicas(tmp, step, np)}")
    scenario.__name__ = f"step{step[:2]}_replicas_np{np}"
    scenario.__doc__ = f"{step} at {np} ranks: every rank ends with bit-identical parameters."
    return scenario


def matches_baseline(step, np):
    def scenario(tmp):
        B = 128 // np

        ref = ("01_single_gpu", 1, ["--batch_size", "128"], None)
        got = (step, np, ["--batch_size", str(B)], None)

        # W local batches of B averaged against one batch of W·B: the same samples (the sampler's
        # stride split of the baseline's permutation), summed in another order: the error model above.
        one_step_parity(tmp, "p", ref, got, SMALL + ["--epochs", "2"], 128 + np,
                        diagnose=lambda side: diagnose_losses(tmp, np, ref, got, SMALL + ["--epochs", "2"], 128 + np))
    scenario.__name__ = f"step{step[:2]}_matches_baseline_np{np}"
    scenario.__doc__ = (f"{step} at {np} ranks x batch {128 // np} takes step 01's steps at batch 128: one step "
                        "from the same state, at the start and after an epoch, agrees within float32 rounding.")
    return scenario


# ---- step 06: the bucketed reducer -------------------------------------------------------------------

# PyTorch's first bucket fills to 1 MiB or more before it closes, so a model of under 1 MiB (SMALL) has
# one bucket at every cap. The bucket tests use 784-16-9728-10 (275,226 parameters, 1.05 MiB):
# bucket 0 is the last two layers (b2, W2, b1, W1: 1.002 MiB); after it, at 0.00005 MiB (52 bytes)
# b0 (64 bytes) and W0 have a bucket each, 3 buckets; at 25 MiB they share the last one, 2 buckets.
BUCKETED = small(hidden="16,9728")
CAPS = ["0.00005", "25"]  # MiB: 3 and 2 buckets


def bucket_replicas(tmp, step, np, args, batches, hint=""):
    """Runs `step` at np ranks for every bucket cap and for grad_accum 1 and 4 (batches: their
    --batch_size); the replicas must end bit-identical."""
    for cap in CAPS:
        for accum, batch in zip(("1", "4"), batches):
            tag = f"c{cap}_a{accum}_"
            run(step, args + ["--bucket_cap_mb", cap, "--grad_accum", accum, "--batch_size", batch,
                              "--metrics", f"{tmp}/{tag}{{rank}}.jsonl"], np=np)
            d = digests(f"{tmp}/{tag}", np)
            if len(set(d)) != 1:
                raise Failure(f"bucket cap {cap} MiB, grad_accum {accum}, {np} ranks: replicas differ {d}{hint}")


def max_steps_resume(step, np):
    def scenario(tmp):
        # 2048 samples, batch 128 at 1 rank (64 at 2): 16 steps an epoch; --max_steps 20 stops 4 steps
        # into epoch 2, saves there, and the resumed run must end exactly as the straight one.
        B = str(128 // np)
        common = SMALL + ["--batch_size", B, "--epochs", "2"]
        run(step, common + ["--metrics", f"{tmp}/a{{rank}}.jsonl"], np=np)
        out, _ = run(step, common + ["--max_steps", "20", "--save_interval", "1", "--ckpt_dir", f"{tmp}/ck"],
                     np=np)
        if "epoch 1, step 20" not in out:
            raise Failure(f"the --max_steps stop did not save a checkpoint 4 steps into epoch 2: {out!r}")
        hdr, _ = read_checkpoint(f"{tmp}/ck/checkpoint.bin")
        if (hdr["epoch"], hdr["step"]) != (1, 20):
            raise Failure(f"the mid-epoch checkpoint records epoch {hdr['epoch']}, step {hdr['step']}")
        run(step, common + ["--resume", f"{tmp}/ck/checkpoint.bin", "--metrics", f"{tmp}/b{{rank}}.jsonl"],
            np=np)
        sa, _, fa = metrics(f"{tmp}/a0.jsonl")
        sb, _, fb = metrics(f"{tmp}/b0.jsonl")
        if [s["step"] for s in sb] != list(range(21, 33)):
            raise Failure(f"the resumed run logged steps {[s['step'] for s in sb]}, expected 21..32")
        if [s["loss"] for s in sa[20:]] != [s["loss"] for s in sb]:
            raise Failure("the resumed steps' losses differ from the straight run's steps 21..32")
        if digests(f"{tmp}/a", np) != digests(f"{tmp}/b", np):
            raise Failure(f"resumed mid-epoch: {digests(f'{tmp}/b', np)}, straight: {digests(f'{tmp}/a', np)}")
        if np > 1:  # another world size would shard the rest of the epoch otherwise: refused
            _, err = run(step, SMALL + ["--epochs", "2", "--resume", f"{tmp}/ck/checkpoint.bin"], np=np + 1,
                         expect_rc=1)
            if f"at {np} ranks: resume it at {np} ranks" not in err:
                raise Failure(f"a mid-epoch checkpoint resumed at {np + 1} ranks should be refused: {err!r}")
        print(f"{step} at {np} ranks: stopped at step 20, resumed, steps 21..32 and parameters identical")
    scenario.__name__ = f"step{step[:2]}_max_steps_resume_np{np}"
    scenario.__doc__ = (f"{step} at {np} rank(s): a --max_steps stop inside an epoch saves a checkpoint that "
                        "resumes exactly" + (", and refuses another world size." if np > 1 else "."))
    return scenario


def max_steps_epoch_end(step, np):
    def scenario(tmp):
        # 2048 samples at 128 per step (64 per rank at 2 ranks): 16 steps an epoch. --max_steps 16 stops
        # exactly at the end of epoch 1, which --save_interval 2 would not save: the stop must.
        B = str(128 // np)
        out, _ = run(step, SMALL + ["--batch_size", B, "--epochs", "4", "--max_steps", "16", "--save_interval", "2",
                                    "--ckpt_dir", f"{tmp}/ck"], np=np)
        ck = f"{tmp}/ck/checkpoint.bin"
        if not os.path.exists(ck):
            raise Failure(f"{step}: a --max_steps stop at the end of epoch 1 with --save_interval 2 saved "
                          f"nothing:\n{out}")
        hdr, _ = read_checkpoint(ck)
        if (hdr["epoch"], hdr["step"]) != (1, 16):
            raise Failure(f"{step}: the stop's checkpoint records epoch {hdr['epoch']}, step {hdr['step']}")
        print(f"{step} at {np} rank(s): a --max_steps stop at an epoch's end saved epoch 1, step 16")
    scenario.__name__ = f"step{step[:2]}_max_steps_epoch_end_np{np}"
    scenario.__doc__ = (f"{step} at {np} rank(s): a --max_steps stop exactly at an epoch's end saves a "
                        "checkpoint even when --save_interval would skip that epoch.")
    return scenario


def mid_epoch_other_batch(step, np):
    def scenario(tmp):
        # 2048 samples at batch B x accumulation K per rank (128 samples per step at 1 rank, 64 at 2):
        # --max_steps 5 stops 5 steps into epoch 1. Resuming there with other samples per step would
        # skip or repeat samples: refused, naming the checkpoint's value and this run's.
        accum = step >= "06"  # --grad_accum exists from step 06 on
        B, K = (32 // np, 2) if accum else (128 // np, 1)
        flags = ["--batch_size", str(B)] + (["--grad_accum", str(K)] if accum else [])
        common = SMALL + ["--epochs", "2"]
        run(step, common + flags + ["--max_steps", "5", "--save_interval", "1", "--ckpt_dir", f"{tmp}/ck",
                                    "--metrics", f"{tmp}/s{{rank}}.jsonl"], np=np)
        ck = f"{tmp}/ck/checkpoint.bin"
        stopped = metrics(f"{tmp}/s0.jsonl")[1]
        if [(e["epoch"], e.get("partial")) for e in stopped] != [(0, True)]:
            raise Failure(f"{step}: the --max_steps stop's epoch record should be marked partial: {stopped}")
        have = f"at {B * K} samples per step per rank (batch {B} x {K})"
        hint = f"resume with --batch_size {B}" + (f" --grad_accum {K}" if accum else "")
        others = [["--batch_size", str(4 * B)], ["--batch_size", str(B // 2)]]
        if accum:
            others += [["--batch_size", str(B), "--grad_accum", str(4 * K)]]
        for other in others:
            b = int(other[1])
            k = int(other[3]) if len(other) > 2 else (K if accum else 1)
            args = other + (["--grad_accum", str(k)] if accum and len(other) == 2 else [])
            _, err = run(step, common + args + ["--resume", ck], np=np, expect_rc=1)
            want = f"stopped 5 steps into epoch 1 {have}; this run takes {b * k} (batch {b} x {k}): {hint}"
            if want not in err:
                raise Failure(f"{step}: a mid-epoch resume with {' '.join(args)} should be refused with "
                              f"{want!r}:\n{err}")
        if step >= "03":  # --drop_last exists from step 03 on: it changes the epoch's shards
            _, err = run(step, common + flags + ["--drop_last", "--resume", ck], np=np, expect_rc=1)
            if "with --drop_last off; this run has it on" not in err:
                raise Failure(f"{step}: a mid-epoch resume with another --drop_last should be refused:\n{err}")
        # The same flags still resume exactly: the digest of an uninterrupted run.
        run(step, common + flags + ["--metrics", f"{tmp}/a{{rank}}.jsonl"], np=np)
        run(step, common + flags + ["--resume", ck, "--metrics", f"{tmp}/b{{rank}}.jsonl"], np=np)
        resumed = metrics(f"{tmp}/b0.jsonl")[1]
        if [(e["epoch"], e.get("partial")) for e in resumed] != [(0, None), (1, None)]:
            raise Failure(f"{step}: the resumed run's epoch records should be whole epochs 0 and 1: {resumed}")
        if digests(f"{tmp}/a", np) != digests(f"{tmp}/b", np):
            raise Failure(f"{step}: resumed at step 5 with {' '.join(flags)}: {digests(f'{tmp}/b', np)}, "
                          f"uninterrupted: {digests(f'{tmp}/a', np)}")
        print(f"{step} at {np} rank(s): other samples per step refused mid-epoch, the same resumes exactly")
    scenario.__name__ = f"step{step[:2]}_mid_epoch_other_batch_np{np}"
    scenario.__doc__ = (f"{step} at {np} rank(s): a checkpoint saved inside an epoch refuses another "
                        "--batch_size or --grad_accum, naming both values, and resumes exactly with the same.")
    return scenario


# ---- step 07: ZeRO stage 1 ----------------------------------------------------------------------------

# --hidden 63: 50,095 parameters, a multiple of none of 2, 3 and 4, so the last shard is padded.
ZERO = small(hidden=63)


def tracks_06_at_3_ranks(tmp, common, step, ckpt, differ):
    """Resumes `step` and step 06 at 3 ranks from a 2-rank checkpoint (an epoch's end) for one step: the
    ranks of `step` must agree (else `differ`) and its step must be step 06's within the error model
    (three terms in two orders). Returns the worst ratios of difference to bound."""
    n = step[:2]
    start = read_checkpoint(ckpt)[0]["step"]
    try:
        return one_step_from(tmp, f"w{n}_", ("06_full", 3, [], None), [(step, 3, [], None)],
                             common + ["--epochs", "2"], ckpt, start, 64 * 3 + 3)
    except Mismatch as f:
        raise Failure(f"resumed at 3 ranks from a 2-rank checkpoint, step {n} does not track step 06: {f}") from None
    except Failure as f:
        if "replicas differ" in str(f):
            raise Failure(f"step {n} resumed at 3 ranks from a 2-rank checkpoint: {differ}\n{f}") from None
        raise


def own_binary(step):
    """A scenario: the program that runs is the one in DDP_BIN_DIR (the exercise checker's build of the
    learner's files), and it starts no other build's step program; /proc shows what each process runs
    after any exec."""
    def scenario(tmp):
        exe = os.path.realpath(os.path.join(BIN, step))
        cmd = [exe] + small(dataset_size=4096) + ["--epochs", "6"] + dist_args(step)
        seen = set()
        with open(f"{tmp}/out", "w") as out:
            p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=tmp)
            deadline = time.time() + 600
            while p.poll() is None and time.time() < deadline:
                for pid in process_tree(p.pid):  # what each process runs now, after any exec
                    try:
                        seen.add(re.sub(r" \(deleted\)$", "", os.readlink(f"/proc/{pid}/exe")))
                    except OSError:
                        pass
                time.sleep(0.005)
            if p.poll() is None:
                p.kill()
            p.wait()
        stop_if_terminated()
        # Another step program (the main build's, reached through the links next to it), not MPI's helpers
        others = sorted(e for e in seen if e != exe and re.match(r"\d\d_", os.path.basename(e)))
        if others:
            raise Failure(f"the program that ran is {', '.join(others)}, not the one built from your file(s) "
                          f"({exe})\nlikely cause: main starts another build's program (exec) instead of "
                          "training itself")
        if p.returncode != 0:
            with open(f"{tmp}/out") as f:
                text = f.read()
            cause = hint(text, step)
            raise Failure((f"likely cause: {cause}\n" if cause else "") +
                          f"{' '.join(cmd)} exited {p.returncode}, expected 0\n--- output\n{text}")
        if exe not in seen:
            raise Failure(f"{' '.join(cmd)} ended before its executable could be read in /proc")
        print(f"{step} ran as {exe}")
    scenario.__name__ = f"step{step[:2]}_own_binary"
    scenario.__doc__ = f"{step}: the program that ran is the one in DDP_BIN_DIR, and it starts no other build's"
    return scenario
