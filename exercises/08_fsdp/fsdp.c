// Exercise 08: generated from steps/08_fsdp/fsdp.c by dev/make_exercises.py. Fill in every
// TODO(08), then check: scripts/check_exercise.sh 08 <this file> (see README.md here).
// fsdp.c — step 08's fully sharded model: per-layer gathers, reduce-scatters and their state machine;
// see fsdp.h.
#include "fsdp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"      // check.h: die, mallocCheck
#include "devmem.h"     // devmem.h: dev_alloc, dev_copy, dev_zero, dev_upload, events
#include "mlp_shard.h"  // mlp_shard.h: MlpHooks, mlp_register_hooks, mlp_init_layer_params, mlp_digest_update
#include "ops.h"        // ops.h: ops_axpy
#include "rng.h"        // rng.h: Rng, rng_init, RNG_STREAM_INIT

static int W(const Fsdp *f) { return f->pg->world_size; }
static int L(const Fsdp *f) { return f->model->n_layers; }

// This rank's part of layer l's full buffer: [rank·s_l, (rank+1)·s_l), of which `*real` floats are
// parameters (the rest is padding, or all of it on a rank past the layer's end).
static size_t my_start(const Fsdp *f, int l, size_t *real) {
  size_t start = (size_t)f->pg->rank * f->shard[l];
  size_t end = start + f->shard[l] < f->count[l] ? start + f->shard[l] : f->count[l];
  *real = end > start ? end - start : 0;
  return start;
}

// ---- the per-layer state machine ------------------------------------------------------------------

// Starts the all-gather of layer l's shards into full[l % 2]: SHARDED -> GATHERING. The other layers
// of that buffer must be sharded (prefetch depth 1: at most two layers gathered at a time).
static void unshard(Fsdp *f, int l) {
  if (f->state[l] != FSDP_SHARDED) die(1, "fsdp: layer %d is gathered twice", l);
  for (int k = l % 2; k < L(f); k += 2)
    if (k != l && f->state[k] != FSDP_SHARDED)
      die(1, "fsdp: layer %d's gathered buffer still holds layer %d", l, k);
  int pass = f->in_backward;
  f->state[l] = FSDP_GATHERING;
  f->gather_pass[l] = pass;
  if (++f->unsharded > f->peak_unsharded) f->peak_unsharded = f->unsharded;
  if (f->unsharded > 2) die(1, "fsdp: %d layers gathered at once (prefetch depth 1 allows 2)", f->unsharded);
  // TODO(08): start the all-gather of layer l (dist_all_gather_async, into its handle
  // &f->gather[pass][l]): this rank sends its shard of the layer, f->shard[l] floats at f->params +
  // f->offset[l], and every rank receives all W shards, in rank order, into the layer's gathered
  // buffer f->full[l % 2] (W·s_l floats: the layer's n_l, then the padding). Until then nothing is
  // gathered: every layer runs on the zeros the buffer was allocated with, and nothing learns.
}

// GATHERING -> UNSHARDED (gathering it first if nobody prefetched it); points the model at the copy.
static void wait_for_unshard(Fsdp *f, int l) {
  if (f->state[l] == FSDP_SHARDED) unshard(f, l);
  // TODO(08): a GATHERING layer's all-gather must be finished before the layer reads its buffer:
  // wait for it (dist_wait on the handle unshard() started it into: f->gather[f->gather_pass[l]][l]).
  f->state[l] = FSDP_UNSHARDED;
  f->model->layer[l] = f->full[l % 2];
}

// UNSHARDED -> SHARDED: the gathered copy is not used any more (its buffer goes to layer l ± 2).
static void reshard(Fsdp *f, int l) {
  if (f->state[l] != FSDP_UNSHARDED) die(1, "fsdp: layer %d resharded while not gathered", l);
  f->state[l] = FSDP_SHARDED;
  f->unsharded--;
  f->model->layer[l] = NULL;
}

void fsdp_reshard_all(Fsdp *f) {
  for (int l = 0; l < L(f); l++)
    if (f->state[l] == FSDP_UNSHARDED) reshard(f, l);
}

// Layer l's reduce-scatter has finished: its shard of the sum goes into grads (added after the
// step's first micro-batch).
static void fold_gradient(Fsdp *f, int l) {
  dist_wait(f->pg, &f->reduce[l]);
  const float *mine = f->full_grad[l % 2] + (size_t)f->pg->rank * f->shard[l];
  if (f->accumulate) {
    ops_axpy(f->ctx, f->grads + f->offset[l], mine, f->shard[l], 1.0f);
  } else {
    dev_copy(f->ctx, f->grads + f->offset[l], mine, f->shard[l] * sizeof(float));
  }
}

// ---- the MLP's module hooks ------------------------------------------------------------------------

static void pre_forward(int l, void *user) {
  Fsdp *f = user;
  if (l == 0) {
    f->in_backward = false;
    fsdp_reshard_all(f);  // the last layer of a forward that had no backward (evaluation)
  }
  wait_for_unshard(f, l);
  // TODO(08): prefetch: start the next layer's all-gather (unshard), if there is a next layer, so
  // that it runs while this layer computes. Until then each layer is gathered only when it is
  // about to run (wait_for_unshard above does that), and the gathers never overlap compute.
  dev_event_record(f->ctx, &f->fwd_start[l], NULL);
}

static void post_forward(int l, void *user) {
  Fsdp *f = user;
  dev_event_record(f->ctx, &f->fwd_end[l], NULL);
  // TODO(08): the layer's gathered copy is not needed any more: reshard it, except the last
  // layer's, which backward needs first (PyTorch keeps the root module's for the same reason).
  // Until then every layer is resharded, and backward gathers the last one again.
  reshard(f, l);
}

static void pre_backward(int l, void *user) {
  Fsdp *f = user;
  f->in_backward = true;
  wait_for_unshard(f, l);        // gathered again (the last layer was kept from forward)
  // TODO(08): prefetch in backward: start the all-gather of the layer whose backward comes next,
  // if there is one. Until then each layer is gathered again only when its backward starts.
  if (l + 2 < L(f) && f->reduce[l + 2].active)
    fold_gradient(f, l + 2);  // full_grad[l % 2] held layer l+2's gradient: take our shard of it first
  float *g = f->full_grad[l % 2];
  size_t padded = (size_t)W(f) * f->shard[l];
  dev_zero(f->ctx, g + f->count[l], (padded - f->count[l]) * sizeof(float));  // the padding sums to zero
  f->model->layer_grad[l] = g;
}

void fsdp_autograd_hook(int l, void *user) {
  Fsdp *f = user;
  float *g = f->full_grad[l % 2];
  // TODO(08): layer l's full gradient g (W·s_l floats, the padding zeroed) is ready: start its
  // reduce-scatter (dist_reduce_scatter_async, equal counts f->counts[l], into its handle
  // &f->reduce[l]), in place: this rank receives the sum over the ranks of its own s_l floats
  // where they already lie, at its rank times f->shard[l] floats into g (fold_gradient takes its
  // shard from there). A sum: backward ran on the loss times 1/W. Until then no gradient reaches
  // the shards: f->grads stays zero.
  (void)g;
  for (int k = 0; k < L(f); k++) {  // let MPI progress
    if (f->reduce[k].active) dist_test(f->pg, &f->reduce[k]);
    if (f->state[k] == FSDP_GATHERING) dist_test(f->pg, &f->gather[f->gather_pass[k]][k]);
  }
}

static void post_backward(int l, void *user) { reshard(user, l); }

void fsdp_zero_grad(Fsdp *f) { f->accumulate = false; }

void fsdp_finalize_backward(Fsdp *f) {
  for (int l = L(f) - 1; l >= 0; l--)
    if (f->reduce[l].active) fold_gradient(f, l);
  for (int l = 0; l < L(f); l++)
    if (f->state[l] != FSDP_SHARDED)
      die(1, "fsdp: layer %d is still %s after backward", l,
          f->state[l] == FSDP_GATHERING ? "being gathered (a prefetch never waited for)" : "gathered");
  f->accumulate = true;
  f->in_backward = false;
}

// ---- lifecycle -------------------------------------------------------------------------------------

void fsdp_init(Fsdp *f, ProcessGroup *pg, const Ctx *c, Mlp *m, uint64_t seed) {
  memset(f, 0, sizeof *f);
  f->pg = pg;
  f->ctx = c;
  f->model = m;
  size_t largest = 0;
  for (int l = 0; l < m->n_layers; l++) {
    f->count[l] = mlp_layer_size(m, l);
    f->shard[l] = (f->count[l] + (size_t)pg->world_size - 1) / (size_t)pg->world_size;  // ⌈n_l/W⌉
    f->offset[l] = f->n_shard;
    f->n_shard += f->shard[l];
    size_t padded = (size_t)pg->world_size * f->shard[l];
    if (padded > f->max_full[l % 2]) f->max_full[l % 2] = padded;
    if (f->count[l] > largest) largest = f->count[l];
    f->counts[l] = mallocCheck((size_t)pg->world_size * sizeof *f->counts[l]);
    for (int j = 0; j < pg->world_size; j++) f->counts[l][j] = f->shard[l];
  }
  f->params = dev_alloc(c, f->n_shard * sizeof(float));
  f->grads = dev_alloc(c, f->n_shard * sizeof(float));
  dev_zero(c, f->params, f->n_shard * sizeof(float));  // the padding stays zero
  dev_zero(c, f->grads, f->n_shard * sizeof(float));
  // mlp_init()'s parameters, drawn one layer at a time; each rank keeps its part of each layer
  float *host = mallocCheck(largest * sizeof(float));
  Rng r;
  rng_init(&r, seed, RNG_STREAM_INIT);
  for (int l = 0; l < m->n_layers; l++) {
    mlp_init_layer_params(m, &r, l, host);
    size_t real, start = my_start(f, l, &real);
    dev_upload(c, f->params + f->offset[l], host + start, real * sizeof(float));
    dev_sync(c);  // the upload reads `host` asynchronously on CUDA
  }
  free(host);  // before the gathered buffers: a lower peak
  for (int i = 0; i < 2; i++) {
    f->full[i] = dev_alloc(c, f->max_full[i] * sizeof(float));
    f->full_grad[i] = dev_alloc(c, f->max_full[i] * sizeof(float));
    dev_zero(c, f->full[i], f->max_full[i] * sizeof(float));
    dev_zero(c, f->full_grad[i], f->max_full[i] * sizeof(float));
  }
  for (int l = 0; l < m->n_layers; l++) {
    for (int p = 0; p < 2; p++) dist_work_init(pg, &f->gather[p][l]);
    dist_work_init(pg, &f->reduce[l]);
    dev_event_init(c, &f->fwd_start[l]);
    dev_event_init(c, &f->fwd_end[l]);
  }
  MlpHooks hooks = {pre_forward, post_forward, pre_backward, post_backward, f};
  mlp_register_hooks(m, &hooks);
}

void fsdp_free(Fsdp *f) {
  for (int l = L(f) - 1; l >= 0; l--) {
    dev_event_free(f->ctx, &f->fwd_end[l]);
    dev_event_free(f->ctx, &f->fwd_start[l]);
    dist_work_free(f->pg, &f->reduce[l]);
    for (int p = 1; p >= 0; p--) dist_work_free(f->pg, &f->gather[p][l]);
    free(f->counts[l]);
  }
  for (int i = 1; i >= 0; i--) {
    dev_free(f->ctx, f->full_grad[i]);
    dev_free(f->ctx, f->full[i]);
  }
  dev_free(f->ctx, f->grads);
  dev_free(f->ctx, f->params);
  mlp_register_hooks(f->model, NULL);
}

// ---- evaluation -------------------------------------------------------------------------------------

void fsdp_count_correct(Fsdp *f, Loader *ld, int batch, int *correct) {
  int most = (ld->n + W(f) - 1) / W(f);  // the samples of the rank with the most
  for (int start = 0; start < most; start += batch) {
    int B = ld->n_order - start < batch ? ld->n_order - start : batch;
    if (B <= 0) {
      mlp_forward(f->model, f->ctx, ld->xb, 1);  // the gathers only
      continue;
    }
    loader_batch(ld, f->ctx, start, B);
    mlp_count_correct(f->model, f->ctx, ld->xb, ld->yb, B, correct);
  }
}

// ---- whole-model views: checkpoints and the digest ---------------------------------------------------

// Gathers layer l of `shards` into full_grad[l % 2] (free between steps): its n_l floats, padded.
static const float *gather_layer(Fsdp *f, const float *shards, int l) {
  dist_all_gather(f->pg, shards + f->offset[l], f->full_grad[l % 2], f->shard[l], DIST_FLOAT);
  return f->full_grad[l % 2];
}

void fsdp_gather_full(Fsdp *f, const float *shards, float *full, int root) {
  for (int l = 0; l < L(f); l++) {
    const float *layer = gather_layer(f, shards, l);
    if (root < 0 || f->pg->rank == root)
      dev_copy(f->ctx, full + f->model->w_off[l], layer, f->count[l] * sizeof(float));
  }
}

void fsdp_slice_full(Fsdp *f, const float *full, float *shards) {
  dev_zero(f->ctx, shards, f->n_shard * sizeof(float));
  for (int l = 0; l < L(f); l++) {
    size_t real, start = my_start(f, l, &real);
    dev_copy(f->ctx, shards + f->offset[l], full + f->model->w_off[l] + start, real * sizeof(float));
  }
}

uint64_t fsdp_param_digest(Fsdp *f) {
  uint64_t h = MLP_DIGEST_INIT;
  for (int l = 0; l < L(f); l++)
    h = mlp_digest_update(h, f->ctx, gather_layer(f, f->params, l), f->count[l], f->model->w_off[l],
                          f->model->n_params);
  return h;
}

// ---- --trace ----------------------------------------------------------------------------------------

static void work_span(Fsdp *f, Trace *t, const DistWork *w, const char *name, long long step) {
  trace_span(t, 2, name, dev_event_elapsed(f->ctx, &t->origin, &w->start),
             dev_event_elapsed(f->ctx, &t->origin, &w->end), step);
}

void fsdp_trace(Fsdp *f, Trace *t, long long step) {
  if (!trace_on(t) || t->steps >= TRACE_STEPS) return;
  trace_backward(t, f->ctx, f->model, NULL, 0, step);  // the backward layers (track 1); counts the step
  if (t->steps == 1) trace_track(t, 3, "compute: forward");
  char name[96];
  for (int l = 0; l < L(f); l++) {
    snprintf(name, sizeof name, "forward layer %d", l);
    trace_span(t, 3, name, dev_event_elapsed(f->ctx, &t->origin, &f->fwd_start[l]),
               dev_event_elapsed(f->ctx, &t->origin, &f->fwd_end[l]), step);
    snprintf(name, sizeof name, "all-gather layer %d (forward): %zu floats", l, f->gather[0][l].n);
    work_span(f, t, &f->gather[0][l], name, step);
    if (l < L(f) - 1) {  // the last layer is not gathered again in backward
      snprintf(name, sizeof name, "all-gather layer %d (backward): %zu floats", l, f->gather[1][l].n);
      work_span(f, t, &f->gather[1][l], name, step);
    }
    snprintf(name, sizeof name, "reduce-scatter layer %d: %zu floats", l, f->reduce[l].n);
    work_span(f, t, &f->reduce[l], name, step);
  }
}
