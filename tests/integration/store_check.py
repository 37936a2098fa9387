"""The Gloo ranks' rendezvous store (common/dist/store.c) against what else reaches its port, and against
ranks started with other settings: real ranks of 06_full, started by environment (RANK, WORLD_SIZE,
MASTER_ADDR=127.0.0.1, a fresh MASTER_PORT) without a launcher, and clients on loopback only.

    python3 -m tests.harness store_SCENARIO     one scenario (CTest: store_<scenario>); exit 0, 1, or 77 (skipped)
Standard library only; the helpers (ports, arguments) are the harness's (tests/harness/).
"""
import functools
import os
import socket
import struct
import subprocess
import time

from tests.harness import env as harness_env
from tests.harness import launch
from tests.harness.scenario import register

Failure = harness_env.Failure
ARGS = harness_env.SMALL + ["--epochs", "1"]


class Job:
    """Ranks of one job: one environment (one MASTER_PORT), each rank started when asked."""

    def __init__(self, tmp, world, timeout, addr="127.0.0.1"):
        self.tmp, self.world, self.timeout = tmp, world, timeout
        self.env = dict(launch.env_launch_env(), MASTER_ADDR=addr)
        self.port = int(self.env["MASTER_PORT"]) + 1  # the store's
        self.procs = {}

    def start(self, rank, **env):
        e = dict(self.env, RANK=str(rank), WORLD_SIZE=str(self.world), LOCAL_RANK=str(rank))
        e.update({k: str(v) for k, v in env.items()})
        out, err = f"{self.tmp}/out{rank}.txt", f"{self.tmp}/err{rank}.txt"
        with open(out, "w") as o, open(err, "w") as f:
            p = subprocess.Popen([os.path.join(harness_env.BIN, "06_full")] + ARGS + ["--timeout", str(self.timeout)],
                                 stdout=o, stderr=f, env=e)
        self.procs[rank] = (p, err)
        return p

    def pid(self, rank):
        return self.procs[rank][0].pid

    def stderr(self, rank):
        with open(self.procs[rank][1]) as f:
            return f.read()

    def wait_store(self, host="127.0.0.1", limit=30):
        """Waits until rank 0's store accepts connections on host."""
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if self.procs[0][0].poll() is not None:
                raise Failure(f"rank 0 ended (exit {self.procs[0][0].returncode}) before its store listened: "
                              f"{self.stderr(0)!r}")
            try:
                socket.create_connection((host, self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        raise Failure(f"rank 0's store did not listen on {host}:{self.port} within {limit} s")

    def wait_all(self, limit):
        """{rank: exit status}, after every rank ended; ranks still running after limit s are killed
        and reported as None."""
        deadline, out = time.monotonic() + limit, {}
        for r, (p, _) in self.procs.items():
            if launch.wait_exit(p, max(0.1, deadline - time.monotonic())) is None:
                p.kill()
                p.wait()
                out[r] = None
            else:
                out[r] = p.returncode
        return out

    def kill(self):
        for p, _ in self.procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()


def open_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def expect_trained(job, limit, what):
    rcs = job.wait_all(limit)
    if any(rc != 0 for rc in rcs.values()):
        detail = "; ".join(f"rank {r}: exit {rc}, {job.stderr(r).strip()[-300:]!r}" for r, rc in rcs.items())
        raise Failure(f"{what}: the job should train and exit 0: {detail}")


def port_scan(tmp):
    """Y1: while rank 0 waits (--timeout 20), 1100 connect-and-close to its store (a port scan, a health
    check) leave it no more descriptors than before, and the late rank 1 then joins and trains."""
    job = Job(tmp, 2, 20)
    try:
        job.start(0)
        job.wait_store()
        time.sleep(0.3)
        base, t0 = open_fds(job.pid(0)), time.monotonic()
        for i in range(1100):
            try:
                socket.create_connection(("127.0.0.1", job.port), timeout=2).close()
            except OSError as e:
                raise Failure(f"connection {i} to rank 0's store failed: {e}")
        took = time.monotonic() - t0
        now = open_fds(job.pid(0))
        deadline = time.monotonic() + 15  # no leak, not a speed: a loaded machine closes them late
        while now > base + 4 and time.monotonic() < deadline:
            time.sleep(0.1)
            now = open_fds(job.pid(0))
        if job.procs[0][0].poll() is not None:
            raise Failure(f"rank 0 ended during the port scan: {job.stderr(0)!r}")
        problem = (f"rank 0 holds {now} descriptors 15 s after 1100 connections closed ({base} before them; "
                   f"the scan took {took:.1f} s)" if now > base + 4 else None)
        job.start(1)
        try:
            expect_trained(job, 60, "rank 1 joining after the port scan")
        except Failure as e:
            raise Failure(f"{problem}; {e}" if problem else str(e))
        if problem:
            raise Failure(problem)
        print(f"1100 connect-and-close: rank 0's descriptors {base} before, {now} after; rank 1 joined, both trained")
    finally:
        job.kill()


def large_values(tmp):
    """Y2: a connection that stores 1 MiB values is cut off at once (at most a rank's share is stored),
    rank 0 does not grow, and the late rank 1 still joins and trains."""
    job = Job(tmp, 2, 10)
    try:
        job.start(0)
        job.wait_store()
        time.sleep(0.3)
        before = rss_mb(job.pid(0))
        stored, mib = 0, b"x" * (1 << 20)
        with socket.create_connection(("127.0.0.1", job.port), timeout=5) as s:
            for i in range(300):
                key = f"junk/{i}".encode()
                try:
                    s.sendall(b"S" + struct.pack("!I", len(key)) + key + struct.pack("!I", len(mib)) + mib)
                    reply = s.recv(1)
                except OSError:
                    break
                if reply != b"+":
                    break
                stored += 1
        grew = rss_mb(job.pid(0)) - before
        job.start(1)
        expect_trained(job, 60, f"rank 1 joining after a client stored {stored} MiB")
        if stored > 0 or grew > 32:
            raise Failure(f"one connection stored {stored} values of 1 MiB (rank 0 grew by {grew:.0f} MB); "
                          "a rank needs a few KiB")
        print(f"1 MiB values: none stored, the connection was closed (rank 0 grew by {grew:.1f} MB); "
              "rank 1 joined, both trained")
    finally:
        job.kill()


def loopback_name(name):
    """Whether every address name resolves to is a loopback one (this test sends nothing elsewhere)."""
    try:
        infos = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
    except OSError:
        return False
    return bool(infos) and all(i[4][0].startswith("127.") or i[4][0] == "::1" for i in infos)


def listen_address(tmp):
    """Y3: with MASTER_ADDR=127.0.0.1 the store listens there only (127.0.0.2, another address of this
    machine, is refused); MASTER_ADDR=localhost, 127.0.0.2 and this machine's name still train."""
    job = Job(tmp, 2, 10)
    try:
        job.start(0)
        job.wait_store()
        try:
            socket.create_connection(("127.0.0.2", job.port), timeout=2).close()
            refused = False
        except OSError:
            refused = True
        job.start(1)
        expect_trained(job, 60, "MASTER_ADDR=127.0.0.1")
        if not refused:
            raise Failure("MASTER_ADDR=127.0.0.1: rank 0's store accepted a connection on 127.0.0.2 "
                          "(it listens on every interface)")
    finally:
        job.kill()
    print("MASTER_ADDR=127.0.0.1: the store refuses 127.0.0.2, the ranks train")
    names = ["localhost", "127.0.0.2"]
    host = socket.gethostname()
    if loopback_name(host):
        names.append(host)
    else:
        print(f"this machine's name {host} resolves to a non-loopback address: not tried (loopback only)")
    for addr in names:
        job = Job(tmp, 2, 10, addr=addr)
        try:
            job.start(0)
            job.start(1)
            expect_trained(job, 60, f"MASTER_ADDR={addr}")
        finally:
            job.kill()
        print(f"MASTER_ADDR={addr}: the ranks train")


def expect_named(job, limit, needles, what):
    """Every rank ends non-zero before its --timeout (within limit s), its error naming every needle;
    (seconds it took, {rank: the line})."""
    t0 = time.monotonic()
    rcs = job.wait_all(limit)
    took = time.monotonic() - t0
    lines = {}
    for r, rc in rcs.items():
        err = job.stderr(r)
        if rc is None:
            raise Failure(f"{what}: rank {r} still ran {limit} s later: {err!r}")
        if rc == 0 or not all(n in err for n in needles):
            raise Failure(f"{what}: rank {r} exited {rc}; its error should name {needles}: {err.strip()!r}")
        lines[r] = next(l for l in err.splitlines() if all(n in l for n in needles))
    if took > job.timeout - 2:
        raise Failure(f"{what}: the ranks stopped after {took:.1f} s, as late as --timeout {job.timeout}: "
                      "the difference should stop them at once")
    return took, lines


def world_size_mismatch(tmp):
    """Y7: two ranks started with WORLD_SIZE 2 and 3 (either way round) both stop before Gloo connects,
    each naming WORLD_SIZE and both values, well within --timeout (10 s)."""
    for w0, w1 in ((2, 3), (3, 2)):
        job = Job(tmp, w0, 10)
        try:
            job.start(0)
            job.start(1, WORLD_SIZE=w1)
            took, lines = expect_named(job, 20, [f"WORLD_SIZE={w0}", f"WORLD_SIZE={w1}"],
                                       f"rank 0 with WORLD_SIZE={w0}, rank 1 with {w1}")
        finally:
            job.kill()
        print(f"WORLD_SIZE {w0} and {w1}: both ranks stopped after {took:.1f} s: {lines[0]}")


def restart_count_mismatch(tmp):
    """Y7: rank 1 started with TORCHELASTIC_RESTART_COUNT=1 (restarted by hand), rank 0 with 0: both
    stop at once (--timeout 10), naming the variable and both values."""
    job = Job(tmp, 2, 10)
    try:
        job.start(0, TORCHELASTIC_RESTART_COUNT=0)
        job.start(1, TORCHELASTIC_RESTART_COUNT=1)
        took, lines = expect_named(job, 20, ["TORCHELASTIC_RESTART_COUNT=0", "TORCHELASTIC_RESTART_COUNT=1"],
                                   "TORCHELASTIC_RESTART_COUNT 0 and 1")
    finally:
        job.kill()
    print(f"TORCHELASTIC_RESTART_COUNT 0 and 1: both ranks stopped after {took:.1f} s: {lines[1]}")


def needs_06_full(func):
    """func, skipped (77) where 06_full is not built."""
    @functools.wraps(func)
    def scenario(tmp):
        if not os.path.exists(os.path.join(harness_env.BIN, "06_full")):
            print(f"skipped: {harness_env.BIN}/06_full is not built")
            return harness_env.SKIP
        return func(tmp)
    return scenario


# CTest: store_<scenario>, labels integration and gloo, in a build with Gloo.
for f in [port_scan, large_values, listen_address, world_size_mismatch, restart_count_mismatch]:
    register(needs_06_full(f), name=f"store_{f.__name__}", processors=2, timeout=180, needs=("gloo",),
             env=("bin",), cache=False, sigterm=False)


if __name__ == "__main__":
    raise SystemExit("its scenarios run with the harness: python3 -m tests.harness NAME, from the repository's root "
                     "(tests/README.md)")
