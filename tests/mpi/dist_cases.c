// dist_cases.c: see dist_cases.h. A flat buffer of W shards of S floats, rank j owning
// [j·S, (j+1)·S), is reduce-scattered slice by slice, as a sharded optimizer reduces its gradient
// buckets, and gathered back in place.
#include "dist_cases.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devmem.h"
#include "half.h"

#define MAX_W 16        // ranks these cases support
#define MAX_S 8         // shard size, elements
#define SENTINEL -1.0f  // what a shard holds where a reduce-scatter must not write

static int passed, failed;

void expect(ProcessGroup *pg, int ok, const char *what) {
  double bad = ok ? 0.0 : 1.0, *d = dev_alloc(pg->ctx, sizeof bad);  // device memory on a GPU
  dev_upload(pg->ctx, d, &bad, sizeof bad);
  dist_all_reduce(pg, d, 1, DIST_DOUBLE, DIST_SUM);  // a check fails when it fails on any rank
  dev_download(pg->ctx, &bad, d, sizeof bad);
  dev_free(pg->ctx, d);
  if (bad == 0.0) {
    passed++;
  } else {
    failed++;
  }
  if (pg->rank == 0) printf("%s %s\n", bad == 0.0 ? "ok    " : "FAILED", what);
}

int expect_passed(void) { return passed; }

int expect_failed(void) { return failed; }

// What rank q holds at index g of the flat buffer: different on every rank and at every index, so
// that a wrong chunk, a wrong offset, a missing sum or a missing division shows. A multiple of W, so
// that the mean is an exact float whether the sum is scaled by 1/W (MPI, the NCCL fallback) or every
// term is (ncclAvg): W·m·fl(1/W) rounds to m for W <= 4.
static float value(int W, int q, size_t g) { return (float)W * (float)(q + 1 + 8 * (int)g); }

// The sum over the W ranks of value(W, q, g), or its mean.
static float reduced(int W, size_t g, DistOp op) {
  float mean = (float)(W * (W + 1) / 2 + 8 * W * (int)g);
  return op == DIST_AVG ? mean : (float)W * mean;
}

// A device copy of @p host, complete on return: dev_upload only queues the copy (cudaMemcpyAsync),
// and the callers' host arrays are on their stacks (start_slice returns while its collective runs).
static float *upload(ProcessGroup *pg, const float *host, size_t n) {
  float *d = dev_alloc(pg->ctx, n * sizeof *d);
  dev_upload(pg->ctx, d, host, n * sizeof *d);
  dev_sync(pg->ctx);
  return d;
}

// Where this rank's piece of the slice [a, b) starts in its shard (0 when it has none).
static size_t piece_offset(const ProcessGroup *pg, size_t a, size_t S, const size_t *counts) {
  size_t first = (size_t)pg->rank * S;
  return counts[pg->rank] == 0 ? 0 : (a > first ? a - first : 0);
}

// True when shard (this rank's, S floats) holds the reduction of [a, b) ∩ its range, and the
// sentinel everywhere else.
static bool shard_ok(const ProcessGroup *pg, const float *shard, size_t a, size_t b, size_t S, DistOp op) {
  bool ok = true;
  for (size_t k = 0; k < S; k++) {
    size_t g = (size_t)pg->rank * S + k;
    ok &= shard[k] == (g >= a && g < b ? reduced(pg->world_size, g, op) : SENTINEL);
  }
  return ok;
}

// Starts the reduce-scatter of the slice [a, b) (as a bucket of the flat gradient) into this rank's
// shard, which starts as sentinels.
static void start_slice(ProcessGroup *pg, size_t a, size_t b, size_t S, DistOp op, float **send,
                        float **shard, DistWork *w) {
  int W = pg->world_size;
  size_t counts[MAX_W];
  float h[MAX_W * MAX_S + 1] = {0}, s[MAX_S];
  dist_shard_counts(a, b, S, W, counts);
  for (size_t k = 0; k < b - a; k++) h[k] = value(W, pg->rank, a + k);
  for (size_t k = 0; k < S; k++) s[k] = SENTINEL;
  *send = upload(pg, h, b - a + 1);  // (one more: an empty slice still gets a buffer)
  *shard = upload(pg, s, S);
  dist_reduce_scatter_async(pg, *send, *shard + piece_offset(pg, a, S, counts), counts, DIST_FLOAT, op, w);
}

// Waits for a slice started by start_slice() and checks this rank's shard.
static bool finish_slice(ProcessGroup *pg, size_t a, size_t b, size_t S, DistOp op, float *send, float *shard,
                         DistWork *w) {
  float s[MAX_S];
  dist_wait(pg, w);
  dev_download(pg->ctx, s, shard, S * sizeof *s);
  dev_free(pg->ctx, shard);
  dev_free(pg->ctx, send);
  return shard_ok(pg, s, a, b, S, op);
}

static void slice_case(ProcessGroup *pg, size_t a, size_t b, size_t S, DistOp op, const char *what) {
  char line[256];
  snprintf(line, sizeof line, "reduce-scatter %s of [%zu, %zu), shards of %zu: %s",
           op == DIST_AVG ? "average" : "sum", a, b, S, what);
  if (pg->world_size > MAX_W || S > MAX_S) {
    expect(pg, 0, line);
    return;
  }
  DistWork w;
  float *send, *shard;
  dist_work_init(pg, &w);
  start_slice(pg, a, b, S, op, &send, &shard, &w);
  expect(pg, finish_slice(pg, a, b, S, op, send, shard, &w), line);
  dist_work_free(pg, &w);
}

// In place: the flat buffer [0, W·S) is both the send buffer (its slice [a, b)) and the receiver:
// this rank's piece lands where it already is, at max(a, rank·S), as a sharded optimizer uses it.
// Only this rank's piece is checked; the rest of the buffer is scratch afterwards.
static void in_place_case(ProcessGroup *pg, size_t a, size_t b, size_t S, DistOp op, const char *what) {
  int W = pg->world_size;
  char line[256];
  snprintf(line, sizeof line, "reduce-scatter in place, %s of [%zu, %zu), shards of %zu: %s",
           op == DIST_AVG ? "average" : "sum", a, b, S, what);
  if (W > MAX_W || S > MAX_S) {
    expect(pg, 0, line);
    return;
  }
  size_t counts[MAX_W], n = (size_t)W * S, lo = (size_t)pg->rank * S;
  float h[MAX_W * MAX_S];
  for (size_t g = 0; g < n; g++) h[g] = g >= a && g < b ? value(W, pg->rank, g) : SENTINEL;
  float *flat = upload(pg, h, n);
  dist_shard_counts(a, b, S, W, counts);
  DistWork w;
  dist_work_init(pg, &w);
  size_t mine = lo > a ? lo : a;  // where this rank's piece starts in the flat buffer
  dist_reduce_scatter_async(pg, flat + a, flat + mine, counts, DIST_FLOAT, op, &w);
  dist_wait(pg, &w);
  dist_work_free(pg, &w);
  dev_download(pg->ctx, h, flat, n * sizeof *h);
  dev_free(pg->ctx, flat);
  bool ok = true;
  for (size_t g = mine; g < mine + counts[pg->rank]; g++) ok &= h[g] == reduced(W, g, op);
  expect(pg, ok, line);
}

// Two reduce-scatters in flight on two handles (equal and unequal counts), dist_test polled until
// the first is done, both waited for; then the first handle carries an all-reduce.
static void async_case(ProcessGroup *pg) {
  int W = pg->world_size;
  size_t S = 4, n = (size_t)W * S;
  DistWork w[2];
  float *send[2], *shard[2];
  dist_work_init(pg, &w[0]);
  dist_work_init(pg, &w[1]);
  start_slice(pg, 0, n, S, DIST_AVG, &send[0], &shard[0], &w[0]);
  start_slice(pg, 1, n - 1, S, DIST_SUM, &send[1], &shard[1], &w[1]);
  while (!dist_test(pg, &w[0])) {
  }
  bool ok = dist_test(pg, &w[0]);  // still complete, and still to be waited for
  ok &= finish_slice(pg, 0, n, S, DIST_AVG, send[0], shard[0], &w[0]);
  ok &= finish_slice(pg, 1, n - 1, S, DIST_SUM, send[1], shard[1], &w[1]);
  expect(pg, ok && !w[0].active && !w[1].active, "two asynchronous reduce-scatters, tested and waited");

  float h[3] = {1, 2, (float)pg->rank}, *d = upload(pg, h, 3);
  dist_all_reduce_async(pg, d, 3, DIST_FLOAT, DIST_SUM, &w[0]);
  dist_wait(pg, &w[0]);
  dev_download(pg->ctx, h, d, sizeof h);
  dev_free(pg->ctx, d);
  expect(pg, h[0] == W && h[1] == 2 * W && h[2] == W * (W - 1) / 2,
         "an all-reduce on a handle that carried a reduce-scatter");
  dist_work_free(pg, &w[1]);
  dist_work_free(pg, &w[0]);
}

// All-gather in place: each rank's part is already at recv + rank·n; the other parts are garbage.
static void all_gather_in_place_case(ProcessGroup *pg) {
  int W = pg->world_size, r = pg->rank;
  float h[MAX_W * 3];
  bool ok = W <= MAX_W;
  if (ok) {
    for (int k = 0; k < 3 * W; k++) h[k] = k / 3 == r ? (float)(100 * r + k % 3) : SENTINEL;
    float *d = upload(pg, h, (size_t)W * 3);
    dist_all_gather(pg, d + 3 * r, d, 3, DIST_FLOAT);
    dev_download(pg->ctx, h, d, (size_t)W * 3 * sizeof *h);
    dev_free(pg->ctx, d);
    for (int k = 0; k < 3 * W; k++) ok &= h[k] == (float)(100 * (k / 3) + k % 3);
  }
  expect(pg, ok, "all-gather in place (send = recv + rank·n)");
}

// The asynchronous all-gather (FSDP's prefetch): out of place from a shard of its own, and in place,
// on two handles in flight together, completed in the order they were started.
static void all_gather_async_case(ProcessGroup *pg) {
  int W = pg->world_size, r = pg->rank;
  float h[MAX_W * 3], mine[3] = {(float)(10 * r), (float)(10 * r + 1), (float)(10 * r + 2)};
  bool ok = W <= MAX_W;
  if (ok) {
    for (int k = 0; k < 3 * W; k++) h[k] = k / 3 == r ? (float)(100 * r + k % 3) : SENTINEL;
    float *in = upload(pg, h, (size_t)W * 3), *out = dev_alloc(pg->ctx, (size_t)W * 3 * sizeof *h);
    float *send = upload(pg, mine, 3);
    DistWork w[2];
    dist_work_init(pg, &w[0]);
    dist_work_init(pg, &w[1]);
    dist_all_gather_async(pg, send, out, 3, DIST_FLOAT, &w[0]);
    dist_all_gather_async(pg, in + 3 * r, in, 3, DIST_FLOAT, &w[1]);
    ok &= w[0].n == (size_t)W * 3 && w[0].what && strcmp(w[0].what, "all-gather") == 0;
    dist_test(pg, &w[1]);
    dist_wait(pg, &w[0]);
    dist_wait(pg, &w[1]);
    float a[MAX_W * 3];
    dev_download(pg->ctx, a, out, (size_t)W * 3 * sizeof *a);
    dev_download(pg->ctx, h, in, (size_t)W * 3 * sizeof *h);
    for (int k = 0; k < 3 * W; k++)
      ok &= a[k] == (float)(10 * (k / 3) + k % 3) && h[k] == (float)(100 * (k / 3) + k % 3);
    dist_work_free(pg, &w[1]);
    dist_work_free(pg, &w[0]);
    dev_free(pg->ctx, send), dev_free(pg->ctx, out), dev_free(pg->ctx, in);
  }
  expect(pg, ok, "asynchronous all-gather: out of place and in place, two in flight");
}

// One sharded optimizer step: the padded gradient of n = 4W + 1 floats (S = 5) is reduce-scattered
// (average, equal counts), each rank steps its shard of the parameters (p -= g, on the host here),
// and the shards are gathered in place into the full parameters.
static void zero_step_case(ProcessGroup *pg) {
  int W = pg->world_size, r = pg->rank;
  size_t S = 5, n = 4 * (size_t)W + 1, counts[MAX_W];
  float p[MAX_W * 5], g[MAX_W * 5], gs[5];
  bool ok = W <= MAX_W;
  if (ok) {
    for (size_t i = 0; i < W * S; i++) p[i] = i < n ? 1000.0f + (float)i : 0.0f;
    for (size_t i = 0; i < W * S; i++) g[i] = i < n ? value(W, r, i) : 0.0f;  // the padding is 0
    float *dp = upload(pg, p, W * S), *dg = upload(pg, g, W * S), *dgs = dev_alloc(pg->ctx, sizeof gs);
    DistWork w;
    dist_work_init(pg, &w);
    dist_shard_counts(0, W * S, S, W, counts);
    dist_reduce_scatter_async(pg, dg, dgs, counts, DIST_FLOAT, DIST_AVG, &w);
    dist_wait(pg, &w);
    dev_download(pg->ctx, gs, dgs, sizeof gs);
    for (size_t k = 0; k < S; k++) gs[k] = p[r * S + k] - gs[k];  // the optimizer, on this shard
    dev_upload(pg->ctx, dp + r * S, gs, sizeof gs);
    dist_all_gather(pg, dp + r * S, dp, S, DIST_FLOAT);
    dev_download(pg->ctx, p, dp, W * S * sizeof *p);
    for (size_t i = 0; i < W * S; i++)
      ok &= p[i] == (i < n ? 1000.0f + (float)i - reduced(W, i, DIST_AVG) : 0.0f);
    dist_work_free(pg, &w);
    dev_free(pg->ctx, dgs), dev_free(pg->ctx, dg), dev_free(pg->ctx, dp);
  }
  expect(pg, ok, "a sharded optimizer step: reduce-scatter (average), shard update, all-gather in place");
}

void dist_cases_zero(ProcessGroup *pg) {
  size_t W = (size_t)pg->world_size;
  slice_case(pg, 0, 5 * W, 5, DIST_SUM, "equal counts (the whole buffer)");
  slice_case(pg, 0, 5 * W, 5, DIST_AVG, "equal counts (the whole buffer)");
  slice_case(pg, 0, 5 * W - 1, 5, DIST_SUM, "n = 5W - 1, not divisible by W: the last count is 4");
  slice_case(pg, 0, 5 * W - 1, 5, DIST_AVG, "n = 5W - 1, not divisible by W: the last count is 4");
  if (W >= 2) {  // (a program started on its own is a world of one)
    slice_case(pg, 6, 9, 5, DIST_AVG, "a bucket inside shard 1: one count, the others 0");
    slice_case(pg, 3, 8, 5, DIST_SUM, "a bucket across shards 0 and 1");
  }
  slice_case(pg, 2, 5 * W - 1, 5, DIST_AVG, "a bucket from inside shard 0 to inside the last");
  slice_case(pg, 4, 4, 5, DIST_SUM, "an empty bucket: every count 0");
  in_place_case(pg, 0, 5 * W, 5, DIST_AVG, "equal counts (the whole buffer)");
  in_place_case(pg, 2, 5 * W - 1, 5, DIST_SUM, "a bucket from inside shard 0 to inside the last");
  async_case(pg);
  all_gather_in_place_case(pg);
  all_gather_async_case(pg);
  zero_step_case(pg);
}

// Element g of rank q in the 16-bit cases: multiples of 1/8 up to 1, so that every partial sum of up to 16
// ranks (at most 136/8 = 17, 7 significant bits) is exact in fp16 and bf16 whatever the order: the
// all-reduce must give exactly the sum, on any backend.
static float value16(int q, size_t g) { return (float)(q + 1) * (float)(g % 8 + 1) / 8.0f; }

// The fp16 or bf16 all-reduce of --comm_hook fp16/bf16 (DIST_HALF, DIST_BF16; DIST_SUM), blocking and
// asynchronous (the hook's form), over n elements, against the exact sums; and the hook's canary.
static void half_case(ProcessGroup *pg, DistType type, size_t n, bool async) {
  bool bf16 = type == DIST_BF16;
  int W = pg->world_size;
  uint16_t *host = malloc(n * sizeof *host);
  if (!host) {
    expect(pg, 0, "malloc");
    return;
  }
  for (size_t g = 0; g < n; g++) {
    float x = value16(pg->rank, g);
    host[g] = bf16 ? bf16_from_float(x) : half_from_float(x);
  }
  uint16_t *d = dev_alloc(pg->ctx, n * sizeof *d);
  dev_upload(pg->ctx, d, host, n * sizeof *d);
  if (async) {
    DistWork w;
    dist_work_init(pg, &w);
    dist_all_reduce_async(pg, d, n, type, DIST_SUM, &w);
    dist_wait(pg, &w);
    dist_work_free(pg, &w);
  } else {
    dist_all_reduce(pg, d, n, type, DIST_SUM);
  }
  dev_download(pg->ctx, host, d, n * sizeof *d);
  dev_free(pg->ctx, d);
  int ok = 1;
  for (size_t g = 0; g < n && ok; g++) {
    float got = bf16 ? bf16_to_float(host[g]) : half_to_float(host[g]);
    ok = got == (float)(W * (W + 1) / 2) * (float)(g % 8 + 1) / 8.0f;
  }
  free(host);
  char what[128];
  snprintf(what, sizeof what, "%s all-reduce (sum), %zu elements, %s: exactly the sum", dist_type_name(type),
           n, async ? "asynchronous (the hook's)" : "blocking");
  expect(pg, ok, what);
}

void dist_cases_half(ProcessGroup *pg) {
  if (pg->world_size > MAX_W) return;
  for (int t = 0; t < 2; t++) {
    DistType type = t ? DIST_BF16 : DIST_HALF;
    half_case(pg, type, 8, false);
    half_case(pg, type, (size_t)1 << 20, true);    // several of NCCL's chunks and channels
    dist_verify_sum(pg, type, "dist_cases_half");  // the hooks' canary: ends the job if it fails
    expect(pg, 1,
           type == DIST_BF16 ? "the sum canary of bf16 (dist_verify_sum) passes"
                             : "the sum canary of fp16 (dist_verify_sum) passes");
  }
}
