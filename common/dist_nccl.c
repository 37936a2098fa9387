// dist_nccl.c: the NCCL backend. Collectives are queued on the context's compute stream, so they are
// ordered after the kernels that produced their input and before those that consume the result, with
// no host synchronisation.
#define _POSIX_C_SOURCE 200809L
#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "dist_backend.h"
#include "log.h"

bool dist_have_nccl(void) { return true; }

void nccl_check_impl(int result, const char *call, const char *file, int line) {
  if (result == ncclSuccess) return;
  const char *last = ncclGetLastError(NULL);
  check_fail("NCCL", file, line, "%s: %s%s%s", call, ncclGetErrorString((ncclResult_t)result),
             last && *last ? ": " : "", last ? last : "");
}

static ncclComm_t g_comm;  // for the abort hook, which takes no arguments

// Without mpirun: abort this rank's communicator (its queued NCCL work) and exit. NCCL does not tell
// the peers; the launcher stops them when this process exits with an error (see dist.h).
static void nccl_abort(int status) {
  if (g_comm) ncclCommAbort(g_comm);
  fflush(NULL);
  _exit(status ? status : 1);
}

// For the watchdog: an event recorded after the latest collective, and when. The watchdog thread
// queries it (the CUDA runtime is thread-safe); a collective still unfinished after the timeout
// means a peer never joined it.
static struct {
  pthread_mutex_t lock;
  cudaEvent_t event;
  double when;  // 0: nothing pending
} g_last = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void note_collective(cudaStream_t s) {
  pthread_mutex_lock(&g_last.lock);
  cudaCheck(cudaEventRecord(g_last.event, s));
  g_last.when = now_seconds();
  pthread_mutex_unlock(&g_last.lock);
}

int dist_nccl_poll(void *user, double timeout, char *why) {
  ProcessGroup *pg = user;
  ncclResult_t r = ncclSuccess;
  if (ncclCommGetAsyncError((ncclComm_t)pg->nccl, &r) == ncclSuccess && r != ncclSuccess &&
      r != ncclInProgress) {
    snprintf(why, 256, "NCCL reported an asynchronous error: %s", ncclGetErrorString(r));
    return 1;
  }
  pthread_mutex_lock(&g_last.lock);
  int stuck = 0;
  if (g_last.when > 0) {
    cudaError_t q = cudaEventQuery(g_last.event);
    if (q == cudaSuccess) {
      g_last.when = 0;
    } else if (q == cudaErrorNotReady && now_seconds() - g_last.when > timeout) {
      snprintf(why, 256, "an NCCL collective has not finished after %g s (--timeout): a peer is "
               "stuck, dead, or calling other collectives", timeout);
      stuck = 1;
    }
  }
  pthread_mutex_unlock(&g_last.lock);
  return stuck;
}

void dist_nccl_abort(void *user) {
  ProcessGroup *pg = user;
  if (pg->nccl) ncclCommAbort((ncclComm_t)pg->nccl);
}

static ncclDataType_t nccl_type(DistType t) {
  return t == DIST_DOUBLE ? ncclFloat64 : t == DIST_INT ? ncclInt32 : ncclFloat32;
}

static cudaStream_t stream(const ProcessGroup *pg) { return (cudaStream_t)pg->ctx->stream; }

// Environment launch: every rank points NCCL_COMM_ID at MASTER_ADDR and the port after MASTER_PORT
// (torchrun's store already listens on MASTER_PORT), or at DDP_NCCL_PORT when set.
static void set_comm_id_from_env(const ProcessGroup *pg) {
  if (getenv("NCCL_COMM_ID")) return;  // the user chose one
  const char *addr = getenv("MASTER_ADDR"), *port = getenv("MASTER_PORT");
  const char *nccl_port = getenv("DDP_NCCL_PORT");
  if (!addr || (!port && !nccl_port))
    die(1, "rank %d of %d: set MASTER_ADDR and MASTER_PORT (the address and a free port of rank 0's "
           "node) so that NCCL can bootstrap", pg->rank, pg->world_size);
  char id[512];
  int p = nccl_port ? atoi(nccl_port) : atoi(port) + 1;
  if (p <= 0 || p > 65535) die(1, "NCCL bootstrap port %d is not a valid port", p);
  snprintf(id, sizeof id, "%s:%d", addr, p);
  setenv("NCCL_COMM_ID", id, 1);
}

void dist_nccl_connect(ProcessGroup *pg) {
  cudaCheck(cudaSetDevice(pg->ctx->gpu));  // NCCL binds the communicator to the current GPU
  ncclUniqueId id;
  if (pg->launcher == LAUNCH_MPI) {
    if (pg->rank == 0) ncclCheck(ncclGetUniqueId(&id));
    dist_mpi_broadcast_bytes(&id, sizeof id, 0);
  } else {
    if (pg->world_size > 1) set_comm_id_from_env(pg);
    ncclCheck(ncclGetUniqueId(&id));  // with NCCL_COMM_ID set, the same id on every rank
  }
  ncclComm_t comm;
  ncclCheck(ncclCommInitRank(&comm, pg->world_size, id, pg->rank));
  pg->nccl = comm;
  g_comm = comm;
  pg->scratch = dev_alloc(pg->ctx, sizeof(int));
  pg->comm_stream = dev_stream_create(pg->ctx);  // for collectives that overlap computation
  cudaCheck(cudaEventCreateWithFlags(&g_last.event, cudaEventDisableTiming));
  if (!pg->mpi_up) check_set_abort(nccl_abort);
}

void dist_nccl_all_reduce_on(ProcessGroup *pg, void *buf, size_t n, DistType type, DistOp op,
                             void *on) {
  ncclCheck(ncclAllReduce(buf, buf, n, nccl_type(type), op == DIST_AVG ? ncclAvg : ncclSum,
                          (ncclComm_t)pg->nccl, (cudaStream_t)on));
  note_collective((cudaStream_t)on);
}

void dist_nccl_all_reduce(ProcessGroup *pg, void *buf, size_t n, DistType type, DistOp op) {
  dist_nccl_all_reduce_on(pg, buf, n, type, op, stream(pg));
}

void dist_nccl_broadcast(ProcessGroup *pg, void *buf, size_t n, DistType type, int root) {
  ncclCheck(ncclBroadcast(buf, buf, n, nccl_type(type), root, (ncclComm_t)pg->nccl, stream(pg)));
  note_collective(stream(pg));
}

void dist_nccl_all_gather(ProcessGroup *pg, const void *send, void *recv, size_t n, DistType type) {
  ncclCheck(ncclAllGather(send, recv, n, nccl_type(type), (ncclComm_t)pg->nccl, stream(pg)));
  note_collective(stream(pg));
}

void dist_nccl_barrier(ProcessGroup *pg) {
  dist_nccl_all_reduce(pg, pg->scratch, 1, DIST_INT, DIST_SUM);
  cudaCheck(cudaStreamSynchronize(stream(pg)));
}

void dist_nccl_destroy(ProcessGroup *pg) {
  cudaCheck(cudaStreamSynchronize(stream(pg)));
  dev_stream_free(pg->ctx, pg->comm_stream);
  cudaCheck(cudaEventDestroy(g_last.event));
  dev_free(pg->ctx, pg->scratch);
  ncclCheck(ncclCommDestroy((ncclComm_t)pg->nccl));
  g_comm = NULL;
  pg->nccl = NULL;
}
