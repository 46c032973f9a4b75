// The CUDA kernels of the forward batch norm and their host launcher. No TensorFlow headers: as
// bn_grad_gpu.cu, this file builds with nvcc alone and with g++ against the host emulator.
//
// Three kernels per training call, on the caller's stream:
//   1. Moments*: a block per group of channels and block of their elements (gpu_sweeps.cuh's
//      plan and walks, the gradient's) sums its elements, then their squared deviations about
//      the block's own mean (the second pass reads them again, mostly from L2), each block-wide
//      in a fixed order (gpu_lane_sum.cuh);
//   2. Finish:  per channel, the blocks' moments combined by bn_forward.h's rule
//      (PartSquaredDeviations, the CPU kernels' too) in a fixed tree, then the four statistics
//      outputs and y's coefficients;
//   3. Normalize*: y = (x − mean) · scale_inv_std + offset in double, rounded once to T, over
//      the same blocks and walks, each thread's coefficients in registers.
// Inference runs Finish and Normalize. The cut into blocks depends on the shape only and nothing
// is added atomically, so two calls give the same bits. The statistics are the CPU kernels' in
// method (double, per-part means, one combination rule), not in summation order: CPU and GPU
// agree to a rounding, not bit for bit.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "cc/core/bn_forward.h"
#include "cc/core/gpu/bn_forward_gpu.h"
#include "cc/core/gpu/gpu_elements.cuh"
#include "cc/core/gpu/gpu_lane_sum.cuh"
#include "cc/core/gpu/gpu_launch.cuh"
#include "cc/core/gpu/gpu_sweeps.cuh"

namespace fbn {
namespace {

template <typename T>
struct ForwardArgs : SweepShape {
  ForwardTensors<T> t;
  ForwardParams p;
  int64_t parts;         // blocks along the elements of a channel (the plan's row_blocks)
  double* part_sum;      // [parts][C]: each block's sum of each of its channels
  double* part_m2;       // [parts][C]: its squared deviations about the block's mean
  double* coefficients;  // [3][C]: mean, scale_inv_std, offset

  __device__ Sources<T, 1> X() const { return {{t.x}}; }
  // Elements of each of its channels in block `part`.
  __device__ double PartCount(int64_t part) const {
    const int64_t first = part * rows_per_block;
    return static_cast<double>(min(rest, first + rows_per_block) - first);
  }
};

// This thread's walk of its block (gpu_sweeps.cuh): body(x, offset) for each vector of x, whose
// V elements are V channels of one row (channels last) or V elements of one channel (channels
// first).
template <typename T, int V, bool kChannelsLast, typename Body>
__device__ __forceinline__ void SweepBlock(const ForwardArgs<T>& a, int lanes, Body&& body) {
  if constexpr (kChannelsLast) {
    const RowTile tile(a, lanes, V, blockIdx.y);
    if (tile.active) SweepRows<T, V>(a, a.X(), tile, body);
  } else {
    const ChannelSpan span(a, lanes, V, blockIdx.y);
    if (span.active) SweepPlanes<T, V>(a, a.X(), span, body);
  }
}

// Channels of a thread's walk: the V of a vector (channels last) or one; the first of them; and
// which of them element l of a vector belongs to.
template <int V, bool kChannelsLast>
constexpr int kThreadChannels = kChannelsLast ? V : 1;
__device__ __forceinline__ int64_t FirstChannel(int lanes, int channels_per_thread) {
  return (static_cast<int64_t>(blockIdx.x) * lanes + threadIdx.x % lanes) * channels_per_thread;
}
template <bool kChannelsLast>
__device__ __forceinline__ int ChannelOf(int l) {
  return kChannelsLast ? l : 0;
}

// One block's moments of its channels, in the threads < lanes. `shared`: kThreadChannels *
// kThreads doubles; `part_mean`: kThreadChannels * kWarpSize.
template <typename T, int V, bool kChannelsLast>
__device__ __forceinline__ void BlockMoments(const ForwardArgs<T>& a, int lanes, double* shared,
                                             double* part_mean) {
  constexpr int kWidth = kThreadChannels<V, kChannelsLast>;
  const int lane = threadIdx.x % lanes;
  const int64_t c0 = FirstChannel(lanes, kWidth);
  const double count = a.PartCount(blockIdx.y);

  double sum[kWidth] = {};
  SweepBlock<T, V, kChannelsLast>(a, lanes, [&](const Vec<T, V>& x, int64_t) {
    for (int l = 0; l < V; ++l) sum[ChannelOf<kChannelsLast>(l)] += Load(x.v[l]);
  });
  BlockLaneSums<kThreads>(sum, lanes, shared);
  if (static_cast<int>(threadIdx.x) < lanes) {
    for (int j = 0; j < kWidth; ++j) part_mean[lane * kWidth + j] = sum[j] / count;
  }
  __syncthreads();
  double mean[kWidth], m2[kWidth] = {};
  for (int j = 0; j < kWidth; ++j) mean[j] = part_mean[lane * kWidth + j];
  SweepBlock<T, V, kChannelsLast>(a, lanes, [&](const Vec<T, V>& x, int64_t) {
    for (int l = 0; l < V; ++l) {
      const int j = ChannelOf<kChannelsLast>(l);
      const double d = Load(x.v[l]) - mean[j];
      m2[j] += d * d;
    }
  });
  BlockLaneSums<kThreads>(m2, lanes, shared);
  if (static_cast<int>(threadIdx.x) < lanes && c0 < a.channels) {
    for (int j = 0; j < kWidth; ++j) {
      a.part_sum[blockIdx.y * a.channels + c0 + j] = sum[j];
      a.part_m2[blockIdx.y * a.channels + c0 + j] = m2[j];
    }
  }
}

template <typename T, int V>
__global__ void __launch_bounds__(kThreads) MomentsChannelsLast(ForwardArgs<T> a, int lanes) {
  __shared__ double shared[V * kThreads];
  __shared__ double part_mean[V * kWarpSize];
  BlockMoments<T, V, true>(a, lanes, shared, part_mean);
}

template <typename T, int V>
__global__ void __launch_bounds__(kThreads) MomentsChannelsFirst(ForwardArgs<T> a, int lanes) {
  __shared__ double shared[kThreads];
  __shared__ double part_mean[kWarpSize];
  BlockMoments<T, V, false>(a, lanes, shared, part_mean);
}

// Per channel (`channels` neighbouring ones per block, lane = threadIdx.x % channels; the other
// threads split the parts): training's parts combined in a fixed tree, then the outputs and y's
// coefficients.
template <typename T>
__global__ void __launch_bounds__(kThreads) Finish(ForwardArgs<T> a, int channels) {
  __shared__ double shared[2 * kThreads];
  __shared__ double channel_mean[kWarpSize];
  const int lane = threadIdx.x % channels;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * channels + lane;
  const bool active = c < a.channels;
  const int64_t first_part = threadIdx.x / channels, part_step = kThreads / channels;
  ChannelMoments m;
  const bool combine = a.p.is_training && a.rest > 0;  // the same in every thread
  if (combine) {
    double totals[2] = {0.0, 0.0};  // count, sum
    if (active) {
      for (int64_t b = first_part; b < a.parts; b += part_step) {
        totals[0] += a.PartCount(b);
        totals[1] += a.part_sum[b * a.channels + c];
      }
    }
    BlockLaneSums<kThreads>(totals, channels, shared);
    if (static_cast<int>(threadIdx.x) < channels) channel_mean[lane] = totals[1] / totals[0];
    __syncthreads();
    const double mean = channel_mean[lane];
    double deviations[1] = {0.0};
    if (active) {
      for (int64_t b = first_part; b < a.parts; b += part_step) {
        const ChannelMoments part{a.PartCount(b), a.part_sum[b * a.channels + c],
                                  a.part_m2[b * a.channels + c]};
        deviations[0] += PartSquaredDeviations(part, mean);
      }
    }
    BlockLaneSums<kThreads>(deviations, channels, shared);
    m = ChannelMoments{totals[0], totals[1], deviations[0]};
  }
  if (static_cast<int>(threadIdx.x) >= channels || !active) return;
  NormalizeCoefficients k;
  if (a.rest == 0) {
    FinishEmptyChannel(a.t, c);
    return;
  }
  if (combine) {
    double mean, variance;
    MeanAndVariance(m, &mean, &variance);
    k = FinishForwardChannel(a.p, a.t, c, m.count, mean, variance);
  } else {
    k = FinishForwardChannel(a.p, a.t, c, static_cast<double>(a.rest),
                             static_cast<double>(a.t.mean[c]),
                             static_cast<double>(a.t.variance[c]));
  }
  a.coefficients[c] = k.mean;
  a.coefficients[a.channels + c] = k.scale_inv_std;
  a.coefficients[2 * a.channels + c] = k.offset;
}

// y of this thread's walk of its block, its channels' coefficients in registers.
template <typename T, int V, bool kChannelsLast>
__device__ __forceinline__ void NormalizeBlock(const ForwardArgs<T>& a, int lanes) {
  constexpr int kWidth = kThreadChannels<V, kChannelsLast>;
  const int64_t c0 = FirstChannel(lanes, kWidth);
  if (c0 >= a.channels) return;
  double mean[kWidth], scale_inv_std[kWidth], offset[kWidth];
  for (int j = 0; j < kWidth; ++j) {
    mean[j] = a.coefficients[c0 + j];
    scale_inv_std[j] = a.coefficients[a.channels + c0 + j];
    offset[j] = a.coefficients[2 * a.channels + c0 + j];
  }
  SweepBlock<T, V, kChannelsLast>(a, lanes, [&](const Vec<T, V>& x, int64_t at) {
    Vec<T, V> y;
    for (int l = 0; l < V; ++l) {
      const int j = ChannelOf<kChannelsLast>(l);
      y.v[l] = Round<T>((Load(x.v[l]) - mean[j]) * scale_inv_std[j] + offset[j]);
    }
    StoreVec<T, V>(a.t.y + at, y);
  });
}

template <typename T, int V>
__global__ void __launch_bounds__(kThreads) NormalizeChannelsLast(ForwardArgs<T> a, int lanes) {
  NormalizeBlock<T, V, true>(a, lanes);
}

template <typename T, int V>
__global__ void __launch_bounds__(kThreads) NormalizeChannelsFirst(ForwardArgs<T> a, int lanes) {
  NormalizeBlock<T, V, false>(a, lanes);
}

// Launches kernel_of(width) over the plan's blocks, width = kVector where the layout's runs are
// whole vectors and every buffer is aligned to one, 1 otherwise (the gradient's rule).
template <typename T, bool kChannelsLast, typename KernelOf>
cudaError_t LaunchSweep(const ForwardArgs<T>& a, const BlockPlan& plan,
                        std::initializer_list<const void*> buffers, GpuStream stream,
                        KernelOf&& kernel_of) {
  auto launch = [&](auto width) {
    const int64_t units = kChannelsLast ? a.channels / decltype(width)::value : a.channels;
    const int lanes = kChannelsLast ? LanesFor(units) : plan.first_lanes;
    const dim3 grid(static_cast<unsigned>(CeilDiv(units, lanes)),
                    static_cast<unsigned>(plan.row_blocks));
    return LaunchKernel(kernel_of(width), grid, dim3(kThreads), stream, a, lanes);
  };
  constexpr int V = kVector<T, kChannelsLast>;
  const int64_t run = kChannelsLast ? a.channels : a.spatial;
  return Vectorizable<T>(run, V, buffers) ? launch(std::integral_constant<int, V>())
                                          : launch(std::integral_constant<int, 1>());
}

// Training's moments (x read), then y (x read, y written), of one layout.
template <typename T, bool kChannelsLast>
cudaError_t LaunchMoments(const ForwardArgs<T>& a, const BlockPlan& plan, GpuStream stream) {
  return LaunchSweep<T, kChannelsLast>(a, plan, {a.t.x}, stream, [](auto width) {
    constexpr int W = decltype(width)::value;
    if constexpr (kChannelsLast) return MomentsChannelsLast<T, W>;
    else return MomentsChannelsFirst<T, W>;
  });
}

template <typename T, bool kChannelsLast>
cudaError_t LaunchNormalize(const ForwardArgs<T>& a, const BlockPlan& plan, GpuStream stream) {
  return LaunchSweep<T, kChannelsLast>(a, plan, {a.t.x, a.t.y}, stream, [](auto width) {
    constexpr int W = decltype(width)::value;
    if constexpr (kChannelsLast) return NormalizeChannelsLast<T, W>;
    else return NormalizeChannelsFirst<T, W>;
  });
}

}  // namespace

size_t GpuForwardScratchBytes(const ForwardParams& params) {
  const Shape s = params.shape.canonical();
  if (s.elements() == 0) return 0;
  const BlockPlan plan(s);
  const int64_t moments = params.is_training ? 2 * s.channels * plan.row_blocks : 0;
  return static_cast<size_t>(moments + 3 * s.channels) * sizeof(double);
}

template <typename T>
int BatchNormForwardGpu(const ForwardParams& params, const ForwardTensors<T>& t, void* scratch,
                        GpuStream stream) {
  const Shape s = params.shape.canonical();
  if (s.channels == 0) return cudaSuccess;
  const BlockPlan plan(s);
  ForwardArgs<T> a;
  a.channels = s.channels;
  a.spatial = s.spatial;
  a.rest = s.rest();
  a.rows_per_block = plan.rows_per_block;
  a.t = t;
  a.p = params;
  a.p.shape = s;
  a.parts = plan.row_blocks;
  a.part_sum = a.part_m2 = a.coefficients = nullptr;
  const bool empty = s.elements() == 0;
  if (!empty) {
    double* doubles = static_cast<double*>(scratch);
    if (params.is_training) {
      a.part_sum = doubles;
      a.part_m2 = a.part_sum + plan.row_blocks * s.channels;
      doubles = a.part_m2 + plan.row_blocks * s.channels;
    }
    a.coefficients = doubles;
  }
  cudaError_t error = cudaSuccess;
  if (!empty && params.is_training) {
    error = s.channels_last ? LaunchMoments<T, true>(a, plan, stream)
                            : LaunchMoments<T, false>(a, plan, stream);
    if (error != cudaSuccess) return error;
  }
  error = LaunchKernel(Finish<T>, dim3(CeilDiv(s.channels, plan.finish_channels)),
                       dim3(kThreads), stream, a, plan.finish_channels);
  if (error != cudaSuccess || empty) return error;
  return s.channels_last ? LaunchNormalize<T, true>(a, plan, stream)
                          : LaunchNormalize<T, false>(a, plan, stream);
}

template int BatchNormForwardGpu<float>(const ForwardParams&, const ForwardTensors<float>&, void*,
                                        GpuStream);
template int BatchNormForwardGpu<Half>(const ForwardParams&, const ForwardTensors<Half>&, void*,
                                       GpuStream);
template int BatchNormForwardGpu<BFloat16>(const ForwardParams&, const ForwardTensors<BFloat16>&,
                                           void*, GpuStream);

}  // namespace fbn
