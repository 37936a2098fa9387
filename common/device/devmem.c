// devmem.c: device memory, events and streams: the CPU half, and the dispatch to the CUDA half
// (devmem_cuda.c).
#define _POSIX_C_SOURCE 200809L
#include "devmem.h"

#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "devmem_backend.h"
#include "log.h"

void *dev_alloc(const Ctx *c, size_t bytes) {
  if (c->dev == DEVICE_CUDA) WITH_CUDA(return dev_alloc_cuda(c, bytes));
  return mallocCheck(bytes);
}

void dev_free(const Ctx *c, void *p) {
  if (!p) return;
  if (c->dev == DEVICE_CUDA) {
    WITH_CUDA(dev_free_cuda(c, p));
  } else {
    free(p);
  }
}

void dev_upload(const Ctx *c, void *dst, const void *src, size_t bytes) {
  if (c->dev == DEVICE_CUDA) {
    WITH_CUDA(dev_upload_cuda(c, dst, src, bytes));
  } else {
    memcpy(dst, src, bytes);
  }
}

void dev_download(const Ctx *c, void *dst, const void *src, size_t bytes) {
  if (c->dev == DEVICE_CUDA) {
    WITH_CUDA(dev_download_cuda(c, dst, src, bytes));
  } else {
    memcpy(dst, src, bytes);
  }
}

void dev_download_async(const Ctx *c, void *dst, const void *src, size_t bytes) {
  if (c->dev == DEVICE_CUDA) {
    WITH_CUDA(dev_download_async_cuda(c, dst, src, bytes));
  } else {
    memcpy(dst, src, bytes);
  }
}

void dev_copy(const Ctx *c, void *dst, const void *src, size_t bytes) {
  if (c->dev == DEVICE_CUDA) {
    WITH_CUDA(dev_copy_cuda(c, dst, src, bytes));
  } else {
    memmove(dst, src, bytes);
  }
}

void dev_zero(const Ctx *c, void *p, size_t bytes) {
  if (c->dev == DEVICE_CUDA) {
    WITH_CUDA(dev_zero_cuda(c, p, bytes));
  } else {
    memset(p, 0, bytes);
  }
}

void dev_sync(const Ctx *c) {
  if (c->dev == DEVICE_CUDA) WITH_CUDA(dev_sync_cuda(c));
}

void *dev_host_alloc(const Ctx *c, size_t bytes) {
  if (c->dev == DEVICE_CUDA) WITH_CUDA(return dev_host_alloc_cuda(c, bytes));
  return mallocCheck(bytes);
}

void dev_host_free(const Ctx *c, void *p) {
  if (!p) return;
  if (c->dev == DEVICE_CUDA) {
    WITH_CUDA(dev_host_free_cuda(c, p));
  } else {
    free(p);
  }
}

void dev_event_init(const Ctx *c, DevEvent *e) {
  memset(e, 0, sizeof *e);
  if (c->dev == DEVICE_CUDA) WITH_CUDA(dev_event_init_cuda(c, e));
}

void dev_event_free(const Ctx *c, DevEvent *e) {
  if (c->dev == DEVICE_CUDA && e->ev) WITH_CUDA(dev_event_free_cuda(c, e));
  memset(e, 0, sizeof *e);
}

void dev_event_record(const Ctx *c, DevEvent *e, void *stream) {
  if (c->dev == DEVICE_CUDA) {
    WITH_CUDA(dev_event_record_cuda(c, e, stream));
  } else {
    e->t = log_clock();  // CPU work is synchronous: "after the work so far" is now
  }
  (void)stream;  // (unused in a build without CUDA)
}

void dev_stream_wait(const Ctx *c, void *stream, const DevEvent *e) {
  if (c->dev == DEVICE_CUDA) WITH_CUDA(dev_stream_wait_cuda(c, stream, e));
  (void)stream, (void)e;  // CPU work is synchronous: there is nothing to wait for
}

bool dev_event_done(const Ctx *c, const DevEvent *e) {
  if (c->dev == DEVICE_CUDA) WITH_CUDA(return dev_event_done_cuda(c, e));
  (void)e;
  return true;  // CPU work is synchronous: done when recorded
}

void dev_event_wait(const Ctx *c, const DevEvent *e) {
  if (c->dev == DEVICE_CUDA) WITH_CUDA(dev_event_wait_cuda(c, e));
  (void)e;  // CPU work is synchronous: done when recorded
}

double dev_event_elapsed(const Ctx *c, const DevEvent *from, const DevEvent *to) {
  if (c->dev == DEVICE_CUDA) WITH_CUDA(return dev_event_elapsed_cuda(c, from, to));
  return to->t - from->t;
}

void *dev_stream_create(const Ctx *c) {
  if (c->dev == DEVICE_CUDA) WITH_CUDA(return dev_stream_create_cuda(c));
  return NULL;
}

void dev_stream_free(const Ctx *c, void *stream) {
  if (c->dev == DEVICE_CUDA && stream) WITH_CUDA(dev_stream_free_cuda(c, stream));
}
