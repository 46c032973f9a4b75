// One call of the CUDA core as a shell makes it (TensorFlow's GPU kernel, XLA's CUDA handler):
// the stream checked, the scratch sized and taken from the shell's allocator, the kernels
// enqueued, and what went wrong said in words the shell puts into its own error type.
#ifndef TF_FBN_OPS_CC_CORE_GPU_GPU_CALL_H_
#define TF_FBN_OPS_CC_CORE_GPU_GPU_CALL_H_

#include <cstddef>
#include <string>

#include "cc/core/bn_forward.h"
#include "cc/core/bn_grad.h"
#include "cc/core/gpu/bn_forward_gpu.h"
#include "cc/core/gpu/bn_grad_gpu.h"

namespace fbn {

struct GpuCallError {
  enum Kind { kNone, kNoStream, kNoScratch, kCuda };
  Kind kind = kNone;
  std::string message;
  explicit operator bool() const { return kind != kNone; }
};

// The two calls of the core a shell makes: the gradient (Params, Tensors) and the forward
// (ForwardParams, ForwardTensors), each with its scratch size and its launch.
inline size_t GpuCallScratchBytes(const Params& params) { return GpuScratchBytes(params.shape); }
inline size_t GpuCallScratchBytes(const ForwardParams& params) {
  return GpuForwardScratchBytes(params);
}
template <typename T>
int LaunchGpuCall(const Params& params, const Tensors<T>& tensors, void* scratch,
                  GpuStream stream) {
  return BatchNormGradGpu(params, tensors, scratch, stream);
}
template <typename T>
int LaunchGpuCall(const ForwardParams& params, const ForwardTensors<T>& tensors, void* scratch,
                  GpuStream stream) {
  return BatchNormForwardGpu(params, tensors, scratch, stream);
}

// `allocate(bytes)` returns device memory for the scratch, or null when none is granted; it is
// not called when the call needs none.
template <typename CoreParams, typename CoreTensors, typename Allocate>
GpuCallError RunGpuCall(const CoreParams& params, const CoreTensors& tensors, GpuStream stream,
                        Allocate&& allocate) {
  // A null stream is CUDA's legacy default stream: the kernels would run unordered with the
  // work around them on the shell's own stream.
  if (stream == nullptr) return {GpuCallError::kNoStream, "no CUDA stream"};
  const size_t bytes = GpuCallScratchBytes(params);
  void* scratch = bytes > 0 ? allocate(bytes) : nullptr;
  if (bytes > 0 && scratch == nullptr) {
    return {GpuCallError::kNoScratch, "no " + std::to_string(bytes) + " bytes of GPU scratch"};
  }
  const int error = LaunchGpuCall(params, tensors, scratch, stream);
  if (error != 0) return {GpuCallError::kCuda, std::string("CUDA error: ") + GpuErrorString(error)};
  return {};
}

}  // namespace fbn

#endif  // TF_FBN_OPS_CC_CORE_GPU_GPU_CALL_H_
