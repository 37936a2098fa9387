/**
 * @file
 * @brief The probe's back-end-specific parts (tools/probe_backend.c): the check-in that names a rank
 * which never arrives, and the version of the library that carries the collectives. Everything else
 * in tools/probe.c goes through dist.h, device.h and devmem.h only.
 */
#ifndef DDP_PROBE_H
#define DDP_PROBE_H

#include <stdbool.h>
#include <stddef.h>

#include "dist.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * @brief Every rank checks in with rank 0 point to point, before any collective, so that a rank that
 * never arrives can be named (the idea of PyTorch's `monitoredBarrier`; a collective only tells the
 * ranks that *someone* is late). Rank 0 waits at most half of @p timeout_s for the others' messages;
 * if some are missing it ends the job with a message naming them. The other ranks wait at most
 * @p timeout_s for rank 0's answer; without it they end the job naming rank 0. Needs MPI (mpirun,
 * `srun --mpi=pmix`): elsewhere it does nothing and returns false.
 * @param[in] pg        process group after dist_init(), before dist_connect().
 * @param[in] timeout_s `--timeout`, seconds.
 * @param[out] waited_s on rank 0, seconds until the last rank arrived (0 elsewhere).
 * @return true when the check-in ran (every rank arrived), false when MPI is not up.
 */
bool probe_check_in(const ProcessGroup *pg, double timeout_s, double *waited_s);

/**
 * @brief One line naming the library that carries @p pg's collectives and its version: NCCL's from
 * `ncclGetVersion` ("NCCL 2.28.9"), MPI's from `MPI_Get_library_version` (its first line).
 * @param[in] pg   process group after dist_connect().
 * @param[out] out host, (len) bytes, NUL-terminated.
 * @param[in] len  size of @p out.
 */
void probe_backend_version(const ProcessGroup *pg, char *out, size_t len);

#ifdef __cplusplus
}
#endif
#endif
