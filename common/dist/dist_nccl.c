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
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "devmem.h"
#include "dist_backend.h"
#include "log.h"
#include "ops.h"
#include "store.h"
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
// A recoverable group (step 09) needs a non-blocking communicator (ncclConfig_t, NCCL >= 2.14).
#define HEADER_HAS_NONBLOCKING (NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0))

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

// A recoverable group (dist_set_recoverable, step 09): a failed collective does not end the job. The
// communicator is aborted (ncclCommAbort: its queued and running work ends, kernels included) and
// forgotten (pg->nccl NULL), the first reason is kept for dist_failure(), and every later collective
// returns at once, until dist_reconnect() makes a new communicator. The abort may come from the
// watchdog's thread (a collective that never finishes) while the main thread uses the communicator:
// the main thread holds the lock around every NCCL call on it (from dist_group_start() to
// dist_group_end() for a group), and the watchdog aborts only when it gets the lock.
static struct {
  pthread_mutex_t lock;
  char failed[256];  // "" while the group works
  int depth;         // ncclGroupStart() calls not yet ended (the caller's and reduce_per_root's)
  ncclComm_t dying;  // the communicator being aborted, for abort_dying()
} g_live = {.lock = PTHREAD_MUTEX_INITIALIZER};

static const char *last_error(void) {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 13, 0)
  const char *last = ncclGetLastError(NULL);
  return last ? last : "";
#else
  return "";
#endif
}

// On a thread of its own (watchdog_call_bounded): the recoverable group's abort. Nothing to check:
// the job goes on without that communicator.
static void abort_dying(void *user) {
  const ProcessGroup *pg = user;
  (void)cudaSetDevice(pg->ctx->gpu);
  (void)ncclCommAbort(g_live.dying);
}

// Aborts and forgets the communicator (g_live.lock held). ncclCommAbort can hang when peers are dead:
// after WATCHDOG_ABORT_S it is left to its thread, and the next group gets a new communicator.
static void abort_locked(ProcessGroup *pg) {
  if (!pg->nccl) return;
  g_live.dying = (ncclComm_t)pg->nccl;
  pg->nccl = NULL;
  if (!watchdog_call_bounded(abort_dying, pg, WATCHDOG_ABORT_S))
    fprintf(stderr,
            "warning: rank %d: ncclCommAbort has not returned after %g s; its communicator is left behind\n",
            pg->rank, WATCHDOG_ABORT_S);
}

// The group failed (g_live.lock held): the first reason is kept. Inside an NCCL group the abort waits
// for its ncclGroupEnd (group_close), which must not find its communicator freed.
static void fail_locked(ProcessGroup *pg, const char *why) {
  if (!g_live.failed[0]) snprintf(g_live.failed, sizeof g_live.failed, "%s", why);
  if (g_live.depth == 0) abort_locked(pg);
}

// Waits while @p comm's last call goes on in the background (a non-blocking communicator answered
// ncclInProgress): until ncclCommGetAsyncError says otherwise, or @p limit_s seconds (0: no limit of
// its own; the caller is under the watchdog's --timeout). Returns ncclInProgress when it ran out.
static ncclResult_t settle(ncclComm_t comm, double limit_s) {
#if HEADER_HAS_NONBLOCKING
  double t0 = log_clock();
  ncclResult_t state = ncclInProgress;
  while (state == ncclInProgress && !(limit_s > 0 && log_clock() - t0 > limit_s)) {
    ncclResult_t r = ncclCommGetAsyncError(comm, &state);
    if (r != ncclSuccess) return r;
    if (state == ncclInProgress) nanosleep(&(struct timespec){0, 1000000}, NULL);
  }
  return state;
#else
  (void)comm, (void)limit_s;
  return ncclSuccess;  // no call answers ncclInProgress before NCCL 2.14
#endif
}

// The end of the host side of an NCCL call on the communicator (ENQUEUE): true when it was queued.
// A recoverable group's non-blocking communicator may answer ncclInProgress: the next call must wait
// for it (settle), at most --ft_op_timeout. An error ends the job, naming the rank, the call and
// NCCL's reason; in a recoverable group it fails the group instead (fail_locked).
static bool queued(ProcessGroup *pg, ncclResult_t r, const char *what, const char *call, const char *file,
                   int line) {
  if (IN_PROGRESS(r)) r = settle((ncclComm_t)pg->nccl, pg->op_timeout);
  watchdog_leave();
  if (r == ncclSuccess) return true;
  if (!pg->recoverable) nccl_check_impl(r, call, file, line);  // ends the job
  char why[256];
  if (IN_PROGRESS(r))
    snprintf(why, sizeof why, "%s: still in progress after %g s (--ft_op_timeout)", what, pg->op_timeout);
  else
    snprintf(why, sizeof why, "%s: %s%s%s", what, ncclGetErrorString(r), *last_error() ? ": " : "",
             last_error());
  fail_locked(pg, why);
  return false;
}

// The host side of an NCCL call that talks to the peers, announced to the watchdog; true when it was
// queued. The watchdog's poll (below) only sees a collective once its call has returned and queued it;
// but the call itself can block: since NCCL 2.22 the first collective of each algorithm connects its
// peers inside the call (NCCL_RUNTIME_CONNECT=1, a loop of bootstrap messages with no timeout), and
// ncclGroupEnd launches a whole group. A peer that never reaches the collective then ends this rank
// after the timeout instead of hanging it.
#define ENQUEUE(pg, what, call) \
  (watchdog_enter(what " (NCCL host call)"), queued((pg), (call), what, #call, __FILE__, __LINE__))

// The start of a call that uses the communicator (main thread): false, nothing to do, when there is
// none (a failed group). While true, the lock is held: taken by the outermost call, so a group of
// collectives holds it from its ncclGroupStart to its ncclGroupEnd; leave() gives it back.
static bool enter(ProcessGroup *pg) {
  if (g_live.depth == 0) pthread_mutex_lock(&g_live.lock);
  if (pg->nccl && !g_live.failed[0]) return true;
  if (g_live.depth == 0) pthread_mutex_unlock(&g_live.lock);
  return false;
}

static void leave(void) {
  if (g_live.depth == 0) pthread_mutex_unlock(&g_live.lock);
}

// An NCCL group opened and closed (the caller's, or reduce_per_root's own): a failure inside it aborts
// the communicator once the outermost one is closed.
static bool group_open(ProcessGroup *pg) {
  if (!ENQUEUE(pg, "ncclGroupStart", ncclGroupStart())) return false;
  g_live.depth++;
  return true;
}

static bool group_close(ProcessGroup *pg) {
  bool ok = ENQUEUE(pg, "ncclGroupEnd", ncclGroupEnd());
  if (--g_live.depth == 0 && g_live.failed[0]) abort_locked(pg);
  return ok;
}

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

// The latest collective: 0 while it runs in time, or is done; 1 when it has not finished after the
// timeout (a recoverable group's: --ft_op_timeout); 2 when CUDA reported an error. @p why says which.
static int late_collective(const ProcessGroup *pg, double timeout, char *why) {
  pthread_mutex_lock(&g_last.lock);
  int stuck = 0;
  if (g_last.when > 0) {
    cudaError_t q = cudaEventQuery(g_last.event);
    if (q == cudaSuccess) {
      g_last.when = 0;
    } else if (q == cudaErrorNotReady) {
      // the grace after a signal counts from the signal
      bool late =
          pg->recoverable ? log_clock() - g_last.when > pg->op_timeout : watchdog_overdue(g_last.when);
      if (late) {
        snprintf(why, 256,
                 "an NCCL collective has not finished after %g s (%s): a peer is "
                 "stuck, dead, or calling other collectives",
                 pg->recoverable ? pg->op_timeout : timeout,
                 pg->recoverable ? "--ft_op_timeout" : "--timeout");
        stuck = 1;
      }
    } else {  // e.g. a kernel's illegal address: sticky, every later CUDA call fails too; end now
      snprintf(why, 256, "CUDA reported %s (%s) while an NCCL collective was in flight", cudaGetErrorName(q),
               cudaGetErrorString(q));
      stuck = 2;
    }
  }
  pthread_mutex_unlock(&g_last.lock);
  return stuck;
}

// A recoverable group's poll: an asynchronous error, or a collective late past --ft_op_timeout, fails
// the group instead of ending the job; a CUDA error still ends it. Skipped while the main thread holds
// the lock: it is in an NCCL call, whose wait it bounds itself (queued), or in a group.
static int poll_recoverable(ProcessGroup *pg, double timeout, char *why) {
  if (pthread_mutex_trylock(&g_live.lock) != 0) return 0;
  char text[256] = "";
  int late = 0;
  ncclResult_t r = ncclSuccess;
  if (pg->nccl && !g_live.failed[0]) {
    if (ncclCommGetAsyncError((ncclComm_t)pg->nccl, &r) == ncclSuccess && r != ncclSuccess && !IN_PROGRESS(r))
      snprintf(text, sizeof text, "NCCL reported an asynchronous error: %s", ncclGetErrorString(r));
    else if ((late = late_collective(pg, timeout, text)) == 2)
      snprintf(why, 256, "%s", text);
  }
  if (text[0] && late != 2) fail_locked(pg, text);
  pthread_mutex_unlock(&g_live.lock);
  return late == 2;
}

static int dist_nccl_poll(void *user, double timeout, char *why) {
  ProcessGroup *pg = user;
  if (pg->recoverable) return poll_recoverable(pg, timeout, why);
  ncclResult_t r = ncclSuccess;
  if (ncclCommGetAsyncError((ncclComm_t)pg->nccl, &r) == ncclSuccess && r != ncclSuccess && !IN_PROGRESS(r)) {
    snprintf(why, 256, "NCCL reported an asynchronous error: %s", ncclGetErrorString(r));
    return 1;
  }
  return late_collective(pg, timeout, why) != 0;
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

// Before the first communicator: its GPU, the library's version and what it offers.
static void prepare_library(ProcessGroup *pg) {
  g_pg = pg;
  cudaCheck(cudaSetDevice(pg->ctx->gpu));  // NCCL binds the communicator to the current GPU
  limit_ctas_if_shared(pg);
  int version = 0;
  ncclCheck(ncclGetVersion(&version));
  g_version = version;
  g_have_avg = HEADER_HAS_AVG && version >= NCCL_VERSION(2, 10, 0) && !getenv("DDP_NCCL_NO_AVG");
}

// What every communicator of this process shares (a recoverable group's too, from one to the next).
static void prepare_resources(ProcessGroup *pg) {
  pg->scratch = dev_alloc(pg->ctx, sizeof(int));
  pg->comm_stream = dev_stream_create(pg->ctx);  // for collectives that overlap computation
  cudaCheck(cudaEventCreateWithFlags(&g_last.event, cudaEventDisableTiming));
}

// Creates the communicator. @p share: NULL when NCCL_COMM_ID gives every rank the same unique id (an
// environment launch); else a function that copies rank 0's id to every rank (over MPI under mpirun).
static void nccl_connect_with(ProcessGroup *pg, void (*share)(void *id, size_t size)) {
  prepare_library(pg);
  int version = g_version;
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
  prepare_resources(pg);
  if (!pg->mpi_up) check_set_abort(nccl_abort);
}

// Not connected (yet), or a failed recoverable group: no group to open, and dist_group_end() closes none.
static void dist_nccl_group_start(ProcessGroup *pg) {
  if (g_live.depth == 0 && !enter(pg)) return;  // (nested: opened, so that each end closes its own)
  if (group_open(pg)) g_group.depth++;
  leave();  // (held until the group's end once it is open)
}

static void dist_nccl_group_end(ProcessGroup *pg) {
  if (g_group.depth == 0) return;
  bool ok = group_close(pg);
  if (--g_group.depth == 0 && g_group.stream) {
    cudaStream_t s = g_group.stream;
    g_group.stream = NULL;
    for (int i = 0; ok && i < g_group.n_scale; i++)
      divide_by_world(pg, g_group.scale[i].buf, g_group.scale[i].n, s);
    g_group.n_scale = 0;
    if (ok) note_collective(s);
  }
  leave();
}

// NCCL's reduction for @p op: ncclAvg where available, else ncclSum (then the caller divides).
static ncclRedOp_t reduction(DistOp op) {
#if HEADER_HAS_AVG
  if (op == DIST_AVG && g_have_avg) return ncclAvg;
#endif
  (void)op;
  return ncclSum;
}

// The collectives' bodies (the lock held: see enter()).
static void dist_nccl_all_reduce_on(ProcessGroup *pg, void *buf, size_t n, DistType type, DistOp op,
                                    void *on) {
  ncclRedOp_t red = reduction(op);
  if (!ENQUEUE(pg, "ncclAllReduce",
               ncclAllReduce(buf, buf, n, nccl_type(type), red, (ncclComm_t)pg->nccl, (cudaStream_t)on)))
    return;
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
static bool reduce_per_root(ProcessGroup *pg, const void *send, void *recv, const size_t *counts,
                            DistType type, ncclRedOp_t red, cudaStream_t on) {
  size_t size = dist_type_size(type), offset = 0;
  if (!group_open(pg)) return false;
  bool ok = true;
  for (int j = 0; ok && j < pg->world_size; offset += counts[j++])
    if (counts[j] > 0)
      ok = ENQUEUE(pg, "ncclReduce",
                   ncclReduce((const char *)send + offset * size, recv, counts[j], nccl_type(type), red, j,
                              (ncclComm_t)pg->nccl, on));
  return group_close(pg) && ok;  // closed even after a failure inside
}

static void dist_nccl_reduce_scatter_on(ProcessGroup *pg, const void *send, void *recv, const size_t *counts,
                                        DistType type, DistOp op, void *stream) {
  // In a caller's group, the division below and the watchdog's event would precede the collectives.
  if (g_group.depth > 0) die(1, "dist_reduce_scatter_async: not allowed inside dist_group_start()");
  cudaStream_t on = (cudaStream_t)stream;
  ncclRedOp_t red = reduction(op);
  bool ok;
  if (dist_counts_equal(counts, pg->world_size)) {
    ok = ENQUEUE(pg, "ncclReduceScatter",
                 ncclReduceScatter(send, recv, counts[0], nccl_type(type), red, (ncclComm_t)pg->nccl, on));
  } else {
    ok = reduce_per_root(pg, send, recv, counts, type, red, on);
  }
  if (!ok) return;
  if (op == DIST_AVG && red == ncclSum && counts[pg->rank] > 0)
    divide_by_world(pg, recv, counts[pg->rank], on);
  note_collective(on);
}

// In place when send == recv + rank·n: NCCL then sends from where the rank's part already lies.
static void dist_nccl_all_gather_on(ProcessGroup *pg, const void *send, void *recv, size_t n, DistType type,
                                    cudaStream_t on) {
  if (ENQUEUE(pg, "ncclAllGather", ncclAllGather(send, recv, n, nccl_type(type), (ncclComm_t)pg->nccl, on)))
    note_collective(on);
}

// The entry points: each returns at once when the group has failed (enter()).
static void dist_nccl_all_reduce(ProcessGroup *pg, void *buf, size_t n, DistType type, DistOp op) {
  if (!enter(pg)) return;
  dist_nccl_all_reduce_on(pg, buf, n, type, op, stream(pg));
  leave();
}

static void dist_nccl_broadcast(ProcessGroup *pg, void *buf, size_t n, DistType type, int root) {
  if (!enter(pg)) return;
  if (ENQUEUE(pg, "ncclBroadcast",
              ncclBroadcast(buf, buf, n, nccl_type(type), root, (ncclComm_t)pg->nccl, stream(pg))))
    note_collective(stream(pg));
  leave();
}

static void dist_nccl_all_gather(ProcessGroup *pg, const void *send, void *recv, size_t n, DistType type) {
  if (g_group.depth > 0) die(1, "dist_all_gather: not allowed inside dist_group_start()");
  if (!enter(pg)) return;
  dist_nccl_all_gather_on(pg, send, recv, n, type, stream(pg));
  leave();
}

static void dist_nccl_barrier(ProcessGroup *pg) {
  if (!enter(pg)) return;
  dist_nccl_all_reduce_on(pg, pg->scratch, 1, DIST_INT, DIST_SUM, stream(pg));
  leave();
  WATCHDOG_WAIT("the NCCL barrier (cudaStreamSynchronize)", cudaCheck(cudaStreamSynchronize(stream(pg))));
}

// A recoverable group's communicator is non-blocking: ncclCommFinalize goes on in the background, and
// ncclCommDestroy only after it.
static void destroy_comm(ProcessGroup *pg) {
  ncclComm_t comm = (ncclComm_t)pg->nccl;
#if HEADER_HAS_NONBLOCKING
  if (pg->recoverable) {
    ncclResult_t r = ncclCommFinalize(comm);
    nccl_check_impl(IN_PROGRESS(r) ? settle(comm, 0) : r, "ncclCommFinalize", __FILE__, __LINE__);
  }
#endif
  ncclCheck(ncclCommDestroy(comm));
  pg->nccl = NULL;
}

static void dist_nccl_destroy(ProcessGroup *pg) {
  if (!pg->scratch) return;  // never connected (a failed recoverable group has lost only its communicator)
  watchdog_enter("the NCCL shutdown (last collectives, ncclCommDestroy)");
  cudaCheck(cudaStreamSynchronize(stream(pg)));
  dev_stream_free(pg->ctx, pg->comm_stream);
  cudaCheck(cudaEventDestroy(g_last.event));
  dev_free(pg->ctx, pg->scratch);
  if (pg->nccl) destroy_comm(pg);
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

// A failed group's asynchronous collective: done at once, its events recorded on the compute stream.
static bool skipped(ProcessGroup *pg, DistWork *w) {
  if (enter(pg)) return false;
  dev_event_record(pg->ctx, &w->start, NULL);
  dev_event_record(pg->ctx, &w->end, NULL);
  return true;
}

static void dist_nccl_all_reduce_start(ProcessGroup *pg, DistWork *w) {
  if (skipped(pg, w)) return;
  cudaStream_t on = comm_stream_begin(pg, w);
  dist_nccl_all_reduce_on(pg, w->buf, w->n, w->type, w->op, on);
  dev_event_record(pg->ctx, &w->end, on);
  leave();
}

static void dist_nccl_reduce_scatter_start(ProcessGroup *pg, void *send, const size_t *counts, DistWork *w) {
  if (skipped(pg, w)) return;
  cudaStream_t on = comm_stream_begin(pg, w);
  dist_nccl_reduce_scatter_on(pg, send, w->buf, counts, w->type, w->op, on);
  dev_event_record(pg->ctx, &w->end, on);
  leave();
}

static void dist_nccl_all_gather_start(ProcessGroup *pg, const void *send, DistWork *w) {
  // In a caller's group the watchdog's event would precede the collective.
  if (g_group.depth > 0) die(1, "dist_all_gather_async: not allowed inside dist_group_start()");
  if (skipped(pg, w)) return;
  cudaStream_t on = comm_stream_begin(pg, w);
  dist_nccl_all_gather_on(pg, send, w->buf, w->n / (size_t)pg->world_size, w->type, on);
  dev_event_record(pg->ctx, &w->end, on);
  leave();
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

// ---- live recovery (step 09): a recoverable group rebuilt in the same process ----------------------------
//
// Path A, built here (NCCL >= 2.14): every group gets a new non-blocking communicator, its unique id
// passed through the store that the lighthouse serves. Path B is not built: NCCL >= 2.27's
// ncclCommShrink(old, excluded ranks, ...) makes the smaller group from the old communicator without a
// new bootstrap, when the new quorum only lost members. It would need what DistMeeting does not carry:
// this process's rank in the old group and the old ranks of the members lost (every survivor must pass
// the same list), and whether the new quorum holds no newcomer; the new ranks would be NCCL's (the
// survivors in their old order), which must then be the quorum's too. It also needs the old
// communicator alive: a failed group would be revoked (ncclCommRevoke, NCCL 2.28) rather than aborted.

// Why the group failed, NULL while it works. NCCL's collectives run on the GPU after their call has
// returned: a step's collectives have succeeded only once they have finished, so this waits for the
// latest one (under the watchdog's --timeout). A stuck one is aborted by the watchdog's poll after
// --ft_op_timeout, which ends it (and the wait) as failed.
static const char *dist_nccl_failure(ProcessGroup *pg) {
  if (g_group.depth > 0) return g_live.failed[0] ? g_live.failed : NULL;  // (the lock is ours already)
  const char *failure = NULL;
  watchdog_enter("the recoverable group's last collective (dist_failure)");
  for (;;) {
    pthread_mutex_lock(&g_live.lock);
    failure = g_live.failed[0] ? g_live.failed : NULL;  // set once; kept until the next group
    bool connected = pg->nccl != NULL;
    pthread_mutex_unlock(&g_live.lock);
    pthread_mutex_lock(&g_last.lock);
    bool done = g_last.when == 0 || cudaEventQuery(g_last.event) == cudaSuccess;
    pthread_mutex_unlock(&g_last.lock);
    if (failure || done || !connected) break;
    nanosleep(&(struct timespec){0, 1000000}, NULL);
  }
  watchdog_leave();
  return failure;
}

// The new group's unique id: rank 0's, through the store at m->host:m->port under `<prefix>nccl_id`
// (a group of one makes its own). dist_init set NCCL_COMM_ID for an environment launch, to
// MASTER_ADDR:MASTER_PORT + 1, which under scripts/launch.sh --ft is the lighthouse's store; and each
// group needs a root of its own: without the variable, ncclGetUniqueId starts one on a free port.
static ncclUniqueId meet(ProcessGroup *pg, const DistMeeting *m) {
  unsetenv("NCCL_COMM_ID");
  ncclUniqueId id;
  if (m->world_size == 1) {
    ncclCheck(ncclGetUniqueId(&id));
    return id;
  }
  double wait_s = m->timeout_s > 0 ? m->timeout_s : pg->timeout;  // step 09: --ft_quorum_timeout
  Store *s = store_connect(m->host, m->port, m->rank, m->world_size, wait_s);
  char key[128];
  snprintf(key, sizeof key, "%snccl_id", m->prefix);
  if (m->rank == 0) {
    ncclCheck(ncclGetUniqueId(&id));
    store_set(s, key, &id, sizeof id);
  } else {
    size_t n = 0;
    void *value = store_get(s, key, wait_s, &n);
    if (n != sizeof id)
      die(1, "rank %d: the store's %s holds %zu bytes, not an NCCL unique id (%zu)", pg->rank, key, n,
          sizeof id);
    memcpy(&id, value, sizeof id);
    free(value);
  }
  store_close(s);
  return id;
}

// Leaves the group (aborts its communicator: NCCL tells no peer, whose collectives fail at their
// --ft_op_timeout) and, with @p m, joins the new one with a new non-blocking communicator. A group of
// one has a communicator too (dist.c's solo() is never true on NCCL: every collective calls here).
// A new group that cannot be made ends the job, as on Gloo.
static void dist_nccl_reconnect(ProcessGroup *pg, const DistMeeting *m) {
  pthread_mutex_lock(&g_live.lock);
  abort_locked(pg);
  pthread_mutex_unlock(&g_live.lock);
  if (!m) return;  // dist_abandon()
#if HEADER_HAS_NONBLOCKING
  bool first = !pg->scratch;
  if (first) {
    prepare_library(pg);
    if (g_version < NCCL_VERSION(2, 14, 0))
      die(2,
          "rank %d: live recovery over NCCL needs NCCL >= 2.14 (non-blocking communicators); the loaded NCCL "
          "is %s",
          pg->rank, dist_nccl_version());
    setenv("NCCL_RUNTIME_CONNECT", "0", 0);  // the peers connected inside the init (nccl_connect_with)
    prepare_resources(pg);
  }
  ncclUniqueId id = meet(pg, m);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // calls return at once (ncclInProgress): a dead peer cannot block this thread
  ncclComm_t comm = NULL;
  watchdog_enter("a new NCCL group (ncclCommInitRankConfig: every member must join)");
  ncclResult_t r = ncclCommInitRankConfig(&comm, m->world_size, id, m->rank, &config);
  if (r == ncclInProgress) r = settle(comm, 0);
  watchdog_leave();
  if (r != ncclSuccess) explain_init_failure(pg, r, g_version);
  ncclCheck(r);
  pthread_mutex_lock(&g_live.lock);
  pg->nccl = comm;
  g_live.failed[0] = 0;
  pthread_mutex_unlock(&g_live.lock);
  pthread_mutex_lock(&g_last.lock);
  g_last.when = 0;  // the old group's last collective is no longer watched
  pthread_mutex_unlock(&g_last.lock);
  if (!pg->mpi_up) check_set_abort(nccl_abort);
  // The poll is what fails a group whose peer froze: started whatever the launcher.
  if (first) watchdog_start(pg->timeout, dist_nccl_poll, dist_nccl_bind, dist_nccl_abort, pg);
#else
  die(2,
      "rank %d: live recovery over NCCL needs NCCL >= 2.14 (non-blocking communicators); this program was "
      "built with NCCL %d's header",
      pg->rank, NCCL_VERSION_CODE);
#endif
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
      .failure = dist_nccl_failure,
      .reconnect = dist_nccl_reconnect,
  };
  return &ops;
}
