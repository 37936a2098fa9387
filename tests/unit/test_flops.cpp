// flops.h: the FLOP formula, the count the MLP keeps, and the peak table.
#include <gtest/gtest.h>

#include <cstdlib>

#include "device.h"
#include "flops.h"
#include "mlp.h"

TEST(Flops, StepIsSixTimesBatchTimesWeights) {
  int sizes[] = {784, 256, 10};
  // 6 · 32 · (784·256 + 256·10)
  EXPECT_DOUBLE_EQ(flops_mlp_step(sizes, 2, 32), 6.0 * 32 * (784 * 256 + 256 * 10));
  EXPECT_DOUBLE_EQ(flops_linear(4, 3, 5), 120.0);
}

TEST(Flops, MlpCountsForwardAndBackward) {
  Ctx c;
  device_init(&c, DEVICE_CPU, 0);
  int sizes[] = {12, 8, 3};
  Mlp m;
  mlp_init(&m, &c, sizes, 2, 5, 1);
  float x[5 * 12] = {0};
  int y[5] = {0, 1, 2, 0, 1};
  double before = flops_total();
  mlp_forward(&m, &c, x, 5);
  EXPECT_DOUBLE_EQ(flops_total() - before, 2.0 * 5 * (12 * 8 + 8 * 3));  // forward: a third
  mlp_loss(&m, &c, y, 5);
  mlp_zero_grad(&m);
  mlp_backward(&m, &c, x, 5, 1.0f, nullptr, nullptr);
  EXPECT_DOUBLE_EQ(flops_total() - before, flops_mlp_step(sizes, 2, 5));
  mlp_free(&m, &c);
  device_free(&c);
}

TEST(Flops, GpuPeaksFromTheTable) {
  EXPECT_DOUBLE_EQ(flops_gpu_peak("NVIDIA H100 80GB HBM3", false), 67e12);
  EXPECT_DOUBLE_EQ(flops_gpu_peak("NVIDIA H100 PCIe", false), 51e12);  // not the SXM figure
  EXPECT_DOUBLE_EQ(flops_gpu_peak("NVIDIA H200", true), 494.5e12);
  EXPECT_DOUBLE_EQ(flops_gpu_peak("NVIDIA H200 NVL", false), 60e12);  // its own, not the SXM's 67
  EXPECT_DOUBLE_EQ(flops_gpu_peak("NVIDIA H200 NVL", true), 417.5e12);
  EXPECT_DOUBLE_EQ(flops_gpu_peak("NVIDIA H100 NVL", false), 60e12);
  EXPECT_DOUBLE_EQ(flops_gpu_peak("NVIDIA H100 NVL", true), 417.5e12);
  EXPECT_DOUBLE_EQ(flops_gpu_peak("NVIDIA GH200 480GB", false), 67e12);
  EXPECT_DOUBLE_EQ(flops_gpu_peak("NVIDIA A100-SXM4-80GB", true), 156e12);
  EXPECT_DOUBLE_EQ(flops_gpu_peak("NVIDIA A10", false), 31.2e12);   // not the A100
  EXPECT_DOUBLE_EQ(flops_gpu_peak("NVIDIA L40S", false), 91.6e12);  // not the L4
  EXPECT_EQ(flops_gpu_peak("NVIDIA GeForce RTX 3060", false), 0.0);
}

TEST(Flops, CpuPeakFromTheEnvironment) {
  unsetenv("DDP_CPU_PEAK_GFLOPS");
  flops_set_device("cpu", false);
  EXPECT_EQ(flops_peak(), 0.0);  // unknown: no MFU
  setenv("DDP_CPU_PEAK_GFLOPS", "52.5", 1);
  flops_set_device("cpu", false);
  EXPECT_DOUBLE_EQ(flops_peak(), 52.5e9);
  setenv("DDP_CPU_PEAK_GFLOPS", "fast", 1);
  flops_set_device("cpu", false);
  EXPECT_EQ(flops_peak(), 0.0);
  flops_set_device("NVIDIA H100 80GB HBM3", false);
  flops_set_tf32(true);
  EXPECT_DOUBLE_EQ(flops_peak(), 494.5e12);
  unsetenv("DDP_CPU_PEAK_GFLOPS");
  flops_set_device("cpu", false);
}
