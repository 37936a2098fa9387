// Exercise 06: generated from steps/06_full/reducer.c by scripts/make_exercises.py. Fill in every
// TODO(06), then check: scripts/check_exercise.sh 06 <this file> (see README.md here).
// reducer.c — the bucketed, overlapped gradient reducer; see reducer.h.
#include "reducer.h"

#include <stdio.h>
#include <string.h>

#include "check.h"  // check.h: die

// ---- bucket assignment ----------------------------------------------------------------------------

static void close_bucket(Bucket *b, size_t *end, size_t offset, int *n_tensors, size_t *bytes) {
  b->offset = offset;
  b->count = *end - offset;  // tensors were added from the end of the buffer towards its start
  b->n_tensors = *n_tensors;
  *end = offset;
  *n_tensors = 0;
  *bytes = 0;
}

int reducer_assign(const Mlp *m, size_t cap_bytes, size_t first_cap_bytes, Bucket *buckets,
                   int *bucket_of) {
  int nb = 0, n_tensors = 0;
  size_t end = m->n_params, offset = end, bytes = 0;
  size_t limit = first_cap_bytes < cap_bytes ? first_cap_bytes : cap_bytes;
  for (int t = 2 * m->n_layers - 1; t >= 0; t--) {  // reverse order: bias L-1, weight L-1, bias L-2…
    int l = t / 2;
    bool bias = t % 2;
    size_t floats = bias ? (size_t)m->sizes[l + 1] : (size_t)m->sizes[l + 1] * m->sizes[l];
    size_t tbytes = floats * sizeof(float);
    if (n_tensors > 0 && bytes + tbytes > limit) {  // it would overflow: it starts the next bucket
      close_bucket(&buckets[nb++], &end, offset, &n_tensors, &bytes);
      limit = cap_bytes;
    }
    offset = bias ? m->b_off[l] : m->w_off[l];
    bucket_of[t] = nb;
    bytes += tbytes;
    n_tensors++;
    if (bytes >= limit) {  // full
      close_bucket(&buckets[nb++], &end, offset, &n_tensors, &bytes);
      limit = cap_bytes;
    }
  }
  if (n_tensors > 0) close_bucket(&buckets[nb++], &end, offset, &n_tensors, &bytes);
  return nb;
}

// ---- lifecycle -------------------------------------------------------------------------------------

void reducer_init(Reducer *r, ProcessGroup *pg, const Ctx *c, Mlp *m, double cap_mb, Trace *trace) {
  memset(r, 0, sizeof *r);
  r->pg = pg;
  r->ctx = c;
  r->model = m;
  r->trace = trace;
  size_t cap = (size_t)(cap_mb * 1024.0 * 1024.0);
  r->n_buckets = reducer_assign(m, cap ? cap : 1, REDUCER_FIRST_BUCKET_BYTES, r->buckets, r->bucket_of);
  for (int i = 0; i < r->n_buckets; i++) dist_work_init(pg, &r->buckets[i].work);
  dev_event_init(c, &r->origin);
  dev_event_init(c, &r->backward_start);
  for (int l = 0; l < m->n_layers; l++) dev_event_init(c, &r->layer_done[l]);
  dev_event_record(c, &r->origin, NULL);
}

void reducer_free(Reducer *r) {
  for (int l = r->model->n_layers - 1; l >= 0; l--) dev_event_free(r->ctx, &r->layer_done[l]);
  dev_event_free(r->ctx, &r->backward_start);
  dev_event_free(r->ctx, &r->origin);
  for (int i = r->n_buckets - 1; i >= 0; i--) dist_work_free(r->pg, &r->buckets[i].work);
}

// ---- one step --------------------------------------------------------------------------------------

void reducer_prepare(Reducer *r, long long step) {
  r->step = step;
  r->next = 0;
  for (int i = 0; i < r->n_buckets; i++) r->buckets[i].pending = r->buckets[i].n_tensors;
  r->tracing = trace_on(r->trace) && r->traced < REDUCER_TRACE_STEPS;
  if (r->tracing) dev_event_record(r->ctx, &r->backward_start, NULL);
}

// Starts, in bucket order, every bucket whose gradients are all ready.
static void launch_ready(Reducer *r) {
  // TODO(06): start, in bucket order (r->next onwards), every bucket none of whose tensors is
  // still pending: an asynchronous DIST_SUM all-reduce of its slice of the flat gradient buffer
  // (dist_all_reduce_async into the bucket's own DistWork; a sum, because run_batch divides the
  // loss gradient by W). Stop at the first bucket that is not ready, even if a later one is:
  // every rank must start the same buckets in the same order.
  (void)r;
}

void reducer_grad_ready(int layer, void *user) {
  Reducer *r = user;
  if (r->tracing) dev_event_record(r->ctx, &r->layer_done[layer], NULL);
  // TODO(06): this layer's weight (tensor 2·layer) and bias (tensor 2·layer + 1) are ready: count
  // them down in their buckets (r->bucket_of, Bucket.pending)
  launch_ready(r);
  // TODO(06): give MPI a chance to advance the all-reduces already started (dist_test)
}

static void trace_step(Reducer *r) {
  char name[64];
  if (r->traced == 0) {
    trace_track(r->trace, 1, "compute: backward");
    trace_track(r->trace, 2, "communication: all-reduce");
  }
  const DevEvent *prev = &r->backward_start;
  for (int l = r->model->n_layers - 1; l >= 0; l--) {
    snprintf(name, sizeof name, "backward layer %d", l);
    trace_span(r->trace, 1, name, dev_event_elapsed(r->ctx, &r->origin, prev),
               dev_event_elapsed(r->ctx, &r->origin, &r->layer_done[l]), r->step);
    prev = &r->layer_done[l];
  }
  for (int i = 0; i < r->n_buckets; i++) {
    const Bucket *b = &r->buckets[i];
    snprintf(name, sizeof name, "all-reduce bucket %d: %zu floats (%.2f MiB)", i, b->count,
             (double)b->count * sizeof(float) / (1 << 20));
    trace_span(r->trace, 2, name, dev_event_elapsed(r->ctx, &r->origin, &b->work.start),
               dev_event_elapsed(r->ctx, &r->origin, &b->work.end), r->step);
  }
}

void reducer_finish(Reducer *r) {
  // TODO(06): every bucket must have been started (if not, a hook was missed: die), then wait
  // for each bucket's all-reduce (dist_wait) before the optimizer may use the gradients
  if (r->tracing) {
    trace_step(r);
    r->traced++;
  }
}
