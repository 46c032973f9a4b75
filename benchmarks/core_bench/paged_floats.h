// Large benchmark tensors placed at a chosen offset into a page.
#ifndef TF_FBN_OPS_BENCHMARKS_CORE_BENCH_PAGED_FLOATS_H_
#define TF_FBN_OPS_BENCHMARKS_CORE_BENCH_PAGED_FLOATS_H_

#include <array>
#include <cstdint>
#include <cstdio>

#include "cc/tests/cache_line_vector.h"

namespace fbn {
namespace bench {

// The three large tensors (x, y_backprop and x_backprop, or the forward's x and y), each
// `offset` bytes into a 4 KiB page. TensorFlow's default build (oneDNN's allocator) starts all
// three 64 bytes into their pages, where the rows loops' lines compete most for the L1's sets:
// on a Zen 5 the gradient's channels-last calls took up to 1.35x as long as with the tensors
// at 64, 1408 and 2752 (benchmarks/RESULTS.md, "Where the gradient's second thread goes on the
// Zen 5"). The bench places them as TensorFlow does unless --page-offsets says otherwise.
class PagedFloats {
 public:
  static constexpr int64_t kPageBytes = 4096;
  PagedFloats(int64_t n, int64_t offset, float fill = 0.0f)
      // Two pages of slack: rounding up to a page may take up to one, the offset up to another.
      : storage_(n + 2 * kPageBytes / static_cast<int64_t>(sizeof(float))) {
    const uintptr_t start = reinterpret_cast<uintptr_t>(storage_.data());
    const uintptr_t page = (start + kPageBytes - 1) & ~uintptr_t{kPageBytes - 1};
    data_ = reinterpret_cast<float*>(page + offset);
    for (int64_t i = 0; i < n; ++i) data_[i] = fill;
  }
  float* data() { return data_; }
  float& operator[](int64_t i) { return data_[i]; }

 private:
  CacheLineVector<float> storage_;
  float* data_;
};

// The three tensors' offsets (dy, x, dx) as TensorFlow's default build places them.
constexpr std::array<int64_t, 3> kTensorFlowPageOffsets = {64, 64, 64};

// --page-offsets's value "dy,x,dx": three byte offsets, multiples of 64 below a page. False,
// leaving `offsets` as it was, where the text is anything else.
inline bool ParsePageOffsets(const char* text, std::array<int64_t, 3>* offsets) {
  long long b[3];
  char tail;
  if (std::sscanf(text, "%lld,%lld,%lld%c", &b[0], &b[1], &b[2], &tail) != 3) return false;
  for (long long v : b) {
    if (v < 0 || v >= PagedFloats::kPageBytes || v % 64 != 0) return false;
  }
  *offsets = {b[0], b[1], b[2]};
  return true;
}

constexpr const char* kPageOffsetsUsage =
    "--page-offsets takes three byte offsets dy,x,dx: multiples of 64 below 4096, e.g. "
    "64,1408,2752\n";

}  // namespace bench
}  // namespace fbn

#endif  // TF_FBN_OPS_BENCHMARKS_CORE_BENCH_PAGED_FLOATS_H_
