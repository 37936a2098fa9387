#!/usr/bin/env python3
"""scripts/fr_analyze.py on rings written here, one case per verdict: the exit status and the words
that name the culprit; every verdict, including one a real job makes only rarely (a desync)."""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ANALYZE = os.path.join(ROOT, "scripts", "fr_analyze.py")
T0 = 1_800_000_000.0


def entry(seq, op="all-reduce", count=100, tag="", state="done", typ="float"):
    return {"seq": seq, "op": op, "type": typ, "count": count, "tag": tag or f"bucket {seq % 3}", "state": state,
            "queued": T0 + seq, "started": T0 + seq + 0.1, "finished": T0 + seq + 0.2 if state == "done" else 0}


def ring(n, changes=None):
    """Collectives 1..n, all done; changes: {seq: entry or None (not recorded)}."""
    changes = changes or {}
    out = {s: entry(s) for s in range(1, n + 1)}
    for s, e in changes.items():
        if e is None:
            out.pop(s, None)
        else:
            out[s] = e
    return [out[s] for s in sorted(out)]


CASES = {
    "clean": (0, {0: ring(300), 1: ring(300), 2: ring(300)}, ["no culprit", "all done"]),
    "skip": (3, {0: ring(40, {40: entry(40, state="started")}), 1: ring(39) + [entry(41, state="started")],
                 2: ring(40, {40: entry(40, state="started")})},
             ["rank 1 never started #40", "it went on to #41", "ranks 0, 2 wait in it since"]),
    "stuck_before": (3, {0: ring(17, {17: entry(17, state="started")}), 1: ring(16)},
                     ["rank 1 never started #17", "its last: #16 all-reduce", "rank 0 waits in it"]),
    "no_ring": (3, {0: ring(9, {9: entry(9, state="started")}), 2: ring(9, {9: entry(9, state="started")})},
                ["no ring from rank 1", "the others wait in #9"]),
    "desync": (4, {0: ring(12), 1: ring(12, {7: entry(7, op="all-gather")})},
               ["desync at #7", "rank 0 all-reduce", "rank 1 all-gather"]),
    "size": (5, {0: ring(12), 1: ring(12, {5: entry(5, count=99)})},
             ["size mismatch at #5", "rank 0 float x 100", "rank 1 float x 99"]),
    # a live snapshot (SIGUSR2): rank 1 wrote its ring before rank 0 started #31: not a culprit
    "live": (0, {0: ring(31, {31: entry(31, state="started")}), 1: ring(30)},
             ["no culprit", "a live snapshot (SIGUSR2)"]),
    # the same rings from a hang: rank 1 wrote its ring long after rank 0 started #31
    "late": (3, {0: ring(31, {31: entry(31, state="started")}), 1: ring(30)}, ["rank 1 never started #31"]),
    # rank 1 frozen inside #8 (SIGSTOP), then let go by its launcher: both rings show #8 in flight
    "frozen": (3, {r: ring(8, {8: entry(8, state="started")}) for r in range(2)},
               ["rank 1 did not run for 12.0 s", "stopped: SIGSTOP", "while rank 0 waited in #8"]),
    # rank 1 arrived at #8 8 s after rank 0 (let go by its launcher after a stop the ring did not see)
    "late_arrival": (3, {0: ring(8, {8: entry(8, state="started")}),
                         1: ring(8, {8: dict(entry(8, state="started"), queued=T0 + 16, started=T0 + 16.1)})},
                     ["rank 1 arrived at #8 (all-reduce) 8.0 s after rank 0", "stopped or busy elsewhere"]),
    "all_wait": (0, {r: ring(8, {8: entry(8, state="started")}) for r in range(3)},
                 ["no culprit rank", "every rank called #8", "the collective itself does not finish"]),
}


def write(folder, rings, world, why="test", dumped=None, stalled=None):
    for r, entries in rings.items():
        with open(os.path.join(folder, f"fr_{r}.jsonl"), "w") as f:
            stall, until = (stalled or {}).get(r, (0, 0))
            f.write(json.dumps({"rank": r, "world_size": world, "pid": 1, "dumped": (dumped or {}).get(r, T0 + 999),
                                "stalled_s": stall, "stalled_until": until, "why": why}) + "\n")
            for e in entries:
                f.write(json.dumps(e) + "\n")


def main():
    bad = []
    for name, (status, rings, words) in CASES.items():
        with tempfile.TemporaryDirectory() as d:
            world = max(rings) + 1 if name != "no_ring" else 3
            if name == "frozen":
                write(d, rings, world, stalled={1: (12.0, T0 + 30)})
            elif name == "live":
                write(d, rings, world, why="SIGUSR2", dumped={0: T0 + 31.5, 1: T0 + 30.9})
            else:
                write(d, rings, world)
            p = subprocess.run([sys.executable, ANALYZE, os.path.join(d, "fr_{rank}.jsonl")], capture_output=True,
                               text=True, timeout=60)
        out = p.stdout + p.stderr
        missing = [w for w in words if w not in out]
        ok = p.returncode == status and not missing
        print(f"{'ok' if ok else 'FAILED'} {name}: exit {p.returncode} (want {status}): {p.stdout.strip().splitlines()[-1:]}")
        if not ok:
            bad.append(f"{name}: exit {p.returncode}, want {status}; missing {missing} in:\n{out}")
    with tempfile.TemporaryDirectory() as d:
        p = subprocess.run([sys.executable, ANALYZE, os.path.join(d, "fr_{rank}.jsonl")], capture_output=True,
                           text=True, timeout=60)
        if p.returncode == 0 or "no ring matches" not in p.stderr:
            bad.append(f"no rings: exit {p.returncode}, want non-zero and 'no ring matches':\n{p.stderr}")
    if bad:
        sys.exit("\n".join(bad))


if __name__ == "__main__":
    main()
