"""Step 09 (live recovery), stage 1: the cursor sampler and the resume at another world size.

I0: without a change of world size step 09 is step 06, bit for bit (the cursor sampler yields step 03's
shards: tests/unit/test_sampler_cursor.cpp). I1: a checkpoint saved inside an epoch resumes at another
world size with the same global batch: the same steps per epoch, replicas bit-identical, and (the unit
test) every position of the epoch taken once. I4: one step from the same state at the smaller or larger
world agrees with the original world's within the float32 error model of tests/harness/parity.py (only
the summation order differs: W' ranks, uneven shares, more micro-batches).
"""
from tests.harness.env import SEED, Failure
from tests.harness.launch import run
from tests.harness.parity import one_step_parity
from tests.harness.results import digests, global_losses, metrics
from tests.harness.scenario import scenario

# 515 samples (the epoch's list padded to 516 at 3 ranks), 32 per rank and step: 6 steps an epoch at 3 ranks,
# the last block short; 63 hidden units, so that no size is a multiple of 2 or 3.
ARGS = ["--device", "cpu", "--data", "synthetic", "--dataset_size", "515", "--hidden", "63", "--lr", "0.05",
        "--momentum", "0.9", "--batch_size", "32", "--epochs", "2", "--log_interval", "1000",
        "--save_interval", "0", "--seed", SEED]


@scenario(processors=2, labels=("parity",), launchers=("launch",), timeout=300)
def step09_same_as_step06(tmp):
    """Step 09 ends with step 06's parameters and logs its losses, bit for bit, at 2 and 3 ranks, with
    and without --grad_accum and --drop_last (I0)."""
    for np in (2, 3):
        for extra in ([], ["--grad_accum", "2", "--drop_last"]):
            got = {}
            for step in ("06_full", "09_live"):
                run(step, ARGS + extra + ["--metrics", f"{tmp}/{step}_{{rank}}.jsonl"], np=np)
                got[step] = (digests(f"{tmp}/{step}_", np), global_losses(f"{tmp}/{step}_", np, 6))
            if got["06_full"] != got["09_live"]:
                raise Failure(f"at {np} ranks {' '.join(extra)}: step 09 differs from step 06 without a change of "
                              f"world size: digests {got['09_live'][0]} vs {got['06_full'][0]}, losses "
                              f"{got['09_live'][1][:4]}... vs {got['06_full'][1][:4]}...")
            print(f"{np} ranks {' '.join(extra) or '(plain)'}: 09 = 06, digest {got['09_live'][0][0]}")


def resumed(tmp, tag, np, start, extra=()):
    """09 at np ranks resumed from `start` to the end of the run; (its steps, digests, output)."""
    out, _ = run("09_live", ARGS + list(extra) + ["--resume", start, "--metrics", f"{tmp}/{tag}{{rank}}.jsonl"],
                 np=np)
    steps = [s["step"] for s in metrics(f"{tmp}/{tag}0.jsonl")[0]]
    return steps, digests(f"{tmp}/{tag}", np), out


@scenario(processors=2, labels=("parity",), launchers=("launch",), timeout=300)
def step09_resume_other_world(tmp):
    """A 3-rank run of step 09 stopped 4 steps into its first epoch resumes at 2 and at 4 ranks: the
    same global batch (96) and steps per epoch, bit-identical replicas, the reshard logged; at 4 ranks
    the epoch's last block (3 positions of a 483-sample list) leaves rank 3 without a sample, which
    trains on a spare with weight 0; the 2-rank run's own mid-epoch checkpoint resumes again at 4. One
    step from that state at 2, 4 and 5 ranks (uneven shares, several micro-batches) agrees with the
    3-rank run's within the float32 error model (I1, I4)."""
    for n in ("515", "483"):
        args = ["--dataset_size", n, "--save_interval", "1"]
        run("09_live", ARGS + args + ["--max_steps", "4", "--ckpt_dir", f"{tmp}/ck{n}"], np=3)
        start = f"{tmp}/ck{n}/checkpoint.bin"
        full, _, _ = resumed(tmp, f"full{n}_", 3, start, args + ["--ckpt_dir", f"{tmp}/f{n}"])
        for np in (2, 4):
            steps, dig, out = resumed(tmp, f"r{n}_{np}_", np, start, args + ["--ckpt_dir", f"{tmp}/r{n}_{np}"])
            if steps != full:
                raise Failure(f"n {n}: resumed at {np} ranks it took steps {steps}, the 3-rank run {full}: the "
                              "global batch (and so the steps per epoch) must not change with the world size")
            if len(set(dig)) != 1:
                raise Failure(f"n {n}: resumed at {np} ranks, the replicas differ: {dig}")
            if "resharded: 3 ranks saved it at position 384 of epoch 1 (laid out for 3)" not in out:
                raise Failure(f"n {n}: resumed at {np} ranks, no reshard line:\n{out}")
        # A checkpoint saved after a reshard (2 ranks, mid-epoch at position 480, G 96, the epoch laid out
        # for 3) resumes again, at 4 ranks, to the same end.
        resumed(tmp, f"two{n}_", 2, start, args + ["--ckpt_dir", f"{tmp}/two{n}", "--max_steps", "5"])
        steps, dig, out = resumed(tmp, f"again{n}_", 4, f"{tmp}/two{n}/checkpoint.bin",
                                  args + ["--ckpt_dir", f"{tmp}/again{n}"])
        if steps != full[1:] or len(set(dig)) != 1:
            raise Failure(f"n {n}: a 2-rank checkpoint of a resharded run, resumed at 4 ranks, took steps {steps} "
                          f"(want {full[1:]}), digests {dig}")
        if "resharded: 2 ranks saved it at position 480 of epoch 1 (laid out for 3)" not in out:
            raise Failure(f"n {n}: the second reshard was not logged:\n{out}")
        print(f"n {n}: resumed at 2 and 4 ranks: steps {full[0]}..{full[-1]} as at 3, replicas identical; "
              "again from the 2-rank run's checkpoint at 4")
    # The epoch after a reshard is laid out for the new world size: 480 samples at 3 ranks make 5 blocks
    # of 96, at 7 ranks a list of 483, 6 blocks. Resumed at 7 two steps into the first epoch, the run
    # ends after 5 + 6 = 11 steps, and its progress line counts to 11 (not 10).
    args = ["--dataset_size", "480", "--save_interval", "1", "--log_interval", "1"]
    run("09_live", ARGS + args + ["--max_steps", "2", "--ckpt_dir", f"{tmp}/ck480"], np=3)
    steps, dig, out = resumed(tmp, "seven_", 7, f"{tmp}/ck480/checkpoint.bin", args + ["--ckpt_dir", f"{tmp}/s480"])
    if steps != list(range(3, 12)) or len(set(dig)) != 1 or "step 11/11 " not in out:
        raise Failure(f"480 samples resumed at 7 ranks after 2 steps: steps {steps} (want 3..11), digests {dig}, "
                      f"progress lines:\n" + "\n".join(l for l in out.splitlines() if " step " in l))
    # One step from the 3-rank state at step 4, at 2 and 4 ranks against 3: 96 samples, up to 4
    # ranks, up to 2 micro-batches. Then the epoch's last block of 483 samples (3 positions) from step
    # 5: at 4 ranks, rank 3 has none and must add nothing (its spare's weight is 0).
    # At 5 ranks with micro-batches of 8 the shares are uneven (20, 19, 19, 19, 19) and each takes 3:
    # every micro-batch weighted b/G.
    sides = [("09_live", 2, [], None), ("09_live", 4, [], None), ("09_live", 5, ["--batch_size", "8"], None)]
    one_step_parity(tmp, "p", ("09_live", 3, [], None), sides, ARGS, 96 + 5 + 3, steps=(4,))
    one_step_parity(tmp, "t", ("09_live", 3, [], None), sides, ARGS[:5] + ["483"] + ARGS[6:], 3 + 4 + 1, steps=(5,))
