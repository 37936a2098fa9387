/**
 * @file
 * @brief Where memory and work live: the CPU or one CUDA GPU (the analogue of `torch.device`).
 *
 * A Ctx bundles a device with what work on it needs: on CUDA, the compute stream and the cuBLAS handle
 * bound to it. Every op, the MLP and the optimizer take a `const Ctx *` and operate on memory that lives
 * on that device (devmem.h allocates and copies it). All CUDA work is queued on `Ctx.stream`; nothing in
 * the toolkit synchronises the host unless its name says so (`_sync`, `to_host`). Every name here
 * starts with `device_`.
 *
 * The CPU path is always built. The CUDA path is built when nvcc is found (HAVE_CUDA); a build without
 * it counts no GPU, and device_init() refuses DEVICE_CUDA with a message that says so.
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
 * @brief Whether an OpenBLAS kernel is a generic fallback that leaves a CPU's AVX2 unused.
 *
 * OpenBLAS picks its kernel from the CPU's model at load time; a release that does not know the CPU
 * (Debian 12's 0.3.21 and AMD Zen 5, for one) falls back to an old generic kernel such as Prescott
 * (SSE3), whose GEMMs are several times slower. For a CPU of the CPU path, device_init() prints the
 * library, its kernel and its threads, and one more line when this returns true.
 * @param[in] kernel       the kernel's name, as `openblas_get_corename()` gives it (e.g. "Prescott",
 *                         "Haswell"); NULL counts as no fallback.
 * @param[in] cpu_has_avx2 whether the CPU has AVX2 and FMA.
 * @return true when the CPU has AVX2 and @p kernel is none of OpenBLAS's AVX2 kernels (Haswell, Zen,
 *         SkylakeX, Cooperlake, SapphireRapids), compared without regard to case.
 */
bool device_blas_kernel_is_fallback(const char *kernel, bool cpu_has_avx2);

/**
 * @brief Creates a context on @p dev. For CUDA: selects GPU @p gpu, creates a non-blocking stream and a
 * cuBLAS handle on it with plain fp32 math (no TF32). Ends the job with a clear message when the GPU
 * does not exist or the program was built without CUDA. For the CPU: rank 0 prints the start-up line
 * `blas: OpenBLAS 0.3.21, kernel Haswell, 1 thread` (the GEMM library, its kernel and its threads), and
 * a second one when the kernel is a generic fallback (device_blas_kernel_is_fallback()) saying how to
 * choose one (`OPENBLAS_CORETYPE`, which is never set here).
 * @param[out] c   the context.
 * @param[in]  dev the device kind.
 * @param[in]  gpu the GPU ordinal (the local rank in a multi-GPU job); ignored for the CPU.
 */
void device_init(Ctx *c, Device dev, int gpu);

/** @brief Releases what device_init() created (waits for queued work first). */
void device_free(Ctx *c);

/**
 * @brief Lets the context's GEMMs use TF32 tensor cores (`--tf32`, like PyTorch's
 * `torch.backends.cuda.matmul.allow_tf32`): much faster on Ampere and later GPUs, but the GEMM
 * inputs keep only 10 mantissa bits, so results no longer match the fp32 CPU reference to fp32
 * rounding. Replicas still agree bit for bit (every rank rounds the same way). The CPU has no TF32:
 * there the call changes nothing.
 * @pre device_init() on @p c.
 * @param[in] c  the context (its cuBLAS handle's math mode changes).
 * @param[in] on true for TF32, false for plain fp32 (the default).
 */
void device_set_tf32(const Ctx *c, bool on);

#ifdef __cplusplus
}
#endif
#endif
