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
  while (r->next_bucket < r->n_buckets && r->buckets[r->next_bucket].pending == 0) {
    int i = r->next_bucket++;
    Bucket *b = &r->buckets[i];
    if (r->nonfinite) check_bucket_finite(r, i, b);  // --check_finite: before it can spread
    if (!r->hooked)  // a sum: backward ran on the loss times 1/W, so the gradients are already divided by W
      dist_all_reduce_async(r->pg, r->model->grads + b->offset, b->count, DIST_FLOAT, DIST_SUM, &r->work[i]);
    else  // --comm_hook: the registered hook decides what goes on the wire
      comm_hook_run(&r->hook, i, r->model->grads, b->offset, b->count, &r->work[i]);
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
  for (int i = 0; i < r->n_buckets; i++)
    if (!r->hooked)
      dist_wait(r->pg, &r->work[i]);
    else  // --comm_hook: the hook waits, then turns the answer into the mean (PyTorch: fut.then)
      comm_hook_wait(&r->hook, i, r->model->grads, r->buckets[i].offset, r->buckets[i].count, &r->work[i]);
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
