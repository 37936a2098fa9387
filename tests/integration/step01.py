"""Step 01 (one process): training, determinism, resume, bad input, warnings.
"""
import os

from tests.harness.env import FASHION, SKIP, SMALL, Failure
from tests.harness.families import max_steps_epoch_end, max_steps_resume, mid_epoch_other_batch
from tests.harness.launch import run
from tests.harness.results import metrics
from tests.harness.scenario import register, scenario


# ---- step 01 ----------------------------------------------------------------------------------------

@scenario()
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


@scenario()
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


@scenario()
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


@scenario()
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


@scenario()
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


@scenario()
def step01_warnings(tmp):
    """A resume that has nothing left to train says so instead of ending in silence."""
    run("01_single_gpu", SMALL + ["--epochs", "1", "--save_interval", "1", "--ckpt_dir", f"{tmp}/ck"])
    out, _ = run("01_single_gpu", SMALL + ["--epochs", "1", "--resume", f"{tmp}/ck/checkpoint.bin"])
    if "nothing to train" not in out or "--epochs" not in out:
        raise Failure(f"a finished run resumed should warn that there is nothing to train: {out!r}")
    out, _ = run("01_single_gpu", SMALL + ["--epochs", "2", "--resume", f"{tmp}/ck/checkpoint.bin"])
    if "warning:" in out:
        raise Failure(f"a resume with an epoch left to train should not warn: {out!r}")


# A --max_steps stop inside an epoch resumes exactly; a mid-epoch checkpoint refuses other samples per
# step (--batch_size x --grad_accum) or --drop_last; a --max_steps stop at an epoch's end saves, whatever
# --save_interval says.
register(max_steps_resume("01_single_gpu", 1))
register(mid_epoch_other_batch("01_single_gpu", 1))
register(max_steps_epoch_end("01_single_gpu", 1))
