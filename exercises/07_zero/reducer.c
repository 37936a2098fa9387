// Exercise 07: generated from steps/07_zero/reducer.c by dev/make_exercises.py. Fill in every
// TODO(07), then check: scripts/check_exercise.sh 07 <this file> (see README.md here).
// reducer.c — the bucketed, overlapped gradient reducer, reduce-scattering to shards; see reducer.h.
#include "reducer.h"

#include <stdlib.h>
#include <string.h>

#include "check.h"  // check.h: die, mallocCheck

// ---- bucket assignment ----------------------------------------------------------------------------

static void close_bucket(Bucket *b, size_t *end, size_t offset, int *n_tensors, size_t *bytes) {
  b->offset = offset;
  b->count = *end - offset;  // tensors were added from the end of the buffer towards its start
  b->n_tensors = *n_tensors;
  *end = offset;
  *n_tensors = 0;
  *bytes = 0;
}

int reducer_assign(const Mlp *m, size_t cap_bytes, size_t first_cap_bytes, Bucket *buckets, int *bucket_of) {
  int nb = 0, n_tensors = 0;
  size_t end = m->n_params, offset = end, bytes = 0;
  size_t limit = first_cap_bytes;                   // PyTorch's first limit, whatever the cap
  for (int t = 2 * m->n_layers - 1; t >= 0; t--) {  // reverse order: bias L-1, weight L-1, bias L-2…
    int l = t / 2;
    bool bias = t % 2;
    size_t floats = bias ? (size_t)m->sizes[l + 1] : (size_t)m->sizes[l + 1] * m->sizes[l];
    offset = bias ? m->b_off[l] : m->w_off[l];
    bucket_of[t] = nb;
    if (n_tensors == 0) buckets[nb].last_layer = l;  // the bucket's layers, for messages: l falls
    buckets[nb].first_layer = l;
    bytes += floats * sizeof(float);  // the tensor joins the open bucket, even if it overshoots
    n_tensors++;
    if (bytes >= limit) {  // the bucket reached its limit: it closes, and later ones get the cap
      close_bucket(&buckets[nb++], &end, offset, &n_tensors, &bytes);
      limit = cap_bytes;
    }
  }
  if (n_tensors > 0) close_bucket(&buckets[nb++], &end, offset, &n_tensors, &bytes);
  return nb;
}

// [zero] How bucket b's floats split over the W shards of S floats (dist_shard_counts: the overlap
// of the bucket with each rank's shard), and where this rank's overlap starts in its shard.
static void shard_bucket(Bucket *b, size_t S, int W, int rank) {
  b->counts = mallocCheck((size_t)W * sizeof *b->counts);
  dist_shard_counts(b->offset, b->offset + b->count, S, W, b->counts);
  size_t mine = (size_t)rank * S;
  b->shard_offset = b->counts[rank] > 0 && b->offset > mine ? b->offset - mine : 0;
}

// ---- lifecycle -------------------------------------------------------------------------------------

void reducer_init(Reducer *r, ProcessGroup *pg, Mlp *m, double cap_mb, size_t shard) {
  memset(r, 0, sizeof *r);
  r->pg = pg;
  r->model = m;
  size_t cap = (size_t)(cap_mb * 1024.0 * 1024.0);
  r->n_buckets = reducer_assign(m, cap, REDUCER_FIRST_BUCKET_BYTES, r->buckets, r->bucket_of);
  size_t padded = shard * (size_t)pg->world_size;
  if (padded < m->n_params || m->n_alloc != padded)
    die(1, "reducer: %d shards of %zu floats for a model of %zu parameters in buffers of %zu", pg->world_size,
        shard, m->n_params, m->n_alloc);
  r->buckets[0].count += padded - m->n_params;  // [zero] the padding joins the bucket at the end
  for (int i = 0; i < r->n_buckets; i++) {
    shard_bucket(&r->buckets[i], shard, pg->world_size, pg->rank);
    dist_work_init(pg, &r->work[i]);
  }
  r->shard = shard;
}

void reducer_free(Reducer *r) {
  for (int i = r->n_buckets - 1; i >= 0; i--) {
    dist_work_free(r->pg, &r->work[i]);
    free(r->buckets[i].counts);
  }
}

// ---- one step --------------------------------------------------------------------------------------

void reducer_prepare_for_backward(Reducer *r) {
  r->next_bucket = 0;
  for (int i = 0; i < r->n_buckets; i++) r->buckets[i].pending = r->buckets[i].n_tensors;
}

// Starts, in bucket order, every bucket whose gradients are all ready. A later bucket that is ready
// waits for the earlier ones: every rank must start the same collectives in the same order.
static void mark_bucket_ready(Reducer *r) {
  while (r->next_bucket < r->n_buckets && r->buckets[r->next_bucket].pending == 0) {
    int i = r->next_bucket++;
    Bucket *b = &r->buckets[i];
    // TODO(07): reduce-scatter the bucket instead of all-reducing it: each rank receives the sum
    // over the ranks of its own part of the bucket (b->counts[j] floats for rank j, from
    // dist_shard_counts), in place: where that part already lies in the flat gradient buffer, at
    // the start of this rank's shard (r->pg->rank · r->shard floats in) plus b->shard_offset
    // (dist_reduce_scatter_async, DIST_SUM, into the bucket's handle r->work[i]). Until then the
    // bucket is all-reduced as in step 06: this rank's shard gets the mean gradient too, but so
    // does the rest of the buffer, and the all-reduce moves twice the bytes of a reduce-scatter.
    dist_all_reduce_async(r->pg, r->model->grads + b->offset, b->count, DIST_FLOAT, DIST_SUM, &r->work[i]);
  }
}

// One parameter tensor's gradient is ready: one fewer to wait for in its bucket.
static void mark_variable_ready(Reducer *r, int tensor) { r->buckets[r->bucket_of[tensor]].pending--; }

void reducer_autograd_hook(int layer, void *user) {
  Reducer *r = user;
  mark_variable_ready(r, 2 * layer);      // the weight
  mark_variable_ready(r, 2 * layer + 1);  // the bias
  mark_bucket_ready(r);
  for (int i = 0; i < r->next_bucket; i++) dist_test(r->pg, &r->work[i]);  // let MPI progress
}

void reducer_finalize_backward(Reducer *r) {
  if (r->next_bucket != r->n_buckets)
    die(1, "reducer: %d of %d buckets never became ready (was every layer's hook called?)",
        r->n_buckets - r->next_bucket, r->n_buckets);
  for (int i = 0; i < r->n_buckets; i++) dist_wait(r->pg, &r->work[i]);
}
