// The innermost CPU loops of the batch-norm gradient, and how a caller gets the best compiled
// copy of them for the CPU it runs on.
//
// The loops are compiled three times from one source (cpu_loops_impl.h, on the vector layer of
// cpu_simd.h): for any x86-64 (SSE2), for AVX2 + F16C and for AVX-512; other CPUs get the
// portable copy only. The arithmetic is the same in every copy (the same lanes, the same
// operations in the same order, no contraction into FMA), so every copy gives the same bits
// and the choice only changes the speed.
//
// The kernels (bn_grad_cpu_*.cc) see a tensor in one of two ways:
//   rows  a row-major matrix whose columns each belong to one channel: channels last [R, C]
//         (several short rows may be folded into one), or channels first [N, C * S] with short
//         planes. Per-column arrays hold the mean, the coefficients and the sums.
//   runs  contiguous pieces of one channel (channels first), with scalar coefficients.
#ifndef TF_FBN_OPS_CC_CORE_CPU_CPU_LOOPS_H_
#define TF_FBN_OPS_CC_CORE_CPU_CPU_LOOPS_H_

#include <cstdint>

#include "cc/core/bn_grad.h"
#include "cc/core/ceil_div.h"
#include "cc/core/cpu/streaming_stores.h"

namespace fbn {

// Two families of loops:
//   fast   float arithmetic for channels of at least kFastPathRest elements: terms
//          dy·(x − mean) in float, added in float in fixed groups of at most kFastGroup per
//          lane (or column), each group then added into double accumulators. A sum's error
//          stays below 2^-20 · Σ|term| (two roundings per term, at most seven additions per
//          group), where TensorFlow's sequential float sum loses up to R·2^-24 · Σ|term|.
//          x_backprop in float with TensorFlow's grouping, from coefficients that were
//          computed in double and rounded once.
//   exact  for smaller channels, where TensorFlow's float sum can be lucky: every term in
//          double, x_backprop evaluated in double and rounded once to T. The terms are first
//          added plainly, Σ|term| beside each sum (bounded sums); where that bounds the sum's
//          error below 2^-26 of the sum (BoundedSumStands: all but sums that cancel to about
//          10^-5 of their terms), the sum stands; elsewhere that sum is summed again with
//          a running error term (compensated summation), so no summation order can be more
//          accurate, even where large terms cancel.
constexpr int64_t kFastPathRest = 1024;
constexpr int64_t kFastGroup = 8;
// The fast rows sums add a column's rows in order, kFastGroup at a time, for rows of at most
// this many columns; wider rows in kFastGroup stripes of rows, one term of each stripe at a time
// added as a tree (cpu_loops_impl.h).
constexpr int64_t kMaxDownRowsWidth = 128;
// Lanes of the run sums: element i of a run goes to lane i % kRunLanes in every copy.
constexpr int kRunLanes = 16;
// Channels per call of the exact run loops (their lanes are kept on the stack).
constexpr int64_t kExactRunChannels = 32;
// Columns of one vector of the exact rows loops: their per-column arrays (ExactColumns) hold
// whole vectors, RowsPitch(width) entries.
constexpr int64_t kColumnVector = 16;
constexpr int64_t RowsPitch(int64_t width) { return RoundUp(width, kColumnVector); }

// A double sum with a running error term (compensated summation with Knuth's TwoSum): the
// result is within about 2^-53 of |sum| plus n·2^-106 · Σ|term| of the exact sum.
struct CompensatedSum {
  double sum = 0.0;
  double error = 0.0;
  void Add(double v);
  // A part's compensated sum (its sum and error term), as parts combine in a fixed order.
  void AddPart(double part_sum, double part_error) {
    Add(part_sum);
    error += part_error;
  }
  double Value() const { return sum + error; }
};

// A plain double sum and the sum of its terms' magnitudes (both as computed).
struct BoundedSum {
  double sum = 0.0;
  double abs_sum = 0.0;
};

// Whether a bounded sum of n terms stands as the exact family's sum: where it is not finite
// (it is then the compensated sum's value already), or within 2^-26 · |sum| of the exact sum of
// its terms, a quarter of a float ulp: rounded to float it is the exact sum's float, or its
// neighbour where the exact sum lies that close to a rounding boundary. Adding n terms in any
// order errs by at most (n − 1)·u / (1 − (n − 1)·u) · Σ|term| with u = 2^-53 (Higham, Accuracy
// and Stability of Numerical Algorithms, 2nd ed., (4.4)); n · 2^-52 · abs_sum covers that and
// abs_sum's own rounding for n < 2^20. A sum of zeros is exact. With random terms about one
// sum in 5000 of 784 terms does not stand (its terms cancel to 10^-5 of Σ|term|).
inline bool BoundedSumStands(const BoundedSum& s, int64_t n) {
  if (!(s.sum - s.sum == 0.0)) return true;
  return static_cast<double>(n) * 0x1p-52 * s.abs_sum <= 0x1p-26 * (s.sum < 0 ? -s.sum : s.sum);
}

// The exact family's per-column accumulators of a rows window: four arrays of the window's
// width, each sum with its auxiliary: the running rounding error (compensated sums) or
// Σ|term| (bounded sums).
struct ExactColumns {
  double* dy;
  double* dy_aux;
  double* dy_xc;
  double* dy_xc_aux;
};

// How an elementwise rows loop (training's x_backprop, the forward's y) walks a window; the same
// bits either way, each element being its own. kInOrder: row after row, each column vector's
// coefficients loaded again for every row. kByGroups: eight rows at a time across register
// tiles of columns, the coefficients in registers. From the caches kByGroups is 1.1-2x as fast
// (in order, wide rows wait on the coefficient loads); from DRAM it read up to 1.5x slower on a
// Zen 5 (the rows it interleaves are streams the prefetchers follow worse than one).
enum class RowOrder { kInOrder, kByGroups };

// Coefficients of x_backprop, per column (rows) or per channel (runs). Inference:
// dx = dy · scale_inv_std. Training: TrainingXBackprop (training_x_backprop.h), grouped as
// TensorFlow groups it, so infinities and NaNs propagate the same way.
template <typename F>
struct DxCoefficients {
  const F* mean = nullptr;
  const F* scale_inv_std = nullptr;
  const F* dy_mean = nullptr;  // training only
  const F* xc_coef = nullptr;  // training only
};

// One compiled copy of the loops for element type T. A rows window is `rows` rows of `width`
// elements, row r starting at element r * stride; per-column arrays are indexed by column.
template <typename T>
struct CpuLoops {
  // ---- Fast family (float arithmetic, double accumulators).
  // sum_dy[j] += Σ_r dy[r][j], sum_dy_xc[j] += Σ_r dy[r][j] · (x[r][j] − mean[j]).
  void (*sum_rows)(const T* dy, const T* x, int64_t stride, int64_t rows, int64_t width,
                   const float* mean, double* sum_dy, double* sum_dy_xc);
  // The same, and inference's x_backprop of the window: dx[r][j] = dy[r][j] · scale_inv_std[j],
  // with non-temporal stores if stream_dx (see streaming_stores.h).
  void (*sum_rows_inference)(const T* dy, const T* x, T* dx, int64_t stride, int64_t rows,
                             int64_t width, const float* mean, const float* scale_inv_std,
                             double* sum_dy, double* sum_dy_xc, bool stream_dx);
  // Training's x_backprop of the window (streamed as above), in `order`.
  void (*training_dx_rows)(const T* dy, const T* x, T* dx, int64_t stride, int64_t rows,
                           int64_t width, const DxCoefficients<float>& k, bool stream_dx,
                           RowOrder order);
  // Runs of `channels` consecutive channels, `runs` of them per channel: run k of channel c
  // starts at element c * length + k * run_stride and is `length` long. sum_dy[c] += Σ dy,
  // sum_dy_xc[c] += Σ dy · (x − mean[c]) over the channel's runs. One run is summed in order
  // (element i in lane i % kRunLanes); several (at most kFastGroup) side by side, the runs'
  // terms at each position added as a tree. The lanes are then added in a fixed order.
  void (*sum_runs)(const T* dy, const T* x, int64_t length, int64_t channels, int64_t runs,
                   int64_t run_stride, const float* mean, double* sum_dy, double* sum_dy_xc);
  // One run of each of `channels` consecutive channels (run c at element c * length), summed
  // as sum_runs does one, and inference's x_backprop: dx = dy · scale_inv_std[c] (streamed as
  // above).
  void (*sum_runs_inference)(const T* dy, const T* x, T* dx, int64_t length, int64_t channels,
                             const float* mean, const float* scale_inv_std, double* sum_dy,
                             double* sum_dy_xc, bool stream_dx);
  // Training's x_backprop of the runs (streamed as above).
  void (*training_dx_runs)(const T* dy, const T* x, T* dx, int64_t length, int64_t count,
                           const DxCoefficients<float>& k, bool stream_dx);

  // ---- Exact family (double arithmetic).
  // sums[j] += Σ_r dy[r][j] (and dy · (x − mean)), compensated, rows in order; each array of
  // `sums` holds RowsPitch(width) entries.
  void (*exact_sum_rows)(const T* dy, const T* x, int64_t stride, int64_t rows, int64_t width,
                         const double* mean, const ExactColumns& sums);
  // Its Σ dy alone, bit for bit, in sums.dy and sums.dy_aux (x unread, the others untouched).
  void (*exact_sum_dy_rows)(const T* dy, int64_t stride, int64_t rows, int64_t width,
                            const ExactColumns& sums);
  // `count` runs of each of `channels` (at most kExactRunChannels) consecutive channels, run k
  // of channel c at element c * length + k * stride: for each channel, element i of a run
  // summed in lane i % kRunLanes, the lanes then added as a tree (lane i + 8 into i, then
  // i + 4, i + 2, i + 1) into sum_dy[c] and sum_dy_xc[c]. Compensated.
  void (*exact_sum_runs)(const T* dy, const T* x, const double* mean, int64_t length,
                         int64_t channels, int64_t count, int64_t stride, CompensatedSum* sum_dy,
                         CompensatedSum* sum_dy_xc);
  // Its Σ dy alone, bit for bit, into sum_dy[c] (x unread).
  void (*exact_sum_dy_runs)(const T* dy, int64_t length, int64_t channels, int64_t count,
                            int64_t stride, CompensatedSum* sum_dy);
  // The same two as bounded sums: each sum the compensated sum's first accumulator (the same
  // additions in the same order), with Σ|term| in the auxiliary arrays.
  void (*exact_bounded_sum_rows)(const T* dy, const T* x, int64_t stride, int64_t rows,
                                 int64_t width, const double* mean, const ExactColumns& sums);
  // The same, and inference's x_backprop of the window: dx = dy · scale_inv_std, in double,
  // rounded once (streamed as above).
  void (*exact_bounded_sum_rows_inference)(const T* dy, const T* x, T* dx, int64_t stride,
                                           int64_t rows, int64_t width, const double* mean,
                                           const double* scale_inv_std,
                                           const ExactColumns& sums, bool stream_dx);
  void (*exact_bounded_sum_runs)(const T* dy, const T* x, const double* mean, int64_t length,
                                 int64_t channels, int64_t count, int64_t stride,
                                 BoundedSum* sum_dy, BoundedSum* sum_dy_xc);
  // The same, and inference's x_backprop of the runs: dx = dy · scale_inv_std[c], in double,
  // rounded once.
  void (*exact_bounded_sum_runs_inference)(const T* dy, const T* x, T* dx, const double* mean,
                                           const double* scale_inv_std, int64_t length,
                                           int64_t channels, int64_t count, int64_t stride,
                                           BoundedSum* sum_dy, BoundedSum* sum_dy_xc);
  // Channels first with planes of at most kRunLanes elements, read as rows: `rows` images of
  // `channels` consecutive channels' planes (`plane` elements each; rows `stride` apart), each
  // column summed down the rows as exact_bounded_sum_rows sums it, then each channel's columns
  // reduced as exact_bounded_sum_runs reduces a channel's lanes (element i of the plane is lane
  // i there): exact_bounded_sum_runs's sums, bit for bit. `mean` per column; where dx is given
  // (inference) also x_backprop = dy · scale_inv_std per column, in double, rounded once, never
  // streamed. `columns` is scratch of RowsPitch(channels · plane) entries per array.
  void (*exact_bounded_sum_planes)(const T* dy, const T* x, T* dx, int64_t stride, int64_t rows,
                                   int64_t channels, int64_t plane, const double* mean,
                                   const double* scale_inv_std, const ExactColumns& columns,
                                   BoundedSum* sum_dy, BoundedSum* sum_dy_xc);
  // x_backprop, in double, rounded once; inference where k.dy_mean is null. Rows streamed as
  // above, in `order`; the runs as exact_sum_runs's, coefficients per channel.
  void (*exact_dx_rows)(const T* dy, const T* x, T* dx, int64_t stride, int64_t rows,
                        int64_t width, const DxCoefficients<double>& k, bool stream_dx,
                        RowOrder order);
  void (*exact_dx_runs)(const T* dy, const T* x, T* dx, int64_t length, int64_t channels,
                        int64_t count, int64_t stride, const DxCoefficients<double>& k);
};

enum class CpuIsa { kBaseline, kAvx2, kAvx512 };

// The widest instruction set this CPU and this build support.
CpuIsa DetectedCpuIsa();
// The one in use: DetectedCpuIsa(), or a narrower one named by the environment variable
// TF_FBN_OPS_CPU_ISA=baseline|avx2|avx512 (for tests and benchmarks of the other copies).
CpuIsa ActiveCpuIsa();
const char* CpuIsaName(CpuIsa isa);

// The copy of the loops compiled for `isa`; the portable one if this build lacks it.
template <typename T>
const CpuLoops<T>& LoopsFor(CpuIsa isa);

// One copy per instruction set (cpu_loops_<isa>.cc); null where the build has none.
namespace isa_baseline {
template <typename T>
const CpuLoops<T>* Loops();
}
namespace isa_avx2 {
template <typename T>
const CpuLoops<T>* Loops();
}
namespace isa_avx512 {
template <typename T>
const CpuLoops<T>* Loops();
}

// BatchNormGradCpu (bn_grad.h) with the given copy of the loops and memory rules (x_backprop
// streamed where x, y_backprop and x_backprop together take more than the rule's footprint and
// the call's other conditions hold: Call::StreamDx, bn_grad_cpu_call.h), so tests can compare
// copies, both kinds of store and both row orders.
template <typename T>
void BatchNormGradCpuWithLoops(const Params& params, const Tensors<T>& t,
                               const ParallelFor& parallel_for, const CpuLoops<T>& loops,
                               const MemoryRules& rules);

// Explicit instantiations of an instruction set's Loops<T>() for every element type.
#define FBN_INSTANTIATE_LOOPS()                      \
  template const CpuLoops<float>* Loops<float>();    \
  template const CpuLoops<Half>* Loops<Half>();      \
  template const CpuLoops<BFloat16>* Loops<BFloat16>();

}  // namespace fbn

#endif  // TF_FBN_OPS_CC_CORE_CPU_CPU_LOOPS_H_
