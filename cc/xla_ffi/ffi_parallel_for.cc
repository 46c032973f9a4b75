#include "cc/xla_ffi/ffi_parallel_for.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>

namespace fbn {
namespace xla_ffi {
namespace {

// Shared by the caller and its pool tasks. A task the pool starts after the last unit was taken
// finds the counter past the end and returns at once, without touching `fn` (which by then may
// be gone), so the state lives as long as its last holder.
struct SharedUnits {
  SharedUnits(int64_t count, const RangeFn* fn) : count(count), fn(fn) {}

  void Work() {
    for (int64_t u = next++; u < count; u = next++) {
      (*fn)(u, u + 1);
      if (++finished == count) {
        std::lock_guard<std::mutex> lock(mutex);
        all_finished.notify_all();
      }
    }
  }

  void WaitForAll() {
    std::unique_lock<std::mutex> lock(mutex);
    all_finished.wait(lock, [this] { return finished.load() == count; });
  }

  const int64_t count;
  const RangeFn* const fn;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> finished{0};
  std::mutex mutex;
  std::condition_variable all_finished;
};

}  // namespace

ParallelFor FfiParallelFor(::xla::ffi::ThreadPool pool) {
  return [pool](int64_t count, int64_t /*cost_per_unit*/, const RangeFn& fn) mutable {
    const int64_t workers = std::min<int64_t>(pool.num_threads(), count);
    if (workers <= 1) {
      fn(0, count);
      return;
    }
    auto units = std::make_shared<SharedUnits>(count, &fn);
    for (int64_t w = 1; w < workers; ++w) pool.Schedule([units] { units->Work(); });
    units->Work();
    units->WaitForAll();
  };
}

}  // namespace xla_ffi
}  // namespace fbn
