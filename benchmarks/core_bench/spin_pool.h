// A pool whose threads spin between calls, as a busy TensorFlow or OpenMP pool's do, so that
// the core and the streaming kernel are timed without a thread's wake-up in either.
#ifndef TF_FBN_OPS_BENCHMARKS_CORE_BENCH_SPIN_POOL_H_
#define TF_FBN_OPS_BENCHMARKS_CORE_BENCH_SPIN_POOL_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "cc/core/bn_grad.h"
#include "cc/core/cpu/spin_wait.h"

namespace fbn {
namespace bench {

class SpinPool {
 public:
  explicit SpinPool(int threads) : threads_(threads) {
    for (int t = 1; t < threads; ++t) workers_.emplace_back([this, t] { Work(t); });
  }
  ~SpinPool() {
    stop_ = true;
    generation_.fetch_add(1);
    for (auto& w : workers_) w.join();
  }
  int threads() const { return threads_; }

  // task(worker) on every worker at once, the caller being worker 0.
  void Run(const std::function<void(int)>& task) {
    task_ = &task;
    done_.store(0);
    generation_.fetch_add(1, std::memory_order_release);
    task(0);
    SpinWait([this] { return done_.load(std::memory_order_acquire) == threads_ - 1; });
  }

  // The core's ParallelFor: units one at a time from a shared counter, as TensorFlow's adapter
  // hands them out (cc/core/cpu/pool_parallel_for.h).
  ParallelFor AsParallelFor() {
    auto run = [this](int64_t count, int64_t, const RangeFn& fn) {
      if (threads_ == 1 || count == 1) return fn(0, count);
      std::atomic<int64_t> next{0};
      Run([&](int) {
        for (int64_t u = next++; u < count; u = next++) fn(u, u + 1);
      });
    };
    return {run, threads_};
  }

 private:
  void Work(int t) {
    uint64_t seen = 0;
    for (;;) {
      uint64_t now;
      SpinWait([&] { return (now = generation_.load(std::memory_order_acquire)) != seen; });
      seen = now;
      if (stop_) return;
      (*task_)(t);
      done_.fetch_add(1, std::memory_order_release);
    }
  }

  const int threads_;
  std::vector<std::thread> workers_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> done_{0};
  const std::function<void(int)>* task_ = nullptr;
  std::atomic<bool> stop_{false};
};

}  // namespace bench
}  // namespace fbn

#endif  // TF_FBN_OPS_BENCHMARKS_CORE_BENCH_SPIN_POOL_H_
