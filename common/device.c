// device.c: the CPU half of device.h and the dispatch to the CUDA half (device_cuda.c).
#define _POSIX_C_SOURCE 200809L
#include "device.h"

#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "log.h"

int device_cuda_count(void) { return device_cuda_count_impl(); }

int device_parse(const char *name, Device *out) {
  if (strcmp(name, "cpu") == 0) {
    *out = DEVICE_CPU;
  } else if (strcmp(name, "cuda") == 0) {
    *out = DEVICE_CUDA;
  } else if (strcmp(name, "auto") == 0) {
    *out = device_cuda_count() > 0 ? DEVICE_CUDA : DEVICE_CPU;
  } else {
    return -1;
  }
  return 0;
}

const char *device_name(Device dev) { return dev == DEVICE_CUDA ? "cuda" : "cpu"; }

void ctx_init(Ctx *c, Device dev, int gpu) {
  memset(c, 0, sizeof *c);
  c->dev = dev;
  c->gpu = -1;
  if (dev == DEVICE_CUDA) ctx_init_cuda(c, gpu);
}

void ctx_set_tf32(const Ctx *c, bool on) {
  if (c->dev == DEVICE_CUDA) ctx_set_tf32_cuda(c, on);
}

void ctx_free(Ctx *c) {
  if (c->dev == DEVICE_CUDA) ctx_free_cuda(c);
  memset(c, 0, sizeof *c);
}

void *dev_alloc(const Ctx *c, size_t bytes) {
  if (c->dev == DEVICE_CUDA) return dev_alloc_cuda(c, bytes);
  return mallocCheck(bytes);
}

void dev_free(const Ctx *c, void *p) {
  if (!p) return;
  if (c->dev == DEVICE_CUDA) {
    dev_free_cuda(c, p);
  } else {
    free(p);
  }
}

void dev_upload(const Ctx *c, void *dst, const void *src, size_t bytes) {
  if (c->dev == DEVICE_CUDA) {
    dev_upload_cuda(c, dst, src, bytes);
  } else {
    memcpy(dst, src, bytes);
  }
}

void dev_download(const Ctx *c, void *dst, const void *src, size_t bytes) {
  if (c->dev == DEVICE_CUDA) {
    dev_download_cuda(c, dst, src, bytes);
  } else {
    memcpy(dst, src, bytes);
  }
}

void dev_download_async(const Ctx *c, void *dst, const void *src, size_t bytes) {
  if (c->dev == DEVICE_CUDA) {
    dev_download_async_cuda(c, dst, src, bytes);
  } else {
    memcpy(dst, src, bytes);
  }
}

void dev_copy(const Ctx *c, void *dst, const void *src, size_t bytes) {
  if (c->dev == DEVICE_CUDA) {
    dev_copy_cuda(c, dst, src, bytes);
  } else {
    memmove(dst, src, bytes);
  }
}

void dev_zero(const Ctx *c, void *p, size_t bytes) {
  if (c->dev == DEVICE_CUDA) {
    dev_zero_cuda(c, p, bytes);
  } else {
    memset(p, 0, bytes);
  }
}

void dev_sync(const Ctx *c) {
  if (c->dev == DEVICE_CUDA) dev_sync_cuda(c);
}

void *host_alloc(const Ctx *c, size_t bytes) {
  if (c->dev == DEVICE_CUDA) return host_alloc_cuda(c, bytes);
  return mallocCheck(bytes);
}

void host_free(const Ctx *c, void *p) {
  if (!p) return;
  if (c->dev == DEVICE_CUDA) {
    host_free_cuda(c, p);
  } else {
    free(p);
  }
}

void dev_event_init(const Ctx *c, DevEvent *e) {
  memset(e, 0, sizeof *e);
  if (c->dev == DEVICE_CUDA) dev_event_init_cuda(c, e);
}

void dev_event_free(const Ctx *c, DevEvent *e) {
  if (c->dev == DEVICE_CUDA && e->ev) dev_event_free_cuda(c, e);
  memset(e, 0, sizeof *e);
}

void dev_event_record(const Ctx *c, DevEvent *e, void *stream) {
  if (c->dev == DEVICE_CUDA) {
    dev_event_record_cuda(c, e, stream);
  } else {
    e->t = now_seconds();  // CPU work is synchronous: "after the work so far" is now
  }
}

void dev_stream_wait(const Ctx *c, void *stream, const DevEvent *e) {
  if (c->dev == DEVICE_CUDA) dev_stream_wait_cuda(c, stream, e);
}

bool dev_event_done(const Ctx *c, const DevEvent *e) {
  return c->dev == DEVICE_CUDA ? dev_event_done_cuda(c, e) : true;
}

void dev_event_wait(const Ctx *c, const DevEvent *e) {
  if (c->dev == DEVICE_CUDA) dev_event_wait_cuda(c, e);
}

double dev_event_elapsed(const Ctx *c, const DevEvent *from, const DevEvent *to) {
  if (c->dev == DEVICE_CUDA) return dev_event_elapsed_cuda(c, from, to);
  return to->t - from->t;
}

void *dev_stream_create(const Ctx *c) {
  return c->dev == DEVICE_CUDA ? dev_stream_create_cuda(c) : NULL;
}

void dev_stream_free(const Ctx *c, void *stream) {
  if (c->dev == DEVICE_CUDA && stream) dev_stream_free_cuda(c, stream);
}
