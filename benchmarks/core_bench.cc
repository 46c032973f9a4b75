// Micro-benchmark of the CPU core alone (no TensorFlow): time per call and effective bandwidth
// of BatchNormGradCpu on PERF_NOTES' shapes, with 1 and 2 threads (std::thread splitting the
// work units as TF's pool would). Bytes per call follow PERF_NOTES' model: training reads x and
// dy twice and writes dx (5 tensor passes), inference 3 passes. Not a test; for issue-5 work.
// Usage: make core-bench
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "cc/core/bn_grad.h"

namespace {

// Runs [0, n) on `threads` threads in contiguous pieces.
fbn::ParallelFor Threads(int threads) {
  return [threads](int64_t n, int64_t, const fbn::RangeFn& fn) {
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) {
      pool.emplace_back([&fn, n, t, threads] { fn(n * t / threads, n * (t + 1) / threads); });
    }
    fn(0, n / threads);
    for (auto& th : pool) th.join();
  };
}

double MedianMs(const fbn::Params& p, const fbn::Tensors<float>& t, int threads) {
  std::vector<double> ms;
  for (int r = 0; r < 9; ++r) {
    const auto start = std::chrono::steady_clock::now();
    fbn::BatchNormGradCpu(p, t, Threads(threads));
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                           start).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

int main() {
  struct Dims { const char* name; int64_t n, s, c; };
  const Dims dims[] = {{"32x56x56x64", 32, 56 * 56, 64},   {"32x28x28x128", 32, 28 * 28, 128},
                       {"32x14x14x256", 32, 14 * 14, 256}, {"32x7x7x2048", 32, 7 * 7, 2048},
                       {"8x112x112x64", 8, 112 * 112, 64}, {"1x8x8x32", 1, 8 * 8, 32},
                       {"4x16x32x32x32", 4, 16 * 32 * 32, 32}};
  std::printf("%-14s %-5s %-5s %10s %8s %10s %8s\n", "shape", "fmt", "mode", "1 thr ms", "GB/s",
              "2 thr ms", "GB/s");
  for (const Dims& d : dims) {
    for (bool last : {true, false}) {
      for (bool training : {true, false}) {
        const fbn::Shape shape{d.n, d.c, d.s, last};
        const size_t n = static_cast<size_t>(shape.elements());
        std::vector<float> dy(n), x(n), dx(n), ones(d.c, 1.0f), zeros(d.c, 0.0f), o1(d.c),
            o2(d.c);
        for (size_t i = 0; i < n; ++i) {
          dy[i] = static_cast<float>(i % 97) * 0.01f;
          x[i] = static_cast<float>(i % 89) * 0.02f;
        }
        fbn::Params p;
        p.shape = shape;
        p.is_training = training;
        const fbn::Tensors<float> t{dy.data(), x.data(), ones.data(), zeros.data(), ones.data(),
                                    dx.data(), o1.data(), o2.data()};
        const double bytes = (training ? 5.0 : 3.0) * n * sizeof(float);
        const double one = MedianMs(p, t, 1), two = MedianMs(p, t, 2);
        std::printf("%-14s %-5s %-5s %10.3f %8.1f %10.3f %8.1f\n", d.name,
                    last ? "NHWC" : "NCHW", training ? "train" : "infer", one,
                    bytes / one / 1e6, two, bytes / two / 1e6);
      }
    }
  }
  return 0;
}
