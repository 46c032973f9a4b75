// Runs the core's CPU arithmetic in IEEE mode: denormals are neither flushed to zero on output
// nor read as zero on input, and rounding is to nearest-even, whatever the calling thread's
// mode. TensorFlow runs ops with flush-to-zero on; the core's double arithmetic represents
// every float denormal as a normal number, so honouring them costs nothing and keeps tiny
// values exact. It also makes results independent of the thread a work unit runs on.
#ifndef TF_FBN_OPS_CC_CORE_IEEE_ARITHMETIC_H_
#define TF_FBN_OPS_CC_CORE_IEEE_ARITHMETIC_H_

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace fbn {

class ScopedIeeeArithmetic {
 public:
#if defined(__x86_64__) || defined(__i386__)
  ScopedIeeeArithmetic() : saved_(_mm_getcsr()) {
    constexpr unsigned int kFlushToZero = 0x8000, kDenormalsAreZero = 0x0040,
                           kRoundingControl = 0x6000;
    _mm_setcsr(saved_ & ~(kFlushToZero | kDenormalsAreZero | kRoundingControl));
  }
  ~ScopedIeeeArithmetic() { _mm_setcsr(saved_); }

 private:
  unsigned int saved_;
#else
  ScopedIeeeArithmetic() {}
#endif
  ScopedIeeeArithmetic(const ScopedIeeeArithmetic&) = delete;
  ScopedIeeeArithmetic& operator=(const ScopedIeeeArithmetic&) = delete;
};

}  // namespace fbn

#endif  // TF_FBN_OPS_CC_CORE_IEEE_ARITHMETIC_H_
