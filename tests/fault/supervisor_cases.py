#!/usr/bin/env python3
"""The supervisors' own inputs and signals: scripts/launch.sh and scripts/restart.sh, on small shell
programs instead of a trainer (each case takes seconds). Cases:

  launch_args    launch.sh takes its options in any order before the program: `-n 2 --max_restarts 1
                 PROG`, `--max_restarts=1 -n 2 PROG` and `-n 2 -- PROG` run PROG at 2 ranks (the
                 first once ran `--max_restarts` as the program, exit 127; the second was a usage
                 error); an unknown option before the program is refused with status 2, naming it
  grace_values   STOP_GRACE and RESTART_DELAY that are not a number of seconds (`abc`, `-1`, `1e3`)
                 are refused with status 2 and a message by both scripts, before anything starts
  grace_launch   STOP_GRACE=1.5 under launch.sh: when one rank fails, the other gets SIGTERM and its
                 1.5 s (it needs 0.6 s to finish); it once got a bash arithmetic error and SIGKILL at once
  grace_restart  STOP_GRACE=0.5 under restart.sh: SIGTERM to restart.sh leaves the attempt 0.5 s (it
                 needs 0.25 s); restart.sh once cut 0.5 down to 0 and sent SIGKILL at once
  orphan         SIGKILL to restart.sh (nothing can trap it) during an attempt under launch.sh: the
                 attempt gets SIGTERM and ends, ranks included; it once ran on unsupervised for ever
  orphan_mpirun  the same with mpirun as the launch (mpirun gets the SIGTERM itself: its ranks then
                 have mpirun's 1 s, and may be SIGKILLed; nothing may be left)
  mpirun_grace   SIGTERM to restart.sh with the attempt under mpirun: the ranks get STOP_GRACE seconds
                 (here 8; they need 2.5) before SIGKILL, not mpirun's own 1 s

Standard library only. Exit 1 on any failure, 77 when skipped (mpirun missing, for the mpirun cases).
Environment: DDP_MPIEXEC (default mpirun).
"""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAUNCH = os.path.join(ROOT, "scripts", "launch.sh")
RESTART = os.path.join(ROOT, "scripts", "restart.sh")

# A rank: writes ready.R, then waits. On SIGTERM it takes $DELAY seconds to finish, then writes done.R
# and exits 0. FAIL_RANK, when it is this rank's number, exits 1 once every rank is ready.
RANK_SH = r"""#!/usr/bin/env bash
R=${RANK:-${OMPI_COMM_WORLD_RANK:-0}}
N=${WORLD_SIZE:-${OMPI_COMM_WORLD_SIZE:-1}}
D=$(dirname "$0")
sp=
on_term() {
  trap '' TERM
  [ -n "$sp" ] && kill "$sp" 2>/dev/null
  sleep "$DELAY"
  touch "$D/done.$R"
  exit 0
}
trap on_term TERM
touch "$D/ready.$R"
if [ "${FAIL_RANK:-}" = "$R" ]; then
  while [ "$(ls "$D" | grep -c '^ready\.')" -lt "$N" ]; do sleep 0.05; done
  exit 1
fi
sleep 1000 &
sp=$!
wait "$sp"
"""


class Failure(Exception):
    pass


def env(**extra):
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(("OMPI_COMM_WORLD", "PMI", "PMIX", "RANK", "WORLD_SIZE", "LOCAL_", "SLURM",
                              "TORCHELASTIC", "STOP_GRACE", "RESTART_DELAY", "OMPI_MCA_odls"))}
    e.update(OMPI_MCA_rmaps_base_oversubscribe="1")
    e.setdefault("OMPI_MCA_btl", "self,vader")
    if os.geteuid() == 0:
        e.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    e.update({k: str(v) for k, v in extra.items()})
    return e


def with_tag(pred):
    """Live, non-zombie processes whose command line or environment satisfies pred(bytes, bytes)."""
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read()
            with open(f"/proc/{d}/environ", "rb") as f:
                environ = f.read()
            with open(f"/proc/{d}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
        except OSError:
            continue
        if pred(cmd, environ):
            found.append(int(d))
    return found


class Case:
    """A folder with the rank program; every process started from it is found by the folder's name
    (in its command line or its environment) and SIGKILLed by cleanup()."""

    def __init__(self, name):
        self.dir = tempfile.mkdtemp(prefix=f"supervisor_cases-{name}-")
        self.prog = os.path.join(self.dir, "rank.sh")
        with open(self.prog, "w") as f:
            f.write(RANK_SH)
        os.chmod(self.prog, 0o755)
        self.procs = []

    def start(self, cmd, **extra):
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=self.dir,
                             env=env(CASE_DIR=self.dir, **extra), start_new_session=True)
        self.procs.append(p)
        return p

    def run(self, cmd, timeout=60, **extra):
        p = self.start(cmd, **extra)
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise Failure(f"{' '.join(cmd)}: still running after {timeout} s")
        return p.returncode, out, err

    def reset(self):
        for n in self.markers("ready") + self.markers("done"):
            os.unlink(os.path.join(self.dir, n))

    def markers(self, kind):
        return sorted(n for n in os.listdir(self.dir) if n.startswith(kind + "."))

    def wait_markers(self, kind, n, timeout):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if len(self.markers(kind)) >= n:
                return True
            time.sleep(0.05)
        return False

    def alive(self):
        tag = self.dir.encode()
        return with_tag(lambda cmd, environ: tag in cmd or tag in environ)

    def cleanup(self):
        for pid in self.alive():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except OSError:
                    pass
            try:
                p.communicate(timeout=10)
            except (subprocess.TimeoutExpired, ValueError):
                pass
        shutil.rmtree(self.dir, ignore_errors=True)


def case_launch_args(c, a):
    for cmd in ([LAUNCH, "-n", "2", "--max_restarts", "1", c.prog],
                [LAUNCH, "--max_restarts=1", "-n", "2", c.prog],
                [LAUNCH, "-n", "2", "--max_restarts=1", "--", c.prog],
                [LAUNCH, "--max_restarts", "1", "-n", "2", c.prog]):
        c.reset()
        # rank 1 fails once both are ready: attempt 0 fails, attempt 1 fails, and the limit of 1 is reached
        rc, out, err = c.run(cmd, FAIL_RANK=1, DELAY=0, RESTART_DELAY=0, STOP_GRACE=2)
        if rc != 1 or "attempt 1 failed with status 1; the limit of 1 restarts was reached" not in err:
            raise Failure(f"{' '.join(cmd[1:])}: exit {rc} (expected 1 after 1 restart):\n{err}")
        print(f"  launch.sh {' '.join(cmd[1:-1])} PROG: 2 ranks, 1 restart, exit {rc}")
    c.reset()
    rc, out, err = c.run([LAUNCH, "-n", "2", c.prog], FAIL_RANK=0, DELAY=0, STOP_GRACE=2)
    if rc != 1 or "restart.sh:" in err:
        raise Failure(f"launch.sh -n 2 PROG without --max_restarts: exit {rc}:\n{err}")
    for bad, want in ((["-n", "2", "--bogus", c.prog], "unknown option '--bogus'"),
                      (["--max_restarts"], "usage"),
                      (["-n", "2", "--max_restarts", c.prog], "--max_restarts needs a number"),
                      (["-n", "2"], "usage")):
        c.reset()
        rc, out, err = c.run([LAUNCH] + bad, DELAY=0)
        if rc != 2 or want not in err or c.markers("ready"):
            raise Failure(f"launch.sh {' '.join(bad)}: exit {rc} (expected 2 and '{want}'):\n{err}")
        print(f"  launch.sh {' '.join(bad)}: exit 2, '{err.strip().splitlines()[0]}'")


def case_grace_values(c, a):
    for var in ("STOP_GRACE", "RESTART_DELAY"):
        for value in ("abc", "-1", "1e3", " 1", "1."):
            for cmd in ([LAUNCH, "-n", "1", c.prog], [RESTART, "--max_restarts", "0", "--", c.prog]):
                if var == "RESTART_DELAY" and cmd[0] == LAUNCH:
                    cmd = [LAUNCH, "--max_restarts", "0", "-n", "1", c.prog]
                rc, out, err = c.run(cmd, FAIL_RANK=0, DELAY=0, **{var: value})
                if rc != 2 or f"{var} must be a number of seconds" not in err or c.markers("ready"):
                    raise Failure(f"{var}={value!r} {os.path.basename(cmd[0])}: exit {rc}, started "
                                  f"{c.markers('ready')} (expected 2, nothing started):\n{err}")
        print(f"  {var} abc, -1, 1e3, ' 1' and '1.': refused with status 2 by launch.sh and restart.sh")
    for value in ("1.5", "0.05", "2", "0", ""):
        c.reset()
        rc, out, err = c.run([LAUNCH, "-n", "1", c.prog], FAIL_RANK=0, DELAY=0, STOP_GRACE=value)
        if rc != 1 or "error" in err.lower():
            raise Failure(f"STOP_GRACE={value} launch.sh: exit {rc} (expected the rank's 1):\n{err}")
    print("  STOP_GRACE 1.5, 0.05, 2, 0 and '' (the default) accepted")


def case_grace_launch(c, a):
    rc, out, err = c.run([LAUNCH, "-n", "2", c.prog], FAIL_RANK=0, DELAY=0.6, STOP_GRACE=1.5)
    if rc != 1 or "syntax error" in err or "done.1" not in c.markers("done"):
        raise Failure(f"STOP_GRACE=1.5: exit {rc}, rank 1 finished: {'done.1' in c.markers('done')} "
                      f"(expected exit 1, and rank 1 to finish its 0.6 s):\n{err}")
    print("  STOP_GRACE=1.5 under launch.sh: rank 1 got SIGTERM and finished in its 0.6 s; exit 1")


def stop_after_ready(c, p, n, sig, timeout=60):
    if not c.wait_markers("ready", n, 30):
        err = p.stderr.read() if p.poll() is not None else ""
        raise Failure(f"the ranks did not start (ready: {c.markers('ready')}):\n{err}")
    os.kill(p.pid, sig)
    if sig == signal.SIGKILL:
        return None, ""
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise Failure(f"still running {timeout} s after {sig.name}")
    return p.returncode, err


def case_grace_restart(c, a):
    p = c.start([RESTART, "--max_restarts", "0", "--", c.prog], DELAY=0.25, STOP_GRACE=0.5)
    rc, err = stop_after_ready(c, p, 1, signal.SIGTERM)
    if rc != 143 or "done.0" not in c.markers("done"):
        raise Failure(f"STOP_GRACE=0.5: exit {rc}, the attempt finished: {c.markers('done')} (expected 143, "
                      f"and the attempt to finish its 0.25 s):\n{err}")
    print("  STOP_GRACE=0.5 under restart.sh: SIGTERM to restart.sh, the attempt finished in its 0.25 s; exit 143")


def orphan(c, launch, graceful=True):
    p = c.start([RESTART, "--max_restarts", "3", "--"] + launch, DELAY=0.2, STOP_GRACE=5)
    stop_after_ready(c, p, 2, signal.SIGKILL)
    p.wait(timeout=10)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 30:
        left = c.alive()
        if not left:
            break
        time.sleep(0.1)
    if left:
        raise Failure(f"restart.sh SIGKILLed: 30 s later the attempt still runs: {left}")
    if graceful and sorted(c.markers("done")) != ["done.0", "done.1"]:
        raise Failure(f"the ranks ended without their SIGTERM: finished {c.markers('done')}")
    print(f"  SIGKILL to restart.sh over {os.path.basename(launch[0])}: the attempt got SIGTERM, ranks that "
          f"finished {c.markers('done')}, nothing left after {time.monotonic() - t0:.1f} s")


def case_orphan(c, a):
    orphan(c, [LAUNCH, "-n", "2", c.prog])


def need_mpirun(a):
    if not shutil.which(a.mpiexec):
        print(f"SKIP: {a.mpiexec} not found")
        return False
    return True


def case_orphan_mpirun(c, a):
    if not need_mpirun(a):
        return 77
    orphan(c, [a.mpiexec, "-np", "2", c.prog], graceful=False)  # mpirun's own SIGTERM: 1 s, then SIGKILL


def case_mpirun_grace(c, a):
    if not need_mpirun(a):
        return 77
    p = c.start([RESTART, "--max_restarts", "0", "--", a.mpiexec, "-np", "2", c.prog], DELAY=2.5, STOP_GRACE=8)
    t0 = time.monotonic()
    rc, err = stop_after_ready(c, p, 2, signal.SIGTERM)
    if rc != 143 or sorted(c.markers("done")) != ["done.0", "done.1"]:
        raise Failure(f"SIGTERM to restart.sh over mpirun, STOP_GRACE=8: exit {rc}, finished {c.markers('done')} "
                      f"(expected 143 and both ranks to finish their 2.5 s):\n{err}")
    print(f"  SIGTERM to restart.sh over mpirun: both ranks finished their 2.5 s (STOP_GRACE 8); exit {rc} "
          f"after {time.monotonic() - t0:.1f} s")


CASES = {"launch_args": case_launch_args, "grace_values": case_grace_values, "grace_launch": case_grace_launch,
         "grace_restart": case_grace_restart, "orphan": case_orphan, "orphan_mpirun": case_orphan_mpirun,
         "mpirun_grace": case_mpirun_grace}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("case", choices=sorted(CASES))
    ap.add_argument("--mpiexec", default=os.environ.get("DDP_MPIEXEC", "mpirun"))
    a = ap.parse_args(argv)
    c = Case(a.case)
    t0 = time.monotonic()
    try:
        print(f"supervisor_cases {a.case}", flush=True)
        rc = CASES[a.case](c, a) or 0
    except Failure as e:
        print(f"FAILED {a.case}: {e}", file=sys.stderr)
        return 1
    finally:
        c.cleanup()
    if rc == 0:
        print(f"ok {a.case} ({time.monotonic() - t0:.1f} s)")
    return rc


if __name__ == "__main__":
    sys.exit(main())
