#include "cc/kernels/cpu_parallel_for.h"

#include <algorithm>
#include <atomic>
#include <limits>

#include "tensorflow/core/framework/device_base.h"
#include "tensorflow/core/platform/threadpool.h"

namespace tensorflow {
namespace fbn_kernels {

// One task per worker (the calling thread and NumThreads() - 1 pool threads), each taking the
// next unit from a shared counter until none is left. The pool's own ParallelFor would cut the
// units into at most four blocks per thread, and a block left to one thread at the end leaves
// the other idle for up to an eighth of the call; one unit at a time, the slowest finishes at
// most one unit after the others.
fbn::ParallelFor IntraOpParallelFor(OpKernelContext* ctx) {
  thread::ThreadPool* pool = ctx->device()->tensorflow_cpu_worker_threads()->workers;
  return [pool](int64_t count, int64_t /*cost_per_unit*/, const fbn::RangeFn& fn) {
    const int64_t workers = std::min<int64_t>(pool->NumThreads(), count);
    if (workers <= 1) {
      fn(0, count);
      return;
    }
    std::atomic<int64_t> next{0};
    // A cost this high makes the pool run each of the `workers` tasks on a thread of its own.
    pool->ParallelFor(workers, std::numeric_limits<int32_t>::max(),
                      [&](int64_t begin, int64_t end) {
                        for (int64_t task = begin; task < end; ++task) {
                          for (int64_t u = next++; u < count; u = next++) fn(u, u + 1);
                        }
                      });
  };
}

}  // namespace fbn_kernels
}  // namespace tensorflow
