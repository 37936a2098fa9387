#!/usr/bin/env python3
"""Issue 40, G1: the sum canary of the 16-bit hooks (dist_verify_sum in common/dist/dist.c).

An NCCL built without the fp16/bf16 all-reduce kernels runs them as empty kernels: no error, nothing
summed, and the replicas of `--comm_hook fp16`/`bf16` drift apart. The hook now checks, when it is
set up, that one small all-reduce of known values in its type comes back summed, and ends the job
naming the library and the missing kernel when it does not. The check lives in the backend-independent
layer, so the CPU backends run it too; the test hook DDP_TEST_UNSUMMED_CANARY=1 makes a rank keep its
own values, as such a library would.

The scenarios hooks_canary_{mpirun,launch}_{fp16,bf16} (LAUNCHER mpirun: the MPI backend; launch:
Gloo through scripts/launch.sh): step 06 at 2 ranks with the hook trains (the canary passes on a
library that sums); with DDP_TEST_UNSUMMED_CANARY=1 on rank 1 only, the job ends non-zero, before
any step, with rank 1's line naming the hook, the library, the type and NCCL's kernel.
"""
import json
import os
import subprocess

from tests.harness import env as harness_env
from tests.harness.env import LAUNCH_SH, Failure, small
from tests.harness.launch import env_launch_env
from tests.harness.scenario import register

LIBRARY = {"mpirun": "the MPI library (mpi ", "launch": "the Gloo library (gloo)"}


def command(launcher, args, bad_rank1):
    """argv and env of step 06 at 2 ranks; with bad_rank1, rank 1 alone gets DDP_TEST_UNSUMMED_CANARY=1."""
    prog = os.path.join(harness_env.BIN, "06_full")
    if launcher == "mpirun":
        one = ["env", "DDP_TEST_UNSUMMED_CANARY=1", prog] if bad_rank1 else [prog]
        return [harness_env.MPIEXEC, "-n", "1", prog] + args + [":", "-n", "1"] + one + args, None
    # scripts/launch.sh starts every rank alike: the variable goes through a wrapper that sets it on
    # RANK 1 only
    cmd = [prog] + args
    if bad_rank1:
        cmd = ["sh", "-c", '[ "$RANK" = 1 ] && export DDP_TEST_UNSUMMED_CANARY=1; exec "$@"', "sh"] + cmd
    return [LAUNCH_SH, "-n", "2"] + cmd, env_launch_env()


def canary(launcher, hook):
    def scenario(tmp):
        args = small() + ["--batch_size", "64", "--epochs", "1", "--max_steps", "2", "--comm_hook", hook,
                          "--metrics", f"{tmp}/m{{rank}}.jsonl"] + harness_env.dist_args("06_full")
        cmd, env = command(launcher, args, False)
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
        if p.returncode != 0:
            raise Failure(f"--comm_hook {hook} on a library that sums it exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
        args[args.index(f"{tmp}/m{{rank}}.jsonl")] = f"{tmp}/bad{{rank}}.jsonl"
        cmd, env = command(launcher, args, True)
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
        out = p.stdout + p.stderr
        want = [f"--comm_hook {hook}: rank 1: ", LIBRARY[launcher], f"does not sum {hook}",
                f"ncclDevFunc_AllReduce_Sum_{'f16' if hook == 'fp16' else 'bf16'}"]
        line = next((l for l in out.splitlines() if want[0] in l), "")
        if p.returncode == 0 or not all(w in line for w in want):
            raise Failure(f"with rank 1's canary unsummed (DDP_TEST_UNSUMMED_CANARY=1) the job should end "
                          f"non-zero with rank 1's line naming {want}: exit {p.returncode}\n{out[-3000:]}")
        path = f"{tmp}/bad0.jsonl"  # a job that ended has no final object: read its lines
        recs = [json.loads(l) for l in open(path)] if os.path.exists(path) else []
        if any(r.get("type") == "step" for r in recs):
            raise Failure(f"rank 0 logged a step after rank 1's canary failed\n{out[-3000:]}")
        print(f"sums on this library, and an unsummed canary ends the job (exit {p.returncode}) before any "
              f"step: {line.strip()[:300]}")
    scenario.__doc__ = (f"--comm_hook {hook} under {launcher}: trains where the library sums {hook}, and ends "
                        "before any step, naming library and kernel, where rank 1's canary comes back unsummed.")
    return scenario


for _launcher in ("mpirun", "launch"):
    for _hook in ("fp16", "bf16"):
        register(canary(_launcher, _hook), name=f"hooks_canary_{_launcher}_{_hook}", processors=2, timeout=300,
                 labels=["integration", "hooks"], needs=["mpi"] + (["gloo"] if _launcher == "launch" else []))
