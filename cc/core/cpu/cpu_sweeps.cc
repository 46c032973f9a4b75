#include "cc/core/cpu/cpu_sweeps.h"

#include <algorithm>
#include <atomic>
#include <memory>

#include "cc/core/ieee_arithmetic.h"
#include "cc/core/cpu/spin_wait.h"

namespace fbn {
namespace {

// At most this many threads take part in one call (more would find nothing left to do on any
// shape this library sees; the bound only sizes the ParallelFor call).
constexpr int64_t kMaxParticipants = 64;

// Per-unit bookkeeping, reused across calls on the calling thread (no allocation per call).
struct UnitBook {
  std::unique_ptr<int32_t[]> owner;  // participant that ran the unit in the first sweep
  std::unique_ptr<std::atomic<uint8_t>[]> taken;  // taken in the second sweep
  int64_t capacity = 0;

  void Reserve(int64_t units) {
    if (units <= capacity) return;
    owner.reset(new int32_t[units]);
    taken.reset(new std::atomic<uint8_t>[units]);
    capacity = units;
  }
};

// The state of one RunSweeps call, on the caller's stack. The ParallelFor returns only once
// every participation has returned, so nothing outlives it.
class Sweeps {
 public:
  Sweeps(const SweepPlan& plan, const UnitFn& first, const BetweenStep& between,
         const UnitFn& second, UnitBook* book)
      : units_(plan.units), first_(first), between_(between), second_(second), book_(book) {
    if (second_) {
      for (int64_t u = 0; u < units_; ++u) book_->taken[u].store(0, std::memory_order_relaxed);
    }
  }

  // One thread's part: as many first-sweep units as it can take; then the wait for the others'
  // first-sweep units and as many parts of the step as it can take; then (two sweeps) the wait
  // for the step's other parts and second-sweep units.
  void Participate() {
    ScopedIeeeArithmetic ieee;
    const int32_t id = joined_.fetch_add(1, std::memory_order_relaxed);
    for (int64_t u = next_.fetch_add(1); u < units_; u = next_.fetch_add(1)) {
      if (second_) book_->owner[u] = id;
      first_(u);
      done_.fetch_add(1, std::memory_order_acq_rel);
    }
    if (between_.parts == 0 && !second_) return;
    SpinWait([this] { return done_.load(std::memory_order_acquire) == units_; });
    for (int64_t p = next_part_.fetch_add(1); p < between_.parts; p = next_part_.fetch_add(1)) {
      between_.part(p);
      parts_done_.fetch_add(1, std::memory_order_acq_rel);
    }
    if (!second_) return;
    SpinWait([this] { return parts_done_.load(std::memory_order_acquire) == between_.parts; });
    for (int64_t u = units_ - 1; u >= 0; --u) {
      if (book_->owner[u] == id) TakeSecond(u);
    }
    for (int64_t u = 0; u < units_; ++u) TakeSecond(u);
  }

 private:
  void TakeSecond(int64_t u) {
    if (book_->taken[u].load(std::memory_order_relaxed) != 0) return;
    if (book_->taken[u].exchange(1, std::memory_order_acq_rel) == 0) second_(u);
  }

  const int64_t units_;
  const UnitFn& first_;
  const BetweenStep& between_;
  const UnitFn& second_;
  UnitBook* const book_;
  std::atomic<int32_t> joined_{0};
  std::atomic<int64_t> next_{0};
  std::atomic<int64_t> done_{0};
  std::atomic<int64_t> next_part_{0};
  std::atomic<int64_t> parts_done_{0};
};

}  // namespace

void RunSweeps(const ParallelFor& parallel_for, const SweepPlan& plan, const UnitFn& first,
               const BetweenStep& between, const UnitFn& second) {
  if (plan.inline_only || plan.units <= 1) {
    ScopedIeeeArithmetic ieee;
    for (int64_t u = 0; u < plan.units; ++u) first(u);
    for (int64_t p = 0; p < between.parts; ++p) between.part(p);
    if (!second) return;
    for (int64_t u = plan.units - 1; u >= 0; --u) second(u);
    return;
  }
  thread_local UnitBook book;
  if (second) book.Reserve(plan.units);
  Sweeps sweeps(plan, first, between, second, &book);
  const int64_t slots = std::min(plan.units, kMaxParticipants);
  parallel_for(slots, plan.cost_per_unit * (plan.units / slots), [&](int64_t begin, int64_t end) {
    for (int64_t slot = begin; slot < end; ++slot) sweeps.Participate();
  });
}

}  // namespace fbn
