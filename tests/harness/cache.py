"""The exercise checker's cache of reference runs (DDP_REFERENCE_CACHE), used by launch.run().

SCENARIO_TMP is set by the scenario runner: read it as cache.SCENARIO_TMP, not imported by name.
"""
import hashlib
import json
import os
import shutil
import tempfile

from tests.harness import env as harness_env
from tests.harness.env import BIN


# ---- the exercise checker's cache of reference runs ---------------------------------------------------
#
# DDP_REFERENCE_CACHE=DIR (set by exercises/checker/wrong_solutions.py, right_solutions.py and
# exercises/selftest.sh for one test, or by CTest for all the checker's tests of a suite run: one folder
# in the build, emptied at its start by the fixture exercise_reference_runs): a successful run of a program of the main build (in the checker's bin/, a link out of it; the
# learner's program is never cached) is kept in DIR, and the same run again is replayed from there:
# its output and the files it wrote in the scenario's folder. "The same run" is the same program file
# (path, size, time), the same command line and rank count and launcher, the same environment of the
# programs (the checker's own settings, which no program reads, left out: CACHE_ENV_SKIP), and the
# same files in the scenario's folder before it (path and content: a run that
# resumes the learner's checkpoint is another run). The programs are deterministic (the tests prove
# it bit for bit), so a replay is the run; it spares the checker's selftest running step 06 as the
# reference of step 07 or 08 once per typical wrong solution.
REF_CACHE = os.environ.get("DDP_REFERENCE_CACHE")
SCENARIO_TMP = None  # the scenario's folder (main())
PLACEHOLDER = "\0scenario\0"
# The checker's and the harness's own variables: what a claim runs is in its command line. (DDP_CLAIMS and
# DDP_UNIT differ between a selftest's parts and between wrong solutions: kept in the key, they made
# every part and every other claim list run the same references again.)
CACHE_ENV_SKIP = ("DDP_BIN_DIR", "DDP_CHECK_TMPDIR", "DDP_REFERENCE_CACHE", "DDP_EXE_RECORD", "DDP_CLAIMS",
                  "DDP_UNIT", "DDP_ALLOW_WEAK", "DDP_CHECK_TIMEOUT", "DDP_BUILD_DIR", "DDP_BUILD_OUT", "DDP_PORTS")


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
    h.update(json.dumps([real, st.st_size, st.st_mtime_ns, step, np, launcher or harness_env.LAUNCHER,
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
