// The streaming kernel's two loops (as benchmarks/harness/streaming_limit.cc), compiled apart with
// -O3 -march=native like the harness's, and split over threads by the caller.
#include <cstdint>

extern "C" float fbn_stream_dot(const float* x, const float* dy, int64_t begin, int64_t end) {
  float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
  for (int64_t i = begin; i < end; ++i) dot += x[i] * dy[i];
  return dot;
}

extern "C" void fbn_stream_axpby(const float* x, const float* dy, float* dx, int64_t begin,
                                 int64_t end, float a, float b) {
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) dx[i] = a * x[i] + b * dy[i];
}
