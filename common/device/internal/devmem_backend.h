/**
 * @file
 * @brief Internal interface between devmem.c and the CUDA half of device memory, events and streams,
 * devmem_cuda.c (built with CUDA, HAVE_CUDA): devmem.c calls it only in a build that has it, and only
 * for a CUDA context. Not for the steps: they use devmem.h.
 */
#ifndef DDP_DEVMEM_BACKEND_H
#define DDP_DEVMEM_BACKEND_H

#include "device_backend.h"
#include "devmem.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @brief CUDA implementation of dev_event_init(). */
void dev_event_init_cuda(const Ctx *c, DevEvent *e);
/** @brief CUDA implementation of dev_event_free(). */
void dev_event_free_cuda(const Ctx *c, DevEvent *e);
/** @brief CUDA implementation of dev_event_record(). */
void dev_event_record_cuda(const Ctx *c, DevEvent *e, void *stream);
/** @brief CUDA implementation of dev_stream_wait(). */
void dev_stream_wait_cuda(const Ctx *c, void *stream, const DevEvent *e);
/** @brief CUDA implementation of dev_event_done(). */
bool dev_event_done_cuda(const Ctx *c, const DevEvent *e);
/** @brief CUDA implementation of dev_event_wait(). */
void dev_event_wait_cuda(const Ctx *c, const DevEvent *e);
/** @brief CUDA implementation of dev_event_elapsed(). */
double dev_event_elapsed_cuda(const Ctx *c, const DevEvent *from, const DevEvent *to);
/** @brief CUDA implementation of dev_stream_create(). */
void *dev_stream_create_cuda(const Ctx *c);
/** @brief CUDA implementation of dev_stream_free(). */
void dev_stream_free_cuda(const Ctx *c, void *stream);

/** @brief CUDA implementation of dev_alloc(). */
void *dev_alloc_cuda(const Ctx *c, size_t bytes);
/** @brief CUDA implementation of dev_free(). */
void dev_free_cuda(const Ctx *c, void *p);
/** @brief CUDA implementation of dev_upload(). */
void dev_upload_cuda(const Ctx *c, void *dst, const void *src, size_t bytes);
/** @brief CUDA implementation of dev_download(). */
void dev_download_cuda(const Ctx *c, void *dst, const void *src, size_t bytes);
/** @brief CUDA implementation of dev_download_async(). */
void dev_download_async_cuda(const Ctx *c, void *dst, const void *src, size_t bytes);
/** @brief CUDA implementation of dev_copy(). */
void dev_copy_cuda(const Ctx *c, void *dst, const void *src, size_t bytes);
/** @brief CUDA implementation of dev_zero(). */
void dev_zero_cuda(const Ctx *c, void *p, size_t bytes);
/** @brief CUDA implementation of dev_sync(). */
void dev_sync_cuda(const Ctx *c);
/** @brief CUDA implementation of dev_host_alloc() (pinned memory). */
void *dev_host_alloc_cuda(const Ctx *c, size_t bytes);
/** @brief CUDA implementation of dev_host_free(). */
void dev_host_free_cuda(const Ctx *c, void *p);

#ifdef __cplusplus
}
#endif
#endif
