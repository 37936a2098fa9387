#!/usr/bin/env python3
"""Draws a --trace file (Chrome trace-event JSON from step 06) as a PNG timeline.

    scripts/trace_timeline.py TRACE.json OUT.png [--steps FIRST LAST]

One row per rank and track (compute: backward per layer; communication: all-reduce per bucket),
time on the x axis, so the overlap of all-reduce with backward is visible. Needs matplotlib
(Debian: apt-get install python3-matplotlib). Several ranks' files can be given as TRACE.json
with {rank} in it, e.g. 'trace_{rank}.json'.
"""
import argparse
import glob
import json
import sys


def load(pattern):
    files = sorted(glob.glob(pattern.replace("{rank}", "*"))) if "{rank}" in pattern else [pattern]
    if not files:
        sys.exit(f"no trace files match {pattern}")
    events = []
    for f in files:
        with open(f) as fh:
            events += json.load(fh)["traceEvents"]
    return events


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("png")
    ap.add_argument("--steps", nargs=2, type=int, default=[3, 5], metavar=("FIRST", "LAST"),
                    help="optimizer steps to draw (default 3 5: past the warm-up)")
    a = ap.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("matplotlib is missing: apt-get install python3-matplotlib")
    events = load(a.trace)
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M"}
    spans = [e for e in events if e["ph"] == "X" and a.steps[0] <= e["args"]["step"] <= a.steps[1]]
    if not spans:
        sys.exit(f"no spans for steps {a.steps[0]}..{a.steps[1]}")
    t0 = min(e["ts"] for e in spans)
    rows = sorted({(e["pid"], e["tid"]) for e in spans})
    fig, ax = plt.subplots(figsize=(12, 0.6 * len(rows) + 1.5))
    colors = plt.get_cmap("tab10")
    legend = {}
    for y, row in enumerate(rows):
        for e in (e for e in spans if (e["pid"], e["tid"]) == row):
            index = int(e["name"].split()[2].rstrip(":"))  # "backward layer 2", "all-reduce bucket 0: ..."
            color = colors((index if e["name"].startswith("backward") else 3 + index) % 10)
            ax.broken_barh([((e["ts"] - t0) / 1000, e["dur"] / 1000)], (y - 0.4, 0.8),
                           facecolors=color, edgecolor="black", linewidth=0.3)
            legend.setdefault(e["name"].split(":")[0], color)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"rank {p}: {names.get((p, t), t)}" for p, t in rows])
    ax.set_xlabel("time (ms)")
    from matplotlib.patches import Patch
    ax.legend(handles=[Patch(facecolor=c, edgecolor="black", label=n) for n, c in sorted(legend.items())],
              loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    ax.set_title(f"step 06: backward and bucket all-reduces, steps {a.steps[0]}-{a.steps[1]}")
    fig.tight_layout()
    fig.savefig(a.png, dpi=110)
    print(f"wrote {a.png}")


if __name__ == "__main__":
    main()
