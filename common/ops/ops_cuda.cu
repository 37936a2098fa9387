// ops_cuda.cu: the CUDA versions of the ops in ops.h: cuBLAS for the GEMM, one small kernel for
// each of the others. Every launch is queued on the context's stream and checked; no op allocates,
// copies to or from the host, or waits. Reductions are written in a fixed order (no float atomics),
// so every op gives the same bits on every run.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>

#include "check.h"
#include "cuda_launch.h"
#include "ops_backend.h"

#define THREADS CUDA_THREADS  // threads per block for the element-wise kernels (cuda_launch.h)
#define WARP 32

// ---------------------------------------------------------------------------------------------------
// GEMM
// ---------------------------------------------------------------------------------------------------

// cuBLAS is column-major. A row-major (R, C) matrix is the same memory as a column-major (C, R)
// one, i.e. its transpose. So row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: pass
// B first, A second, and swap M and N. Leading dimensions are the row lengths of the stored
// matrices: A is stored (M, K), or (K, M) when transposed; B (K, N), or (N, K); C (M, N).
extern "C" void ops_gemm_cuda(const Ctx *c, bool ta, bool tb, int M, int N, int K, float alpha,
                              const float *A, const float *B, float beta, float *C) {
  if (M <= 0 || N <= 0 || K <= 0) return;
  cublasOperation_t opA = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t opB = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  int lda = ta ? M : K;
  int ldb = tb ? K : N;
  int ldc = N;
  // With beta == 0 cuBLAS does not read C, so NaNs in it are ignored, as ops.h promises.
  cublasCheck(cublasSgemm((cublasHandle_t)c->blas, opB, opA, N, M, K, &alpha, B, ldb, A, lda, &beta, C, ldc));
}

// ---------------------------------------------------------------------------------------------------
// element-wise kernels
// ---------------------------------------------------------------------------------------------------

// y is (B, N) flattened to n = B*N elements; bias is (N).
static __global__ void bias_act_kernel(float *y, const float *bias, size_t n, int N, bool relu) {
  GRID_STRIDE_LOOP(i, n) {
    float v = y[i] + bias[i % (size_t)N];
    y[i] = relu && v < 0.0f ? 0.0f : v;  // as the CPU: NaN and -0 pass through
  }
}

extern "C" void ops_bias_act_cuda(const Ctx *c, float *y, const float *bias, int B, int N, bool relu) {
  if (B <= 0 || N <= 0) return;
  size_t n = (size_t)B * N;
  bias_act_kernel<<<blocks_for(n), THREADS, 0, stream_of(c)>>>(y, bias, n, N, relu);
  cudaCheck(cudaGetLastError());
}

static __global__ void relu_backward_kernel(float *dy, const float *y, size_t n) {
  GRID_STRIDE_LOOP(i, n) {
    if (!(y[i] > 0.0f)) dy[i] = 0.0f;
  }
}

extern "C" void ops_relu_backward_cuda(const Ctx *c, float *dy, const float *y, size_t n) {
  if (n == 0) return;
  relu_backward_kernel<<<blocks_for(n), THREADS, 0, stream_of(c)>>>(dy, y, n);
  cudaCheck(cudaGetLastError());
}

static __global__ void scale_kernel(float *x, size_t n, float a) {
  GRID_STRIDE_LOOP(i, n) { x[i] *= a; }
}

extern "C" void ops_scale_cuda(const Ctx *c, float *x, size_t n, float a) {
  if (n == 0) return;
  scale_kernel<<<blocks_for(n), THREADS, 0, stream_of(c)>>>(x, n, a);
  cudaCheck(cudaGetLastError());
}

static __global__ void div_kernel(float *x, size_t n, float d) {
  GRID_STRIDE_LOOP(i, n) { x[i] = __fdiv_rn(x[i], d); }
}

extern "C" void ops_div_cuda(const Ctx *c, float *x, size_t n, float d) {
  if (n == 0) return;
  div_kernel<<<blocks_for(n), THREADS, 0, stream_of(c)>>>(x, n, d);
  cudaCheck(cudaGetLastError());
}

// count += the non-finite elements of x: an integer atomic per block (exact in any order).
static __global__ void count_nonfinite_kernel(const float *x, size_t n, int *count) {
  __shared__ int block;
  if (threadIdx.x == 0) block = 0;
  __syncthreads();
  int mine = 0;
  GRID_STRIDE_LOOP(i, n) { mine += !isfinite(x[i]); }
  if (mine) atomicAdd(&block, mine);
  __syncthreads();
  if (threadIdx.x == 0 && block) atomicAdd(count, block);
}

extern "C" void ops_count_nonfinite_cuda(const Ctx *c, const float *x, size_t n, int *count) {
  if (n == 0) return;
  count_nonfinite_kernel<<<blocks_for(n), THREADS, 0, stream_of(c)>>>(x, n, count);
  cudaCheck(cudaGetLastError());
}

// y += a·x with the product and the sum rounded separately, as the CPU reference computes it.
static __global__ void axpy_kernel(float *y, const float *x, size_t n, float a) {
  GRID_STRIDE_LOOP(i, n) { y[i] = __fadd_rn(y[i], __fmul_rn(a, x[i])); }
}

extern "C" void ops_axpy_cuda(const Ctx *c, float *y, const float *x, size_t n, float a) {
  if (n == 0) return;
  axpy_kernel<<<blocks_for(n), THREADS, 0, stream_of(c)>>>(y, x, n, a);
  cudaCheck(cudaGetLastError());
}

// One SGD step per element, in torch.optim.SGD's order. The explicitly rounded intrinsics keep nvcc
// from fusing a multiply and an add into one FMA, so each step rounds exactly as the CPU reference
// does (compiled as ISO C, which does not contract either).
static __global__ void sgd_kernel(float *p, const float *grad, float *buf, size_t n, float lr, float momentum,
                                  float dampening, float wd, bool nesterov, bool first) {
  GRID_STRIDE_LOOP(i, n) {
    float g = __fadd_rn(grad[i], __fmul_rn(wd, p[i]));
    if (momentum != 0.0f) {
      float b = first ? g : __fadd_rn(__fmul_rn(momentum, buf[i]), __fmul_rn(1.0f - dampening, g));
      buf[i] = b;
      g = nesterov ? __fadd_rn(g, __fmul_rn(momentum, b)) : b;
    }
    p[i] = __fsub_rn(p[i], __fmul_rn(lr, g));
  }
}

extern "C" void ops_sgd_cuda(const Ctx *c, float *p, const float *g, float *buf, size_t n, float lr,
                             float momentum, float dampening, float wd, bool nesterov, bool first) {
  if (n == 0) return;
  sgd_kernel<<<blocks_for(n), THREADS, 0, stream_of(c)>>>(p, g, buf, n, lr, momentum, dampening, wd, nesterov,
                                                          first);
  cudaCheck(cudaGetLastError());
}

// dst_x (B, N) and dst_y (B) from rows idx[b] of src_x (rows, N) and src_y (rows). The second loop
// is separate so labels are gathered even when N is 0.
static __global__ void gather_kernel(const float *src_x, const int *src_y, const int *idx, int B, int N,
                                     float *dst_x, int *dst_y) {
  size_t n = (size_t)B * N;
  GRID_STRIDE_LOOP(i, n) {
    size_t b = i / (size_t)N, k = i % (size_t)N;
    dst_x[i] = src_x[(size_t)idx[b] * N + k];
  }
  GRID_STRIDE_LOOP(b, (size_t)B) { dst_y[b] = src_y[idx[b]]; }
}

extern "C" void ops_gather_cuda(const Ctx *c, const float *src_x, const int *src_y, const int *idx, int B,
                                int N, float *dst_x, int *dst_y) {
  if (B <= 0 || N < 0) return;
  size_t n = (size_t)B * N;
  gather_kernel<<<blocks_for(n > (size_t)B ? n : (size_t)B), THREADS, 0, stream_of(c)>>>(src_x, src_y, idx, B,
                                                                                         N, dst_x, dst_y);
  cudaCheck(cudaGetLastError());
}

// As gather_kernel, normalising 8-bit pixels on the way: the same float32 operations as the CPU's
// lookup table, each correctly rounded (__fdiv_rn, __fsub_rn: whatever nvcc's math flags), so both
// devices produce the same bits.
static __global__ void gather_pixels_kernel(const uint8_t *src_p, const int *src_y, const int *idx, int B,
                                            int N, float mean, float std, float *dst_x, int *dst_y) {
  size_t n = (size_t)B * N;
  GRID_STRIDE_LOOP(i, n) {
    size_t b = i / (size_t)N, k = i % (size_t)N;
    float p = (float)src_p[(size_t)idx[b] * N + k];
    dst_x[i] = __fdiv_rn(__fsub_rn(__fdiv_rn(p, 255.0f), mean), std);
  }
  GRID_STRIDE_LOOP(b, (size_t)B) { dst_y[b] = src_y[idx[b]]; }
}

extern "C" void ops_gather_pixels_cuda(const Ctx *c, const uint8_t *src_p, const int *src_y, const int *idx,
                                       int B, int N, float mean, float std, float *dst_x, int *dst_y) {
  if (B <= 0 || N < 0) return;
  size_t n = (size_t)B * N;
  gather_pixels_kernel<<<blocks_for(n > (size_t)B ? n : (size_t)B), THREADS, 0, stream_of(c)>>>(
      src_p, src_y, idx, B, N, mean, std, dst_x, dst_y);
  cudaCheck(cudaGetLastError());
}

// ---------------------------------------------------------------------------------------------------
// bias gradient: column sums of dy (B, N)
// ---------------------------------------------------------------------------------------------------

#define BG_COLS 32  // columns per block: one warp reads 32 consecutive floats of a row (coalesced)
#define BG_ROWS 8   // row stripes per block: thread (x, y) sums rows y, y+8, y+16, ...

// Each block owns BG_COLS columns. Thread (x, y) sums its stripe of rows in order, then thread
// (x, 0) adds the BG_ROWS partial sums in order: a fixed order, so the result is deterministic.
static __global__ void bias_grad_kernel(const float *dy, float *db, int B, int N, float beta) {
  __shared__ float part[BG_ROWS][BG_COLS];
  int col = blockIdx.x * BG_COLS + threadIdx.x;
  float s = 0.0f;
  if (col < N)
    for (int b = threadIdx.y; b < B; b += BG_ROWS) s += dy[(size_t)b * N + col];
  part[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && col < N) {
    float sum = 0.0f;
    for (int r = 0; r < BG_ROWS; r++) sum += part[r][threadIdx.x];
    // beta == 0 writes without reading, so stale values (even NaN) in db do not leak in.
    db[col] = beta == 0.0f ? sum : beta * db[col] + sum;
  }
}

extern "C" void ops_bias_grad_cuda(const Ctx *c, const float *dy, float *db, int B, int N, float beta) {
  // B == 0 still runs: the sum is empty, so db becomes beta * db (0 when beta is 0).
  if (N <= 0 || B < 0) return;
  dim3 block(BG_COLS, BG_ROWS);
  unsigned grid = (unsigned)((N + BG_COLS - 1) / BG_COLS);
  bias_grad_kernel<<<grid, block, 0, stream_of(c)>>>(dy, db, B, N, beta);
  cudaCheck(cudaGetLastError());
}

// ---------------------------------------------------------------------------------------------------
// softmax cross-entropy
// ---------------------------------------------------------------------------------------------------

static __device__ float warp_max(float v) {
  for (int off = WARP / 2; off > 0; off /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

static __device__ float warp_sum(float v) {
  for (int off = WARP / 2; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

#define XENT_ROWS_PER_BLOCK (THREADS / WARP)  // one warp per row

// One warp per row b; lane j handles classes j, j+32, ... With m = max_k x[k] and
// s = sum_k exp(x[k] - m):  softmax[k] = exp(x[k] - m) / s  and the row's loss
// -log softmax[label] = log(s) - (x[label] - m). Subtracting m keeps every exp() in (0, 1], so
// nothing overflows. The butterfly (xor) reductions leave the same value in every lane, in a fixed
// order.
static __global__ void softmax_xent_kernel(const float *logits, const int *labels, int B, int C,
                                           float *dlogits, float *row_loss) {
  int b = blockIdx.x * XENT_ROWS_PER_BLOCK + threadIdx.x / WARP;
  int lane = threadIdx.x % WARP;
  if (b >= B) return;  // whole warps leave together, so the shuffles below stay full-warp
  const float *x = logits + (size_t)b * C;
  float *dx = dlogits + (size_t)b * C;
  int label = labels[b];

  float m = -INFINITY;
  for (int k = lane; k < C; k += WARP) m = fmaxf(m, x[k]);
  m = warp_max(m);

  float s = 0.0f;
  for (int k = lane; k < C; k += WARP) s += expf(x[k] - m);
  s = warp_sum(s);

  for (int k = lane; k < C; k += WARP) {
    float p = expf(x[k] - m) / s;
    dx[k] = (p - (k == label ? 1.0f : 0.0f)) / (float)B;
  }
  if (lane == 0) row_loss[b] = logf(s) - (x[label] - m);
}

// loss[0] = mean of row_loss (B), with one block: thread t sums rows t, t+THREADS, ... in order,
// then a tree in shared memory halves the partial sums in a fixed pattern (deterministic).
static __global__ void mean_kernel(const float *row_loss, int B, float *loss) {
  __shared__ float part[THREADS];
  float s = 0.0f;
  for (int b = threadIdx.x; b < B; b += THREADS) s += row_loss[b];
  part[threadIdx.x] = s;
  __syncthreads();
  for (int half = THREADS / 2; half > 0; half /= 2) {
    if ((int)threadIdx.x < half) part[threadIdx.x] += part[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) loss[0] = part[0] / (float)B;
}

extern "C" void ops_softmax_xent_cuda(const Ctx *c, const float *logits, const int *labels, int B, int C,
                                      float *dlogits, float *row_loss, float *loss) {
  if (B <= 0 || C <= 0) return;
  unsigned grid = (unsigned)((B + XENT_ROWS_PER_BLOCK - 1) / XENT_ROWS_PER_BLOCK);
  softmax_xent_kernel<<<grid, THREADS, 0, stream_of(c)>>>(logits, labels, B, C, dlogits, row_loss);
  cudaCheck(cudaGetLastError());
  mean_kernel<<<1, THREADS, 0, stream_of(c)>>>(row_loss, B, loss);
  cudaCheck(cudaGetLastError());
}

// ---------------------------------------------------------------------------------------------------
// accuracy
// ---------------------------------------------------------------------------------------------------

// One thread per row: arg-max with a strict '>' so the first maximum wins, as on the CPU. Each
// block counts its hits with __syncthreads_count and adds them with one integer atomic (exact, and
// integer addition does not depend on order).
static __global__ void count_correct_kernel(const float *logits, const int *labels, int B, int C,
                                            int *correct) {
  int b = blockIdx.x * blockDim.x + threadIdx.x;
  int hit = 0;
  if (b < B) {
    const float *x = logits + (size_t)b * C;
    int best = 0;
    for (int k = 1; k < C; k++)
      if (x[k] > x[best]) best = k;
    hit = best == labels[b];
  }
  int n = __syncthreads_count(hit);  // every thread of the block must get here
  if (threadIdx.x == 0 && n > 0) atomicAdd(correct, n);
}

extern "C" void ops_count_correct_cuda(const Ctx *c, const float *logits, const int *labels, int B, int C,
                                       int *correct) {
  if (B <= 0 || C <= 0) return;
  unsigned grid = (unsigned)((B + THREADS - 1) / THREADS);
  count_correct_kernel<<<grid, THREADS, 0, stream_of(c)>>>(logits, labels, B, C, correct);
  cudaCheck(cudaGetLastError());
}
