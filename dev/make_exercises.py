#!/usr/bin/env python3
"""Generates the workshop exercises in exercises/ from the steps, so they can never drift from them.

    dev/make_exercises.py           write exercises/0N_<step>/<file> for N = 02..09, and the
                                    extra exercises 06_fault (step 06's snapshots and resume) and
                                    07_clip (step 07's global norm)
    dev/make_exercises.py --check   exit 1, naming each problem, when a removal below no longer
                                    matches its step file or a committed exercise file differs
                                    from what would be generated (CTest `exercises_fresh`)

An exercise is named by its step's number (02, ..., 09; its folder is the step's own name), or, for
an extra exercise on a step, by its folder (06_fault: a folder of its own, from steps/06_full); the
name is what scripts/check_exercise.sh takes, and what the stubs' TODO(...) says.

An exercise file is the step's own file with the stage cut out. Each cut is described below as
(first line, last line, stub): the lines from the first line to the next occurrence of the last line,
both included, are replaced by the stub, which compiles and runs but leaves the stage undone (it
behaves like the previous step) and says TODO(0N) where the stage goes. Lines are matched exactly,
whole, and the first line must occur exactly once in the file, so any edit to a step that touches a
cut makes --check fail instead of producing a stale exercise. The steps themselves carry no markers:
their diffs stay clean. The exercise READMEs (exercises/*/README.md) are written by hand.
"""
import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def header(n, src):
    return (f"// Exercise {n}: generated from {src} by dev/make_exercises.py. Fill in every\n"
            f"// TODO({n}), then check: scripts/check_exercise.sh {n} <this file> (see README.md here).\n")


def exercise_name(folder, src):
    """02 .. 09 for the exercise of a step (its folder is the step's name); the folder otherwise."""
    return folder[:2] if folder == src.split("/")[1] else folder


# (exercise folder, step file it comes from, [(first line, last line, stub), ...])
EXERCISES = [
    ("02_init", "steps/02_init/train.c", [
        ("  dist_init(&t->pg, t->args.backend, dev, t->args.timeout);  // [init] who am I, how many are we",
         "  device_init(&t->ctx, dev, gpus == 1 ? 0 : t->local_rank);",
         "  // TODO(02): join the process group (dist_init, with --backend) and take this process's rank,\n"
         "  // world size and local rank from it; on CUDA, refuse more ranks on this node than it has GPUs.\n"
         "  // Until then every process believes it is alone: rank 0 of 1, as in step 01.\n"
         "  t->rank = 0;\n"
         "  t->world_size = 1;\n"
         "  t->local_rank = 0;\n"
         "  device_init(&t->ctx, dev, t->local_rank);\n"),
        ("  dist_connect(&t->pg, &t->ctx);           // [init] the communicator, on this rank's GPU",
         "  dist_connect(&t->pg, &t->ctx);           // [init] the communicator, on this rank's GPU",
         "  // TODO(02): open the communicator on this rank's device (dist_connect)\n"),
        ("  dist_destroy(&t->pg);  // [init] leave the process group",
         "  dist_destroy(&t->pg);  // [init] leave the process group",
         "  // TODO(02): leave the process group (dist_destroy), before the device context goes\n"),
    ]),
    ("03_sampler", "steps/03_sampler/sampler.c", [
        ("  s->num_samples = drop_last ? n / world_size : (n + world_size - 1) / world_size;",
         "  s->num_samples = drop_last ? n / world_size : (n + world_size - 1) / world_size;",
         "  // TODO(03): this rank's share of every epoch: floor(N/W) with drop_last, else ceil(N/W)\n"
         "  // (see sampler.h). Until then every rank takes all N samples, as in step 02.\n"
         "  s->num_samples = n;\n"),
        ("  for (int i = 0; i < s->num_samples; i++) {",
         "  }",
         "  // TODO(03): rank r takes positions r, r + W, r + 2W, ... of the epoch's permutation s->perm;\n"
         "  // positions past its end wrap around to its start (the padding). Until then every rank gets\n"
         "  // the whole permutation, as in step 02.\n"
         "  for (int i = 0; i < s->num_samples; i++) out[i] = s->perm[i];\n"),
    ]),
    ("04_ddp_wrap", "steps/04_ddp_wrap/train.c", [
        ("  dist_broadcast(&t->pg, t->model.params, t->model.n_params, DIST_FLOAT, 0);",
         "  dist_broadcast(&t->pg, t->opt.buf, t->model.n_params, DIST_FLOAT, 0);",
         "  // TODO(04): every replica must continue from rank 0's state, whatever seed each rank was\n"
         "  // given or checkpoint it loaded: broadcast (dist_broadcast, root 0) the flat parameter buffer\n"
         "  // and the optimizer's momentum buffer (t->opt.buf). Until then the replicas start apart.\n"
         "  (void)t;\n"),
        ("  Mlp *m = &t->model;",
         "  dist_group_end(&t->pg);  // [ddp] the group's all-reduces are queued here",
         "  // TODO(04): replace each gradient by its mean over the ranks (dist_all_reduce, DIST_AVG), one\n"
         "  // tensor at a time, last layer first: layer l's weight gradient starts at m->grads + m->w_off[l],\n"
         "  // its bias gradient at m->grads + m->b_off[l] (mlp.h has the sizes), between dist_group_start\n"
         "  // and dist_group_end (NCCL then launches them as one). Until then every rank\n"
         "  // steps with its own gradient, as in step 03.\n"
         "  (void)t;\n"),
    ]),
    ("05_metrics_ckpt", "steps/05_metrics_ckpt/train.c", [
        ("  // [metrics] each rank evaluates every W-th test sample: a shard without padding, none counted twice",
         "  loader_set_stride_order(&t->test, &t->ctx, t->rank, t->world_size);",
         "  // TODO(05): each rank evaluates its own shard of the test set: every W-th sample from its rank\n"
         "  // on, without padding (loader.h). Until then every rank evaluates the whole test set, as in\n"
         "  // step 04.\n"
         "  loader_set_stride_order(&t->test, &t->ctx, 0, 1);\n"),
        ("  dist_all_reduce(&t->pg, t->model.loss, 1, DIST_FLOAT, DIST_AVG);  // [metrics] the global loss",
         "  dist_all_reduce(&t->pg, t->model.loss, 1, DIST_FLOAT, DIST_AVG);  // [metrics] the global loss",
         "  // TODO(05): log the global loss: this step's loss (t->model.loss) averaged over the ranks\n"),
        ("  dist_all_reduce(&t->pg, t->correct, 1, DIST_INT, DIST_SUM);  // [metrics] all ranks' answers",
         "  dist_all_reduce(&t->pg, t->correct, 1, DIST_INT, DIST_SUM);  // [metrics] all ranks' answers",
         "  // TODO(05): once the ranks evaluate shards, add up their correct answers (t->correct)\n"),
        ("  if (t->rank == 0)  // [ckpt] one writer: the replicas are equal",
         "  dist_barrier(&t->pg);  // [ckpt] nobody goes on (or reads the file) before it is complete",
         "  // TODO(05): the replicas are equal, so one writer is enough; and no rank may go on (or read the\n"
         "  // file) before it is complete. Until then every rank writes, as in step 04.\n"
         "  ckpt_save_model(dir, &meta, &t->model, &t->opt, &t->ctx);\n"),
        ("  dist_barrier(&t->pg);  // [ckpt] every rank has loaded before any trains",
         "  dist_barrier(&t->pg);  // [ckpt] every rank has loaded before any trains",
         "  // TODO(05): no rank may start training before every rank has loaded the checkpoint\n"),
    ]),
    ("06_full", "steps/06_full/reducer.c", [
        ("  while (r->next_bucket < r->n_buckets && r->buckets[r->next_bucket].pending == 0) {",
         "  }",
         "  // TODO(06): start, in bucket order (r->next_bucket onwards), every bucket none of whose\n"
         "  // tensors is still pending: an asynchronous DIST_SUM all-reduce of its slice of the flat\n"
         "  // gradient buffer (dist_all_reduce_async into its handle, r->work[i] for bucket i; a sum, because\n"
         "  // backward ran on the loss times 1/W). Stop at the first bucket that is not ready, even if a\n"
         "  // later one is: every rank must start the same buckets in the same order.\n"
         "  // (--check_finite and --comm_hook: step 06 calls check_bucket_finite first, and hands the\n"
         "  // bucket to its hook when one is registered; the exercise's checks need neither.)\n"
         "  (void)r;\n"
         "  (void)check_bucket_finite;\n"),
        ("static void mark_variable_ready(Reducer *r, int tensor) { r->buckets[r->bucket_of[tensor]].pending--; }",
         "static void mark_variable_ready(Reducer *r, int tensor) { r->buckets[r->bucket_of[tensor]].pending--; }",
         "static void mark_variable_ready(Reducer *r, int tensor) {\n"
         "  // TODO(06): count the tensor down in its bucket (r->bucket_of, Bucket.pending)\n"
         "  (void)r;\n"
         "  (void)tensor;\n"
         "}\n"),
        ("  for (int i = 0; i < r->next_bucket; i++) dist_test(r->pg, &r->work[i]);  // let MPI progress",
         "  for (int i = 0; i < r->next_bucket; i++) dist_test(r->pg, &r->work[i]);  // let MPI progress",
         "  // TODO(06): give MPI a chance to advance the all-reduces already started (dist_test)\n"),
        ("  if (r->next_bucket != r->n_buckets)",
         "      comm_hook_wait(&r->hook, i, r->model->grads, r->buckets[i].offset, r->buckets[i].count, &r->work[i]);",
         "  // TODO(06): every bucket must have been started (if not, a hook was missed: die(1, ...), with\n"
         "  // a message that says how many buckets, or which bucket or layer, went missing), then wait\n"
         "  // for each bucket's all-reduce (dist_wait) before the optimizer may use the gradients\n"
         "  (void)r;\n"),
    ]),
    ("06_full", "steps/06_full/train.c", [
        ("    // [bucket] backward of the loss times 1/W, so that the reducer's all-reduce, a plain sum, yields the mean",
         "    float scale = (float)b / B / t->world_size;  // [bucket] [accum] the mean over the W ranks and B samples",
         "    // TODO(06): the factor backward multiplies the loss by: 1 / W, so that the reducer's sum of\n"
         "    // the ranks' gradients is their average, and, with K > 1 micro-batches, also b / B, so that\n"
         "    // the gradients summed over the K backward passes are the mean over all B samples.\n"
         "    float scale = 1.0f;\n"),
    ]),
    ("06_fault", "steps/06_full/train.c", [
        ("    t->epoch_step = batches;  // [fault] a snapshot taken now resumes at the next step",
         "      save_checkpoint(t, t->args.ckpt_dir, epoch);  // [fault] --save_steps: a snapshot inside the epoch",
         "    // TODO(06_fault): every --save_steps steps (snapshot_due: t->step is the global step), save a\n"
         "    // snapshot to --ckpt_dir (save_checkpoint, with this epoch's number: it is not done yet) that a\n"
         "    // restart resumes at the next step; so first record, in t->epoch_step (checkpoint_meta saves\n"
         "    // it), how many steps of this epoch are done. Not after the epoch's last step, nor when\n"
         "    // training stops here (out_of_steps): the epoch's end saves then (train()). Until\n"
         "    // then the only checkpoints are the epochs' ends: a failure inside an epoch loses all of it.\n"),
        ("  if (t->rank == 0)  // [ckpt] one writer: the replicas are equal",
         "  dist_barrier(&t->pg);  // [ckpt] nobody goes on (or reads the file) before it is complete",
         "  // TODO(06_fault): the replicas are equal, so one rank writes the snapshot; and no rank may go\n"
         "  // on (or, after a restart, read the file) before it is complete. Until then every rank writes\n"
         "  // it, and each goes on as soon as its own write is done.\n"
         "  ckpt_save_model(dir, &meta, &t->model, &t->opt, &t->ctx);\n"),
        ("  t->epoch_step = (long long)meta.epoch_step;",
         "  t->epoch_step = (long long)meta.epoch_step;",
         "  // TODO(06_fault): a snapshot taken inside an epoch resumes at the step after it: take the steps\n"
         "  // of the saved epoch already done from the checkpoint's header (meta). Until then the resumed\n"
         "  // epoch starts over from its first batch, and its first steps are trained twice.\n"),
    ]),
    ("07_zero", "steps/07_zero/reducer.c", [
        ("    // [zero] each rank receives the sum of its own part of the bucket, in place in its shard",
         "                              &r->work[i]);",
         "    // TODO(07): reduce-scatter the bucket instead of all-reducing it: each rank receives the sum\n"
         "    // over the ranks of its own part of the bucket (b->counts[j] floats for rank j, from\n"
         "    // dist_shard_counts), in place: where that part already lies in the flat gradient buffer, at\n"
         "    // the start of this rank's shard (r->pg->rank · r->shard floats in) plus b->shard_offset\n"
         "    // (dist_reduce_scatter_async, DIST_SUM, into the bucket's handle r->work[i]). Until then the\n"
         "    // bucket is all-reduced as in step 06: this rank's shard gets the mean gradient too, but so\n"
         "    // does the rest of the buffer, and the all-reduce moves twice the bytes of a reduce-scatter.\n"
         "    dist_all_reduce_async(r->pg, r->model->grads + b->offset, b->count, DIST_FLOAT, DIST_SUM, &r->work[i]);\n"),
    ]),
    ("07_zero", "steps/07_zero/train.c", [
        ("  // [zero] each rank updates its own shard of the parameters, with its shard of the mean gradient",
         "  dist_all_gather(&t->pg, my_shard(t, t->model.params), t->model.params, t->shard, DIST_FLOAT);",
         "  // TODO(07): the sharded optimizer step: update this rank's shard of the parameters (my_shard)\n"
         "  // with its shard of the mean gradient (my_shard of t->model.grads: the reduce-scatter leaves it\n"
         "  // where it lies) and its momentum shard (sgd_step on t->opt, which holds t->shard floats); then\n"
         "  // all-gather the updated shards in place (dist_all_gather), so that every rank has the whole\n"
         "  // model for the next forward. Until then the parameters never change.\n"),
        ("  // [zero] every rank's momentum shard, gathered: the file is step 06's, full momentum included",
         "  dist_all_gather(&t->pg, my_shard(t, full.buf), full.buf, t->shard, DIST_FLOAT);",
         "  // TODO(07): the file holds the full momentum, as step 06's does: put this rank's momentum shard\n"
         "  // (t->opt.buf, t->shard floats) in its place in full.buf (the gradient buffer, free between\n"
         "  // steps), then all-gather the shards in place, so that rank 0 writes every rank's. Until then\n"
         "  // the file's momentum is whatever the gradient buffer holds.\n"
         "  Sgd full = full_optimizer(t);\n"),
    ]),
    # 07_clip: an extra exercise on step 07: --clip_grad_norm's global norm under sharding
    ("07_clip", "steps/07_zero/train.c", [
        ("  // [zero] this rank holds only its shard of the mean gradient: it sums its shard's squares, and the",
         "  dist_all_reduce(&t->pg, t->clip.sums, CLIP_SUMS, DIST_DOUBLE, DIST_SUM);",
         "  clip_sum_squares(&t->clip, &t->ctx, my_shard(t, t->model.grads), t->shard);\n"
         "  // TODO(07_clip): this rank's sums of squares (t->clip.sums, CLIP_SUMS doubles, clip.h) are of its\n"
         "  // shard only, so clip_scale would clip by the shard's norm. Make them the whole gradient's.\n"),
    ]),
    ("08_fsdp", "steps/08_fsdp/fsdp.c", [
        ("  dist_all_gather_async(f->pg, f->params + f->offset[l], f->full[l % 2], f->shard[l], DIST_FLOAT,",
         "                        &f->gather[pass][l]);",
         "  // TODO(08): start the all-gather of layer l (dist_all_gather_async, into its handle\n"
         "  // &f->gather[pass][l]): this rank sends its shard of the layer, f->shard[l] floats at f->params +\n"
         "  // f->offset[l], and every rank receives all W shards, in rank order, into the layer's gathered\n"
         "  // buffer f->full[l % 2] (W·s_l floats: the layer's n_l, then the padding). Until then nothing is\n"
         "  // gathered: every layer runs on the zeros the buffer was allocated with, and nothing learns.\n"),
        ("  if (f->state[l] == FSDP_GATHERING) dist_wait(f->pg, &f->gather[f->gather_pass[l]][l]);",
         "  if (f->state[l] == FSDP_GATHERING) dist_wait(f->pg, &f->gather[f->gather_pass[l]][l]);",
         "  // TODO(08): a GATHERING layer's all-gather must be finished before the layer reads its buffer:\n"
         "  // wait for it (dist_wait on the handle unshard() started it into: f->gather[f->gather_pass[l]][l]).\n"),
        ("  if (l + 1 < L(f)) unshard(f, l + 1);  // prefetch: the next layer's gather runs while this one computes",
         "  if (l + 1 < L(f)) unshard(f, l + 1);  // prefetch: the next layer's gather runs while this one computes",
         "  // TODO(08): prefetch: start the next layer's all-gather (unshard), if there is a next layer, so\n"
         "  // that it runs while this layer computes. Until then each layer is gathered only when it is\n"
         "  // about to run (wait_for_unshard above does that), and the gathers never overlap compute.\n"),
        ("  if (l < L(f) - 1) reshard(f, l);  // the last layer stays: backward needs it first",
         "  if (l < L(f) - 1) reshard(f, l);  // the last layer stays: backward needs it first",
         "  // TODO(08): the layer's gathered copy is not needed any more: reshard it, except the last\n"
         "  // layer's, which backward needs first (PyTorch keeps the root module's for the same reason).\n"
         "  // Until then every layer is resharded, and backward gathers the last one again.\n"
         "  reshard(f, l);\n"),
        ("  if (l > 0) unshard(f, l - 1);  // prefetch, in reverse order",
         "  if (l > 0) unshard(f, l - 1);  // prefetch, in reverse order",
         "  // TODO(08): prefetch in backward: start the all-gather of the layer whose backward comes next,\n"
         "  // if there is one. Until then each layer is gathered again only when its backward starts.\n"),
        ("  // in place: rank r's sum of its s_l floats lands at r·s_l of the full gradient",
         "                            DIST_SUM, &f->reduce[l]);",
         "  // TODO(08): layer l's full gradient g (W·s_l floats, the padding zeroed) is ready: start its\n"
         "  // reduce-scatter (dist_reduce_scatter_async, equal counts f->counts[l], into its handle\n"
         "  // &f->reduce[l]), in place: this rank receives the sum over the ranks of its own s_l floats\n"
         "  // where they already lie, at its rank times f->shard[l] floats into g (fold_gradient takes its\n"
         "  // shard from there). A sum: backward ran on the loss times 1/W. Until then no gradient reaches\n"
         "  // the shards: f->grads stays zero.\n"
         "  (void)g;\n"),
    ]),
    ("08_fsdp", "steps/08_fsdp/train.c", [
        ("  sgd_step(&t->opt, &t->ctx, t->fsdp.params, t->fsdp.grads);",
         "  sgd_step(&t->opt, &t->ctx, t->fsdp.params, t->fsdp.grads);",
         "  // TODO(08): the optimizer step, on this rank's shards only: its parameter shards\n"
         "  // (t->fsdp.params, t->fsdp.n_shard floats) with its shards of the mean gradient (t->fsdp.grads)\n"
         "  // and its momentum shard (t->opt). Nothing is gathered afterwards: the next forward gathers\n"
         "  // each layer when it runs. Until then the parameters never change.\n"),
    ]),
    # 09: live recovery (step 09's stages 2 and 3): the vote before the update, the reshard, the heal
    ("09_live", "steps/09_live/train.c", [
        ("  double where[6] = {(double)t->step, epoch,           (double)t->epoch_step,",
         "  return (int)where[1];",
         "  // TODO(09): the heal. The members of the new quorum at its newest step give their state to those\n"
         "  // behind (and to a replacement, which has none): broadcast, from rank t->ft.q.source of the new\n"
         "  // group, the parameters (t->model.params), the momentum buffer (t->opt.buf, n_params floats) and\n"
         "  // where the source is: t->step, `epoch`, t->epoch_step, t->epoch_world, t->global_batch and\n"
         "  // t->opt.steps (e.g. as 6 doubles in one device buffer: dev_alloc, dev_upload, DIST_DOUBLE,\n"
         "  // dev_download, dev_free). If the broadcasts failed (ft_failed), return `epoch`: still behind,\n"
         "  // healed at the next quorum. Else take every one of them, report the heal (ft_healed, with\n"
         "  // the step healed to and the bytes broadcast), and return the source's epoch. Until then\n"
         "  // nothing is healed: a replica behind keeps its own state, and a replacement starts from its\n"
         "  // own initialisation at step 0.\n"
         "  ft_healed(&t->ft, &t->pg, t->step, 0, log_clock() - t0);\n"
         "  return epoch;\n"),
        ("  epoch_order(t, epoch);  // the rest of the epoch from the cursor, shared by the new world",
         "       t->sampler.total, t->global_batch, t->world_size);",
         "  // TODO(09): the reshard. The rest of this epoch, from the cursor (cursor(t): where the next\n"
         "  // block of G starts in the epoch's list, the same on every member after the heal), is shared by\n"
         "  // the new world: lay out this rank's samples of each block from there for its new rank and\n"
         "  // world size (epoch_order); run_epoch then reads them from their start. Until then each rank\n"
         "  // keeps the order it had, laid out for the old world: its old share of blocks read again.\n"),
        ("    if (!ft_should_commit(&t->ft, &t->pg, t->step + 1)) continue;  // [live] nothing applied: done again",
         "    commit(t);                                                     // [live] the update, after the vote",
         "    // TODO(09): the vote. Apply the step (commit) only when every collective of it completed on this\n"
         "    // rank (ft_should_commit, for step t->step + 1); when one failed, apply nothing and go round the\n"
         "    // loop again: ft_failed then says so, a new quorum forms, and the step is done again in the new\n"
         "    // world. Until then every step is applied, even one whose gradient all-reduce failed half-way.\n"
         "    commit(t);\n"),
    ]),
]


class Mismatch(Exception):
    pass


def generate(folder, src, cuts):
    """Returns the exercise text for step file src (relative to the root) with the cuts applied."""
    n = exercise_name(folder, src)
    with open(os.path.join(ROOT, src)) as f:
        lines = f.read().split("\n")
    for first, last, stub in cuts:
        starts = [i for i, line in enumerate(lines) if line == first]
        if len(starts) != 1:
            raise Mismatch(f"{src}: the first line of a cut occurs {len(starts)} times, expected once: "
                           f"{first!r}")
        start = starts[0]
        ends = [i for i in range(start, len(lines)) if lines[i] == last]
        if not ends:
            raise Mismatch(f"{src}: no line {last!r} after {first!r}")
        if f"TODO({n})" not in stub:
            raise Mismatch(f"{src}: the stub for {first!r} lacks TODO({n})")
        lines[start:ends[0] + 1] = stub.rstrip("\n").split("\n")
    return header(n, src) + "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="compare with the committed exercises")
    a = ap.parse_args()
    problems, written = [], []
    for folder, src, cuts in EXERCISES:
        dest = os.path.join("exercises", folder, os.path.basename(src))
        try:
            text = generate(folder, src, cuts)
        except (Mismatch, OSError) as e:
            problems.append(str(e))
            continue
        path = os.path.join(ROOT, dest)
        old = open(path).read() if os.path.exists(path) else None
        if old == text:
            continue
        if a.check:
            problems.append(f"{dest} is {'missing' if old is None else 'out of date'}")
        else:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
            written.append(dest)
    for dest in written:
        print(f"wrote {dest}")
    if problems:
        print(f"make_exercises.py{' --check' if a.check else ''}: the exercises do not match the steps:",
              file=sys.stderr)
        for p in problems:
            print(f"  {p}", file=sys.stderr)
        print("if a step changed on purpose, update the cuts in dev/make_exercises.py, then run it"
              if any("line" in p for p in problems) else "run dev/make_exercises.py", file=sys.stderr)
        return 1
    if a.check:
        print("make_exercises.py --check: exercises/ matches the steps")
    elif not written:
        print("exercises/ was already up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
