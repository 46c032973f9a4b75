// Host emulation of the bfloat16 conversions of cuda_bf16.h that the core's kernels use
// (see cuda_runtime.h beside this file). Round-to-nearest-even, as the device converts.
#ifndef TF_FBN_OPS_CC_TESTS_GPU_EMULATOR_CUDA_BF16_H_
#define TF_FBN_OPS_CC_TESTS_GPU_EMULATOR_CUDA_BF16_H_

#include "cc/core/float16_convert.h"

struct __nv_bfloat16 {
  unsigned short bits;
};

inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short bits) { return __nv_bfloat16{bits}; }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) { return b.bits; }
inline float __bfloat162float(__nv_bfloat16 b) { return fbn::BFloat16BitsToFloat(b.bits); }
inline __nv_bfloat16 __double2bfloat16(double v) {
  return __nv_bfloat16{fbn::FromDouble<fbn::BFloat16>(v).bits};
}

#endif  // TF_FBN_OPS_CC_TESTS_GPU_EMULATOR_CUDA_BF16_H_
