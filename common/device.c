// device.c: devices and contexts, and the dispatch to their CUDA half (device_cuda.c). A build
// without CUDA (no HAVE_CUDA) has no CUDA half: there no GPU is ever counted, and device_init()
// refuses a CUDA context with a message that says what the build lacks.
#define _POSIX_C_SOURCE 200809L
#include "device.h"

#include <string.h>

#include "device_backend.h"
#include "flops.h"

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

void device_init(Ctx *c, Device dev, int gpu) {
  memset(c, 0, sizeof *c);
  c->dev = dev;
  c->gpu = -1;
  if (dev == DEVICE_CPU) flops_set_device("cpu", false);  // the MFU's peak: DDP_CPU_PEAK_GFLOPS, if set
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
