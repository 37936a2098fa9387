"""The one scenario runner: a registry of every scenario, with the CTest properties of its test(s).

A scenario is a function of the scenario's temporary folder (or of nothing) that raises Failure with a
sentence saying which claim broke, returns SKIP when it cannot run here, or returns None. The scenario
files register theirs:

    @scenario(processors=2, launchers=("launch",))
    def step02_redundant(tmp): ...

    register(replicas_identical("04_ddp_wrap", 2), processors=2, launchers=("launch",))   # a family

`python3 -m tests.harness NAME [--launcher mpirun|launch|torchrun]` runs one (main() below), and
`python3 -m tests.harness --list` prints one line per CTest test, which tests/integration/tests.cmake
reads at configure time:

    TEST LABELS PROCESSORS TIMEOUT SKIP NEEDS ENV ARGS...

(LABELS, NEEDS and ENV comma-separated, "-" when empty; NEEDS: mpi, gloo, the build's backends the
test needs; ENV: the variables tests.cmake sets, by name: bin, mpiexec, mpi_env, fashion; ARGS: the
runner's arguments.)
"""
import argparse
import importlib
import inspect
import os
import re
import shutil
import signal
import sys
import tempfile

from tests.harness import cache as harness_cache
from tests.harness import env as harness_env
from tests.harness.env import SKIP, Failure, Skip, Stopped, on_term
from tests.harness.launch import torchrun_cmd

# The scenario files, imported by the runner to fill the registry (in this order: the --list order).
MODULES = ("exercises.checker.hints", "tests.integration.step01", "tests.integration.step02",
           "tests.integration.step03", "tests.integration.step04", "tests.integration.step05",
           "tests.integration.step06", "tests.integration.step07", "tests.integration.step08",
           "tests.integration.step09",
           "tests.integration.launchers", "tests.integration.gloo", "tests.integration.docs",
           "tests.integration.probe_check", "tests.integration.store_check", "tests.integration.lighthouse_check",
           "tests.integration.hooks_check",
           "tests.integration.canary_check", "tests.integration.fr_check",
           "tests.integration.straggler_check", "tests.fault.live_drill", "exercises.checker.claims",
           "exercises.checker.live09")

# Label `parity`: the scenarios that compare two runs (bit for bit where the arithmetic is the same,
# one step from the same state within the float32 error model of tests/harness/parity.py elsewhere);
# every run's seed comes from DDP_TEST_SEED, so `DDP_TEST_SEED=7 ctest -L parity` checks another seed.
PARITY = re.compile(r"matches|resume|checkpoints|grad_accum|redundant|drift")
# The environment of an integration test (tests.cmake spells each out): DDP_BIN_DIR, DDP_MPIEXEC,
# scripts/mpi_env.sh's settings (DDP_MPI_ENV), DDP_FASHION_MNIST_DIR.
INTEGRATION_ENV = ("bin", "mpiexec", "mpi_env", "fashion")

REGISTRY = {}  # name: Scenario, in the order registered


class Scenario:
    """One scenario and the CTest test(s) that run it.

    name: what the runner is given and prints ("ok NAME: ...", "FAILED NAME: ...");
    test: its CTest test's name (default: name); with a launcher L, the launcher's test is
          gloo_<test> (L = launch) or L_<test>, run with --launcher L;
    processors, timeout, skip (SKIP_RETURN_CODE, None: none), env (see INTEGRATION_ENV);
    needs: the build's backends its test needs ("mpi", "gloo"); None: mpi when processors > 1 (the
          multi-rank runs start under mpirun), and gloo for a launcher's test;
    labels: its CTest labels; None: integration, gloo where it needs Gloo, parity where its name says
          it compares runs (PARITY);
    ctest: False for a claim of the exercise checker that is no CTest test;
    cache: the exercise checker's reference-run cache may replay its runs (cache.py);
    sigterm: SIGTERM stops it once the program that runs has ended (env.on_term), not at once."""

    def __init__(self, func, name=None, test=None, processors=1, timeout=600, skip=SKIP, env=INTEGRATION_ENV,
                 needs=None, labels=None, launchers=(), ctest=True, cache=True, sigterm=True):
        self.func = func
        self.name = name or func.__name__
        self.test = test or self.name
        self.processors, self.timeout, self.skip, self.env = processors, timeout, skip, tuple(env)
        self.needs, self.labels, self.launchers = needs, labels, tuple(launchers)
        self.ctest, self.cache, self.sigterm = ctest, cache, sigterm

    @property
    def doc(self):
        return self.func.__doc__

    def tests(self):
        """(test name, labels, needs, runner arguments) of each CTest test of this scenario."""
        out = []
        for launcher in (None,) + self.launchers:
            needs = list(self.needs) if self.needs is not None else []
            if launcher:
                test = (f"gloo_{self.test}" if launcher == "launch" else f"{launcher}_{self.test}")
                args = ["--launcher", launcher, self.name]
                needs.append("gloo")
            else:
                test, args = self.test, [self.name]
                if self.needs is None and self.processors > 1:
                    needs.append("mpi")
            labels = self.labels
            if labels is None:
                labels = ["integration"] + (["gloo"] if "gloo" in needs else []) + (
                    ["parity"] if PARITY.search(self.name) else [])
            out.append((test, list(labels), sorted(set(needs)), args))
        return out


def register(func, name=None, **props):
    """Registers func as a scenario (see Scenario for props); returns func."""
    s = Scenario(func, name=name, **props)
    if s.name in REGISTRY:
        raise ValueError(f"scenario {s.name} is registered twice")
    REGISTRY[s.name] = s
    return func


def scenario(**props):
    """The decorator form of register()."""
    return lambda func: register(func, **props)


def load():
    """Imports every scenario file (MODULES): the registry is then complete."""
    for m in MODULES:
        importlib.import_module(m)
    return REGISTRY


def find(name):
    """The scenario called name, or whose CTest test (without a launcher) is name; None if none."""
    if name in REGISTRY:
        return REGISTRY[name]
    return next((s for s in REGISTRY.values() if s.test == name), None)


def list_tests(out=sys.stdout):
    for s in REGISTRY.values():
        if not s.ctest:
            continue
        for test, labels, needs, args in s.tests():
            fields = [test, ",".join(labels) or "-", str(s.processors), str(s.timeout),
                      "-" if s.skip is None else str(s.skip), ",".join(needs) or "-", ",".join(s.env) or "-"]
            print(" ".join(fields + args), file=out)


def main(argv=None):
    load()
    ap = argparse.ArgumentParser(prog="python3 -m tests.harness",
                                 description="Integration checks: run the real step programs and test what the "
                                             "course claims (one scenario; tests/README.md).")
    ap.add_argument("scenario", nargs="?", help="the scenario (or its CTest test's name)")
    ap.add_argument("--launcher", choices=["mpirun", "launch", "torchrun"], default="mpirun",
                    help="how multi-rank runs start (launch, torchrun: the Gloo backend)")
    ap.add_argument("--list", action="store_true", help="print the CTest tests, one a line (for CMake)")
    a = ap.parse_args(argv)
    if a.list:
        list_tests()
        return 0
    s = find(a.scenario) if a.scenario else None
    if s is None:
        ap.error(f"argument scenario: invalid choice: {a.scenario!r} (choose from {', '.join(sorted(REGISTRY))})")
    name = s.name
    harness_env.LAUNCHER = a.launcher
    if harness_env.LAUNCHER == "torchrun" and torchrun_cmd(1) is None:
        print("skipped: torchrun is not installed (apt-get install python3-torch)")
        return SKIP
    # DDP_CHECK_TMPDIR: where the scenario's folder goes (the exercise checker's own temporary folder,
    # which it removes even when it has to kill a scenario that hangs)
    tmp = tempfile.mkdtemp(prefix=name + "-", dir=os.environ.get("DDP_CHECK_TMPDIR") or None)
    if s.cache:
        harness_cache.SCENARIO_TMP = tmp
    if s.sigterm:
        signal.signal(signal.SIGTERM, on_term)
    try:
        rc = (s.func(tmp) if inspect.signature(s.func).parameters else s.func()) or 0
    except Skip as e:
        print(f"skipped {name}: {e}")
        return SKIP
    except Failure as e:
        print(f"FAILED {name}: {e}", file=sys.stderr)
        return 1
    except Stopped:
        print(f"{name}: stopped by SIGTERM", file=sys.stderr)
        return 128 + signal.SIGTERM
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if rc == 0:
        print(f"ok {name}: {s.doc.strip().splitlines()[0]}")
    return rc
