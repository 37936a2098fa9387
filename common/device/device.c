// device.c: devices and contexts, and the dispatch to their CUDA half (device_cuda.c). A build
// without CUDA (no HAVE_CUDA) has no CUDA half: there no GPU is ever counted, and device_init()
// refuses a CUDA context with a message that says what the build lacks.
#define _POSIX_C_SOURCE 200809L
#include "device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "device_backend.h"
#include "flops.h"
#include "log.h"

#ifdef HAVE_OPENBLAS
#include "blas.h"  // OpenBLAS's own queries: its config, its kernel, its threads
#endif

int device_cuda_count(void) {
#if HAVE_CUDA
  return device_cuda_count_cuda();
#else
  return 0;
#endif
}

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

bool device_blas_kernel_is_fallback(const char *kernel, bool cpu_has_avx2) {
  // OpenBLAS's x86-64 kernels that use AVX2 (and FMA); any other one leaves them unused.
  static const char *const AVX2_KERNELS[] = {"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids"};
  if (!cpu_has_avx2 || kernel == NULL) return false;
  for (size_t i = 0; i < sizeof AVX2_KERNELS / sizeof AVX2_KERNELS[0]; i++)
    if (strcasecmp(kernel, AVX2_KERNELS[i]) == 0) return false;
  return true;
}

#ifdef HAVE_OPENBLAS
// Whether this CPU has AVX2 and FMA, what OpenBLAS's Haswell kernel needs.
static bool cpu_has_avx2(void) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}
#endif

// The start-up line naming the CPU's GEMM library, its kernel and threads, and one more line when
// OpenBLAS runs a generic kernel on a CPU it does not know. OPENBLAS_CORETYPE is only suggested:
// some OpenBLAS builds crash or compute wrongly with a kernel the CPU does not fit.
static void log_blas(void) {
#ifdef HAVE_OPENBLAS
  char name[16] = "OpenBLAS", version[32] = "";  // openblas_get_config(): "OpenBLAS 0.3.21 NO_LAPACKE ..."
  const char *config = openblas_get_config();
  if (config) sscanf(config, "%15s %31s", name, version);
  const char *kernel = openblas_get_corename();
  int threads = openblas_get_num_threads();
  log0("blas: %s %s, kernel %s, %d thread%s\n", name, version, kernel ? kernel : "unknown", threads,
       threads == 1 ? "" : "s");
  // What to do about it: a kernel forced by hand is the user's; a system OpenBLAS may just be older
  // than the CPU.
  const char *forced = getenv("OPENBLAS_CORETYPE");
  char hint[256];
  if (forced && *forced)
    snprintf(hint, sizeof hint,
             "OPENBLAS_CORETYPE=%.32s chose it: unset it, or choose one this CPU fits, "
             "e.g. OPENBLAS_CORETYPE=Haswell",
             forced);
  else
    snprintf(hint, sizeof hint,
             "scripts/setup.sh installs an OpenBLAS that knows current CPUs (CMake's "
             "DDP_BLAS=scipy-openblas), or choose a kernel with OPENBLAS_CORETYPE, e.g. "
             "OPENBLAS_CORETYPE=Haswell");
  if (device_blas_kernel_is_fallback(kernel, cpu_has_avx2()))
    log0(
        "blas: kernel %s is a generic fallback that leaves this CPU's AVX2 unused (GEMMs several times "
        "slower); %s\n",
        kernel, hint);
#else
  log0("blas: none, plain C GEMMs (built without OpenBLAS: several times slower)\n");
#endif
}

void device_init(Ctx *c, Device dev, int gpu) {
  memset(c, 0, sizeof *c);
  c->dev = dev;
  c->gpu = -1;
  if (dev == DEVICE_CPU) flops_set_device("cpu", false);  // the MFU's peak: DDP_CPU_PEAK_GFLOPS, if set
  if (dev == DEVICE_CPU) log_blas();
  if (dev == DEVICE_CUDA) WITH_CUDA(device_init_cuda(c, gpu));
  (void)gpu;  // (unused in a build without CUDA)
}

void device_set_tf32(const Ctx *c, bool on) {
  if (c->dev == DEVICE_CUDA) WITH_CUDA(device_set_tf32_cuda(c, on));
  if (c->dev == DEVICE_CUDA) flops_set_tf32(on);  // the MFU's peak: the TF32 rate
  (void)on;                                       // (unused in a build without CUDA; the CPU has no TF32)
}

void device_free(Ctx *c) {
  if (c->dev == DEVICE_CUDA) WITH_CUDA(device_free_cuda(c));
  memset(c, 0, sizeof *c);
}
