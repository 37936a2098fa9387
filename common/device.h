/**
 * @file
 * @brief Where memory and work live: the CPU or one CUDA GPU (the analogue of `torch.device`).
 *
 * A Ctx bundles a device with what work on it needs: on CUDA, the compute stream and the cuBLAS handle
 * bound to it. Every op, the MLP and the optimizer take a `const Ctx *` and operate on memory that lives
 * on that device ("device memory" below means host memory for DEVICE_CPU). All CUDA work is queued on
 * `Ctx.stream`; nothing in the toolkit synchronises the host unless its name says so (`_sync`, `to_host`).
 *
 * The CPU path is always built. The CUDA path is built when nvcc is found (HAVE_CUDA); otherwise the
 * `*_cuda` functions exist but end the job with "built without CUDA".
 */
#ifndef DDP_DEVICE_H
#define DDP_DEVICE_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/** @brief The kind of device a Ctx runs on. */
typedef enum Device {
  DEVICE_CPU = 0,  ///< host memory, OpenBLAS GEMMs, plain C loops
  DEVICE_CUDA = 1  ///< one CUDA GPU, cuBLAS GEMMs, our kernels, one stream
} Device;

/** @brief A device plus the handles that work on it needs. */
typedef struct Ctx {
  Device dev;    ///< which device
  int gpu;       ///< CUDA device ordinal (DEVICE_CUDA only), -1 for the CPU
  void *stream;  ///< cudaStream_t for compute (DEVICE_CUDA), NULL on the CPU
  void *blas;    ///< cublasHandle_t bound to @ref stream (DEVICE_CUDA), NULL on the CPU
} Ctx;

/**
 * @brief Number of usable CUDA GPUs; 0 when built without CUDA, without a driver or without a GPU.
 * @return the count, never negative; clears CUDA's sticky "no driver" error.
 */
int device_cuda_count(void);

/**
 * @brief Resolves a `--device` name to a Device.
 * @param[in] name "cpu", "cuda" or "auto" (CUDA when device_cuda_count() > 0, else CPU).
 * @param[out] out the device.
 * @return 0 on success, -1 for an unknown name.
 */
int device_parse(const char *name, Device *out);

/** @brief The name of a device: "cpu" or "cuda". */
const char *device_name(Device dev);

/**
 * @brief Creates a context on @p dev. For CUDA: selects GPU @p gpu, creates a non-blocking stream and a
 * cuBLAS handle on it with plain fp32 math (no TF32). Ends the job with a clear message when the GPU
 * does not exist or the program was built without CUDA.
 * @param[out] c   the context.
 * @param[in]  dev the device kind.
 * @param[in]  gpu the GPU ordinal (the local rank in a multi-GPU job); ignored for the CPU.
 */
void ctx_init(Ctx *c, Device dev, int gpu);

/** @brief Releases what ctx_init() created (waits for queued work first). */
void ctx_free(Ctx *c);

/**
 * @brief Lets the context's GEMMs use TF32 tensor cores (`--tf32`, like PyTorch's
 * `torch.backends.cuda.matmul.allow_tf32`): much faster on Ampere and later GPUs, but the GEMM
 * inputs keep only 10 mantissa bits, so results no longer match the fp32 CPU reference to fp32
 * rounding. Replicas still agree bit for bit (every rank rounds the same way). The CPU has no TF32:
 * there the call changes nothing.
 * @pre ctx_init() on @p c.
 * @param[in] c  the context (its cuBLAS handle's math mode changes).
 * @param[in] on true for TF32, false for plain fp32 (the default).
 */
void ctx_set_tf32(const Ctx *c, bool on);

/** @brief CUDA half of ctx_init(). @pre dev is DEVICE_CUDA. */
void ctx_init_cuda(Ctx *c, int gpu);
/** @brief CUDA half of ctx_free(). */
void ctx_free_cuda(Ctx *c);
/** @brief CUDA half of ctx_set_tf32(): the cuBLAS handle's math mode. */
void ctx_set_tf32_cuda(const Ctx *c, bool on);

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
 * memcpy on the CPU). @p dst must come from host_alloc() (pinned: a pageable destination would make
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
void *host_alloc(const Ctx *c, size_t bytes);
/** @brief Frees memory from host_alloc(); NULL is ignored. */
void host_free(const Ctx *c, void *p);

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
/** @brief CUDA implementation of host_alloc() (pinned memory). */
void *host_alloc_cuda(const Ctx *c, size_t bytes);
/** @brief CUDA implementation of host_free(). */
void host_free_cuda(const Ctx *c, void *p);
/** @brief CUDA implementation of device_cuda_count(). */
int device_cuda_count_impl(void);

#ifdef __cplusplus
}
#endif
#endif
