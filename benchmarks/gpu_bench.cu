// GPU benchmark of the CUDA core: effective bandwidth of the gradient kernels, then of the
// forward's, each next to a device-to-device copy of the same number of bytes measured in the
// same run, printed as a ratio (the copy is the streaming limit). Shapes: the CPU benchmark's, plus tensors of 64 MiB
// and more, where the target is a ratio of at least 0.90. Needs only nvcc and a GPU; prints a
// SKIP line and exits 0 where there is no GPU (1 when FBN_REQUIRE_GPU=1, as the GPU test);
// exits 1 on any CUDA error, a driver too old for this runtime included. FBN_BENCH_SHAPES
// (comma-separated names, e.g. 64x56x56x256) runs only those shapes, for profilers.
//
// Bytes moved per call: the gradient's training reads x and dy twice and writes dx (5 tensor
// passes), its inference reads them once and writes dx (3); the forward's training reads x
// twice and writes y (3), its inference reads x and writes y (2). FBN_BENCH_OP=gradient or
// forward runs one table only.
//
// The kernel plans other than the default (GpuVariant in bn_grad_gpu.h) are timed in the same
// cell: `sep` and `wide` are the default's time over the separate_launches and wide_rows
// variants' (above 1: the variant is faster). Where a variant does not apply it runs the default kernels, so its column then
// shows the noise of the measurement.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cc/core/bn_forward.h"
#include "cc/core/bn_grad.h"
#include "cc/core/gpu/bn_forward_gpu.h"
#include "cc/core/gpu/bn_grad_gpu.h"
#include "cc/tests/gpu_presence.h"

namespace {

constexpr int kWarmup = 3;
constexpr int kRepeats = 20;
constexpr double kLargeBytes = 64.0 * (1 << 20);  // "large": x alone is at least this big
constexpr double kLargeTarget = 0.90;

// Any CUDA error ends the run: a failed launch must never be timed as a fast one.
void Require(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return;
  std::printf("gpu_bench: CUDA error in %s: %s\n", what, cudaGetErrorString(error));
  std::exit(1);
}

struct BenchShape {
  const char* name;
  fbn::Shape shape;
};

// (N, spatial, C) in both layouts: the CPU benchmark's shapes, then large ones.
std::vector<BenchShape> Shapes() {
  struct Dims { const char* name; int64_t n, s, c; };
  const Dims dims[] = {{"32x56x56x64", 32, 56 * 56, 64},     {"32x28x28x128", 32, 28 * 28, 128},
                       {"32x14x14x256", 32, 14 * 14, 256},   {"32x7x7x2048", 32, 7 * 7, 2048},
                       {"8x112x112x64", 8, 112 * 112, 64},   {"1x8x8x32", 1, 8 * 8, 32},
                       {"4x16x32x32x32", 4, 16 * 32 * 32, 32},
                       {"32x112x112x64", 32, 112 * 112, 64}, {"64x56x56x256", 64, 56 * 56, 256},
                       {"256x7x7x2048", 256, 7 * 7, 2048},
                       {"8x32x64x64x64", 8, 32 * 64 * 64, 64}};
  const char* only = std::getenv("FBN_BENCH_SHAPES");
  const std::string wanted = only == nullptr ? "" : "," + std::string(only) + ",";
  std::vector<BenchShape> out;
  for (const Dims& d : dims) {
    if (!wanted.empty() && wanted.find("," + std::string(d.name) + ",") == std::string::npos) {
      continue;
    }
    out.push_back({d.name, {d.n, d.c, d.s, true}});
    out.push_back({d.name, {d.n, d.c, d.s, false}});
  }
  return out;
}

// Median milliseconds of kRepeats timed calls of fn, after kWarmup untimed ones.
template <typename Fn>
float MedianMs(Fn&& fn) {
  cudaEvent_t start, stop;
  Require(cudaEventCreate(&start), "cudaEventCreate");
  Require(cudaEventCreate(&stop), "cudaEventCreate");
  for (int i = 0; i < kWarmup; ++i) fn();
  std::vector<float> ms(kRepeats);
  for (float& m : ms) {
    Require(cudaEventRecord(start), "cudaEventRecord");
    fn();
    Require(cudaEventRecord(stop), "cudaEventRecord");
    Require(cudaEventSynchronize(stop), "cudaEventSynchronize");
    Require(cudaEventElapsedTime(&m, start, stop), "cudaEventElapsedTime");
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  return ms[kRepeats / 2];
}

void* DeviceAlloc(size_t bytes) {
  void* p = nullptr;
  Require(cudaMalloc(&p, bytes), "cudaMalloc");
  return p;
}

// `count` elements of device memory, zeroed.
template <typename T>
T* DeviceZeros(size_t count) {
  T* p = static_cast<T*>(DeviceAlloc(count * sizeof(T)));
  Require(cudaMemset(p, 0, count * sizeof(T)), "cudaMemset");
  return p;
}

// Median milliseconds of a device-to-device copy that reads and writes `moved` bytes in all.
float CopyMs(size_t moved) {
  char* src = DeviceZeros<char>(moved / 2);
  char* dst = DeviceZeros<char>(moved / 2);
  const float ms = MedianMs([&] {
    Require(cudaMemcpyAsync(dst, src, moved / 2, cudaMemcpyDeviceToDevice), "cudaMemcpyAsync");
  });
  Require(cudaFree(src), "cudaFree");
  Require(cudaFree(dst), "cudaFree");
  return ms;
}

// Prints a cell's row (without its end of line) and returns kernel GB/s / copy GB/s, for a
// call that moves `passes` tensors of `element_bytes` elements.
double Row(const char* type, const BenchShape& b, bool training, size_t element_bytes,
           int passes, float kernel_ms) {
  const size_t x_bytes = static_cast<size_t>(b.shape.elements()) * element_bytes;
  const size_t moved = passes * x_bytes;
  const double kernel_gbs = moved / (kernel_ms * 1e6);
  const double copy_gbs = moved / (CopyMs(moved) * 1e6);
  std::printf("%-15s %-6s %-5s %-9s %9.1f %10.1f %9.1f %8.1f %7.2f", b.name,
              b.shape.channels_last ? "NHWC" : "NCHW", training ? "train" : "infer", type,
              x_bytes / 1e6, kernel_ms * 1e3, kernel_gbs, copy_gbs, kernel_gbs / copy_gbs);
  return kernel_gbs / copy_gbs;
}

// The gradient; returns the ratio kernel GB/s / copy GB/s.
template <typename T>
double Bench(const char* type, const BenchShape& b, bool training) {
  const size_t n = static_cast<size_t>(b.shape.elements());
  const size_t c = static_cast<size_t>(b.shape.channels);
  T* dy = DeviceZeros<T>(n);
  T* x = DeviceZeros<T>(n);
  T* dx = DeviceZeros<T>(n);
  float* per_channel = DeviceZeros<float>(5 * c);
  void* scratch = DeviceAlloc(fbn::GpuScratchBytes(b.shape));

  fbn::Params p;
  p.shape = b.shape;
  p.is_training = training;
  fbn::Tensors<T> t;
  t.y_backprop = dy;
  t.x = x;
  t.scale = per_channel;
  t.mean = per_channel + c;
  t.variance = per_channel + 2 * c;
  t.x_backprop = dx;
  t.scale_backprop = per_channel + 3 * c;
  t.offset_backprop = per_channel + 4 * c;

  auto call = [&] {
    Require(static_cast<cudaError_t>(fbn::BatchNormGradGpu(p, t, scratch, nullptr)),
            "BatchNormGradGpu");
  };
  const float kernel_ms = MedianMs(call);
  fbn::SetGpuVariants(fbn::kSeparateLaunches);
  const float separate_ms = MedianMs(call);
  fbn::SetGpuVariants(fbn::kWideRows);
  const float wide_ms = MedianMs(call);
  fbn::SetGpuVariants(0);
  Require(cudaDeviceSynchronize(), "kernels");
  const double ratio = Row(type, b, training, sizeof(T), training ? 5 : 3, kernel_ms);
  std::printf(" %6.2f %6.2f\n", kernel_ms / separate_ms, kernel_ms / wide_ms);
  for (void* ptr : {static_cast<void*>(dy), static_cast<void*>(x), static_cast<void*>(dx),
                    static_cast<void*>(per_channel), scratch}) {
    Require(cudaFree(ptr), "cudaFree");
  }
  return ratio;
}

// The forward; returns the ratio kernel GB/s / copy GB/s.
template <typename T>
double BenchForward(const char* type, const BenchShape& b, bool training) {
  const size_t n = static_cast<size_t>(b.shape.elements());
  const size_t c = static_cast<size_t>(b.shape.channels);
  T* x = DeviceZeros<T>(n);
  T* y = DeviceZeros<T>(n);
  float* per_channel = DeviceZeros<float>(8 * c);
  fbn::ForwardParams p;
  p.shape = b.shape;
  p.is_training = training;
  void* scratch = DeviceAlloc(std::max<size_t>(1, fbn::GpuForwardScratchBytes(p)));
  fbn::ForwardTensors<T> t;
  t.x = x;
  t.scale = per_channel;
  t.offset = per_channel + c;
  t.mean = per_channel + 2 * c;
  t.variance = per_channel + 3 * c;
  t.y = y;
  t.batch_mean = per_channel + 4 * c;
  t.batch_variance = per_channel + 5 * c;
  t.saved_mean = per_channel + 6 * c;
  t.saved_variance = per_channel + 7 * c;
  const float kernel_ms = MedianMs([&] {
    Require(static_cast<cudaError_t>(fbn::BatchNormForwardGpu(p, t, scratch, nullptr)),
            "BatchNormForwardGpu");
  });
  Require(cudaDeviceSynchronize(), "kernels");
  const double ratio = Row(type, b, training, sizeof(T), training ? 3 : 2, kernel_ms);
  std::printf("\n");
  for (void* ptr : {static_cast<void*>(x), static_cast<void*>(y),
                    static_cast<void*>(per_channel), scratch}) {
    Require(cudaFree(ptr), "cudaFree");
  }
  return ratio;
}

// One table: every shape, both modes, float32 and (for 4M elements and more) the 16-bit types,
// with the count of large cells at the target.
template <typename BenchFn>
void Table(const char* title, const char* extra_columns, BenchFn&& bench) {
  std::printf("%s\n%-15s %-6s %-5s %-9s %9s %10s %9s %8s %7s%s\n", title, "shape", "layout",
              "mode", "dtype", "x MB", "us/call", "GB/s", "copy", "ratio", extra_columns);
  double worst_large = 1e30;
  int large = 0, large_met = 0;
  for (const BenchShape& b : Shapes()) {
    for (bool training : {true, false}) {
      auto record = [&](double ratio, size_t bytes) {
        if (bytes >= kLargeBytes) {
          worst_large = std::min(worst_large, ratio);
          ++large;
          large_met += ratio >= kLargeTarget;
        }
      };
      const size_t n = static_cast<size_t>(b.shape.elements());
      record(bench(float{}, "float32", b, training), n * 4);
      if (n >= (size_t{1} << 22)) {
        record(bench(fbn::Half{}, "float16", b, training), n * 2);
        record(bench(fbn::BFloat16{}, "bfloat16", b, training), n * 2);
      }
    }
  }
  if (large > 0) {
    std::printf("tensors of 64 MiB and more: %d of %d cells at a ratio of %.2f or more, "
                "worst %.2f: target %s\n",
                large_met, large, kLargeTarget, worst_large,
                large_met == large ? "met" : "NOT met");
  }
}

}  // namespace

int main() {
  switch (fbn::ProbeGpu("gpu_bench")) {
    case fbn::GpuPresence::kSkip: return 0;
    case fbn::GpuPresence::kFail: return 1;
    case fbn::GpuPresence::kRun: break;
  }
  const char* op = std::getenv("FBN_BENCH_OP");
  const std::string only = op == nullptr ? "" : op;
  std::printf("median of %d calls; ratio = kernel GB/s / copy GB/s\n", kRepeats);
  fbn::SetGpuVariants(0);  // the default kernels, whatever TF_FBN_OPS_GPU_VARIANTS says
  if (only.empty() || only == "gradient") {
    Table("gradient", "    sep   wide", [](auto type, const char* name, const BenchShape& b,
                                          bool training) {
      return Bench<decltype(type)>(name, b, training);
    });
  }
  if (only.empty() || only == "forward") {
    Table("forward", "", [](auto type, const char* name, const BenchShape& b, bool training) {
      return BenchForward<decltype(type)>(name, b, training);
    });
  }
  return 0;
}
