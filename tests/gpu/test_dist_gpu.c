// test_dist_gpu.c: the reduce-scatter, in-place all-gather and 16-bit all-reduce cases of
// tests/mpi/test_dist.c (tests/mpi/dist_cases.c) on GPU buffers, with 2 or more ranks:
//
//   scripts/launch.sh -n 3 build/bin/test_dist_gpu nccl   over NCCL (one GPU: NCCL >= 2.30 and
//                                                         NCCL_MULTI_RANK_GPU_ENABLE=1)
//   mpirun -np 3 build/bin/test_dist_gpu mpi              over MPI, staged through the host
//
// DDP_NCCL_NO_AVG=1 runs NCCL's averages through the fallback (a sum, then a division). Prints one
// line per check on rank 0 and "N passed, M failed"; exit 0 when every check passes, 1 on a failure
// ("FAILED"), 77 when it cannot run here (no GPU, or fewer GPUs than ranks and an NCCL that refuses to
// share one).
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if HAVE_NCCL
#include <nccl.h>
#endif

#include "device.h"      // device.h: Ctx, device_init, device_cuda_count
#include "dist.h"        // dist.h: ProcessGroup, dist_init, dist_connect, dist_destroy
#include "dist_cases.h"  // dist_cases.h: expect_passed, expect_failed, dist_cases_zero, dist_cases_half

static int skip(const char *why) {
  printf("SKIPPED: %s\n", why);
  return 77;
}

// Why NCCL cannot run @p world ranks on @p gpus GPUs here, or NULL when it can.
static const char *nccl_refuses(int gpus, int world) {
#if HAVE_NCCL
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess) return "ncclGetVersion failed";
  const char *share = getenv("NCCL_MULTI_RANK_GPU_ENABLE");
  if (gpus < world && (version < 23000 || !share || strcmp(share, "1") != 0))
    return "fewer GPUs than ranks, and this NCCL does not share a GPU between ranks (needs NCCL >= "
           "2.30 and NCCL_MULTI_RANK_GPU_ENABLE=1)";
  return NULL;
#else
  (void)gpus, (void)world;
  return "built without NCCL";
#endif
}

int main(int argc, char **argv) {
  const char *backend = argc > 1 ? argv[1] : "nccl";
  int gpus = device_cuda_count();
  if (gpus == 0) return skip("no CUDA GPU");
  if (strcmp(backend, "nccl") == 0) {
    const char *ws = getenv("WORLD_SIZE");
    int world = ws ? atoi(ws) : 1;
    if (world < 2) return skip("needs 2 or more ranks (scripts/launch.sh -n 2 ...)");
    const char *why = nccl_refuses(gpus, world);
    if (why) return skip(why);
  }

  Ctx ctx;
  ProcessGroup pg;
  dist_init(&pg, backend, DEVICE_CUDA, 45.0);  // the watchdog: 45 s, within CTest's 60
  device_init(&ctx, DEVICE_CUDA, pg.local_rank % gpus);
  dist_connect(&pg, &ctx);
  if (pg.rank == 0)
    printf("%d ranks, backend %s%s\n", pg.world_size, dist_backend_name(pg.backend),
           getenv("DDP_NCCL_NO_AVG") ? " (DDP_NCCL_NO_AVG: averages as a sum and a division)" : "");
  dist_cases_zero(&pg);
  dist_cases_half(&pg);
  int p = expect_passed(), q = expect_failed();
  if (pg.rank == 0) printf("%d passed, %d failed\n", p, q);
  dist_destroy(&pg);
  device_free(&ctx);
  return q ? 1 : 0;
}
