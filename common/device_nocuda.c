// device_nocuda.c: device.h's CUDA half for builds without the CUDA toolkit. No GPU is ever
// counted, and anything that would need one ends the job with a hint.
#include "check.h"
#include "device.h"

#define NO_CUDA()                                                                            \
  die(1,                                                                                     \
      "this program was built without CUDA; rebuild on a machine with the CUDA toolkit, or " \
      "use --device cpu")

int device_cuda_count_impl(void) { return 0; }

void ctx_init_cuda(Ctx *c, int gpu) {
  (void)c, (void)gpu;
  NO_CUDA();
}
void ctx_set_tf32_cuda(const Ctx *c, bool on) {
  (void)c, (void)on;
  NO_CUDA();
}
void ctx_free_cuda(Ctx *c) {
  (void)c;
  NO_CUDA();
}
void *dev_alloc_cuda(const Ctx *c, size_t bytes) {
  (void)c, (void)bytes;
  NO_CUDA();
}
void dev_free_cuda(const Ctx *c, void *p) {
  (void)c, (void)p;
  NO_CUDA();
}
void dev_upload_cuda(const Ctx *c, void *dst, const void *src, size_t bytes) {
  (void)c, (void)dst, (void)src, (void)bytes;
  NO_CUDA();
}
void dev_download_cuda(const Ctx *c, void *dst, const void *src, size_t bytes) {
  (void)c, (void)dst, (void)src, (void)bytes;
  NO_CUDA();
}
void dev_download_async_cuda(const Ctx *c, void *dst, const void *src, size_t bytes) {
  (void)c, (void)dst, (void)src, (void)bytes;
  NO_CUDA();
}
void dev_copy_cuda(const Ctx *c, void *dst, const void *src, size_t bytes) {
  (void)c, (void)dst, (void)src, (void)bytes;
  NO_CUDA();
}
void dev_zero_cuda(const Ctx *c, void *p, size_t bytes) {
  (void)c, (void)p, (void)bytes;
  NO_CUDA();
}
void dev_sync_cuda(const Ctx *c) {
  (void)c;
  NO_CUDA();
}
void *host_alloc_cuda(const Ctx *c, size_t bytes) {
  (void)c, (void)bytes;
  NO_CUDA();
}
void host_free_cuda(const Ctx *c, void *p) {
  (void)c, (void)p;
  NO_CUDA();
}

void cuda_check_impl(int err, const char *call, const char *file, int line) {
  (void)err, (void)call, (void)file, (void)line;
  NO_CUDA();
}
void cublas_check_impl(int status, const char *call, const char *file, int line) {
  (void)status, (void)call, (void)file, (void)line;
  NO_CUDA();
}
void dev_event_init_cuda(const Ctx *c, DevEvent *e) {
  (void)c, (void)e;
  NO_CUDA();
}
void dev_event_free_cuda(const Ctx *c, DevEvent *e) {
  (void)c, (void)e;
  NO_CUDA();
}
void dev_event_record_cuda(const Ctx *c, DevEvent *e, void *stream) {
  (void)c, (void)e, (void)stream;
  NO_CUDA();
}
void dev_stream_wait_cuda(const Ctx *c, void *stream, const DevEvent *e) {
  (void)c, (void)stream, (void)e;
  NO_CUDA();
}
bool dev_event_done_cuda(const Ctx *c, const DevEvent *e) {
  (void)c, (void)e;
  NO_CUDA();
}
void dev_event_wait_cuda(const Ctx *c, const DevEvent *e) {
  (void)c, (void)e;
  NO_CUDA();
}
double dev_event_elapsed_cuda(const Ctx *c, const DevEvent *from, const DevEvent *to) {
  (void)c, (void)from, (void)to;
  NO_CUDA();
}
void *dev_stream_create_cuda(const Ctx *c) {
  (void)c;
  NO_CUDA();
}
void dev_stream_free_cuda(const Ctx *c, void *stream) {
  (void)c, (void)stream;
  NO_CUDA();
}
