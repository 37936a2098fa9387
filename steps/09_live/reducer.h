/*
 * reducer.h — DDP's gradient reducer, introduced in step 06: bucketed all-reduce overlapped with
 * backward, as PyTorch's DistributedDataParallel does it. The names follow PyTorch's reducer
 * (torch/csrc/distributed/c10d/reducer.cpp), so the two can be read side by side:
 *
 *   PyTorch                                  here
 *   Reducer::prepare_for_backward            reducer_prepare_for_backward
 *   Reducer::autograd_hook                   reducer_autograd_hook (the MLP's "gradients ready" hook)
 *   Reducer::mark_variable_ready             mark_variable_ready   (reducer.c)
 *   Reducer::mark_bucket_ready               mark_bucket_ready     (reducer.c)
 *   Reducer::finalize_backward               reducer_finalize_backward
 *
 * Buckets are contiguous slices of the model's flat gradient buffer, assigned by PyTorch's rule
 * (compute_bucket_assignment_by_size, as DDP's bucket rebuild calls it). The parameter tensors are
 * taken in the order backward produces them (last layer's bias, its weight, the previous layer's
 * bias, …); each joins the open bucket, and the bucket closes once its size reaches its limit, so a
 * bucket may overshoot its limit and a large tensor shares a bucket with the small ones before it
 * (tensors are never split). The limits are 1 MiB (_DEFAULT_FIRST_BUCKET_BYTES) for the first bucket,
 * whatever the cap, then the cap for every later one; what is left at the end is the last bucket.
 * Sizes are bytes, 4 per float. PyTorch's reason for the small bucket, given where it assigns buckets
 * in definition order: the parameters defined first get their gradients last, and in a small bucket
 * of their own they do not spill into a large one that would add latency after backward has finished
 * (1 MB was found reasonable by experiment). In the order used here, backward's, the small bucket is
 * the one filled first, so the first all-reduce starts early.
 *
 * What PyTorch does before that: in the first iteration it does not know the order the gradients
 * arrive in. With find_unused_parameters=False (the default; torch 1.13 and 2.x) it reduces the whole
 * model as one bucket, records the order the gradients arrive in, and rebuilds the buckets in that
 * order, with the limits above, for every later iteration; with find_unused_parameters=True it
 * assigns the buckets over the parameters in definition order, reverses the list, and keeps it.
 * (Newer 2.x releases use the cap as the first limit too when bucket_cap_mb is given.) The
 * course's backward produces the tensors in one known order, so it starts from the rebuilt buckets
 * of torch 1.13: the ones DDP uses for every step after the first.
 *
 * During backward the MLP calls the hook for each layer whose gradients are queued; a bucket all of
 * whose tensors are ready is all-reduced at once (asynchronously), and buckets are always started in
 * bucket order so every rank issues the same collectives in the same order. Finalizing waits for all
 * of them before the optimizer step. The gradients are the buckets: nothing is copied in or out
 * (PyTorch's gradient_as_bucket_view). The all-reduce is a sum: the trainer runs backward on the loss
 * times 1/W (mlp_backward's scale), so the gradients arrive divided by W and their sum is the average,
 * with no pass over the gradients for the division (PyTorch divides as it copies each gradient into
 * its bucket; here the gradients are the buckets, and nothing is copied).
 *
 * The options, last in reducer.c (docs/hooks_and_clipping.md): a communication hook (--comm_hook,
 * reducer_register_comm_hook, PyTorch's register_comm_hook) replaces the bucket's all-reduce; PyTorch's
 * hooks divide by W themselves, so with one the trainer's backward leaves the 1/W out. --check_finite
 * checks each bucket for NaN and infinity before its collective.
 */
#ifndef REDUCER_H
#define REDUCER_H

#include <stdbool.h>
#include <stddef.h>

#include "args.h"       // args.h: Args (--comm_hook and --check_finite)
#include "comm_hook.h"  // comm_hook.h: CommHook, comm_hook_setup, comm_hook_run, comm_hook_wait
#include "dist.h"       // dist.h: ProcessGroup, DistWork, dist_all_reduce_async, dist_wait
#include "mlp.h"        // mlp.h: Mlp, MLP_MAX_LAYERS

#define REDUCER_FIRST_BUCKET_BYTES ((size_t)1 << 20)  // PyTorch's _DEFAULT_FIRST_BUCKET_BYTES
#define REDUCER_MAX_TENSORS (2 * MLP_MAX_LAYERS)      // tensor 2l: layer l's weight, 2l+1: its bias

typedef struct Bucket {
  size_t offset;                // first float of the bucket in the flat gradient buffer
  size_t count;                 // floats in the bucket
  int n_tensors;                // parameter tensors in it
  int pending;                  // of those, how many still wait for their gradient in this step
  int first_layer, last_layer;  // the layers whose weight or bias lies in the bucket (for messages)
} Bucket;

typedef struct Reducer {
  ProcessGroup *pg;  // who to reduce with
  Mlp *model;        // whose gradients
  int n_buckets;     // buckets in use
  Bucket buckets[REDUCER_MAX_TENSORS];
  DistWork work[REDUCER_MAX_TENSORS];  // work[i]: bucket i's all-reduce (one array, for trace_backward)
  int bucket_of[REDUCER_MAX_TENSORS];  // tensor -> bucket (PyTorch: variable_locators_)
  int next_bucket;                     // first bucket not yet started in this step
  long long step;                      // the optimizer step being reduced (--check_finite's messages)
  CommHook hook;                       // --comm_hook: what each bucket sends
  bool hooked;                         // a hook was registered (else: the float32 all-reduce above)
  int *nonfinite;                      // device, (1): --check_finite's count (NULL without it)
} Reducer;

/**
 * @brief Assigns the model's parameter tensors to buckets by PyTorch's rule (see above).
 * @param[in]  m               the model (only its layer sizes and offsets are read)
 * @param[in]  cap_bytes       the limit of every bucket after the first (0: one tensor per bucket)
 * @param[in]  first_cap_bytes the first bucket's limit (REDUCER_FIRST_BUCKET_BYTES)
 * @param[out] buckets         (REDUCER_MAX_TENSORS) offset, count and n_tensors of each bucket, in
 *                             launch order (bucket 0 ends at the end of the flat buffer)
 * @param[out] bucket_of       (2·n_layers) tensor -> bucket (tensor 2l: layer l's weight, 2l+1: its bias)
 * @return the number of buckets
 */
int reducer_assign(const Mlp *m, size_t cap_bytes, size_t first_cap_bytes, Bucket *buckets, int *bucket_of);

// Sets up the buckets for a cap of cap_mb MiB and their all-reduce handles.
void reducer_init(Reducer *r, ProcessGroup *pg, Mlp *m, double cap_mb);

// Registers --comm_hook (PyTorch: register_comm_hook; comm_hook_setup()): each ready bucket goes to
// comm_hook_run() instead of the reducer's own all-reduce, and finalizing calls comm_hook_wait();
// `allreduce`, the default, registers none. --check_finite: before its collective, each bucket's
// local gradients are checked for NaN and infinity, and a bad one ends the job naming this rank,
// the step and the bucket's layers.
void reducer_register_comm_hook(Reducer *r, const Args *a);

// Call before a backward pass whose gradients are to be reduced (not before no_sync ones), with the
// optimizer step (1-based) that backward belongs to.
void reducer_prepare_for_backward(Reducer *r, long long step);

// The MLP's "gradients ready" hook: pass it to mlp_backward() with the reducer as `user`.
void reducer_autograd_hook(int layer, void *user);

// Waits for every bucket's all-reduce; afterwards the gradients are the mean over the ranks.
void reducer_finalize_backward(Reducer *r);

void reducer_free(Reducer *r);

#endif
