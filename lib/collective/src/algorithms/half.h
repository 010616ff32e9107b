#pragma once
// IEEE float16 and bfloat16 <-> float32 conversions (private to the library).
// Reductions on half types convert to float32, reduce, and round back with
// round-to-nearest-even: bit-summing two halves would be meaningless.
#include <cstdint>
#include <cstring>

namespace hvd::collective::detail {

inline float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

inline uint32_t float_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

inline float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return bits_to_float(sign | 0x7f800000u | (mant << 13));  // inf / nan
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24, exact in float32.
    float f = static_cast<float>(mant) * (1.0f / 16777216.0f);
    return sign ? -f : f;
  }
  return bits_to_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

inline uint16_t float_to_half(float f) {
  const uint32_t x = float_to_bits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u));
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to inf
  if (ax < 0x38800000u) {
    // Below the smallest normal half (2^-14): adding 0.5f aligns the value so
    // float32's own round-to-nearest-even leaves the half subnormal bits in
    // the low mantissa (0.5f has an ulp of exactly 2^-24, the subnormal unit).
    float t = bits_to_float(ax) + 0.5f;
    return static_cast<uint16_t>(sign | (float_to_bits(t) - 0x3f000000u));
  }
  // Normal: round the 13 dropped bits to nearest even, then rebias.
  uint32_t r = ax + 0xfffu + ((ax >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((r - (112u << 23)) >> 13));
}

inline float bfloat16_to_float(uint16_t b) { return bits_to_float(static_cast<uint32_t>(b) << 16); }

inline uint16_t float_to_bfloat16(float f) {
  uint32_t u = float_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet nan
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

}  // namespace hvd::collective::detail
