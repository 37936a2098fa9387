#!/usr/bin/env python3
"""Concept figures for the chapters, drawn from the programs' own output (like trace_timeline.py).

  dev/concept_figures.py sampler SHARDS.txt docs/img/sampler_n10_w3.png
      chapter 03: the padded positions of one epoch, coloured by the rank that takes them. SHARDS.txt
      is the output of the shard printer tools/shards/shards.c (its header has the compile line):
      out/shards 10 3 42 1 > out/shards.txt

  dev/concept_figures.py zero 'TRACE_{rank}.json' LOG.txt docs/img/step07_shards_np4.png [SIZES]
      chapter 07: the flat gradient buffer at W ranks, tensors in backward order, bucket borders above
      and shard borders below. The bucket sizes are the sums over the ranks of what each rank's trace
      says it receives ("reduce-scatter bucket i: N floats"); the shard size is the log's
      "optimizer state: S floats per rank"; SIZES the model's layer sizes (default 784,1024,1024,10):
      mpirun -np 4 build/bin/07_zero --device cpu --data synthetic --epochs 1 --max_steps 2 \
        --save_interval 0 --trace 'out/z_{rank}.json' > out/z4.log

  dev/concept_figures.py accum 'K1_{rank}.json' 'K4_{rank}.json' 4 docs/img/step06_grad_accum.png
      chapter 06: two 2-rank runs of step 06, --grad_accum 1 and K, drawn on one time scale, steps 2 to 4.
      The trace holds only the communicating (last) micro-batch's backward and its bucket all-reduces;
      the hatched gap before each traced backward is measured (previous step's last span end to this
      backward's start) and holds what is not traced: the optimizer step, the K - 1 silent micro-batches
      and the last micro-batch's forward. The title gives the median gaps of the two runs:
      mpirun -np 2 build/bin/06_full --device cpu --data synthetic --epochs 1 --max_steps 6 \
        --save_interval 0 --batch_size 32 --grad_accum K --log_interval 1 --trace 'out/accK_{rank}.json'

  dev/concept_figures.py ddpstep 'TRACE_{rank}.json' docs/img/step04_ddp_step.png [STEP]
      chapter 04: one DDP step on 2 ranks, seen in step 06's trace with one bucket (a model under
      1 MiB of gradients): backward per layer, then the single all-reduce; the hatched gaps are measured
      and hold what is not traced (forward before, optimizer step after):
      mpirun -np 2 build/bin/06_full --device cpu --data synthetic --hidden 128,128 --epochs 1 \
        --max_steps 4 --save_interval 0 --batch_size 32 --bucket_cap_mb 100 --trace 'out/one_{rank}.json'

  dev/concept_figures.py fsdp 'TRACE_{rank}.json' docs/img/step08_fsdp_step.png [STEP] [RANK]
      chapter 08: one optimizer step of step 08 on one rank (default step 3, rank 0), from its own
      trace: forward and backward per layer, and per layer its forward all-gather, its backward
      all-gather (all but the last layer) and its reduce-scatter, each bar from the moment the
      collective was started to the moment it was seen complete; colour = layer, and each gather
      names the buffer (layer mod 2) it fills:
      mpirun -np 2 build/bin/08_fsdp --device cpu --data synthetic --epochs 1 --max_steps 6 \
        --save_interval 0 --log_interval 1 --trace 'out/f8_{rank}.json'

  dev/concept_figures.py hang LOG.txt docs/img/step05_barrier_hang.png
      chapter 05: the two-rank sequence of the barrier hang, every label a line of LOG.txt: the last
      epoch record both ranks reached, rank 0's "saved" line, and each rank's watchdog line, which
      names the collective it waited in. LOG.txt is a run of step 05 with the barrier moved inside
      save_checkpoint's rank test (built with scripts/check_exercise.sh --build-only 05 FILE):
      mpirun -np 2 work/build/bin/05_metrics_ckpt --device cpu --data synthetic --dataset_size 2048 \
        --hidden 64 --epochs 3 --ckpt_dir out/ck --timeout 5 > out/hang.log 2>&1

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


def trace_steps(pattern):
    """{rank: {step: {"bwd": [(layer, t0, t1)], "comm": [(bucket, t0, t1)]}}} in ms, from step 06's traces."""
    import glob
    import json
    files = sorted(glob.glob(pattern.replace("{rank}", "*")))
    if not files:
        sys.exit(f"no trace files match {pattern}")
    out = {}
    for f in files:
        for e in json.load(open(f))["traceEvents"]:
            if e["ph"] != "X":
                continue
            st = out.setdefault(e["pid"], {}).setdefault(e["args"]["step"], {"bwd": [], "comm": []})
            t0, t1 = e["ts"] / 1e3, (e["ts"] + e["dur"]) / 1e3
            m = re.match(r"backward layer (\d+)", e["name"])
            b = re.match(r"(?:all-reduce|reduce-scatter) bucket (\d+)", e["name"])
            if m:
                st["bwd"].append((int(m[1]), t0, t1))
            elif b:
                st["comm"].append((int(b[1]), t0, t1))
    return out


def span_start(st):
    return min(t0 for _, t0, _ in st["bwd"])


def span_end(st):
    return max(t1 for _, _, t1 in st["bwd"] + st["comm"])


def draw_steps(ax, plt, ranks, steps, y0, gap_label):
    """Per rank two rows (backward, communication) for the traced steps, the measured gaps hatched."""
    cmap = plt.get_cmap("tab10")
    rows = []
    for r in sorted(ranks):  # each rank on its own clock (they are not synchronised), from its step's start
        t_base = span_end(ranks[r][steps[0] - 1])
        yb, yc = y0 - 2 * r, y0 - 2 * r - 0.9
        rows += [(yb, f"rank {r} backward"), (yc, f"rank {r} all-reduce")]
        for s in steps:
            st, prev = ranks[r][s], ranks[r][s - 1]
            g0, g1 = span_end(prev) - t_base, span_start(st) - t_base
            ax.add_patch(plt.Rectangle((g0, yb - 0.35), g1 - g0, 0.7, facecolor="0.92", hatch="//",
                                       edgecolor="0.6", linewidth=0.6))
            if r == 0:
                ax.text((g0 + g1) / 2, yb + 0.5, gap_label(g1 - g0), ha="center", va="bottom", fontsize=8)
            for l, t0, t1 in st["bwd"]:
                ax.add_patch(plt.Rectangle((t0 - t_base, yb - 0.35), t1 - t0, 0.7, facecolor=cmap(l),
                                           edgecolor="black", linewidth=0.4))
            for b, t0, t1 in st["comm"]:
                ax.add_patch(plt.Rectangle((t0 - t_base, yc - 0.3 + 0.12 * b), t1 - t0, 0.45, facecolor=cmap(4 + b),
                                           edgecolor="black", linewidth=0.4, alpha=0.85))
    return rows, min(span_end(ranks[r][steps[0] - 1]) for r in ranks)


def accum(p1, pk, k, png):
    import statistics
    plt = plt_or_exit()
    k = int(k)
    runs = [(1, trace_steps(p1)), (k, trace_steps(pk))]
    steps = [2, 3, 4]
    gaps = {}
    for kk, ranks in runs:
        gaps[kk] = statistics.median(span_start(ranks[r][s]) - span_end(ranks[r][s - 1])
                                     for r in ranks for s in sorted(ranks[r]) if s >= 1)
    fig, axes = plt.subplots(2, 1, figsize=(11, 4.6), sharex=True)
    cmap = plt.get_cmap("tab10")
    xmax = 0
    for ax, (kk, ranks) in zip(axes, runs):
        if kk == 1:
            lab = lambda g: f"{g:.0f} ms"
        else:
            lab = lambda g: f"{g:.0f} ms: optimizer step, {kk - 1} silent\nmicro-batches, forward"
        rows, t_base = draw_steps(ax, plt, ranks, steps, 2.0, lab)
        xmax = max(xmax, max(span_end(ranks[r][steps[-1]]) - span_end(ranks[r][steps[0] - 1]) for r in ranks))
        ax.set_yticks([y for y, _ in rows])
        ax.set_yticklabels([n for _, n in rows], fontsize=8)
        ax.set_ylim(-1.5, 3.2)
        ax.set_title(f"--grad_accum {kk}: steps {steps[0] + 1} to {steps[-1] + 1} "
                     f"(median untraced gap {gaps[kk]:.1f} ms)", fontsize=9, loc="left")
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    axes[-1].set_xlim(0, xmax * 1.02)
    axes[-1].set_xlabel("ms, each rank on its own clock from the end of its step-2 spans (the ranks' clocks are not synchronised)", fontsize=8)
    handles = [plt.Rectangle((0, 0), 1, 1, facecolor=cmap(l), label=f"backward layer {l}") for l in range(3)]
    handles += [plt.Rectangle((0, 0), 1, 1, facecolor=cmap(4 + b), label=f"all-reduce bucket {b}") for b in range(2)]
    handles += [plt.Rectangle((0, 0), 1, 1, facecolor="0.92", hatch="//", edgecolor="0.6", label="not traced (measured gap)")]
    axes[0].legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    fig.suptitle(f"step 06 at 2 CPU ranks: only micro-batch {k} of {k} is traced and communicates; "
                 f"{k - 1} micro-batches add {gaps[k] - gaps[1]:.0f} ms to the gap", fontsize=10, x=0.01, ha="left")
    fig.tight_layout()
    fig.savefig(png, dpi=80)
    print(f"wrote {png}: median gap {gaps[1]:.2f} ms at --grad_accum 1, {gaps[k]:.2f} ms at {k}")


def ddpstep(pattern, png, step="2"):
    plt = plt_or_exit()
    ranks = trace_steps(pattern)
    s = int(step)
    for r in ranks:
        if len({b for b, _, _ in ranks[r][s]["comm"]}) != 1:
            sys.exit(f"{pattern}: rank {r} has more than one bucket in step {s} (use a model under 1 MiB)")
    fig, ax = plt.subplots(figsize=(11, 3.0))
    rows, t_base = draw_steps(ax, plt, ranks, [s], 2.0, lambda g: f"{g:.2f} ms, not traced: previous "
                              f"step's optimizer step,\nthe loss all-reduce, this step's forward")
    cmap = plt.get_cmap("tab10")
    for r in sorted(ranks):
        st = ranks[r][s]
        t_base = span_end(ranks[r][s - 1])
        _, c0, c1 = st["comm"][0]
        ax.text((c0 + c1) / 2 - t_base, 2.0 - 2 * r - 0.9 - 0.45, f"all-reduce of all gradients "
                f"({c1 - c0:.2f} ms)", ha="center", va="top", fontsize=8)
        ax.annotate("then sgd_step", xy=(c1 - t_base, 2.0 - 2 * r - 0.9), xytext=(c1 - t_base + 0.05 * (c1 - t_base), 2.0 - 2 * r - 0.9),
                    fontsize=8, va="center", arrowprops=dict(arrowstyle="<-", lw=0.8))
    xmax = max(span_end(ranks[r][s]) - span_end(ranks[r][s - 1]) for r in ranks)
    ax.set_xlim(0, xmax * 1.22)
    handles = [plt.Rectangle((0, 0), 1, 1, facecolor=cmap(l), label=f"backward layer {l}") for l in (2, 1, 0)]
    ax.legend(handles=handles, loc="upper right", fontsize=8, frameon=False)
    ax.set_yticks([y for y, _ in rows])
    ax.set_yticklabels([n for _, n in rows], fontsize=8)
    ax.set_ylim(-1.8, 3.3)
    ax.set_xlabel("ms, each rank on its own clock from the end of its previous step's spans", fontsize=8)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    ax.set_title(f"what step 04 does, seen in step 06's trace with one bucket: optimizer step {s + 1}, 2 CPU ranks "
                 f"(the broadcast ran once before the trace began)", fontsize=9, loc="left")
    fig.tight_layout()
    fig.savefig(png, dpi=80)
    print(f"wrote {png}")


def fsdp(pattern, png, step="3", rank="0"):
    import json
    plt = plt_or_exit()
    step, rank = int(step), int(rank)
    path = pattern.replace("{rank}", str(rank))
    spans = [e for e in json.load(open(path))["traceEvents"]
             if e["ph"] == "X" and e["args"].get("step") == step]
    if not spans:
        sys.exit(f"{path} has no spans of step {step}")
    t0 = min(e["ts"] for e in spans)
    rows = ["forward", "all-gather (forward)", "backward", "all-gather (backward)", "reduce-scatter"]
    kinds = [("forward", r"forward layer (\d+)$"), ("all-gather (forward)", r"all-gather layer (\d+) \(forward\)"),
             ("backward", r"backward layer (\d+)$"), ("all-gather (backward)", r"all-gather layer (\d+) \(backward\)"),
             ("reduce-scatter", r"reduce-scatter layer (\d+)")]
    cmap = plt.get_cmap("tab10")
    fig, ax = plt.subplots(figsize=(9.0, 3.4))
    layers, bars = set(), []
    for e in spans:
        for row, pat in kinds:
            m = re.match(pat, e["name"])
            if not m:
                continue
            l = int(m[1])
            layers.add(l)
            y = len(rows) - 1 - rows.index(row)
            x0, w = (e["ts"] - t0) / 1e3, e["dur"] / 1e3
            ax.add_patch(plt.Rectangle((x0, y - 0.35), w, 0.7, facecolor=cmap(l), edgecolor="black",
                                       linewidth=0.5, alpha=0.9 if "layer" in row or row in ("forward", "backward") else 0.75))
            bars.append((x0, w, y, f"L{l}" + (f" → buf {l % 2}" if row.startswith("all-gather") else "")))
            break
    t1 = max((e["ts"] + e["dur"] - t0) / 1e3 for e in spans)
    for x0, w, y, label in bars:  # a label where its bar is wide enough to hold it
        if w > 0.0075 * t1 * len(label):
            ax.text(x0 + w / 2, y, label, ha="center", va="center", fontsize=7)
        elif w > 0.012 * t1 * 2:
            ax.text(x0 + w / 2, y, label.split()[0], ha="center", va="center", fontsize=7)
    ax.set_xlim(0, t1 * 1.01)
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(list(reversed(rows)), fontsize=8)
    ax.set_xlabel(f"ms since the step's first span (rank {rank}'s clock)")
    ax.set_title(f"step 08, one optimizer step (step {step}, rank {rank}): {len(layers)} layers, "
                 "prefetch depth 1, the last layer kept after forward", fontsize=9)
    fig.tight_layout()
    fig.savefig(png, dpi=90)
    print(f"wrote {png}")


def hang(log, png):
    import textwrap
    plt = plt_or_exit()
    text = open(log).read()
    epoch = re.findall(r"^(epoch \d+/\d+  train loss .*)$", text, re.M)
    saved = re.search(r"^(saved .*)$", text, re.M)
    dogs = {int(m[1]): (m[2], m[0]) for m in
            re.finditer(r"^error: \[rank (\d+)\] watchdog: (\w+) has waited more than ([\d.]+) s.*$", text, re.M)}
    if not (epoch and saved and 0 in dogs and 1 in dogs):
        sys.exit(f"{log}: expected an epoch line, a 'saved' line and both ranks' watchdog lines")
    fig, ax = plt.subplots(figsize=(10, 5.6))
    xs = {0: 2.5, 1: 7.5}
    for r, x in xs.items():
        ax.plot([x, x], [0.3, 9.3], color="0.5", linewidth=1, linestyle=":")
        ax.text(x, 9.55, f"rank {r}", ha="center", fontsize=11, weight="bold")

    def box(x, y, msg, color, width=40, h=0.7):
        ax.text(x, y, "\n".join(textwrap.wrap(msg, width)), ha="center", va="center", fontsize=8.5, family="monospace",
                bbox=dict(boxstyle="round,pad=0.35", facecolor=color, edgecolor="0.3"))

    # 1. the last collective both reached: epoch 1's evaluate all-reduce (the epoch line follows it)
    ax.annotate("", xy=(xs[1], 8.6), xytext=(xs[0], 8.6), arrowprops=dict(arrowstyle="<->", lw=1.4, color="green"))
    ax.text(5, 8.8, "both ranks arrive: evaluate's all-reduce, then rank 0 logs", ha="center", fontsize=8.5, color="green")
    box(5, 8.1, epoch[-1].strip(), "#e8f5e9", width=90)
    # 2. rank 0 saves; rank 1 skips the if
    box(xs[0], 7.0, saved[1].strip(), "#fff3e0", width=34)
    box(xs[1], 7.0, "(rank != 0: skips the if, and its barrier)", "white", width=34)
    # 3. each waits in a different collective
    box(xs[0], 5.6, f"waits in {dogs[0][0]} (inside the if)", "#ffebee", width=34)
    box(xs[1], 5.6, f"waits in {dogs[1][0]} (epoch 2, step 1: the first gradient)", "#ffebee", width=34)
    ax.annotate("", xy=(xs[1] - 1.9, 5.35), xytext=(xs[0] + 1.9, 5.35),
                arrowprops=dict(arrowstyle="-", lw=1.2, color="crimson", linestyle="--"))
    ax.text(5, 5.0, "different collectives: neither ever completes", ha="center", fontsize=8.5, color="crimson")
    # 4. the watchdog lines, verbatim, in the order the log has them
    order = sorted(dogs, key=lambda r: text.index(dogs[r][1]))
    for i, r in enumerate(order):
        box(xs[r], 3.4 - 1.6 * i, dogs[r][1], "#eeeeee", width=42, h=1.4)
    ax.text(5, 0.25, f"after --timeout, each rank's watchdog ends it (lines from {log}, in the log's order)",
            ha="center", fontsize=8, color="0.3")
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 10)
    ax.axis("off")
    ax.set_title("step 05 with dist_barrier inside save_checkpoint's `if (t->rank == 0)`: the hang at 2 ranks",
                 fontsize=10, loc="left")
    fig.tight_layout()
    fig.savefig(png, dpi=80)
    print(f"wrote {png}")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "sampler":
        sampler(sys.argv[2], sys.argv[3])
    elif len(sys.argv) in (5, 6) and sys.argv[1] == "zero":
        zero(*sys.argv[2:])
    elif len(sys.argv) == 6 and sys.argv[1] == "accum":
        accum(*sys.argv[2:])
    elif len(sys.argv) in (4, 5) and sys.argv[1] == "ddpstep":
        ddpstep(*sys.argv[2:])
    elif len(sys.argv) in (4, 5, 6) and sys.argv[1] == "fsdp":
        fsdp(*sys.argv[2:])
    elif len(sys.argv) == 4 and sys.argv[1] == "hang":
        hang(*sys.argv[2:])
    else:
        sys.exit(__doc__)
