// Conversions between float and the 16-bit storage types, round-to-nearest-even.
//
// Written with integer operations plus additions of normal floats only, so they give the same
// bits whether or not the thread flushes denormals (TensorFlow's threads run with FTZ/DAZ on).
// Header-only and branch-light so the compiler can inline and vectorize them in the kernels.
#ifndef TF_FBN_OPS_CC_CORE_FLOAT16_CONVERT_H_
#define TF_FBN_OPS_CC_CORE_FLOAT16_CONVERT_H_

#include <cmath>
#include <cstdint>
#include <cstring>

#include "cc/core/bn_grad.h"

namespace fbn {

inline uint32_t BitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

inline float FloatOf(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// Both directions compute every case and then select, without branches, so the compiler can
// vectorize them inside the kernels' loops (a branchy version ran 4-6x slower there).
inline float HalfBitsToFloat(uint16_t h) {
  constexpr uint32_t kExpMask = 0x7c00u << 13;  // half exponent, moved to float position
  const uint32_t magnitude = static_cast<uint32_t>(h & 0x7fffu) << 13;
  const uint32_t exp = magnitude & kExpMask;
  uint32_t o = magnitude + ((127u - 15u) << 23);  // rebias the exponent
  // Inf / NaN keep an all-ones exponent; a NaN comes out quiet with its payload, as the F16C
  // instruction converts it (the kernels use that instruction where the CPU has it).
  o += exp == kExpMask ? (128u - 16u) << 23 : 0u;
  o |= exp == kExpMask && (h & 0x3ffu) != 0 ? 0x00400000u : 0u;
  // Zero or subnormal half: renormalize by subtracting 2^-14 (both operands are normal).
  const uint32_t subnormal = BitsOf(FloatOf(o + (1u << 23)) - FloatOf(113u << 23));
  o = exp == 0 ? subnormal : o;
  return FloatOf(o | (static_cast<uint32_t>(h & 0x8000u) << 16));
}

inline uint16_t FloatToHalfBits(float f) {
  constexpr uint32_t kFloatInf = 255u << 23;
  constexpr uint32_t kHalfOverflow = (127u + 16u) << 23;  // 2^16: rounds to Inf or beyond
  constexpr uint32_t kHalfMinNormal = 113u << 23;         // 2^-14
  // Adding this magic number leaves the half subnormal's bits, rounded by the FPU (RNE).
  constexpr uint32_t kDenormMagic = ((127u - 15u) + (23u - 10u) + 1u) << 23;
  const uint32_t bits = BitsOf(f);
  const uint32_t sign = bits & 0x80000000u;
  const uint32_t u = bits ^ sign;
  // A NaN stays a NaN, quiet, with the top of its payload (as F16C converts it); overflow
  // becomes Inf.
  const uint32_t special = u > kFloatInf ? 0x7e00u | ((u >> 13) & 0x3ffu) : 0x7c00u;
  // Below 2^-14 (with FTZ off): the sum's low bits are the subnormal half, rounded.
  const uint32_t subnormal = BitsOf(FloatOf(u < kHalfMinNormal ? u : 0u) + FloatOf(kDenormMagic)) -
                             kDenormMagic;
  // Normal: rebias and round to nearest even on the 13 dropped bits.
  const uint32_t normal = (u + (static_cast<uint32_t>(15 - 127) << 23) + 0xfffu + ((u >> 13) & 1u)) >> 13;
  const uint32_t o = u >= kHalfOverflow ? special : (u < kHalfMinNormal ? subnormal : normal);
  return static_cast<uint16_t>(o | (sign >> 16));
}

inline float BFloat16BitsToFloat(uint16_t b) { return FloatOf(static_cast<uint32_t>(b) << 16); }

inline uint16_t FloatToBFloat16Bits(float f) {
  const uint32_t u = BitsOf(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (u & 0x80000000u) ? 0xffc0u : 0x7fc0u;
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// double -> float rounding to odd: the result is exact, or the neighbour of d whose last bit is
// odd. Rounding that float again to a type with at least two fewer bits (half: 11, bfloat16: 8,
// float: 24) gives exactly the round-to-nearest-even of d itself: a single rounding.
inline float DoubleToFloatRoundToOdd(double d) {
  const float f = static_cast<float>(d);  // nearest-even
  const uint32_t u = BitsOf(f);
  const bool keep = static_cast<double>(f) == d || d != d || (u & 1u) != 0;
  // Otherwise f is even and inexact: take its other neighbour of d (sign-magnitude, so +-1 on
  // the bits moves the magnitude). Selected without branches, so the loops vectorize.
  const uint32_t other = std::fabs(static_cast<double>(f)) > std::fabs(d) ? u - 1u : u + 1u;
  return FloatOf(keep ? u : other);
}

// Uniform load/store used by the kernels: every T is widened on load, and results are rounded
// to T once on store (FromDouble), round-to-nearest-even.
inline float ToFloat(float v) { return v; }
inline float ToFloat(Half v) { return HalfBitsToFloat(v.bits); }
inline float ToFloat(BFloat16 v) { return BFloat16BitsToFloat(v.bits); }

template <typename T>
T FromFloat(float v);
template <>
inline float FromFloat<float>(float v) {
  return v;
}
template <>
inline Half FromFloat<Half>(float v) {
  return Half{FloatToHalfBits(v)};
}
template <>
inline BFloat16 FromFloat<BFloat16>(float v) {
  return BFloat16{FloatToBFloat16Bits(v)};
}

template <typename T>
T FromDouble(double v) {
  return FromFloat<T>(DoubleToFloatRoundToOdd(v));
}
template <>
inline float FromDouble<float>(double v) {
  return static_cast<float>(v);
}

}  // namespace fbn

#endif  // TF_FBN_OPS_CC_CORE_FLOAT16_CONVERT_H_
