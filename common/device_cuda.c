// device_cuda.c: the CUDA half of device.h (context, memory, copies) and the CUDA/cuBLAS error
// checks of check.h. Everything is queued on the context's one stream; only names that say so wait
// for it.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <string.h>

#include "check.h"
#include "device.h"

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
  check_fail("CUBLAS", file, line, "%s: %s (%s)", call, cublasGetStatusString(s),
             cublasGetStatusName(s));
}

// ---------------------------------------------------------------------------------------------------
// devices and contexts
// ---------------------------------------------------------------------------------------------------

int device_cuda_count_impl(void) {
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

void ctx_init_cuda(Ctx *c, int gpu) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    die(1, "--device cuda: no usable CUDA GPU (cudaGetDeviceCount: %s); use --device cpu",
        cudaGetErrorString(e));
  }
  if (n <= 0) die(1, "--device cuda: no CUDA GPU found; use --device cpu");
  if (gpu < 0 || gpu >= n)
    die(1, "--device cuda: GPU %d does not exist (this machine has %d); start fewer ranks per node",
        gpu, n);

  cudaStream_t stream = NULL;
  cublasHandle_t blas = NULL;
  cudaCheck(cudaSetDevice(gpu));
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

void ctx_set_tf32_cuda(const Ctx *c, bool on) {
  // cuBLAS's fp32 GEMMs may then round their inputs to TF32 and run on tensor cores.
  cublasCheck(cublasSetMathMode((cublasHandle_t)c->blas,
                                on ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
}

void ctx_free_cuda(Ctx *c) {
  if (c->stream) cudaCheck(cudaStreamSynchronize((cudaStream_t)c->stream));
  if (c->blas) cublasCheck(cublasDestroy((cublasHandle_t)c->blas));
  if (c->stream) cudaCheck(cudaStreamDestroy((cudaStream_t)c->stream));
  c->blas = NULL;
  c->stream = NULL;
}

// ---------------------------------------------------------------------------------------------------
// memory
// ---------------------------------------------------------------------------------------------------

void *dev_alloc_cuda(const Ctx *c, size_t bytes) {
  void *p = NULL;
  size_t n = bytes ? bytes : 1;  // never NULL, like mallocCheck
  cudaError_t e = cudaMalloc(&p, n);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    check_fail("CUDA", __FILE__, __LINE__, "out of GPU memory allocating %zu bytes on GPU %d",
               bytes, c->gpu);
  }
  cudaCheck(e);
  // Zero it and wait, so the memory is touched once here and not inside the training loop.
  cudaCheck(cudaMemsetAsync(p, 0, n, (cudaStream_t)c->stream));
  cudaCheck(cudaStreamSynchronize((cudaStream_t)c->stream));
  return p;
}

void dev_free_cuda(const Ctx *c, void *p) {
  (void)c;
  if (p) cudaCheck(cudaFree(p));
}

void *host_alloc_cuda(const Ctx *c, size_t bytes) {
  void *p = NULL;
  (void)c;
  cudaCheck(cudaMallocHost(&p, bytes ? bytes : 1));
  memset(p, 0, bytes);
  return p;
}

void host_free_cuda(const Ctx *c, void *p) {
  (void)c;
  if (p) cudaCheck(cudaFreeHost(p));
}

// ---------------------------------------------------------------------------------------------------
// copies
// ---------------------------------------------------------------------------------------------------

void dev_upload_cuda(const Ctx *c, void *dst, const void *src, size_t bytes) {
  if (bytes == 0) return;
  cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, (cudaStream_t)c->stream));
}

void dev_download_async_cuda(const Ctx *c, void *dst, const void *src, size_t bytes) {
  if (bytes == 0) return;
  cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, (cudaStream_t)c->stream));
}

void dev_download_cuda(const Ctx *c, void *dst, const void *src, size_t bytes) {
  dev_download_async_cuda(c, dst, src, bytes);  // (into pageable memory too: CUDA stages it)
  dev_sync_cuda(c);                             // dst is ready when we return
}

void dev_copy_cuda(const Ctx *c, void *dst, const void *src, size_t bytes) {
  if (bytes == 0) return;
  cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, (cudaStream_t)c->stream));
}

void dev_zero_cuda(const Ctx *c, void *p, size_t bytes) {
  if (bytes == 0) return;
  cudaCheck(cudaMemsetAsync(p, 0, bytes, (cudaStream_t)c->stream));
}

void dev_sync_cuda(const Ctx *c) { cudaCheck(cudaStreamSynchronize((cudaStream_t)c->stream)); }

// ---- events and streams ---------------------------------------------------------------------------

static cudaStream_t stream_or_compute(const Ctx *c, void *stream) {
  return (cudaStream_t)(stream ? stream : c->stream);
}

void dev_event_init_cuda(const Ctx *c, DevEvent *e) {
  (void)c;
  cudaEvent_t ev;
  cudaCheck(cudaEventCreate(&ev));  // with timing: traces read elapsed times from these
  e->ev = ev;
}

void dev_event_free_cuda(const Ctx *c, DevEvent *e) {
  (void)c;
  cudaCheck(cudaEventDestroy((cudaEvent_t)e->ev));
}

void dev_event_record_cuda(const Ctx *c, DevEvent *e, void *stream) {
  cudaCheck(cudaEventRecord((cudaEvent_t)e->ev, stream_or_compute(c, stream)));
}

void dev_stream_wait_cuda(const Ctx *c, void *stream, const DevEvent *e) {
  cudaCheck(cudaStreamWaitEvent(stream_or_compute(c, stream), (cudaEvent_t)e->ev, 0));
}

bool dev_event_done_cuda(const Ctx *c, const DevEvent *e) {
  (void)c;
  cudaError_t q = cudaEventQuery((cudaEvent_t)e->ev);
  if (q == cudaErrorNotReady) return false;
  cudaCheck(q);  // any other answer than "ready" or "not yet" is an error
  return true;
}

void dev_event_wait_cuda(const Ctx *c, const DevEvent *e) {
  (void)c;
  cudaCheck(cudaEventSynchronize((cudaEvent_t)e->ev));
}

double dev_event_elapsed_cuda(const Ctx *c, const DevEvent *from, const DevEvent *to) {
  (void)c;
  float ms = 0.0f;
  cudaCheck(cudaEventSynchronize((cudaEvent_t)from->ev));  // both must be complete
  cudaCheck(cudaEventSynchronize((cudaEvent_t)to->ev));
  cudaCheck(cudaEventElapsedTime(&ms, (cudaEvent_t)from->ev, (cudaEvent_t)to->ev));
  return 1e-3 * ms;
}

void *dev_stream_create_cuda(const Ctx *c) {
  cudaCheck(cudaSetDevice(c->gpu));
  cudaStream_t s;
  cudaCheck(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
}

void dev_stream_free_cuda(const Ctx *c, void *stream) {
  (void)c;
  cudaCheck(cudaStreamSynchronize((cudaStream_t)stream));
  cudaCheck(cudaStreamDestroy((cudaStream_t)stream));
}
