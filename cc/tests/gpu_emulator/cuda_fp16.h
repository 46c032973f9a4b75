// Host emulation of the float16 conversions of cuda_fp16.h that the core's kernels use
// (see cuda_runtime.h beside this file). Round-to-nearest-even, as the device converts.
#ifndef TF_FBN_OPS_CC_TESTS_GPU_EMULATOR_CUDA_FP16_H_
#define TF_FBN_OPS_CC_TESTS_GPU_EMULATOR_CUDA_FP16_H_

#include "cc/core/float16_convert.h"

struct __half {
  unsigned short bits;
};

inline __half __ushort_as_half(unsigned short bits) { return __half{bits}; }
inline unsigned short __half_as_ushort(__half h) { return h.bits; }
inline float __half2float(__half h) { return fbn::HalfBitsToFloat(h.bits); }
inline __half __double2half(double v) { return __half{fbn::FromDouble<fbn::Half>(v).bits}; }

#endif  // TF_FBN_OPS_CC_TESTS_GPU_EMULATOR_CUDA_FP16_H_
