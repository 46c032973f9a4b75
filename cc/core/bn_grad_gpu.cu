// The CUDA kernels of the numeric core and their host launcher. No TensorFlow headers: this file
// builds with nvcc alone, into the op library and into the standalone GPU test and benchmark.
//
// Three kernels per call, all on the caller's stream:
//   1. Sum*:     per-block partial sums of dy and dy*(x - mean) per channel (and, in inference
//                mode, dx = dy * scale / sqrt(var + eps) in the same sweep);
//   2. Finalize: per channel, adds the partials over the blocks in block order, writes the
//                scale/offset gradients and the dx coefficients;
//   3. Apply*:   (training only) dx = c1 * (dy - mean(dy)) - c2 * (x - mean).
// Each block's partials come from a fixed assignment of elements to threads and a fixed tree
// in shared memory, so the result is bit-identical run to run; no floating-point atomics.
//
// The math is the CPU kernels' (bn_grad_cpu.cc): terms and sums in double, dx evaluated in
// double and rounded once to T. FP64 costs little next to the memory traffic of these
// bandwidth-bound sweeps, and it makes the results as exact as the inputs allow on every GPU.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cc/core/bn_grad.h"
#include "cc/core/bn_grad_gpu.h"

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
// Loads and stores are this wide where the layout and the pointers allow it.
constexpr int kVectorBytes = 16;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Element access: widened to double on load (exactly), rounded once to nearest-even on store.
__device__ __forceinline__ double Load(float v) { return v; }
__device__ __forceinline__ double Load(Half v) { return __half2float(__ushort_as_half(v.bits)); }
__device__ __forceinline__ double Load(BFloat16 v) {
  return __bfloat162float(__ushort_as_bfloat16(v.bits));
}
template <typename T>
__device__ __forceinline__ T Round(double v);
template <>
__device__ __forceinline__ float Round<float>(double v) {
  return __double2float_rn(v);
}
template <>
__device__ __forceinline__ Half Round<Half>(double v) {
  return Half{__half_as_ushort(__double2half(v))};
}
template <>
__device__ __forceinline__ BFloat16 Round<BFloat16>(double v) {
  return BFloat16{__bfloat16_as_ushort(__double2bfloat16(v))};
}

// V consecutive elements, loaded and stored as one (up to 16-byte) access.
template <typename T, int V>
struct alignas(sizeof(T) * V) Vec {
  T v[V];
};
template <typename T, int V>
__device__ __forceinline__ Vec<T, V> LoadVec(const T* p) {
  return *reinterpret_cast<const Vec<T, V>*>(p);
}
template <typename T, int V>
__device__ __forceinline__ void StoreVec(T* p, const Vec<T, V>& v) {
  *reinterpret_cast<Vec<T, V>*>(p) = v;
}

// One thread's sums for V channels (or V lanes of one channel). A product of two widened
// floats is exact in double, so each term carries no rounding error of its own.
template <int V>
struct Accumulator {
  double dy[V] = {};
  double dy_xc[V] = {};

  __device__ void Add(int j, double d, double xc) {
    dy[j] += d;
    dy_xc[j] += d * xc;
  }
};

// Sums `value` over the threads of the block that share a lane (lane = threadIdx.x % lanes,
// lanes a power of two), in a fixed tree order. Valid in the threads with threadIdx.x < lanes.
__device__ double BlockSum(double value, double* shared, int lanes) {
  const int tid = threadIdx.x;
  shared[tid] = value;
  __syncthreads();
  for (int stride = kThreads / 2; stride >= lanes; stride /= 2) {
    if (tid < stride) shared[tid] += shared[tid + stride];
    __syncthreads();
  }
  const double sum = shared[tid];
  __syncthreads();  // shared is reused by the next call
  return sum;
}

// How the work is cut; depends on the (canonical) shape only.
struct Plan {
  int64_t row_blocks = 1;     // reduction blocks along R
  int64_t rows_per_block = 0;  // rows (channels last) or elements of a channel (channels first)

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
  }
};

// Channels last: a block is lanes_x channel vectors wide and kThreads / lanes_x rows tall.
int LanesFor(int64_t channel_vectors) {
  int lanes = 1;
  while (lanes < 32 && lanes < channel_vectors) lanes *= 2;
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
  int row_lane;  // thread's first row within the block
  int step;      // rows between this thread's rows
  template <typename T>
  __device__ RowTile(const Args<T>& a, int lanes_x, int V) {
    row_lane = threadIdx.x / lanes_x;
    step = kThreads / lanes_x;
    c0 = (static_cast<int64_t>(blockIdx.x) * lanes_x + threadIdx.x % lanes_x) * V;
    begin = static_cast<int64_t>(blockIdx.y) * a.rows_per_block + row_lane;
    end = min(a.rest, static_cast<int64_t>(blockIdx.y) * a.rows_per_block + a.rows_per_block);
  }
};

// Channels first: offset of channel c's element e, counted in (n, s) order.
template <typename T>
__device__ __forceinline__ int64_t ChannelsFirstOffset(const Args<T>& a, int64_t c, int64_t e) {
  const int64_t n = e / a.spatial;
  return (n * a.channels + c) * a.spatial + (e - n * a.spatial);
}

template <typename T, int V, bool kInference>
__global__ void __launch_bounds__(kThreads) SumChannelsLast(Args<T> a, int lanes_x) {
  __shared__ double shared[kThreads];
  const RowTile tile(a, lanes_x, V);
  const int64_t c0 = tile.c0;
  const bool active = c0 < a.channels;
  Accumulator<V> acc;
  if (active) {
    double mean[V], k[V];
    for (int j = 0; j < V; ++j) {
      mean[j] = a.t.mean[c0 + j];
      k[j] = kInference ? a.p.InvStd(a.t.variance[c0 + j]) * a.t.scale[c0 + j] : 0.0;
    }
    for (int64_t r = tile.begin; r < tile.end; r += tile.step) {
      const int64_t offset = r * a.channels + c0;
      const Vec<T, V> dy = LoadVec<T, V>(a.t.y_backprop + offset);
      const Vec<T, V> x = LoadVec<T, V>(a.t.x + offset);
      Vec<T, V> dx;
      for (int j = 0; j < V; ++j) {
        const double d = Load(dy.v[j]);
        acc.Add(j, d, Load(x.v[j]) - mean[j]);
        if (kInference) dx.v[j] = Round<T>(d * k[j]);
      }
      if (kInference) StoreVec<T, V>(a.t.x_backprop + offset, dx);
    }
  }
  for (int j = 0; j < V; ++j) {
    const double sum_dy = BlockSum(acc.dy[j], shared, lanes_x);
    const double sum_dy_xc = BlockSum(acc.dy_xc[j], shared, lanes_x);
    if (tile.row_lane == 0 && active) {
      a.partial_dy[blockIdx.y * a.channels + c0 + j] = sum_dy;
      a.partial_dy_xc[blockIdx.y * a.channels + c0 + j] = sum_dy_xc;
    }
  }
}

template <typename T, int V, bool kInference>
__global__ void __launch_bounds__(kThreads) SumChannelsFirst(Args<T> a) {
  __shared__ double shared[kThreads];
  const int64_t c = blockIdx.x;
  const int64_t begin = static_cast<int64_t>(blockIdx.y) * a.rows_per_block;
  const int64_t end = min(a.rest, begin + a.rows_per_block);
  const double mean = a.t.mean[c];
  const double k = kInference ? a.p.InvStd(a.t.variance[c]) * a.t.scale[c] : 0.0;
  Accumulator<V> acc;
  // e counts channel c's elements in (n, s) order; S is a multiple of V.
  for (int64_t e = begin + static_cast<int64_t>(threadIdx.x) * V; e < end;
       e += static_cast<int64_t>(kThreads) * V) {
    const int64_t offset = ChannelsFirstOffset(a, c, e);
    const Vec<T, V> dy = LoadVec<T, V>(a.t.y_backprop + offset);
    const Vec<T, V> x = LoadVec<T, V>(a.t.x + offset);
    Vec<T, V> dx;
    for (int j = 0; j < V; ++j) {
      const double d = Load(dy.v[j]);
      acc.Add(j, d, Load(x.v[j]) - mean);
      if (kInference) dx.v[j] = Round<T>(d * k);
    }
    if (kInference) StoreVec<T, V>(a.t.x_backprop + offset, dx);
  }
  double thread_dy = 0.0;
  double thread_dy_xc = 0.0;
  for (int j = 0; j < V; ++j) {
    thread_dy += acc.dy[j];
    thread_dy_xc += acc.dy_xc[j];
  }
  const double sum_dy = BlockSum(thread_dy, shared, 1);
  const double sum_dy_xc = BlockSum(thread_dy_xc, shared, 1);
  if (threadIdx.x == 0) {
    a.partial_dy[blockIdx.y * a.channels + c] = sum_dy;
    a.partial_dy_xc[blockIdx.y * a.channels + c] = sum_dy_xc;
  }
}

// One thread per channel: partials in block order, outputs, and the training coefficients.
template <typename T>
__global__ void __launch_bounds__(kThreads) Finalize(Args<T> a, int64_t row_blocks) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (c >= a.channels) return;
  double sum_dy = 0.0;
  double sum_dy_xc = 0.0;
  for (int64_t b = 0; b < row_blocks; ++b) {
    sum_dy += a.partial_dy[b * a.channels + c];
    sum_dy_xc += a.partial_dy_xc[b * a.channels + c];
  }
  const double inv_std = a.p.InvStd(a.t.variance[c]);
  a.t.offset_backprop[c] = static_cast<float>(sum_dy);
  a.t.scale_backprop[c] = static_cast<float>(sum_dy_xc * inv_std);
  if (a.p.is_training) {
    if (isinf(inv_std)) {
      // var + eps == 0: TensorFlow scales inside the sum, and only that order gives its
      // infinities and NaNs. Serial over the channel; never taken for finite statistics.
      double scaled = 0.0;
      for (int64_t e = 0; e < a.rest; ++e) {
        const int64_t k = a.p.shape.channels_last ? e * a.channels + c
                                                  : ChannelsFirstOffset(a, c, e);
        scaled += Load(a.t.y_backprop[k]) * ((Load(a.t.x[k]) - a.t.mean[c]) * inv_std);
      }
      a.t.scale_backprop[c] = static_cast<float>(scaled);
    }
    // dx = c1 * ((dy - mean(dy)) - (x - mean) * c2), grouped as TensorFlow's expression.
    const double rest = static_cast<double>(a.rest);
    a.coef[c] = a.t.scale[c] * inv_std;
    a.coef[a.channels + c] = sum_dy / rest;
    a.coef[2 * a.channels + c] = inv_std * inv_std * (sum_dy_xc / rest);
  }
}

// dx = c1 * ((dy - mean(dy)) - (x - mean) * c2), centred before scaling for accuracy.
template <typename T>
__device__ __forceinline__ T TrainingDx(double dy, double x, double mean, double c1,
                                        double dy_mean, double c2) {
  return Round<T>(c1 * ((dy - dy_mean) - (x - mean) * c2));
}

template <typename T, int V>
__global__ void __launch_bounds__(kThreads) ApplyChannelsLast(Args<T> a, int lanes_x) {
  const RowTile tile(a, lanes_x, V);
  const int64_t c0 = tile.c0;
  if (c0 >= a.channels) return;
  double mean[V], c1[V], dy_mean[V], c2[V];
  for (int j = 0; j < V; ++j) {
    mean[j] = a.t.mean[c0 + j];
    c1[j] = a.coef[c0 + j];
    dy_mean[j] = a.coef[a.channels + c0 + j];
    c2[j] = a.coef[2 * a.channels + c0 + j];
  }
  for (int64_t r = tile.begin; r < tile.end; r += tile.step) {
    const int64_t offset = r * a.channels + c0;
    const Vec<T, V> dy = LoadVec<T, V>(a.t.y_backprop + offset);
    const Vec<T, V> x = LoadVec<T, V>(a.t.x + offset);
    Vec<T, V> dx;
    for (int j = 0; j < V; ++j) {
      dx.v[j] = TrainingDx<T>(Load(dy.v[j]), Load(x.v[j]), mean[j], c1[j], dy_mean[j], c2[j]);
    }
    StoreVec<T, V>(a.t.x_backprop + offset, dx);
  }
}

template <typename T, int V>
__global__ void __launch_bounds__(kThreads) ApplyChannelsFirst(Args<T> a) {
  const int64_t c = blockIdx.x;
  const int64_t begin = static_cast<int64_t>(blockIdx.y) * a.rows_per_block;
  const int64_t end = min(a.rest, begin + a.rows_per_block);
  const double mean = a.t.mean[c];
  const double c1 = a.coef[c];
  const double dy_mean = a.coef[a.channels + c];
  const double c2 = a.coef[2 * a.channels + c];
  for (int64_t e = begin + static_cast<int64_t>(threadIdx.x) * V; e < end;
       e += static_cast<int64_t>(kThreads) * V) {
    const int64_t offset = ChannelsFirstOffset(a, c, e);
    const Vec<T, V> dy = LoadVec<T, V>(a.t.y_backprop + offset);
    const Vec<T, V> x = LoadVec<T, V>(a.t.x + offset);
    Vec<T, V> dx;
    for (int j = 0; j < V; ++j) {
      dx.v[j] = TrainingDx<T>(Load(dy.v[j]), Load(x.v[j]), mean, c1, dy_mean, c2);
    }
    StoreVec<T, V>(a.t.x_backprop + offset, dx);
  }
}

template <typename T, int V>
void LaunchAll(const Args<T>& a, const Shape& s, const Plan& plan, cudaStream_t stream) {
  const bool training = a.p.is_training;
  if (s.channels_last) {
    const int lanes_x = LanesFor(s.channels / V);
    const dim3 grid(static_cast<unsigned>(CeilDiv(s.channels / V, lanes_x)),
                    static_cast<unsigned>(plan.row_blocks));
    if (training) {
      SumChannelsLast<T, V, false><<<grid, kThreads, 0, stream>>>(a, lanes_x);
    } else {
      SumChannelsLast<T, V, true><<<grid, kThreads, 0, stream>>>(a, lanes_x);
    }
    Finalize<T><<<static_cast<unsigned>(CeilDiv(s.channels, kThreads)), kThreads, 0, stream>>>(
        a, plan.row_blocks);
    if (training) ApplyChannelsLast<T, V><<<grid, kThreads, 0, stream>>>(a, lanes_x);
  } else {
    const dim3 grid(static_cast<unsigned>(s.channels), static_cast<unsigned>(plan.row_blocks));
    if (training) {
      SumChannelsFirst<T, V, false><<<grid, kThreads, 0, stream>>>(a);
    } else {
      SumChannelsFirst<T, V, true><<<grid, kThreads, 0, stream>>>(a);
    }
    Finalize<T><<<static_cast<unsigned>(CeilDiv(s.channels, kThreads)), kThreads, 0, stream>>>(
        a, plan.row_blocks);
    if (training) ApplyChannelsFirst<T, V><<<grid, kThreads, 0, stream>>>(a);
  }
}

bool Aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % kVectorBytes == 0; }

}  // namespace

size_t GpuScratchBytes(const Shape& shape) {
  const Shape s = shape.canonical();
  if (s.elements() == 0) return 0;
  const Plan plan(s);
  return static_cast<size_t>((2 * plan.row_blocks + 3) * s.channels) * sizeof(double);
}

template <typename T>
int BatchNormGradGpu(const Params& params, const Tensors<T>& t, void* scratch, GpuStream stream) {
  const Shape s = params.shape.canonical();
  if (s.elements() == 0) {
    const size_t bytes = static_cast<size_t>(s.channels) * sizeof(float);
    if (bytes == 0) return cudaSuccess;
    cudaError_t error = cudaMemsetAsync(t.scale_backprop, 0, bytes, stream);
    if (error == cudaSuccess) error = cudaMemsetAsync(t.offset_backprop, 0, bytes, stream);
    return error;
  }
  const Plan plan(s);
  Args<T> a;
  a.t = t;
  a.p = params;
  a.p.shape = s;
  a.channels = s.channels;
  a.spatial = s.spatial;
  a.rest = s.rest();
  a.rows_per_block = plan.rows_per_block;
  a.partial_dy = static_cast<double*>(scratch);
  a.partial_dy_xc = a.partial_dy + plan.row_blocks * s.channels;
  a.coef = a.partial_dy_xc + plan.row_blocks * s.channels;

  constexpr int kVector = kVectorBytes / sizeof(T);
  const int64_t run = s.channels_last ? s.channels : s.spatial;  // contiguous per channel group
  const bool vectorize = run % kVector == 0 && Aligned(t.y_backprop) && Aligned(t.x) &&
                         Aligned(t.x_backprop);
  if (vectorize) {
    LaunchAll<T, kVector>(a, s, plan, stream);
  } else {
    LaunchAll<T, 1>(a, s, plan, stream);
  }
  return cudaGetLastError();
}

const char* GpuErrorString(int error) {
  return cudaGetErrorString(static_cast<cudaError_t>(error));
}

template int BatchNormGradGpu<float>(const Params&, const Tensors<float>&, void*, GpuStream);
template int BatchNormGradGpu<Half>(const Params&, const Tensors<Half>&, void*, GpuStream);
template int BatchNormGradGpu<BFloat16>(const Params&, const Tensors<BFloat16>&, void*,
                                        GpuStream);

}  // namespace fbn
