#!/usr/bin/env python3
"""Concept figures for the chapters, drawn from the programs' own output (like trace_timeline.py).

  scripts/concept_figures.py sampler SHARDS.txt docs/img/sampler_n10_w3.png
      chapter 03: the padded positions of one epoch, coloured by the rank that takes them. SHARDS.txt
      is the output of the shard printer tools/shards/shards.c (its header has the compile line):
      out/shards 10 3 42 1 > out/shards.txt

  scripts/concept_figures.py zero 'TRACE_{rank}.json' LOG.txt docs/img/step07_shards_np4.png [SIZES]
      chapter 07: the flat gradient buffer at W ranks, tensors in backward order, bucket borders above
      and shard borders below. The bucket sizes are the sums over the ranks of what each rank's trace
      says it receives ("reduce-scatter bucket i: N floats"); the shard size is the log's
      "optimizer state: S floats per rank"; SIZES the model's layer sizes (default 784,1024,1024,10):
      mpirun -np 4 build/bin/07_zero --device cpu --data synthetic --epochs 1 --max_steps 2 \
        --save_interval 0 --trace 'out/z_{rank}.json' > out/z4.log

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


def zero(pattern, log, png, sizes="784,1024,1024,10"):
    import glob
    import json
    plt = plt_or_exit()
    m = re.search(r"optimizer state: (\d+) floats per rank", open(log).read())
    if not m:
        sys.exit(f"{log}: no 'optimizer state: S floats per rank' line (a step 07 log)")
    shard = int(m[1])
    files = sorted(glob.glob(pattern.replace("{rank}", "*")))
    if not files:
        sys.exit(f"no trace files match {pattern}")
    bucket = {}  # bucket -> floats in the flat buffer: what every rank receives of it, summed
    for f in files:
        d = json.load(open(f))
        seen = {}
        for e in d["traceEvents"] if isinstance(d, dict) else d:
            b = re.match(r"reduce-scatter bucket (\d+): (\d+) floats", e.get("name", ""))
            if b:
                seen[int(b[1])] = int(b[2])
        for b, n in seen.items():
            bucket[b] = bucket.get(b, 0) + n
    w = len(files)
    sizes = [int(x) for x in sizes.split(",")]
    tensors = []  # (name, layer, floats) in the flat buffer's order: W0, b0, W1, b1, ...
    for l in range(len(sizes) - 1):
        tensors += [(f"W{l}", l, sizes[l + 1] * sizes[l]), (f"b{l}", l, sizes[l + 1])]
    n = sum(t[2] for t in tensors)
    total = shard * w
    if sum(bucket.values()) != total:
        sys.exit(f"the buckets hold {sum(bucket.values())} floats, the shards {w} x {shard} = {total}")
    cmap = plt.get_cmap("tab10")
    fig, ax = plt.subplots(figsize=(11, 3.0))
    x = 0
    for name, l, k in tensors:  # widths to scale: the biases are slivers, labelled above the bar
        ax.add_patch(plt.Rectangle((x, 0), k, 1, facecolor=cmap(l), alpha=0.35 if name[0] == "b" else 0.75,
                                   edgecolor="white", linewidth=0.5))
        if k > total / 20:
            ax.text(x + k / 2, 0.5, f"{name}\n{k:,}", ha="center", va="center", fontsize=9)
        x += k
    if total > n:
        ax.add_patch(plt.Rectangle((n, 0), total - n, 1, facecolor="0.6"))
    first = min(bucket)  # the bucket launched first holds the buffer's last tensors
    offs, tail = 0, []
    for name, _, k in tensors:
        if offs >= total - bucket[first] and k <= total / 20:
            tail.append(name)
        offs += k
    if tail:
        ax.text(total, 0.5, f"  {', '.join(tail)}\n  + {total - n} padding", va="center", fontsize=8)
    # buckets from the end of the buffer backwards, in launch order (bucket 0 holds the last tensors)
    end = total
    for b in sorted(bucket):
        start = end - bucket[b]
        ax.plot([start, start], [1.0, 1.55], color="black", linewidth=2)
        ax.annotate("", xy=(start, 1.35), xytext=(end, 1.35), arrowprops=dict(arrowstyle="<->", lw=1.2))
        ax.text((start + end) / 2 if bucket[b] > total / 10 else start, 1.45,
                f"bucket {b}: [{start:,}, {end:,})", ha="center" if bucket[b] > total / 10 else "right",
                fontsize=9, weight="bold")
        end = start
    for r in range(w):
        lo, hi = r * shard, (r + 1) * shard
        if r:
            ax.plot([lo, lo], [-0.55, 1.0], color="crimson", linestyle="--", linewidth=1.5)
            ax.text(lo, -0.68, f"{lo:,}", ha="center", fontsize=8, color="crimson")
        ax.text((lo + hi) / 2, -0.35, f"rank {r}'s shard", ha="center", fontsize=9, color="crimson")
    ax.set_xlim(-total * 0.01, total * 1.09)
    ax.set_ylim(-0.8, 1.7)
    ax.axis("off")
    ax.set_title(f"step 07 at {w} ranks: the flat gradient buffer ({n:,} floats + {total - n} padding), "
                 f"buckets above, shards of {shard:,} floats below (dashed)", fontsize=10, loc="left")
    fig.tight_layout()
    fig.savefig(png, dpi=80)
    print(f"wrote {png}")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "sampler":
        sampler(sys.argv[2], sys.argv[3])
    elif len(sys.argv) in (5, 6) and sys.argv[1] == "zero":
        zero(*sys.argv[2:])
    else:
        sys.exit(__doc__)
