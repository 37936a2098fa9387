/**
 * @file
 * @brief Memory on a context's device and the order of work on it: allocation, copies, events and
 * streams (the part of a `torch.Tensor` that says where its bytes live, and `torch.cuda.Event` /
 * `torch.cuda.Stream`). Every name here starts with `dev_`.
 *
 * "Device memory" means GPU memory on a CUDA context and host memory on a CPU one, so the same calls
 * serve both. All CUDA work is queued on `Ctx.stream` (or a stream from dev_stream_create()); nothing
 * here synchronises the host unless its description says it waits.
 */
#ifndef DDP_DEVMEM_H
#define DDP_DEVMEM_H

#include <stdbool.h>
#include <stddef.h>

#include "device.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * @brief Allocates @p bytes of zero-filled memory on the context's device (touched once, now).
 * @return device pointer, never NULL (ends the job when out of memory).
 */
void *dev_alloc(const Ctx *c, size_t bytes);
/** @brief Frees memory from dev_alloc(); NULL is ignored. */
void dev_free(const Ctx *c, void *p);
/** @brief Queues a host→device copy on the context's stream (a plain memcpy on the CPU). */
void dev_upload(const Ctx *c, void *dst, const void *src, size_t bytes);
/** @brief Copies device→host and waits for it (and for all work queued before it). */
void dev_download(const Ctx *c, void *dst, const void *src, size_t bytes);
/**
 * @brief Queues a device→host copy on the context's stream and returns without waiting (a plain
 * memcpy on the CPU). @p dst must come from dev_host_alloc() (pinned: a pageable destination would make
 * CUDA copy synchronously), and it is valid only once an event recorded after the copy is done
 * (dev_event_done(), dev_event_wait()).
 */
void dev_download_async(const Ctx *c, void *dst, const void *src, size_t bytes);
/** @brief Queues a device→device copy on the context's stream. */
void dev_copy(const Ctx *c, void *dst, const void *src, size_t bytes);
/** @brief Queues a fill with zero bytes on the context's stream. */
void dev_zero(const Ctx *c, void *p, size_t bytes);
/** @brief Waits until all work queued on the context's stream has finished (no-op on the CPU). */
void dev_sync(const Ctx *c);

/**
 * @brief Allocates zeroed host memory that the device can copy from asynchronously (pinned on CUDA,
 * plain on the CPU).
 * @return host pointer, never NULL.
 */
void *dev_host_alloc(const Ctx *c, size_t bytes);
/** @brief Frees memory from dev_host_alloc(); NULL is ignored. */
void dev_host_free(const Ctx *c, void *p);

/**
 * @brief A point in a stream's work: lets another stream wait for it, and timestamps it. On the CPU,
 * where work is synchronous, recording an event just reads the clock.
 */
typedef struct DevEvent {
  void *ev;  ///< cudaEvent_t (DEVICE_CUDA), NULL on the CPU
  double t;  ///< wall-clock seconds when recorded (DEVICE_CPU only)
} DevEvent;

/** @brief Creates an event (with timing) on the context's device. */
void dev_event_init(const Ctx *c, DevEvent *e);
/** @brief Destroys an event from dev_event_init(). */
void dev_event_free(const Ctx *c, DevEvent *e);
/**
 * @brief Records @p e after the work queued so far on @p stream.
 * @param[in] c       context.
 * @param[in,out] e   the event.
 * @param[in] stream  a cudaStream_t from dev_stream_create(), or NULL for the compute stream.
 */
void dev_event_record(const Ctx *c, DevEvent *e, void *stream);
/**
 * @brief Makes @p stream wait (on the device, without blocking the host) for @p e.
 * @param[in] c      context.
 * @param[in] stream a stream from dev_stream_create(), or NULL for the compute stream.
 * @param[in] e      a recorded event.
 */
void dev_stream_wait(const Ctx *c, void *stream, const DevEvent *e);
/**
 * @brief Whether the work before a recorded event has finished; never waits.
 * @param[in] c context.
 * @param[in] e a recorded event.
 * @return true when it has finished (always on the CPU), false while it is still queued or running.
 */
bool dev_event_done(const Ctx *c, const DevEvent *e);
/**
 * @brief Waits on the host until the work before a recorded event has finished (no-op on the CPU).
 * @param[in] c context.
 * @param[in] e a recorded event.
 */
void dev_event_wait(const Ctx *c, const DevEvent *e);
/**
 * @brief Seconds from event @p from to event @p to; waits for @p to to complete.
 * @return the elapsed time (negative when @p to happened first).
 */
double dev_event_elapsed(const Ctx *c, const DevEvent *from, const DevEvent *to);
/** @brief Creates a second, non-blocking stream on the context's GPU (NULL on the CPU). */
void *dev_stream_create(const Ctx *c);
/** @brief Destroys a stream from dev_stream_create() after its work finished; NULL is ignored. */
void dev_stream_free(const Ctx *c, void *stream);

#ifdef __cplusplus
}
#endif
#endif
