// The CPU custom-call targets: each handler (bn_grad_ffi_call.h, sync_grad_ffi_call.h,
// bn_forward_ffi_call.h) on the host platform, the core's CPU kernels split over XLA's intra-op
// thread pool.
#include "cc/xla_ffi/bn_forward_ffi.h"
#include "cc/xla_ffi/bn_forward_ffi_call.h"
#include "cc/xla_ffi/bn_grad_ffi.h"
#include "cc/xla_ffi/bn_grad_ffi_call.h"
#include "cc/xla_ffi/cpu/host_platform.h"
#include "cc/xla_ffi/sync_grad_ffi.h"
#include "cc/xla_ffi/sync_grad_ffi_call.h"

using fbn::xla_ffi::HostPlatform;

XLA_FFI_DEFINE_HANDLER_SYMBOL(FbnBatchNormGradHost, fbn::xla_ffi::GradHandler<HostPlatform>,
                              fbn::xla_ffi::BindGradCall<HostPlatform>());
XLA_FFI_DEFINE_HANDLER_SYMBOL(FbnSyncGradSumsHost, fbn::xla_ffi::SumsHandler<HostPlatform>,
                              fbn::xla_ffi::BindSumsCall<HostPlatform>());
XLA_FFI_DEFINE_HANDLER_SYMBOL(FbnSyncGradFromSumsHost,
                              fbn::xla_ffi::FromSumsHandler<HostPlatform>,
                              fbn::xla_ffi::BindFromSumsCall<HostPlatform>());
XLA_FFI_DEFINE_HANDLER_SYMBOL(FbnBatchNormForwardHost, fbn::xla_ffi::ForwardHandler<HostPlatform>,
                              fbn::xla_ffi::BindForwardCall<HostPlatform>());
