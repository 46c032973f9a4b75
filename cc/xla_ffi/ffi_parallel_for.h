// Adapts XLA's intra-op thread pool, as the FFI hands it to a handler, to the core's ParallelFor,
// and runs the core's CPU kernels on it.
#ifndef TF_FBN_OPS_CC_XLA_FFI_FFI_PARALLEL_FOR_H_
#define TF_FBN_OPS_CC_XLA_FFI_FFI_PARALLEL_FOR_H_

#include <exception>
#include <string>

#include "cc/core/bn_grad.h"
#include "cc/xla_ffi/xla_ffi_api.h"

namespace fbn {
namespace xla_ffi {

// Units go one at a time from a shared counter to the calling thread and to up to
// num_threads() - 1 tasks on the pool. The caller works too and waits only for units already
// taken, so the call finishes even when the pool is busy (or is the pool the caller runs on).
// Valid for the duration of the handler call that received `pool`.
ParallelFor FfiParallelFor(::xla::ffi::ThreadPool pool);

// One call of the core's CPU kernels on `pool`. The core's results do not depend on how its
// work is split, so the bits are those of the TensorFlow CPU kernels. Nothing may unwind into
// XLA's C frames: the core's only throw, a failed allocation, becomes an Internal error that
// names `what`.
template <typename T>
::xla::ffi::Error RunCpuCore(const Params& params, const Tensors<T>& tensors,
                             ::xla::ffi::ThreadPool pool, const char* what) {
  const ParallelFor parallel_for = FfiParallelFor(pool);
  try {
    BatchNormGradCpu(params, tensors, parallel_for);
    return ::xla::ffi::Error::Success();
  } catch (const std::exception& e) {
    return ::xla::ffi::Error::Internal(std::string(what) + " failed: " + e.what());
  }
}

}  // namespace xla_ffi
}  // namespace fbn

#endif  // TF_FBN_OPS_CC_XLA_FFI_FFI_PARALLEL_FOR_H_
