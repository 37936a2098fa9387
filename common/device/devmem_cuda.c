// devmem_cuda.c: the CUDA half of devmem.h (memory, copies, events, streams). Built only with CUDA
// (HAVE_CUDA); devmem.c calls it for CUDA contexts. Everything is queued on the context's stream (or
// the one named); only the names that say so wait for it.
#include <cuda_runtime.h>
#include <string.h>

#include "check.h"
#include "devmem_backend.h"

// ---------------------------------------------------------------------------------------------------
// memory
// ---------------------------------------------------------------------------------------------------

void *dev_alloc_cuda(const Ctx *c, size_t bytes) {
  void *p = NULL;
  size_t n = bytes ? bytes : 1;  // never NULL, like mallocCheck
  cudaError_t e = cudaMalloc(&p, n);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    check_fail("CUDA", __FILE__, __LINE__, "out of GPU memory allocating %zu bytes on GPU %d", bytes, c->gpu);
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

void *dev_host_alloc_cuda(const Ctx *c, size_t bytes) {
  void *p = NULL;
  (void)c;
  cudaCheck(cudaMallocHost(&p, bytes ? bytes : 1));
  memset(p, 0, bytes);
  return p;
}

void dev_host_free_cuda(const Ctx *c, void *p) {
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
