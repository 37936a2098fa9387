#!/usr/bin/env python3
"""Integration checks: run the real step programs and test what the course claims.

Each scenario is a function below; CTest runs `check.py SCENARIO` (see tests.cmake). A scenario
raises Failure with a sentence saying which claim broke; the process then exits 1.
Standard library only, so a fresh machine needs nothing beyond python3.
"""
import argparse
import fcntl
import functools
import hashlib
import json
import math
import os
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import uuid

BIN = os.environ.get("DDP_BIN_DIR", "build/bin")
MPIEXEC = os.environ.get("DDP_MPIEXEC", "mpiexec")
# The Fashion-MNIST folder the programs read by default: CTest passes the build's
# (DDP_FASHION_MNIST_DIR, from common/data.h); run by hand, the Debian package's folder.
FASHION = os.environ.get("DDP_FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")
SKIP = 77  # CTest's SKIP_RETURN_CODE
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAUNCH_SH = os.path.join(ROOT, "scripts", "launch.sh")
# How run() starts several ranks (check.py --launcher): "mpirun" (the MPI backend), "launch"
# (scripts/launch.sh: the Gloo backend, --backend auto's choice under an environment launch) or
# "torchrun" (the same, started by PyTorch's launcher).
LAUNCHER = "mpirun"

# The seed of every run (DDP_TEST_SEED; default 42, the programs' own default): the comparisons must
# hold for any seed, e.g. `DDP_TEST_SEED=7 ctest -L parity`.
SEED = os.environ.get("DDP_TEST_SEED", "42")

# Small and fast: a 784-64-10 MLP on 2,048 synthetic samples trains in well under a second per run.
SMALL = ["--device", "cpu", "--data", "synthetic", "--dataset_size", "2048", "--hidden", "64",
         "--lr", "0.05", "--momentum", "0.9", "--log_interval", "1000", "--save_interval", "0",
         "--seed", SEED]


# DDP_RUN_TIMEOUT=S: pass --timeout S to every run of a step that has a process group (02 on), so
# that a collective which some rank never reaches ends the job after S s instead of 300 (the exercise
# checker sets it; a hang is then reported with its likely cause, see HINTS).
RUN_TIMEOUT = os.environ.get("DDP_RUN_TIMEOUT")


def dist_args(step):
    """Extra flags for a run of `step`: --timeout from DDP_RUN_TIMEOUT (step 01 has no process group)."""
    return ["--timeout", RUN_TIMEOUT] if RUN_TIMEOUT and not step.startswith("01") else []


class Failure(Exception):
    pass


# SIGTERM (the exercise checker's time limit or Ctrl-C: `timeout` sends it to the whole process group,
# mpirun included): the program that runs now ends by itself, and a scenario stops once it has. Dying
# at once would let mpirun, on its next write to a closed pipe, die of SIGPIPE before removing its
# session folder and shared-memory files; and the scenario's folder would stay behind.
class Stopped(Exception):
    pass


TERMINATED = []


def on_term(signum, frame):
    TERMINATED.append(signum)


def stop_if_terminated():
    if TERMINATED:
        raise Stopped()


def small(base=None, **changes):
    """SMALL (or base, a list of the same shape) with some values changed, e.g. small(lr=0.1)."""
    out = list(SMALL if base is None else base)
    for k, v in changes.items():
        out[out.index(f"--{k}") + 1] = str(v)
    return out


# What a failed run's output most likely means, for the typical mistakes of the exercises: (text in
# stdout or stderr, the likely cause[, the steps it is about]). The first match for the failed run's
# step is added to the failure's sentence: one message of dist.c (e.g. "dist_wait: no all-reduce in
# flight") has a different cause in step 06's reducer than in step 08's fsdp.c. A cause may be a
# function of the output, which runs the learner's program again to tell two causes apart.
HINTS = [
    ("watchdog:", "the job hung and the watchdog ended it: likely a collective that only some ranks "
                  "reach (a dist_barrier or dist_all_reduce inside `if (rank == 0)`, or skipped on "
                  "some ranks), or that the ranks reach in a different order or number of times"),
    ('without calling "finalize"', "a rank ended without leaving the process group: call "
                                  "dist_destroy before the program ends (in cleanup)"),
    # step 08 (fsdp.c): the state machine's and dist.c's refusals, named after the FSDP mistake
    ("dist_all_gather_async: this handle is still in flight",
     "a layer's all-gather was started again while its previous one was never waited for: "
     "wait_for_unshard must dist_wait a GATHERING layer's gather (f->gather[f->gather_pass[l]][l]) before "
     "the layer runs on its buffer"),
    ("gathered buffer still holds", "a layer was gathered while the other layer of its buffer (l ± 2) was "
                                    "still gathered: prefetch only the layer that runs next (l + 1 in "
                                    "forward, l - 1 in backward), and reshard each layer when it is done"),
    ("a prefetch never waited for", "an all-gather was still pending when backward ended (a prefetch "
                                    "never waited for): no gather may be pending after backward: prefetch "
                                    "only a layer that runs next in the same pass (none after layer 0's "
                                    "backward); the next step's forward gathers layer 0 itself"),
    ("recv overlaps send but is not this rank's chunk", "the reduce-scatter receives, in place, outside "
     "this rank's own chunk of the send buffer: in fsdp.c rank r receives at g + r·f->shard[l] "
     "(f->pg->rank, not another rank's chunk)", ("08",)),
    ("recv overlaps send but is not this rank's chunk", lambda text: diagnose_zero_recv(), ("07",)),
    ("recv overlaps send but is not this rank's chunk", "the reduce-scatter receives, in place, outside this "
     "rank's own chunk of the send buffer, or its counts are not each rank's part of it: in fsdp.c rank r "
     "receives at g + r·f->shard[l]; in step 07's reducer.c at grads + rank·S + b->shard_offset, counts b->counts"),
    ("this handle is still in flight", "a layer's reduce-scatter was started again while its previous one was "
                                       "never waited for: in fsdp.c, fold_gradient must dist_wait each layer's "
                                       "reduce-scatter (f->reduce[l]) once per backward", ("08",)),
    ("this handle is still in flight", "an all-reduce was started on a bucket whose previous "
                                       "all-reduce was never waited for: reducer_finalize_backward must "
                                       "dist_wait every bucket, and each bucket is started once per step"),
    ("no all-reduce in flight on this handle", "dist_wait on a handle with no collective in flight: in fsdp.c, "
     "wait_for_unshard must dist_wait a layer's all-gather only while it is in flight (f->state[l] == "
     "FSDP_GATHERING): a layer already UNSHARDED (the last layer, kept from forward for backward) has none; "
     "and fold_gradient waits for each layer's reduce-scatter once", ("08",)),
    ("no all-reduce in flight on this handle", "dist_wait on a bucket that was not started, or was "
                                               "already waited for: wait for each bucket once, in "
                                               "reducer_finalize_backward"),
    ("buckets never became ready", "a bucket was never started: every tensor must be counted down in "
                                   "its bucket (mark_variable_ready) and every ready bucket started "
                                   "(mark_bucket_ready)"),
    # scripts/launch.sh's line for a rank that died of SIGSEGV (128 + 11): under an environment launch
    # (Gloo) the process group has no communicator and no device context until dist_connect, under
    # mpirun MPI needs neither: a program that never calls it crashes under launch.sh, not under mpirun
    ("a rank exited with status 139", "a rank crashed (segmentation fault) under scripts/launch.sh (the Gloo "
                                      "backend): if the same program passes under mpirun, dist_connect was "
                                      "never called (MPI works without it; Gloo gets its communicator, and "
                                      "every backend the device context, from dist_connect, after "
                                      "device_init); else an index out of range"),
    ("Segmentation fault", "a rank crashed (segmentation fault): e.g. a collective before dist_connect "
                           "gave the process group its device context, or an index out of range"),
]


def hint(text, step=None):
    """The likely cause of a failed run of `step` (a program's name, or None: any step) from its output."""
    for needle, cause, *steps in HINTS:
        if needle in text and (not steps or (step is not None and step[:2] in steps[0])):
            return cause(text) if callable(cause) else cause
    return None


def port_free(port):
    """Whether the rendezvous store could listen on port now: a bind with SO_REUSEADDR, as
    common/store.c's (the TIME_WAIT its own earlier connections leave on the port does not refuse it;
    a listener, or an outgoing connection's TIME_WAIT, does)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("", port))
            return True
        except OSError:
            return False


def ephemeral_ports():
    """The kernel's range for outgoing connections' local ports (and bind to port 0)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = (int(x) for x in f.read().split())
        return lo, hi
    except (OSError, ValueError):
        return 32768, 60999


PORT_LOCKS = []  # the reservations this process holds, until it exits
# One place for every test, whatever its TMPDIR (tests give the exercise checker TMPDIRs of their
# own, and check that nothing is left in them): /tmp, not tempfile's.
PORT_LOCK_DIR = "/tmp/ddp-in-c-ports"


def port_lock_dir():
    """PORT_LOCK_DIR, made if missing (where /tmp cannot be written: one in tempfile's folder)."""
    lock_dir = PORT_LOCK_DIR if os.access("/tmp", os.W_OK) else os.path.join(tempfile.gettempdir(), "ddp-in-c-ports")
    if not os.path.isdir(lock_dir):
        os.makedirs(lock_dir, exist_ok=True)
        os.chmod(lock_dir, 0o1777)  # every user's tests share it (ports are the machine's)
    return lock_dir


def lock_port_pair(p, wait=0.0):
    """Reserves ports p and p + 1 (p even) for this process by an exclusive lock on PORT_LOCK_DIR/p,
    waiting up to `wait` seconds for another test's reservation to end and for both ports to be free
    (port_free); True when reserved."""
    path = os.path.join(port_lock_dir(), str(p))
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:  # another user's file (their umask): flock needs only a read-only descriptor
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return False
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if port_free(p) and port_free(p + 1):
                PORT_LOCKS.append(fd)
                return True
            fcntl.flock(fd, fcntl.LOCK_UN)  # in use by something else: leave it
        except OSError:  # another test holds it
            pass
        if time.monotonic() >= deadline:
            os.close(fd)
            return False
        time.sleep(0.1)


def free_master_port():
    """A port p such that p and p + 1 are free (MASTER_PORT, and the bootstrap port after it: the
    Gloo store's), reserved for this test process. Launches of tests running at the same time must
    never get the same pair: MASTER_PORT itself stays unbound under launch.sh (only p + 1 listens),
    so asking the kernel for a free port (bind to 0) gave two tests the same p now and then, and one
    job's rank reached the other's store (CI failed so once). Each pair is an even p below the
    ephemeral range (where no outgoing connection takes p + 1 as its local port), held by an
    exclusive lock on a file named after it (lock_port_pair) for as long as this process lives."""
    lo, _ = ephemeral_ports()
    first, last = 20000, max(20002, lo - 2)
    rng = random.Random()
    for _ in range(400):
        p = rng.randrange(first, last, 2)
        if lock_port_pair(p):
            return p
    raise Failure(f"found no two free consecutive TCP ports for MASTER_PORT in {first}..{last}")


def env_launch_env():
    """This environment without the variables of an enclosing launch, with a fresh MASTER_PORT."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMPI_COMM_WORLD", "PMI", "PMIX", "SLURM", "TORCHELASTIC"))
           and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR")}
    env["MASTER_PORT"] = str(free_master_port())
    return env


# torchrun's agent looks at its workers every --monitor_interval seconds (5 by default): a launch
# whose ranks finish in one second took six. The tests' launches ask it every 0.2 s.
TORCHRUN_POLL = ["--monitor_interval", "0.2"]


@functools.lru_cache(maxsize=None)
def torchrun_works():
    """torchrun's path when `torchrun --help` runs (PyTorch imports), else None; asked once (it
    takes seconds: it imports torch)."""
    exe = shutil.which("torchrun")
    if not exe or subprocess.run([exe, "--help"], capture_output=True).returncode != 0:
        return None
    return exe


def torchrun_rendezvous():
    """torchrun's options for a one-node job: what --standalone sets (a c10d rendezvous that torchrun
    hosts itself, under a fresh id), at a port the kernel picks (localhost:0), as docs/workshop.md
    tells participants sharing a node. torch 1.13's --standalone always listens on port 29400, and a
    torchrun without it on 29500 (--master_port's default): two tests launching torchrun at once met
    there, and when the first job ended the other's agent lost its store ("The connection to the C10d
    store has failed"; CI failed so once, in matrix_torchrun_np3)."""
    return ["--rdzv_backend", "c10d", "--rdzv_endpoint", "localhost:0", "--nnodes", "1",
            "--rdzv_id", uuid.uuid4().hex]


def torchrun_cmd(np):
    """torchrun's command line for np ranks of a program, or None when PyTorch is not installed: the
    course's `torchrun --standalone --nproc_per_node N --no_python`, its rendezvous on a free port.
    --redirects 1 --tee 1: Debian's torch 1.13 on Python 3.11 crashes on the default "0" (its Std
    IntFlag has no member 0 to iterate); stdout still reaches the console, prefixed."""
    exe = torchrun_works()
    if not exe:
        return None
    return [exe, *torchrun_rendezvous(), "--nproc_per_node", str(np), *TORCHRUN_POLL, "--redirects", "1",
            "--tee", "1", "--log_dir", tempfile.mkdtemp(prefix="torchrun-logs-"), "--no_python"]


def launch(cmd, np, launcher=None):
    """(argv, env) that start np ranks of cmd under launcher (default: LAUNCHER)."""
    launcher = launcher or LAUNCHER
    if launcher == "mpirun":
        return [MPIEXEC, "-n", str(np)] + cmd, None
    if launcher == "launch":
        return [LAUNCH_SH, "-n", str(np)] + cmd, env_launch_env()
    tr = torchrun_cmd(np)
    if tr is None:
        raise Failure("torchrun is not installed (python3-torch)")
    return tr + cmd, env_launch_env()


# ---- the exercise checker's cache of reference runs ---------------------------------------------------
#
# DDP_REFERENCE_CACHE=DIR (set by tests/exercises/wrong_solutions.py and exercises/selftest.sh for one
# test): a successful run of a program of the main build (in the checker's bin/, a link out of it; the
# learner's program is never cached) is kept in DIR, and the same run again is replayed from there:
# its output and the files it wrote in the scenario's folder. "The same run" is the same program file
# (path, size, time), the same command line and rank count and launcher, the same environment of the
# programs, and the same files in the scenario's folder before it (path and content: a run that
# resumes the learner's checkpoint is another run). The programs are deterministic (the tests prove
# it bit for bit), so a replay is the run; it spares the checker's selftest running step 06 as the
# reference of step 07 or 08 once per typical wrong solution.
REF_CACHE = os.environ.get("DDP_REFERENCE_CACHE")
SCENARIO_TMP = None  # the scenario's folder (main())
PLACEHOLDER = "\0scenario\0"
CACHE_ENV_SKIP = ("DDP_BIN_DIR", "DDP_CHECK_TMPDIR", "DDP_REFERENCE_CACHE", "DDP_EXE_RECORD")


def tree_state(root):
    """{relative path: (size, mtime_ns)} of every file under root."""
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            path = os.path.join(d, f)
            try:
                st = os.stat(path)
            except OSError:
                continue
            out[os.path.relpath(path, root)] = (st.st_size, st.st_mtime_ns)
    return out


def cache_key(step, args, np, launcher):
    """The key of a run (see above), or None when it is not a main-build program's."""
    exe = os.path.join(BIN, step)
    if not REF_CACHE or not SCENARIO_TMP or not os.path.islink(exe):
        return None
    real = os.path.realpath(exe)
    st = os.stat(real)
    h = hashlib.sha256()
    env = sorted((k, v) for k, v in os.environ.items()
                 if k.startswith(("DDP_", "OPENBLAS", "OMP_", "OMPI_MCA", "GLOO", "NCCL"))
                 and k not in CACHE_ENV_SKIP)
    h.update(json.dumps([real, st.st_size, st.st_mtime_ns, step, np, launcher or LAUNCHER,
                         [a.replace(SCENARIO_TMP, PLACEHOLDER) for a in args], env]).encode())
    for rel in sorted(tree_state(SCENARIO_TMP)):
        h.update(rel.encode() + b"\0")
        with open(os.path.join(SCENARIO_TMP, rel), "rb") as f:
            h.update(hashlib.sha256(f.read()).digest())
    return h.hexdigest()


def cache_replay(key):
    """(stdout, stderr) of a kept run, its files copied into the scenario's folder; None if not kept."""
    entry = os.path.join(REF_CACHE, key)
    try:
        with open(os.path.join(entry, "run.json")) as f:
            kept = json.load(f)
    except (OSError, ValueError):
        return None
    for rel in kept["files"]:
        dst = os.path.join(SCENARIO_TMP, rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copyfile(os.path.join(entry, "files", rel), dst)
    return tuple(t.replace(PLACEHOLDER, SCENARIO_TMP) for t in (kept["stdout"], kept["stderr"]))


def cache_keep(key, before, out, err):
    """Keeps a successful run: its output and the files it wrote or changed in the scenario's folder."""
    after = tree_state(SCENARIO_TMP)
    files = [rel for rel, st in after.items() if before.get(rel) != st]
    entry = os.path.join(REF_CACHE, key)
    staging = tempfile.mkdtemp(dir=REF_CACHE)
    for rel in files:
        os.makedirs(os.path.dirname(os.path.join(staging, "files", rel)), exist_ok=True)
        shutil.copyfile(os.path.join(SCENARIO_TMP, rel), os.path.join(staging, "files", rel))
    with open(os.path.join(staging, "run.json"), "w") as f:
        json.dump({"files": files, "stdout": out.replace(SCENARIO_TMP, PLACEHOLDER),
                   "stderr": err.replace(SCENARIO_TMP, PLACEHOLDER)}, f)
    try:
        os.rename(staging, entry)  # whole or not at all
    except OSError:  # kept meanwhile by another run
        shutil.rmtree(staging, ignore_errors=True)


def run(step, args, np=1, expect_rc=0, tmp=None, launcher=None):
    """Runs build/bin/<step> (under LAUNCHER, or @p launcher, when np > 1); returns (stdout, stderr)."""
    key = cache_key(step, args, np, launcher) if expect_rc == 0 else None
    kept = cache_replay(key) if key else None
    if kept:
        return kept
    before = tree_state(SCENARIO_TMP) if key else None
    cmd = [os.path.join(BIN, step)] + list(args) + dist_args(step)
    env = None
    if np > 1:
        cmd, env = launch(cmd, np, launcher)
    stop_if_terminated()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp, env=env)
    stop_if_terminated()
    if key and p.returncode == 0:
        cache_keep(key, before, p.stdout, p.stderr)
    if expect_rc is not None and (p.returncode == 0) != (expect_rc == 0):
        cause = hint(p.stdout + p.stderr, step) if expect_rc == 0 else None
        first = f"likely cause: {cause}\n" if cause else ""
        watch = [l for l in p.stderr.splitlines() if "watchdog:" in l][:1]
        raise Failure(f"{first}{' '.join(cmd)} exited {p.returncode}, expected "
                      f"{'0' if expect_rc == 0 else 'non-zero'}\n" + (f"{watch[0]}\n" if watch else "") +
                      f"--- stdout\n{p.stdout}\n--- stderr\n{p.stderr}")
    if expect_rc not in (None, 0) and p.returncode != expect_rc:
        raise Failure(f"{' '.join(cmd)} exited {p.returncode}, expected {expect_rc}\n{p.stderr}")
    return p.stdout, p.stderr


def metrics(path):
    """Reads a metrics file into (steps, epochs, final)."""
    steps, epochs, final = [], [], None
    with open(path) as f:
        for line in f:
            o = json.loads(line)
            if o["type"] == "step":
                steps.append(o)
            elif o["type"] == "epoch":
                epochs.append(o)
            elif o["type"] == "final":
                final = o
    if final is None:
        raise Failure(f"{path} has no final object")
    return steps, epochs, final


# ---- step 01 ----------------------------------------------------------------------------------------

def step01_learns(tmp):
    """Step 01 on synthetic data: loss falls, test accuracy is far above chance, metrics complete."""
    m = os.path.join(tmp, "m.jsonl")
    run("01_single_gpu", SMALL + ["--epochs", "3", "--metrics", m])
    steps, epochs, final = metrics(m)
    per_epoch = 2048 // 128
    if len(steps) != 3 * per_epoch or [s["step"] for s in steps] != list(range(1, 3 * per_epoch + 1)):
        raise Failure(f"expected steps 1..{3 * per_epoch} in the metrics, got {len(steps)} step objects")
    if len(epochs) != 3:
        raise Failure(f"expected 3 epoch objects, got {len(epochs)}")
    first, last = steps[0]["loss"], epochs[-1]["train_loss"]
    if not last < 0.5 * first:
        raise Failure(f"loss did not decrease enough: first step {first:.4f}, last epoch {last:.4f}")
    if not epochs[-1]["test_acc"] > 0.5:
        raise Failure(f"test accuracy {epochs[-1]['test_acc']:.3f} after 3 epochs (chance is 0.1)")
    if final["world_size"] != 1 or final["steps"] != 3 * per_epoch or len(final["param_digest"]) != 16:
        raise Failure(f"bad final object {final}")


def step01_deterministic(tmp):
    """Two identical runs give bit-identical parameters; another seed gives different ones."""
    digests = []
    for i, seed in enumerate(["1", "1", "2"]):
        m = os.path.join(tmp, f"m{i}.jsonl")
        run("01_single_gpu", SMALL + ["--epochs", "1", "--seed", seed, "--metrics", m])
        digests.append(metrics(m)[2]["param_digest"])
    if digests[0] != digests[1]:
        raise Failure(f"same seed, different parameters: {digests[0]} vs {digests[1]}")
    if digests[0] == digests[2]:
        raise Failure("seeds 1 and 2 gave identical parameters")


def step01_resume(tmp):
    """2 epochs straight equal 1 epoch, a checkpoint, and a resumed second epoch (bit for bit)."""
    a, b = os.path.join(tmp, "a.jsonl"), os.path.join(tmp, "b.jsonl")
    ck = os.path.join(tmp, "ck")
    run("01_single_gpu", SMALL + ["--epochs", "2", "--metrics", a])
    run("01_single_gpu", SMALL + ["--epochs", "1", "--save_interval", "1", "--ckpt_dir", ck])
    run("01_single_gpu", SMALL + ["--epochs", "2", "--resume", os.path.join(ck, "checkpoint.bin"),
                                  "--metrics", b])
    sa, _, fa = metrics(a)
    sb, _, fb = metrics(b)
    if fa["param_digest"] != fb["param_digest"]:
        raise Failure(f"resumed run ends with {fb['param_digest']}, straight run {fa['param_digest']}")
    if [s["loss"] for s in sa[len(sa) - len(sb):]] != [s["loss"] for s in sb]:
        raise Failure("the resumed epoch's losses differ from the straight run's second epoch")


def step01_bad_input(tmp):
    """Bad flags exit 2 with a one-line reason; a missing dataset names the path and the fix."""
    cases = [
        (["--batch_size", "0"], "batch_size"),
        (["--batch_size", "abc"], "abc"),
        (["--epochs", "-1"], "epochs"),
        (["--device", "tpu"], "tpu"),
        (["--data", "cifar"], "cifar"),
        (["--hidden", "64,,3"], "hidden"),
        (["--no_such_flag"], "no_such_flag"),
        (["--backend", "mpi"], "backend"),
    ]
    for args, word in cases:
        _, err = run("01_single_gpu", ["--device", "cpu"] + args, expect_rc=2)
        if word not in err.splitlines()[0]:
            raise Failure(f"{args}: first stderr line does not mention '{word}': {err.splitlines()[0]!r}")
    missing = os.path.join(tmp, "nowhere")
    _, err = run("01_single_gpu", ["--device", "cpu", "--data_dir", missing], expect_rc=1)
    if missing not in err or "dataset-fashion-mnist" not in err or "synthetic" not in err:
        raise Failure(f"missing dataset message should name {missing} and how to get data: {err!r}")
    bad = os.path.join(tmp, "bad.bin")
    with open(bad, "wb") as f:
        f.write(b"not a checkpoint at all, just some bytes" * 4)
    _, err = run("01_single_gpu", SMALL + ["--resume", bad], expect_rc=1)
    if bad not in err:
        raise Failure(f"a bad checkpoint should be named in the error: {err!r}")


def step01_fashion_mnist(tmp):
    """Step 01 on a 4,096-sample Fashion-MNIST subset reaches > 70% test accuracy in 2 epochs."""
    if not os.path.exists(os.path.join(FASHION, "train-images-idx3-ubyte.gz")):
        print(f"skipped: {FASHION} not installed (apt-get install dataset-fashion-mnist)")
        return SKIP
    m = os.path.join(tmp, "m.jsonl")
    run("01_single_gpu", ["--device", "cpu", "--dataset_size", "4096", "--hidden", "128",
                          "--epochs", "2", "--save_interval", "0", "--metrics", m])
    _, epochs, _ = metrics(m)
    if not epochs[-1]["test_acc"] > 0.70:
        raise Failure(f"Fashion-MNIST subset: test accuracy {epochs[-1]['test_acc']:.3f} <= 0.70")


# ---- steps 02-05: the process group, the sampler, DDP, metrics and checkpoints ----------------------

def read_checkpoint(path):
    """Parses the checkpoint format of common/ckpt.h; returns (header dict, params as floats)."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"DDPCKPT\0":
        raise Failure(f"{path}: bad magic")
    hsize, epoch, _, step = struct.unpack_from("<IIIQ", data, 12)
    n_layers = struct.unpack_from("<I", data, 52)[0]
    sizes = struct.unpack_from(f"<{n_layers + 1}I", data, 56)
    n = sum(sizes[i] * sizes[i + 1] + sizes[i + 1] for i in range(n_layers))
    params = struct.unpack_from(f"<{n}f", data, hsize)
    epoch_step = struct.unpack_from("<I", data, 20)[0]
    return {"epoch": epoch, "epoch_step": epoch_step, "step": step, "sizes": sizes}, params


def digests(prefix, np):
    return [metrics(f"{prefix}{r}.jsonl")[2]["param_digest"] for r in range(np)]


def global_losses(prefix, np, step):
    """Per-step loss of the global batch: from step 05 every rank logs it; before, the mean of the
    ranks' local means (equal local batch sizes)."""
    per_rank = [[s["loss"] for s in metrics(f"{prefix}{r}.jsonl")[0]] for r in range(np)]
    if step >= 5:
        if any(p != per_rank[0] for p in per_rank):
            raise Failure("ranks logged different global losses: each rank logs its own loss; "
                          "all-reduce the step's loss (DIST_AVG) before it is logged")
        return per_rank[0]
    return [sum(v) / np for v in zip(*per_rank)]


def step02_redundant(tmp):
    """Step 02 at 2 ranks: every rank trains on all the data, bit-identical to step 01."""
    run("01_single_gpu", SMALL + ["--epochs", "1", "--metrics", f"{tmp}/a0.jsonl"])
    run("02_init", SMALL + ["--epochs", "1", "--metrics", f"{tmp}/b{{rank}}.jsonl"], np=2)
    for r in range(2):  # (before reading rank 0's file, which two ranks that both think they are 0 garble)
        if not os.path.exists(f"{tmp}/b{r}.jsonl"):
            raise Failure(f"rank {r}'s metrics file is missing: each rank writes --metrics with its own rank "
                          "in the name, so under mpirun every process must know its rank (t->rank = t->pg.rank)")
    want = digests(f"{tmp}/a", 1)[0]
    got = digests(f"{tmp}/b", 2)
    if got != [want, want]:
        raise Failure(f"step 02 ranks {got} differ from step 01 {want}")
    sizes = [metrics(f"{tmp}/b{r}.jsonl")[2]["world_size"] for r in range(2)]
    if sizes != [2, 2]:
        raise Failure(f"under mpirun -n 2 the ranks report world sizes {sizes}\nlikely cause: the world "
                      f"size is not taken from the process group (t->world_size = t->pg.world_size)")


def step03_drift(tmp):
    """Step 03: one rank is exactly step 01; with 2 ranks the unsynchronised replicas drift apart."""
    run("01_single_gpu", SMALL + ["--epochs", "1", "--metrics", f"{tmp}/a0.jsonl"])
    run("03_sampler", SMALL + ["--epochs", "1", "--metrics", f"{tmp}/b{{rank}}.jsonl"], np=1)
    if digests(f"{tmp}/b", 1) != digests(f"{tmp}/a", 1):
        raise Failure("step 03 with one rank differs from step 01: the sampler is not the baseline order")
    run("03_sampler", SMALL + ["--epochs", "1", "--metrics", f"{tmp}/c{{rank}}.jsonl"], np=2)
    d = digests(f"{tmp}/c", 2)
    if d[0] == d[1]:
        raise Failure(f"step 03 replicas are identical ({d[0]}) without gradient sync")


def tensor_slices(sizes):
    """(name, start, end) of each parameter tensor in the flat buffer: weight then bias, per layer."""
    out, at = [], 0
    for l in range(len(sizes) - 1):
        for kind, n in (("weight", sizes[l] * sizes[l + 1]), ("bias", sizes[l + 1])):
            out.append((f"layer {l}'s {kind}", at, at + n))
            at += n
    return out


def diagnose_replicas(tmp, step, np):
    """Why the replicas of a same-seed run differ. Every rank started from the same parameters, so
    after one optimizer step exactly the tensors whose gradients were not averaged differ. Step 04
    saves on every rank, so each rank gets a folder of its own (mpiexec's `:` syntax) and the ranks'
    checkpoints are compared tensor by tensor."""
    if not step.startswith("04"):
        return ("likely cause: every rank started from the same seed, so their updates differ: is every "
                "gradient tensor averaged on every rank, every step?")
    cmd = [MPIEXEC]
    for r in range(np):  # 128 samples per rank and batch 128: one step, then the epoch's checkpoint
        cmd += ([":"] if r else []) + ["-n", "1", os.path.join(BIN, step)] + small(dataset_size=128 * np) + [
            "--epochs", "1", "--save_interval", "1", "--ckpt_dir", f"{tmp}/one{r}"] + dist_args(step)
        os.makedirs(f"{tmp}/one{r}", exist_ok=True)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        return f"(a one-step run to find the tensors that differ failed: {p.stderr.strip()[-300:]})"
    head, p0 = read_checkpoint(f"{tmp}/one0/checkpoint.bin")
    others = [read_checkpoint(f"{tmp}/one{r}/checkpoint.bin")[1] for r in range(1, np)]
    differ = [name for name, a, b in tensor_slices(head["sizes"])
              if any(p0[a:b] != q[a:b] for q in others)]
    if not differ:
        return "(after one step the replicas are still identical: they part later)"
    return (f"likely cause: after one step the replicas differ in {', '.join(differ)} and agree "
            f"elsewhere: {'that gradient is' if len(differ) == 1 else 'those gradients are'} not "
            f"averaged over the ranks (average_gradients must all-reduce every layer's weight and bias)")


def replicas_identical(step, np):
    def scenario(tmp):
        run(step, SMALL + ["--epochs", "2", "--metrics", f"{tmp}/m{{rank}}.jsonl"], np=np)
        d = digests(f"{tmp}/m", np)
        if len(set(d)) != 1:
            raise Failure(f"{step} with {np} ranks: replicas differ: {d}\n{diagnose_replicas(tmp, step, np)}")
    scenario.__name__ = f"step{step[:2]}_replicas_np{np}"
    scenario.__doc__ = f"{step} at {np} ranks: every rank ends with bit-identical parameters."
    return scenario


# ---- parity: two right programs, two summation orders -------------------------------------------------
#
# Where two runs do the same float32 arithmetic in the same order (2 ranks: every sum of the gradient
# all-reduce has two terms, which any collective adds the same way; a resumed run against an
# uninterrupted one), the tests require bit equality. Where the order differs (one GEMM over the global
# batch against W local ones averaged; 3 or more ranks reduced by different collectives or backends;
# micro-batches accumulated; another BLAS kernel), the results differ by rounding, and training
# amplifies that difference: steps 06 and 07 at 4 ranks agree bit for bit for 20 steps, then part by
# 1.2e-7, 1.2e-6 and 2.1e-5 at steps 21, 25 and 29 (measured on the Haswell kernel), so no tolerance on
# a trajectory tells rounding from a bug on every machine. One step from the same state is not
# amplified, and its rounding has a bound. The error model:
#   Both programs resume the same checkpoint (parameters p, momentum m) and take one step on the same
#   global batch of N samples: g = (1/N)·sum_s t_s, m' = mu·m + g, p' = p - lr·m' (no weight decay in
#   these tests). A float32 sum of n terms computed in two orders differs by at most 2·gamma_n·sum|t|,
#   gamma_n = n·u / (1 - n·u), u = 2^-24 (Higham, Accuracy and Stability of Numerical Algorithms, 2nd
#   ed., §4.2), where n counts every addition on the way: the N samples, the W ranks, the K
#   micro-batches. The runs do not expose sum|t|; it is bounded by KAPPA·G, where G is the step's largest
#   gradient element (max|m' - mu·m| of the reference) and KAPPA = 64 the allowance for cancellation
#   between the samples' terms (and for the forward sums that feed them). So, element by element,
#     |dm'| <= 2·gamma_n·KAPPA·G + ulp(m')          the sums, then one rounding of mu·m + g
#     |dp'| <= lr·|dm'|·(1 + u) + ulp(p')           p - lr·m', rounded once
#     |dL|  <= 2·gamma_n·KAPPA·L                    the step's loss: N positive terms, and their logits
# With N = 128 and W <= 4 that is about 1e-3·G. A wrong program (a missing average, a wrong shard or
# offset, a bucket reduced twice) moves g by a sizeable fraction of G, hundreds of times the bound.
# Measured 2026-12-03 over DDP_TEST_SEED 0 to 9 (OpenBLAS's Zen kernel, this VM's own choice): the
# largest difference used 2.3 % of its bound in the parameters (where one ulp of p dominates), 0.06 % in
# the momentum and 0.013 % in the loss; a gradient summed without dividing by W used 1,000 times it.
#
# Every comparison takes its seed from DDP_TEST_SEED (default 42, the programs' own default) and its
# CTest test carries the label `parity`: `DDP_TEST_SEED=7 ctest -L parity`.
U = 2.0 ** -24
KAPPA = 64
# Steps in one epoch of 2,048 samples at a global batch of 128: a checkpoint saved there is resumed at
# any world size (inside an epoch only at the same one), so every comparison can start from it.
PARITY_K = 16


class Mismatch(Failure):
    """Two runs differ beyond the error model (not a run that failed); `side` is the one that differs."""
    def __init__(self, text, side=None):
        super().__init__(text)
        self.side = side


def epoch_steps(np, batch, samples=2048):
    """Optimizer steps in one epoch of `samples` at np ranks of `batch` (the sampler pads, no drop_last)."""
    return -(-(-(-samples // np)) // batch)


def gamma(n):
    return n * U / (1 - n * U)


def f32_ulp(x):
    """The spacing of float32 numbers at |x| (2^-149 below the normal range)."""
    x = abs(x)
    if x < 2.0 ** -126:
        return 2.0 ** -149
    return 2.0 ** (math.frexp(x)[1] - 24)


def flag(args, name, default=None):
    """The value of --name in an argument list (the last one given), else default."""
    at = [i for i, a in enumerate(args) if a == f"--{name}"]
    return args[at[-1] + 1] if at else default


def with_flag(args, name, value):
    """args with --name set to value (replaced where present, else appended)."""
    out = list(args)
    if f"--{name}" in out:
        out[out.index(f"--{name}") + 1] = str(value)
    else:
        out += [f"--{name}", str(value)]
    return out


def side_run(tmp, side, common, extra, tag):
    """Runs one side (program, ranks, its own flags, launcher) with the common flags and `extra`; its
    metrics go to tmp/tag{rank}.jsonl. Returns the metrics prefix."""
    program, np, own, launcher = side
    run(program, common + own + extra + ["--metrics", f"{tmp}/{tag}{{rank}}.jsonl"], np=np, launcher=launcher)
    return f"{tmp}/{tag}"


def side_name(side):
    program, np, own, launcher = side
    return f"{program} at {np} rank{'s' if np > 1 else ''}" + (f" {' '.join(own)}" if own else "") + (
        f" under {launcher}" if launcher else "")


def one_step_from(tmp, tag, ref, gots, common, start, step, n_terms):
    """ref and each side of `gots` resume checkpoint `start` (saved after `step` steps), take one step
    and save; each one's state and step loss must agree with ref's within the error model above.
    `start` None: ref's initial state (--save_init), step 0. Returns the largest ratios of a difference
    to its bound (loss, parameters, momentum)."""
    common = with_flag(with_flag(common, "save_interval", 1000), "max_steps", step + 1)
    out = []
    for i, side in enumerate([ref] + list(gots)):
        name = f"{tag}{i}"
        extra = ["--ckpt_dir", f"{tmp}/{name}"]
        if start is None and i == 0:  # from scratch: its initial state is the others' start
            extra += ["--save_init", f"{tmp}/{tag}init"]
        else:
            extra += ["--resume", start if start else f"{tmp}/{tag}init/checkpoint.bin"]
        prefix = side_run(tmp, side, common, extra, f"{name}_")
        np = side[1]
        if np > 1 and len(set(digests(prefix, np))) != 1:
            raise Failure(f"{side_name(side)}: the replicas differ after step {step + 1}: "
                          f"{digests(prefix, np)}")
        steps = metrics(f"{prefix}0.jsonl")[0]
        if not steps or steps[-1]["step"] != step + 1:
            raise Failure(f"{side_name(side)} resumed at step {step} did not log step {step + 1}")
        loss = global_losses(prefix, np, int(side[0][:2]))[-1]
        out.append((loss,) + ckpt_params_momentum(f"{tmp}/{name}/checkpoint.bin"))
    m0 = ckpt_params_momentum(start or f"{tmp}/{tag}init/checkpoint.bin")[1]
    lr, mu = float(flag(common, "lr")), float(flag(common, "momentum"))
    sizes = read_checkpoint(f"{tmp}/{tag}0/checkpoint.bin")[0]["sizes"]
    worst = {"loss": 0.0, "parameters": 0.0, "momentum": 0.0}
    for side, got in zip(gots, out[1:]):
        ratios, text = step_within_rounding(m0, out[0], got, lr, mu, n_terms, sizes)
        if text:
            raise Mismatch(
                f"one step from the same state (step {step} -> {step + 1}, seed {flag(common, 'seed')}): "
                f"{side_name(side)} differs from {side_name(ref)} beyond rounding: {text}", side)
        worst = {k: max(v, ratios[k]) for k, v in worst.items()}
    return worst


def step_within_rounding(m0, ref, got, lr, mu, n_terms, sizes):
    """The error model above, for one step from the same state (its momentum m0; the parameters are
    the same too) of two runs: ref and got are (step loss, parameters, momentum) after it. Returns
    ({"loss", "parameters", "momentum"}: the largest difference over its bound, and "" or a sentence
    saying where a difference is beyond its bound). Also scripts/gpu_compare.py's (GPU against CPU)."""
    la, pa, ma = ref
    lb, pb, mb = got
    G = max(abs(a - mu * b) for a, b in zip(ma, m0))
    dg = 2 * gamma(n_terms) * KAPPA * G
    mbound = [dg + f32_ulp(m) for m in ma]
    pbound = [lr * m * (1 + U) + f32_ulp(p) for p, m in zip(pa, mbound)]
    ratios = {"loss": abs(la - lb) / (2 * gamma(n_terms) * KAPPA * abs(la))}
    wm = max(range(len(ma)), key=lambda i: abs(ma[i] - mb[i]) / mbound[i])
    wp = max(range(len(pa)), key=lambda i: abs(pa[i] - pb[i]) / pbound[i])
    ratios["momentum"] = abs(ma[wm] - mb[wm]) / mbound[wm]
    ratios["parameters"] = abs(pa[wp] - pb[wp]) / pbound[wp]
    if max(ratios.values()) <= 1:
        return ratios, ""
    where = next(name for name, a, b in tensor_slices(sizes) if a <= wp < b)
    return ratios, (f"loss {la:.8g} vs {lb:.8g}; parameters at {where} {pa[wp]:.8g} vs {pb[wp]:.8g} (bound "
                    f"{pbound[wp]:.2g}); momentum {ma[wm]:.8g} vs {mb[wm]:.8g} (bound {mbound[wm]:.2g}); "
                    f"largest difference/bound {max(ratios.values()):.3g} (the error model is in "
                    "tests/integration/check.py)")


def one_step_parity(tmp, tag, ref, gots, common, n_terms, steps=(0, PARITY_K), diagnose=None):
    """The comparison of programs that compute the same training in other summation orders: from
    ref's state after each of `steps` steps, one step of each side of `gots` (one side, or a list) must
    agree with ref's within the error model above. On a failure, diagnose(side) (when given) adds the
    likely cause. Prints the worst ratios."""
    gots = [gots] if isinstance(gots, tuple) else list(gots)
    worst = {"loss": 0.0, "parameters": 0.0, "momentum": 0.0}
    for k in steps:
        start = None
        if k:
            side_run(tmp, ref, with_flag(with_flag(common, "save_interval", 1000), "max_steps", k),
                     ["--ckpt_dir", f"{tmp}/{tag}s{k}"], f"{tag}s{k}_")
            start = f"{tmp}/{tag}s{k}/checkpoint.bin"
        try:
            r = one_step_from(tmp, f"{tag}k{k}_", ref, gots, common, start, k, n_terms)
        except Mismatch as f:
            raise Mismatch(f"{f}\n{diagnose(f.side)}" if diagnose else str(f), f.side) from None
        worst = {key: max(v, r[key]) for key, v in worst.items()}
    print(f"{' and '.join(map(side_name, gots))} vs {side_name(ref)}, one step from steps "
          f"{', '.join(map(str, steps))}: difference/bound at most loss {worst['loss']:.2g}, parameters "
          f"{worst['parameters']:.2g}, momentum {worst['momentum']:.2g}")
    return worst


# The diagnoses below (not the proofs) sort a failure's likely cause; each candidate cause is checked one
# step from the same state within the error model above too, never on a trajectory. PARAM_TOL sorts the
# causes of steps 07's and 08's one-step differences (diagnose_zero_step, diagnose_fsdp_step).
PARAM_TOL = 1e-5


def one_step_scaled(tmp, tag, ref, got, common, n_terms, factor):
    """One step of `got` and one of `ref` at `factor` times the learning rate, both from ref's initial
    state (--save_init). SGD with momentum and no weight decay, from zero momentum, is linear in
    lr x gradient: a gradient `factor` times its mean moves the parameters as ref does at factor x lr,
    with factor times ref's momentum. factor is a power of two, so that factor x lr and factor x the
    momentum are exact. Returns (ref's loss, got's loss, whether got's step is ref's within the error
    model once ref's momentum is scaled by factor)."""
    common = with_flag(with_flag(common, "save_interval", 1000), "max_steps", 1)
    lr, mu = float(flag(common, "lr")), float(flag(common, "momentum"))
    init = f"{tmp}/{tag}init"
    out = []
    for i, (side, own, extra) in enumerate(((ref, with_flag(common, "lr", f"{lr * factor:.9g}"), ["--save_init", init]),
                                            (got, common, ["--resume", f"{init}/checkpoint.bin"]))):
        name = f"{tag}{i}"
        prefix = side_run(tmp, side, own, extra + ["--ckpt_dir", f"{tmp}/{name}"], f"{name}_")
        loss = global_losses(prefix, side[1], int(side[0][:2]))[-1]
        out.append((loss,) + ckpt_params_momentum(f"{tmp}/{name}/checkpoint.bin"))
    (la, pa, ma), got_state = out
    m0 = ckpt_params_momentum(f"{init}/checkpoint.bin")[1]
    sizes = read_checkpoint(f"{tmp}/{tag}0/checkpoint.bin")[0]["sizes"]
    _, text = step_within_rounding(m0, (la, pa, [factor * m for m in ma]), got_state, lr, mu, n_terms, sizes)
    return la, got_state[0], not text


def loss_within(la, lb, n_terms, scale=1):
    """Whether a step loss lb is scale x la within the error model's bound on the loss."""
    return abs(lb - scale * la) <= 2 * gamma(n_terms) * KAPPA * abs(scale * la)


def diagnose_losses(tmp, np, ref, got, common, n_terms):
    """The likely cause when `got` (np ranks) does not take the steps of `ref` (the same training with
    the global batch), each candidate checked one step from ref's initial state within the error
    model: a logged loss np times the reference's; gradients np times their mean over the ranks (then
    ref at np times the learning rate takes got's step) or 1/np of it."""
    la, lb, same = one_step_scaled(tmp, "d1_", ref, got, common, n_terms, 1)
    if loss_within(la, lb, n_terms, np):
        return (f"likely cause: the loss logged at {np} ranks is {np} times the reference's from the first "
                f"step ({lb:.4f} vs {la:.4f}): did you sum the loss without dividing by the world "
                f"size (DIST_SUM instead of DIST_AVG)?")
    if not loss_within(la, lb, n_terms):
        return (f"likely cause: already the first step's loss differs ({lb:.6f} vs {la:.6f}), "
                f"before any update: the logged loss is not the global batch's mean, or the replicas "
                f"did not start from the same parameters")
    if not same and one_step_scaled(tmp, "dw_", ref, got, common, n_terms, np)[2]:
        return (f"likely cause: the run trains exactly like the reference with {np} times the learning "
                f"rate: the gradients are {np} times their mean over the ranks: did you sum them "
                f"without dividing by the world size?")
    # Divided by W twice (averaged, and scaled by 1/W as well): the reference at lr / W.
    if not same and one_step_scaled(tmp, "dv_", ref, got, common, n_terms, 1 / np)[2]:
        return (f"likely cause: the run trains exactly like the reference with 1/{np} of the learning "
                f"rate: every step moved 1/{np} as far as it should: the gradients are divided by the "
                f"world size twice (e.g. averaged, DIST_AVG, after being divided by W already)")
    if same:
        return ("likely cause: the first step matches, a later one does not: the ranks do not apply the "
                "gradient of the global batch every step (is every gradient tensor averaged, every step?)")
    return ("likely cause: the first step's loss matches, its update does not: the ranks do not apply the "
            "gradient of the global batch (is every gradient tensor averaged, every step?)")


def matches_baseline(step, np):
    def scenario(tmp):
        B = 128 // np

        ref = ("01_single_gpu", 1, ["--batch_size", "128"], None)
        got = (step, np, ["--batch_size", str(B)], None)

        # W local batches of B averaged against one batch of W·B: the same samples (the sampler's
        # stride split of the baseline's permutation), summed in another order: the error model above.
        one_step_parity(tmp, "p", ref, got, SMALL + ["--epochs", "2"], 128 + np,
                        diagnose=lambda side: diagnose_losses(tmp, np, ref, got, SMALL + ["--epochs", "2"], 128 + np))
    scenario.__name__ = f"step{step[:2]}_matches_baseline_np{np}"
    scenario.__doc__ = (f"{step} at {np} ranks x batch {128 // np} takes step 01's steps at batch 128: one step "
                        "from the same state, at the start and after an epoch, agrees within float32 rounding.")
    return scenario


def diagnose_broadcast(tmp):
    """Rank 1 resumed another checkpoint than rank 0 ("mixed") or the same one ("same"). With both
    broadcasts, rank 1 logs exactly the same local losses in both runs. Its first loss is computed
    before any update, from the parameters alone; the momentum first acts on the first update."""
    mixed = [s["loss"] for s in metrics(f"{tmp}/04_ddp_wrap_mixed_1.jsonl")[0]]
    same = [s["loss"] for s in metrics(f"{tmp}/04_ddp_wrap_same_1.jsonl")[0]]
    if mixed[:1] != same[:1]:
        return ("likely cause: rank 1's first loss, computed before any update, comes from its own "
                "checkpoint's parameters: broadcast rank 0's parameters (t->model.params) after "
                "resume, before training")
    if mixed != same:
        return ("likely cause: the first step agrees, later ones do not: the parameters are broadcast, "
                "but rank 1 keeps its own checkpoint's momentum: broadcast the optimizer's momentum "
                "buffer (t->opt.buf) too")
    return "likely cause: rank 1 trains like rank 0 but ends elsewhere (is rank 0 the broadcast's root?)"


def step04_broadcast(tmp):
    """The course's "load, then wrap": two ranks resume from two different checkpoint files (same
    point, different parameters and momentum); step 04 broadcasts rank 0's state after loading, so its
    replicas end bit-identical to a run where both ranks loaded rank 0's file; step 03 does not."""
    for lr in ("0.05", "0.1"):  # two checkpoints after 1 epoch: same seed and step, other values
        run("01_single_gpu", SMALL + ["--epochs", "1", "--lr", lr, "--save_interval", "1",
                                      "--ckpt_dir", f"{tmp}/ck{lr}"])
    files = [f"{tmp}/ck0.05/checkpoint.bin", f"{tmp}/ck0.1/checkpoint.bin"]
    for step in ("03_sampler", "04_ddp_wrap"):
        for tag, ranks_files in (("mixed", files), ("same", files[:1] * 2)):
            cmd = [MPIEXEC]
            for r, ck in enumerate(ranks_files):
                cmd += (([":"] if r else []) + ["-n", "1", os.path.join(BIN, step)] + SMALL +
                        ["--epochs", "2", "--resume", ck, "--metrics", f"{tmp}/{step}_{tag}_{{rank}}.jsonl"]
                        + dist_args(step))
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            if p.returncode != 0:
                cause = hint(p.stderr, step)
                raise Failure((f"likely cause: {cause}\n" if cause else "") +
                              f"{' '.join(cmd)} failed:\n{p.stderr}")
    d3 = digests(f"{tmp}/03_sampler_mixed_", 2)
    d4, same = digests(f"{tmp}/04_ddp_wrap_mixed_", 2), digests(f"{tmp}/04_ddp_wrap_same_", 2)
    if d4[0] != d4[1]:
        raise Failure(f"step 04 resuming different checkpoints per rank: replicas differ {d4}\n"
                      f"{diagnose_broadcast(tmp)}")
    if d4 != same:
        raise Failure(f"step 04 did not continue from rank 0's checkpoint: {d4} vs {same}\n"
                      f"{diagnose_broadcast(tmp)}")
    if d3[0] == d3[1]:
        raise Failure("step 03 resuming different checkpoints per rank: replicas are identical")


def step05_resume(tmp):
    """Step 05 at 2 ranks: 2 epochs straight equal 1 epoch + resume (bit for bit); and a checkpoint
    resumes at an epoch boundary with another world size."""
    run("05_metrics_ckpt", SMALL + ["--epochs", "2", "--metrics", f"{tmp}/a{{rank}}.jsonl"], np=2)
    run("05_metrics_ckpt", SMALL + ["--epochs", "1", "--save_interval", "1", "--ckpt_dir", f"{tmp}/ck"],
        np=2)
    ck = f"{tmp}/ck/checkpoint.bin"
    run("05_metrics_ckpt", SMALL + ["--epochs", "2", "--resume", ck, "--metrics", f"{tmp}/b{{rank}}.jsonl"],
        np=2)
    a, b = digests(f"{tmp}/a", 2), digests(f"{tmp}/b", 2)
    if a != b:
        raise Failure(f"resumed run ends with {b}, the straight run with {a}")
    out, _ = run("05_metrics_ckpt", SMALL + ["--epochs", "2", "--resume", ck,
                                            "--metrics", f"{tmp}/c{{rank}}.jsonl"], np=3)
    steps, _, final = metrics(f"{tmp}/c0.jsonl")
    per_epoch_w3 = -(-(-(-2048 // 3)) // 128)  # ceil(ceil(2048 / 3) / 128)
    if final["steps"] != 8 + per_epoch_w3 or steps[0]["step"] != 9 or steps[0]["epoch"] != 1:
        raise Failure(f"resume at 3 ranks from a 2-rank checkpoint: steps {steps[0]} .. {final}")


def diagnose_eval(acc1, accw, W, n_test=2000):
    """The likely cause of an accuracy at W ranks that differs from one process's on the same
    parameters, from their ratio and difference (correct answers = accuracy x n_test)."""
    extra = round((accw - acc1) * n_test)
    if accw > 1 or abs(accw / acc1 - W) < 0.05 * W:
        return (f"likely cause: {accw / acc1:.2f} times the single process's accuracy: every test sample "
                f"was counted by every rank (each rank must evaluate only its shard, every W-th sample "
                f"from its rank on, before the counts are summed)")
    if abs(accw / acc1 - 1 / W) < 0.05 / W:
        return (f"likely cause: about 1/{W} of the single process's accuracy: each rank counted only its "
                f"own shard: sum the ranks' correct answers (dist_all_reduce of t->correct, DIST_SUM)")
    if 0 < extra < W:
        return (f"likely cause: {extra} more correct answer{'s' if extra > 1 else ''} than one process "
                f"counts: some test samples were counted twice; the evaluation shards must not be padded "
                f"(unlike the training sampler's): rank r takes r, r + W, ... below N, nothing more")
    return ("likely cause: the ranks' shards of the test set do not cover it exactly once (every W-th "
            "sample from the rank on), or the counts are not summed over the ranks")


def step05_eval_exact(tmp):
    """Step 05's sharded evaluation (3 ranks, 2000 test samples: not divisible) counts every test
    sample once: its accuracy equals step 01's on the same parameters."""
    run("01_single_gpu", SMALL + ["--epochs", "3", "--save_interval", "3", "--ckpt_dir", f"{tmp}/ck"])
    # A learning rate of 1e-30 leaves every parameter unchanged in float32 during the extra epoch, so
    # both programs evaluate exactly the checkpoint's parameters (the equal digests prove it).
    frozen = ["--epochs", "4", "--lr", "1e-30", "--resume", f"{tmp}/ck/checkpoint.bin"]
    run("01_single_gpu", SMALL + frozen + ["--metrics", f"{tmp}/a0.jsonl"])
    run("05_metrics_ckpt", SMALL + frozen + ["--metrics", f"{tmp}/b{{rank}}.jsonl"], np=3)
    _, ea, fa = metrics(f"{tmp}/a0.jsonl")
    _, eb, fb = metrics(f"{tmp}/b0.jsonl")
    if fa["param_digest"] != fb["param_digest"]:
        raise Failure("the frozen runs did not evaluate the same parameters")
    if ea[-1]["test_acc"] != eb[-1]["test_acc"]:
        raise Failure(f"test accuracy at 3 ranks {eb[-1]['test_acc']} != single process {ea[-1]['test_acc']}"
                      f"\n{diagnose_eval(ea[-1]['test_acc'], eb[-1]['test_acc'], 3)}")


def files_created_in(folder):
    """Starts watching the files created in `folder` (Linux inotify, IN_CREATE, through ctypes);
    returns a function that returns the names created so far, or None without inotify. The kernel
    queues the events until they are read, so nothing depends on timing."""
    import ctypes
    import ctypes.util
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fd = libc.inotify_init1(os.O_NONBLOCK)
    except (OSError, AttributeError):
        return None
    if fd < 0 or libc.inotify_add_watch(fd, folder.encode(), 0x100) < 0:  # IN_CREATE
        return None
    names = []

    def seen():
        while True:
            try:
                buf = os.read(fd, 65536)
            except BlockingIOError:
                return names
            at = 0
            while at < len(buf):  # struct inotify_event: wd, mask, cookie, len, name[len]
                _, _, _, n = struct.unpack_from("iIII", buf, at)
                names.append(buf[at + 16:at + 16 + n].rstrip(b"\0").decode())
                at += 16 + n
    return seen


def step05_one_writer(tmp):
    """Step 05 at 2 ranks: one process alone writes the checkpoints (the replicas are equal), each in
    the folder it is meant for (--save_init's initial state in its own folder, not --ckpt_dir's).
    A writer writes `checkpoint.bin.tmp.<its pid>`, then renames it (common/ckpt.c): one such name per
    writing process."""
    ck, init = f"{tmp}/ck", f"{tmp}/init"
    os.makedirs(ck)
    seen = files_created_in(ck)
    if seen is None:
        print("skipped: no inotify on this system")
        return SKIP
    out, _ = run("05_metrics_ckpt", SMALL + ["--epochs", "2", "--save_interval", "1", "--ckpt_dir", ck,
                                             "--save_init", init], np=2)
    writers = sorted({n for n in seen() if n.startswith("checkpoint.bin.tmp.")})
    if not os.path.exists(f"{init}/checkpoint.bin"):
        wrong = [l for l in out.splitlines() if l.startswith("saved ") and "step 0)" in l]
        raise Failure(f"--save_init {init} wrote nothing there" + (f" ({wrong[0]})" if wrong else "") +
                      "\nlikely cause: save_checkpoint ignores the folder it is given: it must write to its "
                      "`dir` argument (--save_init's folder or --ckpt_dir's, as the caller says), not "
                      "t->args.ckpt_dir")
    saves = out.count("saved ") - 1
    if saves != 2 or not os.path.exists(f"{ck}/checkpoint.bin"):
        raise Failure(f"expected 2 checkpoints (--epochs 2 --save_interval 1) besides --save_init's, rank 0 "
                      f"logged {saves}")
    if len(writers) != 1:
        raise Failure(f"{len(writers)} processes wrote the checkpoint ({', '.join(writers)})\nlikely cause: "
                      "every rank saves: the replicas are equal, so only rank 0 should write (`if (rank == 0)`), "
                      "and then every rank waits at a barrier")


def step05_fashion_mnist(tmp):
    """mpirun -np 2 step 05 on a Fashion-MNIST subset takes step 01's steps with the global batch (one step
    from the same state, at the start and after an epoch, within float32 rounding), and learns it."""
    if not os.path.exists(os.path.join(FASHION, "train-images-idx3-ubyte.gz")):
        print(f"skipped: {FASHION} not installed")
        return SKIP
    common = ["--device", "cpu", "--dataset_size", "8192", "--hidden", "128", "--epochs", "2",
              "--save_interval", "0", "--log_interval", "1000", "--lr", "0.05", "--momentum", "0.9",
              "--seed", SEED]
    # The proof (the error model, as matches_baseline on synthetic data): 2 x 64 against 128 samples.
    one_step_parity(tmp, "p", ("01_single_gpu", 1, ["--batch_size", "128"], None),
                    ("05_metrics_ckpt", 2, ["--batch_size", "64"], None), common, 128 + 2,
                    steps=(0, epoch_steps(2, 64, 8192)))
    # A sanity threshold on one run, far from any rounding (0.8131 and 0.8196 measured, seeds 1 and 42):
    # the real data are read, and the model learns them.
    run("05_metrics_ckpt", common + ["--batch_size", "64", "--metrics", f"{tmp}/b{{rank}}.jsonl"], np=2)
    acc = metrics(f"{tmp}/b0.jsonl")[1][-1]["test_acc"]
    if acc < 0.75:
        raise Failure(f"Fashion-MNIST: step 05 at 2 ranks reaches a test accuracy of {acc:.4f} after 2 epochs "
                      "(at least 0.75 expected)")
    print(f"Fashion-MNIST subset: step 05 at 2 ranks reaches {acc:.4f}")


def dist_bad_launch(tmp):
    """Inconsistent launcher variables, an impossible backend and a wrong-shape checkpoint each end
    every rank with a one-line reason, and nothing hangs."""
    def env_run(env, args, word):
        e = dict(os.environ, **env)
        for k in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"):
            e.pop(k, None)
        p = subprocess.run([os.path.join(BIN, "05_metrics_ckpt")] + SMALL + args, env=e,
                           capture_output=True, text=True, timeout=60)
        if p.returncode == 0 or word.lower() not in p.stderr.lower():
            raise Failure(f"{env} {args}: rc {p.returncode}, stderr {p.stderr!r} lacks '{word}'")
    env_run({"RANK": "2", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, [], "ranks run from 0 to 1")
    env_run({"RANK": "1"}, [], "WORLD_SIZE")
    env_run({"RANK": "x", "WORLD_SIZE": "2"}, [], "RANK='x'")
    env_run({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "127.0.0.1",
             "MASTER_PORT": "29500"}, ["--backend", "mpi"], "mpirun")
    # NCCL's bootstrap address (NCCL_COMM_ID) is built from MASTER_ADDR and MASTER_PORT before any
    # backend is chosen, so these are refused on the CPU too, on every rank, with the variable named.
    two = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "127.0.0.1"}
    env_run(dict(two, MASTER_PORT="abc"), [], "MASTER_PORT='abc' is not a TCP port")
    env_run(dict(two, MASTER_PORT="70000"), [], "MASTER_PORT='70000' is not a TCP port")
    env_run(dict(two, MASTER_PORT="65535"), [], "MASTER_PORT + 1, which is not a port")
    env_run(dict(two, MASTER_PORT="29500", DDP_NCCL_PORT="0"), [], "DDP_NCCL_PORT='0'")
    env_run(dict(two, MASTER_PORT="29500", MASTER_ADDR="127.0.0.1:29500"), [], "port in MASTER_PORT")
    env_run(dict(two, MASTER_PORT="29500", MASTER_ADDR="fe80::1::2"), [], "MASTER_ADDR='fe80::1::2'")
    # Several CPU ranks from an environment launch (srun without an MPI plugin, torchrun, launch.sh)
    # are told how CPU ranks are started, not to set NCCL's MASTER_ADDR and MASTER_PORT.
    for env in ({"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_LOCALID": "1"},
                {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"}):
        for word in ("srun --mpi=pmix -n 2", "mpirun -np 2"):
            env_run(env, [], word)
    # IPv6 literals, bare or in brackets, pass (and the run stops later, at --backend mpi)
    for addr in ("::1", "[::1]", "fe80::1%eth0"):
        env_run(dict(two, MASTER_PORT="29500", MASTER_ADDR=addr), ["--backend", "mpi"], "mpirun")
    env_run({}, ["--backend", "nccl"], "nccl")
    env_run({}, ["--device", "cuda", "--backend", "mpi"], "cuda")  # no GPU here, or no CUDA build
    run("05_metrics_ckpt", SMALL + ["--epochs", "1", "--save_interval", "1", "--ckpt_dir", f"{tmp}/ck"])
    _, err = run("05_metrics_ckpt", SMALL[:-4] + ["--hidden", "32", "--resume", f"{tmp}/ck/checkpoint.bin"],
                 np=2, expect_rc=1)
    if "784-64-10" not in err or "784-32-10" not in err:
        raise Failure(f"shape mismatch should name both shapes: {err!r}")
    _, err = run("05_metrics_ckpt", SMALL + ["--dataset_size", "3"], np=4, expect_rc=1)
    if "3 training samples for 4 ranks" not in err:
        raise Failure(f"N < W should be refused clearly: {err!r}")


# ---- step 06: the bucketed reducer -------------------------------------------------------------------

# PyTorch's first bucket fills to 1 MiB or more before it closes, so a model of under 1 MiB (SMALL) has
# one bucket at every cap. The bucket tests use 784-16-9728-10 (275,226 parameters, 1.05 MiB):
# bucket 0 is the last two layers (b2, W2, b1, W1: 1.002 MiB); after it, at 0.00005 MiB (52 bytes)
# b0 (64 bytes) and W0 have a bucket each, 3 buckets; at 25 MiB they share the last one, 2 buckets.
BUCKETED = small(hidden="16,9728")
CAPS = ["0.00005", "25"]  # MiB: 3 and 2 buckets


def bucket_replicas(tmp, step, np, args, batches, hint=""):
    """Runs `step` at np ranks for every bucket cap and for grad_accum 1 and 4 (batches: their
    --batch_size); the replicas must end bit-identical."""
    for cap in CAPS:
        for accum, batch in zip(("1", "4"), batches):
            tag = f"c{cap}_a{accum}_"
            run(step, args + ["--bucket_cap_mb", cap, "--grad_accum", accum, "--batch_size", batch,
                              "--metrics", f"{tmp}/{tag}{{rank}}.jsonl"], np=np)
            d = digests(f"{tmp}/{tag}", np)
            if len(set(d)) != 1:
                raise Failure(f"bucket cap {cap} MiB, grad_accum {accum}, {np} ranks: replicas differ {d}{hint}")


def step06_replicas(np):
    def scenario(tmp):
        bucket_replicas(tmp, "06_full", np, BUCKETED + ["--epochs", "2"], ("128", "32"))
    scenario.__name__ = f"step06_replicas_np{np}"
    scenario.__doc__ = (f"Step 06 at {np} ranks: bit-identical replicas for bucket caps {', '.join(CAPS)} "
                        "MiB and grad_accum 1 and 4.")
    return scenario


def step06_matches_step04(np):
    def scenario(tmp):
        def diagnose(side=("06_full", np, [], None)):
            frozen = diagnose_frozen(tmp, "06_full", np, BUCKETED + ["--epochs", "2"])
            if frozen:
                return frozen
            return diagnose_losses(tmp, np, ("04_ddp_wrap", np, [], None), side, BUCKETED + ["--epochs", "2"],
                                   128 * np + np).replace(
                "without dividing by the world size?",
                "without dividing by the world size? (the reducer sums: backward's scale must include 1/W)").replace(
                "after being divided by W already)",
                "after being divided by W already): the reducer sums (DIST_SUM), and backward's scale has 1/W "
                "once, not twice")

        if np > 2:
            # 3 or more terms: step 04's one all-reduce and step 06's buckets may add them in other
            # orders (the collective's algorithm depends on the message size), and step 06 divides by W
            # before the sum, step 04 after: rounding, bounded by the error model, one step at a time.
            one_step_parity(tmp, "p", ("04_ddp_wrap", np, [], None),
                            [("06_full", np, ["--bucket_cap_mb", cap], None) for cap in CAPS],
                            BUCKETED + ["--epochs", "2"], 128 * np + np, steps=(0, epoch_steps(np, 128)),
                            diagnose=diagnose)
            return
        run("04_ddp_wrap", BUCKETED + ["--epochs", "2", "--metrics", f"{tmp}/a{{rank}}.jsonl"], np=np)
        la = global_losses(f"{tmp}/a", np, 4)
        da = metrics(f"{tmp}/a0.jsonl")[2]["param_digest"]
        # step 05 logs the same global loss, all-reduced on the device as step 06 does
        run("05_metrics_ckpt", BUCKETED + ["--epochs", "2", "--metrics", f"{tmp}/c{{rank}}.jsonl"], np=np)
        lc = global_losses(f"{tmp}/c", np, 5)
        for cap in CAPS:
            run("06_full", BUCKETED + ["--epochs", "2", "--bucket_cap_mb", cap,
                                       "--metrics", f"{tmp}/b{{rank}}.jsonl"], np=np)
            lb = global_losses(f"{tmp}/b", np, 6)
            db = metrics(f"{tmp}/b0.jsonl")[2]["param_digest"]
            # At 2 ranks each gradient is one addition of two terms whatever the algorithm, and the
            # division by W = 2 is exact whether before (step 06) or after (step 04) the sum: the same
            # arithmetic, so the same bits.
            if db != da or lb != lc:
                raise Failure(f"bucket cap {cap}: parameters {db} (step 04: {da})"
                              + ("" if lb == lc else ", and the logged losses differ from step 05's")
                              + f": at 2 ranks step 06 must equal step 04 bit for bit\n"
                              + diagnose(("06_full", np, ["--bucket_cap_mb", cap], None)))
            print(f"cap {cap} MiB at 2 ranks: parameters identical to step 04's ({db}), losses to step 05's")
    scenario.__name__ = f"step06_matches_step04_np{np}"
    scenario.__doc__ = (f"Step 06 at {np} ranks trains like step 04 for every bucket cap"
                        + (": bit-identical parameters, and step 05's logged losses exactly." if np == 2 else
                           ": one step from the same state agrees within float32 rounding."))
    return scenario


def diagnose_frozen(tmp, step, np, args):
    """The likely cause when one step of `step` moves no parameter and leaves the momentum zero (every
    gradient reached the optimizer as 0: backward's scale is 0), else None."""
    args = with_flag(with_flag(args, "max_steps", 1), "save_interval", 1000)
    try:
        run(step, args + ["--save_init", f"{tmp}/frozen_init", "--ckpt_dir", f"{tmp}/frozen"], np=np)
    except Failure:
        return None
    p0, _ = ckpt_params_momentum(f"{tmp}/frozen_init/checkpoint.bin")
    p1, m1 = ckpt_params_momentum(f"{tmp}/frozen/checkpoint.bin")
    if p0 != p1 or any(m1):
        return None
    return ("likely cause: after one step no parameter moved and the momentum is all zero: every gradient "
            "reached the optimizer as 0, so backward's scale is 0: in train.c, b / B / t->world_size with int "
            "operands is an integer division (16 / 64 is 0 in C): make it a float division, (float)b / B / "
            "t->world_size")


# 2,000 samples at 2 ranks: 1,000 per rank, 15 steps of 64 and a last one of 40 per epoch, which
# --grad_accum 4 --batch_size 16 takes as micro-batches of 16, 16 and 8.
ACCUM_SAMPLES = 2000


def step06_grad_accum(tmp):
    """--grad_accum 4 with batch 16 trains like step 04 at batch 64 (2 ranks), a short last micro-batch too.
    One step from the same state, at the start and at an epoch's last step, whose last micro-batch is short
    (2,000 samples: 40 per rank, micro-batches of 16, 16 and 8), agrees within float32 rounding."""
    common = small(dataset_size=ACCUM_SAMPLES) + ["--epochs", "2"]
    # Step 04 (no accumulation, the gradient averaged after backward) is the reference: a scale that is
    # wrong for 06 at batch 64 as well (an integer division: 0) cannot pass by agreeing with itself.
    ref = ("04_ddp_wrap", 2, ["--batch_size", "64"], None)
    got = ("06_full", 2, ["--batch_size", "16", "--grad_accum", "4"], None)

    def diagnose():
        frozen = diagnose_frozen(tmp, "06_full", 2, common + got[2])
        if frozen:
            return f"grad_accum 4 x 16 vs batch 64\n{frozen}"
        full = SMALL + ["--epochs", "2"]  # 2,048 samples: every micro-batch full
        ref64 = ("06_full", 2, ["--batch_size", "64"], None)
        la, lb, same = one_step_scaled(tmp, "d1_", ref64, got, full, 128 + 2 + 4, 1)
        # K micro-batches whose gradients are not weighed by b/B add up to K times the mean: the run
        # then takes the step of batch 64 with K times the learning rate (one step from the same state).
        if not same and one_step_scaled(tmp, "d4_", ref64, got, full, 128 + 2 + 4, 4)[2]:
            cause = ("the 4 micro-batches' gradients add up to 4 times their mean (it trains like batch "
                     "64 with 4 times the learning rate): backward's scale lacks the micro-batch weight "
                     "b / B")
        elif not loss_within(la, lb, 128 + 2 + 4):
            cause = "already the first step's loss differs: the micro-batch losses are not weighed by b / B"
        else:
            cause = ("with accumulation the gradient is not the mean over the B samples: the scale of each "
                     "micro-batch's backward must be b / B / W, and only the last one is reduced")
        return f"grad_accum 4 x 16 vs 64\nlikely cause: {cause}"

    last = epoch_steps(2, 64, ACCUM_SAMPLES) - 1
    short = ACCUM_SAMPLES // 2 - last * 64  # the last step's samples per rank
    micro = [16] * (short // 16) + ([short % 16] if short % 16 else [])

    def diagnose_short():
        return (f"the steps whose micro-batches are all full agree; step {last + 1}, the epoch's last, whose last "
                f"micro-batch is short ({short} samples per rank: {' + '.join(map(str, micro))}), does not\nlikely "
                f"cause: each micro-batch's gradient must be weighed by its share of the step's samples, b / B "
                f"({', '.join(f'{b}/{short}' for b in micro)}), not by 1/K (1/{len(micro)} each: PyTorch's "
                f"(loss / K).backward() idiom, right only when every micro-batch is full): in train.c, scale = "
                f"(float)b / B / t->world_size")

    # 4 micro-batch gradients summed against one GEMM over 64 samples: the error model, with the 4
    # partial sums among its terms. First the start (full micro-batches), then the short last step.
    one_step_parity(tmp, "p", ref, got, common, 128 + 2 + 4, steps=(0,), diagnose=lambda side: diagnose())
    one_step_parity(tmp, "q", ref, got, common, 128 + 2 + 4, steps=(last,), diagnose=lambda side: diagnose_short())


def mpi_calls_library(tmp):
    """tests/integration/mpi_calls.c built into tmp (an LD_PRELOAD library that records the order of
    the MPI_Iallreduce, MPI_Test and MPI_Wait calls), or None when no C compiler builds it."""
    lib = f"{tmp}/mpi_calls.so"
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mpi_calls.c")
    try:
        p = subprocess.run([os.environ.get("CC", "cc"), "-shared", "-fPIC", "-O1", "-o", lib, src, "-ldl"],
                           capture_output=True, text=True, timeout=120)
    except OSError:
        return None
    return lib if p.returncode == 0 else None


def progress_during_backward(calls):
    """The steps, in one process's MPI call record (I, T, W: see mpi_calls.c), in which a started
    all-reduce was tested before the step's last one started: progress during backward."""
    steps = 0
    for step in re.findall(r"[IT]+", calls):  # a step's starts and tests, between its waits
        if re.search(r"T.*I", step):
            steps += 1
    return steps


def step06_trace(tmp):
    """--trace writes valid Chrome trace JSON with a span for every bucket and layer of every step;
    and the buckets started in a hook are tested (dist_test: MPI progresses them) before backward
    starts the last ones (the order of the MPI calls, seen through LD_PRELOAD)."""
    lib = mpi_calls_library(tmp)
    for model, cap, buckets, layers in ((BUCKETED, "0.00005", 3, 3), (SMALL, "25", 1, 2)):
        path = f"{tmp}/trace_{cap}_{{rank}}.json"
        calls = f"{tmp}/calls_{cap}"
        os.makedirs(calls)
        saved = {k: os.environ.get(k) for k in ("LD_PRELOAD", "DDP_MPI_CALLS")}
        if lib and cap == "0.00005":  # 3 buckets, started by 3 hooks
            os.environ.update(LD_PRELOAD=" ".join(filter(None, [saved["LD_PRELOAD"], lib])), DDP_MPI_CALLS=calls)
        try:
            out, _ = run("06_full", model + ["--epochs", "2", "--bucket_cap_mb", cap, "--trace", path], np=2)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        records = []
        for name in sorted(os.listdir(calls)):
            with open(os.path.join(calls, name)) as f:
                records.append(f.read())
        records = [r for r in records if "I" in r]  # the ranks (not mpiexec)
        if lib and cap == "0.00005":
            if len(records) != 2:
                print(f"note: the MPI calls of {len(records)} ranks were recorded, not 2: the dist_test "
                      "check was skipped")
            elif min(map(progress_during_backward, records)) == 0:
                raise Failure(
                    f"cap {cap}: no bucket's all-reduce was tested while backward still ran (on one rank, "
                    f"{records[0].count('I')} all-reduce starts, {records[0].count('T')} tests: none between "
                    "the starts of one step)\nlikely cause: reducer_autograd_hook does not dist_test the "
                    "buckets already started: on the MPI backend an asynchronous all-reduce advances only "
                    "inside MPI calls, so without it every bucket waits for reducer_finalize_backward and "
                    "nothing overlaps with backward (the numbers are right, the overlap is lost)")
        if f"reducer: {buckets} buckets" not in out:
            raise Failure(f"cap {cap}: expected {buckets} buckets: {out}")
        steps = 2 * 2048 // (2 * 128)
        for r in range(2):
            with open(path.replace("{rank}", str(r))) as f:
                events = json.load(f)["traceEvents"]
            spans = [e for e in events if e["ph"] == "X"]
            for step in range(steps):
                mine = [e for e in spans if e["args"]["step"] == step]
                ar = [e for e in mine if e["name"].startswith("all-reduce bucket")]
                bw = [e for e in mine if e["name"].startswith("backward layer")]
                if len(ar) != buckets or len(bw) != layers:
                    raise Failure(f"rank {r} step {step}: {len(ar)} bucket spans, {len(bw)} layer spans")
                if any(e["dur"] < 0 or e["pid"] != r for e in mine):
                    raise Failure(f"rank {r} step {step}: bad span {mine}")
                if min(e["ts"] for e in ar) < min(e["ts"] for e in bw):
                    raise Failure(f"rank {r} step {step}: an all-reduce started before backward")


def step06_overlap(tmp):
    """Overlap, from the trace: on 784-512x7-10 (eight layers, the first seven of 1 MiB each) at a
    0.001 MiB cap (13 buckets), buckets start in bucket order, bucket 0 before backward ends, and in
    enough steps a bucket all-reduce is seen complete before its rank's backward ends while a later
    layer's backward ran. The contrast, a cap above the model's size (100 MiB): PyTorch's rule still
    closes the first bucket at 1 MiB (b7, W7, b6, W6), and the second holds all the rest, ready only
    when backward ends: it is never seen complete before backward ends.

    Why it cannot pass by chance: a bucket span ends when dist_test or dist_wait saw the request
    complete, so an end before backward's end means the all-reduce was started in a hook and both
    ranks finished it while backward still ran. The span must also cover the start of a later
    layer's backward, which a reducer that waits inside the hook cannot produce (its spans end
    before the next layer starts), nor one that starts the buckets after backward (its spans start
    after every layer). The threshold, 6 of the 40 (rank, step) pairs, is far below what a loaded
    2-core VM gave (29 of 40 with six other jobs running, 2026-12-01): a rank's hooks call dist_test
    on every started bucket, and 12 of the 13 buckets are ready before the last layer."""
    deep = small(hidden="512,512,512,512,512,512,512") + ["--batch_size", "32", "--dataset_size", "4096"]
    pairs = good = 0
    for cap, want_buckets in (("0.001", 13), ("100", 2)):
        path = f"{tmp}/ov_{cap}_{{rank}}.json"
        out, _ = run("06_full", deep + ["--epochs", "1", "--max_steps", "20", "--bucket_cap_mb", cap,
                                        "--trace", path], np=2)
        if f"reducer: {want_buckets} buckets" not in out:
            raise Failure(f"cap {cap}: expected {want_buckets} buckets: {out}")
        early_total = 0
        for r in range(2):
            with open(path.replace("{rank}", str(r))) as f:
                spans = [e for e in json.load(f)["traceEvents"] if e["ph"] == "X"]
            for step in sorted({e["args"]["step"] for e in spans}):
                mine = [e for e in spans if e["args"]["step"] == step]
                layers = [e for e in mine if e["name"].startswith("backward layer")]
                bk = sorted((e for e in mine if e["name"].startswith("all-reduce bucket")),
                            key=lambda e: int(e["name"].split()[2].rstrip(":")))
                bw_end = max(e["ts"] + e["dur"] for e in layers)
                if len(bk) != want_buckets:
                    raise Failure(f"cap {cap}, rank {r} step {step}: {len(bk)} bucket spans")
                if any(a["ts"] > b["ts"] for a, b in zip(bk, bk[1:])):
                    raise Failure(f"cap {cap}, rank {r} step {step}: buckets did not start in bucket order: "
                                  f"{[(e['name'], e['ts']) for e in bk]}")
                early = [b for b in bk if b["ts"] + b["dur"] < bw_end]
                early_total += sum(b is not bk[0] for b in early)
                if cap == "0.001":
                    if bk[0]["ts"] >= bw_end:
                        raise Failure(f"rank {r} step {step}: bucket 0 (ready after layer 6) started only "
                                      "after backward ended")
                    pairs += 1
                    good += any(any(l["ts"] >= b["ts"] and b["ts"] + b["dur"] > l["ts"] for l in layers)
                                for b in early)
        if cap == "100" and early_total:
            raise Failure(f"cap 100 MiB: the last bucket was seen complete before backward ended in "
                          f"{early_total} (rank, step) pairs, though it is ready only at its end")
    print(f"{good} of {pairs} (rank, step) pairs saw a bucket all-reduce complete during backward")
    if good < 6:
        raise Failure(f"only {good} of {pairs} (rank, step) pairs saw a bucket all-reduce complete while "
                      "backward still ran (at least 6 expected): are the buckets started in the hooks and "
                      "tested (dist_test) there, without waiting?")


def launchers(tmp):
    """Step 06 starts under each launcher: scripts/launch.sh and torchrun (environment variables) at
    one rank, srun-style SLURM_* variables, and mpirun; the MPI backend refuses an environment
    launch of 2 ranks with a message that says to use mpirun, and launch.sh then stops both ranks."""
    args = SMALL + ["--epochs", "1"]
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMPI_COMM_WORLD", "PMI", "PMIX", "RANK", "WORLD_SIZE", "SLURM"))}
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    launch = os.path.join(root, "scripts", "launch.sh")
    prog = os.path.join(BIN, "06_full")

    def go(name, cmd, extra_env=None, ok=True):
        e = dict(env, **(extra_env or {}))
        p = subprocess.run(cmd, capture_output=True, text=True, env=e, timeout=120)
        if (p.returncode == 0) != ok:
            raise Failure(f"{name}: exit {p.returncode}\n{p.stdout}\n{p.stderr}")
        return p

    go("launch.sh -n 1", [launch, "-n", "1", prog] + args + ["--metrics", f"{tmp}/l{{rank}}.jsonl"])
    go("SLURM_* variables", [prog] + args + ["--metrics", f"{tmp}/s{{rank}}.jsonl"],
       {"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_LOCALID": "0"})
    run("06_full", args + ["--metrics", f"{tmp}/m{{rank}}.jsonl"], np=2)
    if not (metrics(f"{tmp}/l0.jsonl")[2]["world_size"] == metrics(f"{tmp}/s0.jsonl")[2]["world_size"] == 1
            and metrics(f"{tmp}/m0.jsonl")[2]["world_size"] == 2):
        raise Failure("the launchers did not give the expected world sizes")
    p = go("launch.sh -n 2 with the MPI backend", [launch, "-n", "2", prog] + args + ["--backend", "mpi"],
           ok=False)
    if "mpirun" not in p.stderr or "stopping the others" not in p.stderr:
        raise Failure(f"expected a hint to use mpirun and launch.sh stopping the ranks: {p.stderr!r}")
    torchrun = shutil.which("torchrun")
    if torchrun:
        # --redirects 2 --tee 1: Debian's torch 1.13 on Python 3.11 crashes on the default "0".
        p = go("torchrun", [torchrun, *torchrun_rendezvous(), "--nproc_per_node", "1", *TORCHRUN_POLL,
                            "--redirects", "2", "--tee", "1",
                            "--no_python", prog] + args + ["--metrics", f"{tmp}/t{{rank}}.jsonl"])
        if metrics(f"{tmp}/t0.jsonl")[2]["world_size"] != 1:
            raise Failure("torchrun: wrong world size")
    else:
        print("torchrun not installed: that launcher was not tried")


def rank_pid(tag, rank):
    """The pid of the MPI rank whose command line contains tag, or None."""
    for d in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                if tag.encode() not in f.read():
                    continue
            with open(f"/proc/{d}/environ", "rb") as f:
                if f"OMPI_COMM_WORLD_RANK={rank}".encode() in f.read().split(b"\0"):
                    return int(d)
        except OSError:
            continue
    return None


def watchdog_deadlock(tmp):
    """A rank that freezes mid-training (SIGSTOP) would leave its peer waiting in an all-reduce for
    ever; with --timeout 3 the peer's watchdog ends the whole job within 30 s, naming the wait.
    (Ranks started with different settings can no longer make a hang: the agreement check refuses
    them at start-up, so the peer is frozen instead.)"""
    tag = f"{tmp}/frozen_{{rank}}.jsonl"
    cmd = [MPIEXEC, "-n", "2", os.path.join(BIN, "06_full")] + SMALL + [
        "--epochs", "100000", "--timeout", "3", "--metrics", tag]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        t0 = time.time()
        while not os.path.exists(f"{tmp}/frozen_1.jsonl") or os.path.getsize(f"{tmp}/frozen_1.jsonl") == 0:
            if time.time() - t0 > 60 or p.poll() is not None:
                raise Failure("the job did not start training")
            time.sleep(0.05)
        pid = rank_pid(tag, 1)
        if pid is None:
            raise Failure("rank 1's process was not found")
        os.kill(pid, signal.SIGSTOP)
        t0 = time.time()
        try:
            _, err = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            raise Failure("the job still hangs 60 s after rank 1 froze")
        took = time.time() - t0
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
        p.wait()
    if p.returncode == 0 or took > 30 or "watchdog" not in err:
        raise Failure(f"exit {p.returncode} after {took:.1f} s; stderr: {err[-800:]!r}")
    print(f"ended {took:.1f} s after rank 1 froze: {[l for l in err.splitlines() if 'watchdog' in l][0]}")


def watchdog_startup(tmp):
    """A rank started with other Open MPI collective settings disagrees with its peer inside
    MPI_Comm_split_type at start-up, where both hung for ever at 100 % CPU: with --timeout 5 the
    watchdog ends the job within 60 s, naming the wait."""
    args = SMALL + ["--epochs", "1", "--timeout", "5"]
    prog = os.path.join(BIN, "06_full")
    cmd = [MPIEXEC, "-n", "1", prog] + args + [":", "-n", "1", "env",
                                               "OMPI_MCA_coll_libnbc_iallreduce_algorithm=2", prog] + args
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    t0 = time.time()
    try:
        _, err = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        raise Failure("the job still hangs after 60 s (--timeout 5)")
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
        p.wait()
    took = time.time() - t0
    if p.returncode == 0 or "watchdog: MPI_Comm_split_type has waited more than 5 s" not in err:
        raise Failure(f"exit {p.returncode} after {took:.1f} s; stderr: {err[-800:]!r}")
    print(f"ended after {took:.1f} s: {[l for l in err.splitlines() if 'watchdog' in l][0]}")


def step01_warnings(tmp):
    """A resume that has nothing left to train says so instead of ending in silence."""
    run("01_single_gpu", SMALL + ["--epochs", "1", "--save_interval", "1", "--ckpt_dir", f"{tmp}/ck"])
    out, _ = run("01_single_gpu", SMALL + ["--epochs", "1", "--resume", f"{tmp}/ck/checkpoint.bin"])
    if "nothing to train" not in out or "--epochs" not in out:
        raise Failure(f"a finished run resumed should warn that there is nothing to train: {out!r}")
    out, _ = run("01_single_gpu", SMALL + ["--epochs", "2", "--resume", f"{tmp}/ck/checkpoint.bin"])
    if "warning:" in out:
        raise Failure(f"a resume with an epoch left to train should not warn: {out!r}")


def save_init(tmp):
    """--save_init writes the initial state before the first step (the C form of torch.save before
    training): step 0, epoch 0, and the parameters the run starts from; at 2 ranks (step 05) the same
    file, written once, since rank 0's parameters are broadcast."""
    # A learning rate of 1e-30 leaves every parameter unchanged, so the epoch-1 checkpoint holds the
    # initial parameters too.
    run("01_single_gpu", SMALL + ["--epochs", "1", "--lr", "1e-30", "--save_interval", "1",
                                  "--ckpt_dir", f"{tmp}/ck", "--save_init", f"{tmp}/init1"])
    h0, p0 = read_checkpoint(f"{tmp}/init1/checkpoint.bin")
    h1, p1 = read_checkpoint(f"{tmp}/ck/checkpoint.bin")
    if (h0["epoch"], h0["step"]) != (0, 0) or h1["step"] == 0:
        raise Failure(f"--save_init wrote epoch {h0['epoch']}, step {h0['step']}: expected 0, 0")
    if p0 != p1:
        raise Failure("--save_init's parameters are not the ones training started from")
    run("05_metrics_ckpt", SMALL + ["--epochs", "1", "--save_init", f"{tmp}/init5"], np=2)
    h5, p5 = read_checkpoint(f"{tmp}/init5/checkpoint.bin")
    if (h5["epoch"], h5["step"]) != (0, 0) or p5 != p0:
        raise Failure("step 05's --save_init at 2 ranks does not hold the initial parameters")
    print(f"--save_init: step 0, {len(p0)} parameters equal to those training started from")


def max_steps_resume(step, np):
    def scenario(tmp):
        # 2048 samples, batch 128 at 1 rank (64 at 2): 16 steps an epoch; --max_steps 20 stops 4 steps
        # into epoch 2, saves there, and the resumed run must end exactly as the straight one.
        B = str(128 // np)
        common = SMALL + ["--batch_size", B, "--epochs", "2"]
        run(step, common + ["--metrics", f"{tmp}/a{{rank}}.jsonl"], np=np)
        out, _ = run(step, common + ["--max_steps", "20", "--save_interval", "1", "--ckpt_dir", f"{tmp}/ck"],
                     np=np)
        if "epoch 1, step 20" not in out:
            raise Failure(f"the --max_steps stop did not save a checkpoint 4 steps into epoch 2: {out!r}")
        hdr, _ = read_checkpoint(f"{tmp}/ck/checkpoint.bin")
        if (hdr["epoch"], hdr["step"]) != (1, 20):
            raise Failure(f"the mid-epoch checkpoint records epoch {hdr['epoch']}, step {hdr['step']}")
        run(step, common + ["--resume", f"{tmp}/ck/checkpoint.bin", "--metrics", f"{tmp}/b{{rank}}.jsonl"],
            np=np)
        sa, _, fa = metrics(f"{tmp}/a0.jsonl")
        sb, _, fb = metrics(f"{tmp}/b0.jsonl")
        if [s["step"] for s in sb] != list(range(21, 33)):
            raise Failure(f"the resumed run logged steps {[s['step'] for s in sb]}, expected 21..32")
        if [s["loss"] for s in sa[20:]] != [s["loss"] for s in sb]:
            raise Failure("the resumed steps' losses differ from the straight run's steps 21..32")
        if digests(f"{tmp}/a", np) != digests(f"{tmp}/b", np):
            raise Failure(f"resumed mid-epoch: {digests(f'{tmp}/b', np)}, straight: {digests(f'{tmp}/a', np)}")
        if np > 1:  # another world size would shard the rest of the epoch otherwise: refused
            _, err = run(step, SMALL + ["--epochs", "2", "--resume", f"{tmp}/ck/checkpoint.bin"], np=np + 1,
                         expect_rc=1)
            if f"at {np} ranks: resume it at {np} ranks" not in err:
                raise Failure(f"a mid-epoch checkpoint resumed at {np + 1} ranks should be refused: {err!r}")
        print(f"{step} at {np} ranks: stopped at step 20, resumed, steps 21..32 and parameters identical")
    scenario.__name__ = f"step{step[:2]}_max_steps_resume_np{np}"
    scenario.__doc__ = (f"{step} at {np} rank(s): a --max_steps stop inside an epoch saves a checkpoint that "
                        "resumes exactly" + (", and refuses another world size." if np > 1 else "."))
    return scenario


def max_steps_epoch_end(step, np):
    def scenario(tmp):
        # 2048 samples at 128 per step (64 per rank at 2 ranks): 16 steps an epoch. --max_steps 16 stops
        # exactly at the end of epoch 1, which --save_interval 2 would not save: the stop must.
        B = str(128 // np)
        out, _ = run(step, SMALL + ["--batch_size", B, "--epochs", "4", "--max_steps", "16", "--save_interval", "2",
                                    "--ckpt_dir", f"{tmp}/ck"], np=np)
        ck = f"{tmp}/ck/checkpoint.bin"
        if not os.path.exists(ck):
            raise Failure(f"{step}: a --max_steps stop at the end of epoch 1 with --save_interval 2 saved "
                          f"nothing:\n{out}")
        hdr, _ = read_checkpoint(ck)
        if (hdr["epoch"], hdr["step"]) != (1, 16):
            raise Failure(f"{step}: the stop's checkpoint records epoch {hdr['epoch']}, step {hdr['step']}")
        print(f"{step} at {np} rank(s): a --max_steps stop at an epoch's end saved epoch 1, step 16")
    scenario.__name__ = f"step{step[:2]}_max_steps_epoch_end_np{np}"
    scenario.__doc__ = (f"{step} at {np} rank(s): a --max_steps stop exactly at an epoch's end saves a "
                        "checkpoint even when --save_interval would skip that epoch.")
    return scenario


def mid_epoch_other_batch(step, np):
    def scenario(tmp):
        # 2048 samples at batch B x accumulation K per rank (128 samples per step at 1 rank, 64 at 2):
        # --max_steps 5 stops 5 steps into epoch 1. Resuming there with other samples per step would
        # skip or repeat samples: refused, naming the checkpoint's value and this run's.
        accum = step >= "06"  # --grad_accum exists from step 06 on
        B, K = (32 // np, 2) if accum else (128 // np, 1)
        flags = ["--batch_size", str(B)] + (["--grad_accum", str(K)] if accum else [])
        common = SMALL + ["--epochs", "2"]
        run(step, common + flags + ["--max_steps", "5", "--save_interval", "1", "--ckpt_dir", f"{tmp}/ck",
                                    "--metrics", f"{tmp}/s{{rank}}.jsonl"], np=np)
        ck = f"{tmp}/ck/checkpoint.bin"
        stopped = metrics(f"{tmp}/s0.jsonl")[1]
        if [(e["epoch"], e.get("partial")) for e in stopped] != [(0, True)]:
            raise Failure(f"{step}: the --max_steps stop's epoch record should be marked partial: {stopped}")
        have = f"at {B * K} samples per step per rank (batch {B} x {K})"
        hint = f"resume with --batch_size {B}" + (f" --grad_accum {K}" if accum else "")
        others = [["--batch_size", str(4 * B)], ["--batch_size", str(B // 2)]]
        if accum:
            others += [["--batch_size", str(B), "--grad_accum", str(4 * K)]]
        for other in others:
            b = int(other[1])
            k = int(other[3]) if len(other) > 2 else (K if accum else 1)
            args = other + (["--grad_accum", str(k)] if accum and len(other) == 2 else [])
            _, err = run(step, common + args + ["--resume", ck], np=np, expect_rc=1)
            want = f"stopped 5 steps into epoch 1 {have}; this run takes {b * k} (batch {b} x {k}): {hint}"
            if want not in err:
                raise Failure(f"{step}: a mid-epoch resume with {' '.join(args)} should be refused with "
                              f"{want!r}:\n{err}")
        if step >= "03":  # --drop_last exists from step 03 on: it changes the epoch's shards
            _, err = run(step, common + flags + ["--drop_last", "--resume", ck], np=np, expect_rc=1)
            if "with --drop_last off; this run has it on" not in err:
                raise Failure(f"{step}: a mid-epoch resume with another --drop_last should be refused:\n{err}")
        # The same flags still resume exactly: the digest of an uninterrupted run.
        run(step, common + flags + ["--metrics", f"{tmp}/a{{rank}}.jsonl"], np=np)
        run(step, common + flags + ["--resume", ck, "--metrics", f"{tmp}/b{{rank}}.jsonl"], np=np)
        resumed = metrics(f"{tmp}/b0.jsonl")[1]
        if [(e["epoch"], e.get("partial")) for e in resumed] != [(0, None), (1, None)]:
            raise Failure(f"{step}: the resumed run's epoch records should be whole epochs 0 and 1: {resumed}")
        if digests(f"{tmp}/a", np) != digests(f"{tmp}/b", np):
            raise Failure(f"{step}: resumed at step 5 with {' '.join(flags)}: {digests(f'{tmp}/b', np)}, "
                          f"uninterrupted: {digests(f'{tmp}/a', np)}")
        print(f"{step} at {np} rank(s): other samples per step refused mid-epoch, the same resumes exactly")
    scenario.__name__ = f"step{step[:2]}_mid_epoch_other_batch_np{np}"
    scenario.__doc__ = (f"{step} at {np} rank(s): a checkpoint saved inside an epoch refuses another "
                        "--batch_size or --grad_accum, naming both values, and resumes exactly with the same.")
    return scenario


def proc_children(pid, prog):
    """The processes whose parent is pid and whose command line runs prog (from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().split(b"\0")[0].decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # state, ppid, ...
        if int(fields[1]) == pid and cmd == prog:
            found.append(int(entry))
    return found


def proc_running(pid, prog):
    """True when pid still runs prog (not ended, not a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().split(b"\0")[0].decode(errors="replace")
    except OSError:
        return False
    return cmd == prog and stat[stat.rindex(")") + 2] != "Z"


def launcher_signal(tmp):
    """scripts/launch.sh forwards SIGTERM, SIGINT and SIGHUP: when the launcher gets one, every rank
    ends, none is left running, and the launcher exits non-zero (128 + the signal's number); -n takes
    only a decimal number without leading zeros."""
    import signal
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    launch = os.path.join(root, "scripts", "launch.sh")
    # Step 01 has no process group: two copies run side by side, each long enough to be interrupted.
    prog = os.path.abspath(os.path.join(BIN, "01_single_gpu"))
    args = SMALL + ["--epochs", "1000000", "--dataset_size", "256", "--hidden", "16"]
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMPI_COMM_WORLD", "PMI", "PMIX", "RANK", "WORLD_SIZE", "SLURM"))}
    # -n is decimal without leading zeros: "00" and "08" once started nothing and exited 0, "010"
    # started 8 ranks as WORLD_SIZE=010. Each is refused with status 2, and nothing starts.
    for n in ("00", "08", "010", "0", "-2", "2x"):
        marker = os.path.join(tmp, "started")
        p = subprocess.run([launch, "-n", n, "touch", marker], capture_output=True, text=True, env=env, timeout=60)
        if p.returncode != 2 or "-n needs a positive decimal number" not in p.stderr or os.path.exists(marker):
            raise Failure(f"launch.sh -n {n}: exit {p.returncode}, started {os.path.exists(marker)}: {p.stderr!r}")
    # SIGHUP (the terminal closed) once left the ranks running with parent 1.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        p = subprocess.Popen([launch, "-n", "2", prog] + args, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True, env=env, cwd=tmp, start_new_session=True)
        ranks = []
        try:
            for _ in range(600):  # up to 60 s for both ranks to start
                ranks = proc_children(p.pid, prog)
                if len(ranks) == 2 or p.poll() is not None:
                    break
                time.sleep(0.1)
            if len(ranks) != 2:
                raise Failure(f"launch.sh did not start 2 ranks (found {ranks}, exit {p.poll()})")
            os.kill(p.pid, sig)
            try:
                rc = p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                raise Failure(f"{sig.name}: launch.sh did not exit within 60 s")
            left = [r for r in ranks if proc_running(r, prog)]
            if left:
                raise Failure(f"{sig.name}: launch.sh exited {rc} but ranks {left} still run")
            if rc == 0:
                raise Failure(f"{sig.name}: launch.sh exited 0 after it was interrupted")
            err = p.stderr.read()
            print(f"{sig.name}: launch.sh exited {rc}, both ranks ended: {err.strip().splitlines()[-1:]}")
        finally:
            for r in ranks:  # whatever happened, leave nothing running
                if proc_running(r, prog):
                    os.kill(r, signal.SIGKILL)
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


# ---- step 07: ZeRO stage 1 ----------------------------------------------------------------------------

# --hidden 63: 50,095 parameters, a multiple of none of 2, 3 and 4, so the last shard is padded.
ZERO = small(hidden=63)
# The bucket tests' model (see BUCKETED): 784-15-10112-10, 274,697 parameters, a multiple of none of
# 2, 3 and 4 either; 3 buckets at 0.00005 MiB, 2 at 25 MiB. At 3 and 4 ranks its trajectories part
# by rounding (06 and 07 sum three terms in two orders), so they are compared one step at a time (the
# error model under "parity").
ZERO_BUCKETED = small(hidden="15,10112", lr=0.01)

# A model whose 2 buckets are exactly the 2 ranks' shards (784-444-766-10: 697,080 parameters, S =
# 348,540; bucket 0, from the last layer back to layer 1's weight, is 348,540 floats, past the first 1 MiB
# limit: it closes at layer 1's weight, where shard 1 starts; bucket 1 is the rest): each bucket lies in
# one rank's shard from its start, so b->shard_offset is 0, and the receive pointer of every typical
# mistake (grads + b->offset, + b->shard_offset, + rank·S) is the right one; the counts are [0, S] and
# [S, 0], not equal shares.
ZERO_ALIGNED = small(dataset_size=512, hidden="444,766") + ["--batch_size", "64", "--epochs", "1", "--max_steps", "2",
                                                            "--bucket_cap_mb", "25"]


def diagnose_zero_recv():
    """Step 07's reduce-scatter was refused (recv overlaps send, not this rank's chunk of it): its
    receive pointer, or its counts? On ZERO_ALIGNED the pointer of every typical mistake is right, the
    counts must still be each rank's part of the bucket."""
    _, err = run("07_zero", ZERO_ALIGNED, np=2, expect_rc=None)
    if "recv overlaps send but is not this rank's chunk" in err:
        return ("in reducer.c the counts are not each rank's part of the bucket: on a model whose 2 buckets are "
                "exactly the 2 shards (each bucket's counts [0, S] or [S, 0]; the receive pointer is the start of "
                "this rank's shard whatever its form), the reduce-scatter was still refused: the counts must be "
                "b->counts (dist_shard_counts: how many of the bucket's floats lie in each rank's shard, uneven, "
                "often 0), not an equal share such as b->count / W")
    if "recv overlaps send" not in err and "error:" not in err:
        return ("in reducer.c the receive pointer is not this rank's part of the bucket: it must be where that "
                "part lies in the flat gradient buffer, grads + rank·S + b->shard_offset (r->pg->rank · r->shard "
                "floats in, then b->shard_offset), with the counts b->counts (on a model whose buckets are exactly "
                "the shards, where b->shard_offset is 0 and every bucket starts a shard, it works)")
    return ("the reduce-scatter receives, in place, outside this rank's own chunk of the send buffer: in step 07's "
            "reducer.c the receive pointer must be grads + rank·S + b->shard_offset and the counts b->counts")


def ckpt_params_momentum(path):
    """(params, momentum) of a checkpoint, as float lists (the momentum follows the parameters)."""
    hdr, params = read_checkpoint(path)
    with open(path, "rb") as f:
        data = f.read()
    hsize = struct.unpack_from("<I", data, 12)[0]
    n = len(params)
    return params, struct.unpack_from(f"<{n}f", data, hsize + 4 * n)


def rel_diff(pa, pb):
    """max |a - b| over max |a|: how far two parameter vectors are apart."""
    return max(abs(x - y) for x, y in zip(pa, pb)) / max(abs(x) for x in pa)


def ckpt_optim_steps(path):
    """The optimizer steps a checkpoint says were taken (header offset 48; docs/formats.md)."""
    with open(path, "rb") as f:
        return struct.unpack_from("<I", f.read(52), 48)[0]


def listed(names):
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def diagnose_zero_step(tmp, np, cap, model=ZERO):
    """Why step 07 does not train like step 06: one optimizer step of each from the same start (np ranks,
    --bucket_cap_mb cap), compared with the start and with each other. After one step exactly the
    parameters whose update went wrong differ (every gradient is computed from the same parameters),
    so where they differ (which tensors, which ranks' shards) points at the mistake."""
    one = model + ["--batch_size", "64", "--epochs", "1", "--max_steps", "1", "--save_interval", "1",
                  "--bucket_cap_mb", cap]
    try:
        run("06_full", one + ["--ckpt_dir", f"{tmp}/one06", "--save_init", f"{tmp}/init"], np=np)
        run("07_zero", one + ["--ckpt_dir", f"{tmp}/one07"], np=np)
    except Failure as e:
        return f"(a one-step run to find where the parameters differ failed: {str(e).splitlines()[0][:300]})"
    hdr, p0 = read_checkpoint(f"{tmp}/init/checkpoint.bin")
    p6, _ = ckpt_params_momentum(f"{tmp}/one06/checkpoint.bin")
    p7, m7 = ckpt_params_momentum(f"{tmp}/one07/checkpoint.bin")
    if ckpt_optim_steps(f"{tmp}/one07/checkpoint.bin") == 0:
        return ("likely cause: step 07 takes no optimizer step (its checkpoint counts none): every step, "
                "each rank must update its shard of the parameters (sgd_step on my_shard(t, t->model.params) "
                "with my_shard(t, t->model.grads)), then all-gather the shards")
    tol = PARAM_TOL * max(abs(x) for x in p6)
    n, S = len(p6), -(-len(p6) // np)
    bad = [i for i in range(n) if abs(p6[i] - p7[i]) > tol]
    if not bad:
        return "(after one step step 07 still agrees with step 06: they part later)"
    d6, d7 = [a - b for a, b in zip(p6, p0)], [a - b for a, b in zip(p7, p0)]
    ratio = sum(a * b for a, b in zip(d6, d7)) / max(sum(a * a for a in d6), 1e-30)
    if abs(ratio - 1 / np) < 1e-3 / np and all(abs(b - a / np) <= tol for a, b in zip(d6, d7)):
        return (f"likely cause: after one step every parameter has moved 1/{np} as far as step 06's: the mean "
                f"gradient is divided by the world size twice: backward already scales the loss by 1/W, so the "
                f"reduce-scatter must sum (DIST_SUM), not average")
    if all(abs(a - b) <= tol for a, b in zip(p7, p0)) and not any(m7):
        return ("likely cause: after one step no parameter has moved and the momentum is zero: the optimizer "
                "stepped with a zero gradient: sgd_step must read this rank's shard of the mean gradient, "
                "my_shard(t, t->model.grads), where the reduce-scatter (dist_reduce_scatter_async, in place) "
                "leaves each bucket's part for this rank")
    if bad[0] >= S and all(abs(p7[i] - p0[i]) <= tol for i in range(S, n)):
        return (f"likely cause: after one step rank 0's parameters have moved in only its own shard [0, {S}), "
                f"as step 06's did there, and nowhere else: the other ranks' updates never reached rank 0: each "
                f"rank must update its own shard (my_shard(t, t->model.params), not the start of the buffer), "
                f"then all the ranks all-gather the updated shards in place (dist_all_gather, after sgd_step)")
    shards = sorted({i // S for i in bad})
    tensors = [name for name, a, b in tensor_slices(hdr["sizes"]) if any(a <= i < b for i in bad)]
    plural = "s" if len(shards) > 1 else ""
    where = (f"after one step (bucket cap {cap} MiB) step 07's parameters differ from step 06's in "
             f"{listed(tensors)}, in the shard{plural} of rank{plural} {listed([str(j) for j in shards])}")
    if len(tensors) == len(tensor_slices(hdr["sizes"])) and len(shards) == np:
        return (f"likely cause: after one step (bucket cap {cap} MiB) step 07's parameters differ from step "
                f"06's in every tensor and in every rank's shard: the update does not get the mean gradient: "
                f"sgd_step must read this rank's shard of the mean gradient, my_shard(t, t->model.grads) (after "
                f"the reduce-scatter the rest of the gradient buffer is scratch), and update "
                f"my_shard(t, t->model.params)")
    still = "; where they differ, step 07 has not moved them" if all(abs(p7[i] - p0[i]) <= tol for i in bad) else ""
    return (f"likely cause: {where}, and agree elsewhere{still}: the update does not read the mean gradient "
            f"there: rank j receives its b->counts[j] floats of a bucket in place, at r->model->grads + j·S + "
            f"b->shard_offset (the start of its shard, plus where the bucket meets it), and sgd_step must read "
            f"that shard, my_shard(t, t->model.grads), not the start of the gradient buffer")


def diagnose_momentum(m_ref, m_got, np):
    """Why the momentum saved by step 07 differs from step 06's (same training, np ranks): compares the
    file's W shards of S floats with the reference's, exactly (at 2 ranks the two steps are equal)."""
    n = len(m_ref)
    S = -(-n // np)
    ref = [tuple(m_ref[j * S:(j + 1) * S]) for j in range(np)]
    got = [tuple(m_got[j * S:(j + 1) * S]) for j in range(np)]
    right = [j for j in range(np) if got[j] == ref[j]]
    moved = [j for j in range(np) if got[j] != ref[j] and got[j] in ref]
    if moved:
        return (f"likely cause: the saved momentum holds another rank's shard at shard{'s' if len(moved) > 1 else ''} "
                f"{listed([str(j) for j in moved])}: rank j's momentum shard belongs at full.buf + j·S, the place "
                "from which the in-place all-gather sends it")
    if not right:
        return ("likely cause: no part of the saved momentum is a rank's momentum shard (is it the gradient "
                "buffer as the last reduce-scatter left it?): each rank must copy its momentum shard "
                "(t->opt.buf, t->shard floats) to its place in full.buf (my_shard), then all-gather in place, "
                "before rank 0 writes")
    return (f"likely cause: the saved momentum is right in the shard{'s' if len(right) > 1 else ''} of "
            f"rank{'s' if len(right) > 1 else ''} {listed([str(j) for j in right])} only: every rank must copy its "
            "momentum shard (t->opt.buf) to its place in full.buf (my_shard) before the in-place all-gather")


def step07_replicas(np):
    def scenario(tmp):
        bucket_replicas(tmp, "07_zero", np, ZERO_BUCKETED + ["--epochs", "1"], ("32", "8"),
                        " (is every updated shard all-gathered into every rank's parameters?)")
    scenario.__name__ = f"step07_replicas_np{np}"
    scenario.__doc__ = (f"Step 07 at {np} ranks: bit-identical replicas for bucket caps {', '.join(CAPS)} MiB "
                        "and grad_accum 1 and 4, with a parameter count that is not a multiple of the ranks.")
    return scenario


def step07_matches_step06(np):
    def scenario(tmp):
        if np > 2:
            # 3 or more terms: step 06's all-reduce and step 07's reduce-scatter add them in other
            # orders: rounding, bounded by the error model, one step at a time.
            one_step_parity(tmp, "p", ("06_full", np, [], None),
                            [("07_zero", np, ["--bucket_cap_mb", cap], None) for cap in CAPS],
                            ZERO_BUCKETED + ["--batch_size", "64", "--epochs", "2"], 64 * np + np,
                            steps=(0, epoch_steps(np, 64)),
                            diagnose=lambda side: diagnose_zero_step(tmp, np, side[2][1], ZERO_BUCKETED))
            return
        common = ZERO_BUCKETED + ["--batch_size", "64", "--epochs", "2", "--save_interval", "2"]
        run("06_full", common + ["--ckpt_dir", f"{tmp}/a", "--metrics", f"{tmp}/a{{rank}}.jsonl"], np=np)
        la = global_losses(f"{tmp}/a", np, 6)
        pa, ma = ckpt_params_momentum(f"{tmp}/a/checkpoint.bin")
        for cap in CAPS:
            run("07_zero", common + ["--bucket_cap_mb", cap, "--ckpt_dir", f"{tmp}/b",
                                     "--metrics", f"{tmp}/b{{rank}}.jsonl"], np=np)
            lb = global_losses(f"{tmp}/b", np, 7)
            pb, mb = ckpt_params_momentum(f"{tmp}/b/checkpoint.bin")
            # At 2 ranks each sum has two terms whatever the collective (a reduce-scatter's chunk or an
            # all-reduce's element): the same arithmetic, so 07 must be 06 bit for bit.
            if la != lb or pa != pb:
                raise Failure(f"bucket cap {cap}: at 2 ranks step 07 should equal step 06 bit for bit; per-step "
                              f"loss differs by {max(abs(x - y) / max(abs(x), 1e-3) for x, y in zip(la, lb)):.2e} (relative)"
                              f", parameters by {rel_diff(pa, pb):.2e} of their largest value: is each rank's shard "
                              "the mean of the ranks' gradients (the reduce-scatter's counts and offsets), and is "
                              "each rank updating its own shard?\n" + diagnose_zero_step(tmp, np, cap, ZERO_BUCKETED))
            if ma != mb:
                raise Failure(f"bucket cap {cap}: parameters equal step 06's, the saved momentum differs by "
                              f"{rel_diff(ma, mb):.2e} of its largest value\n{diagnose_momentum(ma, mb, np)}")
            print(f"cap {cap} MiB at 2 ranks, {len(lb)} steps: loss, parameters and momentum equal step 06's")
    scenario.__name__ = f"step07_matches_step06_np{np}"
    scenario.__doc__ = (f"Step 07 at {np} ranks trains like step 06 for every bucket cap"
                        + (": per-step loss, parameters and the saved momentum bit for bit." if np == 2 else
                           ": one step from the same state agrees within float32 rounding."))
    return scenario


def step07_one_rank_mpirun(tmp):
    """Step 07 under `mpirun -np 1` ends, and equals step 06: a reduce-scatter ring of one rank has no
    step (it once kept sending to itself for ever; the singleton without mpirun never reaches MPI)."""
    common = ZERO + ["--epochs", "1", "--save_interval", "0"]
    digests = {}
    for step in ("06_full", "07_zero"):
        cmd = [MPIEXEC, "-n", "1", os.path.join(BIN, step)] + common + dist_args(step)
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp)
        except subprocess.TimeoutExpired:
            raise Failure(f"{' '.join(cmd)} still runs after 120 s (a reduce-scatter of one rank that never ends?)")
        m = re.search(r"param_digest ([0-9a-f]{16})", p.stdout)
        if p.returncode != 0 or not m:
            raise Failure(f"{' '.join(cmd)} exited {p.returncode}\n{p.stdout}\n{p.stderr}")
        digests[step] = m.group(1)
    if digests["06_full"] != digests["07_zero"]:
        raise Failure(f"at one rank under mpirun step 07 ends with {digests['07_zero']}, step 06 with "
                      f"{digests['06_full']}: they must be equal")
    print(f"one rank under mpirun: steps 06 and 07 both end with {digests['07_zero']}")


def logged_int(out, pattern):
    m = re.search(pattern, out)
    if not m:
        raise Failure(f"no line matching {pattern!r} in:\n{out}")
    return int(m.group(1))


def step07_memory(tmp):
    """Step 07 at 4 ranks: the momentum is ceil(n/4) floats per rank, and each rank's peak memory is below
    step 06's."""
    np = 4
    common = SMALL + ["--hidden", "4096,2048", "--dataset_size", "512", "--max_steps", "2", "--epochs", "1"]
    peaks = {}
    for step in ("06_full", "07_zero"):
        out, _ = run(step, common + ["--metrics", f"{tmp}/{step}_{{rank}}.jsonl"], np=np)
        peaks[step] = [metrics(f"{tmp}/{step}_{r}.jsonl")[2]["peak_rss_kib"] for r in range(np)]
        if step == "07_zero":
            n = logged_int(out, r"model: \d+ layers, (\d+) parameters")
            floats = logged_int(out, r"optimizer state: (\d+) floats per rank")
            nbytes = logged_int(out, r"optimizer state: \d+ floats per rank, (\d+) bytes")
            if floats != -(-n // np) or nbytes != 4 * floats:
                raise Failure(f"{n} parameters at {np} ranks: the momentum should be {-(-n // np)} floats "
                              f"({4 * -(-n // np)} bytes) per rank, the program has {floats} ({nbytes} bytes)")
    if max(peaks["07_zero"]) >= min(peaks["06_full"]):
        raise Failure(f"peak memory per rank (KiB): step 07 {peaks['07_zero']}, step 06 {peaks['06_full']}: "
                      "step 07 should need less")
    print(f"n = {n}: momentum {floats} floats ({nbytes} bytes) per rank; peak KiB per rank: "
          f"06 {peaks['06_full']}, 07 {peaks['07_zero']}")


def tracks_06_at_3_ranks(tmp, common, step, ckpt, differ):
    """Resumes `step` and step 06 at 3 ranks from a 2-rank checkpoint (an epoch's end) for one step: the
    ranks of `step` must agree (else `differ`) and its step must be step 06's within the error model
    (three terms in two orders). Returns the worst ratios of difference to bound."""
    n = step[:2]
    start = read_checkpoint(ckpt)[0]["step"]
    try:
        return one_step_from(tmp, f"w{n}_", ("06_full", 3, [], None), [(step, 3, [], None)],
                             common + ["--epochs", "2"], ckpt, start, 64 * 3 + 3)
    except Mismatch as f:
        raise Failure(f"resumed at 3 ranks from a 2-rank checkpoint, step {n} does not track step 06: {f}") from None
    except Failure as f:
        if "replicas differ" in str(f):
            raise Failure(f"step {n} resumed at 3 ranks from a 2-rank checkpoint: {differ}\n{f}") from None
        raise


def step07_checkpoints(tmp):
    """Step 06 and step 07 checkpoints are interchangeable (2 ranks: bit for bit), and step 07 resumes at
    another world size at an epoch boundary."""
    common = ZERO + ["--batch_size", "64"]
    # two epochs straight (06), and one epoch saved by each step
    run("06_full", common + ["--epochs", "2", "--metrics", f"{tmp}/s{{rank}}.jsonl"], np=2)
    straight = digests(f"{tmp}/s", 2)
    for step, ck in (("06_full", "c6"), ("07_zero", "c7")):
        run(step, common + ["--epochs", "1", "--save_interval", "1", "--ckpt_dir", f"{tmp}/{ck}"], np=2)
    p6, m6 = ckpt_params_momentum(f"{tmp}/c6/checkpoint.bin")
    p7, m7 = ckpt_params_momentum(f"{tmp}/c7/checkpoint.bin")
    if p6 != p7:
        raise Failure(f"after one epoch at 2 ranks, step 07's parameters differ from step 06's ({rel_diff(p6, p7):.1e}"
                      f"; momentum {rel_diff(m6, m7):.1e}): step 07 does not train like step 06 "
                      "(step07_matches_step06_np2 says where they part)")
    if m6 != m7:
        raise Failure(f"after one epoch at 2 ranks, step 07's checkpoint has step 06's parameters but not its "
                      f"momentum ({rel_diff(m6, m7):.1e}): are the momentum shards gathered in rank order "
                      f"before rank 0 writes them?\n{diagnose_momentum(m6, m7, 2)}")
    # each resumes the other's file and ends where two epochs straight end
    for step, ck in (("07_zero", "c6"), ("06_full", "c7")):
        tag = f"r{step[:2]}_"
        run(step, common + ["--epochs", "2", "--resume", f"{tmp}/{ck}/checkpoint.bin",
                            "--metrics", f"{tmp}/{tag}{{rank}}.jsonl"], np=2)
        if digests(f"{tmp}/{tag}", 2) != straight:
            raise Failure(f"{step} resumed from the other step's checkpoint ends at {digests(f'{tmp}/{tag}', 2)}, "
                          f"two epochs straight at {straight}")
    # another world size: 07 at 3 ranks from the 2-rank file, against 06 doing the same
    r = tracks_06_at_3_ranks(tmp, common, "07_zero", f"{tmp}/c7/checkpoint.bin", "the replicas differ")
    print(f"2 ranks: 06 and 07 files identical, each resumes the other's exactly; 3 ranks from a 2-rank file: "
          f"07's step is 06's within rounding (difference/bound: parameters {r['parameters']:.2g}, momentum "
          f"{r['momentum']:.2g})")


# ---- the Gloo backend: against MPI, and its peers' faults ---------------------------------------------

def gloo_matches_mpi(step, np):
    def scenario(tmp):
        args = (ZERO if step.startswith("07") else SMALL) + ["--epochs", "2"]
        if np > 2:
            # Gloo's ring and MPI's algorithm may add the three terms in other orders: rounding, bounded
            # by the error model, one step at a time.
            one_step_parity(tmp, "p", (step, np, [], "mpirun"), (step, np, [], "launch"), args, 128 * np + np,
                            steps=(0, epoch_steps(np, 128)))
            return
        out = {}
        for launcher in ("mpirun", "launch"):
            run(step, args + ["--metrics", f"{tmp}/{launcher}{{rank}}.jsonl"], np=np, launcher=launcher)
            d = digests(f"{tmp}/{launcher}", np)
            if len(set(d)) != 1:
                raise Failure(f"{step} at {np} ranks under {launcher}: replicas differ {d}")
            out[launcher] = (d[0], global_losses(f"{tmp}/{launcher}", np, int(step[:2])))
        (dm, lm), (dg, lg) = out["mpirun"], out["launch"]
        # At 2 ranks every sum has two terms, which any algorithm adds the same way: bit for bit.
        if dg != dm or lg != lm:
            raise Failure(f"{step} at 2 ranks: Gloo ends at {dg}, MPI at {dm}"
                          + ("" if lg == lm else " and their per-step losses differ")
                          + " (a sum of two is order-free: they must agree bit for bit)")
        print(f"{step} at 2 ranks, Gloo vs MPI: digests and per-step losses identical ({dg})")
    scenario.__name__ = f"gloo_matches_mpi_{step[:2]}_np{np}"
    scenario.__doc__ = (f"{step} at {np} ranks under scripts/launch.sh (Gloo) trains like under mpirun (MPI)"
                        + (", bit for bit." if np == 2 else ": one step from the same state agrees within "
                           "float32 rounding."))
    return scenario


def start_ranks(tmp, np, args, timeout, only=None):
    """Starts ranks of 06_full by environment, without a launcher that would stop the others (as a
    plain srun without --kill-on-bad-exit): {rank: (Popen, stderr path)}. args: the arguments, or a
    function of the rank that returns them."""
    env = env_launch_env()
    procs = {}
    for r in (only if only is not None else range(np)):
        e = dict(env, RANK=str(r), WORLD_SIZE=str(np), LOCAL_RANK=str(r), MASTER_ADDR="127.0.0.1")
        err = f"{tmp}/err{r}.txt"
        with open(f"{tmp}/out{r}.txt", "w") as o, open(err, "w") as f:
            mine = args(r) if callable(args) else args
            procs[r] = (subprocess.Popen([os.path.join(BIN, "06_full")] + mine + ["--timeout", str(timeout)],
                                         stdout=o, stderr=f, env=e), err)
    return procs


def wait_exit(p, limit):
    """Seconds until p exited (after the call), or None when it outlived limit seconds."""
    t0 = time.monotonic()
    try:
        p.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        return None
    return time.monotonic() - t0


def gloo_peer_faults(tmp):
    """Gloo without a launcher to clean up: a rank that never starts, a killed rank and a frozen
    (SIGSTOP) rank each end the surviving rank within --timeout, with a line that names the cause."""
    timeout, args = 4, SMALL + ["--epochs", "100000"]
    # start-up: rank 1 never comes
    procs = start_ranks(tmp, 2, args, timeout, only=[0])
    took = wait_exit(procs[0][0], timeout + 5)
    err = open(procs[0][1]).read()
    # the store's get and the watchdog run out together: either names the wait
    if took is None or procs[0][0].returncode == 0 or not ("did not appear" in err or "rendezvous" in err):
        procs[0][0].kill()
        raise Failure(f"rank 0 alone (WORLD_SIZE=2) should end within {timeout} s naming the rendezvous: "
                      f"{took}, {err!r}")
    print(f"rank 1 never started: rank 0 ended after {took:.1f} s (--timeout {timeout})")
    for fault, sig in (("killed", signal.SIGKILL), ("frozen", signal.SIGSTOP)):
        procs = start_ranks(tmp, 2, args, timeout)
        deadline = time.monotonic() + 60
        while "global batch" not in open(f"{tmp}/out0.txt").read() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)  # well into training
        procs[1][0].send_signal(sig)
        took = wait_exit(procs[0][0], timeout + 5)
        procs[1][0].kill()
        procs[1][0].wait()
        err = open(procs[0][1]).read()
        if took is None:
            procs[0][0].kill()
            raise Failure(f"a {fault} peer: rank 0 still runs {timeout + 5} s later (--timeout {timeout})")
        if procs[0][0].returncode == 0 or not ("GLOO ERROR" in err or "watchdog" in err):
            raise Failure(f"a {fault} peer: rank 0 exited {procs[0][0].returncode} without naming the failure: {err!r}")
        if took > timeout + 2:
            raise Failure(f"a {fault} peer: rank 0 ended after {took:.1f} s, more than --timeout {timeout} s")
        print(f"{fault} peer: rank 0 ended after {took:.1f} s: {err.strip().splitlines()[-1][:160]}")


def gloo_ranks_agree(tmp):
    """The ranks' agreement check runs over Gloo too: two ranks started with different --lr both stop
    before training, naming the flag and both values."""
    procs = start_ranks(tmp, 2, lambda r: small(lr=0.05 if r == 0 else 0.1) + ["--epochs", "1"], 30)
    for r, (p, err) in procs.items():
        if wait_exit(p, 60) is None:
            p.kill()
            raise Failure(f"rank {r} still runs 60 s after starting with another --lr than its peer")
        text = open(err).read()
        if p.returncode == 0 or "the ranks disagree on --lr" not in text:
            raise Failure(f"rank {r}: exit {p.returncode}, expected the agreement check's line: {text!r}")
    print("different --lr over Gloo: " + open(procs[0][1]).read().strip().splitlines()[0])


def torchrun_matches_mpi(tmp):
    """torchrun --nproc_per_node 2 --no_python 06_full --device cpu (the course's launch line, with
    --standalone's rendezvous on a free port, on the Gloo backend) trains like mpirun -n 2 (MPI), bit
    for bit."""
    if torchrun_cmd(2) is None:
        print("skipped: torchrun is not installed (apt-get install python3-torch)")
        return SKIP
    args = SMALL + ["--epochs", "2"]
    out, _ = run("06_full", args + ["--metrics", f"{tmp}/t{{rank}}.jsonl"], np=2, launcher="torchrun")
    run("06_full", args + ["--metrics", f"{tmp}/m{{rank}}.jsonl"], np=2, launcher="mpirun")
    dt, dm = digests(f"{tmp}/t", 2), digests(f"{tmp}/m", 2)
    if metrics(f"{tmp}/t0.jsonl")[2]["world_size"] != 2:
        raise Failure(f"torchrun started {metrics(f'{tmp}/t0.jsonl')[2]['world_size']} rank(s), not 2")
    if len(set(dt)) != 1 or dt != dm:
        raise Failure(f"under torchrun the ranks end at {dt}, under mpirun at {dm}")
    print(f"torchrun, 2 ranks: param_digest {dt[0]}, the same as mpirun's")

# ---- step 08: fully sharded data parallel ------------------------------------------------------------

# --hidden 63,17: three layers (the gathered buffers alternate), none of whose sizes 2, 3 or 4 divide
# (784·63 + 63 = 49,455; 63·17 + 17 = 1,088; 17·10 + 10 = 180 at 3 ranks: all padded).
FSDP = small(hidden="63,17")


def step08_replicas(np):
    def scenario(tmp):
        for accum, batch in (("1", "64"), ("4", "16")):
            run("08_fsdp", FSDP + ["--epochs", "1", "--grad_accum", accum, "--batch_size", batch,
                                   "--metrics", f"{tmp}/a{accum}_{{rank}}.jsonl"], np=np)
            d = digests(f"{tmp}/a{accum}_", np)
            if len(set(d)) != 1:
                raise Failure(f"grad_accum {accum}, {np} ranks: the ranks' gathered parameters differ {d}: does "
                              "every rank gather every layer's shards in rank order?")
    scenario.__name__ = f"step08_replicas_np{np}"
    scenario.__doc__ = (f"Step 08 at {np} ranks: every rank's gathered full parameters are identical (param_digest), "
                        "for grad_accum 1 and 4.")
    return scenario


def diagnose_fsdp_step(tmp, np, accum, batch):
    """Why step 08 does not train like step 06: one optimizer step of each from the same start, the
    parameters' moves compared (every gradient is computed from the same parameters)."""
    one = FSDP + ["--batch_size", batch, "--grad_accum", accum, "--epochs", "1", "--max_steps", "1",
                  "--save_interval", "1"]
    try:
        run("06_full", one + ["--ckpt_dir", f"{tmp}/one06", "--save_init", f"{tmp}/init",
                              "--metrics", f"{tmp}/one06_{{rank}}.jsonl"], np=np)
        run("08_fsdp", one + ["--ckpt_dir", f"{tmp}/one08", "--metrics", f"{tmp}/one08_{{rank}}.jsonl"], np=np)
    except Failure as e:
        return f"(a one-step run to find where the parameters differ failed: {str(e).splitlines()[0][:300]})"
    # The first step's loss comes from a forward on the initial parameters, before any update: if it
    # differs, the layers computed with other parameters than the model's (the gathers).
    try:
        l6, l8 = global_losses(f"{tmp}/one06_", np, 6)[0], global_losses(f"{tmp}/one08_", np, 8)[0]
    except (Failure, IndexError) as e:
        return f"(step 08's first step logged no global loss to compare: {e})"
    if abs(l6 - l8) > 1e-5 * max(abs(l6), 1e-3):
        return (f"likely cause: already the first step's loss differs from step 06's ({l8:.6f} vs {l6:.6f}), before "
                "any update: the layers did not compute with the model's parameters: in fsdp.c each layer's "
                "all-gather (unshard) must send this rank's shard of that layer, f->shard[l] floats at f->params + "
                "f->offset[l] (not f->params: layer 0's shard), and receive all W shards into f->full[l % 2], "
                "which the layer then runs on")
    _, p0 = read_checkpoint(f"{tmp}/init/checkpoint.bin")
    p6, _ = ckpt_params_momentum(f"{tmp}/one06/checkpoint.bin")
    p8, m8 = ckpt_params_momentum(f"{tmp}/one08/checkpoint.bin")
    tol = PARAM_TOL * max(abs(x) for x in p6)
    if not any(abs(a - b) > tol for a, b in zip(p6, p8)):
        return "(after one step step 08 still agrees with step 06: they part later)"
    if all(abs(a - b) <= tol for a, b in zip(p8, p0)):
        return ("likely cause: after one step no parameter has moved" + (" and the momentum is zero" if not any(m8)
                else "") + ": the update never reached this rank's shards: sgd_step must update the parameter "
                "shards t->fsdp.params with the gradient shards t->fsdp.grads (a gathered buffer is overwritten "
                "by the next gather), and each layer's gradient must be reduce-scattered into them")
    d6, d8 = [a - b for a, b in zip(p6, p0)], [a - b for a, b in zip(p8, p0)]
    ratio = sum(a * b for a, b in zip(d6, d8)) / max(sum(a * a for a in d6), 1e-30)
    for k, why in ((1 / np, f"1/{np} as far as step 06's: the mean gradient is divided by the world size "
                            "twice: backward already scales the loss by 1/W, so the reduce-scatter must sum "
                            "(DIST_SUM), not average"),
                   (np, f"{np} times as far as step 06's: the gradient is summed over the ranks but not divided "
                        "by the world size: backward must run on the loss times 1/W (scale = b / B / W), the "
                        "reduce-scatter then sums")):
        if abs(ratio - k) < 1e-3 * k and all(abs(b - a * k) <= tol * max(k, 1) for a, b in zip(d6, d8)):
            return f"likely cause: after one step every parameter has moved {why}"
    return ("(after one step the parameters differ from step 06's: does each rank take its own shard of each "
            "layer's sum, at g + rank·f->shard[l], and update its own shards?)")


def step08_matches_step06(np):
    def scenario(tmp):
        for accum, batch in (("1", "64"), ("4", "16")):
            common = FSDP + ["--batch_size", batch, "--grad_accum", accum, "--epochs", "2"]
            cause = ("is each layer's gradient reduce-scattered as a sum of the 1/W-scaled gradients, and each "
                     "rank's shard updated with its own shard of it?\n")
            if np > 2 or accum != "1":
                # 3 or more terms (the all-reduce and the reduce-scatter add them in other orders), or the
                # micro-batches reduced one by one (step 08) against summed first (step 06): rounding,
                # bounded by the error model, one step at a time.
                one_step_parity(tmp, f"a{accum}_", ("06_full", np, [], None), ("08_fsdp", np, [], None), common,
                                64 * np + np + int(accum), steps=(0, epoch_steps(np, 64)),
                                diagnose=lambda side: cause + diagnose_fsdp_step(tmp, np, accum, batch))
                continue
            # 2 ranks, no accumulation: every sum has the same two terms as step 06's all-reduce, and the
            # update is the same elementwise arithmetic on a shard: bit for bit.
            common += ["--save_interval", "2"]
            for step, ck in (("06_full", "a"), ("08_fsdp", "b")):
                run(step, common + ["--ckpt_dir", f"{tmp}/{ck}{accum}", "--metrics", f"{tmp}/{ck}{accum}_{{rank}}.jsonl"],
                    np=np)
            la, lb = global_losses(f"{tmp}/a{accum}_", np, 6), global_losses(f"{tmp}/b{accum}_", np, 8)
            pa, ma = ckpt_params_momentum(f"{tmp}/a{accum}/checkpoint.bin")
            pb, mb = ckpt_params_momentum(f"{tmp}/b{accum}/checkpoint.bin")
            if pa != pb or ma != mb or la != lb or digests(f"{tmp}/a1_", 2) != digests(f"{tmp}/b1_", 2):
                raise Failure(f"at 2 ranks step 08 should equal step 06 bit for bit; it differs: parameters "
                              f"{rel_diff(pa, pb):.2e}, momentum {rel_diff(ma, mb):.2e} of their largest value: "
                              + cause + diagnose_fsdp_step(tmp, np, accum, batch))
            print(f"2 ranks, grad_accum 1, {len(lb)} steps: loss, parameters and momentum equal step 06's")
    scenario.__name__ = f"step08_matches_step06_np{np}"
    scenario.__doc__ = (f"Step 08 at {np} ranks trains like step 06 (grad_accum 1 and 4)"
                        + (": bit for bit without accumulation, " if np == 2 else ": ")
                        + "one step from the same state within float32 rounding" + (" with it." if np == 2 else "."))
    return scenario


def step08_checkpoints(tmp):
    """Step 08's checkpoint is step 06's file (2 ranks: byte for byte); 08 resumes 06's and 07's files and 06
    resumes 08's, each ending where two epochs straight end; 08 resumes a 2-rank file at 3 ranks as 06 does."""
    common = FSDP + ["--batch_size", "64"]
    run("06_full", common + ["--epochs", "2", "--metrics", f"{tmp}/s{{rank}}.jsonl"], np=2)
    straight = digests(f"{tmp}/s", 2)
    for step, ck in (("06_full", "c6"), ("07_zero", "c7"), ("08_fsdp", "c8")):
        run(step, common + ["--epochs", "1", "--save_interval", "1", "--ckpt_dir", f"{tmp}/{ck}"], np=2)
    with open(f"{tmp}/c6/checkpoint.bin", "rb") as f6, open(f"{tmp}/c8/checkpoint.bin", "rb") as f8:
        if f6.read() != f8.read():
            p6, m6 = ckpt_params_momentum(f"{tmp}/c6/checkpoint.bin")
            p8, m8 = ckpt_params_momentum(f"{tmp}/c8/checkpoint.bin")
            raise Failure(f"after one epoch at 2 ranks step 08's checkpoint is not step 06's: parameters "
                          f"{rel_diff(p6, p8):.1e}, momentum {rel_diff(m6, m8):.1e}: are the shards gathered layer "
                          "by layer, in rank order, without their padding?")
    for step, ck in (("08_fsdp", "c6"), ("08_fsdp", "c7"), ("06_full", "c8")):
        tag = f"r{step[:2]}{ck}_"
        run(step, common + ["--epochs", "2", "--resume", f"{tmp}/{ck}/checkpoint.bin",
                            "--metrics", f"{tmp}/{tag}{{rank}}.jsonl"], np=2)
        if digests(f"{tmp}/{tag}", 2) != straight:
            raise Failure(f"{step} resumed from {ck}'s checkpoint ends at {digests(f'{tmp}/{tag}', 2)}, two epochs "
                          f"straight at {straight}")
    r = tracks_06_at_3_ranks(tmp, common, "08_fsdp", f"{tmp}/c8/checkpoint.bin",
                             "the ranks' gathered parameters differ")
    print(f"2 ranks: 08's file is 06's byte for byte; 08 resumes 06's and 07's files and 06 resumes 08's exactly; "
          f"3 ranks from a 2-rank file: 08's step is 06's within rounding (difference/bound: parameters "
          f"{r['parameters']:.2g})")


def step08_memory(tmp):
    """Step 08 at 4 ranks on a model of 7 layers, 6.1M parameters: the model state is 3 x sum of ceil(n_l/4)
    floats per rank, as printed, and every rank's peak memory is below every rank's of step 07. (FSDP saves
    memory when the layers in flight are a small part of the model: on 784-4096-2048-10, whose middle layer
    is 72% of it, the gathered layers and their gradients cost more than step 07's full copies at 4 ranks;
    docs/performance.md has both.)"""
    np = 4
    hidden = [1024] * 6
    common = SMALL + ["--hidden", ",".join(map(str, hidden)), "--dataset_size", "512", "--max_steps", "2",
                      "--epochs", "1"]
    peaks = {}
    for step in ("07_zero", "08_fsdp"):
        out, _ = run(step, common + ["--metrics", f"{tmp}/{step}_{{rank}}.jsonl"], np=np)
        peaks[step] = [metrics(f"{tmp}/{step}_{r}.jsonl")[2]["peak_rss_kib"] for r in range(np)]
    sizes = [784] + hidden + [10]
    want = sum(-(-(sizes[l] * sizes[l + 1] + sizes[l + 1]) // np) for l in range(len(sizes) - 1))
    got = logged_int(out, r"model state: 3 x (\d+) floats per rank")
    if got != want:
        raise Failure(f"the model state should be 3 x {want} floats per rank (each layer's ceil(n_l/{np})), "
                      f"the program says 3 x {got}")
    if max(peaks["08_fsdp"]) >= min(peaks["07_zero"]):
        raise Failure(f"peak memory per rank (KiB): step 08 {peaks['08_fsdp']}, step 07 {peaks['07_zero']}: "
                      "step 08 should need less")
    print(f"model state 3 x {got} floats per rank; peak KiB per rank: 07 {peaks['07_zero']}, 08 {peaks['08_fsdp']}")


def step08_trace(tmp):
    """--trace: per step, a span per layer for forward and backward, the forward all-gather of each layer, the
    backward all-gather of each but the last, one reduce-scatter per layer; each prefetched gather spans the
    previous layer's forward (it was started before that layer computed and waited for after)."""
    path = f"{tmp}/trace_{{rank}}.json"
    run("08_fsdp", FSDP + ["--epochs", "1", "--trace", path], np=2)
    L = 3
    for r in range(2):
        with open(path.replace("{rank}", str(r))) as f:
            spans = [e for e in json.load(f)["traceEvents"] if e["ph"] == "X"]
        for step in range(2048 // (2 * 128)):
            mine = {e["name"].split(":")[0]: e for e in spans if e["args"]["step"] == step}
            names = ([f"forward layer {l}" for l in range(L)] + [f"backward layer {l}" for l in range(L)]
                     + [f"all-gather layer {l} (forward)" for l in range(L)]
                     + [f"all-gather layer {l} (backward)" for l in range(L - 1)]
                     + [f"reduce-scatter layer {l}" for l in range(L)])
            missing = [n for n in names if n not in mine]
            if missing:
                raise Failure(f"rank {r} step {step}: no span {missing}; spans {sorted(mine)}")
            for l in range(L - 1):
                g, fw = mine[f"all-gather layer {l + 1} (forward)"], mine[f"forward layer {l}"]
                if g["ts"] > fw["ts"] or g["ts"] + g["dur"] < fw["ts"] + fw["dur"]:
                    raise Failure(f"rank {r} step {step}: layer {l + 1}'s gather does not span layer {l}'s "
                                  f"forward (no prefetch?): gather {g['ts']}+{g['dur']}, forward {fw['ts']}+{fw['dur']}\n"
                                  "likely cause: the next layer's all-gather is not started before this layer "
                                  "computes: pre_forward must prefetch it (unshard(f, l + 1), after waiting for "
                                  "layer l's own), and pre_backward layer l - 1's")


# ---- the exercise checker ---------------------------------------------------------------------------

# ---- exercise 06_fault: snapshots and resume (scripts/check_exercise.sh 06_fault) ---------------------

def fault_drill_module():
    """tests/fault/restart_drill.py, whose drill the exercise's claim runs (imported, not copied)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fault"))
    import restart_drill
    return restart_drill


FAULT_SEED = 6  # draws the step of the kill and the rank killed


def fault06_drill(tmp):
    """The fault drill: a rank SIGKILLed under restart.sh, resumed mid-epoch, ends as if uninterrupted.
    Under scripts/restart.sh, SIGKILL one of 2 ranks of 06_full at a step drawn from a seed; the restart
    resumes inside the epoch and ends with the uninterrupted run's param_digest."""
    rd = fault_drill_module()
    # restart_drill's options
    a = argparse.Namespace(mpiexec=MPIEXEC, bin_dir=os.path.abspath(BIN), hook=[], step="06_full", np=2)
    # restart_drill's SMALL: 64 steps per epoch at 2 ranks, one epoch, a snapshot every 7 steps
    args = rd.SMALL + dist_args("06_full")
    per_epoch = rd.steps_per_epoch(2)
    rng = random.Random(FAULT_SEED)
    at, victim = rng.randint(9, 24), rng.randrange(2)  # after the first snapshot (step 7)
    try:
        ref = rd.reference(a, tmp, "06_full", 2, args)
    except rd.Failure as e:
        cause = hint(str(e), "06_full")
        raise Failure(f"the uninterrupted run failed" + (f"\nlikely cause: {cause}" if cause else "") + f"\n{e}")
    # The epoch lasts well under a second: on a busy machine the kill can land after its end, where even a
    # run without snapshots inside the epoch resumes from the epoch's checkpoint; kill_at_step then drills
    # again (late_after).
    try:
        resumed = rd.kill_at_step(a, tmp, "drill", args, ref, at, victim, late_after=per_epoch,
                                  stop=stop_if_terminated)
    except rd.Failure as e:
        stop_if_terminated()
        text = getattr(e, "text", "")
        after = text.split("restart.sh: attempt 0 failed", 1)[-1]
        resumed_at = re.search(r"resumed from \S+ at epoch (\d+), step (\d+)", after)
        done = re.findall(r"done: (\d+) steps", after)
        first, _, rest = str(e).partition("\n")
        cause = None
        if done and int(done[-1]) > per_epoch and resumed_at:
            cause = (f"the restarted run went on to step {done[-1]}, {int(done[-1]) - per_epoch} steps more than "
                     f"the uninterrupted {per_epoch}: it trained the snapshot's epoch again from its first batch "
                     f"(resume must continue at the saved position, meta.epoch_step, and the snapshot must "
                     f"record it: t->epoch_step)")
        elif hint(text, "06_full"):
            cause = hint(text, "06_full")
        raise Failure(first + (f"\nlikely cause: {cause}" if cause else "") + (f"\n{rest}" if rest else ""))
    if resumed == "the start":
        raise Failure(f"after SIGKILL to rank {victim} at step {at}, attempt 1 started from the beginning: "
                      f"--ckpt_dir held no snapshot, and the {at} steps were trained again\nlikely cause: no "
                      f"snapshot inside the epoch: save one every --save_steps steps (snapshot_due) in run_epoch")
    print(f"SIGKILL to rank {victim} at step {at}; restart.sh restarted; resumed at epoch {resumed[0]}, step "
          f"{resumed[1]}; param_digest {ref} as the uninterrupted run's")


# Flags of the other 06_fault claims: 2 ranks, 2048 synthetic samples, 16 steps per epoch (64 per rank)
FAULT_SMALL = small(dataset_size=2048, log_interval=1) + ["--batch_size", "64"]


def fault06_one_writer(tmp):
    """06_full with --save_steps 3 at 2 ranks: one process alone writes every snapshot.
    A writer writes `checkpoint.bin.tmp.<its pid>`, then renames it: one such name per writing process."""
    ck = f"{tmp}/ck"
    os.makedirs(ck)
    seen = files_created_in(ck)
    if seen is None:
        print("skipped: no inotify on this system")
        return SKIP
    run("06_full", FAULT_SMALL + ["--epochs", "2", "--save_steps", "3", "--save_interval", "1", "--ckpt_dir", ck],
        np=2)
    names = [n for n in seen() if n.startswith("checkpoint.bin.tmp.")]
    writers = sorted(set(names))
    if not writers:
        raise Failure("no checkpoint was written (--save_steps 3 --save_interval 1, 2 epochs)")
    if len(writers) != 1:
        raise Failure(f"{len(writers)} processes wrote the snapshots ({', '.join(writers)})\nlikely cause: every "
                      "rank writes the snapshot: the replicas are equal, so only rank 0 should write it "
                      "(`if (t->rank == 0)` in save_checkpoint), and then every rank waits at a barrier")
    print(f"{len(names)} checkpoint writes, all by one process ({writers[0]})")


def fault06_barrier(tmp):
    """06_full at 2 ranks: no rank goes on while the checkpoint is being written.
    The writer is stopped (SIGSTOP) in the middle of its write for 3 s: no rank may end its run (write its
    final metrics record) before the file is complete."""
    # A 14 MB checkpoint (784-1024-1024-10), saved once, at the end of the only epoch: the write lasts
    # long enough to be stopped in the act; the stop is found from the writer's temporary file.
    args = small(dataset_size=512, hidden="1024,1024") + [
        "--batch_size", "16", "--epochs", "1", "--save_interval", "1", "--metrics", f"{tmp}/m{{rank}}.jsonl"]
    for attempt in range(3):
        ck = f"{tmp}/ck{attempt}"
        os.makedirs(ck)
        seen = files_created_in(ck)
        if seen is None:
            print("skipped: no inotify on this system")
            return SKIP
        for r in range(2):
            if os.path.exists(f"{tmp}/m{r}.jsonl"):
                os.remove(f"{tmp}/m{r}.jsonl")
        cmd = [MPIEXEC, "-n", "2", os.path.abspath(os.path.join(BIN, "06_full"))] + args + ["--ckpt_dir", ck] + dist_args("06_full")
        with open(f"{tmp}/out", "w") as out:
            p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=tmp)
        writer, went_on, caught = None, [], False
        try:
            deadline = time.time() + 300
            while writer is None and p.poll() is None and time.time() < deadline:
                stop_if_terminated()
                names = [n for n in seen() if n.startswith("checkpoint.bin.tmp.")]
                if names:
                    writer = int(names[0].rsplit(".", 1)[1])
                    try:
                        os.kill(writer, signal.SIGSTOP)
                    except OSError:
                        writer = None
                        break
                else:
                    time.sleep(0.0005)
            if writer is not None:
                caught = not os.path.exists(f"{ck}/checkpoint.bin")  # stopped before its rename
                end = time.time() + 3
                while caught and time.time() < end and not went_on:
                    went_on = [r for r in range(2) if os.path.exists(f"{tmp}/m{r}.jsonl") and
                               '"type":"final"' in open(f"{tmp}/m{r}.jsonl").read()]
                    time.sleep(0.05)
                os.kill(writer, signal.SIGCONT)
            try:
                rc = p.wait(timeout=300)
            except subprocess.TimeoutExpired:
                rc = None
        finally:
            if writer is not None:
                try:
                    os.kill(writer, signal.SIGCONT)
                except OSError:
                    pass
            if p.poll() is None:
                p.kill()
                p.wait()
        stop_if_terminated()
        with open(f"{tmp}/out") as f:
            text = f.read()
        if rc != 0:
            cause = hint(text, "06_full")
            raise Failure((f"likely cause: {cause}\n" if cause else "") +
                          f"{' '.join(cmd)} exited {rc}, expected 0\n--- output\n{text[-3000:]}")
        if writer is None:
            raise Failure(f"no checkpoint was written (--save_interval 1):\n{text[-2000:]}")
        if went_on:
            raise Failure(f"rank {', '.join(map(str, went_on))} ended its run (wrote its final metrics record) "
                          f"while process {writer} was still writing the checkpoint\nlikely cause: no barrier "
                          "after the save: every rank must wait (dist_barrier, outside `if (rank == 0)`) until the "
                          "writer is done, so that none goes on, or reads the file after a restart, before it is "
                          "complete")
        if caught:
            print(f"process {writer} stopped for 3 s in the middle of its checkpoint write: no rank went on")
            return
    raise Failure("the checkpoint write was over before it could be stopped, 3 times: could not check the barrier")


def fault06_resume_mid_epoch(tmp):
    """06_full at 2 ranks: a snapshot inside a later epoch resumes at the next step, not at the epoch's start.
    2 epochs of 16 steps, a snapshot every 6 steps: the one after step 18, 2 steps into epoch 2 (the run then
    stops at step 22 without saving), records its position, and --resume auto runs steps 19..32, ending with
    the uninterrupted run's parameters. (Inside a later epoch the steps done in it, 2, and the global step,
    18, differ: a resume that takes one for the other is seen.)"""
    per_epoch, epochs, every, stop = 2048 // 2 // 64, 2, 6, 22
    snap = stop // every * every  # the last snapshot before the stop: step 18
    epoch, done = divmod(snap, per_epoch)  # epoch 1 (the second), 2 steps into it
    total = per_epoch * epochs
    common = FAULT_SMALL + ["--epochs", str(epochs), "--save_steps", str(every), "--ckpt_dir", f"{tmp}/ck"]
    run("06_full", FAULT_SMALL + ["--epochs", str(epochs), "--metrics", f"{tmp}/a{{rank}}.jsonl"], np=2)
    run("06_full", common + ["--max_steps", str(stop)], np=2)
    ck = f"{tmp}/ck/checkpoint.bin"
    if not os.path.exists(ck):
        raise Failure(f"--save_steps {every} --max_steps {stop} (--save_interval 0): no snapshot was written inside "
                      "an epoch\nlikely cause: run_epoch saves no snapshot every --save_steps steps (snapshot_due, "
                      "then save_checkpoint)")
    hdr, _ = read_checkpoint(ck)
    if (hdr["epoch"], hdr["step"]) != (epoch, snap):
        raise Failure(f"the snapshot taken after step {snap} ({done} steps into epoch {epoch + 1}) records epoch "
                      f"{hdr['epoch']} (counted from 0), step {hdr['step']}")
    if hdr["epoch_step"] != done:
        raise Failure(f"the snapshot taken after step {snap}, {done} steps into epoch {epoch + 1}, records "
                      f"{hdr['epoch_step']} steps done in that epoch, not {done}\nlikely cause: the snapshot does "
                      "not record the position in the epoch: set t->epoch_step (the steps of this epoch done) "
                      "before save_checkpoint")
    out, _ = run("06_full", common + ["--resume", "auto", "--metrics", f"{tmp}/b{{rank}}.jsonl"], np=2)
    steps, _, final = metrics(f"{tmp}/b0.jsonl")
    logged = [s["step"] for s in steps]
    if final["steps"] != total:
        ran = final["steps"] - snap
        if final["steps"] == snap + total - per_epoch * epoch:  # the saved epoch again from its first batch
            cause = (f"{ran} steps after the snapshot: epoch {epoch + 1} again from its first batch, a whole epoch"
                     f"\nlikely cause: resume started the "
                     f"epoch over: take the steps already done in the saved epoch from the checkpoint "
                     f"(t->epoch_step = meta.epoch_step)")
        elif final["steps"] == snap + max(0, per_epoch - snap) + per_epoch * (epochs - 1 - epoch):
            cause = (f"{ran} steps after the snapshot: the rest of epoch {epoch + 1} was skipped\nlikely cause: "
                     f"resume took the global step (meta.step, {snap}) for the steps done in the saved epoch "
                     f"({done}, meta.epoch_step): the two are equal only in the first epoch: "
                     f"t->epoch_step = meta.epoch_step")
        else:
            cause = f"{ran} steps after the snapshot, not {total - snap}"
        raise Failure(f"resumed from the snapshot at step {snap}, the run ended at step {final['steps']}, the "
                      f"uninterrupted one at {total}: {cause}")
    if logged != list(range(snap + 1, total + 1)):
        raise Failure(f"the resumed run logged steps {logged}, expected {snap + 1}..{total}")
    if digests(f"{tmp}/a", 2) != digests(f"{tmp}/b", 2):
        raise Failure(f"resumed at step {snap}: {digests(f'{tmp}/b', 2)}, uninterrupted: {digests(f'{tmp}/a', 2)}")
    print(f"the snapshot at step {snap} recorded epoch {epoch} (counted from 0), {done} steps in; the resume ran "
          f"steps {snap + 1}..{total} and ended with the uninterrupted run's parameters")


def process_tree(pid):
    """pid and every process below it (from /proc/PID/task/TID/children)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for tid in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{tid}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except OSError:  # ended meanwhile
            pass
    return out


def own_binary(step):
    """A scenario: the program that runs is the one in DDP_BIN_DIR (the exercise checker's build of the
    learner's files), and it starts no other build's step program; /proc shows what each process runs
    after any exec."""
    def scenario(tmp):
        exe = os.path.realpath(os.path.join(BIN, step))
        cmd = [exe] + small(dataset_size=4096) + ["--epochs", "6"] + dist_args(step)
        seen = set()
        with open(f"{tmp}/out", "w") as out:
            p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=tmp)
            deadline = time.time() + 600
            while p.poll() is None and time.time() < deadline:
                for pid in process_tree(p.pid):  # what each process runs now, after any exec
                    try:
                        seen.add(re.sub(r" \(deleted\)$", "", os.readlink(f"/proc/{pid}/exe")))
                    except OSError:
                        pass
                time.sleep(0.005)
            if p.poll() is None:
                p.kill()
            p.wait()
        stop_if_terminated()
        # Another step program (the main build's, reached through the links next to it), not MPI's helpers
        others = sorted(e for e in seen if e != exe and re.match(r"\d\d_", os.path.basename(e)))
        if others:
            raise Failure(f"the program that ran is {', '.join(others)}, not the one built from your file(s) "
                          f"({exe})\nlikely cause: main starts another build's program (exec) instead of "
                          "training itself")
        if p.returncode != 0:
            with open(f"{tmp}/out") as f:
                text = f.read()
            cause = hint(text, step)
            raise Failure((f"likely cause: {cause}\n" if cause else "") +
                          f"{' '.join(cmd)} exited {p.returncode}, expected 0\n--- output\n{text}")
        if exe not in seen:
            raise Failure(f"{' '.join(cmd)} ended before its executable could be read in /proc")
        print(f"{step} ran as {exe}")
    scenario.__name__ = f"step{step[:2]}_own_binary"
    scenario.__doc__ = f"{step}: the program that ran is the one in DDP_BIN_DIR, and it starts no other build's"
    return scenario


SCENARIOS = {f.__name__: f for f in [step01_warnings, save_init, max_steps_resume("01_single_gpu", 1),
    max_steps_resume("05_metrics_ckpt", 2), max_steps_resume("06_full", 2),
    mid_epoch_other_batch("01_single_gpu", 1), mid_epoch_other_batch("06_full", 2),
    mid_epoch_other_batch("07_zero", 2), max_steps_epoch_end("01_single_gpu", 1),
    max_steps_epoch_end("07_zero", 2),
    launchers, launcher_signal, watchdog_deadlock, watchdog_startup, step06_grad_accum, step06_trace, step06_overlap, step06_replicas(2), step06_replicas(3), step06_replicas(4),
    step06_matches_step04(2), step06_matches_step04(3), step06_matches_step04(4),
    step01_learns, step01_deterministic, step01_resume, step01_bad_input, step01_fashion_mnist,
    step02_redundant, step03_drift, step04_broadcast, step05_resume, step05_eval_exact, step05_one_writer,
    step05_fashion_mnist, dist_bad_launch,
    replicas_identical("04_ddp_wrap", 2), replicas_identical("04_ddp_wrap", 3),
    replicas_identical("04_ddp_wrap", 4), replicas_identical("05_metrics_ckpt", 2),
    replicas_identical("05_metrics_ckpt", 3), replicas_identical("05_metrics_ckpt", 4),
    matches_baseline("04_ddp_wrap", 2), matches_baseline("04_ddp_wrap", 4),
    matches_baseline("05_metrics_ckpt", 2), matches_baseline("05_metrics_ckpt", 4),
    fault06_drill, fault06_one_writer, fault06_barrier, fault06_resume_mid_epoch,
    step07_replicas(2), step07_replicas(3), step07_replicas(4), step07_matches_step06(2),
    step07_matches_step06(3), step07_matches_step06(4), step07_one_rank_mpirun, step07_memory, step07_checkpoints,
    gloo_matches_mpi("06_full", 2), gloo_matches_mpi("06_full", 3), gloo_matches_mpi("07_zero", 2),
    gloo_matches_mpi("07_zero", 3), gloo_peer_faults, gloo_ranks_agree, torchrun_matches_mpi,
    step08_replicas(2), step08_replicas(3), step08_replicas(4), step08_matches_step06(2),
    step08_matches_step06(3), step08_matches_step06(4), step08_memory, step08_checkpoints, step08_trace] +
    [own_binary(s) for s in ("02_init", "03_sampler", "04_ddp_wrap", "05_metrics_ckpt", "06_full", "07_zero",
                                   "08_fsdp")]}


# ---- review: step 08's evaluation on a test set that splits unevenly ----------------------------------

def write_idx_set(folder, n_train, n_test):
    """An MNIST-shaped IDX set (uncompressed) of n_train and n_test 28x28 images: each label's images
    share a bright block, so that the model learns something; the rest is pseudo-random noise."""
    os.makedirs(folder, exist_ok=True)
    rng = random.Random(5)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        labels = bytes(i % 10 for i in range(n))
        pixels = bytearray(rng.randrange(64) for _ in range(n * 784))
        for i, y in enumerate(labels):
            for row in range(2 * y, 2 * y + 3):
                pixels[i * 784 + row * 28: i * 784 + row * 28 + 10] = b"\xff" * 10
        with open(f"{folder}/{prefix}-images-idx3-ubyte", "wb") as f:
            f.write(struct.pack(">IIII", 2051, n, 28, 28) + bytes(pixels))
        with open(f"{folder}/{prefix}-labels-idx1-ubyte", "wb") as f:
            f.write(struct.pack(">II", 2049, n) + labels)


def step08_eval_uneven(tmp):
    """Step 08 on a test set of 1001 samples at 2 ranks (501 and 500: two test batches against one)
    evaluates without hanging, and its accuracy and digest are step 06's (every sample counted once)."""
    write_idx_set(f"{tmp}/idx", 512, 1001)
    args = ["--device", "cpu", "--data", "mnist", "--data_dir", f"{tmp}/idx", "--hidden", "32",
            "--epochs", "2", "--lr", "0.05", "--log_interval", "1000", "--save_interval", "0",
            "--seed", SEED, "--timeout", "20"]
    out = {}
    for step in ("08_fsdp", "06_full"):
        run(step, args + ["--metrics", f"{tmp}/{step}_{{rank}}.jsonl"], np=2, tmp=tmp)
        _, epochs, final = metrics(f"{tmp}/{step}_0.jsonl")
        out[step] = ([e["test_acc"] for e in epochs], final["param_digest"])
    if out["08_fsdp"] != out["06_full"]:
        raise Failure(f"1001 test samples at 2 ranks: step 08 (accuracies, digest) {out['08_fsdp']}, "
                      f"step 06 {out['06_full']}")
    print(f"1001 test samples at 2 ranks: accuracies {out['08_fsdp'][0]}, digest {out['08_fsdp'][1]}, as step 06")


SCENARIOS[step08_eval_uneven.__name__] = step08_eval_uneven

# ---- review: SIGTERM to a rank stuck in a collective -------------------------------------------------

def preempt_stuck(tmp):
    """A rank stuck in a collective (its peer frozen by SIGSTOP) that gets SIGTERM ends within seconds,
    naming the signal, instead of at SIGKILL or --timeout (60 s here); a second SIGTERM, 1.5 s after
    the first, ends it at once, before that grace."""
    prog = os.path.join(BIN, "06_full")
    for second in (False, True):
        tag = f"{tmp}/stuck{int(second)}_{{rank}}.jsonl"
        cmd = [MPIEXEC, "-n", "2", prog] + SMALL + ["--epochs", "100000", "--timeout", "60", "--metrics", tag]
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
        try:
            first = tag.format(rank=1)
            t0 = time.time()
            while not os.path.exists(first) or os.path.getsize(first) == 0:
                if time.time() - t0 > 60 or p.poll() is not None:
                    raise Failure("the job did not start training")
                time.sleep(0.05)
            pid0, pid1 = rank_pid(tag, 0), rank_pid(tag, 1)
            if pid0 is None or pid1 is None:
                raise Failure(f"the ranks' processes were not found ({pid0}, {pid1})")
            os.kill(pid1, signal.SIGSTOP)
            time.sleep(0.5)  # rank 0 is now inside a collective that cannot finish
            os.kill(pid0, signal.SIGTERM)
            if second:
                time.sleep(1.5)
                os.kill(pid0, signal.SIGTERM)
            t0 = time.time()
            limit = 1.5 if second else 20
            while proc_running(pid0, prog) and time.time() - t0 < 60:
                time.sleep(0.05)
            took = time.time() - t0
        finally:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
            _, err = p.communicate()
        what = "the second SIGTERM" if second else "SIGTERM"
        if took > limit:
            raise Failure(f"rank 0, stuck in a collective, still ran {took:.1f} s after {what} (at most {limit} "
                          f"s expected; --timeout 60)\nstderr: {err[-800:]}")
        if not second and "after a SIGTERM or SIGUSR1" not in err:
            raise Failure(f"rank 0 ended {took:.1f} s after SIGTERM without saying why:\n{err[-800:]}")
        print(f"{what}: rank 0 ended {took:.1f} s after it")


SCENARIOS[preempt_stuck.__name__] = preempt_stuck

# ---- review: the digest docs/06_full.md pastes for its launchers --------------------------------------

def docs06_launcher_digest(tmp):
    """docs/06_full.md's torchrun run, and its claim that mpirun -np 2 and scripts/launch.sh -n 2 end at
    the same param_digest: the commands end at one digest, and, where this machine's OpenBLAS runs the
    chapters' kernel (docs/README.md, "its kernel: K"; the programs' start-up line names it), at the
    digest pasted there. OPENBLAS_CORETYPE is never set here: on another kernel only the agreement of
    the launchers is checked (their digests differ from the paste by rounding, not by mistake)."""
    with open(os.path.join(ROOT, "docs", "06_full.md")) as f:
        text = f.read()
    with open(os.path.join(ROOT, "docs", "README.md")) as f:
        docs_kernel = re.search(r"its kernel: (\w+)", f.read()).group(1)
    block = text[text.index("$ torchrun --standalone --nproc_per_node 2"):]
    pasted = re.search(r"\[default0\]:done: 8 steps, param_digest ([0-9a-f]{16})", block).group(1)
    claim = re.search(r"`scripts/launch.sh -n 2` with the same flags end at `param_digest ([0-9a-f]{16})` too",
                      block).group(1)
    args = ["--device", "cpu", "--data", "synthetic", "--dataset_size", "2048", "--hidden", "64", "--epochs", "1",
            "--save_interval", "0"]
    got, kernel = {}, None
    for launcher in ("mpirun", "launch"):
        out, _ = run("06_full", args, np=2, tmp=tmp, launcher=launcher)
        got[launcher] = re.search(r"done: 8 steps, param_digest ([0-9a-f]{16})", out).group(1)
        kernel = re.search(r"^blas: \S+ \S+, kernel (\S+),", out, re.M).group(1)
    if len(set(got.values())) != 1 or claim != pasted:
        raise Failure(f"docs/06_full.md pastes param_digest {pasted} (torchrun) and {claim} (mpirun, launch.sh); "
                      f"the commands end at {got}")
    if kernel != docs_kernel:
        print(f"mpirun and launch.sh agree ({got['mpirun']}); OpenBLAS kernel {kernel}, not the docs' "
              f"{docs_kernel}: the pasted {pasted} is not compared")
        return
    if got["mpirun"] != pasted:
        raise Failure(f"docs/06_full.md pastes param_digest {pasted}; with the docs' OpenBLAS kernel {kernel} the "
                      f"commands end at {got}")
    print(f"docs/06_full.md's digest {pasted}: mpirun and launch.sh end there (kernel {kernel})")


SCENARIOS[docs06_launcher_digest.__name__] = docs06_launcher_digest

def main():
    global LAUNCHER, SCENARIO_TMP
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("scenario", choices=sorted(SCENARIOS))
    ap.add_argument("--launcher", choices=["mpirun", "launch", "torchrun"], default="mpirun",
                    help="how multi-rank runs start (launch, torchrun: the Gloo backend)")
    a = ap.parse_args()
    LAUNCHER = a.launcher
    if LAUNCHER == "torchrun" and torchrun_cmd(1) is None:
        print("skipped: torchrun is not installed (apt-get install python3-torch)")
        return SKIP
    # DDP_CHECK_TMPDIR: where the scenario's folder goes (the exercise checker's own temporary folder,
    # which it removes even when it has to kill a scenario that hangs)
    tmp = tempfile.mkdtemp(prefix=a.scenario + "-", dir=os.environ.get("DDP_CHECK_TMPDIR") or None)
    SCENARIO_TMP = tmp
    signal.signal(signal.SIGTERM, on_term)
    try:
        rc = SCENARIOS[a.scenario](tmp) or 0
    except Failure as e:
        print(f"FAILED {a.scenario}: {e}", file=sys.stderr)
        return 1
    except Stopped:
        print(f"{a.scenario}: stopped by SIGTERM", file=sys.stderr)
        return 128 + signal.SIGTERM
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if rc == 0:
        print(f"ok {a.scenario}: {SCENARIOS[a.scenario].__doc__.strip().splitlines()[0]}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
