/**
 * @file
 * @brief The launch helpers every CUDA file of common/ shares: the block size, the grid of a
 * grid-stride loop, and the context's stream. CUDA sources only (nvcc); no state.
 */
#ifndef DDP_CUDA_LAUNCH_H
#define DDP_CUDA_LAUNCH_H

#include <cuda_runtime.h>
#include <stddef.h>

#include "device.h"

/** @brief Threads per block of the element-wise kernels. */
#define CUDA_THREADS 256
/** @brief The most blocks a grid-stride loop is launched with; the loop covers the rest. */
#define CUDA_MAX_BLOCKS 65535

/**
 * @brief The grid-stride loop over @p n elements: @p i takes this thread's indices, in size_t so
 * that @p n may exceed 2^31.
 */
#define GRID_STRIDE_LOOP(i, n) \
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (size_t)blockDim.x * gridDim.x)

/** @brief The CUDA stream of a context (device.h keeps it as an opaque pointer). */
static inline cudaStream_t stream_of(const Ctx *c) { return (cudaStream_t)c->stream; }

/** @brief Blocks for a grid-stride loop over @p n elements (n > 0), at most @p max_blocks. */
static inline unsigned blocks_for_at_most(size_t n, unsigned max_blocks) {
  size_t b = (n + CUDA_THREADS - 1) / CUDA_THREADS;
  return (unsigned)(b < max_blocks ? b : max_blocks);
}

/** @brief Blocks for a grid-stride loop over @p n elements (n > 0), at most CUDA_MAX_BLOCKS. */
static inline unsigned blocks_for(size_t n) { return blocks_for_at_most(n, CUDA_MAX_BLOCKS); }

#endif
