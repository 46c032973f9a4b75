// A ParallelFor (bn_grad.h) over a thread pool that can only schedule tasks: TensorFlow's
// intra-op pool and XLA's, through their adapters (cc/runtime/cpu_parallel_for.cc,
// cc/xla_ffi/cpu/ffi_parallel_for.cc).
#ifndef TF_FBN_OPS_CC_CORE_CPU_POOL_PARALLEL_FOR_H_
#define TF_FBN_OPS_CC_CORE_CPU_POOL_PARALLEL_FOR_H_

#include <cstdint>
#include <functional>

#include "cc/core/bn_grad.h"

namespace fbn {

// Hands a task to a pool, which runs it once, on some thread, at some later time (or never
// starts it before the call that scheduled it has returned).
using ScheduleFn = std::function<void(std::function<void()> task)>;

// Units go one at a time from a shared counter to the calling thread and to up to
// `threads` - 1 tasks handed to `schedule`. The caller works too and waits only for units
// already taken, spinning rather than sleeping: it never waits for a task to start, so a pool
// whose threads are slow to wake (or busy, or the caller's own) costs time only where it helps,
// and the caller is awake the moment the last unit is done.
ParallelFor PoolParallelFor(int64_t threads, ScheduleFn schedule);

}  // namespace fbn

#endif  // TF_FBN_OPS_CC_CORE_CPU_POOL_PARALLEL_FOR_H_
