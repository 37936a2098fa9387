"""Parity: the comparison of two runs, bit for bit or within the float32 error model written out below.
"""
import math

from tests.harness.env import Failure
from tests.harness.launch import run
from tests.harness.results import (ckpt_params_momentum, digests, global_losses, metrics, read_checkpoint,
                                   tensor_slices)


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
    saying where a difference is beyond its bound). Also scripts/gpu/gpu_compare.py's (GPU against CPU)."""
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
                    "tests/harness/parity.py)")


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


def one_step_scaled(tmp, tag, ref, got, common, n_terms, factor, memo=None):
    """One step of `got` and one of `ref` at `factor` times the learning rate, both from ref's initial
    state (--save_init). SGD with momentum and no weight decay, from zero momentum, is linear in
    lr x gradient: a gradient `factor` times its mean moves the parameters as ref does at factor x lr,
    with factor times ref's momentum. factor is a power of two, so that factor x lr and factor x the
    momentum are exact. Returns (ref's loss, got's loss, whether got's step is ref's within the error
    model once ref's momentum is scaled by factor). memo: a dict that calls with the same ref, got and
    common share: got's step from ref's initial state, which no learning rate of ref changes, runs once."""
    common = with_flag(with_flag(common, "save_interval", 1000), "max_steps", 1)
    lr, mu = float(flag(common, "lr")), float(flag(common, "momentum"))
    init = f"{tmp}/{tag}init"
    out = []
    for i, (side, own, extra) in enumerate(((ref, with_flag(common, "lr", f"{lr * factor:.9g}"), ["--save_init", init]),
                                            (got, common, ["--resume", f"{init}/checkpoint.bin"]))):
        if i == 1 and memo is not None and "got" in memo:
            out.append(memo["got"])
            break
        name = f"{tag}{i}"
        prefix = side_run(tmp, side, own, extra + ["--ckpt_dir", f"{tmp}/{name}"], f"{name}_")
        loss = global_losses(prefix, side[1], int(side[0][:2]))[-1]
        out.append((loss,) + ckpt_params_momentum(f"{tmp}/{name}/checkpoint.bin"))
    (la, pa, ma), got_state = out
    if memo is not None:
        memo["got"] = got_state
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
    memo = {}
    la, lb, same = one_step_scaled(tmp, "d1_", ref, got, common, n_terms, 1, memo)
    if loss_within(la, lb, n_terms, np):
        return (f"likely cause: the loss logged at {np} ranks is {np} times the reference's from the first "
                f"step ({lb:.4f} vs {la:.4f}): did you sum the loss without dividing by the world "
                f"size (DIST_SUM instead of DIST_AVG)?")
    if not loss_within(la, lb, n_terms):
        return (f"likely cause: already the first step's loss differs ({lb:.6f} vs {la:.6f}), "
                f"before any update: the logged loss is not the global batch's mean, or the replicas "
                f"did not start from the same parameters")
    if not same and one_step_scaled(tmp, "dw_", ref, got, common, n_terms, np, memo)[2]:
        return (f"likely cause: the run trains exactly like the reference with {np} times the learning "
                f"rate: the gradients are {np} times their mean over the ranks: did you sum them "
                f"without dividing by the world size?")
    # Divided by W twice (averaged, and scaled by 1/W as well): the reference at lr / W.
    if not same and one_step_scaled(tmp, "dv_", ref, got, common, n_terms, 1 / np, memo)[2]:
        return (f"likely cause: the run trains exactly like the reference with 1/{np} of the learning "
                f"rate: every step moved 1/{np} as far as it should: the gradients are divided by the "
                f"world size twice (e.g. averaged, DIST_AVG, after being divided by W already)")
    if same:
        return ("likely cause: the first step matches, a later one does not: the ranks do not apply the "
                "gradient of the global batch every step (is every gradient tensor averaged, every step?)")
    return ("likely cause: the first step's loss matches, its update does not: the ranks do not apply the "
            "gradient of the global batch (is every gradient tensor averaged, every step?)")
