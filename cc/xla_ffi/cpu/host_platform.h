// The CPU platform of the FFI handlers: the context a host call decodes (XLA's intra-op thread
// pool) and how the core runs on it. The handlers are written once for any platform
// (bn_grad_ffi_call.h, sync_grad_ffi_call.h, bn_forward_ffi_call.h); this is what the CPU adds.
#ifndef TF_FBN_OPS_CC_XLA_FFI_CPU_HOST_PLATFORM_H_
#define TF_FBN_OPS_CC_XLA_FFI_CPU_HOST_PLATFORM_H_

#include <exception>
#include <optional>
#include <string>

#include "cc/core/bn_forward.h"
#include "cc/core/bn_grad.h"
#include "cc/xla_ffi/cpu/ffi_parallel_for.h"
#include "cc/xla_ffi/sync_grad_ffi_call.h"
#include "cc/xla_ffi/xla_ffi_api.h"

namespace fbn {
namespace xla_ffi {

template <typename T>
void RunCpuCore(const Params& params, const Tensors<T>& tensors, const ParallelFor& parallel_for) {
  BatchNormGradCpu(params, tensors, parallel_for);
}

template <typename T>
void RunCpuCore(const ForwardParams& params, const ForwardTensors<T>& tensors,
                const ParallelFor& parallel_for) {
  BatchNormForwardCpu(params, tensors, parallel_for);
}

struct HostPlatform {
  ::xla::ffi::ThreadPool pool;

  // One call of the core's CPU kernels on the pool: the gradient (Params, Tensors) or the
  // forward (ForwardParams, ForwardTensors). The core's results do not depend on how its work is
  // split, so the bits are those of the TensorFlow CPU kernels. Nothing may unwind into XLA's C
  // frames: the core's only throw, a failed allocation, becomes an Internal error that names
  // `what`.
  template <typename CoreParams, typename CoreTensors>
  ::xla::ffi::Error Run(const CoreParams& params, const CoreTensors& tensors, const char* what) {
    const ParallelFor parallel_for = FfiParallelFor(pool);
    try {
      RunCpuCore(params, tensors, parallel_for);
      return ::xla::ffi::Error::Success();
    } catch (const std::exception& e) {
      return ::xla::ffi::Error::Internal(std::string(what) + " failed: " + e.what());
    }
  }

  // Synchronized batch norm's global count is host memory on XLA's CPU backend: read and
  // checked here, before the core runs.
  template <typename T>
  ::xla::ffi::Error UseGlobalCount(Count count, Params* params, Tensors<T>*) {
    params->global_count = *count.typed_data();
    return CheckGlobalCount(params->global_count, params->shape);
  }
};

}  // namespace xla_ffi
}  // namespace fbn

// Ffi::Bind().Ctx<HostPlatform>(): the thread pool, decoded as XLA decodes it.
template <>
struct xla::ffi::CtxDecoding<fbn::xla_ffi::HostPlatform> {
  using Type = fbn::xla_ffi::HostPlatform;
  static std::optional<Type> Decode(const XLA_FFI_Api* api, XLA_FFI_ExecutionContext* ctx,
                                    DiagnosticEngine& diagnostic) {
    std::optional<ThreadPool> pool = CtxDecoding<ThreadPool>::Decode(api, ctx, diagnostic);
    if (!pool.has_value()) return std::nullopt;
    return Type{*pool};
  }
};

#endif  // TF_FBN_OPS_CC_XLA_FFI_CPU_HOST_PLATFORM_H_
