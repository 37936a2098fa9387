// test_order_nccl.c: the ordering that makes step 06's overlap correct, on real NCCL with 2 or more
// ranks (world size 1 cannot show it: an all-reduce of one rank is the identity, whenever it runs).
//
//   scripts/launch.sh -n 2 build/bin/test_order_nccl      (one GPU: NCCL >= 2.30 and
//                                                          NCCL_MULTI_RANK_GPU_ENABLE=1)
//
// 1. A bucket's all-reduce does not start before the gradient it reads is written. The compute
//    stream is held by a host function; behind it, rank r writes its gradient (r + 1) and the
//    reducer starts the bucket's all-reduce. While the stream is held, the bucket's start event on
//    the communication stream must stay unfinished; once released, every rank must hold the sum
//    1 + 2 + ... + W. Had the all-reduce run early, it would have summed the zeros, and rank r would
//    end with its own r + 1.
// 2. The optimizer waits for the all-reduce. Now the communication stream is held; the compute
//    stream writes the gradient, the reducer starts the all-reduce and reducer_finalize_backward()
//    makes the compute stream wait for it, then SGD (lr 1) steps. While held, the step's event must stay
//    unfinished; once released, every parameter must be p0 - W(W+1)/2 exactly (small integers:
//    no rounding). Had SGD not waited, it would have used r + 1.
//
// The holds last 1 s each: a broken order shows itself within that time (the unordered work is
// free to run); a correct one passes however slow the machine is, since nothing it checks can
// finish while a stream is held. Exit 0 when every check passes, 1 on a failure ("FAILED"), 77
// when it cannot run here (no GPU, or fewer GPUs than ranks and an NCCL that refuses to share).
#define _POSIX_C_SOURCE 200809L
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "device.h"   // device.h: Ctx, device_init
#include "devmem.h"   // devmem.h: dev_*, DevEvent
#include "dist.h"     // dist.h: ProcessGroup, dist_init, dist_connect, dist_barrier, dist_destroy
#include "mlp.h"      // mlp.h: Mlp, mlp_init
#include "ops.h"      // ops.h: ops_axpy
#include "optim.h"    // optim.h: Sgd, sgd_init, sgd_step
#include "reducer.h"  // reducer.h (step 06): Reducer, reducer_prepare_for_backward, ...

static int failures = 0;

static void expect(bool ok, int rank, const char *what) {
  printf("[rank %d] %s: %s\n", rank, ok ? "ok" : "FAILED", what);
  fflush(stdout);
  if (!ok) failures++;
}

// A host function on a stream: everything queued after it waits until *release is set.
static void CUDART_CB hold(void *release) {
  while (!atomic_load((atomic_int *)release)) {
  }
}

// True when e stays unfinished for the whole observation window (about 1 s).
static bool stays_unfinished(const Ctx *c, const DevEvent *e) {
  struct timespec tick = {0, 50 * 1000 * 1000};
  for (int i = 0; i < 20; i++) {
    if (dev_event_done(c, e)) return false;
    nanosleep(&tick, NULL);
  }
  return true;
}

static int skip(const char *why) {
  printf("SKIPPED: %s\n", why);
  return 77;
}

int main(void) {
  int gpus = device_cuda_count();
  if (gpus == 0) return skip("no CUDA GPU");
  const char *ws = getenv("WORLD_SIZE"), *lr = getenv("LOCAL_RANK");
  int world = ws ? atoi(ws) : 1, local = lr ? atoi(lr) : 0;
  if (world < 2) return skip("needs 2 or more ranks (scripts/launch.sh -n 2 ...)");
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess) return skip("ncclGetVersion failed");
  const char *share = getenv("NCCL_MULTI_RANK_GPU_ENABLE");
  if (gpus < world && (version < 23000 || !share || strcmp(share, "1") != 0))
    return skip(
        "fewer GPUs than ranks, and this NCCL does not share a GPU between ranks (needs "
        "NCCL >= 2.30 and NCCL_MULTI_RANK_GPU_ENABLE=1)");

  Ctx ctx;
  ProcessGroup pg;
  dist_init(&pg, "nccl", DEVICE_CUDA, 45.0);  // the watchdog: 45 s, within CTest's 60
  device_init(&ctx, DEVICE_CUDA, gpus >= world ? local : 0);
  dist_connect(&pg, &ctx);
  const int sizes[2] = {64, 10};
  Mlp m;
  mlp_init(&m, &ctx, sizes, 1, 1, 1);
  Reducer r;
  reducer_init(&r, &pg, &m, 25.0);  // one layer, one bucket
  Sgd opt;
  sgd_init(&opt, &ctx, m.n_params, 1.0f, 0.0f, 0.0f, 0.0f, false);
  size_t n = m.n_params;
  float *ones = malloc(n * sizeof *ones), *got = malloc(n * sizeof *got), *p0 = malloc(n * sizeof *p0);
  for (size_t i = 0; i < n; i++) ones[i] = 1.0f;
  float *d_ones = dev_alloc(&ctx, n * sizeof(float));
  dev_upload(&ctx, d_ones, ones, n * sizeof(float));
  dev_download(&ctx, p0, m.params, n * sizeof(float));
  const float mine = (float)(pg.rank + 1), sum = (float)(world * (world + 1) / 2);
  char what[256];
  // A first collective before the held ones: NCCL (>= 2.22) connects the peers during a
  // communicator's first collectives, inside the host call, so without this the held all-reduce
  // below would also be NCCL's set-up, and what it shows would be in doubt.
  dist_barrier(&pg);

  // 1. the all-reduce waits for the gradient it reads
  static atomic_int release1 = 0;
  dev_zero(&ctx, m.grads, n * sizeof(float));
  dev_sync(&ctx);
  if (cudaLaunchHostFunc((cudaStream_t)ctx.stream, hold, &release1) != cudaSuccess) abort();
  ops_axpy(&ctx, m.grads, d_ones, n, mine);  // the gradient: r + 1, written behind the hold
  reducer_prepare_for_backward(&r, 1);
  reducer_autograd_hook(0, &r);  // the bucket is complete: its all-reduce starts
  expect(stays_unfinished(&ctx, &r.work[0].start), pg.rank,
         "the bucket's all-reduce did not start while its gradient was not yet written");
  atomic_store(&release1, 1);
  reducer_finalize_backward(&r);
  dev_download(&ctx, got, m.grads, n * sizeof(float));
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) bad += got[i] != sum;
  snprintf(what, sizeof what,
           "after release every gradient is the sum over ranks %g (%zu of %zu "
           "differ; first %g)",
           sum, bad, n, got[0]);
  expect(bad == 0, pg.rank, what);

  // 2. the optimizer waits for the all-reduce
  static atomic_int release2 = 0;
  dev_zero(&ctx, m.grads, n * sizeof(float));
  dev_sync(&ctx);
  if (cudaLaunchHostFunc((cudaStream_t)pg.comm_stream, hold, &release2) != cudaSuccess) abort();
  ops_axpy(&ctx, m.grads, d_ones, n, mine);
  reducer_prepare_for_backward(&r, 2);
  reducer_autograd_hook(0, &r);
  reducer_finalize_backward(&r);
  sgd_step(&opt, &ctx, m.params, m.grads);  // params -= 1 * grads
  DevEvent stepped;
  dev_event_init(&ctx, &stepped);
  dev_event_record(&ctx, &stepped, NULL);
  expect(stays_unfinished(&ctx, &stepped), pg.rank,
         "the optimizer step did not run while the all-reduce was held");
  atomic_store(&release2, 1);
  dev_download(&ctx, got, m.params, n * sizeof(float));
  bad = 0;
  for (size_t i = 0; i < n; i++) bad += got[i] != p0[i] - sum;
  snprintf(what, sizeof what, "after release every parameter is p0 - %g (%zu of %zu differ)", sum, bad, n);
  expect(bad == 0, pg.rank, what);

  dev_event_free(&ctx, &stepped);
  dev_free(&ctx, d_ones);
  free(ones), free(got), free(p0);
  sgd_free(&opt, &ctx);
  reducer_free(&r);
  mlp_free(&m, &ctx);
  dist_destroy(&pg);
  device_free(&ctx);
  return failures ? 1 : 0;
}
