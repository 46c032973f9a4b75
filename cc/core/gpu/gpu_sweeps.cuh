// How the CUDA kernels of the core cut a tensor into blocks and walk a block's elements: the
// gradient's sweeps (bn_grad_gpu.cu) and the forward's moments and y (bn_forward_gpu.cu)
// share it.
//
// A sweep reads one or two tensors of the same layout (x; or dy and x) in vectors of V elements
// and hands each vector to a body, in an order fixed by the block's shape: the sums made along
// the way are bit-identical run to run. Speed comes from memory-level parallelism: every thread
// issues the loads of kUnroll vectors (8 or 16 bytes each) of each tensor before it uses the
// first, so each resident thread keeps a hundred bytes or more in flight.
#ifndef TF_FBN_OPS_CC_CORE_GPU_GPU_SWEEPS_CUH_
#define TF_FBN_OPS_CC_CORE_GPU_GPU_SWEEPS_CUH_

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>

#include "cc/core/bn_grad.h"
#include "cc/core/ceil_div.h"
#include "cc/core/gpu/gpu_elements.cuh"
#include "cc/core/gpu/gpu_lane_sum.cuh"

namespace fbn {

constexpr int kThreads = 256;
// Reduction blocks cover about this many elements.
constexpr int64_t kBlockElements = 16384;
// Channels last: at least this many rows per block, so wide C does not turn into partial-sum
// traffic (each block writes a few doubles per channel).
constexpr int64_t kMinRowsPerBlock = 64;
// Bounds the scratch to a few times kMaxRowBlocks * C doubles.
constexpr int64_t kMaxRowBlocks = 1024;
// Vectors of each tensor a thread has in flight at once: with one of 16 bytes, 128 bytes per
// thread, which keeps HBM busy at the occupancy the double-precision state allows.
constexpr int kUnroll = 4;

// Elements per load and store where the layout and the pointers allow it. Channels first, the
// V elements of a vector share one channel: 16 bytes. Channels last, each is a channel with its
// own double-precision state (mean, sums or coefficients), so 16-bit types take 8 bytes: with 8
// channels and kUnroll vectors a thread needed 130-170 registers, and the lower occupancy cost
// more bandwidth (on an H100) than the narrower loads. The gradient's wide_rows variant
// (GpuVariant) takes 16 bytes with half as many vectors in flight (kRowsUnroll), the same
// bytes, to be timed.
template <typename T, bool kChannelsLast>
constexpr int kVector = sizeof(T) == 4 || !kChannelsLast ? 16 / sizeof(T) : 4;
constexpr int kWideRowsVector = 8;

// Vectors of each tensor a thread of a channels-last sweep loads before using the first: eight
// 16-bit channels to a vector hold as many bytes in half as many vectors, and their sums and
// means twice the registers.
template <int V>
constexpr int kRowsUnroll = V == kWideRowsVector ? kUnroll / 2 : kUnroll;

// How a (canonical) shape is cut into blocks; depends on the shape only, not on the GPU.
struct BlockPlan {
  int64_t row_blocks = 1;      // blocks along R
  int64_t rows_per_block = 0;  // rows (channels last) or elements of a channel (channels first)
  int first_lanes = 1;         // channels first: channels side by side in a block
  int finish_channels = 1;     // channels per finishing block; its other threads split the blocks

  explicit BlockPlan(const Shape& s) {
    const int64_t rest = s.rest();
    const int64_t target =
        s.channels_last ? std::max(kMinRowsPerBlock, CeilDiv(kBlockElements, s.channels))
                        : kBlockElements;
    const int64_t wanted = std::clamp<int64_t>(CeilDiv(rest, target), 1, kMaxRowBlocks);
    rows_per_block = CeilDiv(rest, wanted);
    // Channels first: block boundaries on a multiple of any vector width.
    if (!s.channels_last) rows_per_block = RoundUp(rows_per_block, 16);
    row_blocks = rest == 0 ? 0 : CeilDiv(rest, rows_per_block);
    // Channels first with short channels: several channels per block, as long as each of
    // their threads still has at most 16 elements; otherwise most of a block would idle.
    while (!s.channels_last && first_lanes < kWarpSize &&
           kThreads / (2 * first_lanes) * 16 >= rows_per_block) {
      first_lanes *= 2;
    }
    // Finishing: enough threads per channel to read its row_blocks partials in one or a few
    // steps; the remaining factor of kThreads goes to neighbouring channels (coalesced reads).
    int threads_per_channel = 1;
    while (threads_per_channel < row_blocks && threads_per_channel < kThreads) {
      threads_per_channel *= 2;
    }
    finish_channels = std::clamp(kThreads / threads_per_channel, 1, kWarpSize);
  }
};

// Channels last: channel vectors side by side in a block (lane = threadIdx.x % lanes).
inline int LanesFor(int64_t channel_vectors) {
  int lanes = 1;
  while (lanes < kWarpSize && lanes < channel_vectors) lanes *= 2;
  return lanes;
}

// The canonical shape as the sweeps see it, and the plan's rows per block.
struct SweepShape {
  int64_t channels, spatial, rest, rows_per_block;
};

// The tensors a sweep reads, all of one layout: kTensors of them, e.g. {dy, x}.
template <typename T, int kTensors>
struct Sources {
  const T* tensors[kTensors];
};

// Channels last: this thread's V channels and rows [begin, end) step `step` of its block.
struct RowTile {
  int64_t c0, begin, end;
  int step;  // rows between this thread's rows
  bool active;
  __device__ RowTile(const SweepShape& g, int lanes, int V, int64_t row_block) {
    step = kThreads / lanes;
    c0 = (static_cast<int64_t>(blockIdx.x) * lanes + threadIdx.x % lanes) * V;
    const int64_t block_begin = row_block * g.rows_per_block;
    begin = block_begin + threadIdx.x / lanes;
    end = min(g.rest, block_begin + g.rows_per_block);
    active = c0 < g.channels;
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
  __device__ int64_t Offset(const SweepShape& g, int64_t c) const {
    return (n * g.channels + c) * g.spatial + s;
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

// Channels first: this thread's channel and its walk over the channel's elements in the block.
struct ChannelSpan {
  int64_t c, begin, end, step;
  bool active;
  __device__ ChannelSpan(const SweepShape& g, int lanes, int V, int64_t row_block) {
    c = static_cast<int64_t>(blockIdx.x) * lanes + threadIdx.x % lanes;
    const int64_t block_begin = row_block * g.rows_per_block;
    begin = block_begin + static_cast<int64_t>(threadIdx.x / lanes) * V;
    end = min(g.rest, block_begin + g.rows_per_block);
    step = static_cast<int64_t>(kThreads / lanes) * V;
    active = c < g.channels;
  }
};

// Up to kCount vectors of each source at `offset`, every load issued before any is used; the
// first `count` lie inside the thread's range.
template <typename T, int V, int kTensors, int kCount>
struct Batch {
  Vec<T, V> v[kTensors][kCount];
  int64_t offset[kCount];
  int count = 0;

  __device__ __forceinline__ void Load(const Sources<T, kTensors>& from) {
#pragma unroll
    for (int u = 0; u < kCount; ++u) {
      if (u < count) {
#pragma unroll
        for (int i = 0; i < kTensors; ++i) v[i][u] = LoadVec<T, V>(from.tensors[i] + offset[u]);
      }
    }
  }
  // body(vector of each source..., offset) for the loaded vectors, in order.
  template <typename Body>
  __device__ __forceinline__ void Visit(Body& body) const {
#pragma unroll
    for (int u = 0; u < kCount; ++u) {
      if (u >= count) continue;
      if constexpr (kTensors == 1) {
        body(v[0][u], offset[u]);
      } else {
        static_assert(kTensors == 2, "one or two sources");
        body(v[0][u], v[1][u], offset[u]);
      }
    }
  }
};

// Channels last: body for each vector of the thread's rows, in row order, kRowsUnroll vectors
// of each source loaded before the first is used.
template <typename T, int V, int kTensors, typename Body>
__device__ __forceinline__ void SweepRows(const SweepShape& g, const Sources<T, kTensors>& from,
                                          const RowTile& tile, Body&& body) {
  constexpr int kCount = kRowsUnroll<V>;
  for (int64_t r = tile.begin; r < tile.end; r += kCount * tile.step) {
    Batch<T, V, kTensors, kCount> b;
#pragma unroll
    for (int u = 0; u < kCount; ++u) {
      const int64_t row = r + u * tile.step;
      b.offset[u] = row * g.channels + tile.c0;
      b.count += row < tile.end ? 1 : 0;
    }
    b.Load(from);
    b.Visit(body);
  }
}

// Channels first: body for each vector of the thread's span of its channel, in (n, s) order,
// kUnroll vectors of each source loaded before the first is used. S is a multiple of V.
template <typename T, int V, int kTensors, typename Body>
__device__ __forceinline__ void SweepPlanes(const SweepShape& g, const Sources<T, kTensors>& from,
                                            const ChannelSpan& span, Body&& body) {
  PlaneWalk walk(span.begin, span.step, g.spatial);
  for (int64_t e = span.begin; e < span.end; e += kUnroll * span.step) {
    Batch<T, V, kTensors, kUnroll> b;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      b.offset[u] = walk.Offset(g, span.c);
      walk.Advance(g.spatial);
      b.count += e + u * span.step < span.end ? 1 : 0;
    }
    b.Load(from);
    b.Visit(body);
  }
}

// Whether every buffer can be read and written in vectors of `width` elements of T, given the
// layout's contiguous runs of `run` elements (a row of channels, or a plane).
template <typename T>
bool Vectorizable(int64_t run, int width, std::initializer_list<const void*> buffers) {
  if (run % width != 0) return false;
  for (const void* p : buffers) {
    if (!Aligned(p, width * sizeof(T))) return false;
  }
  return true;
}

}  // namespace fbn

#endif  // TF_FBN_OPS_CC_CORE_GPU_GPU_SWEEPS_CUH_
