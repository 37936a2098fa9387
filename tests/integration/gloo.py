"""The Gloo backend: against MPI, its peers' faults, the ranks' agreement check, torchrun.
"""
import signal
import time

from tests.harness.env import SKIP, SMALL, Failure, small
from tests.harness.families import ZERO
from tests.harness.launch import run, start_ranks, torchrun_cmd, wait_exit
from tests.harness.parity import epoch_steps, one_step_parity
from tests.harness.results import digests, global_losses, metrics
from tests.harness.scenario import register, scenario


# ---- the Gloo backend: against MPI, and its peers' faults ---------------------------------------------

def gloo_matches_mpi(step, np):
    def scenario(tmp):
        args = (ZERO if step.startswith("07") else SMALL) + ["--epochs", "2"]
        if np > 2:
            # Gloo's ring and MPI's algorithm may add the three terms in other orders: rounding, bounded
            # by the error model, one step at a time.
            one_step_parity(tmp, "p", (step, np, [], "mpirun"), (step, np, [], "launch"), args, 128 * np + np,
                            steps=(0, epoch_steps(np, 128)))
            return
        out = {}
        for launcher in ("mpirun", "launch"):
            run(step, args + ["--metrics", f"{tmp}/{launcher}{{rank}}.jsonl"], np=np, launcher=launcher)
            d = digests(f"{tmp}/{launcher}", np)
            if len(set(d)) != 1:
                raise Failure(f"{step} at {np} ranks under {launcher}: replicas differ {d}")
            out[launcher] = (d[0], global_losses(f"{tmp}/{launcher}", np, int(step[:2])))
        (dm, lm), (dg, lg) = out["mpirun"], out["launch"]
        # At 2 ranks every sum has two terms, which any algorithm adds the same way: bit for bit.
        if dg != dm or lg != lm:
            raise Failure(f"{step} at 2 ranks: Gloo ends at {dg}, MPI at {dm}"
                          + ("" if lg == lm else " and their per-step losses differ")
                          + " (a sum of two is order-free: they must agree bit for bit)")
        print(f"{step} at 2 ranks, Gloo vs MPI: digests and per-step losses identical ({dg})")
    scenario.__name__ = f"gloo_matches_mpi_{step[:2]}_np{np}"
    scenario.__doc__ = (f"{step} at {np} ranks under scripts/launch.sh (Gloo) trains like under mpirun (MPI)"
                        + (", bit for bit." if np == 2 else ": one step from the same state agrees within "
                           "float32 rounding."))
    return scenario


@scenario(processors=2, needs=("gloo", "mpi"))
def gloo_peer_faults(tmp):
    """Gloo without a launcher to clean up: a rank that never starts, a killed rank and a frozen
    (SIGSTOP) rank each end the surviving rank within --timeout, with a line that names the cause."""
    timeout, args = 4, SMALL + ["--epochs", "100000"]
    # start-up: rank 1 never comes
    procs = start_ranks(tmp, 2, args, timeout, only=[0])
    took = wait_exit(procs[0][0], timeout + 5)
    err = open(procs[0][1]).read()
    # the store's get and the watchdog run out together: either names the wait
    if took is None or procs[0][0].returncode == 0 or not ("did not appear" in err or "rendezvous" in err):
        procs[0][0].kill()
        raise Failure(f"rank 0 alone (WORLD_SIZE=2) should end within {timeout} s naming the rendezvous: "
                      f"{took}, {err!r}")
    print(f"rank 1 never started: rank 0 ended after {took:.1f} s (--timeout {timeout})")
    for fault, sig in (("killed", signal.SIGKILL), ("frozen", signal.SIGSTOP)):
        procs = start_ranks(tmp, 2, args, timeout)
        deadline = time.monotonic() + 60
        while "global batch" not in open(f"{tmp}/out0.txt").read() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)  # well into training
        procs[1][0].send_signal(sig)
        took = wait_exit(procs[0][0], timeout + 5)
        procs[1][0].kill()
        procs[1][0].wait()
        err = open(procs[0][1]).read()
        if took is None:
            procs[0][0].kill()
            raise Failure(f"a {fault} peer: rank 0 still runs {timeout + 5} s later (--timeout {timeout})")
        if procs[0][0].returncode == 0 or not ("GLOO ERROR" in err or "watchdog" in err):
            raise Failure(f"a {fault} peer: rank 0 exited {procs[0][0].returncode} without naming the failure: {err!r}")
        if took > timeout + 2:
            raise Failure(f"a {fault} peer: rank 0 ended after {took:.1f} s, more than --timeout {timeout} s")
        print(f"{fault} peer: rank 0 ended after {took:.1f} s: {err.strip().splitlines()[-1][:160]}")


@scenario(processors=2, needs=("gloo", "mpi"))
def gloo_ranks_agree(tmp):
    """The ranks' agreement check runs over Gloo too: two ranks started with different --lr both stop
    before training, naming the flag and both values."""
    procs = start_ranks(tmp, 2, lambda r: small(lr=0.05 if r == 0 else 0.1) + ["--epochs", "1"], 30)
    for r, (p, err) in procs.items():
        if wait_exit(p, 60) is None:
            p.kill()
            raise Failure(f"rank {r} still runs 60 s after starting with another --lr than its peer")
        text = open(err).read()
        if p.returncode == 0 or "the ranks disagree on --lr" not in text:
            raise Failure(f"rank {r}: exit {p.returncode}, expected the agreement check's line: {text!r}")
    print("different --lr over Gloo: " + open(procs[0][1]).read().strip().splitlines()[0])


@scenario(processors=2, needs=("gloo", "mpi"))
def torchrun_matches_mpi(tmp):
    """torchrun --nproc_per_node 2 --no_python 06_full --device cpu (the course's launch line, with
    --standalone's rendezvous on a free port, on the Gloo backend) trains like mpirun -n 2 (MPI), bit
    for bit."""
    if torchrun_cmd(2) is None:
        print("skipped: torchrun is not installed (apt-get install python3-torch)")
        return SKIP
    args = SMALL + ["--epochs", "2"]
    out, _ = run("06_full", args + ["--metrics", f"{tmp}/t{{rank}}.jsonl"], np=2, launcher="torchrun")
    run("06_full", args + ["--metrics", f"{tmp}/m{{rank}}.jsonl"], np=2, launcher="mpirun")
    dt, dm = digests(f"{tmp}/t", 2), digests(f"{tmp}/m", 2)
    if metrics(f"{tmp}/t0.jsonl")[2]["world_size"] != 2:
        raise Failure(f"torchrun started {metrics(f'{tmp}/t0.jsonl')[2]['world_size']} rank(s), not 2")
    if len(set(dt)) != 1 or dt != dm:
        raise Failure(f"under torchrun the ranks end at {dt}, under mpirun at {dm}")
    print(f"torchrun, 2 ranks: param_digest {dt[0]}, the same as mpirun's")


# Gloo against MPI (bit for bit at 2 ranks): the runs start under both launchers, so the test needs MPI too.
for np in (2, 3):
    for step in ("06_full", "07_zero"):
        register(gloo_matches_mpi(step, np), processors=2, needs=("gloo", "mpi"))
