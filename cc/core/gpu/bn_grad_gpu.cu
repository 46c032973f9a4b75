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
// The math is the CPU kernels' (bn_grad_cpu.cc): terms and sums in double, dx evaluated in
// double and rounded once to T. FP64 costs little next to the memory traffic of these
// bandwidth-bound sweeps, and it makes the results as exact as the inputs allow on every GPU.
//
// Speed comes from memory-level parallelism: every thread issues the loads of kUnroll vectors
// (8 or 16 bytes each) of each input before it uses the first, so each resident thread keeps a
// hundred bytes or more in flight.
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

namespace fbn {
namespace {

constexpr int kThreads = 256;
// Reduction blocks cover about this many elements.
constexpr int64_t kBlockElements = 16384;
// Channels last: at least this many rows per block, so wide C does not turn into partial-sum
// traffic (each block writes 2 * C doubles).
constexpr int64_t kMinRowsPerBlock = 64;
// Bounds the scratch to 2 * kMaxRowBlocks * C doubles.
constexpr int64_t kMaxRowBlocks = 1024;
// Vectors of each tensor a thread has in flight at once: with one of 16 bytes, 128 bytes per
// thread, which keeps HBM busy at the occupancy the double-precision state allows.
constexpr int kUnroll = 4;

// Elements per load and store where the layout and the pointers allow it. Channels first, the
// V elements of a vector share one channel: 16 bytes. Channels last, each is a channel with its
// own double-precision state (mean, sums or coefficients), so 16-bit types take 8 bytes: with 8
// channels and kUnroll vectors a thread needed 130-170 registers, and the lower occupancy cost
// more bandwidth (on an H100) than the narrower loads. The wide_rows variant (GpuVariant) takes
// 16 bytes with half as many vectors in flight (kRowsUnroll), the same bytes, to be timed.
template <typename T, bool kChannelsLast>
constexpr int kVector = sizeof(T) == 4 || !kChannelsLast ? 16 / sizeof(T) : 4;
constexpr int kWideRowsVector = 8;

// Vectors of each tensor a thread of a channels-last sweep loads before using the first: eight
// 16-bit channels to a vector hold as many bytes in half as many vectors, and their sums and
// means twice the registers.
template <int V>
constexpr int kRowsUnroll = V == kWideRowsVector ? kUnroll / 2 : kUnroll;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

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

// How the work is cut; depends on the (canonical) shape only.
struct Plan {
  int64_t row_blocks = 1;      // reduction blocks along R
  int64_t rows_per_block = 0;  // rows (channels last) or elements of a channel (channels first)
  int first_lanes = 1;         // channels first: channels side by side in a block
  int finalize_channels = 1;   // channels per Finalize block; its other threads split the blocks

  explicit Plan(const Shape& s) {
    const int64_t rest = s.rest();
    const int64_t target =
        s.channels_last ? std::max(kMinRowsPerBlock, CeilDiv(kBlockElements, s.channels))
                        : kBlockElements;
    const int64_t wanted = std::clamp<int64_t>(CeilDiv(rest, target), 1, kMaxRowBlocks);
    rows_per_block = CeilDiv(rest, wanted);
    // Channels first: block boundaries on a multiple of any vector width.
    if (!s.channels_last) rows_per_block = CeilDiv(rows_per_block, 16) * 16;
    row_blocks = CeilDiv(rest, rows_per_block);
    // Channels first with short channels: several channels per block, as long as each of
    // their threads still has at most 16 elements; otherwise most of a block would idle.
    while (!s.channels_last && first_lanes < kWarpSize &&
           kThreads / (2 * first_lanes) * 16 >= rows_per_block) {
      first_lanes *= 2;
    }
    // Finalize: enough threads per channel to read its row_blocks partials in one or a few
    // steps; the remaining factor of kThreads goes to neighbouring channels (coalesced reads).
    int threads_per_channel = 1;
    while (threads_per_channel < row_blocks && threads_per_channel < kThreads) {
      threads_per_channel *= 2;
    }
    finalize_channels = std::clamp(kThreads / threads_per_channel, 1, kWarpSize);
  }
};

// Channels last: a block is `lanes` channel vectors wide and kThreads / lanes rows tall.
int LanesFor(int64_t channel_vectors) {
  int lanes = 1;
  while (lanes < kWarpSize && lanes < channel_vectors) lanes *= 2;
  return lanes;
}

// Pointers of one call, as the kernels see them.
template <typename T>
struct Args {
  Tensors<T> t;
  Params p;
  int64_t channels, spatial, rest, rows_per_block;
  double* partial_dy;     // [row_blocks][C]
  double* partial_dy_xc;  // [row_blocks][C]
  double* coef;           // [3][C]: c1, mean(dy), c2 (training)
};

// Channels last: this thread's V channels and rows [begin, end) step `step` of its block.
struct RowTile {
  int64_t c0, begin, end;
  int step;  // rows between this thread's rows
  bool active;
  template <typename T>
  __device__ RowTile(const Args<T>& a, int lanes, int V, int64_t row_block) {
    step = kThreads / lanes;
    c0 = (static_cast<int64_t>(blockIdx.x) * lanes + threadIdx.x % lanes) * V;
    const int64_t block_begin = row_block * a.rows_per_block;
    begin = block_begin + threadIdx.x / lanes;
    end = min(a.rest, block_begin + a.rows_per_block);
    active = c0 < a.channels;
  }
};

// Channels first: a thread walks channel c's elements e, e + step, e + 2 step, ... in (n, s)
// order, keeping n and s by additions: a 64-bit division per access would cost more than the
// access.
struct PlaneWalk {
  int64_t n, s;    // image and position within the plane of the current element
  int64_t dn, ds;  // step, in whole planes and the remainder
  __device__ PlaneWalk(int64_t e, int64_t step, int64_t spatial) {
    n = e / spatial;
    s = e - n * spatial;
    dn = step / spatial;
    ds = step - dn * spatial;
  }
  template <typename T>
  __device__ int64_t Offset(const Args<T>& a, int64_t c) const {
    return (n * a.channels + c) * a.spatial + s;
  }
  __device__ void Advance(int64_t spatial) {
    n += dn;
    s += ds;
    if (s >= spatial) {
      s -= spatial;
      ++n;
    }
  }
};

// Up to kCount vectors of dy and x at `offset`, every load issued before any is used; the first
// `count` lie inside the thread's range.
template <typename T, int V, int kCount = kUnroll>
struct Batch {
  Vec<T, V> dy[kCount], x[kCount];
  int64_t offset[kCount];
  int count;

  __device__ __forceinline__ void Load(const Args<T>& a) {
#pragma unroll
    for (int u = 0; u < kCount; ++u) {
      if (u < count) {
        dy[u] = LoadVec<T, V>(a.t.y_backprop + offset[u]);
        x[u] = LoadVec<T, V>(a.t.x + offset[u]);
      }
    }
  }
};

// Channels last: body(dy, x, offset) for each vector of the thread's rows, in row order,
// kRowsUnroll vectors loaded before the first is used.
template <typename T, int V, typename Body>
__device__ __forceinline__ void SweepRows(const Args<T>& a, const RowTile& tile, Body&& body) {
  constexpr int kCount = kRowsUnroll<V>;
  for (int64_t r = tile.begin; r < tile.end; r += kCount * tile.step) {
    Batch<T, V, kCount> b;
    b.count = 0;
#pragma unroll
    for (int u = 0; u < kCount; ++u) {
      const int64_t row = r + u * tile.step;
      b.offset[u] = row * a.channels + tile.c0;
      b.count += row < tile.end ? 1 : 0;
    }
    b.Load(a);
#pragma unroll
    for (int u = 0; u < kCount; ++u) {
      if (u < b.count) body(b.dy[u], b.x[u], b.offset[u]);
    }
  }
}

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
    SweepRows<T, V>(a, tile, [&](const Vec<T, V>& dy, const Vec<T, V>& x, int64_t offset) {
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

// Channels first: this thread's channel and its walk over the channel's elements in the block.
struct ChannelSpan {
  int64_t c, begin, end, step;
  bool active;
  template <typename T>
  __device__ ChannelSpan(const Args<T>& a, int lanes, int V, int64_t row_block) {
    c = static_cast<int64_t>(blockIdx.x) * lanes + threadIdx.x % lanes;
    const int64_t block_begin = row_block * a.rows_per_block;
    begin = block_begin + static_cast<int64_t>(threadIdx.x / lanes) * V;
    end = min(a.rest, block_begin + a.rows_per_block);
    step = static_cast<int64_t>(kThreads / lanes) * V;
    active = c < a.channels;
  }
};

// Channels first: body(dy, x, offset) for each vector of the thread's span of its channel, in
// (n, s) order, kUnroll vectors loaded before the first is used. S is a multiple of V.
template <typename T, int V, typename Body>
__device__ __forceinline__ void SweepPlanes(const Args<T>& a, const ChannelSpan& span,
                                            Body&& body) {
  PlaneWalk walk(span.begin, span.step, a.spatial);
  for (int64_t e = span.begin; e < span.end; e += kUnroll * span.step) {
    Batch<T, V> b;
    b.count = 0;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      b.offset[u] = walk.Offset(a, span.c);
      walk.Advance(a.spatial);
      b.count += e + u * span.step < span.end ? 1 : 0;
    }
    b.Load(a);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (u < b.count) body(b.dy[u], b.x[u], b.offset[u]);
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
    SweepPlanes<T, V>(a, span, [&](const Vec<T, V>& dy, const Vec<T, V>& x, int64_t offset) {
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

// dx = c1 * ((dy - mean(dy)) - (x - mean) * c2), centred before scaling for accuracy.
template <typename T>
__device__ __forceinline__ T TrainingDx(double dy, double x, double mean, double c1,
                                        double dy_mean, double c2) {
  return Round<T>(c1 * ((dy - dy_mean) - (x - mean) * c2));
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
  SweepRows<T, V>(a, tile, [&](const Vec<T, V>& dy, const Vec<T, V>& x, int64_t offset) {
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
  SweepPlanes<T, V>(a, span, [&](const Vec<T, V>& dy, const Vec<T, V>& x, int64_t offset) {
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
cudaError_t LaunchFinalize(const Args<T>& a, const Plan& plan, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(CeilDiv(a.channels, plan.finalize_channels)));
  return LaunchKernel(Finalize<T>, grid, dim3(kThreads), stream, a, plan.row_blocks,
                      plan.finalize_channels);
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
cudaError_t LaunchAll(const Args<T>& a, const Shape& s, const Plan& plan, cudaStream_t stream) {
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
cudaError_t LaunchLayout(const Args<T>& a, const Shape& s, const Plan& plan, int64_t run,
                         cudaStream_t stream) {
  constexpr int V = kVector<T, kChannelsLast>;
  auto vectorizable = [&](int width) {
    const size_t bytes = width * sizeof(T);
    return run % width == 0 && Aligned(a.t.y_backprop, bytes) && Aligned(a.t.x, bytes) &&
           Aligned(a.t.x_backprop, bytes);
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
  const Plan plan(s);
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
  const Plan plan(s);
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
