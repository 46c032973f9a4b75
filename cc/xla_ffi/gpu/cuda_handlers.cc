// The CUDA custom-call targets: each handler (bn_grad_ffi_call.h, sync_grad_ffi_call.h,
// bn_forward_ffi_call.h) on the CUDA platform, the core's CUDA kernels on the stream XLA runs
// the program on. Compiled only into builds with CUDA.
#include "cc/xla_ffi/bn_forward_ffi.h"
#include "cc/xla_ffi/bn_forward_ffi_call.h"
#include "cc/xla_ffi/bn_grad_ffi.h"
#include "cc/xla_ffi/bn_grad_ffi_call.h"
#include "cc/xla_ffi/gpu/cuda_platform.h"
#include "cc/xla_ffi/sync_grad_ffi.h"
#include "cc/xla_ffi/sync_grad_ffi_call.h"

using fbn::xla_ffi::CudaPlatform;

XLA_FFI_DEFINE_HANDLER_SYMBOL(FbnBatchNormGradCuda, fbn::xla_ffi::GradHandler<CudaPlatform>,
                              fbn::xla_ffi::BindGradCall<CudaPlatform>());
XLA_FFI_DEFINE_HANDLER_SYMBOL(FbnSyncGradSumsCuda, fbn::xla_ffi::SumsHandler<CudaPlatform>,
                              fbn::xla_ffi::BindSumsCall<CudaPlatform>());
XLA_FFI_DEFINE_HANDLER_SYMBOL(FbnSyncGradFromSumsCuda,
                              fbn::xla_ffi::FromSumsHandler<CudaPlatform>,
                              fbn::xla_ffi::BindFromSumsCall<CudaPlatform>());
XLA_FFI_DEFINE_HANDLER_SYMBOL(FbnBatchNormForwardCuda, fbn::xla_ffi::ForwardHandler<CudaPlatform>,
                              fbn::xla_ffi::BindForwardCall<CudaPlatform>());
