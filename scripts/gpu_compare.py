#!/usr/bin/env python3
"""scripts/gpu_check.sh's comparisons of two runs' metrics files (scripts/gpu_verdict.sh calls it).

Usage: gpu_compare.py steps A.jsonl B.jsonl K | replicas PREFIX W | same A.jsonl B.jsonl |
       digest A.jsonl B.jsonl | trace TRACE.json | mfu PREFIX W K |
       one_step START.bin REF.bin REF.jsonl GOT.bin GOT.jsonl LR MU N_TERMS
Prints one line: ok|FAILED, a tab, the detail; mfu prints a phrase only (for another row's detail).

Each comparison is of one kind (the tests' rule): bit equality where the arithmetic is the same
(same, digest, replicas), the float32 error model one step from the same state (one_step), or
structure (steps: two runs in other summation orders, e.g. the GPU's and the CPU's, log the same
steps; their values after many steps are shown, never judged: rounding grows with every step).
"""
import json, sys

# one_step's error model is the tests' own (tests/harness/parity.py, step_within_rounding): run from the
# repository's root, or with it on PYTHONPATH (scripts/gpu_check.sh does).

def recs(path, kind):
    with open(path) as f:
        return [o for o in map(json.loads, f) if o["type"] == kind]

def say(good, detail):
    print(("ok" if good else "FAILED") + "\t" + detail)

def mfu(prefix, w, k):
    """The last epoch's MFU of W ranks on K GPUs. Each rank's figure is its own GEMM rate against the
    whole GPU's peak (common/flops.c), so where ranks share a GPU the GPU's is their sum."""
    try:
        last = [recs(f"{prefix}{r}.jsonl", "epoch")[-1] for r in range(w)]
    except (OSError, IndexError, ValueError, KeyError):
        return "MFU: no epoch record"
    if any("mfu" not in e for e in last):
        return "MFU: unknown (this GPU's peak is not in common/flops.c)"
    u = [100 * e["mfu"] for e in last]
    if w > k:
        return (f"MFU of the {k} GPU(s) {sum(u) / k:.2f}% (the sum over the {w} ranks sharing them; "
                f"each rank's own figure, against the whole GPU, is 1/{w // k} of it or so)")
    return f"MFU per GPU {sum(u) / w:.2f}% (mean over the {w} ranks; min {min(u):.2f}%, max {max(u):.2f}%)"

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
