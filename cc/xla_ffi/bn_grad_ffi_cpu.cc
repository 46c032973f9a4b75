// The CPU custom-call target: the core's CPU kernels, split over XLA's intra-op thread pool.
#include "cc/xla_ffi/bn_grad_ffi.h"
#include "cc/xla_ffi/bn_grad_ffi_call.h"
#include "cc/xla_ffi/ffi_parallel_for.h"

namespace fbn {
namespace xla_ffi {
namespace {

ffi::Error GradHost(ffi::ThreadPool pool, ffi::AnyBuffer y_backprop, ffi::AnyBuffer x,
                    ChannelVector scale, ChannelVector mean, ChannelVector variance,
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
    return RunCpuCore(params, tensors, pool, "batch-norm gradient");
  });
}

}  // namespace
}  // namespace xla_ffi
}  // namespace fbn

XLA_FFI_DEFINE_HANDLER_SYMBOL(FbnBatchNormGradHost, fbn::xla_ffi::GradHost,
                              fbn::xla_ffi::BindGradCall(
                                  xla::ffi::Ffi::Bind().Ctx<xla::ffi::ThreadPool>()));
