/**
 * @file
 * @brief The process group (the analogue of `torch.distributed`): who am I, how many are we, and the
 * collectives, over NCCL (GPU buffers), MPI or Gloo (host buffers).
 *
 * Launchers. Under `mpirun -np N` the ranks come from MPI (local rank from a shared-memory split of
 * MPI_COMM_WORLD). Without mpirun the environment is read torchrun-style: `RANK`, `WORLD_SIZE`,
 * `LOCAL_RANK`, `MASTER_ADDR`, `MASTER_PORT`, or Slurm's `SLURM_PROCID`, `SLURM_NTASKS`,
 * `SLURM_LOCALID` under `srun`. A program started on its own is rank 0 of 1.
 *
 * NCCL bootstrap. Under mpirun, rank 0's `ncclUniqueId` is broadcast with MPI. With an environment
 * launch, every rank sets `NCCL_COMM_ID=MASTER_ADDR:(MASTER_PORT + 1)` before `ncclGetUniqueId`, so
 * NCCL's root listens on the port after torchrun's agent store (which may hold MASTER_PORT), or on
 * MASTER_PORT itself when torchrun sets TORCHELASTIC_USE_AGENT_STORE=False (nothing holds it then, as
 * PyTorch's own rank 0 serves its store there); set `DDP_NCCL_PORT` to choose another port.
 *
 * Gloo rendezvous. With an environment launch, rank 0 serves a small key-value store (store.h) on
 * that same port (MASTER_PORT + 1, or DDP_NCCL_PORT), through which the ranks exchange the
 * addresses of Gloo's TCP pairs; each rank's pairs listen on the local address of its connection to
 * the store (the interface that reaches MASTER_ADDR), or on `GLOO_SOCKET_IFNAME` when set.
 *
 * Failures. Every MPI, NCCL and Gloo call is checked. Under mpirun, any failed check on any rank
 * aborts the whole job (`MPI_Abort`). With an environment launch the failing rank aborts its
 * communicator and exits; its peers are ended by the launcher (torchrun and scripts/launch.sh stop
 * every rank when one fails; with srun pass `--kill-on-bad-exit=1`). On Gloo they also end by
 * themselves: a peer that exits breaks their TCP pairs at once ("Connection reset by peer"), a
 * frozen one runs out their collective's timeout (--timeout); each is a `[GLOO ERROR]` line. Once
 * an abort has begun on any thread of this process (a failed check, the watchdog), every function
 * below stops its caller for good instead of starting a collective (check_stop_if_ending()).
 *
 * CPU ranks: the MPI backend under MPI's launchers (`mpirun -np N`, or `srun --mpi=pmix -n N` under
 * Slurm), the Gloo backend under an environment launch (torchrun, scripts/launch.sh, a plain srun
 * with MASTER_ADDR and MASTER_PORT); a build without Gloo refuses an environment launch of several
 * CPU ranks with a message that says how to get it.
 */
#ifndef DDP_DIST_H
#define DDP_DIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "device.h"
#include "devmem.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @brief Which library carries the collectives. */
typedef enum Backend {
  BACKEND_MPI = 0,   ///< MPI on host buffers (device buffers are staged through pinned host memory)
  BACKEND_NCCL = 1,  ///< NCCL on device buffers, queued on a CUDA stream
  BACKEND_GLOO = 2   ///< Gloo's TCP transport on host buffers, run on a worker thread (dist_gloo.cc)
} Backend;

/** @brief Reduction of an all-reduce. */
typedef enum DistOp {
  DIST_SUM = 0,  ///< element-wise sum over ranks
  DIST_AVG = 1   ///< element-wise mean over ranks (NCCL's ncclAvg; MPI, Gloo: sum, then scale by 1/W)
} DistOp;

/** @brief Element type of a collective's buffer. */
typedef enum DistType {
  DIST_FLOAT = 0,   ///< float32
  DIST_INT = 1,     ///< int32
  DIST_DOUBLE = 2,  ///< float64
  DIST_HALF = 3,    ///< IEEE float16 (half.h); DIST_SUM only. MPI and Gloo add each pair in float32 and
                    ///< round to half (half_add(): the correctly rounded half sum, as NCCL's)
  DIST_BF16 = 4     ///< bfloat16 (half.h); DIST_SUM only, added as DIST_HALF
} DistType;

/** @brief How this process was started. */
typedef enum Launcher {
  LAUNCH_NONE = 0,  ///< started on its own: rank 0 of 1
  LAUNCH_MPI = 1,   ///< mpirun / mpiexec
  LAUNCH_ENV = 2,   ///< RANK / WORLD_SIZE / LOCAL_RANK (torchrun and the like)
  LAUNCH_SLURM = 3  ///< srun (SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID)
} Launcher;

struct DistBackendOps;

/**
 * @brief What this rank did between two calls of dist_lap() (one optimizer step, when the trainer
 * calls it at each step's end): the figures of the straggler report (straggler.h).
 */
typedef struct DistLap {
  double start;    ///< when the lap began, log_clock() seconds
  double arrived;  ///< when this rank started its first gradient collective of the lap (an asynchronous
                   ///< all-reduce or reduce-scatter: the reducer's first bucket); 0 when none
  double wait_s;   ///< seconds spent waiting for collectives: in dist_wait() and in the blocking ones
                   ///< (on NCCL, where they only queue work: about 0)
} DistLap;

/** @brief A process group: this process's place in the job, and the communicator. */
typedef struct ProcessGroup {
  int rank;            ///< global rank, 0 .. world_size-1
  int world_size;      ///< number of processes
  int local_rank;      ///< rank among the processes on this node (selects the GPU)
  int local_size;      ///< processes on this node
  Launcher launcher;   ///< how the job was started
  Backend backend;     ///< collectives library
  double timeout;      ///< seconds a collective may wait (watchdog)
  bool mpi_up;         ///< MPI was initialised by dist_init()
  void *nccl;          ///< ncclComm_t (BACKEND_NCCL), after dist_connect()
  const Ctx *ctx;      ///< the device context given to dist_connect()
  void *scratch;       ///< device, one int: the NCCL barrier's all-reduce
  void *comm_stream;   ///< cudaStream_t for asynchronous NCCL collectives (BACKEND_NCCL)
  DevEvent ready;      ///< recorded on the compute stream before each asynchronous collective
  void *gloo;          ///< the Gloo context and its worker thread (BACKEND_GLOO with several ranks)
  void *stage;         ///< pinned host staging buffer (BACKEND_MPI, BACKEND_GLOO with device buffers)
  size_t stage_bytes;  ///< size of @ref stage
  DistLap lap;         ///< the lap in progress (dist_lap())
  bool recoverable;    ///< a failed collective marks the group failed instead of ending the job (step 09)
  double op_timeout;   ///< seconds a collective of a recoverable group may wait before it fails
  /** @brief The backend's table of operations (dist_backend.h), set by dist_init(). */
  const struct DistBackendOps *ops;
} ProcessGroup;

/**
 * @brief Joins the job: finds rank, world size and local rank from the launcher (initialising MPI
 * under mpirun) and resolves the backend. Under any launcher a watchdog (watchdog.h) runs from here
 * until dist_destroy() has left the job: it ends this rank when start-up, a collective or shutdown
 * waits longer than @p timeout_s. Ends the job with a one-line reason when the launcher's
 * variables are missing or inconsistent (e.g. RANK >= WORLD_SIZE), or the backend is not built in or
 * cannot work with this launcher (MPI backend without mpirun and more than one rank).
 * @param[out] pg      the process group (not yet connected).
 * @param[in] backend  "auto" (nccl for CUDA; on the CPU mpi under mpirun, gloo under an environment
 *                     launch), "nccl", "mpi" or "gloo".
 * @param[in] dev      the device this process will use.
 * @param[in] timeout_s longest wait of a collective, seconds (`--timeout`).
 */
void dist_init(ProcessGroup *pg, const char *backend, Device dev, double timeout_s);

/**
 * @brief Creates the communicator for the device of @p c (NCCL: ncclCommInitRank on the current GPU)
 * and registers the job-wide abort hook. With several ranks it ends with one all-gather of every
 * rank's host name and local rank, which rank 0 prints as one line (placement.h), e.g.
 * `ranks: nodea 0-1 (local 0-1), nodeb 2-3 (local 0-1)`.
 * @param[in,out] pg process group from dist_init().
 * @param[in] c      this process's device context (kept; must outlive @p pg).
 * @pre device_init() selected the GPU given by the local rank.
 */
void dist_connect(ProcessGroup *pg, const Ctx *c);

/**
 * @brief Where this rank's flight recorder writes its last collectives when the job hangs or fails,
 * or on SIGUSR2: `<dir>/fr_<rank>.jsonl` (flight.h; `--fr_dir`; default `out`), which
 * `scripts/fr_analyze.py 'DIR/fr_{rank}.jsonl'` reads to name the rank that never arrived.
 * @param[in] pg  process group from dist_init().
 * @param[in] dir the folder (made when the ring is written); NULL keeps the current one.
 */
void dist_set_fr_dir(const ProcessGroup *pg, const char *dir);

/** @brief Where the members of a new group meet (dist_reconnect()): a store that another process serves
 *  (the lighthouse's), the keys' prefix, and this process's place in the group. */
typedef struct DistMeeting {
  const char *host;    ///< the store's host
  int port;            ///< the store's port
  const char *prefix;  ///< the group's keys, e.g. `q3/`: a group never meets another's keys
  int rank;            ///< this process's rank in the new group
  int world_size;      ///< the new group's size
  double timeout_s;    ///< the rendezvous's longest wait, seconds (0: the group's --timeout)
} DistMeeting;

/**
 * @brief Live recovery (step 09): makes @p pg recoverable, before dist_reconnect() connects it. A
 * collective that then fails (a peer died: at once; a peer froze: after @p op_timeout_s) does not end
 * the job: the group is marked failed (dist_failure() says why) and every later collective returns at
 * once without running, its results undefined (torchft's "after the first error, all subsequent calls
 * will be noops"), until dist_reconnect() builds a new group. Gloo, and NCCL (a non-blocking
 * communicator, aborted on an error or after @p op_timeout_s; compiled, never run on a GPU yet); MPI
 * ends the job with one line saying why (it would need ULFM).
 * @param[in,out] pg          the process group (dist_init()'s, not connected).
 * @param[in] op_timeout_s    seconds a collective may wait for its peers before it fails (> 0).
 */
void dist_set_recoverable(ProcessGroup *pg, double op_timeout_s);

/**
 * @brief Why the recoverable group failed: the first failed collective's reason, NULL while every
 * collective since dist_reconnect() succeeded. Gloo: never blocks (its collectives are done when
 * waited for). NCCL: waits until the collectives queued so far have finished or failed, so that the
 * answer covers them (a frozen peer: at most the operation timeout).
 * @param[in] pg the process group.
 */
const char *dist_failure(ProcessGroup *pg);

/**
 * @brief Tears a failed recoverable group down at once, before its replacement is known: its
 * connections close, so that a peer still waiting on this rank in a collective fails now rather than
 * after its timeout (the failure spreads hop by hop). Call dist_reconnect() next: no collective may
 * run in between. Nothing happens to a group that is not connected.
 * @param[in,out] pg the recoverable process group.
 */
void dist_abandon(ProcessGroup *pg);

/**
 * @brief Leaves the recoverable group, if connected (a failed one at once: the peers' pairs close,
 * which fails their collectives too), and joins a new one: @p m->world_size ranks meeting at the store
 * @p m->host:@p m->port under @p m->prefix, this process rank @p m->rank. A group of one rank needs no
 * connection. The flight recorder and the rank in messages follow the new rank.
 * @param[in,out] pg the recoverable process group (dist_set_recoverable()).
 * @param[in] c      the device context (as dist_connect()'s).
 * @param[in] m      where and as what to meet.
 */
void dist_reconnect(ProcessGroup *pg, const Ctx *c, const DistMeeting *m);

/**
 * @brief All-reduce in place, queued on the context's stream (NCCL) or blocking (MPI).
 * @param[in] caller the calling function (`__func__`, passed by the macro): the flight recorder's tag.
 * @param[in] pg    process group.
 * @param[in,out] buf device memory of the connected context, (n) elements of @p type.
 * @param[in] n     element count.
 * @param[in] type  element type.
 * @param[in] op    DIST_SUM or DIST_AVG (DIST_AVG for floats only).
 */
void dist_all_reduce_at(const char *caller, ProcessGroup *pg, void *buf, size_t n, DistType type, DistOp op);
/** @brief dist_all_reduce_at() with the calling function as the flight recorder's tag (flight.h). */
#define dist_all_reduce(...) dist_all_reduce_at(__func__, __VA_ARGS__)

/** @brief The name of @p type in messages: "float32", "int32", "float64", "fp16", "bf16" ("?" else). */
const char *dist_type_name(DistType type);

/**
 * @brief The sum canary: checks that the backend's library really sums @p type, by one blocking
 * all-reduce (DIST_SUM) of three known values whose sum is exact in every type, and ends the job
 * (die(), on every rank) when the answer is wrong, naming the library (backend, version), the type
 * and the kernel it lacks. An NCCL built without a type's kernels (its ONLY_FUNCS) runs that
 * all-reduce as an empty kernel, with no error: nothing else would notice. A group of one rank has
 * nothing to check. Every rank must call it at the same point (it is a collective). Test hook:
 * `DDP_TEST_UNSUMMED_CANARY=1` makes this rank keep its own values, as such a library would.
 * @param[in,out] pg the process group (connected).
 * @param[in] type   the type to check.
 * @param[in] who    what needs the type, for the message (e.g. "--comm_hook fp16").
 */
void dist_verify_sum(ProcessGroup *pg, DistType type, const char *who);

/**
 * @brief An asynchronous collective in flight: from dist_all_reduce_async(),
 * dist_reduce_scatter_async() or dist_all_gather_async() to dist_wait(). It records what completion has to
 * finish: the buffer the collective writes on this rank (DIST_AVG on MPI divides it by the world size there).
 */
typedef struct DistWork {
  const char *what;       ///< the collective: "all-reduce", "reduce-scatter" or "all-gather" (timelines)
  void *buf;              ///< device memory written: the buffer, or the reduce-scatter's received chunk
  size_t n;               ///< element count of @ref buf
  DistType type;          ///< element type
  DistOp op;              ///< reduction
  bool active;            ///< started and not yet waited for
  bool done;              ///< completion seen (MPI), or nothing to wait for
  unsigned char req[16];  ///< storage for the MPI_Request (BACKEND_MPI)
  int *counts;            ///< host, (world_size): a reduce-scatter's chunk sizes, read by MPI until
                          ///< completion (BACKEND_MPI with several ranks; else NULL)
  void *ring;             ///< the MPI reduce-scatter ring's state (dist_mpi.c; BACKEND_MPI with several
                          ///< ranks; else NULL)
  void *job;              ///< the collective queued on the Gloo worker (dist_gloo.cc; BACKEND_GLOO with
                          ///< several ranks; else NULL)
  DevEvent start;         ///< when the collective started (on the communication stream on a GPU)
  DevEvent end;           ///< when it ended (on the communication stream; on the CPU: when seen done)
  uint64_t seq;           ///< the flight recorder's number of the collective in flight (0: none)
  char name[24];          ///< what it carries, e.g. "bucket 3" (dist_work_name()); "" for the caller's name
  long long bytes;        ///< the bytes of the collectives started on it since dist_take_bytes(): @ref n
                          ///< elements of @ref type each (a hook may add what it sent through others)
} DistWork;

/**
 * @brief Prepares @p w for dist_all_reduce_async() and dist_reduce_scatter_async(): creates its
 * events and, on MPI with several ranks, its array of receive counts (so that starting a collective
 * allocates nothing).
 */
void dist_work_init(ProcessGroup *pg, DistWork *w);
/**
 * @brief Names what the collectives on @p w carry, e.g. `dist_work_name(&w, "bucket %d", i)`: the
 * flight recorder's tag for them (default: the function that starts them). After dist_work_init().
 * @param[in,out] w   the handle.
 * @param[in] fmt     printf-style name, at most 23 characters kept.
 */
void dist_work_name(DistWork *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/** @brief Releases what dist_work_init() created. @pre @p w is not active. */
void dist_work_free(ProcessGroup *pg, DistWork *w);

/**
 * @brief The bytes of the collectives started on @p n handles since the previous call (DistWork.bytes,
 * summed), and resets them: what the metrics file's `allreduce_bytes` counts (step 06's buckets).
 * @param[in,out] works host, (n): the handles.
 * @param[in] n         how many.
 * @return the bytes.
 */
long long dist_take_bytes(DistWork *works, int n);

/**
 * @brief Ends the lap in progress and starts the next one: the straggler report's clock (straggler.h),
 * which a trainer of steps 06–08 ticks once per optimizer step, after the step's last collective.
 * The test hook `DDP_TEST_SLOW_RANK=RANK:MS` makes rank RANK sleep MS milliseconds before the first
 * gradient collective of each lap, as if its backward were that much slower.
 * @param[in,out] pg process group.
 * @return the lap that ends now.
 */
DistLap dist_lap(ProcessGroup *pg);

/**
 * @brief Notes that this rank starts its step's gradient communication now (the first call of a lap
 * counts): what dist_all_reduce_async() and dist_reduce_scatter_async() do themselves, and what a
 * communication hook that communicates synchronously (PowerSGD) calls (comm_hook.h). Sleeps first
 * under the test hook `DDP_TEST_SLOW_RANK` (dist_lap()).
 */
void dist_lap_arrive(ProcessGroup *pg);

/**
 * @brief Starts an all-reduce in place and returns at once, so that computation can go on meanwhile.
 *
 * NCCL: an event is recorded on the compute stream (after the work that produced @p buf), the
 * communication stream waits for it, and the all-reduce runs on the communication stream. MPI:
 * `MPI_Iallreduce` on host buffers; it advances inside dist_test() and dist_wait() (device buffers
 * of a CUDA context are reduced at once, through the host). Gloo: queued on the worker thread, which
 * runs the process group's collectives one at a time in the order they were started (as PyTorch's
 * ProcessGroupGloo does, with one thread); device buffers as on MPI.
 * @param[in] caller the calling function (`__func__`, passed by the macro): the flight recorder's tag.
 * @param[in] pg    process group.
 * @param[in,out] buf device memory of the connected context, (n) elements.
 * @param[in] n     element count.
 * @param[in] type  element type.
 * @param[in] op    DIST_SUM or DIST_AVG.
 * @param[in,out] w the handle (from dist_work_init(), not active).
 */
void dist_all_reduce_async_at(const char *caller, ProcessGroup *pg, void *buf, size_t n, DistType type,
                              DistOp op, DistWork *w);
/** @brief dist_all_reduce_async_at() with the calling function as the flight recorder's tag (flight.h). */
#define dist_all_reduce_async(...) dist_all_reduce_async_at(__func__, __VA_ARGS__)

/**
 * @brief Starts a reduce-scatter and returns at once: chunk j of @p send, summed (or averaged) over
 * the ranks, lands in rank j's @p recv.
 *
 * @p send holds world_size consecutive chunks: chunk j has counts[j] elements and starts at
 * counts[0] + ... + counts[j-1]. This rank receives the reduction of chunk `rank` (counts[rank]
 * elements, possibly none). Counts may differ and may be 0: a bucket [a, b) of a flat buffer cut
 * into shards gets its counts from dist_shard_counts(). Every rank passes the same counts.
 *
 * NCCL: equal counts use `ncclReduceScatter`; unequal ones one `ncclReduce` per rank with a nonzero
 * count (root j), launched together in one NCCL group (as PyTorch's ProcessGroupNCCL does for an
 * uneven reduce_scatter); queued on the communication stream after the work the compute stream has
 * queued, as dist_all_reduce_async() does; not inside dist_group_start(). MPI on the CPU: a ring of
 * point-to-point messages (W-1 steps, one chunk of scratch) that advances inside dist_test() and
 * dist_wait(), because Open MPI's own reduce-scatters take scratch as large as the whole send buffer
 * (dist_mpi.c); with a CUDA context, `MPI_Reduce_scatter[_block]` at once, through the host. DIST_AVG
 * divides the received chunk on completion. Gloo (whose reduce-scatter this version lacks): an
 * all-reduce of the whole send buffer on the worker thread, of which this rank keeps its chunk
 * (twice the bytes of a reduce-scatter, what PyTorch falls back to). Neither buffer may be touched until
 * dist_wait(), and
 * @p send's contents are undefined afterwards (the ring makes its partial sums there).
 * @param[in] caller the calling function (`__func__`, passed by the macro): the flight recorder's tag.
 * @param[in] pg     process group.
 * @param[in,out] send device memory of the connected context, (counts[0] + ... + counts[W-1]) elements;
 *                   scratch afterwards.
 * @param[out] recv  device memory of the connected context, (counts[rank]) elements: apart from
 *                   @p send, or this rank's own chunk of it (in place: send + counts[0] + ... +
 *                   counts[rank-1]), as a sharded optimizer receives its shard where it lies.
 * @param[in] counts host, (world_size): the elements of each rank's chunk; read during the call only.
 * @param[in] type   element type.
 * @param[in] op     DIST_SUM or DIST_AVG (DIST_AVG for floats only).
 * @param[in,out] w  the handle (from dist_work_init(), not active).
 */
void dist_reduce_scatter_async_at(const char *caller, ProcessGroup *pg, void *send, void *recv,
                                  const size_t *counts, DistType type, DistOp op, DistWork *w);
/** @brief dist_reduce_scatter_async_at() with the calling function as the flight recorder's tag (flight.h).
 */
#define dist_reduce_scatter_async(...) dist_reduce_scatter_async_at(__func__, __VA_ARGS__)

/**
 * @brief The counts of a reduce-scatter for the slice [@p a, @p b) of a flat buffer cut into
 * @p W shards of @p S elements (rank j owns [j·S, (j+1)·S)): counts[j] is the size of the slice's
 * intersection with shard j, 0 when they do not meet. Rank j's piece starts at element
 * max(a, j·S) − j·S of its shard. Ends the job when a > b or b > W·S.
 * @param[in] a       first element of the slice.
 * @param[in] b       one past its last element.
 * @param[in] S       shard size, elements (ceil(n / W) for a buffer of n, padded to W·S).
 * @param[in] W       number of shards (the world size).
 * @param[out] counts host, (W).
 */
void dist_shard_counts(size_t a, size_t b, size_t S, int W, size_t *counts);

/**
 * @brief Lets an asynchronous collective advance (MPI_Test) and says whether it has finished (Gloo:
 * reads the worker's completion flag, and ends the job when the collective failed). Never blocks.
 * @return true when @p w is complete (always true on NCCL, whose completion the streams order).
 */
bool dist_test(ProcessGroup *pg, DistWork *w);

/**
 * @brief Completes an asynchronous collective: MPI waits for it and averages; Gloo waits for the worker
 * thread to finish it (and ends the job with Gloo's reason when it failed); NCCL makes the compute
 * stream wait for it (no host synchronisation). Afterwards @p w may be started again.
 * @param[in] pg    process group.
 * @param[in,out] w an active handle.
 */
void dist_wait(ProcessGroup *pg, DistWork *w);

/**
 * @brief Broadcast from @p root in place (device memory of the connected context).
 * @param[in] caller the calling function (`__func__`, passed by the macro): the flight recorder's tag.
 * @param[in] pg      process group.
 * @param[in,out] buf device, (n) elements of @p type.
 * @param[in] n       element count.
 * @param[in] type    element type.
 * @param[in] root    rank whose data everyone receives.
 */
void dist_broadcast_at(const char *caller, ProcessGroup *pg, void *buf, size_t n, DistType type, int root);
/** @brief dist_broadcast_at() with the calling function as the flight recorder's tag (flight.h). */
#define dist_broadcast(...) dist_broadcast_at(__func__, __VA_ARGS__)

/**
 * @brief All-gather: rank r's @p n elements land at `recv + r·n` on every rank. In place when
 * @p send is `recv + rank·n` (each rank's part is already where it belongs, as a shard of a flat
 * buffer is after a sharded optimizer step): MPI_IN_PLACE on MPI, natively on NCCL. Any other
 * overlap of @p send and @p recv ends the job. NCCL: queued on the context's stream; MPI: blocking.
 * @param[in] caller the calling function (`__func__`, passed by the macro): the flight recorder's tag.
 * @param[in] pg    process group.
 * @param[in] send  device, (n); `recv + rank·n` for the in-place form.
 * @param[out] recv device, (world_size · n).
 * @param[in] n     elements per rank.
 * @param[in] type  element type.
 */
void dist_all_gather_at(const char *caller, ProcessGroup *pg, const void *send, void *recv, size_t n,
                        DistType type);
/** @brief dist_all_gather_at() with the calling function as the flight recorder's tag (flight.h). */
#define dist_all_gather(...) dist_all_gather_at(__func__, __VA_ARGS__)

/**
 * @brief dist_all_gather() started asynchronously (`MPI_Iallgather`; NCCL: `ncclAllGather` on the
 * communication stream after the work queued so far on the compute stream, as
 * dist_all_reduce_async() does), so that computation can go on meanwhile: FSDP's prefetch of the
 * next layer's parameters. Gloo: queued on the worker thread, as dist_all_reduce_async() is. Complete
 * it with dist_wait() (dist_test() lets MPI progress); neither buffer may be touched before. @p w's
 * `what` is "all-gather", its `buf` @p recv and its `n` the gathered elements (world_size · @p n). MPI
 * and Gloo with a CUDA context: blocking, through the host.
 * @param[in] caller the calling function (`__func__`, passed by the macro): the flight recorder's tag.
 * @param[in] pg    process group.
 * @param[in] send  device, (n); `recv + rank·n` for the in-place form.
 * @param[out] recv device, (world_size · n).
 * @param[in] n     elements per rank.
 * @param[in] type  element type.
 * @param[in,out] w the handle (from dist_work_init(), not active).
 */
void dist_all_gather_async_at(const char *caller, ProcessGroup *pg, const void *send, void *recv, size_t n,
                              DistType type, DistWork *w);
/** @brief dist_all_gather_async_at() with the calling function as the flight recorder's tag (flight.h). */
#define dist_all_gather_async(...) dist_all_gather_async_at(__func__, __VA_ARGS__)

/**
 * @brief Opens a group of collectives: on NCCL (`ncclGroupStart`), the collectives called until
 * dist_group_end() are launched together, as one operation, instead of one after another; on MPI it
 * does nothing. Only dist_all_reduce() may be called inside a group, and the values it produces are
 * there only after dist_group_end().
 * @param[in] pg process group.
 */
void dist_group_start(ProcessGroup *pg);

/**
 * @brief Closes the group opened by dist_group_start() (`ncclGroupEnd`): its collectives are queued.
 * @param[in] pg process group.
 */
void dist_group_end(ProcessGroup *pg);

/**
 * @brief Waits until every rank has reached this call (and, on NCCL, until queued work finished).
 * @param[in] caller the calling function (`__func__`, passed by the macro): the flight recorder's tag.
 * @param[in] pg process group.
 */
void dist_barrier_at(const char *caller, ProcessGroup *pg);
/** @brief dist_barrier_at() with the calling function as the flight recorder's tag (flight.h). */
#define dist_barrier(...) dist_barrier_at(__func__, __VA_ARGS__)

/**
 * @brief Leaves the job: destroys the communicator, finalises MPI, removes the abort hook.
 * @param[in,out] pg process group.
 */
void dist_destroy(ProcessGroup *pg);

/** @brief The name of a backend: "mpi", "nccl" or "gloo". */
const char *dist_backend_name(Backend b);

/**
 * @brief Which launcher started a process whose environment is @p env (pure: reads only @p env).
 *
 * `OMPI_*` (Open MPI's mpirun): LAUNCH_MPI. `PMIX_RANK`, `PMI_SIZE` or `PMI_RANK` (srun --mpi=pmix,
 * other MPIs' launchers): LAUNCH_MPI where MPI is built (@p have_mpi); else they are ignored in favour
 * of `RANK`/`WORLD_SIZE` (LAUNCH_ENV: torchrun, scripts/launch.sh) or `SLURM_PROCID` and
 * `SLURM_NTASKS` (LAUNCH_SLURM: srun), and give LAUNCH_MPI only when neither is there (so that
 * dist_init() can say that MPI is not built). Otherwise LAUNCH_ENV, LAUNCH_SLURM, or LAUNCH_NONE.
 * @param[in] env      `NAME=VALUE` strings, NULL-terminated (as `environ`); NULL for none.
 * @param[in] have_mpi whether this build has the MPI backend (dist_have_mpi()).
 */
Launcher dist_detect_launcher(char *const *env, bool have_mpi);

/** @brief True when this build has the MPI backend. */
bool dist_have_mpi(void);
/** @brief True when this build has the NCCL backend. */
bool dist_have_nccl(void);
/** @brief True when this build has the Gloo backend. */
bool dist_have_gloo(void);

#ifdef __cplusplus
}
#endif
#endif
