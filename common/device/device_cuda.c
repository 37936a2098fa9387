// device_cuda.c: the CUDA half of device.h (counting GPUs, contexts) and the CUDA/cuBLAS error
// checks of check.h. Built only with CUDA (HAVE_CUDA); device.c calls it.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "check.h"
#include "device_backend.h"
#include "flops.h"

// ---------------------------------------------------------------------------------------------------
// error checks
// ---------------------------------------------------------------------------------------------------

void cuda_check_impl(int err, const char *call, const char *file, int line) {
  if (err == cudaSuccess) return;
  cudaError_t e = (cudaError_t)err;
  check_fail("CUDA", file, line, "%s: %s (%s)", call, cudaGetErrorString(e), cudaGetErrorName(e));
}

void cublas_check_impl(int status, const char *call, const char *file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  cublasStatus_t s = (cublasStatus_t)status;
  check_fail("CUBLAS", file, line, "%s: %s (%s)", call, cublasGetStatusString(s), cublasGetStatusName(s));
}

// ---------------------------------------------------------------------------------------------------
// devices and contexts
// ---------------------------------------------------------------------------------------------------

int device_cuda_count_cuda(void) {
  // With no driver, cudaGetDeviceCount returns an error (35, insufficient driver) without writing
  // the count, and the error stays "sticky" until read: start at 0 and clear it.
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n > 0 ? n : 0;
}

void device_init_cuda(Ctx *c, int gpu) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    die(1, "--device cuda: no usable CUDA GPU (cudaGetDeviceCount: %s); use --device cpu",
        cudaGetErrorString(e));
  }
  if (n <= 0) die(1, "--device cuda: no CUDA GPU found; use --device cpu");
  if (gpu < 0 || gpu >= n)
    die(1, "--device cuda: GPU %d does not exist (this machine has %d); start fewer ranks per node", gpu, n);

  cudaStream_t stream = NULL;
  cublasHandle_t blas = NULL;
  cudaCheck(cudaSetDevice(gpu));
  struct cudaDeviceProp prop;
  cudaCheck(cudaGetDeviceProperties(&prop, gpu));
  flops_set_device(prop.name, false);  // the peak the progress line's MFU is computed against
  // Non-blocking: our stream never waits on the legacy default stream that libraries may use.
  cudaCheck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cublasCheck(cublasCreate(&blas));
  cublasCheck(cublasSetStream(blas, stream));
  // Plain fp32 (no TF32 tensor cores), so GEMMs match the CPU reference to fp32 rounding.
  cublasCheck(cublasSetMathMode(blas, CUBLAS_DEFAULT_MATH));

  c->dev = DEVICE_CUDA;
  c->gpu = gpu;
  c->stream = stream;
  c->blas = blas;
}

void device_set_tf32_cuda(const Ctx *c, bool on) {
  // cuBLAS's fp32 GEMMs may then round their inputs to TF32 and run on tensor cores.
  cublasCheck(
      cublasSetMathMode((cublasHandle_t)c->blas, on ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
}

void device_free_cuda(Ctx *c) {
  if (c->stream) cudaCheck(cudaStreamSynchronize((cudaStream_t)c->stream));
  if (c->blas) cublasCheck(cublasDestroy((cublasHandle_t)c->blas));
  if (c->stream) cudaCheck(cudaStreamDestroy((cudaStream_t)c->stream));
  c->blas = NULL;
  c->stream = NULL;
}
