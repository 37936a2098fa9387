// cublas_lazy.c: cuBLAS, loaded when the first CUDA context is made instead of when a program starts.
//
// Linked the usual way, libcublas.so pulls in libcublasLt.so (half a gigabyte), whose static
// constructors run in every process at start: measured on the 2-core build VM, 0.1 s of CPU time
// per process (0.05 s user, 0.06 s system: page faults) before main(), on the CPU as much as on a
// GPU; the test suite starts some 3,000 CPU processes. So the build does not link cuBLAS: this file
// defines the seven cuBLAS functions common/ calls, with cublas_v2.h's own prototypes (so a
// mismatch does not compile), and each forwards to the real one, all found with dlopen/dlsym at the
// first call of any: CMake's path to the library (DDP_CUBLAS_PATH), else its soname on the loader's path
// (DDP_CUBLAS_SONAME, e.g. libcublas.so.13). A library that cannot be loaded ends the job, naming it.
// The GEMM pays a pthread_once check and one indirect call more per cublasSgemm, nothing else.
#define _GNU_SOURCE
#include <cublas_v2.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "check.h"

// The real functions, with cublas_v2.h's prototypes.
static struct {
  cublasStatus_t (*create)(cublasHandle_t *);
  cublasStatus_t (*destroy)(cublasHandle_t);
  cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t);
  cublasStatus_t (*set_math_mode)(cublasHandle_t, cublasMath_t);
  const char *(*status_name)(cublasStatus_t);
  const char *(*status_string)(cublasStatus_t);
  cublasStatus_t (*sgemm)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const float *,
                          const float *, int, const float *, int, const float *, float *, int);
} api;
static char why[1024];  // why the library or a function could not be loaded ("" when all were)

static void *find(void *lib, const char *name) {
  void *f = dlsym(lib, name);
  if (!f && !why[0]) snprintf(why, sizeof why, "%s has no %s: %s", DDP_CUBLAS_SONAME, name, dlerror());
  return f;
}

static void load(void) {
  void *lib = dlopen(DDP_CUBLAS_PATH, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    snprintf(why, sizeof why, "%s", dlerror());
    lib = dlopen(DDP_CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      const char *second = dlerror();
      size_t n = strlen(why);
      snprintf(why + n, sizeof why - n, "; %s", second ? second : "not found");
      return;
    }
    why[0] = '\0';
  }
  api.create = find(lib, "cublasCreate_v2");
  api.destroy = find(lib, "cublasDestroy_v2");
  api.set_stream = find(lib, "cublasSetStream_v2");
  api.set_math_mode = find(lib, "cublasSetMathMode");
  api.status_name = find(lib, "cublasGetStatusName");
  api.status_string = find(lib, "cublasGetStatusString");
  api.sgemm = find(lib, "cublasSgemm_v2");
}

// cuBLAS's functions, loaded on the first call of any; a library that cannot be loaded ends the job.
static void cublas(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, load);
  if (why[0])
    check_fail("CUBLAS", __FILE__, __LINE__, "cannot load cuBLAS (%s, or %s on the loader's path): %s",
               DDP_CUBLAS_PATH, DDP_CUBLAS_SONAME, why);
}

cublasStatus_t CUBLASWINAPI cublasCreate_v2(cublasHandle_t *handle) {
  cublas();
  return api.create(handle);
}

cublasStatus_t CUBLASWINAPI cublasDestroy_v2(cublasHandle_t handle) {
  cublas();
  return api.destroy(handle);
}

cublasStatus_t CUBLASWINAPI cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  cublas();
  return api.set_stream(handle, stream);
}

cublasStatus_t CUBLASWINAPI cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  cublas();
  return api.set_math_mode(handle, mode);
}

const char *CUBLASWINAPI cublasGetStatusName(cublasStatus_t status) {
  cublas();
  return api.status_name(status);
}

const char *CUBLASWINAPI cublasGetStatusString(cublasStatus_t status) {
  cublas();
  return api.status_string(status);
}

cublasStatus_t CUBLASWINAPI cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb,
                                           int m, int n, int k, const float *alpha, const float *A, int lda,
                                           const float *B, int ldb, const float *beta, float *C, int ldc) {
  cublas();
  return api.sgemm(handle, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}
