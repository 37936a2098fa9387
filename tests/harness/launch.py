"""Starting the step programs: launch lines (mpirun, scripts/launch.sh, torchrun), run() (with the
exercise checker's reference-run cache, cache.py), ranks started by environment, and the processes
and files watched in /proc and by inotify.

hint(text, step): the likely cause of a failed run, from the hint tables registered in HINTERS (the
exercise checker's, exercises/checker/hints.py, registers its own on import).
"""
import functools
import os
import shutil
import struct
import subprocess
import tempfile
import time
import uuid

from tests.harness import cache as harness_cache
from tests.harness import env as harness_env
from tests.harness.cache import cache_keep, cache_key, cache_replay, tree_state
from tests.harness.env import BIN, LAUNCH_SH, MPIEXEC, dist_args, Failure, stop_if_terminated
from tests.harness.ports import free_master_port


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
    """(argv, env) that start np ranks of cmd under launcher (default: harness_env.LAUNCHER)."""
    launcher = launcher or harness_env.LAUNCHER
    if launcher == "mpirun":
        return [MPIEXEC, "-n", str(np)] + cmd, None
    if launcher == "launch":
        return [LAUNCH_SH, "-n", str(np)] + cmd, env_launch_env()
    tr = torchrun_cmd(np)
    if tr is None:
        raise Failure("torchrun is not installed (python3-torch)")
    return tr + cmd, env_launch_env()


# The hint tables: functions (output text, step or None) -> the likely cause of a failed run, or None.
# The harness has none of its own: the exercise checker's (exercises/checker/hints.py) registers its
# hint() here when it is imported (the scenario runner imports it with the scenarios).
HINTERS = []


def hint(text, step=None):
    """The likely cause of a failed run of `step` (a program's name, or None: any step) from its output:
    the first cause a registered hint table (HINTERS) finds, else None."""
    for table in HINTERS:
        cause = table(text, step)
        if cause:
            return cause
    return None


def run(step, args, np=1, expect_rc=0, tmp=None, launcher=None):
    """Runs build/bin/<step> (under LAUNCHER, or @p launcher, when np > 1); returns (stdout, stderr)."""
    key = cache_key(step, args, np, launcher) if expect_rc == 0 else None
    kept = cache_replay(key) if key else None
    if kept:
        return kept
    before = tree_state(harness_cache.SCENARIO_TMP) if key else None
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
