// Block-wide sums in a fixed order, for the CUDA kernels of the core. A block of kThreads
// threads is seen as `lanes` interleaved groups (a thread's lane is threadIdx.x % lanes); each
// group's values are added by a butterfly inside each warp and then warp by warp in warp
// order. The order depends on nothing but the block shape, so the sums are bit-identical run
// to run, and no atomics are involved.
#ifndef TF_FBN_OPS_CC_CORE_GPU_GPU_LANE_SUM_CUH_
#define TF_FBN_OPS_CC_CORE_GPU_GPU_LANE_SUM_CUH_

#include <cuda_runtime.h>

namespace fbn {

constexpr int kWarpSize = 32;
constexpr unsigned kFullWarp = 0xffffffffu;

// Sum of `value` over the threads of the warp that share a lane (lanes: a power of two, at most
// 32). Every thread gets its lane's sum: a + b == b + a exactly, so both halves of each
// butterfly step hold the same bits.
__device__ __forceinline__ double WarpLaneSum(double value, int lanes) {
  for (int offset = kWarpSize / 2; offset >= lanes; offset /= 2) {
    value += __shfl_xor_sync(kFullWarp, value, offset);
  }
  return value;
}

// Sums of N values over the block's threads that share a lane, in place: afterwards values[i]
// holds lane threadIdx.x's sum of values[i] in the threads threadIdx.x < lanes (and is garbage
// elsewhere). Every thread of the block must call it (it holds two barriers). `shared` is
// N * kThreads doubles of shared memory, free again when it returns.
template <int kThreads, int N>
__device__ void BlockLaneSums(double (&values)[N], int lanes, double* shared) {
  static_assert(kThreads % kWarpSize == 0, "whole warps");
  constexpr int kWarps = kThreads / kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  for (int i = 0; i < N; ++i) {
    const double warp_sum = WarpLaneSum(values[i], lanes);
    if (lane < lanes) shared[(i * kWarps + warp) * lanes + lane] = warp_sum;
  }
  __syncthreads();
  if (static_cast<int>(threadIdx.x) < lanes) {
    for (int i = 0; i < N; ++i) {
      double sum = 0.0;
      for (int w = 0; w < kWarps; ++w) sum += shared[(i * kWarps + w) * lanes + threadIdx.x];
      values[i] = sum;
    }
  }
  __syncthreads();
}

}  // namespace fbn

#endif  // TF_FBN_OPS_CC_CORE_GPU_GPU_LANE_SUM_CUH_
