// dist.c: chapter 04's lesson on, the collectives: what every backend shares (argument checks, the
// group of one process, the in-place forms, the work handles, the sum canary), then a call through the
// backend's table of operations (dist_backend.h: dist_mpi.c, dist_nccl.c, dist_gloo.cc). Chapter 02's
// "who am I" (the launcher, the ranks, the bootstrap address, the backend's choice) is dist_launch.c.
#define _POSIX_C_SOURCE 200809L
#include "dist.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "devmem.h"
#include "dist_backend.h"
#include "dist_have.h"
#include "half.h"
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

// Slot s of a table, as `filled`; one line per slot, in DistSlot's order (-Wswitch names a slot that
// is missing here).
static bool fills(const DistBackendOps *o, DistSlot s) {
  switch (s) {
    case DIST_SLOT_CONNECT:
      return o->connect;
    case DIST_SLOT_ALL_REDUCE:
      return o->all_reduce;
    case DIST_SLOT_ALL_REDUCE_START:
      return o->all_reduce_start;
    case DIST_SLOT_REDUCE_SCATTER_START:
      return o->reduce_scatter_start;
    case DIST_SLOT_ALL_GATHER:
      return o->all_gather;
    case DIST_SLOT_ALL_GATHER_START:
      return o->all_gather_start;
    case DIST_SLOT_BROADCAST:
      return o->broadcast;
    case DIST_SLOT_BARRIER:
      return o->barrier;
    case DIST_SLOT_TEST:
      return o->test;
    case DIST_SLOT_WAIT:
      return o->wait;
    case DIST_SLOT_WORK_INIT:
      return o->work_init;
    case DIST_SLOT_WORK_FREE:
      return o->work_free;
    case DIST_SLOT_GROUP_START:
      return o->group_start;
    case DIST_SLOT_GROUP_END:
      return o->group_end;
    case DIST_SLOT_DESTROY:
      return o->destroy;
    case DIST_SLOT_COUNT:
      break;
  }
  return false;
}

// Every slot has a DistSlot: the table is its header fields (name .. version) and DIST_SLOT_COUNT function
// pointers.
_Static_assert(sizeof(DistBackendOps) ==
                   offsetof(DistBackendOps, connect) + DIST_SLOT_COUNT * sizeof(void (*)(void)),
               "a slot of DistBackendOps has no DistSlot (or a DistSlot no slot)");
_Static_assert(DIST_SLOT_COUNT <= 32, "DistBackendOps.refuses has 32 bits");

bool dist_backend_fills(const DistBackendOps *ops, DistSlot s) {
  return (unsigned)s < DIST_SLOT_COUNT && fills(ops, s);
}

const char *dist_slot_name(DistSlot s) {
  static const char *const names[DIST_SLOT_COUNT] = {
      [DIST_SLOT_CONNECT] = "connect",
      [DIST_SLOT_ALL_REDUCE] = "all-reduce",
      [DIST_SLOT_ALL_REDUCE_START] = "all-reduce-async",
      [DIST_SLOT_REDUCE_SCATTER_START] = "reduce-scatter-async",
      [DIST_SLOT_ALL_GATHER] = "all-gather",
      [DIST_SLOT_ALL_GATHER_START] = "all-gather-async",
      [DIST_SLOT_BROADCAST] = "broadcast",
      [DIST_SLOT_BARRIER] = "barrier",
      [DIST_SLOT_TEST] = "test",
      [DIST_SLOT_WAIT] = "wait",
      [DIST_SLOT_WORK_INIT] = "work-init",
      [DIST_SLOT_WORK_FREE] = "work-free",
      [DIST_SLOT_GROUP_START] = "group-start",
      [DIST_SLOT_GROUP_END] = "group-end",
      [DIST_SLOT_DESTROY] = "destroy",
  };
  return (unsigned)s < DIST_SLOT_COUNT && names[s] ? names[s] : "?";
}

const char *dist_backend_gap(const DistBackendOps *ops) {
  if (!ops->built) return NULL;  // refused whole: "this program was built without ..."
  for (int s = 0; s < DIST_SLOT_COUNT; s++) {
    bool refused = (ops->refuses >> s) & 1u;
    if (fills(ops, (DistSlot)s) == refused) return dist_slot_name((DistSlot)s);
  }
  return NULL;
}

void dist_backend_refuse(const DistBackendOps *ops, DistSlot s, const char *call) {
  if (!ops->built) die(1, "%s: this program was built without %s", call, ops->library);
  die(1, "%s: the %s backend has no %s", call, ops->name, dist_slot_name(s));
}

const DistBackendOps *dist_backend_ops(Backend b) {
  // The tables of the backends this build lacks: every slot NULL, refused as not built.
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
    default:
      die(1, "dist_backend_ops: no backend %d", (int)b);
  }
  return &without[b];
}

// The table of @p pg: from dist_init(), or (a process group zeroed by hand or by dist_destroy) its
// backend's.
static const DistBackendOps *table(const ProcessGroup *pg) {
  return pg->ops ? pg->ops : dist_backend_ops(pg->backend);
}

// The table of @p pg when it fills slot @p s; else the end of the job, naming the backend and the
// operation that @p call needed: never another backend's.
static const DistBackendOps *need(const ProcessGroup *pg, DistSlot s, const char *call) {
  const DistBackendOps *o = table(pg);
  if (!fills(o, s)) dist_backend_refuse(o, s, call);
  return o;
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

void dist_connect(ProcessGroup *pg, const Ctx *c) {
  check_stop_if_ending();
  pg->ctx = c;
  dev_event_init(c, &pg->ready);
  // Solo before connect: the MPI backend of one process (a build without MPI too), or Gloo, whose
  // connect makes its context (several ranks) or none (one).
  if (!solo(pg) || table(pg)->built) need(pg, DIST_SLOT_CONNECT, "dist_connect")->connect(pg);
  placement_log(pg);  // rank 0 prints every rank's node: `ranks: nodea 0-1 (local 0-1), ...`
}

void dist_all_reduce(ProcessGroup *pg, void *buf, size_t n, DistType type, DistOp op) {
  begin(pg, "dist_all_reduce");
  if (op == DIST_AVG && type != DIST_FLOAT) die(1, "dist_all_reduce: DIST_AVG needs float data");
  if (n == 0 || solo(pg)) return;
  need(pg, DIST_SLOT_ALL_REDUCE, "dist_all_reduce")->all_reduce(pg, buf, n, type, op);
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
// int32 as u32, as scripts/nccl_caps.py says).
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
  const char *version = o->version ? o->version() : NULL;
  for (int i = 0; i < CANARY_N; i++) {
    double got = canary_get(host, type, i), want = canary_value(i, 0) + canary_value(i, 1);
    if (got == want) continue;
    die(1,
        "%s: rank %d: the %s library (%s%s%s) does not sum %s: a test all-reduce of known values came back "
        "wrong (element %d: %g, the sum is %g), with no error. A library built without that type's kernel "
        "(NCCL: ncclDevFunc_AllReduce_Sum_%s, left out by NCCL's ONLY_FUNCS) runs it as an empty kernel, "
        "and the replicas would drift apart. Use a library that carries it (scripts/nccl_caps.py LIBRARY "
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
  if (!solo(pg)) need(pg, DIST_SLOT_WORK_INIT, "dist_work_init")->work_init(pg, w);
}

void dist_work_free(ProcessGroup *pg, DistWork *w) {
  if (w->active) die(1, "dist_work_free: the collective is still in flight (call dist_wait first)");
  // Whatever the group is now: work_free frees what work_init gave, nothing when it gave nothing.
  if (table(pg)->built) need(pg, DIST_SLOT_WORK_FREE, "dist_work_free")->work_free(pg, w);
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
}

// A collective with nothing to exchange: complete at once (its events mark the moment).
static void work_done_now(ProcessGroup *pg, DistWork *w) {
  dev_event_record(pg->ctx, &w->start, NULL);
  dev_event_record(pg->ctx, &w->end, NULL);
  w->done = true;
}

void dist_all_reduce_async(ProcessGroup *pg, void *buf, size_t n, DistType type, DistOp op, DistWork *w) {
  begin(pg, "dist_all_reduce_async");
  work_begin(w, "dist_all_reduce_async", "all-reduce", buf, n, type, op);
  if (n == 0 || solo(pg)) {
    work_done_now(pg, w);
  } else {
    need(pg, DIST_SLOT_ALL_REDUCE_START, "dist_all_reduce_async")->all_reduce_start(pg, w);
  }
}

// True when the byte ranges [a, a + an) and [b, b + bn) share a byte.
static bool overlap(const void *a, size_t an, const void *b, size_t bn) {
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return an > 0 && bn > 0 && x < y + bn && y < x + an;
}

void dist_reduce_scatter_async(ProcessGroup *pg, void *send, void *recv, const size_t *counts, DistType type,
                               DistOp op, DistWork *w) {
  begin(pg, "dist_reduce_scatter_async");
  work_begin(w, "dist_reduce_scatter_async", "reduce-scatter", recv, counts[pg->rank], type, op);
  size_t total = dist_chunk_offset(counts, pg->world_size), size = dist_type_size(type);
  bool in_place = recv == (char *)send + dist_chunk_offset(counts, pg->rank) * size;
  if (!in_place && overlap(send, total * size, recv, w->n * size))
    die(1,
        "dist_reduce_scatter_async: recv overlaps send but is not this rank's chunk of it (the in-place "
        "form)");
  if (total == 0 || solo(pg)) {
    if (!in_place) dev_copy(pg->ctx, recv, send, w->n * size);  // one rank: the mean of one is itself
    work_done_now(pg, w);
  } else {
    need(pg, DIST_SLOT_REDUCE_SCATTER_START, "dist_reduce_scatter_async")
        ->reduce_scatter_start(pg, send, counts, w);
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
  return need(pg, DIST_SLOT_TEST, "dist_test")->test(pg, w);
}

void dist_wait(ProcessGroup *pg, DistWork *w) {
  check_stop_if_ending();
  if (!w->active) die(1, "dist_wait: no all-reduce in flight on this handle");
  if (!w->done) need(pg, DIST_SLOT_WAIT, "dist_wait")->wait(pg, w);
  w->active = false;
}

void dist_broadcast(ProcessGroup *pg, void *buf, size_t n, DistType type, int root) {
  begin(pg, "dist_broadcast");
  if (n == 0 || solo(pg)) return;
  need(pg, DIST_SLOT_BROADCAST, "dist_broadcast")->broadcast(pg, buf, n, type, root);
}

void dist_all_gather(ProcessGroup *pg, const void *send, void *recv, size_t n, DistType type) {
  begin(pg, "dist_all_gather");
  size_t bytes = n * dist_type_size(type);
  bool in_place = send == (const char *)recv + (size_t)pg->rank * bytes;
  if (!in_place && overlap(send, bytes, recv, bytes * (size_t)pg->world_size))
    die(1, "dist_all_gather: send overlaps recv but is not recv + rank·n (the in-place form)");
  if (solo(pg)) {
    if (!in_place) dev_copy(pg->ctx, recv, send, bytes);
  } else {
    need(pg, DIST_SLOT_ALL_GATHER, "dist_all_gather")->all_gather(pg, send, recv, n, type);
  }
}

void dist_all_gather_async(ProcessGroup *pg, const void *send, void *recv, size_t n, DistType type,
                           DistWork *w) {
  begin(pg, "dist_all_gather_async");
  size_t bytes = n * dist_type_size(type);
  work_begin(w, "dist_all_gather_async", "all-gather", recv, n * (size_t)pg->world_size, type, DIST_SUM);
  bool in_place = send == (const char *)recv + (size_t)pg->rank * bytes;
  if (!in_place && overlap(send, bytes, recv, bytes * (size_t)pg->world_size))
    die(1, "dist_all_gather_async: send overlaps recv but is not recv + rank·n (the in-place form)");
  if (n == 0 || solo(pg)) {
    if (!in_place) dev_copy(pg->ctx, recv, send, bytes);
    work_done_now(pg, w);
  } else {
    need(pg, DIST_SLOT_ALL_GATHER_START, "dist_all_gather_async")->all_gather_start(pg, send, w);
  }
}

void dist_barrier(ProcessGroup *pg) {
  begin(pg, "dist_barrier");
  if (!solo(pg)) need(pg, DIST_SLOT_BARRIER, "dist_barrier")->barrier(pg);
}

void dist_group_start(ProcessGroup *pg) {
  check_stop_if_ending();
  if (!solo(pg)) need(pg, DIST_SLOT_GROUP_START, "dist_group_start")->group_start(pg);
}

void dist_group_end(ProcessGroup *pg) {
  check_stop_if_ending();
  if (!solo(pg)) need(pg, DIST_SLOT_GROUP_END, "dist_group_end")->group_end(pg);
}

void dist_destroy(ProcessGroup *pg) {
  check_stop_if_ending();
  // Shutdown waits for the peers too (the last collectives, MPI_Finalize): the watchdog stays, without
  // the poll of a communicator that is about to go.
  if (pg->launcher != LAUNCH_NONE) watchdog_start(pg->timeout, NULL, NULL, NULL, NULL);
  if (!solo(pg)) need(pg, DIST_SLOT_DESTROY, "dist_destroy")->destroy(pg);
  if (pg->stage) dev_host_free(pg->ctx, pg->stage);
  if (pg->ctx) dev_event_free(pg->ctx, &pg->ready);
  check_set_abort(NULL);
  if (pg->mpi_up) WITH_MPI(dist_mpi_finalize());
  watchdog_stop();
  memset(pg, 0, sizeof *pg);
}
