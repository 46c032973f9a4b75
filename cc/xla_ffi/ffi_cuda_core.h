// Runs the core's CUDA kernels for one custom call: on the stream XLA runs the program on, with
// their scratch from XLA's allocator. No CUDA headers (the FFI hands the stream over as the
// CUstream_st* the core takes), so the handlers that include it compile without them.
#ifndef TF_FBN_OPS_CC_XLA_FFI_FFI_CUDA_CORE_H_
#define TF_FBN_OPS_CC_XLA_FFI_FFI_CUDA_CORE_H_

#include <optional>
#include <string>

#include "cc/core/bn_grad.h"
#include "cc/core/bn_grad_gpu.h"
#include "cc/xla_ffi/xla_ffi_api.h"

namespace fbn {
namespace xla_ffi {

// The core's scratch holds doubles. XLA's FFI refuses any alignment above 16 bytes (its
// DeviceMemory_Allocate answers "Unsupported alignment"), so ask for exactly what it grants.
inline constexpr size_t kScratchAlignment = 16;

// Enqueues one call of the core; errors name `what`.
template <typename T>
::xla::ffi::Error RunCudaCore(const Params& params, const Tensors<T>& tensors, GpuStream stream,
                              ::xla::ffi::ScratchAllocator& scratch_allocator,
                              const std::string& what) {
  namespace ffi = ::xla::ffi;
  if (stream == nullptr) {
    // CUDA's legacy default stream would run the kernels unordered with XLA's own work.
    return ffi::Error::Internal(what + ": XLA passed no CUDA stream");
  }
  void* scratch = nullptr;
  const size_t bytes = GpuScratchBytes(params.shape);
  if (bytes > 0) {
    const std::optional<void*> allocated = scratch_allocator.Allocate(bytes, kScratchAlignment);
    if (!allocated.has_value()) {
      return ffi::Error(ffi::ErrorCode::kResourceExhausted,
                        what + ": no " + std::to_string(bytes) + " bytes of GPU scratch");
    }
    scratch = *allocated;
  }
  const int error = BatchNormGradGpu(params, tensors, scratch, stream);
  if (error != 0) return ffi::Error::Internal(what + ": CUDA error: " + GpuErrorString(error));
  return ffi::Error::Success();
}

}  // namespace xla_ffi
}  // namespace fbn

#endif  // TF_FBN_OPS_CC_XLA_FFI_FFI_CUDA_CORE_H_
