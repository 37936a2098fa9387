"""The harness's settings, read once from the environment (DDP_BIN_DIR, DDP_MPIEXEC, DDP_TEST_SEED, ...),
the programs' small and fast flags, the exceptions a scenario raises, and SIGTERM's handling.

LAUNCHER is rebound by the scenario runner (--launcher): read it as env.LAUNCHER, not imported by name.
"""
import os



BIN = os.environ.get("DDP_BIN_DIR", "build/bin")
MPIEXEC = os.environ.get("DDP_MPIEXEC", "mpiexec")
# The Fashion-MNIST folder the programs read by default: CTest passes the build's
# (DDP_FASHION_MNIST_DIR, from common/data/data.h); run by hand, the Debian package's folder.
FASHION = os.environ.get("DDP_FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")
SKIP = 77  # CTest's SKIP_RETURN_CODE
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAUNCH_SH = os.path.join(ROOT, "scripts", "launch.sh")
# How run() starts several ranks (python3 -m tests.harness --launcher): "mpirun" (the MPI backend), "launch"
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


class Skip(Exception):
    """A scenario that cannot run here (e.g. no Python with torch): the runner prints the reason and exits
    SKIP (hooks_check.py's)."""


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
