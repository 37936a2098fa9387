// Exercise 09: generated from steps/09_live/train.c by dev/make_exercises.py. Fill in every
// TODO(09), then check: scripts/check_exercise.sh 09 <this file> (see README.md here).
/*
 * Step 09 — live recovery, stage 1: the cursor sampler. Made from step 06.
 *
 * Changes over step 06: [cursor] the ranks walk each epoch's sample list together, a block of the global
 * batch G per step (sampler.c), instead of each keeping a fixed shard. G stays when the world size
 * changes: a checkpoint saved inside an epoch resumes at another world size, the ranks sharing each
 * block (more samples each, in micro-batches of at most --batch_size, each weighted by its share of G),
 * with the same steps per epoch and not one sample lost or taken twice. The next stages (docs/09_live.md)
 * keep the survivors training when a rank dies, and let a replacement heal from a peer.
 *
 * Run:  mpirun -np 2 build/bin/09_live --device cpu   (then --resume at another -np: docs/09_live.md)
 */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "agree.h"       // agree.h: Agreement, agree_init, agree_args, agree_model, agree_check
#include "args.h"        // args.h: Args, args_parse, ARGS_*
#include "check.h"       // check.h: die, check_set_rank
#include "ckpt_model.h"  // ckpt_model.h: CkptMeta, ckpt_model_meta, ckpt_save_model, ckpt_load_model
#include "clip.h"        // clip.h: Clip, clip_init, clip_sum_squares, clip_scale, clip_free
#include "comm_hook.h"   // [hook] comm_hook.h: comm_hook_divides, comm_hook_save, comm_hook_load
#include "data.h"        // data.h: Dataset, DataId, data_parse, dataset_load, dataset_id
#include "device.h"      // device.h: Ctx, device_parse, device_init, device_set_tf32, device_free
#include "devmem.h"      // devmem.h: dev_alloc, dev_upload, dev_download, dev_zero, dev_sync, dev_free
#include "dist.h"        // dist.h: ProcessGroup, dist_init, dist_connect, dist_broadcast, dist_all_reduce,
                         //         dist_set_fr_dir, dist_barrier, dist_destroy
#include "ft.h"          // [live] ft.h: Ft, ft_init, ft_connect, ft_should_commit, ft_failed, ft_quorum
#include "loader.h"      // loader.h: Loader, loader_init, loader_set_order, loader_batch
#include "log.h"         // log.h: log0, log_clock
#include "loss_log.h"    // loss_log.h: LossLog, loss_log_init, loss_log_push, loss_log_epoch
#include "metrics.h"     // metrics.h: Metrics, metrics_open, metrics_step, metrics_epoch
#include "mlp.h"         // mlp.h: Mlp, mlp_init, mlp_forward, mlp_loss, mlp_backward
#include "ops.h"         // [accum] ops.h: ops_axpy
#include "optim.h"       // optim.h: Sgd, sgd_init, sgd_step
#include "preempt.h"     // [fault] preempt.h: Preempt, preempt_init, preempt_agree, preempt_exit_status
#include "reducer.h"     // [bucket] reducer.h: Reducer, reducer_init, reducer_autograd_hook, ...
#include "sampler.h"     // sampler.h: Sampler, sampler_init, sampler_set_epoch, sampler_share, ...
#include "snapshot.h"    // [fault] snapshot.h: snapshot_due, snapshot_resume_path
#include "straggler.h"   // [trace] straggler.h: Straggler, straggler_init, straggler_step, straggler_free
#include "trace.h"       // [trace] trace.h: Trace, trace_open, trace_backward, trace_close

// ---------------------------------------------------------------------------------------------------
// Configuration

#define EVAL_BATCH 500  // test-set batch size: evaluation needs no gradients, so bigger is cheaper

typedef struct Trainer {
  Args args;             // command-line flags
  int rank;              // this process's rank in the process group
  int world_size;        // number of processes
  int local_rank;        // rank within this node: selects the GPU
  ProcessGroup pg;       // the process group: ranks and the communicator
  Ctx ctx;               // device, stream, cuBLAS handle
  Mlp model;             // parameters, gradients, activations
  Sgd opt;               // momentum buffer
  Clip clip;             // --clip_grad_norm: the norm's sums, the norm, the scale factor
  Reducer reducer;       // [bucket] gradient buckets and their all-reduces
  float *loss;           // [accum] device, (1): the step's loss, summed over its micro-batches
  Trace trace;           // [trace] --trace timeline
  Straggler straggler;   // [trace] --straggler: the rank that arrives late at the gradient collectives
  Loader train, test;    // datasets on the device, batch buffers
  Sampler sampler;       // [cursor] every epoch's sample list, read a block of G at a time
  int global_batch;      // [cursor] G: samples per step over all ranks, kept when the world size changes
  int epoch_world;       // [cursor] the world size this epoch's list is laid out for
  DataId data_id;        // which data was loaded (sizes, dim, classes): recorded in checkpoints
  int *order;            // host, (2 train.n): this rank's samples in the rest of the epoch, then a spare
  int n_mine;            // [cursor] how many of them are this rank's (the spare follows)
  int *correct;          // device, (1): evaluation counter
  int epoch0;            // first epoch to run (> 0 after --resume)
  long long step;        // optimizer steps done
  long long epoch_step;  // steps done in the current epoch: > 0 after a --max_steps stop or resume
  Metrics metrics;       // --metrics file
  LossLog losses;        // each step's loss, on its way to the metrics file and the progress line
  Preempt preempt;       // [fault] SIGTERM's flag, agreed by the ranks at every step boundary
  Ft ft;                 // [live] under launch.sh --ft: the lighthouse, the vote, the quorum
  bool healed_past;      // [live] a heal took this replica past its epoch's end: the others did the end
} Trainer;

static void configure(Trainer *t, int argc, char **argv) {
  unsigned stage_groups = ARGS_REDUCER | ARGS_FAULT | ARGS_HOOKS | ARGS_LIVE;  // [bucket] ... [hook] [live]
  args_parse(&t->args, argc, argv, ARGS_TRAIN | ARGS_DIST | ARGS_SAMPLER | stage_groups,  // [bucket]
             "Step 09: live recovery (the cursor sampler; under scripts/launch.sh --ft the survivors of a "
             "failed rank go on)");
}

// ---------------------------------------------------------------------------------------------------
// Process group

static void setup(Trainer *t) {
  Device dev;
  if (device_parse(t->args.device, &dev) != 0) die(2, "unknown --device '%s'", t->args.device);
  dist_init(&t->pg, t->args.backend, dev, t->args.timeout);  // [init] who am I, how many are we
  dist_set_fr_dir(&t->pg, t->args.fr_dir);                   // [init] --fr_dir: the flight recorder's folder
  ft_init(&t->ft, &t->args, &t->pg);  // [live] under launch.sh --ft: a recoverable group, the lighthouse
  t->rank = t->pg.rank;
  t->world_size = t->pg.world_size;
  t->local_rank = t->pg.local_rank;
  // [init] one GPU per process: the local rank numbers this process's GPU on its node (unless the
  // launcher already gave each process a single GPU of its own, e.g. srun --gpus-per-task 1)
  int gpus = dev == DEVICE_CUDA ? device_cuda_count() : 0;
  if (gpus > 1 && t->pg.local_size > gpus)
    die(1, "%d ranks on this node but only %d GPUs: start at most one rank per GPU", t->pg.local_size, gpus);
  device_init(&t->ctx, dev, gpus == 1 ? 0 : t->local_rank);
  device_set_tf32(&t->ctx, t->args.tf32);  // --tf32: faster GPU GEMMs, inputs rounded to TF32
  ft_connect(&t->ft, &t->pg, &t->ctx);     // [live] the first quorum's group (dist_connect without --ft)
  t->rank = t->pg.rank;                    // [live] this replica's rank in the quorum
  t->world_size = t->pg.world_size;        // [live]
  preempt_init(&t->preempt, &t->ctx);      // [fault] from now on SIGTERM stops every rank after one more step
  log0("rank %d of %d (local rank %d) on %s\n", t->rank, t->world_size, t->local_rank, device_name(dev));
}

// [init] Every rank must train the same model on the same data with the same settings, or the replicas
// part without a word: compare them, and stop every rank if one differs (as DDP compares parameter shapes).
static void check_ranks_agree(Trainer *t) {
  Agreement a;
  agree_init(&a);                                      // the program itself
  agree_args(&a, args_settings(&t->args));             // every flag that changes training
  agree_model(&a, t->model.sizes, t->model.n_layers);  // the layer sizes
  agree_data(&a, &t->data_id);                         // what was loaded
  agree_add(&a, "the resume point", "epoch %d, step %lld", t->epoch0, t->step);
  agree_check(&a, &t->pg, &t->ctx);
}

static void cleanup(Trainer *t) {
  ft_free(&t->ft, &t->pg, &t->ctx);  // [live] leave the lighthouse
  dist_destroy(&t->pg);              // [init] leave the process group
  device_free(&t->ctx);
}

// ---------------------------------------------------------------------------------------------------
// Data

static void load_data(Trainer *t) {
  DataKind kind;
  if (data_parse(t->args.data, &kind) != 0) die(2, "unknown --data '%s'", t->args.data);
  Dataset train, test;
  dataset_load(kind, t->args.data_dir, t->args.dataset_size, t->args.seed, &train, &test);
  sampler_init(&t->sampler, train.n, t->world_size, t->args.drop_last, t->args.seed);  // [cursor] no rank
  t->data_id = dataset_id(kind, &train, &test);  // before the loaders take the arrays
  loader_init(&t->train, &t->ctx, &train, t->args.batch_size, 2 * train.n);  // [cursor] padding, the spare
  loader_init(&t->test, &t->ctx, &test, EVAL_BATCH, test.n);
  // [metrics] each rank evaluates every W-th test sample: a shard without padding, none counted twice
  loader_set_stride_order(&t->test, &t->ctx, t->rank, t->world_size);
  t->order = mallocCheck((size_t)2 * train.n * sizeof *t->order);  // [cursor]
  t->epoch_world = t->world_size;  // [cursor] the first epoch's, unless a resume says otherwise
  t->correct = dev_alloc(&t->ctx, sizeof(int));
  log0("data: %s, %d train / %d test samples\n", t->args.data, train.n, test.n);
  dataset_free(&train);
  dataset_free(&test);
}

static int step_size(const Trainer *t);  // [live] below

// [live] --ft_batch per_rank: each rank keeps its batch, so the global batch follows the world size, from
// an epoch's start (inside an epoch G stays: the cursor counts blocks of one size); global (the default)
// keeps G whatever the world size.
static bool per_rank_batch(const Trainer *t) { return strcmp(t->args.ft_batch, "per_rank") == 0; }

static void set_global_batch(Trainer *t, int G) {  // [live] and says what changes
  if (G == t->global_batch) return;
  log0(
      "--ft_batch per_rank: %d samples per step from here on (was %d): %d per rank, more steps per epoch; "
      "the learning rate is not scaled\n",
      G, t->global_batch, step_size(t));
  t->global_batch = G;
}

// [cursor] Where the epoch's list is read next: each step so far took a block of G.
static long long cursor(const Trainer *t) { return t->epoch_step * t->global_batch; }

// This epoch's data order: this rank's samples of every block from the cursor on (seed + epoch), and
// one spare sample, which a rank trains on with weight 0 in a block that has none of its own.
static void epoch_order(Trainer *t, int epoch) {
  if (t->epoch_step == 0) t->epoch_world = t->world_size;  // [cursor] a new epoch: laid out for this world
  if (t->epoch_step == 0 && per_rank_batch(t)) set_global_batch(t, t->world_size * step_size(t));  // [live]
  sampler_set_epoch(&t->sampler, epoch, t->epoch_world);  // [cursor] new order each epoch, same on every rank
  t->n_mine = sampler_indices_from(&t->sampler, cursor(t), t->global_batch, t->world_size, t->rank, t->order);
  t->order[t->n_mine] = t->sampler.perm[0];  // [cursor] the spare
  loader_set_order(&t->train, &t->ctx, t->order, t->n_mine + 1);
}

// ---------------------------------------------------------------------------------------------------
// Model

static void build_model(Trainer *t) {
  int sizes[MLP_MAX_LAYERS + 1];
  int n_layers = mlp_parse_hidden(t->args.hidden, t->data_id.dim, t->data_id.n_classes, sizes);
  int max_batch = t->args.batch_size > EVAL_BATCH ? t->args.batch_size : EVAL_BATCH;
  mlp_init(&t->model, &t->ctx, sizes, n_layers, max_batch, t->args.seed);
  reducer_init(&t->reducer, &t->pg, &t->model, t->args.bucket_cap_mb);  // [bucket] buckets of --bucket_cap_mb
  log0("reducer: %d buckets (cap %g MiB)\n", t->reducer.n_buckets, t->args.bucket_cap_mb);  // [bucket]
  reducer_register_comm_hook(&t->reducer, &t->args);  // [hook] --comm_hook (DDP's), --check_finite
  sgd_init(&t->opt, &t->ctx, t->model.n_params, t->args.lr, t->args.momentum, 0.0f, t->args.weight_decay,
           false);
  clip_init(&t->clip, &t->ctx, t->args.clip_grad_norm);  // --clip_grad_norm (0: off)
  log0("model: %d layers, %zu parameters\n", n_layers, t->model.n_params);
  t->loss = dev_alloc(&t->ctx, sizeof(float));  // [accum] the step's loss, over its micro-batches
}

// [ddp] Wrapping the model (PyTorch: DDP(model)), after resume(): every replica continues from rank 0's
// parameters and momentum buffer (PyTorch leaves that to you), whatever seed or checkpoint each rank had.
static void wrap_model(Trainer *t) {
  dist_broadcast(&t->pg, t->model.params, t->model.n_params, DIST_FLOAT, 0);
  dist_broadcast(&t->pg, t->opt.buf, t->model.n_params, DIST_FLOAT, 0);
  if (ft_failed(&t->ft, &t->pg))  // [live] a replica lost before the first step: nothing to go on from
    die(1, "a replica failed during start-up: %s (live recovery starts with the first step)",
        dist_failure(&t->pg));
}

// ---------------------------------------------------------------------------------------------------
// Train step

// --clip_grad_norm MAX (PyTorch: torch.nn.utils.clip_grad_norm_), once the step's gradient is
// complete: its 2-norm over all parameters, and the gradient scaled by min(1, MAX / (norm + 1e-6)).
static void clip_gradients(Trainer *t) {
  if (t->args.clip_grad_norm <= 0) return;
  clip_sum_squares(&t->clip, &t->ctx, t->model.grads, t->model.n_params);
  clip_scale(&t->clip, &t->ctx, t->model.grads, t->model.n_params);
}

// One optimizer step on this rank's B samples at `start`, its part of a block of G; returns the step's
// loss, on the device.
static const float *run_batch(Trainer *t, int start, int B, int G) {
  int mine = B;                                                 // [cursor] its share of the G samples
  if (B == 0) B = 1, start = t->n_mine;                         // [cursor] none: the spare, weighted 0
  int micro = t->args.batch_size, K = (B + micro - 1) / micro;  // [accum] K micro-batches of b <= micro
  bool even = (long long)mine * t->world_size == G;             // [cursor] all alike: step 06's arithmetic
  mlp_zero_grad(&t->model);
  dev_zero(&t->ctx, t->loss, sizeof(float));                     // [accum]
  for (int k = 0; k < K; k++) {                                  // [accum]
    int b = B - k * micro < micro ? B - k * micro : micro;       // [accum]
    loader_batch(&t->train, &t->ctx, start + k * micro, b);      // [accum]
    mlp_forward(&t->model, &t->ctx, t->train.xb, b);             // [accum]
    mlp_loss(&t->model, &t->ctx, t->train.yb, b);                // [accum]
    ops_axpy(&t->ctx, t->loss, t->model.loss, 1, (float)b / B);  // [accum] the step's loss: b/B-weighted sum
    MlpGradHook sync = k == K - 1 ? reducer_autograd_hook : NULL;  // [accum] DDP's no_sync but the last
    // [bucket] backward of the loss times 1/W, so that the reducer's all-reduce, a plain sum, yields the mean
    // [accum] and times b/B, so that the K micro-batches' gradients add up to the mean over B
    float w = mine ? (float)b : 0.0f;  // [cursor] the samples it counts for: b/G of the global batch
    float scale = even ? (float)b / B / t->world_size : w / G;  // [cursor] the mean over the G samples
    if (comm_hook_divides(&t->reducer.hook)) scale = w * t->world_size / G;  // [hook] the hook divides by W
    if (sync) reducer_prepare_for_backward(&t->reducer, t->step + 1);  // [bucket] then each bucket starts
    mlp_backward(&t->model, &t->ctx, t->train.xb, b, scale, sync, &t->reducer);  // [bucket]
  }  // [accum] the K micro-batches are done: only the last one's backward communicated
  reducer_finalize_backward(&t->reducer);  // [bucket] the last bucket is in before the optimizer
  trace_backward(&t->trace, &t->ctx, &t->model, t->reducer.work, t->reducer.n_buckets, t->step);  // [trace]
  if (!even) ops_scale(&t->ctx, t->loss, 1, (float)mine * t->world_size / G);  // [cursor] the share, not 1/W
  dist_all_reduce(&t->pg, t->loss, 1, DIST_FLOAT, DIST_AVG);  // [metrics] the global loss ([accum] t->loss)
  return t->loss;                                             // [accum]
}

// [live] The step's update, applied only after its vote: every collective of the step completed here.
static void commit(Trainer *t) {
  clip_gradients(t);
  sgd_step(&t->opt, &t->ctx, t->model.params, t->model.grads);
}

static double evaluate(Trainer *t) {
  dev_zero(&t->ctx, t->correct, sizeof(int));
  mlp_count_correct_loader(&t->model, &t->ctx, &t->test, EVAL_BATCH, t->correct);
  dist_all_reduce(&t->pg, t->correct, 1, DIST_INT, DIST_SUM);  // [metrics] all ranks' answers
  int correct;
  dev_download(&t->ctx, &correct, t->correct, sizeof correct);
  return (double)correct / t->test.n;
}

// ---------------------------------------------------------------------------------------------------
// Epoch loop

static void save_checkpoint(Trainer *t, const char *dir, int epochs_done);                  // [fault] below
static int step_size(const Trainer *t) { return t->args.batch_size * t->args.grad_accum; }  // [accum]

static long long steps_for(const Trainer *t, int world) {  // [cursor] an epoch laid out for `world` ranks
  return ((long long)sampler_total(&t->sampler, world) + t->global_batch - 1) / t->global_batch;
}

static long long steps_per_epoch(const Trainer *t) { return steps_for(t, t->epoch_world); }  // [cursor]

// [live] The members behind the quorum's newest step (and a replacement, which has none) take the state
// of the first member at it: the parameters, the momentum and the optimizer's step count (0: the buffer
// is not in use yet), and where it is (step, epoch, steps into the epoch, the world its epoch is laid out
// for, the global batch), by broadcasts from it (wrap_model's, done again). Returns the epoch this
// replica is in now.
static int heal(Trainer *t, int epoch) {
  double t0 = log_clock();
  // TODO(09): the heal. The members of the new quorum at its newest step give their state to those
  // behind (and to a replacement, which has none): broadcast, from rank t->ft.q.source of the new
  // group, the parameters (t->model.params), the momentum buffer (t->opt.buf, n_params floats) and
  // where the source is: t->step, `epoch`, t->epoch_step, t->epoch_world, t->global_batch and
  // t->opt.steps (e.g. as 6 doubles in one device buffer: dev_alloc, dev_upload, DIST_DOUBLE,
  // dev_download, dev_free). If the broadcasts failed (ft_failed), return `epoch`: still behind,
  // healed at the next quorum. Else take every one of them, report the heal (ft_healed, with
  // the step healed to and the bytes broadcast), and return the source's epoch. Until then
  // nothing is healed: a replica behind keeps its own state, and a replacement starts from its
  // own initialisation at step 0.
  ft_healed(&t->ft, &t->pg, t->step, 0, log_clock() - t0);
  return epoch;
}

// [live] A replacement joins a running job: its state comes from a peer, not from a checkpoint or its
// own initialisation (resume() and wrap_model() are for the replicas that start together). Returns
// whether it did.
static bool join(Trainer *t) {
  if (!ft_join(&t->ft, &t->pg, &t->ctx)) return false;
  t->rank = t->pg.rank;
  t->world_size = t->pg.world_size;
  loader_set_stride_order(&t->test, &t->ctx, t->rank, t->world_size);  // [metrics] its shard of the test set
  t->epoch0 = heal(t, 0);
  if (ft_failed(&t->ft, &t->pg)) die(1, "the heal failed: %s", dist_failure(&t->pg));
  check_ranks_agree(t);  // as the members do after a heal: the same program, flags, model and data
  return true;
}

// [live] A new quorum after a failure: the group rebuilt around the members the lighthouse names, those
// behind the newest step healed from one at it, and the rest of the epoch shared by the new world from
// the cursor. Returns false when the heal moved this replica into a later epoch.
static bool recover(Trainer *t, int epoch) {
  ft_quorum(&t->ft, &t->pg, &t->ctx, t->step, mlp_param_digest(&t->model, &t->ctx));
  t->rank = t->pg.rank;
  t->world_size = t->pg.world_size;
  int now = t->ft.q.heal ? heal(t, epoch) : epoch;
  loader_set_stride_order(&t->test, &t->ctx, t->rank, t->world_size);  // [metrics] the new world's shard
  if (t->ft.q.heal && !ft_failed(&t->ft, &t->pg))  // a newcomer's program, flags, model and data
    t->epoch0 = now, check_ranks_agree(t);
  if (now != epoch) return false;
  // TODO(09): the reshard. The rest of this epoch, from the cursor (cursor(t): where the next
  // block of G starts in the epoch's list, the same on every member after the heal), is shared by
  // the new world: lay out this rank's samples of each block from there for its new rank and
  // world size (epoch_order); run_epoch then reads them from their start. Until then each rank
  // keeps the order it had, laid out for the old world: its old share of blocks read again.
  return true;
}

static bool out_of_steps(const Trainer *t) {                                          // [fault]
  return (t->args.max_steps > 0 && t->step >= t->args.max_steps) || t->preempt.stop;  // [fault] or preempted
}  // [fault]

// Returns whether the whole epoch ran (--max_steps may stop it early).
static bool run_epoch(Trainer *t, int epoch) {
  epoch_order(t, epoch);
  double t0 = log_clock();
  long long batches = t->epoch_step, samples = 0;  // a resumed epoch goes on where it stopped
  int start = 0;                                   // [cursor] this rank's next sample in its order
  for (long long c = cursor(t); c < t->sampler.total && !out_of_steps(t); c = cursor(t)) {  // [cursor]
    if (ft_failed(&t->ft, &t->pg)) {  // [live] the group failed: a new quorum, then this step again
      if (!recover(t, epoch))
        return t->healed_past = true;      // [live] healed into the next epoch: its end done
      start = 0, batches = t->epoch_step;  // [live] the rest of the epoch, in the new world's shares
      continue;                            // [live] (a heal may have moved the cursor)
    }
    ft_start_step(&t->ft, t->step + 1, t->model.params, &t->ctx);  // [live]
    int G = sampler_block(&t->sampler, c, t->global_batch);        // [cursor] G, or the rest of the epoch
    int B = sampler_share(&t->sampler, c, t->global_batch, t->world_size, t->rank);  // [cursor] my part
    const float *loss = run_batch(t, start, B, G);  // on the device: logged once it reaches the host
    // TODO(09): the vote. Apply the step (commit) only when every collective of it completed on this
    // rank (ft_should_commit, for step t->step + 1); when one failed, apply nothing and go round the
    // loop again: ft_failed then says so, a new quorum forms, and the step is done again in the new
    // world. Until then every step is applied, even one whose gradient all-reduce failed half-way.
    commit(t);
    ft_committed(&t->ft, &t->pg, epoch, t->step + 1, c, G, t->order + start, B);  // [live] (for the tests)
    start += B;                                                                   // [cursor]
    t->step++;
    batches++;
    samples += G;                                                 // [metrics] the global batch
    loss_log_push(&t->losses, &t->ctx, loss, t->step, epoch, G);  // [cursor] G samples
    straggler_step(&t->straggler, t->step);                // [trace] --straggler N: a report every N steps
    preempt_agree(&t->preempt, &t->pg, &t->ctx, t->step);  // [fault] one rank's SIGTERM stops them all here
    t->epoch_step = batches;  // [fault] a snapshot taken now resumes at the next step
    if (snapshot_due(t->args.save_steps, t->step) && batches < steps_per_epoch(t) &&  // [fault]
        !out_of_steps(t))  // [fault] not at the epoch's end, nor where training stops: train() saves there
      save_checkpoint(t, t->args.ckpt_dir, epoch);  // [fault] --save_steps: a snapshot inside the epoch
    if (!out_of_steps(t) && ft_join_requested(&t->ft, &t->pg, &t->ctx) &&
        recover(t, epoch))                 // [live] one waits:
      start = 0, batches = t->epoch_step;  // [live] it joins here, and the world shares the epoch's rest
  }
  double train_loss = loss_log_epoch(&t->losses, &t->ctx);  // the last steps' losses; their mean
  double samples_per_s = (double)samples / (log_clock() - t0);
  double acc = evaluate(t);
  log0("epoch %d/%d  train loss %.4f  test accuracy %.4f  %.0f samples/s\n", epoch + 1, t->args.epochs,
       train_loss, acc, samples_per_s);
  metrics_epoch_bytes(&t->metrics, dist_take_bytes(t->reducer.work, t->reducer.n_buckets));  // [trace]
  metrics_epoch(&t->metrics, epoch, (float)train_loss, acc, samples_per_s, batches < steps_per_epoch(t));
  t->epoch_step = batches == steps_per_epoch(t) ? 0 : batches;  // where a --max_steps stop leaves it
  return t->epoch_step == 0;
}

// ---------------------------------------------------------------------------------------------------
// Checkpoint

static CkptMeta checkpoint_meta(const Trainer *t, int epochs_done) {
  CkptMeta meta = ckpt_model_meta(&t->model, &t->opt, &t->data_id, t->args.seed, t->args.batch_size,
                                  t->args.grad_accum, t->args.drop_last);
  meta.epoch = (uint32_t)epochs_done;
  meta.epoch_step = (uint32_t)t->epoch_step;
  meta.step = (uint64_t)t->step;
  meta.world_size = (uint32_t)t->world_size;
  meta.global_batch = (uint32_t)t->global_batch;  // [cursor] G, and the world the epoch is laid out for
  meta.epoch_world = (uint32_t)t->epoch_world;    // [cursor]
  return meta;
}

static void save_checkpoint(Trainer *t, const char *dir, int epochs_done) {
  comm_hook_save(&t->reducer.hook, dir, t->step);  // [hook] powersgd: every rank's state first
  CkptMeta meta = checkpoint_meta(t, epochs_done);
  if (t->rank == 0)  // [ckpt] one writer: the replicas are equal
    ckpt_save_model(dir, &meta, &t->model, &t->opt, &t->ctx);
  dist_barrier(&t->pg);  // [ckpt] nobody goes on (or reads the file) before it is complete
  comm_hook_prune(&t->reducer.hook, dir, t->step);  // [hook] powersgd: the states of older checkpoints
}

static void resume(Trainer *t) {
  const char *path = snapshot_resume_path(t->args.resume, t->args.ckpt_dir);  // [fault] --resume auto
  if (!path) return;                                                          // [fault]
  CkptMeta expect = checkpoint_meta(t, 0), meta;
  ckpt_load_model_any_world(path, &expect, &meta, &t->model, &t->opt, &t->ctx);  // [cursor] at any world
  comm_hook_load(&t->reducer.hook, path, (long long)meta.step);  // [hook] powersgd: its state, beside it
  ckpt_log_resume(path, &meta, t->args.epochs);  // [fault] path: --resume's file, or the one auto found
  t->epoch0 = (int)meta.epoch;
  t->step = (long long)meta.step;
  t->epoch_step = (long long)meta.epoch_step;
  if (meta.global_batch) t->global_batch = (int)meta.global_batch;  // [cursor] kept, at any world size
  t->epoch_world = t->epoch_step > 0 ? (int)meta.epoch_world : t->world_size;  // [cursor]
  if (t->epoch_step > 0 && (t->epoch_world > t->sampler.n ||  // [cursor] a position inside the epoch
                            cursor(t) >= sampler_total(&t->sampler, t->epoch_world)))
    die(1, "%s: position %lld of an epoch laid out for %d ranks is not inside its %d samples", path,
        cursor(t), t->epoch_world, t->sampler.n);
  if (t->global_batch && t->global_batch < t->world_size)  // [cursor] a rank would never have a sample
    die(1, "%s: %d samples per step cannot be shared by %d ranks", path, t->global_batch, t->world_size);
  if ((int)meta.world_size != t->world_size)  // [cursor]
    log0("resharded: %u ranks saved it at position %lld of epoch %u (laid out for %d); %d ranks go on\n",
         meta.world_size, cursor(t), meta.epoch + 1, t->epoch_world, t->world_size);  // [cursor]
  dist_barrier(&t->pg);  // [ckpt] every rank has loaded before any trains
}

// ---------------------------------------------------------------------------------------------------
// Main

static void train(Trainer *t) {
  if (!t->global_batch) t->global_batch = t->world_size * step_size(t);       // [cursor] G, unless resumed
  if (t->rank == 0 && (t->args.save_interval > 0 || t->args.save_steps > 0))  // [ckpt] [fault] rank 0 writes
    ckpt_dir_require(t->args.ckpt_dir);
  // [cursor] the global batch: G samples per step, shared by the W ranks in micro-batches of at most B
  log0("global batch: %d samples per step over %d ranks, micro-batches of at most %d\n",  // [cursor]
       t->global_batch, t->world_size, t->args.batch_size);                               // [cursor]
  metrics_open(&t->metrics, t->args.metrics, t->rank, t->world_size);
  trace_open(&t->trace, &t->ctx, &t->model, t->args.trace, t->rank, t->world_size);  // [trace]
  straggler_init(&t->straggler, t->args.straggler, &t->pg, &t->train, &t->metrics);  // [trace]
  long long total = t->step + (t->args.epochs - t->epoch0) * steps_per_epoch(t) - t->epoch_step;
  if (t->epoch0 < t->args.epochs)  // [cursor] the later epochs are laid out for this world size
    total += (t->args.epochs - t->epoch0 - 1) * (steps_for(t, t->world_size) - steps_per_epoch(t));
  loss_log_init(&t->losses, &t->ctx, &t->metrics, t->args.log_interval, t->args.epochs, t->step, total,
                t->clip.norm);  // --clip_grad_norm: each step record gets the step's grad_norm
  if (t->args.save_init) save_checkpoint(t, t->args.save_init, t->epoch0);  // the state to start from
  for (int epoch = t->epoch0; epoch < t->args.epochs && !out_of_steps(t); epoch++) {
    bool complete = run_epoch(t, epoch);  // false after a --max_steps stop inside the epoch
    if (t->healed_past && !(t->healed_past = false)) continue;  // [live] its evaluation and save were done
    // where --max_steps stops, inside an epoch or at its end, a checkpoint is saved
    bool stopped = !complete || out_of_steps(t);
    if (t->args.save_interval > 0 && (stopped || (epoch + 1) % t->args.save_interval == 0))
      save_checkpoint(t, t->args.ckpt_dir, complete ? epoch + 1 : epoch);
    else if (preempt_save_due(&t->preempt, t->args.save_interval, t->args.save_steps) ||  // [fault] SIGTERM
             snapshot_due(t->args.save_steps, t->step))  // [fault] or a snapshot at the epoch's end
      save_checkpoint(t, t->args.ckpt_dir, complete ? epoch + 1 : epoch);  // [fault]
  }
}

static void finish(Trainer *t) {
  uint64_t digest = mlp_param_digest(&t->model, &t->ctx);
  metrics_final(&t->metrics, t->world_size, t->step, digest);  // the last record; closes the file
  loss_log_free(&t->losses, &t->ctx);
  trace_close(&t->trace, &t->ctx);  // [trace]
  straggler_free(&t->straggler);    // [trace]
  log0("done: %lld steps, param_digest %016llx\n", t->step, (unsigned long long)digest);
  dev_free(&t->ctx, t->correct);
  dev_free(&t->ctx, t->loss);          // [accum]
  preempt_free(&t->preempt, &t->ctx);  // [fault]
  free(t->order);
  sampler_free(&t->sampler);
  loader_free(&t->test, &t->ctx);
  loader_free(&t->train, &t->ctx);
  clip_free(&t->clip, &t->ctx);
  sgd_free(&t->opt, &t->ctx);
  reducer_free(&t->reducer);  // [bucket]
  mlp_free(&t->model, &t->ctx);
}

int main(int argc, char **argv) {
  Trainer t = {0};
  configure(&t, argc, argv);
  setup(&t);
  load_data(&t);
  build_model(&t);
  if (!join(&t)) {  // [live] a replacement takes its state from a peer; the launch's replicas start so:
    resume(&t);
    check_ranks_agree(&t);
    wrap_model(&t);
  }  // [live]
  train(&t);
  finish(&t);
  cleanup(&t);
  return preempt_exit_status(&t.preempt);  // [fault] 75 after a preemption (143: saving off, none written)
}
