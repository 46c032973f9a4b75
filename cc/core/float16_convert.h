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

inline float HalfBitsToFloat(uint16_t h) {
  constexpr uint32_t kExpMask = 0x7c00u << 13;  // half exponent, moved to float position
  uint32_t o = static_cast<uint32_t>(h & 0x7fffu) << 13;
  const uint32_t exp = o & kExpMask;
  o += (127u - 15u) << 23;  // rebias the exponent
  if (exp == kExpMask) {
    o += (128u - 16u) << 23;  // Inf / NaN keep an all-ones exponent
  } else if (exp == 0) {
    // Zero or subnormal half: renormalize by subtracting 2^-14 (both operands are normal).
    o += 1u << 23;
    o = BitsOf(FloatOf(o) - FloatOf(113u << 23));
  }
  return FloatOf(o | (static_cast<uint32_t>(h & 0x8000u) << 16));
}

inline uint16_t FloatToHalfBits(float f) {
  constexpr uint32_t kFloatInf = 255u << 23;
  constexpr uint32_t kHalfOverflow = (127u + 16u) << 23;  // 2^16: rounds to Inf or beyond
  constexpr uint32_t kHalfMinNormal = 113u << 23;         // 2^-14
  // Adding this magic number leaves the half subnormal's bits, rounded by the FPU (RNE).
  constexpr uint32_t kDenormMagic = ((127u - 15u) + (23u - 10u) + 1u) << 23;
  uint32_t u = BitsOf(f);
  const uint32_t sign = u & 0x80000000u;
  u ^= sign;
  uint16_t o;
  if (u >= kHalfOverflow) {
    o = u > kFloatInf ? 0x7e00u : 0x7c00u;  // NaN stays a quiet NaN; overflow becomes Inf
  } else if (u < kHalfMinNormal) {
    o = static_cast<uint16_t>(BitsOf(FloatOf(u) + FloatOf(kDenormMagic)) - kDenormMagic);
  } else {
    const uint32_t mantissa_odd = (u >> 13) & 1u;
    u += (static_cast<uint32_t>(15 - 127) << 23) + 0xfffu + mantissa_odd;
    o = static_cast<uint16_t>(u >> 13);
  }
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
  uint32_t u = BitsOf(f);
  if (static_cast<double>(f) == d || d != d || (u & 1u)) return f;
  // f is even and inexact: take its other neighbour of d (sign-magnitude, so +-1 on the bits
  // moves the magnitude).
  u = std::fabs(static_cast<double>(f)) > std::fabs(d) ? u - 1u : u + 1u;
  return FloatOf(u);
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
