#include "cc/kernels/cpu_parallel_for.h"

#include "tensorflow/core/framework/device_base.h"
#include "tensorflow/core/platform/threadpool.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define FBN_HAVE_MXCSR 1
#endif

namespace tensorflow {
namespace fbn_kernels {
namespace {

// Saves the floating-point control word on construction and installs `control` until destroyed.
class ScopedFloatControl {
 public:
#ifdef FBN_HAVE_MXCSR
  static unsigned int Current() { return _mm_getcsr(); }
  explicit ScopedFloatControl(unsigned int control) : saved_(_mm_getcsr()) { _mm_setcsr(control); }
  ~ScopedFloatControl() { _mm_setcsr(saved_); }

 private:
  unsigned int saved_;
#else
  static unsigned int Current() { return 0; }
  explicit ScopedFloatControl(unsigned int) {}
#endif
};

}  // namespace

fbn::ParallelFor IntraOpParallelFor(OpKernelContext* ctx) {
  thread::ThreadPool* pool = ctx->device()->tensorflow_cpu_worker_threads()->workers;
  return [pool](int64_t count, int64_t cost_per_unit, const fbn::RangeFn& fn) {
    const unsigned int control = ScopedFloatControl::Current();
    pool->ParallelFor(count, cost_per_unit, [&fn, control](int64_t begin, int64_t end) {
      ScopedFloatControl scoped(control);
      fn(begin, end);
    });
  };
}

}  // namespace fbn_kernels
}  // namespace tensorflow
