#define _POSIX_C_SOURCE 200809L
// dist_mpi.c: the MPI backend, whose operations dist.c calls through the table dist_mpi_ops() (at the
// end). Collectives run on host memory; device buffers of a CUDA context are staged through one pinned
// host buffer (Open MPI here is not CUDA-aware). MPI_Init and MPI_Finalize are the MPI launcher's,
// called under mpirun whatever the backend: by dist_launch.c (dist_init) and dist.c (dist_destroy).
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "devmem.h"
#include "dist_backend.h"
#include "half.h"
#include "watchdog.h"

// A blocking MPI call, announced to the watchdog so that a peer that never joins ends this rank.
#define WAITING(name, call) WATCHDOG_WAIT(name, mpiCheck(call))

void mpi_check_impl(int err, const char *call, const char *file, int line) {
  if (err == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(err, msg, &len);
  check_fail("MPI", file, line, "%s: %s", call, msg);
}

static void mpi_abort(int status) {
  // The error line is written; give mpirun's output forwarding a moment to pass it on before the
  // abort kills this process (without it the line was lost once under load).
  fflush(NULL);
  struct timespec pause = {0, 200 * 1000 * 1000};
  nanosleep(&pause, NULL);
  MPI_Abort(MPI_COMM_WORLD, status ? status : 1);  // ends every rank of the job
  exit(status);
}

void dist_mpi_set_abort(void) { check_set_abort(mpi_abort); }

void dist_mpi_init(ProcessGroup *pg) {
  int up = 0;
  mpiCheck(MPI_Initialized(&up));
  if (!up) WAITING("MPI_Init", MPI_Init(NULL, NULL));  // waits for every rank of the job
  // Return errors to mpiCheck, which names the rank and the call before aborting the job.
  mpiCheck(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  mpiCheck(MPI_Comm_rank(MPI_COMM_WORLD, &pg->rank));
  mpiCheck(MPI_Comm_size(MPI_COMM_WORLD, &pg->world_size));
  check_set_rank(pg->rank);  // the lines of the watchdog and of failed checks name it from here on
  // The processes that share this node's memory. The split is a collective of every rank (Open MPI
  // agrees on the new communicator's id with non-blocking all-reduces): a peer frozen here, or one
  // started with other collective settings, would hang this rank without the watchdog.
  MPI_Comm node;
  WAITING("MPI_Comm_split_type",
          MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, pg->rank, MPI_INFO_NULL, &node));
  mpiCheck(MPI_Comm_rank(node, &pg->local_rank));
  mpiCheck(MPI_Comm_size(node, &pg->local_size));
  WAITING("MPI_Comm_free", MPI_Comm_free(&node));
}

// MPI counts are ints. A blocking collective of more elements runs in chunks of DDP_MPI_CHUNK
// elements (element-wise, so the result is the same); the calls that cannot be split -- the
// non-blocking all-reduce (one request), the all-gather and the reduce-scatter (their layout) --
// refuse such counts with a message. No count is ever cast to int unchecked. A test build sets a
// tiny chunk so that the chunked paths run (tests/integration/tests.cmake: dist_collectives_chunked).
#ifndef DDP_MPI_CHUNK
#define DDP_MPI_CHUNK ((size_t)1 << 30)
#endif
_Static_assert(DDP_MPI_CHUNK >= 1 && DDP_MPI_CHUNK <= INT_MAX, "an MPI count is an int");

// The elements of the chunk that starts at @p done of @p n, as an MPI count.
static int chunk(size_t n, size_t done) { return (int)(n - done < DDP_MPI_CHUNK ? n - done : DDP_MPI_CHUNK); }

// @p n as an MPI count for a call that cannot be split, or the end of the job.
static int whole_count(size_t n, const char *call) {
  if (n > (size_t)INT_MAX)
    die(1, "%s of %zu elements: more than MPI's limit of %d per call", call, n, INT_MAX);
  return (int)n;
}

static MPI_Datatype mpi_type(DistType t) {
  if (t == DIST_HALF || t == DIST_BF16) return MPI_UINT16_T;  // MPI has no 16-bit floats: their bits
  return t == DIST_DOUBLE ? MPI_DOUBLE : t == DIST_INT ? MPI_INT : MPI_FLOAT;
}

// The sums of the 16-bit floats, as MPI user operations: each pair added in float32 and rounded once
// (half.h: the correctly rounded narrow sum, what NCCL computes).
static void half_sum(void *in, void *inout, int *len, MPI_Datatype *type) {
  (void)type;
  const uint16_t *a = in;
  uint16_t *b = inout;
  for (int i = 0; i < *len; i++) b[i] = half_add(a[i], b[i]);
}

static void bf16_sum(void *in, void *inout, int *len, MPI_Datatype *type) {
  (void)type;
  const uint16_t *a = in;
  uint16_t *b = inout;
  for (int i = 0; i < *len; i++) b[i] = bf16_add(a[i], b[i]);
}

// MPI_SUM, or the user operation of a 16-bit float (created once, on first use; commutative).
static MPI_Op mpi_sum(DistType t) {
  static MPI_Op ops[2] = {MPI_OP_NULL, MPI_OP_NULL};
  if (t != DIST_HALF && t != DIST_BF16) return MPI_SUM;
  int i = t == DIST_BF16;
  if (ops[i] == MPI_OP_NULL) mpiCheck(MPI_Op_create(i ? bf16_sum : half_sum, 1, &ops[i]));
  return ops[i];
}

// DIST_AVG on MPI: every rank scales the same sum by 1/W, so the replicas stay bit-identical.
static void scale_avg(const ProcessGroup *pg, float *f, size_t n) {
  float inv = 1.0f / (float)pg->world_size;
  for (size_t i = 0; i < n; i++) f[i] *= inv;
}

static void dist_mpi_all_reduce(ProcessGroup *pg, void *buf, size_t n, DistType type, DistOp op) {
  size_t bytes = n * dist_type_size(type);
  void *host = buf;
  if (dist_on_gpu(pg)) {
    host = dist_staging(pg, bytes);
    dev_download(pg->ctx, host, buf, bytes);
  }
  size_t size = dist_type_size(type);
  for (size_t i = 0; i < n; i += (size_t)chunk(n, i))
    WAITING("MPI_Allreduce", MPI_Allreduce(MPI_IN_PLACE, (char *)host + i * size, chunk(n, i), mpi_type(type),
                                           mpi_sum(type), MPI_COMM_WORLD));
  if (op == DIST_AVG) scale_avg(pg, host, n);
  if (dist_on_gpu(pg)) dev_upload(pg->ctx, buf, host, bytes);
}

_Static_assert(sizeof(MPI_Request) <= sizeof(((DistWork *)0)->req), "DistWork.req too small");

static void dist_mpi_all_reduce_start(ProcessGroup *pg, DistWork *w) {
  dev_event_record(pg->ctx, &w->start, NULL);
  if (dist_on_gpu(pg)) {  // staged through the host: nothing to overlap, reduce now
    dist_mpi_all_reduce(pg, w->buf, w->n, w->type, w->op);
    dev_event_record(pg->ctx, &w->end, NULL);
    w->done = true;
    return;
  }
  MPI_Request *req = (MPI_Request *)w->req;
  mpiCheck(MPI_Iallreduce(MPI_IN_PLACE, w->buf, whole_count(w->n, "MPI_Iallreduce"), mpi_type(w->type),
                          mpi_sum(w->type), MPI_COMM_WORLD, req));
}

// w->counts as MPI's int receive counts; true when they are all equal (reduce_scatter_block).
static bool recv_counts(const ProcessGroup *pg, const size_t *counts, DistWork *w, const char *call) {
  for (int j = 0; j < pg->world_size; j++) w->counts[j] = whole_count(counts[j], call);
  return dist_counts_equal(counts, pg->world_size);
}

// Device buffers of a CUDA context: the whole send buffer and this rank's chunk go through the
// pinned staging buffer ([send | received chunk]), with a blocking reduce-scatter.
static void reduce_scatter_staged(ProcessGroup *pg, const void *send, const size_t *counts, DistWork *w) {
  size_t size = dist_type_size(w->type), total = dist_chunk_offset(counts, pg->world_size);
  char *host = dist_staging(pg, (total + w->n) * size), *mine = host + total * size;
  dev_download(pg->ctx, host, send, total * size);
  MPI_Datatype t = mpi_type(w->type);
  if (recv_counts(pg, counts, w, "MPI_Reduce_scatter")) {
    WAITING("MPI_Reduce_scatter_block",
            MPI_Reduce_scatter_block(host, mine, w->counts[0], t, mpi_sum(w->type), MPI_COMM_WORLD));
  } else {
    WAITING("MPI_Reduce_scatter",
            MPI_Reduce_scatter(host, mine, w->counts, t, mpi_sum(w->type), MPI_COMM_WORLD));
  }
  if (w->op == DIST_AVG) scale_avg(pg, (float *)mine, w->n);
  dev_upload(pg->ctx, w->buf, mine, w->n * size);
}

// ---- the CPU reduce-scatter: a ring of point-to-point messages --------------------------------------
//
// Not MPI_Ireduce_scatter: Open MPI 4.1's reduce-scatters (blocking or not, _block or not, in place
// or not) reduce into scratch as large as the whole send buffer on some ranks, twice that on rank 0
// (measured with getrusage at 4 ranks), which would undo what a sharded optimizer saves. This ring
// needs one chunk of scratch. At step s = 0 .. W-2, rank r sends chunk (r-s-1) mod W of the send
// buffer to rank r+1, receives chunk (r-s-2) mod W from rank r-1 and adds it into its own values of
// that chunk, which it sends on at the next step; at the last step the chunk received is r's own, and
// the sum goes to recv. Its messages carry a tag of their own: the number of reduce-scatters this
// process had started before, the same on every rank (collectives start in the same order everywhere),
// so rings in flight together never take each other's messages.

/** The state of one reduce-scatter ring (DistWork.ring). */
typedef struct Ring {
  MPI_Request req[2];  // this step's send and receive
  bool active;         // a ring is in flight on the handle
  char *send;          // the send buffer: the partial sums are made in it
  int step;            // the step in flight, 0 .. W-2
  int tag;             // its messages' tag
  char *tmp;           // host: the chunk received at this step
  size_t tmp_bytes;    // its size (grown to the largest chunk seen: only the first calls allocate)
} Ring;

static unsigned g_rings_started;  // reduce-scatters started by this process: the next ring's tag

static void dist_mpi_work_init(ProcessGroup *pg, DistWork *w) {
  w->counts = mallocCheck((size_t)pg->world_size * sizeof *w->counts);
  Ring *g = mallocCheck(sizeof *g);
  memset(g, 0, sizeof *g);
  w->ring = g;
}

static void dist_mpi_work_free(ProcessGroup *pg, DistWork *w) {
  (void)pg;
  Ring *g = w->ring;
  if (g) free(g->tmp);
  free(g);
  free(w->counts);
  w->ring = NULL;
  w->counts = NULL;
}

static int ring_mod(int a, int W) { return (a % W + W) % W; }

// Where chunk j starts in the send buffer, in bytes (w->counts: the chunk sizes).
static size_t ring_offset(const DistWork *w, int j) {
  size_t elements = 0;
  for (int i = 0; i < j; i++) elements += (size_t)w->counts[i];
  return elements * dist_type_size(w->type);
}

// dst = a + b, n elements of type.
static void add_into(void *dst, const void *a, const void *b, size_t n, DistType type) {
  if (type == DIST_INT) {
    for (size_t i = 0; i < n; i++) ((int *)dst)[i] = ((const int *)a)[i] + ((const int *)b)[i];
  } else if (type == DIST_DOUBLE) {
    for (size_t i = 0; i < n; i++) ((double *)dst)[i] = ((const double *)a)[i] + ((const double *)b)[i];
  } else if (type == DIST_HALF || type == DIST_BF16) {
    for (size_t i = 0; i < n; i++) {
      uint16_t x = ((const uint16_t *)a)[i], y = ((const uint16_t *)b)[i];
      ((uint16_t *)dst)[i] = type == DIST_HALF ? half_add(x, y) : bf16_add(x, y);
    }
  } else {
    for (size_t i = 0; i < n; i++) ((float *)dst)[i] = ((const float *)a)[i] + ((const float *)b)[i];
  }
}

// Posts the step's two messages: chunk (r-s-1) to rank r+1, chunk (r-s-2) from rank r-1.
static void ring_post(const ProcessGroup *pg, DistWork *w, Ring *g) {
  int W = pg->world_size, r = pg->rank, out = ring_mod(r - g->step - 1, W), in = ring_mod(r - g->step - 2, W);
  MPI_Datatype t = mpi_type(w->type);
  mpiCheck(MPI_Isend(g->send + ring_offset(w, out), w->counts[out], t, ring_mod(r + 1, W), g->tag,
                     MPI_COMM_WORLD, &g->req[0]));
  mpiCheck(MPI_Irecv(g->tmp, w->counts[in], t, ring_mod(r - 1, W), g->tag, MPI_COMM_WORLD, &g->req[1]));
}

// The step's messages are done: add the received chunk into ours (the last step: into recv), then
// post the next step. Returns whether the ring has ended.
static bool ring_advance(const ProcessGroup *pg, DistWork *w, Ring *g) {
  int W = pg->world_size, in = ring_mod(pg->rank - g->step - 2, W);
  char *own = g->send + ring_offset(w, in);
  bool last = g->step == W - 2;
  add_into(last ? w->buf : own, g->tmp, own, (size_t)w->counts[in], w->type);
  if (last) return true;
  g->step++;
  ring_post(pg, w, g);
  return false;
}

static void ring_start(ProcessGroup *pg, void *send, const size_t *counts, DistWork *w) {
  Ring *g = w->ring;
  size_t size = dist_type_size(w->type), largest = 0;
  for (int j = 0; j < pg->world_size; j++) {
    w->counts[j] = whole_count(counts[j], "the reduce-scatter's MPI_Isend");
    if (counts[j] > largest) largest = counts[j];
  }
  if (largest * size > g->tmp_bytes) {
    free(g->tmp);
    g->tmp_bytes = largest * size;
    g->tmp = mallocCheck(g->tmp_bytes);
  }
  g->send = send;
  g->step = 0;
  g->tag = (int)(g_rings_started++ % 32768u);  // MPI guarantees tags up to 32767
  g->active = true;
  ring_post(pg, w, g);
}

static void finish(ProcessGroup *pg, DistWork *w);

static void dist_mpi_reduce_scatter_start(ProcessGroup *pg, void *send, const size_t *counts, DistWork *w) {
  dev_event_record(pg->ctx, &w->start, NULL);
  if (dist_on_gpu(pg)) {  // staged through the host: nothing to overlap, reduce now
    reduce_scatter_staged(pg, send, counts, w);
    dev_event_record(pg->ctx, &w->end, NULL);
    w->done = true;
    return;
  }
  if (pg->world_size == 1) {  // a ring of one has no step (W - 2 < 0): the whole input is this rank's part
    if (send != w->buf) memmove(w->buf, send, counts[0] * dist_type_size(w->type));
    finish(pg, w);
    return;
  }
  ring_start(pg, send, counts, w);
}

static void finish(ProcessGroup *pg, DistWork *w) {
  if (w->ring) ((Ring *)w->ring)->active = false;
  if (w->op == DIST_AVG) scale_avg(pg, w->buf, w->n);
  dev_event_record(pg->ctx, &w->end, NULL);
  w->done = true;
}

// A ring advances as far as its messages have arrived, without blocking.
static bool ring_test(ProcessGroup *pg, DistWork *w, Ring *g) {
  int flag = 0;
  do {
    mpiCheck(MPI_Testall(2, g->req, &flag, MPI_STATUSES_IGNORE));
  } while (flag && !ring_advance(pg, w, g));
  return flag != 0;
}

static bool dist_mpi_test(ProcessGroup *pg, DistWork *w) {
  Ring *g = w->ring;
  int flag = 0;
  if (g && g->active) {
    flag = ring_test(pg, w, g);
  } else {
    mpiCheck(MPI_Test((MPI_Request *)w->req, &flag, MPI_STATUS_IGNORE));
  }
  if (flag) finish(pg, w);
  return flag != 0;
}

static void dist_mpi_wait(ProcessGroup *pg, DistWork *w) {
  Ring *g = w->ring;
  if (g && g->active) {
    do {
      WAITING("MPI_Waitall (reduce-scatter ring)", MPI_Waitall(2, g->req, MPI_STATUSES_IGNORE));
    } while (!ring_advance(pg, w, g));
  } else {
    WAITING("MPI_Wait", MPI_Wait((MPI_Request *)w->req, MPI_STATUS_IGNORE));
  }
  finish(pg, w);
}

static void dist_mpi_broadcast(ProcessGroup *pg, void *buf, size_t n, DistType type, int root) {
  size_t bytes = n * dist_type_size(type);
  void *host = buf;
  if (dist_on_gpu(pg)) {
    host = dist_staging(pg, bytes);
    dev_sync(pg->ctx);  // MPI writes the staging buffer: no queued upload may still read it
    if (pg->rank == root) dev_download(pg->ctx, host, buf, bytes);
  }
  size_t size = dist_type_size(type);
  for (size_t i = 0; i < n; i += (size_t)chunk(n, i))
    WAITING("MPI_Bcast",
            MPI_Bcast((char *)host + i * size, chunk(n, i), mpi_type(type), root, MPI_COMM_WORLD));
  if (dist_on_gpu(pg)) dev_upload(pg->ctx, buf, host, bytes);
}

void dist_mpi_broadcast_bytes(void *buf, size_t bytes, int root) {
  for (size_t i = 0; i < bytes; i += (size_t)chunk(bytes, i))
    WAITING("MPI_Bcast", MPI_Bcast((char *)buf + i, chunk(bytes, i), MPI_BYTE, root, MPI_COMM_WORLD));
}

static void dist_mpi_all_gather(ProcessGroup *pg, const void *send, void *recv, size_t n, DistType type) {
  size_t bytes = n * dist_type_size(type);
  int count = whole_count(n, "MPI_Allgather");
  if (!dist_on_gpu(pg)) {
    bool in_place = send == (const char *)recv + (size_t)pg->rank * bytes;  // MPI forbids aliasing
    WAITING("MPI_Allgather", MPI_Allgather(in_place ? MPI_IN_PLACE : send, count, mpi_type(type), recv, count,
                                           mpi_type(type), MPI_COMM_WORLD));
    return;
  }
  // [mine | everyone's]: mine is downloaded before anything is uploaded, so in place works too
  char *host = dist_staging(pg, bytes * (size_t)(pg->world_size + 1));
  dev_download(pg->ctx, host, send, bytes);
  WAITING("MPI_Allgather",
          MPI_Allgather(host, count, mpi_type(type), host + bytes, count, mpi_type(type), MPI_COMM_WORLD));
  dev_upload(pg->ctx, recv, host + bytes, bytes * (size_t)pg->world_size);
}

static void dist_mpi_all_gather_start(ProcessGroup *pg, const void *send, DistWork *w) {
  dev_event_record(pg->ctx, &w->start, NULL);
  size_t n = w->n / (size_t)pg->world_size, bytes = n * dist_type_size(w->type);
  if (dist_on_gpu(pg)) {  // staged through the host: nothing to overlap, gather now
    dist_mpi_all_gather(pg, send, w->buf, n, w->type);
    dev_event_record(pg->ctx, &w->end, NULL);
    w->done = true;
    return;
  }
  int count = whole_count(n, "MPI_Iallgather");
  bool in_place = send == (const char *)w->buf + (size_t)pg->rank * bytes;  // MPI forbids aliasing
  mpiCheck(MPI_Iallgather(in_place ? MPI_IN_PLACE : send, count, mpi_type(w->type), w->buf, count,
                          mpi_type(w->type), MPI_COMM_WORLD, (MPI_Request *)w->req));
}

static void dist_mpi_barrier(ProcessGroup *pg) {
  (void)pg;
  WAITING("MPI_Barrier", MPI_Barrier(MPI_COMM_WORLD));
}

void dist_mpi_finalize(void) { WAITING("MPI_Finalize", MPI_Finalize()); }  // waits for all ranks

// MPI_Init is the launcher's (dist_init, under mpirun whatever the backend), and so is MPI_Finalize
// (dist_destroy): the backend itself has nothing to connect or destroy.
static void dist_mpi_connect(ProcessGroup *pg) { (void)pg; }

static void dist_mpi_destroy(ProcessGroup *pg) { (void)pg; }

// MPI has no groups of collectives: each runs when it is called (dist_group_start() does nothing).
static void dist_mpi_group(ProcessGroup *pg) { (void)pg; }

// The first line of MPI_Get_library_version (e.g. `Open MPI v4.1.2, package: ...`), cut at 120
// characters: enough to tell the implementation and its release in a message.
static const char *dist_mpi_version(void) {
  static char line[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  mpiCheck(MPI_Get_library_version(line, &len));
  line[strcspn(line, "\r\n")] = '\0';
  if (strlen(line) > 120) line[120] = '\0';
  return line;
}

const DistBackendOps *dist_mpi_ops(void) {
  static const DistBackendOps ops = {
      .name = "mpi",
      .library = "MPI",
      .built = true,
      .version = dist_mpi_version,
      .connect = dist_mpi_connect,
      .all_reduce = dist_mpi_all_reduce,
      .all_reduce_start = dist_mpi_all_reduce_start,
      .reduce_scatter_start = dist_mpi_reduce_scatter_start,
      .all_gather = dist_mpi_all_gather,
      .all_gather_start = dist_mpi_all_gather_start,
      .broadcast = dist_mpi_broadcast,
      .barrier = dist_mpi_barrier,
      .test = dist_mpi_test,
      .wait = dist_mpi_wait,
      .work_init = dist_mpi_work_init,
      .work_free = dist_mpi_work_free,
      .group_start = dist_mpi_group,
      .group_end = dist_mpi_group,
      .destroy = dist_mpi_destroy,
  };
  return &ops;
}
