// Element access of the CUDA kernels, for every element type of the core: widened to double
// on load (exactly), rounded once to nearest-even on store; and vectors of V consecutive
// elements, each loaded and stored as one access.
#ifndef TF_FBN_OPS_CC_CORE_GPU_GPU_ELEMENTS_CUH_
#define TF_FBN_OPS_CC_CORE_GPU_GPU_ELEMENTS_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cc/core/bn_grad.h"

namespace fbn {

__device__ __forceinline__ double Load(float v) { return v; }
__device__ __forceinline__ double Load(Half v) { return __half2float(__ushort_as_half(v.bits)); }
__device__ __forceinline__ double Load(BFloat16 v) {
  return __bfloat162float(__ushort_as_bfloat16(v.bits));
}
template <typename T>
__device__ __forceinline__ T Round(double v);
template <>
__device__ __forceinline__ float Round<float>(double v) {
  return __double2float_rn(v);
}
template <>
__device__ __forceinline__ Half Round<Half>(double v) {
  return Half{__half_as_ushort(__double2half(v))};
}
template <>
__device__ __forceinline__ BFloat16 Round<BFloat16>(double v) {
  return BFloat16{__bfloat16_as_ushort(__double2bfloat16(v))};
}

// V consecutive elements, loaded and stored as one (up to 16-byte) access.
template <typename T, int V>
struct alignas(sizeof(T) * V) Vec {
  T v[V];
};
template <typename T, int V>
__device__ __forceinline__ Vec<T, V> LoadVec(const T* p) {
  return *reinterpret_cast<const Vec<T, V>*>(p);
}
// Elements 2i and 2i + 1 of a 16-bit vector as one 32-bit word (little-endian, as the GPU).
template <typename T, int V>
__device__ __forceinline__ unsigned PackedWord(const Vec<T, V>& v, int i) {
  return v.v[2 * i].bits | static_cast<unsigned>(v.v[2 * i + 1].bits) << 16;
}
// One store instruction of the whole vector, through __stwb (a plain cached store) and CUDA's
// vector types: assigned as a struct, nvcc split the float x_backprop stores into four 32-bit
// stores and the 16-bit ones into 16-bit stores, and even a uint4 in every unrolled store but
// the first (tools/gpu_code_check.py reads the PTX for it).
template <typename T, int V>
__device__ __forceinline__ void StoreVec(T* p, const Vec<T, V>& v) {
  if constexpr (sizeof(T) == 4 && V == 4) {
    __stwb(reinterpret_cast<float4*>(p), float4{v.v[0], v.v[1], v.v[2], v.v[3]});
  } else if constexpr (sizeof(T) == 2 && V == 4) {
    __stwb(reinterpret_cast<uint2*>(p), uint2{PackedWord(v, 0), PackedWord(v, 1)});
  } else if constexpr (sizeof(T) == 2 && V == 8) {
    __stwb(reinterpret_cast<uint4*>(p),
           uint4{PackedWord(v, 0), PackedWord(v, 1), PackedWord(v, 2), PackedWord(v, 3)});
  } else {
    static_assert(V == 1, "a vector width with no single store");
    *p = v.v[0];
  }
}

// Whether p can be the address of a vector of `bytes` bytes.
inline bool Aligned(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

}  // namespace fbn

#endif  // TF_FBN_OPS_CC_CORE_GPU_GPU_ELEMENTS_CUH_
