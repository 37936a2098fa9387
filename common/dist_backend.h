/**
 * @file
 * @brief Internal interface between the process group (dist.c) and its backend files: dist_mpi.c
 * (built with MPI, HAVE_MPI), dist_nccl.c (built with NCCL, HAVE_NCCL) and dist_gloo.cc (built with
 * Gloo, HAVE_GLOO: the one C++ file of common/, behind these C declarations). dist.c calls a back end
 * only in a build that has it. Not for the steps: they use dist.h.
 */
#ifndef DDP_DIST_BACKEND_H
#define DDP_DIST_BACKEND_H

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

/** @brief Initialises MPI and fills rank, world size, local rank and local size from it. */
void dist_mpi_init(ProcessGroup *pg);
/** @brief Registers MPI_Abort as the job-wide abort hook. */
void dist_mpi_set_abort(void);
/** @brief MPI all-reduce (staging device buffers through pinned host memory); see dist_all_reduce(). */
void dist_mpi_all_reduce(ProcessGroup *pg, void *buf, size_t n, DistType type, DistOp op);
/** @brief Starts an MPI_Iallreduce for @p w (blocking, through the host, for GPU buffers). */
void dist_mpi_all_reduce_start(ProcessGroup *pg, DistWork *w);
/** @brief Gives @p w the counts array and ring state of an MPI reduce-scatter (several ranks). */
void dist_mpi_work_init(ProcessGroup *pg, DistWork *w);
/** @brief Frees what dist_mpi_work_init() allocated. */
void dist_mpi_work_free(DistWork *w);
/**
 * @brief Starts the reduce-scatter ring for @p w, whose buf, n, type and op dist.c has set (blocking
 * MPI_Reduce_scatter[_block], through the host, for GPU buffers); see dist_reduce_scatter_async().
 */
void dist_mpi_reduce_scatter_start(ProcessGroup *pg, void *send, const size_t *counts, DistWork *w);
/** @brief MPI_Test on @p w; on completion averages if asked and records the end event. */
bool dist_mpi_test(ProcessGroup *pg, DistWork *w);
/** @brief MPI_Wait on @p w; then as dist_mpi_test(). */
void dist_mpi_wait(ProcessGroup *pg, DistWork *w);
/** @brief MPI broadcast of device or host memory; see dist_broadcast(). */
void dist_mpi_broadcast(ProcessGroup *pg, void *buf, size_t n, DistType type, int root);
/** @brief MPI broadcast of host bytes (used to share the NCCL unique id). */
void dist_mpi_broadcast_bytes(void *buf, size_t bytes, int root);
/** @brief MPI all-gather; see dist_all_gather(). */
void dist_mpi_all_gather(ProcessGroup *pg, const void *send, void *recv, size_t n, DistType type);
/**
 * @brief Starts an MPI_Iallgather for @p w (buf: the receive buffer, n: all ranks' elements), sending
 * @p send (MPI_IN_PLACE when it is this rank's part of buf); blocking, through the host, for GPU
 * buffers. See dist_all_gather_async().
 */
void dist_mpi_all_gather_start(ProcessGroup *pg, const void *send, DistWork *w);
/** @brief MPI barrier. */
void dist_mpi_barrier(void);
/** @brief Finalises MPI. */
void dist_mpi_finalize(void);

/**
 * @brief Creates the NCCL communicator.
 * @param[in,out] pg    the process group (rank, world size, context); gets the communicator.
 * @param[in]     share NULL when NCCL_COMM_ID gives every rank the same unique id (an environment
 *                      launch); else a function that copies rank 0's id (@p size bytes at @p id) to
 *                      every rank (over MPI under mpirun).
 */
void dist_nccl_connect(ProcessGroup *pg, void (*share)(void *id, size_t size));
/** @brief NCCL all-reduce on the context's stream; see dist_all_reduce(). */
void dist_nccl_all_reduce(ProcessGroup *pg, void *buf, size_t n, DistType type, DistOp op);
/** @brief NCCL all-reduce queued on @p stream (a cudaStream_t). */
void dist_nccl_all_reduce_on(ProcessGroup *pg, void *buf, size_t n, DistType type, DistOp op, void *stream);
/**
 * @brief NCCL reduce-scatter queued on @p stream (a cudaStream_t): ncclReduceScatter for equal
 * counts, else one ncclReduce per rank with a nonzero count in one group; see
 * dist_reduce_scatter_async().
 */
void dist_nccl_reduce_scatter_on(ProcessGroup *pg, const void *send, void *recv, const size_t *counts,
                                 DistType type, DistOp op, void *stream);
/** @brief NCCL broadcast on the context's stream; see dist_broadcast(). */
void dist_nccl_broadcast(ProcessGroup *pg, void *buf, size_t n, DistType type, int root);
/** @brief NCCL all-gather on the context's stream; see dist_all_gather(). */
void dist_nccl_all_gather(ProcessGroup *pg, const void *send, void *recv, size_t n, DistType type);
/** @brief NCCL all-gather queued on @p stream (a cudaStream_t); see dist_all_gather_async(). */
void dist_nccl_all_gather_on(ProcessGroup *pg, const void *send, void *recv, size_t n, DistType type,
                             void *stream);
/** @brief NCCL barrier: a one-element all-reduce, then waits for the stream. */
void dist_nccl_barrier(ProcessGroup *pg);
/** @brief Watchdog poll for NCCL: the communicator's asynchronous error, and whether the last
 *  collective finished within the timeout (see watchdog.h). */
int dist_nccl_poll(void *pg, double timeout, char *why);
/** @brief Watchdog bind for NCCL: selects the rank's GPU on the calling thread. */
void dist_nccl_bind(void *pg);
/** @brief Watchdog abort for NCCL: aborts the communicator. */
void dist_nccl_abort(void *pg);
/** @brief ncclGroupStart; see dist_group_start(). */
void dist_nccl_group_start(ProcessGroup *pg);
/** @brief ncclGroupEnd, then what the group's collectives left to do; see dist_group_end(). */
void dist_nccl_group_end(ProcessGroup *pg);
/** @brief Destroys the NCCL communicator. */
void dist_nccl_destroy(ProcessGroup *pg);

/**
 * @brief True when NCCL's last error message (ncclGetLastError) says that several ranks use one GPU:
 * "Duplicate GPU detected" (NCCL <= 2.29) or "Multiple Ranks are using the same GPU/Partition"
 * (NCCL >= 2.30). Pure, and built without NCCL too (unit-tested on both messages).
 * @param[in] last the message, or NULL (false).
 */
bool dist_nccl_says_gpu_shared(const char *last);

/**
 * @brief Joins the Gloo process group: the rendezvous through the store (store.h) that rank 0 serves
 * at @p host:@p port, Gloo's full mesh of TCP pairs, then the worker thread that runs the
 * collectives. Registers the abort hook (`_exit`, when MPI is not up). Covered by the watchdog.
 * @param[in,out] pg   the process group (rank, world size > 1, timeout); gets the Gloo state.
 * @param[in]     host rank 0's address (MASTER_ADDR).
 * @param[in]     port the store's port (the bootstrap port: MASTER_PORT + 1 or DDP_NCCL_PORT).
 */
void dist_gloo_connect(ProcessGroup *pg, const char *host, int port);
/** @brief Gloo all-reduce, blocking (queued on the worker, then waited for); see dist_all_reduce(). */
void dist_gloo_all_reduce(ProcessGroup *pg, void *buf, size_t n, DistType type, DistOp op);
/** @brief Gives @p w its Gloo job (so that starting a collective allocates nothing). */
void dist_gloo_work_init(DistWork *w);
/** @brief Frees what dist_gloo_work_init() allocated. */
void dist_gloo_work_free(DistWork *w);
/** @brief Queues the all-reduce of @p w (buf, n, type, op set by dist.c); blocking for GPU buffers. */
void dist_gloo_all_reduce_start(ProcessGroup *pg, DistWork *w);
/**
 * @brief Queues the reduce-scatter of @p w as an all-reduce of @p send of which this rank keeps its
 * chunk (into w->buf); blocking for GPU buffers; see dist_reduce_scatter_async().
 */
void dist_gloo_reduce_scatter_start(ProcessGroup *pg, void *send, const size_t *counts, DistWork *w);
/** @brief Whether the worker has finished @p w (ends the job when it failed); records the end event. */
bool dist_gloo_test(ProcessGroup *pg, DistWork *w);
/** @brief Waits for the worker to finish @p w (ends the job when it failed); records the end event. */
void dist_gloo_wait(ProcessGroup *pg, DistWork *w);
/** @brief Gloo broadcast, blocking; see dist_broadcast(). */
void dist_gloo_broadcast(ProcessGroup *pg, void *buf, size_t n, DistType type, int root);
/** @brief Gloo all-gather, blocking; see dist_all_gather(). */
void dist_gloo_all_gather(ProcessGroup *pg, const void *send, void *recv, size_t n, DistType type);
/** @brief Gloo barrier, blocking. */
void dist_gloo_barrier(ProcessGroup *pg);
/** @brief Stops the worker thread (after the collectives queued), then frees the Gloo context. */
void dist_gloo_destroy(ProcessGroup *pg);

/** @brief Size in bytes of one element of @p type. */
static inline size_t dist_type_size(DistType type) {
  return type == DIST_DOUBLE ? sizeof(double) : type == DIST_INT ? sizeof(int) : sizeof(float);
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
