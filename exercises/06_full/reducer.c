// Exercise 06: generated from steps/06_full/reducer.c by dev/make_exercises.py. Fill in every
// TODO(06), then check: scripts/check_exercise.sh 06 <this file> (see README.md here).
// reducer.c — the bucketed, overlapped gradient reducer; see reducer.h.
#include "reducer.h"

#include <string.h>

#include "check.h"   // check.h: die
#include "devmem.h"  // devmem.h: dev_alloc, dev_free (--check_finite's count)
#include "ops.h"     // ops.h: ops_require_finite (--check_finite)

static void check_bucket_finite(Reducer *r, int i, const Bucket *b);  // --check_finite: at the end

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

// ---- lifecycle -------------------------------------------------------------------------------------

void reducer_init(Reducer *r, ProcessGroup *pg, Mlp *m, double cap_mb) {
  memset(r, 0, sizeof *r);
  r->pg = pg;
  r->model = m;
  size_t cap = (size_t)(cap_mb * 1024.0 * 1024.0);
  r->n_buckets = reducer_assign(m, cap, REDUCER_FIRST_BUCKET_BYTES, r->buckets, r->bucket_of);
  for (int i = 0; i < r->n_buckets; i++) dist_work_init(pg, &r->work[i]);
}

void reducer_free(Reducer *r) {
  comm_hook_free(&r->hook);
  if (r->nonfinite) dev_free(r->pg->ctx, r->nonfinite);
  for (int i = r->n_buckets - 1; i >= 0; i--) dist_work_free(r->pg, &r->work[i]);
}

// ---- one step --------------------------------------------------------------------------------------

void reducer_prepare_for_backward(Reducer *r, long long step) {
  r->step = step;
  r->next_bucket = 0;
  for (int i = 0; i < r->n_buckets; i++) r->buckets[i].pending = r->buckets[i].n_tensors;
}

// Starts, in bucket order, every bucket whose gradients are all ready. A later bucket that is ready
// waits for the earlier ones: every rank must start the same collectives in the same order.
static void mark_bucket_ready(Reducer *r) {
  // TODO(06): start, in bucket order (r->next_bucket onwards), every bucket none of whose
  // tensors is still pending: an asynchronous DIST_SUM all-reduce of its slice of the flat
  // gradient buffer (dist_all_reduce_async into its handle, r->work[i] for bucket i; a sum, because
  // backward ran on the loss times 1/W). Stop at the first bucket that is not ready, even if a
  // later one is: every rank must start the same buckets in the same order.
  // (--check_finite and --comm_hook: step 06 calls check_bucket_finite first, and hands the
  // bucket to its hook when one is registered; the exercise's checks need neither.)
  (void)r;
  (void)check_bucket_finite;
}

// One parameter tensor's gradient is ready: one fewer to wait for in its bucket.
static void mark_variable_ready(Reducer *r, int tensor) {
  // TODO(06): count the tensor down in its bucket (r->bucket_of, Bucket.pending)
  (void)r;
  (void)tensor;
}

void reducer_autograd_hook(int layer, void *user) {
  Reducer *r = user;
  mark_variable_ready(r, 2 * layer);      // the weight
  mark_variable_ready(r, 2 * layer + 1);  // the bias
  mark_bucket_ready(r);
  // TODO(06): give MPI a chance to advance the all-reduces already started (dist_test)
}

void reducer_finalize_backward(Reducer *r) {
  // TODO(06): every bucket must have been started (if not, a hook was missed: die(1, ...), with
  // a message that says how many buckets, or which bucket or layer, went missing), then wait
  // for each bucket's all-reduce (dist_wait) before the optimizer may use the gradients
  (void)r;
}

// ---- the options: a communication hook, the finite check -----------------------------------------

void reducer_register_comm_hook(Reducer *r, const Args *a) {
  r->hooked = comm_hook_setup(&r->hook, r->pg, a->comm_hook, a->powersgd_rank, a->powersgd_start_iter,
                              a->seed, r->model, r->bucket_of, a->check_finite);
  if (a->check_finite) r->nonfinite = dev_alloc(r->pg->ctx, sizeof(int));
}

// --check_finite (as Megatron checks each bucket): a NaN or an infinity ends the job before it spreads.
static void check_bucket_finite(Reducer *r, int i, const Bucket *b) {
  ops_require_finite(r->pg->ctx, r->model->grads + b->offset, b->count, r->nonfinite, r->pg->rank, r->step,
                     "bucket %d (layers %d to %d), found before its all-reduce: no replica received it", i,
                     b->first_layer, b->last_layer);
}
