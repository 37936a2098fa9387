// flops.c: the FLOP count and the peak table of flops.h.
#include "flops.h"

#include <stdlib.h>
#include <string.h>

static double g_total;            // FLOPs counted by this process
static char g_name[128] = "cpu";  // the device flops_set_device() was told of
static double g_peak;             // its peak, FLOP/s (0: unknown)

double flops_linear(long long rows, int in, int out) { return 2.0 * (double)rows * in * out; }

double flops_mlp_step(const int *sizes, int n_layers, long long batch) {
  double f = 0;
  for (int l = 0; l < n_layers; l++) f += 3.0 * flops_linear(batch, sizes[l], sizes[l + 1]);
  return f;
}

void flops_count(double n) { g_total += n; }

double flops_total(void) { return g_total; }

// Dense (no sparsity) peaks in TFLOP/s from NVIDIA's data sheets: the H200 and H100 Tensor Core GPU
// data sheets (nvidia.com/en-us/data-center/h200/ and /h100/: SXM FP32 67, TF32 989; NVL FP32 60, TF32
// 835 — the H200 NVL and H100 NVL alike; H100 PCIe FP32 51, TF32 756), the A100 data sheet (fp32 19.5,
// TF32 156), the L40S, L40, L4 and A10 data sheets. The data sheets print the TF32 figures "with
// sparsity"; the dense rate is half of that, which is what is listed. More specific keys come first
// ("H200 NVL" and "GH200" before "H200", "H100 NVL" and "H100 PCIe" before "H100", "A100" before "A10",
// "L40S" and "L40" before "L4").
static const struct {
  const char *key;
  double fp32, tf32;
} PEAKS[] = {
    {"H200 NVL", 60.0, 417.5},  {"GH200", 67.0, 494.5}, {"H200", 67.0, 494.5}, {"H100 NVL", 60.0, 417.5},
    {"H100 PCIe", 51.0, 378.0}, {"H100", 67.0, 494.5},  {"A100", 19.5, 156.0}, {"L40S", 91.6, 183.0},
    {"L40", 90.5, 90.5},        {"L4", 30.3, 60.0},     {"A10", 31.2, 62.5},
};

double flops_gpu_peak(const char *name, bool tf32) {
  for (size_t i = 0; i < sizeof PEAKS / sizeof PEAKS[0]; i++)
    if (strstr(name, PEAKS[i].key)) return 1e12 * (tf32 ? PEAKS[i].tf32 : PEAKS[i].fp32);
  return 0.0;
}

void flops_set_device(const char *name, bool tf32) {
  strncpy(g_name, name, sizeof g_name - 1);
  g_name[sizeof g_name - 1] = '\0';
  flops_set_tf32(tf32);
}

void flops_set_tf32(bool tf32) {
  if (strcmp(g_name, "cpu") == 0) {
    const char *env = getenv("DDP_CPU_PEAK_GFLOPS");
    char *end = NULL;
    double v = env && *env ? strtod(env, &end) : 0.0;
    g_peak = end && *end == '\0' && v > 0 ? 1e9 * v : 0.0;
  } else {
    g_peak = flops_gpu_peak(g_name, tf32);
  }
}

double flops_peak(void) { return g_peak; }
