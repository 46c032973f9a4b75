// The innermost CPU loops of the batch-norm gradient, and how a caller gets the best compiled
// copy of them for the CPU it runs on.
//
// The loops are plain C++ written so the compiler vectorizes them. They are compiled three
// times from one source (cpu_loops_impl.h): for any x86-64 (SSE2), for AVX2+FMA and for
// AVX-512; other CPUs get the portable copy only. The arithmetic is the same in every copy (no
// contraction into FMA, no reassociation: the build uses ISO C++ mode), so every copy gives the
// same bits and the choice only changes the speed.
#ifndef TF_FBN_OPS_CC_CORE_CPU_LOOPS_H_
#define TF_FBN_OPS_CC_CORE_CPU_LOOPS_H_

#include <cstdint>

#include "cc/core/bn_grad.h"

namespace fbn {

// Independent accumulators per channel along a channels-first run: enough for the widest
// vector (8 doubles) times two, so the adds pipeline.
constexpr int kLanes = 16;

// Σ dy and Σ dy·(x − mean) of one channel, kept in kLanes partial sums until the channel ends.
// Not zeroed on construction (arrays of them live on the stack, mostly unused): Clear() first.
struct LaneSums {
  double dy[kLanes];
  double dy_xc[kLanes];
  void Clear();
  void Reduce(double* sum_dy, double* sum_dy_xc) const;
};

// Per-channel coefficients of x_backprop. Inference: dx = dy · scale_inv_std. Training, grouped
// as TensorFlow groups it (so inf and NaN propagate the same way):
//   dx = scale_inv_std · ((dy − dy_mean) − (x − mean) · xc_coef)
// F is double for the exact loops and float for the fast ones.
template <typename F>
struct DxCoefficients {
  const F* mean = nullptr;
  const F* scale_inv_std = nullptr;
  const F* dy_mean = nullptr;  // training only
  const F* xc_coef = nullptr;  // training only
};

// Two families of loops with the same shapes, F = double ("exact") or F = float ("fast"):
//   exact  every term in double (a float is exact there, so x − mean and dy·(x − mean) carry no
//          rounding), x_backprop evaluated in double and rounded once to T.
//   fast   float arithmetic, two to three times the speed where the CPU, not memory, is the
//          limit: terms dy·(x − mean) in float, added in float in fixed groups of at most
//          kFastGroup and then into double accumulators, so a sum's error stays below
//          2^-20 · Σ|term| (two roundings per term, seven additions per group); x_backprop in
//          float with TensorFlow's grouping from coefficients that were computed in double and
//          rounded once. Per element that is TensorFlow's own arithmetic with better
//          coefficients and far better sums.
// The kernels use the fast family only for channels of at least kFastPathRest elements, where a
// float sum such as TensorFlow's has already lost far more than the terms' roundings; small
// channels, where TensorFlow can be lucky, always get the exact one.
constexpr int64_t kFastPathRest = 1024;
constexpr int64_t kFastGroup = 8;

// One compiled copy of the loops for element type T and arithmetic type F (double: exact,
// float: fast). The kernels see a tensor as a row-major matrix whose columns each belong to one
// channel (cc/core/bn_grad_cpu.cc): per-column arrays (mean, coefficients, accumulators) are
// indexed by column. Runs are contiguous pieces of a single channel.
template <typename T, typename F>
struct CpuLoops {
  // Per column j of a [rows, width] window whose row r starts at element r * stride:
  // sum_dy[j] += Σ_r dy[r][j], sum_dy_xc[j] += Σ_r dy[r][j] · (x[r][j] − mean[j]).
  void (*sum_rows)(const T* dy, const T* x, int64_t stride, int64_t rows, int64_t width,
                   const F* mean, double* sum_dy, double* sum_dy_xc);
  // The same for a run of one channel, into lane sums.
  void (*sum_run)(const T* dy, const T* x, F mean, int64_t length, LaneSums* sums);
  // x_backprop of `count` consecutive elements, element j with the coefficients of column j.
  void (*inference_dx)(const T* dy, T* dx, const DxCoefficients<F>& k, int64_t count);
  void (*training_dx)(const T* dy, const T* x, T* dx, const DxCoefficients<F>& k,
                      int64_t count);
  // x_backprop of a run of channel c: the coefficients of entry c.
  void (*inference_dx_run)(const T* dy, T* dx, const DxCoefficients<F>& k, int64_t c,
                           int64_t length);
  void (*training_dx_run)(const T* dy, const T* x, T* dx, const DxCoefficients<F>& k,
                          int64_t c, int64_t length);
};

enum class CpuIsa { kBaseline, kAvx2, kAvx512 };

// The widest instruction set this CPU and this build support.
CpuIsa DetectedCpuIsa();
// The one in use: DetectedCpuIsa(), or a narrower one named by the environment variable
// TF_FBN_OPS_CPU_ISA=baseline|avx2|avx512 (for tests and benchmarks of the other copies).
CpuIsa ActiveCpuIsa();
const char* CpuIsaName(CpuIsa isa);

// The copy of the loops compiled for `isa`; the portable one if this build lacks it.
template <typename T, typename F>
const CpuLoops<T, F>& LoopsFor(CpuIsa isa);

// One copy per instruction set (cpu_loops_<isa>.cc); null where the build has none.
namespace isa_baseline {
template <typename T, typename F>
const CpuLoops<T, F>* Loops();
}
namespace isa_avx2 {
template <typename T, typename F>
const CpuLoops<T, F>* Loops();
}
namespace isa_avx512 {
template <typename T, typename F>
const CpuLoops<T, F>* Loops();
}

// Explicit instantiations of an instruction set's Loops<T, F>() for one element type.
#define FBN_INSTANTIATE_LOOPS(T)                            \
  template const CpuLoops<T, double>* Loops<T, double>(); \
  template const CpuLoops<T, float>* Loops<T, float>();

}  // namespace fbn

#endif  // TF_FBN_OPS_CC_CORE_CPU_LOOPS_H_
