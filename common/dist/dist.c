// dist.c: chapter 04's lesson on, the collectives: what every backend shares (argument checks, the
// group of one process, the in-place forms, the work handles, the sum canary), then a call through the
// backend's table of operations (dist_backend.h: dist_mpi.c, dist_nccl.c, dist_gloo.cc). Chapter 02's
// "who am I" (the launcher, the ranks, the bootstrap address, the backend's choice) is dist_launch.c.
#define _POSIX_C_SOURCE 200809L
#include "dist.h"

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "devmem.h"
#include "dist_backend.h"
#include "dist_have.h"
#include "flight.h"
#include "half.h"
#include "log.h"
#include "placement.h"
#include "watchdog.h"

bool dist_on_gpu(const ProcessGroup *pg) { return pg->ctx && pg->ctx->dev == DEVICE_CUDA; }

void *dist_staging(ProcessGroup *pg, size_t bytes) {
  if (bytes > pg->stage_bytes) {
    dev_sync(pg->ctx);  // an upload from the old buffer may still be queued
    dev_host_free(pg->ctx, pg->stage);
    pg->stage = dev_host_alloc(pg->ctx, bytes);
    pg->stage_bytes = bytes;
  }
  return pg->stage;
}

// ---- the tables ---------------------------------------------------------------------------------------

// The table of @p pg: from dist_init(), or (a process group zeroed by hand or by dist_destroy) its
// backend's. Either way a completed one (dist_backend_complete): every slot is a function to call.
static const DistBackendOps *table(const ProcessGroup *pg) {
  return pg->ops ? pg->ops : dist_backend_ops(pg->backend);
}

// The end of the job, on every rank, because the table that @p call went through (table(pg)) lacks
// @p operation: never another backend's.
__attribute__((noreturn)) static void lacks(const ProcessGroup *pg, const char *call, const char *operation) {
  const DistBackendOps *o = table(pg);
  if (!o->built) die(1, "%s: this program was built without %s", call, o->library);
  die(1, "%s: the %s backend has no %s", call, o->name, operation);
}

// The defaults, one per slot with the slot's signature: what a table that leaves the slot NULL holds
// there once completed. Each slot is called by one public function, which the default names.
static const char *no_version(void) { return NULL; }  // the backend cannot tell
static void no_connect(ProcessGroup *pg) { lacks(pg, "dist_connect", "connect"); }
static void no_all_reduce(ProcessGroup *pg, void *buf, size_t n, DistType type, DistOp op) {
  (void)buf, (void)n, (void)type, (void)op;
  lacks(pg, "dist_all_reduce", "all-reduce");
}
static void no_all_reduce_start(ProcessGroup *pg, DistWork *w) {
  (void)w;
  lacks(pg, "dist_all_reduce_async", "all-reduce-async");
}
static void no_reduce_scatter_start(ProcessGroup *pg, void *send, const size_t *counts, DistWork *w) {
  (void)send, (void)counts, (void)w;
  lacks(pg, "dist_reduce_scatter_async", "reduce-scatter-async");
}
static void no_all_gather(ProcessGroup *pg, const void *send, void *recv, size_t n, DistType type) {
  (void)send, (void)recv, (void)n, (void)type;
  lacks(pg, "dist_all_gather", "all-gather");
}
static void no_all_gather_start(ProcessGroup *pg, const void *send, DistWork *w) {
  (void)send, (void)w;
  lacks(pg, "dist_all_gather_async", "all-gather-async");
}
static void no_broadcast(ProcessGroup *pg, void *buf, size_t n, DistType type, int root) {
  (void)buf, (void)n, (void)type, (void)root;
  lacks(pg, "dist_broadcast", "broadcast");
}
static void no_barrier(ProcessGroup *pg) { lacks(pg, "dist_barrier", "barrier"); }
static bool no_test(ProcessGroup *pg, DistWork *w) {
  (void)w;
  lacks(pg, "dist_test", "test");
}
static void no_wait(ProcessGroup *pg, DistWork *w) {
  (void)w;
  lacks(pg, "dist_wait", "wait");
}
static void no_work_init(ProcessGroup *pg, DistWork *w) {
  (void)w;
  lacks(pg, "dist_work_init", "work-init");
}
static void no_work_free(ProcessGroup *pg, DistWork *w) {
  (void)w;
  lacks(pg, "dist_work_free", "work-free");
}
static void no_group_start(ProcessGroup *pg) { lacks(pg, "dist_group_start", "group-start"); }
static void no_group_end(ProcessGroup *pg) { lacks(pg, "dist_group_end", "group-end"); }
static void no_destroy(ProcessGroup *pg) { lacks(pg, "dist_destroy", "destroy"); }
static const char *no_failure(ProcessGroup *pg) {
  (void)pg;
  return NULL;  // a group that cannot recover never reports a failure: it ends the job
}
static void no_reconnect(ProcessGroup *pg, const DistMeeting *m) {
  (void)m;
  lacks(pg, "dist_reconnect", "reconnect");
}

void dist_backend_complete(DistBackendOps *o) {
  if (!o->version) o->version = no_version;
  if (!o->connect) o->connect = no_connect;
  if (!o->all_reduce) o->all_reduce = no_all_reduce;
  if (!o->all_reduce_start) o->all_reduce_start = no_all_reduce_start;
  if (!o->reduce_scatter_start) o->reduce_scatter_start = no_reduce_scatter_start;
  if (!o->all_gather) o->all_gather = no_all_gather;
  if (!o->all_gather_start) o->all_gather_start = no_all_gather_start;
  if (!o->broadcast) o->broadcast = no_broadcast;
  if (!o->barrier) o->barrier = no_barrier;
  if (!o->test) o->test = no_test;
  if (!o->wait) o->wait = no_wait;
  if (!o->work_init) o->work_init = no_work_init;
  if (!o->work_free) o->work_free = no_work_free;
  if (!o->group_start) o->group_start = no_group_start;
  if (!o->group_end) o->group_end = no_group_end;
  if (!o->destroy) o->destroy = no_destroy;
  if (!o->failure) o->failure = no_failure;
  if (!o->reconnect) o->reconnect = no_reconnect;
}

// The backend's own table in a build that has it; else one of no slot at all, `built` false.
static const DistBackendOps *own(Backend b) {
  static const DistBackendOps without[] = {
      [BACKEND_MPI] = {.name = "mpi", .library = "MPI"},
      [BACKEND_NCCL] = {.name = "nccl", .library = "NCCL"},
      [BACKEND_GLOO] = {.name = "gloo", .library = "Gloo"},
  };
  switch (b) {
    case BACKEND_MPI:
#if HAVE_MPI
      return dist_mpi_ops();
#endif
      break;
    case BACKEND_NCCL:
#if HAVE_NCCL
      return dist_nccl_ops();
#endif
      break;
    case BACKEND_GLOO:
#if HAVE_GLOO
      return dist_gloo_ops();
#endif
      break;
  }
  return &without[b];
}

// Each backend's table, completed once (the first dist_backend_ops(), on whichever thread).
static DistBackendOps completed[BACKEND_GLOO + 1];
static pthread_once_t completed_once = PTHREAD_ONCE_INIT;

static void complete_tables(void) {
  for (int b = 0; b <= BACKEND_GLOO; b++) {
    completed[b] = *own((Backend)b);
    dist_backend_complete(&completed[b]);
  }
}

const DistBackendOps *dist_backend_ops(Backend b) {
  if ((unsigned)b > BACKEND_GLOO) die(1, "dist_backend_ops: no backend %d", (int)b);
  pthread_once(&completed_once, complete_tables);
  return &completed[b];
}

// Every entry point from here on starts with check_stop_if_ending(): once an abort is under way (the
// watchdog's thread may be aborting the communicator), this thread starts no collective.

// A group of one process (the MPI backend without an MPI launcher, Gloo without a context): every
// collective is the identity, and no backend is called.
static bool solo(const ProcessGroup *pg) {
  return (pg->backend == BACKEND_MPI && !pg->mpi_up) || (pg->backend == BACKEND_GLOO && !pg->gloo);
}

// The start of every collective: the job is not ending, and a group of several ranks is connected.
// Before dist_connect a group has no device context (and on Gloo or NCCL no communicator either), so
// a collective would crash on one backend and quietly work on another (MPI's needs neither).
static void begin(const ProcessGroup *pg, const char *call) {
  check_stop_if_ending();
  if (pg->world_size > 1 && !pg->ctx)
    die(1,
        "%s: rank %d of %d: the process group is not connected: dist_connect was never called (call "
        "dist_connect(&pg, &ctx) after dist_init and device_init, before the first collective)",
        call, pg->rank, pg->world_size);
}

// ---- the flight recorder (flight.h) ------------------------------------------------------------------
// Every collective of a group of several ranks is recorded on its rank: the same numbers in the same
// order on every rank, which is what lets scripts/fr_analyze.py align the rings. Two test hooks, read
// once from the environment, make one rank misbehave so that the tests can check that the rings name
// it: DDP_TEST_SKIP_COLLECTIVE=R:N (rank R never calls its collective N; it goes on with the next one)
// and DDP_TEST_COUNT_DELTA=R:N (rank R calls collective N, or the first after it of more than one
// element, with one element fewer). A third, DDP_TEST_SLOW_RANK=R:MS, is the straggler report's
// (dist_lap()).

typedef struct {
  long rank, seq;
} TestFault;

static TestFault g_skip = {-1, -1}, g_short = {-1, -1}, g_slow = {-1, -1};
static pthread_once_t g_faults_once = PTHREAD_ONCE_INIT;

// @p what: what the number after the colon is, for the message.
static TestFault test_fault(const char *name, const char *what) {
  TestFault f = {-1, -1};
  const char *v = getenv(name);
  if (v && *v && (sscanf(v, "%ld:%ld", &f.rank, &f.seq) != 2 || f.rank < 0 || f.seq < 1))
    die(2, "%s=%s: expected RANK:N (a rank, and %s, from 1)", name, v, what);
  return f;
}

static void read_test_faults(void) {
  g_skip = test_fault("DDP_TEST_SKIP_COLLECTIVE", "the number of a collective");
  g_short = test_fault("DDP_TEST_COUNT_DELTA", "the number of a collective");
  g_slow = test_fault("DDP_TEST_SLOW_RANK", "milliseconds");
}

// Records a collective this rank starts now (@p op on @p *n elements of @p type, tagged @p tag) and
// returns its number; 0 when the test hook says this rank skips it. May shorten *n (the other hook).
static uint64_t fr_start(const ProcessGroup *pg, const char *op, DistType type, size_t *n, const char *tag) {
  pthread_once(&g_faults_once, read_test_faults);
  uint64_t next = flight_next_seq();
  if (g_skip.rank == pg->rank && (uint64_t)g_skip.seq == next) {
    flight_skip();
    return 0;
  }
  if (g_short.rank == pg->rank && next >= (uint64_t)g_short.seq && *n > 1) {
    *n -= 1;
    g_short.rank = -1;  // once
  }
  uint64_t seq = flight_record(op, dist_type_name(type), *n, tag);
  flight_mark(seq, FLIGHT_STARTED);
  return seq;
}

static void fr_done(uint64_t seq) {
  if (seq) flight_mark(seq, FLIGHT_DONE);
}

// A blocking collective that began at @p t0 is done: recorded, and its time is the lap's wait
// (dist_lap(); on NCCL, where it only queues the collective, about 0).
static void blocked(ProcessGroup *pg, uint64_t seq, double t0) {
  pg->lap.wait_s += log_clock() - t0;
  fr_done(seq);
}

// The ring is written when a collective fails too (check.h's last words for a failed MPI, NCCL or Gloo
// call), not only when the watchdog ends the job.
static void fr_last_words(const char *kind) {
  if (strcmp(kind, "MPI") != 0 && strcmp(kind, "NCCL") != 0 && strcmp(kind, "GLOO") != 0) return;
  char why[64];
  snprintf(why, sizeof why, "a failed %s call (see the messages above)", kind);
  flight_write(why);
}

void dist_set_fr_dir(const ProcessGroup *pg, const char *dir) {
  if (flight_set_dir(dir, pg->rank, pg->world_size) != 0)
    die(2, "--fr_dir: the folder '%.60s...' is %zu bytes long, more than %d", dir, strlen(dir),
        FLIGHT_DIR_MAX - 1);
}

void dist_connect(ProcessGroup *pg, const Ctx *c) {
  check_stop_if_ending();
  pg->ctx = c;
  dev_event_init(c, &pg->ready);
  // Solo before connect: the MPI backend of one process (a build without MPI too), or Gloo, whose
  // connect makes its context (several ranks) or none (one).
  if (!solo(pg) || table(pg)->built) table(pg)->connect(pg);
  flight_set_dir(NULL, pg->rank, pg->world_size);
  pg->lap.start = log_clock();
  if (!solo(pg)) check_set_last_words(fr_last_words);
  placement_log(pg);  // rank 0 prints every rank's node: `ranks: nodea 0-1 (local 0-1), ...`
}

// ---- live recovery (step 09) -------------------------------------------------------------------------

void dist_set_recoverable(ProcessGroup *pg, double op_timeout_s) {
  if (pg->backend == BACKEND_MPI)
    die(2,
        "live recovery needs --backend gloo (or nccl) under scripts/launch.sh --ft: MPI would need ULFM "
        "(Open MPI >= 5 built --with-ft=ulfm), which Debian's Open MPI 4.1 lacks");
  if (!(op_timeout_s > 0))
    die(2, "dist_set_recoverable: the operation timeout must be > 0, got %g", op_timeout_s);
  pg->recoverable = true;
  pg->op_timeout = op_timeout_s;
}

const char *dist_failure(ProcessGroup *pg) {
  return pg->recoverable && !solo(pg) ? table(pg)->failure(pg) : NULL;
}

void dist_abandon(ProcessGroup *pg) {
  if (pg->recoverable && !solo(pg)) table(pg)->reconnect(pg, NULL);
}

void dist_reconnect(ProcessGroup *pg, const Ctx *c, const DistMeeting *m) {
  check_stop_if_ending();
  if (!pg->recoverable) die(1, "dist_reconnect: the process group is not recoverable (dist_set_recoverable)");
  if (m->rank < 0 || m->rank >= m->world_size)
    die(1, "dist_reconnect: rank %d is not inside a group of %d", m->rank, m->world_size);
  bool first = !pg->ctx;
  if (first) {
    pg->ctx = c;
    dev_event_init(c, &pg->ready);
  }
  pg->rank = m->rank;
  pg->world_size = m->world_size;
  check_set_rank(pg->rank);
  table(pg)->reconnect(pg, m);
  flight_set_dir(NULL, pg->rank, pg->world_size);
  pg->lap = (DistLap){.start = log_clock()};
  if (first) check_set_last_words(fr_last_words);
}

void dist_all_reduce_at(const char *caller, ProcessGroup *pg, void *buf, size_t n, DistType type, DistOp op) {
  begin(pg, "dist_all_reduce");
  if (op == DIST_AVG && type != DIST_FLOAT) die(1, "dist_all_reduce: DIST_AVG needs float data");
  if (n == 0 || solo(pg)) return;
  uint64_t seq = fr_start(pg, "all-reduce", type, &n, caller);
  if (!seq) return;
  double t0 = log_clock();
  table(pg)->all_reduce(pg, buf, n, type, op);
  blocked(pg, seq, t0);
}

// ---- the sum canary (dist_verify_sum) ----------------------------------------------------------------

// Element i of the canary on rank r: only ranks 0 and 1 send anything but zeros, so every addition a
// backend makes is exact in every type, 16-bit ones included (1 + 0, 1.5 + 0.25), whatever the
// order; and every rank's own values differ from the sum, so a collective that moves nothing leaves
// every rank, not only some, with a wrong answer.
enum { CANARY_N = 3 };
static double canary_value(int i, int r) {
  static const double v[CANARY_N][2] = {{1, 0}, {0, 2}, {1.5, 0.25}};
  return r < 2 ? v[i][r] : 0;
}

static void canary_put(void *buf, DistType t, int i, double x) {
  if (t == DIST_HALF || t == DIST_BF16)
    ((uint16_t *)buf)[i] = t == DIST_HALF ? half_from_float((float)x) : bf16_from_float((float)x);
  else if (t == DIST_DOUBLE)
    ((double *)buf)[i] = x;
  else if (t == DIST_INT)
    ((int *)buf)[i] = (int)x;
  else
    ((float *)buf)[i] = (float)x;
}

static double canary_get(const void *buf, DistType t, int i) {
  if (t == DIST_HALF) return half_to_float(((const uint16_t *)buf)[i]);
  if (t == DIST_BF16) return bf16_to_float(((const uint16_t *)buf)[i]);
  if (t == DIST_DOUBLE) return ((const double *)buf)[i];
  if (t == DIST_INT) return ((const int *)buf)[i];
  return ((const float *)buf)[i];
}

const char *dist_type_name(DistType t) {
  static const char *const names[] = {"float32", "int32", "float64", "fp16", "bf16"};
  return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "?";
}

// NCCL's name of the type in its device functions (ncclDevFunc_AllReduce_Sum_<suffix>_...; it sums
// int32 as u32, as scripts/gpu/nccl_caps.py says).
static const char *nccl_suffix(DistType t) {
  static const char *const names[] = {"f32", "u32", "f64", "f16", "bf16"};
  return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "?";
}

void dist_verify_sum(ProcessGroup *pg, DistType type, const char *who) {
  begin(pg, "dist_verify_sum");
  if (pg->world_size < 2 || solo(pg)) return;  // one rank: its values are the sum
  size_t bytes = CANARY_N * dist_type_size(type);
  double host[CANARY_N];  // room for CANARY_N elements of any type
  for (int i = 0; i < CANARY_N; i++) canary_put(host, type, i, canary_value(i, pg->rank));
  void *buf = dev_alloc(pg->ctx, bytes);
  dev_upload(pg->ctx, buf, host, bytes);
  dist_all_reduce(pg, buf, CANARY_N, type, DIST_SUM);
  // Test hook: DDP_TEST_UNSUMMED_CANARY=1 keeps this rank's own values, as an all-reduce that moved
  // nothing would (NCCL runs a device function its library lacks as an empty kernel). The collective
  // still runs, so that a rank without the variable is not left waiting.
  const char *unsummed = getenv("DDP_TEST_UNSUMMED_CANARY");
  if (!unsummed || strcmp(unsummed, "1") != 0) dev_download(pg->ctx, host, buf, bytes);
  dev_free(pg->ctx, buf);
  const DistBackendOps *o = table(pg);
  const char *version = o->version();
  for (int i = 0; i < CANARY_N; i++) {
    double got = canary_get(host, type, i), want = canary_value(i, 0) + canary_value(i, 1);
    if (got == want) continue;
    die(1,
        "%s: rank %d: the %s library (%s%s%s) does not sum %s: a test all-reduce of known values came back "
        "wrong (element %d: %g, the sum is %g), with no error. A library built without that type's kernel "
        "(NCCL: ncclDevFunc_AllReduce_Sum_%s, left out by NCCL's ONLY_FUNCS) runs it as an empty kernel, "
        "and the replicas would drift apart. Use a library that carries it (scripts/gpu/nccl_caps.py LIBRARY "
        "lists what one carries), or another --comm_hook",
        who, pg->rank, o->library, o->name, version ? " " : "", version ? version : "", dist_type_name(type),
        i, got, want, nccl_suffix(type));
  }
}

void dist_work_init(ProcessGroup *pg, DistWork *w) {
  begin(pg, "dist_work_init");
  memset(w, 0, sizeof *w);
  dev_event_init(pg->ctx, &w->start);
  dev_event_init(pg->ctx, &w->end);
  if (!solo(pg) || pg->recoverable) table(pg)->work_init(pg, w);  // (a recoverable group may grow)
}

void dist_work_name(DistWork *w, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(w->name, sizeof w->name, fmt, ap);
  va_end(ap);
}

void dist_work_free(ProcessGroup *pg, DistWork *w) {
  if (w->active) die(1, "dist_work_free: the collective is still in flight (call dist_wait first)");
  // Whatever the group is now: work_free frees what work_init gave, nothing when it gave nothing.
  if (table(pg)->built) table(pg)->work_free(pg, w);
  dev_event_free(pg->ctx, &w->end);
  dev_event_free(pg->ctx, &w->start);
}

// Marks @p w started for a collective (@p what, for timelines) that writes @p n elements at @p buf on
// this rank.
static void work_begin(DistWork *w, const char *call, const char *what, void *buf, size_t n, DistType type,
                       DistOp op) {
  if (w->active) die(1, "%s: this handle is still in flight", call);
  if (op == DIST_AVG && type != DIST_FLOAT) die(1, "%s: DIST_AVG needs floats", call);
  w->what = what;
  w->buf = buf;
  w->n = n;
  w->type = type;
  w->op = op;
  w->active = true;
  w->done = false;
  w->bytes += (long long)(n * dist_type_size(type));
}

long long dist_take_bytes(DistWork *works, int n) {
  long long bytes = 0;
  for (int i = 0; i < n; i++) {
    bytes += works[i].bytes;
    works[i].bytes = 0;
  }
  return bytes;
}

// ---- the straggler report's lap (dist_lap()) ----------------------------------------------------------

DistLap dist_lap(ProcessGroup *pg) {
  DistLap done = pg->lap;
  pg->lap = (DistLap){.start = log_clock()};
  return done;
}

// A gradient collective starts: the first of the lap is this rank's arrival (after the test hook's
// sleep, which stands for a slower backward).
void dist_lap_arrive(ProcessGroup *pg) {
  if (pg->lap.arrived > 0) return;
  pthread_once(&g_faults_once, read_test_faults);
  if (g_slow.rank == pg->rank) {
    struct timespec ts = {g_slow.seq / 1000, (g_slow.seq % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
  }
  pg->lap.arrived = log_clock();
}

// The flight recorder's tag of a collective on @p w: the name the handle was given (dist_work_name()),
// else the calling function.
static const char *work_tag(const DistWork *w, const char *caller) { return w->name[0] ? w->name : caller; }

// A collective with nothing to exchange: complete at once (its events mark the moment).
static void work_done_now(ProcessGroup *pg, DistWork *w) {
  dev_event_record(pg->ctx, &w->start, NULL);
  dev_event_record(pg->ctx, &w->end, NULL);
  w->done = true;
}

void dist_all_reduce_async_at(const char *caller, ProcessGroup *pg, void *buf, size_t n, DistType type,
                              DistOp op, DistWork *w) {
  begin(pg, "dist_all_reduce_async");
  work_begin(w, "dist_all_reduce_async", "all-reduce", buf, n, type, op);
  dist_lap_arrive(pg);
  if (n == 0 || solo(pg) || !(w->seq = fr_start(pg, "all-reduce", type, &w->n, work_tag(w, caller)))) {
    work_done_now(pg, w);
  } else {
    table(pg)->all_reduce_start(pg, w);
  }
}

// True when the byte ranges [a, a + an) and [b, b + bn) share a byte.
static bool overlap(const void *a, size_t an, const void *b, size_t bn) {
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return an > 0 && bn > 0 && x < y + bn && y < x + an;
}

void dist_reduce_scatter_async_at(const char *caller, ProcessGroup *pg, void *send, void *recv,
                                  const size_t *counts, DistType type, DistOp op, DistWork *w) {
  begin(pg, "dist_reduce_scatter_async");
  work_begin(w, "dist_reduce_scatter_async", "reduce-scatter", recv, counts[pg->rank], type, op);
  dist_lap_arrive(pg);
  size_t total = dist_chunk_offset(counts, pg->world_size), size = dist_type_size(type);
  bool in_place = recv == (char *)send + dist_chunk_offset(counts, pg->rank) * size;
  if (!in_place && overlap(send, total * size, recv, w->n * size))
    die(1,
        "dist_reduce_scatter_async: recv overlaps send but is not this rank's chunk of it (the in-place "
        "form)");
  if (total == 0 || solo(pg)) {
    if (!in_place) dev_copy(pg->ctx, recv, send, w->n * size);  // one rank: the mean of one is itself
    work_done_now(pg, w);
  } else if (!(w->seq = fr_start(pg, "reduce-scatter", type, &total, work_tag(w, caller)))) {
    work_done_now(pg, w);  // (the test hook: this rank skips it)
  } else {
    table(pg)->reduce_scatter_start(pg, send, counts, w);
  }
}

void dist_shard_counts(size_t a, size_t b, size_t S, int W, size_t *counts) {
  if (a > b || W < 1 || b > S * (size_t)W)
    die(1, "dist_shard_counts: the slice [%zu, %zu) is not inside %d shards of %zu", a, b, W, S);
  for (int j = 0; j < W; j++) {
    size_t lo = (size_t)j * S, hi = lo + S;
    if (a > lo) lo = a;
    if (b < hi) hi = b;
    counts[j] = hi > lo ? hi - lo : 0;
  }
}

bool dist_test(ProcessGroup *pg, DistWork *w) {
  check_stop_if_ending();
  if (!w->active || w->done) return true;  // (a solo group's collectives are done when started)
  bool done = table(pg)->test(pg, w);
  if (done) fr_done(w->seq), w->seq = 0;
  return done;
}

void dist_wait(ProcessGroup *pg, DistWork *w) {
  check_stop_if_ending();
  if (!w->active) die(1, "dist_wait: no all-reduce in flight on this handle");
  double t0 = log_clock();
  if (!w->done) table(pg)->wait(pg, w);
  pg->lap.wait_s += log_clock() - t0;
  fr_done(w->seq), w->seq = 0;  // (on NCCL: queued on the compute stream after the collective)
  w->active = false;
}

void dist_broadcast_at(const char *caller, ProcessGroup *pg, void *buf, size_t n, DistType type, int root) {
  begin(pg, "dist_broadcast");
  if (n == 0 || solo(pg)) return;
  uint64_t seq = fr_start(pg, "broadcast", type, &n, caller);
  if (!seq) return;
  double t0 = log_clock();
  table(pg)->broadcast(pg, buf, n, type, root);
  blocked(pg, seq, t0);
}

void dist_all_gather_at(const char *caller, ProcessGroup *pg, const void *send, void *recv, size_t n,
                        DistType type) {
  begin(pg, "dist_all_gather");
  size_t bytes = n * dist_type_size(type);
  bool in_place = send == (const char *)recv + (size_t)pg->rank * bytes;
  if (!in_place && overlap(send, bytes, recv, bytes * (size_t)pg->world_size))
    die(1, "dist_all_gather: send overlaps recv but is not recv + rank·n (the in-place form)");
  if (solo(pg)) {
    if (!in_place) dev_copy(pg->ctx, recv, send, bytes);
    return;
  }
  uint64_t seq = fr_start(pg, "all-gather", type, &n, caller);
  if (!seq) return;
  double t0 = log_clock();
  table(pg)->all_gather(pg, send, recv, n, type);
  blocked(pg, seq, t0);
}

void dist_all_gather_async_at(const char *caller, ProcessGroup *pg, const void *send, void *recv, size_t n,
                              DistType type, DistWork *w) {
  begin(pg, "dist_all_gather_async");
  size_t bytes = n * dist_type_size(type);
  work_begin(w, "dist_all_gather_async", "all-gather", recv, n * (size_t)pg->world_size, type, DIST_SUM);
  bool in_place = send == (const char *)recv + (size_t)pg->rank * bytes;
  if (!in_place && overlap(send, bytes, recv, bytes * (size_t)pg->world_size))
    die(1, "dist_all_gather_async: send overlaps recv but is not recv + rank·n (the in-place form)");
  if (n == 0 || solo(pg)) {
    if (!in_place) dev_copy(pg->ctx, recv, send, bytes);
    work_done_now(pg, w);
  } else if (!(w->seq = fr_start(pg, "all-gather", type, &n, work_tag(w, caller)))) {
    work_done_now(pg, w);  // (the test hook: this rank skips it)
  } else {
    table(pg)->all_gather_start(pg, send, w);
  }
}

void dist_barrier_at(const char *caller, ProcessGroup *pg) {
  begin(pg, "dist_barrier");
  if (solo(pg)) return;
  size_t none = 0;
  uint64_t seq = fr_start(pg, "barrier", DIST_INT, &none, caller);
  if (!seq) return;
  double t0 = log_clock();
  table(pg)->barrier(pg);
  blocked(pg, seq, t0);
}

void dist_group_start(ProcessGroup *pg) {
  check_stop_if_ending();
  if (!solo(pg)) table(pg)->group_start(pg);
}

void dist_group_end(ProcessGroup *pg) {
  check_stop_if_ending();
  if (!solo(pg)) table(pg)->group_end(pg);
}

void dist_destroy(ProcessGroup *pg) {
  check_stop_if_ending();
  // Shutdown waits for the peers too (the last collectives, MPI_Finalize): the watchdog stays, without
  // the poll of a communicator that is about to go.
  if (pg->launcher != LAUNCH_NONE) watchdog_start(pg->timeout, NULL, NULL, NULL, NULL);
  if (!solo(pg)) table(pg)->destroy(pg);
  if (pg->stage) dev_host_free(pg->ctx, pg->stage);
  if (pg->ctx) dev_event_free(pg->ctx, &pg->ready);
  check_set_abort(NULL);
  check_set_last_words(NULL);
  if (pg->mpi_up) WITH_MPI(dist_mpi_finalize());
  watchdog_stop();
  memset(pg, 0, sizeof *pg);
}
