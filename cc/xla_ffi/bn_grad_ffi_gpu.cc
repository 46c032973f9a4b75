// The CUDA custom-call target: the core's CUDA kernels on the stream XLA runs the program on,
// with their scratch from XLA's allocator. Compiled only into builds with CUDA; no CUDA headers
// here (the FFI hands the stream over as the CUstream_st* the core takes).
#include <optional>
#include <string>

#include "cc/core/bn_grad_gpu.h"
#include "cc/xla_ffi/bn_grad_ffi.h"
#include "cc/xla_ffi/bn_grad_ffi_call.h"

namespace fbn {
namespace xla_ffi {
namespace {

// The core's scratch holds doubles. XLA's FFI refuses any alignment above 16 bytes (its
// DeviceMemory_Allocate answers "Unsupported alignment"), so ask for exactly what it grants.
constexpr size_t kScratchAlignment = 16;

ffi::Error GradCuda(GpuStream stream, ffi::ScratchAllocator scratch_allocator,
                    ffi::AnyBuffer y_backprop, ffi::AnyBuffer x, ChannelVector scale,
                    ChannelVector mean, ChannelVector variance,
                    ffi::Result<ffi::AnyBuffer> x_backprop,
                    ffi::Result<ChannelVector> scale_backprop,
                    ffi::Result<ChannelVector> offset_backprop, float epsilon, bool is_training,
                    bool channels_last, bool saved_inv_std) {
  const GradCall call{y_backprop,      x,           scale,         mean,
                      variance,        *x_backprop, *scale_backprop, *offset_backprop,
                      epsilon,         is_training, channels_last, saved_inv_std};
  Params params;
  ffi::Error described = DescribeCall(call, &params);
  if (described.failure()) return described;
  if (stream == nullptr) {
    // CUDA's legacy default stream would run the kernels unordered with XLA's own work.
    return ffi::Error::Internal("batch-norm gradient: XLA passed no CUDA stream");
  }
  void* scratch = nullptr;
  const size_t bytes = GpuScratchBytes(params.shape);
  if (bytes > 0) {
    const std::optional<void*> allocated = scratch_allocator.Allocate(bytes, kScratchAlignment);
    if (!allocated.has_value()) {
      return ffi::Error(ffi::ErrorCode::kResourceExhausted,
                        "batch-norm gradient: no " + std::to_string(bytes) +
                            " bytes of GPU scratch");
    }
    scratch = *allocated;
  }
  return WithCoreTensors(call, [&](const auto& tensors) {
    const int error = BatchNormGradGpu(params, tensors, scratch, stream);
    if (error != 0) {
      return ffi::Error::Internal(std::string("batch-norm gradient: CUDA error: ") +
                                  GpuErrorString(error));
    }
    return ffi::Error::Success();
  });
}

}  // namespace
}  // namespace xla_ffi
}  // namespace fbn

XLA_FFI_DEFINE_HANDLER_SYMBOL(FbnBatchNormGradCuda, fbn::xla_ffi::GradCuda,
                              fbn::xla_ffi::BindGradCall(
                                  xla::ffi::Ffi::Bind()
                                      .Ctx<xla::ffi::PlatformStream<fbn::GpuStream>>()
                                      .Ctx<xla::ffi::ScratchAllocator>()));
