// dist_cases.h: checks of the process group's collectives that run on either device. Their buffers
// are memory of the group's context (host memory on the CPU, device memory on a GPU), so the same
// cases run on the CPU under mpirun (tests/mpi/test_dist.c) and on GPUs over NCCL, or over MPI
// through the host (tests/gpu/test_dist_gpu.c).
#ifndef DDP_TESTS_DIST_CASES_H
#define DDP_TESTS_DIST_CASES_H

#include "dist.h"

// Records one check, which fails when it fails on any rank; rank 0 prints "ok" or "FAILED" and
// @p what.
void expect(ProcessGroup *pg, int ok, const char *what);

// Checks recorded so far: passed and failed.
int expect_passed(void);
int expect_failed(void);

// The collectives a sharded optimizer (ZeRO-1) needs: reduce-scatter with equal and unequal counts
// (sum and average), its asynchronous handle, the in-place all-gather, and the two together.
void dist_cases_zero(ProcessGroup *pg);

// The 16-bit all-reduces of --comm_hook fp16 and bf16 (blocking and asynchronous, exact sums) and
// their sum canary (dist_verify_sum).
void dist_cases_half(ProcessGroup *pg);

#endif
