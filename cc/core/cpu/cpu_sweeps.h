// How the work units of one CPU call run on the threads a ParallelFor lends: one or two sweeps
// over the same units with a step between them, all inside a single ParallelFor call.
//
// Why one call: every ParallelFor call wakes the pool's threads and waits for them; on tensors
// that sit in the caches a call takes a few hundred microseconds, and a second wake-up between
// the sweeps cost 10-20 % of it (docs/performance.md). Inside the call, threads join whenever
// the pool starts them; one that joins late simply finds fewer units left.
//
// Why affinity: on the second sweep a thread first takes the units it ran in the first, the
// latest first, whose data its own caches (L2, or the L3 of its core complex) are most likely
// to hold; only then does it take units left by others, the earliest first. A static split
// would keep the data local too, but would wait for threads that start late.
//
// Why a step in parts: the step between the sweeps (combining the first sweep's partial sums)
// runs on one thread while the others wait, the same time at any thread count; where it reads
// many partial sums (the exact family's 2048 channels in 13 blocks: 0.8 MB, 50-75 µs of adding
// on an Intel Xeon) the threads share it, each part a range of channels. Sharing is not free:
// on two threads of that Xeon a part took 2.5 times as long as on one, half of the partial sums
// it reads being in the other core's cache. The fast family's finish (two doubles a column, not
// four: 20-25 µs of a 430 µs call on 1024 channels in 25 blocks) shared the same way took as
// long in the core and 1.01-1.04x the time through TensorFlow, so it stays one thread's.
//
// Nothing here decides a bit of the result: which thread runs a unit or a part, and when,
// never changes what it computes; the step's parts are independent of each other and run after
// every unit of the first sweep, before any of the second.
#ifndef TF_FBN_OPS_CC_CORE_CPU_CPU_SWEEPS_H_
#define TF_FBN_OPS_CC_CORE_CPU_CPU_SWEEPS_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <utility>

#include "cc/core/bn_grad.h"
#include "cc/core/ceil_div.h"

namespace fbn {

using UnitFn = std::function<void(int64_t unit)>;

// The step between the sweeps: part(p) for every p in [0, parts), the parts independent of each
// other (one part: a serial step; none: no step).
struct BetweenStep {
  int64_t parts = 0;
  UnitFn part;
};

// A serial step: fn() once.
inline BetweenStep SerialStep(std::function<void()> fn) {
  return {1, [fn = std::move(fn)](int64_t) { fn(); }};
}

// Channels per part of a step that finishes channels in parts (the forward's, the exact
// family's): a few microseconds of adding, enough parts for the threads on 1024 channels and
// more.
constexpr int64_t kStepPartChannels = 256;

// A step over the items [0, total) in parts of `per_part` (the last may be shorter): fn(begin,
// end) for each part, which must not touch another part's items.
template <typename Fn>
BetweenStep StepInParts(int64_t total, int64_t per_part, Fn fn) {
  return {CeilDiv(total, per_part), [total, per_part, fn](int64_t p) {
            const int64_t begin = p * per_part;
            fn(begin, std::min(total, begin + per_part));
          }};
}

// Calls of at most this many elements run on the calling thread (SweepPlan::inline_only): a pool
// dispatch would cost more than the work.
constexpr int64_t kInlineElements = int64_t{1} << 15;

// Schedules that put whole channels in a unit make at least this many units where the channels
// allow it, so that threads taking units one at a time end close together.
constexpr int64_t kMinGroupUnits = 16;

struct SweepPlan {
  int64_t units = 0;
  // Rough cycles per unit, passed on to the ParallelFor.
  int64_t cost_per_unit = 0;
  // Runs everything on the calling thread (calls too small for a pool to pay off).
  bool inline_only = false;
};

// Runs first(u) for every u in [0, plan.units); then the parts of `between`; then, if given,
// second(u) for every u. Each function runs in IEEE arithmetic (ieee_arithmetic.h) whatever
// thread runs it. Returns when everything has run.
void RunSweeps(const ParallelFor& parallel_for, const SweepPlan& plan, const UnitFn& first,
               const BetweenStep& between = {}, const UnitFn& second = nullptr);

}  // namespace fbn

#endif  // TF_FBN_OPS_CC_CORE_CPU_CPU_SWEEPS_H_
