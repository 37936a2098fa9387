"""The straggler report (`--straggler N`, common/monitor/straggler.h) on real jobs. One rank is made
slow with the process group's test hook DDP_TEST_SLOW_RANK=RANK:MS (it sleeps MS milliseconds before
its first gradient collective of each step, as if its backward were that much slower): every report
must name it, with the others' wait; in an even run no report may name a rank. Steps 06, 07 and 08,
under mpirun and under scripts/launch.sh (Gloo).

Why a loaded machine cannot flip either verdict: a rank is named when the others lose more than 25 %
of the median step waiting for it, and each rank's figures are its medians over the report's 10
steps. The injected delay is at least 150 ms and at least twice the step this machine takes without
it (measured first, by an even run's report: 10-20 ms with OpenBLAS, 30-40 ms on a loaded 2-core
machine, about 800 ms with the plain C GEMM of a build without OpenBLAS), so the slowed rank's
lateness is two thirds of the slowed step or more; an even run's ranks differ by a few milliseconds
in their medians, and a load that slows one rank slows the step that the threshold is a share of.
"""
import json
import os

from tests.harness.env import Failure
from tests.harness.launch import run
from tests.harness.parity import with_flag
from tests.harness.scenario import scenario

SLOW_MS = 150  # at least; see calibrated()
EVERY = 10
# The default model (784-1024-1024-10): a step long enough that scheduling noise is a small part of it.
ARGS = ["--device", "cpu", "--data", "synthetic", "--dataset_size", "10240", "--max_steps", "40",
        "--straggler", str(EVERY), "--log_interval", "1000", "--save_interval", "0"]


def reports(step, np, tmp, slow=None, slow_ms=SLOW_MS, steps=40):
    """Runs `step` at np ranks for `steps` steps (rank `slow` slowed by slow_ms, or none); (its report
    lines, rank 0's straggler objects)."""
    if slow is not None:
        os.environ["DDP_TEST_SLOW_RANK"] = f"{slow}:{slow_ms}"
    try:
        out, _ = run(step, with_flag(ARGS, "max_steps", steps) + ["--metrics", f"{tmp}/m{{rank}}.jsonl"], np=np,
                     tmp=tmp)
    finally:
        os.environ.pop("DDP_TEST_SLOW_RANK", None)
    lines = [l for l in out.splitlines() if l.startswith("straggler, steps")]
    with open(f"{tmp}/m0.jsonl") as f:
        objs = [o for o in map(json.loads, f) if o["type"] == "straggler"]
    want = steps // EVERY
    if len(lines) != want or len(objs) != want:
        raise Failure(f"{step}: {len(lines)} report lines and {len(objs)} metrics objects, want {want} "
                      f"of each (--straggler {EVERY}, 40 steps):\n{out}")
    for o in objs:
        if any(len(o[k]) != np for k in ("data_ms", "compute_ms", "wait_ms", "step_ms")):
            raise Failure(f"{step}: a straggler object without one figure per rank: {o}")
    return lines, objs


def calibrated(step, np, tmp):
    """The delay to inject: SLOW_MS, or twice the median step of an even 10-step run if that is more."""
    _, objs = reports(step, np, tmp, steps=EVERY)
    return max(SLOW_MS, int(2 * max(objs[0]["step_ms"])) + 1)


def expect_named(step, np, slow, tmp):
    slow_ms = calibrated(step, np, tmp)
    lines, objs = reports(step, np, tmp, slow, slow_ms)
    bad = [l for l in lines if f"rank {slow} arrives" not in l or "they wait" not in l]
    bad += [json.dumps(o) for o in objs if o["late_rank"] != slow or o["late_ms"] < slow_ms / 2]
    # what the others lose: each of them waits about the delay in every step (at least half of it)
    bad += [json.dumps(o) for o in objs if any(w < slow_ms / 2 for r, w in enumerate(o["wait_ms"]) if r != slow)]
    if bad:
        raise Failure(f"{step} at {np} ranks, rank {slow} slowed by {slow_ms} ms: reports that do not name "
                      f"it:\n" + "\n".join(bad))
    print(f"{step}, rank {slow} slowed by {slow_ms} ms: {lines[-1]}")


@scenario(processors=2, launchers=("launch",), timeout=240)
def straggler_named(tmp):
    """Step 06 at 2 ranks, rank 1 slowed: every report names rank 1 and what the other loses."""
    expect_named("06_full", 2, 1, tmp)


@scenario(processors=2, launchers=("launch",), timeout=240)
def straggler_even(tmp):
    """Step 06 at 2 ranks, nobody slowed: no report names a rank (and each says so)."""
    lines, objs = reports("06_full", 2, tmp)
    bad = [l for l in lines if "no rank arrives late" not in l]
    bad += [json.dumps(o) for o in objs if o["late_rank"] is not None]
    if bad:
        raise Failure("an even run: reports that name a rank:\n" + "\n".join(bad))
    print(f"even run: {lines[-1]}")


@scenario(processors=2, launchers=("launch",), timeout=240)
def straggler_named_zero(tmp):
    """Step 07 (its reducer reduce-scatters) at 2 ranks, rank 0 slowed: every report names rank 0."""
    expect_named("07_zero", 2, 0, tmp)


@scenario(processors=2, launchers=("launch",), timeout=300)
def straggler_named_fsdp(tmp):
    """Step 08 (a reduce-scatter per layer) at 3 ranks, rank 2 slowed: every report names rank 2."""
    expect_named("08_fsdp", 3, 2, tmp)
