#include "cc/runtime/cpu_parallel_for.h"

#include <utility>

#include "cc/core/cpu/pool_parallel_for.h"
#include "tensorflow/core/framework/device_base.h"
#include "tensorflow/core/platform/threadpool.h"

namespace tensorflow {
namespace fbn_kernels {

// The pool's own ParallelFor waits for every block it scheduled, sleeping on a barrier: each
// call would pay a pool thread's wake-up before its block can start and the caller's wake-up
// after the last one (tens of microseconds each on a virtual machine). The core's pool
// adapter takes units one at a time and never sleeps (cc/core/cpu/pool_parallel_for.h).
fbn::ParallelFor IntraOpParallelFor(OpKernelContext* ctx) {
  thread::ThreadPool* pool = ctx->device()->tensorflow_cpu_worker_threads()->workers;
  return fbn::PoolParallelFor(pool->NumThreads(), [pool](std::function<void()> task) {
    pool->Schedule(std::move(task));
  });
}

}  // namespace fbn_kernels
}  // namespace tensorflow
