"""TCP ports for the launches of tests that run at the same time: each MASTER_PORT pair is reserved
by a lock file (PORT_LOCK_DIR) for as long as the test process lives.
"""
import fcntl
import os
import random
import socket
import tempfile
import time

from tests.harness.env import Failure


def port_free(port):
    """Whether the rendezvous store could listen on port now: a bind with SO_REUSEADDR, as
    common/dist/store.c's (the TIME_WAIT its own earlier connections leave on the port does not refuse it;
    a listener, or an outgoing connection's TIME_WAIT, does)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("", port))
            return True
        except OSError:
            return False


def ephemeral_ports():
    """The kernel's range for outgoing connections' local ports (and bind to port 0)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = (int(x) for x in f.read().split())
        return lo, hi
    except (OSError, ValueError):
        return 32768, 60999


PORT_LOCKS = []  # the reservations this process holds, until it exits
# One place for every test, whatever its TMPDIR (tests give the exercise checker TMPDIRs of their
# own, and check that nothing is left in them): /tmp, not tempfile's.
PORT_LOCK_DIR = "/tmp/ddp-in-c-ports"


def port_lock_dir():
    """PORT_LOCK_DIR, made if missing (where /tmp cannot be written: one in tempfile's folder)."""
    lock_dir = PORT_LOCK_DIR if os.access("/tmp", os.W_OK) else os.path.join(tempfile.gettempdir(), "ddp-in-c-ports")
    if not os.path.isdir(lock_dir):
        os.makedirs(lock_dir, exist_ok=True)
        os.chmod(lock_dir, 0o1777)  # every user's tests share it (ports are the machine's)
    return lock_dir


def lock_port_pair(p, wait=0.0):
    """Reserves ports p and p + 1 (p even) for this process by an exclusive lock on PORT_LOCK_DIR/p,
    waiting up to `wait` seconds for another test's reservation to end and for both ports to be free
    (port_free); True when reserved."""
    path = os.path.join(port_lock_dir(), str(p))
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:  # another user's file (their umask): flock needs only a read-only descriptor
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return False
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if port_free(p) and port_free(p + 1):
                PORT_LOCKS.append(fd)
                return True
            fcntl.flock(fd, fcntl.LOCK_UN)  # in use by something else: leave it
        except OSError:  # another test holds it
            pass
        if time.monotonic() >= deadline:
            os.close(fd)
            return False
        time.sleep(0.1)


def seat_ports(env=os.environ):
    """(first, last) of the ports a workshop seat may use, from DDP_PORTS="FIRST-LAST" (docs/workshop.md
    hands each seat its range), or None when unset."""
    text = env.get("DDP_PORTS", "").strip()
    if not text:
        return None
    try:
        first, last = (int(x) for x in text.split("-"))
    except ValueError:
        raise Failure(f"DDP_PORTS={text!r}: expected FIRST-LAST, e.g. DDP_PORTS=29500-29509")
    if not 1024 <= first < last <= 65535:
        raise Failure(f"DDP_PORTS={text!r}: expected 1024 <= FIRST < LAST <= 65535 (two ports at least)")
    return first, last


def free_master_port():
    """A port p such that p and p + 1 are free (MASTER_PORT, and the bootstrap port after it: the
    Gloo store's), reserved for this test process. Launches of tests running at the same time must
    never get the same pair: MASTER_PORT itself stays unbound under launch.sh (only p + 1 listens),
    so asking the kernel for a free port (bind to 0) gave two tests the same p now and then, and one
    job's rank reached the other's store (CI failed so once). Each pair is an even p below the
    ephemeral range (where no outgoing connection takes p + 1 as its local port), held by an
    exclusive lock on a file named after it (lock_port_pair) for as long as this process lives.
    With DDP_PORTS=FIRST-LAST (a workshop seat's range, docs/workshop.md), p and p + 1 lie in it."""
    seat = seat_ports()
    if seat:
        # every pair of the seat's range in turn (it is small), waiting a little for one in use
        first, last = seat
        pairs = list(range(first + first % 2, last, 2))
        if not pairs:
            raise Failure(f"DDP_PORTS={first}-{last} holds no even port p with p + 1 in the range")
        for wait in (0.0, 1.0, 5.0):
            for p in pairs:
                if lock_port_pair(p, wait):
                    return p
        raise Failure(f"found no two free consecutive TCP ports for MASTER_PORT in DDP_PORTS={first}-{last} "
                      "(this seat's range): is another run of yours still holding them?")
    lo, _ = ephemeral_ports()
    first, last = 20000, max(20002, lo - 2)
    rng = random.Random()
    for _ in range(400):
        p = rng.randrange(first, last, 2)
        if lock_port_pair(p):
            return p
    raise Failure(f"found no two free consecutive TCP ports for MASTER_PORT in {first}..{last}")
