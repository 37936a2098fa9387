#!/usr/bin/env python3
"""Issue 40, G1: the sum canary of the 16-bit hooks (dist_verify_sum in common/dist.c).

An NCCL built without the fp16/bf16 all-reduce kernels runs them as empty kernels: no error, nothing
summed, and the replicas of `--comm_hook fp16`/`bf16` drift apart. The hook now checks, when it is
set up, that one small all-reduce of known values in its type comes back summed, and ends the job
naming the library and the missing kernel when it does not. The check lives in the backend-independent
layer, so the CPU backends run it too; the test hook DDP_TEST_UNSUMMED_CANARY=1 makes a rank keep its
own values, as such a library would.

Usage: python3 -m tests.integration.canary_check LAUNCHER HOOK   (LAUNCHER mpirun: the MPI backend;
launch: Gloo through scripts/launch.sh. HOOK fp16 or bf16.) For each: step 06 at 2 ranks with the hook
trains (the canary passes on a library that sums); with DDP_TEST_UNSUMMED_CANARY=1 on rank 1 only, the
job ends non-zero, before any step, with rank 1's line naming the hook, the library, the type and
NCCL's kernel. Prints "ok ..." and exits 0, "FAILED ..." and exits 1, 77 when the backend is not built.
"""
import json
import os
import subprocess
import sys
import tempfile

from tests.harness import env as harness_env
from tests.harness.env import small
from tests.harness.env import LAUNCH_SH
from tests.harness.launch import env_launch_env

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


def main(launcher, hook):
    if launcher == "launch" and os.environ.get("DDP_HAVE_GLOO", "1") in ("0", "OFF", "FALSE"):
        print("SKIPPED: built without Gloo")
        return 77
    tmp = tempfile.mkdtemp(prefix="canary-")
    args = small() + ["--batch_size", "64", "--epochs", "1", "--max_steps", "2", "--comm_hook", hook,
                      "--metrics", f"{tmp}/m{{rank}}.jsonl"] + harness_env.dist_args("06_full")
    cmd, env = command(launcher, args, False)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    if p.returncode != 0:
        print(f"FAILED canary_{launcher}_{hook}: --comm_hook {hook} on a library that sums it exited "
              f"{p.returncode}:\n{p.stdout}\n{p.stderr}")
        return 1
    args[args.index(f"{tmp}/m{{rank}}.jsonl")] = f"{tmp}/bad{{rank}}.jsonl"
    cmd, env = command(launcher, args, True)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    out = p.stdout + p.stderr
    want = [f"--comm_hook {hook}: rank 1: ", LIBRARY[launcher], f"does not sum {hook}",
            f"ncclDevFunc_AllReduce_Sum_{'f16' if hook == 'fp16' else 'bf16'}"]
    line = next((l for l in out.splitlines() if want[0] in l), "")
    if p.returncode == 0 or not all(w in line for w in want):
        print(f"FAILED canary_{launcher}_{hook}: with rank 1's canary unsummed (DDP_TEST_UNSUMMED_CANARY=1) "
              f"the job should end non-zero with rank 1's line naming {want}: exit {p.returncode}\n{out[-3000:]}")
        return 1
    path = f"{tmp}/bad0.jsonl"  # a job that ended has no final object: read its lines
    recs = [json.loads(l) for l in open(path)] if os.path.exists(path) else []
    if any(r.get("type") == "step" for r in recs):
        print(f"FAILED canary_{launcher}_{hook}: rank 0 logged a step after rank 1's canary failed\n{out[-3000:]}")
        return 1
    print(f"ok canary_{launcher}_{hook}: sums on this library, and an unsummed canary ends the job "
          f"(exit {p.returncode}) before any step: {line.strip()[:300]}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in LIBRARY or sys.argv[2] not in ("fp16", "bf16"):
        print(__doc__.split("\n\n")[2], file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1], sys.argv[2]))
