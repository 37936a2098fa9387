/*
 * reducer.h — step 06's gradient reducer, turned by step 07 (ZeRO stage 1) into a bucketed
 * reduce-scatter overlapped with backward: each rank receives the averaged gradient of its own shard
 * of the flat buffer only. The names follow PyTorch's reducer
 * (torch/csrc/distributed/c10d/reducer.cpp), so the two can be read side by side:
 *
 *   PyTorch                                  here
 *   Reducer::prepare_for_backward            reducer_prepare_for_backward
 *   Reducer::autograd_hook                   reducer_autograd_hook (the MLP's "gradients ready" hook)
 *   Reducer::mark_variable_ready             mark_variable_ready   (reducer.c)
 *   Reducer::mark_bucket_ready               mark_bucket_ready     (reducer.c)
 *   Reducer::finalize_backward               reducer_finalize_backward
 *
 * Buckets are contiguous slices of the model's flat gradient buffer. Parameter tensors are assigned
 * in reverse order (last layer's bias, its weight, the previous layer's bias, …: the order backward
 * produces them). A bucket is closed when it reaches its cap; a tensor that would overflow a bucket
 * starts the next one, so a tensor larger than the cap sits alone. The first bucket's cap is
 * min(1 MiB, cap), so that communication starts early, as PyTorch does.
 *
 * [zero] Sharding (ZeRO stage 1; DeepSpeed's partitioned gradient reduction): the model's flat
 * buffers are padded to W·S floats, S = ⌈n/W⌉, and rank r owns the shard [r·S, (r+1)·S). The padding
 * joins the bucket at the end of the buffer, so the buckets tile all W·S floats. A bucket [a, b)
 * overlaps some ranks' shards: its reduce-scatter gives each rank the sum of its overlap (counts[j]
 * floats for rank j, zero for the ranks it misses), in place: where that overlap already lies in the
 * rank's own gradient buffer. With one bucket every count is S: a plain reduce-scatter, as llm.c does.
 *
 * During backward the MLP calls the hook for each layer whose gradients are queued; a bucket all of
 * whose tensors are ready is reduce-scattered at once (asynchronously), and buckets are always started
 * in bucket order so every rank issues the same collectives in the same order. Finalizing waits for
 * all of them before the optimizer step. The gradients are the buckets: nothing is copied in. The
 * reduction is a sum: the trainer runs backward on the loss times 1/W (mlp_backward's scale), so the
 * gradients arrive divided by W and their sum is the average.
 */
#ifndef REDUCER_H
#define REDUCER_H

#include <stdbool.h>
#include <stddef.h>

#include "dist.h"  // dist.h: ProcessGroup, DistWork, dist_reduce_scatter_async, dist_wait
#include "mlp.h"   // mlp.h: Mlp, MLP_MAX_LAYERS

#define REDUCER_FIRST_BUCKET_BYTES ((size_t)1 << 20)  // PyTorch's _DEFAULT_FIRST_BUCKET_BYTES
#define REDUCER_MAX_TENSORS (2 * MLP_MAX_LAYERS)      // tensor 2l: layer l's weight, 2l+1: its bias

typedef struct Bucket {
  size_t offset;        // first float of the bucket in the flat gradient buffer
  size_t count;         // floats in the bucket
  int n_tensors;        // parameter tensors in it
  int pending;          // of those, how many still wait for their gradient in this step
  size_t *counts;       // [zero] (W): floats of the bucket in each rank's shard (often 0)
  size_t shard_offset;  // [zero] where this rank's part of the bucket sits in its shard
} Bucket;

typedef struct Reducer {
  ProcessGroup *pg;  // who to reduce with
  Mlp *model;        // whose gradients
  int n_buckets;     // buckets in use
  Bucket buckets[REDUCER_MAX_TENSORS];
  DistWork work[REDUCER_MAX_TENSORS];  // work[i]: bucket i's reduce-scatter (one array, for trace_backward)
  int bucket_of[REDUCER_MAX_TENSORS];  // tensor -> bucket (PyTorch: variable_locators_)
  int next_bucket;                     // first bucket not yet started in this step
  size_t shard;                        // [zero] S: floats in each rank's shard of the flat buffers
} Reducer;

// Assigns the model's parameter tensors to buckets (see above). Writes the buckets (offset, count,
// n_tensors) and the tensor -> bucket map; returns the number of buckets.
int reducer_assign(const Mlp *m, size_t cap_bytes, size_t first_cap_bytes, Bucket *buckets, int *bucket_of);

// Sets up the buckets for a cap of cap_mb MiB and their reduce-scatter handles. [zero] The model's
// flat buffers must hold W·shard floats (mlp_init_sharded()).
void reducer_init(Reducer *r, ProcessGroup *pg, Mlp *m, double cap_mb, size_t shard);

// Call before a backward pass whose gradients are to be reduced (not before no_sync ones).
void reducer_prepare_for_backward(Reducer *r);

// The MLP's "gradients ready" hook: pass it to mlp_backward() with the reducer as `user`.
void reducer_autograd_hook(int layer, void *user);

// Waits for every bucket's reduce-scatter; afterwards this rank's shard of the model's gradients is
// their mean over the ranks (the rest of the gradient buffer is scratch until the next backward).
void reducer_finalize_backward(Reducer *r);

void reducer_free(Reducer *r);

#endif
