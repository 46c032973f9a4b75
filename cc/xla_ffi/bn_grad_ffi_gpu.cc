// The CUDA custom-call target: the core's CUDA kernels on the stream XLA runs the program on
// (ffi_cuda_core.h). Compiled only into builds with CUDA.
#include "cc/core/bn_grad_gpu.h"
#include "cc/xla_ffi/bn_grad_ffi.h"
#include "cc/xla_ffi/bn_grad_ffi_call.h"
#include "cc/xla_ffi/ffi_cuda_core.h"

namespace fbn {
namespace xla_ffi {
namespace {

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
  return WithCoreTensors(call, [&](const auto& tensors) {
    return RunCudaCore(params, tensors, stream, scratch_allocator, "batch-norm gradient");
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
