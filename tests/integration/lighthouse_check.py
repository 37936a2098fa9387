"""The lighthouse (tools/lighthouse.c, build/bin/lighthouse): step 09's coordinator of quorums and host of
the rendezvous store, spoken to as common/dist/lighthouse.h's wire format says, by Python replicas (a
socket each, a heartbeat thread each), on loopback.

    python3 -m tests.harness lighthouse_SCENARIO     one scenario (CTest: lighthouse_<scenario>); exit 0 or 1
Standard library only; the ports are the harness's (tests/harness/ports.py): the membership port P and
the store's P + 1.
"""
import json
import os
import signal
import socket
import struct
import subprocess
import threading
import time

from tests.harness import env as harness_env
from tests.harness import ports
from tests.harness.scenario import register

Failure = harness_env.Failure
DIGEST = "0123456789abcdef"


class Lighthouse:
    """One build/bin/lighthouse on 127.0.0.1, its stderr and --log in the scenario's folder."""

    def __init__(self, tmp, replicas, *flags):
        self.port = ports.free_master_port()  # P and P + 1 free and reserved: membership and store
        self.err, self.log = os.path.join(tmp, "lighthouse.err"), os.path.join(tmp, "lighthouse.jsonl")
        cmd = [os.path.join(harness_env.BIN, "lighthouse"), "--port", str(self.port), "--replicas", str(replicas),
               "--log", self.log] + [str(f) for f in flags]
        with open(self.err, "w") as f:
            self.proc = subprocess.Popen(cmd, stderr=f)
        deadline = time.monotonic() + 10
        while True:
            if self.proc.poll() is not None:
                raise Failure(f"the lighthouse ended (exit {self.proc.returncode}) before it listened: {self.stderr()!r}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise Failure(f"the lighthouse did not listen on 127.0.0.1:{self.port} within 10 s")
                time.sleep(0.05)
        expect_line(self, f"lighthouse: listening on 127.0.0.1:{self.port} (store on {self.port + 1}), "
                          f"{replicas} replicas, min ")

    def stderr(self):
        with open(self.err) as f:
            return f.read()

    def events(self, event):
        with open(self.log) as f:
            return [e for e in (json.loads(line) for line in f if line.strip()) if e["event"] == event]

    def stop(self):
        """SIGTERM: it must exit 0 at once."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise Failure("the lighthouse did not exit within 5 s of SIGTERM")
        if rc != 0:
            raise Failure(f"the lighthouse exited {rc} on SIGTERM, not 0: {self.stderr()[-400:]!r}")

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def expect_line(lh, text, limit=5.0):
    """Waits until a line of the lighthouse's stderr contains text; returns that line."""
    deadline = time.monotonic() + limit
    while True:
        for line in lh.stderr().splitlines():
            if text in line:
                return line
        if time.monotonic() > deadline:
            raise Failure(f"the lighthouse's stderr has no line with {text!r} after {limit} s: {lh.stderr()!r}")
        time.sleep(0.02)


class Replica:
    """A trainer's side of the wire format: hello, a beat every `beat` s (from a thread, as lighthouse.c's),
    quorum requests. `answer` is the hello's answer."""

    def __init__(self, lh, replica, incarnation=0, beat=0.2):
        self.replica, self.buf, self.lock = replica, b"", threading.Lock()
        self.sock = socket.create_connection(("127.0.0.1", lh.port), timeout=5)
        self.beating, self.done = threading.Event(), threading.Event()
        self.send(f"hello {replica} {incarnation}")
        self.answer = self.line()
        if self.answer == f"ok {lh.port + 1}":
            self.beating.set()
            threading.Thread(target=self._beat, args=(beat,), daemon=True).start()

    def _beat(self, every):
        while not self.done.wait(every):
            if self.beating.is_set():
                try:
                    self.send("beat")
                except OSError:
                    return

    def send(self, text):
        with self.lock:
            self.sock.sendall((text + "\n").encode())

    def line(self, limit=5.0):
        """The next line the lighthouse sent; None when none came within limit s; "" at end of stream."""
        deadline = time.monotonic() + limit
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self.sock.settimeout(left)
            try:
                got = self.sock.recv(4096)
            except socket.timeout:
                return None
            if not got:
                return ""
            self.buf += got
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode()

    def ask(self, step, digest=DIGEST):
        self.send(f"quorum {step} {digest}")

    def expect(self, text, limit=5.0):
        got = self.line(limit)
        if got != text:
            raise Failure(f"replica {self.replica} expected {text!r} from the lighthouse, got {got!r}")

    def close(self):
        self.done.set()
        self.sock.close()


def joined(lh, n, **kw):
    replicas = [Replica(lh, r, **kw) for r in range(n)]
    for r in replicas:
        if r.answer != f"ok {lh.port + 1}":
            raise Failure(f"replica {r.replica}'s hello: expected 'ok {lh.port + 1}', got {r.answer!r}")
    return replicas


def first_quorum(lh, reps, step=0):
    """Every replica asks at step; each gets quorum 1 of all, its rank its replica id."""
    for r in reps:
        r.ask(step)
    ids = ",".join(str(r.replica) for r in reps)
    for r in reps:
        r.expect(f"quorum 1 {len(reps)} {r.replica} {step} 0 0 {ids}")


def quorum_waits_for_all(tmp):
    """L1: the first quorum waits for every replica of the launch (two of three ask: no answer), then gives
    ranks in replica-id order, the newest step and the first rank at it as the source, heal when one is
    behind; a second connection claiming a live replica's id, or an id beyond --replicas, is refused; the
    lighthouse exits 0 by itself once every replica has left (2 s later: LINGER_S)."""
    lh = Lighthouse(tmp, 3)
    try:
        reps = [Replica(lh, r) for r in (2, 0, 1)]
        reps.sort(key=lambda r: r.replica)
        twin = Replica(lh, 1, incarnation=4)
        if twin.answer != "refused replica 1 is already a member (incarnation 0)":
            raise Failure(f"a second hello of replica 1: got {twin.answer!r}")
        stranger = Replica(lh, 3)
        if stranger.answer != "refused replica 3 is out of range: --replicas 3 gives ids 0 .. 2":
            raise Failure(f"a hello of replica 3 of 3: got {stranger.answer!r}")
        reps[2].ask(5)
        reps[0].ask(3)
        for r in reps[:1] + reps[2:]:
            if (got := r.line(0.7)) is not None:
                raise Failure(f"two of three replicas asked, and replica {r.replica} got {got!r}: the first "
                              "quorum must wait for all")
        reps[1].ask(5)
        for r in reps:  # replica 1 is the first at step 5: rank 1 is the source; replica 0 heals
            r.expect(f"quorum 1 3 {r.replica} 5 1 1 0,1,2")
        expect_line(lh, "lighthouse: quorum 1 = replicas [0, 1, 2], max_step 5, world 3 -> 3")
        for r in reps:
            r.close()
        try:
            rc = lh.proc.wait(5)
        except subprocess.TimeoutExpired:
            raise Failure("every replica left after quorum 1, and the lighthouse still runs 5 s later")
        if rc != 0:
            raise Failure(f"the lighthouse exited {rc} after every replica left, not 0")
        print("quorum 1 of 3 waited for all; ranks by replica id; twin and stranger refused; exit 0 when all left")
    finally:
        lh.kill()


def member_closed(tmp):
    """L2: a member whose connection closes leaves at once; the rest's next quorum forms as soon as they
    have all asked (well within --join_timeout), says who left and why, and drops it from the world."""
    lh = Lighthouse(tmp, 3, "--join_timeout", 3)
    try:
        reps = joined(lh, 3)
        first_quorum(lh, reps)
        reps[2].close()
        expect_line(lh, "lighthouse: replica 2 left (connection closed)")
        t0 = time.monotonic()
        reps[0].ask(10)
        reps[1].ask(10)
        for r in reps[:2]:
            r.expect(f"quorum 2 2 {r.replica} 10 0 0 0,1")
        took = time.monotonic() - t0
        if took > 2.0:
            raise Failure(f"the quorum of the two live replicas took {took:.1f} s (--join_timeout 3: every live "
                          "member had asked, it should form at once)")
        expect_line(lh, "lighthouse: quorum 2 = replicas [0, 1] (replica 2: connection closed), max_step 10, "
                        "world 3 -> 2")
        q = lh.events("quorum")[-1]
        want = {"id": 2, "replicas": [0, 1], "max_step": 10, "world": 2, "dropped": {"2": "connection closed"}}
        if {k: q.get(k) for k in want} != want:
            raise Failure(f"the log's quorum event: {q}, expected {want}")
        lh.stop()
        print(f"replica 2 closed: quorum 2 of [0, 1] after {took:.2f} s")
    finally:
        lh.kill()


def fast_quorum(tmp):
    """L3: when every member of the last quorum asks again, the next quorum forms at once (well within a
    long --join_timeout)."""
    lh = Lighthouse(tmp, 3, "--join_timeout", 10)
    try:
        reps = joined(lh, 3)
        first_quorum(lh, reps)
        t0 = time.monotonic()
        for r in reps:
            r.ask(8)
        for r in reps:
            r.expect(f"quorum 2 3 {r.replica} 8 0 0 0,1,2", limit=3)
        took = time.monotonic() - t0
        if took > 1.0:
            raise Failure(f"every member asked, and quorum 2 took {took:.1f} s (it should form at once)")
        lh.stop()
        print(f"every member asked: quorum 2 after {took:.2f} s (--join_timeout 10)")
    finally:
        lh.kill()


def quorum_impossible(tmp):
    """L4 (I7): when every live member has asked but they are fewer than --min_replicas, each is refused
    with the count, their ids and the setting."""
    lh = Lighthouse(tmp, 3, "--min_replicas", 3)
    try:
        reps = joined(lh, 3)
        first_quorum(lh, reps)
        reps[1].close()
        expect_line(lh, "lighthouse: replica 1 left (connection closed)")
        reps[0].ask(4)
        reps[2].ask(4)
        for r in (reps[0], reps[2]):
            r.expect("refused quorum impossible: 2 live replica(s) [0, 2], --min_replicas 3")
        lh.stop()
        print("2 live replicas, --min_replicas 3: both refused, quorum impossible")
    finally:
        lh.kill()


def late_member(tmp):
    """L5 (I8): a live member that does not ask is left out once --join_timeout has passed (the others are
    a majority); when it asks later it is refused with a reason (not a member of the new quorum), never
    left waiting."""
    lh = Lighthouse(tmp, 3, "--join_timeout", 0.5)
    try:
        reps = joined(lh, 3)
        first_quorum(lh, reps)
        t0 = time.monotonic()
        reps[0].ask(20)
        reps[1].ask(20)
        for r in reps[:2]:
            r.expect(f"quorum 2 2 {r.replica} 20 0 0 0,1", limit=3)
        took = time.monotonic() - t0
        if took < 0.45:
            raise Failure(f"quorum 2 formed after {took:.2f} s, before --join_timeout 0.5 (replica 2 is alive)")
        expect_line(lh, "lighthouse: quorum 2 = replicas [0, 1] (replica 2: asked for no quorum), max_step 20, "
                        "world 3 -> 2")
        reps[2].ask(19)
        reps[2].expect("refused replica 2 is not a member of quorum 2 (it was left out of it, formed at step 20: "
                       "its state is an old quorum's; a new incarnation may join, as scripts/launch.sh --ft "
                       "--replace starts one)")
        lh.stop()
        print(f"replica 2 did not ask: quorum 2 of [0, 1] after {took:.2f} s; its late request refused")
    finally:
        lh.kill()


def digest_disagree(tmp):
    """L6 (I9): members at the newest step whose parameter digests differ are all refused, each named with
    its digest (a member behind that step is not compared)."""
    lh = Lighthouse(tmp, 3)
    try:
        reps = joined(lh, 3)
        reps[0].ask(7, "00000000000000aa")
        reps[1].ask(5, "1111111111111111")
        reps[2].ask(7, "00000000000000bb")
        for r in reps:
            r.expect("refused replicas disagree at step 7: replica 0 digest 00000000000000aa, replica 2 digest "
                     "00000000000000bb")
        lh.stop()
        print("replicas 0 and 2 disagree at step 7: all three refused, both named")
    finally:
        lh.kill()


def silent_member(tmp):
    """L7: a member that stops beating (frozen) is reported silent after --heartbeat_timeout and no longer
    counts as alive: the others' quorum forms then, long before --join_timeout; when it resumes and asks,
    it is refused (not a member of the new quorum)."""
    lh = Lighthouse(tmp, 3, "--heartbeat_timeout", 1.0, "--join_timeout", 10)
    try:
        reps = joined(lh, 3, beat=0.1)
        first_quorum(lh, reps)
        t0 = time.monotonic()
        reps[2].beating.clear()
        reps[0].ask(30)
        reps[1].ask(30)
        for r in reps[:2]:
            r.expect(f"quorum 2 2 {r.replica} 30 0 0 0,1", limit=5)
        took = time.monotonic() - t0
        if not 0.9 <= took <= 3.0:
            raise Failure(f"quorum 2 formed {took:.2f} s after replica 2 went silent (expected about "
                          "--heartbeat_timeout 1.0, far below --join_timeout 10)")
        expect_line(lh, "lighthouse: replica 2 silent for ")
        line = expect_line(lh, "lighthouse: quorum 2 = replicas [0, 1] (replica 2: silent for ")
        if not line.endswith("s), max_step 30, world 3 -> 2"):
            raise Failure(f"the quorum line: {line!r}")
        reps[2].beating.set()
        reps[2].ask(29)
        reps[2].expect("refused replica 2 is not a member of quorum 2 (it was left out of it, formed at step 30: "
                       "its state is an old quorum's; a new incarnation may join, as scripts/launch.sh --ft "
                       "--replace starts one)")
        lh.stop()
        print(f"replica 2 silent: quorum 2 of [0, 1] after {took:.2f} s; resumed, it was refused")
    finally:
        lh.kill()


class StoreClient:
    """A client of the lighthouse's store (store.h's wire format)."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.sock.sendall(b"H" + struct.pack("!I", 0))
        if self.recv(1) != b"+":
            raise Failure("the lighthouse's store did not answer a hello with '+'")

    def recv(self, n):
        out = b""
        while len(out) < n:
            got = self.sock.recv(n - len(out))
            if not got:
                raise Failure("the lighthouse's store closed the connection")
            out += got
        return out

    def set(self, key, value):
        k = key.encode()
        self.sock.sendall(b"S" + struct.pack("!I", len(k)) + k + struct.pack("!I", len(value)) + value)
        return self.recv(1)

    def get(self, key, timeout_ms):
        k = key.encode()
        self.sock.sendall(b"G" + struct.pack("!I", len(k)) + k + struct.pack("!I", timeout_ms))
        tag = self.recv(1)
        if tag != b"+":
            return tag
        (n,) = struct.unpack("!I", self.recv(4))
        return self.recv(n)

    def close(self):
        self.sock.close()


def store_prefix_drop(tmp):
    """L8: the lighthouse serves the store on --port + 1, and each new quorum drops the previous one's keys
    (q<id>/): a get of q1/key after quorum 2 answers '-' within its timeout, and 40 quorums of 16 keys each
    (more than the store's total for 2 replicas, 288 keys) never fill it."""
    lh = Lighthouse(tmp, 2)
    try:
        reps = joined(lh, 2)
        first_quorum(lh, reps)
        st = StoreClient(lh.port + 1)
        if (got := st.set("q1/key", b"v1")) != b"+":
            raise Failure(f"set('q1/key') answered {got!r}, not '+'")
        if (got := st.get("q1/key", 100)) != b"v1":
            raise Failure(f"get('q1/key') answered {got!r}, not b'v1'")
        for qid in range(2, 42):
            for r in reps:
                r.ask(qid)
            for r in reps:
                r.expect(f"quorum {qid} 2 {r.replica} {qid} 0 0 0,1")
            if qid == 2:
                t0 = time.monotonic()
                got = st.get("q1/key", 200)
                took = time.monotonic() - t0
                if got != b"-" or took > 2.0:
                    raise Failure(f"after quorum 2, get('q1/key', 200 ms) answered {got!r} after {took:.2f} s; "
                                  "expected '-' (the key dropped)")
            fresh = StoreClient(lh.port + 1)  # a quorum's ranks meet on fresh connections (16 keys each)
            for i in range(16):
                if (got := fresh.set(f"q{qid}/k{i}", b"x" * 100)) != b"+":
                    raise Failure(f"quorum {qid}: set('q{qid}/k{i}') answered {got!r}, not '+' (the store's "
                                  "total filled up: old quorums' keys were not dropped?)")
            fresh.close()
        st.close()
        lh.stop()
        print("q1/key gone after quorum 2; 40 quorums x 16 keys stored in a store of 288")
    finally:
        lh.kill()


def newcomer_joins(tmp):
    """L9 (I5's protocol): a replacement (replica 2, incarnation 1) asks to join after replica 2 died; the
    members of the last quorum are each told `join 2` once, ask together, and the quorum takes all three,
    the newcomer healing (HEAL 1) from rank 0, although every step reported is the same; under
    --shrink_only the same newcomer is refused."""
    lh = Lighthouse(tmp, 3)
    try:
        reps = joined(lh, 3)
        first_quorum(lh, reps)
        reps[2].close()
        expect_line(lh, "lighthouse: replica 2 left (connection closed)")
        new = Replica(lh, 2, incarnation=1)
        if new.answer != f"ok {lh.port + 1}":
            raise Failure(f"the newcomer's hello: {new.answer!r}")
        new.ask(0, "0000000000000000")
        for r in reps[:2]:
            r.expect("join 2")
        for r in reps[:2]:
            r.ask(5)
        for i, r in enumerate(reps[:2] + [new]):
            r.expect(f"quorum 2 3 {i} 5 0 1 0,1,2")
        expect_line(lh, "lighthouse: replica 2 (incarnation 1) waits to join quorum 1's members")
        lh.stop()
    finally:
        lh.kill()
    lh = Lighthouse(tmp, 3, "--shrink_only")
    try:
        reps = joined(lh, 3)
        first_quorum(lh, reps)
        reps[2].close()
        expect_line(lh, "lighthouse: replica 2 left (connection closed)")
        new = Replica(lh, 2, incarnation=1)
        new.ask(0, "0000000000000000")
        new.expect("refused replica 2 is not a member of quorum 1 (live recovery here only shrinks: --shrink_only; "
                   "it missed the quorum formed at step 0)")
        lh.stop()
        print("a newcomer: members told 'join 2', quorum 2 of all three with HEAL 1; refused under --shrink_only")
    finally:
        lh.kill()


def needs_lighthouse(func):
    """func, failing clearly where build/bin/lighthouse is missing (it is built in every configuration)."""
    def run(tmp):
        if not os.path.exists(os.path.join(harness_env.BIN, "lighthouse")):
            raise Failure(f"{harness_env.BIN}/lighthouse is not built (cmake --build build)")
        return func(tmp)
    run.__doc__, run.__name__ = func.__doc__, func.__name__
    return run


# CTest: lighthouse_<scenario>, labels integration and fault; a few seconds each.
for f in [quorum_waits_for_all, member_closed, fast_quorum, quorum_impossible, late_member, digest_disagree,
          silent_member, store_prefix_drop, newcomer_joins]:
    register(needs_lighthouse(f), name=f"lighthouse_{f.__name__}", timeout=60, skip=None, env=("bin",),
             labels=("integration", "fault"), cache=False, sigterm=False)


if __name__ == "__main__":
    raise SystemExit("its scenarios run with the harness: python3 -m tests.harness NAME, from the repository's root "
                     "(tests/README.md)")
