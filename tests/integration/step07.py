"""Step 07 (ZeRO stage 1): replicas, parity with step 06, one rank under mpirun, memory, checkpoints.
"""
import os
import re
import subprocess

from tests.harness.env import BIN, MPIEXEC, SMALL, dist_args, Failure, small
from tests.harness.families import (CAPS, ZERO, bucket_replicas, max_steps_epoch_end, mid_epoch_other_batch,
                                    own_binary, tracks_06_at_3_ranks)
from tests.harness.launch import run
from tests.harness.parity import PARAM_TOL, epoch_steps, one_step_parity
from tests.harness.results import (ckpt_optim_steps, ckpt_params_momentum, digests, global_losses, listed,
                                   logged_int, metrics, read_checkpoint, rel_diff, tensor_slices)
from tests.harness.scenario import register, scenario


# The bucket tests' model (see BUCKETED): 784-15-10112-10, 274,697 parameters, a multiple of none of
# 2, 3 and 4 either; 3 buckets at 0.00005 MiB, 2 at 25 MiB. At 3 and 4 ranks its trajectories part
# by rounding (06 and 07 sum three terms in two orders), so they are compared one step at a time (the
# error model under "parity").
ZERO_BUCKETED = small(hidden="15,10112", lr=0.01)


def diagnose_zero_step(tmp, np, cap, model=ZERO):
    """Why step 07 does not train like step 06: one optimizer step of each from the same start (np ranks,
    --bucket_cap_mb cap), compared with the start and with each other. After one step exactly the
    parameters whose update went wrong differ (every gradient is computed from the same parameters),
    so where they differ (which tensors, which ranks' shards) points at the mistake."""
    one = model + ["--batch_size", "64", "--epochs", "1", "--max_steps", "1", "--save_interval", "1",
                  "--bucket_cap_mb", cap]
    try:
        run("06_full", one + ["--ckpt_dir", f"{tmp}/one06", "--save_init", f"{tmp}/init"], np=np)
        run("07_zero", one + ["--ckpt_dir", f"{tmp}/one07"], np=np)
    except Failure as e:
        return f"(a one-step run to find where the parameters differ failed: {str(e).splitlines()[0][:300]})"
    hdr, p0 = read_checkpoint(f"{tmp}/init/checkpoint.bin")
    p6, _ = ckpt_params_momentum(f"{tmp}/one06/checkpoint.bin")
    p7, m7 = ckpt_params_momentum(f"{tmp}/one07/checkpoint.bin")
    if ckpt_optim_steps(f"{tmp}/one07/checkpoint.bin") == 0:
        return ("likely cause: step 07 takes no optimizer step (its checkpoint counts none): every step, "
                "each rank must update its shard of the parameters (sgd_step on my_shard(t, t->model.params) "
                "with my_shard(t, t->model.grads)), then all-gather the shards")
    tol = PARAM_TOL * max(abs(x) for x in p6)
    n, S = len(p6), -(-len(p6) // np)
    bad = [i for i in range(n) if abs(p6[i] - p7[i]) > tol]
    if not bad:
        return "(after one step step 07 still agrees with step 06: they part later)"
    d6, d7 = [a - b for a, b in zip(p6, p0)], [a - b for a, b in zip(p7, p0)]
    ratio = sum(a * b for a, b in zip(d6, d7)) / max(sum(a * a for a in d6), 1e-30)
    if abs(ratio - 1 / np) < 1e-3 / np and all(abs(b - a / np) <= tol for a, b in zip(d6, d7)):
        return (f"likely cause: after one step every parameter has moved 1/{np} as far as step 06's: the mean "
                f"gradient is divided by the world size twice: backward already scales the loss by 1/W, so the "
                f"reduce-scatter must sum (DIST_SUM), not average")
    if all(abs(a - b) <= tol for a, b in zip(p7, p0)) and not any(m7):
        return ("likely cause: after one step no parameter has moved and the momentum is zero: the optimizer "
                "stepped with a zero gradient: sgd_step must read this rank's shard of the mean gradient, "
                "my_shard(t, t->model.grads), where the reduce-scatter (dist_reduce_scatter_async, in place) "
                "leaves each bucket's part for this rank")
    if bad[0] >= S and all(abs(p7[i] - p0[i]) <= tol for i in range(S, n)):
        return (f"likely cause: after one step rank 0's parameters have moved in only its own shard [0, {S}), "
                f"as step 06's did there, and nowhere else: the other ranks' updates never reached rank 0: each "
                f"rank must update its own shard (my_shard(t, t->model.params), not the start of the buffer), "
                f"then all the ranks all-gather the updated shards in place (dist_all_gather, after sgd_step)")
    shards = sorted({i // S for i in bad})
    tensors = [name for name, a, b in tensor_slices(hdr["sizes"]) if any(a <= i < b for i in bad)]
    plural = "s" if len(shards) > 1 else ""
    where = (f"after one step (bucket cap {cap} MiB) step 07's parameters differ from step 06's in "
             f"{listed(tensors)}, in the shard{plural} of rank{plural} {listed([str(j) for j in shards])}")
    if len(tensors) == len(tensor_slices(hdr["sizes"])) and len(shards) == np:
        return (f"likely cause: after one step (bucket cap {cap} MiB) step 07's parameters differ from step "
                f"06's in every tensor and in every rank's shard: the update does not get the mean gradient: "
                f"sgd_step must read this rank's shard of the mean gradient, my_shard(t, t->model.grads) (after "
                f"the reduce-scatter the rest of the gradient buffer is scratch), and update "
                f"my_shard(t, t->model.params)")
    still = "; where they differ, step 07 has not moved them" if all(abs(p7[i] - p0[i]) <= tol for i in bad) else ""
    return (f"likely cause: {where}, and agree elsewhere{still}: the update does not read the mean gradient "
            f"there: rank j receives its b->counts[j] floats of a bucket in place, at r->model->grads + j·S + "
            f"b->shard_offset (the start of its shard, plus where the bucket meets it), and sgd_step must read "
            f"that shard, my_shard(t, t->model.grads), not the start of the gradient buffer")


def diagnose_momentum(m_ref, m_got, np):
    """Why the momentum saved by step 07 differs from step 06's (same training, np ranks): compares the
    file's W shards of S floats with the reference's, exactly (at 2 ranks the two steps are equal)."""
    n = len(m_ref)
    S = -(-n // np)
    ref = [tuple(m_ref[j * S:(j + 1) * S]) for j in range(np)]
    got = [tuple(m_got[j * S:(j + 1) * S]) for j in range(np)]
    right = [j for j in range(np) if got[j] == ref[j]]
    moved = [j for j in range(np) if got[j] != ref[j] and got[j] in ref]
    if moved:
        return (f"likely cause: the saved momentum holds another rank's shard at shard{'s' if len(moved) > 1 else ''} "
                f"{listed([str(j) for j in moved])}: rank j's momentum shard belongs at full.buf + j·S, the place "
                "from which the in-place all-gather sends it")
    if not right:
        return ("likely cause: no part of the saved momentum is a rank's momentum shard (is it the gradient "
                "buffer as the last reduce-scatter left it?): each rank must copy its momentum shard "
                "(t->opt.buf, t->shard floats) to its place in full.buf (my_shard), then all-gather in place, "
                "before rank 0 writes")
    return (f"likely cause: the saved momentum is right in the shard{'s' if len(right) > 1 else ''} of "
            f"rank{'s' if len(right) > 1 else ''} {listed([str(j) for j in right])} only: every rank must copy its "
            "momentum shard (t->opt.buf) to its place in full.buf (my_shard) before the in-place all-gather")


def step07_replicas(np):
    def scenario(tmp):
        bucket_replicas(tmp, "07_zero", np, ZERO_BUCKETED + ["--epochs", "1"], ("32", "8"),
                        " (is every updated shard all-gathered into every rank's parameters?)")
    scenario.__name__ = f"step07_replicas_np{np}"
    scenario.__doc__ = (f"Step 07 at {np} ranks: bit-identical replicas for bucket caps {', '.join(CAPS)} MiB "
                        "and grad_accum 1 and 4, with a parameter count that is not a multiple of the ranks.")
    return scenario


def step07_matches_step06(np):
    def scenario(tmp):
        if np > 2:
            # 3 or more terms: step 06's all-reduce and step 07's reduce-scatter add them in other
            # orders: rounding, bounded by the error model, one step at a time.
            one_step_parity(tmp, "p", ("06_full", np, [], None),
                            [("07_zero", np, ["--bucket_cap_mb", cap], None) for cap in CAPS],
                            ZERO_BUCKETED + ["--batch_size", "64", "--epochs", "2"], 64 * np + np,
                            steps=(0, epoch_steps(np, 64)),
                            diagnose=lambda side: diagnose_zero_step(tmp, np, side[2][1], ZERO_BUCKETED))
            return
        common = ZERO_BUCKETED + ["--batch_size", "64", "--epochs", "2", "--save_interval", "2"]
        run("06_full", common + ["--ckpt_dir", f"{tmp}/a", "--metrics", f"{tmp}/a{{rank}}.jsonl"], np=np)
        la = global_losses(f"{tmp}/a", np, 6)
        pa, ma = ckpt_params_momentum(f"{tmp}/a/checkpoint.bin")
        for cap in CAPS:
            run("07_zero", common + ["--bucket_cap_mb", cap, "--ckpt_dir", f"{tmp}/b",
                                     "--metrics", f"{tmp}/b{{rank}}.jsonl"], np=np)
            lb = global_losses(f"{tmp}/b", np, 7)
            pb, mb = ckpt_params_momentum(f"{tmp}/b/checkpoint.bin")
            # At 2 ranks each sum has two terms whatever the collective (a reduce-scatter's chunk or an
            # all-reduce's element): the same arithmetic, so 07 must be 06 bit for bit.
            if la != lb or pa != pb:
                raise Failure(f"bucket cap {cap}: at 2 ranks step 07 should equal step 06 bit for bit; per-step "
                              f"loss differs by {max(abs(x - y) / max(abs(x), 1e-3) for x, y in zip(la, lb)):.2e} (relative)"
                              f", parameters by {rel_diff(pa, pb):.2e} of their largest value: is each rank's shard "
                              "the mean of the ranks' gradients (the reduce-scatter's counts and offsets), and is "
                              "each rank updating its own shard?\n" + diagnose_zero_step(tmp, np, cap, ZERO_BUCKETED))
            if ma != mb:
                raise Failure(f"bucket cap {cap}: parameters equal step 06's, the saved momentum differs by "
                              f"{rel_diff(ma, mb):.2e} of its largest value\n{diagnose_momentum(ma, mb, np)}")
            print(f"cap {cap} MiB at 2 ranks, {len(lb)} steps: loss, parameters and momentum equal step 06's")
    scenario.__name__ = f"step07_matches_step06_np{np}"
    scenario.__doc__ = (f"Step 07 at {np} ranks trains like step 06 for every bucket cap"
                        + (": per-step loss, parameters and the saved momentum bit for bit." if np == 2 else
                           ": one step from the same state agrees within float32 rounding."))
    return scenario


@scenario(needs=("mpi",))  # mpirun -np 1: MPI is up with one rank (the singleton never reaches it)
def step07_one_rank_mpirun(tmp):
    """Step 07 under `mpirun -np 1` ends, and equals step 06: a reduce-scatter ring of one rank has no
    step (it once kept sending to itself for ever; the singleton without mpirun never reaches MPI)."""
    common = ZERO + ["--epochs", "1", "--save_interval", "0"]
    digests = {}
    for step in ("06_full", "07_zero"):
        cmd = [MPIEXEC, "-n", "1", os.path.join(BIN, step)] + common + dist_args(step)
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp)
        except subprocess.TimeoutExpired:
            raise Failure(f"{' '.join(cmd)} still runs after 120 s (a reduce-scatter of one rank that never ends?)")
        m = re.search(r"param_digest ([0-9a-f]{16})", p.stdout)
        if p.returncode != 0 or not m:
            raise Failure(f"{' '.join(cmd)} exited {p.returncode}\n{p.stdout}\n{p.stderr}")
        digests[step] = m.group(1)
    if digests["06_full"] != digests["07_zero"]:
        raise Failure(f"at one rank under mpirun step 07 ends with {digests['07_zero']}, step 06 with "
                      f"{digests['06_full']}: they must be equal")
    print(f"one rank under mpirun: steps 06 and 07 both end with {digests['07_zero']}")


@scenario(processors=2)
def step07_memory(tmp):
    """Step 07 at 4 ranks: the momentum is ceil(n/4) floats per rank, and each rank's peak memory is below
    step 06's."""
    np = 4
    common = SMALL + ["--hidden", "4096,2048", "--dataset_size", "512", "--max_steps", "2", "--epochs", "1"]
    peaks = {}
    for step in ("06_full", "07_zero"):
        out, _ = run(step, common + ["--metrics", f"{tmp}/{step}_{{rank}}.jsonl"], np=np)
        peaks[step] = [metrics(f"{tmp}/{step}_{r}.jsonl")[2]["peak_rss_kib"] for r in range(np)]
        if step == "07_zero":
            n = logged_int(out, r"model: \d+ layers, (\d+) parameters")
            floats = logged_int(out, r"optimizer state: (\d+) floats per rank")
            nbytes = logged_int(out, r"optimizer state: \d+ floats per rank, (\d+) bytes")
            if floats != -(-n // np) or nbytes != 4 * floats:
                raise Failure(f"{n} parameters at {np} ranks: the momentum should be {-(-n // np)} floats "
                              f"({4 * -(-n // np)} bytes) per rank, the program has {floats} ({nbytes} bytes)")
    if max(peaks["07_zero"]) >= min(peaks["06_full"]):
        raise Failure(f"peak memory per rank (KiB): step 07 {peaks['07_zero']}, step 06 {peaks['06_full']}: "
                      "step 07 should need less")
    print(f"n = {n}: momentum {floats} floats ({nbytes} bytes) per rank; peak KiB per rank: "
          f"06 {peaks['06_full']}, 07 {peaks['07_zero']}")


@scenario(processors=2)
def step07_checkpoints(tmp):
    """Step 06 and step 07 checkpoints are interchangeable (2 ranks: bit for bit), and step 07 resumes at
    another world size at an epoch boundary."""
    common = ZERO + ["--batch_size", "64"]
    # two epochs straight (06), and one epoch saved by each step
    run("06_full", common + ["--epochs", "2", "--metrics", f"{tmp}/s{{rank}}.jsonl"], np=2)
    straight = digests(f"{tmp}/s", 2)
    for step, ck in (("06_full", "c6"), ("07_zero", "c7")):
        run(step, common + ["--epochs", "1", "--save_interval", "1", "--ckpt_dir", f"{tmp}/{ck}"], np=2)
    p6, m6 = ckpt_params_momentum(f"{tmp}/c6/checkpoint.bin")
    p7, m7 = ckpt_params_momentum(f"{tmp}/c7/checkpoint.bin")
    if p6 != p7:
        raise Failure(f"after one epoch at 2 ranks, step 07's parameters differ from step 06's ({rel_diff(p6, p7):.1e}"
                      f"; momentum {rel_diff(m6, m7):.1e}): step 07 does not train like step 06 "
                      "(step07_matches_step06_np2 says where they part)")
    if m6 != m7:
        raise Failure(f"after one epoch at 2 ranks, step 07's checkpoint has step 06's parameters but not its "
                      f"momentum ({rel_diff(m6, m7):.1e}): are the momentum shards gathered in rank order "
                      f"before rank 0 writes them?\n{diagnose_momentum(m6, m7, 2)}")
    # each resumes the other's file and ends where two epochs straight end
    for step, ck in (("07_zero", "c6"), ("06_full", "c7")):
        tag = f"r{step[:2]}_"
        run(step, common + ["--epochs", "2", "--resume", f"{tmp}/{ck}/checkpoint.bin",
                            "--metrics", f"{tmp}/{tag}{{rank}}.jsonl"], np=2)
        if digests(f"{tmp}/{tag}", 2) != straight:
            raise Failure(f"{step} resumed from the other step's checkpoint ends at {digests(f'{tmp}/{tag}', 2)}, "
                          f"two epochs straight at {straight}")
    # another world size: 07 at 3 ranks from the 2-rank file, against 06 doing the same
    r = tracks_06_at_3_ranks(tmp, common, "07_zero", f"{tmp}/c7/checkpoint.bin", "the replicas differ")
    print(f"2 ranks: 06 and 07 files identical, each resumes the other's exactly; 3 ranks from a 2-rank file: "
          f"07's step is 06's within rounding (difference/bound: parameters {r['parameters']:.2g}, momentum "
          f"{r['momentum']:.2g})")


# Replicas at 2, 3 and 4 ranks, step 06's training within the tolerances (bit for bit at 2 ranks), the
# momentum sharded and the peak memory below step 06's, checkpoints interchangeable with step 06's and
# across world sizes.
for np in (2, 3, 4):
    register(step07_replicas(np), processors=2, launchers=("launch",) if np < 4 else ())
    register(step07_matches_step06(np), processors=2, launchers=("launch",) if np < 4 else ())
register(mid_epoch_other_batch("07_zero", 2), processors=2)
register(max_steps_epoch_end("07_zero", 2), processors=2)
register(own_binary("07_zero"), ctest=False)  # the exercise checker's first claim
