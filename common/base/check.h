/**
 * @file
 * @brief Error checks that abort the whole job: the `*Check` macro family.
 *
 * Every CUDA, cuBLAS, NCCL and MPI call and every host I/O call goes through one of these macros. On
 * failure they print `[<KIND> ERROR] rank R at file.c:L: <call>: <reason>` and end the job. Once a
 * process group exists, ending the job means aborting every rank (the process group registers an abort
 * hook with check_set_abort()), so no peer is left blocked in a collective. A check macro never returns
 * to its caller on failure, and it never changes control flow on success.
 */
#ifndef DDP_CHECK_H
#define DDP_CHECK_H

#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * @brief Prints `[<kind> ERROR] rank R at file:line: <message>` to stderr and ends the job.
 * @param[in] kind  short tag such as "CUDA", "NCCL", "MPI", "IO"; "ERROR" prints `error: ...` only.
 * @param[in] file  source file of the failing call (`__FILE__`).
 * @param[in] line  source line of the failing call (`__LINE__`).
 * @param[in] fmt   printf-style message.
 */
void check_fail(const char *kind, const char *file, int line, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 4, 5)));

/**
 * @brief Prints `error: <message>` (no source location: for user mistakes) and ends the job with
 * exit status @p status (2 for bad command lines, 1 otherwise), through the abort hook if one is set.
 * @param[in] status exit status for a single process.
 * @param[in] fmt    printf-style message; a trailing newline is added.
 */
void die(int status, const char *fmt, ...) __attribute__((noreturn, format(printf, 2, 3)));

/**
 * @brief Sets the rank that error messages name (default 0).
 * @param[in] rank the global rank of this process.
 */
void check_set_rank(int rank);

/** @brief Returns the rank set by check_set_rank(). */
int check_rank(void);

/**
 * @brief Registers the function that ends the whole job once a process group exists.
 *
 * The hook must not return (e.g. it calls `MPI_Abort`, or `ncclCommAbort` then `_exit`). Pass NULL to
 * restore plain `exit()` (after the process group is destroyed).
 * @param[in] hook called with the exit status; NULL for plain exit.
 */
void check_set_abort(void (*hook)(int status));

/**
 * @brief Registers what to do once before a failed check (check_fail(), the `*Check` macros; not
 * die()'s refusals) ends the job, before the abort hook: the process group writes its flight
 * recorder's ring (flight.h). It must not end the process. NULL: nothing.
 * @param[in] fn called once, by the first thread that ends the job on a failed check, with the
 * check's kind ("MPI", "NCCL", "GLOO", "CUDA", "IO", ...).
 */
void check_set_last_words(void (*fn)(const char *kind));

/**
 * @brief Marks the job as ending: an abort is under way (on this thread or another: the watchdog's).
 * Called by the abort paths before they abort; never undone.
 */
void check_set_ending(void);

/**
 * @brief Stops the calling thread for good (it sleeps until the abort under way ends the process)
 * when the job is ending, and returns at once otherwise. Called first by every collective of the
 * process group and by the checkpoint save, so that once an abort has begun no collective runs on a
 * communicator being aborted and no checkpoint is written from partly reduced data.
 */
void check_stop_if_ending(void);

/** @brief Implementation of cudaCheck(); @p err is a `cudaError_t`. */
void cuda_check_impl(int err, const char *call, const char *file, int line);
/** @brief Implementation of cublasCheck(); @p status is a `cublasStatus_t`. */
void cublas_check_impl(int status, const char *call, const char *file, int line);
/** @brief Implementation of ncclCheck(); @p result is an `ncclResult_t`. */
void nccl_check_impl(int result, const char *call, const char *file, int line);
/** @brief Implementation of mpiCheck(); @p err is an MPI error code. */
void mpi_check_impl(int err, const char *call, const char *file, int line);

/** @brief Checks a CUDA runtime call (or `cudaGetLastError()` after a kernel launch). */
#define cudaCheck(call) cuda_check_impl((int)(call), #call, __FILE__, __LINE__)
/** @brief Checks a cuBLAS call. */
#define cublasCheck(call) cublas_check_impl((int)(call), #call, __FILE__, __LINE__)
/** @brief Checks an NCCL call. */
#define ncclCheck(call) nccl_check_impl((int)(call), #call, __FILE__, __LINE__)
/** @brief Checks an MPI call (MPI's default handler already aborts; this documents intent). */
#define mpiCheck(call) mpi_check_impl((int)(call), #call, __FILE__, __LINE__)

/**
 * @brief malloc that ends the job on failure, naming the size; memory is zeroed (touched once).
 * @param[in] bytes size in bytes; 0 returns a valid 1-byte block.
 * @param[in] file  caller's source file (`__FILE__`).
 * @param[in] line  caller's source line (`__LINE__`).
 * @return the block, never NULL.
 */
void *malloc_check_impl(size_t bytes, const char *file, int line);
/** @brief Allocates @p bytes zeroed host bytes or ends the job. */
#define mallocCheck(bytes) malloc_check_impl((bytes), __FILE__, __LINE__)

/**
 * @brief fopen that ends the job on failure, naming the path, the reason and a hint.
 * @param[in] path  file to open.
 * @param[in] mode  fopen mode.
 * @param[in] file  caller's source file (`__FILE__`).
 * @param[in] line  caller's source line (`__LINE__`).
 * @return the open stream, never NULL.
 */
FILE *fopen_check_impl(const char *path, const char *mode, const char *file, int line);
/** @brief Opens @p path with @p mode or ends the job. */
#define fopenCheck(path, mode) fopen_check_impl((path), (mode), __FILE__, __LINE__)

#ifdef __cplusplus
}
#endif
#endif
