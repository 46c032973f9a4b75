// The innermost CPU loops of the forward batch norm, compiled once per instruction set beside
// the gradient's (cpu_loops.h says how, and why every copy gives the same bits).
//
//   rows  a row-major tile whose columns each belong to one channel (channels last).
//   runs  one contiguous piece of one channel (channels first).
#ifndef TF_FBN_OPS_CC_CORE_CPU_FORWARD_LOOPS_H_
#define TF_FBN_OPS_CC_CORE_CPU_FORWARD_LOOPS_H_

#include <cstdint>

#include "cc/core/bn_forward.h"
#include "cc/core/cpu/cpu_loops.h"

namespace fbn {

// y's coefficients per column of a rows tile, each array padded to a multiple of 16 entries.
struct NormalizeColumns {
  const double* mean;
  const double* scale_inv_std;
  const double* offset;
};

template <typename T>
struct CpuForwardLoops {
  // A tile of `rows` rows of `width` columns, row r at element r * stride. Per column j:
  // sum[j] = Σ_r x, m2[j] = Σ_r (x − sum[j] / rows)², each in double, rows in order (the second
  // pass reads the tile again, from the cache). The tile is taken a few column vectors at a
  // time; unless `next` is nullptr, each one's second pass prefetches the lines that the
  // following one's first pass reads, the last one's those of `next`: the tile the caller takes
  // next, or the tile itself where none follows.
  void (*moments_rows)(const T* x, int64_t stride, int64_t rows, int64_t width, double* sum,
                       double* m2, const T* next);
  // One run of `length` elements: *sum = Σ x, *m2 = Σ (x − *sum / length)², element i in lane
  // i % 16, the lanes added in ReduceLanes' fixed order.
  void (*moments_run)(const T* x, int64_t length, double* sum, double* m2);
  // y = (x − mean) · scale_inv_std + offset in double, rounded once to T, in `order`;
  // non-temporal stores if stream_y (streaming_stores.h).
  void (*normalize_rows)(const T* x, T* y, int64_t stride, int64_t rows, int64_t width,
                         const NormalizeColumns& k, bool stream_y, RowOrder order);
  // The same for one run; the caller fences streamed stores once after its runs.
  void (*normalize_run)(const T* x, T* y, int64_t length, const NormalizeCoefficients& k,
                        bool stream_y);
};

// The copy of the loops compiled for `isa`; the portable one if this build lacks it.
template <typename T>
const CpuForwardLoops<T>& ForwardLoopsFor(CpuIsa isa);

namespace isa_baseline {
template <typename T>
const CpuForwardLoops<T>* ForwardLoops();
}
namespace isa_avx2 {
template <typename T>
const CpuForwardLoops<T>* ForwardLoops();
}
namespace isa_avx512 {
template <typename T>
const CpuForwardLoops<T>* ForwardLoops();
}

// BatchNormForwardCpu (bn_forward.h) with the given copy of the loops and memory rules (y
// streamed where x and y together take more than the rule's footprint), so tests can compare
// copies, both kinds of store and both row orders.
template <typename T>
void BatchNormForwardCpuWithLoops(const ForwardParams& params, const ForwardTensors<T>& t,
                                  const ParallelFor& parallel_for,
                                  const CpuForwardLoops<T>& loops, const MemoryRules& rules);

#define FBN_INSTANTIATE_FORWARD_LOOPS()                                \
  template const CpuForwardLoops<float>* ForwardLoops<float>();        \
  template const CpuForwardLoops<Half>* ForwardLoops<Half>();          \
  template const CpuForwardLoops<BFloat16>* ForwardLoops<BFloat16>();

}  // namespace fbn

#endif  // TF_FBN_OPS_CC_CORE_CPU_FORWARD_LOOPS_H_
