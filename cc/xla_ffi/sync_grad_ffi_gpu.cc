// The CUDA custom-call targets of synchronized batch norm's backward halves: the core's CUDA
// kernels in one Stage each, on XLA's stream (ffi_cuda_core.h). The count stays on the device,
// where the core reads it (Tensors::device_global_count). Compiled only into builds with CUDA.
#include "cc/core/bn_grad_gpu.h"
#include "cc/xla_ffi/ffi_cuda_core.h"
#include "cc/xla_ffi/sync_grad_ffi.h"
#include "cc/xla_ffi/sync_grad_ffi_call.h"

namespace fbn {
namespace xla_ffi {
namespace {

constexpr char kWhat[] = "synchronized batch-norm gradient";

ffi::Error SumsCuda(GpuStream stream, ffi::ScratchAllocator scratch_allocator,
                    ffi::AnyBuffer y_backprop, ffi::AnyBuffer x, ChannelVector mean,
                    ffi::Result<ChannelSums> sum_dy, ffi::Result<ChannelSums> sum_dy_xc,
                    bool channels_last) {
  const SumsCall call{y_backprop, x, mean, *sum_dy, *sum_dy_xc, channels_last};
  Params params;
  ffi::Error described = DescribeSumsCall(call, &params);
  if (described.failure()) return described;
  return WithCoreType(x.element_type(), [&](auto type) {
    return RunCudaCore(params, SumsTensors<decltype(type)>(call), stream, scratch_allocator,
                       kWhat);
  });
}

ffi::Error FromSumsCuda(GpuStream stream, ffi::ScratchAllocator scratch_allocator,
                        ffi::AnyBuffer y_backprop, ffi::AnyBuffer x, ChannelVector scale,
                        ChannelVector mean, ChannelVector variance, ChannelSums sum_dy,
                        ChannelSums sum_dy_xc, Count count,
                        ffi::Result<ffi::AnyBuffer> x_backprop,
                        ffi::Result<ChannelVector> scale_backprop,
                        ffi::Result<ChannelVector> offset_backprop, float epsilon,
                        bool channels_last) {
  const FromSumsCall call{y_backprop, x,           scale,           mean,
                          variance,   sum_dy,      sum_dy_xc,       count,
                          *x_backprop, *scale_backprop, *offset_backprop, epsilon,
                          channels_last};
  Params params;
  ffi::Error described = DescribeFromSumsCall(call, &params);
  if (described.failure()) return described;
  return WithCoreType(x.element_type(), [&](auto type) {
    Tensors<decltype(type)> tensors = FromSumsTensors<decltype(type)>(call);
    tensors.device_global_count = count.typed_data();
    return RunCudaCore(params, tensors, stream, scratch_allocator, kWhat);
  });
}

}  // namespace
}  // namespace xla_ffi
}  // namespace fbn

XLA_FFI_DEFINE_HANDLER_SYMBOL(FbnSyncGradSumsCuda, fbn::xla_ffi::SumsCuda,
                              fbn::xla_ffi::BindSumsCall(
                                  xla::ffi::Ffi::Bind()
                                      .Ctx<xla::ffi::PlatformStream<fbn::GpuStream>>()
                                      .Ctx<xla::ffi::ScratchAllocator>()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(FbnSyncGradFromSumsCuda, fbn::xla_ffi::FromSumsCuda,
                              fbn::xla_ffi::BindFromSumsCall(
                                  xla::ffi::Ffi::Bind()
                                      .Ctx<xla::ffi::PlatformStream<fbn::GpuStream>>()
                                      .Ctx<xla::ffi::ScratchAllocator>()));
