// Adapts XLA's intra-op thread pool, as the FFI hands it to a handler, to the core's
// ParallelFor.
#ifndef TF_FBN_OPS_CC_XLA_FFI_CPU_FFI_PARALLEL_FOR_H_
#define TF_FBN_OPS_CC_XLA_FFI_CPU_FFI_PARALLEL_FOR_H_

#include "cc/core/bn_grad.h"
#include "cc/xla_ffi/xla_ffi_api.h"

namespace fbn {
namespace xla_ffi {

// Units go one at a time from a shared counter to the calling thread and to up to
// num_threads() - 1 tasks on the pool. The caller works too and waits only for units already
// taken, so the call finishes even when the pool is busy (or is the pool the caller runs on).
// Valid for the duration of the handler call that received `pool`.
ParallelFor FfiParallelFor(::xla::ffi::ThreadPool pool);

}  // namespace xla_ffi
}  // namespace fbn

#endif  // TF_FBN_OPS_CC_XLA_FFI_CPU_FFI_PARALLEL_FOR_H_
