#include "cc/xla_ffi/cpu/ffi_parallel_for.h"

#include <utility>

#include "cc/core/cpu/pool_parallel_for.h"

namespace fbn {
namespace xla_ffi {

ParallelFor FfiParallelFor(::xla::ffi::ThreadPool pool) {
  return PoolParallelFor(pool.num_threads(), [pool](std::function<void()> task) mutable {
    pool.Schedule(std::move(task));
  });
}

}  // namespace xla_ffi
}  // namespace fbn
