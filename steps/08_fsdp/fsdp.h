/*
 * fsdp.h — step 08's fully sharded data parallelism (ZeRO stage 3; PyTorch's FSDP, DeepSpeed stage 3):
 * every rank keeps 1/W of each layer's parameters, of its gradients and of its momentum, and a
 * layer's full parameters exist only while the layer runs. The names follow PyTorch's FSDP2
 * (torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py), so the two can be read side by side:
 *
 *   PyTorch FSDPParamGroup            here (fsdp.c)
 *   unshard                           unshard            all-gather a layer's parameters, started
 *   wait_for_unshard                  wait_for_unshard   ... and waited for
 *   reshard                           reshard            the gathered copy is not used any more
 *   pre_forward / post_forward        pre_forward / post_forward   (the MLP's module hooks)
 *   pre_backward / post_backward      pre_backward / post_backward
 *   foreach_reduce (reduce-scatter)   fsdp_autograd_hook (the MLP's "gradients ready" hook)
 *   finalize_backward                 fsdp_finalize_backward
 *
 * Layout (FSDP1's flat parameter, one per layer): layer l's weight and bias, n_l floats, are padded to
 * W·s_l floats, s_l = ⌈n_l/W⌉ (step 07's padding rule, per layer), and rank r owns [r·s_l, (r+1)·s_l).
 * Each rank stores its shards of all the layers one after another: `params`, `grads` and the
 * optimizer's momentum are `n_shard` = Σ s_l floats each, about 3n/W in all. Gathering a layer is one
 * all-gather of equal counts whose output is the layer's full (padded) buffer; its gradient is one
 * reduce-scatter of equal counts, in place: rank r's sum lands at r·s_l of the full gradient.
 *
 * Each layer is SHARDED, GATHERING (its all-gather in flight) or UNSHARDED. Two buffers hold the
 * gathered layers (layer l uses buffer l % 2), two more their full gradients: prefetch depth 1, so at
 * most two layers are unsharded at once (checked). Forward at layer l: wait for its gather, start
 * layer l+1's, compute, reshard l, except the last layer, which backward needs first (PyTorch's
 * reshard_after_forward is False for the root module for the same reason). Backward at layer l: wait,
 * start layer l-1's gather, compute the gradients, start their reduce-scatter, compute the input's
 * gradient, reshard l. A full gradient buffer is reused two layers later, after its reduce-scatter has
 * finished and its shard has been added into `grads`. At the end of backward every reduce-scatter is
 * waited for and no gather may be pending (pytorch/pytorch#137348: a gather never waited for would
 * make the next one a no-op and lose the optimizer's update).
 *
 * The reduce-scatter is a sum: the trainer runs backward on the loss times 1/W, so the sum is the
 * mean (step 06's rule). With gradient accumulation every micro-batch reduce-scatters and adds into
 * the shards: the gradients stay sharded between micro-batches (no full gradient kept).
 */
#ifndef FSDP_H
#define FSDP_H

#include <stdbool.h>
#include <stddef.h>

#include "dist.h"    // dist.h: ProcessGroup, DistWork
#include "loader.h"  // loader.h: Loader
#include "mlp.h"     // mlp.h: Mlp, MLP_MAX_LAYERS
#include "trace.h"   // trace.h: Trace

typedef enum FsdpState { FSDP_SHARDED, FSDP_GATHERING, FSDP_UNSHARDED } FsdpState;

typedef struct Fsdp {
  ProcessGroup *pg;                    // who shares the model
  const Ctx *ctx;                      // where the buffers live
  Mlp *model;                          // the model's shape (mlp_init_layout()): its hooks are ours
  size_t count[MLP_MAX_LAYERS];        // n_l = mlp_layer_size(l)
  size_t shard[MLP_MAX_LAYERS];        // s_l = ⌈n_l/W⌉: floats of layer l in each rank's shard
  size_t offset[MLP_MAX_LAYERS];       // where layer l's shard starts in params, grads, momentum
  size_t n_shard;                      // Σ s_l: floats of each of this rank's flat shard buffers
  size_t max_full[2];                  // floats of gathered buffer i: max W·s_l over the layers l % 2 == i
  float *params;                       // device, (n_shard): this rank's shard of every layer's parameters
  float *grads;                        // device, (n_shard): ... of every layer's mean gradient
  float *full[2];                      // device, (max_full[i]): gathered parameters; layer l uses full[l % 2]
  float *full_grad[2];                 // device, (max_full[i]): full gradients; layer l uses full_grad[l % 2]
  FsdpState state[MLP_MAX_LAYERS];     // where each layer stands
  DistWork gather[2][MLP_MAX_LAYERS];  // gather[0][l]: layer l's all-gather in forward, [1]: in backward
  int gather_pass[MLP_MAX_LAYERS];     // which of the two a GATHERING layer waits for
  bool in_backward;                    // the hooks run in backward (its gathers are gather[1])
  DistWork reduce[MLP_MAX_LAYERS];     // layer l's reduce-scatter
  size_t *counts[MLP_MAX_LAYERS];      // host, (W): its counts, s_l each (allocated once)
  bool accumulate;                     // the shards already hold this step's earlier micro-batches
  int unsharded, peak_unsharded;       // layers not SHARDED now, and the most seen at once
  DevEvent fwd_start[MLP_MAX_LAYERS];  // layer l's forward began (after its gather was waited for)
  DevEvent fwd_end[MLP_MAX_LAYERS];    // layer l's forward was queued
} Fsdp;

// Shards the model: this rank's shards of the parameters mlp_init() would draw from `seed` (one
// layer at a time: no rank ever holds them all), the gradient shards, the gathered buffers, and the
// module hooks on `m` (built with mlp_init_layout()).
void fsdp_init(Fsdp *f, ProcessGroup *pg, const Ctx *c, Mlp *m, uint64_t seed);

// Forgets the gradient shards (the next micro-batch writes them instead of adding).
void fsdp_zero_grad(Fsdp *f);

// The MLP's "gradients ready" hook: pass it to mlp_backward() with the Fsdp as `user`.
void fsdp_autograd_hook(int layer, void *user);

// After mlp_backward(): waits for the reduce-scatters and adds them into `grads`; every layer is
// sharded again and no gather is pending (ends the job otherwise).
void fsdp_finalize_backward(Fsdp *f);

// Reshards the layers a forward without backward left unsharded (evaluation keeps the last one).
void fsdp_reshard_all(Fsdp *f);

// Gathers every layer of `shards` (n_shard floats laid out as params) into `full` (device, n_params
// floats, the flat layout of step 06), or only on rank `root` when root >= 0 (the others pass NULL).
void fsdp_gather_full(Fsdp *f, const float *shards, float *full, int root);

// Cuts this rank's shards out of a full flat buffer (device, n_params floats): the inverse.
void fsdp_slice_full(Fsdp *f, const float *full, float *shards);

// Evaluation (mlp_count_correct_loader() for a sharded model): adds the correct answers of the
// loader's order, in batches of at most `batch`, to `correct` (device, (1)). Every forward all-gathers
// its layers, so every rank runs as many batches as the rank with the most samples (the ranks' shards
// of the test set differ by one: 1001 samples at 2 ranks are two batches and one); a rank that has
// run out forwards one sample, not counted, only to join the others' gathers.
void fsdp_count_correct(Fsdp *f, Loader *ld, int batch, int *correct);

// The param_digest of the full parameters (the same as mlp_param_digest() of an unsharded model), each
// layer gathered in turn.
uint64_t fsdp_param_digest(Fsdp *f);

// --trace: this step's forward layers and gathers, backward layers, gathers and reduce-scatters.
void fsdp_trace(Fsdp *f, Trace *t, long long step);

void fsdp_free(Fsdp *f);

#endif
