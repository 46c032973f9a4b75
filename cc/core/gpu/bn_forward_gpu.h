// The CUDA forward of the numeric core. Host functions with no CUDA types in their signatures,
// as bn_grad_gpu.h.
#ifndef TF_FBN_OPS_CC_CORE_GPU_BN_FORWARD_GPU_H_
#define TF_FBN_OPS_CC_CORE_GPU_BN_FORWARD_GPU_H_

#include <cstddef>

#include "cc/core/bn_forward.h"
#include "cc/core/gpu/bn_grad_gpu.h"

namespace fbn {

// Bytes of device scratch BatchNormForwardGpu needs: per-part moments (training) and y's
// coefficients per channel. Depends on the shape and mode only.
size_t GpuForwardScratchBytes(const ForwardParams& params);

// Enqueues the forward on `stream`. Every pointer in `t`, and `scratch`, is device memory.
// Returns 0 (cudaSuccess) or the CUDA error of the first failing launch. Deterministic: no
// atomics, parts and trees fixed by the shape.
template <typename T>
int BatchNormForwardGpu(const ForwardParams& params, const ForwardTensors<T>& t, void* scratch,
                        GpuStream stream);

}  // namespace fbn

#endif  // TF_FBN_OPS_CC_CORE_GPU_BN_FORWARD_GPU_H_
