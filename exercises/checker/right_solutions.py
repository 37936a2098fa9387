#!/usr/bin/env python3
"""Correct solutions of the workshop exercises written otherwise than the steps, and the proof that
the checker passes each one: a checker must accept any correct solution, not only the step's words.

    python3 -m exercises.checker.right_solutions [N]          run scripts/check_exercise.sh on every right
                                                    solution (of exercise N: 02..09): each must pass
                                                    (exit 0)
    python3 -m exercises.checker.right_solutions N --only NAME   just that one
    python3 -m exercises.checker.right_solutions --write DIR     write every file to DIR/0N_<name>/<file>
    python3 -m exercises.checker.right_solutions --check    only check that every substitution still matches
                                                  its step file exactly once (fast)

Each is the step's own file with a few exact substitutions (old, new), each matching exactly once,
as in exercises/checker/wrong_solutions.py, and names the claims to run (DDP_CLAIMS; None: the step's
whole list; "none": the unit tests only). The stage's unit tests always run.
"""
import argparse
import os
import subprocess
import sys
import tempfile

from exercises.checker.wrong_solutions import (ROOT, S03, S05, R06, T06, R07, T07, F08, T09, CLIP_SCALE, COMMIT,
                                              VOTE, own_factor, write)


class Right:
    def __init__(self, name, file, subs, claims, what):
        self.name, self.file, self.subs, self.claims, self.what = name, file, subs, claims, what


DIE06 = ("    die(1, \"reducer: %d of %d buckets never became ready (was every layer's hook called?)\",\n"
         "        r->n_buckets - r->next_bucket, r->n_buckets);")

RIGHT = {
    "03": [
        Right("wrap_by_subtraction", S03,
              [("    out[i] = s->perm[pos % s->n];",
                "    while (pos >= s->n) pos -= s->n;  // wrap around, as often as needed\n"
                "    out[i] = s->perm[pos];")],
              None, "wraps by subtracting N instead of % N"),
    ],
    "05": [
        Right("writer_block", S05,
              [("  if (t->rank == 0)  // [ckpt] one writer: the replicas are equal\n"
                "    ckpt_save_model(dir, &meta, &t->model, &t->opt, &t->ctx);",
                "  if (t->rank != 0) {\n"
                "    // the other ranks only wait\n"
                "  } else {\n"
                "    ckpt_save_model(dir, &meta, &t->model, &t->opt, &t->ctx);\n"
                "  }")],
              "step05_one_writer step05_resume", "the one writer written as an if/else block"),
    ],
    "06": [
        Right("die_other_words", R06,
              [(DIE06, "    die(1, \"reducer: only %d of %d buckets were started: a hook was missed\",\n"
                       "        r->next_bucket, r->n_buckets);")],
              "none", "finalize dies with its own words (the learner pass's message)"),
        Right("die_names_the_layer", R06,
              [(DIE06, "    die(1, \"reducer: some Layer's gradients never arrived; was its autograd hook called? \"\n"
                       "           \"(%d buckets missing)\", r->n_buckets - r->next_bucket);")],
              "none", "finalize dies naming the layer, in other words and case"),
        Right("test_every_bucket", R06,
              [("  for (int i = 0; i < r->next_bucket; i++) dist_test(r->pg, &r->work[i]);  // let MPI progress",
                "  for (int i = 0; i < r->n_buckets; i++)\n"
                "    if (r->work[i].active) dist_test(r->pg, &r->work[i]);  // every bucket in flight")],
              "step06_replicas_np2 step06_trace", "the hook tests every bucket in flight, not a prefix"),
        Right("scale_one_division", T06,
              [("    float scale = (float)b / B / t->world_size;",
                "    float scale = (float)b / (float)(B * t->world_size);  // b / (B·W), one rounding")],
              "step06_matches_step04_np2 step06_grad_accum",
              "backward's scale as one float division, b / (B·W): no integer division, right with a short "
              "micro-batch"),
    ],
    "07": [
        Right("counts_computed_here", R07,
              [("    float *mine = r->model->grads + (size_t)r->pg->rank * r->shard + b->shard_offset;\n",
                "    float *mine = &r->model->grads[(size_t)r->pg->rank * r->shard + b->shard_offset];\n"
                "    size_t counts[16];  // each rank's part of the bucket, computed here\n"
                "    dist_shard_counts(b->offset, b->offset + b->count, r->shard, r->pg->world_size, counts);\n"),
               ("mine, b->counts, DIST_FLOAT, DIST_SUM,", "mine, counts, DIST_FLOAT, DIST_SUM,")],
              "step07_matches_step06_np2 step07_replicas_np3",
              "the counts computed in the hook with dist_shard_counts, not read from b->counts; the receive "
              "pointer written as an address of an element"),
    ],
    "07_clip": [
        Right("own_factor", T07, [(CLIP_SCALE, own_factor("(1.0f / (norm + 1e-6f)) * t->clip.max_norm"))],
              "clip_steps_np2",
              "clip_scale written out on the CPU: the norm from the sums, clip_grad_norm_'s factor "
              "(1 / (norm + 1e-6)) * MAX in float32, the shard scaled by it"),
    ],
    "08": [
        Right("other_words", F08,
              [("  if (l + 1 < L(f)) unshard(f, l + 1);  // prefetch: the next layer's gather runs while this one computes",
                "  int next = l + 1;\n  if (next != L(f)) unshard(f, next);  // the next layer, early"),
               ("  if (l < L(f) - 1) reshard(f, l);  // the last layer stays: backward needs it first",
                "  if (l != L(f) - 1) reshard(f, l);"),
               ("  if (l > 0) unshard(f, l - 1);  // prefetch, in reverse order",
                "  if (l >= 1) unshard(f, l - 1);"),
               ("  dist_reduce_scatter_async(f->pg, g, g + (size_t)f->pg->rank * f->shard[l], f->counts[l], DIST_FLOAT,\n"
                "                            DIST_SUM, &f->reduce[l]);",
                "  float *mine = &g[f->pg->rank * f->shard[l]];\n"
                "  dist_reduce_scatter_async(f->pg, g, mine, f->counts[l], DIST_FLOAT, DIST_SUM, &f->reduce[l]);")],
              "step08_matches_step06_np2 step08_trace",
              "another wording: the prefetch through a variable, != instead of <, the receive through a pointer"),
        Right("wait_unless_unsharded", F08,
              [("  if (f->state[l] == FSDP_GATHERING) dist_wait(f->pg, &f->gather[f->gather_pass[l]][l]);",
                "  if (f->state[l] != FSDP_UNSHARDED)  // gathering: SHARDED was unsharded just above\n"
                "    dist_wait(f->pg, &f->gather[f->gather_pass[l]][l]);"),
               ("  dist_all_gather_async(f->pg, f->params + f->offset[l], f->full[l % 2],",
                "  dist_all_gather_async(f->pg, &f->params[f->offset[l]], f->full[l % 2],")],
              "step08_matches_step06_np2",
              "the wait unless the layer is already gathered (!= FSDP_UNSHARDED), the shard's address as &params[...]"),
    ],
    "09": [
        Right("vote_in_a_variable", T09,
              [(VOTE + COMMIT,
                "    bool applied = ft_should_commit(&t->ft, &t->pg, t->step + 1);  // every rank's vote\n"
                "    if (applied) commit(t);\n"
                "    if (!applied) continue;  // the step again, in the next quorum's world\n"),
               ("  dist_broadcast(&t->pg, t->model.params, t->model.n_params, DIST_FLOAT, from);\n"
                "  dist_broadcast(&t->pg, t->opt.buf, t->model.n_params, DIST_FLOAT, from);\n",
                "  dist_broadcast(&t->pg, t->opt.buf, t->model.n_params, DIST_FLOAT, from);  // the momentum first\n"
                "  dist_broadcast(&t->pg, t->model.params, t->model.n_params, DIST_FLOAT, from);\n")],
              "live09_shrink_equals_resume live09_heal_equals_resume",
              "the vote kept in a variable, the step applied under an `if`; the heal's momentum broadcast before "
              "the parameters"),
    ],
}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("exercise", nargs="?", help="02 .. 09 (default: all)")
    ap.add_argument("--only", help="run only this right solution")
    ap.add_argument("--check", action="store_true", help="only check that the substitutions apply")
    ap.add_argument("--write", metavar="DIR", help="write the files into DIR")
    a = ap.parse_args()
    chosen = [(n, r) for n, rs in RIGHT.items() for r in rs
              if (not a.exercise or n == a.exercise.zfill(2)) and (not a.only or r.name == a.only)]
    if not chosen:
        ap.error("no right solution matches")
    problems = []
    with tempfile.TemporaryDirectory(prefix="right_") as tmp:
        for n, r in chosen:
            try:
                path = write(r, os.path.join(a.write or tmp, f"{n}_{r.name}"))
            except ValueError as e:
                problems.append(str(e))
                continue
            if a.write:
                print(path)
            if a.check or a.write:
                continue
            print(f"== {n} {r.name}: {r.what} (claims: {r.claims or 'all'})", flush=True)
            # the main build's reference runs, run once and replayed after (tests/harness/cache.py's REF_CACHE):
            # in DDP_REFERENCE_CACHE when it is set (CTest's, for all the checker's tests), else here
            cache = os.environ.get("DDP_REFERENCE_CACHE") or os.path.join(tmp, "reference_runs")
            env = dict(os.environ, DDP_REFERENCE_CACHE=cache)
            os.makedirs(cache, exist_ok=True)
            env.pop("DDP_CLAIMS", None)
            if r.claims:
                env["DDP_CLAIMS"] = r.claims
            p = subprocess.run([os.path.join(ROOT, "scripts", "check_exercise.sh"), n, path],
                               capture_output=True, text=True, env=env, cwd=ROOT)
            out = p.stdout + p.stderr
            print("   " + out.strip().replace("\n", "\n   "))
            if p.returncode != 0 or "FAIL" in out:
                problems.append(f"{n} {r.name}: the checker exited {p.returncode}, expected 0 (a correct solution)")
            else:
                print("   -> passed")
    if problems:
        print("right_solutions.py: " + ("a substitution no longer applies:" if a.check else
                                        "the checker does not pass every correct solution:"))
        for p in problems:
            print(f"  {p}")
        return 1
    if a.check:
        print(f"right_solutions.py --check: all {len(chosen)} right solutions apply")
    elif not a.write:
        print(f"right_solutions.py: the checker passes all {len(chosen)} correct solutions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
