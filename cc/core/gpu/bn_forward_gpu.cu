// The CUDA kernels of the forward batch norm and their host launcher. No TensorFlow headers: as
// bn_grad_gpu.cu, this file builds with nvcc alone and with g++ against the host emulator.
//
// Three kernels per training call, on the caller's stream:
//   1. Moments: a block per (group of channels, part of their elements) sums its elements, then
//      their squared deviations about the part's own mean (the second pass reads the part again,
//      mostly from L2), each block-wide in a fixed order (gpu_lane_sum.cuh);
//   2. Finish:  per channel, the parts combined in part order (bn_forward.h's CombineMoments,
//      the CPU kernels' function), the four statistics outputs and y's coefficients;
//   3. Normalize: y = (x − mean) · scale_inv_std + offset in double, rounded once to T, in
//      16-byte vectors where the layout and the pointers allow.
// Inference runs Finish and Normalize. The cut into parts depends on the shape only and nothing
// is added atomically, so two calls give the same bits. The statistics are the CPU kernels' in
// method (double, per-part means, one combination rule), not in summation order: CPU and GPU
// agree to a rounding, not bit for bit.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cc/core/bn_forward.h"
#include "cc/core/gpu/bn_forward_gpu.h"
#include "cc/core/gpu/gpu_elements.cuh"
#include "cc/core/gpu/gpu_lane_sum.cuh"
#include "cc/core/gpu/gpu_launch.cuh"

namespace fbn {
namespace {

constexpr int kThreads = 256;
// A part holds about this many elements of each of its channels.
constexpr int64_t kPartElements = 16384;
// Parts per channel at most (grid.y, and the Finish kernel's serial combination).
constexpr int64_t kMaxParts = 1024;
// Normalize: elements per thread.
constexpr int64_t kElementsPerThread = 8;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// How the work is cut; depends on the (canonical) shape only.
struct ForwardPlan {
  int lanes = 1;             // channels side by side in a Moments block (channels last)
  int64_t channel_groups = 1;
  int64_t parts = 1;         // per channel
  int64_t part_elements = 0;  // elements of a channel per part (the last part: the rest)

  explicit ForwardPlan(const Shape& s) {
    if (s.channels_last) {
      while (lanes < kWarpSize && lanes < s.channels) lanes *= 2;
    }
    channel_groups = CeilDiv(s.channels, lanes);
    if (s.rest() == 0) return;  // an empty x: no moments, no parts
    parts = std::clamp<int64_t>(CeilDiv(s.rest(), kPartElements), 1, kMaxParts);
    part_elements = CeilDiv(s.rest(), parts);
    parts = CeilDiv(s.rest(), part_elements);
  }
};

template <typename T>
struct ForwardArgs {
  ForwardTensors<T> t;
  ForwardParams p;
  int64_t channels, spatial, rest, parts, part_elements;  // of the canonical shape
  double* moments;       // [C][parts][3]: count, sum, m2
  double* coefficients;  // [3][C]: mean, scale_inv_std, offset
};

template <typename T>
__global__ void __launch_bounds__(kThreads) Moments(ForwardArgs<T> a, int lanes) {
  __shared__ double shared[kThreads];
  __shared__ double part_mean[kWarpSize];
  const int lane = threadIdx.x % lanes;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * lanes + lane;
  const int64_t part = blockIdx.y;
  const int64_t begin = part * a.part_elements;
  const int64_t end = min(a.rest, begin + a.part_elements);
  const int step = kThreads / lanes;
  const bool active = c < a.channels;
  const Shape& shape = a.p.shape;

  double sum[1] = {0.0};
  if (active) {
    for (int64_t e = begin + threadIdx.x / lanes; e < end; e += step) {
      sum[0] += Load(a.t.x[shape.ChannelElement(c, e)]);
    }
  }
  BlockLaneSums<kThreads, 1>(sum, lanes, shared);
  const double count = static_cast<double>(end - begin);
  if (static_cast<int>(threadIdx.x) < lanes) part_mean[threadIdx.x] = sum[0] / count;
  __syncthreads();
  const double mean = part_mean[lane];
  double m2[1] = {0.0};
  if (active) {
    for (int64_t e = begin + threadIdx.x / lanes; e < end; e += step) {
      const double d = Load(a.t.x[shape.ChannelElement(c, e)]) - mean;
      m2[0] += d * d;
    }
  }
  BlockLaneSums<kThreads, 1>(m2, lanes, shared);
  if (static_cast<int>(threadIdx.x) < lanes && active) {
    double* out = a.moments + (c * a.parts + part) * 3;
    out[0] = count;
    out[1] = sum[0];
    out[2] = m2[0];
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) Finish(ForwardArgs<T> a) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (c >= a.channels) return;
  NormalizeCoefficients k;
  if (a.rest == 0) {
    FinishEmptyChannel(a.t, c);
    return;
  }
  if (a.p.is_training) {
    const double* parts = a.moments + c * a.parts * 3;
    const ChannelMoments m = CombineMoments(a.parts, [&](int64_t i) {
      return ChannelMoments{parts[3 * i], parts[3 * i + 1], parts[3 * i + 2]};
    });
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

// Each thread kElementsPerThread elements, V at a time: V consecutive elements are V channels
// of one row (channels last) or V elements of one plane (channels first).
template <typename T, int V>
__global__ void __launch_bounds__(kThreads) Normalize(ForwardArgs<T> a, int64_t elements) {
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kThreads * kElementsPerThread;
  const double* mean = a.coefficients;
  const double* scale_inv_std = a.coefficients + a.channels;
  const double* offset = a.coefficients + 2 * a.channels;
  const bool channels_last = a.p.shape.channels_last;
  for (int64_t k = 0; k < kElementsPerThread / V; ++k) {
    const int64_t i = first + (k * kThreads + threadIdx.x) * V;
    if (i >= elements) return;
    const int64_t c = channels_last ? i % a.channels : (i / a.spatial) % a.channels;
    const Vec<T, V> x = LoadVec<T, V>(a.t.x + i);
    Vec<T, V> y;
    for (int l = 0; l < V; ++l) {
      const int64_t cl = channels_last ? c + l : c;
      y.v[l] = Round<T>((Load(x.v[l]) - mean[cl]) * scale_inv_std[cl] + offset[cl]);
    }
    StoreVec<T, V>(a.t.y + i, y);
  }
}

// y's vector width: 16 bytes where each vector lies in one row (channels last) or one plane
// (channels first) and x and y are aligned to it; element by element otherwise.
template <typename T>
cudaError_t LaunchNormalize(const ForwardArgs<T>& a, const Shape& s, GpuStream stream) {
  constexpr int V = 16 / sizeof(T);
  const int64_t run = s.channels_last ? s.channels : s.spatial;
  const bool vectors = run % V == 0 && Aligned(a.t.x, V * sizeof(T)) &&
                       Aligned(a.t.y, V * sizeof(T));
  const int64_t elements = s.elements();
  const dim3 grid(CeilDiv(elements, kThreads * kElementsPerThread));
  return vectors ? LaunchKernel(Normalize<T, V>, grid, dim3(kThreads), stream, a, elements)
                 : LaunchKernel(Normalize<T, 1>, grid, dim3(kThreads), stream, a, elements);
}

}  // namespace

size_t GpuForwardScratchBytes(const ForwardParams& params) {
  const Shape s = params.shape.canonical();
  if (s.elements() == 0) return 0;
  const ForwardPlan plan(s);
  const int64_t moments = params.is_training ? s.channels * plan.parts * 3 : 0;
  return static_cast<size_t>(moments + 3 * s.channels) * sizeof(double);
}

template <typename T>
int BatchNormForwardGpu(const ForwardParams& params, const ForwardTensors<T>& t, void* scratch,
                        GpuStream stream) {
  const Shape s = params.shape.canonical();
  if (s.channels == 0) return cudaSuccess;
  const ForwardPlan plan(s);
  ForwardArgs<T> a{t, params, s.channels, s.spatial, s.rest(), plan.parts, plan.part_elements,
                   nullptr, nullptr};
  a.p.shape = s;
  const bool empty = s.elements() == 0;
  if (!empty) {
    double* doubles = static_cast<double*>(scratch);
    a.moments = params.is_training ? doubles : nullptr;
    a.coefficients = doubles + (params.is_training ? s.channels * plan.parts * 3 : 0);
  }
  cudaError_t error = cudaSuccess;
  if (!empty && params.is_training) {
    error = LaunchKernel(Moments<T>, dim3(plan.channel_groups, plan.parts), dim3(kThreads),
                         stream, a, plan.lanes);
    if (error != cudaSuccess) return error;
  }
  error = LaunchKernel(Finish<T>, dim3(CeilDiv(s.channels, kThreads)), dim3(kThreads), stream, a);
  if (error != cudaSuccess || empty) return error;
  return LaunchNormalize(a, s, stream);
}

template int BatchNormForwardGpu<float>(const ForwardParams&, const ForwardTensors<float>&, void*,
                                        GpuStream);
template int BatchNormForwardGpu<Half>(const ForwardParams&, const ForwardTensors<Half>&, void*,
                                       GpuStream);
template int BatchNormForwardGpu<BFloat16>(const ForwardParams&, const ForwardTensors<BFloat16>&,
                                           void*, GpuStream);

}  // namespace fbn
