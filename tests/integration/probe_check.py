"""Integration checks of build/bin/probe (tools/probe.c), run on CPU ranks under mpirun.

CTest runs `python3 -m tests.harness SCENARIO` (registered below, read by tests.cmake). Each scenario runs the real program and reads its
output: an ok line for every rank and a table with the expected rows; `broken`, a non-zero exit and
#wrong > 0 when one rank contributes a wrong value; the missing rank named within the timeout when
one never arrives. Nothing here judges the timings: only that they are numbers and that busbw is
algbw times nccl-tests' all-reduce factor 2(W-1)/W. Standard library only.
"""
import os
import re
import subprocess
import time

from tests.harness.env import Failure
from tests.harness.scenario import register

BIN = os.environ.get("DDP_BIN_DIR", "build/bin")
MPIEXEC = os.environ.get("DDP_MPIEXEC", "mpiexec")
PROBE = os.path.join(BIN, "probe")
# Small sizes (1 KiB .. 256 KiB, x4) keep a run under a second; the defaults go to 256 MiB.
SIZES = ["--min_bytes", "1K", "--max_bytes", "256K", "--factor", "4"]
EXPECTED_SIZES = [1024, 4096, 16384, 65536, 262144]
ROW = re.compile(r"^\s+(\d+)\s+(\d+)\s+(\S+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)\s+(\d+)$")
RANK_LINE = re.compile(r"^\[(\S+) rank (\d+)/(\d+) local (\d+) device (\S+)\] (.*)$")




def probe(np, args, timeout=120):
    """Runs the probe on np CPU ranks (one process without mpirun when np is 0)."""
    cmd = [PROBE, "--device", "cpu"] + SIZES + list(args)
    if np:
        cmd = [MPIEXEC, "-n", str(np)] + cmd
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    return p, time.time() - t0, " ".join(cmd)


def rank_lines(out, W):
    """The per-rank lines, which must be W, one per rank, in rank order."""
    lines = [RANK_LINE.match(l) for l in out.splitlines()]
    lines = [m for m in lines if m]
    got = [(int(m.group(2)), int(m.group(3))) for m in lines]
    if got != [(r, W) for r in range(W)]:
        raise Failure(f"expected one line per rank 0..{W - 1} of {W}, got {got}:\n{out}")
    for m in lines:
        if m.group(5) != "cpu":
            raise Failure(f"rank {m.group(2)} says device {m.group(5)}, expected cpu")
    return [m.group(6) for m in lines]


def table(out, W):
    """The table's rows as tuples; checks the sizes, counts, type and busbw = algbw * 2(W-1)/W."""
    rows = [ROW.match(l) for l in out.splitlines() if not l.startswith("#")]
    rows = [m.groups() for m in rows if m]
    if [int(r[0]) for r in rows] != EXPECTED_SIZES:
        raise Failure(f"table sizes {[r[0] for r in rows]}, expected {EXPECTED_SIZES}:\n{out}")
    for size, count, typ, us, algbw, busbw, wrong in rows:
        if int(count) != int(size) // 4 or typ != "float" or float(us) < 0 or (W > 1 and float(us) == 0):
            raise Failure(f"row {size}: count {count}, type {typ}, time {us} us")
        if W == 1:
            if busbw != "-":
                raise Failure(f"one rank: busbw must be '-', not {busbw}")
            continue
        # both columns are rounded to 0.01 GB/s: the product is off by at most 0.005 * 2 + 0.005
        want = float(algbw) * 2 * (W - 1) / W
        if abs(float(busbw) - want) > 0.0151:
            raise Failure(f"row {size}: busbw {busbw}, but algbw {algbw} x 2(W-1)/W = {want:.3f}")
    heads = [l for l in out.splitlines() if l.startswith("#") and "algbw" in l]
    if not heads or not all(w in heads[0] for w in ("size", "count", "type", "time", "busbw", "#wrong")):
        raise Failure(f"no nccl-tests header line (size count type time algbw busbw #wrong):\n{out}")
    return rows


def backend_line(out):
    m = [l for l in out.splitlines() if l.startswith("# backend mpi: ")]
    if not m or len(m[0]) < len("# backend mpi: ") + 3:
        raise Failure(f"no '# backend mpi: <library and version>' line:\n{out}")
    return m[0]


def passes(np, call=None):
    def scenario():
        """ok on every rank, the backend's version and the expected table rows, exit 0 (with --call
        async: the table of dist_all_reduce_async + dist_wait, as the header says)."""
        W = np or 1
        p, took, cmd = probe(np, ["--call", call] if call else [])
        if p.returncode != 0:
            raise Failure(f"{cmd} exited {p.returncode}\n{p.stdout}\n{p.stderr}")
        states = rank_lines(p.stdout, W)
        if states != ["ok"] * W:
            raise Failure(f"expected every rank ok, got {states}")
        table(p.stdout, W)
        backend_line(p.stdout)
        if "(hot)" not in p.stdout or "# #wrong in all: 0 OK" not in p.stdout:
            raise Failure(f"the header must say the buffers are hot, the footer '0 OK':\n{p.stdout}")
        if W == 1 and "not shown" not in p.stdout:
            raise Failure("one rank: the output must say why busbw is not shown")
        if ("# all-reduce (async, then wait), sum" in p.stdout) != (call == "async"):
            raise Failure(f"the header must say '(async, then wait)' exactly with --call async:\n{p.stdout}")
        print(f"{W} rank(s){' --call ' + call if call else ''}: {W} ok lines, {len(EXPECTED_SIZES)} rows, "
              f"in {took:.1f} s")
    scenario.__name__ = f"probe_{call + '_' if call else ''}np{np or 1}"
    return scenario


def probe_wrong():
    """One rank contributing a wrong value: every rank says broken at element 3, #wrong > 0, exit 1."""
    W = 3
    p, _, cmd = probe(W, ["--test_wrong_rank", "1"])
    if p.returncode == 0:
        raise Failure(f"{cmd} exited 0 with a wrong contribution\n{p.stdout}")
    want = W * (W + 1) // 2 * 4  # element 3: factor 1 + 3 mod 7 = 4
    states = rank_lines(p.stdout, W)
    expect = f"broken: expected {want}, got {want + 1} at 3 (1 of 1024 wrong)"
    if states != [expect] * W:
        raise Failure(f"expected every rank '{expect}', got {states}")
    rows = table(p.stdout, W)
    if any(int(r[6]) != W for r in rows) or "FAILED" not in p.stdout:
        raise Failure(f"every row must count the wrong element once per rank ({W}):\n{p.stdout}")
    print(f"exit {p.returncode}: {states[0]}")


def probe_absent():
    """A rank that never arrives is named within the timeout, whether it is rank 2 or rank 0."""
    timeout = 4
    for absent, words in ((2, "rank 2 never arrived"), (0, "rank 0 never answered")):
        p, took, cmd = probe(3, ["--test_absent_rank", str(absent), "--timeout", str(timeout)], timeout=60)
        if p.returncode == 0 or words not in p.stderr:
            raise Failure(f"{cmd}: exit {p.returncode}, expected non-zero and '{words}' in\n{p.stderr}")
        if took > timeout + 20:  # the deadline plus mpirun's start and abort on a loaded machine
            raise Failure(f"{cmd} took {took:.1f} s with --timeout {timeout}")
        print(f"absent rank {absent}: ended in {took:.1f} s: "
              f"{[l for l in p.stderr.splitlines() if words in l][0]}")


def probe_disagree():
    """Ranks started with different --iters or --max_bytes: every rank ends at once, naming the flag and
    each rank's value, before any all-reduce of the table (no MPI_ERR_TRUNCATE, no table that says OK)."""
    for flag, a, b in (("--iters", "5", "7"), ("--max_bytes", "64K", "256K")):
        base = [PROBE, "--device", "cpu", "--timeout", "20"] + SIZES
        cmd = [MPIEXEC, "-n", "1"] + base + [flag, a] + [":", "-n", "1"] + base + [flag, b]
        t0 = time.time()
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        took = time.time() - t0
        value = {"64K": "65536", "256K": "262144"}
        want = f"the ranks disagree on {flag} (rank 0: {value.get(a, a)}; rank 1: {value.get(b, b)})"
        if p.returncode == 0 or want not in p.stderr:
            raise Failure(f"{' '.join(cmd)}: exit {p.returncode}, expected non-zero and '{want}' in\n"
                          f"--- stdout\n{p.stdout}\n--- stderr\n{p.stderr}")
        if any(ROW.match(l) for l in p.stdout.splitlines()) or "#wrong in all" in p.stdout or "MPI_ERR" in p.stderr:
            raise Failure(f"{flag} {a} against {b}: the table ran before the refusal:\n{p.stdout}\n{p.stderr}")
        print(f"{flag} {a} against {b}: refused in {took:.1f} s: "
              f"{[l for l in p.stderr.splitlines() if 'disagree' in l][0]}")


# CTest: one process; ok lines and the table at 2 and 3 CPU ranks; `broken` and exit 1 when one rank
# contributes a wrong value; the missing rank named within --timeout when one never arrives; probe ranks
# started with different --iters or --max_bytes refused at once, naming the flag. The multi-rank runs
# launch with mpirun.
for f in [passes(0), passes(2), passes(3), passes(2, "async"), probe_wrong, probe_absent, probe_disagree]:
    register(f, processors=2, timeout=180, skip=None, env=("bin", "mpiexec", "mpi_env"), labels=("integration",),
             needs=() if f.__name__ == "probe_np1" else ("mpi",), cache=False, sigterm=False)


if __name__ == "__main__":
    raise SystemExit("its scenarios run with the harness: python3 -m tests.harness NAME, from the repository's root "
                     "(tests/README.md)")
