// test_ops_cuda.cpp: every CUDA op against its CPU reference on the same random inputs, the CUDA
// memory functions of devmem.h, and one MLP forward/loss/backward on both devices. Every test that
// needs a GPU skips itself when there is none, so this binary (built with CUDA only) passes, as
// "skipped", on a machine without one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <cuda_runtime.h>  // cudaLaunchHostFunc, cudaDeviceGetAttribute

#include "device.h"       // device.h: Ctx, device_init, device_set_tf32, device_cuda_count
#include "devmem.h"       // devmem.h: dev_alloc, dev_upload, dev_download, dev_host_alloc, ...
#include "mlp.h"          // mlp.h: mlp_init, mlp_forward, mlp_loss, mlp_backward, ...
#include "ops_backend.h"  // ops_backend.h: ops_*_cpu, ops_*_cuda
#include "readback.h"     // readback.h: readback_init, readback_push, readback_take

namespace {

const double EPS = FLT_EPSILON;  // fp32 machine epsilon, 2^-23 (the unit roundoff is EPS / 2)
const float NaN = std::numeric_limits<float>::quiet_NaN();

std::vector<float> rand_floats(size_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float &x : v) x = dist(gen);
  return v;
}

std::vector<int> rand_ints(size_t n, int lo, int hi, uint32_t seed) {  // in [lo, hi]
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> dist(lo, hi);
  std::vector<int> v(n);
  for (int &x : v) x = dist(gen);
  return v;
}

// Expects |got[i] - want[i]| <= tol(i) everywhere (a NaN on either side fails); names the first few
// offenders.
template <class Tol>
void expect_near_all(const std::vector<float> &got, const std::vector<float> &want, Tol tol,
                     const char *what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); i++) {
    double d = std::fabs((double)got[i] - (double)want[i]);
    double t = tol(i);
    if (!(d <= t) && bad++ < 5)
      ADD_FAILURE() << what << "[" << i << "]: cuda " << got[i] << ", cpu " << want[i] << ", |diff| " << d
                    << " > tol " << t;
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " out of tolerance";
}

// Expects bit-for-bit equal values (for ops that do the same IEEE operations in the same order).
template <class T>
void expect_equal_all(const std::vector<T> &got, const std::vector<T> &want, const char *what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); i++)
    if (!(got[i] == want[i]) && bad++ < 5)
      ADD_FAILURE() << what << "[" << i << "]: cuda " << got[i] << ", cpu " << want[i];
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " differ";
}

double max_abs(const std::vector<float> &v) {
  double m = 0.0;
  for (float x : v) m = std::max(m, (double)std::fabs(x));
  return m;
}

// A CPU context and, created on first use (after the test has checked for a GPU), a CUDA context,
// with helpers that copy host vectors to and from the GPU. Buffers are freed after the test.
class OpsCuda : public ::testing::Test {
 protected:
  void SetUp() override { device_init(&cpu_, DEVICE_CPU, 0); }
  void TearDown() override {
    for (void *p : bufs_) dev_free(&gpu_, p);
    if (have_gpu_) device_free(&gpu_);
    device_free(&cpu_);
  }

  const Ctx *cpu() { return &cpu_; }
  const Ctx *gpu() {
    if (!have_gpu_) device_init(&gpu_, DEVICE_CUDA, 0);  // device_init: the path programs take
    have_gpu_ = true;
    return &gpu_;
  }

  template <class T>
  T *up(const std::vector<T> &h) {
    T *d = (T *)dev_alloc(gpu(), h.size() * sizeof(T));
    bufs_.push_back(d);
    dev_upload(gpu(), d, h.data(), h.size() * sizeof(T));
    return d;
  }

  template <class T>
  std::vector<T> down(const T *d, size_t n) {
    std::vector<T> h(n);
    dev_download(gpu(), h.data(), d, n * sizeof(T));  // waits for the stream
    return h;
  }

 private:
  Ctx cpu_ = {};
  Ctx gpu_ = {};
  bool have_gpu_ = false;
  std::vector<void *> bufs_;
};

// ---------------------------------------------------------------------------------------------------
// devmem.h: memory and copies
// ---------------------------------------------------------------------------------------------------

TEST_F(OpsCuda, MemoryRoundTrip) {
  if (device_cuda_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  const size_t n = 1000;
  std::vector<float> h = rand_floats(n, -1, 1, 1);
  float *a = up(std::vector<float>(n, 1.0f));
  float *b = (float *)dev_alloc(gpu(), n * sizeof(float));
  expect_equal_all(down(b, n), std::vector<float>(n, 0.0f), "dev_alloc is zeroed");

  float *pinned = (float *)dev_host_alloc(gpu(), n * sizeof(float));
  EXPECT_EQ(std::count(pinned, pinned + n, 0.0f), (long)n) << "dev_host_alloc is zeroed";
  std::copy(h.begin(), h.end(), pinned);
  dev_upload(gpu(), a, pinned, n * sizeof(float));
  dev_copy(gpu(), b, a, n * sizeof(float));
  dev_zero(gpu(), b, 10 * sizeof(float));
  std::vector<float> want = h;
  std::fill(want.begin(), want.begin() + 10, 0.0f);
  dev_sync(gpu());
  dev_host_free(gpu(), pinned);  // after the sync: the upload read it asynchronously
  expect_equal_all(down(b, n), want, "upload, copy, zero, download");
  dev_free(gpu(), b);
}

// Values read back asynchronously are those the stream had produced when each read was queued, even
// when later work on the stream overwrites the device value; they come back oldest first.
TEST_F(OpsCuda, ReadbackKeepsStreamOrder) {
  if (device_cuda_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  float *dv = up(std::vector<float>(1, 1.0f));
  Readback r;
  readback_init(&r, gpu());
  for (int i = 0; i < READBACK_SLOTS; i++) {
    ops_scale_cuda(gpu(), dv, 1, 2.0f);  // dv = 2^(i+1)
    readback_push(&r, gpu(), dv, i);
  }
  ops_scale_cuda(gpu(), dv, 1, 0.0f);  // queued after the reads: must not reach them
  float v;
  long long tag;
  for (int i = 0; i < READBACK_SLOTS; i++) {
    ASSERT_TRUE(readback_take(&r, gpu(), 0, &v, &tag)) << i;  // max_ahead 0: waits
    EXPECT_EQ(tag, i);
    EXPECT_EQ(v, (float)(2 << i));
  }
  EXPECT_FALSE(readback_take(&r, gpu(), 0, &v, &tag));
  readback_free(&r, gpu());
}

// A host function on the stream that holds it until `*release` is set: everything queued after it
// stays queued until then.
void CUDART_CB hold_stream(void *release) {
  while (!__atomic_load_n((volatile int *)release, __ATOMIC_ACQUIRE)) {
  }
}

// readback_take does not wait for a value that has not arrived while at most max_ahead are queued,
// and does wait for it once more are.
TEST_F(OpsCuda, ReadbackTakesOnlyWhatHasArrived) {
  if (device_cuda_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  float *dv = up(std::vector<float>(1, 3.0f));
  dev_sync(gpu());
  Readback r;
  readback_init(&r, gpu());
  static int release = 0;
  __atomic_store_n(&release, 0, __ATOMIC_RELEASE);
  ASSERT_EQ(cudaLaunchHostFunc((cudaStream_t)gpu()->stream, hold_stream, &release), cudaSuccess);
  readback_push(&r, gpu(), dv, 1);
  readback_push(&r, gpu(), dv, 2);
  float v = 0.0f;
  long long tag = 0;
  EXPECT_FALSE(readback_take(&r, gpu(), 2, &v, &tag)) << "took a value still held in the stream";
  EXPECT_EQ(r.count, 2);
  __atomic_store_n(&release, 1, __ATOMIC_RELEASE);
  ASSERT_TRUE(readback_take(&r, gpu(), 1, &v, &tag));  // 2 > 1 queued: waits for the oldest
  EXPECT_EQ(tag, 1);
  EXPECT_EQ(v, 3.0f);
  ASSERT_TRUE(readback_take(&r, gpu(), 0, &v, &tag));
  EXPECT_EQ(tag, 2);
  readback_free(&r, gpu());
}

// device_init must end the job with a clear message, not crash, when the GPU does not exist (no
// driver, no GPU, or a build without CUDA). The death tests re-run the binary ("threadsafe"), so
// the child does not inherit this process's CUDA state.
TEST(DeviceCuda, InitWithoutGpuDies) {
  if (device_cuda_count() > 0) GTEST_SKIP() << "a CUDA GPU is present";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Ctx c;
  EXPECT_EXIT(device_init(&c, DEVICE_CUDA, 0), ::testing::ExitedWithCode(1),
              "(--device cuda: no usable CUDA GPU|built without CUDA).*use --device cpu");
}

TEST(DeviceCuda, InitBadOrdinalDies) {
  if (device_cuda_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Ctx c;
  EXPECT_EXIT(device_init(&c, DEVICE_CUDA, device_cuda_count()), ::testing::ExitedWithCode(1),
              "does not exist");
}

// ---------------------------------------------------------------------------------------------------
// GEMM: all four transposition cases, beta 0 and 1, a small odd shape and a layer-sized one
// ---------------------------------------------------------------------------------------------------

struct GemmShape {
  int M, N, K;
};
void PrintTo(const GemmShape &s, std::ostream *os) { *os << s.M << "x" << s.N << "x" << s.K; }

class GemmCuda : public OpsCuda,
                 public ::testing::WithParamInterface<std::tuple<bool, bool, float, GemmShape>> {};

TEST_P(GemmCuda, MatchesCpu) {
  if (device_cuda_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  const bool ta = std::get<0>(GetParam()), tb = std::get<1>(GetParam());
  const float beta = std::get<2>(GetParam()), alpha = 0.75f;
  const int M = std::get<3>(GetParam()).M, N = std::get<3>(GetParam()).N, K = std::get<3>(GetParam()).K;
  // Stored row-major: A is (M, K), or (K, M) when ta; B is (K, N), or (N, K) when tb; C is (M, N).
  std::vector<float> A = rand_floats((size_t)M * K, -1, 1, 11);
  std::vector<float> B = rand_floats((size_t)K * N, -1, 1, 12);
  std::vector<float> C = rand_floats((size_t)M * N, -1, 1, 13);
  // beta 0 must ignore C: the GPU gets NaNs there, the CPU zeros (so the reference stays clean).
  std::vector<float> C_gpu = beta == 0.0f ? std::vector<float>(C.size(), NaN) : C;
  if (beta == 0.0f) std::fill(C.begin(), C.end(), 0.0f);
  std::vector<float> C_old = C;

  float *dA = up(A), *dB = up(B), *dC = up(C_gpu);
  ops_gemm_cuda(gpu(), ta, tb, M, N, K, alpha, dA, dB, beta, dC);
  ops_gemm_cpu(cpu(), ta, tb, M, N, K, alpha, A.data(), B.data(), beta, C.data());

  // A sum of K fp32 products in any order is within K·u·Σ|a·b| of the exact value (u = EPS/2), so
  // two orders differ by at most K·EPS·Σ|a·b|; alpha and beta add a few roundings more.
  auto a = [&](int i, int k) { return ta ? A[(size_t)k * M + i] : A[(size_t)i * K + k]; };
  auto b = [&](int k, int j) { return tb ? B[(size_t)j * K + k] : B[(size_t)k * N + j]; };
  auto tol = [&](size_t idx) {
    int i = (int)(idx / N), j = (int)(idx % N);
    double s = 0.0;
    for (int k = 0; k < K; k++) s += std::fabs((double)a(i, k) * b(k, j));
    return (K + 4) * EPS * (std::fabs(alpha) * s + std::fabs(beta * C_old[idx])) + 1e-30;
  };
  expect_near_all(down(dC, C.size()), C, tol, "C");
}

INSTANTIATE_TEST_SUITE_P(
    AllCases, GemmCuda,
    ::testing::Combine(::testing::Bool(), ::testing::Bool(), ::testing::Values(0.0f, 1.0f),
                       ::testing::Values(GemmShape{37, 29, 53}, GemmShape{128, 300, 784})),
    [](const ::testing::TestParamInfo<GemmCuda::ParamType> &info) {
      const GemmShape &s = std::get<3>(info.param);
      return std::string(std::get<0>(info.param) ? "At" : "A") + (std::get<1>(info.param) ? "Bt" : "B") +
             "_beta" + (std::get<2>(info.param) == 0.0f ? "0" : "1") + "_" + std::to_string(s.M) + "x" +
             std::to_string(s.N) + "x" + std::to_string(s.K);
    });

// TF32 (device_set_tf32, --tf32): tensor cores keep 10 of each input's 23 mantissa bits (rounded or
// cut: a relative error below 2^-10 per input), so each product is within about 2^-9 of the exact
// one, plus the fp32 rounding of the sum.
TEST_F(OpsCuda, GemmTf32WithinTf32Rounding) {
  if (device_cuda_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  const int M = 128, N = 300, K = 784;
  std::vector<float> A = rand_floats((size_t)M * K, -1, 1, 14);
  std::vector<float> B = rand_floats((size_t)K * N, -1, 1, 15);
  std::vector<float> C((size_t)M * N, 0.0f);
  float *dA = up(A), *dB = up(B), *dC = up(C);
  device_set_tf32(gpu(), true);
  ops_gemm_cuda(gpu(), false, false, M, N, K, 1.0f, dA, dB, 0.0f, dC);
  std::vector<float> got = down(dC, C.size());
  device_set_tf32(gpu(), false);
  ops_gemm_cpu(cpu(), false, false, M, N, K, 1.0f, A.data(), B.data(), 0.0f, C.data());
  auto tol = [&](size_t idx) {
    int i = (int)(idx / N), j = (int)(idx % N);
    double s = 0.0;
    for (int k = 0; k < K; k++) s += std::fabs((double)A[(size_t)i * K + k] * B[(size_t)k * N + j]);
    return (std::ldexp(1.0, -9) + (K + 2) * EPS) * s + 1e-30;
  };
  expect_near_all(got, C, tol, "C (TF32)");
}

// The mode takes effect (on GPUs with TF32, compute capability 8.0 and later): with A = 1 + 2^-12,
// which TF32 cannot tell from 1, and B = 1, every element of A·B is K in TF32 and K·(1 + 2^-12) in
// fp32; setting fp32 back restores the exact result.
TEST_F(OpsCuda, GemmTf32TakesEffect) {
  if (device_cuda_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  int major = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), cudaSuccess);
  if (major < 8) GTEST_SKIP() << "no TF32 before compute capability 8.0";
  // NVIDIA_TF32_OVERRIDE=0 makes the libraries ignore every request for TF32 (NVIDIA's switch for
  // a whole process): the mode cannot take effect, by the user's choice.
  const char *no_tf32 = std::getenv("NVIDIA_TF32_OVERRIDE");
  if (no_tf32 && std::string(no_tf32) == "0")
    GTEST_SKIP() << "NVIDIA_TF32_OVERRIDE=0 disables TF32 in cuBLAS for this process";
  const int M = 256, N = 256, K = 256;
  float *dA = up(std::vector<float>((size_t)M * K, 1.0f + std::ldexp(1.0f, -12)));
  float *dB = up(std::vector<float>((size_t)K * N, 1.0f));
  float *dC = up(std::vector<float>((size_t)M * N, 0.0f));
  device_set_tf32(gpu(), true);
  ops_gemm_cuda(gpu(), false, false, M, N, K, 1.0f, dA, dB, 0.0f, dC);
  std::vector<float> tf32 = down(dC, (size_t)M * N);
  device_set_tf32(gpu(), false);
  ops_gemm_cuda(gpu(), false, false, M, N, K, 1.0f, dA, dB, 0.0f, dC);
  std::vector<float> fp32 = down(dC, (size_t)M * N);
  const float exact = (float)K * (1.0f + std::ldexp(1.0f, -12));  // 256 + 2^-4: exact in fp32
  EXPECT_EQ(std::count(tf32.begin(), tf32.end(), (float)K), (long)tf32.size()) << "TF32 not used";
  EXPECT_EQ(std::count(fp32.begin(), fp32.end(), exact), (long)fp32.size()) << "fp32 not restored";
}

// ---------------------------------------------------------------------------------------------------
// element-wise ops: one IEEE operation per element on both sides, so the results are bit-identical
// ---------------------------------------------------------------------------------------------------

TEST_F(OpsCuda, BiasAct) {
  if (device_cuda_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  const int B = 33, N = 70;
  for (bool relu : {false, true}) {
    std::vector<float> y = rand_floats((size_t)B * N, -1, 1, 21);
    std::vector<float> bias = rand_floats(N, -0.5f, 0.5f, 22);
    float *dy = up(y), *dbias = up(bias);
    ops_bias_act_cuda(gpu(), dy, dbias, B, N, relu);
    ops_bias_act_cpu(cpu(), y.data(), bias.data(), B, N, relu);
    expect_equal_all(down(dy, y.size()), y, relu ? "y (relu)" : "y (no relu)");
  }
}

TEST_F(OpsCuda, ReluBackward) {
  if (device_cuda_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  const size_t n = 1000;
  std::vector<float> y = rand_floats(n, -1, 1, 31);
  for (size_t i = 0; i < n; i += 7) y[i] = 0.0f;  // the boundary: y == 0 blocks the gradient
  for (float &v : y) v = v < 0.0f ? 0.0f : v;     // a ReLU output
  std::vector<float> dy = rand_floats(n, -1, 1, 32);
  float *d_dy = up(dy), *d_y = up(y);
  ops_relu_backward_cuda(gpu(), d_dy, d_y, n);
  ops_relu_backward_cpu(cpu(), dy.data(), y.data(), n);
  expect_equal_all(down(d_dy, n), dy, "dy");
}

TEST_F(OpsCuda, Scale) {
  if (device_cuda_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  const size_t n = 1001;
  std::vector<float> x = rand_floats(n, -10, 10, 41);
  float *dx = up(x);
  ops_scale_cuda(gpu(), dx, n, -0.37f);
  ops_scale_cpu(cpu(), x.data(), n, -0.37f);
  expect_equal_all(down(dx, n), x, "x");
}

TEST_F(OpsCuda, Axpy) {
  if (device_cuda_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  const size_t n = 1001;
  std::vector<float> y = rand_floats(n, -10, 10, 42), x = rand_floats(n, -10, 10, 43);
  float *dy = up(y);
  ops_axpy_cuda(gpu(), dy, up(x), n, 0.37f);
  ops_axpy_cpu(cpu(), y.data(), x.data(), n, 0.37f);
  expect_equal_all(down(dy, n), y, "y");  // bit for bit: no FMA on either side
}

TEST_F(OpsCuda, Gather) {
  if (device_cuda_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  const int rows = 50, N = 33, B = 64;  // B > rows: indices repeat
  std::vector<float> src_x = rand_floats((size_t)rows * N, -1, 1, 51);
  std::vector<int> src_y = rand_ints(rows, 0, 9, 52);
  std::vector<int> idx = rand_ints(B, 0, rows - 1, 53);
  std::vector<float> dst_x((size_t)B * N);
  std::vector<int> dst_y(B);
  float *d_dst_x = up(dst_x);
  int *d_dst_y = up(dst_y);
  ops_gather_cuda(gpu(), up(src_x), up(src_y), up(idx), B, N, d_dst_x, d_dst_y);
  ops_gather_cpu(cpu(), src_x.data(), src_y.data(), idx.data(), B, N, dst_x.data(), dst_y.data());
  expect_equal_all(down(d_dst_x, dst_x.size()), dst_x, "dst_x");
  expect_equal_all(down(d_dst_y, dst_y.size()), dst_y, "dst_y");
}

TEST_F(OpsCuda, GatherPixels) {
  if (device_cuda_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  const int rows = 300, N = 33, B = 64;
  std::vector<int> pix = rand_ints((size_t)rows * N, 0, 255, 54);
  std::vector<uint8_t> src_p(pix.begin(), pix.end());
  std::vector<int> src_y = rand_ints(rows, 0, 9, 55);
  std::vector<int> idx = rand_ints(B, 0, rows - 1, 56);
  std::vector<float> dst_x((size_t)B * N);
  std::vector<int> dst_y(B);
  float *d_dst_x = up(dst_x);
  int *d_dst_y = up(dst_y);
  ops_gather_pixels_cuda(gpu(), up(src_p), up(src_y), up(idx), B, N, 0.2860f, 0.3530f, d_dst_x, d_dst_y);
  ops_gather_pixels_cpu(cpu(), src_p.data(), src_y.data(), idx.data(), B, N, 0.2860f, 0.3530f, dst_x.data(),
                        dst_y.data());
  expect_equal_all(down(d_dst_x, dst_x.size()), dst_x, "dst_x");  // bit for bit
  expect_equal_all(down(d_dst_y, dst_y.size()), dst_y, "dst_y");
}

// ---------------------------------------------------------------------------------------------------
// SGD: same IEEE operations in the same order on both sides (the kernel uses __fmul_rn/__fadd_rn,
// so nvcc cannot fuse them into FMAs, and ops_cpu.c is built as ISO C11, where GCC does not
// contract), so parameters and momentum buffers must be bit-identical after every step.
// ---------------------------------------------------------------------------------------------------

struct SgdCase {
  const char *name;
  float lr, momentum, dampening, wd;
  bool nesterov;
};
void PrintTo(const SgdCase &k, std::ostream *os) { *os << k.name; }

class SgdCuda : public OpsCuda, public ::testing::WithParamInterface<SgdCase> {};

TEST_P(SgdCuda, MatchesCpuOverSteps) {
  if (device_cuda_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  const SgdCase k = GetParam();
  const size_t n = 1000;
  std::vector<float> p = rand_floats(n, -1, 1, 61);
  std::vector<float> buf(n, 7.0f);  // a sentinel: with momentum 0 the buffer must stay untouched
  float *dp = up(p), *dbuf = up(buf);
  for (int step = 0; step < 3; step++) {
    std::vector<float> g = rand_floats(n, -1, 1, 62 + step);
    bool first = step == 0;
    ops_sgd_cuda(gpu(), dp, up(g), dbuf, n, k.lr, k.momentum, k.dampening, k.wd, k.nesterov, first);
    ops_sgd_cpu(cpu(), p.data(), g.data(), buf.data(), n, k.lr, k.momentum, k.dampening, k.wd, k.nesterov,
                first);
    SCOPED_TRACE("step " + std::to_string(step));
    expect_equal_all(down(dp, n), p, "p");
    expect_equal_all(down(dbuf, n), buf, "buf");
  }
  if (k.momentum == 0.0f) expect_equal_all(down(dbuf, n), std::vector<float>(n, 7.0f), "buf");
}

INSTANTIATE_TEST_SUITE_P(Cases, SgdCuda,
                         ::testing::Values(SgdCase{"plain", 0.1f, 0.0f, 0.0f, 0.0f, false},
                                           SgdCase{"wd", 0.05f, 0.0f, 0.0f, 1e-2f, false},
                                           SgdCase{"momentum", 0.1f, 0.9f, 0.0f, 0.0f, false},
                                           SgdCase{"momentum_wd", 0.01f, 0.9f, 0.0f, 1e-4f, false},
                                           SgdCase{"nesterov_damp_wd", 0.1f, 0.9f, 0.1f, 5e-4f, true}),
                         [](const ::testing::TestParamInfo<SgdCase> &info) {
                           return std::string(info.param.name);
                         });

// ---------------------------------------------------------------------------------------------------
// reductions: bias gradient, softmax cross-entropy, accuracy
// ---------------------------------------------------------------------------------------------------

TEST_F(OpsCuda, BiasGrad) {
  if (device_cuda_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  const int B = 300, N = 77;  // N is not a multiple of the kernel's 32-column tiles
  std::vector<float> dy = rand_floats((size_t)B * N, -1, 1, 71);
  for (float beta : {0.0f, 1.0f}) {
    std::vector<float> db = rand_floats(N, -1, 1, 72);
    std::vector<float> db_old = db;
    // beta 0 must ignore db: the GPU gets NaNs there.
    float *d_db = up(beta == 0.0f ? std::vector<float>(N, NaN) : db);
    ops_bias_grad_cuda(gpu(), up(dy), d_db, B, N, beta);
    ops_bias_grad_cpu(cpu(), dy.data(), db.data(), B, N, beta);
    // Sums of B terms in two orders differ by at most B·EPS·Σ|dy| (see the GEMM bound).
    auto tol = [&](size_t n) {
      double s = std::fabs(beta * db_old[n]);
      for (int b = 0; b < B; b++) s += std::fabs(dy[(size_t)b * N + n]);
      return (B + 2) * EPS * s;
    };
    expect_near_all(down(d_db, N), db, tol, beta == 0.0f ? "db (beta 0)" : "db (beta 1)");
  }
}

struct XentCase {
  int B, C;
  float spread, offset;  // logits uniform in offset ± spread
};
void PrintTo(const XentCase &k, std::ostream *os) { *os << "B=" << k.B << " C=" << k.C; }

class SoftmaxXentCuda : public OpsCuda, public ::testing::WithParamInterface<XentCase> {};

TEST_P(SoftmaxXentCuda, MatchesCpu) {
  if (device_cuda_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  const int B = GetParam().B, C = GetParam().C;
  const float lo = GetParam().offset - GetParam().spread, hi = GetParam().offset + GetParam().spread;
  std::vector<float> logits = rand_floats((size_t)B * C, lo, hi, 81);
  std::vector<int> labels = rand_ints(B, 0, C - 1, 82);
  std::vector<float> dlogits((size_t)B * C), row_loss(B), loss(1);
  float *d_dlogits = up(std::vector<float>(dlogits.size(), NaN));
  float *d_row_loss = up(row_loss), *d_loss = up(loss);
  ops_softmax_xent_cuda(gpu(), up(logits), up(labels), B, C, d_dlogits, d_row_loss, d_loss);
  ops_softmax_xent_cpu(cpu(), logits.data(), labels.data(), B, C, dlogits.data(), row_loss.data(),
                       loss.data());

  // Both sides subtract the same (exact) row maximum, so exp() sees the same arguments; CUDA's and
  // glibc's expf differ by a few ulps, and the normaliser s sums C terms in another order, so the
  // softmax differs by at most ~(C + 8)·EPS relative, hence dlogits = (softmax - onehot) / B by:
  auto tol_d = [&](size_t) { return (C + 10) * EPS / B; };
  expect_near_all(down(d_dlogits, dlogits.size()), dlogits, tol_d, "dlogits");

  // row loss = log(s) + max - x[label]: log(s) inherits s's (C + 8)·EPS relative error as an
  // absolute one, and the additions round at the scale of the logits (|max|, |x[label]|).
  std::vector<double> tol_row(B);
  for (int b = 0; b < B; b++) {
    double xmax = 0.0;
    for (int k = 0; k < C; k++) xmax = std::max(xmax, (double)std::fabs(logits[(size_t)b * C + k]));
    tol_row[b] = (C + 8) * EPS + 4 * EPS * (std::fabs(row_loss[b]) + xmax);
  }
  expect_near_all(
      down(d_row_loss, B), row_loss, [&](size_t b) { return tol_row[b]; }, "row_loss");

  // The mean: the CPU sums in double, the GPU in fp32 (B terms in a fixed tree order, B·EPS
  // relative) on top of the row losses' own tolerance.
  double tol_mean = *std::max_element(tol_row.begin(), tol_row.end()) + (B + 2) * EPS * loss[0];
  expect_near_all(
      down(d_loss, 1), loss, [&](size_t) { return tol_mean; }, "loss");
}

INSTANTIATE_TEST_SUITE_P(Cases, SoftmaxXentCuda,
                         ::testing::Values(XentCase{50, 10, 3.0f, 0.0f},     // MNIST-like
                                           XentCase{37, 100, 20.0f, 50.0f},  // C > 32, large logits
                                           XentCase{5, 3, 1.0f, 0.0f},       // C < a warp
                                           XentCase{300, 10, 5.0f, 0.0f}),   // B > 256 (mean loop)
                         [](const ::testing::TestParamInfo<XentCase> &info) {
                           return "B" + std::to_string(info.param.B) + "_C" + std::to_string(info.param.C);
                         });

TEST_F(OpsCuda, CountCorrect) {
  if (device_cuda_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  const int B = 1000, C = 10;  // several blocks
  std::vector<float> logits = rand_floats((size_t)B * C, -2, 2, 91);
  std::vector<int> labels = rand_ints(B, 0, C - 1, 92);
  for (int b = 0; b < B; b++) {
    float *x = &logits[(size_t)b * C];
    if (b % 3 == 0) labels[b] = (int)(std::max_element(x, x + C) - x);  // some right answers
    if (b % 7 == 0) {  // ties: the first maximum wins, so label 2 is right and label 6 is wrong
      x[2] = x[6] = 5.0f;
      labels[b] = b % 2 ? 2 : 6;
    }
    if (b % 11 == 0) std::fill(x, x + C, 1.0f);  // all equal: only label 0 is right
  }
  std::vector<int> correct{5};  // the op adds to a running count
  int *d_correct = up(correct);
  ops_count_correct_cuda(gpu(), up(logits), up(labels), B, C, d_correct);
  ops_count_correct_cpu(cpu(), logits.data(), labels.data(), B, C, correct.data());
  EXPECT_GT(correct[0], 5 + B / 3);  // the test really counts something
  expect_equal_all(down(d_correct, 1), correct, "correct");
}

// ---------------------------------------------------------------------------------------------------
// the MLP: forward, loss, backward (written, then accumulated) and accuracy on both devices
// ---------------------------------------------------------------------------------------------------

void record_layer(int layer, void *user) { ((std::vector<int> *)user)->push_back(layer); }

// fp32 GEMMs of at most 20 terms differ by ≤ K·EPS ≈ 2.4e-6 relative per layer between orders; over
// three layers forward and back this compounds to a few 1e-6 of each tensor's scale, so allow 1e-5
// of it (a different ReLU decision would show up as a much larger error).
auto mlp_tol(const std::vector<float> &ref) {
  double scale = max_abs(ref);
  return [scale](size_t) { return 1e-5 * scale + 1e-12; };
}

TEST(MlpCuda, ForwardLossBackwardMatchCpu) {
  if (device_cuda_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  const int sizes[] = {20, 16, 12, 5}, L = 3, B = 7, I = 20, O = 5;
  const uint64_t seed = 1234;
  Ctx cpu, gpu;
  device_init(&cpu, DEVICE_CPU, 0);
  device_init(&gpu, DEVICE_CUDA, 0);
  Mlp mc, mg;
  mlp_init(&mc, &cpu, sizes, L, B, seed);
  mlp_init(&mg, &gpu, sizes, L, B, seed);
  ASSERT_EQ(mc.n_params, mg.n_params);
  const size_t P = mc.n_params;
  auto download = [&](const float *d, size_t n) {
    std::vector<float> h(n);
    dev_download(&gpu, h.data(), d, n * sizeof(float));
    return h;
  };
  expect_equal_all(download(mg.params, P), std::vector<float>(mc.params, mc.params + P), "params");

  std::vector<float> x = rand_floats((size_t)B * I, -1, 1, 101);
  std::vector<int> y = rand_ints(B, 0, O - 1, 102);
  float *dx = (float *)dev_alloc(&gpu, x.size() * sizeof(float));
  int *dy = (int *)dev_alloc(&gpu, y.size() * sizeof(int));
  int *d_correct = (int *)dev_alloc(&gpu, sizeof(int));
  dev_upload(&gpu, dx, x.data(), x.size() * sizeof(float));
  dev_upload(&gpu, dy, y.data(), y.size() * sizeof(int));

  mlp_zero_grad(&mc);
  mlp_zero_grad(&mg);
  for (int pass = 0; pass < 2; pass++) {  // pass 0 writes the gradients, pass 1 accumulates
    SCOPED_TRACE(pass == 0 ? "first backward" : "accumulating backward");
    const float *lc = mlp_forward(&mc, &cpu, x.data(), B);
    const float *lg = mlp_forward(&mg, &gpu, dx, B);
    std::vector<float> logits(lc, lc + (size_t)B * O);
    expect_near_all(download(lg, logits.size()), logits, mlp_tol(logits), "logits");

    mlp_loss(&mc, &cpu, y.data(), B);
    mlp_loss(&mg, &gpu, dy, B);
    float loss_c = mlp_loss_value(&mc, &cpu), loss_g = mlp_loss_value(&mg, &gpu);
    EXPECT_NEAR(loss_g, loss_c, 1e-5 * std::fabs(loss_c)) << "loss";

    std::vector<int> order_c, order_g;
    mlp_backward(&mc, &cpu, x.data(), B, 1.0f, record_layer, &order_c);
    mlp_backward(&mg, &gpu, dx, B, 1.0f, record_layer, &order_g);
    EXPECT_EQ(order_g, (std::vector<int>{2, 1, 0})) << "hook order";
    EXPECT_EQ(order_g, order_c);
    for (int l = 0; l < L; l++) {  // each layer's weight and bias separately: different scales
      SCOPED_TRACE("layer " + std::to_string(l));
      size_t nw = mc.b_off[l] - mc.w_off[l], nb = (size_t)sizes[l + 1];
      std::vector<float> gw(mc.grads + mc.w_off[l], mc.grads + mc.w_off[l] + nw);
      std::vector<float> gb(mc.grads + mc.b_off[l], mc.grads + mc.b_off[l] + nb);
      expect_near_all(download(mg.grads + mg.w_off[l], nw), gw, mlp_tol(gw), "dW");
      expect_near_all(download(mg.grads + mg.b_off[l], nb), gb, mlp_tol(gb), "db");
    }
  }

  int correct_c = 0;
  mlp_count_correct(&mc, &cpu, x.data(), y.data(), B, &correct_c);
  mlp_count_correct(&mg, &gpu, dx, dy, B, d_correct);
  int correct_g = -1;
  dev_download(&gpu, &correct_g, d_correct, sizeof(int));
  EXPECT_EQ(correct_g, correct_c) << "correct";

  dev_free(&gpu, d_correct);
  dev_free(&gpu, dy);
  dev_free(&gpu, dx);
  mlp_free(&mg, &gpu);
  mlp_free(&mc, &cpu);
  device_free(&gpu);
  device_free(&cpu);
}

}  // namespace
