// The CUDA kernels of the numeric core and their host launcher. No TensorFlow headers: this file
// builds with nvcc alone, into the op library and into the standalone GPU test and benchmark,
// and with g++ against the host emulator of cc/tests/gpu_emulator (the same source, no copy).
//
// Three kernels per call, all on the caller's stream:
//   1. Sum*:     per-block partial sums of dy and dy*(x - mean) per channel (and, in inference
//                mode, dx = dy * scale / sqrt(var + eps) in the same sweep);
//   2. Finalize: per channel, adds the partials of all blocks in a fixed tree, writes the
//                scale/offset gradients and the dx coefficients;
//   3. Apply*:   (training only) dx = c1 * (dy - mean(dy)) - c2 * (x - mean).
// Where one block holds all of its channels' rows (small tensors), one kernel Whole* does all
// three for its channels, with the same arithmetic (1.12-1.47x faster on an H200 where it
// applies; the separate_launches variant keeps three there, for timing the two side by side).
// Each block's partials come from a fixed assignment of elements to threads and a fixed tree
// (gpu_lane_sum.cuh), so the result is bit-identical run to run; no floating-point atomics.
// The cut into blocks depends on the shape only, not on the GPU.
//
// The math is the CPU kernels' (bn_grad_cpu_*.cc): terms and sums in double, dx evaluated in
// double and rounded once to T. FP64 costs little next to the memory traffic of these
// bandwidth-bound sweeps, and it makes the results as exact as the inputs allow on every GPU.
//
// How blocks are cut and walked (and the memory-level parallelism that makes the sweeps fast) is
// gpu_sweeps.cuh's, shared with the forward's kernels.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>

#include "cc/core/bn_grad.h"
#include "cc/core/gpu/bn_grad_gpu.h"
#include "cc/core/gpu/gpu_elements.cuh"
#include "cc/core/gpu/gpu_lane_sum.cuh"
#include "cc/core/gpu/gpu_launch.cuh"
#include "cc/core/gpu/gpu_sweeps.cuh"

namespace fbn {
namespace {

#include "cc/core/training_x_backprop.h"

// One thread's sums for V channels (or V lanes of one channel). A product of two widened
// floats is exact in double, so each term carries no rounding error of its own.
template <int V>
struct Accumulator {
  double sums[2 * V] = {};  // [0, V): dy; [V, 2V): dy * (x - mean)

  __device__ void Add(int j, double d, double xc) {
    sums[j] += d;
    sums[V + j] += d * xc;
  }
};

// Pointers of one call, as the kernels see them.
template <typename T>
struct Args : SweepShape {
  Tensors<T> t;
  Params p;
  double* partial_dy;     // [row_blocks][C]
  double* partial_dy_xc;  // [row_blocks][C]
  double* coef;           // [3][C]: c1, mean(dy), c2 (training)

  __device__ Sources<T, 2> DyAndX() const { return {{t.y_backprop, t.x}}; }
};

// Kernel signature shared by the sweeps; `lanes`: channel vectors (channels last) or channels
// (channels first) side by side in a block, lane = threadIdx.x % lanes.
template <typename T>
using SweepKernel = void (*)(Args<T>, int);

// Channels last, the sums sweep of one block: each thread's sums of its V channels (in
// inference, x_backprop written on the way), then the block's, in the threads < lanes.
template <typename T, int V, bool kInference>
__device__ __forceinline__ void SumRows(const Args<T>& a, const RowTile& tile, int lanes,
                                        Accumulator<V>& acc, double* shared) {
  if (tile.active) {
    double mean[V], k[V];
    for (int j = 0; j < V; ++j) {
      mean[j] = a.t.mean[tile.c0 + j];
      k[j] = kInference ? a.p.InvStd(a.t.variance[tile.c0 + j]) * a.t.scale[tile.c0 + j] : 0.0;
    }
    SweepRows<T, V>(a, a.DyAndX(), tile, [&](const Vec<T, V>& dy, const Vec<T, V>& x, int64_t offset) {
      Vec<T, V> dx;
      for (int j = 0; j < V; ++j) {
        const double d = Load(dy.v[j]);
        acc.Add(j, d, Load(x.v[j]) - mean[j]);
        if (kInference) dx.v[j] = Round<T>(d * k[j]);
      }
      if (kInference) StoreVec<T, V>(a.t.x_backprop + offset, dx);
    });
  }
  BlockLaneSums<kThreads>(acc.sums, lanes, shared);
}

template <typename T, int V, bool kInference>
__global__ void __launch_bounds__(kThreads) SumChannelsLast(Args<T> a, int lanes) {
  __shared__ double shared[2 * V * kThreads];
  const RowTile tile(a, lanes, V, blockIdx.y);
  Accumulator<V> acc;
  SumRows<T, V, kInference>(a, tile, lanes, acc, shared);
  if (static_cast<int>(threadIdx.x) < lanes && tile.active) {
    for (int j = 0; j < V; ++j) {
      a.partial_dy[blockIdx.y * a.channels + tile.c0 + j] = acc.sums[j];
      a.partial_dy_xc[blockIdx.y * a.channels + tile.c0 + j] = acc.sums[V + j];
    }
  }
}

// Channels first, the sums sweep of one block: each thread's sums of its channel (one pair
// whatever V: registers are what limits occupancy; in inference, x_backprop written on the
// way), then the block's, in the threads < lanes.
template <typename T, int V, bool kInference>
__device__ __forceinline__ void SumPlanes(const Args<T>& a, const ChannelSpan& span, int lanes,
                                          Accumulator<1>& acc, double* shared) {
  if (span.active) {
    const double mean = a.t.mean[span.c];
    const double k = kInference ? a.p.InvStd(a.t.variance[span.c]) * a.t.scale[span.c] : 0.0;
    SweepPlanes<T, V>(a, a.DyAndX(), span, [&](const Vec<T, V>& dy, const Vec<T, V>& x, int64_t offset) {
      Vec<T, V> dx;
      for (int j = 0; j < V; ++j) {
        const double d = Load(dy.v[j]);
        acc.Add(0, d, Load(x.v[j]) - mean);
        if (kInference) dx.v[j] = Round<T>(d * k);
      }
      if (kInference) StoreVec<T, V>(a.t.x_backprop + offset, dx);
    });
  }
  BlockLaneSums<kThreads>(acc.sums, lanes, shared);
}

template <typename T, int V, bool kInference>
__global__ void __launch_bounds__(kThreads) SumChannelsFirst(Args<T> a, int lanes) {
  __shared__ double shared[2 * kThreads];
  const ChannelSpan span(a, lanes, V, blockIdx.y);
  Accumulator<1> acc;
  SumPlanes<T, V, kInference>(a, span, lanes, acc, shared);
  if (static_cast<int>(threadIdx.x) < lanes && span.active) {
    a.partial_dy[blockIdx.y * a.channels + span.c] = acc.sums[0];
    a.partial_dy_xc[blockIdx.y * a.channels + span.c] = acc.sums[1];
  }
}

// Channel c, given its sums: the outputs and the training coefficients. Synchronized batch
// norm's stages (Stage, bn_grad.h): kSums writes the sums and stops; kDxFromSums takes the
// global ones instead, divides by the global count, and reports the replica's share of the
// scale and offset gradients.
template <typename T>
__device__ void FinishChannel(const Args<T>& a, int64_t c, double sum_dy, double sum_dy_xc) {
  const Stage stage = a.p.stage;
  if (stage == Stage::kSums) {
    a.t.sum_dy[c] = sum_dy;
    a.t.sum_dy_xc[c] = sum_dy_xc;
    return;
  }
  double replica_sum_dy = 0.0, replica_sum_dy_xc = 0.0;
  if (stage == Stage::kDxFromSums) {
    sum_dy = a.t.global_sum_dy[c];
    sum_dy_xc = a.t.global_sum_dy_xc[c];
    replica_sum_dy = a.t.replica_sum_dy[c];
    replica_sum_dy_xc = a.t.replica_sum_dy_xc[c];
  }

  int64_t count = a.p.global_count;
  double inv_std = a.p.InvStd(a.t.variance[c]);
  if (stage == Stage::kDxFromSums && a.t.device_global_count != nullptr) {
    count = *a.t.device_global_count;
    if (count < a.rest) {  // see Tensors::device_global_count
      sum_dy = replica_sum_dy = inv_std = std::numeric_limits<double>::quiet_NaN();
    }
  }
  const double rest = static_cast<double>(stage == Stage::kDxFromSums ? count : a.rest);
  ChannelGradients g = GradientsFromSums(sum_dy, sum_dy_xc, inv_std, rest);
  if (stage == Stage::kDxFromSums) {
    ScaleOffsetFromSums(replica_sum_dy, replica_sum_dy_xc, inv_std, &g);
  }
  a.t.offset_backprop[c] = g.offset_backprop;
  a.t.scale_backprop[c] = g.scale_backprop;
  if (a.p.is_training) {
    if (isinf(inv_std) && stage == Stage::kWhole) {  // the global sums leave no terms to regroup
      a.t.scale_backprop[c] = static_cast<float>(
          ScaledSumInTfOrder(a.p.shape, a.t, c, inv_std, [](T v) { return Load(v); }));
    }
    a.coef[c] = a.t.scale[c] * inv_std;
    a.coef[a.channels + c] = g.dy_mean;
    a.coef[2 * a.channels + c] = g.xc_coef;
  }
}

// Per channel: the partials of all row blocks in a fixed tree, then FinishChannel. A block
// serves `channels` neighbouring channels (lane = threadIdx.x % channels).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    Finalize(Args<T> a, int64_t row_blocks, int channels) {
  __shared__ double shared[2 * kThreads];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * channels + threadIdx.x % channels;
  const bool active = c < a.channels;
  const Stage stage = a.p.stage;
  double sums[2] = {0.0, 0.0};  // dy, dy * (x - mean)
  if (stage != Stage::kDxFromSums) {
    if (active) {
      for (int64_t b = threadIdx.x / channels; b < row_blocks; b += kThreads / channels) {
        sums[0] += a.partial_dy[b * a.channels + c];
        sums[1] += a.partial_dy_xc[b * a.channels + c];
      }
    }
    BlockLaneSums<kThreads>(sums, channels, shared);
  }
  if (static_cast<int>(threadIdx.x) >= channels || !active) return;
  FinishChannel(a, c, sums[0], sums[1]);
}

template <typename T>
__device__ __forceinline__ T TrainingDx(double dy, double x, double mean, double c1,
                                        double dy_mean, double c2) {
  return Round<T>(TrainingXBackprop(c1, dy, dy_mean, x, mean, c2));
}

// Training's x_backprop sweep of one block, from the coefficients in a.coef.
template <typename T, int V>
__device__ __forceinline__ void ApplyRows(const Args<T>& a, const RowTile& tile) {
  if (!tile.active) return;
  double mean[V], c1[V], dy_mean[V], c2[V];
  for (int j = 0; j < V; ++j) {
    mean[j] = a.t.mean[tile.c0 + j];
    c1[j] = a.coef[tile.c0 + j];
    dy_mean[j] = a.coef[a.channels + tile.c0 + j];
    c2[j] = a.coef[2 * a.channels + tile.c0 + j];
  }
  SweepRows<T, V>(a, a.DyAndX(), tile, [&](const Vec<T, V>& dy, const Vec<T, V>& x, int64_t offset) {
    Vec<T, V> dx;
    for (int j = 0; j < V; ++j) {
      dx.v[j] = TrainingDx<T>(Load(dy.v[j]), Load(x.v[j]), mean[j], c1[j], dy_mean[j], c2[j]);
    }
    StoreVec<T, V>(a.t.x_backprop + offset, dx);
  });
}

template <typename T, int V>
__device__ __forceinline__ void ApplyPlanes(const Args<T>& a, const ChannelSpan& span) {
  if (!span.active) return;
  const double mean = a.t.mean[span.c];
  const double c1 = a.coef[span.c];
  const double dy_mean = a.coef[a.channels + span.c];
  const double c2 = a.coef[2 * a.channels + span.c];
  SweepPlanes<T, V>(a, a.DyAndX(), span, [&](const Vec<T, V>& dy, const Vec<T, V>& x, int64_t offset) {
    Vec<T, V> dx;
    for (int j = 0; j < V; ++j) {
      dx.v[j] = TrainingDx<T>(Load(dy.v[j]), Load(x.v[j]), mean, c1, dy_mean, c2);
    }
    StoreVec<T, V>(a.t.x_backprop + offset, dx);
  });
}

template <typename T, int V>
__global__ void __launch_bounds__(kThreads) ApplyChannelsLast(Args<T> a, int lanes) {
  ApplyRows<T, V>(a, RowTile(a, lanes, V, blockIdx.y));
}

template <typename T, int V>
__global__ void __launch_bounds__(kThreads) ApplyChannelsFirst(Args<T> a, int lanes) {
  ApplyPlanes<T, V>(a, ChannelSpan(a, lanes, V, blockIdx.y));
}

// Where one row block holds every row, a block's sums are its channels' sums, so it finishes
// them and, in training, writes their x_backprop itself.
// The three kernels' arithmetic: Finalize adds a single block's partials to 0.0, so do we.
template <typename T, int V, bool kInference>
__global__ void __launch_bounds__(kThreads) WholeChannelsLast(Args<T> a, int lanes) {
  __shared__ double shared[2 * V * kThreads];
  const RowTile tile(a, lanes, V, 0);
  Accumulator<V> acc;
  SumRows<T, V, kInference>(a, tile, lanes, acc, shared);
  if (static_cast<int>(threadIdx.x) < lanes && tile.active) {
    for (int j = 0; j < V; ++j) {
      FinishChannel(a, tile.c0 + j, 0.0 + acc.sums[j], 0.0 + acc.sums[V + j]);
    }
  }
  if (kInference) return;
  __syncthreads();  // the block's coefficients, just written to a.coef, seen by all its threads
  ApplyRows<T, V>(a, tile);
}

template <typename T, int V, bool kInference>
__global__ void __launch_bounds__(kThreads) WholeChannelsFirst(Args<T> a, int lanes) {
  __shared__ double shared[2 * kThreads];
  const ChannelSpan span(a, lanes, V, 0);
  Accumulator<1> acc;
  SumPlanes<T, V, kInference>(a, span, lanes, acc, shared);
  if (static_cast<int>(threadIdx.x) < lanes && span.active) {
    FinishChannel(a, span.c, 0.0 + acc.sums[0], 0.0 + acc.sums[1]);
  }
  if (kInference) return;
  __syncthreads();
  ApplyPlanes<T, V>(a, span);
}

template <typename T>
cudaError_t LaunchFinalize(const Args<T>& a, const BlockPlan& plan, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(CeilDiv(a.channels, plan.finish_channels)));
  return LaunchKernel(Finalize<T>, grid, dim3(kThreads), stream, a, plan.row_blocks,
                      plan.finish_channels);
}

// The kernels of one layout and vector width.
template <typename T, int V, bool kChannelsLast>
struct LayoutKernels {
  SweepKernel<T> sum, apply, whole;
  explicit LayoutKernels(bool training) {
    if constexpr (kChannelsLast) {
      sum = training ? SumChannelsLast<T, V, false> : SumChannelsLast<T, V, true>;
      apply = ApplyChannelsLast<T, V>;
      whole = training ? WholeChannelsLast<T, V, false> : WholeChannelsLast<T, V, true>;
    } else {
      sum = training ? SumChannelsFirst<T, V, false> : SumChannelsFirst<T, V, true>;
      apply = ApplyChannelsFirst<T, V>;
      whole = training ? WholeChannelsFirst<T, V, false> : WholeChannelsFirst<T, V, true>;
    }
  }
};

// Enqueues the kernels of one call: one where a block holds every row of its channels, else
// two or three (one or two for a stage of synchronized batch norm); the first failing launch's
// error.
template <typename T, int V, bool kChannelsLast>
cudaError_t LaunchAll(const Args<T>& a, const Shape& s, const BlockPlan& plan, cudaStream_t stream) {
  const bool training = a.p.is_training;
  const dim3 block(kThreads);
  const int lanes = kChannelsLast ? LanesFor(s.channels / V) : plan.first_lanes;
  const dim3 grid(static_cast<unsigned>(CeilDiv(kChannelsLast ? s.channels / V : s.channels,
                                                lanes)),
                  static_cast<unsigned>(plan.row_blocks));
  const LayoutKernels<T, V, kChannelsLast> kernels(training);
  const bool separate = (GpuVariants() & kSeparateLaunches) != 0;
  if (plan.row_blocks == 1 && a.p.stage == Stage::kWhole && !separate) {
    return LaunchKernel(kernels.whole, grid, block, stream, a, lanes);
  }
  cudaError_t error = cudaSuccess;
  if (a.p.stage != Stage::kDxFromSums) {
    error = LaunchKernel(kernels.sum, grid, block, stream, a, lanes);
  }
  if (error == cudaSuccess) error = LaunchFinalize(a, plan, stream);
  if (error == cudaSuccess && training && a.p.stage != Stage::kSums) {
    error = LaunchKernel(kernels.apply, grid, block, stream, a, lanes);
  }
  return error;
}

// The vector width for one layout when the channel groups' contiguous runs (`run` elements)
// are whole vectors and every element buffer is aligned to one; element by element otherwise.
template <typename T, bool kChannelsLast>
cudaError_t LaunchLayout(const Args<T>& a, const Shape& s, const BlockPlan& plan, int64_t run,
                         cudaStream_t stream) {
  constexpr int V = kVector<T, kChannelsLast>;
  auto vectorizable = [&](int width) {
    return Vectorizable<T>(run, width, {a.t.y_backprop, a.t.x, a.t.x_backprop});
  };
  if constexpr (kChannelsLast && sizeof(T) == 2) {
    // The wide_rows variant where both widths give a block kWarpSize lanes: then each thread
    // sums the same rows of each of its channels in the same order, so the bits are the same.
    if ((GpuVariants() & kWideRows) != 0 && s.channels / kWideRowsVector >= kWarpSize &&
        vectorizable(kWideRowsVector)) {
      return LaunchAll<T, kWideRowsVector, true>(a, s, plan, stream);
    }
  }
  return vectorizable(V) ? LaunchAll<T, V, kChannelsLast>(a, s, plan, stream)
                         : LaunchAll<T, 1, kChannelsLast>(a, s, plan, stream);
}

}  // namespace

size_t GpuScratchBytes(const Shape& shape) {
  const Shape s = shape.canonical();
  if (s.elements() == 0) return static_cast<size_t>(3 * s.channels) * sizeof(double);
  const BlockPlan plan(s);
  return static_cast<size_t>((2 * plan.row_blocks + 3) * s.channels) * sizeof(double);
}

template <typename T>
int BatchNormGradGpu(const Params& params, const Tensors<T>& t, void* scratch, GpuStream stream) {
  const Shape s = params.shape.canonical();
  if (s.elements() == 0 && params.stage != Stage::kDxFromSums) {
    const bool sums = params.stage == Stage::kSums;  // a replica with an empty batch adds nothing
    const size_t bytes = static_cast<size_t>(s.channels) * (sums ? sizeof(double) : sizeof(float));
    if (bytes == 0) return cudaSuccess;
    cudaError_t error = cudaMemsetAsync(sums ? static_cast<void*>(t.sum_dy) : t.scale_backprop, 0,
                                        bytes, stream);
    if (error == cudaSuccess) {
      error = cudaMemsetAsync(sums ? static_cast<void*>(t.sum_dy_xc) : t.offset_backprop, 0,
                              bytes, stream);
    }
    return error;
  }
  Args<T> a;
  a.t = t;
  a.p = params;
  a.p.shape = s;
  a.channels = s.channels;
  a.spatial = s.spatial;
  a.rest = s.rest();
  if (s.elements() == 0) {  // kDxFromSums: no x_backprop, the global gradients all the same
    if (s.channels == 0) return cudaSuccess;
    a.coef = static_cast<double*>(scratch);
    return LaunchKernel(Finalize<T>, dim3(static_cast<unsigned>(CeilDiv(s.channels, kWarpSize))),
                        dim3(kThreads), stream, a, int64_t{0}, kWarpSize);
  }
  const BlockPlan plan(s);
  a.rows_per_block = plan.rows_per_block;
  a.partial_dy = static_cast<double*>(scratch);
  a.partial_dy_xc = a.partial_dy + plan.row_blocks * s.channels;
  a.coef = a.partial_dy_xc + plan.row_blocks * s.channels;

  return s.channels_last ? LaunchLayout<T, true>(a, s, plan, s.channels, stream)
                         : LaunchLayout<T, false>(a, s, plan, s.spatial, stream);
}

namespace {

struct NamedVariant {
  const char* name;
  GpuVariant variant;
};
constexpr NamedVariant kNamedVariants[] = {{"separate_launches", kSeparateLaunches},
                                           {"wide_rows", kWideRows}};

unsigned VariantsFromEnvironment() {
  const char* wanted = std::getenv("TF_FBN_OPS_GPU_VARIANTS");
  return wanted == nullptr ? 0 : GpuVariantsNamed(wanted);
}

std::atomic<unsigned>& VariantsInForce() {
  static std::atomic<unsigned> variants{VariantsFromEnvironment()};
  return variants;
}

}  // namespace

unsigned GpuVariantsNamed(const char* wanted) {
  unsigned variants = 0;
  const std::string names = std::string(wanted) + ",";
  for (size_t begin = 0, end; (end = names.find(',', begin)) != std::string::npos;
       begin = end + 1) {
    const std::string name = names.substr(begin, end - begin);
    if (name.empty()) continue;
    const NamedVariant* known = std::find_if(
        std::begin(kNamedVariants), std::end(kNamedVariants),
        [&](const NamedVariant& v) { return name == v.name; });
    if (known != std::end(kNamedVariants)) {
      variants |= known->variant;
    } else {
      std::fprintf(stderr, "tf-fbn-ops: TF_FBN_OPS_GPU_VARIANTS: no variant \"%s\" (%s); "
                   "ignored\n", name.c_str(), GpuVariantNames());
    }
  }
  return variants;
}

const char* GpuVariantNames() {
  static const std::string names = [] {
    std::string all;
    for (const NamedVariant& v : kNamedVariants) {
      all += (all.empty() ? "" : ",") + std::string(v.name);
    }
    return all;
  }();
  return names.c_str();
}

unsigned GpuVariants() { return VariantsInForce().load(std::memory_order_relaxed); }

void SetGpuVariants(unsigned variants) {
  VariantsInForce().store(variants, std::memory_order_relaxed);
}

const char* GpuErrorString(int error) {
  return cudaGetErrorString(static_cast<cudaError_t>(error));
}

int GpuBuildCudaVersion() { return CUDART_VERSION; }

template int BatchNormGradGpu<float>(const Params&, const Tensors<float>&, void*, GpuStream);
template int BatchNormGradGpu<Half>(const Params&, const Tensors<Half>&, void*, GpuStream);
template int BatchNormGradGpu<BFloat16>(const Params&, const Tensors<BFloat16>&, void*,
                                        GpuStream);

}  // namespace fbn
