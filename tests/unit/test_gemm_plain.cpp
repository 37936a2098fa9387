// The plain C GEMM (the CPU GEMM of a build without OpenBLAS) against a float64 loop, and against
// the build's OpenBLAS (CMake's DDP_BLAS: scipy-openblas32 from PyPI by default, or the system's) when
// it has one: on every transposition case of an odd small shape and a layer-like one, and on every
// GEMM of one training step of the course's default model (784-1024-1024-10, batch 128).
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "device.h"
#include "ops_backend.h"

namespace {
struct Shape {
  int M, N, K;
};

std::vector<float> uniform(size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  std::vector<float> v(n);
  for (auto &x : v) x = d(g);
  return v;
}

// (transpose A, transpose B, beta, shape): an odd small shape and a layer of the course's MLP.
using Param = std::tuple<bool, bool, float, Shape>;

class GemmPlain : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    std::tie(ta, tb, beta, s) = GetParam();
    A = uniform((size_t)s.M * s.K, 1);
    B = uniform((size_t)s.K * s.N, 2);
    C0 = uniform((size_t)s.M * s.N, 3);
    device_init(&c, DEVICE_CPU, 0);
  }
  float a(int i, int k) const { return ta ? A[(size_t)k * s.M + i] : A[(size_t)i * s.K + k]; }
  float b(int k, int j) const { return tb ? B[(size_t)j * s.K + k] : B[(size_t)k * s.N + j]; }
  // Two fp32 sums of the same K products in different orders differ by at most about
  // 2·K·(EPS/2)·Σ|a·b| (each is within K·u·Σ|a·b| of the exact sum); alpha and beta add a few
  // roundings more, hence K + 4.
  double tol(int i, int j) const {
    double t = 0;
    for (int k = 0; k < s.K; k++) t += std::fabs((double)a(i, k) * b(k, j));
    return (s.K + 4) * FLT_EPSILON * (std::fabs(alpha) * t + std::fabs(beta * C0[(size_t)i * s.N + j])) +
           1e-30;
  }
  // beta 0 must ignore C: the plain GEMM gets NaNs there.
  std::vector<float> start() const {
    return beta == 0.0f ? std::vector<float>(C0.size(), std::numeric_limits<float>::quiet_NaN()) : C0;
  }

  bool ta = false, tb = false;
  float beta = 0.f, alpha = 0.75f;
  Shape s{};
  std::vector<float> A, B, C0;
  Ctx c{};
};

TEST_P(GemmPlain, MatchesFloat64Loop) {
  std::vector<float> C = start();
  ops_gemm_plain_cpu(&c, ta, tb, s.M, s.N, s.K, alpha, A.data(), B.data(), beta, C.data());
  int bad = 0;
  for (int i = 0; i < s.M; i++)
    for (int j = 0; j < s.N; j++) {
      double ref = 0;
      for (int k = 0; k < s.K; k++) ref += (double)a(i, k) * b(k, j);
      ref = alpha * ref + (beta == 0.0f ? 0.0 : beta * (double)C0[(size_t)i * s.N + j]);
      double got = C[(size_t)i * s.N + j];
      if (!(std::fabs(got - ref) <= tol(i, j)) && bad++ < 5)
        ADD_FAILURE() << "C[" << i << "][" << j << "] = " << got << ", float64 loop " << ref;
    }
  EXPECT_EQ(bad, 0);
}

TEST_P(GemmPlain, MatchesOpenBlas) {
  if (!ops_have_blas()) GTEST_SKIP() << "this build has no OpenBLAS: nothing to compare with";
  std::vector<float> plain = start(), blas = start();
  ops_gemm_plain_cpu(&c, ta, tb, s.M, s.N, s.K, alpha, A.data(), B.data(), beta, plain.data());
  ops_gemm_cpu(&c, ta, tb, s.M, s.N, s.K, alpha, A.data(), B.data(), beta, blas.data());
  int bad = 0;
  for (int i = 0; i < s.M; i++)
    for (int j = 0; j < s.N; j++) {
      size_t x = (size_t)i * s.N + j;
      if (!(std::fabs((double)plain[x] - blas[x]) <= tol(i, j)) && bad++ < 5)
        ADD_FAILURE() << "C[" << i << "][" << j << "]: plain " << plain[x] << ", OpenBLAS " << blas[x];
    }
  EXPECT_EQ(bad, 0);
}

// One training step's GEMMs of the default model, as common/nn/mlp.c calls them (bench/gemm_bound.c lists
// them): forward (B, OUT) = (B, IN)·(OUT, IN)ᵀ; backward dW (OUT, IN) = (B, OUT)ᵀ·(B, IN) and
// dX (B, IN) = (B, OUT)·(OUT, IN).
TEST(GemmCourse, OpenBlasMatchesPlainOnEveryGemmOfAStep) {
  if (!ops_have_blas()) GTEST_SKIP() << "this build has no OpenBLAS: nothing to compare with";
  const int B = 128, sizes[] = {784, 1024, 1024, 10};
  Ctx c{};
  device_init(&c, DEVICE_CPU, 0);
  for (int l = 0; l < 3; l++) {
    const int in = sizes[l], out = sizes[l + 1];
    // (transpose A, transpose B, M, N, K) of the forward, dW and dX GEMMs of layer l
    const int cases[3][5] = {{0, 1, B, out, in}, {1, 0, out, in, B}, {0, 0, B, in, out}};
    for (int g = 0; g < (l > 0 ? 3 : 2); g++) {
      const bool ta = cases[g][0], tb = cases[g][1];
      const int M = cases[g][2], N = cases[g][3], K = cases[g][4];
      std::vector<float> A = uniform((size_t)M * K, 10 + g), Bm = uniform((size_t)K * N, 20 + g);
      std::vector<float> plain((size_t)M * N), blas((size_t)M * N);
      ops_gemm_plain_cpu(&c, ta, tb, M, N, K, 1.0f, A.data(), Bm.data(), 0.0f, plain.data());
      ops_gemm_cpu(&c, ta, tb, M, N, K, 1.0f, A.data(), Bm.data(), 0.0f, blas.data());
      int bad = 0;
      for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
          double mag =
              0;  // Σ|a·b|: each sum is within K·u·Σ|a·b| of the exact one, so the two within (K + 4)·EPS
          for (int k = 0; k < K; k++)
            mag += std::fabs((double)(ta ? A[(size_t)k * M + i] : A[(size_t)i * K + k]) *
                             (tb ? Bm[(size_t)j * K + k] : Bm[(size_t)k * N + j]));
          size_t x = (size_t)i * N + j;
          if (!(std::fabs((double)plain[x] - blas[x]) <= (K + 4) * FLT_EPSILON * mag + 1e-30) && bad++ < 5)
            ADD_FAILURE() << "layer " << l << " GEMM " << g << " C[" << i << "][" << j << "]: plain "
                          << plain[x] << ", OpenBLAS " << blas[x];
        }
      EXPECT_EQ(bad, 0) << "layer " << l << ", GEMM " << g << " (" << M << "x" << N << "x" << K << ")";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllCases, GemmPlain,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool(),
                                            ::testing::Values(0.0f, 1.0f, 0.5f),
                                            ::testing::Values(Shape{37, 29, 53}, Shape{128, 300, 784})),
                         [](const ::testing::TestParamInfo<Param> &info) {
                           const Shape &s = std::get<3>(info.param);
                           float beta = std::get<2>(info.param);
                           return std::string(std::get<0>(info.param) ? "At" : "A") +
                                  (std::get<1>(info.param) ? "Bt" : "B") + "_beta" +
                                  (beta == 0.0f   ? "0"
                                   : beta == 1.0f ? "1"
                                                  : "half") +
                                  "_" + std::to_string(s.M) + "x" + std::to_string(s.N) + "x" +
                                  std::to_string(s.K);
                         });
}  // namespace
