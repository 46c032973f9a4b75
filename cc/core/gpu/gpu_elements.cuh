// Element access of the CUDA kernels, for every element type of the core: widened to double
// on load (exactly), rounded once to nearest-even on store.
#ifndef TF_FBN_OPS_CC_CORE_GPU_GPU_ELEMENTS_CUH_
#define TF_FBN_OPS_CC_CORE_GPU_GPU_ELEMENTS_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

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

}  // namespace fbn

#endif  // TF_FBN_OPS_CC_CORE_GPU_GPU_ELEMENTS_CUH_
