"""Integration checks of issue 35: gradient clipping by the global norm (every step), DDP's
communication hooks (step 06) and the finite check before a bucket's collective.

Each scenario is a function below, registered with the harness's runner (CTest runs
`python3 -m tests.harness SCENARIO`, the test hooks_SCENARIO; tests/integration/tests.cmake).
The helpers and the error model are the harness's (tests/harness/parity.py): every run's seed comes from
DDP_TEST_SEED, and a comparison of two runs is bit for bit where the arithmetic is the same, within
that error model elsewhere. The comparisons with PyTorch run its own functions (hooks_torch.py) with
a Python that has torch; without one they are skipped (status 77).
"""
import json
import math
import os
import random
import shutil
import struct
import subprocess
import sys

from tests.harness import env as harness_env
from tests.harness.env import SEED, Failure, Skip, small
from tests.harness.launch import files_created_in, run
from tests.harness.parity import KAPPA, U, f32_ulp, flag, gamma
from tests.harness.ports import free_master_port
from tests.harness.results import ckpt_params_momentum, digests, metrics, read_checkpoint, tensor_slices
from tests.harness.scenario import register

HERE = os.path.dirname(os.path.abspath(__file__))
PROBE = os.path.join(harness_env.BIN, "hooks_probe")


def torch_python():
    """A Python that imports torch: this one, the system's, or python3 on PATH; None if none does."""
    for exe in (sys.executable, "/usr/bin/python3", shutil.which("python3")):
        if exe and os.path.exists(exe) and subprocess.run(
                [exe, "-c", "import torch"], capture_output=True).returncode == 0:
            return exe
    return None


def torch_run(*args):
    exe = torch_python()
    if exe is None:
        raise Skip("no Python with torch here (apt-get install python3-torch)")
    p = subprocess.run([exe, os.path.join(HERE, "hooks_torch.py")] + [str(a) for a in args],
                       capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise Failure(f"hooks_torch.py {' '.join(map(str, args))} exited {p.returncode}\n{p.stderr}")
    return p.stdout


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def floats(path, skip=0):
    data = open(path, "rb").read()
    return list(struct.unpack(f"<{len(data) // 4}f", data))[skip:]


def write_floats(path, xs):
    with open(path, "wb") as f:
        f.write(struct.pack(f"<{len(xs)}f", *xs))


def bits(xs):
    """The float32 bytes of xs, to compare bit for bit (NaNs included) in one comparison."""
    return struct.pack(f"<{len(xs)}f", *xs)


def step_records(prefix, rank=0):
    return metrics(f"{prefix}{rank}.jsonl")[0]


# ---- clipping ------------------------------------------------------------------------------------------

# A model's gradient tensors (784-64-10) plus one of extremes: values over 30 orders of magnitude,
# subnormals and zeros, so that every exponent path of the exact sums (clip.c) is used.
SHAPES = [[64, 784], [64], [10, 64], [10], [300]]


def gradients(rng):
    out = []
    for shape, scale in zip(SHAPES, (1e-3, 1e-1, 1e-2, 1.0)):
        out += [rng.gauss(0, scale) for _ in range(math.prod(shape))]
    extremes = [0.0, -0.0, 1e-45, -3e-42, 1.2e-38, 5e-30, 3.0, -250.0]
    out += [rng.choice(extremes) * rng.uniform(0.5, 2) for _ in range(SHAPES[-1][0])]
    return [f32(x) for x in out]


def clip_cases(tmp, cases, shards=5):
    """hooks_probe's clip of each (tag, g, MAX, shapes) against torch's clip_grad_norm_ on the same numbers;
    returns {tag: (our norm, our clipped gradients, torch's results)}."""
    jobs, ours, cmd = [], {}, [PROBE, "clip"]
    for tag, g, max_norm, shapes in cases:
        write_floats(f"{tmp}/{tag}.in", g)
        cmd += [repr(max_norm), f"{tmp}/{tag}.in", f"{tmp}/{tag}.out", str(shards)]
    p = subprocess.run(cmd, capture_output=True, text=True)  # one process: loading the libraries takes time
    if p.returncode != 0:
        raise Failure(f"hooks_probe clip: the sums of squares over {shards} shards differ from the whole "
                      f"gradient's (they must be exact, clip.c):\n{p.stderr}{p.stdout}")
    for tag, g, max_norm, shapes in cases:
        out = floats(f"{tmp}/{tag}.out")
        ours[tag] = out[0], out[1:]
        jobs.append([f"{tmp}/{tag}.in", shapes, max_norm, repr(out[0]), f"{tmp}/{tag}.t"])
    with open(f"{tmp}/jobs.json", "w") as f:
        json.dump(jobs, f)
    torch_run("clip", f"{tmp}/jobs.json")
    res = {}
    for tag, g, _, _ in cases:
        t = json.load(open(f"{tmp}/{tag}.t"))
        tb = floats(f"{tmp}/{tag}.t.bin")
        t["clipped"], t["scaled_ours"] = tb[:len(g)], tb[len(g):]
        res[tag] = ours[tag] + (t,)
    return res


def clip_vs_torch(tmp):
    """--clip_grad_norm's clipper (common/nn/clip.c) against torch.nn.utils.clip_grad_norm_ on the same
    gradients: the norm within float32 rounding of the exact one and of torch's, the clipped gradients
    bit for bit given the norm; the sums of squares equal over any cut into shards."""
    rng = random.Random(f"clip-{SEED}")
    g = gradients(rng)
    n_max = max(math.prod(s) for s in SHAPES)
    bad = {}
    for tag, x in (("nan", float("nan")), ("inf", float("inf"))):
        bad[tag] = list(g)
        bad[tag][rng.randrange(len(g))] = x
    # and many small gradients with a MAX each, for the factor's float32 rounding (a plain MAX / (norm +
    # 1e-6) differs from PyTorch's reciprocal-then-multiply in the last bit for about one in four)
    small_cases = []
    for i in range(48):
        h = [f32(rng.gauss(0, 10 ** rng.uniform(-4, 2))) for _ in range(64)]
        small_cases.append((f"s{i}", h, f32(rng.uniform(0.01, 0.99) * math.sqrt(sum(x * x for x in h))), [[64]]))
    res = clip_cases(tmp, [("a", g, 0.25, SHAPES), ("b", g, 1e30, SHAPES), ("nan", bad["nan"], 1.0, SHAPES),
                           ("inf", bad["inf"], 1.0, SHAPES)] + small_cases)
    for tag, h, max_norm, _ in small_cases:
        ours, clipped, t = res[tag]
        if bits(clipped) != bits(t["scaled_ours"]) or abs(ours - t["norm64"]) > f32_ulp(t["norm64"]):
            raise Failure(f"a gradient of 64 values, MAX {max_norm!r}: norm {ours!r} (float64 {t['norm64']!r}), "
                          f"factor {clipped[0] / h[0] if h[0] else 0!r} vs clip_grad_norm_'s {t['coef']!r} on "
                          f"that norm: the factor must be clip_grad_norm_'s float32 (1 / (norm + 1e-6)) * MAX")
    print(f"{len(small_cases)} small gradients with their own MAX: each norm within an ulp of the exact one, "
          "each clipped gradient equal to clip_grad_norm_'s expression bit for bit")
    for tag, max_norm in (("a", 0.25), ("b", 1e30)):
        ours, clipped, t = res[tag]
        # Ours: an exact sum, rounded in double, its root, rounded once to float32: within an ulp of
        # the float64 norm (which is itself accurate to ~1e-16).
        if abs(ours - t["norm64"]) > f32_ulp(t["norm64"]):
            raise Failure(f"our norm {ours!r} is not the float32 rounding of the exact norm {t['norm64']!r}")
        # torch's: float32 norms per tensor, then the norm of the norms; a float32 sum of n positive
        # terms is within gamma_n of the exact one (Higham §4.2), its root within half of that, and the
        # two roots and the outer sum add a few u.
        bound = (gamma(n_max + len(SHAPES)) + 4 * U) * t["norm64"]
        if abs(ours - t["norm"]) > bound:
            raise Failure(f"our norm {ours!r} vs clip_grad_norm_'s {t['norm']!r}: more than the float32 "
                          f"bound {bound:.3g} apart")
        if bits(clipped) != bits(t["scaled_ours"]):
            i = next(i for i, (a, b) in enumerate(zip(clipped, t["scaled_ours"])) if bits([a]) != bits([b]))
            raise Failure(f"MAX {max_norm}: gradient {i} clipped to {clipped[i]!r}, but clip_grad_norm_'s "
                          f"expression (MAX / (norm + 1e-6), clamped to 1) on our norm gives "
                          f"{t['scaled_ours'][i]!r}")
        same = ours == t["norm"] and bits(clipped) == bits(t["clipped"])
        if max_norm > 1e29 and bits(clipped) != bits(g):
            raise Failure("a MAX far above the norm changed the gradients (the factor must be exactly 1)")
        print(f"MAX {max_norm:g}: norm {ours!r}, torch {t['norm']!r} ({abs(ours - t['norm']) / bound:.2g} of the "
              f"bound), float64 {t['norm64']!r}; factor {t['coef']!r}; clipped gradients equal torch's "
              f"expression bit for bit{' and clip_grad_norm_ itself' if same else ''}")
    # Non-finite values: NaN gives a NaN norm, an infinity +inf (PyTorch's default, error_if_nonfinite
    # False): the metrics file writes either as null.
    for tag in ("nan", "inf"):
        ours, _, t = res[tag]
        if repr(ours) != tag or repr(float(t["norm"])) != tag:
            raise Failure(f"a gradient of {tag}: our norm is {ours!r}, torch's {t['norm']!r}; both should be {tag}")
    print("a NaN or an infinity among the gradients: norm nan or inf, as clip_grad_norm_'s")


CLIP = small(hidden=63)  # 784-63-10: a parameter count no multiple of 2 or 3 (shards are padded)


def clip_max(tmp):
    """A MAX that clips: half the first step's norm at this seed (06 at one rank, one step)."""
    run("06_full", CLIP + ["--max_steps", "1", "--clip_grad_norm", "1e30", "--metrics", f"{tmp}/n{{rank}}.jsonl"])
    return 0.5 * step_records(f"{tmp}/n")[0]["grad_norm"]


def first_step(tmp, tag, step, np, args):
    """(params, momentum) after one step from the initial state (the momentum is that step's gradient:
    SGD's first step copies it) and rank 0's record of the step."""
    run(step, CLIP + args + ["--max_steps", "1", "--save_interval", "1000", "--ckpt_dir", f"{tmp}/{tag}",
                             "--metrics", f"{tmp}/{tag}{{rank}}.jsonl"], np=np)
    params, m = ckpt_params_momentum(f"{tmp}/{tag}/checkpoint.bin")
    return params, m, step_records(f"{tmp}/{tag}")[0]


def clip_words(xs):
    """clip.c's exact sums of the squares of the float32 values xs: CLIP_SUMS (512) integers, words 2e
    and 2e + 1 the high and low 24 bits of the squared significands of exponent e; words 0 and 1 count
    the NaNs and the infinities."""
    words = [0] * 512
    for (b,) in struct.iter_unpack("<I", bits(xs)):
        e, m = (b >> 23) & 0xff, b & 0x7fffff
        if e == 0xff:
            words[0 if m else 1] += 1
            continue
        m, e = (m | 0x800000, e) if e else (m, 1)
        words[2 * e] += (m * m) >> 24
        words[2 * e + 1] += (m * m) & 0xffffff
    return words


def norm_of_words(words):
    """clip_norm_of_sums (clip_backend.h) in the same order: the float32 norm of 512 exact sums."""
    if words[0]:
        return float("nan")
    if words[1]:
        return float("inf")
    total = 0.0
    for e in range(254, 0, -1):
        total += math.ldexp(words[2 * e], 2 * e - 276) + math.ldexp(words[2 * e + 1], 2 * e - 300)
    return f32(math.sqrt(total))


def torch_coef(norm, max_norm):
    """clip_grad_norm_'s factor in float32: (1 / (norm + 1e-6)) * MAX, clamped to 1 (clip_backend.h)."""
    return min(f32(f32(1 / f32(norm + f32(1e-6))) * f32(max_norm)), 1.0)


# Factors a learner may write instead of clip_grad_norm_'s (issue 40, K1 and K2): (name, factor, cause)
OTHER_FACTORS = [
    ("one division", lambda n, mx: min(f32(f32(mx) / f32(n + f32(1e-6))), 1.0),
     "the factor is MAX / (norm + 1e-6) in one division: clip_grad_norm_ multiplies by a reciprocal, "
     "(1 / (norm + 1e-6)) * MAX, which differs in the last bit for about one norm in four (clip_scale computes "
     "it so; a factor of your own must too)"),
    ("no 1e-6", lambda n, mx: min(f32(f32(1 / n) * f32(mx)), 1.0),
     "the factor lacks the + 1e-6: clip_grad_norm_'s is (1 / (norm + 1e-6)) * MAX"),
    ("no 1e-6, one division", lambda n, mx: min(f32(f32(mx) / n), 1.0),
     "the factor is MAX / norm: clip_grad_norm_'s is (1 / (norm + 1e-6)) * MAX, with the + 1e-6 and a reciprocal"),
]


def telling_max(norm, others=OTHER_FACTORS):
    """A MAX that clips (about half the norm) at which clip_grad_norm_'s float32 factor differs from each
    of OTHER_FACTORS: the same check then rejects them at every seed (a MAX chosen otherwise lets a
    one-division factor pass for about three norms in four)."""
    mx = f32(0.5 * norm)
    # Up from about half the norm, one float32 at a time: usually within a few steps, but where 1/norm
    # rounds to nearly its exact value the two factors agree for thousands of MAXes (seed 11's scaled
    # norm, 4.51e37: 9,161 steps); 65,536 steps stay within 0.8 % of half the norm.
    for _ in range(1 << 16):
        c = torch_coef(norm, mx)
        if c < 1 and all(f(norm, mx) != c for _, f, _ in others):
            return mx
        mx = struct.unpack("<f", struct.pack("<I", struct.unpack("<I", struct.pack("<f", mx))[0] + 1))[0]
    raise Failure(f"no MAX near {0.5 * norm!r} tells clip_grad_norm_'s factor from the others at norm {norm!r} "
                  "(is the norm so large that + 1e-6 rounds away?)")


def shard_ranges(n, W):
    """(start, end) of each rank's shard of n floats: W shards of S = ceil(n / W) (the last padded)."""
    S = -(-n // W)
    return [(r * S, min(n, (r + 1) * S)) for r in range(W)]


def partial_reduce(got_norm, ref_norm, prefix, n):
    return (f"grad_norm {got_norm!r} where the whole gradient's is {ref_norm!r}: what rank 0 computes when only the "
            f"first c of the {n} doubles of t->clip.sums are all-reduced, for c from {prefix[0]} to {prefix[-1]}",
            f"the all-reduce covers only the first part of the sums: its count must be CLIP_SUMS ({n}), in doubles "
            "(DIST_DOUBLE), not a part of it (a gradient below 2 has no square past word 255)")


def clip_diagnosis(step, W, mx, g, ref_norm, got_norm, got_m, got_p=None, want_p=None, words_first=False):
    """None when a sharded step's first clipped step is right, else what went wrong and its likely cause,
    from more than the norm's ratio: the logged norm against what each typical mistake logs (computed
    exactly from the unclipped gradient g), the factor each rank's shard of the momentum was scaled by,
    and the parameters."""
    shards = shard_ranges(len(g), W)
    words = [clip_words(g[a:b]) for a, b in shards]
    total = [sum(w) for w in zip(*words)]
    if norm_of_words(total) != ref_norm:
        raise Failure(f"step 06 logged grad_norm {ref_norm!r}, but its gradient's exact norm is "
                      f"{norm_of_words(total)!r}: the reference itself is wrong")
    if bits([got_norm]) != bits([ref_norm]):
        # rank 0's norm when only the first c words are all-reduced, for which c (a range: the words
        # whose squares do not matter at float32 precision cannot be told apart)
        prefix = [c for c in range(1, len(total)) if got_norm == norm_of_words(total[:c] + words[0][c:])]
        if prefix and words_first:
            return partial_reduce(got_norm, ref_norm, prefix, len(total))
        local = [norm_of_words(w) for w in words]
        if got_norm in local:
            return (f"grad_norm {got_norm!r}, the norm of rank {local.index(got_norm)}'s shard alone (the whole "
                    f"gradient's is {ref_norm!r})", "each rank clips by its own shard's norm (a local norm): "
                    "the ranks' sums of squares must be added (all-reduced, DIST_SUM) before the root")
        if got_norm == f32(sum(local)) or got_norm == f32(f32(local[0] + local[1]) + sum(local[2:])):
            return (f"grad_norm {got_norm!r}, the sum of the {W} shards' norms {', '.join(map(repr, local))} (the "
                    f"whole gradient's is {ref_norm!r})", "the ranks' norms were added: the norm of the whole is "
                    "the root of the sum of the squares, so add the sums of squares (t->clip.sums), then take the root")
        if got_norm == norm_of_words([W * x for x in total]):
            return (f"grad_norm {got_norm!r}, sqrt({W}) times the whole gradient's {ref_norm!r}",
                    f"the sums of squares were added {W} times over (all-reduced twice, or a full gradient's sums "
                    "all-reduced)")
        if prefix:
            return partial_reduce(got_norm, ref_norm, prefix, len(total))
        if got_norm <= mx < ref_norm:
            return (f"grad_norm {got_norm!r}, at most MAX {mx!r}, where the gradient's norm before clipping is "
                    f"{ref_norm!r}", "the norm logged is the clipped gradient's: clip_grad_norm_ returns (and the "
                    "step records log) the norm before clipping, the one clip_scale computes from the sums")
        return (f"grad_norm {got_norm!r}, the whole gradient's is {ref_norm!r}, and it is neither a shard's norm, nor "
                "their sum, nor sqrt(W) times the whole", "the norm was taken before the reduce-scatter was waited for "
                "(reducer_finalize_backward): the shard then held this rank's own gradient, not yet the mean; clip "
                "once the step's gradient is complete")
    coef = torch_coef(ref_norm, mx)
    factors = [("clip_grad_norm_'s", lambda n, m: coef, None), ("1 (not scaled)", lambda n, m: 1.0, None)]
    factors += OTHER_FACTORS
    seen = []
    for a, b in shards:
        name = next((name for name, f, _ in factors if bits([f32(x * f(ref_norm, mx)) for x in g[a:b]]) ==
                     bits(got_m[a:b])), None)
        seen.append(name)
    if seen == ["clip_grad_norm_'s"] * W:
        if got_p is not None and bits(got_p) != bits(want_p):
            return ("the momentum after the first step is the clipped gradient, but the parameters differ from "
                    "step 06's", "the update used the gradient before clipping: the momentum buffer (t->opt.buf) "
                    "was scaled after sgd_step; scale the gradient shard before sgd_step")
        return None
    what = f"{step} at {W} ranks, MAX {mx!r}, grad_norm {ref_norm!r} (right): the first step's gradient"
    unscaled = [r for r, s in enumerate(seen) if s == "1 (not scaled)"]
    if unscaled and len(unscaled) < W and all(s in ("clip_grad_norm_'s", "1 (not scaled)") for s in seen):
        return (f"{what} was scaled by clip_grad_norm_'s factor {coef!r} on rank(s) "
                f"{', '.join(str(r) for r in range(W) if r not in unscaled)}, not on rank(s) "
                f"{', '.join(map(str, unscaled))}", "only some ranks scale their shard (e.g. inside `if (rank == 0)`): "
                "every rank scales its own shard of the gradient (clip_scale on every rank)")
    if seen == ["1 (not scaled)"] * W:
        return (f"{what} was not scaled at all (expected x {coef!r})", "the gradient shard was not scaled before "
                "sgd_step (scaling the momentum buffer t->opt.buf, or a buffer other than my_shard(t, t->model.grads), "
                "does not scale this step's gradient)")
    for name, _, cause in OTHER_FACTORS:
        if seen == [name] * W:
            return f"{what} was scaled by the factor {name} (expected x {coef!r})", cause
    a, b = shards[0]
    i = next((i for i in range(a, b) if g[i] and bits([got_m[i]]) != bits([f32(g[i] * coef)])), a)
    return (f"{what}: element {i} is {got_m[i]!r}, expected {f32(g[i] * coef)!r} (x {coef!r}; shards scaled by "
            f"{', '.join(s or 'another factor' for s in seen)})", "every rank must scale its shard by "
            "min(1, (1 / (norm + 1e-6)) * MAX), clip_grad_norm_'s factor, once the norm is the whole gradient's")


def scaled_checkpoint(src, dst, k):
    """A copy of checkpoint src (784-63-10) whose layer 0 is scaled by 2^-k and layer 1's weight by 2^k:
    the same forward pass (powers of two), but a gradient whose layer 0 part is 2^k times larger (so its
    sums use the upper words of CLIP_SUMS; the CRC recomputed)."""
    import zlib
    hdr, params = read_checkpoint(src)
    data = bytearray(open(src, "rb").read())
    hsize = struct.unpack_from("<I", data, 12)[0]
    (_, a, _), (_, _, b), (_, c, d) = tensor_slices(hdr["sizes"])[:3]
    new = list(params)
    new[a:b] = [math.ldexp(x, -k) for x in params[a:b]]
    new[c:d] = [math.ldexp(x, k) for x in params[c:d]]
    struct.pack_into(f"<{len(new)}f", data, hsize, *new)
    struct.pack_into("<I", data, len(data) - 4, zlib.crc32(bytes(data[:-4])))
    with open(dst, "wb") as f:
        f.write(data)


def clip_first_steps(tmp):
    """Part 1 of clip_steps_np2: the factor and the norm of one clipped step, in 01, 06 and 07 alike."""
    # MAX chosen from the unclipped step's norm (a MAX of 1e30 logs the norm and scales by exactly 1)
    for step, np, extra in (("01_single_gpu", 1, ["--batch_size", "128"]), ("06_full", 2, ["--batch_size", "64"])):
        _, m0, rec0 = first_step(tmp, f"u{step[:2]}", step, np, extra + ["--clip_grad_norm", "1e30"] +
                                 (["--save_init", f"{tmp}/init"] if step == "06_full" else []))
        norm = f32(rec0["grad_norm"])  # (written with 9 digits: the float32 exactly)
        mx = telling_max(norm)
        p1, m1, rec = first_step(tmp, f"c{step[:2]}", step, np, extra + ["--clip_grad_norm", repr(mx)])
        if f32(rec.get("grad_norm", math.nan)) != norm:
            raise Failure(f"{step}: grad_norm {rec.get('grad_norm')} with --clip_grad_norm {mx}, {norm} with 1e30")
        coef = torch_coef(norm, mx)
        want = [f32(x * coef) for x in m0]
        if bits(want) != bits(m1):
            i = next(i for i, (a, b) in enumerate(zip(want, m1)) if bits([a]) != bits([b]))
            raise Failure(f"{step}: the first step's gradient element {i} is {m1[i]!r} with clipping, "
                          f"{m0[i]!r} without: expected {want[i]!r} (x {coef!r} = min(1, (1 / (norm + 1e-6)) * MAX) "
                          f"for grad_norm {norm!r})")
        print(f"{step} at {np} rank(s): the first gradient scaled by {coef!r}, bit for bit (grad_norm {norm!r}, "
              f"MAX {mx!r}: a one-division factor or one without + 1e-6 would differ)")
    # 07 (the exercise's program), from the same state as 06 at 2 ranks: the same sums of two terms, so
    # the same gradient, norm, factor and update, bit for bit; a difference is diagnosed.
    p7, m7, rec7 = first_step(tmp, "c07", "07_zero", 2, ["--batch_size", "64", "--clip_grad_norm", repr(mx)])
    bad = clip_diagnosis("07_zero", 2, mx, m0, norm, f32(rec7.get("grad_norm", math.nan)), m7, p7, p1)
    if bad:
        raise Failure(f"07_zero at 2 ranks, the first step with --clip_grad_norm {mx!r}: {bad[0]}\n"
                      f"likely cause: {bad[1]}")
    print("07_zero at 2 ranks: grad_norm, factor, momentum and parameters of the first clipped step as 06's")
    # Every word of the sums: the same state with layer 0 scaled down and layer 1 up by 2^k, so that the
    # gradient's largest elements lie near float32's top exponent and its smallest among the subnormals
    # (an all-reduce of only a part of t->clip.sums, e.g. CLIP_SUMS / 2 doubles, then changes the norm).
    k = 126 - math.frexp(norm)[1]
    scaled_checkpoint(f"{tmp}/init/checkpoint.bin", f"{tmp}/big.bin", k)
    big = ["--batch_size", "64", "--resume", f"{tmp}/big.bin"]
    _, g, rec = first_step(tmp, "ub", "06_full", 2, big + ["--clip_grad_norm", "3e38"])  # (above 2^126)
    words = clip_words(g)
    used = [w for w in range(2, 512) if words[w]]
    nb = f32(rec["grad_norm"])
    if not (math.isfinite(nb) and used[-1] >= 480):
        raise Failure(f"the scaled state (2^{k}): grad_norm {nb!r}, sums up to word {used[-1]}: expected a finite "
                      "norm from words past 480")
    mxb = telling_max(nb, OTHER_FACTORS[:1])  # (+ 1e-6 is lost in a norm this large)
    _, m7, rec7 = first_step(tmp, "cb", "07_zero", 2, big + ["--clip_grad_norm", repr(mxb)])
    # (the small words were all-reduced above: a norm that now differs is first of all a partial all-reduce)
    bad = clip_diagnosis("07_zero", 2, mxb, g, nb, f32(rec7.get("grad_norm", math.nan)), m7, words_first=True)
    if bad:
        raise Failure(f"07_zero at 2 ranks, a gradient whose squares reach word {used[-1]} of the sums: {bad[0]}\n"
                      f"likely cause: {bad[1]}")
    print(f"a gradient whose squares use words {used[0]}..{used[-1]} of the sums (grad_norm {nb!r}): 07_zero's "
          "norm and clipped step as 06's")
    return mx


def norm_diagnosis(ref, got, W):
    """The likely cause of a sharded trainer's grad_norm `got` where the whole gradient's is `ref`, from
    their ratio alone (part 2 of clip_steps_np2, and clip_norm_np3: clip_diagnosis has ruled out the typical
    mistakes at the first step already)."""
    r = got / ref
    if r < 1:
        return ("the norm is smaller than the whole gradient's: each rank clips by its own shard's norm (a "
                "local norm): the ranks' sums of squares must be added (all-reduced, DIST_SUM) before the root")
    if abs(r - math.sqrt(W)) < 1e-3 * math.sqrt(W):
        return (f"the norm is sqrt({W}) times the whole gradient's: the sums of squares were added {W} times over "
                "(all-reduced twice, or a full gradient's sums all-reduced)")
    return "a sharded trainer must add every rank's sums of squares (all-reduce), then take the root"


def clip_steps_np2(tmp):
    """With --clip_grad_norm active, steps 06, 07 and 08 at 2 ranks train bit for bit alike (losses,
    grad_norm, digests; with and without --grad_accum), and the step's gradient is scaled by exactly
    clip_grad_norm_'s factor (01, 06 and 07, at a MAX where the other ways to write it differ)."""
    # 1. the factor and the norm of one step, with diagnoses (clip_first_steps)
    clip_first_steps(tmp)
    mx = clip_max(tmp)
    # 2. 06, 07 and 08 alike, bit for bit: every sum of two terms is the same, and the norm is exact.
    # With micro-batches, 08 reduce-scatters each one and adds the shards (06 and 07 add the micro-
    # batches first, then the ranks): another order, so there only 06 and 07 are compared.
    for extra, steps in ((["--batch_size", "64"], ("06_full", "07_zero", "08_fsdp")),
                         (["--batch_size", "32", "--grad_accum", "2"], ("06_full", "07_zero"))):
        common = CLIP + extra + ["--epochs", "1", "--clip_grad_norm", repr(mx)]
        seen = {}
        for step in steps:
            run(step, common + ["--metrics", f"{tmp}/{step}{{rank}}.jsonl"], np=2)
            d = digests(f"{tmp}/{step}", 2)
            recs = step_records(f"{tmp}/{step}")
            if len(set(d)) != 1:
                raise Failure(f"{step} at 2 ranks with clipping: the replicas differ ({d})")
            if any("grad_norm" not in r for r in recs):
                raise Failure(f"{step}: a step record without grad_norm under --clip_grad_norm")
            seen[step] = (d[0], [r["loss"] for r in recs], [r["grad_norm"] for r in recs])
        ref = seen["06_full"]
        if max(ref[2]) <= mx:
            raise Failure(f"no step's norm exceeded MAX {mx}: the comparison never clipped")
        for step in steps[1:]:
            got = seen[step]
            if got[2] != ref[2]:
                k = next(k for k, (a, b) in enumerate(zip(ref[2], got[2])) if a != b)
                raise Failure(f"{' '.join(extra)}: {step}'s grad_norm at step {k + 1} is {got[2][k]!r}, step 06's "
                              f"{ref[2][k]!r}\nlikely cause: {norm_diagnosis(ref[2][k], got[2][k], 2)}")
            if got != ref:
                raise Failure(f"{' '.join(extra)}: {step} logs step 06's norms but its losses or digest differ "
                              f"({got[0]} vs {ref[0]}): is every shard scaled by the factor?")
        clipped = sum(1 for x in ref[2] if x > mx)
        print(f"{' '.join(extra)}: {', '.join(s[:2] for s in steps)} equal bit for bit over {len(ref[2])} steps ({clipped} clipped), "
              f"digest {ref[0]}")


def clip_norm_np3(tmp):
    """At 3 ranks, one step from the same state (clipping active before it): steps 07's and 08's
    grad_norm equal step 06's within the harness's error model (tests/harness/parity.py)."""
    np, B, k = 3, 43, 5
    mx = clip_max(tmp)
    common = CLIP + ["--batch_size", str(B), "--epochs", "1", "--clip_grad_norm", repr(mx), "--save_interval", "1000"]
    run("06_full", common + ["--max_steps", str(k), "--ckpt_dir", f"{tmp}/s"], np=np)
    start = f"{tmp}/s/checkpoint.bin"
    p0, m0 = ckpt_params_momentum(start)
    out = {}
    for step in ("06_full", "07_zero", "08_fsdp"):
        run(step, common + ["--max_steps", str(k + 1), "--resume", start, "--ckpt_dir", f"{tmp}/{step}",
                            "--metrics", f"{tmp}/{step}{{rank}}.jsonl"], np=np)
        recs = step_records(f"{tmp}/{step}")
        if len(set(digests(f"{tmp}/{step}", np))) != 1:
            raise Failure(f"{step} at {np} ranks: the replicas differ after one clipped step")
        out[step] = recs[-1]["grad_norm"], ckpt_params_momentum(f"{tmp}/{step}/checkpoint.bin")[1]
    # The error model (tests/harness/parity.py): every gradient element of two programs differs by at most
    # 2·gamma_n·KAPPA·G, n = the global batch plus the ranks, G the step's largest gradient element (here
    # max|m' - mu·m| / factor: the momentum took the clipped gradient). The norms then differ by at most
    # the 2-norm of that difference (the triangle inequality), sqrt(P) times it, plus the one rounding
    # of each norm (clip.h: the sums are exact).
    ref, m_ref = out["06_full"]
    mu = float(flag(common, "momentum"))
    coef = min(f32(f32(1 / f32(ref + f32(1e-6))) * f32(mx)), 1.0)
    G = max(abs(a - mu * b) for a, b in zip(m_ref, m0)) / coef
    bound = math.sqrt(len(m0)) * 2 * gamma(np * B + np) * KAPPA * G + 2 * f32_ulp(ref)
    for step in ("07_zero", "08_fsdp"):
        got = out[step][0]
        if abs(got - ref) > bound:
            raise Failure(f"step {k + 1} from the same state at {np} ranks: {step}'s grad_norm {got!r}, step 06's "
                          f"{ref!r}: {abs(got - ref):.3g} apart, more than rounding ({bound:.3g})\nlikely cause: "
                          f"{norm_diagnosis(ref, got, np)}")
        print(f"{step}: grad_norm {got!r} vs step 06's {ref!r}: {abs(got - ref) / bound:.2g} of the bound {bound:.2g}")


# ---- communication hooks ----------------------------------------------------------------------------

def bucket_values(rng, n):
    """A bucket of gradients, not divided by W: magnitudes from fp16's subnormals (where the division
    by W in 16 bits rounds) to 40000 (whose sum over 2 ranks, 80000, overflows fp16: dividing after
    the sum would give inf)."""
    out = []
    for i in range(n):
        scale = (1e-7, 1e-5, 1e-3, 1.0, 300.0, 40000.0)[i % 6]
        out.append(f32(rng.uniform(0.5, 1.0) * scale * rng.choice((-1, 1))))
    return out


def hook_vs_torch(tmp):
    """--comm_hook fp16 and bf16 (common/comm_hooks/comm_hook.c) against PyTorch's own fp16_compress_hook and
    bf16_compress_hook on the same bucket contents at 2 ranks: bit for bit (every sum has two terms);
    the bytes handed to the collective are 2 per element."""
    W, n = 2, 6000
    rng = random.Random(f"hook-{SEED}")
    for r in range(W):
        write_floats(f"{tmp}/in{r}.bin", bucket_values(rng, n))
    hows = dict(line.split() for line in torch_run(
        "hook", "fp16,bf16", W, f"{tmp}/in{{rank}}.bin", f"{tmp}/torch_{{name}}{{rank}}.bin",
        free_master_port()).strip().splitlines() if line.split()[0] in ("fp16", "bf16"))
    for name in ("fp16", "bf16"):
        cmd = [harness_env.MPIEXEC, "-n", str(W), PROBE, "hook", name, f"{tmp}/in{{rank}}.bin", f"{tmp}/ours{{rank}}.bin"]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if p.returncode != 0:
            raise Failure(f"{' '.join(cmd)} exited {p.returncode}\n{p.stdout}\n{p.stderr}")
        nbytes = int(p.stdout.split("bytes ")[1].split()[0])
        if nbytes != 2 * n:
            raise Failure(f"{name}: the hook handed {nbytes} bytes to the all-reduce of {n} floats: expected {2 * n}")
        how = hows[name]
        ours = [floats(f"{tmp}/ours{r}.bin") for r in range(W)]
        theirs = [floats(f"{tmp}/torch_{name}{r}.bin") for r in range(W)]
        if bits(ours[0]) != bits(ours[1]):
            raise Failure(f"{name}: the ranks' buckets differ after the hook")
        for r in range(W):
            if bits(ours[r]) != bits(theirs[r]):
                i = next(i for i, (a, b) in enumerate(zip(ours[r], theirs[r])) if bits([a]) != bits([b]))
                g = [floats(f"{tmp}/in{q}.bin")[i] for q in range(W)]
                raise Failure(f"{name}, rank {r}, element {i} (the ranks' gradients {g}): ours {ours[r][i]!r}, "
                              f"PyTorch's {name}_compress_hook {theirs[r][i]!r}: the hook casts to 16 bits, then "
                              f"divides by W in 16 bits, then sums; dividing after the sum overflows, dividing "
                              f"before the cast rounds differently")
        inf = sum(1 for x in ours[0] if math.isinf(x))
        print(f"{name}: {n} elements at {W} ranks equal PyTorch's hook bit for bit (its all-reduce: {how}); "
              f"{nbytes} bytes; {inf} infinities")


def hook_bytes_np2(tmp):
    """Step 06 at 2 ranks: allreduce_bytes is 4 bytes per parameter per step with the default
    all-reduce, 2 with fp16 and bf16; the default equals a run without --comm_hook bit for bit; the
    16-bit hooks train (the loss falls) and keep the replicas identical."""
    common = CLIP + ["--batch_size", "64", "--epochs", "1"]
    out = {}
    for name in ("none", "allreduce", "fp16", "bf16"):
        extra = [] if name == "none" else ["--comm_hook", name]
        stdout, _ = run("06_full", common + extra + ["--metrics", f"{tmp}/{name}{{rank}}.jsonl"], np=2)
        d = digests(f"{tmp}/{name}", 2)
        if len(set(d)) != 1:
            raise Failure(f"--comm_hook {name}: the replicas differ ({d})")
        steps, epochs, final = metrics(f"{tmp}/{name}0.jsonl")
        n = int(stdout.split(" parameters")[0].split()[-1])
        out[name] = (d[0], epochs[-1].get("allreduce_bytes"), len(steps), n, [s["loss"] for s in steps])
    if out["none"][0] != out["allreduce"][0]:
        raise Failure("--comm_hook allreduce does not train exactly as the default")
    for name, per in (("allreduce", 4), ("fp16", 2), ("bf16", 2)):
        digest, nbytes, k, n, losses = out[name]
        if nbytes != per * n * k:
            raise Failure(f"--comm_hook {name}: allreduce_bytes {nbytes}, expected {per} x {n} parameters x {k} "
                          f"steps = {per * n * k}")
        if not losses[-1] < losses[0]:
            raise Failure(f"--comm_hook {name}: the loss did not fall ({losses[0]} -> {losses[-1]})")
        print(f"--comm_hook {name}: allreduce_bytes {nbytes} ({per} per parameter per step), loss "
              f"{losses[0]:.4f} -> {losses[-1]:.4f}, digest {digest}")


def powersgd_vs_torch(tmp):
    """--comm_hook powersgd (common/comm_hooks/powersgd.c) against PyTorch's own powerSGD_hook at 2 ranks, from the
    same initial Q, two iterations (the second with error feedback and warm start): the uncompressed
    tensors bit for bit, the compressed ones within float32 rounding; the bytes are the factors'."""
    W, n = 2, 784 * 64 + 64 + 640 + 10
    rng = random.Random(f"psgd-{SEED}")
    scales = [(50176, 1e-2), (64, 1e-1), (640, 3e-2), (10, 1.0)]
    for it in (1, 2):
        for r in range(W):
            g = []
            for count, scale in scales:
                g += [f32(rng.gauss(0, scale)) for _ in range(count)]
            write_floats(f"{tmp}/g{it}_{r}.bin", g)
    write_floats(f"{tmp}/q.bin", [f32(rng.gauss(0, 1)) for _ in range(784 + 64)])
    cmd = [harness_env.MPIEXEC, "-n", str(W), PROBE, "powersgd", f"{tmp}/q.bin", f"{tmp}/g1_{{rank}}.bin",
           f"{tmp}/g2_{{rank}}.bin", f"{tmp}/ours{{iter}}_{{rank}}.bin"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        raise Failure(f"{' '.join(cmd)} exited {p.returncode}\n{p.stdout}\n{p.stderr}")
    nbytes = int(p.stdout.split("bytes ")[1].split()[0])
    want_bytes = 2 * 4 * ((64 + 10) + (64 + 10) + (784 + 64))  # per iteration: biases, Ps, Qs
    if nbytes != want_bytes:
        raise Failure(f"powersgd handed {nbytes} bytes to its collectives in two iterations, expected {want_bytes}")
    torch_run("powersgd", W, f"{tmp}/q.bin", f"{tmp}/g1_{{rank}}.bin", f"{tmp}/g2_{{rank}}.bin",
              f"{tmp}/torch{{iter}}_{{rank}}.bin", free_master_port())
    # The error model: P = M·Q sums 784 products, the norms of P's and Q's columns 64 and 784 squares,
    # Q = Mᵀ·P 64 products; each is within gamma_784 of its exact value relative to the sum of the
    # absolute terms (Higham §3.1), and the estimate P·Qᵀ chains four of them: within 4·gamma_784 of
    # PyTorch's, relative to its largest element, per iteration; the second adds the first's error
    # (error feedback): 8·gamma_784. The sums of absolute terms are not exposed: they are bounded by
    # KAPPA times the largest element, the allowance for cancellation of every parity test
    # (tests/harness/parity.py). The biases are all-reduced as they are: two terms, bit for bit.
    bound = 8 * gamma(784) * KAPPA
    biases = list(range(50176, 50240)) + list(range(50880, 50890))
    for it in (1, 2):
        for r in range(W):
            ours, theirs = floats(f"{tmp}/ours{it}_{r}.bin"), floats(f"{tmp}/torch{it}_{r}.bin")
            if bits([ours[i] for i in biases]) != bits([theirs[i] for i in biases]):
                raise Failure(f"iteration {it}, rank {r}: the biases (not compressed: all-reduced, divided by W) "
                              f"differ from powerSGD_hook's")
            top = max(abs(x) for x in theirs)
            worst = max(range(n), key=lambda i: abs(ours[i] - theirs[i]))
            ratio = abs(ours[worst] - theirs[worst]) / (bound * top)
            if ratio > 1:
                raise Failure(f"iteration {it}, rank {r}: element {worst} is {ours[worst]!r}, powerSGD_hook's "
                              f"{theirs[worst]!r}: {ratio:.3g} times the bound {bound:.2g} x {top:.3g}"
                              + ("; the first iteration agrees: is the error fed back (added before, kept "
                                 "after), and the Q kept for the next iteration (warm start)?" if it == 2 else ""))
            print(f"iteration {it}, rank {r}: largest difference {abs(ours[worst] - theirs[worst]):.3g}, "
                  f"{ratio:.2g} of the bound; biases bit for bit")
    print(f"{nbytes} bytes in two iterations (a float32 all-reduce: {2 * 4 * n})")


def powersgd_resume_np2(tmp):
    """--comm_hook powersgd at 2 ranks: a run resumed from a checkpoint (inside an epoch, after
    PowerSGD started) ends bit for bit where the uninterrupted run ends (each rank's error feedback
    and the Qs are saved beside the checkpoint, as powersgd.step<S>.rank<R>.bin). Every rank saves its
    state of step S before rank 0 writes the checkpoint of step S, and removes older states only after
    it: the folder a rank killed between those leaves (the checkpoint of step 5 with states of 5 and 7;
    the checkpoint of 7 with states of 7 and 5) resumes exactly too, and the next save removes the
    stale states. Without rank 1's state, or with a state of another step under its name: refused."""
    common = CLIP + ["--batch_size", "64", "--epochs", "2", "--comm_hook", "powersgd", "--powersgd_start_iter", "3"]
    run("06_full", common + ["--save_interval", "0", "--metrics", f"{tmp}/a{{rank}}.jsonl"], np=2)
    a = digests(f"{tmp}/a", 2)
    la = [r["loss"] for r in step_records(f"{tmp}/a")]
    for at in (5, 7):
        os.makedirs(f"{tmp}/ck{at}")
        created = files_created_in(f"{tmp}/ck{at}")  # the kernel's order of the creations, or None
        run("06_full", common + ["--max_steps", str(at), "--save_interval", "1000", "--ckpt_dir", f"{tmp}/ck{at}"],
            np=2)
        names = sorted(os.listdir(f"{tmp}/ck{at}"))
        want = ["checkpoint.bin", f"powersgd.step{at}.rank0.bin", f"powersgd.step{at}.rank1.bin"]
        if names != want:
            raise Failure(f"a run saved at step {at} left {names} in its --ckpt_dir, expected {want}")
        # the order of the saves: each is written to a temporary file, then renamed; every state's
        # temporary file must be created before the checkpoint's (inotify queues the creations in order)
        if created is None:
            print(f"step {at}: the order of the saves not checked (no inotify on this system)")
            continue
        order = created()
        ckpt = [i for i, n in enumerate(order) if n.startswith("checkpoint.bin.tmp.")]
        states = [i for i, n in enumerate(order) if n.startswith(f"powersgd.step{at}.rank")]
        if len(ckpt) != 1 or len(states) != 2 or max(states) > ckpt[0]:
            raise Failure(f"at step {at} the files were created in the order {order}: every PowerSGD state must be "
                          "written before the checkpoint, or a rank killed in between leaves a checkpoint "
                          "without its state, which no restart can resume")

    def resume(tag, folder, at):
        run("06_full", common + ["--save_interval", "0", "--resume", f"{folder}/checkpoint.bin",
                                 "--metrics", f"{tmp}/{tag}{{rank}}.jsonl"], np=2)
        b = digests(f"{tmp}/{tag}", 2)
        if b != a:
            raise Failure(f"{tag}: resumed at step {at}: digests {b}, uninterrupted {a}: is PowerSGD's state "
                          "(error feedback, Q, iteration) saved with the checkpoint and loaded on resume, on every "
                          "rank?")
        if la[at:] != [r["loss"] for r in step_records(f"{tmp}/{tag}")]:
            raise Failure(f"{tag}: resumed at step {at}: the digests agree but the per-step losses after it do not")

    resume("b", f"{tmp}/ck7", 7)
    # Killed after the states of step 7, before the checkpoint of step 7: the folder of step 5 plus them
    shutil.copytree(f"{tmp}/ck5", f"{tmp}/before")
    for r in range(2):
        shutil.copy(f"{tmp}/ck7/powersgd.step7.rank{r}.bin", f"{tmp}/before")
    resume("c", f"{tmp}/before", 5)
    # Killed after the checkpoint of step 7, before the states of step 5 were removed
    shutil.copytree(f"{tmp}/ck7", f"{tmp}/after")
    for r in range(2):
        shutil.copy(f"{tmp}/ck5/powersgd.step5.rank{r}.bin", f"{tmp}/after")
    with open(f"{tmp}/after/powersgd.step3.rank1.bin.tmp", "wb") as f:
        f.write(b"half a state")  # and a save killed midway, long ago
    resume("d", f"{tmp}/after", 7)
    run("06_full", common + ["--max_steps", "9", "--save_interval", "1000", "--resume", "auto",
                             "--ckpt_dir", f"{tmp}/after"], np=2)
    names = sorted(os.listdir(f"{tmp}/after"))
    if names != ["checkpoint.bin", "powersgd.step9.rank0.bin", "powersgd.step9.rank1.bin"]:
        raise Failure(f"after a save at step 9 the folder holds {names}: the stale states (of steps 5 and 7, and "
                      "a .tmp) should be gone")
    os.remove(f"{tmp}/ck7/powersgd.step7.rank1.bin")
    _, err = run("06_full", common + ["--save_interval", "0", "--resume", f"{tmp}/ck7/checkpoint.bin"], np=2,
                 expect_rc=None)
    if "powersgd.step7.rank1.bin" not in err:
        raise Failure(f"a resume without rank 1's PowerSGD state should be refused naming the file:\n{err}")
    shutil.copyfile(f"{tmp}/ck5/powersgd.step5.rank1.bin", f"{tmp}/ck7/powersgd.step7.rank1.bin")
    _, err = run("06_full", common + ["--save_interval", "0", "--resume", f"{tmp}/ck7/checkpoint.bin"], np=2,
                 expect_rc=None)
    if "state of step 5 for a checkpoint of step 7" not in err:
        raise Failure(f"a resume with rank 1's PowerSGD state of step 5 under the name of step 7's should be "
                      f"refused saying so:\n{err}")
    print(f"resumed at step 7 (PowerSGD from step 3): {len(la) - 7} more steps, digest {a[0]} as uninterrupted; "
          "so too from the folders a kill between the states and the checkpoint leaves (steps 5 and 7); the next "
          "save removed the stale states; without powersgd.step7.rank1.bin, or with step 5's under its name: refused")


# ---- the finite check -----------------------------------------------------------------------------

def hook_trace_np2(tmp):
    """--trace with a communication hook (step 06, 2 ranks): each step's communication span is named by
    what ran (`all-reduce` for the 16-bit hooks, `powersgd`), counts its elements in their own type
    (`fp16 values`, `bf16 values`: 2 bytes each; PowerSGD's floats: what it sent, its factors once it
    compresses) and starts after the trace's time zero (issue 40, V3: PowerSGD's spans were
    "collective bucket 0: 0 floats" at negative times, from events the hook never recorded; the 16-bit
    ones said "floats" and twice their size)."""
    import re
    common = CLIP + ["--batch_size", "64", "--epochs", "1", "--max_steps", "6", "--save_interval", "0"]
    span = re.compile(r"^(\S+) bucket (\d+): (\d+) (floats|fp16 values|bf16 values) \(([\d.]+) MiB\)$")
    for hook, what, unit, size in (("fp16", "all-reduce", "fp16 values", 2), ("bf16", "all-reduce", "bf16 values", 2),
                                   ("powersgd", "powersgd", "floats", 4)):
        extra = ["--comm_hook", hook] + (["--powersgd_start_iter", "3"] if hook == "powersgd" else [])
        run("06_full", common + extra + ["--trace", f"{tmp}/{hook}_{{rank}}.json"], np=2)
        with open(f"{tmp}/{hook}_0.json") as f:
            spans = [e for e in json.load(f)["traceEvents"] if e["ph"] == "X" and e["tid"] == 2]
        if len({e["args"]["step"] for e in spans}) != 6:
            raise Failure(f"--comm_hook {hook} --trace: communication spans of steps "
                          f"{sorted({e['args']['step'] for e in spans})}, expected one or more in each of 6 steps")
        counts = []
        for e in spans:
            m = span.match(e["name"])
            if not m or m.group(1) != what or m.group(4) != unit:
                raise Failure(f"--comm_hook {hook} --trace: a span named {e['name']!r}, expected '{what} bucket B: "
                              f"N {unit} (X MiB)'")
            n = int(m.group(3))
            if n == 0 or abs(float(m.group(5)) - n * size / 2 ** 20) > 0.006 or e["ts"] < 0:
                raise Failure(f"--comm_hook {hook} --trace: span {e['name']!r} at {e['ts']} us: its elements, their "
                              f"size ({size} bytes each) or its time (after the trace's start) are wrong")
            counts.append(n)
        if hook == "powersgd" and not min(counts) < max(counts):
            raise Failure(f"--comm_hook powersgd --trace: every span sent {counts[0]} floats: from iteration 3 on, "
                          "PowerSGD sends its factors, fewer than the gradients")
        print(f"--comm_hook {hook}: {len(spans)} spans, e.g. {spans[-1]['name']!r}")


def powersgd_world_size_np3(tmp):
    """--comm_hook powersgd: a checkpoint saved at 3 ranks (at an epoch's end, where a checkpoint itself
    resumes at any world size) is refused at 2 ranks, and one saved at 2 ranks is refused at 3, each
    naming both world sizes (issue 40, V1: 3 -> 2 resumed with exit 0 and dropped rank 2's error
    feedback); resumed at its own world size, each trains on."""
    common = CLIP + ["--batch_size", "64", "--comm_hook", "powersgd", "--powersgd_start_iter", "3"]
    for saved, other in ((3, 2), (2, 3)):
        ck = f"{tmp}/ck{saved}"
        run("06_full", common + ["--epochs", "1", "--save_interval", "1", "--ckpt_dir", ck], np=saved)
        resume = common + ["--epochs", "2", "--save_interval", "0", "--resume", f"{ck}/checkpoint.bin"]
        out, err = run("06_full", resume, np=other, expect_rc=1)
        text = out + err
        said = f"saved at {saved} ranks, this run has {other}"
        if said not in text and not (other > saved and "resume such a checkpoint at the same world size" in text):
            raise Failure(f"saved at {saved} ranks, resumed at {other}: refused, but without naming the world sizes "
                          f"('{said}'):\n{text[-1500:]}")
        run("06_full", resume, np=saved)
        line = next((l for l in text.splitlines() if "PowerSGD" in l and "ranks" in l), text.strip().splitlines()[-1])
        print(f"saved at {saved} ranks: refused at {other} ({line.strip()[:160]}), resumed at {saved}")


def powersgd_write_fails_np2(tmp):
    """--comm_hook powersgd at 2 ranks, its --ckpt_dir on a disk that fills up (a 128 KB tmpfs, mounted in
    a mount namespace of the job's own: a PowerSGD state is about 200 KB): the job ends, naming the file
    it could not write, and leaves no temporary file behind, as the checkpoint writer does (issue 40,
    V8: the state's .tmp stayed). Skipped where no mount namespace can be made (not root)."""
    import shlex
    common = CLIP + ["--batch_size", "64", "--epochs", "1", "--comm_hook", "powersgd", "--powersgd_start_iter", "3",
                     "--max_steps", "5", "--save_interval", "1000", "--ckpt_dir", f"{tmp}/ck"]
    os.makedirs(f"{tmp}/ck")
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"], capture_output=True)
    if probe.returncode != 0:
        print(f"skipped: no mount namespace here (unshare: {probe.stderr.decode().strip()})")
        return harness_env.SKIP
    job = " ".join(shlex.quote(a) for a in [harness_env.MPIEXEC, "-n", "2", os.path.join(harness_env.BIN, "06_full")]
                   + common)
    # the mount lives as long as the namespace's processes: nothing to unmount afterwards
    script = f"mount -t tmpfs -o size=128k ddp-full-disk {shlex.quote(tmp + '/ck')} && {job}; rc=$?; " \
             f"ls -A {shlex.quote(tmp + '/ck')} > {shlex.quote(tmp + '/left')}; exit $rc"
    p = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                       capture_output=True, text=True, timeout=300, cwd=tmp)
    out = p.stdout + p.stderr
    with open(f"{tmp}/left") as f:
        left = sorted(f.read().split())
    if p.returncode == 0:
        raise Failure(f"the job wrote its PowerSGD states (about 200 KB each) to a 128 KB disk and exited 0: "
                      f"{left}\n{out[-2000:]}")
    if "cannot write" not in out or "powersgd.step5.rank" not in out:
        raise Failure(f"the job ended (exit {p.returncode}) without naming the state it could not write:\n{out[-2000:]}")
    tmps = [n for n in left if ".tmp" in n]
    if tmps:
        raise Failure(f"a failed PowerSGD state write left {tmps} in --ckpt_dir ({left}): remove the temporary "
                      "file before ending, as the checkpoint writer does")
    line = next(l for l in out.splitlines() if "cannot write" in l)
    print(f"exit {p.returncode}: {line.strip()}; --ckpt_dir then held {left}")


def nan_run(tmp, tag, extra, at=3, var="DDP_TEST_NAN_BACKWARD"):
    """Step 06 at 2 ranks where rank 1's backward pass `at` turns a gradient into NaN (the test hook
    DDP_TEST_NAN_BACKWARD of common/nn/mlp.c, set on rank 1 only; var DDP_TEST_BIG_BACKWARD: into 1e6);
    returns (exit status, output, step records of rank 0)."""
    # the bucket model of steps 06 and 07 (tests/harness/families.py), 784-15-10112-10: at this cap, 3 buckets, layer 0's weight alone in the last
    args = small(hidden="15,10112") + ["--batch_size", "64", "--epochs", "1", "--bucket_cap_mb", "0.00005",
                   "--metrics", f"{tmp}/{tag}{{rank}}.jsonl"] + extra + harness_env.dist_args("06_full")
    prog = os.path.join(harness_env.BIN, "06_full")
    cmd = [harness_env.MPIEXEC, "-n", "1", prog] + args + [":", "-n", "1", "env", f"{var}={at}", prog] + args
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    path = f"{tmp}/{tag}0.jsonl"  # a job that ended has no final object: read the step lines
    recs = [json.loads(l) for l in open(path)] if os.path.exists(path) else []
    recs = [r for r in recs if r["type"] == "step"]
    return p.returncode, p.stdout + p.stderr, recs


def check_finite_nan_np2(tmp):
    """--check_finite: a NaN in one rank's gradients ends the job before the bucket's all-reduce,
    naming that rank, the step and the bucket's layers; without the flag the NaN spreads to every
    replica and only the loss check stops the job."""
    rc, out, recs = nan_run(tmp, "c", ["--check_finite"])
    want = "--check_finite: rank 1, step 3: 1 non-finite gradient value"
    if rc == 0 or want not in out:
        raise Failure(f"a NaN injected into rank 1's backward at step 3 with --check_finite: exit {rc}, and no "
                      f"line '{want}...'\n{out}")
    line = next(l for l in out.splitlines() if want in l)
    if "bucket 2 (layers 0 to 0)" not in line or "before its all-reduce" not in line:
        raise Failure(f"the message does not name the bucket's layers (layer 0, the only one poisoned): {line}")
    if any(r["step"] >= 3 for r in recs):
        raise Failure(f"rank 0 logged step 3 although rank 1's gradient was bad: {recs[-1]}")
    print(f"with --check_finite: exit {rc}: {line.strip()}")
    rc, out, recs = nan_run(tmp, "u", [])
    if rc == 0 or "step 4: the loss is nan" not in out:
        raise Failure(f"without --check_finite the NaN should reach every replica (every rank's parameters "
                      f"took it at step 3, and the loss check stops the job at step 4: 'the loss is nan'): exit {rc}\n{out}")
    print("without it: the all-reduce spread the NaN to every replica; the job ends only at the loss check: "
          + next(l for l in out.splitlines() if "the loss is nan" in l).strip())


def check_finite_fp16_np2(tmp):
    """--check_finite with --comm_hook fp16: a gradient finite in float32 but beyond fp16's range (1e6
    in rank 1's backward at step 3) ends the job before the all-reduce, naming the overflow, the rank
    and the bucket (issue 40, V2: the float32 check passed, the cast made it an infinity that reached
    every replica, and the next step's check said "no replica received it"); with bf16, whose range is
    float32's, the same gradient trains on."""
    rc, out, recs = nan_run(tmp, "f", ["--check_finite", "--comm_hook", "fp16"], var="DDP_TEST_BIG_BACKWARD")
    want = "--check_finite: rank 1: 1 gradient value of bucket 2 overflowed fp16 when the fp16 hook cast them"
    if rc == 0 or want not in out:
        raise Failure(f"a gradient of 1e6 in rank 1's backward at step 3 with --comm_hook fp16 --check_finite: "
                      f"exit {rc}, and no line '{want}...'\n{out[-2500:]}")
    if any(r["step"] >= 3 for r in recs):
        raise Failure(f"rank 0 logged step 3 although rank 1's gradient overflowed fp16: {recs[-1]}")
    print(f"fp16: exit {rc}: {next(l for l in out.splitlines() if want in l).strip()[:200]}")
    # (a gradient of 1e6 then drives the model out of its range some steps later: 4 steps show the point)
    rc, out, recs = nan_run(tmp, "b", ["--check_finite", "--comm_hook", "bf16", "--max_steps", "4"],
                            var="DDP_TEST_BIG_BACKWARD")
    if rc != 0 or [r["step"] for r in recs] != [1, 2, 3, 4]:
        raise Failure(f"the same gradient of 1e6 with --comm_hook bf16 (float32's range) should be sent, and train "
                      f"on to step 4: exit {rc}, steps {[r['step'] for r in recs]}\n{out[-2500:]}")
    print(f"bf16: sent, trained on to step {recs[-1]['step']}")


def hook_gloo_np2(tmp):
    """Step 06 at 2 ranks with each --comm_hook ends with the same digest on Gloo (scripts/launch.sh) as
    on MPI (mpirun): the 16-bit all-reduces (DIST_HALF, DIST_BF16) and PowerSGD's float ones sum two
    terms, which both backends add in float32 and round once: the same arithmetic."""
    common = CLIP + ["--batch_size", "64", "--epochs", "1"]
    for hook in ("fp16", "bf16", "powersgd"):
        d = {}
        start = ["--powersgd_start_iter", "3"] if hook == "powersgd" else []
        for launcher in ("mpirun", "launch"):
            tag = f"{tmp}/{hook}_{launcher}"
            run("06_full", common + start + ["--comm_hook", hook, "--metrics", f"{tag}{{rank}}.jsonl"], np=2,
                launcher=launcher)
            d[launcher] = digests(tag, 2)
        if len(set(d["mpirun"] + d["launch"])) != 1:
            raise Failure(f"--comm_hook {hook}: mpirun (MPI) ends at {d['mpirun']}, scripts/launch.sh (Gloo) at "
                          f"{d['launch']}: the backends' 16-bit or PowerSGD sums differ")
        print(f"--comm_hook {hook}: MPI and Gloo end at {d['mpirun'][0]}")


# CTest: hooks_<scenario>, labels integration and hooks (and those given), 300 s, 2 processors for the
# multi-rank ones (which need MPI; hook_gloo_np2 Gloo too: the hooks' collectives on the other CPU
# backend, the same digests as MPI).
def ddp_hooks(func, processors=1, labels=(), needs=None):
    register(func, test=f"hooks_{func.__name__}", processors=processors, timeout=300,
             labels=("integration", "hooks") + labels, needs=needs, env=("bin", "mpiexec", "mpi_env"), cache=False)


ddp_hooks(clip_vs_torch)
ddp_hooks(clip_steps_np2, processors=2, labels=("parity",))
ddp_hooks(clip_norm_np3, processors=2, labels=("parity",))
ddp_hooks(hook_vs_torch, processors=2)
ddp_hooks(hook_bytes_np2, processors=2)
ddp_hooks(hook_gloo_np2, processors=2, labels=("gloo", "parity"), needs=("gloo", "mpi"))
ddp_hooks(check_finite_nan_np2, processors=2)
ddp_hooks(check_finite_fp16_np2, processors=2)
ddp_hooks(powersgd_vs_torch, processors=2)
ddp_hooks(powersgd_resume_np2, processors=2, labels=("parity",))
ddp_hooks(powersgd_write_fails_np2, processors=2)
ddp_hooks(powersgd_world_size_np3, processors=2)
ddp_hooks(hook_trace_np2, processors=2)


if __name__ == "__main__":
    raise SystemExit("its scenarios run with the harness: python3 -m tests.harness NAME, from the repository's root "
                     "(tests/README.md)")
