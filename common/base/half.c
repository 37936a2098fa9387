// half.c: the 16-bit float conversions of half.h, bit by bit (no compiler extension such as _Float16).
#include "half.h"

#include <math.h>
#include <string.h>

static uint32_t bits_of(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  return x;
}

static float float_of(uint32_t x) {
  float f;
  memcpy(&f, &x, sizeof f);
  return f;
}

uint16_t half_from_float(float f) {
  uint32_t x = bits_of(f), sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u));  // inf, NaN
  if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);  // 65520 and above round to infinity
  if (ax < 0x38800000u)  // below 2^-14: a subnormal half, m·2^-24 (the scaling by 2^24 is exact)
    return (uint16_t)(sign | (uint32_t)lrintf(float_of(ax) * 16777216.0f));  // rounds to nearest even
  uint32_t h = (ax - 0x38000000u) >> 13, rest = ax & 0x1fffu;                // exponent rebiased 127 -> 15
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;  // a carry into the exponent is right
  return (uint16_t)(sign | h);
}

float half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) {  // zero or subnormal: m·2^-24
    float f = (float)m * 5.9604644775390625e-8f;
    return sign ? -f : f;
  }
  return float_of(sign | (e == 31 ? 0x7f800000u : (e + 112u) << 23) | (m << 13));
}

uint16_t bf16_from_float(float f) {
  uint32_t x = bits_of(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);  // NaN stays quiet NaN
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}

float bf16_to_float(uint16_t h) { return float_of((uint32_t)h << 16); }

uint16_t half_add(uint16_t a, uint16_t b) { return half_from_float(half_to_float(a) + half_to_float(b)); }

uint16_t bf16_add(uint16_t a, uint16_t b) { return bf16_from_float(bf16_to_float(a) + bf16_to_float(b)); }
