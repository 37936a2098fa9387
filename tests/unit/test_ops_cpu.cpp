// CPU ops against float64 loops written here (the CUDA versions are tested against these in tests/gpu).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "device.h"
#include "ops.h"

namespace {
std::vector<float> randn(size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(n);
  for (auto &x : v) x = d(g);
  return v;
}
Ctx cpu() {
  Ctx c;
  device_init(&c, DEVICE_CPU, 0);
  return c;
}
}  // namespace

class GemmCase : public ::testing::TestWithParam<std::tuple<bool, bool, float>> {};

// Sums of K = 13 float32 products: rounding is ~K·6e-8 relative to the sum of |terms|; 1e-5 is
// ten times that, and a transposed or offset operand gives errors of order 1.
TEST_P(GemmCase, MatchesFloat64Loop) {
  auto [ta, tb, beta] = GetParam();
  const int M = 5, N = 7, K = 13;
  auto A = randn(M * K, 1), B = randn(K * N, 2), C = randn(M * N, 3);
  std::vector<double> ref(M * N);
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double s = 0;
      for (int k = 0; k < K; k++) {
        double a = ta ? A[k * M + i] : A[i * K + k];
        double b = tb ? B[j * K + k] : B[k * N + j];
        s += a * b;
      }
      ref[i * N + j] = 2.0 * s + beta * C[i * N + j];
    }
  Ctx c = cpu();
  ops_gemm(&c, ta, tb, M, N, K, 2.0f, A.data(), B.data(), beta, C.data());
  for (int i = 0; i < M * N; i++) EXPECT_NEAR(C[i], ref[i], 1e-5 * (1 + std::fabs(ref[i]))) << i;
}
INSTANTIATE_TEST_SUITE_P(AllTranspositions, GemmCase,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool(),
                                            ::testing::Values(0.0f, 1.0f)));

TEST(OpsCpu, BiasActAndReluBackward) {
  Ctx c = cpu();
  std::vector<float> y = {-1, 2, 0.5f, -3}, b = {0.5f, -1};
  std::vector<float> lin = y;
  ops_bias_act(&c, lin.data(), b.data(), 2, 2, false);
  EXPECT_EQ(lin, (std::vector<float>{-0.5f, 1, 1, -4}));
  ops_bias_act(&c, y.data(), b.data(), 2, 2, true);
  EXPECT_EQ(y, (std::vector<float>{0, 1, 1, 0}));
  std::vector<float> dy = {5, 6, 7, 8};
  ops_relu_backward(&c, dy.data(), y.data(), 4);
  EXPECT_EQ(dy, (std::vector<float>{0, 6, 7, 0}));
}

TEST(OpsCpu, BiasGradWritesOrAccumulates) {
  Ctx c = cpu();
  std::vector<float> dy = {1, 2, 3, 4, 5, 6}, db = {100, 100};
  ops_bias_grad(&c, dy.data(), db.data(), 3, 2, 0.0f);
  EXPECT_EQ(db, (std::vector<float>{9, 12}));
  ops_bias_grad(&c, dy.data(), db.data(), 3, 2, 1.0f);
  EXPECT_EQ(db, (std::vector<float>{18, 24}));
}

TEST(OpsCpu, SoftmaxCrossEntropyMatchesFloat64) {
  Ctx c = cpu();
  const int B = 6, C = 10;
  auto x = randn(B * C, 9);
  x[3] = 80.0f;  // a large logit must not overflow (max subtraction)
  std::vector<int> y = {0, 3, 9, 1, 1, 5};
  std::vector<float> d(B * C), rl(B), loss(1);
  ops_softmax_xent(&c, x.data(), y.data(), B, C, d.data(), rl.data(), loss.data());
  double mean = 0;
  for (int b = 0; b < B; b++) {
    double mx = -1e30, z = 0;
    for (int k = 0; k < C; k++) mx = std::max(mx, (double)x[b * C + k]);
    for (int k = 0; k < C; k++) z += std::exp(x[b * C + k] - mx);
    double l = std::log(z) + mx - x[b * C + y[b]];
    EXPECT_NEAR(rl[b], l, 1e-5 * (1 + l));
    mean += l / B;
    for (int k = 0; k < C; k++) {
      double ref = (std::exp(x[b * C + k] - mx) / z - (k == y[b])) / B;
      EXPECT_NEAR(d[b * C + k], ref, 1e-7);
    }
  }
  EXPECT_TRUE(std::isfinite(loss[0]));
  EXPECT_NEAR(loss[0], mean, 1e-5 * mean);
}

TEST(OpsCpu, CountCorrectFirstMaximumWins) {
  Ctx c = cpu();
  std::vector<float> x = {1, 3, 3, 0, 0, 5, 2, 2, 2};
  std::vector<int> y = {1, 2, 0};
  int correct = 10;
  ops_count_correct(&c, x.data(), y.data(), 3, 3, &correct);
  EXPECT_EQ(correct, 13);  // row 0: argmax 1 (first of the tie) ✓, row 1: 2 ✓, row 2: 0 ✓
  y = {2, 0, 1};
  ops_count_correct(&c, x.data(), y.data(), 3, 3, &correct);
  EXPECT_EQ(correct, 13);
}

TEST(OpsCpu, AxpyRoundsProductThenSum) {
  Ctx c = cpu();
  std::vector<float> y = {1, -2, 0.5f}, x = {4, 3, -1};
  ops_axpy(&c, y.data(), x.data(), 3, 0.25f);
  EXPECT_EQ(y, (std::vector<float>{2, -1.25f, 0.25f}));
  // -1 + (1 + 2^-23)·(1 + 2^-22): the exact product 1 + 3·2^-23 + 2^-45 rounds to 1 + 3·2^-23
  // first, so the sum is 3·2^-23; a fused multiply-add keeps the 2^-45 (3·2^-23 + 2^-45 is a float).
  // This pins the unfused order that the CUDA kernel (__fmul_rn, __fadd_rn) also follows.
  const float e = std::ldexp(1.0f, -23);
  std::vector<float> y1 = {-1.0f}, x1 = {1.0f + 2 * e};
  ops_axpy(&c, y1.data(), x1.data(), 1, 1.0f + e);
  EXPECT_EQ(y1[0], 3 * e);
  EXPECT_EQ(std::fma(1.0f + e, 1.0f + 2 * e, -1.0f), 3 * e + std::ldexp(1.0f, -45));  // fused differs
}

TEST(OpsCpu, ScaleAndGather) {
  Ctx c = cpu();
  std::vector<float> v = {1, -2, 4};
  ops_scale(&c, v.data(), 3, 0.5f);
  EXPECT_EQ(v, (std::vector<float>{0.5f, -1, 2}));
  std::vector<float> src = {0, 1, 10, 11, 20, 21}, dst(4);
  std::vector<int> sy = {7, 8, 9}, idx = {2, 0}, dy(2);
  ops_gather(&c, src.data(), sy.data(), idx.data(), 2, 2, dst.data(), dy.data());
  EXPECT_EQ(dst, (std::vector<float>{20, 21, 0, 1}));
  EXPECT_EQ(dy, (std::vector<int>{9, 7}));
}

// Every pixel value becomes ((float)p / 255 - mean) / std, computed in float32 (the CUDA kernel
// computes the same expression, tests/gpu/test_ops_cuda.cpp), and rows come in the order given.
TEST(OpsCpu, GatherPixelsNormalises) {
  Ctx c = cpu();
  const int rows = 256, N = 3, B = 5;
  const float mean = 0.2860f, std_ = 0.3530f;
  std::vector<uint8_t> src((size_t)rows * N);
  for (int r = 0; r < rows; r++)
    for (int k = 0; k < N; k++) src[(size_t)r * N + k] = (uint8_t)((r + k) % 256);
  std::vector<int> sy(rows), idx = {255, 0, 128, 0, 7}, dy(B);
  for (int r = 0; r < rows; r++) sy[r] = r % 10;
  std::vector<float> dst((size_t)B * N);
  ops_gather_pixels(&c, src.data(), sy.data(), idx.data(), B, N, mean, std_, dst.data(), dy.data());
  for (int b = 0; b < B; b++) {
    EXPECT_EQ(dy[b], idx[b] % 10);
    for (int k = 0; k < N; k++) {
      volatile float p = (float)((idx[b] + k) % 256);  // volatile: no constant folding in double
      volatile float scaled = p / 255.0f;
      volatile float shifted = scaled - mean;
      float want = shifted / std_;
      EXPECT_EQ(dst[(size_t)b * N + k], want) << "row " << idx[b] << " col " << k;
    }
  }
  EXPECT_FLOAT_EQ(dst[N], -mean / std_);          // pixel 0
  EXPECT_FLOAT_EQ(dst[0], (1.0f - mean) / std_);  // pixel 255
}
