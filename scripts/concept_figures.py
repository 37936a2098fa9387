#!/usr/bin/env python3
"""Concept figures for the chapters, drawn from the programs' own output (like trace_timeline.py).

  scripts/concept_figures.py sampler SHARDS.txt docs/img/sampler_n10_w3.png
      chapter 03: the padded positions of one epoch, coloured by the rank that takes them. SHARDS.txt
      is the output of the shard printer tools/shards/shards.c (its header has the compile line):
      out/shards 10 3 42 1 > out/shards.txt

Needs matplotlib for the system Python (apt-get install python3-matplotlib).
"""
import re
import sys


def plt_or_exit():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        return plt
    except ImportError:
        sys.exit("matplotlib is missing: apt-get install python3-matplotlib")


def read_shards(path):
    """{epoch: (perm, {rank: [(position, index), ...]})} from the shard printer's lines."""
    epochs = {}
    for line in open(path):
        m = re.match(r"epoch (\d+) permutation: ([\d ]+)$", line.strip())
        if m:
            epochs[int(m[1])] = ([int(x) for x in m[2].split()], {})
            continue
        m = re.match(r"epoch (\d+) rank (\d+): ([\d ]+)\s+\(positions ([\d ]+)\)$", line.strip())
        if m:
            idx, pos = [int(x) for x in m[3].split()], [int(x) for x in m[4].split()]
            epochs[int(m[1])][1][int(m[2])] = list(zip(pos, idx))
    if not epochs:
        sys.exit(f"{path}: no shard printer output (expected 'epoch E permutation: …' lines)")
    return epochs


def sampler(src, png):
    plt = plt_or_exit()
    epoch, (perm, ranks) = sorted(read_shards(src).items())[0]
    n, w = len(perm), len(ranks)
    total = max(p for shard in ranks.values() for p, _ in shard) + 1
    cmap = plt.get_cmap("tab10")
    fig, ax = plt.subplots(figsize=(1.0 + 0.62 * total, 2.7))
    for r, shard in sorted(ranks.items()):
        for p, i in shard:
            padded = p >= n
            ax.add_patch(plt.Rectangle((p, 0), 0.92, 0.92, facecolor=cmap(r), alpha=0.45 if padded else 0.9,
                                       hatch="//" if padded else None, edgecolor="black", linewidth=0.8))
            ax.text(p + 0.46, 0.46, str(i), ha="center", va="center", fontsize=13, weight="bold")
            ax.text(p + 0.46, -0.22, str(p), ha="center", va="center", fontsize=8, color="0.3")
    ax.axvline(n - 0.04, color="black", linestyle="--", linewidth=1)
    ax.text(n - 0.25, 1.12, f"N = {n}", ha="right", fontsize=9)
    ax.text(n + 0.2, 1.12, f"padded: perm[0 … {total - n - 1}]", ha="left", fontsize=9)
    ax.text(-0.1, -0.5, "position in the padded permutation (rank r takes r, r + W, r + 2W, …)",
            fontsize=8, color="0.3")
    handles = [plt.Rectangle((0, 0), 1, 1, facecolor=cmap(r), alpha=0.9,
                             label=f"rank {r}: {' '.join(str(i) for _, i in ranks[r])}") for r in sorted(ranks)]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=9, frameon=False)
    ax.set_xlim(-0.2, total + 0.1)
    ax.set_ylim(-0.65, 1.35)
    ax.axis("off")
    ax.set_title(f"epoch {epoch}: N = {n} samples, W = {w} ranks, {total // w} per rank "
                 f"(hatched: padded positions)", fontsize=10, loc="left")
    fig.tight_layout()
    fig.savefig(png, dpi=80)
    print(f"wrote {png}")


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in ("sampler",):
        sys.exit(__doc__)
    {"sampler": sampler}[sys.argv[1]](sys.argv[2], sys.argv[3])
