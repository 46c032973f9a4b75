#include "cc/kernels/cpu_parallel_for.h"

#include "tensorflow/core/framework/device_base.h"
#include "tensorflow/core/platform/threadpool.h"

namespace tensorflow {
namespace fbn_kernels {

fbn::ParallelFor IntraOpParallelFor(OpKernelContext* ctx) {
  thread::ThreadPool* pool = ctx->device()->tensorflow_cpu_worker_threads()->workers;
  return [pool](int64_t count, int64_t cost_per_unit, const fbn::RangeFn& fn) {
    pool->ParallelFor(count, cost_per_unit, fn);
  };
}

}  // namespace fbn_kernels
}  // namespace tensorflow
