// test_rng.cpp: PCG32 against the reference generator's published output, and the documented
// algorithms (bounded draw, float, Fisher–Yates) re-implemented here from rng_next()/rng_below().
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "rng.h"

// The first outputs of PCG's pcg32-demo, which seeds with pcg32_srandom_r(&rng, 42u, 54u).
TEST(Rng, MatchesPcg32ReferenceDemo) {
  const uint32_t expected[] = {0xa15c02b7u, 0x7b47f409u, 0xba1d3330u, 0x83d2f293u, 0xbfa4784bu, 0xcbed606eu};
  Rng r;
  rng_init(&r, 42, 54);
  for (uint32_t e : expected) EXPECT_EQ(rng_next(&r), e);
}

TEST(Rng, IncIsOddAndStreamsDiffer) {
  Rng a, b;
  rng_init(&a, 7, RNG_STREAM_INIT);
  rng_init(&b, 7, RNG_STREAM_SHUFFLE);
  EXPECT_EQ(a.inc & 1u, 1u);
  EXPECT_EQ(a.inc, (uint64_t)RNG_STREAM_INIT << 1 | 1u);
  int same = 0;
  for (int i = 0; i < 100; i++) same += rng_next(&a) == rng_next(&b);
  EXPECT_LT(same, 3);
}

// rng_below() follows the documented rejection rule exactly.
TEST(Rng, BelowFollowsDocumentedRejection) {
  const uint32_t ns[] = {1, 2, 3, 7, 10, 1000, 0x80000001u, 0xfffffffeu};
  for (uint32_t n : ns) {
    Rng r, ref;
    rng_init(&r, 123, 9);
    ref = r;
    for (int i = 0; i < 200; i++) {
      uint32_t threshold = (uint32_t)((UINT64_C(1) << 32) - n) % n;
      uint32_t x;
      do x = rng_next(&ref);
      while (x < threshold);
      ASSERT_EQ(rng_below(&r, n), x % n) << "n=" << n << " draw " << i;
    }
  }
}

TEST(Rng, BelowInRangeAndRoughlyUniform) {
  Rng r;
  rng_init(&r, 2024, RNG_STREAM_SHUFFLE);
  const int n = 10, draws = 100000;
  std::vector<int> count(n, 0);
  for (int i = 0; i < draws; i++) {
    uint32_t v = rng_below(&r, n);
    ASSERT_LT(v, (uint32_t)n);
    count[v]++;
  }
  // Chi-square with 9 degrees of freedom: the 99.99th percentile is about 33.7; 40 is loose.
  double chi2 = 0, e = (double)draws / n;
  for (int c : count) chi2 += (c - e) * (c - e) / e;
  EXPECT_LT(chi2, 40.0);
}

TEST(Rng, UniformIs24BitsInUnitInterval) {
  Rng r, ref;
  rng_init(&r, 5, 1);
  ref = r;
  double sum = 0;
  for (int i = 0; i < 100000; i++) {
    float u = rng_uniform(&r);
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    ASSERT_EQ(u, (float)(rng_next(&ref) >> 8) * 0x1p-24f);
    sum += u;
  }
  EXPECT_NEAR(sum / 100000, 0.5, 0.01);
  Rng z;
  rng_init(&z, 5, 1);
  for (int i = 0; i < 1000; i++) {
    float v = rng_uniform_range(&z, -2.0f, 3.0f);
    ASSERT_GE(v, -2.0f);
    ASSERT_LT(v, 3.0f);
  }
}

TEST(Rng, NormalHasUnitMomentsAndIsFinite) {
  Rng r;
  rng_init(&r, 11, RNG_STREAM_DATA);
  const int n = 200000;
  double s = 0, s2 = 0;
  for (int i = 0; i < n; i++) {
    float v = rng_normal(&r);
    ASSERT_TRUE(std::isfinite(v));
    s += v;
    s2 += (double)v * v;
  }
  double mean = s / n, var = s2 / n - mean * mean;
  EXPECT_NEAR(mean, 0.0, 0.01);  // standard error 0.0022
  EXPECT_NEAR(var, 1.0, 0.02);   // standard error 0.0032
}

TEST(Rng, NormalUsesTwoDraws) {
  Rng r, ref;
  rng_init(&r, 3, 3);
  ref = r;
  (void)rng_normal(&r);
  (void)rng_next(&ref);
  (void)rng_next(&ref);
  EXPECT_EQ(rng_next(&r), rng_next(&ref));
}

static bool is_permutation(const std::vector<int> &p) {
  std::vector<int> seen(p.size(), 0);
  for (int v : p) {
    if (v < 0 || v >= (int)p.size() || seen[v]) return false;
    seen[v] = 1;
  }
  return true;
}

TEST(Rng, PermutationIsDeterministicPermutation) {
  for (int n : {1, 2, 5, 100, 60000}) {
    std::vector<int> a(n), b(n);
    rng_permutation(a.data(), n, 42);
    rng_permutation(b.data(), n, 42);
    EXPECT_TRUE(is_permutation(a)) << "n=" << n;
    EXPECT_EQ(a, b) << "n=" << n;
  }
}

TEST(Rng, PermutationDiffersAcrossSeeds) {
  const int n = 1000;
  std::vector<int> a(n), b(n);
  rng_permutation(a.data(), n, 42);
  rng_permutation(b.data(), n, 43);
  int same = 0;
  for (int i = 0; i < n; i++) same += a[i] == b[i];
  EXPECT_LT(same, 20);  // about 1 fixed point expected
}

// Pins the documented algorithm: identity, then for i = n-1 down to 1 swap p[i] with
// p[rng_below(i + 1)], drawn from rng_init(seed, RNG_STREAM_SHUFFLE).
TEST(Rng, PermutationIsDocumentedFisherYates) {
  for (int n : {2, 3, 10, 997}) {
    for (uint64_t seed : {0ull, 1ull, 1337ull}) {
      std::vector<int> got(n), want(n);
      rng_permutation(got.data(), n, seed);
      Rng r;
      rng_init(&r, seed, RNG_STREAM_SHUFFLE);
      for (int i = 0; i < n; i++) want[i] = i;
      for (int i = n - 1; i > 0; i--) std::swap(want[i], want[rng_below(&r, (uint32_t)i + 1)]);
      EXPECT_EQ(got, want) << "n=" << n << " seed=" << seed;
    }
  }
}
