"""The flight recorder (common/dist/flight.h) on real jobs: one rank misbehaves, the job ends, every
rank that could wrote its ring, and scripts/fr_analyze.py names the culprit. Each scenario runs under
mpirun and under scripts/launch.sh (Gloo). The faults come from the process group's test hooks
(DDP_TEST_SKIP_COLLECTIVE, DDP_TEST_COUNT_DELTA, read once by dist.c) or from a signal (SIGSTOP).
"""
import os
import signal
import subprocess
import sys
import time

from tests.harness.drill import rank_pids, wait_until
from tests.harness.env import BIN, ROOT, SMALL, Failure
from tests.harness.launch import launch, run, wait_exit
from tests.harness.scenario import scenario

ANALYZE = os.path.join(ROOT, "scripts", "fr_analyze.py")
# A short --timeout: the ranks that wait for the culprit end after it. Long enough that a loaded
# machine's slow step is not taken for a hang: a healthy step of this model takes milliseconds.
TIMEOUT = ["--timeout", "8"]
LONG = ["--epochs", "200"]  # long enough to be stopped by a signal while it trains


def analyze(folder, world=2):
    p = subprocess.run([sys.executable, ANALYZE, os.path.join(folder, "fr_{rank}.jsonl"), "--world", str(world)],
                       capture_output=True, text=True, timeout=60)
    return p.returncode, (p.stdout + p.stderr).strip()


def expect(folder, status, words, why):
    rc, out = analyze(folder)
    missing = [w for w in words if w not in out]
    if rc != status or missing:
        rings = sorted(os.listdir(folder)) if os.path.isdir(folder) else "no folder"
        raise Failure(f"{why}: fr_analyze.py exited {rc} (want {status}), missing {missing} in:\n{out}\n"
                      f"rings in {folder}: {rings}")
    print(f"{why}: {out.splitlines()[-1]}")


def faulty_run(tmp, env_var, value):
    """06_full at 2 ranks with one test hook set; the job must fail (the others wait, then end)."""
    os.environ[env_var] = value
    try:
        run("06_full", SMALL + TIMEOUT + ["--epochs", "2", "--fr_dir", f"{tmp}/fr"], np=2, expect_rc=None, tmp=tmp)
    finally:
        del os.environ[env_var]


@scenario(processors=2, launchers=("launch",), timeout=180)
def fr_skip(tmp):
    """Rank 1 never calls its collective 20 (DDP_TEST_SKIP_COLLECTIVE=1:20): the analyzer names rank 1
    and #20, and the ranks that wait in it."""
    faulty_run(tmp, "DDP_TEST_SKIP_COLLECTIVE", "1:20")
    expect(f"{tmp}/fr", 3, ["rank 1 never started #20", "it went on to #21", "rank 0 waits in it"],
           "rank 1 skips #20")


@scenario(processors=2, launchers=("launch",), timeout=180)
def fr_size(tmp):
    """Rank 1 calls collective 25 (or the first after it of more than one element) with one element
    fewer (DDP_TEST_COUNT_DELTA=1:25): the backend fails on both ranks, both write their rings, and
    the analyzer names the size mismatch there."""
    faulty_run(tmp, "DDP_TEST_COUNT_DELTA", "1:25")
    expect(f"{tmp}/fr", 5, ["size mismatch at #", "rank 1 float32 x"], "rank 1 shortens #25 or the next")


def rank_pid(tag, rank, limit=30):
    """The pid of rank `rank` of the job whose command line contains tag (under mpirun or launch.sh)."""
    pid = wait_until(lambda: rank_pids(tag).get(rank), limit, poll=0.1)
    if pid is None:
        raise Failure(f"rank {rank} of the job ({tag}) did not start within {limit} s")
    return pid


def steps_done(path):
    try:
        with open(path) as f:
            return sum('"type":"step"' in line for line in f)
    except OSError:
        return 0


def start_long(tmp, extra=()):
    """06_full at 2 ranks under the scenario's launcher, training for a long time; (Popen, its tag)."""
    tag = f"{tmp}/fr"
    cmd = [os.path.join(BIN, "06_full")] + SMALL + TIMEOUT + LONG + [
        "--fr_dir", tag, "--metrics", f"{tmp}/m{{rank}}.jsonl", "--log_interval", "1"] + list(extra)
    argv, env = launch(cmd, 2)
    with open(f"{tmp}/stderr.txt", "w") as err:  # a file: a pipe nobody reads while the job runs may fill
        return subprocess.Popen(argv, env=env, cwd=tmp, stdout=subprocess.DEVNULL, stderr=err), tag


def stderr_of(tmp):
    with open(f"{tmp}/stderr.txt") as f:
        return f.read()[-3000:]


def wait_steps(p, tmp, n=20, limit=120):
    deadline = time.monotonic() + limit
    while min(steps_done(f"{tmp}/m{r}.jsonl") for r in range(2)) < n:
        if p.poll() is not None:
            raise Failure(f"the job ended before {n} steps (exit {p.returncode}):\n{stderr_of(tmp)}")
        if time.monotonic() > deadline:
            raise Failure(f"the job made fewer than {n} steps in {limit} s")
        time.sleep(0.05)


def ring_heads(folder):
    heads = []
    for r in range(2):
        try:
            with open(f"{folder}/fr_{r}.jsonl") as f:
                lines = f.readlines()
            heads.append(lines[0].strip() + "\n  last: " + (lines[-1].strip() if len(lines) > 1 else "-"))
        except OSError as e:
            heads.append(f"rank {r}: {e}")
    return "\n".join(heads)


@scenario(processors=2, launchers=("launch",), timeout=240)
def fr_freeze(tmp):
    """Rank 1 is stopped with SIGSTOP while the job trains: rank 0's watchdog ends the job, and the
    analyzer names rank 1 as the rank that did not run, with how long."""
    p, tag = start_long(tmp)
    try:
        wait_steps(p, tmp)
        os.kill(rank_pid(tag, 1), signal.SIGSTOP)
        if wait_exit(p, 120) is None:
            raise Failure("the job did not end within 120 s of SIGSTOP on rank 1 (--timeout 8)")
    finally:
        if p.poll() is None:
            p.kill()
        p.wait()
        subprocess.run(["pkill", "-KILL", "-f", tag], check=False)  # a stopped rank the launcher left
    rc, out = analyze(tag)
    # Both launchers let the stopped rank go on (SIGCONT) before they end it, and it writes its ring:
    # the verdict must say that it did not run (its watchdog saw the gap in its ticks).
    named = "rank 1 did not run" in out
    if rc != 3 or not named:
        raise Failure(f"SIGSTOP on rank 1: fr_analyze.py exited {rc} (want 3, naming rank 1):\n{out}\n"
                      + ring_heads(tag))
    print(f"SIGSTOP on rank 1: {out.splitlines()[-1]}")


@scenario(processors=2, launchers=("launch",), timeout=240)
def fr_clean(tmp):
    """A healthy job asked for its rings with SIGUSR2 while it trains: both ranks write them, the job
    goes on and ends well, and the analyzer names no culprit."""
    p, tag = start_long(tmp)  # 1,600 steps: the ring is written within a tick (0.1 s) of the signal
    try:
        wait_steps(p, tmp)
        for r in range(2):
            os.kill(rank_pid(tag, r), signal.SIGUSR2)
        rings = [f"{tag}/fr_{r}.jsonl" for r in range(2)]
        deadline = time.monotonic() + 30
        while not all(os.path.exists(f) for f in rings):
            if time.monotonic() > deadline:
                raise Failure(f"SIGUSR2: no ring within 30 s ({[os.path.exists(f) for f in rings]})")
            time.sleep(0.05)
        if wait_exit(p, 180) is None or p.returncode != 0:
            raise Failure(f"the job did not end well after SIGUSR2 (exit {p.returncode}):\n{stderr_of(tmp)}")
    finally:
        if p.poll() is None:
            p.kill()
        p.wait()
    expect(tag, 0, ["no culprit"], "SIGUSR2 on a healthy job")
