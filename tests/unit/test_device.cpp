// device.h: which OpenBLAS kernels are a generic fallback on a CPU with AVX2 (the start-up warning).
#include <gtest/gtest.h>

#include "device.h"

TEST(DeviceBlas, GenericKernelsOnAnAvx2CpuAreAFallback) {
  // Debian 12's OpenBLAS 0.3.21 runs Prescott (SSE3) on CPUs it does not know, e.g. AMD Zen 5.
  for (const char *k : {"Prescott", "Core2", "Nehalem", "Sandybridge", "Barcelona", "Bulldozer", "Atom"})
    EXPECT_TRUE(device_blas_kernel_is_fallback(k, true)) << k;
}

TEST(DeviceBlas, Avx2KernelsAreNotAFallback) {
  for (const char *k : {"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids", "HASWELL", "zen"})
    EXPECT_FALSE(device_blas_kernel_is_fallback(k, true)) << k;
}

TEST(DeviceBlas, NoWarningWithoutAvx2OrWithoutAName) {
  // On a CPU without AVX2 (or not x86) the generic kernel is the right one; nothing to suggest.
  EXPECT_FALSE(device_blas_kernel_is_fallback("Prescott", false));
  EXPECT_FALSE(device_blas_kernel_is_fallback(nullptr, true));
}
