/*
 * reducer.h — DDP's gradient reducer, introduced in step 06: bucketed all-reduce overlapped with
 * backward, as PyTorch's DistributedDataParallel does it.
 *
 * Buckets are contiguous slices of the model's flat gradient buffer. Parameter tensors are assigned
 * in reverse order (last layer's bias, its weight, the previous layer's bias, …: the order backward
 * produces them). A bucket is closed when it reaches its cap; a tensor that would overflow a bucket
 * starts the next one, so a tensor larger than the cap sits alone. The first bucket's cap is
 * min(1 MiB, cap), so that communication starts early, as PyTorch does.
 *
 * During backward the MLP calls reducer_grad_ready() for each layer whose gradients are queued; a
 * bucket all of whose tensors are ready is all-reduced at once (asynchronously), and buckets are
 * always started in bucket order so every rank issues the same collectives in the same order.
 * reducer_finish() waits for all of them before the optimizer step. The gradients are the buckets:
 * nothing is copied in or out. The all-reduce is a sum: the trainer divides the loss gradient by the
 * world size W before backward, so the gradients arrive divided by W and their sum is the average,
 * with no pass over the gradients for the division. (PyTorch's DDP also divides before it sums, as
 * it copies each gradient into its bucket: a pass that buckets which are the gradients do not need.)
 */
#ifndef REDUCER_H
#define REDUCER_H

#include <stdbool.h>
#include <stddef.h>

#include "device.h"  // device.h: Ctx, DevEvent
#include "dist.h"    // dist.h: ProcessGroup, DistWork, dist_all_reduce_async, dist_wait
#include "mlp.h"     // mlp.h: Mlp, MLP_MAX_LAYERS
#include "trace.h"   // trace.h: Trace

#define REDUCER_FIRST_BUCKET_BYTES ((size_t)1 << 20)  // PyTorch's _DEFAULT_FIRST_BUCKET_BYTES
#define REDUCER_MAX_TENSORS (2 * MLP_MAX_LAYERS)      // tensor 2l: layer l's weight, 2l+1: its bias
#ifndef REDUCER_TRACE_STEPS  // --trace covers the run's first 20 steps (-DREDUCER_TRACE_STEPS=N: N)
#define REDUCER_TRACE_STEPS 20
#endif

typedef struct Bucket {
  size_t offset;   // first float of the bucket in the flat gradient buffer
  size_t count;    // floats in the bucket
  int n_tensors;   // parameter tensors in it
  int pending;     // of those, how many still wait for their gradient in this step
  DistWork work;   // its all-reduce
} Bucket;

typedef struct Reducer {
  ProcessGroup *pg;   // who to reduce with
  const Ctx *ctx;     // the device the gradients live on
  Mlp *model;         // whose gradients
  int n_buckets;      // buckets in use
  Bucket buckets[REDUCER_MAX_TENSORS];
  int bucket_of[REDUCER_MAX_TENSORS];  // tensor -> bucket
  int next;           // first bucket not yet started in this step
  Trace *trace;       // timeline output (may be disabled)
  bool tracing;       // this step is being traced
  int traced;         // steps traced so far
  long long step;     // optimizer step being reduced (for the trace)
  DevEvent origin;    // time zero of the trace
  DevEvent backward_start;                // recorded by reducer_prepare()
  DevEvent layer_done[MLP_MAX_LAYERS];    // recorded when each layer's gradients were queued
} Reducer;

// Assigns the model's parameter tensors to buckets (see above). Writes the buckets (offset, count,
// n_tensors) and the tensor -> bucket map; returns the number of buckets.
int reducer_assign(const Mlp *m, size_t cap_bytes, size_t first_cap_bytes, Bucket *buckets,
                   int *bucket_of);

// Sets up the buckets for a cap of cap_mb MiB, their all-reduce handles and the trace events.
void reducer_init(Reducer *r, ProcessGroup *pg, const Ctx *c, Mlp *m, double cap_mb, Trace *trace);

// Call before a backward pass whose gradients are to be reduced (not before no_sync ones).
void reducer_prepare(Reducer *r, long long step);

// The MLP's "gradients ready" hook: pass it to mlp_backward() with the reducer as `user`.
void reducer_grad_ready(int layer, void *user);

// Waits for every bucket's all-reduce; afterwards the gradients are the mean over the ranks.
void reducer_finish(Reducer *r);

void reducer_free(Reducer *r);

#endif
