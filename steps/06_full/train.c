/*
 * Step 06 — full: the complete trainer, with DDP's bucketed all-reduce overlapped with backward.
 *
 * Adds over step 05: the gradients are reduced by a reducer (reducer.c) the way PyTorch's DDP does
 * it. They are grouped into buckets (--bucket_cap_mb), and a bucket is all-reduced asynchronously as
 * soon as backward has produced all of its gradients, while backward goes on with the earlier layers;
 * the optimizer waits for the last bucket. --grad_accum K takes K micro-batches per optimizer step and
 * communicates only after the last one (DDP's no_sync). --trace writes a timeline of both. And the
 * loop never waits for the device: each step's loss is copied to the host in the background and
 * logged when it arrives, so on a GPU the host queues the next steps while the current one runs.
 *
 * Run:  mpirun -np 2 build/bin/06_full --device cpu                (2 CPU ranks, Fashion-MNIST)
 *       mpirun -np 4 build/bin/06_full                             (4 GPUs, NCCL)
 *       torchrun --nproc_per_node 4 --no_python build/bin/06_full  (4 GPUs, environment launch)
 *       srun -n 8 --gpus-per-task 1 build/bin/06_full              (Slurm; set MASTER_ADDR/PORT)
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "args.h"     // args.h: Args, args_parse, ARGS_*
#include "check.h"    // check.h: die, check_set_rank
#include "ckpt.h"     // ckpt.h: CkptMeta, ckpt_save, ckpt_load
#include "data.h"     // data.h: Dataset, data_parse, dataset_load, dataset_free
#include "device.h"   // device.h: Ctx, ctx_init, ctx_set_tf32, device_parse, dev_alloc, ...
#include "dist.h"     // dist.h: ProcessGroup, dist_init, dist_all_reduce, dist_barrier
#include "loader.h"   // loader.h: Loader, loader_init, loader_set_order, loader_batch
#include "log.h"      // log.h: log0, Progress, progress_start, progress_print
#include "metrics.h"  // metrics.h: Metrics, metrics_open, metrics_step, metrics_epoch
#include "mlp.h"      // mlp.h: Mlp, mlp_init, mlp_forward, mlp_loss, mlp_backward
#include "ops.h"      // ops.h: ops_scale, ops_axpy
#include "optim.h"    // optim.h: Sgd, sgd_init, sgd_step
#include "readback.h"  // readback.h: Readback, readback_init, readback_push, readback_take
#include "reducer.h"  // reducer.h: Reducer, reducer_init, reducer_grad_ready, reducer_finish
#include "sampler.h"  // sampler.h: Sampler, sampler_init, sampler_set_epoch, sampler_indices
#include "trace.h"    // trace.h: Trace, trace_open, trace_close

// ---------------------------------------------------------------------------------------------------
// Configuration

#define EVAL_BATCH 500  // test-set batch size: evaluation needs no gradients, so bigger is cheaper
#define RUN_AHEAD 2     // steps the host may queue before it waits to read a step's loss
_Static_assert(RUN_AHEAD < READBACK_SLOTS, "the losses of RUN_AHEAD + 1 steps must fit in flight");

typedef struct Trainer {
  Args args;            // command-line flags
  int rank;             // this process's rank in the process group
  int world_size;       // number of processes
  int local_rank;       // rank within this node: selects the GPU
  ProcessGroup pg;      // the process group: ranks and the communicator
  Ctx ctx;              // device, stream, cuBLAS handle
  Mlp model;            // parameters, gradients, activations
  Sgd opt;              // momentum buffer
  Reducer reducer;      // gradient buckets and their all-reduces
  float *loss;          // device, (1): the step's loss, summed over its micro-batches
  Readback losses;      // the steps' losses on their way to the host
  Trace trace;          // --trace timeline
  Loader train, test;   // datasets on the device, batch buffers
  int n_train;          // training samples in the dataset
  Sampler sampler;      // this rank's shard of every epoch
  int in, classes;      // features per sample, number of classes
  int *order;           // host, (n_train): the samples this process visits this epoch, in order
  int n_order;          // length of this epoch's order
  int n_eval;           // test samples this rank evaluates
  int *correct;         // device, (1): evaluation counter
  int epoch0;           // first epoch to run (> 0 after --resume)
  long long step;       // optimizer steps done
  Metrics metrics;      // --metrics file
  Progress progress;    // progress line state
} Trainer;

static void configure(Trainer *t, int argc, char **argv) {
  args_parse(&t->args, argc, argv, ARGS_TRAIN | ARGS_DIST | ARGS_SAMPLER | ARGS_REDUCER,
             "Step 06: bucketed all-reduce overlapped with backward");
}

// ---------------------------------------------------------------------------------------------------
// Process group

static void setup(Trainer *t) {
  Device dev;
  if (device_parse(t->args.device, &dev) != 0) die(2, "unknown --device '%s'", t->args.device);
  dist_init(&t->pg, t->args.backend, dev, t->args.timeout);  // [init] who am I, how many are we
  t->rank = t->pg.rank;
  t->world_size = t->pg.world_size;
  t->local_rank = t->pg.local_rank;
  // [init] one GPU per process: the local rank numbers this process's GPU on its node (unless the
  // launcher already gave each process a single GPU of its own, e.g. srun --gpus-per-task 1)
  int gpus = dev == DEVICE_CUDA ? device_cuda_count() : 0;
  if (gpus > 1 && t->pg.local_size > gpus)
    die(1, "%d ranks on this node but only %d GPUs: start at most one rank per GPU",
        t->pg.local_size, gpus);
  ctx_init(&t->ctx, dev, gpus == 1 ? 0 : t->local_rank);
  ctx_set_tf32(&t->ctx, t->args.tf32);  // --tf32: faster GPU GEMMs, inputs rounded to TF32
  dist_connect(&t->pg, &t->ctx);  // [init] the communicator, on this rank's GPU
  log0("rank %d of %d (local rank %d) on %s\n", t->rank, t->world_size, t->local_rank,
       device_name(dev));
}

static void cleanup(Trainer *t) {
  dist_destroy(&t->pg);  // [init] leave the process group
  ctx_free(&t->ctx);
}

// ---------------------------------------------------------------------------------------------------
// Model

static void build_model(Trainer *t) {
  int sizes[MLP_MAX_LAYERS + 1];
  int n_layers = mlp_parse_sizes(t->args.hidden, t->in, t->classes, sizes);
  if (n_layers < 0) die(2, "--hidden '%s': expected positive sizes such as 1024,1024", t->args.hidden);
  int max_batch = t->args.batch_size > EVAL_BATCH ? t->args.batch_size : EVAL_BATCH;
  mlp_init(&t->model, &t->ctx, sizes, n_layers, max_batch, t->args.seed);
  // [ddp] every replica starts from rank 0's parameters, whatever seed each rank was given
  dist_broadcast(&t->pg, t->model.params, t->model.n_params, DIST_FLOAT, 0);
  // [bucket] gradient buckets of at most --bucket_cap_mb, each with its own all-reduce
  reducer_init(&t->reducer, &t->pg, &t->ctx, &t->model, t->args.bucket_cap_mb, &t->trace);
  log0("reducer: %d buckets (cap %g MiB)\n", t->reducer.n_buckets, t->args.bucket_cap_mb);
  sgd_init(&t->opt, &t->ctx, t->model.n_params, t->args.lr, t->args.momentum, 0.0f,
           t->args.weight_decay, false);
  t->loss = dev_alloc(&t->ctx, sizeof(float));
  readback_init(&t->losses, &t->ctx);
  log0("model: %d layers, %zu parameters\n", n_layers, t->model.n_params);
}

// ---------------------------------------------------------------------------------------------------
// Data

static void load_data(Trainer *t) {
  DataKind kind;
  if (data_parse(t->args.data, &kind) != 0) die(2, "unknown --data '%s'", t->args.data);
  Dataset train, test;
  dataset_load(kind, t->args.data_dir, t->args.dataset_size, t->args.seed, &train, &test);
  t->n_train = train.n;
  sampler_init(&t->sampler, train.n, t->world_size, t->rank, t->args.drop_last,  // [sampler]
               t->args.seed);
  t->in = train.dim;
  t->classes = train.n_classes;
  loader_init(&t->train, &t->ctx, &train, t->args.batch_size, train.n);
  loader_init(&t->test, &t->ctx, &test, EVAL_BATCH, test.n);
  int *all = mallocCheck((size_t)test.n * sizeof *all);  // the test set is visited in order
  // [metrics] each rank evaluates every W-th test sample: a shard without padding, none counted twice
  for (int i = t->rank; i < test.n; i += t->world_size) all[t->n_eval++] = i;
  loader_set_order(&t->test, &t->ctx, all, t->n_eval);
  free(all);
  t->order = mallocCheck((size_t)train.n * sizeof *t->order);
  t->correct = dev_alloc(&t->ctx, sizeof(int));
  log0("data: %s, %d train / %d test samples\n", t->args.data, train.n, test.n);
  dataset_free(&train);
  dataset_free(&test);
}

// How many samples this process visits per epoch: its shard.
static int samples_per_epoch(const Trainer *t) { return t->sampler.num_samples; }  // [sampler]

// This epoch's data order: this rank's shard of the epoch's permutation (seed + epoch).
static void epoch_order(Trainer *t, int epoch) {
  sampler_set_epoch(&t->sampler, epoch);  // [sampler] new order each epoch, same on every rank
  sampler_indices(&t->sampler, t->order);
  t->n_order = samples_per_epoch(t);
  loader_set_order(&t->train, &t->ctx, t->order, t->n_order);
}

// ---------------------------------------------------------------------------------------------------
// Train step

// One optimizer step over the B samples at `start`, in micro-batches of at most --batch_size.
static void run_batch(Trainer *t, int start, int B) {
  int micro = t->args.batch_size, K = (B + micro - 1) / micro;
  mlp_zero_grad(&t->model);
  dev_zero(&t->ctx, t->loss, sizeof(float));
  for (int k = 0; k < K; k++) {
    int b = B - k * micro < micro ? B - k * micro : micro;
    bool sync = k == K - 1;  // [accum] only the last micro-batch communicates (DDP's no_sync)
    loader_batch(&t->train, &t->ctx, start + k * micro, b);
    mlp_forward(&t->model, &t->ctx, t->train.xb, b);
    mlp_loss(&t->model, &t->ctx, t->train.yb, b);
    // [accum] the step's loss is the micro-batches' losses weighed by b/B, summed on the device
    ops_axpy(&t->ctx, t->loss, t->model.loss, 1, (float)b / B);
    // [bucket] divide the loss gradient by W, so that every gradient comes out divided and the
    // reducer's all-reduce, a plain sum, yields their average without another pass over them
    // [accum] also weigh the micro-batch by b/B, so that the K gradients add up to the mean over B
    float scale = (float)b / B / t->world_size;
    if (scale != 1.0f)
      ops_scale(&t->ctx, t->model.dact[t->model.n_layers - 1], (size_t)b * t->classes, scale);
    if (sync) reducer_prepare(&t->reducer, t->step);
    // [bucket] the hook starts each bucket's all-reduce as soon as its gradients are ready
    mlp_backward(&t->model, &t->ctx, t->train.xb, b, sync ? reducer_grad_ready : NULL, &t->reducer);
  }
  reducer_finish(&t->reducer);  // [bucket] wait for the last bucket before the optimizer step
  sgd_step(&t->opt, &t->ctx, t->model.params, t->model.grads);
  dist_all_reduce(&t->pg, t->loss, 1, DIST_FLOAT, DIST_AVG);  // [metrics] the global loss
  // [overlap] queue the loss's copy to the host, and do not wait for it: on a GPU the host goes on
  // to queue the next step while this one runs
  readback_push(&t->losses, &t->ctx, t->loss, t->step + 1);
}

static double evaluate(Trainer *t) {
  dev_zero(&t->ctx, t->correct, sizeof(int));
  for (int start = 0; start < t->n_eval; start += EVAL_BATCH) {
    int B = t->n_eval - start < EVAL_BATCH ? t->n_eval - start : EVAL_BATCH;
    loader_batch(&t->test, &t->ctx, start, B);
    mlp_count_correct(&t->model, &t->ctx, t->test.xb, t->test.yb, B, t->correct);
  }
  dist_all_reduce(&t->pg, t->correct, 1, DIST_INT, DIST_SUM);  // [metrics] all ranks' answers
  int correct;
  dev_download(&t->ctx, &correct, t->correct, sizeof correct);
  return (double)correct / t->test.n;
}

// ---------------------------------------------------------------------------------------------------
// Epoch loop

// Samples per optimizer step on this rank: --grad_accum micro-batches of --batch_size.
static int step_size(const Trainer *t) { return t->args.batch_size * t->args.grad_accum; }

static long long steps_per_epoch(const Trainer *t) {
  return (samples_per_epoch(t) + step_size(t) - 1) / step_size(t);  // the last may be short
}

static bool out_of_steps(const Trainer *t) {
  return t->args.max_steps > 0 && t->step >= t->args.max_steps;
}

// [overlap] Logs every step whose loss has reached the host; waits only while more than
// `max_ahead` steps are in flight. Returns the sum of the losses it logged.
static double log_losses(Trainer *t, int epoch, int max_ahead) {
  double sum = 0.0;
  float loss;
  long long step;
  while (readback_take(&t->losses, &t->ctx, max_ahead, &loss, &step)) {
    sum += loss;
    metrics_step(&t->metrics, step, epoch, loss);
    if (step % t->args.log_interval == 0)
      progress_print(&t->progress, epoch + 1, t->args.epochs, step, loss);
  }
  return sum;
}

// Returns whether the whole epoch ran (--max_steps may stop it early).
static bool run_epoch(Trainer *t, int epoch) {
  epoch_order(t, epoch);
  double t0 = now_seconds(), loss_sum = 0.0;
  long long batches = 0, samples = 0;
  for (int start = 0; start < t->n_order && !out_of_steps(t); start += step_size(t)) {
    int B = t->n_order - start < step_size(t) ? t->n_order - start : step_size(t);
    run_batch(t, start, B);
    t->step++;
    batches++;
    samples += (long long)B * t->world_size;  // [metrics] the global batch
    progress_add(&t->progress, (long long)B * t->world_size);
    loss_sum += log_losses(t, epoch, RUN_AHEAD);  // [overlap] the host stays RUN_AHEAD steps ahead
  }
  loss_sum += log_losses(t, epoch, 0);  // [overlap] the epoch's last steps
  double samples_per_s = (double)samples / (now_seconds() - t0);
  double acc = evaluate(t);
  log0("epoch %d/%d  train loss %.4f  test accuracy %.4f  %.0f samples/s\n", epoch + 1,
       t->args.epochs, loss_sum / (batches ? batches : 1), acc, samples_per_s);
  metrics_epoch(&t->metrics, epoch, (float)(loss_sum / (batches ? batches : 1)), acc, samples_per_s);
  return batches == steps_per_epoch(t);
}

// ---------------------------------------------------------------------------------------------------
// Checkpoint

static CkptMeta checkpoint_meta(const Trainer *t, int epochs_done) {
  CkptMeta meta = {0};
  meta.epoch = (uint32_t)epochs_done;
  meta.step = (uint64_t)t->step;
  meta.seed = t->args.seed;
  meta.world_size = (uint32_t)t->world_size;
  meta.optim = OPTIM_SGD;
  meta.optim_steps = (uint32_t)t->opt.steps;
  meta.n_layers = t->model.n_layers;
  memcpy(meta.sizes, t->model.sizes, sizeof meta.sizes);
  return meta;
}

static void write_checkpoint(Trainer *t, int epochs_done) {
  char path[4096], err[512];
  if (mkdir(t->args.ckpt_dir, 0755) != 0 && errno != EEXIST)
    die(1, "cannot create --ckpt_dir '%s': %s", t->args.ckpt_dir, strerror(errno));
  snprintf(path, sizeof path, "%s/checkpoint.bin", t->args.ckpt_dir);
  size_t bytes = t->model.n_params * sizeof(float);
  float *params = mallocCheck(bytes), *state = mallocCheck(bytes);
  dev_download(&t->ctx, params, t->model.params, bytes);
  dev_download(&t->ctx, state, t->opt.buf, bytes);
  CkptMeta meta = checkpoint_meta(t, epochs_done);
  if (ckpt_save(path, &meta, params, state, err, sizeof err) != 0) die(1, "%s", err);
  log0("saved %s (epoch %d, step %lld)\n", path, epochs_done, t->step);
  free(state);
  free(params);
}

static void save_checkpoint(Trainer *t, int epochs_done) {
  if (t->rank == 0) write_checkpoint(t, epochs_done);  // [ckpt] one writer: the replicas are equal
  dist_barrier(&t->pg);  // [ckpt] nobody goes on (or reads the file) before it is complete
}

static void resume(Trainer *t) {
  if (!t->args.resume) return;
  char err[512];
  size_t bytes = t->model.n_params * sizeof(float);
  float *params = mallocCheck(bytes), *state = mallocCheck(bytes);
  CkptMeta expect = checkpoint_meta(t, 0), meta;
  if (ckpt_load(t->args.resume, &expect, &meta, params, state, err, sizeof err) != 0)
    die(1, "%s", err);
  if (meta.seed != t->args.seed)
    die(1, "%s was trained with --seed %llu; pass the same seed to resume", t->args.resume,
        (unsigned long long)meta.seed);
  dev_upload(&t->ctx, t->model.params, params, bytes);
  dev_upload(&t->ctx, t->opt.buf, state, bytes);
  dev_sync(&t->ctx);
  t->opt.steps = meta.optim_steps;
  t->epoch0 = (int)meta.epoch;
  t->step = (long long)meta.step;
  log0("resumed from %s at epoch %d, step %lld\n", t->args.resume, t->epoch0, t->step);
  free(state);
  free(params);
  dist_barrier(&t->pg);  // [ckpt] every rank has loaded before any trains
}

// ---------------------------------------------------------------------------------------------------
// Main

static void train(Trainer *t) {
  metrics_open(&t->metrics, t->args.metrics, t->rank, t->world_size);
  trace_open(&t->trace, t->args.trace, t->rank, t->world_size);
  progress_start(&t->progress, t->step + (t->args.epochs - t->epoch0) * steps_per_epoch(t), t->step);
  for (int epoch = t->epoch0; epoch < t->args.epochs && !out_of_steps(t); epoch++) {
    bool complete = run_epoch(t, epoch);  // checkpoints mark epoch boundaries: save complete epochs
    if (complete && t->args.save_interval > 0 && (epoch + 1) % t->args.save_interval == 0)
      save_checkpoint(t, epoch + 1);
  }
}

static void finish(Trainer *t) {
  uint64_t digest = mlp_param_digest(&t->model, &t->ctx);
  metrics_final(&t->metrics, t->world_size, t->step, digest);
  metrics_close(&t->metrics);
  trace_close(&t->trace);
  log0("done: %lld steps, param_digest %016llx\n", t->step, (unsigned long long)digest);
  dev_free(&t->ctx, t->correct);
  readback_free(&t->losses, &t->ctx);
  dev_free(&t->ctx, t->loss);
  free(t->order);
  sampler_free(&t->sampler);
  loader_free(&t->test, &t->ctx);
  loader_free(&t->train, &t->ctx);
  sgd_free(&t->opt, &t->ctx);
  reducer_free(&t->reducer);
  mlp_free(&t->model, &t->ctx);
}

int main(int argc, char **argv) {
  Trainer t = {0};
  configure(&t, argc, argv);
  setup(&t);
  load_data(&t);
  build_model(&t);
  resume(&t);
  train(&t);
  finish(&t);
  cleanup(&t);
  return 0;
}
