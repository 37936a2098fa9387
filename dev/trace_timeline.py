#!/usr/bin/env python3
"""Draws step 06's --trace files as a PNG: the bucket assignment, then a timeline of backward and
the bucket all-reduces.

    dev/trace_timeline.py TRACE.json OUT.png [--steps FIRST LAST] [--sizes 784,1024,1024,10]
    dev/trace_timeline.py TRACE.json --summary

TRACE.json may contain {rank}, e.g. 'trace_{rank}.json', to read every rank's file.

Top panel: the flat gradient buffer in the order backward fills it (last layer's bias first), cut
into the buckets that the program itself used. The buckets come from the trace's all-reduce spans
("all-reduce bucket i: N floats"); --sizes (the model's layer sizes, inputs first) names the
tensors in them, and the script stops if the buckets do not tile the tensors exactly.

Bottom panel: for each rank (rank 0 on top), one row for backward, one bar per layer, and one row
per bucket, from the moment its all-reduce was started to the moment it was seen complete. A
bucket's bar has the colour of the layer whose backward made it ready.

--summary prints, instead of a picture, what the chapter quotes: how many bucket all-reduces were
seen complete before their rank's backward ended, and how long the exchange went on after the later
rank's backward ended. Needs matplotlib for the picture (Debian: apt-get install python3-matplotlib).
"""
import argparse
import glob
import json
import re
import statistics
import sys

BUCKET = re.compile(r"(?:all-reduce|reduce-scatter) bucket (\d+): (\d+) floats")
LAYER = re.compile(r"backward layer (\d+)")


def load(pattern):
    files = sorted(glob.glob(pattern.replace("{rank}", "*"))) if "{rank}" in pattern else [pattern]
    if not files:
        sys.exit(f"no trace files match {pattern}")
    events = []
    for f in files:
        with open(f) as fh:
            events += json.load(fh)["traceEvents"]
    return [e for e in events if e["ph"] == "X"]


def tensors(sizes):
    """The parameter tensors in the order backward produces them: (name, layer, floats)."""
    out = []
    for l in reversed(range(len(sizes) - 1)):
        out.append((f"b{l}", l, sizes[l + 1]))
        out.append((f"W{l}", l, sizes[l + 1] * sizes[l]))
    return out


def assignment(spans, sizes):
    """[(bucket, floats, [tensors])] from the trace's bucket spans, checked against the model."""
    floats = {}
    for e in spans:
        m = BUCKET.match(e["name"])
        if m:
            floats[int(m.group(1))] = int(m.group(2))
    if not floats:
        sys.exit("the trace has no all-reduce bucket spans")
    todo, out = tensors(sizes), []
    for b in sorted(floats):
        members, n = [], 0
        while todo and n < floats[b]:
            members.append(todo.pop(0))
            n += members[-1][2]
        if n != floats[b]:
            sys.exit(f"bucket {b} has {floats[b]} floats, which is no run of whole tensors of a "
                     f"{','.join(map(str, sizes))} model: pass the run's --sizes")
        out.append((b, n, members))
    if todo:
        sys.exit(f"tensors {[t[0] for t in todo]} are in no bucket: pass the run's --sizes")
    return out


def summary(spans):
    by = {}
    for e in spans:
        by.setdefault((e["args"]["step"], e["pid"]), []).append(e)
    steps = sorted({s for s, _ in by})
    early = total = 0
    tails = []
    for s in steps:
        ends = {}
        for (s2, rank), es in by.items():
            if s2 != s:
                continue
            bw = max(e["ts"] + e["dur"] for e in es if LAYER.match(e["name"]))
            ar = [e["ts"] + e["dur"] for e in es if BUCKET.match(e["name"])]
            early += sum(end < bw for end in ar)
            total += len(ar)
            ends[rank] = (bw, max(ar))
        later = max(bw for bw, _ in ends.values())
        tails.append(min(last - later for _, last in ends.values()) / 1000)
    print(f"{len(steps)} steps, {len(ends)} ranks: {early} of {total} bucket all-reduces seen "
          f"complete before their rank's backward ended")
    print(f"all-reduce time left after the later rank's backward (per step, the rank that waited "
          f"less): {min(tails):.1f} to {max(tails):.1f} ms, median {statistics.median(tails):.1f} ms")


def draw(spans, buckets, sizes, steps, png):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch
    except ImportError:
        sys.exit("matplotlib is missing: apt-get install python3-matplotlib")
    cmap = plt.get_cmap("tab10")
    layer_colour = {l: cmap(l) for l in range(len(sizes) - 1)}
    ready_layer = {b: members[-1][1] for b, _, members in buckets}  # the last tensor in it is ready last
    size = lambda n: f"{n * 4 / 2**20:.2f} MiB" if n * 4 >= 2**20 / 10 else f"{n * 4 / 1024:.0f} KiB"

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(12, 7.5), gridspec_kw={"height_ratios": [1, 3.2]})

    # The assignment: tensors left to right in backward order, widths by size (at least 3 % of the
    # row, so that the biases show), buckets bracketed above.
    all_t = [t for _, _, members in buckets for t in members]
    total = sum(t[2] for t in all_t)
    width = {t[0]: max(t[2] / total, 0.03) for t in all_t}
    scale = 1 / sum(width.values())
    x = 0.0
    for b, n, members in buckets:
        x0 = x
        for name, layer, floats in members:
            w = width[name] * scale
            top.broken_barh([(x, w)], (0, 1), facecolors=layer_colour[layer], edgecolor="black", linewidth=0.6)
            top.text(x + w / 2, 0.5, name, ha="center", va="center", fontsize=9)
            x += w
        first = "\n(first bucket,\ncap 1 MiB)" if b == 0 else ""
        top.annotate("", xy=(x0 + 0.003, 1.25), xytext=(x - 0.003, 1.25),
                     arrowprops=dict(arrowstyle="|-|", lw=0.8, shrinkA=0, shrinkB=0))
        top.text((x0 + x) / 2, 1.4, f"bucket {b}: {size(n)}{first}", ha="center", va="bottom",
                 fontsize=8)
    top.set_xlim(0, 1)
    top.set_ylim(-0.1, 2.6)
    top.axis("off")
    top.set_title("gradient buckets of the traced run, in the order backward fills them "
                  "(widths: size, but at least 3 %)", fontsize=10)

    # The timeline: rank 0 first; per rank a backward row, then one row per bucket.
    shown = [e for e in spans if steps[0] <= e["args"]["step"] <= steps[1]]
    if not shown:
        sys.exit(f"no spans for steps {steps[0]}..{steps[1]}")
    t0 = min(e["ts"] for e in shown)
    ranks = sorted({e["pid"] for e in shown})
    labels, row = [], {}
    for r in ranks:
        row[(r, "bw")] = len(labels)
        labels.append(f"rank {r}: backward")
        for b, _, members in buckets:
            row[(r, b)] = len(labels)
            labels.append(f"rank {r}: all-reduce bucket {b} ({', '.join(t[0] for t in members)})")
    for e in shown:
        lm, bm = LAYER.match(e["name"]), BUCKET.match(e["name"])
        if lm:
            y, colour = row[(e["pid"], "bw")], layer_colour[int(lm.group(1))]
        else:
            b = int(bm.group(1))
            y, colour = row[(e["pid"], b)], layer_colour[ready_layer[b]]
        bottom.broken_barh([((e["ts"] - t0) / 1000, max(e["dur"] / 1000, 0.05))], (y - 0.38, 0.76),
                           facecolors=colour, edgecolor="black", linewidth=0.4)
    for r in ranks[1:]:
        bottom.axhline(row[(r, "bw")] - 0.5, color="grey", linewidth=0.6)
    for s in range(steps[0], steps[1] + 1):
        starts = [e["ts"] for e in shown if e["args"]["step"] == s]
        if starts:
            bottom.text((min(starts) - t0) / 1000, -0.75, f"step {s}", fontsize=8, va="bottom")
    bottom.set_yticks(range(len(labels)))
    bottom.set_yticklabels(labels, fontsize=8)
    bottom.set_ylim(len(labels) - 0.5, -0.9)  # rank 0 on top
    bottom.set_xlabel("time (ms) since the first span shown")
    handles = [Patch(facecolor=c, edgecolor="black", label=f"layer {l}: W{l}, b{l}")
               for l, c in sorted(layer_colour.items(), reverse=True)]
    bottom.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8,
                  title="colour = layer", title_fontsize=8)
    bottom.text(1.01, 0.6, "an all-reduce bar has\nthe colour of the layer\nwhose backward made\nits bucket ready",
                transform=bottom.transAxes, fontsize=8, va="top")
    bottom.set_title(f"backward and bucket all-reduces, optimizer steps {steps[0]}-{steps[1]}",
                     fontsize=10)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    print(f"wrote {png}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("png", nargs="?")
    ap.add_argument("--steps", nargs=2, type=int, default=[3, 5], metavar=("FIRST", "LAST"),
                    help="optimizer steps to draw (default 3 5: past the warm-up)")
    ap.add_argument("--sizes", default="784,1024,1024,10",
                    help="the model's layer sizes, inputs first (default: the course model)")
    ap.add_argument("--summary", action="store_true", help="print the overlap figures instead")
    a = ap.parse_args()
    spans = load(a.trace)
    if a.summary:
        summary(spans)
        return
    if not a.png:
        ap.error("OUT.png is required without --summary")
    sizes = [int(s) for s in a.sizes.split(",")]
    draw(spans, assignment(spans, sizes), sizes, a.steps, a.png)


if __name__ == "__main__":
    main()
