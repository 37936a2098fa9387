// dist_nccl.c: the NCCL backend, whose operations dist.c calls through the table dist_nccl_ops() (at
// the end). Collectives are queued on the context's compute stream, so they are ordered after the
// kernels that produced their input and before those that consume the result, with no host
// synchronisation; the asynchronous ones on the communication stream, after the work queued so far on
// the compute stream.
#define _POSIX_C_SOURCE 200809L
#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "devmem.h"
#include "dist_backend.h"
#include "log.h"
#include "ops.h"
#include "watchdog.h"

// Older NCCL headers lack NCCL_VERSION; ncclAvg needs 2.10, ncclGetLastError 2.13.
#ifndef NCCL_VERSION
#define NCCL_VERSION(X, Y, Z) ((X)*1000 + (Y)*100 + (Z))
#endif
#define HEADER_HAS_AVG (NCCL_VERSION_CODE >= NCCL_VERSION(2, 10, 0))

// ncclInProgress (non-blocking communicators) came with NCCL 2.14; before it no call reports it.
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0)
#define IN_PROGRESS(r) ((r) == ncclInProgress)
#else
#define IN_PROGRESS(r) false
#endif

// bfloat16 is NCCL's type 9 from 2.10 on, but before 2.24 its header declares ncclBfloat16 only where
// cuda_bf16.h defines __CUDA_BF16_TYPES_EXIST__, which it does for C++ and not for C: the value is the
// library's (its ABI), so use it where the header hides the name. A library older than 2.10 has no
// bfloat16 at all: nccl_type() refuses it at run time.
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 24, 0) || defined(__CUDA_BF16_TYPES_EXIST__)
#define NCCL_BF16 ncclBfloat16
#else
#define NCCL_BF16 ((ncclDataType_t)9)
#endif
#define LIBRARY_HAS_BF16(version) ((version) >= NCCL_VERSION(2, 10, 0))

void nccl_check_impl(int result, const char *call, const char *file, int line) {
  if (result == ncclSuccess) return;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 13, 0)
  const char *last = ncclGetLastError(NULL);
#else
  const char *last = "";
#endif
  check_fail("NCCL", file, line, "%s: %s%s%s", call, ncclGetErrorString((ncclResult_t)result),
             last && *last ? ": " : "", last ? last : "");
}

static ProcessGroup *g_pg;  // for the abort hook, which takes no arguments

// The host side of an NCCL call that talks to the peers, announced to the watchdog. The watchdog's
// poll (below) only sees a collective once its call has returned and queued it; but the call itself
// can block: since NCCL 2.22 the first collective of each algorithm connects its peers inside the
// call (NCCL_RUNTIME_CONNECT=1, a loop of bootstrap messages with no timeout), and ncclGroupEnd
// launches a whole group. A peer that never reaches the collective then ends this rank after the
// timeout instead of hanging it.
#define ENQUEUE(what, call) WATCHDOG_WAIT(what " (NCCL host call)", ncclCheck(call))

static void dist_nccl_bind(void *user) {
  const ProcessGroup *pg = user;
  cudaCheck(cudaSetDevice(pg->ctx->gpu));  // this thread's CUDA calls go to the rank's GPU
}

// On a thread of its own (watchdog_call_bounded): select the GPU, then abort. No check: the job is
// already ending, and a failure here must not start a second ending.
static void abort_comm(void *user) {
  const ProcessGroup *pg = user;
  (void)cudaSetDevice(pg->ctx->gpu);
  (void)ncclCommAbort((ncclComm_t)pg->nccl);
}

// Without mpirun: abort this rank's communicator (its queued NCCL work) and exit. ncclCommAbort can
// hang when peers are dead, so it gets at most WATCHDOG_ABORT_S seconds. NCCL does not tell the
// peers; the launcher stops them when this process exits with an error (see dist.h).
static void nccl_abort(int status) {
  if (g_pg && g_pg->nccl) watchdog_call_bounded(abort_comm, g_pg, WATCHDOG_ABORT_S);
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

// Inside a group (dist_group_start) the collectives are only queued at ncclGroupEnd, so what must
// follow them on their stream (the watchdog's event, the division of the DIST_AVG fallback) waits
// for the group's end.
#define MAX_PENDING 64
static struct {
  int depth;            // dist_group_start() calls not yet ended
  cudaStream_t stream;  // the stream of the group's collectives (NULL: none yet)
  int n_scale;          // pending divisions by the world size
  struct {
    float *buf;
    size_t n;
  } scale[MAX_PENDING];
} g_group;

static void note_collective(cudaStream_t s) {
  if (g_group.depth > 0) {
    if (g_group.stream && g_group.stream != s)
      die(1, "dist_group_start: all collectives of a group must use one stream");
    g_group.stream = s;
    return;
  }
  pthread_mutex_lock(&g_last.lock);
  cudaCheck(cudaEventRecord(g_last.event, s));
  g_last.when = log_clock();
  pthread_mutex_unlock(&g_last.lock);
}

// ncclAvg needs NCCL >= 2.10 in the header we compiled with and in the library we loaded; without
// it DIST_AVG is a sum followed by a division by the world size on the same stream (the same
// operations on every rank, so the replicas stay bit-identical). DDP_NCCL_NO_AVG=1 forces the
// fallback, so that a GPU check can run it on a new NCCL.
static bool g_have_avg;

static void divide_by_world(const ProcessGroup *pg, float *buf, size_t n, cudaStream_t on) {
  Ctx c = *pg->ctx;
  c.stream = on;
  ops_scale(&c, buf, n, 1.0f / (float)pg->world_size);  // a CUDA context: ops_scale_cuda
}

static int dist_nccl_poll(void *user, double timeout, char *why) {
  ProcessGroup *pg = user;
  ncclResult_t r = ncclSuccess;
  if (ncclCommGetAsyncError((ncclComm_t)pg->nccl, &r) == ncclSuccess && r != ncclSuccess && !IN_PROGRESS(r)) {
    snprintf(why, 256, "NCCL reported an asynchronous error: %s", ncclGetErrorString(r));
    return 1;
  }
  pthread_mutex_lock(&g_last.lock);
  int stuck = 0;
  if (g_last.when > 0) {
    cudaError_t q = cudaEventQuery(g_last.event);
    if (q == cudaSuccess) {
      g_last.when = 0;
    } else if (q == cudaErrorNotReady) {
      if (watchdog_overdue(g_last.when)) {  // the grace after a signal counts from the signal
        snprintf(why, 256,
                 "an NCCL collective has not finished after %g s (--timeout): a peer is "
                 "stuck, dead, or calling other collectives",
                 timeout);
        stuck = 1;
      }
    } else {  // e.g. a kernel's illegal address: sticky, every later CUDA call fails too; end now
      snprintf(why, 256, "CUDA reported %s (%s) while an NCCL collective was in flight", cudaGetErrorName(q),
               cudaGetErrorString(q));
      stuck = 1;
    }
  }
  pthread_mutex_unlock(&g_last.lock);
  return stuck;
}

static void dist_nccl_abort(void *user) {
  ProcessGroup *pg = user;
  if (pg->nccl) (void)ncclCommAbort((ncclComm_t)pg->nccl);  // bounded and followed by _exit
}

// The loaded library's version (ncclGetVersion), set when the communicator is made.
static int g_version;

static ncclDataType_t nccl_type(DistType t) {
  if (t == DIST_HALF) return ncclFloat16;
  if (t == DIST_BF16 && !LIBRARY_HAS_BF16(g_version))
    die(1,
        "rank %d: a bfloat16 all-reduce (--comm_hook bf16) needs NCCL >= 2.10, and the loaded NCCL is "
        "%d: use --comm_hook fp16, or a newer NCCL",
        check_rank(), g_version);
  if (t == DIST_BF16) return NCCL_BF16;
  return t == DIST_DOUBLE ? ncclFloat64 : t == DIST_INT ? ncclInt32 : ncclFloat32;
}

static cudaStream_t stream(const ProcessGroup *pg) { return (cudaStream_t)pg->ctx->stream; }

// NCCL refuses two ranks on one GPU unless NCCL >= 2.30 is told that this is wanted (its message
// changed in 2.30: dist_nccl_says_gpu_shared); say what to do instead of NCCL's internal message.
static void explain_init_failure(const ProcessGroup *pg, ncclResult_t r, int version) {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 13, 0)
  const char *last = ncclGetLastError(NULL);
#else
  const char *last = "";
#endif
  if (r == ncclInvalidUsage && dist_nccl_says_gpu_shared(last)) {
    const char *visible = getenv("CUDA_VISIBLE_DEVICES");
    die(1,
        "rank %d: several ranks of this node are on the same GPU (GPU %d; %d visible, "
        "CUDA_VISIBLE_DEVICES=%s), and NCCL %d allows one rank per GPU: start at most one rank "
        "per visible GPU, or, with NCCL >= 2.30, set NCCL_MULTI_RANK_GPU_ENABLE=1",
        pg->rank, pg->ctx->gpu, device_cuda_count(), visible ? visible : "unset", version);
  }
}

// Several ranks of this node on one GPU (NCCL >= 2.30, NCCL_MULTI_RANK_GPU_ENABLE=1; more than one
// rank per GPU is refused otherwise): NCCL documents its default resources for up to 2 ranks per GPU
// and warns that running out of them hangs. Each communicator then takes at most 2 CTAs
// (NCCL_MAX_CTAS=2, as scripts/gpu/gpu_check.sh runs them), unless the user chose a value. Set before
// NCCL's first call. (With one GPU per process, each its own, NCCL_MULTI_RANK_GPU_ENABLE=1 would
// limit them too: it is only for ranks that share a GPU.)
// The ranks of one communicator must all decide alike, so the count is one they all read alike: MPI's
// exact one under mpirun, else the launcher's variables (dist_most_ranks_per_node). A plain srun may
// set none of them; then this rank only knows local_rank + 1, which differs between ranks, so nothing
// is set, and a rank that sees sharing says what to do.
static void limit_ctas_if_shared(const ProcessGroup *pg) {
  const char *multi = getenv("NCCL_MULTI_RANK_GPU_ENABLE"), *layout = getenv("SLURM_STEP_TASKS_PER_NODE");
  bool shared = multi && strcmp(multi, "1") == 0;
  int gpus = device_cuda_count();
  int most = pg->launcher == LAUNCH_MPI
                 ? pg->local_size
                 : dist_most_ranks_per_node(getenv("LOCAL_WORLD_SIZE"), getenv("SLURM_NTASKS_PER_NODE"),
                                            layout ? layout : getenv("SLURM_TASKS_PER_NODE"));
  if (getenv("NCCL_MAX_CTAS")) return;
  if (shared && most < 0 && pg->local_rank + 1 > gpus) {
    fprintf(stderr,
            "warning: rank %d: ranks share this node's %d GPU(s), but the launcher does not say how many "
            "ranks each node has (LOCAL_WORLD_SIZE, SLURM_NTASKS_PER_NODE), so NCCL_MAX_CTAS is left "
            "alone on every rank; set NCCL_MAX_CTAS=2 for all of them (NCCL's defaults are for up to 2 "
            "ranks per GPU)\n",
            pg->rank, gpus);
    return;
  }
  if (!dist_nccl_limit_ctas(shared, most, gpus)) return;
  setenv("NCCL_MAX_CTAS", "2", 0);
  log0(
      "nccl: up to %d ranks per node share %d GPU(s): NCCL_MAX_CTAS=2 (NCCL's defaults are for up to 2 "
      "ranks per GPU; set NCCL_MAX_CTAS to choose)\n",
      most, gpus);
}

// Creates the communicator. @p share: NULL when NCCL_COMM_ID gives every rank the same unique id (an
// environment launch); else a function that copies rank 0's id to every rank (over MPI under mpirun).
static void nccl_connect_with(ProcessGroup *pg, void (*share)(void *id, size_t size)) {
  g_pg = pg;
  cudaCheck(cudaSetDevice(pg->ctx->gpu));  // NCCL binds the communicator to the current GPU
  limit_ctas_if_shared(pg);
  int version = 0;
  ncclCheck(ncclGetVersion(&version));
  g_version = version;
  g_have_avg = HEADER_HAS_AVG && version >= NCCL_VERSION(2, 10, 0) && !getenv("DDP_NCCL_NO_AVG");
  ncclUniqueId id;
  if (share) {
    if (pg->rank == 0) ncclCheck(ncclGetUniqueId(&id));
    share(&id, sizeof id);
  } else {
    ncclCheck(ncclGetUniqueId(&id));  // with NCCL_COMM_ID (set by dist_init), the same id everywhere
  }
  // Connect the peers now, inside ncclCommInitRank (watched below, bounded by --timeout), rather than
  // inside the first collective of each algorithm, as NCCL >= 2.22 does by default: a connection made
  // there waits on the peers with no timeout of its own. A user's own setting is kept.
  setenv("NCCL_RUNTIME_CONNECT", "0", 0);
  ncclComm_t comm;
  watchdog_enter("ncclCommInitRank (every rank must join)");
  ncclResult_t r = ncclCommInitRank(&comm, pg->world_size, id, pg->rank);
  watchdog_leave();
  if (r != ncclSuccess) explain_init_failure(pg, r, version);
  ncclCheck(r);
  pg->nccl = comm;
  pg->scratch = dev_alloc(pg->ctx, sizeof(int));
  pg->comm_stream = dev_stream_create(pg->ctx);  // for collectives that overlap computation
  cudaCheck(cudaEventCreateWithFlags(&g_last.event, cudaEventDisableTiming));
  if (!pg->mpi_up) check_set_abort(nccl_abort);
}

static void dist_nccl_group_start(ProcessGroup *pg) {
  if (!pg->nccl) return;  // not connected (yet): no group to open
  ncclCheck(ncclGroupStart());
  g_group.depth++;
}

static void dist_nccl_group_end(ProcessGroup *pg) {
  if (!pg->nccl) return;
  ENQUEUE("ncclGroupEnd", ncclGroupEnd());
  if (--g_group.depth > 0 || !g_group.stream) return;
  cudaStream_t s = g_group.stream;
  g_group.stream = NULL;
  for (int i = 0; i < g_group.n_scale; i++) divide_by_world(pg, g_group.scale[i].buf, g_group.scale[i].n, s);
  g_group.n_scale = 0;
  note_collective(s);
}

// NCCL's reduction for @p op: ncclAvg where available, else ncclSum (then the caller divides).
static ncclRedOp_t reduction(DistOp op) {
#if HEADER_HAS_AVG
  if (op == DIST_AVG && g_have_avg) return ncclAvg;
#endif
  (void)op;
  return ncclSum;
}

static void dist_nccl_all_reduce_on(ProcessGroup *pg, void *buf, size_t n, DistType type, DistOp op,
                                    void *on) {
  ncclRedOp_t red = reduction(op);
  ENQUEUE("ncclAllReduce",
          ncclAllReduce(buf, buf, n, nccl_type(type), red, (ncclComm_t)pg->nccl, (cudaStream_t)on));
  if (op == DIST_AVG && red == ncclSum) {
    if (g_group.depth == 0) {
      divide_by_world(pg, buf, n, (cudaStream_t)on);
    } else if (g_group.n_scale < MAX_PENDING) {
      g_group.scale[g_group.n_scale].buf = buf;
      g_group.scale[g_group.n_scale++].n = n;
    } else {
      die(1, "dist_group_start: more than %d averaged all-reduces in one group", MAX_PENDING);
    }
  }
  note_collective((cudaStream_t)on);
}

// Unequal counts: chunk j is reduced onto rank j (one ncclReduce per rank with a nonzero count, as
// PyTorch does for an uneven reduce_scatter), all launched together in one NCCL group. The receive
// buffer is read by NCCL on the root only.
static void reduce_per_root(ProcessGroup *pg, const void *send, void *recv, const size_t *counts,
                            DistType type, ncclRedOp_t red, cudaStream_t on) {
  size_t size = dist_type_size(type), offset = 0;
  ncclCheck(ncclGroupStart());
  for (int j = 0; j < pg->world_size; offset += counts[j++])
    if (counts[j] > 0)
      ENQUEUE("ncclReduce", ncclReduce((const char *)send + offset * size, recv, counts[j], nccl_type(type),
                                       red, j, (ncclComm_t)pg->nccl, on));
  ENQUEUE("ncclGroupEnd (per-root reduces)", ncclGroupEnd());
}

static void dist_nccl_reduce_scatter_on(ProcessGroup *pg, const void *send, void *recv, const size_t *counts,
                                        DistType type, DistOp op, void *stream) {
  // In a caller's group, the division below and the watchdog's event would precede the collectives.
  if (g_group.depth > 0) die(1, "dist_reduce_scatter_async: not allowed inside dist_group_start()");
  cudaStream_t on = (cudaStream_t)stream;
  ncclRedOp_t red = reduction(op);
  if (dist_counts_equal(counts, pg->world_size)) {
    ENQUEUE("ncclReduceScatter",
            ncclReduceScatter(send, recv, counts[0], nccl_type(type), red, (ncclComm_t)pg->nccl, on));
  } else {
    reduce_per_root(pg, send, recv, counts, type, red, on);
  }
  if (op == DIST_AVG && red == ncclSum && counts[pg->rank] > 0)
    divide_by_world(pg, recv, counts[pg->rank], on);
  note_collective(on);
}

static void dist_nccl_all_reduce(ProcessGroup *pg, void *buf, size_t n, DistType type, DistOp op) {
  dist_nccl_all_reduce_on(pg, buf, n, type, op, stream(pg));
}

static void dist_nccl_broadcast(ProcessGroup *pg, void *buf, size_t n, DistType type, int root) {
  ENQUEUE("ncclBroadcast",
          ncclBroadcast(buf, buf, n, nccl_type(type), root, (ncclComm_t)pg->nccl, stream(pg)));
  note_collective(stream(pg));
}

// In place when send == recv + rank·n: NCCL then sends from where the rank's part already lies.
static void dist_nccl_all_gather_on(ProcessGroup *pg, const void *send, void *recv, size_t n, DistType type,
                                    cudaStream_t on) {
  ENQUEUE("ncclAllGather", ncclAllGather(send, recv, n, nccl_type(type), (ncclComm_t)pg->nccl, on));
  note_collective(on);
}

static void dist_nccl_all_gather(ProcessGroup *pg, const void *send, void *recv, size_t n, DistType type) {
  if (g_group.depth > 0) die(1, "dist_all_gather: not allowed inside dist_group_start()");
  dist_nccl_all_gather_on(pg, send, recv, n, type, stream(pg));
}

static void dist_nccl_barrier(ProcessGroup *pg) {
  dist_nccl_all_reduce(pg, pg->scratch, 1, DIST_INT, DIST_SUM);
  WATCHDOG_WAIT("the NCCL barrier (cudaStreamSynchronize)", cudaCheck(cudaStreamSynchronize(stream(pg))));
}

static void dist_nccl_destroy(ProcessGroup *pg) {
  if (!pg->nccl) return;  // never connected
  watchdog_enter("the NCCL shutdown (last collectives, ncclCommDestroy)");
  cudaCheck(cudaStreamSynchronize(stream(pg)));
  dev_stream_free(pg->ctx, pg->comm_stream);
  cudaCheck(cudaEventDestroy(g_last.event));
  dev_free(pg->ctx, pg->scratch);
  ncclCheck(ncclCommDestroy((ncclComm_t)pg->nccl));
  pg->nccl = NULL;
  g_pg = NULL;
  watchdog_leave();
}

// ---- dist.c's entry points ----------------------------------------------------------------------------

// Under mpirun rank 0's unique id travels over MPI (dist_share_from_rank0); with an environment launch
// NCCL_COMM_ID (set by dist_init) gives every rank the same id. The watchdog (running since dist_init)
// then also polls the communicator; its thread selects this rank's GPU before its first CUDA call, so
// that it makes no CUDA context on GPU 0.
static void dist_nccl_connect(ProcessGroup *pg) {
  nccl_connect_with(pg, pg->launcher == LAUNCH_MPI ? dist_share_from_rank0 : NULL);
  if (pg->launcher != LAUNCH_NONE)
    watchdog_start(pg->timeout, dist_nccl_poll, dist_nccl_bind, dist_nccl_abort, pg);
}

// The communication stream starts after the work queued so far on the compute stream (which wrote the
// collective's input); @p w's start event is recorded there.
static cudaStream_t comm_stream_begin(ProcessGroup *pg, DistWork *w) {
  dev_event_record(pg->ctx, &pg->ready, NULL);
  dev_stream_wait(pg->ctx, pg->comm_stream, &pg->ready);
  dev_event_record(pg->ctx, &w->start, pg->comm_stream);
  return (cudaStream_t)pg->comm_stream;
}

static void dist_nccl_all_reduce_start(ProcessGroup *pg, DistWork *w) {
  cudaStream_t on = comm_stream_begin(pg, w);
  dist_nccl_all_reduce_on(pg, w->buf, w->n, w->type, w->op, on);
  dev_event_record(pg->ctx, &w->end, on);
}

static void dist_nccl_reduce_scatter_start(ProcessGroup *pg, void *send, const size_t *counts, DistWork *w) {
  cudaStream_t on = comm_stream_begin(pg, w);
  dist_nccl_reduce_scatter_on(pg, send, w->buf, counts, w->type, w->op, on);
  dev_event_record(pg->ctx, &w->end, on);
}

static void dist_nccl_all_gather_start(ProcessGroup *pg, const void *send, DistWork *w) {
  // In a caller's group the watchdog's event would precede the collective.
  if (g_group.depth > 0) die(1, "dist_all_gather_async: not allowed inside dist_group_start()");
  cudaStream_t on = comm_stream_begin(pg, w);
  dist_nccl_all_gather_on(pg, send, w->buf, w->n / (size_t)pg->world_size, w->type, on);
  dev_event_record(pg->ctx, &w->end, on);
}

// The streams order an NCCL collective's completion: the host never waits for one.
static bool dist_nccl_test(ProcessGroup *pg, DistWork *w) {
  (void)pg, (void)w;
  return true;
}

// The compute stream waits for the collective's end event; the host does not.
static void dist_nccl_wait(ProcessGroup *pg, DistWork *w) { dev_stream_wait(pg->ctx, NULL, &w->end); }

// A handle needs nothing of NCCL's own: its events (dist.c) are all that the streams need.
static void dist_nccl_work(ProcessGroup *pg, DistWork *w) { (void)pg, (void)w; }

// The loaded library's version as NCCL prints it: its code is major*10000 + minor*100 + patch from
// 2.9 on, major*1000 + minor*100 + patch before.
static const char *dist_nccl_version(void) {
  static char text[32];
  int v = g_version;
  if (v >= 10000)
    snprintf(text, sizeof text, "%d.%d.%d", v / 10000, v / 100 % 100, v % 100);
  else
    snprintf(text, sizeof text, "%d.%d.%d", v / 1000, v / 100 % 10, v % 100);
  return text;
}

const DistBackendOps *dist_nccl_ops(void) {
  static const DistBackendOps ops = {
      .name = "nccl",
      .library = "NCCL",
      .built = true,
      .version = dist_nccl_version,
      .connect = dist_nccl_connect,
      .all_reduce = dist_nccl_all_reduce,
      .all_reduce_start = dist_nccl_all_reduce_start,
      .reduce_scatter_start = dist_nccl_reduce_scatter_start,
      .all_gather = dist_nccl_all_gather,
      .all_gather_start = dist_nccl_all_gather_start,
      .broadcast = dist_nccl_broadcast,
      .barrier = dist_nccl_barrier,
      .test = dist_nccl_test,
      .wait = dist_nccl_wait,
      .work_init = dist_nccl_work,
      .work_free = dist_nccl_work,
      .group_start = dist_nccl_group_start,
      .group_end = dist_nccl_group_end,
      .destroy = dist_nccl_destroy,
  };
  return &ops;
}
