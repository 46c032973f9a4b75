// GPU benchmark of the CUDA core: effective bandwidth of the gradient kernels on the CPU
// benchmark's shapes, next to a device-to-device copy of the same number of bytes measured in
// the same run, printed as a ratio (the copy is the streaming limit). Needs only nvcc and a GPU;
// prints a SKIP line and exits 0 where no GPU is visible.
//
// Bytes moved per call: training reads x and dy twice and writes dx (5 tensor passes);
// inference reads them once and writes dx (3 passes).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "cc/core/bn_grad.h"
#include "cc/core/bn_grad_gpu.h"

namespace {

constexpr int kWarmup = 3;
constexpr int kRepeats = 20;

struct BenchShape {
  const char* name;
  fbn::Shape shape;
};

// The CPU benchmark's shapes, (N, spatial, C) in both layouts.
std::vector<BenchShape> Shapes() {
  struct Dims { const char* name; int64_t n, s, c; };
  const Dims dims[] = {{"32x56x56x64", 32, 56 * 56, 64},   {"32x28x28x128", 32, 28 * 28, 128},
                       {"32x14x14x256", 32, 14 * 14, 256}, {"32x7x7x2048", 32, 7 * 7, 2048},
                       {"8x112x112x64", 8, 112 * 112, 64}, {"1x8x8x32", 1, 8 * 8, 32},
                       {"4x16x32x32x32", 4, 16 * 32 * 32, 32}};
  std::vector<BenchShape> out;
  for (const Dims& d : dims) {
    out.push_back({d.name, {d.n, d.c, d.s, true}});
    out.push_back({d.name, {d.n, d.c, d.s, false}});
  }
  return out;
}

// Median milliseconds of kRepeats timed calls of fn, after kWarmup untimed ones.
template <typename Fn>
float MedianMs(Fn&& fn) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  for (int i = 0; i < kWarmup; ++i) fn();
  std::vector<float> ms(kRepeats);
  for (float& m : ms) {
    cudaEventRecord(start);
    fn();
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    cudaEventElapsedTime(&m, start, stop);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  return ms[kRepeats / 2];
}

template <typename T>
void Bench(const char* type, const BenchShape& b, bool training) {
  const size_t n = static_cast<size_t>(b.shape.elements());
  const size_t c = static_cast<size_t>(b.shape.channels);
  T *dy, *x, *dx;
  float* per_channel;
  void* scratch;
  const size_t moved = (training ? 5 : 3) * n * sizeof(T);
  void *copy_src, *copy_dst;
  cudaMalloc(&dy, n * sizeof(T));
  cudaMalloc(&x, n * sizeof(T));
  cudaMalloc(&dx, n * sizeof(T));
  cudaMalloc(&per_channel, 5 * c * sizeof(float));
  cudaMalloc(&scratch, fbn::GpuScratchBytes(b.shape));
  cudaMalloc(&copy_src, moved / 2);
  cudaMalloc(&copy_dst, moved / 2);
  cudaMemset(dy, 0, n * sizeof(T));
  cudaMemset(x, 0, n * sizeof(T));
  cudaMemset(per_channel, 0, 5 * c * sizeof(float));

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

  const float kernel_ms = MedianMs([&] { fbn::BatchNormGradGpu(p, t, scratch, nullptr); });
  // A copy of moved/2 bytes reads and writes `moved` bytes in all.
  const float copy_ms =
      MedianMs([&] { cudaMemcpyAsync(copy_dst, copy_src, moved / 2, cudaMemcpyDeviceToDevice); });
  const cudaError_t error = cudaGetLastError();
  const double kernel_gbs = moved / (kernel_ms * 1e6);
  const double copy_gbs = moved / (copy_ms * 1e6);
  std::printf("%-15s %-8s %-5s %-9s %10.1f %10.1f %10.1f %7.2f%s\n", b.name,
              b.shape.channels_last ? "NHWC" : "NCHW", training ? "train" : "infer", type,
              kernel_ms * 1e3, kernel_gbs, copy_gbs, kernel_gbs / copy_gbs,
              error == cudaSuccess ? "" : cudaGetErrorString(error));
  for (void* ptr : {static_cast<void*>(dy), static_cast<void*>(x), static_cast<void*>(dx),
                    static_cast<void*>(per_channel), scratch, copy_src, copy_dst}) {
    cudaFree(ptr);
  }
}

}  // namespace

int main() {
  int devices = 0;
  const cudaError_t error = cudaGetDeviceCount(&devices);
  if (error != cudaSuccess || devices == 0) {
    std::printf("gpu_bench: SKIP: no CUDA GPU visible (%s)\n",
                error != cudaSuccess ? cudaGetErrorString(error) : "0 devices");
    return 0;
  }
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  std::printf("gpu_bench on %s; median of %d calls; ratio = kernel GB/s / copy GB/s\n",
              prop.name, kRepeats);
  std::printf("%-15s %-8s %-5s %-9s %10s %10s %10s %7s\n", "shape", "layout", "mode", "dtype",
              "us/call", "GB/s", "copy GB/s", "ratio");
  for (const BenchShape& b : Shapes()) {
    for (bool training : {true, false}) {
      Bench<float>("float32", b, training);
      if (b.shape.elements() > (int64_t{1} << 22) && b.shape.channels == 64) {
        Bench<fbn::Half>("float16", b, training);
        Bench<fbn::BFloat16>("bfloat16", b, training);
      }
    }
  }
  return 0;
}
