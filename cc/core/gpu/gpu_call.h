// One call of the CUDA core as a shell makes it (TensorFlow's GPU kernel, XLA's CUDA handler):
// the stream checked, the scratch sized and taken from the shell's allocator, the kernels
// enqueued, and what went wrong said in words the shell puts into its own error type.
#ifndef TF_FBN_OPS_CC_CORE_GPU_GPU_CALL_H_
#define TF_FBN_OPS_CC_CORE_GPU_GPU_CALL_H_

#include <cstddef>
#include <string>

#include "cc/core/bn_grad.h"
#include "cc/core/gpu/bn_grad_gpu.h"

namespace fbn {

struct GpuCallError {
  enum Kind { kNone, kNoStream, kNoScratch, kCuda };
  Kind kind = kNone;
  std::string message;
  explicit operator bool() const { return kind != kNone; }
};

// `allocate(bytes)` returns device memory for the scratch, or null when none is granted; it is
// not called when the shape needs none.
template <typename T, typename Allocate>
GpuCallError RunGpuCall(const Params& params, const Tensors<T>& tensors, GpuStream stream,
                        Allocate&& allocate) {
  // A null stream is CUDA's legacy default stream: the kernels would run unordered with the
  // work around them on the shell's own stream.
  if (stream == nullptr) return {GpuCallError::kNoStream, "no CUDA stream"};
  const size_t bytes = GpuScratchBytes(params.shape);
  void* scratch = bytes > 0 ? allocate(bytes) : nullptr;
  if (bytes > 0 && scratch == nullptr) {
    return {GpuCallError::kNoScratch, "no " + std::to_string(bytes) + " bytes of GPU scratch"};
  }
  const int error = BatchNormGradGpu(params, tensors, scratch, stream);
  if (error != 0) return {GpuCallError::kCuda, std::string("CUDA error: ") + GpuErrorString(error)};
  return {};
}

}  // namespace fbn

#endif  // TF_FBN_OPS_CC_CORE_GPU_GPU_CALL_H_
