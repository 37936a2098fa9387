/**
 * @file
 * @brief Internal interface between the process group (dist.c; dist_launch.c, its start) and its
 * backend files: dist_mpi.c (built with MPI, HAVE_MPI), dist_nccl.c (built with NCCL, HAVE_NCCL) and
 * dist_gloo.cc (built with Gloo, HAVE_GLOO: the one C++ file of common/, behind these C declarations).
 * Each backend file gives dist.c one table of operations (DistBackendOps), which dist.c completes and
 * calls through; a backend that this build lacks has a table whose every slot, completed, ends the job
 * saying that the program was built without it. The MPI launcher's own calls (MPI_Init, the abort hook,
 * MPI_Finalize: under mpirun whatever the backend) are plain functions. Not for the steps: they use dist.h.
 */
#ifndef DDP_DIST_BACKEND_H
#define DDP_DIST_BACKEND_H

#include <stdint.h>

#include "dist.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @brief Whether the process group's buffers are on the GPU (the MPI and Gloo backends stage them). */
bool dist_on_gpu(const ProcessGroup *pg);

/**
 * @brief Host memory for a collective on GPU buffers: the pinned staging buffer of @p pg, grown to the
 * largest size seen (so only the first calls allocate), shared by the MPI and Gloo backends.
 * @param[in,out] pg  the process group (owns the buffer; dist_destroy frees it).
 * @param[in] bytes   the size needed.
 * @return the buffer, at least @p bytes long (pinned host memory).
 */
void *dist_staging(ProcessGroup *pg, size_t bytes);

/**
 * @brief The operations of one backend, one slot each: the table that dist.c calls through, as
 * PyTorch's ProcessGroup calls its backend's subclass (ProcessGroupMPI, ProcessGroupNCCL,
 * ProcessGroupGloo). Each backend fills its own table in its own file (dist_mpi_ops(),
 * dist_nccl_ops(), dist_gloo_ops()); dist.c keeps what every backend shares: the argument checks,
 * the group of one process and the in-place forms, the watchdog, the work handles and their events.
 *
 * A slot left NULL is an operation the backend does not have. dist.c never calls a table as a backend
 * wrote it but the copy that dist_backend_complete() made whole: there each NULL slot holds its
 * default, which ends the job (die(), on every rank) naming the call, the backend and the operation,
 * e.g. `dist_all_gather_async: the gloo backend has no all-gather-async`, so that a missing operation
 * is never another backend's; and dist.c calls every slot as it is, with no check. Where a backend has
 * nothing to do (MPI's group_start, NCCL's work_init) it fills the slot with a function that does
 * nothing, so that the choice is written down.
 *
 * dist.c answers a group of one process on MPI or Gloo itself (every collective is the identity) and
 * calls no slot for it, except connect (which makes the group) and work_free (which frees whatever
 * work_init gave, nothing when it gave nothing).
 */
typedef struct DistBackendOps {
  const char *name;     ///< the backend's name, as --backend spells it: "mpi", "nccl" or "gloo"
  const char *library;  ///< the library, as refusals name it: "MPI", "NCCL" or "Gloo"
  bool built;           ///< false for the table of a backend this build lacks (every slot its default)
  /** @brief The loaded library's version as messages name it (NCCL: `2.21.5`; MPI: the first line of
   *  MPI_Get_library_version), after connect; NULL where the backend cannot tell (Gloo leaves the slot
   *  NULL: its default returns NULL). */
  const char *(*version)(void);

  /** @brief Joins the group (after dist_init() chose the backend, once the context is known); see
   *  dist_connect(). */
  void (*connect)(ProcessGroup *pg);
  /** @brief Blocking all-reduce in place; see dist_all_reduce(). */
  void (*all_reduce)(ProcessGroup *pg, void *buf, size_t n, DistType type, DistOp op);
  /** @brief Starts the all-reduce of @p w (buf, n, type, op set by dist.c), recording its start
   *  event; see dist_all_reduce_async(). */
  void (*all_reduce_start)(ProcessGroup *pg, DistWork *w);
  /** @brief Starts the reduce-scatter of @p send (chunk j: counts[j] elements) into w->buf (this
   *  rank's chunk, w->n elements); see dist_reduce_scatter_async(). */
  void (*reduce_scatter_start)(ProcessGroup *pg, void *send, const size_t *counts, DistWork *w);
  /** @brief Blocking all-gather of @p n elements per rank; see dist_all_gather(). */
  void (*all_gather)(ProcessGroup *pg, const void *send, void *recv, size_t n, DistType type);
  /** @brief Starts the all-gather of @p send into w->buf (w->n: all ranks' elements, the in-place
   *  form when @p send is this rank's part of it); see dist_all_gather_async(). */
  void (*all_gather_start)(ProcessGroup *pg, const void *send, DistWork *w);
  /** @brief Blocking broadcast from @p root in place; see dist_broadcast(). */
  void (*broadcast)(ProcessGroup *pg, void *buf, size_t n, DistType type, int root);
  /** @brief Waits for every rank; see dist_barrier(). */
  void (*barrier)(ProcessGroup *pg);
  /** @brief Whether the started, not yet done @p w has finished (never blocks); when it has, does
   *  what completion needs (DIST_AVG's division, the end event); see dist_test(). */
  bool (*test)(ProcessGroup *pg, DistWork *w);
  /** @brief Completes the started, not yet done @p w (the host waits, or the compute stream does);
   *  see dist_wait(). */
  void (*wait)(ProcessGroup *pg, DistWork *w);
  /** @brief Gives @p w what this backend's asynchronous collectives need, so that starting one
   *  allocates nothing. */
  void (*work_init)(ProcessGroup *pg, DistWork *w);
  /** @brief Frees what work_init gave @p w (nothing, when it gave nothing). */
  void (*work_free)(ProcessGroup *pg, DistWork *w);
  /** @brief Opens a group of collectives launched together; see dist_group_start(). */
  void (*group_start)(ProcessGroup *pg);
  /** @brief Closes the group; see dist_group_end(). */
  void (*group_end)(ProcessGroup *pg);
  /** @brief Leaves the group (the last collectives, the communicator), before MPI is finalised;
   *  see dist_destroy(). */
  void (*destroy)(ProcessGroup *pg);
  /** @brief A recoverable group's failure, NULL while it works; see dist_failure(). */
  const char *(*failure)(ProcessGroup *pg);
  /** @brief Leaves the recoverable group (if connected) and joins the one at @p m (pg's rank and world
   *  size already set to @p m's); see dist_reconnect(). @p m NULL: leaves only (dist_abandon()). */
  void (*reconnect)(ProcessGroup *pg, const DistMeeting *m);
} DistBackendOps;

/**
 * @brief The table of backend @p b, completed (dist_backend_complete()) once, on the first call: the
 * backend's own (dist_mpi_ops(), ...) in a build that has it, else one whose `built` is false and whose
 * every slot, called, ends the job saying that the program was built without that library (`CALL:
 * this program was built without MPI`). Thread-safe.
 */
const DistBackendOps *dist_backend_ops(Backend b);

/**
 * @brief Fills every NULL slot of @p ops with its default: a function of the slot's signature that ends
 * the job, on every rank, naming the public call that needed it, the backend and the operation (`CALL:
 * the NAME backend has no OPERATION`), or, in the table of a backend this build lacks (`built` false),
 * `CALL: this program was built without LIBRARY`. The backend and the library are those of the table
 * that the call went through (ProcessGroup::ops, else dist_backend_ops() of its backend), which must be
 * a completed one. version's default returns NULL (the backend cannot tell). Filled slots stay as
 * they are.
 * @param[in,out] ops  the table, a copy of a backend's (the backends' own tables are const).
 */
void dist_backend_complete(DistBackendOps *ops);

/** @brief The MPI backend's table (dist_mpi.c; a build with MPI only). */
const DistBackendOps *dist_mpi_ops(void);
/** @brief The NCCL backend's table (dist_nccl.c; a build with NCCL only). */
const DistBackendOps *dist_nccl_ops(void);
/** @brief The Gloo backend's table (dist_gloo.cc; a build with Gloo only). */
const DistBackendOps *dist_gloo_ops(void);

/**
 * @brief The bootstrap address of an environment launch, one rule for NCCL's root and Gloo's
 * rendezvous store: MASTER_ADDR as a host or bracketed IPv6 literal, and DDP_NCCL_PORT when set, else
 * MASTER_PORT itself when TORCHELASTIC_USE_AGENT_STORE=False (torchrun left that port to the workers,
 * where PyTorch's rank 0 serves its own store), else MASTER_PORT + 1 (an agent's store may hold
 * MASTER_PORT).
 * @param[out] host rank 0's address.
 * @param[in]  size the size of @p host (INET6_ADDRSTRLEN + 80 is enough).
 * @return the port; -1 (and @p host untouched) without MASTER_ADDR and a port.
 */
int dist_bootstrap_address(char *host, size_t size);

/** @brief Copies @p size bytes at @p bytes from rank 0 to every rank, over MPI (an MPI launch: NCCL's
 *  unique id); ends the job in a build without MPI. */
void dist_share_from_rank0(void *bytes, size_t size);

/** @brief Initialises MPI (the launcher's: under mpirun, whatever the backend) and fills rank, world
 *  size, local rank and local size from it. */
void dist_mpi_init(ProcessGroup *pg);
/** @brief Registers MPI_Abort as the job-wide abort hook. */
void dist_mpi_set_abort(void);
/** @brief MPI broadcast of host bytes (used to share the NCCL unique id). */
void dist_mpi_broadcast_bytes(void *buf, size_t bytes, int root);
/** @brief Finalises MPI. */
void dist_mpi_finalize(void);

/**
 * @brief True when NCCL's last error message (ncclGetLastError) says that several ranks use one GPU:
 * "Duplicate GPU detected" (NCCL <= 2.29) or "Multiple Ranks are using the same GPU/Partition"
 * (NCCL >= 2.30). Pure, and built without NCCL too (unit-tested on both messages).
 * @param[in] last the message, or NULL (false).
 */
bool dist_nccl_says_gpu_shared(const char *last);

/**
 * @brief The largest number of ranks on any node, from values every rank of the job reads alike (so
 * that every rank takes the same decision from it, e.g. NCCL_MAX_CTAS): the first of @p
 * local_world_size, @p ntasks_per_node and the largest count of @p layout that is set and valid. Pure.
 * @param[in] local_world_size LOCAL_WORLD_SIZE (torchrun), or NULL.
 * @param[in] ntasks_per_node  SLURM_NTASKS_PER_NODE, or NULL.
 * @param[in] layout           SLURM_STEP_TASKS_PER_NODE (or SLURM_TASKS_PER_NODE), e.g. `2(x3),1`, or NULL.
 * @return the count, or -1 when none is set and valid (the ranks cannot know it alike).
 */
int dist_most_ranks_per_node(const char *local_world_size, const char *ntasks_per_node, const char *layout);

/**
 * @brief Whether a communicator limits itself to 2 CTAs (NCCL_MAX_CTAS=2): ranks may share a GPU
 * (NCCL_MULTI_RANK_GPU_ENABLE=1) and some node has more ranks than GPUs. Pure; from inputs every rank
 * has alike, so every rank decides the same.
 * @param[in] multi_rank_gpu NCCL_MULTI_RANK_GPU_ENABLE is 1.
 * @param[in] most_per_node  dist_most_ranks_per_node() (or MPI's exact count), -1 when unknown: false.
 * @param[in] gpus           GPUs visible to a node's ranks.
 */
bool dist_nccl_limit_ctas(bool multi_rank_gpu, int most_per_node, int gpus);

/** @brief Size in bytes of one element of @p type. */
static inline size_t dist_type_size(DistType type) {
  return type == DIST_DOUBLE                      ? sizeof(double)
         : type == DIST_INT                       ? sizeof(int)
         : type == DIST_HALF || type == DIST_BF16 ? sizeof(uint16_t)
                                                  : sizeof(float);
}

/** @brief True when the @p W counts of a reduce-scatter are all equal (the native collective). */
static inline bool dist_counts_equal(const size_t *counts, int W) {
  for (int j = 1; j < W; j++)
    if (counts[j] != counts[0]) return false;
  return true;
}

/** @brief Where chunk @p j of a reduce-scatter starts in its send buffer, in elements. */
static inline size_t dist_chunk_offset(const size_t *counts, int j) {
  size_t offset = 0;
  for (int i = 0; i < j; i++) offset += counts[i];
  return offset;
}

#ifdef __cplusplus
}
#endif
#endif
