"""The launchers and the watchdog: launch.sh, SLURM_* variables, torchrun and mpirun; bad launcher
variables; signals to launch.sh; a frozen or disagreeing rank; SIGTERM to a rank stuck in a collective.
"""
import os
import shutil
import signal
import subprocess
import time

from tests.harness.env import BIN, MPIEXEC, SMALL, Failure
from tests.harness.launch import (TORCHRUN_POLL, proc_children, proc_running, rank_pid, run,
                                  torchrun_rendezvous)
from tests.harness.results import metrics
from tests.harness.scenario import scenario


@scenario(processors=2)
def dist_bad_launch(tmp):
    """Inconsistent launcher variables, an impossible backend and a wrong-shape checkpoint each end
    every rank with a one-line reason, and nothing hangs."""
    def env_run(env, args, word):
        e = dict(os.environ, **env)
        for k in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"):
            e.pop(k, None)
        p = subprocess.run([os.path.join(BIN, "05_metrics_ckpt")] + SMALL + args, env=e,
                           capture_output=True, text=True, timeout=60)
        if p.returncode == 0 or word.lower() not in p.stderr.lower():
            raise Failure(f"{env} {args}: rc {p.returncode}, stderr {p.stderr!r} lacks '{word}'")
    env_run({"RANK": "2", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, [], "ranks run from 0 to 1")
    env_run({"RANK": "1"}, [], "WORLD_SIZE")
    env_run({"RANK": "x", "WORLD_SIZE": "2"}, [], "RANK='x'")
    env_run({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "127.0.0.1",
             "MASTER_PORT": "29500"}, ["--backend", "mpi"], "mpirun")
    # NCCL's bootstrap address (NCCL_COMM_ID) is built from MASTER_ADDR and MASTER_PORT before any
    # backend is chosen, so these are refused on the CPU too, on every rank, with the variable named.
    two = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "127.0.0.1"}
    env_run(dict(two, MASTER_PORT="abc"), [], "MASTER_PORT='abc' is not a TCP port")
    env_run(dict(two, MASTER_PORT="70000"), [], "MASTER_PORT='70000' is not a TCP port")
    env_run(dict(two, MASTER_PORT="65535"), [], "MASTER_PORT + 1, which is not a port")
    env_run(dict(two, MASTER_PORT="29500", DDP_NCCL_PORT="0"), [], "DDP_NCCL_PORT='0'")
    env_run(dict(two, MASTER_PORT="29500", MASTER_ADDR="127.0.0.1:29500"), [], "port in MASTER_PORT")
    env_run(dict(two, MASTER_PORT="29500", MASTER_ADDR="fe80::1::2"), [], "MASTER_ADDR='fe80::1::2'")
    # Several CPU ranks from an environment launch (srun without an MPI plugin, torchrun, launch.sh)
    # are told how CPU ranks are started, not to set NCCL's MASTER_ADDR and MASTER_PORT.
    for env in ({"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_LOCALID": "1"},
                {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"}):
        for word in ("srun --mpi=pmix -n 2", "mpirun -np 2"):
            env_run(env, [], word)
    # IPv6 literals, bare or in brackets, pass (and the run stops later, at --backend mpi)
    for addr in ("::1", "[::1]", "fe80::1%eth0"):
        env_run(dict(two, MASTER_PORT="29500", MASTER_ADDR=addr), ["--backend", "mpi"], "mpirun")
    env_run({}, ["--backend", "nccl"], "nccl")
    env_run({}, ["--device", "cuda", "--backend", "mpi"], "cuda")  # no GPU here, or no CUDA build
    run("05_metrics_ckpt", SMALL + ["--epochs", "1", "--save_interval", "1", "--ckpt_dir", f"{tmp}/ck"])
    _, err = run("05_metrics_ckpt", SMALL[:-4] + ["--hidden", "32", "--resume", f"{tmp}/ck/checkpoint.bin"],
                 np=2, expect_rc=1)
    if "784-64-10" not in err or "784-32-10" not in err:
        raise Failure(f"shape mismatch should name both shapes: {err!r}")
    _, err = run("05_metrics_ckpt", SMALL + ["--dataset_size", "3"], np=4, expect_rc=1)
    if "3 training samples for 4 ranks" not in err:
        raise Failure(f"N < W should be refused clearly: {err!r}")


@scenario(processors=2)
def launchers(tmp):
    """Step 06 starts under each launcher: scripts/launch.sh and torchrun (environment variables) at
    one rank, srun-style SLURM_* variables, and mpirun; the MPI backend refuses an environment
    launch of 2 ranks with a message that says to use mpirun, and launch.sh then stops both ranks."""
    args = SMALL + ["--epochs", "1"]
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMPI_COMM_WORLD", "PMI", "PMIX", "RANK", "WORLD_SIZE", "SLURM"))}
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    launch = os.path.join(root, "scripts", "launch.sh")
    prog = os.path.join(BIN, "06_full")

    def go(name, cmd, extra_env=None, ok=True):
        e = dict(env, **(extra_env or {}))
        p = subprocess.run(cmd, capture_output=True, text=True, env=e, timeout=120)
        if (p.returncode == 0) != ok:
            raise Failure(f"{name}: exit {p.returncode}\n{p.stdout}\n{p.stderr}")
        return p

    go("launch.sh -n 1", [launch, "-n", "1", prog] + args + ["--metrics", f"{tmp}/l{{rank}}.jsonl"])
    go("SLURM_* variables", [prog] + args + ["--metrics", f"{tmp}/s{{rank}}.jsonl"],
       {"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_LOCALID": "0"})
    run("06_full", args + ["--metrics", f"{tmp}/m{{rank}}.jsonl"], np=2)
    if not (metrics(f"{tmp}/l0.jsonl")[2]["world_size"] == metrics(f"{tmp}/s0.jsonl")[2]["world_size"] == 1
            and metrics(f"{tmp}/m0.jsonl")[2]["world_size"] == 2):
        raise Failure("the launchers did not give the expected world sizes")
    p = go("launch.sh -n 2 with the MPI backend", [launch, "-n", "2", prog] + args + ["--backend", "mpi"],
           ok=False)
    if "mpirun" not in p.stderr or "stopping the others" not in p.stderr:
        raise Failure(f"expected a hint to use mpirun and launch.sh stopping the ranks: {p.stderr!r}")
    torchrun = shutil.which("torchrun")
    if torchrun:
        # --redirects 2 --tee 1: Debian's torch 1.13 on Python 3.11 crashes on the default "0".
        p = go("torchrun", [torchrun, *torchrun_rendezvous(), "--nproc_per_node", "1", *TORCHRUN_POLL,
                            "--redirects", "2", "--tee", "1",
                            "--no_python", prog] + args + ["--metrics", f"{tmp}/t{{rank}}.jsonl"])
        if metrics(f"{tmp}/t0.jsonl")[2]["world_size"] != 1:
            raise Failure("torchrun: wrong world size")
    else:
        print("torchrun not installed: that launcher was not tried")


@scenario(processors=2)
def watchdog_deadlock(tmp):
    """A rank that freezes mid-training (SIGSTOP) would leave its peer waiting in an all-reduce for
    ever; with --timeout 3 the peer's watchdog ends the whole job within 30 s, naming the wait.
    (Ranks started with different settings can no longer make a hang: the agreement check refuses
    them at start-up, so the peer is frozen instead.)"""
    tag = f"{tmp}/frozen_{{rank}}.jsonl"
    cmd = [MPIEXEC, "-n", "2", os.path.join(BIN, "06_full")] + SMALL + [
        "--epochs", "100000", "--timeout", "3", "--metrics", tag]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        t0 = time.time()
        while not os.path.exists(f"{tmp}/frozen_1.jsonl") or os.path.getsize(f"{tmp}/frozen_1.jsonl") == 0:
            if time.time() - t0 > 60 or p.poll() is not None:
                raise Failure("the job did not start training")
            time.sleep(0.05)
        pid = rank_pid(tag, 1)
        if pid is None:
            raise Failure("rank 1's process was not found")
        os.kill(pid, signal.SIGSTOP)
        t0 = time.time()
        try:
            _, err = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            raise Failure("the job still hangs 60 s after rank 1 froze")
        took = time.time() - t0
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
        p.wait()
    if p.returncode == 0 or took > 30 or "watchdog" not in err:
        raise Failure(f"exit {p.returncode} after {took:.1f} s; stderr: {err[-800:]!r}")
    print(f"ended {took:.1f} s after rank 1 froze: {[l for l in err.splitlines() if 'watchdog' in l][0]}")


@scenario(processors=2, timeout=90)
def watchdog_startup(tmp):
    """A rank started with other Open MPI collective settings disagrees with its peer inside
    MPI_Comm_split_type at start-up, where both hung for ever at 100 % CPU: with --timeout 5 the
    watchdog ends the job within 60 s, naming the wait."""
    args = SMALL + ["--epochs", "1", "--timeout", "5"]
    prog = os.path.join(BIN, "06_full")
    cmd = [MPIEXEC, "-n", "1", prog] + args + [":", "-n", "1", "env",
                                               "OMPI_MCA_coll_libnbc_iallreduce_algorithm=2", prog] + args
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    t0 = time.time()
    try:
        _, err = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        raise Failure("the job still hangs after 60 s (--timeout 5)")
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
        p.wait()
    took = time.time() - t0
    if p.returncode == 0 or "watchdog: MPI_Comm_split_type has waited more than 5 s" not in err:
        raise Failure(f"exit {p.returncode} after {took:.1f} s; stderr: {err[-800:]!r}")
    print(f"ended after {took:.1f} s: {[l for l in err.splitlines() if 'watchdog' in l][0]}")


@scenario(processors=2)
def launcher_signal(tmp):
    """scripts/launch.sh forwards SIGTERM, SIGINT and SIGHUP: when the launcher gets one, every rank
    ends, none is left running, and the launcher exits non-zero (128 + the signal's number); -n takes
    only a decimal number without leading zeros."""
    import signal
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    launch = os.path.join(root, "scripts", "launch.sh")
    # Step 01 has no process group: two copies run side by side, each long enough to be interrupted.
    prog = os.path.abspath(os.path.join(BIN, "01_single_gpu"))
    args = SMALL + ["--epochs", "1000000", "--dataset_size", "256", "--hidden", "16"]
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMPI_COMM_WORLD", "PMI", "PMIX", "RANK", "WORLD_SIZE", "SLURM"))}
    # -n is decimal without leading zeros: "00" and "08" once started nothing and exited 0, "010"
    # started 8 ranks as WORLD_SIZE=010. Each is refused with status 2, and nothing starts.
    for n in ("00", "08", "010", "0", "-2", "2x"):
        marker = os.path.join(tmp, "started")
        p = subprocess.run([launch, "-n", n, "touch", marker], capture_output=True, text=True, env=env, timeout=60)
        if p.returncode != 2 or "-n needs a positive decimal number" not in p.stderr or os.path.exists(marker):
            raise Failure(f"launch.sh -n {n}: exit {p.returncode}, started {os.path.exists(marker)}: {p.stderr!r}")
    # SIGHUP (the terminal closed) once left the ranks running with parent 1.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        p = subprocess.Popen([launch, "-n", "2", prog] + args, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True, env=env, cwd=tmp, start_new_session=True)
        ranks = []
        try:
            for _ in range(600):  # up to 60 s for both ranks to start
                ranks = proc_children(p.pid, prog)
                if len(ranks) == 2 or p.poll() is not None:
                    break
                time.sleep(0.1)
            if len(ranks) != 2:
                raise Failure(f"launch.sh did not start 2 ranks (found {ranks}, exit {p.poll()})")
            os.kill(p.pid, sig)
            try:
                rc = p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                raise Failure(f"{sig.name}: launch.sh did not exit within 60 s")
            left = [r for r in ranks if proc_running(r, prog)]
            if left:
                raise Failure(f"{sig.name}: launch.sh exited {rc} but ranks {left} still run")
            if rc == 0:
                raise Failure(f"{sig.name}: launch.sh exited 0 after it was interrupted")
            err = p.stderr.read()
            print(f"{sig.name}: launch.sh exited {rc}, both ranks ended: {err.strip().splitlines()[-1:]}")
        finally:
            for r in ranks:  # whatever happened, leave nothing running
                if proc_running(r, prog):
                    os.kill(r, signal.SIGKILL)
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()

# ---- review: SIGTERM to a rank stuck in a collective -------------------------------------------------

@scenario(processors=2)
def preempt_stuck(tmp):
    """A rank stuck in a collective (its peer frozen by SIGSTOP) that gets SIGTERM ends within seconds,
    naming the signal, instead of at SIGKILL or --timeout (60 s here); a second SIGTERM, 1.5 s after
    the first, ends it at once, before that grace."""
    prog = os.path.join(BIN, "06_full")
    for second in (False, True):
        tag = f"{tmp}/stuck{int(second)}_{{rank}}.jsonl"
        cmd = [MPIEXEC, "-n", "2", prog] + SMALL + ["--epochs", "100000", "--timeout", "60", "--metrics", tag]
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
        try:
            first = tag.format(rank=1)
            t0 = time.time()
            while not os.path.exists(first) or os.path.getsize(first) == 0:
                if time.time() - t0 > 60 or p.poll() is not None:
                    raise Failure("the job did not start training")
                time.sleep(0.05)
            pid0, pid1 = rank_pid(tag, 0), rank_pid(tag, 1)
            if pid0 is None or pid1 is None:
                raise Failure(f"the ranks' processes were not found ({pid0}, {pid1})")
            os.kill(pid1, signal.SIGSTOP)
            time.sleep(0.5)  # rank 0 is now inside a collective that cannot finish
            os.kill(pid0, signal.SIGTERM)
            if second:
                time.sleep(1.5)
                os.kill(pid0, signal.SIGTERM)
            t0 = time.time()
            limit = 1.5 if second else 20
            while proc_running(pid0, prog) and time.time() - t0 < 60:
                time.sleep(0.05)
            took = time.time() - t0
        finally:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
            _, err = p.communicate()
        what = "the second SIGTERM" if second else "SIGTERM"
        if took > limit:
            raise Failure(f"rank 0, stuck in a collective, still ran {took:.1f} s after {what} (at most {limit} "
                          f"s expected; --timeout 60)\nstderr: {err[-800:]}")
        if not second and "after a SIGTERM or SIGUSR1" not in err:
            raise Failure(f"rank 0 ended {took:.1f} s after SIGTERM without saying why:\n{err[-800:]}")
        print(f"{what}: rank 0 ended {took:.1f} s after it")
