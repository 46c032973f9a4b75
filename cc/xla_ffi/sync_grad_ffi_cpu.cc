// The CPU custom-call targets of synchronized batch norm's backward halves: the core's CPU
// kernels in one Stage each, split over XLA's intra-op thread pool.
#include "cc/xla_ffi/ffi_parallel_for.h"
#include "cc/xla_ffi/sync_grad_ffi.h"
#include "cc/xla_ffi/sync_grad_ffi_call.h"

namespace fbn {
namespace xla_ffi {
namespace {

constexpr char kWhat[] = "synchronized batch-norm gradient";

ffi::Error SumsHost(ffi::ThreadPool pool, ffi::AnyBuffer y_backprop, ffi::AnyBuffer x,
                    ChannelVector mean, ffi::Result<ChannelSums> sum_dy,
                    ffi::Result<ChannelSums> sum_dy_xc, bool channels_last) {
  const SumsCall call{y_backprop, x, mean, *sum_dy, *sum_dy_xc, channels_last};
  Params params;
  ffi::Error described = DescribeSumsCall(call, &params);
  if (described.failure()) return described;
  return WithCoreType(x.element_type(), [&](auto type) {
    return RunCpuCore(params, SumsTensors<decltype(type)>(call), pool, kWhat);
  });
}

ffi::Error FromSumsHost(ffi::ThreadPool pool, ffi::AnyBuffer y_backprop, ffi::AnyBuffer x,
                        ChannelVector scale, ChannelVector mean, ChannelVector variance,
                        ChannelSums sum_dy, ChannelSums sum_dy_xc, Count count,
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
  params.global_count = *count.typed_data();  // host memory on XLA's CPU backend
  ffi::Error counted = CheckGlobalCount(params.global_count, params.shape);
  if (counted.failure()) return counted;
  return WithCoreType(x.element_type(), [&](auto type) {
    return RunCpuCore(params, FromSumsTensors<decltype(type)>(call), pool, kWhat);
  });
}

}  // namespace
}  // namespace xla_ffi
}  // namespace fbn

XLA_FFI_DEFINE_HANDLER_SYMBOL(FbnSyncGradSumsHost, fbn::xla_ffi::SumsHost,
                              fbn::xla_ffi::BindSumsCall(
                                  xla::ffi::Ffi::Bind().Ctx<xla::ffi::ThreadPool>()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(FbnSyncGradFromSumsHost, fbn::xla_ffi::FromSumsHost,
                              fbn::xla_ffi::BindFromSumsCall(
                                  xla::ffi::Ffi::Bind().Ctx<xla::ffi::ThreadPool>()));
