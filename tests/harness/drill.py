"""The fault drills' reusable core: processes found in /proc, a job's output collected on a thread, a
checkpoint verified (tests/fault/kill_rank.py's helpers), and restart_drill.py's supervised job, killed
at a step and compared with an uninterrupted run (tests/fault/restart_drill.py's drills and the
exercise checker's fault06_drill claim both run it).

SMALL and Failure here are the drills' own (not env.SMALL, env.Failure).
"""
import glob
import os
import re
import signal
import struct
import subprocess
import threading
import time
import zlib

# ---- checkpoint verification (the format of common/ckpt/ckpt.h) -------------------------------------------

def verify_checkpoint(path):
    """Returns None when path is a complete checkpoint, else a sentence saying what is wrong."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 56:
        return f"{len(data)} bytes, shorter than the header"
    if data[:8] != b"DDPCKPT\0":
        return "bad magic"
    version, hsize = struct.unpack_from("<II", data, 8)
    n_layers = struct.unpack_from("<I", data, 52)[0]
    # From version 2 the data's identity (24 bytes), from 3 the step fields (16), from 4 the pixels CRC (4),
    # from 5 the global batch and the epoch's world size (8).
    want = 56 + 4 * (n_layers + 1) + sum(size for since, size in ((2, 24), (3, 16), (4, 4), (5, 8))
                                         if version >= since)
    if version not in (1, 2, 3, 4, 5) or not 1 <= n_layers <= 16 or hsize != want or len(data) < hsize:
        return f"bad header (version {version}, header size {hsize}, {n_layers} layers)"
    sizes = struct.unpack_from(f"<{n_layers + 1}I", data, 56)
    n = sum(sizes[i] * sizes[i + 1] + sizes[i + 1] for i in range(n_layers))
    want = hsize + 8 * n + 4
    if len(data) != want:
        return f"{len(data)} bytes, expected {want} for shape {'-'.join(map(str, sizes))}"
    stored = struct.unpack_from("<I", data, len(data) - 4)[0]
    computed = zlib.crc32(data[:-4]) & 0xFFFFFFFF
    if stored != computed:
        return f"CRC mismatch (stored {stored:08x}, computed {computed:08x})"
    return None


# ---- processes ----------------------------------------------------------------------------------------

def rank_pids(tag):
    """{rank: pid} of the processes whose command line contains tag and that have a rank: MPI's
    (OMPI_COMM_WORLD_RANK), else an environment launch's (RANK: scripts/launch.sh, torchrun)."""
    found = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                if tag.encode() not in f.read():
                    continue
            with open(f"/proc/{d}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        var = dict(kv.split(b"=", 1) for kv in env if b"=" in kv)
        rank = var.get(b"OMPI_COMM_WORLD_RANK", var.get(b"RANK"))
        if rank is not None and rank.isdigit():
            found[int(rank)] = int(d)
    return found


def session_pids(sid):
    """Every live process of session sid (mpirun was started with setsid; its ranks each get their
    own process group, so killing mpirun's group alone would miss them)."""
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":  # fields[0] is the state, [3] the session
            pids.append(int(d))
    return pids


def kill_all(sid, tag):
    for pid in set(session_pids(sid)) | set(rank_pids(tag).values()):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


class Output:
    """Collects mpirun's combined output on a thread; wait_for() blocks until a pattern appears."""

    def __init__(self, stream):
        self.lines, self.cv = [], threading.Condition()
        self.thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self.thread.start()

    def _read(self, stream):
        for line in stream:
            with self.cv:
                self.lines.append(line)
                self.cv.notify_all()

    def wait_for(self, pattern, timeout):
        end = time.monotonic() + timeout
        with self.cv:
            while not any(pattern in l for l in self.lines):
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self.cv.wait(left)
        return True

    def text(self):
        self.thread.join(timeout=5)
        with self.cv:
            return "".join(self.lines)


def wait_until(cond, timeout, poll=0.001):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = cond()
        if v:
            return v
        time.sleep(poll)
    return None


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESTART = os.path.join(ROOT, "scripts", "restart.sh")
PREEMPTED = 75  # common/ckpt/preempt.h: PREEMPT_EXIT_STATUS

# 4096 samples of batch 32: 64 steps per epoch at 2 ranks (43 at 3), a snapshot every 7 steps. Small
# enough to run in a few seconds on a loaded machine, long enough that a kill at step <= 24 lands in it.
SMALL = ["--data", "synthetic", "--dataset_size", "4096", "--hidden", "128", "--batch_size", "32",
         "--epochs", "1", "--save_steps", "7", "--save_interval", "1", "--log_interval", "1"]


def steps_per_epoch(np):
    """SMALL's steps in its one epoch at np ranks: ceil(4096 / np) samples per rank, batches of 32."""
    per_rank = -(-4096 // np)  # ceiling divisions
    return -(-per_rank // 32)


# A 14 MB checkpoint at every other step: the write lasts long enough to be caught in the act.
BIG = ["--data", "synthetic", "--dataset_size", "512", "--hidden", "1024,1024", "--batch_size", "16",
       "--epochs", "1", "--save_steps", "2", "--log_interval", "1"]


class Failure(Exception):
    pass


def env():
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(("OMPI_COMM_WORLD", "PMI", "PMIX", "RANK", "WORLD_SIZE", "SLURM", "TORCHELASTIC"))}
    e.update(OMPI_MCA_rmaps_base_oversubscribe="1", OPENBLAS_NUM_THREADS="1", RESTART_DELAY="0.2",
             STOP_GRACE="5")
    e.setdefault("OMPI_MCA_btl", "self,vader")
    if os.geteuid() == 0:
        e.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return e


class Job:
    """One launched command in a session of its own; stop() ends it and everything that names tag."""

    def __init__(self, cmd, tag, cwd):
        self.tag = tag
        self.p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env(),
                                  start_new_session=True, cwd=cwd)
        self.out = Output(self.p.stdout)

    def wait_for(self, pattern, timeout):
        """Whether pattern appeared in the output within timeout seconds (False as soon as the job ended
        without it)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.out.wait_for(pattern, 0.2):
                return True
            if self.p.poll() is not None:
                return self.out.wait_for(pattern, 1)
        return False

    def wait(self, timeout):
        try:
            return self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise Failure(f"still running {timeout:.0f} s later:\n{self.text()[-3000:]}")

    def tagged(self):
        """Live processes whose command line names this job's tag (restart.sh's attempts run in
        sessions of their own: the tag finds them)."""
        found = []
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    with open(f"/proc/{d}/cmdline", "rb") as f:
                        if self.tag.encode() not in f.read():
                            continue
                    with open(f"/proc/{d}/stat") as f:
                        if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                            continue
                except OSError:
                    continue
                found.append(int(d))
        return found

    def stop(self):
        for pid in set(session_pids(self.p.pid)) | set(self.tagged()):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            self.p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass

    def text(self):
        return "".join(self.out.lines)


def digest(text):
    found = re.findall(r"param_digest ([0-9a-f]{16})", text)
    return found[-1] if found else None


# The drills' --timeout: a kill during start-up can leave the other ranks waiting in MPI_Init's fence when
# Open MPI fails to abort them (seen twice in -j4 suites: "PMIX ERROR: UNREACHABLE", the job still running
# 300 s later); the watchdog then ends them after --timeout, restart.sh starts the next attempt, and the
# drill goes on. 30 s is far above any wait of these runs (their steps take milliseconds; the slowest,
# preempt_slow_save, holds a barrier 8.5 s) and far below the drills' 300 s.
DRILL_TIMEOUT = ["--timeout", "30"]


def mpi_cmd(a, step, np, args, ckdir):
    return [a.mpiexec, "-np", str(np), os.path.join(a.bin_dir, step), "--device", "cpu"] + args + a.hook + \
        DRILL_TIMEOUT + ["--resume", "auto", "--ckpt_dir", ckdir]


def reference(a, work, step, np, args):
    """The uninterrupted run's digest (the same command, nothing killed)."""
    ck = os.path.join(work, f"ref-{step}-{np}")
    job = Job(mpi_cmd(a, step, np, args, ck), ck, work)
    try:
        rc = job.wait(300)
    finally:
        job.stop()
    d = digest(job.text())
    if rc != 0 or d is None:
        raise Failure(f"the reference run failed ({rc}):\n{job.text()[-3000:]}")
    return d


def supervised(a, work, name, step, np, args, restarts=3):
    ck = os.path.join(work, name)
    os.mkdir(ck)
    return Job([RESTART, "--max_restarts", str(restarts), "--"] + mpi_cmd(a, step, np, args, ck), ck, work), ck


class Late(Failure):
    """The kill reached a rank only after its run had ended: the drill tested nothing."""


def kill_and_compare(job, ref, victim_pid, sig=signal.SIGKILL, what="", late_after=None):
    """Sends sig to victim_pid, waits for restart.sh, and requires that the kill failed attempt 0 and that
    the job ended with the uninterrupted run's digest ref; returns what attempt 1 resumed from. Late when
    the kill could test nothing: the run had ended first, or (with late_after) attempt 0 had already
    logged step late_after, past what the drill means to cut. Every exception carries the output (.text)."""
    try:
        os.kill(victim_pid, sig)
        gone = False
    except ProcessLookupError:
        gone = True  # the rank had ended: with its run (Late below), or failing on its own
    rc = job.wait(300)
    text = job.text()
    before, failed, _ = text.partition("restart.sh: attempt 0 failed with status")
    reached = max((int(n) for n in re.findall(r" step (\d+)/", before)), default=0)
    problem, kind = None, Failure
    if not failed and rc == 0:
        problem, kind = "the kill did not fail attempt 0 (the run ended first)", Late
    elif gone:
        problem = "the rank had already ended when the kill was sent: attempt 0 failed on its own"
    elif rc != 0:
        problem = f"restart.sh exited {rc}"
    elif digest(text) != ref:
        problem = f"final param_digest {digest(text)}, the uninterrupted run's {ref}"
    elif late_after is not None and reached >= late_after:
        problem = f"attempt 0 had logged step {reached} before the kill landed (it must cut before {late_after})"
        kind = Late
    if problem:
        e = kind(f"{what}: {problem}:\n{text[-3000:]}")
        e.text = text
        raise e
    resumed = re.findall(r"resumed from \S+ at epoch (\d+), step (\d+)", text)
    return resumed[-1] if resumed else "the start"


def wait_ranks(job, np, timeout=60):
    pids = wait_until(lambda: (lambda d: d if len(d) == np else None)(rank_pids(job.tag)), timeout)
    if not pids:
        raise Failure(f"could not find the {np} ranks:\n{job.text()[-2000:]}")
    return pids


def kill_at_step(a, work, name, args, ref, at, victim, fresh=(), late_after=None, stop=lambda: None):
    """Runs args under restart.sh, SIGKILLs rank victim as soon as it logs step `at`, and compares the end
    with ref (kill_and_compare, with late_after); returns what attempt 1 resumed from. The ranks are found
    first, so the kill follows the progress line at once; a run of a few hundred milliseconds on a busy
    machine can still get past the point before it lands, which tests nothing (Late): the drill then
    runs again (three tries), after removing the files that match the glob patterns in fresh (what an
    attempt appends to). stop() is called before each try and after the progress line (an interrupted
    caller raises there)."""
    for attempt in range(3):
        stop()
        for pattern in fresh:
            for path in glob.glob(pattern):
                os.remove(path)
        job, ck = supervised(a, work, f"{name}-{attempt}", a.step, a.np, args)
        try:
            pids = wait_ranks(job, a.np)
            if not job.wait_for(f" step {at}/", 120):
                raise Failure(f"{name}: no progress line for step {at}:\n{job.text()[-2000:]}")
            stop()
            return kill_and_compare(job, ref, pids[victim], what=f"{name}: SIGKILL to rank {victim} at step {at}",
                                    late_after=late_after)
        except Late as e:
            # a retry whose cause is the machine itself (dev/soak.sh counts these lines)
            print(f"RETRY: {name}: {str(e).splitlines()[0].rstrip(':')}: drilled again", flush=True)
        finally:
            job.stop()
    raise Failure(f"{name}: three times the kill of step {at} landed too late to test anything: the machine is "
                  f"too busy for the drill")
