#!/usr/bin/python3
"""CPU data-parallel training, ours against PyTorch DDP (gloo), at 1, 2 and 4 ranks.

    bench/cpu_ddp.py [--ranks 1,2,4] [--reps 5] [--steps 60] [--warmup 10]
                             [--build build] [--bucket_cap_mb 25] [--json out.json]

Configurations (784-1024-1024-10, batch 128 per rank, SGD momentum 0.9, Fashion-MNIST, one BLAS /
intra-op thread per rank, full batches, the same epoch permutation split into disjoint 1/W shards):
  ours,  1 rank   build/bin/01_single_gpu --device cpu
  ours,  W ranks  mpirun -np W build/bin/06_full --device cpu   (MPI, scripts/mpi_env.sh's settings,
                  --bucket_cap_mb as given)
  torch, 1 rank   bench/torch_mlp.py                    (torch.set_num_threads(1))
  torch, W ranks  W processes of bench/torch_mlp.py --ddp, started here with RANK,
                  WORLD_SIZE, MASTER_ADDR, MASTER_PORT (DistributedDataParallel, gloo)
Every configuration runs --reps times, interleaved (the order rotates each repetition).

Per run:
  step time       ours: the median gap between rank 0's consecutive metrics "time" stamps after
                  --warmup steps (one whole loop iteration); torch: rank 0's median step time
                  (zero_grad .. optimizer step and loss.item(), from torch_mlp.py's JSON)
  samples/s       128 * W / step time (global)
  peak RSS        every rank's maximum resident set (/usr/bin/time -f %M around each rank), MB
  launch -> step 1  ours: from just before this script starts the launcher (mpirun or the binary) to
                  the moment rank 0's step-1 metrics line arrives (the metrics file is a FIFO read
                  here); torch: rank 0's time from its own process start (the kernel's start time:
                  it is started directly by this script) to the end of its first step
The table reports medians over repetitions; the ratio ours/PyTorch is the median of per-repetition
ratios of samples/s. --json writes every run and the summary (bench/plot_scaling.py reads it).
Look at the load lines printed first and last: the machine is shared.
"""
import argparse
import datetime
import functools
import json
import os
import select
import statistics as st
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TORCH_PY = "/usr/bin/python3"  # Debian's python3-torch
B = 128


@functools.lru_cache(maxsize=None)
def _mpi_env():
    out = subprocess.run(["bash", "-c", 'source "$0" && env -0', f"{ROOT}/scripts/mpi_env.sh"],
                         capture_output=True, check=True).stdout.decode()
    return dict(kv.split("=", 1) for kv in out.split("\0") if "=" in kv)


def base_env():
    """The benchmarks' environment: scripts/mpi_env.sh's Open MPI settings (the project's one copy of
    them), and one thread per rank for every math library, whatever the caller's environment says."""
    return dict(_mpi_env(), OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")


def uptime():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def read_rss(tmp, tag, world):
    rss = []
    for r in range(world):
        with open(f"{tmp}/{tag}.rss.{r}") as f:
            rss.append(int(f.read().split()[-1]) / 1024.0)  # %M is in KiB
    return rss


def run_ours(a, tmp, world, tag):
    """Runs step 01 (world 1) or step 06 under mpirun; stamps rank 0's metrics lines as they arrive."""
    fifo_tpl = f"{tmp}/{tag}.metrics.{{rank}}.jsonl"
    fifo = fifo_tpl.replace("{rank}", "0")
    os.mkfifo(fifo)
    bindir = os.path.join(ROOT, a.build, "bin")
    args = ["--device", "cpu", "--batch_size", str(B), "--epochs", "1", "--max_steps", str(a.steps),
            "--save_interval", "0", "--log_interval", "1000000", "--metrics", fifo_tpl]
    # /usr/bin/time around each rank (its rank from Open MPI's environment) for the peak RSS.
    timed = ["sh", "-c", 'exec /usr/bin/time -f %M -o "$0.${OMPI_COMM_WORLD_RANK:-0}" "$@"',
             f"{tmp}/{tag}.rss"]
    if world == 1:
        cmd = timed + [f"{bindir}/01_single_gpu"] + args
    else:
        cmd = ["mpirun", "-np", str(world)] + timed + [f"{bindir}/06_full"] + args + [
            "--bucket_cap_mb", str(a.bucket_cap_mb)]
    t_launch = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=base_env(), cwd=ROOT)
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # does not wait for the writer
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP)
    recs, first_arrival, buf, connected = [], None, b"", False
    while True:
        if not poller.poll(100):
            if p.poll() is not None and not connected:
                break
            continue
        chunk = os.read(fd, 65536)
        t = time.monotonic()
        if not chunk:
            if connected:
                break  # the writer closed the file
            if p.poll() is not None:
                break
            time.sleep(0.001)  # no writer yet
            continue
        connected = True
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for line in lines:
            rec = json.loads(line)
            if rec["type"] == "step":
                if first_arrival is None:
                    first_arrival = t
                recs.append(rec)
    os.close(fd)
    err = p.stderr.read().decode()
    if p.wait() != 0 or len(recs) != a.steps:
        sys.exit(f"{' '.join(cmd)} failed (rc {p.returncode}, {len(recs)} steps):\n{err}")
    times = [r["time"] for r in recs]
    gaps = [y - x for x, y in zip(times, times[1:])][a.warmup:]
    return {"step_s": st.median(gaps), "first_step_s": first_arrival - t_launch,
            "first_step_in_process_s": times[0], "rss_mb": read_rss(tmp, tag, world),
            "first_loss": recs[0]["loss"], "last_loss": recs[-1]["loss"]}


def run_torch(a, tmp, world, tag, port):
    script = os.path.join(ROOT, "bench", "torch_mlp.py")
    args = ["--steps", str(a.steps), "--warmup", str(a.warmup), "--threads", "1",
            "--batch_size", str(B)]
    procs = []
    for r in range(world):
        env = base_env()
        if world > 1:
            env.update(RANK=str(r), WORLD_SIZE=str(world), LOCAL_RANK=str(r),
                       MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        cmd = ["/usr/bin/time", "-f", "%M", "-o", f"{tmp}/{tag}.rss.{r}", TORCH_PY, script] + args
        cmd += ["--ddp"] if world > 1 else []
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                      text=True))
    outs = [p.communicate() for p in procs]
    for p, (out, err) in zip(procs, outs):
        if p.returncode != 0:
            sys.exit(f"torch_mlp.py failed (rc {p.returncode}):\n{err}")
    r = json.loads(outs[0][0].strip().splitlines()[-1])
    return {"step_s": r["median_step_s"], "first_step_s": r["first_step_s"],
            "rss_mb": read_rss(tmp, tag, world), "first_loss": r["first_loss"],
            "last_loss": r["last_loss"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", default="1,2,4")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--build", default="build")
    ap.add_argument("--bucket_cap_mb", default="25")
    ap.add_argument("--json", help="write every run and the summary here")
    ap.add_argument("--impl", default="ours,torch",
                    help="which trainers to run (ours, torch or both; ratios need both)")
    a = ap.parse_args()
    if a.steps <= a.warmup + 1:
        sys.exit("need --steps > --warmup + 1")
    ranks = [int(r) for r in a.ranks.split(",")]
    tmp = tempfile.mkdtemp(prefix="cpu_ddp.")
    impls = a.impl.split(",")
    if not impls or any(i not in ("ours", "torch") for i in impls):
        sys.exit(f"--impl '{a.impl}': expected ours, torch or ours,torch")
    configs = [(impl, w) for w in ranks for impl in ("ours", "torch") if impl in impls]
    runs = {c: [] for c in configs}
    load_before = uptime()
    print(f"load before: {load_before}", flush=True)
    port = 29600 + os.getpid() % 1000
    for rep in range(a.reps):
        k = rep % len(configs)
        for impl, w in configs[k:] + configs[:k]:
            tag = f"{impl}{w}_{rep}"
            if impl == "ours":
                res = run_ours(a, tmp, w, tag)
            else:
                port += 1
                res = run_torch(a, tmp, w, tag, port)
            res["load"] = uptime()
            runs[(impl, w)].append(res)
        print(f"rep {rep + 1}/{a.reps}: " + "  ".join(
            f"{i}x{w} {runs[(i, w)][-1]['step_s'] * 1e3:.1f} ms" for i, w in configs), flush=True)
    load_after = uptime()

    summary = []
    for impl, w in configs:
        rs = runs[(impl, w)]
        step = st.median(r["step_s"] for r in rs)
        summary.append({
            "impl": impl, "world_size": w, "step_s": step, "samples_per_s": B * w / step,
            "step_s_min": min(r["step_s"] for r in rs), "step_s_max": max(r["step_s"] for r in rs),
            "first_step_s": st.median(r["first_step_s"] for r in rs),
            "rss_mb_per_rank": max(st.median(r["rss_mb"][i] for r in rs) for i in range(w)),
            "rss_mb_total": st.median(sum(r["rss_mb"]) for r in rs),
        })
    ratio = {} if len(impls) < 2 else {w: st.median((B * w / o["step_s"]) / (B * w / t["step_s"])
                          for o, t in zip(runs[("ours", w)], runs[("torch", w)])) for w in ranks}
    print(f"\n## CPU data-parallel training, 784-1024-1024-10, batch {B} per rank, 1 thread per rank, "
          f"{a.reps} interleaved runs x {a.steps} steps (median over steps > {a.warmup}); "
          f"medians over runs\n")
    print(f"{datetime.datetime.now().isoformat(timespec='minutes')}, {os.cpu_count()} CPUs, "
          f"load {load_before} before, {load_after} after; ours: step 01 at 1 rank, step 06 "
          f"(--bucket_cap_mb {a.bucket_cap_mb}, MPI) at 2+; PyTorch {torch_version()} DDP (gloo)\n")
    print("| ranks | impl | step time (ms) | min-max (ms) | samples/s (global) | ours/PyTorch "
          "| launch to step 1 (s) | peak RSS per rank (MB) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for s in summary:
        w = s["world_size"]
        name = ("step 01" if w == 1 else "step 06") if s["impl"] == "ours" else (
            "PyTorch" if w == 1 else "PyTorch DDP")
        print(f"| {w} | {name} | {s['step_s'] * 1e3:.1f} | {s['step_s_min'] * 1e3:.1f}-"
              f"{s['step_s_max'] * 1e3:.1f} | {s['samples_per_s']:.0f} | "
              f"{f'{ratio[w]:.2f}x' if s['impl'] == 'ours' and ratio else ''} | {s['first_step_s']:.2f} | "
              f"{s['rss_mb_per_rank']:.0f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"date": datetime.datetime.now().isoformat(timespec="seconds"),
                       "cpus": os.cpu_count(), "load_before": load_before, "load_after": load_after,
                       "batch_size": B, "hidden": "1024,1024", "steps": a.steps, "warmup": a.warmup,
                       "reps": a.reps, "bucket_cap_mb": a.bucket_cap_mb,
                       "torch": torch_version(), "ratio_ours_over_torch": ratio,
                       "summary": summary,
                       "runs": {f"{i}_{w}": runs[(i, w)] for i, w in configs}}, f, indent=1)
        print(f"\nwrote {a.json}")


def torch_version():
    return subprocess.run([TORCH_PY, "-c", "import torch; print(torch.__version__)"],
                          capture_output=True, text=True).stdout.strip()


if __name__ == "__main__":
    main()
