#!/usr/bin/python3
"""Plots bench/cpu_ddp.py's JSON: global samples/s against ranks, ours and PyTorch's.

    /usr/bin/python3 bench/plot_scaling.py RESULT.json [-o docs/img/cpu_scaling.png]

Each point is the median over the runs; the bar is the min-max over runs. The dotted line is linear
scaling from our 1-rank figure up to the machine's core count (marked: past it, ranks share cores, so
the ideal is flat).
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("json")
    ap.add_argument("-o", "--out", default="docs/img/cpu_scaling.png")
    a = ap.parse_args()
    with open(a.json) as f:
        d = json.load(f)
    b = d["batch_size"]
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=100)
    for impl, label, color, marker in (("ours", "ours (step 01 / step 06, MPI)", "tab:blue", "o"),
                                       ("torch", f"PyTorch {d.get('torch', '')} (DDP, gloo)",
                                        "tab:orange", "s")):
        pts = sorted((s for s in d["summary"] if s["impl"] == impl), key=lambda s: s["world_size"])
        w = [s["world_size"] for s in pts]
        y = [s["samples_per_s"] for s in pts]
        lo = [yy - b * s["world_size"] / s["step_s_max"] for yy, s in zip(y, pts)]
        hi = [b * s["world_size"] / s["step_s_min"] - yy for yy, s in zip(y, pts)]
        ax.errorbar(w, y, yerr=[lo, hi], label=label, color=color, marker=marker, capsize=3)
        for x, yy in zip(w, y):
            ax.annotate(f"{yy:.0f}", (x, yy), textcoords="offset points", xytext=(6, 4), fontsize=8,
                        color=color)
    ours1 = [s for s in d["summary"] if s["impl"] == "ours" and s["world_size"] == 1]
    ws = sorted({s["world_size"] for s in d["summary"]})
    cpus = d.get("cpus") or max(ws)
    if ours1:  # one rank per core at most: linear up to the core count, flat beyond
        ax.plot(ws, [ours1[0]["samples_per_s"] * min(w, cpus) for w in ws], ":", color="gray",
                label=f"ours at 1 rank x min(ranks, {cpus} cores)")
    if cpus < max(ws):
        ax.axvline(cpus, color="gray", lw=0.8, ls="--")
        ax.text(cpus, 0.03 * ax.get_ylim()[1], f" {cpus} cores", va="bottom", fontsize=8, color="gray")
    ax.set_xticks(ws)
    ax.set_xlabel("ranks (processes, 1 thread each)")
    ax.set_ylabel("samples/s (all ranks)")
    ax.set_ylim(bottom=0)
    ax.set_title(f"784-1024-1024-10 MLP, batch {b} per rank, CPU "
                 f"({d['date'][:10]}, load {d['load_before'].split()[0]})", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(a.out, dpi=100)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
