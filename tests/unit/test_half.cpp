// test_half.cpp: half.h's 16-bit float conversions and sums against the compiler's own _Float16
// (IEEE half, round to nearest even) on every exponent's boundaries and random floats, every half
// value's round trip, and bfloat16's rounding by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>

extern "C" {
#include "half.h"
}

namespace {

float from_bits(uint32_t x) {
  float f;
  std::memcpy(&f, &x, sizeof f);
  return f;
}

uint32_t bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  return x;
}

TEST(Half, EveryHalfRoundTrips) {
  for (uint32_t h = 0; h < 0x10000; h++) {
    float f = half_to_float((uint16_t)h);
    if (std::isnan(f)) continue;
    EXPECT_EQ(half_from_float(f), h) << std::hex << h;
  }
}

#if defined(__FLT16_MAX__)
uint16_t compiler_half(float f) {
  _Float16 h = (_Float16)f;
  uint16_t x;
  std::memcpy(&x, &h, sizeof x);
  return x;
}

TEST(Half, RoundsAsTheCompilerDoes) {
  std::mt19937 gen(5);
  std::uniform_int_distribution<uint32_t> any;
  for (int i = 0; i < 2000000; i++) {
    uint32_t x = any(gen);
    if (i % 2) x = (x & 0x80001fffu) | ((uint32_t)(98 + i % 50) << 23);  // near half's range, low bits
    float f = from_bits(x);
    if (std::isnan(f)) continue;
    ASSERT_EQ(half_from_float(f), compiler_half(f)) << std::hexfloat << f;
  }
}

TEST(Half, SumIsTheCorrectlyRoundedHalfSum) {
  std::mt19937 gen(6);
  std::uniform_int_distribution<uint32_t> any(0, 0xffff);
  for (int i = 0; i < 1000000; i++) {
    uint16_t a = (uint16_t)any(gen), b = (uint16_t)any(gen);
    float fa = half_to_float(a), fb = half_to_float(b);
    if (std::isnan(fa) || std::isnan(fb) || std::isinf(fa) || std::isinf(fb)) continue;
    _Float16 s = (_Float16)((double)fa + (double)fb);  // exact in double, rounded once
    uint16_t want;
    std::memcpy(&want, &s, sizeof want);
    ASSERT_EQ(half_add(a, b), want) << fa << " + " << fb;
  }
}
#endif

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(bf16_from_float(1.0f), 0x3f80);
  EXPECT_EQ(bf16_from_float(from_bits(0x3f808000u)), 0x3f80);  // a tie: to even (down)
  EXPECT_EQ(bf16_from_float(from_bits(0x3f818000u)), 0x3f82);  // a tie: to even (up)
  EXPECT_EQ(bf16_from_float(from_bits(0x3f808001u)), 0x3f81);  // above the tie
  EXPECT_EQ(bf16_from_float(from_bits(0x7f7fffffu)), 0x7f80);  // FLT_MAX rounds to infinity
  EXPECT_TRUE(std::isnan(bf16_to_float(bf16_from_float(std::numeric_limits<float>::quiet_NaN()))));
  for (uint32_t h = 0; h < 0x10000; h++) {
    float f = bf16_to_float((uint16_t)h);
    if (!std::isnan(f)) {
      EXPECT_EQ(bf16_from_float(f), h);
    }
    EXPECT_EQ(bits(f), h << 16);
  }
}

}  // namespace
