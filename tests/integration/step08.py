"""Step 08 (FSDP, ZeRO stage 3): replicas, parity with step 06, checkpoints, memory, the trace, an uneven
test set.
"""
import json
import os
import random
import struct

from tests.harness.env import SEED, SMALL, Failure, small
from tests.harness.families import own_binary, tracks_06_at_3_ranks
from tests.harness.launch import run
from tests.harness.parity import PARAM_TOL, epoch_steps, one_step_parity
from tests.harness.results import (ckpt_params_momentum, digests, global_losses, logged_int, metrics,
                                   read_checkpoint, rel_diff)
from tests.harness.scenario import register, scenario


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


@scenario(processors=2)
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


@scenario(processors=2)
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


@scenario(processors=2)
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


@scenario(processors=2, launchers=("launch",))
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


# Every rank's gathered parameters identical at 2, 3 and 4 ranks, step 06's training within the
# tolerances (bit for bit at 2 ranks without accumulation).
for np in (2, 3, 4):
    register(step08_replicas(np), processors=2)
    register(step08_matches_step06(np), processors=2)
register(own_binary("08_fsdp"), ctest=False)  # the exercise checker's first claim
