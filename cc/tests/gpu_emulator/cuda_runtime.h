// Host emulation of the slice of CUDA that the core's kernels (cc/core/gpu/bn_grad_gpu.cu) and the
// GPU test (cc/tests/gpu_core_test.cu) use, so that the same sources compile with g++ and run
// on any machine, under AddressSanitizer and UndefinedBehaviorSanitizer (make gpu-emu-test).
//
// How a launch runs: the blocks of the grid one after another; the threads of a block as
// fibers (ucontext) on one OS thread, each running until it reaches a barrier or returns.
// __syncthreads releases the block only when every thread waits at the same __syncthreads
// (same file and line); a thread that returned, or one waiting elsewhere, aborts the run with a
// message. The warp shuffles are a warp-wide exchange with the same rule among the 32 lanes.
// Launches are checked against CUDA's limits (grid and block dimensions, zero-sized grids,
// dynamic shared memory), device allocations and shared memory start filled with 0xFF bytes
// (NaN in every floating-point type of the core), and memory is host memory, so ASan sees
// every out-of-bounds access.
//
// What it tests: the kernels' logic (indexing, the cut into blocks, reduction order, barrier
// discipline, special values), with the host's IEEE arithmetic. What it does not: the hardware.
// Threads never run truly in parallel, so it cannot find data races in general
// (compute-sanitizer's racecheck on a GPU does); it catches the plainest missing barrier, one
// thread writing what another reads before any barrier between them, because threads resume in
// index order in some blocks and in reverse order in their neighbours. The device's FMA
// contraction and conversion instructions are not reproduced bit for bit; and timing,
// occupancy and the static shared-memory limit (ptxas enforces that one) are out of its reach.
#ifndef TF_FBN_OPS_CC_TESTS_GPU_EMULATOR_CUDA_RUNTIME_H_
#define TF_FBN_OPS_CC_TESTS_GPU_EMULATOR_CUDA_RUNTIME_H_

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

// The emulated runtime stands in for CUDA 13.0's (cudaRuntimeGetVersion says the same).
#define CUDART_VERSION 13000

// Lets a test skip what only real hardware can show (concurrent streams, say).
#define FBN_GPU_EMULATOR 1

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
// One copy per kernel instantiation, seen by all threads of the running block (blocks run one
// at a time). The section lets the emulator refill all of them with 0xFF before each block.
#define __shared__ __attribute__((section("fbn_emu_shared"))) static

struct uint3 {
  unsigned x, y, z;
};
// CUDA's vector types that the kernels store vectors through, and the cached store __stwb.
struct alignas(8) uint2 {
  unsigned x, y;
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
template <typename V>
inline void __stwb(V* p, V value) {
  *p = value;
}

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

// The running thread's coordinates; the scheduler sets them before it resumes a thread.
extern thread_local uint3 threadIdx;
extern thread_local uint3 blockIdx;
extern thread_local dim3 blockDim;
extern thread_local dim3 gridDim;
constexpr int warpSize = 32;

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInsufficientDriver = 35,
  cudaErrorNoDevice = 100,
  cudaErrorNotReady = 600,
};
using cudaError = cudaError_t;

struct CUstream_st;
using cudaStream_t = CUstream_st*;
constexpr unsigned cudaStreamDefault = 0;
constexpr unsigned cudaStreamNonBlocking = 1;
// An event holds the host time at which it was recorded (every call completes before it
// returns, so that is when the work before it ended).
struct CUevent_st;
using cudaEvent_t = CUevent_st*;

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};

struct cudaDeviceProp {
  char name[256];
  int major, minor;
  size_t totalGlobalMem;
  int multiProcessorCount;
};

// The runtime API, as far as the core and its test use it. Streams are accepted and ignored:
// every call completes before it returns.
cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaDriverGetVersion(int* version);
cudaError_t cudaRuntimeGetVersion(int* version);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaMalloc(void** pointer, size_t bytes);
cudaError_t cudaFree(void* pointer);
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream = nullptr);
cudaError_t cudaMemset(void* pointer, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void* pointer, int value, size_t bytes, cudaStream_t stream = nullptr);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = nullptr);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorString(cudaError_t error);

namespace fbn_emu {

// Runs `thread_body` once for every thread of every block of the grid, after checking the
// launch configuration against CUDA's limits (an invalid one returns the error CUDA gives).
cudaError_t RunGrid(dim3 grid, dim3 block, size_t dynamic_shared_bytes,
                    const std::function<void()>& thread_body);

// Barriers of the running thread, identified by their call site.
void BlockBarrier(const char* file, int line);
// Exchanges 8 bytes among the 32 lanes of the running thread's warp: returns what lane
// `source_lane` passed. `mask` must name the whole warp.
uint64_t WarpShuffle(unsigned mask, uint64_t bits, int source_lane, const char* file, int line);

template <typename... P, size_t... I>
cudaError_t Launch(void (*kernel)(P...), dim3 grid, dim3 block, void** args, size_t shared,
                   std::index_sequence<I...>) {
  // As on a GPU, the arguments are copied at launch; each thread gets its own copies.
  const std::tuple<std::decay_t<P>...> values(*static_cast<std::decay_t<P>*>(args[I])...);
  return RunGrid(grid, block, shared, [&] { std::apply(kernel, values); });
}

}  // namespace fbn_emu

template <typename... P>
cudaError_t cudaLaunchKernel(void (*kernel)(P...), dim3 grid, dim3 block, void** args,
                             size_t shared_bytes = 0, cudaStream_t /*stream*/ = nullptr) {
  return fbn_emu::Launch(kernel, grid, block, args, shared_bytes,
                         std::index_sequence_for<P...>{});
}

inline void __syncthreads(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  fbn_emu::BlockBarrier(file, line);
}

template <typename T>
T __shfl_xor_sync(unsigned mask, T value, int lane_mask, const char* file = __builtin_FILE(),
                  int line = __builtin_LINE()) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= sizeof(uint64_t));
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  const int lane = static_cast<int>(threadIdx.x % warpSize);
  bits = fbn_emu::WarpShuffle(mask, bits, lane ^ lane_mask, file, line);
  std::memcpy(&value, &bits, sizeof(T));
  return value;
}

// Device math the kernels call unqualified.
using std::isinf;
using std::isnan;
using std::sqrt;
template <typename T>
T min(T a, T b) {
  return std::min(a, b);
}
template <typename T>
T max(T a, T b) {
  return std::max(a, b);
}
inline float __double2float_rn(double v) { return static_cast<float>(v); }

#endif  // TF_FBN_OPS_CC_TESTS_GPU_EMULATOR_CUDA_RUNTIME_H_
