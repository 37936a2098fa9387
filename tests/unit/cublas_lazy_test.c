// CTest `cublas_lazy` (label unit; a build with CUDA): common/device/cublas_lazy.c loads cuBLAS at its first
// call, not at start. A program linked like the trainers has no libcublas in its memory map at
// start (a CPU run never pays for it); the first cuBLAS call (cublasGetStatusString, which needs no
// GPU) loads it and answers through the real library. Exit 0, or 1 naming what went wrong.
#include <cublas_v2.h>
#include <stdio.h>
#include <string.h>

// Whether libcublas is mapped into this process.
static int cublas_mapped(void) {
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) return -1;
  char line[4096];
  int found = 0;
  while (fgets(line, sizeof line, f))
    if (strstr(line, "/libcublas.so")) found = 1;
  fclose(f);
  return found;
}

int main(void) {
  if (cublas_mapped() != 0) {
    fprintf(stderr, "cublas_lazy: libcublas is loaded at start (the build links it again?)\n");
    return 1;
  }
  const char *s = cublasGetStatusString(CUBLAS_STATUS_NOT_INITIALIZED);
  if (!s || !*s || cublas_mapped() != 1) {
    fprintf(stderr, "cublas_lazy: the first cuBLAS call did not load the library\n");
    return 1;
  }
  printf("not loaded at start; the first call loaded it: CUBLAS_STATUS_NOT_INITIALIZED is '%s' (%s)\n", s,
         cublasGetStatusName(CUBLAS_STATUS_NOT_INITIALIZED));
  return 0;
}
