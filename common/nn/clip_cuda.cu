// clip_cuda.cu: the CUDA kernels of the clipper (clip.h; the layout of the exact sums is in clip.c).
// Every block adds its elements' integer sums into shared memory, then into the global accumulators:
// integer additions in any order give the same total, so the sums are exact and the same on every run,
// whatever the order of the additions below (bit for bit the CPU's, clip.c). No allocation, no copy
// to the host, no wait: all on the context's stream.
#include <cuda_runtime.h>
#include <stdint.h>

#include "check.h"
#include "clip_backend.h"
#include "cuda_launch.h"

#define THREADS CUDA_THREADS
#define BLOCKS 120  // enough to fill an H100/H200 (132 SMs) about once; a grid-stride loop covers the rest

static_assert(THREADS % 32 == 0, "whole warps: the warp's loop below is uniform");

// The sum of @p v over the warp's 32 lanes (every lane must call it; each gets the total).
static __device__ unsigned warp_sum(unsigned v) {
#if __CUDA_ARCH__ >= 800
  return __reduce_add_sync(0xffffffffu, v);
#else
  for (int d = 16; d > 0; d /= 2) v += __shfl_xor_sync(0xffffffffu, v, d);
  return v;
#endif
}

// acc (CLIP_SUMS) += the integer sums of g's squares; acc zeroed before.
// A gradient's values share few exponents, so most of the CLIP_SUMS words stay zero and about 20 take
// every addition: one shared-memory atomic per element and word serialised on those words. Here a warp
// handles 32 elements at a time: for each exponent present among them (a handful) it sums its lanes'
// words with a warp reduction, and one lane adds the two totals to shared memory; at the end, one
// global atomic per block and non-zero word. The sums are integers, so the reordering changes no bit.
// Word 2k, 2k + 1 of key k: k = the exponent (subnormals: 1), the square's high and low 24 bits; key 0:
// the non-finite counts (word 0: NaNs, word 1: infinities). Per lane, each word is below 2^24, so a
// warp's total is below 2^29: 32-bit sums.
static __global__ void sum_squares_kernel(const float *g, size_t n, unsigned long long *acc) {
  __shared__ unsigned long long local[CLIP_SUMS];
  for (int w = threadIdx.x; w < CLIP_SUMS; w += blockDim.x) local[w] = 0;
  __syncthreads();
  const unsigned lane = threadIdx.x % 32, none = 0xffffffffu;
  size_t stride = (size_t)blockDim.x * gridDim.x;
  // base is the same for the warp's lanes, so every lane runs every iteration (the warp calls below)
  for (size_t base = (size_t)blockIdx.x * blockDim.x + (threadIdx.x - lane); base < n; base += stride) {
    size_t i = base + lane;
    unsigned key = none, hi = 0, lo = 0;
    if (i < n) {
      uint32_t bits = __float_as_uint(g[i]);
      uint32_t e = (bits >> 23) & 0xffu, m = bits & 0x7fffffu;
      if (e == 0xffu) {
        key = 0, hi = m ? 1u : 0u, lo = m ? 0u : 1u;
      } else {
        if (e)
          m |= 0x800000u;
        else
          e = 1;
        unsigned long long sq = (unsigned long long)m * m;
        key = e, hi = (unsigned)(sq >> 24), lo = (unsigned)(sq & 0xffffffull);
      }
    }
    for (unsigned todo = __ballot_sync(0xffffffffu, key != none); todo;) {  // the same on every lane
      int first = __ffs(todo) - 1;
      unsigned k = __shfl_sync(0xffffffffu, key, first);
      bool mine = key == k;
      unsigned h = warp_sum(mine ? hi : 0u), l = warp_sum(mine ? lo : 0u);
      if (lane == (unsigned)first) {
        atomicAdd(&local[2 * k], (unsigned long long)h);
        atomicAdd(&local[2 * k + 1], (unsigned long long)l);
      }
      todo &= ~__ballot_sync(0xffffffffu, mine);
    }
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
