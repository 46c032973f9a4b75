// Waiting for other threads of the same call: a short busy wait, then yielding the CPU.
#ifndef TF_FBN_OPS_CC_CORE_CPU_SPIN_WAIT_H_
#define TF_FBN_OPS_CC_CORE_CPU_SPIN_WAIT_H_

#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace fbn {

// Returns once done() is true. What is waited for is at most one work unit of another thread
// (tens to hundreds of microseconds), so a sleeping wait would add a wake-up, which on a
// virtual machine can cost as much as the unit; yielding keeps the CPU free for a thread of
// the same call that was descheduled. No condition variable: g++ 12 binds its wait to
// GLIBCXX_3.4.30, beyond TensorFlow's wheels' libstdc++.
template <typename Done>
void SpinWait(const Done& done) {
  for (int spins = 0; !done(); ++spins) {
    if (spins < 2048) {
#if defined(__x86_64__) || defined(__i386__)
      _mm_pause();
#elif defined(__aarch64__)
      asm volatile("yield");
#endif
    } else {
      std::this_thread::yield();
    }
  }
}

}  // namespace fbn

#endif  // TF_FBN_OPS_CC_CORE_CPU_SPIN_WAIT_H_
