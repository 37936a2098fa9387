"""Step 04 (DDP's wrap): replicas, the baseline, the broadcast after loading.
"""
import os
import subprocess

from tests.harness.env import BIN, MPIEXEC, SMALL, dist_args, Failure
from tests.harness.families import matches_baseline, own_binary, replicas_identical
from tests.harness.launch import hint, run
from tests.harness.results import digests, metrics
from tests.harness.scenario import register, scenario


def diagnose_broadcast(tmp):
    """Rank 1 resumed another checkpoint than rank 0 ("mixed") or the same one ("same"). With both
    broadcasts, rank 1 logs exactly the same local losses in both runs. Its first loss is computed
    before any update, from the parameters alone; the momentum first acts on the first update."""
    mixed = [s["loss"] for s in metrics(f"{tmp}/04_ddp_wrap_mixed_1.jsonl")[0]]
    same = [s["loss"] for s in metrics(f"{tmp}/04_ddp_wrap_same_1.jsonl")[0]]
    if mixed[:1] != same[:1]:
        return ("likely cause: rank 1's first loss, computed before any update, comes from its own "
                "checkpoint's parameters: broadcast rank 0's parameters (t->model.params) after "
                "resume, before training")
    if mixed != same:
        return ("likely cause: the first step agrees, later ones do not: the parameters are broadcast, "
                "but rank 1 keeps its own checkpoint's momentum: broadcast the optimizer's momentum "
                "buffer (t->opt.buf) too")
    return "likely cause: rank 1 trains like rank 0 but ends elsewhere (is rank 0 the broadcast's root?)"


@scenario(processors=2)
def step04_broadcast(tmp):
    """The course's "load, then wrap": two ranks resume from two different checkpoint files (same
    point, different parameters and momentum); step 04 broadcasts rank 0's state after loading, so its
    replicas end bit-identical to a run where both ranks loaded rank 0's file; step 03 does not."""
    for lr in ("0.05", "0.1"):  # two checkpoints after 1 epoch: same seed and step, other values
        run("01_single_gpu", SMALL + ["--epochs", "1", "--lr", lr, "--save_interval", "1",
                                      "--ckpt_dir", f"{tmp}/ck{lr}"])
    files = [f"{tmp}/ck0.05/checkpoint.bin", f"{tmp}/ck0.1/checkpoint.bin"]
    for step in ("03_sampler", "04_ddp_wrap"):
        for tag, ranks_files in (("mixed", files), ("same", files[:1] * 2)):
            cmd = [MPIEXEC]
            for r, ck in enumerate(ranks_files):
                cmd += (([":"] if r else []) + ["-n", "1", os.path.join(BIN, step)] + SMALL +
                        ["--epochs", "2", "--resume", ck, "--metrics", f"{tmp}/{step}_{tag}_{{rank}}.jsonl"]
                        + dist_args(step))
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            if p.returncode != 0:
                cause = hint(p.stderr, step)
                raise Failure((f"likely cause: {cause}\n" if cause else "") +
                              f"{' '.join(cmd)} failed:\n{p.stderr}")
    d3 = digests(f"{tmp}/03_sampler_mixed_", 2)
    d4, same = digests(f"{tmp}/04_ddp_wrap_mixed_", 2), digests(f"{tmp}/04_ddp_wrap_same_", 2)
    if d4[0] != d4[1]:
        raise Failure(f"step 04 resuming different checkpoints per rank: replicas differ {d4}\n"
                      f"{diagnose_broadcast(tmp)}")
    if d4 != same:
        raise Failure(f"step 04 did not continue from rank 0's checkpoint: {d4} vs {same}\n"
                      f"{diagnose_broadcast(tmp)}")
    if d3[0] == d3[1]:
        raise Failure("step 03 resuming different checkpoints per rank: replicas are identical")


for np in (2, 3, 4):
    register(replicas_identical("04_ddp_wrap", np), processors=2, launchers=("launch",) if np < 4 else ())
for np in (2, 4):
    register(matches_baseline("04_ddp_wrap", np), processors=2, launchers=("launch",) if np == 2 else ())
register(own_binary("04_ddp_wrap"), ctest=False)  # the exercise checker's first claim
