// test_hooks_cuda.cpp: the CUDA kernels of issue 35 against their CPU references, bit for bit: the
// clipper's exact sums and its scale (clip_cuda.cu), the 16-bit casts of the fp16/bf16 hooks
// (comm_hook_cuda.cu) and --check_finite's count (ops_count_nonfinite). Every test skips itself
// without a GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "clip_backend.h"       // clip_backend.h: clip_*_cpu, clip_*_cuda
#include "comm_hook_backend.h"  // comm_hook_backend.h: comm_hook_compress_*, comm_hook_decompress_*
#include "device.h"             // device.h: Ctx, device_init, device_cuda_count
#include "devmem.h"             // devmem.h: dev_alloc, dev_upload, dev_download, dev_free
#include "ops_backend.h"        // ops_backend.h: ops_count_nonfinite_cpu, ops_count_nonfinite_cuda

namespace {

// Gradients over many orders of magnitude, subnormals, zeros and (optionally) NaN and infinity.
std::vector<float> gradients(size_t n, uint32_t seed, bool nonfinite) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> mant(0.5f, 1.0f);
  std::uniform_int_distribution<int> expo(-140, 20);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; i++) v[i] = std::ldexp(mant(gen), expo(gen)) * (i % 2 ? -1.0f : 1.0f);
  v[0] = 0.0f;
  if (nonfinite) {
    v[n / 3] = std::numeric_limits<float>::quiet_NaN();
    v[n / 2] = std::numeric_limits<float>::infinity();
  }
  return v;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

class HooksCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (device_cuda_count() == 0) GTEST_SKIP() << "no CUDA device";
    device_init(&cpu_, DEVICE_CPU, 0);
    device_init(&gpu_, DEVICE_CUDA, 0);
  }
  void TearDown() override {
    if (device_cuda_count() == 0) return;
    device_free(&gpu_);
    device_free(&cpu_);
  }
  Ctx cpu_ = {}, gpu_ = {};
};

TEST_F(HooksCuda, ClipSumsAndScaleEqualTheCpu) {
  const size_t n = 1000003;  // more than one grid-stride pass of the sum kernel
  std::vector<float> g = gradients(n, 7, false), want = g;
  Clip kc, kg;
  clip_init(&kc, &cpu_, 0.5f);
  clip_init(&kg, &gpu_, 0.5f);
  float *d = (float *)dev_alloc(&gpu_, n * sizeof(float));
  dev_upload(&gpu_, d, g.data(), n * sizeof(float));
  clip_sum_squares_cpu(&kc, &cpu_, want.data(), n);
  clip_sum_squares_cuda(&kg, &gpu_, d, n);
  std::vector<double> sums(CLIP_SUMS);
  dev_download(&gpu_, sums.data(), kg.sums, CLIP_SUMS * sizeof(double));
  for (int w = 0; w < CLIP_SUMS; w++) EXPECT_EQ(sums[w], kc.sums[w]) << "word " << w;
  clip_scale_cpu(&kc, &cpu_, want.data(), n);
  clip_scale_cuda(&kg, &gpu_, d, n);
  float norm;
  dev_download(&gpu_, &norm, kg.norm, sizeof norm);
  EXPECT_TRUE(same_bits(norm, *kc.norm)) << "cuda " << norm << ", cpu " << *kc.norm;
  std::vector<float> got(n);
  dev_download(&gpu_, got.data(), d, n * sizeof(float));
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) bad += !same_bits(got[i], want[i]);
  EXPECT_EQ(bad, 0u) << "clipped gradients differ from the CPU's";
  dev_free(&gpu_, d);
  clip_free(&kg, &gpu_);
  clip_free(&kc, &cpu_);
}

TEST_F(HooksCuda, SixteenBitCastsEqualTheCpu) {
  const size_t n = 300007;
  std::vector<float> g = gradients(n, 11, true);
  float *d = (float *)dev_alloc(&gpu_, n * sizeof(float));
  uint16_t *h = (uint16_t *)dev_alloc(&gpu_, n * sizeof(uint16_t));
  dev_upload(&gpu_, d, g.data(), n * sizeof(float));
  for (int bf16 = 0; bf16 < 2; bf16++)
    for (int W : {2, 3, 8}) {
      std::vector<uint16_t> want(n), got(n);
      comm_hook_compress_cpu(&cpu_, bf16, g.data(), want.data(), n, W);
      comm_hook_compress_cuda(&gpu_, bf16, d, h, n, W);
      dev_download(&gpu_, got.data(), h, n * sizeof(uint16_t));
      size_t bad = 0;
      for (size_t i = 0; i < n; i++)
        bad += got[i] != want[i] && !((want[i] & 0x7fff) > (bf16 ? 0x7f80 : 0x7c00));
      EXPECT_EQ(bad, 0u) << (bf16 ? "bf16" : "fp16") << " compress, W " << W;
      std::vector<float> back(n), back_gpu(n);
      comm_hook_decompress_cpu(&cpu_, bf16, want.data(), back.data(), n);
      comm_hook_decompress_cuda(&gpu_, bf16, h, d, n);
      dev_download(&gpu_, back_gpu.data(), d, n * sizeof(float));
      dev_upload(&gpu_, d, g.data(), n * sizeof(float));  // the next round's input again
      bad = 0;
      for (size_t i = 0; i < n; i++) bad += !same_bits(back[i], back_gpu[i]) && back[i] == back[i];
      EXPECT_EQ(bad, 0u) << (bf16 ? "bf16" : "fp16") << " decompress, W " << W;
    }
  dev_free(&gpu_, h);
  dev_free(&gpu_, d);
}

TEST_F(HooksCuda, NonFiniteCountEqualsTheCpu) {
  const size_t n = 500009;
  std::vector<float> g = gradients(n, 13, true);
  int want = 0, got = 0;
  ops_count_nonfinite_cpu(&cpu_, g.data(), n, &want);
  float *d = (float *)dev_alloc(&gpu_, n * sizeof(float));
  int *c = (int *)dev_alloc(&gpu_, sizeof(int));
  dev_upload(&gpu_, d, g.data(), n * sizeof(float));
  dev_upload(&gpu_, c, &got, sizeof got);
  ops_count_nonfinite_cuda(&gpu_, d, n, c);
  dev_download(&gpu_, &got, c, sizeof got);
  EXPECT_EQ(want, 2);
  EXPECT_EQ(got, want);
  dev_free(&gpu_, c);
  dev_free(&gpu_, d);
}

}  // namespace
