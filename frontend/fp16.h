#pragma once
// IEEE binary16 (FP16) and bfloat16 (BF16) <-> float conversions, round-to-nearest-even.
// Portable bit manipulation (no _Float16 / F16C dependency); header-only, noexcept, thread-safe.
// Assumes the default floating-point environment (round-to-nearest); results are exact under
// flush-to-zero too, since float subnormals are far below FP16's range.

#include <bit>
#include <cmath>
#include <cstdint>

namespace infergate::frontend {

// float -> FP16, round-to-nearest-even. Overflow gives +-Inf; NaN stays NaN (quieted).
inline uint16_t floatToHalf(float value) {
  uint32_t f = std::bit_cast<uint32_t>(value);
  const uint32_t sign = f & 0x80000000u;
  f ^= sign;
  uint32_t o;
  if (f >= (127u + 16u) << 23) {           // |value| >= 2^16 (or Inf/NaN): Inf or NaN
    o = f > 0x7F800000u ? 0x7E00u : 0x7C00u;
  } else if (f < (127u - 14u) << 23) {      // below 2^-14: FP16 subnormal or zero
    // Adding 0.5 aligns the 10 FP16 mantissa bits at the bottom of the float's mantissa; the
    // FPU rounds to nearest-even for us.
    constexpr uint32_t kMagic = ((127u - 15u) + (23u - 10u) + 1u) << 23;
    const float sum = std::bit_cast<float>(f) + std::bit_cast<float>(kMagic);
    o = std::bit_cast<uint32_t>(sum) - kMagic;
  } else {
    const uint32_t mant_odd = (f >> 13) & 1u;
    f += (static_cast<uint32_t>(15 - 127) << 23) + 0xFFFu;  // rebias exponent, round (part 1)
    f += mant_odd;                                           // ties to even (part 2)
    o = f >> 13;  // a carry out of the mantissa bumps the exponent, up to Inf: correct
  }
  return static_cast<uint16_t>(o | (sign >> 16));
}

// FP16 -> float (exact).
inline float halfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t mant = h & 0x3FFu;
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24, exact in float.
    const float mag = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return std::bit_cast<float>(std::bit_cast<uint32_t>(mag) | sign);
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7F800000u | (mant << 13));
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

// float -> BF16, round-to-nearest-even. Overflow gives +-Inf; NaN stays NaN (quieted).
inline uint16_t floatToBf16(float value) {
  const uint32_t f = std::bit_cast<uint32_t>(value);
  if ((f & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((f >> 16) | 0x0040u);
  return static_cast<uint16_t>((f + 0x7FFFu + ((f >> 16) & 1u)) >> 16);
}

// BF16 -> float (exact).
inline float bf16ToFloat(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

// double -> float rounded to odd: truncate toward zero and set the lowest mantissa bit when
// inexact. Rounding that result to nearest-even at <= 22 bits of precision equals rounding the
// double directly (no double-rounding error), which FP16 (11 bits) and BF16 (8 bits) need.
inline float doubleToFloatRoundToOdd(double d) {
  float f = static_cast<float>(d);
  if (std::isnan(d) || static_cast<double>(f) == d) return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(d)) f = std::nextafter(f, 0.0f);
  return std::bit_cast<float>(std::bit_cast<uint32_t>(f) | 1u);
}

// double -> FP16 / BF16, correctly rounded (nearest-even).
inline uint16_t doubleToHalf(double d) { return floatToHalf(doubleToFloatRoundToOdd(d)); }
inline uint16_t doubleToBf16(double d) { return floatToBf16(doubleToFloatRoundToOdd(d)); }

}  // namespace infergate::frontend
