#!/usr/bin/python3
"""What each stage buys: three measurements, each printed as a table, drawn as a PNG and written
with --json PATH as {"speedup": [...], "slowlink": [...], "memory": [...]}, one object per row.

    bench/payoff.py [speedup|slowlink|memory|hooks|recovery] [--quick] [--selftest] [--json PATH]
                    [--img DIR] [--bin build/bin]

No subcommand runs all three (hooks runs only when named: `bench/payoff.py hooks`, the figure of
docs/hooks_and_clipping.md, rows {"backend", "link", "hook", "ms_per_step",
"allreduce_bytes_per_step", "accuracy"} under the JSON key "hooks": step 06 over the 100 Mbit/s
slow link below with each --comm_hook, PowerSGD compressing from step 10). --quick: about a minute each on a 2-core machine. --selftest (with
--quick): the smallest sizes, then checks that the rows and their fields are there and sane (never
a time); exits 1 on any failure. The figures go to --img DIR (default docs/img, with --quick out/:
payoff_speedup.png, payoff_slowlink.png, payoff_memory.png; matplotlib: where it is missing, a run
on a terminal asks before it installs Debian's python3-matplotlib with apt-get (root; run the script
itself, whose interpreter is Debian's /usr/bin/python3), --install-matplotlib installs it without
asking, and any other run draws no figures); --selftest draws into a temporary folder, and only
where matplotlib is already installed.

Every table ends with the BLAS kernel its CPU runs used (the programs' `blas:` start-up line) and, on
a generic fallback kernel (OpenBLAS's Prescott on an AVX2 CPU: GEMMs several times slower), a WARNING
line; choose the kernel with OPENBLAS_CORETYPE (e.g. Haswell).

Whatever ends it (SIGHUP of a closed terminal, Ctrl-C, SIGTERM, a failure) stops its runs and removes
the namespaces, their veth pair and qdiscs, the processes in them and its temporary folders. Each
run keeps a record of what it made in /run/ddp-payoff (root; else TMPDIR/ddp-payoff-UID; or
DDP_PAYOFF_STATE): a run killed by SIGKILL leaves its record, and the next run removes what it names
before it starts (only records whose process is gone).

speedup   The same global batch trained by 1 process with 1 BLAS thread, 1 process with 2 BLAS
          threads, and 2 ranks with 1 thread each (mpirun; step 06 for all three), on Fashion-MNIST;
          where GPUs are visible (build/bin/gpu_count), also 1 GPU and N GPUs (scripts/launch.sh,
          NCCL). Rows {"config", "samples_per_s", "seconds_to_accuracy", "accuracy"}:
            samples_per_s        global batch / rank 0's median step-to-step time (after 3 steps)
            seconds_to_accuracy  rank 0's metrics "time" at the last step of the first epoch whose
                                 test accuracy reaches the target (so it counts the earlier epochs'
                                 evaluations, not the start-up); null if never reached
            accuracy             the test accuracy after the last epoch
slowlink  Two nodes as two network namespaces (tests/multinode/nodes.sh) joined by a veth pair whose
          two ends are shaped with tc to 1 Gbit/s, then to 100 Mbit/s (netem with a 0.25 ms delay
          where the kernel has it, else tbf: the rate alone; the header says which), one rank per
          node, on Gloo (an environment launch, MASTER_ADDR on node a, as scripts/launch.sh) and on
          MPI over TCP (mpirun on node a, node b reached through nodes.sh's `enter` as ssh would).
          Steps 04, 06 at several --bucket_cap_mb, 07 and 08, at a per-rank batch chosen per link so
          that compute and the gradient all-reduce take about as long (from the probe and a 1-rank
          run). Rows {"backend", "link", "program", "cap_mb", "ms_per_step", "predicted_ms"}:
            ms_per_step   rank 0's median step-to-step time (after the first steps)
            predicted_ms  chapter 06's alpha-beta model: T(n) = a + c*n per collective of n bytes,
                          a and c fitted (bench/bucket_sweep.py's fit) to build/bin/probe's table
                          over the same link and backend, with the call the program makes (step 04:
                          probe --call blocking; 06-08: --call async, which MPI runs with another
                          algorithm); an all-gather of n bytes at 2 ranks moves half of it, a + c*n/2,
                          and so does a reduce-scatter on MPI (Gloo's is a whole all-reduce:
                          common/dist/dist_gloo.cc). Compute ("base"): the program's median step at 1
                          rank, two copies running at once (each rank's GEMMs share the cores with
                          the other rank's), and the per-layer forward and backward times of step
                          08's 1-rank --trace. Then
              04  base + 2L*a + c*S                         (one all-reduce per tensor after
                                                               backward: 2 per layer)
              06  base + exposed(buckets) + a                 (bucket_sweep.py's simulation: each
                                                               bucket starts when ready and the
                                                               previous one is done; + the loss)
              07  base + exposed(buckets, reduce-scatter) + a + c*S/2 + a  (the all-gather of the
                                                               updated shards, the loss)
              08  base + exposed(per-layer gathers and reduce-scatters, one at a time, prefetch
                  depth 1, as fsdp.h says) + a
                          None (no prediction) for steps 06-08 over MPI: Open MPI progresses a
                          non-blocking collective only inside MPI calls, not in the background that
                          the overlap assumes; and on links faster than 100 Mbit/s, where moving the
                          bytes takes the cores the GEMMs use (MODEL_MAX_MBIT). Each table ends with
                          how far the predictions are.
          Needs root, ip and tc (iproute2): without them one line says so and no rows are made.
          The namespaces and their qdiscs are removed by this script, also on failure.
memory    Peak resident memory and optimizer-state bytes per rank for steps 06, 07 and 08 at 1-4
          ranks (mpirun; --quick: 1, 2 and 4), on a model of several comparable layers and on one of about the same size
          dominated by a single layer. Rows {"program", "ranks", "model", "peak_rss_kib",
          "optimizer_state_bytes"}:
            peak_rss_kib           the largest over the ranks of the metrics "final" record's
                                   peak_rss_kib (getrusage's ru_maxrss)
            optimizer_state_bytes  steps 07 and 08 print it ("optimizer state: N floats per rank,
                                   B bytes"); step 06 keeps the whole momentum buffer, 4 bytes per
                                   parameter of its "model: ... N parameters" line
          The floor, what a rank holds whatever the model (libraries, MPI, data: step 06 with 16
          hidden units), is printed and drawn beside them.

recovery  Step 09's drill, run only when named (`bench/payoff.py recovery`, docs/09_live.md's table): 3
          ranks on Fashion-MNIST, replica 2 SIGKILLed as it starts step K (the test hook
          DDP_TEST_FT_KILL; in a restarted job's first attempt only), two ways: under
          scripts/restart.sh (scripts/launch.sh, --save_steps S --resume auto, RESTART_DELAY=0: every
          rank starts again from the last snapshot) and under scripts/launch.sh --ft --replace (the
          others go on; a new replica 2 joins and heals from a peer). K lies halfway between two
          snapshots, where a failure at a random moment falls on average. Each way's time lost is read
          off rank 0's progress line, printed every step and timed here as it arrives: the time from
          the first step's line to the last one's, less the steps made (the last step's number less
          the first's) times the run's median step; so a restart loses its start-up, its data and
          checkpoint load and the steps it does again, live recovery its pauses (detect, quorum,
          reconnect, heal, the redone step; the replacement's join) and the steps at 2 ranks;
          and neither counts the launch's own start-up or the machine's load between runs. The same
          measure of the same launch without the kill is the method's floor (a step's time varies, and
          the median step is below the mean: about 0.3 s over 400 steps here); each way's time lost is
          its killed run's less its run's without the kill, in the same repetition; medians over the
          repetitions. JSON key
          "recovery": {"restart_lost_s", "live_lost_s", "ratio", "floor_s": {"restart", "live"},
          "live_phases": {"detect_s", "quorum_s",
          "reconnect_s", "redo_s", "join_heal_bytes", "join_total_s"}, "runs": [{"way", "kill",
          "wall_s", "lost_s"}]}.

The machine is shared: the load average is printed first and last. Timings vary; nothing here is
asserted about a time.
"""
import argparse
import atexit
import concurrent.futures
import json
import os
import re
import shutil
import signal
import statistics as st
import subprocess
import sys
import tempfile

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)
import bucket_sweep  # noqa: E402  (same directory): assign, simulate, fit, parse_probe, layer_times
import cpu_ddp  # noqa: E402  base_env (scripts/mpi_env.sh's settings, one thread per rank), uptime

ROOT = cpu_ddp.ROOT
NODES = os.path.join(ROOT, "tests", "multinode", "nodes.sh")
MIB = bucket_sweep.MIB
FIELDS = {
    "speedup": ["config", "samples_per_s", "seconds_to_accuracy", "accuracy"],
    "slowlink": ["backend", "link", "program", "cap_mb", "ms_per_step", "predicted_ms"],
    "memory": ["program", "ranks", "model", "peak_rss_kib", "optimizer_state_bytes"],
    "hooks": ["backend", "link", "hook", "ms_per_step", "allreduce_bytes_per_step", "accuracy"],
}
HOOKS = ["allreduce", "fp16", "bf16", "powersgd"]  # step 06's --comm_hook
PROGRAMS = ["04_ddp_wrap", "06_full", "07_zero", "08_fsdp"]
LINKS = [("1gbit", "64kb"), ("100mbit", "32kb")]  # tc's rate, and tbf's burst where netem is missing
DELAY = "0.25ms"

# What each size runs: --quick (about a minute each), --selftest (the smallest), and the full run.
SIZES = {
    "full": dict(
        sp_hidden="1024,1024", sp_batch=256, sp_epochs=4, sp_target=0.87, sp_dataset=0,
        sl_hidden="512,512,512,512,512", sl_steps=20, sl_warmup=4, sl_caps=[0.25, 1.5, 1000], sl_iters=10,
        sl_batch=None,
        sl_links=LINKS, mem_models={"comparable": "4096,4096,4096", "one layer": "47000"},
        mem_ranks=[1, 2, 3, 4], mem_steps=4,
        hk_hidden="256", hk_batch=256, hk_epochs=2, hk_data=[], hk_start=10, hk_link=LINKS[1],
        rc_hidden="1024,1024", rc_batch=64, rc_steps=400, rc_kill=300, rc_save=200, rc_reps=3, rc_data=[]),
    "quick": dict(
        sp_hidden="256", sp_batch=256, sp_epochs=2, sp_target=0.85, sp_dataset=0,
        sl_hidden="512,512,512", sl_steps=4, sl_warmup=1, sl_caps=[0.25, 1000], sl_iters=2, sl_batch=None,
        sl_links=LINKS, mem_models={"comparable": "2048,2048,2048", "one layer": "12800"},
        mem_ranks=[1, 2, 4], mem_steps=1,
        hk_hidden="256", hk_batch=128, hk_epochs=1, hk_data=["--data", "synthetic", "--dataset_size", "4096"],
        hk_start=2, hk_link=LINKS[1],
        rc_hidden="256", rc_batch=64, rc_steps=200, rc_kill=150, rc_save=100, rc_reps=1, rc_data=[]),
    "selftest": dict(
        sp_hidden="64", sp_batch=128, sp_epochs=2, sp_target=0.60, sp_dataset=4096,
        sl_hidden="512,512,512", sl_steps=3, sl_warmup=0, sl_caps=[1000], sl_iters=2, sl_batch=64,
        sl_links=LINKS[1:], mem_models={"comparable": "256,256,256", "one layer": "512"},
        mem_ranks=[2], mem_steps=1,
        hk_hidden="64", hk_batch=64, hk_epochs=1, hk_data=["--data", "synthetic", "--dataset_size", "1024"],
        hk_start=2, hk_link=LINKS[0],
        rc_hidden="64", rc_batch=32, rc_steps=40, rc_kill=30, rc_save=20, rc_reps=1,
        rc_data=["--data", "synthetic", "--dataset_size", "2048"]),
}


class Failed(Exception):
    """A run failed: the message says which and how; the caller's clean-up still runs."""


def log(msg):
    try:
        print(msg, file=sys.stderr, flush=True)
    except OSError:  # the terminal is gone (SIGHUP): the clean-up goes on without it
        pass


# ---------------------------------------------------------------------------------------------------
# clean-up: whatever ends this script (SIGHUP of a closed terminal, Ctrl-C, SIGTERM, an exception, an
# exit) removes what it made: the namespaces, their veths and qdiscs, the processes in them, and the
# temporary folders. A run killed by SIGKILL cannot; the next run removes what it left, recognised
# by the record every run keeps in STATE (one file per run, naming what it made).

STATE = os.environ.get("DDP_PAYOFF_STATE") or (
    "/run/ddp-payoff" if os.geteuid() == 0 else os.path.join(tempfile.gettempdir(), f"ddp-payoff-{os.geteuid()}"))
UNDO = []  # (kind, what): ("dir", path) or ("nodes", (id, dir)), removed in reverse order
RECORD = None  # this run's file in STATE


def proc_start(pid):
    """A process's start time (clock ticks since boot; /proc/PID/stat field 22), None if it is gone:
    with the pid, it names one process even after the pid is used again."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def ours(path):
    """Whether path is one of this script's temporary folders (only those are removed from a record)."""
    return os.path.basename(path).startswith(("payoff.", "payoff-img.")) and os.path.isdir(path)


def record(kind, what):
    """Notes something this run makes, in UNDO and in its record, before it is made."""
    UNDO.append((kind, what))
    save()


def save():
    if RECORD:
        tmp = RECORD + ".new"
        with open(tmp, "w") as f:
            json.dump({"pid": os.getpid(), "start": proc_start(os.getpid()), "undo": UNDO}, f)
        os.replace(tmp, RECORD)


def undo(items):
    for kind, what in reversed(items):
        if kind == "nodes":
            nid, d = what
            subprocess.run([NODES, "down", str(nid), d], capture_output=True)
        elif kind == "dir" and ours(what):
            shutil.rmtree(what, ignore_errors=True)


def cleanup():
    """Removes what this run made; runs once, with the signals that end it ignored meanwhile."""
    global RECORD
    for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    undo(UNDO)
    UNDO.clear()
    if RECORD:
        try:
            os.unlink(RECORD)
        except OSError:
            pass
        RECORD = None


def on_signal(sig, _frame):
    """SIGHUP, SIGINT, SIGTERM: exit with 128 + the signal through the callers' finally blocks (each
    child run is stopped), then cleanup()."""
    for s in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM):
        signal.signal(s, signal.SIG_IGN)  # one signal is enough: nothing may cut the clean-up short
    raise SystemExit(128 + sig)


def start_cleanup():
    """Installs the handlers and the record of this run; first removes what earlier runs left, those
    whose record names a process that is gone (killed by SIGKILL, or the machine's power)."""
    global RECORD
    for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    atexit.register(cleanup)
    try:
        os.makedirs(STATE, mode=0o700, exist_ok=True)
        if os.stat(STATE).st_uid != os.geteuid():
            raise OSError(f"{STATE} belongs to another user")
    except OSError as e:
        log(f"payoff: no record of this run ({e}): a run killed by SIGKILL would leave its namespaces")
        return
    for name in sorted(os.listdir(STATE)):
        path = os.path.join(STATE, name)
        try:
            with open(path) as f:
                r = json.load(f)
            pid, start, items = int(r["pid"]), r["start"], [tuple(x) for x in r["undo"]]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if start is not None and proc_start(pid) == start:
            continue  # that run is still going
        log(f"payoff: removing what an earlier run (pid {pid}, ended without its clean-up) left: "
            + ", ".join(f"namespaces ddpmn-{w[0]}-a/-b" if k == "nodes" else w for k, w in items))
        undo(items)
        os.unlink(path)
    RECORD = os.path.join(STATE, f"{os.getpid()}.json")
    save()


def run(cmd, env, timeout, cwd=ROOT):
    """Runs cmd; returns its stdout; raises Failed with its output on failure or timeout. Whatever
    ends this script meanwhile (a signal, Ctrl-C) stops the run first: stop()."""
    with subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          cwd=cwd) as p:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            stop(p)
            raise Failed(f"timed out after {timeout} s: {' '.join(cmd)}")
        except BaseException:
            stop(p)
            raise
    if p.returncode != 0:
        raise Failed(f"exit {p.returncode}: {' '.join(cmd)}\n{out[-3000:]}{err[-3000:]}")
    note_blas(out)
    return out


def run_together(cmds, env, timeout):
    """Runs the commands at the same time (run() each, on its own thread); raises the first failure."""
    with concurrent.futures.ThreadPoolExecutor(len(cmds)) as pool:
        for f in [pool.submit(run, c, env, timeout) for c in cmds]:
            f.result()


def stop(p):
    """Ends a child: SIGTERM first, so that mpirun passes it to its ranks, then SIGKILL after 5 s."""
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


# The programs' start-up lines naming the CPU's GEMM kernel ("blas: OpenBLAS 0.3.21, kernel Haswell,
# 1 thread") and, on a generic fallback kernel, their warning ("blas: kernel Prescott is a generic
# fallback ..."): collected from every run of a measurement, and printed under its table, since a
# fallback kernel makes every time several times slower.
BLAS = {"kernels": set(), "warnings": set()}


def note_blas(out):
    for line in out.splitlines():
        m = re.match(r"blas: (.*), kernel (\S+), \d+ threads?$", line)
        if m:
            BLAS["kernels"].add(f"{m.group(1)}, kernel {m.group(2)}")
        elif line.startswith("blas: "):
            BLAS["warnings"].add(line)


def blas_lines():
    """What the measurement since the last call ran on (and a warning on a fallback kernel); resets."""
    k, w = sorted(BLAS["kernels"]), sorted(BLAS["warnings"])
    BLAS["kernels"], BLAS["warnings"] = set(), set()
    lines = [f"measured on: {'; '.join(k) if k else 'no CPU run (no blas: line)'}"]
    return lines + [f"WARNING: {x} (every time in this table is slower than this CPU can do)" for x in w]


def records(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def step_ms(recs, warmup):
    """Median step-to-step time (ms) of one rank's metrics records, after `warmup` gaps."""
    t = [r["time"] for r in recs if r["type"] == "step"]
    gaps = [1e3 * (b - a) for a, b in zip(t, t[1:])]
    return st.median(gaps[warmup:] or gaps)


def train_args(hidden, batch, tmp, tag, steps=None, epochs=1, extra=(), device="cpu"):
    a = ["--device", device, "--hidden", hidden, "--batch_size", str(batch), "--epochs", str(epochs),
         "--save_interval", "0", "--log_interval", "1000000", "--ckpt_dir", os.path.join(tmp, "ckpt"),
         "--metrics", os.path.join(tmp, f"{tag}.m{{rank}}.jsonl")]
    if steps is not None:
        a += ["--max_steps", str(steps)]
    return a + list(extra)


def sizes_of(hidden):
    return [784] + [int(x) for x in hidden.split(",")] + [10]


def n_params(sizes):
    return sum(sizes[l + 1] * sizes[l] + sizes[l + 1] for l in range(len(sizes) - 1))


def table(title, rows, cols, blas):
    """Prints the table, then `blas` (blas_lines(): the kernel it was measured on, a fallback's warning)."""
    print(f"\n{title}")
    w = [max(len(c), *(len(fmt(r[c])) for r in rows)) if rows else len(c) for c in cols]
    print("  ".join(c.rjust(x) for c, x in zip(cols, w)))
    for r in rows:
        print("  ".join(fmt(r[c]).rjust(x) for c, x in zip(cols, w)))
    for line in blas:
        print(line)


def model_error(rows):
    """How far the predictions are from the measured times: |predicted - measured| / measured."""
    e = [abs(r["predicted_ms"] - r["ms_per_step"]) / r["ms_per_step"] for r in rows if r["predicted_ms"]]
    return (f"predicted within {100 * max(e):.0f} % of measured (mean {100 * st.mean(e):.0f} %, "
            f"{len(e)} rows)") if e else "no prediction"


def fmt(v):
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 1000 else f"{v:.0f}"
    return str(v)


# ---------------------------------------------------------------------------------------------------
# speedup


def gpu_count(o):
    exe = os.path.join(o.bin, "gpu_count")
    if not os.path.exists(exe):
        return 0
    try:
        return int(run([exe], None, 30).split()[0])
    except (Failed, ValueError, IndexError):
        return 0


def speedup(o, z, tmp):
    gb = z["sp_batch"]
    extra = ["--dataset_size", str(z["sp_dataset"])] if z["sp_dataset"] else []
    bin06 = os.path.join(o.bin, "06_full")

    def args(batch, tag, device="cpu"):
        return train_args(z["sp_hidden"], batch, tmp, tag, epochs=z["sp_epochs"], extra=extra, device=device)

    env1 = cpu_ddp.base_env()
    env2 = dict(env1, OPENBLAS_NUM_THREADS="2", OMP_NUM_THREADS="2")
    runs = [("1 process, 1 thread", [bin06] + args(gb, "s1"), env1, "s1"),
            ("1 process, 2 threads", [bin06] + args(gb, "s2"), env2, "s2"),
            ("2 ranks, 1 thread each", ["mpirun", "-np", "2", bin06] + args(gb // 2, "s3"), env1, "s3")]
    g = gpu_count(o)
    if g >= 1:
        runs.append(("1 GPU", [bin06] + args(gb, "g1", "cuda"), env1, "g1"))
    if g >= 2:
        launch = [os.path.join(ROOT, "scripts", "launch.sh"), "-n", str(g), bin06]
        runs.append((f"{g} GPUs", launch + args(gb // g, "gn", "cuda"), dict(env1, MASTER_PORT="29710"), "gn"))
    rows = []
    for config, cmd, env, tag in runs:
        log(f"speedup: {config} ...")
        run(cmd, env, o.timeout)
        recs = records(os.path.join(tmp, f"{tag}.m0.jsonl"))
        end = {}
        for r in recs:
            if r["type"] == "step":
                end[r["epoch"]] = r["time"]
        acc = [(r["epoch"], r["test_acc"]) for r in recs if r["type"] == "epoch" and "test_acc" in r]
        hit = next((end[e] for e, a in acc if a >= z["sp_target"]), None)
        rows.append({"config": config, "samples_per_s": gb / step_ms(recs, 3) * 1e3,
                     "seconds_to_accuracy": hit, "accuracy": acc[-1][1] if acc else None})
    subset = f" ({z['sp_dataset']} samples)" if z["sp_dataset"] else ""
    title = (f"speedup: step 06, --hidden {z['sp_hidden']}, global batch {gb}, {z['sp_epochs']} epochs of "
             f"Fashion-MNIST{subset}, target test accuracy {z['sp_target']}")
    table(title, rows, FIELDS["speedup"], blas_lines())
    return rows, {"target": z["sp_target"], "title": title}


# ---------------------------------------------------------------------------------------------------
# slowlink


class Nodes:
    """tests/multinode/nodes.sh's two nodes, and the tc qdiscs on their veth ends; close() removes
    them (only what this object made: the namespaces are named by this process's id)."""

    def __init__(self, tmp):
        self.id, self.dir, self.up = os.getpid() % 10**7, os.path.join(tmp, "nodes"), True
        # recorded before they are made: a signal may stop `up` half-way, and `down` is harmless
        record("nodes", (self.id, self.dir))
        r = subprocess.run([NODES, "up", str(self.id), self.dir], capture_output=True, text=True)
        if r.returncode == 77:
            raise Skip(r.stdout.strip().replace("multinode: skipped: ", ""))
        if r.returncode != 0:
            raise Failed(f"tests/multinode/nodes.sh up failed ({r.returncode}):\n{r.stdout}{r.stderr}")
        with open(os.path.join(self.dir, "nodes.env")) as f:
            v = dict(line.strip().split("=", 1) for line in f if "=" in line)
        self.ends = [(v["nsa"], v["va"]), (v["nsb"], v["vb"])]
        self.net, self.enter = v["net"], os.path.join(self.dir, "enter")
        self.addr = {"nodea": v["net"] + ".1", "nodeb": v["net"] + ".2"}
        self.shaper, self.errors = None, []

    def shape(self, rate, burst):
        """Both ends to `rate`: netem with DELAY where the kernel has it, else tbf (the rate alone)."""
        kinds = [("netem", ["netem", "rate", rate, "delay", DELAY]),
                 ("tbf", ["tbf", "rate", rate, "burst", burst, "latency", "100ms"])]
        for kind, q in kinds:
            if self.shaper not in (None, kind):
                continue
            ok = True
            for ns, dev in self.ends:
                r = subprocess.run(["tc", "-n", ns, "qdisc", "replace", "dev", dev, "root"] + q,
                                   capture_output=True, text=True)
                if r.returncode != 0:
                    ok = False
                    self.errors.append(f"tc qdisc replace ... root {' '.join(q)}: {r.stderr.strip()}")
                    break
            if ok:
                self.shaper = kind
                return kind
        raise Failed("cannot shape the link: " + "; ".join(self.errors))

    def close(self):
        if not self.up:
            return
        for ns, dev in getattr(self, "ends", []):
            subprocess.run(["tc", "-n", ns, "qdisc", "del", "dev", dev, "root"], capture_output=True)
        subprocess.run([NODES, "down", str(self.id), self.dir], capture_output=True)
        self.up = False
        if ("nodes", (self.id, self.dir)) in UNDO:
            UNDO.remove(("nodes", (self.id, self.dir)))

    def mpi_env(self):
        return dict(cpu_ddp.base_env(), OMPI_MCA_btl="self,vader,tcp",
                    OMPI_MCA_btl_tcp_if_include=f"{self.net}.0/24",
                    OMPI_MCA_oob_tcp_if_include=f"{self.net}.0/24", OMPI_MCA_plm_rsh_agent=self.enter)

    def launch(self, backend, cmd, timeout):
        """One rank per node: mpirun on node a over MPI, or an environment launch per node (Gloo).
        Returns rank 0's stdout."""
        if backend == "mpi":
            hosts = os.path.join(self.dir, "hosts1")
            with open(hosts, "w") as f:
                f.write(f"{self.addr['nodea']} slots=1\n{self.addr['nodeb']} slots=1\n")
            return run([self.enter, "nodea", "mpirun", "-np", "2", "--hostfile", hosts] + cmd
                       + ["--backend", "mpi"], self.mpi_env(), timeout)
        procs = []
        try:
            for rank, node in enumerate(["nodea", "nodeb"]):
                env = dict(cpu_ddp.base_env(), RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK="0",
                           LOCAL_WORLD_SIZE="1", MASTER_ADDR=self.addr["nodea"], MASTER_PORT="29500")
                procs.append(subprocess.Popen([self.enter, node] + cmd + ["--backend", "gloo"], env=env,
                                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
            outs = [p.communicate(timeout=timeout)[0] for p in procs]
        except subprocess.TimeoutExpired:
            raise Failed(f"timed out after {timeout} s: {' '.join(cmd)} (gloo, one rank per node)")
        finally:
            for p in procs:  # exactly the ranks started here (a failed one makes its peer fail too)
                if p.poll() is None:
                    p.kill()
                    p.wait()
        for rank, (p, out) in enumerate(zip(procs, outs)):
            if p.returncode != 0:
                raise Failed(f"rank {rank} exit {p.returncode}: {' '.join(cmd)} (gloo)\n{out[-3000:]}")
        note_blas(outs[0])
        return outs[0]


class Skip(Exception):
    """slowlink cannot run here; the message says why."""


def fsdp_exposed(fwd, bwd, layer_bytes, a, c, rs):
    """Step 08's communication left over after compute (ms): fsdp.h's order, one collective at a
    time. Forward: gather layer 0, then at each layer l wait for its gather, start l+1's, compute.
    Backward from the last layer (still gathered): wait for l's gather, start l-1's, compute, then
    reduce-scatter l. A gather of n bytes at 2 ranks: a + c*n/2; a reduce-scatter a + rs*n (see
    rs_c)."""
    coll = [a + c * n / 2 for n in layer_bytes]
    scat = [a + rs * n for n in layer_bytes]
    L, t, ch = len(fwd), 0.0, 0.0
    ready = [0.0] * L
    ready[0] = ch = coll[0]
    for l in range(L):
        t = max(t, ready[l])
        if l + 1 < L:
            ready[l + 1] = ch = max(ch, t) + coll[l + 1]
        t += fwd[l]
    for l in reversed(range(L)):
        if l < L - 1:
            t = max(t, ready[l])
        if l > 0:
            ready[l - 1] = ch = max(ch, t) + coll[l - 1]
        t += bwd[l]
        ch = max(ch, t) + scat[l]
    return max(t, ch) - sum(fwd) - sum(bwd)


def rs_c(backend, c):
    """The cost per byte of a reduce-scatter of n bytes at 2 ranks. MPI's and NCCL's move half the
    bytes (c/2); Debian's Gloo has no reduce-scatter, so common/dist/dist_gloo.cc all-reduces the whole
    buffer and keeps its chunk: a whole all-reduce's c."""
    return c if backend == "gloo" else c / 2


# Where the model does not apply, and why: it overlaps each collective with the compute after its
# start, which needs a backend that moves the bytes in the background (Gloo's worker thread, NCCL's
# kernels). Open MPI progresses a non-blocking collective only inside MPI calls (chapter 06: one
# MPI_Test per layer of backward), so steps 06-08 over MPI get no prediction; step 04's blocking
# all-reduces overlap nothing, so the model applies to them on every backend.
# The model also counts communication as free for the CPU. That holds on a slow link; on a fast one the
# kernel's work of moving the bytes (TCP, the veth pair, the qdisc) takes the same two cores as the
# GEMMs: measured on the 2-core VM at 1 Gbit/s, step 06 over Gloo took 141-153 ms per step, more than
# its compute plus a whole all-reduce (62 + 67 ms): nothing overlapped, so the model does not apply
# there. Predictions are shown for links of at most MODEL_MAX_MBIT.
MODEL_MAX_MBIT = 100
NO_MODEL = ("no prediction for steps 06-08 over MPI: Open MPI moves a non-blocking collective only "
            "inside MPI calls (one MPI_Test per layer), not in the background the model's overlap assumes")
FAST_LINK = (f"no prediction on links faster than {MODEL_MAX_MBIT} Mbit/s: moving the bytes takes the cores "
             "the GEMMs use, which the model counts as free (docs/payoff.md)")


def mbit(rate):
    """A tc rate ("1gbit", "100mbit") in Mbit/s."""
    m = re.match(r"(\d+(?:\.\d+)?)(k|m|g)bit$", rate)
    if not m:
        raise ValueError(f"unknown rate {rate!r}")
    return float(m.group(1)) * {"k": 1e-3, "m": 1.0, "g": 1e3}[m.group(2)]


def modelled(backend, program, rate):
    """Whether chapter 06's model applies (NO_MODEL, FAST_LINK)."""
    return mbit(rate) <= MODEL_MAX_MBIT and (backend != "mpi" or program == "04_ddp_wrap")


def predict(program, cap, sizes, base, fwd, bwd, a, c, backend):
    """The step time (ms) chapter 06's model predicts, or None where it does not apply (NO_MODEL)."""
    S = 4 * n_params(sizes)
    if backend == "mpi" and program != "04_ddp_wrap":
        return None
    if program == "04_ddp_wrap":  # after backward, one all-reduce per tensor (a weight, a bias): 2L
        return base + 2 * (len(sizes) - 1) * a + c * S
    if program == "06_full":
        return base + bucket_sweep.simulate(bwd, bucket_sweep.assign(sizes, int(cap * MIB)), a, c) + a
    if program == "07_zero":
        b = bucket_sweep.assign(sizes, int(cap * MIB))
        return base + bucket_sweep.simulate(bwd, b, a, rs_c(backend, c)) + (a + c * S / 2) + a
    layer_bytes = [4 * (sizes[l + 1] * sizes[l] + sizes[l + 1]) for l in range(len(sizes) - 1)]
    return base + fsdp_exposed(fwd, bwd, layer_bytes, a, c, rs_c(backend, c)) + a


def layer_ms(tmp, tag, n_layers):
    """Median forward and backward time per layer (ms) of step 08's 1-rank --trace, after step 1."""
    ev = [e for e in json.load(open(os.path.join(tmp, f"{tag}.t0.json")))["traceEvents"] if e.get("ph") == "X"]
    fwd = {l: [] for l in range(n_layers)}
    for e in ev:
        m = re.match(r"forward layer (\d+)$", e["name"])
        if m and e["args"]["step"] >= 2:
            fwd[int(m.group(1))].append(e["dur"] / 1000.0)
    return [st.median(fwd[l]) for l in range(n_layers)], bucket_sweep.layer_times(ev, n_layers)


def slowlink(o, z, tmp):
    if os.geteuid() != 0:
        print(f"slowlink: skipped: network namespaces and tc need root, and this is uid {os.geteuid()}")
        return [], {}
    if not shutil.which("tc") or not shutil.which("ip"):
        print("slowlink: skipped: tc or ip not found (Debian's iproute2)")
        return [], {}
    hidden, steps, warm = z["sl_hidden"], z["sl_steps"], z["sl_warmup"]
    sizes = sizes_of(hidden)
    S = 4 * n_params(sizes)
    env1 = cpu_ddp.base_env()
    rows, info = [], {"links": {}}
    try:
        nodes = Nodes(tmp)
    except Skip as e:
        print(f"slowlink: skipped: {e}")
        return [], {}
    try:
        if not z["sl_batch"]:  # compute per sample at 1 rank (step 04, 128 samples): each link's batch
            cal = train_args(hidden, 128, tmp, "cal", steps=steps, extra=["--data", "synthetic", "--dataset_size",
                                                                           str(128 * (steps + 1))])
            run([os.path.join(o.bin, "04_ddp_wrap")] + cal, env1, o.timeout)
            ms_per_sample = step_ms(records(os.path.join(tmp, "cal.m0.jsonl")), warm) / 128
        for rate, burst in z["sl_links"]:
            kind = nodes.shape(rate, burst)
            how = f"netem rate {rate} delay {DELAY}" if kind == "netem" else \
                f"tbf rate {rate} burst {burst}, no delay (netem: {nodes.errors[0].split(': ', 1)[-1]})"
            fits, top = {}, 4096
            while top < S:  # the probe's sizes: 4 KiB, 16 KiB, ... up to the whole model's gradients
                top *= 4
            for backend in ("gloo", "mpi"):
                for call in ("blocking", "async"):  # step 04's call; the reducers' of steps 06-08
                    log(f"slowlink: {rate}, {backend}: probe --call {call} ...")
                    probe = [os.path.join(o.bin, "probe"), "--device", "cpu", "--min_bytes", "4K", "--max_bytes",
                             str(top), "--factor", "4", "--iters", str(z["sl_iters"]), "--timeout", "120",
                             "--call", call]
                    fits[backend + (" async" if call == "async" else "")] = bucket_sweep.fit(
                        bucket_sweep.parse_probe(nodes.launch(backend, probe, o.timeout)))
            a0, c0 = fits["gloo"]
            batch = z["sl_batch"] or max(16, min(4096, int(round((a0 + c0 * S) / ms_per_sample / 16.0)) * 16))
            data = ["--data", "synthetic", "--dataset_size", str(2 * batch * (steps + 1))]
            base = {}
            for p in PROGRAMS:  # compute alone: 1 rank, the same per-rank batch, two copies at once
                cmds = []
                for copy in "xy":
                    extra = data + (["--trace", os.path.join(tmp, f"b{rate}.t{{rank}}.json")]
                                    if p == "08_fsdp" and copy == "x" else [])
                    cmds.append([os.path.join(o.bin, p)] + train_args(hidden, batch, tmp, f"b{rate}{p}{copy}", steps,
                                                                      extra=extra))
                run_together(cmds, env1, o.timeout)
                base[p] = st.mean(step_ms(records(os.path.join(tmp, f"b{rate}{p}{copy}.m0.jsonl")), warm)
                                  for copy in "xy")
            fwd, bwd = layer_ms(tmp, f"b{rate}", len(sizes) - 1)
            info["links"][rate] = {"how": how, "batch": batch, "fits": fits, "base": base}
            log(f"slowlink: {rate} ({how}): batch {batch} per rank; compute alone (ms): "
                + ", ".join(f"{p} {v:.1f}" for p, v in base.items()))
            for backend in ("gloo", "mpi"):
                log(f"slowlink: {rate}, {backend}: runs ...")
                for p in PROGRAMS:
                    # the fit of the call the program makes: step 04 the blocking all-reduce, the others
                    # the asynchronous collectives their reducers start and wait for
                    a, c = fits[backend if p == "04_ddp_wrap" else backend + " async"]
                    for cap in (z["sl_caps"] if p == "06_full" else [25] if p == "07_zero" else [None]):
                        tag = f"r{rate}{backend}{p}{cap}"
                        extra = data + (["--bucket_cap_mb", f"{cap:g}"] if cap is not None else [])
                        nodes.launch(backend, [os.path.join(o.bin, p)] + train_args(hidden, batch, tmp, tag, steps,
                                                                                    extra=extra), o.timeout)
                        ms = step_ms(records(os.path.join(tmp, f"{tag}.m0.jsonl")), warm)
                        rows.append({"backend": backend, "link": rate, "program": p, "cap_mb": cap,
                                     "ms_per_step": ms,
                                     "predicted_ms": predict(p, cap if cap is not None else 25, sizes,
                                                             base[p], fwd, bwd, a, c, backend)
                                     if modelled(backend, p, rate) else None})
    finally:
        nodes.close()
    blas = blas_lines()
    for rate, v in info["links"].items():
        title = (f"slowlink: 2 nodes (network namespaces), one rank each, {v['how']}; --hidden {hidden} "
                 f"({S / MIB:.2f} MiB of gradients), batch {v['batch']} per rank, {steps} steps; probe fit: "
                 + ", ".join(f"{b} a = {f[0] * 1e3:.0f} us, 1/c = {1e-6 / f[1]:.3f} GB/s" for b, f in v["fits"].items())
                 + "; compute alone (1 rank, two at once, ms): " + ", ".join(f"{p} {x:.1f}" for p, x in v["base"].items()))
        shown = [r for r in rows if r["link"] == rate]
        why = NO_MODEL + ("; " + FAST_LINK if mbit(rate) > MODEL_MAX_MBIT else "")
        table(title, shown, FIELDS["slowlink"], blas + [f"model: {model_error(shown)}; {why}"])
    info["hidden"] = hidden
    return rows, info


# ---------------------------------------------------------------------------------------------------
# hooks: what goes on the wire (docs/hooks_and_clipping.md)

def hooks(o, z, tmp):
    """Step 06 over the slow link with each --comm_hook: ms per step, the bytes each rank hands to the
    gradient collectives per step (the epoch records' allreduce_bytes over the steps), and the test
    accuracy after the run. PowerSGD compresses from step --powersgd_start_iter (hk_start) on."""
    if os.geteuid() != 0 or not shutil.which("tc") or not shutil.which("ip"):
        print("hooks: skipped: the slow link needs root, tc and ip (Debian's iproute2)")
        return [], {}
    rate, burst = z["hk_link"]
    rows = []
    try:
        nodes = Nodes(tmp)
    except Skip as e:
        print(f"hooks: skipped: {e}")
        return [], {}
    try:
        kind = nodes.shape(rate, burst)
        for backend in ("gloo", "mpi"):
            for hook in HOOKS:
                log(f"hooks: {rate} ({kind}), {backend}, --comm_hook {hook} ...")
                tag = f"h{backend}{hook}"
                extra = z["hk_data"] + ["--comm_hook", hook] + (
                    ["--powersgd_start_iter", str(z["hk_start"])] if hook == "powersgd" else [])
                nodes.launch(backend, [os.path.join(o.bin, "06_full")] + train_args(
                    z["hk_hidden"], z["hk_batch"], tmp, tag, epochs=z["hk_epochs"], extra=extra), o.timeout)
                recs = records(os.path.join(tmp, f"{tag}.m0.jsonl"))
                epochs = [r for r in recs if r["type"] == "epoch"]
                steps = len([r for r in recs if r["type"] == "step"])
                rows.append({"backend": backend, "link": rate, "hook": hook, "ms_per_step": step_ms(recs, 2),
                             "allreduce_bytes_per_step": sum(e["allreduce_bytes"] for e in epochs) / steps,
                             "accuracy": epochs[-1]["test_acc"]})
    finally:
        nodes.close()
    table(f"hooks: step 06, 2 nodes (network namespaces), one rank each, {rate} ({kind}); --hidden "
          f"{z['hk_hidden']}, batch {z['hk_batch']} per rank, {z['hk_epochs']} epoch(s)"
          f"{' of Fashion-MNIST' if not z['hk_data'] else ' of synthetic data'}; PowerSGD rank 1 from step "
          f"{z['hk_start']}", rows, FIELDS["hooks"], blas_lines())
    return rows, {"link": rate, "kind": kind}


# ---------------------------------------------------------------------------------------------------
# memory


def peak_kib(o, program, w, hidden, steps, tmp, tag):
    """Runs `program` at w ranks for `steps` steps of batch 32; returns (its stdout, the largest peak
    RSS over the ranks in KiB)."""
    data = ["--data", "synthetic", "--dataset_size", str(w * 32 * steps)]
    out = run(["mpirun", "-np", str(w), os.path.join(o.bin, program)]
              + train_args(hidden, 32, tmp, tag, steps, extra=data), cpu_ddp.base_env(), o.timeout)
    return out, max(next(r["peak_rss_kib"] for r in records(os.path.join(tmp, f"{tag}.m{k}.jsonl"))
                         if r["type"] == "final") for k in range(w))


def memory(o, z, tmp):
    rows = []
    # The floor: what a rank holds whatever the model (libraries, MPI, the data): step 06 with 16
    # hidden units. Printed and drawn, not a row.
    floor = {w: peak_kib(o, "06_full", w, "16", 1, tmp, f"floor{w}")[1] for w in z["mem_ranks"]}
    for model, hidden in z["mem_models"].items():
        for p in ["06_full", "07_zero", "08_fsdp"]:
            for w in z["mem_ranks"]:
                log(f"memory: {p}, {w} ranks, {model} ({hidden}) ...")
                out, peak = peak_kib(o, p, w, hidden, z["mem_steps"], tmp, f"mem{p}{w}{hidden.replace(',', '_')}")
                m = re.search(r"optimizer state: \d+ floats per rank, (\d+) bytes", out)
                n = int(re.search(r"model: \d+ layers, (\d+) parameters", out).group(1))
                rows.append({"program": p, "ranks": w, "model": model, "peak_rss_kib": peak,
                             "optimizer_state_bytes": int(m.group(1)) if m else 4 * n})
    title = ("memory: peak RSS per rank (largest over the ranks) and optimizer state per rank; synthetic data, "
             "batch 32, " + "; ".join(f"{m} = --hidden {h} ({n_params(sizes_of(h)):,} parameters)"
                                      for m, h in z["mem_models"].items())
             + "; the floor (--hidden 16) at " + ", ".join(f"{w} ranks {k} KiB" for w, k in floor.items()))
    table(title, rows, FIELDS["memory"], blas_lines())
    return rows, {"models": z["mem_models"], "title": title, "floor": floor}


# ---------------------------------------------------------------------------------------------------
# figures


def pyplot(install):
    """matplotlib's pyplot, or None. Where it is missing, Debian's python3-matplotlib is installed
    (apt-get, as root) only when allowed: install "yes" (--install-matplotlib), or "ask" and the user
    answers y on a terminal; never without a word."""
    try:
        import matplotlib
    except ImportError:
        if install == "no" or os.geteuid() != 0 or not shutil.which("apt-get"):
            return None
        what = ("Debian's python3-matplotlib (apt-get update, then apt-get install --no-install-recommends "
                "python3-matplotlib: with python3-numpy, python3-pil and its other dependencies, about 60 MB)")
        if install == "ask":
            if not sys.stdin.isatty():
                log(f"payoff: the figures need matplotlib; --install-matplotlib installs {what}")
                return None
            try:
                answer = input(f"payoff: the figures need matplotlib, missing here. Install {what}? [y/N] ")
            except EOFError:
                answer = ""
            if answer.strip().lower() not in ("y", "yes"):
                return None
        log(f"payoff: installing {what} for the figures")
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "update", "-qq"], env=env)
        subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "python3-matplotlib"], env=env)
        try:
            import matplotlib
        except ImportError:
            return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def draw(plt, what, rows, info, path, command):
    if what == "hooks":
        fig, ax = plt.subplots(1, 3, figsize=(12, 3.4))
        for k, b in enumerate(("gloo", "mpi")):
            rs = [r for r in rows if r["backend"] == b]
            x = [i + 0.4 * k for i in range(len(rs))]
            for a, key, scale in ((ax[0], "ms_per_step", 1), (ax[1], "allreduce_bytes_per_step", 1 / MIB),
                                  (ax[2], "accuracy", 1)):
                a.bar(x, [r[key] * scale for r in rs], width=0.4, label=b)
        for a, label in zip(ax, ("ms per step", "MiB per rank and step to the collectives",
                                 "test accuracy at the end")):
            a.set_xticks([i + 0.2 for i in range(len(HOOKS))], HOOKS, fontsize=8)
            a.set_title(label, fontsize=9)
        ax[2].set_ylim(0, 1)
        ax[0].legend(fontsize=8)
        fig.suptitle(f"step 06's --comm_hook over a {info['link']} link ({info['kind']}), one rank per node",
                     fontsize=9)
    elif what == "speedup":
        fig, ax = plt.subplots(1, 2, figsize=(10, 3.6))
        names = [r["config"] for r in rows]
        ax[0].barh(names, [r["samples_per_s"] for r in rows], color="tab:blue")
        ax[0].set_xlabel("samples/s (global)")
        ax[1].barh(names, [r["seconds_to_accuracy"] or 0 for r in rows], color="tab:green")
        ax[1].set_xlabel(f"seconds to test accuracy {info['target']}")
        ax[1].set_yticklabels([])
        for a in ax:
            a.invert_yaxis()
    elif what == "slowlink":
        links = list(info["links"])
        fig, axs = plt.subplots(len(links), 2, figsize=(9, 3.8 * len(links)), squeeze=False)
        sizes = sizes_of(info["hidden"])
        for ax, (b, l) in zip(axs.flatten(), [(b, l) for l in links for b in ("gloo", "mpi")]):
            rs = [r for r in rows if r["backend"] == b and r["link"] == l]
            lab = [r["program"][:2] for r in rs]
            for k, r in enumerate(rs):
                if r["program"] == "06_full":
                    lab[k] += f" cap {r['cap_mb']:g}: {len(bucket_sweep.assign(sizes, int(r['cap_mb'] * MIB)))} b."
            x = range(len(rs))
            ax.bar(x, [r["ms_per_step"] for r in rs], color="tab:blue", label="measured")
            ax.plot(x, [r["predicted_ms"] if r["predicted_ms"] else float("nan") for r in rs], "o",
                    color="tab:red", label="predicted")
            ax.set_xticks(list(x))
            ax.set_xticklabels(lab, rotation=45, ha="right")
            ax.set_xlabel("step (06: --bucket_cap_mb, and the buckets it makes)", fontsize=8)
            ax.set_title(f"{b}, {l} (batch {info['links'][l]['batch']})", fontsize=10)
            ax.set_ylabel("ms per step")
        axs[0][0].legend(fontsize=8, loc="lower left")
    else:
        models = list(info["models"])
        fig, axs = plt.subplots(len(models), 2, figsize=(9, 3.2 * len(models)), squeeze=False)
        axs = axs.flatten()
        for i, m in enumerate(models):
            for p, col, sty in zip(["06_full", "07_zero", "08_fsdp"], ["tab:blue", "tab:orange", "tab:green"],
                                   ["o-", "s--", "^:"]):
                rs = [r for r in rows if r["program"] == p and r["model"] == m]
                w = [r["ranks"] for r in rs]
                axs[2 * i].plot(w, [r["peak_rss_kib"] / 1024 for r in rs], sty, color=col, label=p)
                axs[2 * i + 1].plot(w, [r["optimizer_state_bytes"] / MIB for r in rs], sty, color=col, label=p)
            fl = sorted(info["floor"].items())
            axs[2 * i].plot([w for w, _ in fl], [k / 1024 for _, k in fl], "-", color="gray",
                            label="floor (--hidden 16)")
            axs[2 * i].set_title(f"{m}: peak RSS per rank", fontsize=10)
            axs[2 * i].set_ylabel("MiB")
            axs[2 * i + 1].set_title(f"{m}: optimizer state per rank", fontsize=10)
            for a in axs[2 * i:2 * i + 2]:
                a.set_ylim(bottom=0)
                a.set_xlabel("ranks")
                a.set_xticks(sorted({r["ranks"] for r in rows}))
        axs[0].legend(fontsize=8)
    fig.suptitle(command, fontsize=8, family="monospace")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"figure: {os.path.relpath(path, ROOT)}")


# ---------------------------------------------------------------------------------------------------
# selftest


def check(rows, what, o, z):
    bad = [f"{what}: fields {list(r)} != {FIELDS[what]}" for r in rows if list(r) != FIELDS[what]]
    if bad:  # the values are checked only where the fields are right
        rows = [r for r in rows if list(r) == FIELDS[what]]
    if what == "speedup":
        names = [r["config"] for r in rows]
        want = ["1 process, 1 thread", "1 process, 2 threads", "2 ranks, 1 thread each"]
        if names[:3] != want:
            bad.append(f"speedup: configurations {names}, expected {want} first")
        for r in rows:
            if not r["samples_per_s"] > 0 or r["accuracy"] is None or not 0 < r["accuracy"] <= 1:
                bad.append(f"speedup: {r}: samples/s must be > 0, accuracy in (0, 1]")
            t = r["seconds_to_accuracy"]
            if (t is not None and not t > 0) or (t is None and (r["accuracy"] or 0) >= z["sp_target"]):
                bad.append(f"speedup: {r}: a time to the target > 0 where the last epoch reached it")
    elif what == "slowlink":
        want = [(b, l, p, c) for l, _ in z["sl_links"] for b in ("gloo", "mpi") for p in PROGRAMS
                for c in (z["sl_caps"] if p == "06_full" else [25] if p == "07_zero" else [None])]
        got = [(r["backend"], r["link"], r["program"], r["cap_mb"]) for r in rows]
        if (rows or bad) and sorted(got, key=str) != sorted(want, key=str):
            bad.append(f"slowlink: rows {got}, expected {want}")
        for r in rows:
            none = not modelled(r["backend"], r["program"], r["link"])  # NO_MODEL, FAST_LINK
            if not r["ms_per_step"] > 0 or (r["predicted_ms"] is None) != none or not (none or r["predicted_ms"] > 0):
                bad.append(f"slowlink: {r}: a time > 0, and a prediction > 0 exactly where the model applies")
    else:
        for model, hidden in z["mem_models"].items():
            sizes = sizes_of(hidden)
            n = n_params(sizes)
            per_layer = [sizes[l + 1] * sizes[l] + sizes[l + 1] for l in range(len(sizes) - 1)]
            for w in z["mem_ranks"]:
                # The shard rules the programs print and document: step 06 keeps all n floats of
                # momentum; step 07 pads n to a multiple of W (ceil(n/W) each); step 08 pads each layer.
                want = {"06_full": 4 * n, "07_zero": 4 * -(-n // w), "08_fsdp": 4 * sum(-(-x // w) for x in per_layer)}
                for p, b in want.items():
                    r = [r for r in rows if (r["program"], r["ranks"], r["model"]) == (p, w, model)]
                    if len(r) != 1:
                        bad.append(f"memory: {len(r)} rows for {p}, {w} ranks, {model}")
                    elif r[0]["optimizer_state_bytes"] != b or not r[0]["peak_rss_kib"] > 0:
                        bad.append(f"memory: {r[0]}: expected {b} optimizer-state bytes and a peak RSS > 0")
    for b in bad:
        print("FAIL " + b)
    print(f"selftest {what}: {len(rows)} rows, {'ok' if not bad else f'{len(bad)} failures'}")
    return not bad


# ---------------------------------------------------------------------------------------------------


# ---- recovery: a restart against live recovery (step 09) --------------------------------------------

def free_port_pair():
    """A port p with p + 1 free too (the lighthouse and its store; the Gloo store at MASTER_PORT + 1)."""
    import socket
    for _ in range(100):
        with socket.socket() as a:
            a.bind(("127.0.0.1", 0))
            port = a.getsockname()[1]
            if port >= 65000:
                continue
            with socket.socket() as b:
                try:
                    b.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
            return port
    raise Failed("no two free ports in a row")


def timed(cmd, env, timeout):
    """(wall seconds, time lost, stdout + stderr) of a run that must succeed; the time lost from its
    progress lines, each timed as it arrives (the docstring's recovery)."""
    import threading
    import time
    t0 = time.monotonic()
    lines, seen = [], []  # (arrival, line); (arrival, step) of each progress line
    with subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          cwd=ROOT) as p:
        timer = threading.Timer(timeout, stop, (p,))
        timer.start()
        try:
            for line in p.stdout:
                now = time.monotonic()
                lines.append(line)
                m = re.search(r"  step (\d+)/\d+  loss ", line)
                if m:
                    seen.append((now, int(m.group(1))))
            p.wait()
        except BaseException:
            stop(p)
            raise
        finally:
            timer.cancel()
    out = "".join(lines)
    if p.returncode != 0:
        raise Failed(f"exit {p.returncode}: {' '.join(cmd)}\n{out[-4000:]}")
    note_blas(out)
    if len(seen) < 3:
        raise Failed(f"fewer than 3 progress lines: {' '.join(cmd)}")
    gaps = [b[0] - a[0] for a, b in zip(seen, seen[1:]) if b[1] == a[1] + 1]
    lost = (seen[-1][0] - seen[0][0]) - (seen[-1][1] - seen[0][1]) * st.median(gaps)
    return time.monotonic() - t0, lost, out


def live_phases(out):
    """The live run's phases from its `recovery:` lines (rank 0's)."""
    ph = {}
    m = re.search(r"recovery: step \d+ redone at \d+ ranks; detect ([\d.]+) s, quorum ([\d.]+) s, reconnect "
                  r"([\d.]+) s, heal \d+ B in [\d.]+ s, redo ([\d.]+) s", out)
    if m:
        ph.update(zip(("detect_s", "quorum_s", "reconnect_s", "redo_s"), map(float, m.groups())))
    m = re.search(r"recovery: \d+ ranks from step \d+; quorum [\d.]+ s, reconnect [\d.]+ s, heal (\d+) B in "
                  r"[\d.]+ s \(total ([\d.]+) s\)", out)
    if m:
        ph.update(join_heal_bytes=int(m.group(1)), join_total_s=float(m.group(2)))
    return ph


def recovery(o, z, tmp):
    steps, kill, save, reps = z["rc_steps"], z["rc_kill"], z["rc_save"], z["rc_reps"]
    prog = os.path.join(o.bin, "09_live")
    launch, restart = os.path.join(ROOT, "scripts", "launch.sh"), os.path.join(ROOT, "scripts", "restart.sh")
    print(f"recovery: 3 ranks, {steps} steps of step 09 (--hidden {z['rc_hidden']}, --batch_size "
          f"{z['rc_batch']}), replica 2 killed as it starts step {kill}; snapshots every {save} steps; "
          f"{reps} repetition(s)", flush=True)
    measured = {}  # (way, killed): the time lost, per repetition
    runs, phases = [], []
    for rep in range(reps):
        for way in ("restart", "live"):
            for killed in (False, True):
                d = os.path.join(tmp, f"rc{rep}_{way}_{int(killed)}")
                os.makedirs(d)
                args = [prog] + train_args(z["rc_hidden"], z["rc_batch"], d, "m", steps=steps, epochs=100,
                                           extra=z["rc_data"] + ["--log_interval", "1"])
                env = dict(cpu_ddp.base_env(), MASTER_PORT=str(free_port_pair()), RESTART_DELAY="0")
                if killed:
                    env["DDP_TEST_FT_KILL"] = f"2:{kill}"
                if way == "restart":
                    cmd = [restart, "--max_restarts", "3", "--", launch, "-n", "3"] + args + [
                        "--save_steps", str(save), "--resume", "auto"]
                else:
                    cmd = [launch, "--ft", "--replace", "-n", "3"] + args
                wall, lost, out = timed(cmd, env, o.timeout)
                if killed and way == "live":
                    phases.append(live_phases(out))
                measured.setdefault((way, killed), []).append(lost)
                runs.append({"way": way, "kill": killed, "wall_s": round(wall, 3), "lost_s": round(lost, 3)})
                print(f"  {way:7s} {'killed' if killed else 'no kill':7s} {wall:7.2f} s, lost {lost:6.2f} s",
                      flush=True)
    floor = {w: st.median(measured[(w, False)]) for w in ("restart", "live")}
    lost = {w: st.median([k - u for k, u in zip(measured[(w, True)], measured[(w, False)])])
            for w in ("restart", "live")}
    restart_lost, live_lost = lost["restart"], lost["live"]
    print(f"without the kill the same measure reads {floor['restart']:.2f} s (restart) and {floor['live']:.2f} s "
          "(live): its floor, taken off each killed run's")
    ph = {k: st.median([p[k] for p in phases if k in p]) for k in
          ("detect_s", "quorum_s", "reconnect_s", "redo_s", "join_heal_bytes", "join_total_s")
          if any(k in p for p in phases)}
    ratio = restart_lost / live_lost if live_lost > 0 else None
    print(f"time lost to the kill: restart {restart_lost:.2f} s, live {live_lost:.2f} s"
          + (f" ({ratio:.1f}x less)" if ratio else ""))
    print("live phases (rank 0, median): " + ", ".join(f"{k} {v:g}" for k, v in ph.items()))
    for line in blas_lines():
        print(line)
    return {"restart_lost_s": round(restart_lost, 3), "live_lost_s": round(live_lost, 3),
            "ratio": round(ratio, 1) if ratio else None, "floor_s": {w: round(v, 3) for w, v in floor.items()},
            "live_phases": ph, "runs": runs}, None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", nargs="?", choices=["speedup", "slowlink", "memory", "hooks", "recovery"],
                    help="one measurement (default: the first three; hooks and recovery only when named)")
    ap.add_argument("--quick", action="store_true", help="about a minute each on 2 cores")
    ap.add_argument("--selftest", action="store_true", help="with --quick: the smallest sizes, and check the rows")
    ap.add_argument("--json", metavar="PATH", help='write {"speedup": [...], "slowlink": [...], "memory": [...]}')
    ap.add_argument("--img", help="where the figures go (default docs/img; with --quick out/, so that a quick "
                    "run leaves the docs' figures alone)")
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"), help="the built programs (default build/bin)")
    ap.add_argument("--install-matplotlib", action="store_true",
                    help="where matplotlib is missing, install Debian's python3-matplotlib (apt-get, as root) "
                    "without asking; without it, a run on a terminal asks first, any other draws no figures")
    ap.add_argument("--timeout", type=int, default=900, help="seconds any one run may take (default 900)")
    o = ap.parse_args()
    if o.selftest and not o.quick:
        ap.error("--selftest goes with --quick")
    for p in PROGRAMS + ["probe"] + (["09_live", "lighthouse"] if o.what == "recovery" else []):
        if not os.access(os.path.join(o.bin, p), os.X_OK):
            sys.exit(f"payoff: {os.path.join(o.bin, p)} is missing: build first (scripts/setup.sh)")
    start_cleanup()  # SIGHUP, SIGINT, SIGTERM and the exit remove what this run made
    z = SIZES["selftest" if o.selftest else "quick" if o.quick else "full"]
    whats = [o.what] if o.what else ["speedup", "slowlink", "memory"]
    print(f"payoff: {', '.join(whats)}; {'selftest' if o.selftest else 'quick' if o.quick else 'full'} sizes; "
          f"{os.cpu_count()} CPUs; load average {cpu_ddp.uptime()}", flush=True)
    tmp = tempfile.mkdtemp(prefix="payoff.")
    record("dir", tmp)
    if o.selftest:
        img = tempfile.mkdtemp(prefix="payoff-img.")
        record("dir", img)
    else:
        img = o.img or os.path.join(ROOT, "out" if o.quick else os.path.join("docs", "img"))
    os.makedirs(img, exist_ok=True)
    plt = None if whats == ["recovery"] else pyplot("no" if o.selftest else "yes" if o.install_matplotlib
                                                     else "ask")  # (recovery draws no figure)
    out, ok = {}, True
    try:
        for w in whats:
            rows, info = {"speedup": speedup, "slowlink": slowlink, "memory": memory, "hooks": hooks,
                          "recovery": recovery}[w](o, z, tmp)
            out[w] = rows
            if w == "recovery":  # one object, no figure: docs/09_live.md has its table
                continue
            if plt and rows:
                draw(plt, w, rows, info, os.path.join(img, f"payoff_{w}.png"),
                     f"bench/payoff.py {w}{' --quick' if o.quick else ''}")
            elif not plt and w != "recovery":
                print("figures: matplotlib is missing (--install-matplotlib installs it): none drawn")
            if o.selftest and w not in ("hooks", "recovery"):
                ok &= check(rows, w, o, z)
    except Failed as e:
        sys.exit(f"payoff: a run failed: {e}")
    finally:
        cleanup()  # the temporary folders (the namespaces are gone already, unless a signal came)
    print(f"load average at the end: {cpu_ddp.uptime()}")
    if o.json:
        os.makedirs(os.path.dirname(os.path.abspath(o.json)), exist_ok=True)
        with open(o.json, "w") as f:
            json.dump({k: out.get(k, []) for k in FIELDS} | ({"recovery": out["recovery"]} if "recovery" in out
                                                            else {}), f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
