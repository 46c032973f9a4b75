// Functions timed in turn, round by round, in one process: on a shared host the rounds see the
// same load, so the ratios hold where processes timed one after another swing by 20 %.
#ifndef TF_FBN_OPS_BENCHMARKS_CORE_BENCH_INTERLEAVED_TIMING_H_
#define TF_FBN_OPS_BENCHMARKS_CORE_BENCH_INTERLEAVED_TIMING_H_

#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

namespace fbn {
namespace bench {

inline double NowUs() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Median over `rounds` of each round's median per-call time, every function timed in every
// round in turn; ~15 ms of calls per function and round.
inline std::vector<double> TimeInterleaved(const std::vector<std::function<void()>>& fns,
                                           int rounds) {
  double start = NowUs();
  fns[0]();
  const int calls = std::max(3, static_cast<int>(15000 / std::max(1.0, NowUs() - start)));
  std::vector<std::vector<double>> medians(fns.size());
  for (int r = 0; r < rounds; ++r) {
    for (size_t f = 0; f < fns.size(); ++f) {
      fns[f]();  // untimed: whatever the previous function left in the caches
      std::vector<double> times;
      for (int c = 0; c < calls; ++c) {
        start = NowUs();
        fns[f]();
        times.push_back(NowUs() - start);
      }
      std::nth_element(times.begin(), times.begin() + calls / 2, times.end());
      medians[f].push_back(times[calls / 2]);
    }
  }
  std::vector<double> result;
  for (auto& m : medians) {
    std::nth_element(m.begin(), m.begin() + rounds / 2, m.end());
    result.push_back(m[rounds / 2]);
  }
  return result;
}

}  // namespace bench
}  // namespace fbn

#endif  // TF_FBN_OPS_BENCHMARKS_CORE_BENCH_INTERLEAVED_TIMING_H_
