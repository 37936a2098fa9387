/**
 * @file
 * @brief Internal interface between device.c and the CUDA half of the contexts, device_cuda.c (built
 * with CUDA, HAVE_CUDA): device.c calls it only in a build that has it. Not for the steps: they use
 * device.h.
 */
#ifndef DDP_DEVICE_BACKEND_H
#define DDP_DEVICE_BACKEND_H

#include "check.h"
#include "device.h"

#ifdef __cplusplus
extern "C" {
#endif

#if HAVE_CUDA
/** @brief WITH_CUDA(statement): a call into the CUDA half (or a `return` of one), compiled only in a
 *  build with CUDA. The dispatchers, device.c and devmem.c, reach the CUDA half only through it. */
#define WITH_CUDA(statement) statement
#else
/** @brief In a build without CUDA, the end of the job, saying so. device_init() refuses a CUDA
 *  context there, so no other dispatcher reaches it. */
#define WITH_CUDA(statement)                                                                 \
  die(1,                                                                                     \
      "this program was built without CUDA; rebuild it on a machine with the CUDA toolkit, " \
      "or use --device cpu")
#endif

/** @brief CUDA half of device_cuda_count(): cudaGetDeviceCount, its sticky error cleared. */
int device_cuda_count_cuda(void);
/** @brief CUDA half of device_init(). @pre dev is DEVICE_CUDA. */
void device_init_cuda(Ctx *c, int gpu);
/** @brief CUDA half of device_free(). */
void device_free_cuda(Ctx *c);
/** @brief CUDA half of device_set_tf32(): the cuBLAS handle's math mode. */
void device_set_tf32_cuda(const Ctx *c, bool on);

#ifdef __cplusplus
}
#endif
#endif
