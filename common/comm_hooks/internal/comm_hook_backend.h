/**
 * @file
 * @brief Internal interface between the hooks' dispatch (comm_hook.c) and the two implementations of
 * their element-wise casts: the CPU reference (comm_hook.c) and the CUDA kernels (comm_hook_cuda.cu).
 * Same arguments as comm_hook_compress() and comm_hook_decompress().
 */
#ifndef DDP_COMM_HOOK_BACKEND_H
#define DDP_COMM_HOOK_BACKEND_H

#include "comm_hook.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @brief CPU reference of comm_hook_compress(). */
void comm_hook_compress_cpu(const Ctx *c, bool bf16, const float *src, uint16_t *dst, size_t n, int W);
/** @brief CUDA version of comm_hook_compress() (`__float2half_rn`, `__float2bfloat16_rn`). */
void comm_hook_compress_cuda(const Ctx *c, bool bf16, const float *src, uint16_t *dst, size_t n, int W);
/** @brief CPU reference of comm_hook_decompress(). */
void comm_hook_decompress_cpu(const Ctx *c, bool bf16, const uint16_t *src, float *dst, size_t n);
/** @brief CUDA version of comm_hook_decompress(). */
void comm_hook_decompress_cuda(const Ctx *c, bool bf16, const uint16_t *src, float *dst, size_t n);

#ifdef __cplusplus
}
#endif
#endif
