#include "cc/core/cpu/pool_parallel_for.h"

#include <algorithm>
#include <atomic>
#include <utility>

#include "cc/core/cpu/spin_wait.h"

namespace fbn {
namespace {

// Shared by the caller and its pool tasks. A task the pool starts after the last unit was taken
// finds the counter past the end and returns at once, without touching `fn` (which by then may
// be gone), so the state lives as long as its last holder. Counted by hand rather than by a
// shared_ptr: libstdc++'s shared_ptr reads glibc 2.32's __libc_single_threaded, which would
// raise the library's glibc floor above TensorFlow's wheels' (build_support/glibc_floor.py).
struct SharedUnits {
  SharedUnits(int64_t count, const RangeFn* fn, int64_t holders)
      : count(count), fn(fn), holders(holders) {}

  void Release() {
    if (holders.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

  void Work() {
    for (int64_t u = next++; u < count; u = next++) {
      (*fn)(u, u + 1);
      finished.fetch_add(1, std::memory_order_release);
    }
  }

  // Once the caller's own Work() returns, only units other threads took are left: at most one
  // per thread.
  void WaitForAll() const {
    SpinWait([this] { return finished.load(std::memory_order_acquire) == count; });
  }

  const int64_t count;
  const RangeFn* const fn;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> finished{0};
  std::atomic<int64_t> holders;
};

}  // namespace

ParallelFor PoolParallelFor(int64_t threads, ScheduleFn schedule) {
  auto run = [threads, schedule = std::move(schedule)](int64_t count, int64_t /*cost_per_unit*/,
                                                       const RangeFn& fn) {
    const int64_t workers = std::min<int64_t>(threads, count);
    if (workers <= 1) {
      if (count > 0) fn(0, count);
      return;
    }
    // The caller and workers - 1 tasks hold it.
    auto* units = new SharedUnits(count, &fn, workers);
    for (int64_t w = 1; w < workers; ++w) {
      schedule([units] {
        units->Work();
        units->Release();
      });
    }
    units->Work();
    units->WaitForAll();
    units->Release();
  };
  return {std::move(run), std::max<int64_t>(1, threads)};
}

}  // namespace fbn
