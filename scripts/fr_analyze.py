#!/usr/bin/env python3
"""Reads the flight recorder's rings of a hung or failed job and names the culprit.

    scripts/fr_analyze.py 'out/fr_{rank}.jsonl'           # every rank's ring, as the job wrote them
    scripts/fr_analyze.py 'out/fr_{rank}.jsonl' --world 4  # when a rank may have written none

Each rank writes its ring (common/dist/flight.h) when its watchdog ends a hung job, when a collective
fails, or on SIGUSR2: its last 256 collectives, numbered 1, 2, ... in the order the rank called
them. Every rank calls the same collectives in the same order, so the rings align by number, and
the first number at which they do not agree is the culprit. One verdict, and the exit status says
which:

  0  no culprit: every rank recorded the same collectives (all done; all waiting in the same one, so
     that the collective itself does not finish, which is the link's or the backend's doing; or in
     flight in a live snapshot, which `kill -USR2` on every rank takes)
  3  a rank never started collective N while others called it (its last entry is named), did not run
     while the others waited (frozen: SIGSTOP, a debugger), arrived at the collective they waited in
     seconds after them, or wrote no ring at all (stopped, killed, or hung outside a collective)
  4  desync: at collective N the ranks called different operations
  5  size mismatch: at collective N the ranks called the same operation on other types or counts
  2  bad input (no ring found, an unreadable file)
"""
import argparse
import glob
import json
import re
import sys
import time

NO_CULPRIT, MISSING, DESYNC, SIZE = 0, 3, 4, 5
LATE_S = 1.0  # a rank that arrives this much after the others at a collective they wait in is the culprit


def load(pattern, world):
    """{rank: (header, {seq: entry})} for each ring found, and the world size."""
    paths = {}
    if world is not None:
        for r in range(world):
            paths[r] = pattern.replace("{rank}", str(r))
    else:
        rx = re.compile("^" + re.escape(pattern).replace(re.escape("{rank}"), r"(\d+)") + "$")
        for p in glob.glob(pattern.replace("{rank}", "*")):
            m = rx.match(p)
            if m:
                paths[int(m.group(1))] = p
    rings = {}
    for r, p in sorted(paths.items()):
        try:
            with open(p) as f:
                lines = [json.loads(line) for line in f if line.strip()]
        except FileNotFoundError:
            continue
        except (OSError, ValueError) as e:
            sys.exit(f"fr_analyze: {p}: {e}")
        if not lines or "rank" not in lines[0]:
            sys.exit(f"fr_analyze: {p}: not a flight recorder ring (no header line)")
        rings[r] = (lines[0], {e["seq"]: e for e in lines[1:]})
    if not rings:
        sys.exit(f"fr_analyze: no ring matches {pattern!r} (the job writes them to --fr_dir, default out/)")
    sizes = [h.get("world_size", 0) for h, _ in rings.values()]
    return rings, world if world is not None else max(sizes + [max(rings) + 1])


def when(t):
    return time.strftime("%H:%M:%S", time.localtime(t)) if t else "?"


def describe(e):
    tag = f", {e['tag']}" if e.get("tag") else ""
    return f"#{e['seq']} {e['op']}{tag} ({e['type']} x {e['count']}, {e['state']})"


def ranks(rs):
    rs = sorted(rs)
    return ("rank " if len(rs) == 1 else "ranks ") + ", ".join(map(str, rs))


def waiting(rings, seq):
    """The ranks that called collective seq and have not finished it, and since when."""
    w = {r: e[seq] for r, (_, e) in rings.items() if seq in e and e[seq]["state"] != "done"}
    since = min((x["started"] or x["queued"] for x in w.values()), default=0)
    return w, since


def verdict(rings, world):
    """(exit status, one paragraph)."""
    absent = [r for r in range(world) if r not in rings]
    called = sorted({s for _, e in rings.values() for s in e})
    # A rank that did not run at all (its watchdog saw its own ticks stop: SIGSTOP, a debugger, a
    # paused machine) while another waited in a collective: frozen, whatever its ring says.
    for seq in called:
        w, since = waiting(rings, seq)
        frozen = {r: h for r, (h, _) in rings.items()
                  if h.get("stalled_s", 0) >= 1.0 and h.get("stalled_until", 0) > since > 0}
        if w and frozen:
            others = set(w) - set(frozen)
            return MISSING, ("; ".join(f"rank {r} did not run for {h['stalled_s']:.1f} s until "
                                       f"{when(h['stalled_until'])} (stopped: SIGSTOP, a debugger, or a paused "
                                       f"machine)" for r, h in frozen.items())
                             + f", while {ranks(others) if others else 'it'} waited in #{seq} "
                             f"({rings[next(iter(w))][1][seq]['op']}) since {when(since)}")
    # A rank that never called N although another did: the first such N names the culprit.
    for seq in called:
        have = [r for r, (_, e) in rings.items() if seq in e]
        oldest = {r: min(e) if e else 1 for r, (_, e) in rings.items()}
        w, since = waiting(rings, seq)
        first = min(rings[r][1][seq]["started"] or rings[r][1][seq]["queued"] for r in have)
        # A rank lacks seq when its ring covers that number and it went on past it (it skipped it), or
        # it wrote its ring after another rank had started seq (it had time to arrive, and did not). A
        # ring written before the others started seq, or while the job ran (SIGUSR2), says nothing.
        lack = [r for r, (h, e) in rings.items() if seq not in e and seq >= oldest[r]
                and (any(s > seq for s in e) or (h.get("dumped", 0) > first and h.get("why") != "SIGUSR2"))]
        if not lack:
            continue
        other = rings[have[0]][1][seq]
        lines = []
        for r in lack:
            e = rings[r][1]
            before, after = [s for s in e if s < seq], [s for s in e if s > seq]
            last = f"its last: {describe(e[max(before)])}" if before else "no earlier entry in its ring"
            went_on = f"; it went on to {describe(e[min(after)])}" if after else ""
            lines.append(f"rank {r} never started #{seq} ({other['op']}, {other.get('tag') or 'untagged'}) "
                         f"({last}{went_on})")
        wait = (f"; {ranks(w)} {'waits' if len(w) == 1 else 'wait'} in it since {when(since)}" if w
                else f"; {ranks(have)} called it")
        return MISSING, "; ".join(lines) + wait + (f"; no ring from {ranks(absent)}" if absent else "")
    # Every rank called the same numbers: do they agree on what each one was?
    for seq in called:
        es = {r: e[seq] for r, (_, e) in rings.items() if seq in e}
        ops = {}
        for r, x in es.items():
            ops.setdefault(x["op"], []).append(r)
        if len(ops) > 1:
            return DESYNC, f"desync at #{seq}: " + "; ".join(f"{ranks(rs)} {op}" for op, rs in ops.items())
        shapes = {}
        for r, x in es.items():
            shapes.setdefault((x["type"], x["count"]), []).append(r)
        if len(shapes) > 1:
            return SIZE, (f"size mismatch at #{seq} ({next(iter(ops))}): "
                          + "; ".join(f"{ranks(rs)} {t} x {n}" for (t, n), rs in shapes.items()))
    pending = {r: min((s for s, x in e.items() if x["state"] != "done"), default=None) for r, (_, e) in rings.items()}
    stuck = {s for s in pending.values() if s is not None}
    # Every rank called the collective a rank waits in, but one arrived long after the others: it was
    # stopped or busy elsewhere meanwhile (the late arrival is what names a straggler, not step times).
    if stuck and not all(h.get("why") == "SIGUSR2" for h, _ in rings.values()):
        s = min(stuck)
        starts = {r: e[s]["started"] or e[s]["queued"] for r, (_, e) in rings.items() if s in e}
        first = min(starts.values())
        late = {r: t - first for r, t in starts.items() if t - first >= LATE_S}
        if late and len(late) < len(starts):
            early = sorted(set(starts) - set(late))
            return MISSING, ("; ".join(f"rank {r} arrived at #{s} ({rings[r][1][s]['op']}) {d:.1f} s after "
                                       f"{ranks(early)}" for r, d in sorted(late.items()))
                             + f", which waited in it from {when(first)}: stopped or busy elsewhere meanwhile")
    if absent:
        where = f"; the others wait in #{min(stuck)} since {when(waiting(rings, min(stuck))[1])}" if stuck else ""
        return MISSING, (f"no ring from {ranks(absent)}: stopped, killed, or hung outside a collective before "
                         f"its watchdog could write one (the others' rings agree up to #{called[-1] if called else 0})"
                         + where)
    live = all(h.get("why") == "SIGUSR2" for h, _ in rings.values())
    if stuck and live:
        return NO_CULPRIT, (f"no culprit: {world} ranks agree on #{called[0]}..#{called[-1]}; a live snapshot "
                            f"(SIGUSR2), with {len(stuck)} collective(s) in flight when it was taken")
    if stuck:
        s = min(stuck)
        w, since = waiting(rings, s)
        return NO_CULPRIT, (f"no culprit rank: every rank called #{s} ({rings[next(iter(w))][1][s]['op']}) and "
                            f"waits in it since {when(since)}: the collective itself does not finish (the link "
                            f"or the backend)")
    return NO_CULPRIT, (f"no culprit: {world} ranks, collectives #{called[0] if called else 0}.."
                        f"#{called[-1] if called else 0} recorded, the same on every rank, all done")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pattern", help="the rings, with {rank} where the rank goes: 'out/fr_{rank}.jsonl'")
    ap.add_argument("--world", type=int, help="the job's ranks (default: from the rings)")
    a = ap.parse_args()
    if "{rank}" not in a.pattern:
        ap.error("the pattern needs {rank} where the rank goes, e.g. 'out/fr_{rank}.jsonl'")
    rings, world = load(a.pattern, a.world)
    why = {h.get("why") for h, _ in rings.values()}
    print(f"{len(rings)} of {world} rings ({'; '.join(sorted(w for w in why if w))})")
    status, text = verdict(rings, world)
    print(text)
    return status


if __name__ == "__main__":
    sys.exit(main())
