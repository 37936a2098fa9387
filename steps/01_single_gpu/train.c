/*
 * Step 01 — single GPU: the baseline trainer that the later steps turn into DDP.
 *
 * One process trains an MLP classifier (784-1024-1024-10 by default) on Fashion-MNIST with SGD and
 * momentum: shuffle each epoch, forward, loss, backward, optimizer step; evaluate on the test set after
 * every epoch; save a checkpoint every --save_interval epochs. The sections below are those of the
 * PyTorch DDP tutorial; the process-group section already exists and says "rank 0 of 1".
 *
 * Run:  build/bin/01_single_gpu                         (Fashion-MNIST, GPU if present, else CPU)
 *       build/bin/01_single_gpu --device cpu --data synthetic --epochs 1
 */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>

#include "args.h"        // args.h: Args, args_parse, ARGS_*
#include "check.h"       // check.h: die, check_set_rank
#include "ckpt_model.h"  // ckpt_model.h: CkptMeta, ckpt_model_meta, ckpt_save_model, ckpt_load_model
#include "clip.h"        // clip.h: Clip, clip_init, clip_sum_squares, clip_scale, clip_free
#include "data.h"        // data.h: Dataset, DataId, data_parse, dataset_load, dataset_id
#include "device.h"      // device.h: Ctx, device_parse, device_init, device_set_tf32, device_free
#include "devmem.h"      // devmem.h: dev_alloc, dev_upload, dev_download, dev_zero, dev_sync, dev_free
#include "loader.h"      // loader.h: Loader, loader_init, loader_set_order, loader_batch
#include "log.h"         // log.h: log0, log_clock
#include "loss_log.h"    // loss_log.h: LossLog, loss_log_init, loss_log_push, loss_log_epoch
#include "metrics.h"     // metrics.h: Metrics, metrics_open, metrics_step, metrics_epoch
#include "mlp.h"         // mlp.h: Mlp, mlp_init, mlp_forward, mlp_loss, mlp_backward
#include "optim.h"       // optim.h: Sgd, sgd_init, sgd_step
#include "rng.h"         // rng.h: rng_permutation

// ---------------------------------------------------------------------------------------------------
// Configuration

#define EVAL_BATCH 500  // test-set batch size: evaluation needs no gradients, so bigger is cheaper

typedef struct Trainer {
  Args args;             // command-line flags
  int rank;              // this process's rank in the process group
  int world_size;        // number of processes
  int local_rank;        // rank within this node: selects the GPU
  Ctx ctx;               // device, stream, cuBLAS handle
  Mlp model;             // parameters, gradients, activations
  Sgd opt;               // momentum buffer
  Clip clip;             // --clip_grad_norm: the norm's sums, the norm, the scale factor
  Loader train, test;    // datasets on the device, batch buffers
  DataId data_id;        // which data was loaded (sizes, dim, classes): recorded in checkpoints
  int *order;            // host, (train.n): the samples this process visits this epoch, in order
  int *correct;          // device, (1): evaluation counter
  int epoch0;            // first epoch to run (> 0 after --resume)
  long long step;        // optimizer steps done
  long long epoch_step;  // steps done in the current epoch: > 0 after a --max_steps stop or resume
  Metrics metrics;       // --metrics file
  LossLog losses;        // each step's loss, on its way to the metrics file and the progress line
} Trainer;

static void configure(Trainer *t, int argc, char **argv) {
  args_parse(&t->args, argc, argv, ARGS_TRAIN, "Step 01: single-device baseline trainer");
}

// ---------------------------------------------------------------------------------------------------
// Process group

static void setup(Trainer *t) {
  Device dev;
  if (device_parse(t->args.device, &dev) != 0) die(2, "unknown --device '%s'", t->args.device);
  t->rank = 0;  // a single process: rank 0 of 1, on the first GPU
  t->world_size = 1;
  t->local_rank = 0;
  device_init(&t->ctx, dev, t->local_rank);
  device_set_tf32(&t->ctx, t->args.tf32);  // --tf32: faster GPU GEMMs, inputs rounded to TF32
  log0("rank %d of %d (local rank %d) on %s\n", t->rank, t->world_size, t->local_rank, device_name(dev));
}

static void cleanup(Trainer *t) { device_free(&t->ctx); }

// ---------------------------------------------------------------------------------------------------
// Data

static void load_data(Trainer *t) {
  DataKind kind;
  if (data_parse(t->args.data, &kind) != 0) die(2, "unknown --data '%s'", t->args.data);
  Dataset train, test;
  dataset_load(kind, t->args.data_dir, t->args.dataset_size, t->args.seed, &train, &test);
  t->data_id = dataset_id(kind, &train, &test);  // before the loaders take the arrays
  loader_init(&t->train, &t->ctx, &train, t->args.batch_size, train.n);
  loader_init(&t->test, &t->ctx, &test, EVAL_BATCH, test.n);
  loader_set_stride_order(&t->test, &t->ctx, 0, 1);  // the test set is visited in order
  t->order = mallocCheck((size_t)train.n * sizeof *t->order);
  t->correct = dev_alloc(&t->ctx, sizeof(int));
  log0("data: %s, %d train / %d test samples\n", t->args.data, train.n, test.n);
  dataset_free(&train);
  dataset_free(&test);
}

// How many samples this process visits per epoch: all of them.
static int samples_per_epoch(const Trainer *t) { return t->train.n; }

// This epoch's data order: a permutation of the whole training set, from seed + epoch.
static void epoch_order(Trainer *t, int epoch) {
  rng_permutation(t->order, t->train.n, t->args.seed + (uint64_t)epoch);
  loader_set_order(&t->train, &t->ctx, t->order, samples_per_epoch(t));
}

// ---------------------------------------------------------------------------------------------------
// Model

static void build_model(Trainer *t) {
  int sizes[MLP_MAX_LAYERS + 1];
  int n_layers = mlp_parse_hidden(t->args.hidden, t->data_id.dim, t->data_id.n_classes, sizes);
  int max_batch = t->args.batch_size > EVAL_BATCH ? t->args.batch_size : EVAL_BATCH;
  mlp_init(&t->model, &t->ctx, sizes, n_layers, max_batch, t->args.seed);
  sgd_init(&t->opt, &t->ctx, t->model.n_params, t->args.lr, t->args.momentum, 0.0f, t->args.weight_decay,
           false);
  clip_init(&t->clip, &t->ctx, t->args.clip_grad_norm);  // --clip_grad_norm (0: off)
  log0("model: %d layers, %zu parameters\n", n_layers, t->model.n_params);
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

// One optimizer step on the B samples at `start`; returns the step's loss, on the device.
static const float *run_batch(Trainer *t, int start, int B) {
  loader_batch(&t->train, &t->ctx, start, B);
  mlp_zero_grad(&t->model);
  mlp_forward(&t->model, &t->ctx, t->train.xb, B);
  mlp_loss(&t->model, &t->ctx, t->train.yb, B);
  mlp_backward(&t->model, &t->ctx, t->train.xb, B, 1.0f, NULL, NULL);
  clip_gradients(t);
  sgd_step(&t->opt, &t->ctx, t->model.params, t->model.grads);
  return t->model.loss;
}

static double evaluate(Trainer *t) {
  dev_zero(&t->ctx, t->correct, sizeof(int));
  mlp_count_correct_loader(&t->model, &t->ctx, &t->test, EVAL_BATCH, t->correct);
  int correct;
  dev_download(&t->ctx, &correct, t->correct, sizeof correct);
  return (double)correct / t->test.n;
}

// ---------------------------------------------------------------------------------------------------
// Epoch loop

static long long steps_per_epoch(const Trainer *t) {
  return (samples_per_epoch(t) + t->args.batch_size - 1) / t->args.batch_size;  // last may be short
}

static bool out_of_steps(const Trainer *t) { return t->args.max_steps > 0 && t->step >= t->args.max_steps; }

// Returns whether the whole epoch ran (--max_steps may stop it early).
static bool run_epoch(Trainer *t, int epoch) {
  epoch_order(t, epoch);
  double t0 = log_clock();
  long long batches = t->epoch_step, samples = 0;  // a resumed epoch goes on where it stopped
  for (int start = (int)(batches * t->args.batch_size); start < t->train.n_order && !out_of_steps(t);
       start += t->args.batch_size) {
    int B = t->train.n_order - start < t->args.batch_size ? t->train.n_order - start : t->args.batch_size;
    const float *loss = run_batch(t, start, B);  // on the device: logged once it reaches the host
    t->step++;
    batches++;
    samples += B;
    loss_log_push(&t->losses, &t->ctx, loss, t->step, epoch, B);
  }
  double train_loss = loss_log_epoch(&t->losses, &t->ctx);  // the last steps' losses; their mean
  double samples_per_s = (double)samples / (log_clock() - t0);
  double acc = evaluate(t);
  log0("epoch %d/%d  train loss %.4f  test accuracy %.4f  %.0f samples/s\n", epoch + 1, t->args.epochs,
       train_loss, acc, samples_per_s);
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
  return meta;
}

static void save_checkpoint(Trainer *t, const char *dir, int epochs_done) {
  CkptMeta meta = checkpoint_meta(t, epochs_done);
  ckpt_save_model(dir, &meta, &t->model, &t->opt, &t->ctx);
}

static void resume(Trainer *t) {
  if (!t->args.resume) return;
  CkptMeta expect = checkpoint_meta(t, 0), meta;
  ckpt_load_model(t->args.resume, &expect, &meta, &t->model, &t->opt, &t->ctx);
  t->epoch0 = (int)meta.epoch;
  t->step = (long long)meta.step;
  t->epoch_step = (long long)meta.epoch_step;
  ckpt_log_resume(t->args.resume, &meta, t->args.epochs);
}

// ---------------------------------------------------------------------------------------------------
// Main

static void train(Trainer *t) {
  if (t->args.save_interval > 0) ckpt_dir_require(t->args.ckpt_dir);  // not after an epoch
  log0("batch: %d samples per step\n", t->args.batch_size);
  metrics_open(&t->metrics, t->args.metrics, t->rank, t->world_size);
  long long total = t->step + (t->args.epochs - t->epoch0) * steps_per_epoch(t) - t->epoch_step;
  loss_log_init(&t->losses, &t->ctx, &t->metrics, t->args.log_interval, t->args.epochs, t->step, total,
                t->clip.norm);  // --clip_grad_norm: each step record gets the step's grad_norm
  if (t->args.save_init) save_checkpoint(t, t->args.save_init, t->epoch0);  // the state to start from
  for (int epoch = t->epoch0; epoch < t->args.epochs && !out_of_steps(t); epoch++) {
    bool complete = run_epoch(t, epoch);  // false after a --max_steps stop inside the epoch
    // where --max_steps stops, inside an epoch or at its end, a checkpoint is saved
    bool stopped = !complete || out_of_steps(t);
    if (t->args.save_interval > 0 && (stopped || (epoch + 1) % t->args.save_interval == 0))
      save_checkpoint(t, t->args.ckpt_dir, complete ? epoch + 1 : epoch);
  }
}

static void finish(Trainer *t) {
  uint64_t digest = mlp_param_digest(&t->model, &t->ctx);
  metrics_final(&t->metrics, t->world_size, t->step, digest);  // the last record; closes the file
  loss_log_free(&t->losses, &t->ctx);
  log0("done: %lld steps, param_digest %016llx\n", t->step, (unsigned long long)digest);
  dev_free(&t->ctx, t->correct);
  free(t->order);
  loader_free(&t->test, &t->ctx);
  loader_free(&t->train, &t->ctx);
  clip_free(&t->clip, &t->ctx);
  sgd_free(&t->opt, &t->ctx);
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
