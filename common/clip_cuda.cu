// clip_cuda.cu: the CUDA kernels of the clipper (clip.h; the layout of the exact sums is in clip.c).
// Every block adds its elements' integer sums into shared memory with integer atomics, then into the
// global accumulators: integer additions in any order give the same total, so the sums are exact and
// the same on every run. No allocation, no copy to the host, no wait: all on the context's stream.
#include <cuda_runtime.h>
#include <stdint.h>

#include "check.h"
#include "clip_backend.h"
#include "cuda_launch.h"

#define THREADS CUDA_THREADS
#define BLOCKS 120  // enough to fill an H100/H200 (132 SMs) about once; a grid-stride loop covers the rest

// acc (CLIP_SUMS) += the integer sums of g's squares; acc zeroed before.
static __global__ void sum_squares_kernel(const float *g, size_t n, unsigned long long *acc) {
  __shared__ unsigned long long local[CLIP_SUMS];
  for (int w = threadIdx.x; w < CLIP_SUMS; w += blockDim.x) local[w] = 0;
  __syncthreads();
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)blockDim.x * gridDim.x) {
    uint32_t bits = __float_as_uint(g[i]);
    uint32_t e = (bits >> 23) & 0xffu, m = bits & 0x7fffffu;
    if (e == 0xffu) {
      atomicAdd(&local[m ? 0 : 1], 1ull);
      continue;
    }
    if (e)
      m |= 0x800000u;
    else
      e = 1;
    unsigned long long sq = (unsigned long long)m * m;
    atomicAdd(&local[2 * e], sq >> 24);
    atomicAdd(&local[2 * e + 1], sq & 0xffffffull);
  }
  __syncthreads();
  for (int w = threadIdx.x; w < CLIP_SUMS; w += blockDim.x)
    if (local[w]) atomicAdd(&acc[w], local[w]);
}

// The integer sums as doubles (exact: below 2^53).
static __global__ void to_double_kernel(const unsigned long long *acc, double *sums) {
  int w = blockIdx.x * blockDim.x + threadIdx.x;
  if (w < CLIP_SUMS) sums[w] = (double)acc[w];
}

extern "C" void clip_sum_squares_cuda(Clip *k, const Ctx *c, const float *g, size_t n) {
  cudaCheck(cudaMemsetAsync(k->acc, 0, CLIP_SUMS * sizeof *k->acc, stream_of(c)));
  if (n > 0) {
    sum_squares_kernel<<<blocks_for_at_most(n, BLOCKS), THREADS, 0, stream_of(c)>>>(
        g, n, (unsigned long long *)k->acc);
    cudaCheck(cudaGetLastError());
  }
  to_double_kernel<<<(CLIP_SUMS + THREADS - 1) / THREADS, THREADS, 0, stream_of(c)>>>(
      (const unsigned long long *)k->acc, k->sums);
  cudaCheck(cudaGetLastError());
}

// One thread: the norm and the factor, by the same inline functions as the CPU's.
static __global__ void norm_kernel(const double *sums, float max_norm, float *norm, float *coef) {
  float nrm = clip_norm_from(sums);
  *norm = nrm;
  *coef = clip_coef_from(nrm, max_norm);
}

static __global__ void scale_kernel(float *g, size_t n, const float *coef) {
  float a = *coef;
  GRID_STRIDE_LOOP(i, n) g[i] = __fmul_rn(g[i], a);
}

extern "C" void clip_scale_cuda(Clip *k, const Ctx *c, float *g, size_t n) {
  norm_kernel<<<1, 1, 0, stream_of(c)>>>(k->sums, k->max_norm, k->norm, k->coef);
  cudaCheck(cudaGetLastError());
  if (n == 0) return;
  scale_kernel<<<blocks_for(n), THREADS, 0, stream_of(c)>>>(g, n, k->coef);
  cudaCheck(cudaGetLastError());
}
