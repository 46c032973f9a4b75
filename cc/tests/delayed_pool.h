// A thread pool for tests of cc/core/cpu/pool_parallel_for.h: each scheduled task starts a set
// delay after it was scheduled, or is held until Release(), so that threads join a call late,
// or only after the call has returned (the late tasks a real pool can produce).
#ifndef TF_FBN_OPS_CC_TESTS_DELAYED_POOL_H_
#define TF_FBN_OPS_CC_TESTS_DELAYED_POOL_H_

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace fbn {
namespace testing {

class DelayedPool {
 public:
  using Clock = std::chrono::steady_clock;

  // held: tasks wait for Release(); otherwise each starts `delay` after it was scheduled.
  DelayedPool(int threads, std::chrono::microseconds delay, bool held)
      : delay_(delay), held_(held) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Work(); });
  }
  ~DelayedPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      held_ = false;
    }
    ready_.notify_all();
    for (auto& t : threads_) t.join();
  }

  void Schedule(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      tasks_.emplace_back(Clock::now() + delay_, std::move(task));
    }
    ready_.notify_one();
  }

  void Release() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      held_ = false;
    }
    ready_.notify_all();
  }

 private:
  void Work() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      ready_.wait(lock, [this] { return stop_ || (!held_ && !tasks_.empty()); });
      if (tasks_.empty()) return;  // stopping, nothing left
      auto [start, task] = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      std::this_thread::sleep_until(start);
      task();
      lock.lock();
    }
  }

  const std::chrono::microseconds delay_;
  std::mutex mu_;
  std::condition_variable ready_;
  std::deque<std::pair<Clock::time_point, std::function<void()>>> tasks_;
  bool held_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace testing
}  // namespace fbn

#endif  // TF_FBN_OPS_CC_TESTS_DELAYED_POOL_H_
