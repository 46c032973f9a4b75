// The streaming limit of the batch-norm gradient: a plain kernel that moves exactly the bytes of
// the traffic model and does next to no arithmetic, so its time is what memory allows.
//
// Training runs the two sweeps of a two-pass gradient: sweep 1 reads x and dy and reduces them
// (a dot product, standing in for sum(dy) and sum(dy*(x-mean))); sweep 2 reads them again and
// writes dx = a*x + b*dy with a, b taken from sweep 1, so the sweeps cannot be fused or dropped.
// Inference is the single fused sweep. Both sweeps split the range statically over the same
// threads, so each thread re-reads in sweep 2 the chunk it read in sweep 1 (cache reuse where the
// data fits, as a well-written kernel would have it).
//
// 2-byte dtypes are moved as uint16 with integer arithmetic: the bytes are those of bfloat16 or
// float16, and the cost of converting to float does not enter the limit.
//
// Built by benchmarks/harness/native_build.py with -O3 -march=native -fopenmp; loaded with ctypes.

#include <omp.h>

#include <cstdint>

extern "C" {

void fbn_stream_set_threads(int threads) { omp_set_num_threads(threads); }

int fbn_stream_max_threads() { return omp_get_max_threads(); }

// Returns sweep 1's dot product so the caller (and the compiler) sees it used.
double fbn_stream_train_f32(const float* x, const float* dy, float* dx, int64_t n) {
  float dot = 0.0f;
#pragma omp parallel for simd schedule(static) reduction(+ : dot)
  for (int64_t i = 0; i < n; ++i) dot += x[i] * dy[i];
  const float a = dot / static_cast<float>(n > 0 ? n : 1);
  const float b = 0.5f;
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) dx[i] = a * x[i] + b * dy[i];
  return dot;
}

void fbn_stream_infer_f32(const float* x, const float* dy, float* dx, int64_t n, float a,
                          float b) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) dx[i] = a * x[i] + b * dy[i];
}

uint64_t fbn_stream_train_u16(const uint16_t* x, const uint16_t* dy, uint16_t* dx, int64_t n) {
  uint64_t dot = 0;
#pragma omp parallel for simd schedule(static) reduction(+ : dot)
  for (int64_t i = 0; i < n; ++i) dot += static_cast<uint32_t>(x[i]) * dy[i];
  // Wrapping 16-bit arithmetic: vectorises to packed 16-bit multiplies, and the low bits of the
  // dot product make sweep 2 depend on sweep 1.
  const uint16_t a = static_cast<uint16_t>(1 + (dot & 7));
  const uint16_t b = 3;
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) dx[i] = static_cast<uint16_t>(a * x[i] + b * dy[i]);
  return dot;
}

void fbn_stream_infer_u16(const uint16_t* x, const uint16_t* dy, uint16_t* dx, int64_t n,
                          uint16_t a, uint16_t b) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) dx[i] = static_cast<uint16_t>(a * x[i] + b * dy[i]);
}

}  // extern "C"
