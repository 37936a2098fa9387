#!/usr/bin/env python3
"""Typical wrong solutions of the workshop exercises, and the proof that the checker rejects each one.

    python3 -m exercises.checker.wrong_solutions N          run scripts/check_exercise.sh on every wrong solution of
                                                  exercise N (02..09, 06_fault, 07_clip): each must fail (exit 1), and its
                                                  output must contain the expected diagnosis
    python3 -m exercises.checker.wrong_solutions N --only NAME   just that one
    python3 -m exercises.checker.wrong_solutions --write DIR     write every wrong file to DIR/0N_<name>/<file>
    python3 -m exercises.checker.wrong_solutions --check    only check that every substitution below still
                                                  matches its step file exactly once (fast)

A wrong solution is the step's own file (the exercise's solution) with a few exact text
substitutions (old, new), each of which must match exactly once, as dev/make_exercises.py
describes its cuts: the wrong files are regenerated from the steps every time, so they follow any
change elsewhere in the step, and a change to the lines they touch makes them fail loudly instead of
going stale. Each names the claims that catch it (DDP_CLAIMS: "none" when the stage's unit tests do),
which keeps the test short (and a wrong file that the unit tests do not test, e.g. 06's train.c, runs
without them: DDP_UNIT=0), and the words its diagnosis must contain (the likely cause, not only a
number), so that it is rejected for the right reason, and optionally the words of a misleading
diagnosis it must not get.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Wrong:
    def __init__(self, name, file, subs, claims, expect, what, unexpected=(), env=None):
        self.name, self.file, self.subs, self.claims, self.expect, self.what = (
            name, file, subs, claims, expect, what)
        self.unexpected = unexpected  # words of a diagnosis that would point elsewhere
        self.env = env or {}  # the checker's environment for this one


# A wrong solution that hangs a collective is ended by the watchdog after DDP_RUN_TIMEOUT seconds (15
# by default, for a learner's loaded machine); the diagnosis is the same after 6 s, 9 s sooner.
QUICK_WATCHDOG = {"DDP_RUN_TIMEOUT": "6"}


def exec_reference(file, claims, expect):
    """A main that only execs the main build's own program of the step (found next to the link to
    01_single_gpu that the checker's bin/ holds): it passes every claim that compares numbers."""
    step = file.split("/")[1]
    return Wrong("exec_reference", file,
                 [("#include <stdlib.h>\n", "#include <stdlib.h>\n#include <stdio.h>\n#include <string.h>\n#include <unistd.h>\n"),
                  ("int main(int argc, char **argv) {\n",
                   "int main(int argc, char **argv) {\n"
                   "  char self[4096], ref[4096];  // the main build's program, next to the 01_single_gpu that bin/ links to\n"
                   "  snprintf(self, sizeof self - 16, \"%s\", argv[0]);\n"
                   "  char *slash = strrchr(self, '/');\n"
                   "  ssize_t n = slash ? (strcpy(slash + 1, \"01_single_gpu\"), readlink(self, ref, sizeof ref - 16)) : -1;\n"
                   "  if (n > 0 && (ref[n] = '\\0', slash = strrchr(ref, '/'))) {\n"
                   f"    strcpy(slash + 1, \"{step}\");\n"
                   "    execv(ref, argv);\n"
                   "  }\n")],
                 claims, expect, f"main only execs the main build's own {step}, which passes every claim that compares numbers")


# The file whose unit tests the checker runs, per exercise (scripts/check_exercise.sh: unit_src)
UNIT_TESTED = {"03": "sampler.c", "06": "reducer.c"}

S03, S04, S05 = "steps/03_sampler/sampler.c", "steps/04_ddp_wrap/train.c", "steps/05_metrics_ckpt/train.c"
S02, R06, T06 = "steps/02_init/train.c", "steps/06_full/reducer.c", "steps/06_full/train.c"
R07, T07 = "steps/07_zero/reducer.c", "steps/07_zero/train.c"
F08, T08 = "steps/08_fsdp/fsdp.c", "steps/08_fsdp/train.c"
T09 = "steps/09_live/train.c"

# step 09's run_epoch and recover, line by line (exercise 09)
VOTE = "    if (!ft_should_commit(&t->ft, &t->pg, t->step + 1)) continue;  // [live] nothing applied: done again\n"
COMMIT = "    commit(t);                                                     // [live] the update, after the vote\n"
RESHARD = ("  epoch_order(t, epoch);  // the rest of the epoch from the cursor, shared by the new world\n"
           "  log0(\"epoch %d resharded at position %lld of %d: G = %d over %d ranks\\n\", epoch + 1, cursor(t),\n"
           "       t->sampler.total, t->global_batch, t->world_size);\n")

# step 07's clip_gradients, line by line (exercise 07_clip)
CLIP_SUM = "  clip_sum_squares(&t->clip, &t->ctx, my_shard(t, t->model.grads), t->shard);\n"
CLIP_REDUCE = "  dist_all_reduce(&t->pg, t->clip.sums, CLIP_SUMS, DIST_DOUBLE, DIST_SUM);\n"
CLIP_SCALE = "  clip_scale(&t->clip, &t->ctx, my_shard(t, t->model.grads), t->shard);\n"


def own_factor(expr):
    """clip_scale written out by hand on the CPU (whose device memory is the host's), the factor `expr`
    of `norm` and t->clip.max_norm."""
    return ("  float norm = clip_norm_of_sums(t->clip.sums);  // (the CPU: host memory)\n"
            "  *t->clip.norm = norm;\n"
            f"  float coef = {expr};\n"
            "  ops_scale(&t->ctx, my_shard(t, t->model.grads), t->shard, coef < 1.0f ? coef : 1.0f);\n")


WRONG = {
    "02": [
        Wrong("rank_not_taken", S02, [("  t->rank = t->pg.rank;", "  t->rank = 0;")],
              "step02_redundant", ["under mpirun every process must know its rank"],
              "every process keeps rank 0: both write rank 0's files"),
        Wrong("world_size_not_taken", S02, [("  t->world_size = t->pg.world_size;", "  t->world_size = 1;")],
              "step02_redundant", ["world size", "process group"],
              "the world size is not taken from the process group"),
        Wrong("no_connect", S02,
              [("  dist_connect(&t->pg, &t->ctx);           // [init] the communicator, on this rank's GPU\n", "")],
              "step02_redundant@launch", ["FAIL step02_redundant@launch", "dist_connect was never called"],
              "dist_connect is never called: MPI needs no communicator of the program's and Gloo has none, "
              "so the first collective ends the job naming dist_connect (before, a crash under launch.sh only)"),
        Wrong("no_destroy", S02, [("  dist_destroy(&t->pg);  // [init] leave the process group\n", "")],
              "step02_redundant", ["call dist_destroy"],
              "the process group is never left (MPI_Finalize is never called)"),
        exec_reference(S02, "step02_own_binary", ["not the one built from your file", "another build's program"]),
    ],
    "03": [
        Wrong("no_reshuffle", S03, [("rng_permutation(s->perm, s->n, s->seed + (uint64_t)epoch);",
                                     "rng_permutation(s->perm, s->n, s->seed);")],
              "none", ["FAIL unit Sampler.SetEpochReshufflesIdenticallyOnEveryRank", "seed + epoch"],
              "the shuffle ignores the epoch (the forgotten set_epoch): every epoch in the same order"),
        Wrong("overlap", S03, [("long long pos = s->rank + (long long)i * s->world_size;",
                                "long long pos = s->rank + (long long)i;")],
              "none", ["FAIL unit Sampler.DivisibleShardsAreDisjointAndCover", "the shards overlap"],
              "no stride: rank r takes positions r, r + 1, ...; the shards overlap"),
        Wrong("no_wrap", S03, [("out[i] = s->perm[pos % s->n];", "out[i] = s->perm[pos];")],
              "none", ["AddressSanitizer", "outside an array"],
              "positions past the end are not wrapped: reads past the end of the permutation"),
        Wrong("off_by_one", S03, [("out[i] = s->perm[pos % s->n];",
                                   "out[i] = s->perm[pos > s->n ? pos - s->n : pos];")],
              "none", ["AddressSanitizer", "outside an array"],
              "wraps with > instead of >=: position N reads one past the end of the permutation"),
        Wrong("no_padding", S03, [("s->num_samples = drop_last ? n / world_size : (n + world_size - 1) / world_size;",
                                   "s->num_samples = n / world_size;")],
              "none", ["FAIL unit Sampler.PaddingRepeatsFromTheStart", "no padding"],
              "num_samples is always floor(N/W): without drop_last the tail of the permutation is lost"),
        Wrong("contiguous_blocks", S03, [("long long pos = s->rank + (long long)i * s->world_size;",
                                          "long long pos = (long long)s->rank * s->num_samples + i;")],
              "none", ["FAIL unit Sampler.StrideSplitOfTheSharedPermutation", "perm[r + i * W]",
                       "the wrap-around is right", "not a contiguous block"],
              "contiguous blocks (rank r takes positions r·num_samples, ...), wrapped with % N",
              unexpected=["must wrap around to perm[p - N]"]),
    ],
    "04": [
        Wrong("sum_not_mean", S04,
              [("m->b_off[l] - m->w_off[l], DIST_FLOAT, DIST_AVG);", "m->b_off[l] - m->w_off[l], DIST_FLOAT, DIST_SUM);"),
               ("(size_t)m->sizes[l + 1], DIST_FLOAT, DIST_AVG);", "(size_t)m->sizes[l + 1], DIST_FLOAT, DIST_SUM);")],
              "step04_matches_baseline_np2", ["2 times the learning rate", "without dividing by the world size"],
              "the gradients are summed, not averaged"),
        Wrong("no_broadcast", S04,
              [("  dist_broadcast(&t->pg, t->model.params, t->model.n_params, DIST_FLOAT, 0);\n", ""),
               ("  dist_broadcast(&t->pg, t->opt.buf, t->model.n_params, DIST_FLOAT, 0);\n", "  (void)t;\n")],
              "step04_broadcast", ["broadcast rank 0's parameters"],
              "nothing is broadcast: ranks that resumed different checkpoints never agree"),
        Wrong("no_momentum_broadcast", S04,
              [("  dist_broadcast(&t->pg, t->opt.buf, t->model.n_params, DIST_FLOAT, 0);\n", "")],
              "step04_broadcast", ["momentum buffer (t->opt.buf)"],
              "the parameters are broadcast after resume, the momentum is not"),
        Wrong("weights_only", S04,
              [("    dist_all_reduce(&t->pg, m->grads + m->b_off[l], (size_t)m->sizes[l + 1], DIST_FLOAT, DIST_AVG);\n",
                "")],
              "step04_replicas_np2", ["differ in layer 0's bias, layer 1's bias", "not averaged"],
              "only the weights' gradients are averaged, not the biases'"),
        Wrong("skip_first_layer", S04,
              [("  for (int l = m->n_layers - 1; l >= 0; l--) {", "  for (int l = m->n_layers - 1; l > 0; l--) {")],
              "step04_replicas_np2", ["differ in layer 0's weight, layer 0's bias", "not averaged"],
              "the loop stops before layer 0: its gradients are not averaged"),
        exec_reference(S04, "step04_broadcast", ["FAIL step04_broadcast", "not the one built from your file",
                                                 "another build's program"]),
    ],
    "05": [
        Wrong("every_rank_saves", S05,
              [("  if (t->rank == 0)  // [ckpt] one writer: the replicas are equal\n", "")],
              "step05_one_writer", ["every rank saves"],
              "every rank writes the checkpoint"),
        Wrong("loss_not_reduced", S05,
              [("  dist_all_reduce(&t->pg, t->model.loss, 1, DIST_FLOAT, DIST_AVG);  // [metrics] the global loss\n", "")],
              "step05_matches_baseline_np2", ["each rank logs its own loss"],
              "each rank logs its local loss"),
        Wrong("loss_summed", S05,
              [("t->model.loss, 1, DIST_FLOAT, DIST_AVG);", "t->model.loss, 1, DIST_FLOAT, DIST_SUM);")],
              "step05_matches_baseline_np2", ["is 2 times the reference's", "without dividing by the world size"],
              "the loss is summed over the ranks, not averaged"),
        Wrong("eval_padding", S05,
              [("  loader_set_stride_order(&t->test, &t->ctx, t->rank, t->world_size);",
                "  int n_eval = (test.n + t->world_size - 1) / t->world_size, *all = mallocCheck(sizeof(int) * n_eval);\n"
                "  for (int i = 0; i < n_eval; i++) all[i] = (t->rank + i * t->world_size) % test.n;\n"
                "  loader_set_order(&t->test, &t->ctx, all, n_eval);\n"
                "  free(all);")],
              "step05_eval_exact", ["counted twice", "must not be padded"],
              "the evaluation shards are padded like the training sampler's: samples counted twice"),
        Wrong("correct_not_summed", S05,
              [("  dist_all_reduce(&t->pg, t->correct, 1, DIST_INT, DIST_SUM);  // [metrics] all ranks' answers\n",
                "")],
              "step05_eval_exact", ["sum the ranks' correct answers"],
              "each rank's correct count is divided by the whole test set: the counts are not summed"),
        Wrong("barrier_on_rank0_only", S05,
              [("  if (t->rank == 0)  // [ckpt] one writer: the replicas are equal",
                "  if (t->rank == 0) {  // [ckpt] one writer: the replicas are equal"),
               ("  dist_barrier(&t->pg);  // [ckpt] nobody goes on (or reads the file) before it is complete",
                "  dist_barrier(&t->pg);  // [ckpt] nobody goes on (or reads the file) before it is complete\n  }")],
              "step05_resume", ["the job hung", "only some ranks", "watchdog:"],
              "the barrier after saving is inside `if (rank == 0)`: rank 0 waits there for ever", env=QUICK_WATCHDOG),
        Wrong("save_to_ckpt_dir", S05,
              [("    ckpt_save_model(dir, &meta, &t->model, &t->opt, &t->ctx);",
                "    ckpt_save_model(t->args.ckpt_dir, &meta, &t->model, &t->opt, &t->ctx);")],
              "step05_one_writer", ["wrote nothing there", "its `dir` argument"],
              "save_checkpoint writes to --ckpt_dir whatever folder it is given: --save_init lands there"),
    ],
    "06": [
        Wrong("wrong_bucket_order", R06,
              [("  while (r->next_bucket < r->n_buckets && r->buckets[r->next_bucket].pending == 0) {\n"
                "    int i = r->next_bucket++;\n"
                "    Bucket *b = &r->buckets[i];",
                "  for (int i = 0; i < r->n_buckets; i++) {  // every ready bucket at once, whatever its place\n"
                "    Bucket *b = &r->buckets[i];\n"
                "    if (b->pending != 0 || r->work[i].active) continue;\n"
                "    r->next_bucket++;")],
              "none", ["FAIL unit ReducerHooks.ALaterReadyBucketWaitsForTheEarlierOnes", "bucket order"],
              "a ready bucket starts at once, even before an earlier bucket: ranks may then differ in order"),
        Wrong("wait_too_early", R06,
              [("      dist_wait(r->pg, &r->work[i]);\n", "      dist_test(r->pg, &r->work[i]);\n"),
               ("      dist_all_reduce_async(r->pg, r->model->grads + b->offset, b->count, DIST_FLOAT, DIST_SUM, &r->work[i]);\n",
                "    {\n"
                "      dist_all_reduce_async(r->pg, r->model->grads + b->offset, b->count, DIST_FLOAT, DIST_SUM, &r->work[i]);\n"
                "      dist_wait(r->pg, &r->work[i]);\n"
                "    }\n")],
              "none", ["FAIL unit ReducerHooks.BucketsStayInFlightUntilFinalize", "waits too early"],
              "each bucket is waited for as soon as it starts: correct numbers, but nothing overlaps"),
        Wrong("no_wait", R06,
              [("  for (int i = 0; i < r->n_buckets; i++)\n    if (!r->hooked)\n      dist_wait(r->pg, &r->work[i]);\n"
                "    else  // --comm_hook: the hook waits, then turns the answer into the mean (PyTorch: fut.then)\n"
                "      comm_hook_wait(&r->hook, i, r->model->grads, r->buckets[i].offset, r->buckets[i].count, &r->work[i]);\n",
                "")],
              "none", ["FAIL unit ReducerHooks.BucketsStayInFlightUntilFinalize",
                       "must dist_wait every bucket"],
              "finalize never waits: the optimizer may use gradients still being reduced"),
        Wrong("no_accumulation_weight", T06,
              [("    float scale = (float)b / B / t->world_size;", "    float scale = 1.0f / t->world_size;")],
              "step06_grad_accum", ["lacks the micro-batch weight b / B"],
              "backward's scale is 1/W only: K micro-batches add up to K times the mean gradient"),
        Wrong("no_division_by_w", T06,
              [("    float scale = (float)b / B / t->world_size;", "    float scale = (float)b / B;")],
              "step06_matches_step04_np2", ["without dividing by the world size", "scale must include 1/W"],
              "backward's scale lacks 1/W: the reducer's sum is W times the mean gradient"),
        Wrong("divided_twice", R06,
              [("DIST_FLOAT, DIST_SUM, &r->work[i]);", "DIST_FLOAT, DIST_AVG, &r->work[i]);")],
              "step06_matches_step04_np2", ["moved 1/2 as far", "divided by the world size twice", "DIST_SUM"],
              "the reducer averages (DIST_AVG) gradients that backward's 1/W already divided",
              unexpected=["is every gradient tensor averaged"]),
        Wrong("scale_divided_twice", T06,
              [("    float scale = (float)b / B / t->world_size;",
                "    float scale = (float)b / B / t->world_size / t->world_size;")],
              "step06_matches_step04_np2", ["moved 1/2 as far", "1/W once, not twice"],
              "backward's scale has 1/W twice: the unit tests pass, every step moves 1/W as far",
              unexpected=["is every gradient tensor averaged"]),
        Wrong("no_dist_test", R06,
              [("  for (int i = 0; i < r->next_bucket; i++) dist_test(r->pg, &r->work[i]);  // let MPI progress\n", "")],
              "step06_trace", ["tested while backward still ran", "does not dist_test"],
              "the hook never calls dist_test: right numbers, but on MPI no bucket progresses before finalize"),
        Wrong("finalize_never_checks", R06,
              [("  if (r->next_bucket != r->n_buckets)\n"
                "    die(1, \"reducer: %d of %d buckets never became ready (was every layer's hook called?)\",\n"
                "        r->n_buckets - r->next_bucket, r->n_buckets);\n", "")],
              "none", ["FAIL unit ReducerHooks.FinalizeStopsWhenAHookWasMissed", "names what is missing"],
              "finalize waits without checking that every bucket started: it ends on dist_wait's own error"),
        Wrong("hook_skipped_on_one_rank", R06,
              [("  mark_variable_ready(r, 2 * layer);      // the weight\n",
                "  if (layer == 0 && r->pg->rank == 1) return;  // layer 0 takes no part in rank 1's loss\n"
                "  mark_variable_ready(r, 2 * layer);      // the weight\n")],
              "step06_replicas_np2", ["FAIL step06_replicas_np2", "buckets never became ready",
                                      "Expected to have finished reduction", "every rank"],
              "one layer's gradient hook is never called on one rank (in PyTorch: a parameter that takes no part "
              "in the loss on that rank): its bucket never becomes ready there, PyTorch's most-asked DDP error"),
        Wrong("if_not_while", R06,
              [("  while (r->next_bucket < r->n_buckets && r->buckets[r->next_bucket].pending == 0) {",
                "  if (r->next_bucket < r->n_buckets && r->buckets[r->next_bucket].pending == 0) {")],
              "none", ["FAIL unit ReducerHooks.BucketsStartInBucketOrderAsBackwardRuns", "mark_bucket_ready",
                       "several buckets", "while"],
              "`if` instead of `while` in mark_bucket_ready: one hook starts one bucket at most, though it may make "
              "several ready"),
        Wrong("scale_one_over_k", T06,
              [("    float scale = (float)b / B / t->world_size;", "    float scale = 1.0f / K / t->world_size;")],
              "step06_grad_accum", ["FAIL step06_grad_accum", "short", "b / B", "1/K"],
              "backward's scale is 1/(K·W), PyTorch's (loss / K).backward(): wrong when the last micro-batch is short"),
        Wrong("scale_integer_division", T06,
              [("    float scale = (float)b / B / t->world_size;", "    float scale = b / B / t->world_size;")],
              "step06_matches_step04_np2 step06_grad_accum",
              ["FAIL step06_matches_step04_np2", "FAIL step06_grad_accum", "no parameter moved",
               "integer division", "(float)b / B / t->world_size"],
              "backward's scale in integer arithmetic: b / B / W is 0, so no gradient is ever non-zero",
              unexpected=["is every gradient tensor averaged"]),
        Wrong("bucket_from_tensor_index", R06,
              [("static void mark_variable_ready(Reducer *r, int tensor) { r->buckets[r->bucket_of[tensor]].pending--; }",
                "static void mark_variable_ready(Reducer *r, int tensor) {\n"
                "  r->buckets[2 * r->model->n_layers - 1 - tensor].pending--;  // tensors arrive in reverse order\n}")],
              "none", ["FAIL unit ReducerHooks.ABucketStartsWhenAllItsTensorsAreReady", "mark_variable_ready",
                       "r->bucket_of[tensor]", "still waits for"],
              "mark_variable_ready counts tensor t down in bucket 2L-1-t (one tensor per bucket, right at cap 0) "
              "instead of its own bucket r->bucket_of[t]: with a larger cap, a bucket never becomes ready",
              unexpected=["ready at once", "a `while` loop"]),
        Wrong("next_bucket_not_advanced", R06,
              [("    int i = r->next_bucket++;", "    int i = r->next_bucket;")],
              "step06_replicas_np2", ["FAIL step06_replicas_np2", "this handle is still in flight",
                                      "r->next_bucket", "started twice in one backward",
                                      "advance r->next_bucket past every bucket it starts"],
              "mark_bucket_ready never advances r->next_bucket: it starts the same bucket again, whose "
              "all-reduce is in flight",
              unexpected=["must dist_wait every bucket", "never waited for"]),
    ],
    # 07_clip: the global norm under sharding (its claims are tests/integration/hooks_check.py's)
    "07_clip": [
        Wrong("local_norm", T07,
              [("  dist_all_reduce(&t->pg, t->clip.sums, CLIP_SUMS, DIST_DOUBLE, DIST_SUM);\n", "")],
              "clip_steps_np2", ["FAIL clip_steps_np2", "a local norm", "all-reduced, DIST_SUM"],
              "each rank clips by its own shard's norm (pytorch/pytorch#126457): the sums never added"),
        Wrong("sums_added_twice", T07,
              [("  dist_all_reduce(&t->pg, t->clip.sums, CLIP_SUMS, DIST_DOUBLE, DIST_SUM);\n",
                "  dist_all_reduce(&t->pg, t->clip.sums, CLIP_SUMS, DIST_DOUBLE, DIST_SUM);\n"
                "  dist_all_reduce(&t->pg, t->clip.sums, CLIP_SUMS, DIST_DOUBLE, DIST_SUM);\n")],
              "clip_steps_np2", ["FAIL clip_steps_np2", "sqrt(2) times", "all-reduced twice"],
              "the sums all-reduced twice: the norm is sqrt(W) times too large"),
        Wrong("half_the_sums", T07, [(CLIP_REDUCE, CLIP_REDUCE.replace("CLIP_SUMS,", "CLIP_SUMS / 2,"))],
              "clip_steps_np2", ["FAIL clip_steps_np2", "covers only the first part", "CLIP_SUMS (512)"],
              "only the first half of the sums is all-reduced: a gradient below 2 has no square in the other half",
              unexpected=["a local norm"]),
        Wrong("count_in_bytes", T07, [(CLIP_REDUCE, CLIP_REDUCE.replace("CLIP_SUMS,", "CLIP_SUMS * sizeof(double),"))],
              "clip_steps_np2", ["FAIL clip_steps_np2", "aborted", "past the end of a buffer", "a count in bytes"],
              "the all-reduce's count in bytes: it writes 8 times CLIP_SUMS doubles into t->clip.sums; the run "
              "trains, then aborts at exit (134), when free() finds the heap overwritten"),
        Wrong("no_epsilon", T07, [(CLIP_SCALE, own_factor("(1.0f / norm) * t->clip.max_norm"))],
              "clip_steps_np2", ["FAIL clip_steps_np2", "lacks the + 1e-6"],
              "the learner's own factor, (1 / norm) * MAX: without clip_grad_norm_'s + 1e-6",
              unexpected=["a local norm"]),
        Wrong("one_division", T07, [(CLIP_SCALE, own_factor("t->clip.max_norm / (norm + 1e-6f)"))],
              "clip_steps_np2", ["FAIL clip_steps_np2", "in one division", "(1 / (norm + 1e-6)) * MAX"],
              "the learner's own factor, MAX / (norm + 1e-6) in one division: PyTorch multiplies by a reciprocal "
              "(at most seeds only the last bit differs)", unexpected=["a local norm"]),
        Wrong("scale_on_rank0_only", T07, [(CLIP_SCALE, "  if (t->rank == 0)\n  " + CLIP_SCALE)],
              "clip_steps_np2", ["FAIL clip_steps_np2", "not on rank(s) 1", "every rank scales its own shard"],
              "only rank 0 scales its shard of the gradient", unexpected=["a local norm"]),
        Wrong("scale_the_momentum", T07,
              [(CLIP_SCALE, CLIP_SCALE.replace("my_shard(t, t->model.grads)", "t->opt.buf")),
               ("  clip_gradients(t);\n  sgd_step(&t->opt, &t->ctx, my_shard(t, t->model.params), my_shard(t, t->model.grads));\n",
                "  sgd_step(&t->opt, &t->ctx, my_shard(t, t->model.params), my_shard(t, t->model.grads));\n  clip_gradients(t);\n")],
              "clip_steps_np2", ["FAIL clip_steps_np2", "the parameters differ", "momentum buffer (t->opt.buf) was scaled"],
              "the momentum shard is scaled, after sgd_step: the update used the unclipped gradient",
              unexpected=["a local norm"]),
        Wrong("logs_the_clipped_norm", T07,
              [(CLIP_SCALE, CLIP_SCALE + "  // the norm of what is applied, for the log\n" + CLIP_SUM + CLIP_REDUCE +
                CLIP_SCALE)],
              "clip_steps_np2", ["FAIL clip_steps_np2", "at most MAX", "the clipped gradient's", "before clipping"],
              "the norm is taken again after clipping, and that one logged (clip_grad_norm_ returns the norm before)",
              unexpected=["a local norm"]),
        Wrong("clip_before_the_wait", T07,
              [("  reducer_finalize_backward(&t->reducer);", "  clip_gradients(t);\n  reducer_finalize_backward(&t->reducer);"),
               ("  clip_gradients(t);\n  sgd_step(", "  sgd_step(")],
              "clip_steps_np2", ["FAIL clip_steps_np2", "before the reduce-scatter was waited for",
                                 "reducer_finalize_backward"],
              "clip_gradients before reducer_finalize_backward: the shard's reduce-scatter may not have arrived",
              unexpected=["a local norm"]),
        Wrong("norms_added", T07,
              [(CLIP_REDUCE + CLIP_SCALE,
                "  clip_scale(&t->clip, &t->ctx, my_shard(t, t->model.grads), 0);  // this shard's norm, nothing scaled\n"
                "  dist_all_reduce(&t->pg, t->clip.norm, 1, DIST_FLOAT, DIST_SUM);  // the ranks' norms, added\n"
                "  float coef = (1.0f / (*t->clip.norm + 1e-6f)) * t->clip.max_norm;  // (the CPU: host memory)\n"
                "  ops_scale(&t->ctx, my_shard(t, t->model.grads), t->shard, coef < 1.0f ? coef : 1.0f);\n")],
              "clip_steps_np2", ["FAIL clip_steps_np2", "sum of the 2 shards' norms", "the ranks' norms were added"],
              "each rank's norm, then the norms added (all-reduced), not the squares",
              unexpected=["a local norm", "added 2 times over"]),
    ],
    "09": [
        Wrong("update_before_vote", T09, [(VOTE + COMMIT, COMMIT + VOTE)],
              "live09_shrink_equals_resume", ["FAIL live09_shrink_equals_resume", "before the vote"],
              "the update is applied before the vote: the failed step's partial gradient stays in the parameters"),
        Wrong("local_index", T09,
              [(RESHARD, ""),
               ("      start = 0, batches = t->epoch_step;  // [live] the rest of the epoch, in the new world's shares",
                "      batches = t->epoch_step;              // [live] each rank goes on in its own order")],
              "live09_no_sample_lost", ["FAIL live09_no_sample_lost", "its own index", "reshard"],
              "no reshard: each survivor goes on from its own index in the order laid out for the old world"),
        Wrong("heal_without_momentum", T09,
              [("  dist_broadcast(&t->pg, t->opt.buf, t->model.n_params, DIST_FLOAT, from);\n", "")],
              "live09_heal_equals_resume", ["FAIL live09_heal_equals_resume", "momentum"],
              "the heal broadcasts the parameters and the position, not the momentum buffer"),
        Wrong("heal_without_position", T09, [("  dist_broadcast(&t->pg, at, 6, DIST_DOUBLE, from);\n", "")],
              "live09_heal_equals_resume", ["FAIL live09_heal_equals_resume", "healed at step 0",
                                            "did not take the source's state"],
              "the heal broadcasts the parameters and the momentum, not where the source is (where[]): the "
              "replacement keeps its own step 0"),
        Wrong("heal_without_cursor", T09, [("  t->epoch_step = (long long)where[2];\n", "")],
              "live09_heal_equals_resume", ["FAIL live09_heal_equals_resume", "cursor"],
              "the heal takes the step and the epoch, not the position inside the epoch (t->epoch_step)"),
        exec_reference(T09, "live09_shrink_equals_resume", ["FAIL live09_shrink_equals_resume",
                                                            "not the one built from your file",
                                                            "another build's program"]),
    ],
    "06_fault": [
        Wrong("resume_restarts_epoch", T06, [("  t->epoch_step = (long long)meta.epoch_step;\n", "")],
              "fault06_resume_mid_epoch", ["a whole epoch", "resume started the epoch over", "meta.epoch_step"],
              "resume ignores the saved position in the epoch: the snapshot's epoch starts over"),
        Wrong("resume_global_step", T06,
              [("  t->epoch_step = (long long)meta.epoch_step;\n", "  t->epoch_step = (long long)meta.step;\n")],
              "fault06_resume_mid_epoch", ["FAIL fault06_resume_mid_epoch", "meta.step", "global step",
                                           "t->epoch_step = meta.epoch_step"],
              "resume takes the global step (meta.step) for the steps done in the saved epoch: equal in the "
              "first epoch, past the epoch's end in a later one",
              unexpected=["resume started the epoch over"]),
        Wrong("snapshot_without_position", T06,
              [("    t->epoch_step = batches;  // [fault] a snapshot taken now resumes at the next step\n", "")],
              "fault06_resume_mid_epoch", ["records 0 steps done", "does not record the position in the epoch"],
              "the snapshot inside the epoch is saved without the steps done in it (t->epoch_step)"),
        Wrong("every_rank_snapshots", T06,
              [("  if (t->rank == 0)  // [ckpt] one writer: the replicas are equal\n", "")],
              "fault06_one_writer", ["2 processes wrote the snapshots", "every rank writes the snapshot"],
              "every rank writes the snapshot"),
        Wrong("no_barrier_after_save", T06,
              [("  dist_barrier(&t->pg);  // [ckpt] nobody goes on (or reads the file) before it is complete\n", "")],
              "fault06_barrier", ["while process", "no barrier after the save"],
              "no barrier after the save: the other ranks go on (and end) while rank 0 still writes"),
        Wrong("barrier_on_rank0_only", T06,
              [("  if (t->rank == 0)  // [ckpt] one writer: the replicas are equal",
                "  if (t->rank == 0) {  // [ckpt] one writer: the replicas are equal"),
               ("  dist_barrier(&t->pg);  // [ckpt] nobody goes on (or reads the file) before it is complete",
                "  dist_barrier(&t->pg);  // [ckpt] nobody goes on (or reads the file) before it is complete\n  }")],
              "fault06_barrier", ["only some ranks", "watchdog:"],
              "the barrier after the save is inside `if (rank == 0)`: rank 0 waits there for ever", env=QUICK_WATCHDOG),
        exec_reference(T06, "fault06_barrier", ["FAIL fault06_barrier", "not the one built from your file",
                                                "another build's program"]),
    ],
    "07": [
        Wrong("recv_at_bucket_start", R07,
              [("    float *mine = r->model->grads + (size_t)r->pg->rank * r->shard + b->shard_offset;",
                "    float *mine = r->model->grads + b->offset;")],
              "step07_replicas_np2", ["exited 1", "recv overlaps send but is not this rank's chunk of it",
                                      "reducer.c the receive pointer", "grads + rank·S + b->shard_offset"],
              "received where the bucket starts (the send buffer), not at this rank's chunk of it",
              unexpected=["an equal share", "fsdp.c"]),
        Wrong("recv_without_shard_start", R07,
              [("    float *mine = r->model->grads + (size_t)r->pg->rank * r->shard + b->shard_offset;",
                "    float *mine = r->model->grads + b->shard_offset;")],
              "step07_replicas_np2", ["exited 1", "recv overlaps send but is not this rank's chunk of it",
                                      "reducer.c the receive pointer", "grads + rank·S + b->shard_offset"],
              "received at b->shard_offset from the start of the buffer, not from the start of this rank's shard",
              unexpected=["an equal share", "fsdp.c"]),
        Wrong("recv_without_shard_offset", R07,
              [("    float *mine = r->model->grads + (size_t)r->pg->rank * r->shard + b->shard_offset;",
                "    float *mine = r->model->grads + (size_t)r->pg->rank * r->shard;")],
              "step07_matches_step06_np2", ["recv overlaps send but is not this rank's chunk of it",
                                            "reducer.c the receive pointer", "grads + rank·S + b->shard_offset"],
              "received at the start of this rank's shard, not where the bucket meets it: on the claims' "
              "model a later bucket overlaps that place, so dist.c refuses the receive pointer",
              unexpected=["an equal share", "fsdp.c"]),
        Wrong("divided_twice", R07,
              [("mine, b->counts, DIST_FLOAT, DIST_SUM,", "mine, b->counts, DIST_FLOAT, DIST_AVG,")],
              "step07_matches_step06_np2", ["moved 1/2 as far as step 06's", "must sum (DIST_SUM)"],
              "the reduce-scatter averages: with backward's 1/W, the gradient is divided by W twice"),
        Wrong("no_all_gather", T07,
              [("  dist_all_gather(&t->pg, my_shard(t, t->model.params), t->model.params, t->shard, DIST_FLOAT);\n", "")],
              "step07_replicas_np2", ["replicas differ", "all-gathered"],
              "no all-gather after the update: each rank keeps only its own shard up to date"),
        Wrong("params_not_sharded", T07,
              [("  sgd_step(&t->opt, &t->ctx, my_shard(t, t->model.params), my_shard(t, t->model.grads));",
                "  sgd_step(&t->opt, &t->ctx, t->model.params, my_shard(t, t->model.grads));")],
              "step07_matches_step06_np2", ["in only its own shard", "not the start of the buffer"],
              "every rank updates the start of the parameter buffer instead of its own shard"),
        Wrong("flat_gradient", T07,
              [("  sgd_step(&t->opt, &t->ctx, my_shard(t, t->model.params), my_shard(t, t->model.grads));",
                "  sgd_step(&t->opt, &t->ctx, my_shard(t, t->model.params), t->model.grads);")],
              "step07_matches_step06_np2", ["in the shard of rank 1", "not the start of the gradient buffer"],
              "the update reads the start of the gradient buffer (rank 0's shard, scratch on the other ranks), "
              "not this rank's shard of it"),
        Wrong("momentum_not_gathered", T07,
              [("  dev_copy(&t->ctx, my_shard(t, full.buf), t->opt.buf, t->shard * sizeof(float));\n"
                "  dist_all_gather(&t->pg, my_shard(t, full.buf), full.buf, t->shard, DIST_FLOAT);\n", "")],
              "step07_checkpoints", ["no part of the saved momentum is a rank's momentum shard", "t->opt.buf"],
              "the checkpoint is written without gathering the momentum shards"),
        Wrong("gathered_without_copy", T07,
              [("  dev_copy(&t->ctx, my_shard(t, full.buf), t->opt.buf, t->shard * sizeof(float));\n", "")],
              "step07_checkpoints", ["no part of the saved momentum is a rank's momentum shard", "t->opt.buf"],
              "the momentum is all-gathered, but no rank copied its shard into the buffer first"),
        Wrong("counts_from_bucket_count", R07,
              [("    float *mine = r->model->grads + (size_t)r->pg->rank * r->shard + b->shard_offset;\n",
                "    float *mine = r->model->grads + (size_t)r->pg->rank * r->shard + b->shard_offset;\n"
                "    size_t even[16];  // each rank's part of the bucket: an equal share\n"
                "    for (int j = 0; j < r->pg->world_size; j++) even[j] = b->count / r->pg->world_size;\n"),
               ("mine, b->counts, DIST_FLOAT, DIST_SUM,", "mine, even, DIST_FLOAT, DIST_SUM,")],
              "step07_matches_step06_np2", ["FAIL step07_matches_step06_np2", "reducer.c", "b->counts",
                                            "b->count / W"],
              "the counts split the bucket evenly (b->count / W each) instead of each rank's overlap with it "
              "(b->counts)",
              unexpected=["fsdp.c", "the receive pointer is not"]),
    ],
    "08": [
        Wrong("gather_not_waited", F08,
              [("  if (f->state[l] == FSDP_GATHERING) dist_wait(f->pg, &f->gather[f->gather_pass[l]][l]);\n", "")],
              "step08_matches_step06_np2", ["never waited for", "must dist_wait a GATHERING layer's gather"],
              "the layer runs without waiting for its all-gather (no dist_wait in wait_for_unshard)"),
        Wrong("no_prefetch", F08,
              [("  if (l + 1 < L(f)) unshard(f, l + 1);  // prefetch: the next layer's gather runs while this one computes\n", ""),
               ("  if (l > 0) unshard(f, l - 1);  // prefetch, in reverse order\n", "")],
              "step08_trace", ["no prefetch", "unshard(f, l + 1)"],
              "no prefetch: each layer is gathered just when it runs (right numbers, no overlap)"),
        Wrong("prefetch_wrong_way_in_backward", F08,
              [("  if (l > 0) unshard(f, l - 1);  // prefetch, in reverse order",
                "  if (l + 1 < L(f)) unshard(f, l + 1);  // prefetch")],
              "step08_matches_step06_np2", ["the other layer of its buffer", "l - 1 in backward"],
              "backward prefetches layer l + 1 (forward's order) instead of l - 1"),
        Wrong("grad_averaged", F08,
              [("g + (size_t)f->pg->rank * f->shard[l], f->counts[l], DIST_FLOAT,\n                            DIST_SUM,",
                "g + (size_t)f->pg->rank * f->shard[l], f->counts[l], DIST_FLOAT,\n                            DIST_AVG,")],
              "step08_matches_step06_np2", ["1/2 as far as step 06's", "divided by the world size twice"],
              "DIST_AVG in the reduce-scatter: the gradient is divided by W twice"),
        Wrong("grad_not_scaled", T08,
              [("    float scale = (float)b / B / t->world_size;", "    float scale = (float)b / B;")],
              "step08_matches_step06_np2", ["2 times as far as step 06's", "not divided by the world size"],
              "backward without the 1/W: the reduce-scatter's sum is never divided by W"),
        Wrong("recv_other_rank_chunk", F08,
              [("g + (size_t)f->pg->rank * f->shard[l], f->counts[l],",
                "g + (size_t)((f->pg->rank + 1) % W(f)) * f->shard[l], f->counts[l],")],
              "step08_matches_step06_np2", ["outside this rank's own chunk", "not another rank's chunk"],
              "the reduce-scatter receives at the next rank's chunk of the gradient"),
        Wrong("update_gathered_copy", T08,
              [("  sgd_step(&t->opt, &t->ctx, t->fsdp.params, t->fsdp.grads);",
                "  sgd_step(&t->opt, &t->ctx, t->fsdp.full[0], t->fsdp.full_grad[0]);")],
              "step08_matches_step06_np2", ["no parameter has moved", "t->fsdp.params"],
              "the optimizer updates a gathered buffer (overwritten by the next gather), not the shards"),
        Wrong("gather_left_pending", F08,
              [("static void post_backward(int l, void *user) { reshard(user, l); }",
                "static void post_backward(int l, void *user) {\n  reshard(user, l);\n"
                "  if (l == 0) unshard(user, 0);  // the next step's first layer, early\n}")],
              "step08_matches_step06_np2", ["a prefetch never waited for", "no gather may be pending"],
              "the next step's layer 0 is prefetched at the end of backward: a gather left pending"),
        Wrong("wait_unconditionally", F08,
              [("  if (f->state[l] == FSDP_GATHERING) dist_wait(f->pg, &f->gather[f->gather_pass[l]][l]);",
                "  dist_wait(f->pg, &f->gather[f->gather_pass[l]][l]);")],
              "step08_matches_step06_np2", ["FAIL step08_matches_step06_np2", "fsdp.c", "wait_for_unshard",
                                            "FSDP_GATHERING"],
              "wait_for_unshard waits whatever the layer's state: a layer already gathered has no gather in flight",
              unexpected=["reducer_finalize_backward", "wait for each bucket"]),
        Wrong("gather_without_offset", F08,
              [("  dist_all_gather_async(f->pg, f->params + f->offset[l], f->full[l % 2],",
                "  dist_all_gather_async(f->pg, f->params, f->full[l % 2],")],
              "step08_matches_step06_np2", ["FAIL step08_matches_step06_np2", "fsdp.c", "f->offset[l]",
                                            "before any update"],
              "each layer's all-gather sends from f->params (layer 0's shard) without f->offset[l]"),
    ],
}


def apply(w):
    """The wrong file's text: the step's file with w's substitutions, each matching exactly once."""
    with open(os.path.join(ROOT, w.file)) as f:
        text = f.read()
    for old, new in w.subs:
        n = text.count(old)
        if n != 1:
            raise ValueError(f"{w.name}: {w.file} contains {n} times, expected once: {old!r}")
        text = text.replace(old, new)
    return text


def write(w, folder):
    path = os.path.join(folder, os.path.basename(w.file))
    os.makedirs(folder, exist_ok=True)
    with open(path, "w") as f:
        f.write(apply(w))
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("exercise", nargs="?", help="02 .. 09, 06_fault, 07_clip")
    ap.add_argument("--only", help="run only this wrong solution")
    ap.add_argument("--check", action="store_true", help="only check that the substitutions apply")
    ap.add_argument("--write", metavar="DIR", help="write the wrong files into DIR")
    a = ap.parse_args()
    if a.check or a.write:
        bad = 0
        for n, ws in WRONG.items():
            for w in ws:
                try:
                    if a.write:
                        print(write(w, os.path.join(a.write, f"{n}_{w.name}")))
                    else:
                        apply(w)
                except ValueError as e:
                    print(f"wrong_solutions.py: {e}", file=sys.stderr)
                    bad = 1
        if bad:
            print("a step changed where a wrong solution edits it: update its substitution above", file=sys.stderr)
        elif a.check:
            print(f"wrong_solutions.py --check: all {sum(map(len, WRONG.values()))} wrong solutions apply")
        return bad
    n = (a.exercise or "").zfill(2)
    if n not in WRONG:
        ap.error(f"exercise must be one of {', '.join(WRONG)}")
    problems = []
    with tempfile.TemporaryDirectory(prefix=f"wrong_{n}_") as tmp:
        # The main build's reference runs (step 06 as 07's and 08's reference, ...) are the same for
        # every wrong solution: run once, replayed after (tests/harness/cache.py, REF_CACHE).
        cache = os.environ.get("DDP_REFERENCE_CACHE") or os.path.join(tmp, "reference_runs")
        os.makedirs(cache, exist_ok=True)
        for w in WRONG[n]:
            if a.only and w.name != a.only:
                continue
            print(f"== {n} {w.name}: {w.what} (claims: {w.claims})", flush=True)
            t0 = time.time()
            try:
                path = write(w, os.path.join(tmp, w.name))
            except ValueError as e:
                problems.append(str(e))
                continue
            env = dict(os.environ, DDP_CLAIMS=w.claims, DDP_REFERENCE_CACHE=cache, **w.env)
            if os.path.basename(w.file) != UNIT_TESTED.get(n):
                # The unit tests test another file (the step's own): they prove nothing about this one
                env["DDP_UNIT"] = "0"
            for attempt in (1, 2):
                p = subprocess.run([os.path.join(ROOT, "scripts", "check_exercise.sh"), n, path],
                                   capture_output=True, text=True, env=env, cwd=ROOT)
                out = p.stdout + p.stderr
                print("   " + out.strip().replace("\n", "\n   "))
                missing = [e for e in w.expect if e not in out]
                # A rank that ends the job (die -> MPI_Abort) writes its error line first, but mpirun
                # has been seen to exit before forwarding it (once in the full suite, on a loaded VM);
                # its own abort messages then stand alone. Such a run is tried once more.
                if not (p.returncode == 1 and missing and attempt == 1
                        and ("MPI_ABORT" in out or "ORTE_ERROR_LOG" in out)):
                    break
                # a retry whose cause is mpirun, not the checker (dev/soak.sh counts these lines)
                print(f"RETRY: {n} {w.name}: the output lacks {missing} after an MPI_Abort: mpirun may have "
                      "dropped the aborting rank's error line; once more")
            misleading = [u for u in w.unexpected if u in out]
            if p.returncode != 1:
                problems.append(f"{w.name}: the checker exited {p.returncode}, expected 1 (reject)")
            elif missing:
                problems.append(f"{w.name}: rejected, but the output lacks {missing}")
            elif misleading:
                problems.append(f"{w.name}: rejected, but with a misleading diagnosis: {misleading}")
            else:
                print(f"   -> rejected for the expected reason ({'; '.join(w.expect)}) [{time.time() - t0:.1f} s]")
    if problems:
        print(f"wrong_solutions.py {n}: the checker does not reject every wrong solution as it should:")
        for p in problems:
            print(f"  {p}")
        return 1
    print(f"wrong_solutions.py {n}: every wrong solution is rejected with its diagnosis")
    return 0


if __name__ == "__main__":
    sys.exit(main())
