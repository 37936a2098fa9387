#!/usr/bin/env python3
"""Integration checks: run the real step programs and test what the course claims.

Each scenario is a function below; CTest runs `check.py SCENARIO` (see tests.cmake). A scenario
raises Failure with a sentence saying which claim broke; the process then exits 1.
Standard library only, so a fresh machine needs nothing beyond python3.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

BIN = os.environ.get("DDP_BIN_DIR", "build/bin")
MPIEXEC = os.environ.get("DDP_MPIEXEC", "mpiexec")
FASHION = "/usr/share/datasets/fashion-mnist"
SKIP = 77  # CTest's SKIP_RETURN_CODE

# Small and fast: a 784-64-10 MLP on 2,048 synthetic samples trains in well under a second per run.
SMALL = ["--device", "cpu", "--data", "synthetic", "--dataset_size", "2048", "--hidden", "64",
         "--lr", "0.05", "--momentum", "0.9", "--log_interval", "1000", "--save_interval", "0"]


class Failure(Exception):
    pass


def run(step, args, np=1, expect_rc=0, tmp=None):
    """Runs build/bin/<step> (under mpiexec when np > 1); returns (stdout, stderr)."""
    cmd = [os.path.join(BIN, step)] + list(args)
    if np > 1:
        cmd = [MPIEXEC, "-n", str(np)] + cmd
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp)
    if expect_rc is not None and (p.returncode == 0) != (expect_rc == 0):
        raise Failure(f"{' '.join(cmd)} exited {p.returncode}, expected "
                      f"{'0' if expect_rc == 0 else 'non-zero'}\n--- stdout\n{p.stdout}\n--- stderr\n{p.stderr}")
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


SCENARIOS = {f.__name__: f for f in [step01_learns, step01_deterministic, step01_resume,
                                      step01_bad_input, step01_fashion_mnist]}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("scenario", choices=sorted(SCENARIOS))
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix=a.scenario + "-")
    try:
        rc = SCENARIOS[a.scenario](tmp) or 0
    except Failure as e:
        print(f"FAILED {a.scenario}: {e}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if rc == 0:
        print(f"ok {a.scenario}: {SCENARIOS[a.scenario].__doc__.strip().splitlines()[0]}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
