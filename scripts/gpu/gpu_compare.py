#!/usr/bin/env python3
"""scripts/gpu/gpu_check.sh's comparisons of two runs' metrics files (scripts/gpu/gpu_verdict.sh calls it).

Usage: gpu_compare.py steps A.jsonl B.jsonl K | replicas PREFIX W | same A.jsonl B.jsonl |
       digest A.jsonl B.jsonl | trace TRACE.json | mfu PREFIX W K |
       one_step START.bin REF.bin REF.jsonl GOT.bin GOT.jsonl LR MU N_TERMS |
       clip A.jsonl B.jsonl MAX | hook_trace TRACE.json HOOK | finite LOG RC RANK STEP
Prints one line: ok|FAILED, a tab, the detail; mfu prints a phrase only (for another row's detail).

Each comparison is of one kind (the tests' rule): bit equality where the arithmetic is the same
(same, digest, replicas, clip), the float32 error model one step from the same state (one_step), or
structure (steps: two runs in other summation orders, e.g. the GPU's and the CPU's, log the same
steps; their values after many steps are shown, never judged: rounding grows with every step;
hook_trace: the spans a communication hook's trace holds; finite: how a run ended).
"""
import json, re, sys

# one_step's error model is the tests' own (tests/harness/parity.py, step_within_rounding): run from the
# repository's root, or with it on PYTHONPATH (scripts/gpu/gpu_check.sh does).

def recs(path, kind):
    with open(path) as f:
        return [o for o in map(json.loads, f) if o["type"] == kind]

def say(good, detail):
    print(("ok" if good else "FAILED") + "\t" + detail)

def mfu(prefix, w, k):
    """The last epoch's MFU of W ranks on K GPUs. Each rank's figure is its own GEMM rate against the
    whole GPU's peak (common/base/flops.c), so where ranks share a GPU the GPU's is their sum."""
    try:
        last = [recs(f"{prefix}{r}.jsonl", "epoch")[-1] for r in range(w)]
    except (OSError, IndexError, ValueError, KeyError):
        return "MFU: no epoch record"
    if any("mfu" not in e for e in last):
        return "MFU: unknown (this GPU's peak is not in common/base/flops.c)"
    u = [100 * e["mfu"] for e in last]
    if w > k:
        return (f"MFU of the {k} GPU(s) {sum(u) / k:.2f}% (the sum over the {w} ranks sharing them; "
                f"each rank's own figure, against the whole GPU, is 1/{w // k} of it or so)")
    return f"MFU per GPU {sum(u) / w:.2f}% (mean over the {w} ranks; min {min(u):.2f}%, max {max(u):.2f}%)"

# --trace's communication spans of each --comm_hook (common/monitor/trace.c): what ran, the unit of its
# elements and their bytes (tests/integration/hooks_check.py, hook_trace_np2, on the CPU)
HOOK_SPANS = {"fp16": ("all-reduce", "fp16 values", 2), "bf16": ("all-reduce", "bf16 values", 2),
              "powersgd": ("powersgd", "floats", 4)}

def hook_trace(path, hook):
    """A trace of step 06 with --comm_hook HOOK is well formed: the JSON document closed, the two
    tracks named, and every traced step has backward spans and communication spans named by what ran,
    each with elements, their MiB and a time after the trace's zero (issue 40, V3: PowerSGD's spans
    were "0 floats" at negative times, from events the hook never recorded). PowerSGD (started at
    iteration 3 or so) must send fewer floats once it compresses than before."""
    what, unit, size = HOOK_SPANS[hook]
    with open(path) as f:
        ev = json.load(f)["traceEvents"]
    tracks = {e["args"]["name"]: e["tid"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    if "communication" not in tracks or "compute: backward" not in tracks:
        return say(False, f"tracks {sorted(tracks)}: no 'communication' or 'compute: backward' track")
    spans = [e for e in ev if e["ph"] == "X"]
    comm = [e for e in spans if e["tid"] == tracks["communication"]]
    bw = {e["args"]["step"] for e in spans if e["tid"] == tracks["compute: backward"]}
    name = re.compile(r"^(\S+) bucket (\d+): (\d+) (.+) \(([\d.]+) MiB\)$")
    counts = []
    for e in comm:
        m = name.match(e["name"])
        if not m or m.group(1) != what or m.group(4) != unit:
            return say(False, f"a span named {e['name']!r}, expected '{what} bucket B: N {unit} (X MiB)'")
        n = int(m.group(3))
        if n == 0 or abs(float(m.group(5)) - n * size / 2 ** 20) > 0.006 or e["ts"] < 0 or e["dur"] < 0:
            return say(False, f"span {e['name']!r} at {e['ts']} us, {e['dur']} us: no elements, another size "
                              f"than {size} bytes each, or a time before the trace's start (unrecorded events?)")
        counts.append(n)
    steps = {e["args"]["step"] for e in comm}
    if not comm or steps != bw:
        return say(False, f"communication spans in steps {sorted(steps)}, backward spans in steps {sorted(bw)}: "
                          "expected both in every traced step")
    if hook == "powersgd" and not min(counts) < max(counts):
        return say(False, f"every span sent {counts[0]} floats: PowerSGD never compressed")
    say(True, f"{len(steps)} steps, {len(comm)} '{what}' spans of {min(counts)} to {max(counts)} {unit}")

def finite(log, rc, rank, step):
    """--check_finite with a NaN injected on rank RANK at step STEP: the job must end (not run on, not
    hang) with the reducer's line naming that rank and step, found before the bucket's collective."""
    want = f"--check_finite: rank {rank}, step {step}: "
    with open(log, errors="replace") as f:
        line = next((l.strip() for l in f if want in l), "")
    if rc == 0:
        say(False, f"exit 0: the run went on with rank {rank}'s NaN (no '{want}...' stop)")
    elif rc in (124, 137):
        say(False, f"still running after its time limit (timeout, exit {rc}): a hang, not the finite check's stop")
    elif not line:
        say(False, f"exit {rc}, but no line '{want}...' (another error ended it; see its log)")
    elif "before its" not in line:
        say(False, f"exit {rc}, the NaN not said to be found before the collective: {line[:140]}")
    else:
        say(True, f"exit {rc}: {line[:160]}")

def main(cmd, *a):
    if cmd == "mfu":  # prefix W K
        return print(mfu(a[0], int(a[1]), int(a[2])))
    try:
        if cmd == "steps":  # a.jsonl b.jsonl K: structure; the values are shown, not judged
            # fp32 on both sides in different summation orders (cuBLAS and the CPU's GEMM, TF32 and
            # fp32, or the collectives' orders at 3 ranks or more): the losses agree to ~1e-6 at
            # first and part as training goes on; no tolerance holds for every seed and kernel, so
            # only what no order changes is compared here, and the one_step rows prove the values.
            g, c = recs(a[0], "step"), recs(a[1], "step")
            k = int(a[2])
            same_steps = len(g) >= k and [x["step"] for x in g] == [y["step"] for y in c]
            d = max((abs(x["loss"] - y["loss"]) for x, y in zip(g[:k], c[:k])), default=float("nan"))
            ga, ca = recs(a[0], "epoch")[-1]["test_acc"], recs(a[1], "epoch")[-1]["test_acc"]
            say(same_steps, f"{len(g)} and {len(c)} steps (the same steps, {k} or more: "
                            f"{'yes' if same_steps else 'NO'}); shown, not judged: first {k} losses within "
                            f"{d:.1e}, final test accuracy {ga:.4f} and {ca:.4f}")
        elif cmd == "one_step":  # start.bin ref.bin ref.jsonl got.bin got.jsonl lr mu n_terms
            # Both runs resumed START and took one step on the same batch: they differ only by the
            # order of their float32 sums (cuBLAS's and the CPU GEMM's), which one step does not
            # amplify; the bound is the tests' error model, n_terms the additions on the way.
            from tests.harness import parity, results
            m0 = results.ckpt_params_momentum(a[0])[1]
            sizes = results.read_checkpoint(a[1])[0]["sizes"]
            ref = (recs(a[2], "step")[-1]["loss"],) + tuple(results.ckpt_params_momentum(a[1]))
            got = (recs(a[4], "step")[-1]["loss"],) + tuple(results.ckpt_params_momentum(a[3]))
            ratios, text = parity.step_within_rounding(m0, ref, got, float(a[5]), float(a[6]), int(a[7]), sizes)
            say(not text, text or "difference/bound at most " + ", ".join(f"{k} {v:.2g}" for k, v in ratios.items())
                + f" (float32 sums of {a[7]} terms in another order)")
        elif cmd == "replicas":  # prefix W
            d = [recs(f"{a[0]}{r}.jsonl", "final")[0]["param_digest"] for r in range(int(a[1]))]
            say(len(set(d)) == 1, f"{a[1]} ranks, digests {' '.join(sorted(set(d)))}"
                + ("" if len(set(d)) == 1 else " (DIFFERENT)"))
        elif cmd == "same":  # a.jsonl b.jsonl: the same arithmetic: identical losses and digests
            la, lb = recs(a[0], "step"), recs(a[1], "step")
            da, db = recs(a[0], "final")[0]["param_digest"], recs(a[1], "final")[0]["param_digest"]
            steps_ok = len(la) == len(lb) and [x["step"] for x in lb] == list(range(1, len(lb) + 1))
            equal = steps_ok and all(x["loss"] == y["loss"] for x, y in zip(la, lb))
            say(equal and da == db, f"{len(la)} step losses identical: {equal}; digests {da} {db}")
        elif cmd == "digest":  # a.jsonl b.jsonl: the same final parameters (e.g. resumed = straight)
            da, db = recs(a[0], "final")[0]["param_digest"], recs(a[1], "final")[0]["param_digest"]
            say(da == db, f"digests {da} {db}" + ("" if da == db else " (DIFFERENT)"))
        elif cmd == "clip":  # a.jsonl b.jsonl MAX: with --clip_grad_norm MAX, the same arithmetic
            # Steps 06, 07 and 08 at 2 ranks: every sum of two terms has one order, and the clipper's
            # norm is exact (integer sums, docs/hooks_and_clipping.md): losses, grad_norm, digests
            # identical; at least one step clipped, or the comparison proves nothing of clipping
            la, lb = recs(a[0], "step"), recs(a[1], "step")
            na, nb = [x.get("grad_norm") for x in la], [x.get("grad_norm") for x in lb]
            da, db = recs(a[0], "final")[0]["param_digest"], recs(a[1], "final")[0]["param_digest"]
            if not la or None in na + nb:
                return say(False, f"{len(la)} and {len(lb)} steps, a step record without grad_norm")
            steps_ok = len(la) == len(lb) and [x["step"] for x in lb] == list(range(1, len(lb) + 1))
            losses = steps_ok and all(x["loss"] == y["loss"] for x, y in zip(la, lb))
            norms = steps_ok and na == nb
            clipped = sum(1 for x in na if x > float(a[2]))
            say(losses and norms and da == db and clipped > 0,
                f"{len(la)} steps ({clipped} clipped at MAX {a[2]}), losses identical: {losses}, grad_norm "
                f"identical: {norms}; digests {da} {db}")
        elif cmd == "hook_trace":  # trace.json HOOK
            hook_trace(a[0], a[1])
        elif cmd == "finite":  # run.log RC RANK STEP
            finite(a[0], int(a[1]), a[2], a[3])
        elif cmd == "trace":  # trace.json
            ev = json.load(open(a[0]))["traceEvents"]
            spans = [e for e in ev if e["ph"] == "X"]
            ar = sorted(e["dur"] for e in spans if e["name"].startswith("all-reduce"))
            bw = [e for e in spans if e["name"].startswith("backward")]
            say(len(ar) > 0 and len(bw) > 0, f"{len(bw)} backward spans, {len(ar)} all-reduce spans, "
                f"median all-reduce {ar[len(ar) // 2] if ar else float('nan'):.1f} us")
        else:
            say(False, f"unknown comparison {cmd}")
    except FileNotFoundError as e:  # the run that writes it failed (its own line says why)
        say(False, f"no {e.filename.rsplit('/', 1)[-1]}: its run failed")
    except Exception as e:
        say(False, f"{type(e).__name__}: {e}")

main(*sys.argv[1:])
