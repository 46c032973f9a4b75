// The CUDA platform of the FFI handlers: the context a CUDA call decodes (the stream XLA runs
// the program on, its scratch allocator) and how the core runs on it (cc/core/gpu/gpu_call.h).
// The handlers are written once for any platform (bn_grad_ffi_call.h, sync_grad_ffi_call.h, bn_forward_ffi_call.h);
// this is what CUDA adds. No CUDA headers: the FFI hands the stream over as the CUstream_st*
// the core takes.
#ifndef TF_FBN_OPS_CC_XLA_FFI_GPU_CUDA_PLATFORM_H_
#define TF_FBN_OPS_CC_XLA_FFI_GPU_CUDA_PLATFORM_H_

#include <optional>
#include <string>
#include <utility>

#include "cc/core/bn_grad.h"
#include "cc/core/gpu/bn_grad_gpu.h"
#include "cc/core/gpu/gpu_call.h"
#include "cc/xla_ffi/sync_grad_ffi_call.h"
#include "cc/xla_ffi/xla_ffi_api.h"

namespace fbn {
namespace xla_ffi {

// The core's scratch holds doubles. XLA's FFI refuses any alignment above 16 bytes (its
// DeviceMemory_Allocate answers "Unsupported alignment"), so ask for exactly what it grants.
inline constexpr size_t kScratchAlignment = 16;

struct CudaPlatform {
  GpuStream stream;
  ::xla::ffi::ScratchAllocator scratch_allocator;

  // Enqueues one call of the core, the gradient or the forward (gpu_call.h); errors name
  // `what`.
  template <typename CoreParams, typename CoreTensors>
  ::xla::ffi::Error Run(const CoreParams& params, const CoreTensors& tensors, const char* what) {
    namespace ffi = ::xla::ffi;
    const GpuCallError error = RunGpuCall(params, tensors, stream, [&](size_t bytes) -> void* {
      return scratch_allocator.Allocate(bytes, kScratchAlignment).value_or(nullptr);
    });
    const std::string prefix = std::string(what) + ": ";
    switch (error.kind) {
      case GpuCallError::kNone:
        return ffi::Error::Success();
      case GpuCallError::kNoStream:
        return ffi::Error::Internal(prefix + "XLA passed " + error.message);
      case GpuCallError::kNoScratch:
        return ffi::Error(ffi::ErrorCode::kResourceExhausted, prefix + error.message);
      case GpuCallError::kCuda:
        break;
    }
    return ffi::Error::Internal(prefix + error.message);
  }

  // Synchronized batch norm's global count stays on the device, where the core reads it
  // (Tensors::device_global_count) and checks it.
  template <typename T>
  ::xla::ffi::Error UseGlobalCount(Count count, Params*, Tensors<T>* tensors) {
    tensors->device_global_count = count.typed_data();
    return ::xla::ffi::Error::Success();
  }
};

}  // namespace xla_ffi
}  // namespace fbn

// Ffi::Bind().Ctx<CudaPlatform>(): the stream and the scratch allocator, decoded as XLA
// decodes them.
template <>
struct xla::ffi::CtxDecoding<fbn::xla_ffi::CudaPlatform> {
  using Type = fbn::xla_ffi::CudaPlatform;
  static std::optional<Type> Decode(const XLA_FFI_Api* api, XLA_FFI_ExecutionContext* ctx,
                                    DiagnosticEngine& diagnostic) {
    std::optional<fbn::GpuStream> stream =
        CtxDecoding<PlatformStream<fbn::GpuStream>>::Decode(api, ctx, diagnostic);
    if (!stream.has_value()) return std::nullopt;
    std::optional<ScratchAllocator> scratch =
        CtxDecoding<ScratchAllocator>::Decode(api, ctx, diagnostic);
    if (!scratch.has_value()) return std::nullopt;
    return Type{*stream, std::move(*scratch)};
  }
};

#endif  // TF_FBN_OPS_CC_XLA_FFI_GPU_CUDA_PLATFORM_H_
