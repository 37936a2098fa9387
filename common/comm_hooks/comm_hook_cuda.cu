// comm_hook_cuda.cu: the CUDA casts of the communication hooks (comm_hook.h): element-wise kernels
// on the context's stream, rounding as the CPU reference does (to nearest even, the division in
// float32 rounded once to 16 bits).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "check.h"
#include "comm_hook_backend.h"
#include "cuda_launch.h"

#define THREADS CUDA_THREADS

static __global__ void compress_half_kernel(const float *src, __half *dst, size_t n, float w) {
  GRID_STRIDE_LOOP(i, n) { dst[i] = __float2half_rn(__fdiv_rn(__half2float(__float2half_rn(src[i])), w)); }
}

static __global__ void compress_bf16_kernel(const float *src, __nv_bfloat16 *dst, size_t n, float w) {
  GRID_STRIDE_LOOP(i, n) {
    dst[i] = __float2bfloat16_rn(__fdiv_rn(__bfloat162float(__float2bfloat16_rn(src[i])), w));
  }
}

extern "C" void comm_hook_compress_cuda(const Ctx *c, bool bf16, const float *src, uint16_t *dst, size_t n,
                                        int W) {
  if (n == 0) return;
  if (bf16)
    compress_bf16_kernel<<<blocks_for(n), THREADS, 0, stream_of(c)>>>(src, (__nv_bfloat16 *)dst, n, (float)W);
  else
    compress_half_kernel<<<blocks_for(n), THREADS, 0, stream_of(c)>>>(src, (__half *)dst, n, (float)W);
  cudaCheck(cudaGetLastError());
}

static __global__ void decompress_half_kernel(const __half *src, float *dst, size_t n) {
  GRID_STRIDE_LOOP(i, n) { dst[i] = __half2float(src[i]); }
}

static __global__ void decompress_bf16_kernel(const __nv_bfloat16 *src, float *dst, size_t n) {
  GRID_STRIDE_LOOP(i, n) { dst[i] = __bfloat162float(src[i]); }
}

extern "C" void comm_hook_decompress_cuda(const Ctx *c, bool bf16, const uint16_t *src, float *dst,
                                          size_t n) {
  if (n == 0) return;
  if (bf16)
    decompress_bf16_kernel<<<blocks_for(n), THREADS, 0, stream_of(c)>>>((const __nv_bfloat16 *)src, dst, n);
  else
    decompress_half_kernel<<<blocks_for(n), THREADS, 0, stream_of(c)>>>((const __half *)src, dst, n);
  cudaCheck(cudaGetLastError());
}
